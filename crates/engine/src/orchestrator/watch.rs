//! With `--sandbox off`, nothing stops a worker from writing into the user's own checkout
//! (a path it computes, `cd ..`, a tool that finds the repository's root). swarm cannot
//! prevent it there, but it notices: the paths of the checkout that differ from HEAD, with
//! their size and modification time, are taken before the run and again after each task
//! (spaced out so that looking takes at most a tenth of the time, and once more at the end),
//! and any difference is a warning naming the task that just finished. Where workers can
//! write the git directory, the branches they make are warned about too.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{Shared, warn};
use crate::git::finish;
use crate::ids::TaskId;
use crate::repo_path::RepoPath;

/// Size and modification time of a path (`None`: it is gone).
type Stamp = Option<(u64, i64, i64)>;

/// The user's checkout, as last seen.
pub(super) struct CheckoutWatch {
    workdir: PathBuf,
    seen: Mutex<BTreeMap<RepoPath, Stamp>>,
    /// A look is a status walk of the whole checkout (~60 ms at 27,000 files): after one that
    /// took `d`, the next waits until `9 d` have passed, so looks take at most a tenth of a
    /// slot's time, and a small checkout is looked at after every task.
    next_look: Mutex<Instant>,
    /// Tasks that finished since the last look.
    unseen: Mutex<Vec<TaskId>>,
}

impl CheckoutWatch {
    /// Starts watching the checkout at `workdir`.
    pub(super) fn new(workdir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            workdir: workdir.to_path_buf(),
            seen: Mutex::new(look(workdir)?),
            next_look: Mutex::new(Instant::now()),
            unseen: Mutex::new(Vec::new()),
        })
    }

    /// The paths that changed since the last look (new, gone, or written).
    pub(super) fn changed(&self) -> anyhow::Result<Vec<RepoPath>> {
        let started = Instant::now();
        let now = look(&self.workdir)?;
        *self.next_look.lock().unwrap_or_else(|e| e.into_inner()) =
            Instant::now() + started.elapsed() * 9;
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

    /// Notes that `task` finished; the tasks finished since the last look when it is time
    /// for another (or `last`, at the end of the run, if any).
    fn finished(&self, task: Option<&TaskId>, last: bool) -> Option<Vec<TaskId>> {
        let mut unseen = self.unseen.lock().unwrap_or_else(|e| e.into_inner());
        unseen.extend(task.cloned());
        let due =
            last || Instant::now() >= *self.next_look.lock().unwrap_or_else(|e| e.into_inner());
        (due && !unseen.is_empty()).then(|| std::mem::take(&mut *unseen))
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
/// warning (a confined worker cannot write there). Looked at after this task, or, where
/// looks are spaced out, at a later one, which names how many others finished meanwhile.
pub(super) async fn warn_about_checkout(shared: &Arc<Shared>, task: &TaskId) {
    look_and_warn(shared, Some(task), false).await;
}

/// With `--sandbox off`, once every task has finished: a last look for the tasks that
/// finished since the last one.
pub(super) async fn last_look(shared: &Arc<Shared>) {
    look_and_warn(shared, None, true).await;
}

async fn look_and_warn(shared: &Arc<Shared>, task: Option<&TaskId>, last: bool) {
    let Some(watch) = &shared.checkout_watch else {
        return;
    };
    let Some(tasks) = watch.finished(task, last) else {
        return;
    };
    let changed = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || shared.checkout_watch.as_ref().map(|w| w.changed()))
            .await
    };
    let Some((named, others)) = tasks.split_last() else {
        return;
    };
    match changed {
        Ok(Some(Ok(paths))) if !paths.is_empty() => {
            let list: Vec<String> = paths.iter().take(10).map(|p| p.display()).collect();
            let during = match others.len() {
                0 => "while this task ran".to_string(),
                n => format!(
                    "while this task or one of {n} other(s) finished since the last look ran"
                ),
            };
            warn(
                shared,
                named,
                format!(
                    "your checkout changed {during} (--sandbox off lets workers write there): \
                     {}{}",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(next_look: Instant) -> CheckoutWatch {
        CheckoutWatch {
            workdir: PathBuf::new(),
            seen: Mutex::default(),
            next_look: Mutex::new(next_look),
            unseen: Mutex::default(),
        }
    }

    #[test]
    fn looks_are_spaced_out_and_the_last_one_names_every_task_since() {
        let (a, b): (TaskId, TaskId) = ("a-txt".parse().unwrap(), "b-txt".parse().unwrap());
        // Due: the finishing task alone.
        let now = watch(Instant::now());
        assert_eq!(now.finished(Some(&a), false), Some(vec![a.clone()]));
        assert_eq!(now.finished(None, true), None, "nothing finished since");
        // Not due yet: kept for the next look, and the last look takes them all.
        let later = watch(Instant::now() + std::time::Duration::from_secs(3600));
        assert_eq!(later.finished(Some(&a), false), None);
        assert_eq!(later.finished(Some(&b), false), None);
        assert_eq!(later.finished(None, true), Some(vec![a, b]));
    }
}
