//! Interruption and crash recovery: Ctrl-C, `kill -9`, `swarm resume`, and runs in progress
//! left alone.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Run, TestRepo};

const FILES: [&str; 4] = ["a.txt", "b.txt", "c.txt", "d.txt"];

fn repo() -> TestRepo {
    TestRepo::with_files(&FILES.map(|f| (f, "foo\n")))
}

/// a.txt is done at once; the others edit, then hang until `$HOME/go` exists. `tag` makes
/// the hanging `sleep` findable, to end the orphans of a killed swarm.
fn worker(tag: &str) -> String {
    format!(
        r#"sed -i s/foo/bar/ "$SWARM_FILE"; [ "$SWARM_FILE" = a.txt ] || [ -e "$HOME/go" ] || exec sleep {tag}"#
    )
}

fn start(repo: &TestRepo, tag: &str) -> Child {
    repo.swarm_cmd()
        .args(["refactor", "x", ".", "-j", "4", "--exec", &worker(tag)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the run has merged a task; returns the run id.
fn wait_for_a_merge(repo: &TestRepo) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(Ok(entry)) = std::fs::read_dir(repo.swarm_dir().join("runs"))
            .ok()
            .and_then(|mut d| d.next())
        {
            let events =
                std::fs::read_to_string(entry.path().join("events.jsonl")).unwrap_or_default();
            if events.contains("\"kind\":\"merged\"") {
                return entry.file_name().to_string_lossy().into_owned();
            }
        }
        assert!(Instant::now() < deadline, "no task merged");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many worktrees (the checkout included) a run holds once all four tasks started: the
/// checkout, the worktrees the tasks started in (a.txt's may have been lent again before
/// d.txt started), and with overlay worktrees the base checkout they share (the report
/// says which the run used).
fn run_worktrees(repo: &TestRepo, id: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = loop {
        let events = repo.run_file(id, "events.jsonl");
        let started: Vec<serde_json::Value> = events
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"] == "task_started")
            .collect();
        if started.len() == FILES.len() {
            break started;
        }
        assert!(Instant::now() < deadline, "not every task started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let used: std::collections::BTreeSet<&str> = started
        .iter()
        .map(|e| e["worktree"].as_str().unwrap())
        .collect();
    let report: serde_json::Value =
        serde_json::from_str(&repo.run_file(id, "report.json")).unwrap();
    let base = match report["worktrees"].as_str() {
        Some("overlay") => 1,
        Some("pool") => 0,
        other => panic!("the report does not say which worktrees the run used: {other:?}"),
    };
    1 + base + used.len()
}

fn wait_for_worktrees(repo: &TestRepo, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while repo.worktrees().len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} worktrees",
            repo.worktrees().len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_finished_like_an_uninterrupted_run(repo: &TestRepo, base: &str) {
    let oracle = repo.oracle_tree(base, &FILES, r#"sed -i s/foo/bar/ "$SWARM_FILE""#);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
    assert_eq!(
        repo.lines(&["rev-list", "--merges", &format!("{base}..main")])
            .len(),
        4
    );
    for f in FILES {
        assert_eq!(repo.read(f), "bar\n");
    }
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    repo.assert_clean_after_run();
}

#[test]
fn ctrl_c_then_resume_reaches_the_same_tree() {
    let repo = repo();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let child = start(&repo, "61.1");
    let id = wait_for_a_merge(&repo);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let run = Run::from(child.wait_with_output().unwrap());
    run.assert_code(130);
    assert!(
        run.stderr
            .contains(&format!("finish it with: swarm resume {id}")),
        "{}",
        run.stderr
    );
    // Interrupted tasks are counted as such, not as failed or skipped.
    let report: serde_json::Value =
        serde_json::from_str(&repo.run_file(&id, "report.json")).unwrap();
    let totals = &report["totals"];
    assert_eq!(totals["failed"], 0, "{totals}");
    assert_eq!(totals["skipped"], 0, "{totals}");
    assert!(
        totals["interrupted"].as_u64().unwrap() + totals["unfinished"].as_u64().unwrap() >= 1,
        "{totals}"
    );
    assert_eq!(
        repo.worktrees().len(),
        1,
        "worktrees removed at the interrupt"
    );
    assert_eq!(
        repo.git(&["rev-parse", "main"]),
        base,
        "the target does not move"
    );
    let status = repo.swarm(&["status"]);
    assert!(
        status.stdout.contains(&id) && status.stdout.contains("interrupted"),
        "{}",
        status.stdout
    );
    assert!(!status.stdout.contains("failed"), "{}", status.stdout);

    std::fs::write(repo.home.join("go"), "").unwrap();
    let resumed = repo.swarm(&["resume", &id]);
    resumed.assert_code(0);
    assert!(
        resumed.stderr.contains("resuming 3 task(s) of 4"),
        "{}",
        resumed.stderr
    );
    assert_finished_like_an_uninterrupted_run(&repo, &base);
    assert_eq!(repo.report(&resumed)["state"], "finished");
    // Nothing is left to do.
    repo.swarm(&["resume", &id]).assert_code(0);
}

#[test]
fn kill_9_shows_as_interrupted_and_resume_finishes() {
    let repo = repo();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let mut child = start(&repo, "61.2");
    let id = wait_for_a_merge(&repo);
    let n = run_worktrees(&repo, &id);
    wait_for_worktrees(&repo, n);
    std::thread::sleep(Duration::from_millis(1200)); // the report is saved at most once a second
    child.kill().unwrap(); // SIGKILL: no cleanup at all
    child.wait().unwrap();
    let _ = std::process::Command::new("pkill")
        .args(["-f", "sleep 61.2"])
        .status();
    assert_eq!(
        repo.worktrees().len(),
        n,
        "a killed swarm leaves its worktrees"
    );

    let status = repo.swarm(&["status"]);
    status.assert_code(0);
    let line = status
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap()
        .to_string();
    assert!(
        line.contains("interrupted") && !line.contains("running"),
        "{line}"
    );
    let one = repo.swarm(&["status", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&one.stdout).unwrap();
    assert_eq!(v["state"], "interrupted");

    std::fs::write(repo.home.join("go"), "").unwrap();
    let resumed = repo.swarm(&["resume", &id]);
    resumed.assert_code(0);
    assert_finished_like_an_uninterrupted_run(&repo, &base);
    // Tasks merged before the kill say what they changed, as those merged after.
    let report = repo.report(&resumed);
    for task in report["tasks"].as_array().unwrap() {
        assert_eq!(task["changed_files"], task["files"], "{task}");
    }
    assert!(
        !resumed.stderr.contains(" 0 file(s) changed"),
        "{}",
        resumed.stderr
    );
}

#[test]
fn a_run_in_progress_is_neither_resumed_nor_cleaned() {
    let repo = repo();
    let child = start(&repo, "61.3");
    let id = wait_for_a_merge(&repo);
    let n = run_worktrees(&repo, &id);
    wait_for_worktrees(&repo, n);
    let resume = repo.swarm(&["resume", &id]);
    resume.assert_code(2);
    assert!(resume.stderr.contains("still running"), "{}", resume.stderr);
    let clean = repo.swarm(&["clean", "--all"]);
    clean.assert_code(0);
    assert!(
        clean.stderr.contains("in progress; left alone"),
        "{}",
        clean.stderr
    );
    assert_eq!(repo.worktrees().len(), n, "its worktrees are still there");
    repo.swarm(&["clean", &id]).assert_code(2);
    let status = repo.swarm(&["status"]);
    assert!(status.stdout.contains("running"), "{}", status.stdout);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    Run::from(child.wait_with_output().unwrap()).assert_code(130);
}

#[test]
fn two_runs_at_once_do_not_step_on_each_other() {
    let repo = TestRepo::with_files(&[
        ("a1.txt", "foo\n"),
        ("a2.txt", "foo\n"),
        ("b1.txt", "foo\n"),
        ("b2.txt", "foo\n"),
    ]);
    let exec = r#"sleep 0.5; sed -i s/foo/bar/ "$SWARM_FILE""#;
    let first = repo
        .swarm_cmd()
        .args(["refactor", "x", "a*.txt", "-j", "2", "--exec", exec])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let second = repo
        .swarm_cmd()
        .args([
            "refactor", "x", "b*.txt", "-j", "2", "--into", "other", "--exec", exec,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first = Run::from(first.wait_with_output().unwrap());
    let second = Run::from(second.wait_with_output().unwrap());
    first.assert_code(0);
    second.assert_code(0);
    assert_ne!(first.run_id(), second.run_id());
    // Shown if an assertion below fails.
    println!(
        "first run:\n{}\nsecond run:\n{}",
        first.stderr, second.stderr
    );
    assert_eq!(repo.git(&["show", "main:a1.txt"]), "bar");
    assert_eq!(repo.git(&["show", "main:b1.txt"]), "foo");
    assert_eq!(repo.git(&["show", "other:b2.txt"]), "bar");
    assert_eq!(repo.git(&["show", "other:a2.txt"]), "foo");
    repo.assert_clean_after_run();
}

#[test]
fn sigterm_is_an_interruption_too() {
    let repo = repo();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let child = start(&repo, "61.4");
    let id = wait_for_a_merge(&repo);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let run = Run::from(child.wait_with_output().unwrap());
    run.assert_code(130);
    assert_eq!(repo.worktrees().len(), 1);
    std::fs::write(repo.home.join("go"), "").unwrap();
    repo.swarm(&["resume", &id]).assert_code(0);
    assert_finished_like_an_uninterrupted_run(&repo, &base);
}

/// A finished run that merged some tasks moved the target; running its failed tasks again
/// continues from there: the target fast-forwards to a result holding every task, and a
/// second attempt that merges nothing new leaves it where it is.
#[test]
fn resume_failed_continues_from_the_target_the_run_moved() {
    let repo = repo();
    let base = repo.git(&["rev-parse", "main"]);
    let marker = repo.root().join("fail-b");
    std::fs::write(&marker, "").unwrap();
    let exec = format!(
        r#"test -e '{}' && test "$SWARM_FILE" = b.txt && exit 1; sed -i s/foo/bar/ "$SWARM_FILE""#,
        marker.display()
    );
    let first = repo.swarm(&["refactor", "x", ".", "--exec", &exec]);
    first.assert_code(1);
    let id = first.run_id();
    let partial = repo.git(&["rev-parse", "main"]);
    assert_ne!(partial, base);
    assert_eq!(repo.read("b.txt"), "foo\n");

    // b.txt still fails: nothing new is merged, main stays at the partial result.
    repo.swarm(&["resume", &id, "--failed"]).assert_code(1);
    assert_eq!(repo.git(&["rev-parse", "main"]), partial);
    assert_eq!(repo.report(&first)["into_updated"], true);

    std::fs::remove_file(&marker).unwrap();
    let last = repo.swarm(&["resume", &id, "--failed"]);
    last.assert_code(0);
    assert!(last.stderr.contains("main is now at"), "{}", last.stderr);
    // A fast-forward from the partial result: nothing the first attempt delivered is lost.
    repo.git(&["merge-base", "--is-ancestor", &partial, "main"]);
    assert_finished_like_an_uninterrupted_run(&repo, &base);
    assert_eq!(repo.report(&first)["into_updated"], true);
}

/// A repository of `n` files `f0000.txt`… holding `foo`.
fn many_files(n: usize) -> TestRepo {
    let files: Vec<(String, &str)> = (0..n).map(|i| (format!("f{i:04}.txt"), "foo\n")).collect();
    TestRepo::with_files(&files)
}

/// Starts a run whose one task changes all `n` files, and kills it with `kill -9` once the
/// final update has put the first new file into the checkout (half way through its swap).
/// Returns the run id.
fn kill_during_the_final_update(repo: &TestRepo, n: usize) -> String {
    let mut child = repo
        .swarm_cmd()
        .args(["refactor", "x", "f0000.txt", "-y", "--scope", "any"])
        .args(["--exec", "sed -i s/foo/bar/ *.txt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = repo.path.join("f0000.txt");
    let started = Instant::now();
    loop {
        if std::fs::read_to_string(&first).is_ok_and(|s| s == "bar\n") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60) && child.try_wait().unwrap().is_none(),
            "the run ended before its update could be cut off"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let lock = repo.path.join(".git/index.lock");
    assert!(lock.exists(), "killed after the update ended");
    // The old files are moved aside first, then the new ones put in place: the last one is
    // not in place yet.
    let last = std::fs::read_to_string(repo.path.join(format!("f{:04}.txt", n - 1)));
    assert!(
        last.is_err(),
        "killed after the swap ended, not half way: {last:?}"
    );
    let runs = std::fs::read_dir(repo.swarm_dir().join("runs")).unwrap();
    runs.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .next()
        .unwrap()
}

/// `kill -9` half way through moving the user's checkout: `resume` undoes the half update,
/// removes the lock the killed process held, and moves the checkout to the result whole.
#[test]
fn a_checkout_update_cut_off_by_kill_9_is_undone_then_resumed() {
    let n = 3000;
    let repo = many_files(n);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let id = kill_during_the_final_update(&repo, n);
    let run = repo.swarm(&["resume", &id]);
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("undid an update of your checkout that a kill cut off"),
        "{}",
        run.stderr
    );
    assert!(!repo.path.join(".git/index.lock").exists());
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    assert_eq!(repo.git(&["rev-parse", "HEAD~1"]), base);
    for i in [0, n / 2, n - 1] {
        assert_eq!(repo.read(&format!("f{i:04}.txt")), "bar\n");
    }
}

/// The same cut, then `swarm clean`: the checkout is back as it was before the run.
#[test]
fn a_checkout_update_cut_off_by_kill_9_is_undone_by_clean() {
    let n = 3000;
    let repo = many_files(n);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let id = kill_during_the_final_update(&repo, n);
    let run = repo.swarm(&["clean", &id]);
    run.assert_code(0);
    assert!(run.stderr.contains("undid an update"), "{}", run.stderr);
    assert!(!repo.path.join(".git/index.lock").exists());
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), base);
    for i in [0, n / 2, n - 1] {
        assert_eq!(repo.read(&format!("f{i:04}.txt")), "foo\n");
    }
}

/// A run killed between writing its plan and its first report: nothing to resume, said with
/// the fix (exit 2); `-y`, which scripts pass to every command, is accepted.
#[test]
fn a_run_killed_before_its_first_report_says_what_to_do() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = repo.swarm(&["refactor", "x", ".", "--dry-run", "--exec", "true"]);
    run.assert_code(0);
    let id = run.run_id();
    std::fs::remove_file(repo.swarm_dir().join("runs").join(&id).join("report.json")).unwrap();
    let run = repo.swarm(&["resume", &id, "-y"]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("was stopped before it started any task")
            && run.stderr.contains(&format!("swarm clean {id}")),
        "{}",
        run.stderr
    );
}

/// `swarm resume RUN --failed FLAG VALUE`, which must succeed and say that the tasks it runs
/// use `FLAG VALUE`.
fn resume_failed_with(repo: &TestRepo, id: &str, flag: &str, value: &str) -> Run {
    let resumed = repo.swarm(&["resume", id, "--failed", flag, value]);
    resumed.assert_code(0);
    let said = format!("the tasks this resume runs use {flag} {value}");
    assert!(resumed.stderr.contains(&said), "{}", resumed.stderr);
    resumed
}

/// The summary's next step for a command that failed, taken: `swarm resume RUN --failed
/// --exec FIXED` runs the failed tasks with the fixed command, and says so; the run's plan
/// keeps its own.
#[test]
fn resume_failed_runs_the_failed_tasks_with_a_corrected_command() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    let broken = r#"[ "$SWARM_FILE" != b.txt ] && sed -i s/foo/bar/ "$SWARM_FILE""#;
    let run = repo.swarm(&["refactor", "x", "*.txt", "--exec", broken]);
    run.assert_code(1);
    let id = run.run_id();
    assert!(
        run.stderr.contains(&format!(
            "swarm resume {id} --failed --exec 'FIXED COMMAND'"
        )),
        "{}",
        run.stderr
    );
    assert_eq!(repo.read("b.txt"), "foo\n");
    let fixed = crate::common::SED_FOO_BAR;
    let resumed = resume_failed_with(&repo, &id, "--exec", fixed);
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(repo.read(f), "bar\n", "{f}");
    }
    let report = repo.report(&resumed);
    assert_eq!(report["totals"]["merged"], 3);
    let plan = repo.run_file(&id, "plan.json");
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["settings"]["run"]["exec"], broken);
}

/// The summary's next step for tasks that changed other files under `--scope task`, taken:
/// the tasks that failed so, whatever files each changed, are one group told of `swarm resume
/// RUN --failed --scope any`, which merges them with those files and says so; the run's plan
/// keeps its own scope.
#[test]
fn resume_failed_with_scope_any_merges_the_tasks_that_changed_other_files() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    // a.txt's and b.txt's workers each also write a file of no task, a different one.
    let notes = r#"sed -i s/foo/bar/ "$SWARM_FILE" && case "$SWARM_FILE" in
        a.txt) echo a > notes-a.md ;; b.txt) echo b > notes-b.md ;; esac"#;
    let run = repo.swarm(&["refactor", "x", "*.txt", "--exec", notes]);
    run.assert_code(1);
    let id = run.run_id();
    assert!(
        run.stderr.contains(
            "2 failed: changed files outside its task: <files> (pass --scope any to allow) \
             (a.txt, b.txt)"
        ) && run
            .stderr
            .contains(&format!("swarm resume {id} --failed --scope any")),
        "{}",
        run.stderr
    );
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "foo");
    let resumed = resume_failed_with(&repo, &id, "--scope", "any");
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(repo.git(&["show", &format!("HEAD:{f}")]), "bar", "{f}");
    }
    assert_eq!(repo.git(&["show", "HEAD:notes-a.md"]), "a");
    assert_eq!(repo.git(&["show", "HEAD:notes-b.md"]), "b");
    assert_eq!(repo.report(&resumed)["totals"]["merged"], 3);
    let plan = repo.run_file(&id, "plan.json");
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_ne!(plan["settings"]["run"]["scope"], "any");
}

/// The summary's next step for a codemod that exits 1 when it rewrote its file (as
/// pyupgrade does), taken: `swarm resume RUN --failed --ok-exit-codes 0,1` merges those
/// tasks, and says so.
#[test]
fn resume_failed_with_ok_exit_codes_merges_the_tasks_whose_status_was_their_success() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let rewrites = r#"sed -i s/foo/bar/ "$SWARM_FILE"; exit 1"#;
    let run = repo.swarm(&["refactor", "x", "*.txt", "--exec", rewrites]);
    run.assert_code(1);
    let id = run.run_id();
    assert!(
        run.stderr
            .contains(&format!("swarm resume {id} --failed --ok-exit-codes 0,1;")),
        "{}",
        run.stderr
    );
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "foo");
    let resumed = resume_failed_with(&repo, &id, "--ok-exit-codes", "0,1");
    for f in ["a.txt", "b.txt"] {
        assert_eq!(repo.git(&["show", &format!("HEAD:{f}")]), "bar", "{f}");
    }
    assert_eq!(repo.report(&resumed)["totals"]["merged"], 2);
}

/// A formatter that names the file it cannot parse, one process a task: the summary tells to
/// fix those files and run the change on them again (or to fix the command); a new run on
/// them, from the commit that fixed them, merges them.
#[test]
fn files_a_formatter_cannot_parse_are_told_to_be_fixed() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo (\n"), ("c.txt", "(\n")]);
    let formatter = r#"if grep -q '($' "$SWARM_FILE"; then
        echo "error: cannot format $SWARM_FILE: Cannot parse: 1:5"; exit 123; fi
        sed -i s/foo/bar/ "$SWARM_FILE""#;
    let run = repo.swarm(&["refactor", "x", "*.txt", "--exec", formatter]);
    run.assert_code(1);
    let id = run.run_id();
    let step = format!(
        "next: each one's output points at its own file (one the command cannot handle, or \
         findings it could not fix): fix those files and run the change on them again (a new \
         run, from the fixed commit), or fix the command, then: swarm resume {id} --failed \
         --exec 'FIXED COMMAND'"
    );
    assert!(run.stderr.contains(&step), "{}", run.stderr);
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "bar");
    repo.write("b.txt", "foo ()\n");
    repo.write("c.txt", "()\n");
    repo.commit_all("fix the files the formatter cannot parse");
    let again = repo.swarm(&["refactor", "x", "b.txt", "c.txt", "--exec", formatter]);
    again.assert_code(0);
    assert_eq!(repo.git(&["show", "HEAD:b.txt"]), "bar ()");
    assert_eq!(repo.report(&again)["totals"]["merged"], 1);
}
