//! A worker's own git: copy-on-write views of what git writes when a worker runs `git add`,
//! `git commit`, `git stash` or `git switch` in its worktree — the object store, the refs,
//! the reflogs and the worktree's administrative directory (its index and HEAD).
//!
//! In the jail each is an overlay ([`StateView`]): the repository's directory is the
//! read-only lower layer, and every write lands in an upper layer in swarm's scratch
//! directory, so a worker's git works as in any checkout while nothing it does reaches the
//! repository: not the user's refs, not another worktree, not the object store (a loose
//! object planted under a name its content does not hash to would corrupt it). After the
//! worker, swarm adopts from the layers what it keeps — the commits on the task's own
//! branch, their objects checked one by one ([`crate::git::adopt`]) — and drops the rest.

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

/// The layers of one worker process's views, removed when dropped.
#[derive(Debug)]
pub struct GitLayer {
    _dir: tempfile::TempDir,
    pub views: Vec<StateView>,
    pub objects: PathBuf,
    pub refs: PathBuf,
    pub admin: PathBuf,
}

impl GitLayer {
    /// Views of `dirs` with empty upper layers.
    pub fn new(dirs: &GitDirs) -> std::io::Result<Self> {
        let dir = crate::scratch::dir("git-")?;
        // git makes `logs/` when it first writes a reflog; the view needs it to exist.
        std::fs::create_dir_all(dirs.common.join("logs"))?;
        let mut views = Vec::new();
        let mut upper_of = |name: &str, lower: PathBuf| -> std::io::Result<PathBuf> {
            let (upper, work) = (
                dir.path().join(name),
                dir.path().join(format!("{name}.work")),
            );
            std::fs::create_dir(&upper)?;
            std::fs::create_dir(&work)?;
            views.push(StateView {
                dir: lower,
                upper: upper.clone(),
                work,
            });
            Ok(upper)
        };
        let objects = upper_of("objects", dirs.common.join("objects"))?;
        let refs = upper_of("refs", dirs.common.join("refs"))?;
        upper_of("logs", dirs.common.join("logs"))?;
        let admin = upper_of("admin", dirs.admin.clone())?;
        Ok(Self {
            _dir: dir,
            views,
            objects,
            refs,
            admin,
        })
    }

    /// The directories the worker may write (each the mount point of a view).
    pub fn writable(&self) -> Vec<&Path> {
        self.views.iter().map(|v| v.dir.as_path()).collect()
    }

    /// Makes overlayfs' scratch folders removable again after the process.
    pub fn unmounted(&self) {
        for view in &self.views {
            super::overlay::open_work_dir(&view.work);
        }
    }
}
