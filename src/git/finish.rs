//! The end of a run: the target branch moves once, then swarm's branches are cleaned up.

use std::path::Path;

use git2::build::CheckoutBuilder;
use git2::{BranchType, ErrorCode, Oid, Repository};

use super::repo::{IntoTarget, RepoInfo};

/// Moves `into` from `into_start` to `result`. A checked-out target gets a safe checkout that
/// never overwrites local changes. `Err(reason)` means the target was left as it was.
pub fn update_target(
    info: &RepoInfo,
    into: &IntoTarget,
    into_start: Oid,
    result: Oid,
) -> anyhow::Result<Result<(), String>> {
    let repo = info.open()?;
    let into_ref = super::branch_ref(&into.branch);
    let message = "swarm: merge result";
    let Some(_) = into.tip else {
        let commit = repo.find_commit(result)?;
        return Ok(match repo.branch(&into.branch, &commit, false) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!(
                "cannot create branch {}: {}",
                into.branch,
                e.message()
            )),
        });
    };
    match repo.refname_to_id(&into_ref) {
        Ok(now) if now == into_start => {}
        Ok(now) => {
            return Ok(Err(format!(
                "branch {} moved during the run (it is now at {})",
                into.branch,
                super::commit::short(now)
            )));
        }
        Err(e) => {
            return Ok(Err(format!(
                "cannot read branch {}: {}",
                into.branch,
                e.message()
            )));
        }
    }
    let head = repo.find_reference("HEAD")?;
    let still_checked_out = head.symbolic_target().ok().flatten() == Some(into_ref.as_str());
    if still_checked_out {
        let tree = repo.find_commit(result)?.tree()?;
        let mut checkout = CheckoutBuilder::new();
        checkout.safe();
        if let Err(e) = repo.checkout_tree(tree.as_object(), Some(&mut checkout)) {
            let reason = if e.code() == ErrorCode::Conflict {
                format!(
                    "updating your checkout would overwrite local changes ({})",
                    e.message()
                )
            } else {
                format!("cannot update your checkout: {}", e.message())
            };
            return Ok(Err(reason));
        }
    }
    if let Err(e) = repo.reference_matching(&into_ref, result, true, into_start, message) {
        if still_checked_out {
            // Put the files back as they were so the checkout matches its unmoved branch.
            let tree = repo.find_commit(into_start)?.tree()?;
            let mut checkout = CheckoutBuilder::new();
            checkout.safe();
            repo.checkout_tree(tree.as_object(), Some(&mut checkout))?;
        }
        return Ok(Err(format!(
            "cannot move branch {}: {}",
            into.branch,
            e.message()
        )));
    }
    Ok(Ok(()))
}

/// Deletes local branches by short name; returns how many were deleted.
///
/// Deleting a ref locks it and `packed-refs`, and removes its emptied directories; another
/// swarm run (or git) working on refs at the same moment can make a lookup or a deletion
/// fail for a moment, so failures other than "no such branch" are tried again for a while.
pub fn delete_branches(common_dir: &Path, names: &[String]) -> usize {
    let Ok(repo) = Repository::open(common_dir) else {
        return 0;
    };
    let mut deleted = 0;
    for name in names {
        let mut last_error = None;
        for attempt in 0..50u64 {
            let result = repo
                .find_branch(name, BranchType::Local)
                .and_then(|mut b| b.delete());
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
pub fn branches_under(common_dir: &Path, prefix: &str) -> anyhow::Result<Vec<String>> {
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
