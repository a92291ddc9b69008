//! Running one command as a worker process: `sh -c`, stdin from `/dev/null`, its own process
//! group, swarm's own clock for the timeout, output to a capped log file.
//!
//! - The timeout is measured by swarm, not trusted to the worker: at the limit the whole
//!   process group gets SIGTERM, then SIGKILL after a grace period.
//! - When the shell exits, whatever it left running in its group is killed at once, so a
//!   background child cannot write into the worktree after the worker "finished".
//! - stdout and stderr share one pipe (so the log keeps their order) read by a plain thread
//!   that writes the log up to [`LOG_CAP`] bytes and keeps only the last [`TAIL_BYTES`] in
//!   memory. A worker printing gigabytes costs disk up to the cap and no memory.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, Read as _, Write as _};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::sandbox::{self, Confinement, SandboxPolicy};
use crate::env_vars;

/// Bytes of output written to a task's log before it is truncated.
pub const LOG_CAP: u64 = 8 * 1024 * 1024;
/// Bytes of output kept for the report.
pub const TAIL_BYTES: usize = 4096;
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

pub struct ProcessRequest<'a> {
    pub command: &'a str,
    pub cwd: &'a Path,
    pub env: Vec<(OsString, OsString)>,
    pub log: &'a Path,
    pub timeout: Duration,
    /// No output and no file change under `cwd` for this long: the process is stale.
    pub idle_timeout: Option<Duration>,
    /// How to confine the process (`None`: not at all).
    pub sandbox: Option<&'a SandboxPolicy>,
    /// Writable besides `cwd` and the private temporary directory (confined processes).
    pub also_writable: &'a [&'a Path],
    pub cancel: &'a CancellationToken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    /// Killed at the idle limit (no output, no file change).
    Idle,
    Cancelled,
}

#[derive(Debug)]
pub struct ProcessOutcome {
    pub exit: Exit,
    pub output_tail: String,
    pub output_bytes: u64,
    pub duration: Duration,
}

pub async fn run(req: ProcessRequest<'_>) -> anyhow::Result<ProcessOutcome> {
    let started = Instant::now();
    let (reader, writer) = std::io::pipe().context("cannot create a pipe")?;
    let writer_err = writer.try_clone()?;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(req.command)
        .current_dir(req.cwd)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_err)
        .process_group(0)
        .kill_on_drop(true);
    // A worker's git commands must act on its worktree, not on whatever started swarm.
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in no_background_git() {
        cmd.env(k, v);
    }
    for (k, v) in &req.env {
        cmd.env(k, v);
    }
    // Confined processes write temporary files in a private directory of their own.
    let mut _tmp = None;
    if let Some(policy) = req.sandbox.filter(|p| p.enabled) {
        let tmp = sandbox::private_tmp().context("cannot create a temporary directory")?;
        for var in ["TMPDIR", "TMP", "TEMP"] {
            cmd.env(var, tmp.path());
        }
        let mut roots = vec![req.cwd, tmp.path()];
        roots.extend_from_slice(req.also_writable);
        Confinement::prepare(policy, &roots)
            .context("cannot prepare the sandbox")?
            .install(&mut cmd);
        _tmp = Some(tmp);
    }
    let log =
        File::create(req.log).with_context(|| format!("cannot create {}", req.log.display()))?;
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `sh -c {}`", req.command))?;
    // Our copies of the pipe's write end must go, or the reader never sees end-of-file.
    drop(cmd);
    let pgid = child.id().map(|p| p as i32);
    // If this future is dropped (a caller's timeout), the whole group goes with it.
    let mut group = GroupGuard(pgid);
    let (tail_tx, tail_rx) = tokio::sync::oneshot::channel();
    // Milliseconds since `started` of the last sign of life (output or a file change).
    let last_activity = Arc::new(AtomicU64::new(0));
    {
        let last_activity = last_activity.clone();
        std::thread::spawn(move || {
            let _ = tail_tx.send(capture(reader, log, &last_activity, started));
        });
    }

    let grace = kill_grace();
    let exit = tokio::select! {
        status = child.wait() => {
            let status = status?;
            // Leftover background processes of the worker die with it.
            signal_group(pgid, libc::SIGKILL);
            exit_of(status)
        }
        () = tokio::time::sleep(req.timeout) => {
            stop_group(&mut child, pgid, grace).await;
            Exit::TimedOut
        }
        () = stale(req.idle_timeout, req.cwd, &last_activity, started) => {
            stop_group(&mut child, pgid, grace).await;
            Exit::Idle
        }
        () = req.cancel.cancelled() => {
            stop_group(&mut child, pgid, grace).await;
            Exit::Cancelled
        }
    };
    // Dealt with above; a later signal could hit a reused process group id.
    group.0 = None;
    // Normally the pipe closes as soon as the group is gone; a process that escaped the group
    // (setsid) may hold it open, and is not waited for.
    let (output_tail, output_bytes) = tokio::time::timeout(Duration::from_secs(2), tail_rx)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_else(|| (String::new(), 0));
    Ok(ProcessOutcome {
        exit,
        output_tail,
        output_bytes,
        duration: started.elapsed(),
    })
}

/// Resolves when the process has shown no sign of life for `idle`: no output (tracked by
/// the capture thread) and no file modified under `cwd` (checked only once output has been
/// quiet for a while, by walking the tree for the newest modification time).
async fn stale(idle: Option<Duration>, cwd: &Path, last: &AtomicU64, started: Instant) {
    let Some(idle) = idle else {
        return std::future::pending().await;
    };
    let check_every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        tokio::time::sleep(check_every).await;
        let now = started.elapsed();
        let quiet = now.saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
        if quiet < idle / 2 {
            continue;
        }
        let cwd = cwd.to_path_buf();
        let newest = tokio::task::spawn_blocking(move || newest_mtime(&cwd))
            .await
            .ok()
            .flatten();
        if let Some(age) = newest.and_then(|t| SystemTime::now().duration_since(t).ok())
            && age < quiet
        {
            let at = now.saturating_sub(age);
            last.fetch_max(at.as_millis() as u64, Ordering::Relaxed);
            continue;
        }
        if quiet >= idle {
            return;
        }
    }
}

/// The newest modification time of a file under `dir` (`.git` excluded).
fn newest_mtime(dir: &Path) -> Option<SystemTime> {
    let mut newest: Option<SystemTime> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name() == ".git" {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if let Ok(m) = meta.modified() {
                newest = Some(newest.map_or(m, |n| n.max(m)));
            }
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    newest
}

/// Kills the process group when dropped: no worker process outlives the code that runs it.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.0, libc::SIGKILL);
    }
}

/// SIGTERM to the group, SIGKILL after `grace` if the shell has not exited.
async fn stop_group(child: &mut tokio::process::Child, pgid: Option<i32>, grace: Duration) {
    signal_group(pgid, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        signal_group(pgid, libc::SIGKILL);
        let _ = child.wait().await;
    }
    // Children that outlived the shell after SIGTERM.
    signal_group(pgid, libc::SIGKILL);
}

fn signal_group(pgid: Option<i32>, signal: i32) {
    if let Some(pgid) = pgid.filter(|p| *p > 0) {
        // SAFETY: killpg only sends a signal; ESRCH (group already gone) is fine.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    }
}

fn kill_grace() -> Duration {
    std::env::var(env_vars::SWARM_KILL_GRACE_MS)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_KILL_GRACE)
}

/// `git -c` settings for worker processes, appended to any `GIT_CONFIG_COUNT` the user has:
/// no automatic maintenance or gc that would detach and outlive the task.
fn no_background_git() -> Vec<(String, String)> {
    let n: usize = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let settings = [("maintenance.auto", "false"), ("gc.auto", "0")];
    let mut env = vec![(
        "GIT_CONFIG_COUNT".to_string(),
        (n + settings.len()).to_string(),
    )];
    for (i, (k, v)) in settings.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{}", n + i), k.to_string()));
        env.push((format!("GIT_CONFIG_VALUE_{}", n + i), v.to_string()));
    }
    env
}

/// Copies the pipe into the log (up to the cap) and returns the tail and the byte count.
fn capture(
    mut reader: std::io::PipeReader,
    log: File,
    last_activity: &AtomicU64,
    started: Instant,
) -> (String, u64) {
    let mut log = BufWriter::new(log);
    let mut buf = vec![0u8; 64 * 1024];
    let mut tail: Vec<u8> = Vec::with_capacity(2 * TAIL_BYTES);
    let mut total: u64 = 0;
    let mut log_ok = true;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        last_activity.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        let chunk = &buf[..n];
        if log_ok && total < LOG_CAP {
            let room = (LOG_CAP - total).min(n as u64) as usize;
            log_ok = log.write_all(&chunk[..room]).is_ok();
        }
        total += n as u64;
        tail.extend_from_slice(&chunk[n.saturating_sub(TAIL_BYTES)..]);
        if tail.len() > 2 * TAIL_BYTES {
            tail.drain(..tail.len() - TAIL_BYTES);
        }
    }
    if total > LOG_CAP {
        let _ = writeln!(
            log,
            "\n[swarm: output truncated at {} bytes; {} bytes not logged]",
            LOG_CAP,
            total - LOG_CAP
        );
    }
    let _ = log.flush();
    if tail.len() > TAIL_BYTES {
        tail.drain(..tail.len() - TAIL_BYTES);
    }
    (String::from_utf8_lossy(&tail).into_owned(), total)
}
