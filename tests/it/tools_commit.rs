//! The built-in worker's commit stages the paths its tools wrote, when nothing else wrote in
//! its worktree (`worker/llm/written.rs`), instead of walking the worktree's status: what is
//! committed, and the worktree the next task gets, must be what a walk would give.

use serde_json::json;

use crate::common::{Run, TestRepo};
use crate::fake_model::{FakeModel, Reply, Request, tool_calls};

const KEY: &str = "sk-test-tools-commit";

fn run(repo: &TestRepo, fake: &FakeModel, args: &[&str]) -> Run {
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", KEY)
        .args(["refactor", "edit the files", "-y", "--scope", "any"])
        .args(args)
        .args(["--model", "fake-model", "--base-url", &fake.url]);
    Run::from(cmd.output().unwrap())
}

fn finish(status: &str) -> Reply {
    Reply::Json(finish_call(status))
}

fn finish_call(status: &str) -> serde_json::Value {
    tool_calls(&[("finish", json!({"status": status, "summary": "done"}))])
}

/// `base..HEAD`, as the git CLI lists it.
fn changed_since(repo: &TestRepo, base: &str) -> String {
    repo.git(&["diff", "--name-status", base, "HEAD"])
}

#[test]
fn what_the_tools_wrote_through_links_is_committed_as_git_sees_it() {
    let repo = TestRepo::with_files(&[
        ("src/a.py", "x = foo\n"),
        ("src/d.py", "y = foo\n"),
        ("real/b.txt", "old\n"),
        (".gitignore", "build/\n"),
    ]);
    std::os::unix::fs::symlink("real", repo.path.join("linked")).unwrap();
    std::fs::create_dir_all(repo.path.join("lib")).unwrap();
    std::os::unix::fs::symlink("../src/a.py", repo.path.join("lib/alias.py")).unwrap();
    repo.commit_all("links");
    let base = repo.git(&["rev-parse", "HEAD"]);
    // Streamed on connections kept alive, as hosted APIs answer.
    let script = |req: &Request, _| {
        let file = req.task_files()[0].clone();
        Reply::StreamKeepAlive(match (file.as_str(), req.turn()) {
            ("src/a.py", 0) => tool_calls(&[
                // Through a linked folder: real/b.txt changes.
                (
                    "write_file",
                    json!({"path": "linked/b.txt", "content": "new\n"}),
                ),
                // Through a linked file: src/a.py changes.
                (
                    "edit_file",
                    json!({"path": "lib/alias.py", "old_string": "foo", "new_string": "bar"}),
                ),
                (
                    "write_file",
                    json!({"path": "fresh/c.txt", "content": "c\n"}),
                ),
                // Ignored: never committed, as after a status walk.
                (
                    "write_file",
                    json!({"path": "build/out.log", "content": "log\n"}),
                ),
            ]),
            // The next task in the same worktree sees the start commit's files.
            ("src/d.py", 0) => tool_calls(&[
                ("read_file", json!({"path": "real/b.txt"})),
                ("read_file", json!({"path": "fresh/c.txt"})),
            ]),
            ("src/a.py", _) => finish_call("done"),
            _ => finish_call("no_change"),
        })
    };
    let fake = FakeModel::start(script);
    let out = run(&repo, &fake, &["src", "-j", "1"]);
    out.assert_code(0);
    assert_eq!(
        changed_since(&repo, &base),
        "A\tfresh/c.txt\nM\treal/b.txt\nM\tsrc/a.py"
    );
    assert_eq!(repo.git(&["show", "HEAD:src/a.py"]), "x = bar");
    assert_eq!(repo.git(&["show", "HEAD:real/b.txt"]), "new");
    assert_eq!(repo.git(&["show", "HEAD:lib/alias.py"]), "../src/a.py");
    let requests = fake.requests();
    let second = requests
        .iter()
        .find(|r| r.task_files()[0] == "src/d.py" && r.turn() == 1)
        .expect("src/d.py's second turn");
    let results = second.tool_results();
    assert!(results[0].contains("old"), "{results:?}");
    assert!(results[1].starts_with("error:"), "{results:?}");
    let events = repo.events(&out);
    let made = events.iter().filter(|e| e["kind"] == "worktree_created");
    assert_eq!(made.count(), 1, "both tasks in one worktree");
}

#[test]
fn after_a_run_command_the_whole_worktree_is_committed() {
    let repo = TestRepo::with_files(&[("src/a.py", "x = foo\n")]);
    repo.write("swarm.toml", "[sandbox]\nallow_run = [\"sh -c *\"]\n");
    repo.commit_all("allow a shell");
    let base = repo.git(&["rev-parse", "HEAD"]);
    let script = |req: &Request, _| match req.turn() {
        0 => Reply::Json(tool_calls(&[
            ("run", json!({"command": "sh -c 'echo made > extra.txt'"})),
            (
                "edit_file",
                json!({"path": "src/a.py", "old_string": "foo", "new_string": "bar"}),
            ),
        ])),
        _ => finish("done"),
    };
    let fake = FakeModel::start(script);
    run(&repo, &fake, &["src"]).assert_code(0);
    assert_eq!(
        changed_since(&repo, &base),
        "A\textra.txt\nM\tsrc/a.py",
        "what the command wrote is found by the status walk"
    );
}
