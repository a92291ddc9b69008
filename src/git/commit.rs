//! Committing what a worker changed, on its task branch.
//!
//! Workers never need to commit. After a worker ends, swarm stages everything in the
//! worktree (new files, deletions, mode changes; ignored files stay out) and commits it on
//! the task branch. A worker that committed by itself is fine as long as its commits sit on
//! the task branch on top of the start commit; one that moved HEAD elsewhere or rewrote the
//! branch has broken the task.

use std::path::Path;

use git2::{IndexAddOption, Oid, Repository};

use crate::repo_path::RepoPath;

#[derive(Debug)]
pub struct Committed {
    /// The task branch tip after committing (== start when nothing changed).
    pub tip: Oid,
    /// Paths that differ between the start commit and the tip.
    pub changed: Vec<RepoPath>,
    /// Commits the worker made by itself.
    pub worker_commits: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the worker moved HEAD away from its task branch (HEAD is now {0})")]
    MovedHead(String),
    #[error("the worker rewrote the task branch: {0} no longer descends from the start commit")]
    RewroteBranch(String),
    #[error(transparent)]
    Git(#[from] git2::Error),
}

/// Commits the worktree's changes on `branch` (which must be HEAD). Blocking.
pub fn commit_task(
    worktree: &Path,
    branch: &str,
    start: Oid,
    message: &str,
) -> Result<Committed, CommitError> {
    let repo = Repository::open(worktree)?;
    let wanted = super::branch_ref(branch);
    let head = repo.find_reference("HEAD")?;
    if head.symbolic_target().ok().flatten() != Some(wanted.as_str()) {
        let now = match head.symbolic_target().ok().flatten() {
            Some(t) => t.trim_start_matches("refs/heads/").to_string(),
            None => head
                .target()
                .map(|o| format!("detached at {}", short(o)))
                .unwrap_or_else(|| "unreadable".into()),
        };
        return Err(CommitError::MovedHead(now));
    }
    let mut tip = repo.refname_to_id(&wanted)?;
    let mut worker_commits = 0;
    if tip != start {
        if !repo.graph_descendant_of(tip, start)? {
            return Err(CommitError::RewroteBranch(short(tip)));
        }
        let (ahead, _) = repo.graph_ahead_behind(tip, start)?;
        worker_commits = ahead;
    }

    let mut index = repo.index()?;
    index.update_all(["*"], None)?;
    index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
    index.write()?;
    let tree_id = index.write_tree()?;
    let tip_commit = repo.find_commit(tip)?;
    if tree_id != tip_commit.tree_id() {
        let tree = repo.find_tree(tree_id)?;
        let sig = super::signature(&repo)?;
        tip = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&tip_commit])?;
    }
    let start_tree = repo.find_commit(start)?.tree()?;
    let tip_tree = repo.find_commit(tip)?.tree()?;
    let changed = super::changed_paths(&repo, &start_tree, &tip_tree)?;
    Ok(Committed {
        tip,
        changed,
        worker_commits,
    })
}

pub fn short(oid: Oid) -> String {
    let s = oid.to_string();
    s[..s.len().min(10)].to_string()
}
