//! The merge thread: it owns the run's `MergeTrain` (git2 handles are not `Sync`) and merges
//! each finished task as the scheduler hands it over, while other workers still run.

use std::collections::VecDeque;

use git2::Oid;
use tokio::sync::mpsc;

use super::Shared;
use super::task::Resolved;
use crate::git::TreeChange;
use crate::git::merge::{MergeOutcome, MergeRequest, MergeTrain};
use crate::ids::TaskIdx;

pub(super) struct MergeJob {
    pub(super) idx: TaskIdx,
    pub(super) start: Oid,
    pub(super) tip: Oid,
    /// Merge this resolved tree instead (`--on-conflict repair`).
    pub(super) resolved: Option<Resolved>,
    /// What differs between `start` and `tip`, where the worker's side knows it.
    pub(super) changes: Option<Vec<TreeChange>>,
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

/// The most merges recorded at once (see [`MergeTrain::merge_many`]).
const MOST_AT_ONCE: usize = 256;

/// Merges the jobs in the order they come; gives the train back when the channel closes.
/// The jobs waiting when one is taken are merged together, the integration branch moved once
/// for all of them, and each is reported merged once it is (a job with a resolved tree is
/// merged on its own).
pub(super) fn merge_loop(
    mut train: MergeTrain,
    shared: &Shared,
    jobs: std::sync::mpsc::Receiver<MergeJob>,
    done: mpsc::UnboundedSender<MergeDone>,
) -> MergeTrain {
    let mut waiting = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match jobs.recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => return train,
            }
        }
        while waiting.len() < MOST_AT_ONCE {
            match jobs.try_recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => break,
            }
        }
        let together = waiting
            .iter()
            .take_while(|job| job.resolved.is_none())
            .count();
        let merged = match (together, waiting.pop_front()) {
            (0 | 1, Some(job)) => vec![merge_one(&mut train, shared, job)],
            (_, Some(job)) => {
                let rest = waiting.drain(..together - 1);
                merge_together(
                    &mut train,
                    shared,
                    std::iter::once(job).chain(rest).collect(),
                )
            }
            (_, None) => continue,
        };
        for one in merged {
            if done.send(one).is_err() {
                return train;
            }
        }
    }
}

fn request<'a>(shared: &'a Shared, job: &'a MergeJob) -> MergeRequest<'a> {
    let task = shared.plan.task(job.idx);
    MergeRequest {
        task_id: &task.id,
        files: &task.files,
        instruction: &shared.plan.instruction,
        run_id: &shared.plan.run_id,
        start: job.start,
        tip: job.tip,
        changes: job.changes.as_deref(),
    }
}

fn merge_one(train: &mut MergeTrain, shared: &Shared, job: MergeJob) -> MergeDone {
    let req = request(shared, &job);
    let outcome = match job.resolved {
        None => train.merge(&req),
        Some(resolved) => train
            .merge_resolved(&req, resolved.tree, resolved.on)
            .map(|commit| MergeOutcome::Merged {
                commit,
                fast_path: false,
            }),
    };
    MergeDone {
        idx: job.idx,
        outcome: outcome.map_err(|e| format!("{e:#}")),
    }
}

fn merge_together(train: &mut MergeTrain, shared: &Shared, jobs: Vec<MergeJob>) -> Vec<MergeDone> {
    let reqs: Vec<_> = jobs.iter().map(|job| request(shared, job)).collect();
    let outcomes: Vec<Result<MergeOutcome, String>> = match train.merge_many(&reqs) {
        Ok(outcomes) => outcomes
            .into_iter()
            .map(|o| o.map_err(|e| format!("{e:#}")))
            .collect(),
        Err(e) => {
            let error = format!("{e:#}");
            jobs.iter().map(|_| Err(error.clone())).collect()
        }
    };
    jobs.iter()
        .zip(outcomes)
        .map(|(job, outcome)| MergeDone {
            idx: job.idx,
            outcome,
        })
        .collect()
}
