//! The overlay side of the pool: the run's base checkout, made once, and the views over it
//! (registered, given the base's index, reset between tasks).

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context as _;
use git2::{Oid, Repository};

use super::{BaseCheckout, Head, NewView, Slot, Threads, WorktreePool, git_failure, open_worktree};
use crate::git::commit::{self, CommitError, Committed};
use crate::git::{ignore, view};
use crate::repo_path::RepoPath;
use crate::state;
use swarm_sandbox as sandbox;
use swarm_sandbox::overlay::OverlayView;

impl WorktreePool {
    /// The run's base checkout at `start`, made on first use.
    pub(super) fn base_checkout(
        &self,
        repo: &Repository,
        start: Oid,
    ) -> anyhow::Result<Arc<BaseCheckout>> {
        let mut base = self.base.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(base) = &*base {
            anyhow::ensure!(
                base.commit == start,
                "an overlay worktree must start at the run's base"
            );
            return Ok(base.clone());
        }
        let kept = match self.reuse_base {
            true => self.kept_base(repo, start)?,
            false => None,
        };
        let (name, path, kept) = match kept {
            Some((name, path, lock)) => (name, path, Some(lock)),
            None => {
                let (name, path) = self.register(repo, Head::Detached(start))?;
                // Every file written here, from the base commit: nothing is shared with your
                // checkout, so nothing you write during the run reaches a task.
                self.populate(&name, &path, Threads::Several)?;
                (name, path, None)
            }
        };
        // Checked once here; each view opens its own handle on it.
        let checked = open_worktree(&self.common_dir, &name, &path)?;
        let tree = checked.find_commit(start)?.tree_id();
        let made = Arc::new(BaseCheckout {
            name,
            path,
            commit: start,
            filters_off: self.filters.off_for(&checked, tree),
            _kept: kept,
        });
        *base = Some(made.clone());
        Ok(made)
    }

    /// [`Self::commit`] of the overlay worktree `slot`, whose changes are in `view`'s upper
    /// layer.
    pub(super) fn commit_in_view(
        &self,
        slot: &Slot,
        view: &OverlayView,
        branch: &str,
        start: Oid,
        message: &str,
        leave_out: &BTreeSet<RepoPath>,
    ) -> Result<Committed, CommitError> {
        let base = self.view_base().map_err(git_failure)?;
        let committed = slot
            .with_base_repo(&self.common_dir, &base, |base_repo| {
                let base = commit::ViewBase {
                    repo: base_repo,
                    filters_off: base.filters_off,
                };
                slot.with_repo(&self.common_dir, |repo| {
                    Ok(commit::commit_view(
                        repo,
                        base,
                        branch,
                        start,
                        message,
                        &view.upper,
                        leave_out,
                    ))
                })
            })
            .map_err(git_failure)??;
        Ok(committed)
    }

    /// A new overlay worktree on `branch_ref`: registered with git (no files but its `.git`)
    /// and given empty layers. It needs the base checkout's index still ([`Self::create_view`]):
    /// registering does not wait for the base checkout, so the first workers' registrations
    /// overlap it.
    pub(super) fn register_view(
        &self,
        repo: &Repository,
        branch_ref: &str,
    ) -> anyhow::Result<NewView> {
        let (name, path) = self.register(repo, Head::Branch(branch_ref))?;
        let layers = self
            .layers
            .slot(path.file_name().context("a worktree path without a name")?);
        let (upper, work) = (layers.join("upper"), layers.join("work"));
        std::fs::create_dir_all(&upper)?;
        std::fs::create_dir_all(&work)?;
        Ok(NewView {
            name,
            path,
            upper,
            work,
        })
    }

    /// The overlay worktree `new`, with the base checkout's index (whose file stamps match
    /// what the view shows, so the worker's own `git status` is clean and quick).
    pub(super) fn create_view(&self, new: NewView, base: &BaseCheckout) -> anyhow::Result<Slot> {
        let NewView {
            name,
            path,
            upper,
            work,
        } = new;
        self.copy_base_index(base, &name)?;
        let gitlink = std::fs::read(path.join(".git"))?;
        Ok(Slot {
            view: Some(OverlayView {
                mount_point: path.clone(),
                base: base.path.clone(),
                upper,
                work,
            }),
            name,
            path,
            set_up: false,
            fresh: true,
            gitlink,
            handle: Default::default(),
            base_handle: Default::default(),
            left_by_commit: Default::default(),
        })
    }

    /// Gives worktree `name` the base checkout's index: a hard link to it (the index of a
    /// large repository is megabytes; git and libgit2 replace an index by renaming a new
    /// file over it, never writing it in place, and a worker cannot write the administrative
    /// directory at all), or a copy where a link cannot be made.
    pub(super) fn copy_base_index(&self, base: &BaseCheckout, name: &str) -> anyhow::Result<()> {
        let from = self.admin_dir(&base.name).join("index");
        let to = self.admin_dir(name).join("index");
        state::remove_file_if_present(&to)
            .with_context(|| format!("cannot replace {}", to.display()))?;
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).with_context(|| format!("cannot write {}", to.display()))?;
        }
        Ok(())
    }

    /// Empties the overlay worktree `slot` as it is given back, for whichever task is next:
    /// overlayfs' folder of the last mount and the upper layer (but for untracked ignored
    /// output) go to the janitor, the base's index comes back. It runs in the thread that
    /// committed the last task, which the next worker does not wait for (`Lease::release`);
    /// every jail that mounted the view is gone by then.
    pub(super) fn clear_view(&self, slot: &Slot) -> anyhow::Result<()> {
        let view = slot.view.as_ref().context("not an overlay worktree")?;
        let base = self.view_base()?;
        let graveyard = view::graveyard(view);
        // Made before the confined thread, whose rules need it to exist.
        std::fs::create_dir_all(&graveyard)?;
        let writable = [view.upper.clone(), view.work.clone(), graveyard.clone()];
        sandbox::confined(&writable, || {
            // The jail has unmounted the view: its next mount needs no work folder of this one.
            sandbox::overlay::retire_work_dir(&view.work, &graveyard);
            slot.with_base_repo(&self.common_dir, &base, |base_repo| {
                let tree = base_repo.find_commit(base.commit)?.tree()?;
                let rules = ignore::LazyIgnore::new(base_repo, &view.upper);
                view::clear_upper(&view.upper, &graveyard, &tree, &|p, d| rules.ignored(p, d))
                    .with_context(|| format!("cannot reset worktree {}", slot.path.display()))
            })
        })?;
        self.copy_base_index(&base, &slot.name)
    }

    /// The run's base checkout, which every overlay worktree shows.
    fn view_base(&self) -> anyhow::Result<Arc<BaseCheckout>> {
        let base = self.base.lock().unwrap_or_else(|e| e.into_inner()).clone();
        base.context("an overlay worktree without its base")
    }

    /// Makes an idle overlay worktree (emptied when it was given back) ready for
    /// `branch_ref`: HEAD on the branch.
    pub(super) fn reset_view(&self, slot: &Slot, branch_ref: &str) -> anyhow::Result<()> {
        slot.with_repo(&self.common_dir, |repo| {
            Ok(crate::git::point_head(repo, branch_ref)?)
        })
    }
}
