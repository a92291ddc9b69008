//! The merge thread: it owns the run's `MergeTrain` (git2 handles are not `Sync`) and merges
//! each finished task as the scheduler hands it over, while other workers still run.

use git2::Oid;
use tokio::sync::mpsc;

use super::Shared;
use super::task::Resolved;
use crate::git::merge::{MergeOutcome, MergeRequest, MergeTrain};
use crate::ids::TaskIdx;

pub(super) struct MergeJob {
    pub(super) idx: TaskIdx,
    pub(super) start: Oid,
    pub(super) tip: Oid,
    /// Merge this resolved tree instead (`--on-conflict repair`).
    pub(super) resolved: Option<Resolved>,
}

/// The merge thread is gone: no merge can be handed to it.
#[derive(Debug, thiserror::Error)]
#[error("the merge thread stopped")]
pub(super) struct MergeThreadStopped;

pub(super) fn merge_thread_stopped() -> anyhow::Error {
    MergeThreadStopped.into()
}

pub(super) struct MergeDone {
    pub(super) idx: TaskIdx,
    pub(super) outcome: Result<MergeOutcome, String>,
}

/// Merges the jobs in the order they come; gives the train back when the channel closes.
pub(super) fn merge_loop(
    mut train: MergeTrain,
    shared: &Shared,
    jobs: std::sync::mpsc::Receiver<MergeJob>,
    done: mpsc::UnboundedSender<MergeDone>,
) -> MergeTrain {
    for job in jobs {
        let task = shared.plan.task(job.idx);
        let req = MergeRequest {
            task_id: &task.id,
            files: &task.files,
            instruction: &shared.plan.instruction,
            run_id: &shared.plan.run_id,
            start: job.start,
            tip: job.tip,
        };
        let outcome = match job.resolved {
            None => train.merge(&req),
            Some(resolved) => {
                train
                    .merge_resolved(&req, resolved.tree, resolved.on)
                    .map(|commit| MergeOutcome::Merged {
                        commit,
                        fast_path: false,
                    })
            }
        }
        .map_err(|e| format!("{e:#}"));
        if done
            .send(MergeDone {
                idx: job.idx,
                outcome,
            })
            .is_err()
        {
            break;
        }
    }
    train
}
