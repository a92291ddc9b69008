//! A jail host: the part of a jail that does not depend on the task, set up once per worker
//! slot and kept (forked by the host factory, [`super::factory`]), which makes each task's
//! init.
//!
//! ```text
//! swarm ── host (its own process group; ends when swarm's end of its socket closes)
//!            │ once: unshare user, mount and (unless --network) network namespaces;
//!            │ credential stores hidden
//!            └─ the task's init (cloned into a nested user namespace and new PID, mount
//!                 │ and IPC namespaces; its own process group; dies with the host)
//!                 └─ the worker: exactly as in a one-off jail (`super::init`)
//! ```
//!
//! What a task can change lives in the namespaces made for it alone: its processes (PID,
//! all ended with its init), its mounts (its worktree's view, `/proc`), System V IPC, and its
//! user namespace (keyrings; the host's mounts are locked below it). The host's namespaces
//! hold nothing a task can change: a worker has no capability in them (it runs after
//! `execve` as an ordinary user of its own nested namespace). A host for processes with
//! forwards (an allow-list, a model gateway) brings its network namespace's loopback up once;
//! each task's init opens its own doors and starts its own forwarder there, as a one-off
//! jail's does, and the folder of the doors is hidden in the task's mount namespace, after
//! init opened them, rather than in the host's. A worker cannot change the loopback it
//! shares with the slot's next tasks (it has no capability in the host's namespaces), and
//! whatever it bound or connected there is closed when its PID namespace ends, before the
//! host takes its next order.
//!
//! The protocol is in [`super::wire`]. For each task the host reports `Exited` as soon as
//! the task's init writes the worker's status (before its exit unmounts the task's mount
//! namespace), then `Gone` once it has reaped init; only then does it take the next order.
//! Init ignores a signal from outside its namespace before it has set its handlers (the
//! kernel's rule for a namespace's init), but SIGKILL: a task stopped that early is killed
//! after swarm's grace period.
//!
//! swarm signals a task through the host (`Signal`), which owns the task's init and has not
//! reaped it yet, so the signal cannot reach a reused process group.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::mounts::MountTable;
use super::wire::{Order, Report, read_order, send_report};
use super::{Bytes, JAIL_FAILED, JailSpec, Never, TASK_NAMESPACES, errno, path};
use crate::door::DoorKey;

/// What is the same for every task of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct HostSpec {
    /// Paths whose content is hidden from every task.
    pub hide: Vec<Bytes>,
    /// Keep the host's network (no network namespace).
    pub network: bool,
    /// Bring the network namespace's loopback up, for its tasks' forwarders (an allow-list,
    /// a model gateway); it stays down for every other task.
    #[serde(default)]
    pub loopback: bool,
    /// swarm's pid.
    pub parent: u32,
}

/// The host process's life, once forked by the factory ([`super::factory`]) with its orders
/// socket as standard input and its reports pipe as standard output: namespaces once, then
/// one task after another until swarm's end of the socket closes. Its exit code.
pub(super) fn serve(spec: &HostSpec, probe: bool) -> u8 {
    let ready = set_up(spec, probe).and_then(|()| MountTable::open());
    let report = match &ready {
        Ok(_) => Report::Ready,
        Err(e) => Report::Failed(format!("{e:#}")),
    };
    if send_report(&report).is_err() {
        return JAIL_FAILED;
    }
    let Ok(mut mounts) = ready else {
        return JAIL_FAILED;
    };
    loop {
        match read_order(0) {
            Ok(Some((
                Order::Run {
                    spec: task,
                    env,
                    keys,
                },
                Some(output),
            ))) => {
                let mut task = *task;
                task.keys = keys.into_iter().map(DoorKey).collect();
                match run_task(spec, (&task, &env), output, &mut mounts) {
                    Ok(Some(())) => {}
                    // swarm is gone: so is its task.
                    Ok(None) => return 0,
                    Err(_) => return JAIL_FAILED,
                }
                if send_report(&Report::Gone).is_err() {
                    return 0;
                }
            }
            // No task runs: nothing to signal.
            Ok(Some((Order::Signal(_), _))) => {}
            Ok(None) => return 0,
            Ok(Some((Order::Run { .. }, None))) | Err(_) => return JAIL_FAILED,
        }
    }
}

/// The host's namespaces, its hidden paths, and (with `probe`) a check that a task's
/// namespaces can be made inside them.
fn set_up(spec: &HostSpec, probe: bool) -> anyhow::Result<()> {
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
    if spec.loopback && !spec.network {
        super::loopback_up()?;
    }
    super::mounts::mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .context("cannot make the mounts private")?;
    for p in &spec.hide {
        super::mounts::hide(&path(p))?;
    }
    if probe {
        probe_task_namespaces()?;
    }
    Ok(())
}

/// Checks that a task's namespaces can be made inside the host's: once a process, by its
/// first hosts (what a host can make depends on the kernel and the user, not on the host).
fn probe_task_namespaces() -> anyhow::Result<()> {
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

/// Makes the task's init in new namespaces and waits for it, passing swarm's signals on.
/// Reports the worker's status as soon as init says it (before init's exit unmounts the
/// task's mount namespace), or init's own when it is reaped if it said nothing. `None` when
/// swarm's socket closed meanwhile (the task was killed).
fn run_task(
    host: &HostSpec,
    (task, env): (&JailSpec, &[(Bytes, Bytes)]),
    output: OwnedFd,
    mounts: &mut MountTable,
) -> anyhow::Result<Option<()>> {
    // Where it cannot be read, the task's init reads its own.
    let known_mounts = mounts.current().ok();
    let [status, status_w] = owned(super::pipe()?);
    // Held until init is reaped: its end hangs up if the host dies before init watches it.
    let [lifeline_r, lifeline_w] = owned(super::pipe()?);
    // SAFETY: getuid and getgid take nothing and cannot fail.
    let ids = unsafe { (libc::getuid(), libc::getgid()) };
    let pid = clone_init()?;
    if pid == 0 {
        drop((status, lifeline_w));
        let pipes = (status_w, lifeline_r);
        let e = match init_task(host, (task, env), (output, ids), pipes, known_mounts) {
            Ok(never) => match never {},
            Err(e) => e,
        };
        eprintln!("swarm: cannot confine the worker process: {e:#}");
        // SAFETY: leaving the child without running the host's destructors.
        unsafe { libc::_exit(i32::from(JAIL_FAILED)) };
    }
    drop((output, status_w, lifeline_r));
    // Both sides set the group, so a signal sent at once finds it.
    // SAFETY: setpgid on our own child.
    unsafe { libc::setpgid(pid, pid) };
    let pidfd = pidfd_open(pid)?;
    let mut status = Some(status);
    let mut reported = false;
    loop {
        let watched = [
            0,
            pidfd.as_raw_fd(),
            status.as_ref().map_or(-1, |e| e.as_raw_fd()),
        ];
        let Some(ready) = readable(watched)? else {
            continue;
        };
        if ready[2]
            && let Some(fd) = status.take()
        {
            if let Some((worker, left)) = super::read_worker_status(fd.as_raw_fd()) {
                super::write_leftovers(task, left);
                send_report(&Report::Exited(super::final_status(worker)))
                    .context("reporting to swarm")?;
                reported = true;
            }
            continue;
        }
        if ready[1] {
            let status = super::wait_for(pid)?;
            drop(lifeline_w);
            if !reported {
                // Init said nothing (it failed, or was killed): its own status.
                send_report(&Report::Exited(status)).context("reporting to swarm")?;
            }
            return Ok(Some(()));
        }
        if ready[0] {
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

/// Which of `fds` (`-1`: none) can be read, or have hung up; `None` if a signal came first.
fn readable(fds: [RawFd; 3]) -> anyhow::Result<Option<[bool; 3]>> {
    let mut polled = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    // SAFETY: poll on a local array.
    if unsafe { libc::poll(polled.as_mut_ptr(), 3, -1) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            return Ok(None);
        }
        return Err(errno("poll"));
    }
    Ok(Some(polled.map(|p| p.revents != 0)))
}

fn owned(fds: [RawFd; 2]) -> [OwnedFd; 2] {
    // SAFETY: the fds were just made and are ours alone.
    fds.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A child in the task's own namespaces ([`TASK_NAMESPACES`]), where it is PID 1: `fork`, but
/// made with them, so no process stands between the host and the task's init. `0` in the
/// child.
fn clone_init() -> anyhow::Result<i32> {
    let flags = (TASK_NAMESPACES | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: the host is single-threaded. Without CLONE_VM and with no new stack, the child
    // runs on in a copy of the host's memory, as after `fork`; it calls no function that
    // trusts the thread id glibc caches (a raw clone does not update it).
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if pid < 0 {
        return Err(errno(
            "cannot create a task's namespaces (user, PID, mount, IPC)",
        ));
    }
    Ok(pid as i32)
}

/// The task's init, in the host's clone, PID 1 of its namespaces: its own process group, the
/// output pipe as standard output and error, `/dev/null` as input, the task's environment,
/// `ids` mapped to themselves, then the same init and worker as a one-off jail's.
fn init_task(
    host: &HostSpec,
    (task, env): (&JailSpec, &[(Bytes, Bytes)]),
    (output, ids): (OwnedFd, (libc::uid_t, libc::gid_t)),
    (status, lifeline): (OwnedFd, OwnedFd),
    known_mounts: Option<&[u8]>,
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
    let argv = super::argv_of(task)?;
    let by_itself = task.hidden_by_itself();
    anyhow::ensure!(
        host.loopback == (!task.forwards.is_empty() && !task.network)
            && task.keys.len() == task.forwards.len()
            && task.network == host.network
            && task.hide.iter().all(|p| by_itself(&path(p))),
        "a task a jail host cannot run"
    );
    for (key, _) in std::env::vars_os() {
        // SAFETY: this cloned process is single-threaded.
        unsafe { std::env::remove_var(key) };
    }
    for (key, value) in env {
        // SAFETY: as above.
        unsafe { std::env::set_var(path(key), path(value)) };
    }
    super::map_ids(ids.0, ids.1)?;
    // Not dumpable from here on, as a one-off jail's init.
    super::not_dumpable()?;
    // Dies with the host from here on (and exits at once if the host is gone already).
    super::init_main(
        task,
        &argv,
        (
            std::os::fd::IntoRawFd::into_raw_fd(status),
            std::os::fd::IntoRawFd::into_raw_fd(lifeline),
        ),
        known_mounts,
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
