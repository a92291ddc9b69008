//! The paths the built-in worker's file tools wrote in its worktree.
//!
//! When nothing else wrote there (no `run` tool, no `--verify`), they are every path the task
//! can have changed, so its commit stages them instead of walking the worktree's status: a
//! third of a commit's work at 128 files (docs/BENCHMARKS-HISTORY.md). A path is noted before
//! it is written (a write that fails halfway still changed it), as the file it reaches: links
//! on the way resolved, as git's status would find it. Anything that cannot be said for sure
//! loses track, and the commit walks the status as for any other worker.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::repo_path::RepoPath;

pub(crate) struct Written {
    /// The worktree, links resolved.
    root: PathBuf,
    /// `None` once something wrote in the worktree that is not noted here.
    paths: Mutex<Option<BTreeSet<RepoPath>>>,
}

impl Written {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self {
            root,
            paths: Mutex::new(Some(BTreeSet::new())),
        }
    }

    /// `path`, inside the worktree, is about to be written.
    pub(crate) fn note(&self, path: &Path) {
        match self.reached(path) {
            Some(rel) => {
                if let Some(paths) = self.lock().as_mut() {
                    paths.insert(rel);
                }
            }
            None => self.lost_track(),
        }
    }

    /// Something may have written in the worktree that is not noted.
    pub(crate) fn lost_track(&self) {
        *self.lock() = None;
    }

    /// Every path written, if nothing else wrote.
    pub(crate) fn paths(&self) -> Option<Vec<RepoPath>> {
        self.lock().as_ref().map(|p| p.iter().cloned().collect())
    }

    /// The file a write to `path` reaches, relative to the worktree: the path with every link
    /// resolved (its last part too, when it exists); `None` if that is not a file's path
    /// inside the worktree.
    fn reached(&self, path: &Path) -> Option<RepoPath> {
        let real = match path.canonicalize() {
            Ok(real) => real,
            // Not there yet (a new file): its folder resolved, and its own name.
            Err(_) if path.symlink_metadata().is_err() => {
                path.parent()?.canonicalize().ok()?.join(path.file_name()?)
            }
            Err(_) => return None,
        };
        let rel = real.strip_prefix(&self.root).ok()?;
        let first = rel.components().next()?;
        if first.as_os_str() == ".git" {
            return None;
        }
        Some(RepoPath::from_bytes(rel.as_os_str().as_bytes()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<BTreeSet<RepoPath>>> {
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_noted_as_the_file_it_reaches() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::write(root.join("real/target.txt"), "x").unwrap();
        std::os::unix::fs::symlink("real", root.join("linked")).unwrap();
        std::os::unix::fs::symlink("target.txt", root.join("real/alias.txt")).unwrap();
        let written = Written::new(root.clone());
        written.note(&root.join("new.txt"));
        written.note(&root.join("linked/fresh.txt"));
        written.note(&root.join("real/alias.txt"));
        written.note(&root.join("./real/target.txt"));
        let paths: Vec<String> = written
            .paths()
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(paths, ["new.txt", "real/fresh.txt", "real/target.txt"]);
    }

    #[test]
    fn anything_unsure_loses_track() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("a/dangling")).unwrap();
        let written = Written::new(root.join("a"));
        written.note(&root.join("a/dangling"));
        assert_eq!(written.paths(), None, "a dangling link");
        let written = Written::new(root.join("a"));
        written.note(&root.join("outside.txt"));
        assert_eq!(written.paths(), None, "outside the worktree");
        let written = Written::new(root.clone());
        written.note(&root.join("a/x.txt"));
        written.lost_track();
        written.note(&root.join("a/y.txt"));
        assert_eq!(written.paths(), None, "once lost, lost for good");
    }
}
