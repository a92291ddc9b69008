//! A conflict a person or the model resolves in a worktree: the merge written into its files
//! with diff3-style markers, and the check that none are left.

use std::path::Path;

use anyhow::Context as _;
use git2::{MergeOptions, Oid, Repository};

use super::conflict_paths;
use crate::repo_path::RepoPath;

/// Prepares a worktree (checked out at `ours`) for a conflict to be resolved by hand: the
/// merge of `theirs` is written into its files, conflicted ones with diff3-style markers
/// (ours, the common ancestor, theirs), while its index stays at `ours`, so every
/// difference from HEAD is part of the resolution. Returns the conflicted paths. `repo` is
/// the worktree, opened through its administrative directory.
pub(crate) fn write_conflicts(
    repo: &Repository,
    ours: Oid,
    theirs: Oid,
) -> anyhow::Result<Vec<RepoPath>> {
    let ours_commit = repo.find_commit(ours)?;
    let theirs_commit = repo.find_commit(theirs)?;
    let mut opts = MergeOptions::new();
    opts.find_renames(true);
    let mut merged = repo.merge_commits(&ours_commit, &theirs_commit, Some(&opts))?;
    let paths = conflict_paths(&merged)?;
    let mut checkout = git2::build::CheckoutBuilder::new();
    checkout
        .force()
        .allow_conflicts(true)
        .conflict_style_diff3(true)
        .our_label("already merged")
        .their_label("this task");
    repo.checkout_index(Some(&mut merged), Some(&mut checkout))
        .context("cannot write the conflicted merge into the worktree")?;
    let mut index = repo.index()?;
    index.read_tree(&ours_commit.tree()?)?;
    index.write()?;
    Ok(paths)
}

/// Paths among `paths` (in `worktree`) that still hold conflict markers (regular files only:
/// a link is not followed).
pub(crate) fn with_conflict_markers(worktree: &Path, paths: &[RepoPath]) -> Vec<RepoPath> {
    paths
        .iter()
        .filter(|p| {
            let path = worktree.join(p.as_path());
            let file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
            file && std::fs::read(&path).is_ok_and(|bytes| {
                bytes
                    .split(|&b| b == b'\n')
                    .any(|line| line.starts_with(b"<<<<<<< ") || line.starts_with(b">>>>>>> "))
            })
        })
        .cloned()
        .collect()
}
