//! Removing swarm's worktrees: at the end of a run, for `swarm clean`, and what a crashed run
//! left behind. Only directories under `<git-common-dir>/swarm/worktrees/` are removed.

use std::path::Path;

use anyhow::Context as _;
use git2::{Repository, WorktreePruneOptions};

use crate::git::layers::LayersRoot;
use crate::ids::RunId;
use crate::state;

/// Removes a worktree of swarm's: its record in the git directory, then its directory,
/// which must be under `<git-common-dir>/swarm/` (whatever the record says): in
/// `worktrees/`, or the base checkout kept between runs.
pub(crate) fn remove_worktree(repo: &Repository, name: &str, path: &Path) -> anyhow::Result<()> {
    if let Ok(wt) = repo.find_worktree(name) {
        let _ = wt.unlock();
        // The directory is removed below, by swarm, only where swarm puts worktrees.
        let mut opts = WorktreePruneOptions::new();
        opts.valid(true).locked(true).working_tree(false);
        wt.prune(Some(&mut opts))
            .with_context(|| format!("cannot remove worktree {name}"))?;
    }
    state::discard_owned(repo.commondir(), path)?;
    Ok(())
}

/// Removes the layers of the overlay worktrees of run `run_id`.
pub(crate) fn remove_run_layers(common_dir: &Path, run_id: &RunId) -> anyhow::Result<()> {
    let prefix = format!("{run_id}-");
    remove_layers_where(common_dir, &|part| part.starts_with(&prefix))
}

/// Removes the layers directories `<RUN-ID>-<n>` that `select` picks, on the disk and in
/// memory.
fn remove_layers_where(common_dir: &Path, select: &dyn Fn(&str) -> bool) -> anyhow::Result<()> {
    for root in LayersRoot::all(common_dir) {
        let Ok(entries) = std::fs::read_dir(root.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if is_slot_name(&name) && select(&name) {
                root.remove(common_dir, &entry.path())?;
            }
        }
    }
    Ok(())
}

/// Removes the worktrees of run `run_id`, including records whose directory is gone and
/// directories left without a record (a crash between the two). Returns how many.
pub(crate) fn remove_run_worktrees(common_dir: &Path, run_id: &RunId) -> anyhow::Result<usize> {
    let prefix = format!("{run_id}-");
    remove_worktrees_where(common_dir, |run_part| run_part.starts_with(&prefix))
}

/// Removes every swarm worktree except those of the runs in `keep` (runs in progress).
pub(crate) fn remove_run_worktrees_except(
    common_dir: &Path,
    keep: &[RunId],
) -> anyhow::Result<usize> {
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
    remove_layers_where(common_dir, &select)?;
    Ok(removed)
}
