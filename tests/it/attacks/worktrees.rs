//! A worker owns its worktree's files, `.git` file included, but swarm's own work there never
//! follows what it left: links are not written through, the `.git` file is not believed, and
//! odd names and type changes are committed as git would.

use crate::common::{SED_FOO_BAR, TestRepo, task_of};

#[test]
fn a_link_in_place_of_a_workers_own_file_is_not_written_through() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    let victim = repo.victim().join("keep.txt");
    let before = repo.outside();
    // Task a turns its own file into a link to the victim; the next tasks reuse its worktree.
    let exec = format!(
        r#"if [ "$SWARM_FILE" = a.txt ]; then rm a.txt; ln -s {} a.txt; else {SED_FOO_BAR}; fi"#,
        victim.display()
    );
    let run = repo.swarm(&["refactor", "x", ".", "-j", "1", "--exec", &exec]);
    run.assert_code(0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let report = repo.report(&run);
    // The later tasks are not blamed for a.txt.
    assert_eq!(task_of(&report, "b.txt")["status"], "merged");
    assert_eq!(task_of(&report, "c.txt")["status"], "merged");
    let changed = ["a.txt", "b.txt", "c.txt", ".git"].map(|f| repo.path.join(f));
    before.assert_same_except(&repo.outside(), &changed);
}

#[test]
fn a_folder_replaced_by_a_link_into_the_checkout_does_not_reach_uncommitted_work() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("lib/x.txt", "base\n"),
    ]);
    // The user's uncommitted work, in a file no task changes.
    repo.write("lib/x.txt", "uncommitted\n");
    let checkout_lib = repo.path.join("lib");
    let exec = format!(
        r#"if [ "$SWARM_FILE" = a.txt ]; then rm -r lib; ln -s {} lib; fi; {SED_FOO_BAR}"#,
        checkout_lib.display()
    );
    let run = repo.swarm(&[
        "refactor", "x", "*.txt", ":!lib", "-j", "1", "--exec", &exec,
    ]);
    run.assert_code(1);
    assert_eq!(repo.read("lib/x.txt"), "uncommitted\n");
    let report = repo.report(&run);
    let a = task_of(&report, "a.txt");
    assert_eq!(a["status"], "failed");
    assert!(a["error"].as_str().unwrap().contains("lib"), "{a}");
    assert_eq!(task_of(&report, "b.txt")["status"], "merged");
    // What a committed: the link, and lib/x.txt gone; never the content behind the link.
    let branch = a["branch"].as_str().unwrap();
    assert_eq!(
        repo.git(&["ls-tree", "-r", "--format=%(objectmode) %(path)", branch]),
        "100644 a.txt\n100644 b.txt\n120000 lib"
    );
}

#[test]
fn a_log_link_planted_in_the_task_directory_is_not_followed() {
    for sandbox in ["workspace-write", "off"] {
        let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
        let victim = repo.victim().join("keep.txt");
        // The worker points verify.log (next to its TASK.md) at the victim, then swarm runs
        // --verify, whose output goes to verify.log.
        let exec = format!(
            r#"ln -sf {} "$(dirname "$SWARM_TASK_FILE")/verify.log" 2>/dev/null; {SED_FOO_BAR}"#,
            victim.display()
        );
        let run = repo.swarm(&[
            "refactor",
            "x",
            ".",
            "--sandbox",
            sandbox,
            "--verify",
            "echo VERIFY-OUTPUT",
            "--exec",
            &exec,
        ]);
        run.assert_code(0);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious\n",
            "{sandbox}"
        );
        let log = repo.run_file(
            &run.run_id(),
            &format!(
                "tasks/{}/verify.log",
                repo.report(&run)["tasks"][0]["id"].as_str().unwrap()
            ),
        );
        assert!(log.contains("VERIFY-OUTPUT"), "{sandbox}: {log}");
    }
}

#[test]
fn a_result_file_that_is_a_fifo_or_a_link_is_ignored() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let secret = repo.victim().join("keep.txt");
    let exec = format!(
        r#"if [ "$SWARM_FILE" = a.txt ]; then mkfifo "$SWARM_RESULT_FILE"; else ln -s {} "$SWARM_RESULT_FILE"; fi; {SED_FOO_BAR}"#,
        secret.display()
    );
    let run = repo.swarm(&["refactor", "x", ".", "--timeout", "30", "--exec", &exec]);
    run.assert_code(0);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "bar\n");
}

#[test]
fn a_worker_pointing_its_worktree_at_the_repository_changes_nothing_there() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    // The user has staged work in a file no task touches.
    repo.write("staged.txt", "mine\n");
    repo.git(&["add", "staged.txt"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    let index = std::fs::read(repo.path.join(".git/index")).unwrap();
    let gitdir = repo.path.join(".git");
    let exec = format!(
        r#"if [ "$SWARM_FILE" = b.txt ]; then echo "gitdir: {}" > .git; echo planted > planted.txt; fi; {SED_FOO_BAR}"#,
        gitdir.display()
    );
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.txt",
        ":!staged.txt",
        "-j",
        "1",
        "--exec",
        &exec,
    ]);
    run.assert_code(1);
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "failed");
    assert!(b["error"].as_str().unwrap().contains(".git file"), "{b}");
    assert_eq!(task_of(&report, "a.txt")["status"], "merged");
    assert_eq!(task_of(&report, "c.txt")["status"], "merged");
    // The user's HEAD is still main, moved only by the merges; the staged file is staged.
    assert_eq!(repo.git(&["symbolic-ref", "HEAD"]), "refs/heads/main");
    assert_eq!(
        repo.git(&["rev-parse", "main~2"]),
        head,
        "{}",
        repo.git(&["log", "--oneline", "-5"])
    );
    assert_eq!(repo.git(&["diff", "--cached", "--name-only"]), "staged.txt");
    assert!(!repo.path.join("planted.txt").exists());
    assert!(
        repo.git(&["log", "--all", "--format=%s"])
            .lines()
            .all(|l| !l.contains("planted"))
    );
    assert_ne!(
        std::fs::read(repo.path.join(".git/index")).unwrap(),
        index,
        "the merges updated the index"
    );
}

#[test]
fn odd_names_and_type_changes_are_committed_as_git_would() {
    let repo = TestRepo::with_files(&[
        ("a\\b.txt", "foo\n"),
        ("c.txt", "foo\n"),
        ("d", "a file\n"),
        ("lib/x.txt", "x\n"),
        ("other/y.txt", "y\n"),
    ]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // a\b.txt changes in the first task; the next task reuses the worktree. d becomes a
    // folder; lib becomes a link.
    let exec = format!(
        r#"case "$SWARM_FILE" in
  d) rm d; mkdir d; echo inside > d/f ;;
  lib/x.txt) rm -r lib; ln -s other lib ;;
  *) {SED_FOO_BAR} ;;
esac"#
    );
    let run = repo.swarm(&[
        "refactor", "x", "a\\b.txt", "c.txt", "d", "lib", "-j", "1", "--scope", "any", "--exec",
        &exec,
    ]);
    run.assert_code(0);
    let expected = repo.oracle_tree(
        &base,
        &["a\\b.txt", "c.txt", "d", "lib/x.txt"],
        &format!(
            r#"case "$SWARM_FILE" in d) rm d; mkdir d; echo inside > d/f ;; lib/x.txt) rm -r lib; ln -s other lib ;; *) {SED_FOO_BAR} ;; esac"#
        ),
    );
    assert_eq!(repo.git(&["rev-parse", "HEAD^{tree}"]), expected);
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

#[test]
fn a_worker_that_moves_head_and_creates_a_branch_is_named_and_keeps_its_work() {
    // Under the default sandbox (its git a copy-on-write view) and without it, the same.
    for sandbox in [&[][..], &["--sandbox", "off"][..]] {
        let repo =
            TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
        // Task b (in the middle, -j 1) branches off and commits there.
        let exec = format!(
            r#"if [ "$SWARM_FILE" = b.txt ]; then git checkout -q -b evil && echo evil >> b.txt && git commit -qam evil; else {SED_FOO_BAR}; fi"#
        );
        let mut args = vec!["refactor", "x", ".", "-j", "1", "--exec", &exec];
        args.extend(sandbox);
        let run = repo.swarm(&args);
        run.assert_code(1);
        let report = repo.report(&run);
        let b = task_of(&report, "b.txt");
        assert_eq!(b["status"], "failed", "{sandbox:?}");
        assert!(b["error"].as_str().unwrap().contains("moved HEAD"), "{b}");
        // Its work is on its branch, kept like any failed task's, and `swarm diff` shows it.
        assert_eq!(b["branch_kept"], true, "{sandbox:?}: {b}");
        let branch = b["branch"].as_str().unwrap();
        assert_eq!(repo.git(&["show", &format!("{branch}:b.txt")]), "foo\nevil");
        let diff = repo.swarm(&["diff", &run.run_id(), b["id"].as_str().unwrap()]);
        assert!(
            diff.stdout.contains("+evil"),
            "{sandbox:?}: {}",
            diff.stdout
        );
        // The warning about the branch is on task b, and only there.
        let events = repo.events(&run);
        let warnings: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["kind"] == "warning" && e["message"].as_str().unwrap().contains("evil"))
            .collect();
        assert_eq!(warnings.len(), 1, "{sandbox:?}: {warnings:?}");
        assert_eq!(warnings[0]["task"], b["id"]);
        assert_eq!(repo.read("a.txt"), "bar\n");
        assert_eq!(repo.read("c.txt"), "bar\n");
    }
}
