//! The end of a run: the target branch moves once, then swarm's branches are cleaned up.

use std::path::Path;

use git2::{BranchType, ErrorCode, Oid, Repository};

use super::checkout::NotMoved;
use super::repo::{IntoTarget, RepoInfo};

/// Moves `into` from `into_start` to `result`. A checked-out target moves with its files and
/// index, all or nothing ([`super::checkout`]); `staging` is a directory swarm may use for
/// that. `Err(NotMoved)` means the target was left exactly as it was.
pub(crate) fn update_target(
    info: &RepoInfo,
    into: &IntoTarget,
    into_start: Oid,
    result: Oid,
    staging: &Path,
) -> anyhow::Result<Result<(), NotMoved>> {
    let repo = info.open()?;
    let into_ref = super::branch_ref(&into.branch);
    let message = "swarm: merge result";
    let Some(_) = into.tip else {
        let commit = repo.find_commit(result)?;
        return Ok(match repo.branch(&into.branch, &commit, false) {
            Ok(_) => Ok(()),
            Err(e) => Err(NotMoved {
                reason: format!("cannot create branch {}: {}", into.branch, e.message()),
                first: None,
            }),
        });
    };
    match repo.refname_to_id(&into_ref) {
        Ok(now) if now == into_start => {}
        Ok(now) => {
            return Ok(Err(NotMoved {
                reason: format!(
                    "branch {} moved during the run (it is now at {})",
                    into.branch,
                    crate::ids::short(&now)
                ),
                first: None,
            }));
        }
        Err(e) => {
            return Ok(Err(NotMoved {
                reason: format!("cannot read branch {}: {}", into.branch, e.message()),
                first: None,
            }));
        }
    }
    if result == into_start {
        // Already there: a continued run that merged nothing new.
        return Ok(Ok(()));
    }
    let head = repo.find_reference("HEAD")?;
    let checked_out = head.symbolic_target().ok().flatten() == Some(into_ref.as_str());
    if checked_out {
        crate::state::remove_owned(&info.common_dir, staging)?;
        std::fs::create_dir_all(staging)?;
        let updated = super::checkout::update_checkout(
            &repo,
            &info.git_dir,
            staging,
            &into_ref,
            into_start,
            result,
        );
        crate::state::remove_owned(&info.common_dir, staging)?;
        return updated;
    }
    Ok(
        match repo.reference_matching(&into_ref, result, true, into_start, message) {
            Ok(_) => Ok(()),
            Err(e) => Err(NotMoved {
                reason: format!("cannot move branch {}: {}", into.branch, e.message()),
                first: None,
            }),
        },
    )
}

/// Deletes local branches by short name (swarm's own: no worktree has them checked out, no
/// `branch.<name>` config section names them), with their reflogs; returns how many were
/// deleted. As references, not through libgit2's branch call, which opens every worktree
/// and reads the config for each branch: a second of the end of a 2,000-task run.
///
/// Many branches are deleted by up to four threads, each with a handle of its own: on a disk
/// that discards what a deletion frees before `unlink` returns, each deletion mostly waits,
/// and the waits overlap.
///
/// Deleting a ref locks it and `packed-refs`, and removes its emptied directories; another
/// swarm run (or git, or another of these threads) working on refs at the same moment can
/// make a lookup or a deletion fail for a moment, so failures other than "no such branch"
/// are tried again for a while.
pub(crate) fn delete_branches(common_dir: &Path, names: &[String]) -> usize {
    const THREADS: usize = 4;
    const PER_THREAD_AT_LEAST: usize = 64;
    let threads = (names.len() / PER_THREAD_AT_LEAST).clamp(1, THREADS);
    if threads == 1 {
        return delete_branches_here(common_dir, names);
    }
    super::on_threads(names, threads, |part| {
        delete_branches_here(common_dir, part)
    })
    .into_iter()
    .map(|deleted| deleted.unwrap_or(0))
    .sum()
}

/// [`delete_branches`] on this thread, through a handle of its own.
fn delete_branches_here(common_dir: &Path, names: &[String]) -> usize {
    let Ok(repo) = Repository::open(common_dir) else {
        return 0;
    };
    let mut deleted = 0;
    for name in names {
        let mut last_error = None;
        for attempt in 0..50u64 {
            let refname = super::branch_ref(name);
            let result = repo.find_reference(&refname).and_then(|mut r| r.delete());
            match result {
                Ok(()) => {
                    deleted += 1;
                    last_error = None;
                    break;
                }
                Err(e) if e.code() == ErrorCode::NotFound => {
                    last_error = None;
                    break;
                }
                Err(e) => {
                    last_error = Some(e);
                    std::thread::sleep(std::time::Duration::from_millis(10 + attempt * 4));
                }
            }
        }
        if let Some(e) = last_error {
            tracing::warn!("cannot delete branch {name}: {e}");
        }
    }
    deleted
}

/// Short names of local branches under `prefix` (e.g. `swarm/<RUN-ID>/`).
pub(crate) fn branches_under(common_dir: &Path, prefix: &str) -> anyhow::Result<Vec<String>> {
    let repo = Repository::open(common_dir)?;
    let mut names = Vec::new();
    for branch in repo.branches(Some(BranchType::Local))? {
        let (branch, _) = branch?;
        if let Some(name) = branch.get().shorthand().ok()
            && name.starts_with(prefix)
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Enough branches for several threads: each is deleted once, with its reflog, and a
    /// branch not named stays.
    #[test]
    fn many_branches_are_deleted_on_threads_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo.find_tree(repo.treebuilder(None).unwrap().write().unwrap());
        let tip = repo
            .commit(None, &sig, &sig, "c", &tree.unwrap(), &[])
            .unwrap();
        let names: Vec<String> = (0..300).map(|i| format!("swarm/r/t{i}")).collect();
        for name in names.iter().chain([&"swarm/r/kept".to_string()]) {
            repo.branch(name, &repo.find_commit(tip).unwrap(), false)
                .unwrap();
        }
        let mut asked = names.clone();
        asked.push("swarm/r/gone-already".into());
        assert_eq!(delete_branches(repo.commondir(), &asked), 300);
        let left = branches_under(repo.commondir(), "swarm/r/").unwrap();
        assert_eq!(left, ["swarm/r/kept"]);
        assert!(!repo.commondir().join("logs/refs/heads/swarm/r/t0").exists());
    }
}
