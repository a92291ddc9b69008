//! Long output through a pager, as git pages it: on a terminal only, through `$SWARM_PAGER`,
//! else `$PAGER`, else `less` (with `LESS=FRX` unless set: it quits at once when the text fits
//! the screen, keeps colours, and leaves the text on screen). An empty pager or `cat` means
//! none. Off a terminal (a pipe, a file, CI) the text goes straight to standard output.

use std::io::{IsTerminal as _, Write};
use std::process::{Child, Command, Stdio};

use swarm_engine::app::env_vars::{PAGER, SWARM_PAGER};

/// The pager command to run, if any: only when standard output is a terminal.
fn command() -> Option<String> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let chosen = std::env::var(SWARM_PAGER)
        .or_else(|_| std::env::var(PAGER))
        .unwrap_or_else(|_| "less".into());
    let chosen = chosen.trim();
    (!chosen.is_empty() && chosen != "cat").then(|| chosen.to_string())
}

/// Is there a pager to page through (standard output a terminal, a pager chosen)?
pub(crate) fn wanted() -> bool {
    command().is_some()
}

/// Writes what `write` writes to the pager, or to standard output when there is none (or it
/// cannot start). A pager quit before the end (`q` in less) is not an error.
pub(crate) fn page(
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let Some(mut child) = command().and_then(|cmd| start(&cmd)) else {
        let mut out = std::io::stdout().lock();
        return quiet_pipe(write(&mut out).and_then(|()| out.flush()));
    };
    let written = match child.stdin.take() {
        Some(mut stdin) => quiet_pipe(write(&mut stdin)),
        None => Ok(()),
    };
    // The pager owns the terminal until it ends.
    let _ = child.wait();
    written
}

/// The pager, started through `sh` as git starts it (the variable may hold arguments).
fn start(cmd: &str) -> Option<Child> {
    let mut command = Command::new("sh");
    command.arg("-c").arg(cmd).stdin(Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        command.env("LESS", "FRX");
    }
    if std::env::var_os("LV").is_none() {
        command.env("LV", "-c");
    }
    command.spawn().ok()
}

/// A reader gone (the pager quit, `| head`) ends the output, not the command.
fn quiet_pipe(result: std::io::Result<()>) -> std::io::Result<()> {
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
