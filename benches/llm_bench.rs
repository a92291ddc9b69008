//! The built-in worker's pipeline against a slow model.
//!
//! ```text
//! cargo bench --bench llm_bench -- [--tasks 32] [--jobs 16] [--latency-ms 300] [--rounds 1] [--dir DIR]
//!     [--events FILE] [--connection keep-alive|close]
//! ```
//!
//! Runs `--tasks` one-file tasks with `-j --jobs` against the test fake of the model API
//! (`tests/it/fake_model.rs`), which answers every request after `--latency-ms`. Each task
//! takes 3 turns (read, edit, finish), so the ideal wall time is
//! `ceil(tasks / jobs) waves × 3 turns × latency`. Prints, each round (a fresh repository in
//! `--dir`), the wall time, its ratio to the ideal, the efficiency (ideal / wall: ≥ 0.9 at
//! `-j 16` and 300 ms, ≥ 0.95 at `-j 64` and 1 s) and swarm's own peak memory; then the
//! efficiency's spread and the most model calls the server saw in flight (must be ≤ jobs).
//!
//! The stand-in answers as hosted APIs do: on a connection kept alive, each chunk sent as it
//! is written (`TCP_NODELAY`). `--connection close` closes the connection after each answer
//! instead, as the stand-in did before 2026-11-29 (fourth session): each turn then costs a new
//! connection, and a thread of the stand-in's, on the same two cores.

// A benchmark harness: failing loudly on any unexpected state is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The shared helpers (`common`, the fake model) are `pub` for the modules beside them.
// A bench reads as one story; the 80-line limit is for the product code.
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{git, measure, option, option_str};

#[allow(dead_code)]
#[path = "../tests/it/fake_model.rs"]
mod fake_model;

use std::process::Command;
use std::time::Duration;

use fake_model::{FakeModel, Reply, rename_agent};

fn main() {
    let tasks = option("--tasks", 32);
    let jobs = option("--jobs", 16);
    let latency = Duration::from_millis(option("--latency-ms", 300));
    let rounds = option("--rounds", 1);
    let agent = rename_agent("foo", "bar");
    let close = match option_str("--connection", "keep-alive").as_str() {
        "keep-alive" => false,
        "close" => true,
        other => panic!("--connection keep-alive or close, not {other}"),
    };
    // A chat request gets the agent's next turn after `latency`; llama.cpp's `/props`, which
    // swarm asks once for the context size, a 404 as other servers answer.
    let fake = FakeModel::start(move |req, _| match req.path.as_str() {
        "/props" => Reply::Status(404, Vec::new(), String::new()),
        _ => Reply::After(
            latency,
            Box::new(match close {
                true => Reply::Stream(agent(req)),
                false => Reply::StreamKeepAlive(agent(req)),
            }),
        ),
    });
    let waves = tasks.div_ceil(jobs);
    let ideal = latency * (waves * 3) as u32;
    let mut efficiency = Vec::new();
    for round in 1..=rounds {
        let dir = tempfile::tempdir_in(option_str(
            "--dir",
            &std::env::temp_dir().display().to_string(),
        ))
        .unwrap();
        let repo = generate(dir.path(), tasks);
        let before = fake.requests().len() as u64;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_swarm"));
        cmd.current_dir(&repo)
            .args(["refactor", "rename foo to bar", "src", "-y"])
            .args([
                "-j",
                &jobs.to_string(),
                "--model",
                "fake",
                "--base-url",
                &fake.url,
            ])
            .env("SWARM_API_KEY", "sk-bench");
        common::fixed_identity(&mut cmd);
        let m = measure(&mut cmd);
        let requests = fake.requests().len() as u64 - before;
        assert_eq!(requests, tasks * 3, "3 turns per task");
        phases(&repo);
        let wall = m.wall;
        let ratio = wall.as_secs_f64() / ideal.as_secs_f64();
        efficiency.push(1.0 / ratio);
        println!(
            "round={round} tasks={tasks} jobs={jobs} latency={}ms  wall={:.2}s  ideal={:.2}s \
             ({waves} waves x 3 turns)  wall/ideal={ratio:.2}  efficiency={:.3}  swarm peak={:.0}MB  swarm cpu={:.2}s",
            latency.as_millis(),
            wall.as_secs_f64(),
            ideal.as_secs_f64(),
            1.0 / ratio,
            m.peak_mb,
            m.user_s + m.sys_s,
        );
    }
    let (min, max) = efficiency
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), e| {
            (lo.min(*e), hi.max(*e))
        });
    println!(
        "tasks={tasks} jobs={jobs} latency={}ms: efficiency (ideal/wall) {min:.3}–{max:.3} over \
         {rounds} round(s); most model calls in flight {} {}",
        latency.as_millis(),
        fake.max_in_flight(),
        if fake.max_in_flight() as u64 <= jobs {
            "(<= jobs)"
        } else {
            "(MORE THAN jobs)"
        },
    );
}

/// A repository of `tasks` Python files under `src/`, each calling `foo`.
fn generate(dir: &std::path::Path, tasks: u64) -> std::path::PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..tasks {
        std::fs::write(
            repo.join(format!("src/m{i:03}.py")),
            format!("def foo_{i}():\n    return foo({i})\n"),
        )
        .unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "generated"]);
    repo
}

/// Where the time went, from the run's events.
fn phases(repo: &std::path::Path) {
    common::keep_events(repo);
    let events = common::run_events(repo);
    let t0 = events[0]["ts"].as_f64().unwrap();
    let at = |kind: &str, last: bool| {
        let mut it = events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| e["ts"].as_f64().unwrap() - t0);
        if last { it.next_back() } else { it.next() }.unwrap_or(f64::NAN)
    };
    eprintln!(
        "phases (s after run_started): worktrees created {:.3}..{:.3}, first model request {:.3}, last model request {:.3}, last merge {:.3}, run finished {:.3}",
        at("worktree_created", false),
        at("worktree_created", true),
        at("model_request", false),
        at("model_request", true),
        at("merged", true),
        at("run_finished", true),
    );
}
