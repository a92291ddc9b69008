//! The merge train: conflicts and their policies, scope, the three-way path, and a target
//! that cannot be moved safely.

use crate::common::{TestRepo, count, statuses, task_of};

/// Every task appends a line naming its file to one shared CHANGES file.
const APPEND_TO_SHARED: &str =
    r#"sed -i s/foo/bar/ "$SWARM_FILE" && echo "changed $SWARM_FILE" >> CHANGES"#;

fn shared_file_repo() -> TestRepo {
    TestRepo::with_files(&[
        ("CHANGES", "# changes\n"),
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("c.txt", "foo\n"),
        ("d.txt", "foo\n"),
    ])
}

/// Every `*.txt` task of [`shared_file_repo`] appends to `CHANGES`, at `-j jobs`, with
/// `--on-conflict` `policy` (the default when `None`).
fn append_to_shared(repo: &TestRepo, jobs: &str, policy: Option<&str>) -> crate::common::Run {
    let mut args = vec!["refactor", "x", "*.txt", "-j", jobs, "--scope", "any"];
    if let Some(policy) = policy {
        args.extend(["--on-conflict", policy]);
    }
    args.extend(["--exec", APPEND_TO_SHARED]);
    repo.swarm(&args)
}

/// Every task's file was renamed, and its line is in `CHANGES` once.
fn assert_each_appended_once(repo: &TestRepo) {
    let changes = repo.read("CHANGES");
    for f in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        assert_eq!(
            changes.matches(&format!("changed {f}\n")).count(),
            1,
            "{changes}"
        );
        assert_eq!(repo.read(f), "bar\n");
    }
}

#[test]
fn retry_resolves_tasks_that_all_append_to_one_file() {
    let repo = shared_file_repo();
    let run = append_to_shared(&repo, "4", None);
    run.assert_code(0);
    assert_each_appended_once(&repo);
    let report = repo.report(&run);
    assert!(statuses(&report).iter().all(|(_, s)| s == "merged"));
    let retried = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["attempts"] == 2)
        .count();
    assert!(
        retried >= 1,
        "at -j 4 the appends conflict, so some task was retried"
    );
    // The retries are said, in the totals and the summary.
    assert_eq!(report["totals"]["retried"], retried as u64);
    assert!(
        run.stderr
            .contains(&format!("4 merged ({retried} after a retry)")),
        "{}",
        run.stderr
    );
    repo.assert_clean_after_run();
}

#[test]
fn on_conflict_skip_keeps_the_branch_unmerged() {
    let repo = shared_file_repo();
    let run = append_to_shared(&repo, "1", Some("skip"));
    // At -j 1 each task starts from the base, so every task after the first conflicts.
    run.assert_code(1);
    let report = repo.report(&run);
    let s = statuses(&report);
    assert_eq!(count(&s, "merged"), 1, "{s:?}");
    assert_eq!(count(&s, "conflict"), 3, "{s:?}");
    assert_eq!(
        repo.swarm_branches().len(),
        3,
        "conflicted branches are kept"
    );
    assert_eq!(repo.worktrees().len(), 1);
    assert_eq!(repo.read("CHANGES").lines().count(), 2);
    assert!(run.stderr.contains("conflict"), "{}", run.stderr);
}

/// At `-j 1` tasks come to the merge thread one by one; at `-j 4` they finish together and
/// are merged in one batch. Either way nothing after the first conflict is tried, not even a
/// task handed over before the conflict was known: it is skipped, its branch kept.
#[test]
fn on_conflict_fail_stops_merging() {
    for jobs in ["1", "4"] {
        let repo = shared_file_repo();
        let run = append_to_shared(&repo, jobs, Some("fail"));
        run.assert_code(1);
        let report = repo.report(&run);
        let s = statuses(&report);
        assert_eq!(count(&s, "merged"), 1, "-j {jobs}: {s:?}");
        assert_eq!(count(&s, "conflict"), 1, "-j {jobs}: {s:?}");
        assert_eq!(count(&s, "skipped"), 2, "-j {jobs}: {s:?}");
        for task in report["tasks"].as_array().unwrap() {
            if task["status"] == "skipped" && task["commit"].is_string() {
                let error = task["error"].as_str().unwrap();
                assert!(error.starts_with("not merged: merging stopped"), "{error}");
                assert_eq!(task["branch_kept"], true, "{task}");
            }
        }
        // What merged before the conflict is on the target.
        assert_eq!(repo.read("CHANGES").lines().count(), 2);
    }
}

#[test]
fn out_of_scope_changes_never_merge() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("README", "readme\n"),
    ]);
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; if [ "$SWARM_FILE" = b.txt ]; then echo hacked >> README; touch new-file; fi"#;
    let run = repo.swarm(&["refactor", "x", "*.txt", "--exec", exec]);
    run.assert_code(1);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(
        repo.read("b.txt"),
        "foo\n",
        "nothing of the failed task merges"
    );
    assert_eq!(repo.read("README"), "readme\n");
    assert!(!repo.path.join("new-file").exists());
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "failed");
    let error = b["error"].as_str().unwrap();
    assert!(
        error.contains("README") && error.contains("new-file"),
        "{error}"
    );
    assert!(error.contains("--scope any"), "{error}");
    // The failed task's branch is kept with its work, for inspection.
    let branch = b["branch"].as_str().unwrap();
    assert_eq!(
        repo.git(&["show", &format!("{branch}:README")]),
        "readme\nhacked"
    );
}

#[test]
fn overlapping_edits_merge_three_way() {
    // Two tasks edit different lines of one shared file (scope any): the second merge needs a
    // real three-way merge, and must equal git's.
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("shared", "line a\n\n\n\n\n\n\n\nline b\n"),
    ]);
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; l=${SWARM_FILE%.txt}; sed -i "s/^line $l\$/LINE $l/" shared"#;
    let run = repo.swarm(&[
        "refactor", "x", "*.txt", "-j", "2", "--scope", "any", "--exec", exec,
    ]);
    run.assert_code(0);
    assert_eq!(repo.read("shared"), "LINE a\n\n\n\n\n\n\n\nLINE b\n");
    let events = repo.run_file(&run.run_id(), "events.jsonl");
    assert!(events.contains("\"fast_path\":false"), "{events}");
    assert!(events.contains("\"fast_path\":true"), "{events}");
}

#[test]
fn target_that_cannot_be_updated_safely_keeps_the_result_on_a_branch() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    // The task creates a file that exists untracked in the user's checkout.
    repo.write("generated.txt", "the user's own\n");
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; echo swarm > generated.txt"#;
    let run = repo.swarm(&["refactor", "x", "a.txt", "--scope", "any", "--exec", exec]);
    run.assert_code(1);
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head, "main did not move");
    assert_eq!(repo.read("generated.txt"), "the user's own\n");
    assert_eq!(repo.read("a.txt"), "foo\n");
    let report = repo.report(&run);
    let branch = format!("swarm/{}/result", run.run_id());
    assert_eq!(report["result_branch"], branch.as_str());
    assert_eq!(report["into_updated"], false);
    assert_eq!(repo.git(&["show", &format!("{branch}:a.txt")]), "bar");
    assert!(run.stderr.contains(&branch), "{}", run.stderr);
    assert!(run.stderr.contains("git merge"), "{}", run.stderr);
    assert_eq!(repo.worktrees().len(), 1);
}

#[test]
fn merging_overlaps_the_workers_still_running() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("slow.txt", "foo\n"),
    ]);
    let exec = r#"[ "$SWARM_FILE" = slow.txt ] && sleep 2; sed -i s/foo/bar/ "$SWARM_FILE""#;
    let run = repo.swarm(&["refactor", "x", ".", "-j", "3", "--exec", exec]);
    run.assert_code(0);
    let kinds: Vec<(String, String)> = repo
        .events(&run)
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["task"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let slow_done = kinds
        .iter()
        .position(|(k, t)| k == "task_finished" && t.starts_with("slow-txt"))
        .unwrap();
    let merges_before = kinds[..slow_done]
        .iter()
        .filter(|(k, _)| k == "merged")
        .count();
    assert_eq!(
        merges_before, 2,
        "the quick tasks merged while the slow one ran: {kinds:?}"
    );
}

/// `--atomic`: the target moves only if every task merged; otherwise the merged result waits
/// on the result branch, and swarm says why.
#[test]
fn atomic_keeps_the_target_unless_every_task_merged() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let exec = r#"[ "$SWARM_FILE" != b.txt ] || exit 1; sed -i s/foo/bar/ "$SWARM_FILE""#;
    let run = repo.swarm(&["refactor", "x", "*.txt", "--atomic", "--exec", exec]);
    run.assert_code(1);
    assert_eq!(repo.git(&["rev-parse", "main"]), base, "the target moved");
    assert_eq!(repo.read("a.txt"), "foo\n");
    let report = repo.report(&run);
    assert_eq!(report["into_updated"], false);
    let branch = report["result_branch"].as_str().unwrap();
    assert_eq!(repo.git(&["show", &format!("{branch}:a.txt")]), "bar");
    assert!(
        run.stderr
            .contains("--atomic: 1 of 2 task(s) did not merge (1 failed)"),
        "{}",
        run.stderr
    );

    // Every task merged: the target moves as usual.
    let run = repo.swarm(&["refactor", "y", "*.txt", "--atomic", "--exec", SED_ONE_FILE]);
    run.assert_code(0);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "bar\n");
}

const SED_ONE_FILE: &str = r#"sed -i s/foo/bar/ "$SWARM_FILE""#;

/// With `--best-of 2`, a task whose winner conflicts is run again on the merged result as
/// that winner (its branch, its number), and every task merges; no candidate branch is left.
#[test]
fn a_winning_candidate_that_conflicts_is_retried_as_itself() {
    let repo = shared_file_repo();
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.txt",
        "-j",
        "2",
        "--scope",
        "any",
        "--best-of",
        "2",
        "--exec",
        APPEND_TO_SHARED,
    ]);
    run.assert_code(0);
    assert_each_appended_once(&repo);
    let report = repo.report(&run);
    assert!(statuses(&report).iter().all(|(_, s)| s == "merged"));
    let retried: Vec<&serde_json::Value> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["attempts"] == 2)
        .collect();
    assert!(!retried.is_empty(), "at -j 2 the appends conflict");
    // The retry ran as the winner: a third task_started of the task, with its number.
    let events = repo.events(&run);
    for t in retried {
        let winner = &t["selection"]["winner"];
        let again = events
            .iter()
            .filter(|e| e["kind"] == "task_started" && e["task"] == t["id"] && e["attempt"] == 2)
            .collect::<Vec<_>>();
        assert_eq!(again.len(), 1, "{t}");
        assert_eq!(&again[0]["candidate"], winner, "{t}");
    }
    repo.assert_clean_after_run();
}
