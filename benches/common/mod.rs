//! What the benches share: running git with a fixed identity, and reading `--name N` options.

use std::path::Path;
use std::process::Command;

/// `git` in `dir`, as a fixed author with no user or system config.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir);
    fixed_identity(&mut cmd);
    cmd
}

/// A fixed author and committer, and no user or system git config, for `cmd` (git, or swarm).
pub fn fixed_identity(cmd: &mut Command) -> &mut Command {
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
}

/// `git ARGS` in `dir`, as [`git_command`] runs it; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_command(dir).args(args).output().expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Reads one HTTP request from `stream`, its head and its body (`Content-Length`), so that
/// the answer is not cut by a reset for unread bytes when the fake closes the connection.
#[allow(dead_code)]
pub fn read_request(stream: &mut impl std::io::Read) {
    use std::io::Read as _;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let length = String::from_utf8_lossy(&head)
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<u64>().ok())?
        })
        .unwrap_or(0);
    let _ = std::io::copy(
        &mut std::io::Read::by_ref(stream).take(length),
        &mut std::io::sink(),
    );
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

/// The events file of the one run in `repo`.
#[allow(dead_code)]
pub fn events_file(repo: &Path) -> std::path::PathBuf {
    let run = std::fs::read_dir(repo.join(".git/swarm/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    run.path().join("events.jsonl")
}

/// The events of the one run in `repo`, each line parsed.
#[allow(dead_code)]
pub fn run_events(repo: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(events_file(repo))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// With `--events FILE`, a copy of the events of the one run in `repo` there (the last run's,
/// each run writing over it), to read where the time went.
#[allow(dead_code)]
pub fn keep_events(repo: &Path) {
    let keep = option_str("--events", "");
    if !keep.is_empty() {
        std::fs::copy(events_file(repo), &keep).unwrap();
    }
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
    /// Its exit status.
    pub code: Option<i32>,
}

/// Runs `cmd` to its end, measuring it; panics if it fails.
#[allow(dead_code)]
pub fn measure(cmd: &mut Command) -> Measured {
    let m = measure_any(cmd);
    assert_eq!(m.code, Some(0), "swarm failed: {}", m.stderr);
    m
}

/// Runs `cmd` to its end, measuring it, whatever its exit status.
#[allow(dead_code)]
pub fn measure_any(cmd: &mut Command) -> Measured {
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
    // The peak is read every 20 ms by a thread of its own; the wall ends when the process
    // does, not at the next look.
    let status_file = format!("/proc/{}/status", child.id());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak_kb = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(&status_file)
                    && let Some(line) = text.lines().find(|l| l.starts_with("VmHWM:"))
                {
                    let kb = line.split_whitespace().nth(1).unwrap().parse().unwrap();
                    peak_kb = peak_kb.max(kb);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            peak_kb
        })
    };
    let status = child.wait().unwrap();
    let wall = started.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak_kb = watcher.join().unwrap();
    let after = usage();
    let stderr = err.join().unwrap();
    Measured {
        code: status.code(),
        wall,
        peak_mb: peak_kb as f64 / 1024.0,
        user_s: after.0 - before.0,
        sys_s: after.1 - before.1,
        stderr,
    }
}

/// A generated repository: `files` text files of `lines` lines spread over `dirs` folders
/// under `src/`, every (files/tasks)-th of them (`tasks` in all) mentioning `foo`.
#[allow(dead_code)]
pub struct Shape {
    pub files: usize,
    pub dirs: usize,
    pub tasks: usize,
    pub lines: usize,
}

/// Makes the repository `shape` describes in `root/origin`, one commit on `main`.
#[allow(dead_code)]
pub fn generate(root: &Path, shape: &Shape) -> std::path::PathBuf {
    let repo = root.join("origin");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let digits = |n: usize| n.saturating_sub(1).max(1).ilog10() as usize + 1;
    let (dir_width, file_width) = (digits(shape.dirs).max(2), digits(shape.files).max(5));
    let stride = shape.files / shape.tasks;
    let mut with_foo = 0;
    for i in 0..shape.files {
        let dir = repo.join(format!("src/d{:0dir_width$}", i % shape.dirs));
        std::fs::create_dir_all(&dir).unwrap();
        let mut body = String::new();
        for line in 0..shape.lines {
            body.push_str(&format!(
                "line {line} of file {i}: lorem ipsum dolor sit amet\n"
            ));
        }
        if i % stride == 0 && with_foo < shape.tasks {
            body.push_str("call foo() here\n");
            with_foo += 1;
        }
        std::fs::write(dir.join(format!("f{i:0file_width$}.txt")), body).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "generated"]);
    repo
}

/// `git clone -q origin to`, written out to disk before anything is measured (else the
/// kernel writing the clone back competes with what is measured next).
#[allow(dead_code)]
pub fn clone(origin: &Path, to: &Path) {
    let out = Command::new("git")
        .args(["clone", "-q"])
        .arg(origin)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success());
    // SAFETY: sync(2) takes no argument and cannot fail.
    unsafe { libc::sync() };
}
