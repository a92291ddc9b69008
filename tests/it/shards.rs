//! Scale-out: `swarm plan`, shards run by `swarm run` in separate clones that push to a
//! remote, and `swarm merge PLAN.json` in another clone.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Run, SED_FOO_BAR, TestRepo, count, hermetic, statuses};

/// A fresh clone of `remote`, as a CI job would have.
fn clone(repo: &TestRepo, remote: &Path, name: &str) -> PathBuf {
    let dir = repo.home.join(name);
    let out = repo
        .git_cmd()
        .args(["clone", "-q"])
        .arg(remote)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn swarm_in(repo: &TestRepo, dir: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_swarm"));
    hermetic(&mut cmd, &repo.home);
    Run::from(cmd.current_dir(dir).args(args).output().unwrap())
}

fn git_in(repo: &TestRepo, dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    hermetic(&mut cmd, &repo.home);
    let out = cmd.current_dir(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The report of the plan's run in the clone at `dir`.
fn report_in(dir: &Path, plan: &serde_json::Value) -> serde_json::Value {
    let path = dir
        .join(".git/swarm/runs")
        .join(plan["run_id"].as_str().unwrap())
        .join("report.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn seven_files() -> TestRepo {
    TestRepo::with_files(&[
        ("f1.txt", "foo 1\n"),
        ("f2.txt", "foo 2\n"),
        ("f3.txt", "foo 3\n"),
        ("f4.txt", "foo 4\n"),
        ("f5.txt", "foo 5\n"),
        ("f6.txt", "no match\n"),
        ("f7.txt", "foo 7\n"),
    ])
}

fn write_plan(repo: &TestRepo) -> (PathBuf, serde_json::Value) {
    let plan = repo.home.join("plan.json");
    let made = repo.swarm(&[
        "plan",
        "foo to bar",
        "*.txt",
        "--exec",
        SED_FOO_BAR,
        "-o",
        plan.to_str().unwrap(),
    ]);
    made.assert_code(0);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    (plan, json)
}

#[test]
fn two_shards_in_two_clones_merge_in_a_third_as_on_one_machine() {
    let repo = seven_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let remote = repo.bare_remote();
    let (plan, json) = write_plan(&repo);
    // Self-contained: base, tasks with ids and files, the instruction, the worker.
    assert_eq!(json["base"], base);
    assert_eq!(json["tasks"].as_array().unwrap().len(), 7);
    assert_eq!(json["instruction"], "foo to bar");
    assert_eq!(json["settings"]["run"]["exec"], SED_FOO_BAR);
    // Writing a plan changes nothing in the repository.
    assert!(repo.swarm_branches().is_empty());
    let plan = plan.to_str().unwrap();

    for (k, name) in [("1/2", "shard1"), ("2/2", "shard2")] {
        let dir = clone(&repo, &remote, name);
        let run = swarm_in(
            &repo,
            &dir,
            &["run", plan, "--shard", k, "--push", "origin"],
        );
        run.assert_code(0);
        assert_eq!(
            git_in(&repo, &dir, &["rev-parse", "main"]),
            base,
            "a shard merges nothing"
        );
        // Said as what comes next, not as a failure to merge.
        assert!(!run.stderr.contains("nothing merged"), "{}", run.stderr);
        assert!(
            run.stderr.contains("merge every shard with: swarm merge"),
            "{}",
            run.stderr
        );
    }
    let merger = clone(&repo, &remote, "merge");
    let merged = swarm_in(
        &repo,
        &merger,
        &["merge", plan, "--fetch", "origin", "--push", "origin"],
    );
    merged.assert_code(0);

    // The same result as one machine: swarm refactor in the original repository.
    let single = repo.swarm(&[
        "refactor",
        "foo to bar",
        "*.txt",
        "-y",
        "--exec",
        SED_FOO_BAR,
    ]);
    single.assert_code(0);
    let tree = git_in(&repo, &merger, &["rev-parse", "main^{tree}"]);
    assert_eq!(tree, repo.git(&["rev-parse", "main^{tree}"]));
    assert_eq!(
        git_in(
            &repo,
            &merger,
            &["rev-list", "--merges", "--count", &format!("{base}..main")]
        ),
        "6"
    );
    // The shard records carried the task that needed no change.
    let report = report_in(&merger, &json);
    let st = statuses(&report);
    assert_eq!(count(&st, "merged"), 6, "{st:?}");
    assert_eq!(count(&st, "no_change"), 1, "{st:?}");
    // --push sent the result, and took the merged branches and the records off the remote.
    assert_eq!(
        git_in(&repo, &remote, &["rev-parse", "main"]),
        git_in(&repo, &merger, &["rev-parse", "main"])
    );
    assert_eq!(
        git_in(&repo, &remote, &["branch", "--list", "swarm/*"]),
        "",
        "{}",
        merged.stderr
    );
    assert!(
        merged
            .stderr
            .contains("removed 8 merged branch(es) of the run from origin"),
        "{}",
        merged.stderr
    );
    // Nothing of swarm is left in the merging clone.
    assert_eq!(
        git_in(&repo, &merger, &["branch", "--list", "swarm/*"]),
        "",
        "merged branches and shard records are removed"
    );
}

#[test]
fn merge_push_takes_only_merged_branches_off_the_remote() {
    let repo = seven_files();
    let remote = repo.bare_remote();
    let plan = repo.home.join("plan.json");
    // f1's and f2's workers both create CHANGES: whichever merges second conflicts, and
    // `skip` keeps its branch.
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; case "$SWARM_FILE" in f1.txt|f2.txt) echo "$SWARM_FILE" > CHANGES;; esac"#;
    repo.swarm(&[
        "plan",
        "x",
        "*.txt",
        "--scope",
        "any",
        "--on-conflict",
        "skip",
        "--exec",
        exec,
        "-o",
        plan.to_str().unwrap(),
    ])
    .assert_code(0);
    let plan = plan.to_str().unwrap();
    let dir = clone(&repo, &remote, "shard");
    swarm_in(&repo, &dir, &["run", plan, "--push", "origin"]).assert_code(0);
    let merger = clone(&repo, &remote, "merge");
    let merged = swarm_in(
        &repo,
        &merger,
        &["merge", plan, "--fetch", "origin", "--push", "origin"],
    );
    merged.assert_code(1);
    let left = git_in(&repo, &remote, &["branch", "--list", "swarm/*"]);
    let left: Vec<&str> = left.lines().map(str::trim).collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0].contains("/f1-txt-") || left[0].contains("/f2-txt-"),
        "{left:?}"
    );
}

#[test]
fn a_missing_shard_is_reported_and_the_rest_merges() {
    let repo = seven_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let remote = repo.bare_remote();
    let (plan, json) = write_plan(&repo);
    let plan = plan.to_str().unwrap();
    let dir = clone(&repo, &remote, "shard1");
    swarm_in(
        &repo,
        &dir,
        &["run", plan, "--shard", "1/2", "--push", "origin"],
    )
    .assert_code(0);
    // Shard 2/2 never ran.
    let merger = clone(&repo, &remote, "merge");
    let merged = swarm_in(&repo, &merger, &["merge", plan, "--fetch", "origin"]);
    merged.assert_code(1);
    assert!(merged.stderr.contains("3 missing"), "{}", merged.stderr);

    // Shard 1/2 holds the tasks at positions 1, 3, 5, 7 of the plan.
    let tasks = json["tasks"].as_array().unwrap();
    let shard1: Vec<&str> = tasks
        .iter()
        .step_by(2)
        .map(|t| t["files"][0].as_str().unwrap())
        .collect();
    assert_eq!(shard1, ["f1.txt", "f3.txt", "f5.txt", "f7.txt"]);
    let oracle = repo.oracle_tree(&base, &shard1, SED_FOO_BAR);
    assert_eq!(
        git_in(&repo, &merger, &["rev-parse", "main^{tree}"]),
        oracle
    );
    let report = report_in(&merger, &json);
    for t in report["tasks"].as_array().unwrap() {
        let file = t["files"][0].as_str().unwrap();
        if shard1.contains(&file) {
            assert_eq!(t["status"], "merged", "{t}");
        } else {
            assert_eq!(t["status"], "skipped", "{t}");
            assert!(t["error"].as_str().unwrap().starts_with("missing"), "{t}");
        }
    }
}

#[test]
fn a_plan_whose_base_is_not_here_is_refused() {
    let repo = seven_files();
    let (plan, _) = write_plan(&repo);
    let other = TestRepo::with_files(&[("x.txt", "x\n")]);
    let run = other.swarm(&["run", plan.to_str().unwrap()]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("is not in this repository"),
        "{}",
        run.stderr
    );
    assert!(!other.swarm_dir().exists());
}

/// `--shard auto` takes the shard from the CI's variables (GitLab's here; the others are
/// unit-tested), and without them is exit 2 with the fix.
#[test]
fn auto_shard_reads_the_ci_and_refuses_without_it() {
    let repo = seven_files();
    let (plan, _) = write_plan(&repo);
    let plan = plan.to_str().unwrap();
    let run = Run::from(
        repo.swarm_cmd()
            .args(["run", plan, "--shard", "auto"])
            .env("CI_NODE_INDEX", "2")
            .env("CI_NODE_TOTAL", "3")
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert!(
        run.stderr.contains("shard 2/3: 2 of the plan's 7 task(s)"),
        "{}",
        run.stderr
    );
    let refused = repo.swarm(&["run", plan, "--shard", "auto"]);
    refused.assert_code(2);
    assert!(
        refused
            .stderr
            .contains("--shard auto: no CI variable says which shard"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("--shard K/N"), "{}", refused.stderr);
}

/// The attack: a plan file edited after `swarm plan` (here, to run another command). `swarm
/// run` says which commands the file runs before running any; on a terminal it asks, and
/// "n" runs nothing; `-y` (as CI passes) runs it, having said so.
#[test]
fn swarm_run_shows_a_plan_files_commands_and_asks_first() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let plan = repo.home.join("plan.json");
    repo.swarm(&[
        "plan",
        "x",
        "--exec",
        SED_FOO_BAR,
        "-o",
        plan.to_str().unwrap(),
    ])
    .assert_code(0);
    let other = r#"sed -i 's/foo/edited/' "$SWARM_FILE""#;
    let edited = std::fs::read_to_string(&plan).unwrap().replace(
        &serde_json::to_string(SED_FOO_BAR).unwrap(),
        &serde_json::to_string(other).unwrap(),
    );
    std::fs::write(&plan, edited).unwrap();

    let run = crate::common::swarm_on_a_terminal(&repo, &["run", plan.to_str().unwrap()], "n\n");
    run.assert_code(0);
    let shown = format!("exec: {other}");
    assert!(run.stdout.contains(&shown), "{}", run.stdout);
    assert!(run.stdout.contains("Proceed? [Y/n]"), "{}", run.stdout);
    assert!(run.stdout.contains("nothing done"), "{}", run.stdout);
    assert_eq!(
        repo.lines(&["branch", "--list", "swarm/*"]),
        Vec::<String>::new()
    );
    assert_eq!(repo.read("a.txt"), "foo\n");

    let run = repo.swarm(&["run", plan.to_str().unwrap(), "-y"]);
    run.assert_code(0);
    assert!(run.stderr.contains(&shown), "{}", run.stderr);
    let report = repo.report(&run);
    let branch = report["tasks"][0]["branch"].as_str().unwrap();
    assert_eq!(repo.git(&["show", &format!("{branch}:a.txt")]), "edited");
}

/// A run another swarm process holds is the user's to wait for, whichever command finds it
/// held and whenever: exit 2 with a hint, never swarm's own failure (exit 3), and nothing
/// changed.
#[test]
fn a_run_held_by_another_process_is_refused_with_exit_2() {
    use std::os::fd::AsRawFd as _;
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let plan = repo.home.join("plan.json");
    repo.swarm(&[
        "plan",
        "x",
        "--exec",
        SED_FOO_BAR,
        "-o",
        plan.to_str().unwrap(),
    ])
    .assert_code(0);
    let text = std::fs::read_to_string(&plan).unwrap();
    let run_id = serde_json::from_str::<serde_json::Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // This test is the other process: it holds the run's lock as a running swarm would.
    let run_dir = repo.swarm_dir().join("runs").join(&run_id);
    std::fs::create_dir_all(&run_dir).unwrap();
    let lock = std::fs::File::create(run_dir.join("lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let run = repo.swarm(&["run", plan.to_str().unwrap(), "-y"]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("still running in another swarm process"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hint: "), "{}", run.stderr);
    assert_eq!(repo.read("a.txt"), "foo\n");
    assert_eq!(
        repo.lines(&["branch", "--list", "swarm/*"]),
        Vec::<String>::new()
    );
    drop(lock);
    // Free again, the same plan runs.
    repo.swarm(&["run", plan.to_str().unwrap(), "-y"])
        .assert_code(0);
}

/// Shards of a plan with `--best-of 2`: each shard chooses its tasks' winners, pushes their
/// branches (`swarm/<RUN>/<TASK>/c<K>`) with its record, and the merge brings in each winner.
#[test]
fn shards_of_a_best_of_plan_merge_each_tasks_winner() {
    let repo = seven_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let remote = repo.bare_remote();
    let plan = repo.home.join("plan.json");
    // Candidate 1 breaks its file (the check catches it); candidate 2 renames.
    let flaky = r#"if [ "$SWARM_CANDIDATE" = 1 ]; then echo broken > "$SWARM_FILE"; else sed -i s/foo/bar/ "$SWARM_FILE"; fi"#;
    repo.swarm(&[
        "plan",
        "foo to bar",
        "*.txt",
        "--grep",
        "foo",
        "--exec",
        flaky,
        "--verify",
        "! grep -q broken *.txt",
        "--best-of",
        "2",
        "-o",
        plan.to_str().unwrap(),
    ])
    .assert_code(0);
    let plan = plan.to_str().unwrap();
    for (k, name) in [("1/2", "shard1"), ("2/2", "shard2")] {
        let dir = clone(&repo, &remote, name);
        swarm_in(
            &repo,
            &dir,
            &["run", plan, "--shard", k, "--push", "origin"],
        )
        .assert_code(0);
    }
    let merger = clone(&repo, &remote, "merge");
    let merged = swarm_in(&repo, &merger, &["merge", plan, "--fetch", "origin"]);
    merged.assert_code(0);
    for f in ["f1.txt", "f2.txt", "f3.txt", "f4.txt", "f5.txt", "f7.txt"] {
        let text = git_in(&repo, &merger, &["show", &format!("main:{f}")]);
        assert!(text.starts_with("bar "), "{f}: {text}");
    }
    assert_eq!(
        git_in(
            &repo,
            &merger,
            &["rev-list", "--merges", "--count", &format!("{base}..main")]
        ),
        "6"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(plan).unwrap()).unwrap();
    let report = report_in(&merger, &json);
    for t in report["tasks"].as_array().unwrap() {
        assert_eq!(t["status"], "merged", "{t}");
        assert_eq!(t["selection"]["winner"], 2, "{t}");
    }
}
