//! What swarm's model gateway does against a rate-limited API: a fleet of agents on a fake
//! upstream that takes at most `--limit` requests a second (a token bucket as deep as one
//! second of them) and answers `429` with `retry-after: 1` beyond.
//!
//! ```text
//! cargo bench --bench gateway_bench -- [--tasks 32] [--jobs 16] [--requests 4] [--limit 10] [--latency-ms 200] [--rounds 3]
//! ```
//!
//! Each task is an agent making `--requests` Messages requests (curl, failing on any error
//! status), then a `sed` edit. Three ways, rounds rotating:
//!
//! - **gateway**: `--agent bench` (`api = "anthropic"`): the calls go through swarm's gateway,
//!   which holds every agent's requests to the upstream together after a 429 and sends them
//!   again itself;
//! - **alone**: `--network --exec`, each agent retrying on its own as a careful client would
//!   (`curl --retry 10`, which honours `retry-after`);
//! - **naive**: the same without retries, as an agent that gives up on a 429 would.
//!
//! The bench prints, per run, the wall time, the tasks that failed, the requests the upstream
//! served and refused, and the throughput against the limit. Target: with the gateway, no
//! task failed and a throughput near the limit. See docs/BENCHMARKS.md for recorded figures.

// A benchmark harness: failing loudly on any unexpected state is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The shared helpers (`common`, the fake model) are `pub` for the modules beside them.
// A bench reads as one story; the 80-line limit is for the product code.
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{git, option};

use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the upstream did.
#[derive(Default)]
struct Counts {
    served: AtomicU64,
    refused: AtomicU64,
}

/// The fake upstream: a token bucket of `limit` requests a second; a served request answers
/// after `latency` with a usage, a refused one at once with 429.
fn upstream(limit: f64, latency: Duration) -> (u16, Arc<Counts>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let counts = Arc::new(Counts::default());
    let bucket = Arc::new(Mutex::new((limit, Instant::now())));
    let shared = counts.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let (counts, bucket) = (shared.clone(), bucket.clone());
            std::thread::spawn(move || {
                common::read_request(&mut stream);
                let admitted = {
                    let mut b = bucket.lock().unwrap();
                    let now = Instant::now();
                    b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * limit).min(limit);
                    b.1 = now;
                    let ok = b.0 >= 1.0;
                    if ok {
                        b.0 -= 1.0;
                    }
                    ok
                };
                let (status, body) = match admitted {
                    true => {
                        counts.served.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(latency);
                        (
                            "200 OK",
                            r#"{"type":"message","model":"bench","usage":{"input_tokens":1000,"output_tokens":50}}"#,
                        )
                    }
                    false => {
                        counts.refused.fetch_add(1, Ordering::SeqCst);
                        (
                            "429 Too Many Requests\r\nretry-after: 1",
                            r#"{"type":"error","error":{"type":"rate_limit_error"}}"#,
                        )
                    }
                };
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    (port, counts)
}

fn fleet(dir: &Path, tasks: u64, round: usize) -> std::path::PathBuf {
    let repo = dir.join(format!("repo{round}"));
    std::fs::create_dir_all(repo.join("src")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..tasks {
        std::fs::write(repo.join(format!("src/f{i:03}.txt")), "call foo()\n").unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "fleet"]);
    repo
}

/// One run: its wall time, and how many tasks did not merge.
fn run(
    repo: &Path,
    jobs: u64,
    args: &[&str],
    env: &[(&str, String)],
    config: &Path,
) -> (Duration, u64) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_swarm"))
        .current_dir(repo)
        .args([
            "refactor",
            "bench",
            "src",
            "-y",
            "-j",
            &jobs.to_string(),
            "--json",
        ])
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .env("SWARM_CONFIG", config)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no report: {}", String::from_utf8_lossy(&out.stderr)));
    let merged = report["totals"]["merged"].as_u64().unwrap();
    let tasks = report["totals"]["tasks"].as_u64().unwrap();
    (elapsed, tasks - merged)
}

fn main() {
    let tasks = option("--tasks", 32);
    let jobs = option("--jobs", 16);
    let requests = option("--requests", 4);
    let limit = option("--limit", 10) as f64;
    let latency = Duration::from_millis(option("--latency-ms", 200));
    let rounds = option("--rounds", 3) as usize;
    let dir = tempfile::tempdir().unwrap();
    let body = r#"{"model":"bench","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;
    let calls = |url: &str, extra: &str| {
        format!(
            "for i in $(seq {requests}); do curl -sSf {extra} -H 'content-type: application/json' \
             -d '{body}' -o /dev/null {url} || exit 1; done; sed -i s/foo/bar/ \"$SWARM_FILE\""
        )
    };
    let config = dir.path().join("config.toml");
    let agent = calls(
        "\"$ANTHROPIC_BASE_URL/v1/messages\"",
        "-H \"x-api-key: $ANTHROPIC_API_KEY\"",
    );
    std::fs::write(
        &config,
        format!("[agents.bench]\nexec = '''{agent}'''\nbinary = \"curl\"\napi = \"anthropic\"\n"),
    )
    .unwrap();
    let ideal = (tasks * requests) as f64 / limit;
    println!(
        "{tasks} tasks × {requests} requests, -j {jobs}, upstream limit {limit} requests/s \
         ({} ms each): at best {ideal:.1} s",
        latency.as_millis()
    );
    for round in 0..rounds {
        for (k, way) in ["gateway", "alone", "naive"].into_iter().enumerate() {
            let (port, counts) = upstream(limit, latency);
            let repo = fleet(dir.path(), tasks, 3 * round + k);
            let direct = format!("http://127.0.0.1:{port}/v1/messages");
            let (wall, failed) = match way {
                "gateway" => {
                    let env = [
                        ("ANTHROPIC_API_KEY", "sk-bench-key-0123456789".to_string()),
                        ("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}")),
                    ];
                    run(&repo, jobs, &["--agent", "bench"], &env, &config)
                }
                "alone" => {
                    let alone = calls(&direct, "--retry 10");
                    run(&repo, jobs, &["--network", "--exec", &alone], &[], &config)
                }
                _ => {
                    let naive = calls(&direct, "");
                    run(&repo, jobs, &["--network", "--exec", &naive], &[], &config)
                }
            };
            let served = counts.served.load(Ordering::SeqCst);
            let refused = counts.refused.load(Ordering::SeqCst);
            println!(
                "round {round}: {:<8} {:>6.2} s, {failed} task(s) failed, {served} served, \
                 {refused} refused (429), {:.1} requests/s ({:.0} % of the limit)",
                way,
                wall.as_secs_f64(),
                served as f64 / wall.as_secs_f64(),
                served as f64 / wall.as_secs_f64() / limit * 100.0
            );
        }
    }
}
