//! Scratch folders used again: a task's private `/tmp`, its result folder and its git view's
//! layers are made and deleted for every task, and on ext4 an inode freed is not given out
//! again for a minute or more: every new one is found after a scan over the recently freed
//! (`recently_deleted` in the kernel), which grew to a quarter of swarm's own CPU time on
//! a long run. So a folder whose use has ended is emptied and kept for the next use of the
//! same kind, instead of being deleted, when nothing of its last user can reach the next:
//!
//! - it is still the directory made (same device and inode, not a link), owned by this
//!   user, with the mode it was made with and no extended attribute (an ACL is one) but
//!   overlayfs' own, which are removed (an upper layer's root gets `user.overlay.uuid`);
//! - everything in it but the folders it was made with is removed (links are removed, never
//!   followed), and those folders pass the same checks;
//! - every process that could write there has ended: the task's jail dies with its last
//!   process before the guard is dropped.
//!
//! Anything else, or any error, and the folder is deleted as before.

use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The mode of every folder kept for use again.
const MODE: u32 = 0o700;

/// How many emptied folders of one kind are kept (more than the worker slots of a run).
const KEPT_PER_KIND: usize = 64;

/// Emptied folders, by kind (the prefix of their name).
static KEPT: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());

/// A folder of this process's scratch directory for one use, with the folders `inner` in
/// it, emptied and kept for the next use of the same kind when dropped (see the module's
/// documentation), else deleted.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    kind: &'static str,
    inner: &'static [&'static str],
    /// (device, inode) of the folder and of each of `inner`, as made.
    made: Vec<(u64, u64)>,
}

impl ScratchDir {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A folder for one use of kind `kind` (the prefix of its name: `tmp-`, `git-`…), holding
/// the empty folders `inner`: an emptied one kept from an earlier use, or a new one.
pub fn reusable(kind: &'static str, inner: &'static [&'static str]) -> io::Result<ScratchDir> {
    let kept = {
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        let found = kept.iter().rposition(|(k, _)| *k == kind);
        found.map(|i| kept.swap_remove(i).1)
    };
    let path = match kept {
        Some(path) => path,
        None => {
            // Kept only once whole: a folder half made is removed by its guard.
            let new = super::dir(kind)?;
            let mode = || std::fs::Permissions::from_mode(MODE);
            std::fs::set_permissions(new.path(), mode())?;
            for name in inner {
                std::fs::create_dir(new.path().join(name))?;
                std::fs::set_permissions(new.path().join(name), mode())?;
            }
            new.keep()
        }
    };
    let made = std::iter::once(path.clone())
        .chain(inner.iter().map(|name| path.join(name)))
        .map(|p| std::fs::symlink_metadata(p).map(|m| (m.dev(), m.ino())))
        .collect::<io::Result<_>>()?;
    Ok(ScratchDir {
        path,
        kind,
        inner,
        made,
    })
}

/// Has the folders kept for use again deleted by the janitor: at a run's end, while it
/// merges and cleans up. A folder asked for after this is made anew.
pub fn release_kept() {
    let kept = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, path) in kept {
        crate::janitor::delete_later(path);
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if emptied(self).is_ok_and(|clean| clean) {
            let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
            if kept.iter().filter(|(k, _)| *k == self.kind).count() < KEPT_PER_KIND {
                kept.push((self.kind, std::mem::take(&mut self.path)));
                return;
            }
        }
        let _ = crate::files::remove_no_follow(&self.path);
    }
}

/// Empties the folder to its inner folders, all as made: `Ok(true)` when it can be used
/// again.
fn emptied(dir: &ScratchDir) -> io::Result<bool> {
    let paths = std::iter::once(dir.path.clone()).chain(dir.inner.iter().map(|n| dir.path.join(n)));
    for (path, made) in paths.zip(&dir.made) {
        if !as_made(&path, *made)? {
            return Ok(false);
        }
        let keep: &[&str] = if path == dir.path { dir.inner } else { &[] };
        for entry in std::fs::read_dir(&path)? {
            let entry = entry?;
            if keep.iter().any(|k| entry.file_name() == **k) {
                continue;
            }
            match entry.file_type()?.is_dir() {
                // Deleted off the task's path; else here. Never follows a link: std removes
                // a link as a link.
                true => {
                    if crate::janitor::retire(&entry.path(), &super::graveyard()?).is_err() {
                        crate::files::remove_no_follow(&entry.path())?;
                    }
                }
                false => std::fs::remove_file(entry.path())?,
            }
        }
    }
    Ok(true)
}

/// Is `path` the folder made, with nothing changed of what it is: no link, the same inode,
/// this user's, the mode it was made with, no extended attribute but overlayfs' own on an
/// upper layer (removed here: a worker cannot set those through its view)?
fn as_made(path: &Path, made: (u64, u64)) -> io::Result<bool> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir()
        || (meta.dev(), meta.ino()) != made
        || meta.uid() != rustix::process::geteuid().as_raw()
        || meta.mode() & 0o7777 != MODE
    {
        return Ok(false);
    }
    let mut names = vec![0u8; rustix::fs::llistxattr_query(path)?];
    let len = rustix::fs::llistxattr(path, &mut names[..])?;
    for name in names[..len].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if !OVERLAY_ATTRIBUTES.iter().any(|p| name.starts_with(p)) {
            return Ok(false);
        }
        rustix::fs::lremovexattr(path, name)?;
    }
    Ok(true)
}

/// What overlayfs writes on its upper layer (`user.` in a user namespace).
const OVERLAY_ATTRIBUTES: [&[u8]; 2] = [b"user.overlay.", b"trusted.overlay."];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_folder_is_used_again_with_nothing_of_its_last_use() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "kept").unwrap();
        let first = reusable("test-again-", &["upper"]).unwrap();
        let path = first.path().to_path_buf();
        std::fs::write(path.join("left"), "x").unwrap();
        std::fs::create_dir_all(path.join("upper/deep/er")).unwrap();
        std::os::unix::fs::symlink(outside.path(), path.join("upper/link")).unwrap();
        // What overlayfs leaves on an upper layer's root (where the filesystem has them).
        let overlays = rustix::fs::setxattr(
            path.join("upper"),
            "user.overlay.uuid",
            b"x",
            rustix::fs::XattrFlags::empty(),
        )
        .is_ok();
        drop(first);
        let second = reusable("test-again-", &["upper"]).unwrap();
        assert_eq!(second.path(), path, "the folder was not used again");
        let names = |p: &Path| -> Vec<_> {
            std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect()
        };
        assert_eq!(names(&path), ["upper"]);
        assert!(names(&path.join("upper")).is_empty());
        if overlays {
            let left = rustix::fs::llistxattr_query(path.join("upper")).unwrap();
            assert_eq!(left, 0, "overlayfs' attribute was kept");
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("victim")).unwrap(),
            "kept",
            "a link was followed"
        );
    }

    #[test]
    fn a_folder_its_user_changed_is_deleted_not_used_again() {
        // Each change, and whether the filesystem could make it.
        type Change = fn(&Path) -> bool;
        let changes: [(&'static str, Change); 3] = [
            ("test-mode-", |p| {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).is_ok()
            }),
            ("test-inner-mode-", |p| {
                let upper = p.join("upper");
                std::fs::set_permissions(upper, std::fs::Permissions::from_mode(0o755)).is_ok()
            }),
            // A filesystem without user attributes (an old tmpfs) cannot test this one.
            ("test-xattr-", |p| {
                rustix::fs::setxattr(p, "user.note", b"x", rustix::fs::XattrFlags::empty()).is_ok()
            }),
        ];
        for (kind, change) in changes {
            let dir = reusable(kind, &["upper"]).unwrap();
            let path = dir.path().to_path_buf();
            if !change(&path) {
                assert_eq!(kind, "test-xattr-", "cannot change the folder");
                continue;
            }
            drop(dir);
            assert!(!path.exists(), "{kind}: the folder was kept");
            let next = reusable(kind, &["upper"]).unwrap();
            assert_ne!(next.path(), path, "{kind}: the folder was used again");
        }
    }
}
