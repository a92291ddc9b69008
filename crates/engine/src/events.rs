//! What happens during a run, as events.
//!
//! The engine never prints. It emits [`Event`]s into an [`EventSink`], which appends each one
//! to `events.jsonl` in the run directory and hands it to a [`Reporter`] chosen by the CLI (a
//! live view on a terminal, plain lines otherwise).

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::ids::{RunId, TaskId};
use crate::repo_path::RepoPath;
use crate::report::TaskStatus;

/// What a `model_usage` charge is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageBasis {
    /// The usage the answer metered.
    #[default]
    Metered,
    /// The request's reservation: the answer's usage could not be trusted.
    Reservation,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: RunId,
        base: String,
        into: String,
        tasks: usize,
        jobs: usize,
        /// `overlay` (views of one checkout) or `pool` (full checkouts).
        worktrees: String,
        /// The most tasks one worker process runs (`--per-process`).
        #[serde(default = "one")]
        per_process: usize,
    },
    WorktreeCreated {
        worktree: String,
    },
    TaskStarted {
        task: TaskId,
        files: Vec<RepoPath>,
        attempt: u32,
        worktree: String,
        /// The candidate's number (`--tries`, `--best-of`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        candidate: Option<u32>,
    },
    /// A candidate of a task ended (`--tries`, `--best-of`); its task finishes once the
    /// winner is chosen.
    CandidateFinished {
        task: TaskId,
        candidate: u32,
        status: TaskStatus,
        error: Option<String>,
        insertions: usize,
        deletions: usize,
        cost_usd: f64,
    },
    /// A task's winner among its candidates, and each step that chose it.
    CandidateChosen {
        task: TaskId,
        candidate: u32,
        by: crate::report::SelectedBy,
        steps: Vec<String>,
    },
    /// One worker process starts for several tasks (`--per-process`); each of them still has
    /// its `task_started`, its commit and its merge.
    GroupStarted {
        tasks: Vec<TaskId>,
        worktree: String,
    },
    /// A process over several tasks did not succeed for all of them: nothing of it is kept,
    /// and its tasks run again in smaller processes, down to one task per process: those
    /// whose files its failed output named as a diagnostic alone (`alone`, with the line that
    /// named each in `named_by`), the others together; or, when it named none, in two halves.
    GroupSplit {
        tasks: Vec<TaskId>,
        alone: Vec<TaskId>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        named_by: Vec<String>,
        error: String,
        log: Option<String>,
    },
    /// A coarse step of a running task, for the live view ("setup", "running", "committing").
    TaskStep {
        task: TaskId,
        step: String,
    },
    TaskFinished {
        task: TaskId,
        status: TaskStatus,
        changed_files: Vec<RepoPath>,
        duration_ms: u64,
        error: Option<String>,
        /// What this attempt spent (model tokens, and US dollars where known).
        #[serde(default)]
        tokens: u64,
        #[serde(default)]
        cost_usd: f64,
    },
    /// A request to the model (LLM worker).
    ModelRequest {
        task: TaskId,
        turn: u32,
    },
    /// A model answer's usage, metered by swarm (its gateway, or the built-in worker's own
    /// requests): what the run's budgets count.
    ModelUsage {
        task: Option<TaskId>,
        model: String,
        prompt: u64,
        completion: u64,
        /// `None` when no price is set for the model.
        cost_usd: Option<f64>,
        /// What the charge is: the answer's own usage, or (an answer cut off, without a
        /// usage, too large to read) the request's whole reservation.
        #[serde(default)]
        basis: UsageBasis,
    },
    /// A request swarm's model gateway did not forward: an operation it does not meter, or a
    /// request its budget cannot cover.
    GatewayRefused {
        task: TaskId,
        /// `POST /anthropic/v1/files`: the method and the path the agent asked for.
        request: String,
        /// The HTTP status the agent got (404, 402, 401…).
        status: u16,
        reason: String,
    },
    /// A failed model request that will be tried again.
    ModelRetry {
        task: TaskId,
        attempt: u32,
        wait_ms: u64,
        reason: String,
    },
    /// The model called a tool (started).
    ToolCall {
        task: TaskId,
        tool: String,
        path: Option<String>,
    },
    /// A tool call finished; `ok` is false when the tool refused or failed (the model read
    /// `error: …`).
    ToolResult {
        task: TaskId,
        tool: String,
        ok: bool,
    },
    /// A decision on a command the built-in worker asked to `run` (the audit trail).
    Approval {
        task: TaskId,
        command: String,
        allowed: bool,
        /// What allowed it (`--allow-run` or the matching `[sandbox] allow_run` pattern).
        rule: Option<String>,
    },
    Merged {
        task: TaskId,
        commit: String,
        /// Merged by applying the task's paths to the integration tree (no three-way merge
        /// was needed).
        fast_path: bool,
    },
    Conflict {
        task: TaskId,
        paths: Vec<RepoPath>,
        action: ConflictAction,
    },
    /// A merge driver was given a file of a task's merge (`.gitattributes`' `merge=NAME`, or
    /// `--merge-with`); `merged` false: the file is a conflict, for `error`.
    MergeDriver {
        task: TaskId,
        path: RepoPath,
        driver: String,
        merged: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Warning {
        task: Option<TaskId>,
        message: String,
    },
    /// A connection a confined process asked swarm's allow-list proxy for (`--allow-domain`).
    Network {
        /// The task whose process asked (none for `--verify-merged`).
        task: Option<TaskId>,
        domain: String,
        port: u16,
        verdict: NetworkVerdict,
    },
    /// One run of `--verify-merged` on a commit of the integration branch.
    VerifyMerged {
        commit: String,
        role: CheckRole,
        passed: bool,
        /// How many times the check has run so far in this run.
        runs: u32,
    },
    /// A merged task left out of the result because it breaks `--verify-merged`.
    Excluded {
        task: TaskId,
        reason: String,
    },
    TargetUpdated {
        into: String,
        result: String,
    },
    TargetNotUpdated {
        into: String,
        result_branch: String,
        reason: String,
        /// How to merge the result by hand.
        hint: String,
    },
    Cleanup {
        removed_worktrees: usize,
        deleted_branches: usize,
        kept_branches: Vec<String>,
    },
    RunFinished {
        result: Option<String>,
        merged: usize,
        failed: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkVerdict {
    Allowed,
    Refused,
}

/// What the run does with a task whose merge conflicted (`--on-conflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictAction {
    /// Run again on the integration tip after the first wave.
    Retry,
    /// The model resolves the conflicted merge after the first wave.
    Repair,
    /// Leave it out; its branch stays.
    Skip,
    /// Stop merging (`--on-conflict fail`).
    Stop,
}

impl ConflictAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ConflictAction::Retry => "retry",
            ConflictAction::Repair => "repair",
            ConflictAction::Skip => "skip",
            ConflictAction::Stop => "stop",
        }
    }
}

/// Which commit a run of `--verify-merged` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckRole {
    /// The merged tip.
    Result,
    /// Where the target started, to tell a broken check from a broken task.
    Base,
    /// A merge in the middle of the chain, looking for the first that breaks the check.
    Bisect,
}

impl CheckRole {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckRole::Result => "result",
            CheckRole::Base => "base",
            CheckRole::Bisect => "bisect",
        }
    }
}

impl Event {
    pub fn task(&self) -> Option<&TaskId> {
        match self {
            Event::TaskStarted { task, .. }
            | Event::CandidateFinished { task, .. }
            | Event::CandidateChosen { task, .. }
            | Event::TaskStep { task, .. }
            | Event::TaskFinished { task, .. }
            | Event::ModelRequest { task, .. }
            | Event::ModelRetry { task, .. }
            | Event::ToolCall { task, .. }
            | Event::ToolResult { task, .. }
            | Event::Approval { task, .. }
            | Event::Merged { task, .. }
            | Event::MergeDriver { task, .. }
            | Event::Excluded { task, .. }
            | Event::GatewayRefused { task, .. }
            | Event::Conflict { task, .. } => Some(task),
            Event::Warning { task, .. }
            | Event::Network { task, .. }
            | Event::ModelUsage { task, .. } => task.as_ref(),
            Event::RunStarted { .. }
            | Event::WorktreeCreated { .. }
            | Event::GroupStarted { .. }
            | Event::GroupSplit { .. }
            | Event::VerifyMerged { .. }
            | Event::TargetUpdated { .. }
            | Event::TargetNotUpdated { .. }
            | Event::Cleanup { .. }
            | Event::RunFinished { .. } => None,
        }
    }
}

/// Shows events to a person or a program; implemented by the CLI.
pub trait Reporter: Send + Sync {
    fn on_event(&self, event: &Event);
}

#[derive(Serialize)]
struct Line<'a> {
    ts: f64,
    #[serde(flatten)]
    event: &'a Event,
}

pub struct EventSink {
    /// `events.jsonl` of the run, and the `--events` file if any.
    logs: Mutex<Vec<BufWriter<File>>>,
    reporter: Box<dyn Reporter>,
}

impl EventSink {
    pub fn new(reporter: Box<dyn Reporter>) -> Self {
        Self {
            logs: Mutex::new(Vec::new()),
            reporter,
        }
    }

    /// Also appends every event to `path` as a JSON line: the file of `--events`, where the
    /// user wants it.
    pub fn log_to(&self, path: &Path) -> std::io::Result<()> {
        self.log_to_file(File::options().create(true).append(true).open(path)?);
        Ok(())
    }

    /// Also appends every event to the run's own `events.jsonl` (never through a link).
    pub fn log_to_run_file(&self, path: &Path) -> std::io::Result<()> {
        self.log_to_file(crate::state::append_file(path)?);
        Ok(())
    }

    fn log_to_file(&self, file: File) {
        if let Ok(mut logs) = self.logs.lock() {
            logs.push(BufWriter::new(file));
        }
    }

    /// Writes `event` to the event logs and shows it, secrets redacted from both.
    pub fn emit(&self, event: Event) {
        let event = crate::secrets::redact_value(&event).unwrap_or(event);
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        if let Ok(mut logs) = self.logs.lock() {
            let line = serde_json::to_vec(&Line { ts, event: &event });
            for w in logs.iter_mut() {
                // An event log that cannot be written must not stop the run; tracing says why.
                let written = match &line {
                    Ok(line) => w
                        .write_all(line)
                        .and_then(|()| w.write_all(b"\n"))
                        .and_then(|()| w.flush()),
                    Err(e) => Err(std::io::Error::other(e.to_string())),
                };
                if let Err(e) = written {
                    tracing::warn!("cannot append an event: {e}");
                }
            }
        }
        self.reporter.on_event(&event);
    }
}

fn one() -> usize {
    1
}
