//! A pool of reusable worktrees, one per running worker.
//!
//! Creating and deleting a full checkout per task dominates a naive worktree flow. The pool
//! creates a worktree only when a worker needs one and none is idle (so never more than
//! `--jobs`), and resets an idle one for the next task: the task branch is created at the
//! task's start commit, HEAD points at it, and a forced checkout with `remove_untracked`
//! rewrites only what the previous task changed. Ignored files (build output) survive, so
//! incremental builds stay warm. A worktree is locked from its creation to its removal (once,
//! not a `locked` file written and deleted per task).
//!
//! A worker controls its worktree's files, the `.git` file among them, so swarm never takes
//! their word for anything:
//!
//! - a worktree is opened through the administrative directory swarm created
//!   (`.git/worktrees/<name>`), never through its `.git` file ([`WorktreePool::open`]), and
//!   a worktree whose `.git` file or administrative record changed is reported
//!   ([`WorktreePool::check_intact`]) and thrown away ([`Lease::discard`]);
//! - a reset first removes every symbolic link standing on the paths it writes, and runs in a
//!   thread that Landlock lets write only in the worktree and its administrative directory
//!   ([`swarm_sandbox::confined`]): a link a worker planted is never followed out.
//!   A reset that fails anyway throws the worktree away; the task gets a new one.
//!
//! A worktree is lent as a [`Lease`], which gives it back to the pool when dropped, on every
//! path out of the code that holds it (an error, a cancelled task, a panic).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use git2::{Oid, Repository};

use super::commit::{self, CommitError, Committed};
use super::view;
use crate::git::layers::LayersRoot;
use crate::ids::RunId;
use crate::repo_path::RepoPath;
use crate::state;
use swarm_sandbox as sandbox;

/// Lists the paths a worktree holds that its start does not (written, made or deleted).
/// Blocking.
pub(crate) type Listing = Arc<dyn Fn() -> anyhow::Result<BTreeSet<RepoPath>> + Send + Sync>;

mod cleanup;
mod files;
mod kept;
mod lease;
mod open;
mod parallel;
mod views;

pub(crate) use cleanup::{remove_run_worktrees, remove_run_worktrees_except, remove_worktree};
use files::{copy_into, reset};
pub(crate) use kept::remove_kept_base;
pub(crate) use lease::{Lease, Slot};
use open::describe_gitlink;
pub(crate) use open::open_worktree;

#[derive(Default)]
struct PoolState {
    /// Full checkouts and overlay worktrees waiting for a task.
    idle: Vec<Slot>,
    idle_views: Vec<Slot>,
    created: Vec<(String, PathBuf)>,
    /// Worktrees numbered so far (the base checkout is 0).
    numbered: usize,
}

/// The run's base checkout: the shared lower layer of every overlay worktree, a worktree of
/// its own (detached at the run's base) that no worker writes.
struct BaseCheckout {
    name: String,
    path: PathBuf,
    commit: Oid,
    /// No conversion or filter can be on for its files ([`crate::git::filters`]), so a view's
    /// commit writes a file's blob from its bytes; asked once, when the checkout is made.
    filters_off: bool,
    /// The lock on the checkout kept between runs, if this is it ([`kept`]).
    _kept: Option<std::fs::File>,
}

/// A failure around a commit (opening its repositories) as a commit's git error.
fn git_failure(e: anyhow::Error) -> CommitError {
    CommitError::Git(git2::Error::from_str(&format!("{e:#}")))
}

/// Where a new worktree's HEAD goes.
enum Head<'a> {
    Branch(&'a str),
    Detached(Oid),
}

pub(crate) struct WorktreePool {
    common_dir: PathBuf,
    run_id: RunId,
    /// Files copied from the user's checkout into each new worktree (`[worktree] copy`).
    copy: Vec<String>,
    user_workdir: PathBuf,
    state: Mutex<PoolState>,
    /// Made by the first overlay worktree; held while it is made, so others wait for it.
    base: Mutex<Option<Arc<BaseCheckout>>>,
    /// The common git directory's repository, opened once: every task's branch is made
    /// through it.
    common: lease::Handle,
    /// Use, and leave, the base checkout kept between runs (`--reuse-base`).
    reuse_base: bool,
    /// Whether a checkout may skip git's filters ([`crate::git::filters`]).
    filters: crate::git::filters::Filters,
    /// Where the overlay worktrees' layers are made.
    layers: LayersRoot,
}

/// How many threads check a new worktree out.
#[derive(Debug, Clone, Copy)]
enum Threads {
    One,
    /// A base checkout (the run's own, or the one kept between runs), which every overlay
    /// worktree waits for.
    Several,
}

/// An overlay worktree registered, waiting for the base checkout's index.
struct NewView {
    name: String,
    path: PathBuf,
    upper: PathBuf,
    work: PathBuf,
}

impl WorktreePool {
    pub(crate) fn new(
        common_dir: &Path,
        run_id: &RunId,
        copy: Vec<String>,
        user_workdir: &Path,
    ) -> Self {
        Self {
            common_dir: common_dir.to_path_buf(),
            run_id: run_id.clone(),
            copy,
            user_workdir: user_workdir.to_path_buf(),
            state: Mutex::new(PoolState::default()),
            base: Mutex::new(None),
            common: Default::default(),
            reuse_base: false,
            filters: Default::default(),
            layers: LayersRoot::disk(common_dir),
        }
    }

    /// Overlay worktrees with their layers in `layers` rather than on the repository's disk.
    pub(crate) fn with_layers(mut self, layers: LayersRoot) -> Self {
        self.layers = layers;
        self
    }

    /// Overlay worktrees over the base checkout kept between runs ([`kept`]), when another
    /// run is not using it, rather than one made for this run.
    pub(crate) fn reusing_base(mut self, reuse: bool) -> Self {
        self.reuse_base = reuse;
        self
    }

    /// Lends an overlay worktree with `branch` (created or moved to `start`, which must be
    /// the commit of every view of this pool) as HEAD: a worktree with no files of its own,
    /// which the jails of its processes see as the shared base checkout plus the view's own
    /// upper layer. Made, and reset, in proportion to what its previous task changed.
    /// Blocking: call from a blocking thread.
    pub(crate) fn acquire_view(
        self: &Arc<Self>,
        branch: &str,
        start: Oid,
    ) -> anyhow::Result<Lease> {
        self.acquire_kind(branch, start, true)
    }

    /// Lends a new `slot`, locked against `git worktree prune/remove` first; it stays locked
    /// until it is removed.
    fn lend(self: &Arc<Self>, repo: &Repository, slot: Slot) -> anyhow::Result<Lease> {
        let wt = repo.find_worktree(&slot.name)?;
        // Advisory (it stops `git worktree prune/remove`); a failure is not fatal.
        if let Err(e) = wt.lock(Some(&format!("in use by swarm run {}", self.run_id))) {
            tracing::debug!("cannot lock worktree {}: {e}", slot.name);
        }
        Ok(self.lend_reused(slot))
    }

    /// Lends `slot`, locked already.
    fn lend_reused(self: &Arc<Self>, slot: Slot) -> Lease {
        Lease {
            pool: self.clone(),
            slot,
            ended: false,
            place: None,
        }
    }

    /// Lends a worktree with `branch` (created or moved to `start`) checked out at `start`.
    /// Blocking: call from a blocking thread.
    pub(crate) fn acquire(self: &Arc<Self>, branch: &str, start: Oid) -> anyhow::Result<Lease> {
        self.acquire_kind(branch, start, false)
    }

    /// Lends an idle worktree of the kind asked for (a view, or a full checkout), reset for
    /// `branch` at `start`, or a new one when none is idle or the reset failed.
    fn acquire_kind(
        self: &Arc<Self>,
        branch: &str,
        start: Oid,
        view: bool,
    ) -> anyhow::Result<Lease> {
        // `force`: a retry moves its branch to the new start commit. Idle worktrees have a
        // detached HEAD, so no branch is checked out while being moved. Written as a
        // reference, which does not open every worktree as a branch call does.
        let branch_ref = super::branch_ref(branch);
        self.with_common(|repo| {
            repo.reference(&branch_ref, start, true, "swarm: task branch")
                .with_context(|| format!("cannot create branch {branch}"))?;
            Ok(())
        })?;
        if let Some(slot) = self.reuse_idle(&branch_ref, start, view) {
            return Ok(self.lend_reused(slot));
        }
        let repo = Repository::open(&self.common_dir)?;
        let slot = match view {
            true => {
                // Registered before waiting for the base checkout, which the first views'
                // registrations overlap.
                let new = self.register_view(&repo, &branch_ref)?;
                let base = self.base_checkout(&repo, start)?;
                self.create_view(new, &base)?
            }
            false => self.create(&repo, &branch_ref)?,
        };
        self.lend(&repo, slot)
    }

    /// An idle worktree of the kind asked for, reset for `branch_ref` at `start`; `None` when
    /// none is idle, or the reset failed (the worktree is thrown away then).
    fn reuse_idle(&self, branch_ref: &str, start: Oid, view: bool) -> Option<Slot> {
        let mut slot = {
            let mut st = self.lock_state();
            match view {
                true => st.idle_views.pop(),
                false => st.idle.pop(),
            }
        }?;
        // An idle view was made over the base checkout, so the base is there.
        let base = self.base.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let reset = match (view, base) {
            (true, Some(base)) if base.commit == start => self.reset_view(&slot, branch_ref),
            (true, _) => Err(anyhow::anyhow!(
                "an overlay worktree must start at the run's base"
            )),
            (false, _) => self.reset(&slot, branch_ref, start),
        };
        match reset {
            Ok(()) => {
                slot.fresh = false;
                Some(slot)
            }
            Err(e) => {
                tracing::warn!(
                    "cannot reset worktree {}; it is replaced by a new one: {e:#}",
                    slot.name
                );
                self.discard(slot);
                None
            }
        }
    }

    /// Runs `work` on the repository of the common git directory, opened once for the pool to
    /// make task branches, which keep no reflog ([`open::without_reflogs`]).
    fn with_common<T>(
        &self,
        work: impl FnOnce(&Repository) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let open = || {
            let repo = Repository::open(&self.common_dir)?;
            open::without_reflogs(&repo)?;
            Ok(repo)
        };
        self.common.with(open, work)
    }

    /// What a worker's own git in `slot` writes: the git directory, the worktree's own.
    pub(crate) fn git_dirs(&self, slot: &Slot) -> swarm_sandbox::git_view::GitDirs {
        swarm_sandbox::git_view::GitDirs {
            common: self.common_dir.clone(),
            admin: self.admin_dir(&slot.name),
        }
    }

    /// The administrative directory of worktree `name`: `.git/worktrees/<name>`.
    fn admin_dir(&self, name: &str) -> PathBuf {
        self.common_dir.join("worktrees").join(name)
    }

    /// Opens a worktree of the pool through its administrative directory, which no worker can
    /// write, so a `.git` file rewritten by a worker (say, to point at the user's repository)
    /// changes nothing. Blocking.
    pub(crate) fn open(&self, slot: &Slot) -> anyhow::Result<Repository> {
        open_worktree(&self.common_dir, &slot.name, &slot.path)
    }

    /// `Err` (saying what) when a worker changed the worktree's link to the repository: its
    /// `.git` file, or the administrative record that points back at it.
    pub(crate) fn check_intact(&self, slot: &Slot) -> Result<(), String> {
        let dot_git = slot.path.join(".git");
        let file_ok = std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file())
            && std::fs::read(&dot_git).is_ok_and(|b| b == slot.gitlink);
        if !file_ok {
            return Err(format!(
                "the worker changed the worktree's .git file ({}), which ties it to the \
                 repository; nothing of it is committed",
                describe_gitlink(&dot_git)
            ));
        }
        if let Some(view) = &slot.view
            && std::fs::symlink_metadata(view.upper.join(".git")).is_ok()
        {
            return Err(
                "the worker changed the worktree's .git file, which ties it to the repository; \
                 nothing of it is committed"
                    .into(),
            );
        }
        let back = std::fs::read(self.admin_dir(&slot.name).join("gitdir")).unwrap_or_default();
        let back = PathBuf::from(OsStr::from_bytes(back.trim_ascii_end()));
        if back.canonicalize().ok() != dot_git.canonicalize().ok() {
            return Err("the worktree's record in the git directory was changed".into());
        }
        Ok(())
    }

    /// Removes a worktree that must not be used again (its worker tampered with it, or it
    /// could not be reset); the pool makes a new one when it needs one.
    fn discard(&self, slot: Slot) {
        self.lock_state()
            .created
            .retain(|(name, _)| *name != slot.name);
        let removed = Repository::open(&self.common_dir)
            .map_err(anyhow::Error::from)
            .and_then(|repo| remove_worktree(&repo, &slot.name, &slot.path));
        if let Err(e) = removed {
            tracing::warn!("cannot remove worktree {}: {e:#}", slot.name);
        }
        if let Some(view) = &slot.view
            && let Some(layers) = view.upper.parent()
            && let Err(e) = self.layers.remove(&self.common_dir, layers)
        {
            tracing::warn!("cannot remove the layers of worktree {}: {e:#}", slot.name);
        }
    }

    /// Runs `work` on the worktree of `slot`, opened through its administrative directory, in
    /// a thread that may write only in the worktree and that directory: swarm's own writes
    /// into a worktree a worker has had. Blocking.
    pub(crate) fn write_in<T: Send>(
        &self,
        slot: &Slot,
        work: impl FnOnce(&Repository) -> anyhow::Result<T> + Send,
    ) -> anyhow::Result<T> {
        let writable = [slot.path.clone(), self.admin_dir(&slot.name)];
        sandbox::confined(&writable, || work(&self.open(slot)?))
    }

    /// Commits what the worker left in `slot` on `branch` (HEAD), which started at `start`: a
    /// status walk of a full checkout (or only the paths written, when they are known), or the
    /// upper layer of a view. Blocking.
    pub(crate) fn commit(
        &self,
        slot: &Slot,
        branch: &str,
        start: Oid,
        message: &str,
        staged: commit::Staged<'_>,
    ) -> Result<Committed, CommitError> {
        let leave_out = staged.leave_out;
        let Some(view) = &slot.view else {
            let repo = self.open(slot).map_err(git_failure)?;
            let committed = commit::commit_task(&repo, branch, start, message, staged)?;
            let left = committed.skipped.iter().chain(leave_out);
            *slot
                .left_by_commit
                .lock()
                .unwrap_or_else(|e| e.into_inner()) =
                Some(left.map(|p| p.as_bytes().to_vec()).collect());
            return Ok(committed);
        };
        self.commit_in_view(slot, view, branch, start, message, leave_out)
    }

    /// Lists what `slot` holds that its start does not, for [`CheckWrites`]: a view's upper
    /// layer, or a full checkout's changed paths by git's status (ignored paths left out).
    ///
    /// [`CheckWrites`]: crate::worker::check_writes::CheckWrites
    pub(crate) fn listing(&self, slot: &Slot) -> Listing {
        if let Some(view) = &slot.view {
            let upper = view.upper.clone();
            return Arc::new(move || Ok(view::upper_entries(&upper)?));
        }
        let (common, name, path) = (
            self.common_dir.clone(),
            slot.name.clone(),
            slot.path.clone(),
        );
        Arc::new(move || {
            let repo = open_worktree(&common, &name, &path)?;
            let dirty = crate::git::commit::dirty_paths(&repo)?;
            Ok(dirty.into_iter().map(RepoPath::from_bytes).collect())
        })
    }

    /// Points an idle worktree's HEAD at `branch_ref` and makes its files those of `start`.
    fn reset(&self, slot: &Slot, branch_ref: &str, start: Oid) -> anyhow::Result<()> {
        let left = slot
            .left_by_commit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.write_in(slot, |wt| {
            let start = wt.find_commit(start)?;
            let filters_off = self.filters.off_for(wt, start.tree_id());
            reset(wt, &slot.path, branch_ref, (&start, filters_off), left)
        })
    }

    /// A new full checkout on `branch_ref`.
    fn create(&self, repo: &Repository, branch_ref: &str) -> anyhow::Result<Slot> {
        let (name, path) = self.register(repo, Head::Branch(branch_ref))?;
        let gitlink = std::fs::read(path.join(".git"))?;
        self.populate(&name, &path, Threads::One)?;
        Ok(Slot {
            name,
            path,
            set_up: false,
            fresh: true,
            gitlink,
            view: None,
            handle: Default::default(),
            base_handle: Default::default(),
            left_by_commit: Default::default(),
        })
    }

    /// Registers a new worktree with git, with `head` as its HEAD and no files but its `.git`.
    /// Returns its name and (canonical) path.
    fn register(&self, repo: &Repository, head: Head<'_>) -> anyhow::Result<(String, PathBuf)> {
        let (name, path) = {
            let mut st = self.lock_state();
            st.numbered += 1;
            let n = st.numbered;
            let name = format!("swarm-{}-{n}", self.run_id);
            let path = state::worktrees_dir(&self.common_dir).join(format!("{}-{n}", self.run_id));
            st.created.push((name.clone(), path.clone()));
            (name, path)
        };
        std::fs::create_dir_all(state::worktrees_dir(&self.common_dir))?;
        self.register_at(repo, &name, &path, head)?;
        Ok((name, path.canonicalize()?))
    }

    /// Registers worktree `name` at `path` (which must not exist yet), with `head` as its HEAD
    /// and no files but its `.git`.
    ///
    /// Written as git writes a worktree's record (`git worktree add --no-checkout`): the
    /// administrative directory `worktrees/<name>` with `gitdir`, `commondir` and `HEAD`, and
    /// the worktree's `.git` file pointing back at it. Both directories are made with
    /// `create_dir`, which fails if either exists, so two creations (of this run or another)
    /// never share one. libgit2's `git_worktree_add` is not safe to run concurrently, and
    /// serialized it cost 4–18 ms a worktree, 1.2 s before the 64th of `-j 64` could start
    /// (docs/BENCHMARKS-HISTORY.md).
    fn register_at(
        &self,
        repo: &Repository,
        name: &str,
        path: &Path,
        head: Head<'_>,
    ) -> anyhow::Result<()> {
        use std::os::unix::ffi::OsStrExt as _;
        std::fs::create_dir_all(self.common_dir.join("worktrees"))?;
        let admin = self.admin_dir(name);
        std::fs::create_dir(&admin)
            .with_context(|| format!("cannot register worktree {}", admin.display()))?;
        if let Err(e) = std::fs::create_dir(path) {
            // Not ours: only the record just made goes.
            let _ = std::fs::remove_dir_all(&admin);
            return Err(e).with_context(|| format!("cannot create worktree {}", path.display()));
        }
        let written = (|| {
            let (admin, path) = (admin.canonicalize()?, path.canonicalize()?);
            let line = |parts: &[&[u8]]| [parts.concat(), b"\n".to_vec()].concat();
            let head = match head {
                Head::Branch(branch_ref) => format!("ref: {branch_ref}"),
                Head::Detached(commit) => commit.to_string(),
            };
            std::fs::write(admin.join("commondir"), line(&[b"../.."]))?;
            let gitdir = path.join(".git");
            std::fs::write(admin.join("gitdir"), line(&[gitdir.as_os_str().as_bytes()]))?;
            std::fs::write(admin.join("HEAD"), line(&[head.as_bytes()]))?;
            std::fs::write(&gitdir, line(&[b"gitdir: ", admin.as_os_str().as_bytes()]))?;
            anyhow::Ok(())
        })();
        if written.is_err() {
            let _ = cleanup::remove_worktree(repo, name, path);
            let _ = std::fs::remove_dir_all(&admin);
        }
        written
    }

    /// Checks out HEAD in a new worktree in full, and copies in `[worktree] copy`.
    fn populate(&self, name: &str, path: &Path, threads: Threads) -> anyhow::Result<()> {
        let writable = [path.to_path_buf(), self.admin_dir(name)];
        sandbox::confined(&writable, || {
            let wt = open_worktree(&self.common_dir, name, path)?;
            let tree = wt.head()?.peel_to_tree()?.id();
            let filters_off = self.filters.off_for(&wt, tree);
            let open = || open_worktree(&self.common_dir, name, path);
            let index = self.admin_dir(name).join("index");
            let threads = match threads {
                // Pooled worktrees are made by several jobs at once already.
                Threads::One => 1,
                Threads::Several => parallel::threads(),
            };
            parallel::check_out((&wt, &open), (tree, filters_off), (path, &index), threads)?;
            self.copy_in(path)
        })
    }

    /// Takes a worktree back: HEAD detached (so its branch can be moved or deleted, and a full
    /// checkout's files stay those of its HEAD), a view emptied ([`Self::clear_view`]), or
    /// thrown away if its worker tampered with it.
    ///
    /// An overlay view could keep HEAD on its last branch (one HEAD write a task, not two):
    /// measured on 2,000 one-file tasks, that was no faster on ext4 and 2-3 % slower on tmpfs
    /// (docs/BENCHMARKS-HISTORY.md), so every idle worktree is detached.
    fn give_back(&self, slot: Slot) -> anyhow::Result<()> {
        let ready = self.check_intact(&slot).map_err(anyhow::Error::msg);
        let ready = ready.and_then(|()| match slot.view {
            Some(_) => self.clear_view(&slot),
            None => Ok(()),
        });
        if let Err(why) = ready {
            tracing::warn!("worktree {} is not used again: {why:#}", slot.name);
            self.discard(slot);
            return Ok(());
        }
        slot.with_repo(&self.common_dir, |repo| {
            let head = repo.head()?.peel_to_commit()?.id();
            Ok(repo.set_head_detached(head)?)
        })?;
        let mut st = self.lock_state();
        match slot.view {
            Some(_) => st.idle_views.push(slot),
            None => st.idle.push(slot),
        }
        Ok(())
    }

    /// Removes every worktree the pool created (directories and git's records).
    pub(crate) fn remove_all(&self) -> usize {
        let created = std::mem::take(&mut self.lock_state().created);
        self.lock_state().idle.clear();
        self.lock_state().idle_views.clear();
        let Ok(repo) = Repository::open(&self.common_dir) else {
            return 0;
        };
        let removed = created
            .iter()
            .filter(|(name, path)| remove_worktree(&repo, name, path).is_ok())
            .count();
        if let Err(e) = cleanup::remove_run_layers(&self.common_dir, &self.run_id) {
            tracing::warn!("cannot remove the layers of the run's worktrees: {e:#}");
        }
        removed
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
