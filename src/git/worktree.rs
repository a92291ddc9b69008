//! A pool of reusable worktrees, one per running worker.
//!
//! Creating and deleting a full checkout per task dominates a naive worktree flow. The pool
//! creates a worktree only when a worker needs one and none is idle (so never more than
//! `--jobs`), and resets an idle one for the next task: the task branch is created at the
//! task's start commit, HEAD points at it, and a forced checkout with `remove_untracked`
//! rewrites only what the previous task changed. Ignored files (build output) survive, so
//! incremental builds stay warm. A worktree is locked while a worker uses it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context as _;
use git2::build::CheckoutBuilder;
use git2::{Oid, Repository, WorktreeAddOptions, WorktreePruneOptions};

use crate::ids::{RunBranch, RunId};
use crate::state;

/// One worktree of the pool.
#[derive(Debug)]
pub struct Slot {
    /// libgit2 worktree name (no `/` allowed).
    pub name: String,
    pub path: PathBuf,
    /// Has `[worktree] setup` run successfully in it?
    pub set_up: bool,
    /// Was it created by this acquire (rather than reused)?
    pub fresh: bool,
}

#[derive(Default)]
struct PoolState {
    idle: Vec<Slot>,
    created: Vec<(String, PathBuf)>,
    empty_commit: Option<Oid>,
}

pub struct WorktreePool {
    common_dir: PathBuf,
    run_id: RunId,
    /// Files copied from the user's checkout into each new worktree (`[worktree] copy`).
    copy: Vec<String>,
    user_workdir: PathBuf,
    state: Mutex<PoolState>,
}

/// libgit2's worktree creation is not safe to run concurrently in one repository: its
/// "branch already checked out" check counts a worktree that another thread (or process) is
/// half-way through creating as a match (an operator-precedence slip in
/// `git_repository_foreach_worktree`, libgit2 1.9). Creations take this lock, an `flock` on
/// `<git-common-dir>/swarm/worktrees.lock`, which excludes other threads (each opens the file
/// anew) and other swarm processes alike. See [`WorktreePool::create`].
struct CreationLock(#[allow(dead_code)] std::fs::File);

impl CreationLock {
    fn acquire(common_dir: &Path) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd as _;
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(state::swarm_dir(common_dir).join("worktrees.lock"))?;
        // SAFETY: flock on an fd we own; blocks until the lock is ours.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self(file))
    }
}

impl WorktreePool {
    pub fn new(common_dir: &Path, run_id: &RunId, copy: Vec<String>, user_workdir: &Path) -> Self {
        Self {
            common_dir: common_dir.to_path_buf(),
            run_id: run_id.clone(),
            copy,
            user_workdir: user_workdir.to_path_buf(),
            state: Mutex::new(PoolState::default()),
        }
    }

    /// Gives a worktree with `branch` (created or moved to `start`) checked out at `start`.
    /// Blocking: call from a blocking thread.
    pub fn acquire(&self, branch: &str, start: Oid) -> anyhow::Result<Slot> {
        let repo = Repository::open(&self.common_dir)?;
        let commit = repo.find_commit(start)?;
        // `force`: a retry moves its branch to the new start commit. Idle worktrees have a
        // detached HEAD, so no branch is checked out while being moved.
        let branch_ref = repo
            .branch(branch, &commit, true)
            .with_context(|| format!("cannot create branch {branch}"))?
            .into_reference();
        let branch_ref_name = super::branch_ref(branch);

        let idle = self.lock_state().idle.pop();
        let mut slot = match idle {
            Some(mut slot) => {
                reset(&slot.path, &branch_ref_name, &commit)?;
                slot.fresh = false;
                slot
            }
            None => self.create(&repo, &branch_ref)?,
        };
        let wt = repo.find_worktree(&slot.name)?;
        // Locking is advisory (it stops `git worktree prune/remove`); a failure is not fatal.
        if let Err(e) = wt.lock(Some(&format!("in use by swarm run {}", self.run_id))) {
            tracing::debug!("cannot lock worktree {}: {e}", slot.name);
        }
        slot.path = slot.path.canonicalize().unwrap_or(slot.path);
        Ok(slot)
    }

    fn create(&self, repo: &Repository, branch_ref: &git2::Reference<'_>) -> anyhow::Result<Slot> {
        let (name, path, n) = {
            let mut st = self.lock_state();
            let n = st.created.len() + 1;
            let name = format!("swarm-{}-{n}", self.run_id);
            let path = state::worktrees_dir(&self.common_dir).join(format!("{}-{n}", self.run_id));
            st.created.push((name.clone(), path.clone()));
            (name, path, n)
        };
        std::fs::create_dir_all(state::worktrees_dir(&self.common_dir))?;
        // libgit2 creates `.git/worktrees` itself and fails if another process does so at the
        // same moment.
        std::fs::create_dir_all(self.common_dir.join("worktrees"))?;
        {
            // libgit2's worktree creation is not safe to run concurrently, but the costly part
            // of it, the checkout, is. Under the lock, the worktree is created on a placeholder
            // branch at a commit with an empty tree (nothing to check out); the task's files
            // are checked out afterwards, in parallel with other creations.
            let _one_at_a_time = CreationLock::acquire(&self.common_dir)?;
            let placeholder_name = self.run_id.branch(&RunBranch::Placeholder(n));
            let empty = self.empty_commit(repo)?;
            let placeholder = repo
                .branch(&placeholder_name, &repo.find_commit(empty)?, true)?
                .into_reference();
            let mut opts = WorktreeAddOptions::new();
            opts.reference(Some(&placeholder));
            repo.worktree(&name, &path, Some(&opts))
                .with_context(|| format!("cannot create worktree {}", path.display()))?;
            let wt = Repository::open(&path)?;
            wt.set_head(
                branch_ref
                    .name()
                    .ok()
                    .context("a task branch without a name")?,
            )?;
            repo.find_branch(&placeholder_name, git2::BranchType::Local)?
                .delete()?;
        }
        let wt = Repository::open(&path)?;
        let mut checkout = CheckoutBuilder::new();
        checkout.force();
        wt.checkout_head(Some(&mut checkout))
            .with_context(|| format!("cannot check out worktree {}", path.display()))?;
        for rel in &self.copy {
            let from = self.user_workdir.join(rel);
            let to = path.join(rel);
            if from.is_file() {
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::copy(&from, &to)
                    .with_context(|| format!("cannot copy {} into the worktree", from.display()))?;
            } else {
                tracing::warn!("[worktree] copy: {} is not a file; skipped", from.display());
            }
        }
        Ok(Slot {
            name,
            path,
            set_up: false,
            fresh: true,
        })
    }

    /// A parentless commit with an empty tree (made once per pool).
    fn empty_commit(&self, repo: &Repository) -> anyhow::Result<Oid> {
        let mut st = self.lock_state();
        if let Some(oid) = st.empty_commit {
            return Ok(oid);
        }
        let tree = repo.find_tree(repo.treebuilder(None)?.write()?)?;
        let sig = super::signature(repo)?;
        let oid = repo.commit(None, &sig, &sig, "swarm: empty placeholder", &tree, &[])?;
        st.empty_commit = Some(oid);
        Ok(oid)
    }

    /// Returns a worktree to the pool: HEAD detached (so its branch can be moved or deleted)
    /// and unlocked.
    pub fn release(&self, slot: Slot) -> anyhow::Result<()> {
        let wt_repo = Repository::open(&slot.path)?;
        let head = wt_repo.head()?.peel_to_commit()?.id();
        wt_repo.set_head_detached(head)?;
        let repo = Repository::open(&self.common_dir)?;
        if let Ok(wt) = repo.find_worktree(&slot.name) {
            let _ = wt.unlock();
        }
        self.lock_state().idle.push(slot);
        Ok(())
    }

    /// Names of the worktrees this pool created.
    pub fn created(&self) -> Vec<String> {
        self.lock_state()
            .created
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Removes every worktree the pool created (directories and git's records).
    pub fn remove_all(&self) -> usize {
        let created = std::mem::take(&mut self.lock_state().created);
        self.lock_state().idle.clear();
        let Ok(repo) = Repository::open(&self.common_dir) else {
            return 0;
        };
        created
            .iter()
            .filter(|(name, path)| remove_worktree(&repo, name, path).is_ok())
            .count()
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Points an idle worktree's HEAD at `branch` and makes its files those of `start`.
///
/// When the worktree is clean (its files and index are exactly its HEAD commit, as they are
/// after swarm committed a task), only the paths that differ between that commit and `start`
/// are checked out: proportional to the previous task's change. Otherwise (a worker left
/// something behind that was not committed) a forced checkout of everything, removing
/// untracked files; ignored files survive either way.
fn reset(path: &Path, branch_ref: &str, start: &git2::Commit<'_>) -> anyhow::Result<()> {
    let wt = Repository::open(path)
        .with_context(|| format!("cannot open worktree {}", path.display()))?;
    let clean_at = match super::commit::dirty_paths(&wt)?.is_empty() {
        true => wt.head().ok().and_then(|h| h.peel_to_tree().ok()),
        false => None,
    };
    tracing::debug!(
        worktree = %path.display(),
        clean = clean_at.is_some(),
        "reset for {}",
        branch_ref
    );
    let mut checkout = CheckoutBuilder::new();
    checkout.force();
    match &clean_at {
        Some(tree) => {
            let paths = super::changed_paths(&wt, tree, &start.tree()?)?;
            wt.set_head(branch_ref)?;
            if paths.is_empty() {
                return Ok(());
            }
            for p in &paths {
                checkout.path(p.as_bytes());
            }
        }
        None => {
            wt.set_head(branch_ref)?;
            checkout.remove_untracked(true);
        }
    }
    wt.checkout_head(Some(&mut checkout))
        .with_context(|| format!("cannot reset worktree {}", path.display()))?;
    Ok(())
}

/// Removes a worktree of swarm's: its record in the git directory, then its directory,
/// which must be under `<git-common-dir>/swarm/worktrees/` (whatever the record says).
pub fn remove_worktree(repo: &Repository, name: &str, path: &Path) -> anyhow::Result<()> {
    if let Ok(wt) = repo.find_worktree(name) {
        let _ = wt.unlock();
        // The directory is removed below, by swarm, only where swarm puts worktrees.
        let mut opts = WorktreePruneOptions::new();
        opts.valid(true).locked(true).working_tree(false);
        wt.prune(Some(&mut opts))
            .with_context(|| format!("cannot remove worktree {name}"))?;
    }
    state::remove_owned(repo.commondir(), path)?;
    Ok(())
}

/// Removes the worktrees of run `run_id`, including records whose directory is gone and
/// directories left without a record (a crash between the two). Returns how many.
pub fn remove_run_worktrees(common_dir: &Path, run_id: &RunId) -> anyhow::Result<usize> {
    let prefix = format!("{run_id}-");
    remove_worktrees_where(common_dir, |run_part| run_part.starts_with(&prefix))
}

/// Removes every swarm worktree except those of the runs in `keep` (runs in progress).
pub fn remove_run_worktrees_except(common_dir: &Path, keep: &[RunId]) -> anyhow::Result<usize> {
    remove_worktrees_where(common_dir, |run_part| {
        !keep
            .iter()
            .any(|id| run_part.starts_with(&format!("{id}-")))
    })
}

/// Is `part` a `<RUN-ID>-<n>` (a worktree directory's name)?
fn is_slot_name(part: &str) -> bool {
    part.split_at_checked(20).is_some_and(|(run, n)| {
        run.parse::<RunId>().is_ok()
            && n.strip_prefix('-')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
    })
}

/// Worktree names are `swarm-<RUN-ID>-<n>` and directories `<RUN-ID>-<n>`; `select` gets the
/// `<RUN-ID>-<n>` part. Names of any other shape are not swarm's.
fn remove_worktrees_where(
    common_dir: &Path,
    select: impl Fn(&str) -> bool,
) -> anyhow::Result<usize> {
    let select = |part: &str| is_slot_name(part) && select(part);
    let repo = Repository::open(common_dir)?;
    let mut removed = 0;
    for name in repo.worktrees()?.iter().flatten().flatten() {
        let Some(run_part) = name.strip_prefix("swarm-") else {
            continue;
        };
        if !select(run_part) {
            continue;
        }
        // The directory is where swarm puts it, not where the record says.
        let path = state::worktrees_dir(common_dir).join(run_part);
        remove_worktree(&repo, name, &path)?;
        removed += 1;
    }
    if let Ok(entries) = std::fs::read_dir(state::worktrees_dir(common_dir)) {
        for entry in entries.flatten() {
            if select(&entry.file_name().to_string_lossy()) {
                let _ = state::remove_owned(common_dir, &entry.path());
            }
        }
    }
    Ok(removed)
}
