//! A jail host: the part of a jail that does not depend on the task, set up once per worker
//! slot and kept (`swarm __swarm-jail-host SPEC`), which forks each task's jail.
//!
//! ```text
//! swarm ── host (its own process group; ends when swarm's end of its socket closes)
//!            │ once: unshare user, mount and (unless --network) network namespaces;
//!            │ credential stores hidden
//!            └─ the task's jail (a fork; its own process group; dies with the host)
//!                 │ unshare user (nested), PID, mount and IPC namespaces
//!                 └─ init, the worker: exactly as in a one-off jail (`super::init`)
//! ```
//!
//! What a task can change lives in the namespaces made for it alone: its processes (PID,
//! all ended with its init), its mounts (its worktree's view, `/proc`), System V IPC, and its
//! user namespace (keyrings; the host's mounts are locked below it). The host's namespaces
//! hold nothing a task can change: a worker has no capability in them (it runs after
//! `execve` as an ordinary user of its own nested namespace). Forwards (an allow-list, a
//! model gateway) need the loopback of a network namespace of the task's own, so those
//! processes keep the one-off jail.
//!
//! The protocol is in [`super::wire`]. For each task the host reports `Exited` as soon as
//! the task's jail writes the worker's status (before its exit unmounts the task's mount
//! namespace), then `Gone` once it has reaped the jail; only then does it take the next order.
//!
//! swarm signals a task through the host (`Signal`), which owns the task's jail and has not
//! reaped it yet, so the signal cannot reach a reused process group.

use std::ffi::OsString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt as _;
use std::process::ExitCode;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::wire::{Order, Report, read_order, send_report};
use super::{Bytes, JAIL_FAILED, JailSpec, Never, TASK_NAMESPACES, errno, path};

/// The argument that makes swarm a jail host.
pub(crate) const ARG: &str = "__swarm-jail-host";

/// What is the same for every task of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct HostSpec {
    /// Paths whose content is hidden from every task.
    pub hide: Vec<Bytes>,
    /// Keep the host's network (no network namespace).
    pub network: bool,
    /// swarm's pid.
    pub parent: u32,
}

/// The host process's life: namespaces once, then one task after another until swarm's end
/// of the socket closes.
pub(super) fn main(arg: Option<OsString>) -> ExitCode {
    let spec = arg
        .context("no host spec")
        .and_then(|a| serde_json::from_slice::<HostSpec>(&a.into_vec()).context("host spec"));
    let ready = spec.and_then(|spec| set_up(&spec).map(|()| spec));
    let report = match &ready {
        Ok(_) => Report::Ready,
        Err(e) => Report::Failed(format!("{e:#}")),
    };
    if send_report(&report).is_err() {
        return ExitCode::from(JAIL_FAILED);
    }
    let Ok(spec) = ready else {
        return ExitCode::from(JAIL_FAILED);
    };
    loop {
        match read_order(0) {
            Ok(Some((Order::Run { spec: task, env }, Some(output)))) => {
                match run_task(&spec, &task, &env, output) {
                    Ok(Some(())) => {}
                    // swarm is gone: so is its task.
                    Ok(None) => return ExitCode::SUCCESS,
                    Err(_) => return ExitCode::from(JAIL_FAILED),
                }
                if send_report(&Report::Gone).is_err() {
                    return ExitCode::SUCCESS;
                }
            }
            // No task runs: nothing to signal.
            Ok(Some((Order::Signal(_), _))) => {}
            Ok(None) => return ExitCode::SUCCESS,
            Ok(Some((Order::Run { .. }, None))) | Err(_) => return ExitCode::from(JAIL_FAILED),
        }
    }
}

/// The host's namespaces, its hidden paths, and a check that a task's namespaces can be
/// made inside them.
fn set_up(spec: &HostSpec) -> anyhow::Result<()> {
    anyhow::ensure!(
        std::os::unix::process::parent_id() == spec.parent,
        "swarm has exited"
    );
    super::enter_namespaces(
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | super::network(spec.network),
    )?;
    // The host holds nothing secret, but nothing of it is any worker's business either.
    // SAFETY: prctl has no memory effects.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } != 0 {
        return Err(errno("prctl(PR_SET_DUMPABLE)"));
    }
    super::mounts::mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .context("cannot make the mounts private")?;
    for p in &spec.hide {
        super::mounts::hide(&path(p))?;
    }
    // SAFETY: single-threaded; the child only unshares and leaves.
    let probe = unsafe { libc::fork() };
    if probe < 0 {
        return Err(errno("fork"));
    }
    if probe == 0 {
        let code = match super::enter_namespaces(TASK_NAMESPACES) {
            Ok(()) => 0,
            Err(_) => 1,
        };
        // SAFETY: leaving the child without running destructors.
        unsafe { libc::_exit(code) };
    }
    let status = super::wait_for(probe)?;
    anyhow::ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "a task's namespaces cannot be made inside a jail host's"
    );
    Ok(())
}

/// Forks the task's jail and waits for it, passing swarm's signals on. Reports the worker's
/// status as soon as the jail says it (before the jail's end unmounts its namespace), or
/// when the jail is reaped if it said nothing. `None` when swarm's socket closed meanwhile
/// (the task was killed).
fn run_task(
    host: &HostSpec,
    task: &JailSpec,
    env: &[(Bytes, Bytes)],
    output: OwnedFd,
) -> anyhow::Result<Option<()>> {
    let host_pid = std::process::id();
    let [early, early_w] = super::pipe()?;
    // SAFETY: the fds were just made and are ours.
    let (early, early_w) = unsafe { (OwnedFd::from_raw_fd(early), OwnedFd::from_raw_fd(early_w)) };
    // SAFETY: the host is single-threaded; the child runs ordinary Rust until it execs.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno("fork"));
    }
    if pid == 0 {
        drop(early);
        let e = match task_main(host, host_pid, task, env, output, early_w) {
            Ok(never) => match never {},
            Err(e) => e,
        };
        eprintln!("swarm: cannot confine the worker process: {e:#}");
        // SAFETY: leaving the child without running the host's destructors.
        unsafe { libc::_exit(i32::from(JAIL_FAILED)) };
    }
    drop((output, early_w));
    // Both sides set the group, so a signal sent at once finds it.
    // SAFETY: setpgid on our own child.
    unsafe { libc::setpgid(pid, pid) };
    let pidfd = pidfd_open(pid)?;
    let mut early = Some(early);
    let mut reported = false;
    loop {
        let mut fds = [
            0,
            pidfd.as_raw_fd(),
            early.as_ref().map_or(-1, |e| e.as_raw_fd()),
        ]
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: poll on a local array.
        if unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) } < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(errno("poll"));
        }
        if fds[2].revents != 0
            && let Some(fd) = early.take()
        {
            if let Some(status) = read_status(&fd) {
                send_report(&Report::Exited(status)).context("reporting to swarm")?;
                reported = true;
            }
            continue;
        }
        if fds[1].revents != 0 {
            let status = super::wait_for(pid)?;
            if !reported {
                // The jail said nothing (it failed, or was killed): its own status.
                send_report(&Report::Exited(status)).context("reporting to swarm")?;
            }
            return Ok(Some(()));
        }
        if fds[0].revents != 0 {
            match read_order(0) {
                Ok(Some((Order::Signal(sig), _))) => {
                    // SAFETY: kill only sends a signal; the group is our unreaped child's.
                    unsafe { libc::killpg(pid, sig) };
                }
                // swarm is gone, or speaks out of turn: the task ends here.
                _ => {
                    // SAFETY: as above.
                    unsafe { libc::killpg(pid, libc::SIGKILL) };
                    let _ = super::wait_for(pid);
                    return Ok(None);
                }
            }
        }
    }
}

/// The status a task's jail wrote on `fd`; `None` at its end without one.
fn read_status(fd: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    // SAFETY: reading into a local buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    (n == 4).then(|| i32::from_ne_bytes(buf))
}

/// The task's jail, in the host's fork: its own process group, the output pipe as standard
/// output and error, `/dev/null` as input, the task's environment, then its namespaces and
/// the same init and worker as a one-off jail.
fn task_main(
    host: &HostSpec,
    host_pid: u32,
    task: &JailSpec,
    env: &[(Bytes, Bytes)],
    output: OwnedFd,
    early: OwnedFd,
) -> anyhow::Result<Never> {
    let null = std::fs::File::open("/dev/null").context("/dev/null")?;
    // SAFETY: setpgid and dup2 on this process's own fds; the originals are closed when
    // dropped. Standard input was the host's socket, output its report pipe: both are
    // replaced, so nothing of the host's reaches the task.
    unsafe {
        libc::setpgid(0, 0);
        if libc::dup2(output.as_raw_fd(), 1) < 0
            || libc::dup2(output.as_raw_fd(), 2) < 0
            || libc::dup2(null.as_raw_fd(), 0) < 0
        {
            return Err(errno("dup2"));
        }
    }
    drop((output, null));
    super::watch_parent(host_pid, "the jail host has exited")?;
    let argv = super::argv_of(task)?;
    anyhow::ensure!(
        task.forwards.is_empty() && task.network == host.network && task.hide.is_empty(),
        "a task a jail host cannot run"
    );
    for (key, _) in std::env::vars_os() {
        // SAFETY: this forked process is single-threaded.
        unsafe { std::env::remove_var(key) };
    }
    for (key, value) in env {
        // SAFETY: as above.
        unsafe { std::env::set_var(path(key), path(value)) };
    }
    super::enter_namespaces(TASK_NAMESPACES)?;
    super::contained(
        task,
        &argv,
        Some(std::os::fd::IntoRawFd::into_raw_fd(early)),
    )
}

fn pidfd_open(pid: i32) -> anyhow::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(errno("pidfd_open"));
    }
    // SAFETY: the fd was just returned to us and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// For swarm's side: the argument vector of a host process.
pub(super) fn host_args(spec: &HostSpec) -> anyhow::Result<[OsString; 2]> {
    Ok([ARG.into(), serde_json::to_string(spec)?.into()])
}
