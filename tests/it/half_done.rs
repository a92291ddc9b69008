//! Commands that would do nothing, or half of what they say, without a word: refused before
//! any worker runs (exit 2, the fix named, nothing changed).

use crate::common::{SED_FOO_BAR, TestRepo};

/// `swarm refactor x . -y` and `extra`: a run over every tracked file, asked nothing.
fn refactor_all<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [&["refactor", "x", ".", "-y"][..], extra].concat()
}

#[test]
fn runs_that_would_be_half_done_without_a_word_are_refused() {
    let repo = TestRepo::with_files(&[
        ("httpx/a.py", "foo\n"),
        ("httpx/b.py", "foo\n"),
        ("docs/read me.txt", "foo\n"),
    ]);
    let refused = |args: &[&str], says: &[&str]| {
        let run = repo.swarm(args);
        run.assert_code(2);
        for s in says {
            assert!(run.stderr.contains(s), "{args:?}: {s:?} in {}", run.stderr);
        }
        assert!(
            !repo.swarm_dir().join("runs").exists(),
            "{args:?} started a run"
        );
    };
    // The instruction forgotten: it names tracked files, and no pathspec was given.
    refused(
        &["refactor", "httpx/*.py", "-y", "--exec", SED_FOO_BAR],
        &[
            "the instruction 'httpx/*.py' names 2 tracked file(s)",
            "hint: the instruction comes first, then the pathspecs",
        ],
    );
    // No pathspec at all, off a terminal: every tracked file is asked for with `.`.
    refused(
        &["refactor", "rename foo", "--exec", SED_FOO_BAR],
        &[
            "no pathspec: the run would work on every tracked file (3 file(s))",
            "pass `.`",
        ],
    );
    refused(
        &["refactor", "rename foo", "-y", "--exec", SED_FOO_BAR],
        &["pass `.`"],
    );
    // --batch, or --per-process over several tasks, with a command that names only the first
    // file.
    refused(
        &refactor_all(&["--per-process", "2", "--exec", SED_FOO_BAR]),
        &[
            "--per-process 2 gives a process several tasks, but the command names only \
             $SWARM_FILE",
            "or pass --per-process 1",
        ],
    );
    refused(
        &refactor_all(&["--batch", "2", "--exec", SED_FOO_BAR]),
        &[
            "files, but the command names only $SWARM_FILE",
            "\"$SWARM_FILES\"",
        ],
    );
    // --verify is held to the same rule: it gets the task's (or its process's) files.
    let list = r#"printf '%s\n' "$SWARM_FILES" | xargs -d '\n' sed -i s/foo/bar/"#;
    let first_only = r#"grep -q bar "$SWARM_FILE""#;
    let checked = |how: [&str; 2], says: &[&str]| {
        let args = [
            "refactor", "x", ".", "-y", "--exec", list, "--verify", first_only,
        ];
        refused(&[&args[..], &how[..]].concat(), says);
    };
    checked(
        ["--batch", "2"],
        &[
            "files, but --verify names only $SWARM_FILE",
            "the others would be left unchecked",
        ],
    );
    checked(
        ["-j", "1"],
        &["--per-process auto gives a process several tasks, but --verify names only"],
    );
    // --verify-merged checks the merged result: a task's file names nothing there.
    let merged_check = r#"ruff check "$SWARM_FILE""#;
    refused(
        &refactor_all(&["--exec", SED_FOO_BAR, "--verify-merged", merged_check]),
        &[
            "--verify-merged names $SWARM_FILE",
            "--verify-merged 'ruff check .'",
        ],
    );
    // An unquoted list, and a name the shell would split.
    refused(
        &refactor_all(&["--exec", "sed -i s/foo/bar/ $SWARM_FILES"]),
        &[
            "expands $SWARM_FILES unquoted",
            "\"docs/read me.txt\"",
            "xargs -d",
        ],
    );
    // The forms that say what they mean run over every file.
    let list = r#"printf '%s\n' "$SWARM_FILES" | xargs -d '\n' sed -i s/foo/bar/"#;
    let run = repo.swarm(&["refactor", "x", ".", "--batch", "2", "-y", "--exec", list]);
    run.assert_code(0);
    for file in ["httpx/a.py", "httpx/b.py", "docs/read me.txt"] {
        assert_eq!(
            repo.git(&["show", &format!("HEAD:{file}")]),
            "bar",
            "{file}"
        );
    }
    // On a terminal, a run with no pathspec says so before it asks.
    let asked = crate::common::swarm_on_a_terminal(
        &repo,
        &["refactor", "rename", "--exec", SED_FOO_BAR],
        "n\n",
    );
    assert!(
        asked
            .stdout
            .contains("3 file(s) (no pathspec: every tracked file)"),
        "{}",
        asked.stdout
    );
}

/// A command that is empty or blank would run nothing and pass: an `--exec` whose tasks all
/// report `no change`, a `--verify` that passes every task. Each is refused, wherever it is
/// set.
#[test]
fn blank_commands_are_refused() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let refused = |args: &[&str], what: &str| {
        let before = repo.git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
        let run = repo.swarm(args);
        run.assert_code(2);
        let said = format!("error: {what} is empty: there is no command to run");
        assert!(run.stderr.contains(&said), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("hint: give it the command"),
            "{}",
            run.stderr
        );
        let after = repo.git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
        assert_eq!(after, before, "{args:?} changed a ref");
        assert!(
            !repo.swarm_dir().join("runs").exists(),
            "{args:?} started a run"
        );
    };
    let run = refactor_all;
    refused(&run(&["--exec", ""]), "--exec / [run] exec");
    refused(&run(&["--exec", " \t"]), "--exec / [run] exec");
    let verify = ["--exec", SED_FOO_BAR, "--verify", " "];
    refused(&run(&verify), "--verify / [run] verify");
    let merged = ["--exec", SED_FOO_BAR, "--verify-merged", ""];
    refused(&run(&merged), "--verify-merged / [run] verify_merged");
    repo.user_config("[agents.blank]\nexec = '  '\n");
    refused(&run(&["--agent", "blank"]), "[agents.blank] exec");
    repo.write("swarm.toml", "[worktree]\nsetup = \"\"\n");
    repo.commit_all("settings");
    refused(&run(&["--exec", SED_FOO_BAR]), "[worktree] setup");
    assert_eq!(repo.read("a.txt"), "foo\n");
}

/// `swarm resume --exec` is held to the same rule as the run's own command: a run of tasks of
/// two files is not resumed with a command that names only the first; with the list, it is.
#[test]
fn a_resume_with_a_command_that_names_only_the_first_file_is_refused() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let list = r#"printf '%s\n' "$SWARM_FILES" | xargs -d '\n' sed -i s/foo/bar/"#;
    let broken = format!("{list}; exit 1");
    let run = repo.swarm(&["refactor", "x", ".", "--batch", "2", "--exec", &broken]);
    run.assert_code(1);
    let id = run.run_id();
    let report = repo.run_file(&id, "report.json");
    let resumed = repo.swarm(&["resume", &id, "--failed", "--exec", SED_FOO_BAR]);
    resumed.assert_code(2);
    assert!(
        resumed
            .stderr
            .contains("has 2 files, but the command names only $SWARM_FILE"),
        "{}",
        resumed.stderr
    );
    assert_eq!(repo.read("a.txt"), "foo\n");
    let unchanged = repo.run_file(&id, "report.json");
    assert_eq!(
        unchanged, report,
        "the refused resume changed the run's report"
    );
    repo.swarm(&["resume", &id, "--failed", "--exec", list])
        .assert_code(0);
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "bar");
    assert_eq!(repo.git(&["show", "HEAD:b.txt"]), "bar");
}

/// `swarm merge RUN --verify-merged CHECK` runs no worker, and is held to the rule of a check
/// of the merged result too: one naming a task's file is refused, and nothing is merged.
#[test]
fn a_merge_whose_check_of_the_result_names_a_tasks_file_is_refused() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = repo.swarm(&["refactor", "x", ".", "--dry-run", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    let id = run.run_id();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let check = r#"grep -q bar "$SWARM_FILE""#;
    let merged = repo.swarm(&["merge", &id, "--verify-merged", check]);
    merged.assert_code(2);
    assert!(
        merged.stderr.contains("--verify-merged names $SWARM_FILE"),
        "{}",
        merged.stderr
    );
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
    let merged = repo.swarm(&["merge", &id, "--verify-merged", "! grep -q foo *.txt"]);
    merged.assert_code(0);
    assert_eq!(repo.git(&["show", "HEAD:b.txt"]), "bar");
}
