//! What a check (`--verify`) writes is not the task's change: `python -m compileall` leaves
//! `__pycache__/`, a build leaves its output, a test run its caches. Where git does not
//! ignore them, they would count as the task's changes: committed, or a task failed for
//! changing files outside its own (`--scope task`).
//!
//! So each run of a check is bracketed by two listings of what the worktree holds that its
//! start does not (for an overlay view, its upper layer; for a full checkout, git's status).
//! A path that appears between the two was written by the check alone; it stays out of the
//! task's commit. A path the worker had already written is the worker's, whatever the check
//! did to it after.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::git::worktree::Listing;
use crate::repo_path::RepoPath;

/// The paths checks alone wrote in one worktree, over one task's attempt.
pub(crate) struct CheckWrites {
    list: Listing,
    wrote: Mutex<BTreeSet<RepoPath>>,
}

impl CheckWrites {
    pub(crate) fn new(list: Listing) -> Self {
        Self {
            list,
            wrote: Mutex::new(BTreeSet::new()),
        }
    }

    /// Runs the check `run` (whose processes are all gone when it returns), noting what it
    /// alone wrote.
    pub(crate) async fn around<T>(
        &self,
        run: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let before = self.list_now().await?;
        let out = run.await?;
        let after = self.list_now().await?;
        self.wrote
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(after.difference(&before).cloned());
        Ok(out)
    }

    /// Runs the check `run`, noting what it alone wrote when there are `checks` to note it.
    pub(crate) async fn maybe_around<T>(
        checks: Option<&Self>,
        run: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        match checks {
            Some(checks) => checks.around(run).await,
            None => run.await,
        }
    }

    /// The paths checks alone wrote so far.
    pub(crate) fn take(&self) -> BTreeSet<RepoPath> {
        std::mem::take(&mut *self.wrote.lock().unwrap_or_else(|e| e.into_inner()))
    }

    async fn list_now(&self) -> anyhow::Result<BTreeSet<RepoPath>> {
        let list = self.list.clone();
        tokio::task::spawn_blocking(move || list()).await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn only_what_appears_during_a_check_is_the_checks() {
        let now = Arc::new(Mutex::new(BTreeSet::from([RepoPath::from("a.py")])));
        let seen = now.clone();
        let checks = CheckWrites::new(Arc::new(move || Ok(seen.lock().unwrap().clone())));
        checks
            .around(async {
                let mut now = now.lock().unwrap();
                // The check writes a cache, and rewrites the worker's file.
                now.insert(RepoPath::from("__pycache__/a.pyc"));
                now.insert(RepoPath::from("a.py"));
                Ok(())
            })
            .await
            .unwrap();
        // A repair writes a file of its own, then the check runs again.
        now.lock().unwrap().insert(RepoPath::from("b.py"));
        checks.around(async { Ok(()) }).await.unwrap();
        assert_eq!(
            checks.take(),
            BTreeSet::from([RepoPath::from("__pycache__/a.pyc")])
        );
        assert!(checks.take().is_empty());
    }
}
