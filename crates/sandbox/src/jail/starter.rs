//! The thread that starts every one-off jail. A jail asks for its parent's death signal
//! (`PR_SET_PDEATHSIG`), so that it dies with swarm; Linux sends that signal when the parent
//! *thread* ends, not the process. swarm runs on an async runtime whose threads come and go
//! (a blocking thread ends after 10 s idle; a worker thread that gave its core away in
//! `block_in_place` becomes one): a jail started from one of them was killed, task and all,
//! when that thread ended. So jails are started here, by one thread that lives as long as the
//! process, and die only with it.
//!
//! The thread keeps the Landlock rules of the thread that made it, and hands them to every
//! jail: [`start`] it from a thread that is not confined (`crate::confined`), before any
//! jail (it is otherwise made by the first [`spawn`]).

use std::io;
use std::sync::Mutex;
use std::sync::mpsc;

/// A command to start, the runtime its child belongs to, and where the child goes.
type Job = (
    tokio::process::Command,
    tokio::runtime::Handle,
    mpsc::SyncSender<io::Result<tokio::process::Child>>,
);

static QUEUE: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);

/// Starts the thread, if it is not running.
pub fn start() -> io::Result<()> {
    queue().map(drop)
}

/// The queue of the thread, made on first use.
fn queue() -> io::Result<mpsc::Sender<Job>> {
    let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(queue) = &*queue {
        return Ok(queue.clone());
    }
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("swarm-jails".into())
        .spawn(move || {
            for (mut command, runtime, reply) in rx {
                let _in_runtime = runtime.enter();
                let started = command.spawn();
                // The parent's copies of the child's pipes go before the caller reads them.
                drop(command);
                let _ = reply.send(started);
            }
        })?;
    *queue = Some(tx.clone());
    Ok(tx)
}

/// Starts `command` from the thread that starts every jail, as a child of the caller's async
/// runtime. Blocks until the child runs (an `execve`, about a millisecond).
pub(super) fn spawn(command: tokio::process::Command) -> io::Result<tokio::process::Child> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| io::Error::other("a jail is started from an async runtime"))?;
    let (reply, started) = mpsc::sync_channel(1);
    queue()?
        .send((command, runtime, reply))
        .map_err(|_| io::Error::other("the thread that starts jails has ended"))?;
    started
        .recv()
        .map_err(|_| io::Error::other("the thread that starts jails has ended"))?
}
