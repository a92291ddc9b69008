//! What a few files a formatter cannot parse cost a `--per-process` run.
//!
//! ```text
//! cargo bench --bench formatter_bench -- [--files 2000] [--bad 10] [--startup-ms 500] [--jobs 2] [--rounds 3] [--dir DIR] [--swarm PATH]
//! ```
//!
//! A repository of `--files` files, all of them to be changed, `--bad` of them (spread
//! evenly) holding a line the "formatter" cannot parse. The formatter is a shell script that
//! takes a list of files (`$SWARM_FILES`), sleeps `--startup-ms` first (prettier or eslint take
//! 0.5–1 s to load), edits each file it can parse and lists it (`src/f.txt 3ms`, as prettier
//! does), and exits 1 when one of them could not be parsed. The same work is run four ways,
//! in each of `--rounds` rounds (their order turned every second round):
//!
//! - `whole`: the formatter once over every file, no swarm (the floor of the work);
//! - `clean`: swarm over the same repository without the bad files;
//! - `named`: swarm over the bad repository, the formatter naming each file it cannot parse
//!   as ruff and rustfmt do (` --> src/f.txt:1:1` under `invalid-syntax: …`);
//! - `silent`: the same, naming nothing: each failing process is run again in halves, which
//!   is how swarm ran every failing process before it read these forms.
//!
//! Prints each wall time, its worker processes and splits (from the run's events), and the
//! cost of the bad files (bad − clean) named and silent; checks that `named` and `silent`
//! end with the same tree, the bad files' tasks failed, and every other task merged.
//! `--dir` puts the repositories there (default: the system's temporary directory; use
//! `/dev/shm` for tmpfs). Figures are recorded in docs/BENCHMARKS.md.

// A benchmark harness: failing loudly on any unexpected state is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A bench reads as one story; the 80-line limit is for the product code.
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{clone, git, measure_any, option, option_str};

use std::path::{Path, PathBuf};
use std::process::Command;

/// The formatter: `$1` is how it names a file it cannot parse (`named` or `silent`), `$2`
/// its start-up in seconds, the rest the files.
const FORMATTER: &str = r#"#!/bin/sh
form=$1; startup=$2; shift 2
sleep "$startup"
bad=0
for f in "$@"; do
  if grep -q UNPARSABLE "$f"; then
    bad=1
    [ "$form" = silent ] || printf 'invalid-syntax: unexpected token\n --> %s:1:1\n\n' "$f" >&2
  else
    sed -i 's/foo/bar/' "$f"
    echo "$f 3ms"
  fi
done
exit $bad
"#;

/// `files` files under `src/` (40 folders), each mentioning `foo`; with `bad` > 0, that many
/// of them, spread over the folders, also hold an unparsable line.
fn generate(root: &Path, name: &str, files: usize, bad: usize) -> PathBuf {
    let repo = root.join(name);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    // The j-th bad file is in the j-th stride of the files, at a place that moves from one
    // stride to the next, so that they fall in different folders and different processes.
    let stride = files / bad.max(1);
    let bad_at =
        |i: usize| bad > 0 && i / stride < bad && i % stride == (i / stride * 37 + 11) % stride;
    for i in 0..files {
        let dir = repo.join(format!("src/d{:02}", i % 40));
        std::fs::create_dir_all(&dir).unwrap();
        let mut body = format!("line one of {i}\ncall foo() here\n");
        if bad_at(i) {
            body.push_str("UNPARSABLE (\n");
        }
        std::fs::write(dir.join(format!("f{i:05}.txt")), body).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "generated"]);
    repo
}

struct Ran {
    wall: f64,
    processes: usize,
    splits: usize,
    failed: usize,
    merged: usize,
    tree: String,
}

fn swarm_run(origin: &Path, repo: &Path, script: &Path, form: &str, startup: f64) -> Ran {
    clone(origin, repo);
    let jobs = option("--jobs", 2);
    let exec = format!("sh {} {form} {startup} $SWARM_FILES", script.display());
    let mut cmd = Command::new(option_str("--swarm", env!("CARGO_BIN_EXE_swarm")));
    cmd.current_dir(repo)
        .args([
            "refactor",
            "bench: format",
            "src",
            "-y",
            "-j",
            &jobs.to_string(),
        ])
        .args(["--exec", &exec]);
    common::fixed_identity(&mut cmd);
    let m = measure_any(&mut cmd);
    assert!(m.code.is_some_and(|c| c <= 1), "swarm failed: {}", m.stderr);
    let runs = repo.join(".git/swarm/runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let (mut processes, mut splits) = (0, 0);
    for line in std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
    {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        match e["kind"].as_str() {
            Some("group_split") => splits += 1,
            // Each worker process is one `running` step (a group's, of its first task).
            Some("task_step") if e["step"] == "running" => processes += 1,
            _ => {}
        }
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    let count = |status: &str| {
        report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["status"] == status)
            .count()
    };
    Ran {
        wall: m.wall.as_secs_f64(),
        processes,
        splits,
        failed: count("failed"),
        merged: count("merged"),
        tree: git(repo, &["rev-parse", "HEAD^{tree}"]),
    }
}

/// The formatter once over every file of a clone of `origin`, no swarm; its wall time.
fn whole_run(origin: &Path, repo: &Path, script: &Path, startup: f64) -> f64 {
    clone(origin, repo);
    let files = git(repo, &["ls-files"]);
    let started = std::time::Instant::now();
    let status = Command::new("sh")
        .arg(script)
        .args(["named", &startup.to_string()])
        .args(files.lines())
        .current_dir(repo)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the clean repository formats");
    started.elapsed().as_secs_f64()
}

fn main() {
    let files = option("--files", 2000) as usize;
    let bad = option("--bad", 10) as usize;
    let startup = option("--startup-ms", 500) as f64 / 1000.0;
    let rounds = option("--rounds", 3);
    let dir = option_str("--dir", &std::env::temp_dir().display().to_string());
    let root = tempfile::tempdir_in(dir).unwrap();
    let script = root.path().join("formatter.sh");
    std::fs::write(&script, FORMATTER).unwrap();
    let clean = generate(root.path(), "origin-clean", files, 0);
    let broken = generate(root.path(), "origin-bad", files, bad);
    eprintln!(
        "{files} files, {bad} unparsable, start-up {startup}s, in {}",
        root.path().display()
    );
    let ways = ["whole", "clean", "named", "silent"];
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..ways.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        let mut trees = Vec::new();
        for k in order {
            let repo = root.path().join(format!("{}-{round}", ways[k]));
            let (wall, line) = match ways[k] {
                "whole" => (whole_run(&clean, &repo, &script, startup), String::new()),
                way => {
                    let origin = if way == "clean" { &clean } else { &broken };
                    let r = swarm_run(origin, &repo, &script, way, startup);
                    let (want_failed, want_merged) = match way {
                        "clean" => (0, files),
                        _ => (bad, files - bad),
                    };
                    assert_eq!((r.failed, r.merged), (want_failed, want_merged), "{way}");
                    if way != "clean" {
                        trees.push(r.tree);
                    }
                    let line = format!(" processes={} splits={}", r.processes, r.splits);
                    (r.wall, line)
                }
            };
            println!("round={round} {}: wall={wall:.2}s{line}", ways[k]);
            walls[k].push(wall);
        }
        assert_eq!(
            trees[0], trees[1],
            "named and silent end with the same tree"
        );
    }
    let range = |w: &[f64]| {
        let min = w.iter().copied().fold(f64::INFINITY, f64::min);
        let max = w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    };
    for (k, way) in ways.iter().enumerate() {
        let (min, max) = range(&walls[k]);
        println!("{way}: {min:.2}–{max:.2}s over {rounds} round(s)");
    }
    for (k, way) in [(2, "named"), (3, "silent")] {
        let extra: Vec<f64> = (0..walls[k].len())
            .map(|r| walls[k][r] - walls[1][r])
            .collect();
        let (min, max) = range(&extra);
        let ratio: Vec<f64> = (0..walls[k].len())
            .map(|r| walls[k][r] / walls[1][r])
            .collect();
        let (rmin, rmax) = range(&ratio);
        println!(
            "{bad} bad files, {way}: {min:+.2}–{max:+.2}s over the clean run \
             ({rmin:.2}–{rmax:.2}×)"
        );
    }
}
