//! Asking before a run: what it will run, and `Proceed? [Y/n]` on a terminal (`-y` skips
//! the question). A plan file is someone else's text, so `swarm run` and `swarm merge` of a
//! plan file always say which commands it runs, terminal or not.

use std::io::{IsTerminal as _, Write as _};

use swarm_engine::app::settings::Settings;

/// Whether swarm can ask: both standard input and standard error are a terminal.
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// One line per command `settings` runs (`  exec:  sed …`), control characters visible.
pub(crate) fn command_lines(settings: &Settings) -> Vec<String> {
    lines(&settings.commands())
}

fn lines(commands: &[(&'static str, String)]) -> Vec<String> {
    let width = commands
        .iter()
        .map(|(role, _)| role.len())
        .max()
        .unwrap_or(0)
        + 1;
    commands
        .iter()
        .map(|(role, command)| {
            format!(
                "  {:<width$} {}",
                format!("{role}:"),
                super::visible::text(command)
            )
        })
        .collect()
}

/// Prints `intro` and `commands` (by role, as [`Settings::commands`] gives them) on stderr;
/// then, unless `yes` or off a terminal, asks. `false`: the user said no.
pub(crate) fn commands_then_ask(
    intro: &str,
    commands: &[(&'static str, String)],
    yes: bool,
) -> std::io::Result<bool> {
    let lines = lines(commands);
    let mut err = std::io::stderr().lock();
    if !lines.is_empty() {
        writeln!(err, "{intro}")?;
        for line in &lines {
            writeln!(err, "{line}")?;
        }
    }
    if yes || !interactive() {
        return Ok(true);
    }
    drop(err);
    ask()
}

/// `Proceed? [Y/n]` on stderr, answered with one key (Enter is yes).
pub(crate) fn ask() -> std::io::Result<bool> {
    let mut err = std::io::stderr().lock();
    write!(err, "Proceed? [Y/n] ")?;
    err.flush()?;
    drop(err);
    let yes = loop {
        match key() {
            Some('\n' | '\r' | 'y' | 'Y') => break true,
            Some('n' | 'N') | None => break false,
            Some(_) => {}
        }
    };
    eprintln!("{}", if yes { "y" } else { "n" });
    Ok(yes)
}

/// One key pressed on the terminal (no Enter needed), through `console`; `None` at the end
/// of input (Ctrl-D) or when the terminal cannot be read.
pub(crate) fn key() -> Option<char> {
    match console::Term::stderr().read_char() {
        Ok('\u{4}') | Err(_) => None,
        Ok(c) => Some(c),
    }
}
