//! Running one command as a worker process: `sh -c` (or an argv), stdin from `/dev/null`, its
//! own process group, confined in a jail (see [`swarm_sandbox`]), swarm's own clock for the
//! timeout, output to a capped log file, secrets out of its environment and out of the log.
//!
//! - The timeout is measured by swarm, not trusted to the worker: at the limit the whole
//!   process group gets SIGTERM, then SIGKILL after a grace period.
//! - When the shell exits, whatever it left running in its group is killed at once, so a
//!   background child cannot write into the worktree after the worker "finished".
//! - stdout and stderr share one pipe (so the log keeps their order) read by a plain thread
//!   that writes the log up to [`LOG_CAP`] bytes and keeps only the last [`TAIL_BYTES`] in
//!   memory. A worker printing gigabytes costs disk up to the cap and no memory. Known secret
//!   values are redacted from the log and the tail ([`crate::secrets`]).

mod launch;

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, Read as _, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::gateway::{Binding, Gateway, Listener, Spent};
use crate::ids::TaskId;
use crate::worker::WorkerError;
use crate::{env_vars, secrets, state};
use swarm_sandbox::jail::StateView;
use swarm_sandbox::proxy::OnAccess;
use swarm_sandbox::{SandboxPolicy, overlay::OverlayView};

use launch::Running;

/// Bytes of output written to a task's log before it is truncated.
pub(crate) const LOG_CAP: u64 = 8 * 1024 * 1024;
/// Bytes of output kept for the report.
pub(crate) const TAIL_BYTES: usize = 4096;
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

/// What a worker process runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Program<'a> {
    /// A command line, run with `sh -c`.
    Shell(&'a str),
    /// A program and its arguments, run without a shell (the built-in agent's allowed
    /// commands, and a command line that needs no shell: [`crate::worker::direct`]).
    Argv(&'a [OsString]),
}

impl Program<'_> {
    pub(super) fn argv(&self) -> Vec<OsString> {
        match self {
            Program::Shell(command) => vec!["sh".into(), "-c".into(), (*command).into()],
            Program::Argv(argv) => argv.to_vec(),
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Program::Shell(command) => format!("sh -c {command}"),
            Program::Argv(argv) => argv
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

pub(crate) struct ProcessRequest<'a> {
    pub program: Program<'a>,
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
    /// The overlay view mounted on `cwd` in the jail (an overlay worktree), if any.
    pub view: Option<&'a OverlayView>,
    /// Told of each connection the process asks swarm's proxy for (with an allow-list).
    pub on_access: Option<OnAccess>,
    pub cancel: &'a CancellationToken,
    /// An agent's process: its model requests go through swarm's gateway.
    pub gateway: Option<GatewayAccess<'a>>,
    /// Copy-on-write views of directories outside the worktree (an agent's state).
    pub state_views: &'a [StateView],
    /// A copy-on-write view of the repository's git directory, for the worker's own git.
    pub git_view: Option<&'a StateView>,
    /// Shown as they are, though a hidden folder holds them (the task's own files in swarm's
    /// state, which is hidden from workers).
    pub keep: &'a [&'a Path],
}

/// The gateway an agent's process reaches, for which of its APIs.
#[derive(Clone, Copy)]
pub(crate) struct GatewayAccess<'a> {
    pub gateway: &'a Arc<Gateway>,
    pub task: &'a TaskId,
    pub bindings: &'a [Binding],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    /// Killed at the idle limit (no output, no file change).
    Idle,
    Cancelled,
    /// Stopped because the gateway refused one of its requests for the run's budget.
    OverBudget,
}

#[derive(Debug)]
pub(crate) struct ProcessOutcome {
    pub exit: Exit,
    pub output_tail: String,
    /// What its model requests through the gateway spent (an agent's process).
    pub spent: Option<Spent>,
    /// Processes it left running when it exited (stopped with it).
    pub leftovers: u32,
}

pub(crate) async fn run(req: ProcessRequest<'_>) -> Result<ProcessOutcome, WorkerError> {
    let (outcome, end) = run_until_exit(req).await?;
    end.finish().await;
    Ok(outcome)
}

/// What is left of a process whose worker has ended: its jail, which may still be unmounting
/// its namespace (overlays, which sync their upper layer's filesystem on the way), and what
/// the jail used (its temporary directory, proxy, gateway). The layers its jail mounted may
/// be used again only once it is finished: [`JailEnd::finish`], or dropped (which waits,
/// blocking).
pub(crate) struct JailEnd {
    // Dropped in this order: the jail waited for, then what it used, then its state views'
    // scratch folders opened up.
    running: Running,
    _keep: launch::Confinement,
    _state_views: StateViewsEnded,
}

/// The `work` folders of an agent's state views ([`ProcessRequest::state_views`]), made
/// removable again ([`swarm_sandbox::overlay::open_work_dir`]) once the jail that mounted
/// them is gone: the views' layers stay in the task's folder.
struct StateViewsEnded(Vec<std::path::PathBuf>);

impl Drop for StateViewsEnded {
    fn drop(&mut self) {
        for work in &self.0 {
            swarm_sandbox::overlay::open_work_dir(work);
        }
    }
}

impl std::fmt::Debug for JailEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JailEnd")
    }
}

impl JailEnd {
    /// Waits for the jail to be gone.
    pub(crate) async fn finish(self) {
        if self.running.finished() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }
}

/// [`run`], but returns once the worker has ended, with its jail's end to wait for before
/// the layers it mounted (a view's, a git view's) are used again: the caller goes on (say,
/// commits what the worker left) while the jail unmounts.
pub(crate) async fn run_until_exit(
    req: ProcessRequest<'_>,
) -> Result<(ProcessOutcome, JailEnd), WorkerError> {
    let started = Instant::now();
    let state_views = req.state_views.iter().map(|v| v.work.clone()).collect();
    let (reader, writer) = std::io::pipe().map_err(WorkerError::Process)?;
    let log = state::create_file(req.log).map_err(WorkerError::task_file("create", req.log))?;
    // Kept until the process is gone: its temporary directory, its proxy, its gateway. If
    // this future is dropped (a caller's timeout), the whole group goes with `running`.
    let (mut running, keep) = launch::start(&req, writer)?;
    let (tail_tx, tail_rx) = tokio::sync::oneshot::channel();
    // Milliseconds since `started` of the last sign of life (output or a file change).
    let last_activity = Arc::new(AtomicU64::new(0));
    {
        // On the runtime's blocking threads, which stay for the next process (a thread of its
        // own each was ~2 % of a one-file run's CPU: made, its stack mapped, ended). Those
        // still reading the pipe of a worker that escaped its group do not hold swarm's exit
        // (main's `shutdown_background`).
        let last_activity = last_activity.clone();
        drop(tokio::task::spawn_blocking(move || {
            let _ = tail_tx.send(capture(reader, log, &last_activity, started));
        }));
    }
    // Its gateway's word that a request was refused for the budget (an agent's process).
    let short = keep.gateway.as_ref().map(Listener::short);
    let (exit, left_in_group) = wait(&mut running, &req, short.as_ref(), &last_activity, started)
        .await
        .map_err(WorkerError::Process)?;
    running.forget_group();
    // Normally the pipe closes as soon as the group is gone; a process that escaped the group
    // (setsid) may hold it open, and is not waited for.
    let (output_tail, _bytes) = tokio::time::timeout(Duration::from_secs(2), tail_rx)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_else(|| (String::new(), 0));
    let outcome = ProcessOutcome {
        exit,
        output_tail,
        spent: keep.gateway.as_ref().map(Listener::spent),
        // Only a process that ended by itself left anything: one that was stopped had its
        // children stopped with it.
        leftovers: match &keep.leftovers {
            _ if !matches!(exit, Exit::Code(_)) => 0,
            Some(file) => {
                let left = std::fs::read_to_string(file)
                    .ok()
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                if left > 0 {
                    let _ = std::fs::remove_file(file);
                }
                left
            }
            None => left_in_group,
        },
    };
    Ok((
        outcome,
        JailEnd {
            running,
            _keep: keep,
            _state_views: StateViewsEnded(state_views),
        },
    ))
}

/// Waits for the process to exit, or stops its group at the timeout, when it goes stale, or
/// when the run is cancelled. Whatever the group still holds afterwards is killed.
async fn wait(
    running: &mut Running,
    req: &ProcessRequest<'_>,
    short: Option<&CancellationToken>,
    last_activity: &AtomicU64,
    started: Instant,
) -> std::io::Result<(Exit, u32)> {
    let grace = kill_grace();
    Ok(tokio::select! {
        status = running.wait() => {
            let status = status?;
            // Leftover background processes of the worker die with it.
            let left = running.left_in_group();
            running.signal(libc::SIGKILL);
            // A request of its was refused for the budget, as it exited: it was stopped by
            // the budget whichever of the two `select!` saw first. (A process whose
            // requests were all let through keeps its work, whatever the run spent.)
            match short.is_some_and(CancellationToken::is_cancelled) {
                true => (Exit::OverBudget, left),
                false => (exit_of(status), left),
            }
        }
        () = tokio::time::sleep(req.timeout) => {
            stop_group(running, grace).await;
            (Exit::TimedOut, 0)
        }
        () = stale(req.idle_timeout, req.view.map_or(req.cwd, |v| &v.upper), last_activity, started) => {
            stop_group(running, grace).await;
            (Exit::Idle, 0)
        }
        () = req.cancel.cancelled() => {
            stop_group(running, grace).await;
            (Exit::Cancelled, 0)
        }
        () = over_budget(short) => {
            stop_group(running, grace).await;
            (Exit::OverBudget, 0)
        }
    })
}

/// Resolves when the gateway refused a request of the process for the run's budget (never
/// without a gateway to watch).
async fn over_budget(budget: Option<&CancellationToken>) {
    match budget {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Resolves when the process has shown no sign of life for `idle`: no output (tracked by
/// the capture thread) and no file modified under `cwd` (checked only once output has been
/// quiet for a while, by walking the tree for the newest modification time; for an overlay
/// worktree, its upper layer, where every change lands).
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

/// SIGTERM to the group, SIGKILL after `grace` if the shell has not exited.
async fn stop_group(running: &mut Running, grace: Duration) {
    running.signal(libc::SIGTERM);
    if tokio::time::timeout(grace, running.wait()).await.is_err() {
        running.signal(libc::SIGKILL);
        let _ = running.wait().await;
    }
    // Children that outlived the shell after SIGTERM.
    running.signal(libc::SIGKILL);
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

/// Copies the pipe into the log (up to the cap) and returns the tail and the byte count.
/// Known secrets are redacted first; bytes that might begin a secret wait for the next read.
fn capture(
    mut reader: std::io::PipeReader,
    log: File,
    last_activity: &AtomicU64,
    started: Instant,
) -> (String, u64) {
    let mut redactor = secrets::redactor().stream();
    let mut out = CappedLog {
        log: BufWriter::new(log),
        tail: Vec::with_capacity(2 * TAIL_BYTES),
        written: 0,
        ok: true,
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        last_activity.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        total += n as u64;
        out.push(&redactor.push(&buf[..n]));
    }
    out.push(&redactor.finish());
    out.finish(total)
}

/// The log file up to [`LOG_CAP`], and the last [`TAIL_BYTES`] in memory.
struct CappedLog {
    log: BufWriter<File>,
    tail: Vec<u8>,
    written: u64,
    ok: bool,
}

impl CappedLog {
    fn push(&mut self, chunk: &[u8]) {
        if self.ok && self.written < LOG_CAP {
            let room = (LOG_CAP - self.written).min(chunk.len() as u64) as usize;
            self.ok = self.log.write_all(&chunk[..room]).is_ok();
        }
        self.written += chunk.len() as u64;
        self.tail
            .extend_from_slice(&chunk[chunk.len().saturating_sub(TAIL_BYTES)..]);
        if self.tail.len() > 2 * TAIL_BYTES {
            self.tail.drain(..self.tail.len() - TAIL_BYTES);
        }
    }

    fn finish(mut self, total: u64) -> (String, u64) {
        if self.written > LOG_CAP {
            let _ = writeln!(
                self.log,
                "\n[swarm: output truncated at {} bytes; {} bytes not logged]",
                LOG_CAP,
                self.written - LOG_CAP
            );
        }
        let _ = self.log.flush();
        if self.tail.len() > TAIL_BYTES {
            self.tail.drain(..self.tail.len() - TAIL_BYTES);
        }
        (String::from_utf8_lossy(&self.tail).into_owned(), total)
    }
}
