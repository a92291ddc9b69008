//! What the pool lends: a [`Slot`] (one worktree), inside a [`Lease`] that gives it back.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use git2::Repository;

use super::WorktreePool;
use swarm_sandbox::overlay::OverlayView;

/// One worktree of the pool.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// libgit2 worktree name (no `/` allowed).
    pub name: String,
    pub path: PathBuf,
    /// Has `[worktree] setup` run successfully in it?
    pub set_up: bool,
    /// Was it created by this acquire (rather than reused)?
    pub fresh: bool,
    /// The worktree's `.git` file as libgit2 wrote it.
    pub(super) gitlink: Vec<u8>,
    /// An overlay worktree's view, which its jails mount on `path` (where only the `.git`
    /// file is); `None` for a full checkout.
    pub view: Option<OverlayView>,
    /// Its repository, opened once and kept from task to task.
    pub(super) handle: Handle,
    /// An overlay worktree's own handle on the base checkout (whose ignore rules and
    /// attributes its commits read), so that views do not wait for one another.
    pub(super) base_handle: Handle,
    /// What a full checkout still held that its branch did not, as its last commit left it
    /// (what could not be staged, what a check alone wrote): its next reset need not walk
    /// the whole checkout to find it. Taken by that reset; `None` after anything else.
    pub(super) left_by_commit: Mutex<Option<Vec<Vec<u8>>>>,
}

/// A worktree's repository kept for its next task: opening one reads the config files, and
/// libgit2 keeps the trees it read per handle. Nothing in it is a worker's: it is opened
/// through the administrative directory no worker can write, and libgit2 reads references,
/// the index and the config again when their files change. A view also keeps its own handle
/// on the base checkout.
#[derive(Default)]
pub(crate) struct Handle(Mutex<Option<Repository>>);

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handle")
    }
}

impl Handle {
    /// Runs `work` on the repository, opened with `open` on first use.
    pub(super) fn with<T>(
        &self,
        open: impl FnOnce() -> anyhow::Result<Repository>,
        work: impl FnOnce(&Repository) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let repo = match held.as_mut() {
            Some(repo) => repo,
            None => held.insert(open()?),
        };
        work(repo)
    }
}

impl Slot {
    /// Runs `work` on this worktree's repository, opened through its administrative
    /// directory in `common_dir` on first use.
    pub(super) fn with_repo<T>(
        &self,
        common_dir: &Path,
        work: impl FnOnce(&Repository) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let open = || super::open_worktree(common_dir, &self.name, &self.path);
        self.handle.with(open, work)
    }

    /// Runs `work` on the base checkout `base`'s repository, opened for this worktree on
    /// first use.
    ///
    /// The handle is given an empty index of its own: what a view asks of the base checkout
    /// (its files' attributes when a blob is written, its ignore rules) the checkout's own
    /// files answer, as they are the base commit's. Else libgit2 would load the base's whole
    /// index into each view's handle to look for `.gitattributes` in it (~10 MB for each
    /// view at 100,000 files).
    pub(super) fn with_base_repo<T>(
        &self,
        common_dir: &Path,
        base: &super::BaseCheckout,
        work: impl FnOnce(&Repository) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let open = || {
            let repo = super::open_worktree(common_dir, &base.name, &base.path)?;
            repo.set_index(&mut git2::Index::new()?)?;
            Ok(repo)
        };
        self.base_handle.with(open, work)
    }
}

/// A worktree of the pool, lent to one task (or check, or repair). Dropping it gives the
/// worktree back to the pool ([`Lease::release`]); that is blocking work, so async code
/// releases a lease explicitly on a blocking thread where it can.
pub(crate) struct Lease {
    pub(super) pool: Arc<WorktreePool>,
    pub(super) slot: Slot,
    /// Has the slot gone back (or been thrown away) already?
    pub(super) ended: bool,
    /// The place among the run's worktrees it holds, if it takes one: let go only after the
    /// slot is back in the pool (fields drop after [`Drop::drop`]), so the task that waited
    /// for it finds the slot idle.
    pub(super) place: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Lease {
    /// Gives the worktree back to the pool: HEAD detached (so its branch can be moved or
    /// deleted), still locked; a worktree whose worker tampered with it is thrown away instead.
    /// Blocking.
    pub(crate) fn release(mut self) -> anyhow::Result<()> {
        let slot = self.end();
        self.pool.give_back(slot)
    }

    /// Throws the worktree away (its worker tampered with it); the pool makes a new one when
    /// it needs one. Blocking.
    pub(crate) fn discard(mut self) {
        let slot = self.end();
        self.pool.discard(slot);
    }

    /// The lease, holding `place` until the worktree is back in the pool.
    pub(crate) fn holding(mut self, place: Option<tokio::sync::OwnedSemaphorePermit>) -> Self {
        self.place = place;
        self
    }

    fn end(&mut self) -> Slot {
        self.ended = true;
        std::mem::take(&mut self.slot)
    }
}

impl std::ops::Deref for Lease {
    type Target = Slot;

    fn deref(&self) -> &Slot {
        &self.slot
    }
}

impl std::ops::DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut Slot {
        &mut self.slot
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.ended {
            let slot = self.end();
            let name = slot.name.clone();
            if let Err(e) = self.pool.give_back(slot) {
                tracing::warn!("cannot return worktree {name} to the pool: {e:#}");
            }
        }
    }
}
