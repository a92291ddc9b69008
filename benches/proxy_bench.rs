//! What the allow-list proxy and the model gateway cost: the same fleet of fake agents with
//! `--network` (straight to the API), with `--allow-domain` (through the proxy) and as an
//! `--agent` (through the gateway), in the same run.
//!
//! ```text
//! cargo bench --bench proxy_bench -- [--tasks 32] [--jobs 16] [--requests 4] [--latency-ms 500] [--rounds 3] [--also OLD_SWARM] [--only agent]
//!     [--stand-in curl|bash|native] [--events FILE]
//! ```
//!
//! Each task is a fake agent: `--requests` Messages requests (`POST /v1/messages`, a
//! `max_tokens` of 100) to a local fake API that answers 64 KiB of JSON with a `usage` after
//! `--latency-ms` (as a model API would), then a `sed` edit.
//! With `--network` the calls go straight to 127.0.0.1; with `--allow-domain` they go through
//! the worker's forwarder and swarm's proxy as a `CONNECT` tunnel (`curl --proxytunnel`, the
//! way HTTPS clients use it); as `--agent` (an `[agents.bench]` with `api = "anthropic"`) they
//! go to swarm's gateway with a placeholder key, which puts the real one in, forwards,
//! streams the answer back and meters it. With `--also`, a fourth way: `--agent` through the
//! gateway of another swarm binary (an older build), for an A/B of the gateway itself.
//! Rounds rotate between the ways; the bench prints each wall time, its efficiency against
//! the ideal (`ceil(tasks / jobs) × requests × latency` over the wall time) and swarm's own
//! peak memory, the medians and the overheads (target: under 5 % each). `--only agent` runs
//! the gateway's way alone, then the stand-in agents' own floor: the same script on each
//! file by `xargs -P jobs`, straight to the fake API, with no swarm. Each run's CPU time is
//! that of swarm and every process it waited for (jails, agents), the floor's that of the
//! stand-ins. See docs/BENCHMARKS.md for recorded figures.

// A benchmark harness: failing loudly on any unexpected state is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The shared helpers (`common`, the fake model) are `pub` for the modules beside them.
// A bench reads as one story; the 80-line limit is for the product code.
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{git, option, option_str};

use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Every stand-in's request: a Messages call of 100 tokens at most.
const BODY: &str =
    r#"{"model":"bench","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;

/// The fake API: every request is answered with 64 KiB after `latency`.
fn fake_api(latency: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                common::read_request(&mut stream);
                std::thread::sleep(latency);
                let body = format!(
                    "{{\"type\":\"message\",\"model\":\"bench\",\"usage\":{{\"input_tokens\":1000,\
                     \"output_tokens\":50}},\"content\":\"{}\"}}",
                    "x".repeat(64 * 1024)
                )
                .into_bytes();
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .as_bytes(),
                );
                let _ = stream.write_all(&body);
            });
        }
    });
    port
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

/// How the fleet's calls leave the jail.
enum Way<'a> {
    /// `--exec CMD` with these flags (`--network`, `--allow-domain`).
    Exec(&'a str, &'a [&'a str]),
    /// `--agent bench`, with its API at this port, run by this swarm binary.
    Agent(u16, &'a str),
}

/// One run of the fleet: its wall time, swarm's own peak memory (MB) and the CPU time of
/// swarm and every process it waited for (its jails, the agents; seconds).
fn run(repo: &Path, jobs: u64, way: &Way<'_>, config: &Path) -> (Duration, f64, f64) {
    let binary = match way {
        Way::Agent(_, binary) => binary,
        Way::Exec(..) => env!("CARGO_BIN_EXE_swarm"),
    };
    let mut cmd = Command::new(binary);
    cmd.current_dir(repo)
        .args(["refactor", "bench", "src", "-y", "-j", &jobs.to_string()])
        .env("SWARM_CONFIG", config);
    match way {
        Way::Exec(agent, sandbox) => cmd.args(*sandbox).args(["--exec", agent]),
        Way::Agent(port, _) => cmd
            .args(["--agent", "bench"])
            .env("ANTHROPIC_API_KEY", "sk-bench-key-0123456789")
            .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}")),
    };
    // The native stand-in is this bench's binary: its folder on PATH, as an agent's is.
    let exe = std::env::current_exe().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env(
        "PATH",
        format!("{}:{path}", exe.parent().unwrap().display()),
    );
    cmd.env("SWARM_TEST_PROXY_RESOLVE", "api.bench.test=127.0.0.1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com");
    let spawned = std::time::SystemTime::now();
    let m = common::measure(&mut cmd);
    let ended = std::time::SystemTime::now();
    assert!(m.stderr.contains(" merged, 0 no change"), "{}", m.stderr);
    print_ends(repo, spawned, ended);
    common::keep_events(repo);
    (m.wall, m.peak_mb, m.user_s + m.sys_s)
}

/// Where a run's time beyond its tasks went: from swarm's start to its first task's, and
/// from its last task's end (`task_finished`) to swarm's exit, from the run's events.
fn print_ends(repo: &Path, spawned: std::time::SystemTime, ended: std::time::SystemTime) {
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let events = std::fs::read_to_string(common::events_file(repo)).unwrap();
    let stamps = |kind: &str| -> Vec<f64> {
        events
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["kind"] == kind)
            .map(|e| e["ts"].as_f64().unwrap())
            .collect()
    };
    let first = stamps("task_started").into_iter().fold(f64::MAX, f64::min);
    let last = stamps("task_finished").into_iter().fold(0.0, f64::max);
    println!(
        "    swarm's start to its first task {:.0} ms, its last task's end to its exit {:.0} ms",
        (first - secs(spawned)) * 1e3,
        (secs(ended) - last) * 1e3
    );
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("stand-in-agent") {
        return native_agent();
    }
    let tasks = option("--tasks", 32);
    let jobs = option("--jobs", 16);
    let requests = option("--requests", 4);
    let latency = Duration::from_millis(option("--latency-ms", 500));
    let rounds = option("--rounds", 3) as usize;
    let port = fake_api(latency);
    let also = std::env::args().skip_while(|a| a != "--also").nth(1);
    let body = BODY;
    let calls = |url: &str, extra: &str| {
        format!(
            "for i in $(seq {requests}); do curl -sSf {extra} -H 'content-type: application/json' \
             -d '{body}' -o /dev/null {url} || exit 1; done; sed -i s/foo/bar/ \"$SWARM_FILE\""
        )
    };
    let stand_in = option_str("--stand-in", "curl");
    let lean = match stand_in.as_str() {
        "curl" => None,
        "bash" => Some(bash_calls(requests, body)),
        "native" => Some(native_calls(requests)),
        other => panic!("--stand-in is curl, bash or native, not {other}"),
    };
    let direct = match &lean {
        Some(calls) => format!("ANTHROPIC_BASE_URL=http://127.0.0.1:{port} {calls}"),
        None => calls(&format!("http://127.0.0.1:{port}/v1/messages"), ""),
    };
    let proxied = calls(
        &format!("http://api.bench.test:{port}/v1/messages"),
        "--proxytunnel",
    );
    let allow = format!("api.bench.test:{port}");
    let dir = tempfile::tempdir().unwrap();
    // The fleet as an agent: the same calls, to the gateway, with its placeholder key.
    let config = dir.path().join("config.toml");
    let (gatewayed, binary) = if let Some(calls) = &lean {
        let program = calls.split_whitespace().next().unwrap();
        (
            calls.clone(),
            Path::new(program)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned(),
        )
    } else {
        let curl = calls(
            "\"$ANTHROPIC_BASE_URL/v1/messages\"",
            "-H \"x-api-key: $ANTHROPIC_API_KEY\"",
        );
        (curl, "curl".to_owned())
    };
    std::fs::write(
        &config,
        format!(
            "[agents.bench]\nexec = '''{gatewayed}'''\nbinary = \"{binary}\"\napi = \"anthropic\"\n"
        ),
    )
    .unwrap();
    let allow_flags = ["--allow-domain", allow.as_str()];
    let mut ways = vec![
        ("--network", Way::Exec(&direct, &["--network"])),
        ("--allow-domain", Way::Exec(&proxied, &allow_flags)),
        (
            "--agent (gateway)",
            Way::Agent(port, env!("CARGO_BIN_EXE_swarm")),
        ),
    ];
    if let Some(other) = &also {
        ways.push(("--agent (--also)", Way::Agent(port, other)));
    }
    // `--only agent`: the gateway's way alone (an efficiency run at high `-j`).
    if option_str("--only", "") == "agent" {
        ways.retain(|(name, _)| name.starts_with("--agent"));
    } else {
        assert!(
            lean.is_none(),
            "--stand-in bash or native is for --only agent (its calls make no CONNECT)"
        );
    }
    // Every task's calls one after another, `jobs` tasks at once, nothing else.
    let ideal = latency * (tasks.div_ceil(jobs) * requests) as u32;
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for round in 0..rounds {
        for (k, (name, way)) in ways.iter().enumerate() {
            let repo = fleet(dir.path(), tasks, ways.len() * round + k);
            let (t, peak, cpu) = run(&repo, jobs, way, &config);
            println!(
                "round {round}: {name:<18} {:>7.2} s  efficiency (ideal {:.2} s / wall) {:.3}  \
                 swarm peak {peak:.0} MB  CPU {cpu:.2} s",
                t.as_secs_f64(),
                ideal.as_secs_f64(),
                ideal.as_secs_f64() / t.as_secs_f64()
            );
            times[k].push(t);
            cpus[k].push(cpu);
        }
    }
    for (k, (name, _)) in ways.iter().enumerate() {
        let worst = times[k].iter().max().unwrap().as_secs_f64();
        let best = times[k].iter().min().unwrap().as_secs_f64();
        let mut cpu = cpus[k].clone();
        cpu.sort_by(f64::total_cmp);
        println!(
            "{name}: efficiency {:.3}–{:.3} over {rounds} round(s) ({tasks} tasks, -j {jobs}, \
             {requests} calls of {} ms); CPU median {:.2} s ({:.2}–{:.2})",
            ideal.as_secs_f64() / worst,
            ideal.as_secs_f64() / best,
            latency.as_millis(),
            cpu[cpu.len() / 2],
            cpu[0],
            cpu[cpu.len() - 1],
        );
    }
    if ways.len() < 3 {
        no_swarm_floor(dir.path(), (tasks, jobs, rounds), &direct, ideal);
        return;
    }
    let medians: Vec<f64> = times.into_iter().map(|t| median(t).as_secs_f64()).collect();
    println!(
        "{tasks} tasks, -j {jobs}, {requests} requests of {} ms each: median --network {:.2} s, \
         --allow-domain {:.2} s ({:+.1} %), --agent through the gateway {:.2} s ({:+.1} %)",
        latency.as_millis(),
        medians[0],
        medians[1],
        (medians[1] / medians[0] - 1.0) * 100.0,
        medians[2],
        (medians[2] / medians[0] - 1.0) * 100.0,
    );
    if let Some(other) = medians.get(3) {
        println!(
            "--agent through the gateway of {}: {other:.2} s ({:+.1} %); this build's against it: \
             {:+.1} %",
            also.as_deref().unwrap_or(""),
            (other / medians[0] - 1.0) * 100.0,
            (medians[2] / other - 1.0) * 100.0,
        );
    }
}

/// The lean stand-in (`--stand-in bash`): the same calls made by bash itself over
/// `/dev/tcp` to `$ANTHROPIC_BASE_URL`, each answer drained by `cat`, so that a call costs a
/// `cat` rather than a `curl` (whose start, ~14 ms of CPU, is most of a run's CPU at
/// `-j 64`). A call answered with anything but a 200 fails the task.
fn bash_calls(requests: u64, body: &str) -> String {
    assert!(!body.contains('\''), "the body goes inside single quotes");
    format!(
        r#"bash -c 'u=${{ANTHROPIC_BASE_URL#http://}}; hp=${{u%%/*}}; pre=; case $u in */*) pre=/${{u#*/}};; esac
for i in $(seq {requests}); do
  exec 3<>"/dev/tcp/${{hp%:*}}/${{hp##*:}}" || exit 1
  printf "POST %s/v1/messages HTTP/1.1\r\nHost: %s\r\nx-api-key: %s\r\ncontent-type: application/json\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n%s" "$pre" "$hp" "$ANTHROPIC_API_KEY" "{body}" >&3
  read -r status <&3; case $status in "HTTP/1.1 200"*) ;; *) echo "$status" >&2; exit 1;; esac
  cat <&3 >/dev/null; exec 3<&-
done
sed -i s/foo/bar/ "$SWARM_FILE"'"#,
        len = body.len(),
        body = body.replace('"', "\\\""),
    )
}

/// The native stand-in (`--stand-in native`): this bench's own binary makes the same calls
/// and the same edit in one process (no `bash`, `cat` or `sed` started), so that what a run
/// costs beyond the calls' latency is swarm's.
fn native_calls(requests: u64) -> String {
    let exe = std::env::current_exe().unwrap();
    format!("{} stand-in-agent {requests}", exe.display())
}

/// The native stand-in's body: `requests` calls to `$ANTHROPIC_BASE_URL/v1/messages`, each
/// answer drained, then `foo` → `bar` in `$SWARM_FILE`. A call answered with anything but a
/// 200 fails the task.
fn native_agent() {
    use std::io::{BufRead as _, BufReader, Read as _};
    let requests: u64 = std::env::args().nth(2).unwrap().parse().unwrap();
    let base = std::env::var("ANTHROPIC_BASE_URL").unwrap();
    let key = std::env::var("ANTHROPIC_API_KEY").unwrap_or_default();
    let rest = base.strip_prefix("http://").unwrap();
    let (host, prefix) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("/{prefix}")
    };
    let body = BODY;
    for _ in 0..requests {
        let mut stream = std::net::TcpStream::connect(host).unwrap();
        write!(
            stream,
            "POST {prefix}/v1/messages HTTP/1.1\r\nHost: {host}\r\nx-api-key: {key}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        if !status.starts_with("HTTP/1.1 200") {
            eprintln!("{status}");
            std::process::exit(1);
        }
        std::io::copy(&mut reader.by_ref(), &mut std::io::sink()).unwrap();
    }
    let file = std::env::var("SWARM_FILE").unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replacen("foo", "bar", 1)).unwrap();
}

/// The stand-in agents' own floor: the same script on each file, `jobs` at a time by
/// `xargs -P`, straight to the fake API, with no swarm (no jail, worktree, commit or merge);
/// its efficiency against the same ideal, each round.
fn no_swarm_floor(
    dir: &Path,
    (tasks, jobs, rounds): (u64, u64, usize),
    script: &str,
    ideal: Duration,
) {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, script).unwrap();
    for round in 0..rounds {
        let repo = fleet(dir, tasks, 1000 + round);
        let m = common::measure_any(
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "ls src/* | xargs -n 1 -P {jobs} sh -c 'SWARM_FILE=$1 sh {}' agent",
                    agent.display()
                ))
                .current_dir(&repo),
        );
        assert_eq!(
            m.code,
            Some(0),
            "the stand-in agents without swarm: {}",
            m.stderr
        );
        let t = m.wall.as_secs_f64();
        println!(
            "round {round}: no swarm (xargs)    {t:>7.2} s  efficiency (ideal {:.2} s / wall) {:.3}  \
             CPU {:.2} s",
            ideal.as_secs_f64(),
            ideal.as_secs_f64() / t,
            m.user_s + m.sys_s
        );
    }
}
