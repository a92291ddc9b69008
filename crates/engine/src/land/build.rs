//! Each group's branch, built in memory from where the run started (`into_start`): for each
//! of its task merges, in the run's order, a `--no-ff` merge commit whose parents are the
//! group's tip and the task's own commit, whose tree is the tip's with the paths that merge
//! changed in the run set as the run's merge set them, and whose message and signatures are
//! the run's merge's. So a group's branch equals the run's result on its files and the base
//! everywhere else, and building it again gives the same commits (`swarm land` run twice
//! pushes nothing new).

use git2::{Oid, Repository};

use super::group::Merge;
use crate::git::{apply_paths, changed_paths, entry_at, merge::merges_between, tree_changes};
use crate::repo_path::RepoPath;

/// The run's task merges from `into_start` (excluded) to `result`, oldest first, each with
/// the paths it changed; `Err` names what is on that history besides the run's merges.
pub(crate) fn read_merges(
    repo: &Repository,
    into_start: Oid,
    result: Oid,
) -> anyhow::Result<Result<Vec<Merge>, String>> {
    let chain = merges_between(repo, into_start, result)?;
    let reached = match chain.first() {
        Some((_, first, _)) => repo.find_commit(*first)?.parent_id(0)? == into_start,
        None => result == into_start,
    };
    if !reached {
        return Ok(Err(format!(
            "the history from {} to the run's result {} is not only the run's task merges",
            crate::ids::short(&into_start),
            crate::ids::short(&result)
        )));
    }
    let mut merges = Vec::with_capacity(chain.len());
    for (task, commit, _) in chain {
        let merge = repo.find_commit(commit)?;
        let paths = changed_paths(repo, &merge.parent(0)?.tree()?, &merge.tree()?)?;
        merges.push(Merge {
            task,
            commit,
            paths,
        });
    }
    Ok(Ok(merges))
}

/// Builds the branch of a group made of `chosen` (indices into `merges`) from `into_start`;
/// returns its tip. No reference is written.
pub(crate) fn build(
    repo: &Repository,
    into_start: Oid,
    merges: &[Merge],
    chosen: &[usize],
) -> anyhow::Result<Oid> {
    let mut tip = repo.find_commit(into_start)?;
    for &i in chosen {
        let merge = repo.find_commit(merges[i].commit)?;
        let tree = apply_paths(repo, &merges[i].paths, &merge.tree()?, &tip.tree()?)?;
        let tree = repo.find_tree(tree)?;
        let message = String::from_utf8_lossy(merge.message_bytes()).into_owned();
        let task_commit = merge.parent(1)?;
        let id = repo.commit(
            None,
            &merge.author(),
            &merge.committer(),
            &message,
            &tree,
            &[&tip, &task_commit],
        )?;
        tip = repo.find_commit(id)?;
    }
    Ok(tip.id())
}

/// Checks that `tip` differs from `into_start` only in `files`, and equals `result` there.
pub(crate) fn check(
    repo: &Repository,
    into_start: Oid,
    result: Oid,
    tip: Oid,
    files: &[RepoPath],
) -> anyhow::Result<Result<(), String>> {
    let base = repo.find_commit(into_start)?.tree()?;
    let result = repo.find_commit(result)?.tree()?;
    let tip = repo.find_commit(tip)?.tree()?;
    for change in tree_changes(repo, &base, &tip)? {
        if files.binary_search(&change.path).is_err() {
            return Ok(Err(format!(
                "it changes {}, none of its files",
                change.path.display()
            )));
        }
    }
    for file in files {
        if entry_at(&tip, file)? != entry_at(&result, file)? {
            return Ok(Err(format!(
                "{} differs from the run's result",
                file.display()
            )));
        }
    }
    Ok(Ok(()))
}

/// The paths where the run's result differs from `into_start` that are in none of `groups`.
pub(crate) fn uncovered(
    repo: &Repository,
    into_start: Oid,
    result: Oid,
    covered: &std::collections::BTreeSet<&RepoPath>,
) -> anyhow::Result<Vec<RepoPath>> {
    let base = repo.find_commit(into_start)?.tree()?;
    let result = repo.find_commit(result)?.tree()?;
    Ok(changed_paths(repo, &base, &result)?
        .into_iter()
        .filter(|p| !covered.contains(p))
        .collect())
}
