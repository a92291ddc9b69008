//! Which commands the built-in worker's `run` tool may run.
//!
//! A command is parsed into words (`shell-words`, the POSIX shell's quoting rules) and run as
//! that program with those arguments, without a shell, so nothing in an argument can start a
//! second command. Shell syntax outside quotes (`;`, `|`, `&`, `<`, `>`, `$`, backquotes,
//! parentheses, globs, a second line) is refused rather than passed on literally, since the
//! model meant a shell; a pattern can allow a shell explicitly (`sh -c *`), and `--allow-run`
//! runs any command line with `sh -c`. Every process runs confined, whatever is allowed.
//!
//! Patterns (`[sandbox] allow_run`) are words too: a word `*` matches any number of words
//! (none included), and `*` inside a word matches any characters of one word. So
//! `cargo check *` allows `cargo check` and `cargo check --all`, and `grep *` allows
//! `grep -c foo src/a.py`, but never `grep x; env`.

use crate::settings::RunToolPolicy;

/// The decision on one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Approval {
    /// Run the command line with `sh -c` (`--allow-run`).
    Shell { rule: String },
    /// Run this program with these arguments (no shell).
    Argv { rule: String, argv: Vec<String> },
    /// Refused, and why (for the model).
    Denied(String),
}

/// Characters that mean shell syntax when they are not quoted.
const SHELL_SYNTAX: &[char] = &[
    ';', '|', '&', '<', '>', '$', '`', '(', ')', '*', '?', '\n', '\r', '#',
];

/// Decides whether `policy` lets the `run` tool run `command`.
pub(crate) fn decide(policy: &RunToolPolicy, command: &str) -> Approval {
    if policy.allow_all {
        return Approval::Shell {
            rule: "--allow-run".into(),
        };
    }
    let allowed = || {
        if policy.patterns.is_empty() {
            "no command is allowed".to_string()
        } else {
            format!("allowed: {}", policy.patterns.join(", "))
        }
    };
    if let Some(c) = unquoted_shell_syntax(command) {
        return Approval::Denied(format!(
            "the command `{command}` uses shell syntax (`{}`), and commands run without a shell \
             ({}); run one program with its arguments",
            c.escape_default(),
            allowed()
        ));
    }
    let Ok(argv) = shell_words::split(command) else {
        return Approval::Denied(format!("the command `{command}` has unbalanced quotes"));
    };
    if argv.is_empty() {
        return Approval::Denied("run needs a command".into());
    }
    let rule = policy.patterns.iter().find(|p| {
        shell_words::split(p).is_ok_and(|words| {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let args: Vec<&str> = argv.iter().map(String::as_str).collect();
            words_match(&words, &args)
        })
    });
    match rule {
        Some(rule) => Approval::Argv {
            rule: rule.clone(),
            argv,
        },
        None => Approval::Denied(format!(
            "the command `{command}` is not allowed ({}); do without it",
            allowed()
        )),
    }
}

/// The first shell metacharacter of `command` outside quotes, if any.
fn unquoted_shell_syntax(command: &str) -> Option<char> {
    let (mut single, mut double, mut escaped) = (false, false, false);
    for c in command.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            // `$` and backquotes still expand inside double quotes.
            '$' | '`' if double => return Some(c),
            _ if single || double => {}
            _ if SHELL_SYNTAX.contains(&c) => return Some(c),
            _ => {}
        }
    }
    None
}

/// Do pattern words match these arguments? `*` alone matches any number of arguments; inside
/// a word it matches any characters.
fn words_match(pattern: &[&str], args: &[&str]) -> bool {
    match pattern.split_first() {
        None => args.is_empty(),
        Some((&"*", rest)) => (0..=args.len()).any(|skip| words_match(rest, &args[skip..])),
        Some((word, rest)) => args
            .split_first()
            .is_some_and(|(arg, tail)| wildcard_match(word, arg) && words_match(rest, tail)),
    }
}

/// `*` in `pattern` matches any text; the whole of `text` must match.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if text.len() < first.len() + last.len() || !text.starts_with(first) || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(patterns: &[&str]) -> RunToolPolicy {
        RunToolPolicy {
            allow_all: false,
            patterns: patterns.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn argv(p: &RunToolPolicy, command: &str) -> Option<Vec<String>> {
        match decide(p, command) {
            Approval::Argv { argv, .. } => Some(argv),
            _ => None,
        }
    }

    #[test]
    fn allowed_commands_become_argv() {
        let p = policy(&["grep *", "cargo check *", "pytest * -q", "ls"]);
        assert_eq!(
            argv(&p, "grep -c 'a b' src/x.py").unwrap(),
            ["grep", "-c", "a b", "src/x.py"]
        );
        assert!(argv(&p, "cargo check").is_some());
        assert!(argv(&p, "cargo check --all-targets").is_some());
        assert!(argv(&p, "pytest tests/a.py -q").is_some());
        assert!(argv(&p, "ls").is_some());
        assert!(argv(&p, "ls -la").is_none());
        assert!(argv(&p, "cargo checkout").is_none());
        assert!(argv(&p, "rm -rf /").is_none());
    }

    #[test]
    fn shell_syntax_is_refused() {
        let p = policy(&["grep *"]);
        for attack in [
            "grep x; env",
            "grep x | env",
            "grep $(env) x",
            "grep `env` x",
            "grep x\nenv",
            "grep x && env",
            "grep x > /tmp/y",
            "grep \"$(env)\" x",
            "grep x *.py",
        ] {
            assert!(
                matches!(decide(&p, attack), Approval::Denied(_)),
                "{attack:?}"
            );
        }
        // Quoted, the same characters are plain arguments.
        assert_eq!(argv(&p, "grep 'a;b|c' x").unwrap(), ["grep", "a;b|c", "x"]);
    }

    #[test]
    fn a_shell_must_be_allowed_explicitly() {
        let p = policy(&["sh -c *"]);
        assert_eq!(
            argv(&p, "sh -c 'cargo test 2>&1 | tail -5'").unwrap(),
            ["sh", "-c", "cargo test 2>&1 | tail -5"]
        );
        let all = RunToolPolicy {
            allow_all: true,
            patterns: Vec::new(),
        };
        assert!(matches!(decide(&all, "a | b"), Approval::Shell { .. }));
    }
}
