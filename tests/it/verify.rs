//! What `--verify` writes (a compiler's caches, a build's output) is not the task's change:
//! it is neither committed nor held against the task's scope, where git does not ignore it.

use serde_json::json;

use crate::common::{SED_FOO_BAR, TestRepo, count, statuses};
use crate::fake_model::{FakeModel, Reply, tool_calls};

/// The check leaves a cache and deletes a tracked file, neither of them the task's; on the
/// task's own file it rewrites, what it wrote is committed (the file is the worker's). One
/// worktree runs every task in turn: what a check left is gone before the next task.
#[test]
fn what_verify_alone_writes_stays_out_of_the_commit() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("c.txt", "foo\n"),
        ("stale.txt", "old\n"),
    ]);
    let verify = "mkdir -p __pycache__ && date > __pycache__/a.pyc && rm -f stale.txt \
                  && if grep -q bar a.txt; then sed -i 's/bar/bar!/' a.txt; fi";
    let run = repo.swarm(&[
        "refactor",
        "rename foo to bar",
        "*.txt",
        "--grep",
        "foo",
        "-j",
        "1",
        "--exec",
        SED_FOO_BAR,
        "--verify",
        verify,
    ]);
    run.assert_code(0);
    assert_eq!(count(&statuses(&repo.report(&run)), "merged"), 3);
    assert_eq!(repo.git(&["show", "main:a.txt"]), "bar!");
    assert_eq!(repo.git(&["show", "main:b.txt"]), "bar");
    assert_eq!(repo.git(&["show", "main:c.txt"]), "bar");
    assert_eq!(repo.git(&["show", "main:stale.txt"]), "old");
    let tree = repo.git(&["ls-tree", "-r", "--name-only", "main"]);
    assert_eq!(tree, "a.txt\nb.txt\nc.txt\nstale.txt");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    // Each task's merge brings its own file alone.
    for file in ["a.txt", "b.txt", "c.txt"] {
        let merge = repo.git(&[
            "log",
            "--merges",
            "--format=%H",
            "-F",
            "--grep",
            &format!("({file})"),
            "main",
        ]);
        let changed = repo.git(&["diff", "--name-only", &format!("{merge}^1"), &merge]);
        assert_eq!(changed, file);
    }
}

/// The built-in agent's `--verify` (run on its `finish`, with the task's `SWARM_FILE`) leaves
/// a cache: the task merges without it.
#[test]
fn what_the_agents_check_writes_stays_out_of_the_commit() {
    let repo = TestRepo::with_files(&[("src/m.py", "foo()\n")]);
    let fake = FakeModel::start(|req, _| {
        Reply::Json(match req.turn() {
            0 => tool_calls(&[(
                "write_file",
                json!({"path": "src/m.py", "content": "bar()\n"}),
            )]),
            _ => tool_calls(&[("finish", json!({"status": "done", "summary": "renamed"}))]),
        })
    });
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", "sk-test-verify").args([
        "refactor",
        "rename foo to bar",
        "src",
        "-y",
        "--model",
        "fake-model",
        "--base-url",
        &fake.url,
        "--verify",
        // It gets the task's variables, as the command does.
        r#"test "$SWARM_FILE" = src/m.py && mkdir -p .cache && echo checked > .cache/result"#,
    ]);
    let run = crate::common::Run::from(cmd.output().unwrap());
    run.assert_code(0);
    assert_eq!(repo.read("src/m.py"), "bar()\n");
    let tree = repo.git(&["ls-tree", "-r", "--name-only", "main"]);
    assert_eq!(tree, "src/m.py");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

/// `--verify` gets the task's variables: a check of `"$SWARM_FILE"` checks each task's own
/// file, and a process of several tasks' check gets all their files in `SWARM_FILES`.
#[test]
fn verify_checks_each_tasks_own_files() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    let check =
        r#"[ "$SWARM_FILE" != b.txt ] && [ -n "$SWARM_TASK_ID" ] && grep -q bar "$SWARM_FILE""#;
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.txt",
        "--exec",
        SED_FOO_BAR,
        "--verify",
        check,
    ]);
    run.assert_code(1);
    let report = repo.report(&run);
    let each = statuses(&report);
    assert_eq!(count(&each, "merged"), 2, "{each:?}");
    assert_eq!(count(&each, "failed"), 1, "{each:?}");
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "bar");
    assert_eq!(repo.git(&["show", "HEAD:b.txt"]), "foo");

    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    let list = r#"printf '%s\n' "$SWARM_FILES" | xargs -d '\n' sed -i s/foo/bar/"#;
    // One process for the three tasks; its check sees every file the process had.
    let check =
        r#"[ "$(printf '%s\n' "$SWARM_FILES" | wc -l)" = 3 ] && ! grep -q foo $SWARM_FILES"#;
    let args = [
        "refactor",
        "x",
        "*.txt",
        "--per-process",
        "3",
        "--exec",
        list,
    ];
    let run = repo.swarm(&[&args[..], &["--verify", check]].concat());
    run.assert_code(0);
    assert_eq!(count(&statuses(&repo.report(&run)), "merged"), 3);
}
