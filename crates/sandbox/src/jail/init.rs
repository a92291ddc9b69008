//! Init, PID 1 of a jail's PID namespace: the walls (mounts, Landlock), the worker, and
//! what it leaves behind.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::Context as _;

use super::forward::start_forwarders;
use super::mounts::{hide, hide_but, mount, mount_git_view, mount_state_view, mount_view};
use super::{JAIL_FAILED, JailSpec, Never, errno, path};

/// PID 1 of the new namespace: mounts, Landlock, then the worker; reaps orphans, passes
/// signals on, and exits when the worker does (which ends every process left inside).
///
/// `known_mounts`: the mount table of the namespace this one was copied from, when a jail
/// host made it ([`super::mounts::MountTable`]).
pub(super) fn init_main(
    spec: &JailSpec,
    argv: &[CString],
    (status_fd, lifeline_fd): (i32, i32),
    known_mounts: Option<&[u8]>,
) -> anyhow::Result<Never> {
    // SAFETY: prctl and poll on our own fd.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(errno("prctl(PR_SET_PDEATHSIG)"));
        }
        // The jail may have died before PDEATHSIG was set: its end of the lifeline is gone.
        let mut fd = libc::pollfd {
            fd: lifeline_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut fd, 1, 0) > 0 && fd.revents & libc::POLLHUP != 0 {
            libc::_exit(i32::from(JAIL_FAILED));
        }
    }
    // The forwarder's doors, opened before `confine` covers every door; init holds them for
    // its life, for the forwarder's threads (close-on-exec: the worker never has them).
    let doors = open_doors(&spec.forwards)?;
    confine(spec, known_mounts)?;
    if !spec.forwards.is_empty() {
        // Its threads are made with every signal blocked and keep that mask: a signal sent
        // to init (a stop passed on by the host) is taken by init's own thread, whose
        // `waitpid` it interrupts, and a worker stopped gracefully can still reach swarm.
        let kept = block_signals();
        let started = start_forwarders(&spec.forwards, &doors, &spec.keys);
        set_signal_mask(&kept);
        started?;
    }
    // SAFETY: handlers only store the signal number in an atomic.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            // No SA_RESTART: waitpid returns EINTR, and the signal is passed on.
            action.sa_flags = 0;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
    let worker = start_worker(spec, argv, &[status_fd, lifeline_fd])?;
    reap(worker, status_fd)
}

/// Each door of `forwards`, opened as a path only (`O_PATH`): the forwarder connects to it
/// through `/proc/self/fd/N` once its folder is covered.
fn open_doors(forwards: &[(u16, super::Bytes)]) -> anyhow::Result<Vec<std::os::fd::OwnedFd>> {
    forwards
        .iter()
        .map(|(port, socket)| {
            let socket = path(socket);
            rustix::fs::open(
                &socket,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .with_context(|| format!("cannot open the door of port {port}: {}", socket.display()))
        })
        .collect()
}

/// The walls of the jail, from inside its namespaces: private mounts, a `/proc` of the new
/// PID namespace, the hidden paths, then Landlock (writes only where `spec` allows).
fn confine(spec: &JailSpec, known_mounts: Option<&[u8]>) -> anyhow::Result<()> {
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .context("cannot make the mounts private")?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .context("cannot mount /proc for the new PID namespace")?;
    if let Some(view) = &spec.overlay {
        mount_view(view)?;
    }
    // The state views first: their layers may be under the git directory (a task's).
    for view in &spec.state_views {
        mount_state_view(view)?;
    }
    if let Some((view, worktree)) = &spec.git_view {
        // A jail host's table, else this namespace's own, read now (the kernel writes it out
        // whole at each read, which a host spares its tasks).
        let own = known_mounts
            .is_none()
            .then(|| std::fs::read("/proc/self/mountinfo").ok())
            .flatten();
        let table = known_mounts.or(own.as_deref());
        let mounted_here: Vec<&std::path::Path> =
            spec.state_views.iter().map(|v| v.dir.as_path()).collect();
        mount_git_view(view, &path(worktree), (table, &mounted_here))?;
    }
    // What the worker runs in, and its own files, stay where a hidden folder holds them.
    for p in &spec.hide {
        let p = path(p);
        let inside = spec.kept_inside(&p);
        match inside.is_empty() {
            true => hide(&p)?,
            false => hide_but(&p, &inside)?,
        }
    }
    let writable: Vec<PathBuf> = spec.writable.iter().map(path).collect();
    crate::restrict_writes(&writable).context("Landlock")
}

/// What the worker's process needs between its start and `execvp`, made ready beforehand.
struct Exec<'a> {
    close: &'a [i32],
    cwd: &'a CString,
    argv: &'a [*const libc::c_char],
    /// init's signal mask, the worker's once its handlers are the default ones.
    mask: libc::sigset_t,
}

/// Starts the worker: default signal handling, `close` closed, in the task's directory, then
/// `argv`. Returns its pid.
///
/// `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn` does: the worker runs in init's memory
/// (on a stack of its own) until its `execvp`, while init waits, so init's memory is neither
/// copied nor torn down again for a process that replaces it at once. Signals are blocked
/// meanwhile, so that none runs init's handler in the worker.
fn start_worker(spec: &JailSpec, argv: &[CString], close: &[i32]) -> anyhow::Result<i32> {
    let cwd = CString::new(spec.cwd.as_bytes()).context("the directory contains a NUL byte")?;
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let mut stack = vec![0u8; 256 * 1024];
    let exec = Exec {
        close,
        cwd: &cwd,
        argv: &ptrs,
        mask: block_signals(),
    };
    // The stack grows down from its (16-byte aligned) end.
    let top = (stack.as_mut_ptr_range().end as usize) & !15;
    // SAFETY: the child runs `exec_worker` on `stack` with a pointer to `exec`, both alive
    // until it has exec'd or exited (CLONE_VFORK suspends this process until then).
    let worker = unsafe {
        libc::clone(
            exec_worker,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&exec as *const Exec<'_>).cast_mut().cast(),
        )
    };
    let error = (worker < 0).then(|| errno("cannot start the worker"));
    set_signal_mask(&exec.mask);
    drop(stack);
    error.map_or(Ok(worker), Err)
}

/// Blocks every signal in the calling thread (and in the threads and processes it makes
/// meanwhile, which inherit the mask); returns the mask it replaced, for [`set_signal_mask`].
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigfillset and pthread_sigmask on locals, for this
    // thread only.
    unsafe {
        let (mut all, mut kept) = (std::mem::zeroed(), std::mem::zeroed());
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut kept);
        kept
    }
}

/// Sets the calling thread's signal mask to `mask` (one [`block_signals`] returned).
fn set_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: pthread_sigmask with a valid mask, for this thread only.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// The worker's side of [`start_worker`], until `execvp`: only calls that touch no memory
/// init relies on, but for the message of a failed `execvp` (init's own thread waits, so it
/// holds no lock; a forwarder thread that holds one lets it go, as it would for any thread).
extern "C" fn exec_worker(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Exec` that start_worker keeps alive while this runs.
    let exec = unsafe { &*(arg as *const Exec<'_>) };
    // SAFETY: syscalls on prepared C strings and fds; _exit on failure.
    unsafe {
        for fd in exec.close {
            libc::close(*fd);
        }
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_DFL);
        }
        set_signal_mask(&exec.mask);
        if libc::chdir(exec.cwd.as_ptr()) != 0 {
            eprintln!(
                "swarm: cannot enter {}: {}",
                exec.cwd.to_string_lossy(),
                std::io::Error::last_os_error()
            );
            libc::_exit(127);
        }
        libc::execvp(exec.argv[0], exec.argv.as_ptr());
        let error = std::io::Error::last_os_error();
        eprintln!(
            "swarm: cannot run {}: {error}",
            std::ffi::CStr::from_ptr(exec.argv[0]).to_string_lossy()
        );
        // As a shell says it: not found, or found but not runnable.
        libc::_exit(match error.kind() {
            std::io::ErrorKind::NotFound => 127,
            _ => 126,
        });
    }
}

/// Init's life once the worker runs: reaps orphans, passes signals on to every process of
/// the namespace, and when the worker ends, ends every process left inside, writes the
/// worker's status to `status_fd` and exits.
fn reap(worker: i32, status_fd: i32) -> ! {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waitpid into a local.
        let pid = unsafe { libc::waitpid(-1, &mut st, 0) };
        if pid == worker {
            let left = leftovers();
            end_the_rest();
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&st.to_ne_bytes());
            bytes[4..].copy_from_slice(&left.to_ne_bytes());
            // SAFETY: closing our own fds, writing a local buffer to our pipe, then leaving.
            // The task's output (our standard output and error) is closed first: whoever
            // reads the status then finds the output's end.
            unsafe {
                libc::close(1);
                libc::close(2);
                libc::write(status_fd, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0);
            }
        }
        if pid < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {
                    let sig = PENDING.swap(0, Ordering::SeqCst);
                    if sig != 0 {
                        // Every process of the namespace but init, setsid'd ones included.
                        // SAFETY: kill only sends a signal.
                        unsafe { libc::kill(-1, sig) };
                    }
                }
                // SAFETY: nothing left to wait for (cannot happen before the worker ends).
                _ => unsafe { libc::_exit(0) },
            }
        }
    }
}

/// Kills every process of the namespace but init and reaps them all (each one orphaned on
/// the way is init's to reap): once it returns, nothing of the task runs any more and what
/// it wrote is final, as it would be once init's own exit had ended them.
fn end_the_rest() {
    // SAFETY: kill only sends a signal, to every process of this namespace but init.
    unsafe { libc::kill(-1, libc::SIGKILL) };
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waitpid into a local.
        let pid = unsafe { libc::waitpid(-1, &mut st, 0) };
        if pid < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// The processes of the namespace still running, but init (whose forwarder is a thread of
/// its own, not listed): what the worker left behind (ended by [`end_the_rest`]).
fn leftovers() -> u32 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let running = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // `pid (name) S …`: the state follows the last parenthesis; Z is a zombie.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != 1)
        .filter(running)
        .count() as u32
}

static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    PENDING.store(sig, Ordering::SeqCst);
}
