//! The end of a run: move the target once, remove worktrees, delete what is no longer needed.

use crate::git::checkout::NotMoved;
use crate::git::finish;
use crate::git::repo::{IntoTarget, RepoInfo};
use crate::report::Report;
use std::sync::Arc;

use git2::Oid;

use super::{Shared, result_branch};
use crate::events::Event;
use crate::ids::RunBranch;
use crate::report::TaskStatus;

/// The commands that merge the result by hand, for the target as it is now: a fast-forward
/// if it has not moved since the run started, else a merge; after what must be done first.
fn merge_hint(
    info: &RepoInfo,
    into: &IntoTarget,
    into_start: Oid,
    result_branch: &str,
    not_moved: Option<&NotMoved>,
) -> String {
    let repo = info.open().ok();
    let now = repo
        .as_ref()
        .and_then(|r| r.refname_to_id(&crate::git::branch_ref(&into.branch)).ok());
    let checked_out = repo.as_ref().is_some_and(|r| {
        r.find_reference("HEAD").is_ok_and(|h| {
            h.symbolic_target().ok().flatten()
                == Some(crate::git::branch_ref(&into.branch).as_str())
        })
    });
    let merge = match now {
        Some(now) if now != into_start => format!("git merge {result_branch}"),
        Some(_) => format!("git merge --ff-only {result_branch}"),
        None => format!("git branch {} {result_branch}", into.branch),
    };
    let merge = match (now, checked_out) {
        (None, _) | (Some(_), true) => merge,
        (Some(_), false) => format!("git checkout {} && {merge}", into.branch),
    };
    match not_moved.and_then(|n| n.first.as_deref()) {
        Some(first) => format!("{first}, then: {merge}"),
        None => merge,
    }
}

/// How the run ended, for [`finish()`].
pub(super) struct Ending<'a> {
    pub(super) info: &'a RepoInfo,
    pub(super) into: &'a IntoTarget,
    pub(super) into_start: Oid,
    /// The integration tip.
    pub(super) tip: Oid,
    /// `--keep`: leave worktrees and branches.
    pub(super) keep: bool,
    /// The run was interrupted or failed: the target must not move.
    pub(super) stopped: bool,
    /// Why the target must not move although tasks merged (`--verify-merged`).
    pub(super) hold: Option<&'a str>,
}

/// Moves the target (unless stopped), removes worktrees, deletes the branches that are no
/// longer needed, and fills the run-level fields of the report.
pub(super) async fn finish(shared: &Arc<Shared>, end: &Ending<'_>, report: &mut Report) {
    let result_branch = result_branch(&shared.plan.run_id);
    // `into_start` is where this attempt found the target; a continued run may have moved it
    // to the result of its earlier merges already.
    let merged_any = end.tip != report.into_start;
    report.result = merged_any.then_some(end.tip);
    let not_moved = match (merged_any, end.stopped, end.hold) {
        (true, false, Some(reason)) => Some(NotMoved {
            reason: reason.to_string(),
            first: None,
        }),
        (true, false, None) => move_target(shared, end, report).await,
        _ => None,
    };
    if merged_any && !report.into_updated {
        report.result_branch = Some(result_branch.clone());
    }
    if merged_any && !report.into_updated && !end.stopped {
        let hint = merge_hint(
            end.info,
            end.into,
            end.into_start,
            &result_branch,
            not_moved.as_ref(),
        );
        report.merge_hint = Some(hint.clone());
        if let Some(not_moved) = not_moved {
            shared.sink.emit(Event::TargetNotUpdated {
                into: end.into.branch.clone(),
                result_branch: result_branch.clone(),
                reason: not_moved.reason,
                hint,
            });
        }
    }
    clean_up(shared, end.info, end.keep, report).await;
}

/// Moves the target to the integration tip; `Some` (why) when it stayed where it was.
async fn move_target(
    shared: &Arc<Shared>,
    end: &Ending<'_>,
    report: &mut Report,
) -> Option<NotMoved> {
    let (info, into, into_start, tip) =
        (end.info.clone(), end.into.clone(), end.into_start, end.tip);
    let staging = shared.run_dir.path.join("checkout");
    let moved = tokio::task::spawn_blocking(move || {
        finish::update_target(&info, &into, into_start, tip, &staging)
    })
    .await;
    match moved {
        Ok(Ok(Ok(()))) => {
            report.into_updated = true;
            shared.sink.emit(Event::TargetUpdated {
                into: end.into.branch.clone(),
                result: tip.to_string(),
            });
            None
        }
        Ok(Ok(Err(not_moved))) => Some(not_moved),
        Ok(Err(e)) => Some(NotMoved {
            reason: format!("{e:#}"),
            first: None,
        }),
        Err(e) => Some(NotMoved {
            reason: format!("the target update failed: {e}"),
            first: None,
        }),
    }
}

/// The branches of a task's candidates that stay (into `kept`) and go (into `delete`):
/// every one goes once the task merged or needed no change; else the winner's stays while
/// its change is not merged, and without a winner those with a commit stay (for `swarm
/// diff` and `swarm resume`); losers go.
fn candidate_branches(
    t: &mut crate::report::TaskReport,
    keep: bool,
    (kept, delete): (&mut Vec<String>, &mut Vec<String>),
) {
    let done = matches!(t.status, TaskStatus::Merged | TaskStatus::NoChange);
    let winner = t.selection.as_ref().map(|s| s.winner);
    for c in &t.candidates {
        let needed = !done
            && c.commit.is_some()
            && match winner {
                Some(k) => k == c.number,
                None => true,
            };
        match keep || needed {
            true => kept.push(c.branch.clone()),
            false => delete.push(c.branch.clone()),
        }
    }
    t.branch_kept = keep || (!done && t.commit.is_some());
}

/// Removes the run's worktrees (unless `keep`) and the branches no longer needed: those of
/// merged tasks and tasks without change, and swarm's own; a failed or unmerged task keeps
/// its branch.
async fn clean_up(shared: &Arc<Shared>, info: &RepoInfo, keep: bool, report: &mut Report) {
    let run_id = &shared.plan.run_id;
    let common_dir = info.common_dir.clone();
    let mut delete = Vec::new();
    let mut kept = Vec::new();
    for t in &mut report.tasks {
        if !t.candidates.is_empty() {
            candidate_branches(t, keep, (&mut kept, &mut delete));
            continue;
        }
        let has_commit = t.commit.is_some();
        let started =
            t.status != TaskStatus::Pending && t.status != TaskStatus::Skipped || has_commit;
        if !started {
            continue;
        }
        let needed = has_commit && !matches!(t.status, TaskStatus::Merged | TaskStatus::NoChange);
        t.branch_kept = keep || needed;
        if t.branch_kept {
            kept.push(t.branch.clone());
        } else {
            delete.push(t.branch.clone());
        }
    }
    if report.result_branch.is_none() {
        delete.push(result_branch(run_id));
    }
    delete.push(run_id.branch(&RunBranch::Verify));
    delete.push(run_id.branch(&RunBranch::Repair));
    // The worktrees and the branches go side by side: neither needs the other gone.
    let removing = (!keep).then(|| {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || shared.pool.remove_all())
    });
    let deleting =
        tokio::task::spawn_blocking(move || finish::delete_branches(&common_dir, &delete));
    let removed_worktrees = match removing {
        Some(removing) => removing.await.unwrap_or(0),
        None => 0,
    };
    let deleted_branches = deleting.await.unwrap_or(0);
    shared.sink.emit(Event::Cleanup {
        removed_worktrees,
        deleted_branches,
        kept_branches: kept,
    });
}
