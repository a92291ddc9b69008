//! With `--sandbox off`, nothing stops a worker from writing into the user's own checkout
//! (a path it computes, `cd ..`, a tool that finds the repository's root). swarm cannot
//! prevent it there, but it notices: the paths of the checkout that differ from HEAD, with
//! their size and modification time, are taken before the run and again after each task,
//! and any difference is a warning naming the task that just finished.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::repo_path::RepoPath;

/// Size and modification time of a path (`None`: it is gone).
type Stamp = Option<(u64, i64, i64)>;

/// The user's checkout, as last seen.
pub(super) struct CheckoutWatch {
    workdir: PathBuf,
    seen: Mutex<BTreeMap<RepoPath, Stamp>>,
}

impl CheckoutWatch {
    /// Starts watching the checkout at `workdir`.
    pub(super) fn new(workdir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            workdir: workdir.to_path_buf(),
            seen: Mutex::new(look(workdir)?),
        })
    }

    /// The paths that changed since the last look (new, gone, or written).
    pub(super) fn changed(&self) -> anyhow::Result<Vec<RepoPath>> {
        let now = look(&self.workdir)?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed: Vec<RepoPath> = now
            .iter()
            .filter(|(path, stamp)| seen.get(*path) != Some(stamp))
            .map(|(path, _)| path.clone())
            .collect();
        changed.extend(seen.keys().filter(|p| !now.contains_key(*p)).cloned());
        changed.sort();
        changed.dedup();
        *seen = now;
        Ok(changed)
    }
}

/// The paths of the checkout that differ from HEAD (untracked included, ignored not), each
/// with its stamp.
fn look(workdir: &Path) -> anyhow::Result<BTreeMap<RepoPath, Stamp>> {
    let repo = git2::Repository::open(workdir)?;
    let paths = crate::git::commit::dirty_paths(&repo)?;
    Ok(paths
        .into_iter()
        .map(|p| {
            let path = RepoPath::from_bytes(p);
            let stamp = std::fs::symlink_metadata(workdir.join(path.as_path()))
                .ok()
                .map(|m| (m.len(), m.mtime(), m.mtime_nsec()));
            (path, stamp)
        })
        .collect())
}
