//! Commands whose git needs no view of its own. Under the sandbox an `--exec` worker's git
//! writes into copy-on-write views of the repository (`swarm_sandbox::git_view`): an overlay
//! mounted for every task, made and torn down with it. A program that swarm runs without a
//! shell ([`super::direct`]) and that only edits the files it is given (`sed`, the
//! formatters) never uses them, so it gets none: its git directory stays read-only, as
//! everything outside its worktree is, and a write there is refused, never half done.

use std::ffi::OsString;
use std::path::Path;

use super::list_form::FILE_EDITORS;
use crate::env_vars;

/// Does the program of `argv` (a command run without a shell: its first word, a name or a
/// path) write no git directory? The file editors do not; general-purpose programs (`perl`,
/// `python`, `node`, `npx`, `cargo`, `awk`) may run anything.
pub(crate) fn writes_no_git(argv: &[OsString]) -> bool {
    argv.first()
        .and_then(|program| Path::new(program).file_name())
        .is_some_and(|name| FILE_EDITORS.iter().any(|known| name == *known))
}

/// Does `command`, whatever the task it is run for, only edit the files it is given: a file
/// editor that swarm runs without a shell? Nothing else it runs writes in its worktree (no
/// build output, no git), so its view's layers hold the task's files and little more.
pub(crate) fn edits_files_only(command: &str) -> bool {
    // The task's variables, each a plain word: what makes a command need a shell is its own
    // syntax, never a file's name (a name is never parsed).
    let vars: Vec<(OsString, OsString)> = env_vars::TASK_VARS
        .into_iter()
        .map(|name| (name.into(), "x".into()))
        .collect();
    super::direct::argv(command, &vars).is_some_and(|argv| writes_no_git(&argv))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_known_editor_by_name_or_path_writes_no_git_and_anything_else_may() {
        assert!(writes_no_git(&argv(&["sed", "-i", "s/a/b/", "f"])));
        assert!(writes_no_git(&argv(&["/usr/bin/ruff", "check", "--fix"])));
        assert!(writes_no_git(&argv(&[
            "./node_modules/.bin/prettier",
            "-w"
        ])));
        assert!(!writes_no_git(&argv(&["git", "commit"])));
        assert!(!writes_no_git(&argv(&["perl", "-pi", "-e", "s/a/b/"])));
        assert!(!writes_no_git(&argv(&["npx", "prettier"])));
        assert!(!writes_no_git(&argv(&["sedx"])));
        assert!(!writes_no_git(&[]));
    }

    #[test]
    fn a_file_editor_run_without_a_shell_edits_files_only() {
        assert!(edits_files_only(r#"sed -i 's/a/b/' "$SWARM_FILE""#));
        assert!(edits_files_only("ruff check --fix $SWARM_FILES"));
        assert!(edits_files_only(
            r#"/usr/bin/prettier --write "${SWARM_FILE}""#
        ));
        // A shell runs it: anything may follow.
        assert!(!edits_files_only(
            r#"sed -i 's/a/b/' "$SWARM_FILE" && make"#
        ));
        assert!(!edits_files_only(
            r#"sed -i 's/a/b/' "$SWARM_FILE"; cargo build"#
        ));
        assert!(!edits_files_only(r#"cargo fmt -- "$SWARM_FILE""#));
        assert!(!edits_files_only(r#"sed -i "s/$HOME/b/" "$SWARM_FILE""#));
    }
}
