//! The main job end to end: the merged tree equals the git CLI's result of applying the edit
//! to every file, one --no-ff merge per changed task, nothing left behind.

use crate::common::{SED_FOO_BAR, TestRepo, statuses};

fn python_repo(n: usize) -> TestRepo {
    let mut files = Vec::new();
    for i in 0..n {
        let body = if i % 3 == 0 {
            format!("def helper_{i}():\n    return {i}\n")
        } else {
            format!("from lib import foo\n\ndef f_{i}():\n    return foo({i}) + foo_bar\n")
        };
        files.push((format!("src/pkg{}/mod_{i}.py", i % 4), body));
    }
    files.push(("README.md".into(), "uses foo everywhere\n".into()));
    TestRepo::with_files(&files)
}

/// Object `id` is a loose file whose zlib stream starts with a stored block.
fn assert_stored(repo: &TestRepo, id: &str) {
    let file = repo.path.join(".git/objects").join(&id[..2]).join(&id[2..]);
    let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{id} is not loose: {e}"));
    // zlib's header (deflate, 32 KiB window, no level), then a block of type 00: stored.
    assert_eq!(&bytes[..2], &[0x78, 0x01], "{id}");
    assert_eq!(bytes[2] & 0b110, 0, "{id} is deflated");
}

#[test]
fn merged_tree_equals_the_edit_applied_to_every_file() {
    let repo = python_repo(24);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let run = repo.swarm(&[
        "refactor",
        "rename foo to bar",
        "src/**/*.py",
        "--grep",
        r"\bfoo\b",
        "-j",
        "4",
        "--exec",
        SED_FOO_BAR,
    ]);
    run.assert_code(0);

    let matching: Vec<String> = repo.lines(&["grep", "-lwE", "foo", base.as_str(), "--", "src"]);
    let matching: Vec<&str> = matching
        .iter()
        .map(|l| l.split_once(':').unwrap().1)
        .collect();
    assert_eq!(matching.len(), 16);
    let oracle = repo.oracle_tree(&base, &matching, SED_FOO_BAR);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
    // The checkout was updated too, and is clean.
    assert!(
        repo.read("src/pkg1/mod_1.py")
            .contains("return bar(1) + foo_bar")
    );
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    assert_eq!(repo.read("README.md"), "uses foo everywhere\n");

    // One two-parent merge per changed task, each bringing in only its task's file.
    let merges = repo.lines(&["rev-list", "--merges", &format!("{base}..main")]);
    assert_eq!(merges.len(), 16);
    assert_eq!(
        repo.lines(&["rev-list", "--no-merges", &format!("{base}..main")])
            .len(),
        16
    );
    let first_parents = repo.lines(&["rev-list", "--first-parent", &format!("{base}..main")]);
    assert_eq!(
        first_parents, merges,
        "main's first-parent chain is the merges"
    );
    for m in &merges {
        let parents = repo.git(&["show", "-s", "--format=%P", m]);
        assert_eq!(parents.split(' ').count(), 2);
        let changed = repo.lines(&["diff", "--name-only", &format!("{m}^1"), m]);
        assert_eq!(changed.len(), 1, "{m} changed {changed:?}");
        let subject = repo.git(&["show", "-s", "--format=%s", m]);
        assert!(
            subject.contains(&changed[0]),
            "{subject} names {}",
            changed[0]
        );
    }
    // The commits, merges and trees swarm wrote are loose objects in stored zlib blocks
    // (`git/store.rs`), which git reads whole.
    for m in &merges {
        for object in [m.clone(), format!("{m}^2"), format!("{m}^{{tree}}")] {
            assert_stored(&repo, &repo.git(&["rev-parse", &object]));
        }
    }
    repo.git(&["fsck", "--strict", "--no-dangling"]);
    repo.assert_clean_after_run();

    let report = repo.report(&run);
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["base"], base.as_str());
    assert_eq!(report["into"], "main");
    assert_eq!(report["result"], repo.git(&["rev-parse", "main"]).as_str());
    assert_eq!(report["totals"]["tasks"], 16);
    assert_eq!(report["totals"]["merged"], 16);
    assert!(statuses(&report).iter().all(|(_, s)| s == "merged"));
}

#[test]
fn tasks_without_changes_get_no_merge() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "nothing\n")]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let run = repo.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert_eq!(
        repo.lines(&["rev-list", "--merges", &format!("{base}..main")])
            .len(),
        1
    );
    let report = repo.report(&run);
    assert_eq!(
        statuses(&report),
        vec![
            ("a.txt".into(), "merged".into()),
            ("b.txt".into(), "no_change".into())
        ]
    );
    repo.assert_clean_after_run();
}

#[test]
fn nothing_to_change_leaves_the_branch_alone() {
    let repo = TestRepo::with_files(&[("a.txt", "x\n")]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    repo.swarm(&["refactor", "x", ".", "--exec", "true"])
        .assert_code(0);
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
    repo.assert_clean_after_run();
}

#[test]
fn into_a_new_branch_leaves_the_current_one_and_local_changes_alone() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    // A dirty tree is fine when the result goes elsewhere.
    repo.write("a.txt", "local edit\n");
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "--into",
        "feature",
        "--exec",
        SED_FOO_BAR,
    ]);
    run.assert_code(0);
    assert_eq!(repo.git(&["rev-parse", "main"]), head);
    assert_eq!(repo.read("a.txt"), "local edit\n");
    assert_eq!(repo.git(&["show", "feature:a.txt"]), "bar");
    assert_eq!(repo.git(&["show", "feature:b.txt"]), "bar");
    assert_eq!(
        repo.lines(&["rev-list", "--merges", "main..feature"]).len(),
        2
    );
    repo.assert_clean_after_run();
}

#[test]
fn checked_out_target_keeps_unrelated_local_changes() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("notes.txt", "mine\n")]);
    repo.write("notes.txt", "mine, edited\n");
    repo.write("untracked.txt", "scratch\n");
    repo.swarm(&["refactor", "x", "a.txt", "--exec", SED_FOO_BAR])
        .assert_code(0);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("notes.txt"), "mine, edited\n");
    assert_eq!(repo.read("untracked.txt"), "scratch\n");
    assert_eq!(
        repo.git(&["status", "--porcelain"]),
        "M notes.txt\n?? untracked.txt".trim_start()
    );
}

#[test]
fn base_older_than_the_target() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    repo.write("c.txt", "later\n");
    let later = repo.commit_all("later");
    repo.swarm(&["refactor", "x", ".", "--base", &base, "--exec", SED_FOO_BAR])
        .assert_code(0);
    // The first merge's first parent is the target's tip, not the base.
    let merges = repo.lines(&[
        "rev-list",
        "--merges",
        "--reverse",
        &format!("{later}..main"),
    ]);
    assert_eq!(repo.git(&["rev-parse", &format!("{}^1", merges[0])]), later);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("c.txt"), "later\n");
}

#[test]
fn keep_leaves_worktrees_and_branches_until_clean() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-j",
        "2",
        "--keep",
        "--exec",
        SED_FOO_BAR,
    ]);
    run.assert_code(0);
    assert_eq!(repo.worktrees().len(), 3);
    assert_eq!(repo.swarm_branches().len(), 2);
    repo.swarm(&["clean", &run.run_id()]).assert_code(0);
    repo.assert_clean_after_run();
    assert_eq!(repo.read("a.txt"), "bar\n");
}

#[test]
fn worktrees_are_pooled_and_reset_between_tasks() {
    let mut files: Vec<(String, String)> = (0..12)
        .map(|i| (format!("f{i:02}.txt"), "foo\n".to_string()))
        .collect();
    files.push((".gitignore".into(), "build/\n".into()));
    let repo = TestRepo::with_files(&files);
    // Each task records how many stray files of earlier tasks and how many ignored build
    // files it finds, then leaves one of each (the stray file is committed: --scope any).
    let exec = r#"{ ls stray-* 2>/dev/null | wc -l; ls build 2>/dev/null | wc -l; } > "$SWARM_FILE"; mkdir -p build; touch "build/$SWARM_TASK_ID" "stray-$SWARM_TASK_ID""#;
    let run = repo.swarm(&[
        "refactor", "x", "f*.txt", "-j", "3", "--scope", "any", "--exec", exec,
    ]);
    run.assert_code(0);
    let events = repo.run_file(&run.run_id(), "events.jsonl");
    let created = events.matches("\"kind\":\"worktree_created\"").count();
    // A worker and a commit a job, each in a worktree of its own.
    assert!(
        (1..=6).contains(&created),
        "{created} worktrees for 12 tasks at -j 3"
    );
    // Ignored build output survived resets: some task saw build files of an earlier task.
    let mut saw_build = false;
    for i in 0..12 {
        let seen = repo.read(&format!("f{i:02}.txt"));
        let mut nums = seen.lines().map(|l| l.trim().parse::<usize>().unwrap());
        assert_eq!(
            nums.next(),
            Some(0),
            "untracked files of a previous task leaked"
        );
        saw_build |= nums.next().unwrap() > 0;
    }
    assert!(saw_build, "ignored build output did not survive a reset");
    assert_eq!(repo.lines(&["ls-files", "stray-*"]).len(), 12);
    assert!(repo.lines(&["ls-files", "build"]).is_empty());
    repo.assert_clean_after_run();
}

#[test]
fn worktree_setup_runs_once_per_worktree_and_copy_brings_ignored_files() {
    let mut files: Vec<(String, String)> = (0..8)
        .map(|i| (format!("f{i}.txt"), "foo\n".to_string()))
        .collect();
    files.push((".gitignore".into(), ".env\nbuild/\n".into()));
    files.push((
        "swarm.toml".into(),
        "[worktree]\ncopy = [\".env\"]\nsetup = \"echo setup >> \\\"$HOME/setups\\\"; mkdir -p build && echo ready > build/stamp\"\n".into(),
    ));
    let repo = TestRepo::with_files(&files);
    repo.write(".env", "TOKEN=local\n");
    let run = repo.swarm(&[
        "refactor",
        "x",
        "f*.txt",
        "-j",
        "2",
        "--sandbox",
        "off",
        "--exec",
        r#"cat .env build/stamp > "$SWARM_FILE""#,
    ]);
    run.assert_code(0);
    for i in 0..8 {
        assert_eq!(repo.read(&format!("f{i}.txt")), "TOKEN=local\nready\n");
    }
    let events = repo.run_file(&run.run_id(), "events.jsonl");
    let worktrees = events.matches("\"kind\":\"worktree_created\"").count();
    let setups = std::fs::read_to_string(repo.home.join("setups")).unwrap();
    assert_eq!(
        setups.lines().count(),
        worktrees,
        "setup once per worktree, not per task"
    );
    assert!(worktrees <= 2);
    assert!(repo.lines(&["ls-files", "build", ".env"]).is_empty());
    repo.assert_clean_after_run();
}

#[test]
fn review_merges_the_accepted_tasks_only() {
    let repo = TestRepo::with_files(&[
        ("f1.txt", "foo 1\n"),
        ("f2.txt", "foo 2\n"),
        ("f3.txt", "foo 3\n"),
        ("f4.txt", "foo 4\n"),
    ]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // Accept the first task, skip the second, quit at the third.
    let run = crate::common::swarm_on_a_terminal(
        &repo,
        &[
            "refactor",
            "foo to bar",
            "*.txt",
            "-y",
            "-j",
            "1",
            "--review",
            "--exec",
            SED_FOO_BAR,
        ],
        "a\ns\nq\n",
    );
    // On the terminal (stdout of `script`): each task's diffstat, diff and the question.
    assert!(run.stdout.contains("── task 1/4"), "{}", run.stdout);
    assert!(run.stdout.contains("f1.txt | 2 +-"), "{}", run.stdout);
    assert!(run.stdout.contains("+bar 1"), "{}", run.stdout);
    // The question names its task: a long diff has scrolled the header away.
    for n in 1..=3 {
        assert!(
            run.stdout.contains(&format!("task {n}/4: ")),
            "{}",
            run.stdout
        );
    }
    assert_eq!(run.stdout.matches("merge it?").count(), 3, "{}", run.stdout);
    assert!(!run.stdout.contains("── task 4/4"), "quit asks no more");
    // Skipping is the reviewer's choice, not a failure.
    assert_eq!(run.code, 0, "{}", run.stdout);
    let runs: Vec<_> = std::fs::read_dir(repo.swarm_dir().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path().join("report.json"))
        .collect();
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&runs[0]).unwrap()).unwrap();
    let skipped: Vec<bool> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["review_skipped"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(skipped, [false, true, true, true]);
    assert!(
        !run.stdout.contains("last lines of output"),
        "a task skipped in review did not fail: {}",
        run.stdout
    );

    assert_eq!(
        repo.git(&["rev-parse", "main^{tree}"]),
        repo.oracle_tree(&base, &["f1.txt"], SED_FOO_BAR)
    );
    assert_eq!(
        repo.lines(&["rev-list", "--merges", &format!("{base}..main")])
            .len(),
        1
    );
    // The others are skipped, their branches kept for later.
    let kept = repo.swarm_branches();
    assert_eq!(kept.len(), 3, "{kept:?}");
    for f in ["f2", "f3", "f4"] {
        assert!(
            kept.iter().any(|b| b.contains(&format!("/{f}-txt-"))),
            "{kept:?}"
        );
    }
}

/// On a terminal, the run's id comes first, and the live view shows each running worker with
/// how long it has run.
#[test]
fn the_live_view_says_the_run_and_how_long_workers_run() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = crate::common::swarm_on_a_terminal(
        &repo,
        &[
            "refactor",
            "x",
            "a.txt",
            "-y",
            "--exec",
            "sleep 2.5; sed -i s/foo/bar/ a.txt",
        ],
        "",
    );
    run.assert_code(0);
    let screen = &run.stdout;
    let started = screen.find("swarm: run 2").expect(screen);
    let running = screen.find("a.txt · running (1s)").expect(screen);
    assert!(started < running, "{screen}");
    assert_eq!(repo.read("a.txt"), "bar\n");
}

/// Uncommitted work in files no task touches stops nothing, and is left as it was.
#[test]
fn uncommitted_changes_to_other_files_are_left_alone() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    repo.write("b.txt", "my edit\n");
    repo.write("new.txt", "untracked\n");
    repo.swarm(&["refactor", "x", "a.txt", "--exec", SED_FOO_BAR])
        .assert_code(0);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "my edit\n");
    assert_eq!(repo.read("new.txt"), "untracked\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "M b.txt\n?? new.txt");
}
