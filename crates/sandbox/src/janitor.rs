//! Deleting off a task's path. What a task leaves that must be gone before its worktree's
//! next task (overlayfs' folder in a view's `work` after each mount, the folders of an
//! upper layer emptied for the next task, what a scratch folder held) is moved into a
//! graveyard folder on the same file system, one rename, and deleted there by one thread of
//! the process, the janitor.
//!
//! On an ext4 without a journal, mounted with `discard` (as this project's machine is), a
//! block freed is discarded synchronously, a round trip to the device in the thread that
//! deletes: each folder removed cost the worker's thread about a quarter of a millisecond, and
//! a one-file task removed about five (docs/BENCHMARKS-HISTORY.md). A journal batches discards at its
//! commit instead; there the janitor only moves the deletions' system time off the workers.
//!
//! What is retired is swarm's: its process has ended, so nothing changes it while it is
//! deleted, and the deletion never follows a link. Without a janitor (one was never started,
//! or it is gone), a retired folder is deleted where it was retired. A graveyard a crash
//! left goes with the folder it is in: the scratch directory ([`crate::scratch::sweep`]), a
//! view's layers (the run's clean-up).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

enum Job {
    Delete(PathBuf),
    /// Answered once everything queued before it is deleted.
    Drained(mpsc::SyncSender<()>),
}

/// The janitor's queue, once started.
static QUEUE: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);

fn queue() -> std::sync::MutexGuard<'static, Option<mpsc::Sender<Job>>> {
    QUEUE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the janitor, if it is not running. Call it from a thread that is not confined
/// ([`crate::confined`]): the janitor keeps the Landlock rules of the thread that starts it.
pub fn start() {
    let mut queue = queue();
    if queue.is_some() {
        return;
    }
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("swarm-janitor".into())
        .spawn(move || {
            for job in rx {
                match job {
                    Job::Delete(path) => delete(&path),
                    Job::Drained(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
    match spawned {
        Ok(_) => *queue = Some(tx),
        Err(e) => tracing::debug!("no janitor ({e}): folders are deleted where they are retired"),
    }
}

/// Has the folder `path`, which nothing uses any more and nobody will look for at that
/// path again, deleted off the caller's path.
pub fn delete_later(path: PathBuf) {
    let queued = queue()
        .as_ref()
        .is_some_and(|q| q.send(Job::Delete(path.clone())).is_ok());
    if !queued {
        delete(&path);
    }
}

/// Moves the folder `path` into `graveyard` (made if missing, never through a link), and
/// has it deleted there. `Err` if it could not be moved: it is where it was.
pub fn retire(path: &Path, graveyard: &Path) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    match std::fs::create_dir(graveyard) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    if !std::fs::symlink_metadata(graveyard)?.is_dir() {
        return Err(io::Error::other("the graveyard is not a folder"));
    }
    let mut moved = Err(io::Error::other("no free name in the graveyard"));
    // A name taken is one an earlier process of the same pid left.
    for _ in 0..64 {
        let to = graveyard.join(format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        moved = crate::files::rename_noreplace(path, &to).map(|()| to);
        if !moved
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::AlreadyExists)
        {
            break;
        }
    }
    delete_later(moved?);
    Ok(())
}

/// Waits until everything retired so far is deleted (at the end of a command).
pub fn drain() {
    let (tx, rx) = mpsc::sync_channel(1);
    let queued = queue()
        .as_ref()
        .is_some_and(|q| q.send(Job::Drained(tx)).is_ok());
    if queued {
        let _ = rx.recv();
    }
}

/// Deletes `path` (a folder, with everything in it), never following a link.
fn delete(path: &Path) {
    match crate::files::remove_no_follow(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::debug!("cannot delete {}: {e}", path.display());
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retired_folder_is_gone_and_no_link_in_it_was_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("file"), "kept").unwrap();
        let used = dir.path().join("used");
        std::fs::create_dir_all(used.join("deep/er")).unwrap();
        std::fs::write(used.join("deep/file"), "x").unwrap();
        std::os::unix::fs::symlink(&victim, used.join("deep/link")).unwrap();
        let graveyard = dir.path().join("graveyard");
        start();
        retire(&used, &graveyard).unwrap();
        assert!(!used.exists(), "the folder is still where it was");
        drain();
        let left: Vec<_> = std::fs::read_dir(&graveyard).unwrap().collect();
        assert!(left.is_empty(), "the graveyard holds {left:?}");
        assert_eq!(
            std::fs::read_to_string(victim.join("file")).unwrap(),
            "kept",
            "a link was followed"
        );
    }

    #[test]
    fn a_graveyard_that_is_a_link_is_refused_and_the_folder_stays() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let graveyard = dir.path().join("graveyard");
        std::os::unix::fs::symlink(&elsewhere, &graveyard).unwrap();
        let used = dir.path().join("used");
        std::fs::create_dir(&used).unwrap();
        assert!(retire(&used, &graveyard).is_err());
        assert!(used.is_dir(), "the folder was moved");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
