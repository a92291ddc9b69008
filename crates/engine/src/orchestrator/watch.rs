//! With `--sandbox off`, nothing stops a worker from writing into the user's own checkout
//! (a path it computes, `cd ..`, a tool that finds the repository's root). swarm cannot
//! prevent it there, but it notices: the paths of the checkout that differ from HEAD, with
//! their size and modification time, are taken before the run and again after each task,
//! and any difference is a warning naming the task that just finished. Where workers can
//! write the git directory, the branches they make are warned about too.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::Shared;
use super::task::warn;
use crate::git::finish;
use crate::ids::TaskId;
use crate::repo_path::RepoPath;

/// Size and modification time of a path (`None`: it is gone).
type Stamp = Option<(u64, i64, i64)>;

/// The user's checkout, as last seen.
pub(super) struct CheckoutWatch {
    workdir: PathBuf,
    seen: Mutex<BTreeMap<RepoPath, Stamp>>,
}

impl CheckoutWatch {
    /// Starts watching the checkout at `workdir`.
    pub(super) fn new(workdir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            workdir: workdir.to_path_buf(),
            seen: Mutex::new(look(workdir)?),
        })
    }

    /// The paths that changed since the last look (new, gone, or written).
    pub(super) fn changed(&self) -> anyhow::Result<Vec<RepoPath>> {
        let now = look(&self.workdir)?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed: Vec<RepoPath> = now
            .iter()
            .filter(|(path, stamp)| seen.get(*path) != Some(stamp))
            .map(|(path, _)| path.clone())
            .collect();
        changed.extend(seen.keys().filter(|p| !now.contains_key(*p)).cloned());
        changed.sort();
        changed.dedup();
        *seen = now;
        Ok(changed)
    }
}

/// The paths of the checkout that differ from HEAD (untracked included, ignored not), each
/// with its stamp.
fn look(workdir: &Path) -> anyhow::Result<BTreeMap<RepoPath, Stamp>> {
    let repo = git2::Repository::open(workdir)?;
    let paths = crate::git::commit::dirty_paths(&repo)?;
    Ok(paths
        .into_iter()
        .map(|p| {
            let path = RepoPath::from_bytes(p);
            let stamp = std::fs::symlink_metadata(workdir.join(path.as_path()))
                .ok()
                .map(|m| (m.len(), m.mtime(), m.mtime_nsec()));
            (path, stamp)
        })
        .collect())
}

/// With `--sandbox off`: paths of the user's checkout that changed while `task` ran, as a
/// warning (a confined worker cannot write there).
pub(super) async fn warn_about_checkout(shared: &Arc<Shared>, task: &TaskId) {
    if shared.checkout_watch.is_none() {
        return;
    }
    let changed = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || shared.checkout_watch.as_ref().map(|w| w.changed()))
            .await
    };
    match changed {
        Ok(Some(Ok(paths))) if !paths.is_empty() => {
            let list: Vec<String> = paths.iter().take(10).map(|p| p.display()).collect();
            warn(
                shared,
                task,
                format!(
                    "your checkout changed while this task ran (--sandbox off lets workers \
                     write there): {}{}",
                    list.join(", "),
                    if paths.len() > 10 { ", …" } else { "" }
                ),
            );
        }
        Ok(Some(Err(e))) => tracing::warn!("cannot look at the checkout: {e:#}"),
        _ => {}
    }
}

/// Branches the worker made, whatever else it did: a warning (swarm leaves them be).
pub(super) async fn warn_about_new_branches(
    shared: &Arc<Shared>,
    task: &TaskId,
) -> anyhow::Result<()> {
    // Confined workers cannot write the repository's references: nothing to look at.
    if shared.known_branches.is_none() {
        return Ok(());
    }
    let created = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || new_user_branches(&shared)).await??
    };
    if !created.is_empty() {
        warn(
            shared,
            task,
            format!(
                "the worker created branch(es) {}; swarm leaves them as they are",
                created.join(", ")
            ),
        );
    }
    Ok(())
}

/// Local branches that are not swarm's.
pub(super) fn user_branches(
    common_dir: &std::path::Path,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    Ok(finish::branches_under(common_dir, "")?
        .into_iter()
        .filter(|b| !b.starts_with(crate::ids::BRANCH_NAMESPACE))
        .collect())
}

/// Branches that appeared since the last look (remembered, so each is reported once).
fn new_user_branches(shared: &Shared) -> anyhow::Result<Vec<String>> {
    let Some(known) = &shared.known_branches else {
        return Ok(Vec::new());
    };
    let now = user_branches(&shared.common_dir)?;
    let mut known = known.lock().unwrap_or_else(|e| e.into_inner());
    let created: Vec<String> = now.difference(&known).cloned().collect();
    known.extend(created.iter().cloned());
    Ok(created)
}
