//! What the scheduler records of what ends: an attempt, a merge, a process split in halves,
//! the tasks left when the run stops.

use std::collections::VecDeque;

use super::{FollowUp, Scheduler};
use crate::events::{ConflictAction, Event};
use crate::git::merge::MergeOutcome;
use crate::ids::TaskIdx;
use crate::orchestrator::group::Split;
use crate::orchestrator::merge_thread::{MergeDone, MergeJob};
use crate::orchestrator::repair::ConflictRepair;
use crate::orchestrator::task::Attempt;
use crate::repo_path::RepoPath;
use crate::report::DriverMerge;
use crate::report::TaskStatus;
use crate::settings::OnConflict;

impl Scheduler {
    /// Tasks that never started (`left`): skipped, saying why, when the run stopped for a
    /// reason of its own (not an interruption: those stay pending, for `swarm resume`).
    pub(super) fn mark_not_run(&mut self, left: impl Iterator<Item = TaskIdx>) {
        let cancelled = self.shared.cancel.is_cancelled();
        let not_run = match cancelled {
            true => None,
            false => self.stopped.clone().or_else(|| self.budget_spent.clone()),
        };
        for idx in left {
            let t = self.report.task_mut(idx);
            if t.status == TaskStatus::Pending {
                if let Some(reason) = &not_run {
                    t.status = TaskStatus::Skipped;
                    t.error = Some(format!("not run: {reason}"));
                    t.over_budget = self.stopped.is_none();
                }
            } else if t.status == TaskStatus::Conflict && cancelled {
                t.error = Some("conflicted; the retry did not run (interrupted)".into());
            }
        }
    }

    /// A process over several tasks did not succeed: its tasks wait again, in smaller
    /// processes run before any other first-wave task: each suspect alone and the others
    /// together, or without suspects, two halves.
    pub(super) fn on_split(&mut self, halves: &mut VecDeque<Vec<TaskIdx>>, split: Split) {
        let Split {
            mut tasks,
            error,
            log,
            suspects,
        } = split;
        let id = |i: &TaskIdx| self.report.task(*i).id.clone();
        self.shared.sink.emit(Event::GroupSplit {
            tasks: tasks.iter().map(id).collect(),
            alone: suspects.iter().map(|s| id(&s.idx)).collect(),
            named_by: suspects.iter().map(|s| s.line.clone()).collect(),
            error,
            log: log.map(|l| l.display().to_string()),
        });
        let of = tasks.len();
        for &idx in &tasks {
            let t = self.report.task_mut(idx);
            t.status = TaskStatus::Pending;
            t.attempts = 0;
            t.start = None;
        }
        for blame in &suspects {
            self.report.task_mut(blame.idx).ran_alone = Some(format!(
                "a process over {of} tasks failed, and its output named this task's file: {}",
                blame.line
            ));
        }
        let suspects: Vec<TaskIdx> = suspects.into_iter().map(|s| s.idx).collect();
        let next: Vec<Vec<TaskIdx>> = match suspects.is_empty() {
            true => {
                let second = tasks.split_off(tasks.len() / 2);
                vec![tasks, second]
            }
            false => {
                let others = tasks
                    .into_iter()
                    .filter(|i| !suspects.contains(i))
                    .collect();
                std::iter::once(others)
                    .chain(suspects.into_iter().map(|i| vec![i]))
                    .collect()
            }
        };
        for group in next.into_iter().rev() {
            halves.push_front(group);
        }
        self.save();
    }

    /// Records a finished attempt; returns the merge job if it is to be merged.
    pub(super) fn on_attempt(&mut self, a: Attempt) -> Option<MergeJob> {
        let t = self.report.task_mut(a.idx);
        t.duration_ms += a.duration.as_millis() as u64;
        t.changed_files = a.changed.clone();
        t.deleted_files = a.deleted.clone();
        t.commit = a.tip.filter(|tip| *tip != a.start);
        t.summary = a.summary.clone();
        t.add_spend(a.tokens, a.cost_usd, a.requests);
        t.turns += a.turns;
        if a.reported.is_some() {
            t.reported = a.reported.clone();
        }
        t.over_budget = a.over_budget;
        t.network.add(&a.network);
        t.output_tail = a.output_tail.clone();
        t.log = a.log.clone();
        t.hint = a.hint.clone();
        t.error = a.error.clone();
        t.status = a.status;
        let mut job = None;
        if a.status == TaskStatus::Done
            && let Some(tip) = a.tip
        {
            if let Some(reason) = &self.stopped {
                not_merged(t, reason);
            } else if !self.mode.merges() {
                // Stays `done`, its branch kept for `swarm diff` and `swarm merge`.
            } else {
                job = Some(MergeJob {
                    idx: a.idx,
                    start: a.start,
                    tip,
                    resolved: a.resolved,
                    changes: a.changes,
                    last_for_now: false,
                });
            }
        }
        self.shared.sink.emit(Event::TaskFinished {
            task: t.id.clone(),
            status: t.status,
            changed_files: t.changed_files.clone(),
            duration_ms: a.duration.as_millis() as u64,
            error: t.error.clone(),
            tokens: a.tokens.prompt + a.tokens.completion,
            cost_usd: a.cost_usd,
        });
        self.save();
        job
    }

    /// Records a merge; returns a retry to schedule for a conflict under `retry`.
    pub(super) fn on_merged(&mut self, done: MergeDone) -> Option<(TaskIdx, FollowUp)> {
        let policy = self.shared.settings.on_conflict;
        let t = self.report.task_mut(done.idx);
        let mut retry = None;
        let Some(outcome) = done.outcome else {
            // Handed over before a conflict stopped merging (`--on-conflict fail`).
            not_merged(t, self.stopped.as_deref().unwrap_or("merging stopped"));
            self.save();
            return None;
        };
        match outcome {
            Ok(MergeOutcome::Merged {
                commit,
                fast_path,
                drivers,
                spared,
            }) => {
                t.status = TaskStatus::Merged;
                t.merge_commit = Some(commit);
                emit_drivers(&self.shared.sink, &t.id, &drivers);
                t.merge_drivers = drivers;
                t.rerun_spared = spared;
                self.tip = commit;
                self.shared.sink.emit(Event::Merged {
                    task: t.id.clone(),
                    commit: commit.to_string(),
                    fast_path,
                });
            }
            Ok(MergeOutcome::Conflict { paths, drivers }) => {
                t.status = TaskStatus::Conflict;
                t.error = Some(conflict_error(&paths, &drivers));
                if let Some(log) = drivers
                    .iter()
                    .filter(|d| !d.merged)
                    .find_map(|d| d.log.clone())
                {
                    t.log = Some(log);
                }
                emit_drivers(&self.shared.sink, &t.id, &drivers);
                t.merge_drivers = drivers;
                t.rerun_spared = false;
                let action = match policy {
                    OnConflict::Retry if t.attempts < 2 => {
                        retry = Some((done.idx, FollowUp::Retry(paths.clone())));
                        ConflictAction::Retry
                    }
                    OnConflict::Repair if self.shared.model.is_some() => {
                        retry = Some((done.idx, FollowUp::Repair));
                        ConflictAction::Repair
                    }
                    OnConflict::Retry | OnConflict::Skip | OnConflict::Repair => {
                        ConflictAction::Skip
                    }
                    OnConflict::Fail => {
                        self.stopped = Some(format!(
                            "merging stopped after task {} conflicted (--on-conflict fail)",
                            t.id
                        ));
                        ConflictAction::Stop
                    }
                };
                self.shared.sink.emit(Event::Conflict {
                    task: t.id.clone(),
                    paths,
                    action,
                });
            }
            Err(e) => {
                t.status = TaskStatus::Failed;
                t.error = Some(format!("merge failed: {e}"));
            }
        }
        self.save();
        retry
    }

    /// A conflict repair of task `idx` on the current integration tip.
    pub(super) fn conflict_repair(
        &self,
        idx: TaskIdx,
        attempt: u32,
    ) -> anyhow::Result<ConflictRepair> {
        let t = self.report.task(idx);
        let (Some(task_start), Some(task_tip)) = (t.start, t.commit) else {
            anyhow::bail!("task {} has no commit to repair", t.id);
        };
        Ok(ConflictRepair {
            idx,
            tip: self.tip,
            task_start,
            task_tip,
            attempt,
            changed: t.changed_files.clone(),
        })
    }
}

pub(super) fn conflict_context(paths: &[RepoPath]) -> String {
    let list: Vec<String> = paths.iter().map(|p| format!("- {}", p.display())).collect();
    format!(
        "A previous attempt at this task conflicted with changes other tasks already merged, in:\n{}\n\
         This attempt starts from the current merged result, which contains those changes: \
         keep them and apply the instruction on top.",
        list.join("\n")
    )
}

/// A finished task left unmerged because the run stopped merging (`reason`): skipped, its
/// branch kept.
pub(super) fn not_merged(t: &mut crate::report::TaskReport, reason: &str) {
    t.status = TaskStatus::Skipped;
    t.error = Some(format!("not merged: {reason}"));
}

/// "merge conflict in a, b", and why each driver that was given one of them did not merge it.
fn conflict_error(paths: &[crate::repo_path::RepoPath], drivers: &[DriverMerge]) -> String {
    let list = paths
        .iter()
        .map(|p| p.display())
        .collect::<Vec<_>>()
        .join(", ");
    let mut error = format!("merge conflict in {list}");
    for run in drivers.iter().filter(|d| !d.merged) {
        let why = run.error.as_deref().unwrap_or("it did not merge it");
        error.push_str(&format!("; {} ({}): {why}", run.path.display(), run.driver));
    }
    error
}

/// A `merge_driver` event for each file of a task's merge a driver was given.
fn emit_drivers(
    sink: &crate::events::EventSink,
    task: &crate::ids::TaskId,
    drivers: &[DriverMerge],
) {
    for run in drivers {
        sink.emit(Event::MergeDriver {
            task: task.clone(),
            path: run.path.clone(),
            driver: run.driver.clone(),
            merged: run.merged,
            error: run.error.clone(),
        });
    }
}
