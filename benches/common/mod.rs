//! What the benches share: running git with a fixed identity, and reading `--name N` options.

use std::path::Path;
use std::process::Command;

/// `git ARGS` in `dir`, as a fixed author with no user or system config; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The number after `name` on the command line, else `default`.
#[allow(dead_code)]
pub fn option(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

/// The text after `name` on the command line, else `default`.
#[allow(dead_code)]
pub fn option_str(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// What one process cost: wall time, its own peak resident memory (polled from
/// `/proc/PID/status`, so its children do not count), and the CPU time of it and its children.
#[allow(dead_code)]
pub struct Measured {
    pub wall: std::time::Duration,
    pub peak_mb: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub stderr: String,
}

/// Runs `cmd` to its end, measuring it; panics if it fails.
#[allow(dead_code)]
pub fn measure(cmd: &mut Command) -> Measured {
    let usage = || {
        // SAFETY: getrusage into a zeroed local.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (secs(u.ru_utime), secs(u.ru_stime))
    };
    let before = usage();
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("swarm starts");
    let stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(line) = text.lines().find(|l| l.starts_with("VmHWM:"))
        {
            peak_kb = peak_kb.max(line.split_whitespace().nth(1).unwrap().parse().unwrap());
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let wall = started.elapsed();
    let after = usage();
    let stderr = err.join().unwrap();
    assert!(status.success(), "swarm failed: {stderr}");
    Measured {
        wall,
        peak_mb: peak_kb as f64 / 1024.0,
        user_s: after.0 - before.0,
        sys_s: after.1 - before.1,
        stderr,
    }
}
