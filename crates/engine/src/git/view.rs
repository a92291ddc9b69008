//! Overlay worktrees: what a worker changed is its view's upper directory, read from outside
//! the worker's mount namespace. Both the commit and the reset walk that directory only, so
//! their cost follows the change, not the size of the repository.
//!
//! The upper directory holds, relative to the worktree: files and links the worker created or
//! changed, whiteouts (character devices 0/0) where it deleted a path, and directories, some
//! of them opaque (the worker removed the directory and made it again, hiding the base's).
//! Untracked ignored paths (build output) are left out of commits and survive resets, as in
//! a pooled checkout. Nothing here follows a link: entries are read with `lstat`, links as
//! links.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Tree};

use crate::repo_path::RepoPath;
use swarm_sandbox::{janitor, overlay};

/// What an upper directory says changed, relative to the tree of the view's HEAD.
#[derive(Debug, Default)]
pub(crate) struct UpperChanges {
    /// Paths whose entries in the tree go (deleted, replaced by a folder or a file, or hidden
    /// by an opaque folder), before `present` is added.
    pub removed: Vec<RepoPath>,
    /// Files and links of the view, and where their content is.
    pub present: Vec<(RepoPath, PathBuf)>,
    /// Paths that cannot be committed (a nested repository, a special file).
    pub skipped: Vec<RepoPath>,
}

/// Is a path ignored by the repository's rules (untracked paths only are asked)?
pub(crate) type Ignored<'a> = &'a dyn Fn(&RepoPath, bool) -> bool;

/// Reads the changes in `upper` against `tree` (the tree the view's files were, plus what
/// the worker committed), leaving out untracked ignored paths. Blocking.
pub(crate) fn upper_changes(
    upper: &Path,
    tree: &Tree<'_>,
    ignored: Ignored<'_>,
) -> std::io::Result<UpperChanges> {
    let mut changes = UpperChanges::default();
    walk(upper, &mut Vec::new(), tree, ignored, &mut changes)?;
    Ok(changes)
}

fn walk(
    dir: &Path,
    rel: &mut Vec<u8>,
    tree: &Tree<'_>,
    ignored: Ignored<'_>,
    out: &mut UpperChanges,
) -> std::io::Result<()> {
    each_entry(dir, rel, |entry, rel| {
        if rel.as_slice() == b".git" {
            // The worktree's link to the repository; a worker that wrote one fails its task
            // (`WorktreePool::check_intact`).
            return Ok(());
        }
        let path = RepoPath::from_bytes(rel.clone());
        let meta = entry.path().symlink_metadata()?;
        let in_tree = tree.get_path(path.as_path()).ok().map(|e| e.kind());
        if overlay::is_whiteout(&meta) {
            if in_tree.is_some() {
                out.removed.push(path);
            }
        } else if meta.is_dir() {
            let nested_repo = entry.path().join(".git").symlink_metadata().is_ok();
            if in_tree == Some(Some(ObjectType::Commit)) || nested_repo {
                out.skipped.push(path);
            } else if in_tree.is_none() && ignored(&path, true) {
                // Build output and the like.
            } else {
                let replaces = match in_tree {
                    Some(Some(ObjectType::Tree)) => overlay::is_opaque(&entry.path()),
                    Some(_) => true,
                    None => false,
                };
                if replaces {
                    out.removed.push(path);
                }
                walk(&entry.path(), rel, tree, ignored, out)?;
            }
        } else if meta.is_file() || meta.is_symlink() {
            if in_tree == Some(Some(ObjectType::Tree)) {
                out.removed.push(path.clone());
            }
            if in_tree.is_some() || !ignored(&path, false) {
                out.present.push((path, entry.path()));
            }
        } else {
            out.skipped.push(path);
        }
        Ok(())
    })
}

/// Runs `visit` on each entry of `dir`, with `rel` (the path of `dir` in the view) extended
/// by the entry's name for the call.
fn each_entry(
    dir: &Path,
    rel: &mut Vec<u8>,
    mut visit: impl FnMut(&std::fs::DirEntry, &mut Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let len = rel.len();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(entry.file_name().as_bytes());
        let visited = visit(&entry, rel);
        rel.truncate(len);
        visited?;
    }
    Ok(())
}

/// Every path `upper` holds (files, links, whiteouts, folders), but for the worktree's
/// `.git`: what the view's processes wrote so far. Links are not followed. Blocking.
pub(crate) fn upper_entries(upper: &Path) -> std::io::Result<BTreeSet<RepoPath>> {
    fn list(dir: &Path, rel: &mut Vec<u8>, out: &mut BTreeSet<RepoPath>) -> std::io::Result<()> {
        each_entry(dir, rel, |entry, rel| {
            if rel.as_slice() == b".git" {
                return Ok(());
            }
            out.insert(RepoPath::from_bytes(rel.clone()));
            match entry.file_type()?.is_dir() {
                true => list(&entry.path(), rel, out),
                false => Ok(()),
            }
        })
    }
    let mut out = BTreeSet::new();
    list(upper, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// Empties `upper` for the view's next task, but for untracked ignored paths (build output
/// stays warm, as in a pooled checkout): links and files are removed, never followed;
/// folders go to `graveyard` to be deleted off the task's path (`swarm_sandbox::janitor`).
/// Blocking.
pub(crate) fn clear_upper(
    upper: &Path,
    graveyard: &Path,
    tree: &Tree<'_>,
    ignored: Ignored<'_>,
) -> std::io::Result<()> {
    clear(upper, graveyard, &mut Vec::new(), tree, ignored)
}

fn clear(
    dir: &Path,
    graveyard: &Path,
    rel: &mut Vec<u8>,
    tree: &Tree<'_>,
    ignored: Ignored<'_>,
) -> std::io::Result<()> {
    each_entry(dir, rel, |entry, rel| {
        let path = RepoPath::from_bytes(rel.clone());
        let meta = entry.path().symlink_metadata()?;
        let untracked = tree.get_path(path.as_path()).is_err();
        let whiteout = overlay::is_whiteout(&meta);
        let retired = |dir: &Path| janitor::retire(dir, graveyard).is_ok();
        if meta.is_dir() {
            if untracked && ignored(&path, true) {
                // kept whole
            } else if overlay::is_opaque(&entry.path()) {
                if !retired(&entry.path()) {
                    swarm_sandbox::files::remove_no_follow(&entry.path())?;
                }
            } else {
                clear(&entry.path(), graveyard, rel, tree, ignored)?;
                // Empty now, or holding ignored output only (kept).
                let empty = std::fs::read_dir(entry.path()).is_ok_and(|mut d| d.next().is_none());
                if empty && !retired(&entry.path()) {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        } else if whiteout || !(untracked && ignored(&path, false)) || rel.as_slice() == b".git" {
            std::fs::remove_file(entry.path())?;
        }
        Ok(())
    })
}

/// Where a view's used folders wait to be deleted: beside its layers (the same file system),
/// and removed with them.
pub(crate) fn graveyard(view: &overlay::OverlayView) -> PathBuf {
    view.upper.with_file_name("retired")
}
