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
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

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
    pub cancel: &'a CancellationToken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
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
    std::thread::spawn(move || {
        let _ = tail_tx.send(capture(reader, log));
    });

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
fn capture(mut reader: std::io::PipeReader, log: File) -> (String, u64) {
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
