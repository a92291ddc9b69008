//! A task's candidates in the report (`--tries`, `--best-of`): what each one did and spent,
//! and how the winner was chosen.

use std::path::PathBuf;

use git2::Oid;
use serde::{Deserialize, Serialize};

use super::{TaskStatus, Tokens, is_zero};
use crate::ids::{CandidateNo, RunBranch, RunId, TaskId, oid_hex};
use crate::repo_path::RepoPath;

/// One candidate of a task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CandidateReport {
    pub number: CandidateNo,
    /// `pending` or `running` while it has not finished; then `done` (it passed, with a
    /// change), `no_change`, `failed`, `timeout`, `skipped` (the budget) or `interrupted`
    /// (Ctrl-C, or stopped once another candidate had won).
    pub status: TaskStatus,
    /// `swarm/<RUN-ID>/<TASK-ID>/c<K>`: derived from the ids, never read back.
    #[serde(skip_deserializing)]
    pub branch: String,
    /// What it ran, when candidates differ (`--agent claude,codex`, `--model a,b`):
    /// `claude`, `codex (gpt-5)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(with = "oid_hex::option")]
    pub commit: Option<Oid>,
    #[serde(with = "oid_hex::option")]
    pub start: Option<Oid>,
    pub changed_files: Vec<RepoPath>,
    /// Lines added and removed (the diffstat of its change).
    #[serde(default)]
    pub insertions: usize,
    #[serde(default)]
    pub deletions: usize,
    pub duration_ms: u64,
    pub tokens: Tokens,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_usd: f64,
    #[serde(default)]
    pub requests: u32,
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

impl CandidateReport {
    pub(crate) fn new(run: &RunId, task: &TaskId, number: CandidateNo) -> Self {
        Self {
            branch: run.branch(&RunBranch::Candidate(task.clone(), number)),
            ..Self::new_unnamed(number)
        }
    }

    /// Back to not run.
    pub(crate) fn forget(&mut self) {
        let branch = std::mem::take(&mut self.branch);
        *self = Self {
            branch,
            ..Self::new_unnamed(self.number)
        };
    }

    fn new_unnamed(number: CandidateNo) -> Self {
        Self {
            number,
            status: TaskStatus::Pending,
            branch: String::new(),
            worker: None,
            commit: None,
            start: None,
            changed_files: Vec::new(),
            insertions: 0,
            deletions: 0,
            duration_ms: 0,
            tokens: Tokens::default(),
            cost_usd: 0.0,
            requests: 0,
            error: None,
            log: None,
        }
    }

    /// Has it finished, its outcome final (not to run again on `swarm resume`)?
    pub fn finished(&self) -> bool {
        matches!(
            self.status,
            TaskStatus::Done | TaskStatus::NoChange | TaskStatus::Failed | TaskStatus::Timeout
        )
    }

    /// Did it pass: finished, in scope, `--verify` passed?
    pub fn passed(&self) -> bool {
        matches!(self.status, TaskStatus::Done | TaskStatus::NoChange)
    }

    /// `+12 -3`, its diffstat in words.
    pub fn diffstat(&self) -> String {
        format!(
            "{} file(s) +{} -{}",
            self.changed_files.len(),
            self.insertions,
            self.deletions
        )
    }
}

/// How the winner among a task's candidates was chosen.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Selection {
    pub winner: CandidateNo,
    /// The step that decided.
    pub by: SelectedBy,
    /// Each step of the selection, in words, in order.
    pub steps: Vec<String>,
}

/// The step of the selection that decided (docs/USAGE.md, "Several candidates per task").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectedBy {
    /// `--tries`: the first candidate that passed.
    FirstToPass,
    /// The only candidate that passed.
    OnlyPassing,
    /// The change most candidates made.
    Agreement,
    /// The smallest change among those tied.
    Size,
    /// `--judge-model` among those still tied.
    Judge,
    /// Still tied with no judge: the lowest number.
    Order,
}

impl SelectedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            SelectedBy::FirstToPass => "first to pass",
            SelectedBy::OnlyPassing => "the only one that passed",
            SelectedBy::Agreement => "agreement",
            SelectedBy::Size => "smallest change",
            SelectedBy::Judge => "judge",
            SelectedBy::Order => "lowest number",
        }
    }
}
