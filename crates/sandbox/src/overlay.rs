//! Overlay views: a worker sees its worktree as one shared checkout of the run's base (the
//! lower layer, read-only) with its own changes on top (the upper layer). The overlay is
//! mounted by the jail, inside the worker's own mount namespace, so nothing outside that
//! namespace sees it and it goes away with the jail; what the worker changed is exactly the
//! upper directory, which swarm reads from outside (the engine's `git::worktree`).
//!
//! Unprivileged overlay mounts need `userxattr` (the kernel keeps opaque directories as
//! `user.overlay.opaque`); a deleted file is a whiteout (a character device 0/0) in the upper
//! directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The extended attribute that marks an upper directory as opaque (it hides the lower one).
pub(crate) const OPAQUE_XATTR: &str = "user.overlay.opaque";

/// One worker's view of its worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayView {
    /// The worktree's directory, where the view is mounted. It holds only the worktree's
    /// `.git` file, and is also the top lower layer, so the view shows that file.
    pub mount_point: PathBuf,
    /// The run's base checkout (the bottom lower layer), shared by every view, never written.
    pub base: PathBuf,
    /// The worker's changes.
    pub upper: PathBuf,
    /// The overlay's scratch directory (same file system as `upper`).
    pub work: PathBuf,
}

impl OverlayView {
    /// The mount options, each path escaped as the kernel's parser expects.
    pub fn options(&self) -> Option<String> {
        options(&[&self.mount_point, &self.base], &self.upper, &self.work)
    }
}

/// The options of an overlay mount over `lower` (top layer first) writing into `upper`.
///
/// `volatile`, but on tmpfs: unmounting an overlay otherwise syncs its upper file system whole
/// (`syncfs` of the disk under `.git/swarm/`; on a journaled ext4, a journal commit waited
/// for), once per view per task. What a worker wrote is read back from the page cache as
/// soon as its jail has ended, into objects that are not synced either, so nothing is lost
/// that git itself would keep on a crash. The mark such a mount leaves in `work` costs three
/// files a mount, which [`open_work_dir`] removes; on tmpfs, where a sync costs nothing,
/// that is all it would change, so a view there is not volatile.
pub(crate) fn options(lower: &[&Path], upper: &Path, work: &Path) -> Option<String> {
    let path = |p: &Path| p.to_str().map(escape);
    let lower: Option<Vec<String>> = lower.iter().map(|p| path(p)).collect();
    let volatile = if on_tmpfs(upper) { "" } else { "volatile," };
    Some(format!(
        "userxattr,{volatile}lowerdir={},upperdir={},workdir={}",
        lower?.join(":"),
        path(upper)?,
        path(work)?
    ))
}

/// Is `dir` on a tmpfs (a file system in memory, which a sync leaves as it is)?
pub fn on_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    // `f_type`'s type differs between targets.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(dir).is_ok_and(|fs| fs.f_type as i64 == TMPFS_MAGIC)
}

/// Makes the folder overlayfs keeps inside a view's `work` folder (`work/work`, mode 000
/// once unmounted) removable by its owner again, and lifts the mark a `volatile` mount
/// leaves in it (`work/work/incompat/volatile/dirty`, mode 000 too), without which the next mount
/// on this folder refuses. The jail calls it right before each mount, which is what makes
/// the next mount work even after a jail was killed; swarm calls it where it reads or removes
/// a layer after its process. A link there is left alone.
pub fn open_work_dir(work: &Path) {
    if open_up_work_dir(work) == Some(true) {
        let incompat = work.join("work/incompat");
        let _ = std::fs::remove_file(incompat.join("volatile/dirty"));
        let _ = std::fs::remove_dir(incompat.join("volatile"));
        let _ = std::fs::remove_dir(&incompat);
    }
}

/// Takes overlayfs' folder out of the unmounted view's `work` folder, mark and all, so the
/// next mount finds none: moved into `graveyard` and deleted off the task's path
/// ([`crate::janitor`]), else lifted as [`open_work_dir`] does.
pub fn retire_work_dir(work: &Path, graveyard: &Path) {
    if open_up_work_dir(work).is_none()
        || crate::janitor::retire(&work.join("work"), graveyard).is_err()
    {
        open_work_dir(work);
    }
}

/// Opens up `work/work` (mode 700) and the volatile mark's folders in it, for their owner to
/// move or delete: `None` when `work/work` is not a folder, else whether the mark's are.
pub fn open_up_work_dir(work: &Path) -> Option<bool> {
    let inner = work.join("work");
    if !open_dir(&inner) {
        return None;
    }
    Some(open_dir(&inner.join("incompat")) && open_dir(&inner.join("incompat/volatile")))
}

/// Gives the directory `dir` (not a link) mode 700: is it one?
fn open_dir(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).is_ok()
}

/// Escapes the characters the overlay option parser splits on (`,` between options, `:`
/// between lower layers) and its escape character.
pub(super) fn escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '\\' | ',' | ':') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Is `meta` (of an entry of an upper directory) a whiteout: a deleted path?
pub fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Does the upper directory `dir` hide the lower directory of the same path?
pub fn is_opaque(dir: &Path) -> bool {
    xattr_is(dir, OPAQUE_XATTR, b"y")
}

fn xattr_is(path: &Path, name: &str, want: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let (Ok(path), Ok(name)) = (
        std::ffi::CString::new(path.as_os_str().as_bytes()),
        std::ffi::CString::new(name),
    ) else {
        return false;
    };
    let mut buf = [0u8; 8];
    // SAFETY: valid C strings, a local buffer of the given length.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n >= 0 && &buf[..n as usize] == want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_escaped_for_the_option_parser() {
        let view = OverlayView {
            mount_point: "/r/a,b".into(),
            base: "/r/c:d".into(),
            upper: "/r/e\\f".into(),
            work: "/r/w".into(),
        };
        assert_eq!(
            view.options().unwrap(),
            "userxattr,volatile,lowerdir=/r/a\\,b:/r/c\\:d,upperdir=/r/e\\\\f,workdir=/r/w",
            "/r/e\\f does not exist, so it is not on tmpfs"
        );
    }
}
