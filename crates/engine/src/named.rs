//! Which files a tool's output names in a diagnostic: a failed process's (`--per-process`
//! splits on it), and a failed task's (its group's next step).
//!
//! Formatters and codemods name the file they cannot handle. The forms, as measured on the
//! tools (prettier 3, ruff 0.17, black 25, eslint 9, rustfmt 1.9):
//!
//! - a line about an error that names the path: prettier `[error] src/a.js: SyntaxError: …`,
//!   ruff format `error: Failed to parse src/a.py:1:7: …`, black `error: cannot format
//!   src/a.py: …`;
//! - a location, the path followed by its line: ruff check ` --> src/a.py:1:7` (under a line
//!   `invalid-syntax: …`), rustfmt ` --> /worktree/src/a.rs:1:12`, a Python traceback's
//!   `File "/worktree/src/a.py", line 3`, a compiler's `src/a.ts(3,5)`;
//! - a path alone on its line heading lines about an error: eslint's
//!   `/worktree/src/a.js` then `  1:9  error  Parsing error: …`.
//!
//! pyupgrade and isort leave a file they cannot parse as it is and exit 0.

/// The most characters of the naming line kept for the report.
const LINE_MOST: usize = 300;
/// How many lines under a path alone are looked at for an error.
const HEADED_MOST: usize = 20;

/// The first line of `lines` that names `path` as a diagnostic, cut for the report.
pub(crate) fn naming_line(lines: &[&str], path: &str) -> Option<String> {
    lines.iter().enumerate().find_map(|(k, line)| {
        let diagnostic = whole_mentions(line, path).any(|end| {
            about_error(line)
                || located(&line[end..])
                || (line[end..].trim().is_empty() && heads_error(&lines[k + 1..]))
        });
        diagnostic.then(|| cut(line.trim()))
    })
}

fn about_error(line: &str) -> bool {
    let line = line.to_lowercase();
    ["error", "fail", "fatal", "exception", "panic"]
        .iter()
        .any(|word| line.contains(word))
}

/// Does the text after a path start with its line: `:3`, `", line 3`, `(3,5)`?
fn located(after: &str) -> bool {
    let after = after.strip_prefix(['"', '\'']).unwrap_or(after);
    let number = |s: Option<&str>| s.is_some_and(|s| s.starts_with(|c: char| c.is_ascii_digit()));
    number(after.strip_prefix(':'))
        || number(after.strip_prefix(", line "))
        || number(after.strip_prefix('('))
}

/// Do the indented lines under a path alone (up to a blank line) hold an error?
fn heads_error(below: &[&str]) -> bool {
    below
        .iter()
        .take(HEADED_MOST)
        .take_while(|line| line.starts_with(char::is_whitespace) && !line.trim().is_empty())
        .any(|line| about_error(line))
}

/// Where each mention of `path` in `line`, with no other character of a name on either side,
/// ends: `src/a.js` in `/wt/src/a.js:3`, not in `src/a.json` nor `lib/xsrc/a.js`.
fn whole_mentions<'a>(line: &'a str, path: &'a str) -> impl Iterator<Item = usize> + 'a {
    let part_of_name = |c: char| c.is_alphanumeric() || "_-.".contains(c);
    line.match_indices(path).filter_map(move |(at, _)| {
        let end = at + path.len();
        let before = line[..at].chars().next_back();
        let after = line[end..].chars().next();
        let whole = before.is_none_or(|c| !part_of_name(c))
            && after.is_none_or(|c| !part_of_name(c) && c != '/');
        whole.then_some(end)
    })
}

fn cut(line: &str) -> String {
    match line.char_indices().nth(LINE_MOST) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::naming_line;

    fn names(output: &str, path: &str) -> bool {
        naming_line(&output.lines().collect::<Vec<_>>(), path).is_some()
    }

    #[test]
    fn a_path_is_named_only_as_a_whole() {
        for (line, named) in [
            ("[error] cannot parse /tmp/wt-2/src/a.js: bad token", true),
            ("src/a.js:3:1: E501 line too long", true),
            ("error in 'src/a.js'", true),
            ("error: src/a.json is fine, src/a.jsx too", false),
            ("error: lib/xsrc/a.js", false),
            ("error: src/a.js/inner", false),
        ] {
            assert_eq!(names(line, "src/a.js"), named, "{line}");
        }
    }

    /// Each tool's own output for a file it cannot parse (`src/bad.*`) among good ones,
    /// as it printed it.
    #[test]
    fn the_formatters_forms_name_the_bad_file_only() {
        let prettier = "src/good.js 37ms\n[error] src/bad.js: SyntaxError: Unexpected token \
                        (1:9)\n[error] > 1 | let x = ;\nsrc/other.js 12ms\n";
        let ruff_check = "invalid-syntax: Expected a parameter\n --> src/bad.py:1:7\n  |\n1 \
                          | def f(:\n  |       ^\n\nFound 4 errors (1 fixed, 3 remaining).\n";
        let ruff_format = "error: Failed to parse src/bad.py:1:7: Expected a parameter\n\
                           1 file left unchanged\n";
        let black = "error: cannot format src/bad.py: Cannot parse: 1:6: def f(:\n\
                     Oh no! 💥 💔 💥\n1 file left unchanged, 1 file failed to reformat.\n";
        let rustfmt = "error: this file contains an unclosed delimiter\n --> \
                       /tmp/wt-1/src/bad.rs:1:12\n  |\n1 | fn main( {\n";
        let eslint = "\n/tmp/wt-1/src/bad.js\n  1:9  error  Parsing error: Unexpected \
                      token ;\n\n✖ 1 problem (1 error, 0 warnings)\n";
        let traceback = "Traceback (most recent call last):\n  File \"/tmp/wt-1/src/bad.py\", \
                         line 3, in <module>\nValueError: no\n";
        for (tool, output, bad) in [
            ("prettier", prettier, "src/bad.js"),
            ("ruff check", ruff_check, "src/bad.py"),
            ("ruff format", ruff_format, "src/bad.py"),
            ("black", black, "src/bad.py"),
            ("rustfmt", rustfmt, "src/bad.rs"),
            ("eslint", eslint, "src/bad.js"),
            ("traceback", traceback, "src/bad.py"),
        ] {
            assert!(names(output, bad), "{tool} names {bad}");
            for good in ["src/good.js", "src/other.js", "src/good.py", "src/good.rs"] {
                assert!(!names(output, good), "{tool} does not blame {good}");
            }
        }
    }

    #[test]
    fn a_path_alone_heads_an_error_only_above_one() {
        assert!(!names(
            "/wt/src/a.js\n  1:1  warning  x\n\nerror later\n",
            "src/a.js"
        ));
        assert!(!names("src/a.js\nerror: not under it\n", "src/a.js"));
    }
}
