//! What a run does, decided once, from the command, by the application layer.

use crate::ids::TaskIdx;
use crate::report::Report;
use git2::Oid;

/// What a run does. The engine asks it only two things: whether workers run
/// ([`RunMode::runs_workers`]) and whether finished tasks are merged and the target moved
/// ([`RunMode::merges`]); the rest is for the command that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// `swarm refactor`: run every task, merge, move the target.
    Refactor,
    /// `swarm refactor --dry-run`: run every task, keep the branches, merge nothing.
    DryRun,
    /// `swarm refactor --review`: run as a dry run; what is accepted is merged afterwards.
    Review,
    /// `swarm run PLAN.json [--shard K/N]`: run the plan's tasks (or a shard), keep the
    /// branches, leave a shard record.
    RunShard,
    /// `swarm merge`: merge the finished, unmerged tasks; run none.
    MergeOnly,
    /// `swarm resume`: run the tasks that had not finished, merge.
    Resume,
    /// `swarm resume --failed`: run failed, timed-out and conflicted tasks again too.
    RerunFailed,
}

impl RunMode {
    /// Do workers run?
    pub fn runs_workers(self) -> bool {
        !matches!(self, RunMode::MergeOnly)
    }

    /// Are finished tasks merged, checked (`--verify-merged`) and the target moved?
    pub fn merges(self) -> bool {
        match self {
            RunMode::Refactor | RunMode::MergeOnly | RunMode::Resume | RunMode::RerunFailed => true,
            RunMode::DryRun | RunMode::Review | RunMode::RunShard => false,
        }
    }

    /// Does this mode run failed tasks again when continuing a run?
    pub fn reruns_failed(self) -> bool {
        self == RunMode::RerunFailed
    }
}

/// Where a run that continues (resume, merge) was left.
pub struct Continuation {
    /// The run's report as it was left (or as rebuilt from git).
    pub report: Report,
    /// The integration tip so far (`swarm/<RUN-ID>/result`, else where the target started).
    pub tip: Oid,
    /// What an earlier process of the run, killed, left and was put right (said as warnings).
    pub recovered: Vec<String>,
    /// The run's lock, when the continuing command took it before putting right what a
    /// killed process left (so nobody starts the run in between).
    pub(crate) lock: Option<crate::state::RunLock>,
}

impl Continuation {
    /// The report to continue, the integration tip, and the tasks that finished but were not
    /// merged (merged first). Tasks `mode` runs again are set back to pending.
    pub(super) fn prepare(self, mode: RunMode) -> (Report, Oid, Vec<TaskIdx>) {
        let mut report = self.report;
        report.reset_outcome();
        let mut merge_first = Vec::new();
        for idx in report.indices() {
            let t = report.task_mut(idx);
            let finished_unmerged = t.status == crate::report::TaskStatus::Done
                && t.commit.is_some()
                && t.start.is_some();
            if finished_unmerged {
                merge_first.push(idx);
            }
            let again =
                mode.runs_workers() && !finished_unmerged && t.left_to_do(mode.reruns_failed());
            if again {
                t.retry_from_scratch();
            }
        }
        (report, self.tip, merge_first)
    }
}
