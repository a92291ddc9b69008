//! swarm's short-lived files outside the repository: the sockets of its proxies and gateway
//! listeners, workers' private temporary directories, result-file directories.
//!
//! They live in one directory per swarm process, `$TMPDIR/swarm-<pid>-<random>/`, which
//! holds a `lock` file locked (`flock`) for as long as the process lives: the directory is
//! made under another name, locked, then renamed, so no directory of that name is ever
//! unlocked while its process lives. Each piece is a
//! [`tempfile::TempDir`] inside it, removed when dropped, or for what every task needs (its
//! `TMPDIR`, its result folder, its git view's layers) a [`ScratchDir`], emptied when dropped
//! and used again ([`reusable`]); the directory itself is removed when the command ends
//! ([`close`]). A process killed with `kill -9` cannot remove
//! anything, but its lock is released by the kernel: [`sweep`] (at the start of every run,
//! and by `swarm clean`) removes the directories of this user whose lock nobody holds.
//! Unix socket paths are limited to 108 bytes, so these cannot live under a repository's
//! `.git/swarm/`, whose depth is the user's.
//!
//! The sockets of swarm's doors (its proxies, its gateway listeners) are kept apart, in one
//! folder for all of this user's swarm processes, `$TMPDIR/swarm-doors-<uid>/` ([`doors`]),
//! each process's in a folder named like its scratch directory. Every jail covers that
//! folder with an empty mount, so no worker sees, let alone connects to, a door: not
//! another run's, not another task's, not its own (its forwarder opened its own doors
//! before the cover went up).

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::files::{rename_noreplace, try_lock};

mod reuse;

pub use reuse::{ScratchDir, release_kept, reusable};

/// The name of every process's directory starts with this, then its pid and a dash.
const PREFIX: &str = "swarm-";

/// This process's directory, and the open lock file that marks it alive.
struct Root {
    path: PathBuf,
    _lock: File,
}

static ROOT: OnceLock<Result<Root, String>> = OnceLock::new();

/// A new directory for one use (`prefix` names the use: `net-`, `tmp-`…), inside this
/// process's scratch directory; removed when dropped.
pub fn dir(prefix: &str) -> io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&root()?.path)
}

/// A new folder for one door's socket (`prefix` names the use: `net-`, `gw-`), in this
/// process's folder of [`doors`]; removed when dropped.
pub(crate) fn door_dir(prefix: &str) -> io::Result<tempfile::TempDir> {
    let root = root()?;
    let mine = doors()?.join(root.path.file_name().unwrap_or_default());
    match std::fs::create_dir(&mine) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    tempfile::Builder::new().prefix(prefix).tempdir_in(&mine)
}

/// The folder of every door of this user's swarm processes, `$TMPDIR/swarm-doors-<uid>`,
/// made (mode 700) if it is not there. One that is a link, not a folder, someone else's or
/// open to others is refused: a door there could be reached, or replaced, by them.
pub fn doors() -> io::Result<&'static Path> {
    static DOORS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DOORS
        .get_or_init(|| open_doors(&std::env::temp_dir()).map_err(|e| e.to_string()))
        .as_deref()
        .map_err(|e| io::Error::other(e.clone()))
}

fn open_doors(tmp: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let uid = rustix::process::getuid().as_raw();
    let path = tmp.join(format!("{DOORS_PREFIX}{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&path)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a folder of this user's that only this user can open; remove it",
            path.display()
        )));
    }
    Ok(path)
}

/// The doors folder's name, but for the uid.
const DOORS_PREFIX: &str = "swarm-doors-";

/// Where this process's scratch folders go to be deleted ([`crate::janitor`]).
fn graveyard() -> io::Result<PathBuf> {
    Ok(root()?.path.join("graveyard"))
}

/// This process's directory, made on first use.
fn root() -> io::Result<&'static Root> {
    ROOT.get_or_init(|| open_root().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io::Error::other(e.clone()))
}

fn open_root() -> io::Result<Root> {
    let staging = tempfile::Builder::new().prefix(".swarm-new-").tempdir()?;
    let lock = File::create(staging.path().join("lock"))?;
    if !try_lock(&lock)? {
        return Err(io::Error::other(
            "a new scratch directory is locked already",
        ));
    }
    let name = staging
        .path()
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    let path = staging.path().with_file_name(format!(
        "{PREFIX}{}-{}",
        std::process::id(),
        name.trim_start_matches(".swarm-new-")
    ));
    rename_noreplace(staging.path(), &path)?;
    // Renamed: nothing left for the guard to remove.
    let _ = staging.keep();
    Ok(Root { path, _lock: lock })
}

/// A new path in this process's scratch directory, named `prefix` and a number, that
/// nothing is at (yet): for a file another process may write.
pub fn path(prefix: &str) -> io::Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(root()?.path.join(format!("{prefix}{n}")))
}

/// Removes this process's scratch directory (what its guards have not removed already),
/// and its folder of doors.
pub fn close() {
    crate::janitor::drain();
    if let Some(Ok(root)) = ROOT.get() {
        let _ = crate::files::remove_no_follow(&root.path);
        if let (Ok(doors), Some(name)) = (doors(), root.path.file_name()) {
            let _ = crate::files::remove_no_follow(&doors.join(name));
        }
    }
}

/// Removes the scratch directories in `tmp` that belonged to this user's swarm processes
/// which have ended (killed before they could clean up). Returns how many.
pub fn sweep(tmp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let uid = rustix::process::getuid().as_raw();
    let mine = ROOT.get().and_then(|r| r.as_ref().ok()).map(|r| &r.path);
    let swept = entries
        .flatten()
        .filter(|entry| is_scratch_name(&entry.file_name().to_string_lossy()))
        .map(|entry| entry.path())
        .filter(|path| Some(path) != mine)
        .filter(|path| is_stale(path, uid))
        .filter(|path| crate::files::remove_no_follow(path).is_ok())
        .count();
    sweep_doors(tmp, uid);
    swept
}

/// Removes the folders of doors whose process's scratch directory is gone.
fn sweep_doors(tmp: &Path, uid: u32) {
    let doors = tmp.join(format!("{DOORS_PREFIX}{uid}"));
    let Ok(meta) = std::fs::symlink_metadata(&doors) else {
        return;
    };
    if !meta.is_dir() || meta.uid() != uid {
        return;
    }
    let Ok(entries) = std::fs::read_dir(&doors) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if is_scratch_name(&name.to_string_lossy())
            && std::fs::symlink_metadata(tmp.join(&name)).is_err()
        {
            let _ = crate::files::remove_no_follow(&entry.path());
        }
    }
}

/// `swarm-<digits>-<anything>`.
fn is_scratch_name(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(pid, _)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// A directory (not a link) of `uid` whose lock file nobody holds.
fn is_stale(path: &Path, uid: u32) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !meta.is_dir() || meta.uid() != uid {
        return false;
    }
    let lock = path.join("lock");
    match std::fs::symlink_metadata(&lock) {
        Ok(m) if m.is_file() => File::open(&lock)
            .and_then(|f| try_lock(&f))
            .unwrap_or(false),
        // Named only once locked: no lock file is no process.
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_scratch_directories() {
        assert!(is_scratch_name("swarm-1234-abcdef"));
        assert!(!is_scratch_name("swarm-net-abcdef"));
        assert!(!is_scratch_name("swarm--abc"));
        assert!(!is_scratch_name("swarm-1234"));
        assert!(!is_scratch_name("other-1234-x"));
    }

    #[test]
    fn a_locked_directory_is_alive_and_an_unlocked_one_is_stale() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = rustix::process::getuid().as_raw();
        let alive = tmp.path().join("swarm-1-alive");
        let dead = tmp.path().join("swarm-2-dead");
        for d in [&alive, &dead] {
            std::fs::create_dir(d).unwrap();
            File::create(d.join("lock")).unwrap();
        }
        let held = File::open(alive.join("lock")).unwrap();
        assert!(try_lock(&held).unwrap());
        assert!(!is_stale(&alive, uid));
        assert!(is_stale(&dead, uid));
        assert_eq!(sweep(tmp.path()), 1);
        assert!(alive.exists() && !dead.exists());
    }

    #[test]
    fn doors_of_processes_gone_are_swept_and_a_doors_folder_of_someone_else_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let doors = open_doors(tmp.path()).unwrap();
        assert_eq!(doors.metadata().unwrap().mode() & 0o777, 0o700);
        let alive = tmp.path().join("swarm-1-alive");
        std::fs::create_dir(&alive).unwrap();
        File::create(alive.join("lock")).unwrap();
        let held = File::open(alive.join("lock")).unwrap();
        assert!(try_lock(&held).unwrap());
        for name in ["swarm-1-alive", "swarm-2-dead"] {
            std::fs::create_dir_all(doors.join(name).join("gw-x")).unwrap();
        }
        sweep(tmp.path());
        assert!(doors.join("swarm-1-alive/gw-x").exists());
        assert!(!doors.join("swarm-2-dead").exists());
        // Opened to others: refused.
        std::fs::set_permissions(&doors, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open_doors(tmp.path()).is_err());
    }
}
