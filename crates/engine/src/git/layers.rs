//! Where overlay worktrees keep their layers (a view's `upper` and `work` folders, and its
//! used folders waiting to be deleted): on the repository's disk, under `.git/swarm/layers/`,
//! or in memory, on a tmpfs, for a run whose every process in a view only edits the files it
//! is given (docs/ARCHITECTURE.md, "Layers in memory for file editors"). A layer there is
//! made, emptied and deleted thousands of times a run without a disk's inode allocation.
//!
//! A folder in memory is `<tmpfs>/swarm-<uid>/<digest>/<RUN-ID>-<n>`: the tmpfs is
//! `$XDG_RUNTIME_DIR`, else `/dev/shm`; `swarm-<uid>` must be a folder of this user's that
//! nobody else may open (`/dev/shm` is everyone's: a folder or link someone else put there
//! under that name turns layers in memory off, it is never used); the digest names the
//! repository by its git directory's path, so the clean-up of a repository finds its own
//! layers and no other's.

use std::ffi::OsStr;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::state;

/// Turns layers in memory off, for a comparison (docs/BENCHMARKS.md) or a machine whose
/// memory is short.
pub(crate) const ON_DISK_VAR: &str = "SWARM_LAYERS_ON_DISK";

/// The folder of one repository's layers, a folder `<RUN-ID>-<n>` in it for each overlay
/// worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LayersRoot {
    /// `.git/swarm/layers/`.
    Disk(PathBuf),
    /// `<tmpfs>/swarm-<uid>/<digest>/`.
    Memory(PathBuf),
}

impl LayersRoot {
    /// `.git/swarm/layers/` of the repository whose git directory is `common_dir`.
    pub(crate) fn disk(common_dir: &Path) -> Self {
        Self::Disk(state::layers_dir(common_dir))
    }

    /// Every root that holds layers of `common_dir`'s: the disk's, and each in memory that
    /// exists. What a clean-up looks through.
    pub(crate) fn all(common_dir: &Path) -> Vec<Self> {
        let mut all = vec![Self::disk(common_dir)];
        all.extend(
            tmpfs_bases()
                .iter()
                .filter_map(|base| Some(user_dir(base, false)?.join(digest(common_dir)?)))
                .filter(|dir| std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()))
                .map(Self::Memory),
        );
        all
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::Disk(path) | Self::Memory(path) => path,
        }
    }

    /// The folders workers must not see: the layers of every other task.
    /// `.git/swarm/` is hidden whole already; in memory, this user's folder of swarm's.
    pub(crate) fn hidden(&self) -> Option<&Path> {
        match self {
            Self::Disk(_) => None,
            Self::Memory(path) => path.parent(),
        }
    }

    /// The layers folder of worktree `name` (`<RUN-ID>-<n>`).
    pub(crate) fn slot(&self, name: &OsStr) -> PathBuf {
        self.path().join(name)
    }

    /// Removes `dir`, the layers folder of one worktree, which must be right in this root;
    /// links are removed, never followed. overlayfs leaves `work/work` with mode 000, which
    /// its owner must open up first.
    pub(crate) fn remove(&self, common_dir: &Path, dir: &Path) -> anyhow::Result<()> {
        if let Self::Memory(root) = self {
            // Checked before anything in it is touched.
            anyhow::ensure!(
                dir.parent() == Some(root.as_path()) && dir.file_name().is_some_and(|n| n != ".."),
                "{} is not a folder of swarm's layers",
                dir.display()
            );
        }
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            swarm_sandbox::overlay::open_work_dir(&dir.join("work"));
        }
        match self {
            Self::Disk(_) => {
                state::discard_owned(common_dir, dir)?;
            }
            Self::Memory(root) => {
                swarm_sandbox::files::remove_no_follow(dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
                // The repository's folder goes with its last layers (another run's keep it).
                let _ = std::fs::remove_dir(root);
            }
        }
        Ok(())
    }
}

/// A root in memory for the layers of `common_dir`'s worktrees, on the first tmpfs where
/// `needed` bytes are at most half of what is free; made (mode 0700) if missing. `None`
/// where there is none, where `SWARM_LAYERS_ON_DISK` is set, or where this user's folder
/// there is not this user's alone.
pub(crate) fn memory_root(common_dir: &Path, needed: u64) -> Option<LayersRoot> {
    if std::env::var_os(ON_DISK_VAR).is_some() {
        return None;
    }
    tmpfs_bases().iter().find_map(|base| {
        let free = rustix::fs::statvfs(base.as_path()).ok()?;
        let free = free.f_bavail.saturating_mul(free.f_frsize);
        if needed > free / 2 {
            return None;
        }
        let dir = user_dir(base, true)?.join(digest(common_dir)?);
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        let meta = std::fs::symlink_metadata(&dir).ok()?;
        meta.is_dir().then_some(LayersRoot::Memory(dir))
    })
}

/// The tmpfs folders layers may be kept in, in order: `$XDG_RUNTIME_DIR` (this user's alone,
/// where a session has one), then `/dev/shm`.
fn tmpfs_bases() -> Vec<PathBuf> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    // Where a link leads: the jails hide the folder by the path their mounts resolve.
    runtime
        .into_iter()
        .filter(|dir| dir.is_absolute())
        .chain([PathBuf::from("/dev/shm")])
        .filter_map(|dir| dir.canonicalize().ok())
        .filter(|dir| swarm_sandbox::overlay::on_tmpfs(dir))
        .collect()
}

/// `<base>/swarm-<uid>`, made first when `create`: `None` unless it is a folder (not a
/// link) of this user's that nobody else may open.
fn user_dir(base: &Path, create: bool) -> Option<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let dir = base.join(format!("swarm-{uid}"));
    if create {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(dir)
}

/// The name of `common_dir`'s folder of layers in memory: a digest of its path (git's own
/// object hash, so every version of swarm finds the same); `None` if libgit2 cannot hash.
fn digest(common_dir: &Path) -> Option<String> {
    let path = common_dir
        .canonicalize()
        .unwrap_or_else(|_| common_dir.to_path_buf());
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let id = git2::Oid::hash_object(git2::ObjectType::Blob, bytes).ok()?;
    Some(id.to_string()[..20].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_of_someone_elses_or_open_to_others_is_not_used() {
        let base = tempfile::tempdir().unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let dir = base.path().join(format!("swarm-{uid}"));
        assert_eq!(user_dir(base.path(), true), Some(dir.clone()));
        let mode = std::fs::metadata(&dir).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Opened to others: not used, and not made private again behind the user's back.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        assert_eq!(user_dir(base.path(), true), None);
        std::fs::remove_dir(&dir).unwrap();
        // A link planted under the name, to a folder of the user's own: not followed.
        let elsewhere = base.path().join("elsewhere");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&elsewhere)
            .unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        assert_eq!(user_dir(base.path(), true), None);
    }

    #[test]
    fn a_folder_in_memory_removes_only_its_own_layers() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("root");
        let victim = base.path().join("victim");
        std::fs::create_dir_all(root.join("slot/upper")).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        let layers = LayersRoot::Memory(root.clone());
        let common = base.path().join(".git");
        for bad in [
            victim.clone(),
            root.join("../victim"),
            root.join("slot/upper"),
        ] {
            assert!(layers.remove(&common, &bad).is_err(), "{}", bad.display());
        }
        std::os::unix::fs::symlink(&victim, root.join("link")).unwrap();
        layers.remove(&common, &root.join("link")).unwrap();
        assert!(victim.is_dir());
        layers.remove(&common, &root.join("slot")).unwrap();
        assert!(
            !root.exists(),
            "the repository's folder goes with its last layers"
        );
    }

    #[test]
    fn each_repository_has_a_folder_of_its_own() {
        let a = digest(Path::new("/nonexistent/a/.git"));
        assert_eq!(a, digest(Path::new("/nonexistent/a/.git")));
        assert_ne!(a, digest(Path::new("/nonexistent/b/.git")));
        assert_eq!(a.map(|a| a.len()), Some(20));
    }
}
