//! File-system calls both swarm's scratch files and the engine's run state need: `flock`,
//! a rename that never replaces, through rustix (no `unsafe`), and a removal that never
//! follows a link and that no permission a worker set can stop.

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
///
/// A worker may leave folders it took its own permissions from (`chmod 000`, `chmod 500`),
/// inside its worktree, its temporary folder, an agent's state: where removing fails, every
/// folder of the tree is given back its owner's read, write and search permission (never
/// through a link, never outside the tree), and the removal is tried again.
pub fn remove_no_follow(path: &Path) -> std::io::Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        std::fs::remove_file(path)?;
        return Ok(true);
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(first) => {
            make_removable(path).map_err(|_| first)?;
            std::fs::remove_dir_all(path)?;
            Ok(true)
        }
    }
}

/// Gives every folder of the tree at `path` its owner's read, write and search permission,
/// opening each without following a link (a link is left as it is).
fn make_removable(path: &Path) -> std::io::Result<()> {
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        open_up(&folder)?;
        for entry in std::fs::read_dir(&folder)? {
            let entry = entry?;
            // The entry's own type: a link to a folder is a link.
            if entry.file_type()?.is_dir() {
                folders.push(entry.path());
            }
        }
    }
    Ok(())
}

/// `chmod u+rwx` on the folder `path` itself: opened as a path only (`O_PATH`, which needs
/// no permission on it) without following a link, and changed through that descriptor.
fn open_up(path: &Path) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mode = Mode::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) | Mode::RWXU;
    // `/proc/self/fd/N` is the folder the descriptor holds, whatever its path says now.
    let by_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    match rustix::fs::chmod(by_fd.as_str(), mode) {
        Ok(()) => Ok(()),
        // No /proc: the kernel's own no-follow chmod (fchmodat2, Linux 6.6).
        Err(_) => rustix::fs::chmodat(
            rustix::fs::CWD,
            path,
            mode,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn folders_a_worker_closed_are_opened_and_removed_and_no_link_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o500)).unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("ro/sub/deep")).unwrap();
        std::fs::write(tree.join("ro/sub/deep/f"), "x").unwrap();
        std::os::unix::fs::symlink(&victim, tree.join("ro/link")).unwrap();
        let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        mode(&tree.join("ro/sub/deep"), 0o000).unwrap();
        mode(&tree.join("ro/sub"), 0o300).unwrap();
        mode(&tree.join("ro"), 0o500).unwrap();
        assert!(remove_no_follow(&tree).unwrap());
        assert!(!tree.exists());
        // The link's target kept its own mode.
        let kept = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(kept, 0o500);
        mode(&victim, 0o700).unwrap();
    }
}
