//! The host factory: one process (`swarm __swarm-jail-hosts`) that makes every jail host of
//! a swarm process by forking itself, instead of each host being a new `execve` of swarm.
//!
//! ```text
//! swarm ─┬─ factory (started once; ends when swarm's end of its socket closes)
//!        ├─ host      ┐ forked by the factory with CLONE_PARENT: swarm's children, which
//!        └─ host …    ┘ swarm waits for, signals and reaps as it would a process it started
//! ```
//!
//! A host made by `execve` paid for loading swarm's binary each time (its libraries, 36,000
//! relocations, ~400 page faults, the C library's start: ~1.2 ms of CPU of a host's ~1.8 ms
//! at `-j 64`, all of it in the first wave of tasks); a fork of the factory, which did that
//! once and stays small and single-threaded, costs a tenth of it. What a host does after it
//! started is unchanged ([`super::host`]): it enters its namespaces and checks them itself.
//!
//! The protocol, on the factory's standard input (a Unix stream socket): swarm sends a
//! [`HostSpec`] and whether the host is to probe for a task's namespaces (until one did),
//! framed as an order ([`super::wire::frame`]), with two descriptors riding along
//! (the host's end of its orders socket, the write end of its reports pipe); the factory
//! answers with the new host's pid, 4 bytes little-endian (a negative errno if it could not
//! fork). The factory keeps no copy of either descriptor.

use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, IntoRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::{ExitCode, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;

use super::host::HostSpec;
use super::wire::{frame, read_framed, send};
use super::{JAIL_FAILED, errno};

/// The argument that makes swarm the host factory.
pub(crate) const ARG: &str = "__swarm-jail-hosts";
/// The name (`comm`, as `ps` shows it) of the factory.
pub const FACTORY_NAME: &std::ffi::CStr = c"swarm-hosts";
/// The name of each host.
pub const HOST_NAME: &std::ffi::CStr = c"swarm-jail-host";

/// The factory of this swarm process, started with its first host.
static FACTORY: Mutex<Option<Factory>> = Mutex::new(None);
/// A host has checked that a task's namespaces can be made in a host's: the next ones need
/// not (a fork, an `unshare` and an exit each).
static PROBED: AtomicBool = AtomicBool::new(false);

/// A child process of swarm known by its pid (a host, the factory): swarm reaps it, so its
/// pid is not reused before [`ChildPid::wait`].
#[derive(Debug)]
pub(super) struct ChildPid {
    pid: libc::pid_t,
    reaped: bool,
}

impl ChildPid {
    /// Sends SIGKILL, unless it was reaped.
    pub(super) fn kill(&self) {
        if !self.reaped {
            // SAFETY: kill takes a pid and a signal; the pid is our unreaped child's.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }

    /// Waits for it to end and reaps it (blocking).
    pub(super) fn wait(&mut self) {
        if !self.reaped {
            let _ = super::wait_for(self.pid);
            self.reaped = true;
        }
    }
}

/// swarm's side of the factory.
struct Factory {
    process: ChildPid,
    socket: UnixStream,
}

/// Starts a host for `spec` with `ends` (the host's end of its orders socket, the write end
/// of its reports pipe): its process, a child of this one. Blocks for a fork (the host's own
/// set-up follows in the host). A factory that cannot be reached (it was killed) is ended
/// and a new one started, once.
pub(super) fn start_host(spec: &HostSpec, ends: [OwnedFd; 2]) -> anyhow::Result<ChildPid> {
    let mut factory = FACTORY.lock().unwrap_or_else(|e| e.into_inner());
    let order = (spec, !PROBED.load(Ordering::Relaxed));
    let mut failed = None;
    for _ in 0..2 {
        let running = match factory.take() {
            Some(running) => running,
            None => Factory::start()?,
        };
        match running.order(&order, &ends) {
            Ok(pid) => {
                *factory = Some(running);
                return Ok(ChildPid { pid, reaped: false });
            }
            Err(e) => {
                let mut process = running.process;
                process.kill();
                process.wait();
                failed = Some(e);
            }
        }
    }
    Err(failed.unwrap_or_else(|| anyhow::anyhow!("no jail host factory")))
}

/// A host that probed is ready: the next ones need not probe.
pub(super) fn probed() {
    PROBED.store(true, Ordering::Relaxed);
}

/// Lets the factory go (it ends when its socket closes): its process, to be reaped.
pub(super) fn retire() -> Option<ChildPid> {
    let factory = FACTORY.lock().unwrap_or_else(|e| e.into_inner()).take();
    factory.map(|f| f.process)
}

impl Factory {
    fn start() -> anyhow::Result<Factory> {
        let (socket, theirs) = UnixStream::pair().context("a socket for the jail host factory")?;
        let mut command = std::process::Command::new("/proc/self/exe");
        crate::open_files::restore_in_child(&mut command);
        let child = command
            .arg(ARG)
            .stdin(OwnedFd::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env_clear()
            .current_dir("/")
            .process_group(0)
            .spawn()
            .context("cannot start the jail host factory")?;
        // The child holds no handle (its standard streams are ours): its pid is all of it.
        let process = ChildPid {
            pid: child.id() as libc::pid_t,
            reaped: false,
        };
        Ok(Factory { process, socket })
    }

    /// Sends one order and reads the new host's pid.
    fn order(&self, order: &(&HostSpec, bool), ends: &[OwnedFd; 2]) -> anyhow::Result<libc::pid_t> {
        let framed = frame(order)?;
        send(&self.socket, &framed, &[ends[0].as_fd(), ends[1].as_fd()])
            .context("cannot reach the jail host factory")?;
        let mut pid = [0u8; 4];
        (&self.socket)
            .read_exact(&mut pid)
            .context("no answer from the jail host factory")?;
        match i32::from_le_bytes(pid) {
            pid if pid > 0 => Ok(pid),
            e => Err(std::io::Error::from_raw_os_error(-e)).context("cannot fork a jail host"),
        }
    }
}

/// The factory's life: a host forked for each order, until swarm's end of the socket closes.
pub(super) fn main() -> ExitCode {
    set_name(FACTORY_NAME);
    // It holds nothing secret, but nothing of it is any worker's business either.
    if super::not_dumpable().is_err() {
        return ExitCode::from(JAIL_FAILED);
    }
    loop {
        let ((spec, probe), ends) = match read_framed::<(HostSpec, bool)>(0) {
            Ok(Some(order)) => order,
            Ok(None) => return ExitCode::SUCCESS,
            Err(_) => return ExitCode::from(JAIL_FAILED),
        };
        let pid = match <[OwnedFd; 2]>::try_from(ends) {
            Ok(ends) => fork_host(&spec, probe, ends),
            Err(_) => -libc::EINVAL,
        };
        // SAFETY: fd 0 is the factory's socket for its whole life; ManuallyDrop keeps it open.
        let mut socket = std::mem::ManuallyDrop::new(unsafe {
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(0)
        });
        if socket.write_all(&pid.to_le_bytes()).is_err() {
            return ExitCode::from(JAIL_FAILED);
        }
    }
}

/// Forks a host for `spec`, a child of swarm (CLONE_PARENT): its pid, or a negative errno.
/// The factory's copies of `ends` are closed when this returns.
fn fork_host(spec: &HostSpec, probe: bool, ends: [OwnedFd; 2]) -> libc::pid_t {
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: the factory is single-threaded. Without CLONE_VM and with no new stack, the
    // child runs on in a copy of the factory's memory, as after `fork`; as a task's init
    // does, it calls no function that trusts the thread id glibc caches (a raw clone does
    // not update it).
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    match pid {
        0 => {
            let code = match become_host(ends) {
                Ok(()) => super::host::serve(spec, probe),
                Err(_) => JAIL_FAILED,
            };
            // SAFETY: leaving the child without running the factory's destructors.
            unsafe { libc::_exit(i32::from(code)) }
        }
        pid if pid > 0 => pid as libc::pid_t,
        _ => -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    }
}

/// This process's name (at most 15 bytes), as `ps` shows it.
fn set_name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string, which `name` is.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// In the forked host: its name, the orders socket as standard input, the reports pipe as
/// standard output, nothing else of the factory's (its socket was standard input), its own
/// process group.
fn become_host([orders, reports]: [OwnedFd; 2]) -> anyhow::Result<()> {
    set_name(HOST_NAME);
    let (orders, reports) = (orders.into_raw_fd(), reports.into_raw_fd());
    // SAFETY: dup2, close_range and setpgid on this process's own descriptors and group;
    // standard error stays the factory's `/dev/null`.
    unsafe {
        if libc::dup2(orders, 0) < 0 || libc::dup2(reports, 1) < 0 {
            return Err(errno("dup2"));
        }
        if libc::close_range(3, u32::MAX, 0) != 0 {
            return Err(errno("close_range"));
        }
        if libc::setpgid(0, 0) != 0 {
            return Err(errno("setpgid"));
        }
    }
    Ok(())
}
