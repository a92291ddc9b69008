//! How many connections swarm holds open for its workers: a cap per door (per process of a
//! worker) and one for the whole of swarm's process, from its descriptor limit. Past either,
//! the next connection is not accepted: it waits in the socket's backlog (and, behind it, in
//! the jail's forwarder and the worker's own `connect`), so a worker that opens connections
//! without end costs swarm no more descriptors than the cap, and swarm keeps the ones its
//! own work needs (commits, merges, the other tasks' doors).

use std::sync::{Arc, OnceLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections one door serves at once, by default: far more than an agent's calls or a
/// package manager's pool (npm's is 15), few enough that one worker cannot hold the
/// process's share.
pub const MAX_OPEN_PER_DOOR: usize = 64;

/// What one door may hold open.
#[derive(Debug, Clone)]
pub struct OpenLimit(Arc<Semaphore>);

/// One connection's place, given back when dropped.
#[derive(Debug)]
pub struct OpenPermit {
    _door: OwnedSemaphorePermit,
    _process: OwnedSemaphorePermit,
}

impl Default for OpenLimit {
    fn default() -> Self {
        Self::of(MAX_OPEN_PER_DOOR)
    }
}

impl OpenLimit {
    /// A limit of `open` connections at once.
    pub fn of(open: usize) -> Self {
        Self(Arc::new(Semaphore::new(open)))
    }

    /// Waits until this door and the process may hold one more connection (the door's
    /// place first, then the process's, always in that order). `None` only if a semaphore
    /// was closed, which none ever is.
    pub async fn reserve(&self) -> Option<OpenPermit> {
        let _door = self.0.clone().acquire_owned().await.ok()?;
        let _process = process_budget().clone().acquire_owned().await.ok()?;
        Some(OpenPermit { _door, _process })
    }
}

/// The connections all doors of this process hold at once: half its soft descriptor limit
/// (`RLIMIT_NOFILE`), at least 16.
fn process_budget() -> &'static Arc<Semaphore> {
    static BUDGET: OnceLock<Arc<Semaphore>> = OnceLock::new();
    BUDGET.get_or_init(|| {
        let half = usize::try_from(crate::open_files::current().0 / 2).unwrap_or(usize::MAX);
        Arc::new(Semaphore::new(half.clamp(16, Semaphore::MAX_PERMITS)))
    })
}
