//! `--exec` commands that need no shell.
//!
//! A command line is run with `sh -c`, and the shell's own start-up (its `execve`, the
//! dynamic loader, glibc's set-up) and its `vfork` of the program are a tenth of what a
//! one-file task costs with a fast tool such as `sed`. Most command lines are one program
//! and its arguments, with the task's variables in double quotes (`sed -i 's/a/b/'
//! "$SWARM_FILE"`): for those, swarm runs the program itself, with exactly the words the
//! shell would have given it.
//!
//! Only what reads the same to every POSIX shell is taken: plain words, single-quoted text,
//! double-quoted text, and the task's own variables (`$SWARM_FILE`, `${SWARM_FILES}`…) in
//! double quotes or as a whole unquoted word (split at blanks, as the shell does, unless a
//! field holds a glob character). Anything else (any other character of shell syntax, a
//! backslash outside double quotes, another variable, a builtin or reserved word first, an assignment) is left to
//! `sh -c`. The differences that remain are the shell's own: the program is found on `PATH`
//! by the jail (a failure is status 127, or 126 when it cannot be run), `PWD` is set to the
//! worktree as the shell sets it, and a program killed by a signal is reported as such
//! rather than as the shell's status 128+N.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};

use super::file_vars::{GLOB, IFS, reference};

/// Words that a shell runs itself, or reads as syntax, when they come first: never run
/// directly (dash's and bash's builtins, and the reserved words).
const SHELL_WORDS: &str = "! . : [ [[ ]] { } alias bg bind break builtin caller case cd chdir \
    command compgen complete continue declare dirs disown do done echo elif else enable esac eval \
    exec exit export false fc fg fi for function getopts hash help history if in jobs kill let \
    local logout mapfile popd printf pushd pwd read readarray readonly return select set shift \
    shopt source suspend test then time times trap true type typeset ulimit umask unalias unset \
    until wait while";

/// Is `word`, first in a command, one the shell runs itself or reads as syntax?
pub(crate) fn is_shell_word(word: &[u8]) -> bool {
    SHELL_WORDS
        .split_ascii_whitespace()
        .any(|w| w.as_bytes() == word)
}

/// Characters a shell takes literally outside quotes (besides letters, digits and any
/// non-ASCII character).
const PLAIN: &[u8] = b"_-./,:+=@%^";

/// The program and arguments `sh -c command` would run, given the task's variables `vars`
/// (name, value); `None` when only a shell can run it as written.
pub(crate) fn argv(command: &str, vars: &[(OsString, OsString)]) -> Option<Vec<OsString>> {
    let mut words = Words {
        vars,
        out: Vec::new(),
        word: None,
        expanded: false,
    };
    let mut rest = command.as_bytes();
    while let Some((&c, tail)) = rest.split_first() {
        rest = match c {
            b' ' | b'\t' => {
                words.end();
                tail
            }
            b'\'' => {
                let end = tail.iter().position(|&b| b == b'\'')?;
                words.push(&tail[..end]);
                &tail[end + 1..]
            }
            b'"' => words.double_quoted(tail)?,
            b'$' if words.word.is_none() => words.whole_variable(tail)?,
            _ if c.is_ascii_alphanumeric() || !c.is_ascii() || PLAIN.contains(&c) => {
                words.push(&[c]);
                tail
            }
            _ => return None,
        };
    }
    words.end();
    let first = words.out.first()?;
    let plain_first =
        !words.expanded && !is_shell_word(first.as_bytes()) && !first.as_bytes().contains(&b'=');
    plain_first.then_some(words.out)
}

/// The words read so far.
struct Words<'a> {
    vars: &'a [(OsString, OsString)],
    out: Vec<OsString>,
    /// The word being read (quotes make a word even when empty).
    word: Option<Vec<u8>>,
    /// Did a variable give any of the first word?
    expanded: bool,
}

impl Words<'_> {
    fn push(&mut self, bytes: &[u8]) {
        self.word
            .get_or_insert_with(Vec::new)
            .extend_from_slice(bytes);
    }

    fn end(&mut self) {
        if let Some(word) = self.word.take() {
            self.out.push(OsString::from_vec(word));
        }
    }

    fn note_expansion(&mut self) {
        if self.out.is_empty() {
            self.expanded = true;
        }
    }

    /// Reads double-quoted text up to its closing quote (`rest` starts after the opening
    /// one): literal, but for the task's variables and a backslash's quoting. Returns what
    /// follows.
    fn double_quoted<'r>(&mut self, mut rest: &'r [u8]) -> Option<&'r [u8]> {
        self.push(&[]);
        loop {
            let (&c, tail) = rest.split_first()?;
            rest = match c {
                b'"' => return Some(tail),
                b'$' => {
                    let (value, tail) = variable(self.vars, tail)?;
                    self.note_expansion();
                    self.push(value.as_bytes());
                    tail
                }
                b'`' => return None,
                // A backslash quotes these five, and stays before anything else.
                b'\\' => match tail.split_first() {
                    Some((b'\n', after)) => after,
                    Some((&next @ (b'$' | b'`' | b'"' | b'\\'), after)) => {
                        self.push(&[next]);
                        after
                    }
                    _ => {
                        self.push(b"\\");
                        tail
                    }
                },
                _ => {
                    self.push(&[c]);
                    tail
                }
            };
        }
    }

    /// An unquoted variable that is a whole word: its value split at blanks into words, as
    /// the shell splits it (with the default `IFS`, which the shell does not take from the
    /// environment), unless a field would go through pathname expansion.
    fn whole_variable<'r>(&mut self, rest: &'r [u8]) -> Option<&'r [u8]> {
        let (value, tail) = variable(self.vars, rest)?;
        if tail.first().is_some_and(|c| !matches!(c, b' ' | b'\t')) {
            return None;
        }
        let fields = value
            .as_bytes()
            .split(|b| IFS.contains(b))
            .filter(|f| !f.is_empty());
        for field in fields {
            if field.iter().any(|b| GLOB.contains(b)) {
                return None;
            }
            self.note_expansion();
            self.out.push(OsStr::from_bytes(field).to_os_string());
        }
        Some(tail)
    }
}

/// `NAME` or `{NAME}` at the start of `rest` (after a `$`), one of swarm's own (`SWARM_*`):
/// its value, and what follows.
fn variable<'v, 'r>(
    vars: &'v [(OsString, OsString)],
    rest: &'r [u8],
) -> Option<(&'v OsStr, &'r [u8])> {
    let (name, tail) = reference(rest)?;
    // Only swarm's own: nothing set after them (the gateway's variables) can change them.
    if !name.starts_with(b"SWARM_") {
        return None;
    }
    let (_, value) = vars.iter().find(|(n, _)| n.as_bytes() == name)?;
    Some((value.as_os_str(), tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(OsString, OsString)> {
        vec![
            ("SWARM_FILE".into(), "src/a b.py".into()),
            ("SWARM_FILES".into(), "src/a b.py\nsrc/c.py".into()),
            ("SWARM_TASK_ID".into(), "t-1".into()),
        ]
    }

    /// What `sh -c` runs for `command`, as words: the oracle the reader above must match.
    fn by_the_shell(command: &str) -> Vec<String> {
        let script = format!("set -f; printf '%s\\0' {}", command);
        let mut sh = std::process::Command::new("sh");
        sh.arg("-c").arg(script).env_clear();
        for (name, value) in vars() {
            sh.env(name, value);
        }
        let out = sh.output().unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .split_terminator('\0')
            .map(String::from)
            .collect()
    }

    fn direct(command: &str) -> Option<Vec<String>> {
        argv(command, &vars()).map(|words| {
            words
                .into_iter()
                .map(|w| w.into_string().unwrap())
                .collect()
        })
    }

    #[test]
    fn simple_commands_run_with_the_words_the_shell_gives() {
        for command in [
            r#"sed -i 's/foo/bar/g' "$SWARM_FILE""#,
            r#"sed -i "s/\bfoo\b/bar/g" "$SWARM_FILE""#,
            r#"tool "a\"b\\c\$d\`e\x" "$SWARM_FILE\\""#,
            "tool \"a\\\nb\"",
            r#"ruff check --fix -- "${SWARM_FILE}""#,
            "sed -i s/a/b/ $SWARM_FILES",
            r#"tool --id="$SWARM_TASK_ID"x '' "" a'b'"c" 'it''s'"#,
            "python3 -m pyupgrade --py311-plus\t$SWARM_FILE",
            r#"comby 'f(:[a])' 'g(:[a])' "$SWARM_FILE" -i"#,
            "  sed  -n  p  ",
        ] {
            let words = direct(command).unwrap_or_else(|| panic!("not taken: {command}"));
            // The shell's view of the same words, program included.
            let (program, args) = words.split_first().unwrap();
            let rest = command.trim_start().strip_prefix(program.as_str()).unwrap();
            assert_eq!(args, by_the_shell(rest), "{command}");
        }
    }

    #[test]
    fn anything_only_a_shell_can_run_is_left_to_it() {
        for command in [
            "sed -i s/a/b/ \"$SWARM_FILE\"; echo done",
            "a | b",
            "a && b",
            "a > out",
            "a < in",
            "a $(b)",
            "a `b`",
            "a \"`b`\"",
            "a \"$(b)\"",
            "a \"$HOME\"",
            "a $HOME",
            "a *.py",
            "a ?",
            "a [ab]",
            "a ~/x",
            "a # comment",
            "a \\; b",
            "a {x,y}",
            "a 'unclosed",
            "a \"unclosed",
            "a\nb",
            "a $SWARM_FILE.bak",
            "a x$SWARM_FILE",
            "echo x",
            "test -f x",
            "[ -f x ]",
            "if true; then a; fi",
            "exec sed x",
            "FOO=1 sed x",
            "\"$SWARM_FILE\" x",
            "$SWARM_FILE x",
            "",
            "   ",
        ] {
            assert_eq!(direct(command), None, "taken: {command}");
        }
    }

    #[test]
    fn only_swarms_own_variables_are_read() {
        // An agent's variable may be given another value after (the gateway's placeholder).
        let vars = vec![
            ("SWARM_FILE".into(), OsString::from("a.py")),
            ("API_KEY".into(), OsString::from("real")),
        ];
        assert_eq!(argv("x \"$API_KEY\" \"$SWARM_FILE\"", &vars), None);
        assert_eq!(argv("x \"$SWARM_FILE\"", &vars).unwrap(), ["x", "a.py"]);
    }

    #[test]
    fn a_file_name_with_a_glob_character_is_left_to_the_shell_unquoted() {
        let vars = vec![("SWARM_FILES".into(), OsString::from("a.py\nb[1].py"))];
        assert_eq!(argv("x $SWARM_FILES", &vars), None);
        assert_eq!(
            argv("x \"$SWARM_FILES\"", &vars).unwrap(),
            ["x", "a.py\nb[1].py"]
        );
    }
}
