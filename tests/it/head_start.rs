//! The built-in worker's turn 1, asked while its worktree is being made: its first message is
//! read from the task's start commit, never from the user's checkout, and where that cannot
//! be done as a checkout would (AGENTS.md a link), from the worktree as before.

use crate::common::{Run, TestRepo};
use crate::fake_model::{FakeModel, Reply, rename_agent};

const KEY: &str = "sk-test-head-start";

fn run(repo: &TestRepo, fake: &FakeModel, args: &[&str]) -> Run {
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", KEY)
        .args(["refactor", "rename foo to bar", "-y"])
        .args(args)
        .args(["--model", "fake-model", "--base-url", &fake.url]);
    Run::from(cmd.output().unwrap())
}

/// The first user message of the run's first request.
fn first_message(fake: &FakeModel) -> String {
    fake.requests()[0].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn turn_one_is_asked_before_the_worktree_is_ready_from_the_start_commit() {
    // 4,000 files: the task's worktree takes tens of milliseconds to check out, its question
    // a few.
    let mut files: Vec<(String, String)> = (0..4000)
        .map(|i| (format!("pad/p{i:04}.txt"), format!("{i}\n")))
        .collect();
    files.push(("src/m0.py".into(), "def f():\n    return foo(0)\n".into()));
    files.push(("AGENTS.md".into(), "Committed notes.\n".into()));
    let repo = TestRepo::with_files(&files);
    // Uncommitted notes in the user's checkout are not the task's.
    repo.write("AGENTS.md", "Uncommitted notes.\n");
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Stream(agent(req)));
    let out = run(&repo, &fake, &["src", "-j", "1"]);
    out.assert_code(0);
    let first = first_message(&fake);
    assert!(first.contains("Committed notes."), "{first}");
    assert!(!first.contains("Uncommitted"), "{first}");
    let events = repo.events(&out);
    let ts = |kind: &str| {
        events
            .iter()
            .find(|e| e["kind"] == kind)
            .and_then(|e| e["ts"].as_f64())
            .unwrap_or_else(|| panic!("no {kind} event"))
    };
    assert!(
        ts("model_request") < ts("task_started"),
        "turn 1 was asked only after the worktree was ready: {events:#?}"
    );
    assert_eq!(
        repo.git(&["show", "HEAD:src/m0.py"]),
        "def f():\n    return bar(0)"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path.join("AGENTS.md")).unwrap(),
        "Uncommitted notes.\n"
    );
}

#[test]
fn an_agents_md_link_is_read_in_the_worktree() {
    let repo = TestRepo::with_files(&[
        ("src/m0.py", "def f():\n    return foo(0)\n"),
        ("docs/NOTES.md", "Notes behind a link.\n"),
    ]);
    std::os::unix::fs::symlink("docs/NOTES.md", repo.path.join("AGENTS.md")).unwrap();
    repo.commit_all("notes by a link");
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Stream(agent(req)));
    run(&repo, &fake, &["src"]).assert_code(0);
    let first = first_message(&fake);
    assert!(first.contains("Notes behind a link."), "{first}");
}

#[test]
fn a_place_given_back_before_its_commit_makes_no_worktree_beyond_jobs() {
    let files: Vec<(String, String)> = (0..8)
        .map(|i| {
            (
                format!("src/m{i}.py"),
                format!("def f():\n    return foo({i})\n"),
            )
        })
        .collect();
    let repo = TestRepo::with_files(&files);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| {
        std::thread::sleep(std::time::Duration::from_millis(30));
        Reply::Stream(agent(req))
    });
    let out = run(&repo, &fake, &["src", "-j", "2"]);
    out.assert_code(0);
    // A task gives its place back before its commit; the next one's worktree waits for it,
    // so no third worktree is made, and no more than 2 model calls are ever in flight.
    let events = repo.events(&out);
    let created = events
        .iter()
        .filter(|e| e["kind"] == "worktree_created")
        .count();
    assert_eq!(created, 2, "{events:#?}");
    assert!(fake.max_in_flight() <= 2, "{}", fake.max_in_flight());
    let merged = events.iter().filter(|e| e["kind"] == "merged").count();
    assert_eq!(merged, 8);
    for i in 0..8 {
        assert_eq!(
            repo.git(&["show", &format!("HEAD:src/m{i}.py")]),
            format!("def f():\n    return bar({i})")
        );
    }
    repo.assert_clean_after_run();
}
