//! The end of a run leaves the user's checkout, index and branch either at the result or
//! exactly as they were, whatever is in the way: a lock, a full disk, local changes, a merge
//! in progress, a sparse checkout; and the hint to merge by hand fits the target's state.

use std::process::Command;

use crate::common::{Run, SED_FOO_BAR, TestRepo, hermetic};

/// What the user's checkout is: HEAD, the branch, the index file, the files.
fn checkout_state(repo: &TestRepo) -> (String, String, Vec<u8>, crate::common::Snapshot) {
    let files = crate::common::Snapshot::of(&repo.path, &[repo.path.join(".git")]);
    (
        repo.git(&["symbolic-ref", "HEAD"]),
        repo.git(&["rev-parse", "main"]),
        std::fs::read(repo.path.join(".git/index")).unwrap(),
        files,
    )
}

fn assert_unchanged(repo: &TestRepo, before: &(String, String, Vec<u8>, crate::common::Snapshot)) {
    let now = checkout_state(repo);
    assert_eq!(now.0, before.0, "HEAD");
    assert_eq!(now.1, before.1, "main");
    assert!(now.2 == before.2, "the index changed");
    before.3.assert_same(&now.3);
}

#[test]
fn a_held_index_lock_leaves_everything_as_it_was() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    std::fs::write(repo.path.join(".git/index.lock"), "").unwrap();
    let before = checkout_state(&repo);
    let run = repo.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(1);
    assert_unchanged(&repo, &before);
    let report = repo.report(&run);
    assert_eq!(report["into_updated"], false);
    let hint = report["merge_hint"].as_str().unwrap();
    let branch = report["result_branch"].as_str().unwrap();
    assert!(
        hint.contains("index.lock") || hint.contains("wait"),
        "{hint}"
    );
    assert!(
        hint.ends_with(&format!("git merge --ff-only {branch}")),
        "{hint}"
    );
    assert!(run.stderr.contains(hint), "{}", run.stderr);
    // Once the lock is gone, the hint works.
    std::fs::remove_file(repo.path.join(".git/index.lock")).unwrap();
    repo.git(&["merge", "-q", "--ff-only", branch]);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

#[test]
fn a_failure_half_way_through_the_update_is_undone() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    // Task b adds new.txt, where the user has an untracked folder with a file in it: the
    // update gets as far as new.txt, after a.txt and b.txt, and must undo them.
    std::fs::create_dir_all(repo.path.join("new.txt")).unwrap();
    std::fs::write(repo.path.join("new.txt/mine"), "mine\n").unwrap();
    let before = checkout_state(&repo);
    let exec =
        format!("{SED_FOO_BAR}; if [ \"$SWARM_FILE\" = b.txt ]; then echo new > new.txt; fi");
    let run = repo.swarm(&["refactor", "x", ".", "--scope", "any", "--exec", &exec]);
    run.assert_code(1);
    assert!(run.stderr.contains("new.txt"), "{}", run.stderr);
    assert_unchanged(&repo, &before);
}

#[test]
fn a_full_disk_while_writing_the_result_leaves_everything_as_it_was() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let before = checkout_state(&repo);
    // The run's state, where the result's files are staged, is on a 96 KiB file system (in a
    // mount namespace of this command only); task a writes a 512 KiB file.
    std::fs::create_dir_all(repo.path.join(".git/swarm/runs")).unwrap();
    let exec = format!(
        "{SED_FOO_BAR}; if [ \"$SWARM_FILE\" = a.txt ]; then head -c 524288 /dev/zero | tr '\\\\0' y >> a.txt; fi"
    );
    let script = format!(
        "mount -t tmpfs -o size=96k tmpfs .git/swarm/runs && exec {} refactor x . --json --exec '{}'",
        env!("CARGO_BIN_EXE_swarm"),
        exec.replace('\'', "'\\''")
    );
    let mut cmd = Command::new("unshare");
    hermetic(&mut cmd, &repo.home);
    let run = Run::from(
        cmd.args(["-Urm", "sh", "-c", &script])
            .current_dir(&repo.path)
            .output()
            .unwrap(),
    );
    run.assert_code(1);
    assert!(
        run.stderr.contains("cannot write the result"),
        "{}",
        run.stderr
    );
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["into_updated"], false);
    assert_unchanged(&repo, &before);
    // The result is whole on its branch.
    let branch = report["result_branch"].as_str().unwrap();
    assert_eq!(repo.git(&["show", &format!("{branch}:b.txt")]), "bar");
}

#[test]
fn the_hint_merges_when_the_target_moved_during_the_run() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    // While the run goes on, someone commits on main (here: the worker of a, unconfined).
    let exec = format!(
        "if [ \"$SWARM_FILE\" = a.txt ]; then git -C {} commit -q --allow-empty -m moved; fi; {SED_FOO_BAR}",
        repo.path.display()
    );
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-j",
        "1",
        "--sandbox",
        "off",
        "--exec",
        &exec,
    ]);
    run.assert_code(1);
    let report = repo.report(&run);
    let branch = report["result_branch"].as_str().unwrap();
    assert_eq!(report["merge_hint"], format!("git merge {branch}"));
    repo.git(&["merge", "-q", "--no-edit", branch]);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.git(&["log", "-1", "--format=%s", "HEAD^1"]), "moved");
}

#[test]
fn a_sparse_checkout_is_updated_as_git_would() {
    let repo = TestRepo::with_files(&[("src/a.txt", "foo\n"), ("other/o.txt", "foo\n")]);
    repo.git(&["sparse-checkout", "set", "src"]);
    assert!(!repo.path.join("other").exists());
    let run = repo.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert_eq!(repo.read("src/a.txt"), "bar\n");
    assert!(
        !repo.path.join("other").exists(),
        "the sparse checkout was filled"
    );
    assert_eq!(repo.git(&["show", "HEAD:other/o.txt"]), "bar");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    assert_eq!(
        repo.git(&["ls-files", "-t", "other/o.txt"]),
        "S other/o.txt"
    );
}

#[test]
fn a_merge_in_progress_is_refused_before_any_worker_runs() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("x.txt", "base\n")]);
    repo.git(&["checkout", "-q", "-b", "side"]);
    repo.write("x.txt", "side\n");
    repo.commit_all("side");
    repo.git(&["checkout", "-q", "main"]);
    repo.write("x.txt", "main\n");
    repo.commit_all("main");
    let merge = repo.git_cmd().args(["merge", "side"]).output().unwrap();
    assert!(!merge.status.success(), "the merge should conflict");
    let marker = repo.writable_dir().join("ran");
    let exec = format!("touch {}; {SED_FOO_BAR}", marker.display());
    let run = repo.swarm(&["refactor", "x", "a.txt", "--exec", &exec]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("merge is in progress"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--into"), "{}", run.stderr);
    assert!(!marker.exists(), "a worker ran");
    assert!(!repo.swarm_dir().join("runs").exists());
    // Into another branch, the merge in progress does not matter.
    repo.swarm(&[
        "refactor",
        "x",
        "a.txt",
        "--into",
        "elsewhere",
        "--exec",
        &exec,
    ])
    .assert_code(0);
    assert_eq!(repo.git(&["show", "elsewhere:a.txt"]), "bar");
}

#[test]
fn files_under_a_filter_driver_are_refused_or_not_committed() {
    let repo = TestRepo::with_files(&[
        (
            ".gitattributes",
            "*.bin filter=lfs diff=lfs merge=lfs -text\n",
        ),
        (
            "asset.bin",
            "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 3\n",
        ),
        ("a.txt", "foo\n"),
    ]);
    repo.git(&["config", "filter.lfs.clean", "cat"]);
    repo.git(&["config", "filter.lfs.smudge", "cat"]);
    let before = repo.outside();
    // Planning a filtered file: refused, naming the attribute and the path.
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.bin",
        "--exec",
        "echo changed >> \"$SWARM_FILE\"",
    ]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("asset.bin") && run.stderr.contains("filter=lfs"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    before.assert_same(&repo.outside());
    assert!(repo.swarm_branches().is_empty());
    // A worker that changes one anyway (--scope any): that task fails, nothing of it merges.
    let exec = format!("echo changed >> asset.bin; {SED_FOO_BAR}");
    let run = repo.swarm(&["refactor", "x", "a.txt", "--scope", "any", "--exec", &exec]);
    run.assert_code(1);
    let report = repo.report(&run);
    let error = report["tasks"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("asset.bin") && error.contains("filter=lfs"),
        "{error}"
    );
    assert_eq!(repo.read("a.txt"), "foo\n");
    // Without a configured driver, the attribute alone changes nothing (as for git).
    repo.git(&["config", "--unset", "filter.lfs.clean"]);
    repo.git(&["config", "--unset", "filter.lfs.smudge"]);
    repo.swarm(&[
        "refactor",
        "x",
        "*.bin",
        "--exec",
        "echo changed >> \"$SWARM_FILE\"",
    ])
    .assert_code(0);
}

/// A task file edited in the checkout while the run goes on, to the same size and with its
/// old modification time put back, is still seen as changed (its change time and content
/// differ from the index): the target does not move, and the edit stays.
#[test]
fn a_task_file_edited_during_the_run_to_the_same_size_and_time_is_kept() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let (a, old) = (repo.path.join("a.txt"), repo.home.join("a.old"));
    let exec = format!(
        "if [ \"$SWARM_FILE\" = b.txt ]; then cp -p {a} {old} && printf 'fox\\n' > {a} && touch -r {old} {a}; fi; {SED_FOO_BAR}",
        a = a.display(),
        old = old.display()
    );
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-j",
        "1",
        "--sandbox",
        "off",
        "--exec",
        &exec,
    ]);
    run.assert_code(1);
    assert_eq!(repo.read("a.txt"), "fox\n", "the edit is kept");
    let report = repo.report(&run);
    assert_eq!(report["into_updated"], false);
    assert!(run.stderr.contains("a.txt"), "{}", run.stderr);
    let branch = report["result_branch"].as_str().unwrap();
    assert_eq!(repo.git(&["show", &format!("{branch}:a.txt")]), "bar");
}

/// The final update writes each file as `git checkout` would: a file with a line-ending
/// attribute gets its filter (CRLF here), a file with none gets its blob as it is.
#[test]
fn the_final_update_applies_checkout_filters_where_attributes_ask_for_them() {
    let repo = TestRepo::with_files(&[
        (".gitattributes", "*.crlf text eol=crlf\n"),
        ("a.crlf", "foo\n"),
        ("b.txt", "foo\n"),
    ]);
    repo.swarm(&["refactor", "x", "a.crlf", "b.txt", "--exec", SED_FOO_BAR])
        .assert_code(0);
    assert_eq!(repo.read("a.crlf"), "bar\r\n");
    assert_eq!(repo.read("b.txt"), "bar\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    // And the commit took the file in as `git add` would: its line endings normalized by
    // the attributes the view's base checkout holds.
    let blob = repo
        .git_cmd()
        .args(["cat-file", "blob", "HEAD:a.crlf"])
        .output()
        .unwrap();
    assert_eq!(blob.stdout, b"bar\n");
}
