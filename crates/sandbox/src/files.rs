//! File-system calls both swarm's scratch files and the engine's run state need: `flock`,
//! a rename that never replaces, through rustix (no `unsafe`), and a removal that never
//! follows a link.

use std::fs::File;
use std::path::Path;

/// `flock(LOCK_EX | LOCK_NB)` on `file`: `false` when another open file holds the lock. The
/// kernel releases it when the last descriptor of the open file closes, however the
/// process ends.
pub fn try_lock(file: &File) -> std::io::Result<bool> {
    use rustix::fs::{FlockOperation, flock};
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `flock(LOCK_EX)` on `file`: waits until the lock is this file's.
pub fn lock(file: &File) -> std::io::Result<()> {
    rustix::fs::flock(file, rustix::fs::FlockOperation::LockExclusive).map_err(Into::into)
}

/// `rename(from, to)` that fails if `to` exists.
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE).map_err(Into::into)
}

/// Removes `path`: a folder with everything in it, else the file or link itself, never
/// following a link (`remove_dir_all` does not follow links inside the tree either).
/// `Ok(false)` when there was nothing there.
pub fn remove_no_follow(path: &Path) -> std::io::Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match meta.is_dir() {
        true => std::fs::remove_dir_all(path)?,
        false => std::fs::remove_file(path)?,
    }
    Ok(true)
}
