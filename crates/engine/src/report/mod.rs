//! The run report (docs/USAGE.md, "The report"): `report.json` in the run directory and
//! stdout with `--json`.

use serde::{Deserialize, Serialize};

use git2::Oid;

use crate::ids::{RunBranch, RunId, TaskId, TaskIdx, oid_hex};
use crate::repo_path::RepoPath;

mod candidate;
pub mod groups;
mod merge;
mod usage;
pub use candidate::{CandidateReport, SelectedBy, Selection};
pub use merge::DriverMerge;
pub(crate) use usage::{NetworkUse, Reported};

pub(crate) const REPORT_SCHEMA_VERSION: u32 = 1;

/// The report's `layers` when a run kept its overlay layers in memory, and on the disk.
pub(crate) const LAYERS_IN_MEMORY: &str = "memory";
pub(crate) const LAYERS_ON_DISK: &str = "disk";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Not started yet (only seen while a run is in progress).
    Pending,
    Running,
    /// Finished with changes, waiting for the merge train.
    Done,
    Merged,
    NoChange,
    Failed,
    Conflict,
    Timeout,
    Skipped,
    Interrupted,
    Excluded,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Done => "done",
            TaskStatus::Merged => "merged",
            TaskStatus::NoChange => "no_change",
            TaskStatus::Failed => "failed",
            TaskStatus::Conflict => "conflict",
            TaskStatus::Timeout => "timeout",
            TaskStatus::Skipped => "skipped",
            TaskStatus::Interrupted => "interrupted",
            TaskStatus::Excluded => "excluded",
        }
    }

    /// Does `swarm resume` work on a task in this state? (`rerun_failed`: `--failed`.)
    pub fn left_to_do(self, rerun_failed: bool) -> bool {
        match self {
            TaskStatus::Merged | TaskStatus::NoChange => false,
            TaskStatus::Pending
            | TaskStatus::Running
            | TaskStatus::Done
            | TaskStatus::Interrupted => true,
            TaskStatus::Failed
            | TaskStatus::Conflict
            | TaskStatus::Timeout
            | TaskStatus::Skipped
            | TaskStatus::Excluded => rerun_failed,
        }
    }

    /// Did the task end well (merged, or nothing to do)?
    pub fn is_success(self) -> bool {
        matches!(self, TaskStatus::Merged | TaskStatus::NoChange)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub prompt: u64,
    pub completion: u64,
}

impl Tokens {
    /// Adds `other` (saturating).
    pub(crate) fn add(&mut self, other: Tokens) {
        self.prompt = self.prompt.saturating_add(other.prompt);
        self.completion = self.completion.saturating_add(other.completion);
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskReport {
    pub id: TaskId,
    pub files: Vec<RepoPath>,
    pub status: TaskStatus,
    /// `swarm/<RUN-ID>/<TASK-ID>`. Written for readers, never read back: a loaded report
    /// gets it from the ids ([`Report::parse`]), so no report or shard record can name
    /// another branch for swarm to merge or delete.
    #[serde(skip_deserializing)]
    pub branch: String,
    /// The task's own commit (tip of its branch), if it changed anything.
    #[serde(with = "oid_hex::option")]
    pub commit: Option<Oid>,
    /// The commit the task's last attempt started from.
    #[serde(with = "oid_hex::option")]
    pub start: Option<Oid>,
    /// The `--no-ff` merge commit that brought the task in.
    #[serde(with = "oid_hex::option")]
    pub merge_commit: Option<Oid>,
    pub attempts: u32,
    pub duration_ms: u64,
    /// Model tokens, metered from the API's answers (swarm's gateway, the built-in worker).
    pub tokens: Tokens,
    /// Model round-trips (LLM worker), or the turns an `--agent` reported.
    #[serde(default)]
    pub turns: u32,
    /// What its model answers cost at your prices, in US dollars (metered).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_usd: f64,
    /// Model answers metered.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub requests: u32,
    /// What an `--agent` said of its own spend: kept for comparison, never counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<Reported>,
    pub changed_files: Vec<RepoPath>,
    /// Those of `changed_files` the task deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted_files: Vec<RepoPath>,
    pub summary: Option<String>,
    pub error: Option<String>,
    pub output_tail: Option<String>,
    /// Is the task branch still there (kept for inspection or a later merge)?
    #[serde(default)]
    pub branch_kept: bool,
    /// The log of what failed last (the worker's, `--verify`'s, the agent's transcript).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<std::path::PathBuf>,
    /// What the sandbox probably did to a failed task, and the setting that would allow it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Connections its processes asked swarm's proxy for (with `--allow-domain`).
    #[serde(default, skip_serializing_if = "NetworkUse::is_empty")]
    pub network: NetworkUse,
    /// Not run because the run's budget (`--max-tokens`, `--max-cost`) was spent: `swarm
    /// resume` runs it (with a larger budget).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub over_budget: bool,
    /// Its candidates, with `--tries` or `--best-of` (empty otherwise): the task's spend is
    /// theirs added up, its change the winner's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<CandidateReport>,
    /// How the winner was chosen, once it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    /// The files of its last merge that merge drivers were given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merge_drivers: Vec<DriverMerge>,
    /// Its merge conflicted under git's line merge and the drivers resolved it: a re-run
    /// (`--on-conflict retry`) or a repair spared.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rerun_spared: bool,
    /// Skipped in `--review` by the person reviewing (not a failure: the run's exit code
    /// does not count it); its branch is kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review_skipped: bool,
    /// Why it ran in a process of its own after a process over several tasks failed
    /// (`--per-process`): the line of that process's output that named its file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_alone: Option<String>,
}

impl TaskReport {
    /// What the task changed, in words: `2 file(s) changed`, `1 file(s) changed, 1 deleted
    /// (old.txt)`.
    pub fn change_words(&self) -> String {
        let mut words = format!("{} file(s) changed", self.changed_files.len());
        if !self.deleted_files.is_empty() {
            let names: Vec<String> = self
                .deleted_files
                .iter()
                .take(3)
                .map(|p| p.display())
                .collect();
            words.push_str(&format!(
                ", {} deleted ({}{})",
                self.deleted_files.len(),
                names.join(", "),
                if self.deleted_files.len() > 3 {
                    ", …"
                } else {
                    ""
                }
            ));
        }
        words
    }

    /// Its branch names, derived from the ids: the task's own, or with candidates each
    /// candidate's, the task's being the winner's (else the last candidate's).
    pub(crate) fn name_branches(&mut self, run: &RunId) {
        for c in &mut self.candidates {
            c.branch = run.branch(&RunBranch::Candidate(self.id.clone(), c.number));
        }
        let winner = self.selection.as_ref().map(|s| s.winner);
        self.branch = match (winner, self.candidates.last()) {
            (Some(k), _) => run.worker_branch(&self.id, Some(k)),
            (None, Some(last)) => last.branch.clone(),
            (None, None) => run.task_branch(&self.id),
        };
    }

    /// Counts what one of its workers (an attempt, a candidate, the judge) was charged.
    pub(crate) fn add_spend(&mut self, tokens: Tokens, cost_usd: f64, requests: u32) {
        self.tokens.add(tokens);
        self.cost_usd += cost_usd;
        self.requests = self.requests.saturating_add(requests);
    }

    /// The winning candidate's record, once chosen.
    pub fn winner(&self) -> Option<&CandidateReport> {
        let k = self.selection.as_ref()?.winner;
        self.candidates.iter().find(|c| c.number == k)
    }

    /// Back to pending, to run again. A task that was interrupted or stopped for the budget
    /// keeps the candidates that finished; one that failed runs every candidate again.
    pub fn retry_from_scratch(&mut self) {
        let keeps = matches!(
            self.status,
            TaskStatus::Pending | TaskStatus::Running | TaskStatus::Interrupted
        ) || self.over_budget;
        for c in self
            .candidates
            .iter_mut()
            .filter(|c| !(keeps && c.finished()))
        {
            c.forget();
        }
        self.selection = None;
        self.status = TaskStatus::Pending;
        self.error = None;
        self.attempts = 0;
        self.branch_kept = false;
        self.over_budget = false;
        self.review_skipped = false;
    }

    /// Does `swarm resume` work on this task? (`rerun_failed`: `--failed`.) A task skipped
    /// for the run's budget is resumed too.
    pub fn left_to_do(&self, rerun_failed: bool) -> bool {
        self.status.left_to_do(rerun_failed) || self.over_budget
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Running,
    Finished,
    Interrupted,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Totals {
    pub tasks: usize,
    pub merged: usize,
    pub no_change: usize,
    pub failed: usize,
    pub conflict: usize,
    pub timeout: usize,
    /// Not run or not merged for a reason of the run (`--on-conflict fail`, a budget,
    /// `--review`).
    pub skipped: usize,
    /// Stopped by Ctrl-C (`swarm resume` runs them again).
    #[serde(default)]
    pub interrupted: usize,
    /// Not started yet, or running.
    #[serde(default)]
    pub unfinished: usize,
    /// Finished, their change waiting on their branch, not merged (`--dry-run`, `--review`
    /// before the merge): `swarm merge RUN` merges them.
    #[serde(default)]
    pub unmerged: usize,
    /// Merged, then left out because they break `--verify-merged`.
    #[serde(default)]
    pub excluded: usize,
    /// Of the merged, those that needed more than one attempt (a conflict retried).
    #[serde(default)]
    pub retried: usize,
    /// Candidates started (`--tries`, `--best-of`; 0 without them).
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub candidates: usize,
    /// Tasks merged or unchanged whose first candidate finished and did not pass: those that
    /// needed more than one. A first candidate stopped unfinished, because the others had
    /// already agreed, is not counted: the task did not need the others for it.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub rescued: usize,
    /// Of the merged, those whose merge a driver decided for at least one file.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub merged_by_driver: usize,
    /// Of the merged, those that git's line merge left in conflict and the drivers resolved:
    /// each a re-run (or repair) spared.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub reruns_spared: usize,
    /// Model tokens, metered.
    pub tokens: Tokens,
    /// What the model answers cost at your prices, in US dollars (metered).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_usd: f64,
    /// Model answers metered.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub requests: u32,
    pub duration_ms: u64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_zero_usize(v: &usize) -> bool {
    *v == 0
}

impl Totals {
    /// The counts of tasks that did not make it, by kind, with their labels: the same
    /// categories everywhere (the summary, `swarm status`, the step summary).
    pub fn problems(&self) -> [(usize, &'static str); 8] {
        [
            (self.failed, "failed"),
            (self.conflict, "conflict"),
            (self.timeout, "timeout"),
            (self.excluded, "excluded"),
            (self.skipped, "skipped"),
            (self.interrupted, "interrupted"),
            (self.unfinished, "not finished"),
            (self.unmerged, "finished, not merged"),
        ]
    }

    /// Every count, in words: "18 merged (9 after a retry), 2 no change, 1 timeout".
    pub fn describe(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.retried > 0 {
            notes.push(format!("{} after a retry", self.retried));
        }
        if self.merged_by_driver > 0 {
            notes.push(match self.reruns_spared {
                0 => format!("{} by a merge driver", self.merged_by_driver),
                n => format!(
                    "{} by a merge driver, {n} re-run(s) spared",
                    self.merged_by_driver
                ),
            });
        }
        let merged = match notes.is_empty() {
            true => format!("{} merged", self.merged),
            false => format!("{} merged ({})", self.merged, notes.join("; ")),
        };
        let mut parts = vec![merged, format!("{} no change", self.no_change)];
        parts.extend(self.problem_words());
        parts
    }

    /// The problems there are, in words: "1 failed", "2 interrupted".
    pub fn problem_words(&self) -> Vec<String> {
        self.problems()
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect()
    }

    /// Tasks that neither merged nor needed no change.
    pub fn not_ok(&self) -> usize {
        self.problems().iter().map(|(n, _)| n).sum()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub run_id: RunId,
    pub instruction: String,
    #[serde(with = "oid_hex")]
    pub base: Oid,
    pub into: String,
    /// Where `into` pointed when the run started (the first parent of the first merge).
    #[serde(with = "oid_hex")]
    pub into_start: Oid,
    /// The final integration tip, or null when nothing was merged.
    #[serde(with = "oid_hex::option")]
    pub result: Option<Oid>,
    /// Was `into` moved to `result`? If not, `result_branch` holds the result.
    pub into_updated: bool,
    /// `swarm/<RUN-ID>/result` when it holds the result (like `branch`, never read back).
    pub result_branch: Option<String>,
    /// When the target was not moved: the commands that merge the result by hand, for the
    /// target as it was at the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_hint: Option<String>,
    pub state: RunState,
    pub started_at: String,
    pub tasks: Vec<TaskReport>,
    pub totals: Totals,
    /// What `--verify-merged` found, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_merged: Option<VerifyMergedReport>,
    /// How the workers' worktrees were made: `overlay` or `pool` (`--worktrees`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktrees: Option<String>,
    /// With overlay worktrees, where their layers were kept: `memory` (a tmpfs) or `disk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<String>,
    /// The most tasks one worker process ran (`--per-process`; 1: a process per task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_process: Option<usize>,
    /// Tracked files the pathspecs name that are in no task (binary, symlink, submodule,
    /// left by the planner): the plan's `skipped`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_files: Vec<SkippedFile>,
}

/// A tracked file the pathspecs name that is in no task, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    pub file: RepoPath,
    pub reason: String,
}

/// The outcome of `--verify-merged`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifyMergedReport {
    pub command: String,
    /// Does the final result pass the check?
    pub passed: bool,
    /// How many times the check ran.
    pub runs: u32,
    /// The tasks left out because they break the check.
    pub excluded: Vec<TaskId>,
    /// Why the result was not verified (the check fails on the base, or leaving tasks out
    /// did not make it pass); the target is not moved then.
    pub problem: Option<String>,
}

impl Report {
    /// A report from its JSON (report.json, a shard record): the ids are checked by their
    /// types, and branch names are derived from them, never taken from the text.
    pub fn parse(json: &[u8]) -> serde_json::Result<Report> {
        let mut report: Report = serde_json::from_slice(json)?;
        for t in &mut report.tasks {
            t.name_branches(&report.run_id);
        }
        if report.result_branch.is_some() {
            report.result_branch = Some(report.run_id.branch(&RunBranch::Result));
        }
        Ok(report)
    }

    /// Every task's index, in order.
    pub fn indices(&self) -> impl DoubleEndedIterator<Item = TaskIdx> + Clone + use<> {
        TaskIdx::all(self.tasks.len())
    }

    pub fn task(&self, idx: TaskIdx) -> &TaskReport {
        &self.tasks[idx.get()]
    }

    pub fn task_mut(&mut self, idx: TaskIdx) -> &mut TaskReport {
        &mut self.tasks[idx.get()]
    }

    /// The report with the secrets swarm knows redacted from its strings
    /// ([`crate::secrets`]).
    pub fn redacted(self) -> Report {
        let Ok(json) = serde_json::to_vec(&self) else {
            return self;
        };
        match crate::secrets::redact_bytes(&json) {
            std::borrow::Cow::Borrowed(_) => self,
            std::borrow::Cow::Owned(clean) => Report::parse(&clean).unwrap_or(self),
        }
    }

    /// Forgets how the run ended, for a run that goes on (resume, merge): running again, its
    /// result decided anew at the end.
    pub fn reset_outcome(&mut self) {
        self.state = RunState::Running;
        self.result = None;
        self.result_branch = None;
        self.merge_hint = None;
        self.into_updated = false;
        self.verify_merged = None;
    }

    pub fn compute_totals(&mut self, duration_ms: u64) {
        let mut t = Totals {
            tasks: self.tasks.len(),
            duration_ms,
            ..Totals::default()
        };
        for task in &self.tasks {
            match task.status {
                TaskStatus::Merged => {
                    t.merged += 1;
                    t.retried += usize::from(task.attempts > 1);
                    t.merged_by_driver += usize::from(task.merge_drivers.iter().any(|d| d.merged));
                    t.reruns_spared += usize::from(task.rerun_spared);
                }
                TaskStatus::NoChange => t.no_change += 1,
                TaskStatus::Failed => t.failed += 1,
                TaskStatus::Conflict => t.conflict += 1,
                TaskStatus::Timeout => t.timeout += 1,
                TaskStatus::Skipped => t.skipped += 1,
                TaskStatus::Interrupted => t.interrupted += 1,
                TaskStatus::Excluded => t.excluded += 1,
                TaskStatus::Pending | TaskStatus::Running => t.unfinished += 1,
                TaskStatus::Done => t.unmerged += 1,
            }
            t.tokens.add(task.tokens);
            t.cost_usd += task.cost_usd;
            t.requests = t.requests.saturating_add(task.requests);
            t.candidates += task.candidates.iter().filter(|c| c.start.is_some()).count();
            let first_failed = task
                .candidates
                .first()
                .is_some_and(|c| c.finished() && !c.passed());
            t.rescued += usize::from(task.status.is_success() && first_failed);
        }
        self.totals = t;
    }

    /// Every task merged, needed no change, or was skipped in `--review` on purpose.
    pub fn all_succeeded(&self) -> bool {
        self.tasks
            .iter()
            .all(|t| t.status.is_success() || t.review_skipped)
    }
}
