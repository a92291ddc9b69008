//! A worker's own git: a copy-on-write view of the repository's git directory, so that a
//! worker can `git add`, `git commit`, `git stash` or `git switch` in its worktree.
//!
//! In the jail the git directory is an overlay ([`StateView`]): the repository's is the
//! read-only lower layer, and every write lands in an upper layer in swarm's scratch
//! directory, so a worker's git works as in any checkout while nothing it does reaches the
//! repository: not the user's refs, not another worktree, not the object store (a loose
//! object planted under a name its content does not hash to would corrupt it). The
//! worktree, which lives under the git directory (`.git/swarm/worktrees/…`), is carried over
//! the overlay as it was mounted ([`super::jail`]). After the worker, swarm adopts from the
//! layer what it keeps — the commits on the task's own branch, their objects checked one by
//! one (the engine's `git::adopt`) — and drops the rest. One overlay, not one per directory git
//! writes: each mount costs the jail a millisecond or two.

use std::path::{Path, PathBuf};

use super::jail::StateView;

/// The repository directories a worker's git writes to.
#[derive(Debug, Clone)]
pub struct GitDirs {
    /// The repository's git directory (`.git`).
    pub common: PathBuf,
    /// The worktree's administrative directory (`.git/worktrees/<name>`).
    pub admin: PathBuf,
}

/// The layer of one worker process's view, removed when dropped.
#[derive(Debug)]
pub struct GitLayer {
    _dir: crate::scratch::ScratchDir,
    pub view: StateView,
    /// Where, in the layer, the worker's new objects, refs and worktree state are.
    pub objects: PathBuf,
    pub refs: PathBuf,
    pub admin: PathBuf,
}

impl GitLayer {
    /// A view of `dirs.common` with an empty upper layer.
    pub fn new(dirs: &GitDirs) -> std::io::Result<Self> {
        let dir = crate::scratch::reusable("git-", &["upper", "work"])?;
        let (upper, work) = (dir.path().join("upper"), dir.path().join("work"));
        let admin = dirs
            .admin
            .strip_prefix(&dirs.common)
            .map_or_else(|_| upper.join("worktrees/?"), |rel| upper.join(rel));
        Ok(Self {
            objects: upper.join("objects"),
            refs: upper.join("refs"),
            admin,
            view: StateView {
                dir: dirs.common.clone(),
                upper,
                work,
            },
            _dir: dir,
        })
    }

    /// The directory the worker may write (the mount point of the view).
    pub fn writable(&self) -> &Path {
        &self.view.dir
    }

    /// Did the worker's git write nothing at all (the upper layer empty)?
    pub fn untouched(&self) -> bool {
        std::fs::read_dir(&self.view.upper).is_ok_and(|mut entries| entries.next().is_none())
    }

    /// Makes overlayfs' scratch folder movable and removable again after the process; the
    /// layer takes it out of the way when dropped, once the jail is gone.
    pub fn unmounted(&self) {
        super::overlay::open_up_work_dir(&self.view.work);
    }
}
