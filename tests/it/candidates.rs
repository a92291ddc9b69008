//! Several candidates per task (`--tries`, `--best-of`): the one that passes and agrees wins,
//! chosen by swarm, and merges as any task's change; the git CLI says what landed.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Run, TestRepo, count, statuses, wait_until};
use crate::fake_model::{FakeModel, Reply, rename_agent, tool_calls};

/// Candidate 1 breaks every file but a.txt (the check catches it); later candidates rename.
const FLAKY: &str = r#"if [ "${SWARM_CANDIDATE:-1}" = 1 ] && [ "$SWARM_FILE" != a.txt ]; then echo broken > "$SWARM_FILE"; else sed -i s/foo/bar/ "$SWARM_FILE"; fi"#;
const CHECK: &str = "! grep -q broken *.txt";

fn three_files() -> TestRepo {
    TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")])
}

fn flaky_run(repo: &TestRepo, extra: &[&str]) -> Run {
    let mut args = vec![
        "refactor", "x", "*.txt", "-j", "3", "--exec", FLAKY, "--verify", CHECK,
    ];
    args.extend_from_slice(extra);
    repo.swarm(&args)
}

/// `swarm refactor x . -j N --best-of N EXTRA --exec EXEC`: N candidates of every task at once.
fn best_of(repo: &TestRepo, n: &str, exec: &str, extra: &[&str]) -> Run {
    let mut args = vec!["refactor", "x", ".", "-j", n, "--best-of", n];
    args.extend_from_slice(extra);
    args.extend(["--exec", exec]);
    repo.swarm(&args)
}

fn task<'a>(report: &'a Value, file: &str) -> &'a Value {
    crate::common::task_of(report, file)
}

#[test]
fn without_candidates_the_first_failure_is_the_tasks() {
    let repo = three_files();
    let run = flaky_run(&repo, &[]);
    run.assert_code(1);
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "failed"), 2);
    assert_eq!(repo.git(&["show", "main:b.txt"]), "foo");
    assert!(task(&report, "b.txt").get("candidates").is_none());
}

#[test]
fn tries_gives_a_failing_task_another_candidate_until_one_passes() {
    let repo = three_files();
    let run = flaky_run(&repo, &["--tries", "3"]);
    run.assert_code(0);
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(repo.git(&["show", &format!("main:{f}")]), "bar", "{f}");
    }
    let report = repo.report(&run);
    // a.txt passed at once: no second candidate ran. b.txt's first failed its check.
    let a = task(&report, "a.txt");
    assert_eq!(a["candidates"].as_array().unwrap().len(), 1, "{a}");
    let b = task(&report, "b.txt");
    let candidates = b["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 2, "{b}");
    assert_eq!(candidates[0]["status"], "failed");
    assert!(
        candidates[0]["error"]
            .as_str()
            .unwrap()
            .contains("--verify")
    );
    assert_eq!(b["selection"]["winner"], 2);
    assert_eq!(b["selection"]["by"], "first_to_pass");
    // The conflict retries stay apart: one attempt each.
    assert_eq!(b["attempts"], 1);
    assert_eq!(report["totals"]["candidates"], 5);
    assert_eq!(report["totals"]["rescued"], 2);
    // The winner's branch merged; no candidate branch is left.
    assert!(
        repo.swarm_branches().is_empty(),
        "{:?}",
        repo.swarm_branches()
    );
    let merged = repo.git(&["log", "--merges", "--format=%s", "main"]);
    assert_eq!(merged.lines().count(), 3, "{merged}");
    assert!(
        run.stderr
            .contains("5 candidates run (2 task(s) needed more than one)"),
        "{}",
        run.stderr
    );
}

#[test]
fn best_of_runs_every_candidate_and_merges_one_that_passes() {
    let repo = three_files();
    let run = flaky_run(&repo, &["--best-of", "3"]);
    run.assert_code(0);
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(repo.git(&["show", &format!("main:{f}")]), "bar", "{f}");
    }
    let report = repo.report(&run);
    let b = task(&report, "b.txt");
    let selection = &b["selection"];
    assert_eq!(selection["winner"], 2, "{b}");
    assert_eq!(selection["by"], "agreement", "{b}");
    assert!(
        selection["steps"][0]
            .as_str()
            .unwrap()
            .contains("not: c1 failed"),
        "{b}"
    );
    // Each candidate started once, on a branch of its own. (A worktree a candidate ended in
    // may serve a later one, as any task's does: that none sees another's is
    // `a_candidate_cannot_see_or_touch_another_candidates_worktree`.)
    let events = repo.events(&run);
    let mut started: Vec<u64> = events
        .iter()
        .filter(|e| e["kind"] == "task_started" && e["task"] == b["id"])
        .map(|e| e["candidate"].as_u64().unwrap())
        .collect();
    started.sort_unstable();
    assert_eq!(started, [1, 2, 3]);
    let branches: std::collections::BTreeSet<&str> = b["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["branch"].as_str().unwrap())
        .collect();
    assert_eq!(branches.len(), 3, "{branches:?}");
}

/// Three candidates pass; two make the same change, the third another: the agreed change
/// merges, and the loser's change is still there to see.
#[test]
fn best_of_merges_the_change_two_of_three_agree_on() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    // The odd one out finishes first, so every candidate finishes before the choice.
    let exec = r#"case $SWARM_CANDIDATE in 3) sed -i s/foo/baz/ "$SWARM_FILE";; *) sleep 0.5; sed -i s/foo/bar/ "$SWARM_FILE";; esac"#;
    let summary = repo.home.join("step-summary.md");
    let run = Run::from(
        repo.swarm_cmd()
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary)
            .args([
                "refactor",
                "x",
                ".",
                "-j",
                "3",
                "--best-of",
                "3",
                "--exec",
                exec,
            ])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "main:a.txt"]), "bar");
    // A CI job's step summary says which won, and by which step.
    let summary = std::fs::read_to_string(&summary).unwrap();
    assert!(summary.contains("(chose c1 of 3: agreement)"), "{summary}");
    let report = repo.report(&run);
    let a = task(&report, "a.txt");
    assert_eq!(a["selection"]["by"], "agreement", "{a}");
    assert_eq!(a["selection"]["winner"], 1, "{a}");
    assert!(
        a["selection"]["steps"][1]
            .as_str()
            .unwrap()
            .contains("c1, c2 made the same change")
    );
    assert!(
        run.stderr.contains("chose c1 (agreement)"),
        "{}",
        run.stderr
    );
    // The loser: `swarm diff --candidate 3` shows its change, though its branch is gone.
    assert!(repo.swarm_branches().is_empty());
    let id = run.run_id();
    let diff = repo.swarm(&["diff", &id, "a-txt", "--candidate", "3"]);
    diff.assert_code(0);
    assert!(diff.stdout.contains("+baz"), "{}", diff.stdout);
    let winner = repo.swarm(&["diff", &id, "a-txt"]);
    assert!(winner.stdout.contains("+bar"), "{}", winner.stdout);
    let none = repo.swarm(&["diff", &id, "a-txt", "--candidate", "4"]);
    none.assert_code(2);
    assert!(
        none.stderr
            .contains("no candidate 4 (its candidates: 1, 2, 3)"),
        "{}",
        none.stderr
    );
    // `swarm status` shows each candidate and why the winner won.
    let status = repo.swarm(&["status", &id]);
    assert!(status.stdout.contains("c3 done"), "{}", status.stdout);
    assert!(status.stdout.contains("← winner"), "{}", status.stdout);
}

/// Two candidates disagree, both pass and are the same size: the judge, a model, picks.
#[test]
fn a_judge_model_picks_between_two_disagreeing_finalists() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    repo.user_config("[model]\nprice = { prompt = 1, completion = 1 }\n");
    let fake = FakeModel::start(|_, _| {
        let mut answer =
            tool_calls(&[("choose", json!({"candidate": 2, "reason": "baz is asked"}))]);
        answer["usage"] = json!({"prompt_tokens": 1000, "completion_tokens": 100});
        Reply::Json(answer)
    });
    let exec = r#"case $SWARM_CANDIDATE in 1) sed -i s/foo/bar/ "$SWARM_FILE";; *) sed -i s/foo/baz/ "$SWARM_FILE";; esac"#;
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", "sk-judge").args([
        "refactor",
        "rename foo to baz",
        ".",
        "-j",
        "2",
        "--best-of",
        "2",
        "--exec",
        exec,
        "--judge-model",
        "judge-1",
        "--base-url",
        &fake.url,
    ]);
    let run = Run::from(cmd.output().unwrap());
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "main:a.txt"]), "baz");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["model"], "judge-1");
    let asked = requests[0].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        asked.contains("rename foo to baz") && asked.contains("+bar") && asked.contains("+baz"),
        "{asked}"
    );
    let report = repo.report(&run);
    let a = task(&report, "a.txt");
    assert_eq!(a["selection"]["by"], "judge", "{a}");
    assert!(
        a["selection"]["steps"].to_string().contains("baz is asked"),
        "{a}"
    );
    // The judge's answer is metered: 1,100 tokens at $1 a million.
    assert!(
        (a["cost_usd"].as_f64().unwrap() - 0.0011).abs() < 1e-9,
        "{a}"
    );
}

/// Every candidate's spend counts against `--max-cost`, and a spent budget stops new
/// candidates: the first task's two candidates spend $3.60, the second task's first brings
/// the run past $4 and no other candidate starts.
#[test]
fn max_cost_counts_every_candidate() {
    let files: Vec<(String, String)> = (0..3)
        .map(|i| {
            (
                format!("src/m{i}.py"),
                format!("def foo_{i}():\n    return foo({i})\n"),
            )
        })
        .collect();
    let repo = TestRepo::with_files(&files);
    repo.user_config("[model]\nprice = { prompt = 100, completion = 100 }\n");
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| {
        let mut answer = agent(req);
        answer["usage"] = json!({"prompt_tokens": 5000, "completion_tokens": 1000});
        Reply::Json(answer)
    });
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", "sk-budget").args([
        "refactor",
        "rename foo to bar",
        "src",
        "-j",
        "1",
        "--best-of",
        "2",
        "--max-cost",
        "4",
        "--max-output-tokens",
        "20",
        "--model",
        "fake-model",
        "--base-url",
        &fake.url,
    ]);
    let run = Run::from(cmd.output().unwrap());
    run.assert_code(1);
    let report = repo.report(&run);
    let s = statuses(&report);
    assert_eq!(count(&s, "merged"), 1, "{s:?}");
    assert_eq!(count(&s, "skipped"), 2, "{s:?}");
    let tasks = report["tasks"].as_array().unwrap();
    let first = tasks.iter().find(|t| t["status"] == "merged").unwrap();
    assert!(
        (first["cost_usd"].as_f64().unwrap() - 3.6).abs() < 1e-9,
        "{first}"
    );
    assert!((report["totals"]["cost_usd"].as_f64().unwrap() - 4.2).abs() < 1e-9);
    assert_eq!(report["totals"]["candidates"], 3, "{report}");
    let merged = first["files"][0].as_str().unwrap();
    let text = repo.git(&["show", &format!("main:{merged}")]);
    assert!(text.contains("bar") && !text.contains("foo"), "{text}");
}

/// `kill -9` once one candidate finished and the other still runs: `swarm resume` runs only
/// the unfinished one, and the task merges.
#[test]
fn a_killed_run_resumes_without_running_finished_candidates_again() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; [ "$SWARM_CANDIDATE" = 1 ] || [ -e "$HOME/go" ] || exec sleep 61.4"#;
    let mut child = repo
        .swarm_cmd()
        .args([
            "refactor",
            "x",
            ".",
            "-j",
            "2",
            "--best-of",
            "2",
            "--exec",
            exec,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let runs = repo.swarm_dir().join("runs");
    let events = || {
        std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| std::fs::read_to_string(e.ok()?.path().join("events.jsonl")).ok())
            .unwrap_or_default()
    };
    wait_until(Duration::from_secs(30), "candidate 1 finished", || {
        events().contains("\"kind\":\"candidate_finished\"")
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::process::Command::new("pkill")
        .args(["-f", "sleep 61.4"])
        .status();
    let id = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let id = id.to_string_lossy().into_owned();
    std::fs::write(repo.home.join("go"), "").unwrap();
    let resumed = repo.swarm(&["resume", &id]);
    resumed.assert_code(0);
    assert_eq!(repo.git(&["show", "main:a.txt"]), "bar");
    let started = |k: u64| {
        events()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["kind"] == "task_started" && e["candidate"] == k)
            .count()
    };
    assert_eq!(started(1), 1, "candidate 1 ran again");
    assert_eq!(started(2), 2);
    let report = repo.report(&resumed);
    assert_eq!(task(&report, "a.txt")["selection"]["by"], "agreement");
}

/// Candidate 1 looks for candidate 2's secret while both run: in its worktree (a note it
/// leaves there meanwhile), its layer, its log, anywhere in swarm's state; and writes into
/// every other worktree it finds. It sees nothing of candidate 2's, and candidate 2's commit
/// has only its own change. (The secret is made at run time: the plan holds no copy.)
#[test]
fn a_candidate_cannot_see_or_touch_another_candidates_worktree() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let exec = r#"
secret="secret-of-c$SWARM_CANDIDATE"; theirs="secret-of-c$((SWARM_CANDIDATE + 1))"
if [ "$SWARM_CANDIDATE" = 2 ]; then
  echo "$secret"; echo "$secret" > note.txt; sleep 2; rm note.txt; sed -i s/foo/bar/ a.txt
else
  sleep 1
  grep -rls "$theirs" "$SWARM_WORKTREE/../.." 2>/dev/null | sed 's/^/SAW /'
  for d in "$SWARM_WORKTREE"/../* "$SWARM_WORKTREE"/../../*/*; do
    [ "$d" -ef "$SWARM_WORKTREE" ] && continue
    echo pwned > "$d/a.txt" 2>/dev/null && echo WROTE "$d"
  done
  sed -i s/foo/bar/ a.txt
fi"#;
    let run = best_of(&repo, "2", exec, &[]);
    run.assert_code(0);
    let report = repo.report(&run);
    let a = task(&report, "a.txt");
    let c2 = a["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["number"] == 2)
        .unwrap();
    let commit = c2["commit"].as_str().unwrap();
    assert_eq!(repo.git(&["show", &format!("{commit}:a.txt")]), "bar");
    assert_eq!(
        repo.git(&["diff", "--name-only", &format!("{commit}^"), commit]),
        "a.txt"
    );
    let log = std::fs::read_to_string(a["candidates"][0]["log"].as_str().unwrap()).unwrap();
    assert!(!log.contains("SAW"), "{log}");
    assert_eq!(repo.git(&["show", "main:a.txt"]), "bar");
    // The same attack, unconfined, reaches candidate 2: the test would see a leak.
    let open = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = best_of(&open, "2", exec, &["--sandbox", "off"]);
    let report = open.report(&run);
    let c1 = &task(&report, "a.txt")["candidates"][0];
    let log = std::fs::read_to_string(c1["log"].as_str().unwrap()).unwrap();
    assert!(log.contains("SAW"), "{log}");
}

#[test]
fn bad_candidate_settings_are_refused_before_anything_runs() {
    let repo = three_files();
    for (args, says) in [
        (
            vec!["--tries", "2", "--best-of", "2"],
            "cannot be used with",
        ),
        (vec!["--best-of", "9"], "at most 8 candidates"),
        (vec!["--tries", "0"], "--tries must be at least 1"),
        (
            vec!["--best-of", "2", "--per-process", "4"],
            "--per-process",
        ),
        (
            vec!["--tries", "2", "--judge-model", "m"],
            "--judge-model compares the candidates",
        ),
    ] {
        let worker = match args.contains(&"--agent") {
            true => vec![],
            false => vec!["--exec", "true"],
        };
        let mut all = vec!["refactor", "x", "."];
        all.extend(worker);
        all.extend(args);
        let run = repo.swarm(&all);
        run.assert_code(2);
        assert!(run.stderr.contains(says), "{all:?}: {}", run.stderr);
        assert!(!repo.swarm_dir().join("runs").exists(), "{all:?}");
    }
}

/// `--model a,b` with the built-in worker: candidate K asks the K-th model.
#[test]
fn the_built_in_worker_runs_a_model_a_candidate() {
    let repo = TestRepo::with_files(&[("src/m.py", "foo()\n")]);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Json(agent(req)));
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", "sk-models").args([
        "refactor",
        "rename foo to bar",
        "src",
        "-j",
        "2",
        "--best-of",
        "2",
        "--model",
        "model-a,model-b",
        "--base-url",
        &fake.url,
    ]);
    let run = Run::from(cmd.output().unwrap());
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "main:src/m.py"]), "bar()");
    let mut asked: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap().to_string())
        .collect();
    asked.sort();
    asked.dedup();
    assert_eq!(asked, ["model-a", "model-b"]);
    let report = repo.report(&run);
    let a = task(&report, "src/m.py");
    let workers: Vec<&str> = a["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["worker"].as_str().unwrap())
        .collect();
    assert_eq!(workers, ["model-a", "model-b"], "{a}");
    let status = repo.swarm(&["status", &run.run_id()]);
    assert!(status.stdout.contains("by model-b"), "{}", status.stdout);
}

/// Changing nothing is a change candidates agree on: two that leave the file alone outvote a
/// third that rewrites it; between one of each, the change wins.
#[test]
fn no_change_is_an_outcome_candidates_agree_on() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let exec = r#"[ "$SWARM_CANDIDATE" = 3 ] && sed -i s/foo/bar/ "$SWARM_FILE"; true"#;
    let run = best_of(&repo, "3", exec, &[]);
    run.assert_code(0);
    let report = repo.report(&run);
    let a = task(&report, "a.txt");
    assert_eq!(a["status"], "no_change", "{a}");
    assert!(
        a["selection"]["steps"][1]
            .as_str()
            .unwrap()
            .contains("c1, c2 changed nothing"),
        "{a}"
    );
    assert_eq!(repo.git(&["show", "main:a.txt"]), "foo");
    let exec = r#"[ "$SWARM_CANDIDATE" = 2 ] && sed -i s/foo/bar/ "$SWARM_FILE"; true"#;
    let run = best_of(&repo, "2", exec, &[]);
    run.assert_code(0);
    let report = repo.report(&run);
    let a = task(&report, "a.txt");
    assert_eq!(a["selection"]["winner"], 2, "{a}");
    assert!(
        a["selection"]["steps"]
            .to_string()
            .contains("a change wins over none"),
        "{a}"
    );
    assert_eq!(repo.git(&["show", "main:a.txt"]), "bar");
}
