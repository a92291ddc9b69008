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
use crate::settings::OnConflict;

pub(super) struct MergeJob {
    pub(super) idx: TaskIdx,
    pub(super) start: Oid,
    pub(super) tip: Oid,
    /// Merge this resolved tree instead (`--on-conflict repair`).
    pub(super) resolved: Option<Resolved>,
    /// What differs between `start` and `tip`, where the worker's side knows it.
    pub(super) changes: Option<Vec<TreeChange>>,
    /// No task was running when it was handed over: no other job can come before its answer,
    /// so the merge thread does not wait for more ([`GATHER`]). Set by the scheduler.
    pub(super) last_for_now: bool,
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
    /// `None`: not tried, merging stopped at a conflict before it (`--on-conflict fail`).
    pub(super) outcome: Option<Result<MergeOutcome, String>>,
}

/// The most merges recorded at once (see [`MergeTrain::merge_many`]).
const MOST_AT_ONCE: usize = 256;

/// How long the merge thread waits, once a job has come, for more to merge with it. One-file
/// tasks finish one at a time, a few milliseconds apart, so without the wait each moved the
/// integration branch on its own (a lock file, a rename, a reflog entry: a third of a merge
/// where making a file is slow). A task is reported merged at most this much later.
const GATHER: std::time::Duration = std::time::Duration::from_millis(10);

/// Merges the jobs in the order they come; gives the train back when the channel closes.
/// The jobs waiting when one is taken, or coming within [`GATHER`], are merged together, the
/// integration branch moved once for all of them, and each is reported merged once it is (a
/// job with a resolved tree is merged on its own). Under `--on-conflict fail` nothing is tried
/// after the first conflict: jobs handed over before the scheduler heard of it come back
/// untried.
pub(super) fn merge_loop(
    mut train: MergeTrain,
    shared: &Shared,
    jobs: std::sync::mpsc::Receiver<MergeJob>,
    done: mpsc::UnboundedSender<MergeDone>,
) -> MergeTrain {
    let until_conflict = shared.settings.on_conflict == OnConflict::Fail;
    let mut stopped = false;
    let mut waiting = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match jobs.recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => return train,
            }
        }
        gather(&jobs, &mut waiting, GATHER);
        let together = waiting
            .iter()
            .take_while(|job| job.resolved.is_none())
            .count();
        let merged = match (together, waiting.pop_front()) {
            // Everything waiting comes back untried at once.
            (_, Some(job)) if stopped => std::iter::once(job)
                .chain(waiting.drain(..))
                .map(|job| MergeDone {
                    idx: job.idx,
                    outcome: None,
                })
                .collect(),
            (0 | 1, Some(job)) => vec![merge_one(&mut train, shared, job)],
            (_, Some(job)) => {
                let rest = waiting.drain(..together - 1);
                let jobs = std::iter::once(job).chain(rest).collect();
                merge_together(&mut train, shared, jobs, until_conflict)
            }
            (_, None) => continue,
        };
        stopped |= until_conflict
            && merged
                .iter()
                .any(|d| matches!(d.outcome, Some(Ok(MergeOutcome::Conflict { .. }))));
        for one in merged {
            if done.send(one).is_err() {
                return train;
            }
        }
    }
}

/// Adds to `waiting` the jobs that come within `window` (up to [`MOST_AT_ONCE`] in all); no
/// wait once the newest is the last for now (the run's last merge is not made to wait).
fn gather(
    jobs: &std::sync::mpsc::Receiver<MergeJob>,
    waiting: &mut VecDeque<MergeJob>,
    window: std::time::Duration,
) {
    let until = std::time::Instant::now() + window;
    while waiting.len() < MOST_AT_ONCE {
        let more_may_come = waiting.back().is_none_or(|job| !job.last_for_now);
        let left = until.checked_duration_since(std::time::Instant::now());
        let job = match left.filter(|_| more_may_come) {
            Some(left) => jobs.recv_timeout(left).ok(),
            None => jobs.try_recv().ok(),
        };
        match job {
            Some(job) => waiting.push_back(job),
            None => break,
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
                drivers: Vec::new(),
                spared: false,
            }),
    };
    MergeDone {
        idx: job.idx,
        outcome: Some(outcome.map_err(|e| format!("{e:#}"))),
    }
}

fn merge_together(
    train: &mut MergeTrain,
    shared: &Shared,
    jobs: Vec<MergeJob>,
    until_conflict: bool,
) -> Vec<MergeDone> {
    let reqs: Vec<_> = jobs.iter().map(|job| request(shared, job)).collect();
    let outcomes: Vec<Result<MergeOutcome, String>> = match train.merge_many(&reqs, until_conflict)
    {
        Ok(outcomes) => outcomes
            .into_iter()
            .map(|o| o.map_err(|e| format!("{e:#}")))
            .collect(),
        Err(e) => {
            let error = format!("{e:#}");
            jobs.iter().map(|_| Err(error.clone())).collect()
        }
    };
    // Those after a conflict that stopped merging have no outcome: not tried.
    let mut outcomes = outcomes.into_iter();
    jobs.iter()
        .map(|job| MergeDone {
            idx: job.idx,
            outcome: outcomes.next(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn job(idx: TaskIdx, last_for_now: bool) -> MergeJob {
        MergeJob {
            idx,
            start: Oid::ZERO_SHA1,
            tip: Oid::ZERO_SHA1,
            resolved: None,
            changes: None,
            last_for_now,
        }
    }

    /// Far longer than a gathering that does not wait takes, even on a loaded machine.
    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn the_last_job_for_now_is_not_kept_waiting() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut idx = TaskIdx::all(2);
        tx.send(job(idx.next().unwrap(), false)).unwrap();
        tx.send(job(idx.next().unwrap(), true)).unwrap();
        let mut waiting = VecDeque::new();
        let started = Instant::now();
        // The sender is alive: a gathering that waited would wait the whole window.
        gather(&rx, &mut waiting, LONG);
        assert_eq!(waiting.len(), 2);
        assert!(started.elapsed() < LONG / 3, "it waited for more jobs");
        drop(tx);
    }

    #[test]
    fn jobs_are_gathered_while_tasks_run() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut idx = TaskIdx::all(2);
        tx.send(job(idx.next().unwrap(), false)).unwrap();
        let later = idx.next().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            tx.send(job(later, true)).unwrap();
        });
        let mut waiting = VecDeque::new();
        gather(&rx, &mut waiting, LONG);
        sender.join().unwrap();
        assert_eq!(waiting.len(), 2, "the job that came later was not gathered");
    }
}
