//! The report page of a big run: how long `swarm report` takes, how large the page is, and
//! how long Chromium takes to make it interactive, whole and filtered.
//!
//! ```text
//! cargo bench --bench report_page_bench -- [--tasks 5000] [--failing 50] [--rounds 3] [--dir DIR]
//! ```
//!
//! A generated repository of `--tasks` files (the size of ansible's 4,985), one task each;
//! the worker (`sed` over `$SWARM_FILES`, `--per-process auto`) changes every file and fails
//! on `--failing` of them with an error naming the file. Then, over `--rounds`: `swarm
//! report` (wall seconds), and Chromium (`$SWARM_BENCH_CHROMIUM`, default `chromium`,
//! headless, `--dump-dom`) opening the page whole and with `#status=failed`: the page's own
//! time to interactive (`performance.now()` when its script has drawn the table, the
//! timeline and the groups; `data-ready` on `<body>`) and the browser's wall time, start to
//! exit. `--dir` puts the repository on that disk (default: the system's temporary directory).

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(unreachable_pub)]

mod common;

use common::{Shape, fixed_identity, generate, option, option_str};

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn main() {
    let tasks = option("--tasks", 5000) as usize;
    let failing = option("--failing", 50) as usize;
    let rounds = option("--rounds", 3) as usize;
    let base = option_str("--dir", &std::env::temp_dir().display().to_string());
    let chromium = std::env::var("SWARM_BENCH_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let dir = tempfile::tempdir_in(&base).unwrap();
    let shape = Shape {
        files: tasks,
        dirs: 50,
        tasks,
        lines: 20,
    };
    let repo = generate(dir.path(), &shape);
    let every = tasks / failing.max(1);
    let exec = format!(
        "for f in $SWARM_FILES; do n=${{f##*/f}}; n=$((10#${{n%.txt}})); \
         if [ {failing} -gt 0 ] && [ $((n % {every})) -eq 0 ]; then echo \"error: cannot parse $f\" >&2; exit 2; fi; \
         sed -i s/lorem/LOREM/ \"$f\"; done"
    );
    let started = Instant::now();
    let mut run = Command::new(env!("CARGO_BIN_EXE_swarm"));
    fixed_identity(&mut run);
    let out = run
        .current_dir(&repo)
        .args(["refactor", "lorem to LOREM", "src", "-y", "--exec", &exec])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("swarm: run "))
        .and_then(|rest| rest.split([':', ' ']).next())
        .expect("a run id")
        .to_string();
    println!(
        "run {id}: {tasks} tasks ({failing} failing) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let page = dir.path().join("page.html");
    let mut report_s = Vec::new();
    let (mut whole, mut filtered) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let status = Command::new(env!("CARGO_BIN_EXE_swarm"))
            .current_dir(&repo)
            .args(["report", &id, "-o"])
            .arg(&page)
            .output()
            .unwrap();
        assert!(status.status.success(), "{status:?}");
        report_s.push(t.elapsed().as_secs_f64());
        whole.push(browse(&chromium, dir.path(), &page, ""));
        filtered.push(browse(&chromium, dir.path(), &page, "#status=failed"));
    }
    let bytes = std::fs::metadata(&page).unwrap().len();
    println!("page: {:.1} MB", bytes as f64 / 1e6);
    println!("swarm report: {}", spread(&report_s, "s"));
    for (name, runs) in [("whole page", &whole), ("#status=failed", &filtered)] {
        let ready: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let wall: Vec<f64> = runs.iter().map(|r| r.1).collect();
        println!(
            "chromium, {name}: interactive after {}; browser start to exit {}",
            spread(&ready, "ms"),
            spread(&wall, "s")
        );
    }
}

/// Chromium on the page (with `hash`): the page's time to interactive in milliseconds, and
/// the browser's wall seconds.
fn browse(chromium: &str, dir: &Path, page: &Path, hash: &str) -> (f64, f64) {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let t = Instant::now();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}{hash}", page.display()))
        .output()
        .expect("Chromium starts ($SWARM_BENCH_CHROMIUM)");
    let wall = t.elapsed().as_secs_f64();
    let dom = String::from_utf8_lossy(&out.stdout);
    let ready = dom
        .split("data-ready=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|ms| ms.parse().ok())
        .expect("the page's script finished (data-ready)");
    (ready, wall)
}

/// `mean (min–max) unit`.
fn spread(values: &[f64], unit: &str) -> String {
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0.0, f64::max);
    format!("{mean:.2} {unit} ({min:.2}–{max:.2})")
}
