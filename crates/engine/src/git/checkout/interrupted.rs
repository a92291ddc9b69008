//! What a run killed with `kill -9` leaves in the repository, put right by the next swarm
//! process that holds the run (`swarm resume`, `swarm merge`, `swarm clean`): the locks
//! libgit2 was holding on the run's own branches, and a final update of the checkout cut off
//! half way.
//!
//! A lock counts as swarm's only where nobody else can hold it: under the run's own branch
//! namespace (`refs/heads/swarm/<RUN-ID>/`), whose run lock the caller holds; and
//! `index.lock` only if it is the very file the killed update last wrote (its device, inode,
//! size and modification time to the nanosecond were recorded next to the run's state,
//! [`UpdateRecord`]; an inode alone is reused at once by a file created after). Any other
//! lock is left alone.
//!
//! An update cut off after moving the branch is finished (its index was written before the
//! branch moved); one cut off before is undone: every changed path whose file is the new
//! commit's, or missing, gets the old commit's back (they were clean when the update began,
//! so git holds what they were), files the update added go, and the lock is removed. A file
//! that is neither is someone else's since, and stays as it is (and is named).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::ids::RunId;
use crate::repo_path::RepoPath;

/// Written when an update of the checkout takes `index.lock`, removed when it ends.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct UpdateRecord {
    pub lock: LockStamp,
    pub into_ref: String,
    pub old: String,
    pub new: String,
}

/// What tells one `index.lock` from another.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LockStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl LockStamp {
    fn of(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::symlink_metadata(path)?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        })
    }
}

/// Where the record of an update staged in `staging` lives.
pub(crate) fn record_path(staging: &Path) -> PathBuf {
    staging.with_extension("json")
}

/// Records that the update from `old` to `new` of `into_ref` holds the lock `lock` as it is
/// now (again after each write of the lock).
pub(super) fn record(
    staging: &Path,
    lock: &Path,
    into_ref: &str,
    old: Oid,
    new: Oid,
) -> anyhow::Result<()> {
    let record = UpdateRecord {
        lock: LockStamp::of(lock)?,
        into_ref: into_ref.to_string(),
        old: old.to_string(),
        new: new.to_string(),
    };
    crate::state::write_json_atomic(&record_path(staging), &record)
}

/// The update ended (done or undone): nothing to recover.
pub(super) fn forget(staging: &Path) {
    let _ = crate::state::remove_file_if_present(&record_path(staging));
}

/// Removes the lock files under the run's branch namespace; returns them.
pub(crate) fn clear_branch_locks(common_dir: &Path, run: &RunId) -> Vec<PathBuf> {
    let dir = common_dir.join("refs/heads").join(run.branch_prefix());
    let mut removed = Vec::new();
    let mut pending = vec![dir];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file()
                && path.extension().is_some_and(|e| e == "lock")
                && std::fs::remove_file(&path).is_ok()
            {
                removed.push(path);
            }
        }
    }
    removed
}

/// Puts right an update of the checkout that was cut off (see the module's docs); says
/// what it did, or `None` when there was nothing to do.
pub(crate) fn recover_update(
    repo: &Repository,
    git_dir: &Path,
    staging: &Path,
) -> anyhow::Result<Option<String>> {
    let path = record_path(staging);
    let record: UpdateRecord = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not valid", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let lock = git_dir.join("index.lock");
    let ours = LockStamp::of(&lock).is_ok_and(|now| now == record.lock);
    let (old, new) = (Oid::from_str(&record.old)?, Oid::from_str(&record.new)?);
    let said = match (ours, repo.refname_to_id(&record.into_ref).ok()) {
        (false, _) => format!(
            "an update of your checkout to {} was cut off by a kill, and its {} was removed \
             since; check `git status`",
            crate::ids::short(&new),
            lock.display()
        ),
        (true, Some(at)) if at == new => {
            std::fs::rename(&lock, git_dir.join("index"))
                .context("cannot put the new index in place")?;
            format!(
                "finished the update of your checkout to {} that a kill cut off",
                crate::ids::short(&new)
            )
        }
        (true, Some(at)) if at == old => {
            let left = undo(repo, old, new)?;
            std::fs::remove_file(&lock).context("cannot remove the index lock")?;
            undone_message(&lock, &left)
        }
        (true, _) => format!(
            "an update of your checkout was cut off by a kill and its branch moved since; \
             left as it is, with {} (remove it when no git process runs)",
            lock.display()
        ),
    };
    forget(staging);
    crate::state::remove_owned(repo.commondir(), staging)?;
    Ok(Some(said))
}

fn undone_message(lock: &Path, left: &[RepoPath]) -> String {
    let mut said = format!(
        "undid an update of your checkout that a kill cut off, and removed its {}",
        lock.display()
    );
    if !left.is_empty() {
        let names: Vec<String> = left.iter().take(10).map(|p| p.display()).collect();
        said.push_str(&format!(
            "; changed since, left as they are: {}{}",
            names.join(", "),
            if left.len() > 10 { ", …" } else { "" }
        ));
    }
    said
}

/// Gives every path the update from `old` to `new` touched its old content back, where it
/// is the new content or missing; returns the paths that were neither.
fn undo(repo: &Repository, old: Oid, new: Oid) -> anyhow::Result<Vec<RepoPath>> {
    let workdir = repo
        .workdir()
        .context("the checkout has no working directory")?;
    let index = repo.index()?;
    let mut restore = Vec::new();
    let mut left = Vec::new();
    for c in super::changes(repo, &index, old, new)? {
        if c.sparse {
            continue;
        }
        let at = workdir.join(c.path.as_path());
        if holds(repo, &at, c.old) {
            continue;
        }
        if !holds(repo, &at, c.new) && std::fs::symlink_metadata(&at).is_ok() {
            left.push(c.path);
            continue;
        }
        match c.old {
            Some(_) => restore.push(c.path),
            None => {
                std::fs::remove_file(&at).with_context(|| format!("cannot remove {}", c.path))?;
                remove_empty_parents(workdir, &at);
            }
        }
    }
    if !restore.is_empty() {
        let tree = repo.find_commit(old)?.tree()?;
        let mut checkout = git2::build::CheckoutBuilder::new();
        checkout.force().update_index(false);
        for path in &restore {
            checkout.path(crate::git::literal_pathspec(path));
        }
        repo.checkout_tree(tree.as_object(), Some(&mut checkout))?;
    }
    Ok(left)
}

/// Whether the file at `at` is `entry` (a blob and its mode), or absent for `None`.
fn holds(repo: &Repository, at: &Path, entry: Option<(Oid, u32)>) -> bool {
    let meta = std::fs::symlink_metadata(at);
    let Some((id, mode)) = entry else {
        return meta.is_err();
    };
    let Ok(meta) = meta else {
        return false;
    };
    match mode {
        0o120000 => {
            meta.file_type().is_symlink()
                && std::fs::read_link(at).is_ok_and(|target| {
                    repo.find_blob(id).is_ok_and(|b| {
                        b.content() == std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str())
                    })
                })
        }
        0o160000 => meta.is_dir(),
        _ => {
            meta.is_file()
                && git2::Oid::hash_file(git2::ObjectType::Blob, at).is_ok_and(|h| h == id)
        }
    }
}

fn remove_empty_parents(workdir: &Path, file: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir.filter(|d| *d != workdir && d.starts_with(workdir)) {
        if std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository checked out at `old` (a.txt = foo) with `new` (a.txt = bar, b.txt added)
    /// as a commit on top, the branch still at `old`; and the run's staging path.
    fn repo() -> (tempfile::TempDir, Repository, Oid, Oid, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let commit = |files: &[(&str, &str)], parents: &[&git2::Commit<'_>]| {
            let mut tb = repo.treebuilder(None).unwrap();
            for (name, text) in files {
                let blob = repo.blob(text.as_bytes()).unwrap();
                tb.insert(name, blob, 0o100644).unwrap();
            }
            let tree = repo.find_tree(tb.write().unwrap()).unwrap();
            repo.commit(None, &sig, &sig, "c", &tree, parents).unwrap()
        };
        let old = commit(&[("a.txt", "foo\n")], &[]);
        let new = commit(
            &[("a.txt", "bar\n"), ("b.txt", "new\n")],
            &[&repo.find_commit(old).unwrap()],
        );
        repo.reference("refs/heads/main", old, true, "t").unwrap();
        repo.set_head("refs/heads/main").unwrap();
        repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force()))
            .unwrap();
        let staging = repo.commondir().join("swarm/runs/r/checkout");
        std::fs::create_dir_all(&staging).unwrap();
        (dir, repo, old, new, staging)
    }

    /// Takes `index.lock` as the update does (a copy of the index), and records it.
    fn cut_off(repo: &Repository, staging: &Path, old: Oid, new: Oid) -> PathBuf {
        let lock = repo.path().join("index.lock");
        std::fs::copy(repo.path().join("index"), &lock).unwrap();
        record(staging, &lock, "refs/heads/main", old, new).unwrap();
        lock
    }

    #[test]
    fn cut_off_before_the_branch_moved_is_undone() {
        let (dir, repo, old, new, staging) = repo();
        let lock = cut_off(&repo, &staging, old, new);
        // Half way: a.txt is the new one, b.txt placed; c.txt is the user's.
        std::fs::write(dir.path().join("a.txt"), "bar\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "new\n").unwrap();
        std::fs::write(dir.path().join("c.txt"), "mine\n").unwrap();
        let said = recover_update(&repo, repo.path(), &staging)
            .unwrap()
            .unwrap();
        assert!(said.starts_with("undid an update"), "{said}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "foo\n"
        );
        assert!(!dir.path().join("b.txt").exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c.txt")).unwrap(),
            "mine\n"
        );
        assert!(!lock.exists() && !record_path(&staging).exists() && !staging.exists());
        assert!(
            recover_update(&repo, repo.path(), &staging)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_file_changed_since_is_left_and_named() {
        let (dir, repo, old, new, staging) = repo();
        cut_off(&repo, &staging, old, new);
        std::fs::write(dir.path().join("a.txt"), "someone else's\n").unwrap();
        let said = recover_update(&repo, repo.path(), &staging)
            .unwrap()
            .unwrap();
        assert!(said.contains("left as they are: a.txt"), "{said}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "someone else's\n"
        );
    }

    #[test]
    fn cut_off_after_the_branch_moved_is_finished() {
        let (dir, repo, old, new, staging) = repo();
        let lock = cut_off(&repo, &staging, old, new);
        // Everything done but renaming the new index into place.
        let mut index = git2::Index::open(&lock).unwrap();
        index
            .read_tree(&repo.find_commit(new).unwrap().tree().unwrap())
            .unwrap();
        index.write().unwrap();
        record(&staging, &lock, "refs/heads/main", old, new).unwrap();
        std::fs::write(dir.path().join("a.txt"), "bar\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "new\n").unwrap();
        repo.reference("refs/heads/main", new, true, "t").unwrap();
        let said = recover_update(&repo, repo.path(), &staging)
            .unwrap()
            .unwrap();
        assert!(said.starts_with("finished the update"), "{said}");
        assert!(!lock.exists());
        let mut index = repo.index().unwrap();
        index.read(true).unwrap();
        assert!(index.get_path(Path::new("b.txt"), 0).is_some());
    }

    #[test]
    fn a_lock_that_is_not_the_killed_updates_is_left_alone() {
        let (dir, repo, old, new, staging) = repo();
        let lock = cut_off(&repo, &staging, old, new);
        // Someone removed the lock, and another git process holds a new one.
        std::fs::remove_file(&lock).unwrap();
        std::fs::write(dir.path().join("a.txt"), "bar\n").unwrap();
        std::fs::write(&lock, "").unwrap();
        let said = recover_update(&repo, repo.path(), &staging)
            .unwrap()
            .unwrap();
        assert!(said.contains("was removed since"), "{said}");
        assert!(lock.exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "bar\n"
        );
    }
}
