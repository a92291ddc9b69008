//! What a worker's command line does with the task's file variables, read the way a POSIX
//! shell reads quotes: whether it names `SWARM_FILE` or `SWARM_FILES`, and whether it expands
//! one outside double quotes, where the shell splits the value at blanks and expands glob
//! characters in it.
//!
//! Single-quoted text is literal; double quotes protect an expansion; a command
//! substitution (`$(…)`, backquotes) starts an unquoted context again, even inside double
//! quotes; a backslash quotes the next character. Anything this reading gets wrong errs
//! towards "unquoted": a refusal with a fix, never a silent split.

/// Where the shell splits an unquoted expansion into words (the default `IFS`, which it does
/// not take from the environment).
pub(crate) const IFS: &[u8] = b" \t\n";
/// The characters that make a word go through pathname expansion.
pub(crate) const GLOB: &[u8] = b"*?[";

/// How a command uses one variable.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Use {
    pub named: bool,
    /// Expanded at least once outside double quotes.
    pub unquoted: bool,
}

/// How a command uses `SWARM_FILE` and `SWARM_FILES`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileVars {
    pub file: Use,
    pub files: Use,
}

/// Where the reading is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    /// Unquoted, at the top.
    Plain,
    /// Inside double quotes.
    Double,
    /// Inside `$(…)`: unquoted until its closing parenthesis (counting inner ones).
    Subst(u32),
    /// Inside backquotes: unquoted until the closing one.
    Backquotes,
}

/// Reads `command` for the task's file variables.
pub(crate) fn file_vars(command: &str) -> FileVars {
    let bytes = command.as_bytes();
    let mut found = FileVars::default();
    let mut stack = vec![Context::Plain];
    let mut i = 0;
    while i < bytes.len() {
        let here = *stack.last().unwrap_or(&Context::Plain);
        let quoted = here == Context::Double;
        i += match bytes[i] {
            b'\\' => 2,
            b'\'' if !quoted => single_quoted(&bytes[i + 1..]) + 1,
            b'"' if quoted => {
                stack.pop();
                1
            }
            b'"' => {
                stack.push(Context::Double);
                1
            }
            b'`' if here == Context::Backquotes => {
                stack.pop();
                1
            }
            b'`' => {
                stack.push(Context::Backquotes);
                1
            }
            b'$' if bytes.get(i + 1) == Some(&b'(') => {
                stack.push(Context::Subst(0));
                2
            }
            b'$' => {
                let rest = &bytes[i + 1..];
                // A brace never closed: the rest of the command is its text.
                let unclosed = (rest.strip_prefix(b"{").unwrap_or(rest), &[][..]);
                let (inner, tail) = reference(rest).unwrap_or(unclosed);
                let name_len = inner.iter().take_while(|b| is_name(b)).count();
                let name = &inner[..name_len];
                let len = rest.len() - tail.len();
                let used = match name {
                    b"SWARM_FILE" => Some(&mut found.file),
                    b"SWARM_FILES" => Some(&mut found.files),
                    _ => None,
                };
                if let Some(used) = used {
                    used.named = true;
                    used.unquoted |= !quoted;
                }
                1 + len
            }
            b'(' => {
                if let Some(Context::Subst(depth)) = stack.last_mut() {
                    *depth += 1;
                }
                1
            }
            b')' => {
                match stack.last_mut() {
                    Some(Context::Subst(0)) => {
                        stack.pop();
                    }
                    Some(Context::Subst(depth)) => *depth -= 1,
                    _ => {}
                }
                1
            }
            _ => 1,
        };
    }
    found
}

/// The length of single-quoted text up to and with its closing quote (all of it if none).
fn single_quoted(rest: &[u8]) -> usize {
    rest.iter()
        .position(|&b| b == b'\'')
        .map_or(rest.len(), |end| end + 1)
}

fn is_name(b: &u8) -> bool {
    b.is_ascii_alphanumeric() || *b == b'_'
}

/// The parameter a `$` refers to (`rest` follows the `$`): `NAME`, or what `{…}` holds (a
/// name and any modifier, `{NAME:-x}`); and what follows it. `None` for a brace that is
/// never closed.
pub(crate) fn reference(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    match rest.strip_prefix(b"{") {
        Some(braced) => {
            let end = braced.iter().position(|&b| b == b'}')?;
            Some((&braced[..end], &braced[end + 1..]))
        }
        None => {
            let end = rest.iter().take_while(|b| is_name(b)).count();
            Some(rest.split_at(end))
        }
    }
}

/// A file name the shell would not give a command as it is when expanded unquoted: one that
/// holds a blank or a newline (split into several words) or a glob character (expanded
/// against the worktree).
pub(crate) fn splits_unquoted(name: &[u8]) -> bool {
    name.iter().any(|b| IFS.contains(b) || GLOB.contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(command: &str) -> (Use, Use) {
        let v = file_vars(command);
        (v.file, v.files)
    }

    const NONE: Use = Use {
        named: false,
        unquoted: false,
    };
    const QUOTED: Use = Use {
        named: true,
        unquoted: false,
    };
    const UNQUOTED: Use = Use {
        named: true,
        unquoted: true,
    };

    #[test]
    fn quotes_are_read_as_the_shell_reads_them() {
        for (command, file, files) in [
            (r#"sed -i s/a/b/ "$SWARM_FILE""#, QUOTED, NONE),
            (r#"ruff check --fix "${SWARM_FILE}""#, QUOTED, NONE),
            ("sed -i s/a/b/ $SWARM_FILE", UNQUOTED, NONE),
            ("for f in $SWARM_FILES; do x \"$f\"; done", NONE, UNQUOTED),
            (
                r#"printf '%s\n' "$SWARM_FILES" | xargs -d '\n' x"#,
                NONE,
                QUOTED,
            ),
            (r#"echo "files: $SWARM_FILES""#, NONE, QUOTED),
            ("echo '$SWARM_FILES $SWARM_FILE'", NONE, NONE),
            (r#"echo \$SWARM_FILES"#, NONE, NONE),
            (r#"x "$(cat $SWARM_FILES)""#, NONE, UNQUOTED),
            (r#"x "$(cat "$SWARM_FILES")""#, NONE, QUOTED),
            ("x `cat $SWARM_FILE`", UNQUOTED, NONE),
            (r#"x "${SWARM_FILES:-none}""#, NONE, QUOTED),
            ("x $SWARM_FILES_EXTRA $SWARM_FILEX", NONE, NONE),
            (r#"x "$SWARM_FILE" $SWARM_FILES"#, QUOTED, UNQUOTED),
        ] {
            assert_eq!(uses(command), (file, files), "{command}");
        }
    }

    #[test]
    fn names_that_split() {
        assert!(splits_unquoted(b"docs/a b.md"));
        assert!(splits_unquoted(b"a[1].py"));
        assert!(splits_unquoted(b"tab\there"));
        assert!(!splits_unquoted(b"src/plain-name_1.py"));
    }
}
