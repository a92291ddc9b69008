//! Several candidates per task against a worker that succeeds some of the time.
//!
//! ```text
//! cargo bench --bench candidates_bench -- [--tasks 60] [--jobs 6] [--percent 50] [--work-ms 300] [--seeds 3]
//! ```
//!
//! The worker (`--exec`) passes `--verify` with probability `--percent`/100, drawn from a
//! hash of its file, its candidate number and the seed (so each candidate is an independent
//! draw, and a round can be run again), after `--work-ms` of "work". For N = 1, 2, 3, with
//! `--tries N` (one after another) and `--best-of N` (at once), it prints the measured
//! success rate against 1 − (1 − p)^N, the candidates run per task (the spend: each one is a
//! worker's run; the expectation is Σ (1 − p)^k for `--tries`, N for `--best-of`, fewer when
//! agreement stops the last early), and the wall time, averaged over `--seeds` rounds.

// A benchmark harness: failing loudly on any unexpected state is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{git, option};

use std::process::Command;
use std::time::Instant;

/// One run's outcome.
struct Outcome {
    merged: u64,
    candidates: u64,
    wall: f64,
}

fn main() {
    let tasks = option("--tasks", 60);
    let jobs = option("--jobs", 6);
    let percent = option("--percent", 50);
    let work_ms = option("--work-ms", 300);
    let seeds = option("--seeds", 3);
    let p = percent as f64 / 100.0;
    println!(
        "{tasks} tasks, -j {jobs}, p = {p}, {work_ms} ms of work a candidate, {seeds} round(s) each"
    );
    println!(
        "{:<12} {:>9} {:>9} {:>14} {:>14} {:>9}",
        "mode", "success", "expected", "candidates/task", "expected", "wall s"
    );
    for n in 1..=3u64 {
        for mode in ["--tries", "--best-of"] {
            if n == 1 && mode == "--best-of" {
                continue;
            }
            let mut runs = Vec::new();
            for seed in 0..seeds {
                runs.push(round(tasks, jobs, percent, work_ms, seed, (mode, n)));
            }
            let k = runs.len() as f64;
            let success = runs.iter().map(|r| r.merged as f64).sum::<f64>() / k / tasks as f64;
            let per_task = runs.iter().map(|r| r.candidates as f64).sum::<f64>() / k / tasks as f64;
            let wall = runs.iter().map(|r| r.wall).sum::<f64>() / k;
            let spread = runs.iter().map(|r| r.wall).fold(f64::MAX, f64::min);
            let most = runs.iter().map(|r| r.wall).fold(0.0, f64::max);
            let expected = 1.0 - (1.0 - p).powi(n as i32);
            let expected_spend = match (mode, n) {
                (_, 1) => 1.0,
                ("--tries", _) => (0..n).map(|i| (1.0 - p).powi(i as i32)).sum(),
                _ => n as f64,
            };
            let name = match n {
                1 => "one".to_string(),
                _ => format!("{mode} {n}"),
            };
            println!(
                "{name:<12} {success:>9.3} {expected:>9.3} {per_task:>14.2} {expected_spend:>14.2} {wall:>6.1} ({spread:.1}–{most:.1})"
            );
        }
    }
}

/// One run of `tasks` one-file tasks with candidates `mode N`, the worker's draws seeded by
/// `seed`.
fn round(
    tasks: u64,
    jobs: u64,
    percent: u64,
    work_ms: u64,
    seed: u64,
    (mode, n): (&str, u64),
) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..tasks {
        std::fs::write(repo.join(format!("f{i:03}.txt")), "foo\n").unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "generated"]);
    let exec = format!(
        r#"h=$(printf '%s %s {seed}' "$SWARM_FILE" "${{SWARM_CANDIDATE:-1}}" | cksum | cut -d' ' -f1); sleep {secs}; if [ $((h % 100)) -lt {percent} ]; then sed -i s/foo/bar/ "$SWARM_FILE"; else echo broken > "$SWARM_FILE"; fi"#,
        secs = work_ms as f64 / 1000.0,
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_swarm"));
    cmd.current_dir(&repo)
        .args([
            "refactor",
            "x",
            ".",
            "-y",
            "--json",
            "-j",
            &jobs.to_string(),
        ])
        .args([
            "--exec",
            &exec,
            "--verify",
            "! grep -rqs broken --include=*.txt .",
        ])
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com");
    if n > 1 {
        cmd.args([mode, &n.to_string()]);
    }
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let wall = started.elapsed().as_secs_f64();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let totals = &report["totals"];
    let merged = totals["merged"].as_u64().unwrap();
    // The git CLI agrees: one merge commit per merged task.
    let merges = git(&repo, &["rev-list", "--merges", "--count", "main"]);
    assert_eq!(merges.parse::<u64>().unwrap(), merged);
    Outcome {
        merged,
        // Without candidates, every task ran one worker.
        candidates: match n {
            1 => tasks,
            _ => totals["candidates"].as_u64().unwrap(),
        },
        wall,
    }
}
