//! The last step of a run whose target is checked out: the user's files, index and branch move
//! to the result together, or none of them moves.
//!
//! 1. The index lock (`index.lock`) is taken first, as git does: with another git process at
//!    work (or a stale lock), nothing is touched.
//! 2. Every path the result changes must be clean in the checkout (its index entry is the old
//!    commit's, its file the index's, nothing untracked or ignored where a new file goes);
//!    otherwise nothing is touched. Paths outside a sparse checkout (skip-worktree) only get
//!    their index entries updated, as git does.
//! 3. The result's files are written into a staging directory next to the run's state,
//!    which is where a full disk shows up: from their blobs, with their modes and links, and
//!    through libgit2's checkout where an attribute asks for a filter (line endings…).
//! 4. The old files are moved aside, the new ones renamed into place (never over anything
//!    that appeared meanwhile), the new index written into the lock, the branch moved with a
//!    compare-and-swap, and only then the index renamed into place.
//!
//! If any step fails, everything done so far is undone (files moved back, the new index
//! dropped with the lock), so the checkout, index and branch are exactly as they were, and
//! the caller says where the result is. A process killed half way leaves a record
//! ([`interrupted`]) that the next command on the run undoes the update from.

pub(crate) mod interrupted;

use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use git2::build::CheckoutBuilder;
use git2::{IndexEntry, Oid, Repository, RepositoryState, Status};

use crate::repo_path::RepoPath;

/// Bit of `IndexEntry::flags_extended` that marks an entry outside a sparse checkout.
const SKIP_WORKTREE: u16 = 1 << 14;

/// Why the checkout was not updated, and what the user can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotMoved {
    pub reason: String,
    /// Something to do before merging the result by hand, when there is something.
    pub first: Option<String>,
}

impl NotMoved {
    fn new(reason: impl Into<String>, first: Option<&str>) -> Self {
        Self {
            reason: reason.into(),
            first: first.map(str::to_string),
        }
    }
}

/// One path the result changes.
pub(super) struct Change {
    pub(super) path: RepoPath,
    pub(super) old: Option<(Oid, u32)>,
    pub(super) new: Option<(Oid, u32)>,
    /// Outside a sparse checkout: only the index entry changes.
    pub(super) sparse: bool,
}

/// `index.lock`, held from the start of the update; removed when dropped unless renamed into
/// place.
struct IndexLock {
    path: PathBuf,
    held: bool,
}

impl IndexLock {
    fn take(path: PathBuf) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::File::options()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        Ok(Self { path, held: true })
    }
}

impl Drop for IndexLock {
    fn drop(&mut self) {
        if self.held {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Moves the checked-out branch `into_ref` of `repo` (the user's checkout, whose git
/// directory is `git_dir`) from `old` to `new`, with its files and index. `staging` is an
/// empty directory swarm owns, on the same filesystem as the checkout if possible; the
/// caller removes it afterwards. `Ok(Err(..))`: nothing was changed.
pub(crate) fn update_checkout(
    repo: &Repository,
    git_dir: &Path,
    staging: &Path,
    into_ref: &str,
    old: Oid,
    new: Oid,
) -> anyhow::Result<Result<(), NotMoved>> {
    let mut lock = match lock_index(repo, git_dir)? {
        Ok(lock) => lock,
        Err(not_moved) => return Ok(Err(not_moved)),
    };
    let (mut index, index_written) = index_in_lock(git_dir, &lock.path)?;
    // Should swarm be killed from here on, the next swarm to hold the run finishes or undoes
    // the update from this record ([`interrupted`]).
    interrupted::record(staging, &lock.path, into_ref, old, new)?;
    let _forget = Forget(staging);
    match repo.refname_to_id(into_ref) {
        Ok(now) if now == old => {}
        _ => {
            return Ok(Err(NotMoved::new("the branch moved during the run", None)));
        }
    }
    let workdir = repo
        .workdir()
        .context("the checkout has no working directory")?;
    // libgit2's own lookups (attributes, a path's status) read this copy too: one index of
    // the repository's size in memory, not three.
    repo.set_index(&mut index)?;
    let changes = changes(repo, &index, old, new)?;
    let blocked = blocked_paths(repo, workdir, &index, index_written, &changes)?;
    if !blocked.is_empty() {
        let list: Vec<String> = blocked.iter().take(10).map(|p| p.display()).collect();
        return Ok(Err(NotMoved::new(
            format!(
                "updating your checkout would overwrite local changes in {}{}",
                list.join(", "),
                if blocked.len() > 10 { ", …" } else { "" }
            ),
            Some("commit or stash them"),
        )));
    }
    if let Err(e) = stage(repo, staging, new, &changes) {
        return Ok(Err(NotMoved::new(
            format!("cannot write the result's files: {e:#}"),
            None,
        )));
    }
    let mut swap = Swap::new(workdir, staging);
    let swapped = swap
        .apply(&changes)
        .map_err(|e| format!("cannot update your checkout: {e:#}"))
        .and_then(|()| {
            write_index(&mut index, workdir, &changes, repo, new)
                .and_then(|()| {
                    // The lock is a new file now: what a recovery must recognise.
                    interrupted::record(staging, &lock.path, into_ref, old, new)
                })
                .map_err(|e| format!("cannot write the index: {e:#}"))
        })
        .and_then(|()| {
            repo.reference_matching(into_ref, new, true, old, "swarm: merge result")
                .map(drop)
                .map_err(|e| format!("cannot move the branch: {}", e.message()))
        });
    if let Err(reason) = swapped {
        swap.undo();
        return Ok(Err(NotMoved::new(reason, None)));
    }
    std::fs::rename(&lock.path, git_dir.join("index"))
        .context("cannot put the new index in place")?;
    lock.held = false;
    // The update stands; the old files moved aside go with `staging`, which the caller
    // removes (`state::remove_owned`).
    Ok(Ok(()))
}

/// Forgets the update's record when the update ends, however it ends.
struct Forget<'a>(&'a Path);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        interrupted::forget(self.0);
    }
}

/// Takes the checkout's index lock, unless a git operation (a merge, a rebase…) is under way
/// or another git process holds it.
fn lock_index(repo: &Repository, git_dir: &Path) -> anyhow::Result<Result<IndexLock, NotMoved>> {
    if let Some(what) = operation_in_progress(repo) {
        return Ok(Err(NotMoved::new(
            format!("{what} is in progress in your checkout"),
            Some("finish or abort it"),
        )));
    }
    match IndexLock::take(git_dir.join("index.lock")) {
        Ok(lock) => Ok(Ok(lock)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Err(NotMoved::new(
            format!(
                "{} exists: another git process is working in your checkout",
                git_dir.join("index.lock").display()
            ),
            Some("wait for it (or remove the lock if no git process is running)"),
        ))),
        Err(e) => Err(e).context("cannot lock the index"),
    }
}

/// Renders the files of `new` that `changes` writes into `staging`, where nothing of the
/// user's is. A file no checkout filter applies to (no `text`, `eol`, `ident`, `filter` or
/// `working-tree-encoding` attribute, no `core.autocrlf`) is its blob, written directly; the
/// others go through libgit2's checkout, which applies the filters, given the paths as a list
/// (each entry looked up in it): as pathspecs, libgit2 matches every entry of the tree against
/// every path, and 10,000 paths on 27,000 files took seconds.
fn stage(repo: &Repository, staging: &Path, new: Oid, changes: &[Change]) -> anyhow::Result<()> {
    let written: Vec<&Change> = changes
        .iter()
        .filter(|c| c.new.is_some() && !c.sparse)
        .collect();
    if written.is_empty() {
        return Ok(());
    }
    let autocrlf = repo
        .config()
        .and_then(|c| c.get_bool("core.autocrlf"))
        .unwrap_or(false);
    // Asked per path (five lookups, each a `realpath`) only where an attribute could be set.
    let ask = !crate::git::filters::none_for_paths(repo, written.iter().map(|c| &c.path));
    let (filtered, plain): (Vec<&Change>, Vec<&Change>) = written
        .into_iter()
        .partition(|c| autocrlf || (ask && filters_apply(repo, &c.path)));
    render(repo, staging, &plain)?;
    if filtered.is_empty() {
        return Ok(());
    }
    let tree = repo.find_commit(new)?.tree()?;
    let mut checkout = CheckoutBuilder::new();
    // A list of paths, each looked up in it, not pathspecs matched against every entry.
    checkout
        .force()
        .update_index(false)
        .disable_pathspec_match(true)
        .target_dir(staging);
    for c in &filtered {
        checkout.path(c.path.as_bytes());
    }
    repo.checkout_tree(tree.as_object(), Some(&mut checkout))?;
    render(repo, staging, &filtered)
}

/// Would a checkout filter `path` (an attribute that converts line endings, expands `$Id$`,
/// names a filter driver or an encoding)?
pub(crate) fn filters_apply(repo: &Repository, path: &RepoPath) -> bool {
    ["text", "eol", "ident", "filter", "working-tree-encoding"]
        .iter()
        .any(|attr| {
            repo.get_attr_bytes(path.as_path(), attr, git2::AttrCheckFlags::default())
                .map_or(true, |value| value.is_some())
        })
}

/// Writes the files of `written` not in `staging` yet, from their blobs, as git writes them:
/// those no filter applies to, and what libgit2's checkout into a target directory skips
/// (paths whose type changed: a file that becomes a link, or the reverse).
fn render(repo: &Repository, staging: &Path, written: &[&Change]) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for c in written {
        let Some((id, mode)) = c.new else { continue };
        let at = staging.join(c.path.as_path());
        if std::fs::symlink_metadata(&at).is_ok() {
            continue;
        }
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match mode {
            0o160000 => std::fs::create_dir(&at)?,
            0o120000 => {
                let blob = repo.find_blob(id)?;
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(blob.content()), &at)?;
            }
            _ => {
                let blob = repo.find_blob(id)?;
                crate::state::write_file(&at, blob.content())?;
                let bits = if mode == 0o100755 { 0o755 } else { 0o644 };
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(bits))?;
            }
        }
    }
    Ok(())
}

/// A merge, rebase, cherry-pick… under way in the checkout, in words.
pub(crate) fn operation_in_progress(repo: &Repository) -> Option<&'static str> {
    match repo.state() {
        RepositoryState::Clean => None,
        RepositoryState::Merge => Some("a merge"),
        RepositoryState::Revert | RepositoryState::RevertSequence => Some("a revert"),
        RepositoryState::CherryPick | RepositoryState::CherryPickSequence => Some("a cherry-pick"),
        RepositoryState::Bisect => Some("a bisect"),
        RepositoryState::Rebase
        | RepositoryState::RebaseInteractive
        | RepositoryState::RebaseMerge => Some("a rebase"),
        RepositoryState::ApplyMailbox | RepositoryState::ApplyMailboxOrRebase => Some("git am"),
    }
}

/// The paths that differ between the two commits' trees.
pub(super) fn changes(
    repo: &Repository,
    index: &git2::Index,
    old: Oid,
    new: Oid,
) -> anyhow::Result<Vec<Change>> {
    let (old_tree, new_tree) = (
        repo.find_commit(old)?.tree()?,
        repo.find_commit(new)?.tree()?,
    );
    Ok(crate::git::tree_changes(repo, &old_tree, &new_tree)?
        .into_iter()
        .map(|c| Change {
            sparse: index
                .get_path(c.path.as_path(), 0)
                .is_some_and(|e| e.flags_extended & SKIP_WORKTREE != 0),
            old: c.old,
            new: c.new,
            path: c.path,
        })
        .collect())
}

/// Changed paths whose update would lose something of the user's.
fn blocked_paths(
    repo: &Repository,
    workdir: &Path,
    index: &git2::Index,
    index_written: Option<std::time::SystemTime>,
    changes: &[Change],
) -> anyhow::Result<Vec<RepoPath>> {
    let mut blocked = Vec::new();
    for c in changes {
        let entry = index.get_path(c.path.as_path(), 0);
        let index_agrees = match (&c.old, &entry) {
            (Some((id, _)), Some(e)) => e.id == *id,
            (None, None) => true,
            _ => false,
        };
        let clean = index_agrees
            && (c.sparse
                || match (c.old, &entry) {
                    (Some(_), Some(entry)) => file_is_entry(repo, workdir, entry, index_written),
                    (Some(_), None) => false,
                    // Nothing there, or a folder whose tracked files the result removes
                    // (if anything else is in it, putting the new file there fails and
                    // everything is undone).
                    (None, _) => std::fs::symlink_metadata(workdir.join(c.path.as_path()))
                        .map_or(true, |m| m.is_dir()),
                });
        if !clean {
            blocked.push(c.path.clone());
        }
    }
    Ok(blocked)
}

/// Is the checkout's file at `entry`'s path what the index says (so replacing it loses
/// nothing)? As git decides it, in proportion to the one file: its stat data matching the
/// entry's, when the entry is older than the index (not "racily clean"); else its content
/// hashing to the entry's blob, with the same kind and executable bit. Only a file that
/// differs byte for byte (a filter such as `core.autocrlf` may explain that) is left to
/// libgit2's status, which applies the filters.
pub(super) fn file_is_entry(
    repo: &Repository,
    workdir: &Path,
    entry: &IndexEntry,
    index_written: Option<std::time::SystemTime>,
) -> bool {
    let rel = Path::new(std::ffi::OsStr::from_bytes(&entry.path));
    let path = workdir.join(rel);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return false;
    };
    if !crate::git::stat::kind_agrees(entry, &meta) {
        return false;
    }
    if crate::git::stat::stat_vouches(entry, &meta, index_written) {
        return true;
    }
    let hashed = match meta.file_type().is_symlink() {
        true => std::fs::read_link(&path)
            .ok()
            .and_then(|t| Oid::hash_object(git2::ObjectType::Blob, t.as_os_str().as_bytes()).ok()),
        false => Oid::hash_file(git2::ObjectType::Blob, &path).ok(),
    };
    hashed == Some(entry.id) || repo.status_file(rel).is_ok_and(|s| s == Status::CURRENT)
}

/// The files moved so far, to undo or to finish.
struct Swap<'a> {
    workdir: &'a Path,
    backup: PathBuf,
    staging: &'a Path,
    /// (path in the checkout, where its old file went), in order.
    moved_away: Vec<(PathBuf, PathBuf)>,
    /// Directories removed because they became empty.
    removed_dirs: Vec<PathBuf>,
    /// Directories created for new files.
    created_dirs: Vec<PathBuf>,
    /// New files put in place.
    placed: Vec<PathBuf>,
}

impl<'a> Swap<'a> {
    fn new(workdir: &'a Path, staging: &'a Path) -> Self {
        Self {
            workdir,
            backup: staging.join(".swarm-backup"),
            staging,
            moved_away: Vec::new(),
            removed_dirs: Vec::new(),
            created_dirs: Vec::new(),
            placed: Vec::new(),
        }
    }

    /// Moves the old files aside, then the new ones into place.
    fn apply(&mut self, changes: &[Change]) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.backup)?;
        for (n, c) in changes.iter().filter(|c| !c.sparse).enumerate() {
            let at = self.workdir.join(c.path.as_path());
            if c.old.is_some() && std::fs::symlink_metadata(&at).is_ok() {
                let aside = self.backup.join(n.to_string());
                std::fs::rename(&at, &aside)
                    .with_context(|| format!("cannot move {} aside", c.path))?;
                self.moved_away.push((at.clone(), aside));
                self.remove_empty_parents(&at)?;
            }
        }
        for c in changes.iter().filter(|c| c.new.is_some() && !c.sparse) {
            let at = self.workdir.join(c.path.as_path());
            if let Some(parent) = at.parent() {
                self.create_parents(parent)
                    .with_context(|| format!("cannot make the folder of {}", c.path))?;
            }
            crate::state::rename_noreplace(&self.staging.join(c.path.as_path()), &at)
                .with_context(|| format!("cannot put {} in place", c.path))?;
            self.placed.push(at);
        }
        Ok(())
    }

    fn remove_empty_parents(&mut self, file: &Path) -> std::io::Result<()> {
        let mut dir = file.parent();
        while let Some(d) = dir.filter(|d| *d != self.workdir && d.starts_with(self.workdir)) {
            // Asked of the folder itself: reading its entries to see whether there are any
            // costs a buffer of them for every file moved, quadratic in a large folder. A
            // folder something is mounted on stays, empty or not.
            match std::fs::remove_dir(d) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::ResourceBusy
                    ) =>
                {
                    break;
                }
                Err(e) => return Err(e),
            }
            self.removed_dirs.push(d.to_path_buf());
            dir = d.parent();
        }
        Ok(())
    }

    fn create_parents(&mut self, dir: &Path) -> std::io::Result<()> {
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(d) = at.filter(|d| std::fs::symlink_metadata(d).is_err()) {
            missing.push(d.to_path_buf());
            at = d.parent();
        }
        for d in missing.into_iter().rev() {
            std::fs::create_dir(&d)?;
            self.created_dirs.push(d);
        }
        Ok(())
    }

    /// Puts everything back as it was (best effort, in reverse order).
    fn undo(&mut self) {
        for at in self.placed.drain(..).rev() {
            let _ = std::fs::remove_file(&at);
        }
        for d in self.created_dirs.drain(..).rev() {
            let _ = std::fs::remove_dir(&d);
        }
        for d in self.removed_dirs.drain(..).rev() {
            let _ = std::fs::create_dir(&d);
        }
        for (at, aside) in self.moved_away.drain(..).rev() {
            let _ = std::fs::rename(&aside, &at);
        }
    }
}

/// The checkout's index, copied into the held lock file `lock` and opened there (edited
/// there, the lock file exists from the start to the end, so no other git process can take
/// it meanwhile), and when the index was written (its entries' racy-clean line).
fn index_in_lock(
    git_dir: &Path,
    lock: &Path,
) -> anyhow::Result<(git2::Index, Option<std::time::SystemTime>)> {
    let current = git_dir.join("index");
    let written = match std::fs::copy(&current, lock) {
        Ok(_) => std::fs::metadata(&current)?.modified().ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    Ok((git2::Index::open(lock)?, written))
}

/// Writes the new index into the held lock file it was opened from ([`index_in_lock`]): the
/// current index with the changed entries replaced, left there for the caller to rename
/// into place.
fn write_index(
    index: &mut git2::Index,
    workdir: &Path,
    changes: &[Change],
    repo: &Repository,
    new: Oid,
) -> anyhow::Result<()> {
    let new_tree = repo.find_commit(new)?.tree()?;
    for c in changes {
        let old_entry = index.get_path(c.path.as_path(), 0);
        if c.old.is_some() {
            index.remove(c.path.as_path(), 0)?;
        }
        let Some((id, mode)) = c.new else {
            continue;
        };
        debug_assert!(new_tree.get_path(c.path.as_path()).is_ok());
        let mut entry = super::index_entry(&c.path, id, mode);
        if c.sparse {
            entry.flags_extended = old_entry.map_or(SKIP_WORKTREE, |e| e.flags_extended);
            entry.flags |= 0x4000; // extended flags present
        } else {
            let meta = std::fs::symlink_metadata(workdir.join(c.path.as_path()))?;
            crate::git::set_stat(&mut entry, &meta);
        }
        index.add(&entry)?;
    }
    index.write()?;
    Ok(())
}
