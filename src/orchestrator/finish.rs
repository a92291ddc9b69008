//! The end of a run: move the target once, remove worktrees, delete what is no longer needed.

use crate::git::finish;
use crate::git::repo::{IntoTarget, RepoInfo};
use crate::report::Report;
use std::sync::Arc;

use git2::Oid;

use super::{Shared, result_branch};
use crate::events::Event;
use crate::ids::RunBranch;
use crate::report::TaskStatus;

/// Moves the target (unless interrupted), removes worktrees, deletes the branches that are no
/// longer needed, and fills the run-level fields of the report.
#[allow(clippy::too_many_arguments)]
pub(super) async fn finish(
    shared: &Arc<Shared>,
    info: &RepoInfo,
    into: &IntoTarget,
    into_start: Oid,
    tip: Oid,
    keep: bool,
    interrupted: bool,
    hold: Option<&str>,
    report: &mut Report,
) {
    let run_id = shared.plan.run_id.clone();
    let result_branch = result_branch(&run_id);
    let merged_any = tip != into_start;
    report.result = merged_any.then(|| tip.to_string());
    if let (true, false, Some(reason)) = (merged_any, interrupted, hold) {
        report.result_branch = Some(result_branch.clone());
        shared.sink.emit(Event::TargetNotUpdated {
            into: into.branch.clone(),
            result_branch: result_branch.clone(),
            reason: reason.to_string(),
        });
    } else if merged_any && !interrupted {
        let (info, into2) = (info.clone(), into.clone());
        let moved = tokio::task::spawn_blocking(move || {
            finish::update_target(&info, &into2, into_start, tip)
        })
        .await;
        match moved {
            Ok(Ok(Ok(()))) => {
                report.into_updated = true;
                shared.sink.emit(Event::TargetUpdated {
                    into: into.branch.clone(),
                    result: tip.to_string(),
                });
            }
            Ok(Ok(Err(reason))) => {
                report.result_branch = Some(result_branch.clone());
                shared.sink.emit(Event::TargetNotUpdated {
                    into: into.branch.clone(),
                    result_branch: result_branch.clone(),
                    reason,
                });
            }
            Ok(Err(e)) => {
                report.result_branch = Some(result_branch.clone());
                shared.sink.emit(Event::TargetNotUpdated {
                    into: into.branch.clone(),
                    result_branch: result_branch.clone(),
                    reason: format!("{e:#}"),
                });
            }
            Err(e) => tracing::error!("target update panicked: {e}"),
        }
    } else if merged_any {
        report.result_branch = Some(result_branch.clone());
    }

    let common_dir = info.common_dir.clone();
    let mut delete = Vec::new();
    let mut kept = Vec::new();
    for t in &mut report.tasks {
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
        delete.push(result_branch);
    }
    delete.push(run_id.branch(&RunBranch::Verify));
    delete.push(run_id.branch(&RunBranch::Repair));
    let removed_worktrees = if keep {
        0
    } else {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || shared.pool.remove_all())
            .await
            .unwrap_or(0)
    };
    let deleted_branches =
        tokio::task::spawn_blocking(move || finish::delete_branches(&common_dir, &delete))
            .await
            .unwrap_or(0);
    shared.sink.emit(Event::Cleanup {
        removed_worktrees,
        deleted_branches,
        kept_branches: kept,
    });
}
