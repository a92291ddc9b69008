//! The errors of a command, whatever layer they come from: the user's input (exit 2) or swarm
//! itself failing ([`AppError::Internal`], exit 3). Each says its message and the hint that
//! names the fix ([`super::hint`]); the front ends show both and choose the exit code.

use crate::git::repo::RepoError;
use crate::git::shard::RemoteError;
use crate::ids::{IdError, RunId};
use crate::orchestrator::{RunError, RunMode};
use crate::plan::PlanError;
use crate::settings::SettingsError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Repo(RepoError),
    #[error(transparent)]
    Plan(PlanError),
    #[error(transparent)]
    Id(#[from] IdError),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error(transparent)]
    Land(crate::land::LandError),
    #[error("no swarm run '{0}' in this repository")]
    NoSuchRun(String),
    #[error("'{selector}' matches {count} runs")]
    AmbiguousRun { selector: String, count: usize },
    #[error("no task '{task}' in run {run}")]
    NoSuchTask { task: String, run: RunId },
    #[error("'{0}' matches several tasks")]
    AmbiguousTask(String),
    /// `swarm diff RUN TASK --candidate K` of a task that had no candidate K.
    #[error("task {task} has no candidate {candidate}{}", match .have.is_empty() {
        true => " (it ran without --tries or --best-of)".to_string(),
        false => format!(" (its candidates: {})", .have),
    })]
    NoSuchCandidate {
        task: String,
        candidate: u32,
        have: String,
    },
    /// Another swarm process holds the run (`doing`: what could not be done).
    #[error("run {run} is still running in another swarm process")]
    RunBusy { run: RunId, doing: Busy },
    /// The run's plan.json and report.json do not describe the same run (edited by hand?).
    #[error("the records of run {run} disagree: report.json {problem}")]
    RunRecords { run: RunId, problem: String },
    /// The run was stopped (killed) before it wrote its first report: nothing ran.
    #[error("run {0} was stopped before it started any task: there is nothing to resume")]
    NeverStarted(RunId),
    /// The program an `--exec` command starts with is not on PATH.
    #[error("`{0}`, the program --exec starts with, is not found on PATH")]
    ExecNotFound(String),
    /// `swarm resume --exec` of a run whose worker is an `--agent`.
    #[error("run's worker is the agent {0}: --exec cannot replace it")]
    ExecOverAgent(String),
    /// `--merge-with TOOL` that cannot be found or asked what it merges.
    #[error("--merge-with {tool}: {problem}")]
    MergeTool { tool: String, problem: String },
    /// A task of several files (`--batch`, `--split llm`) for a command that names only
    /// `$SWARM_FILE`, which holds the first.
    #[error(
        "task {task} has {files} files, but {who} names only $SWARM_FILE, which holds the \
         first: the others would be {lost}",
        who = .role.who, lost = .role.lost
    )]
    FirstFileOnly {
        task: String,
        files: usize,
        role: Role,
    },
    /// `--per-process N` (several tasks a process) for a command that names only
    /// `$SWARM_FILE`, which holds the process's first file.
    #[error(
        "--per-process {per_process} gives a process several tasks, but {who} names only \
         $SWARM_FILE, which holds the first task's file: the others would be {lost}",
        who = .role.who, lost = .role.lost
    )]
    FirstFileOfProcess {
        per_process: crate::settings::PerProcess,
        role: Role,
    },
    /// `--verify-merged` naming a task's file variables, which it never gets.
    #[error(
        "--verify-merged names $SWARM_FILE or $SWARM_FILES, but it checks the merged result, \
         not a task: it gets no task's files, and would check nothing"
    )]
    FilesOfNoTask,
    /// A command that expands a file variable unquoted, for a file name the shell would split
    /// or glob.
    #[error(
        "{who} expands ${var} unquoted, and {file:?} holds a blank or a glob character: the \
         shell would split or expand it",
        who = .role.who
    )]
    UnquotedFileVar {
        var: &'static str,
        file: String,
        role: Role,
    },
    /// No pathspec, and the instruction names tracked files: the instruction forgotten.
    #[error(
        "no pathspec, and the instruction '{instruction}' names {matches} tracked file(s): the \
         run would work on every tracked file"
    )]
    InstructionIsAPathspec { instruction: String, matches: usize },
    /// No pathspec (and no --grep): every tracked file, which a script must ask for.
    #[error("no pathspec: the run would work on every tracked file ({files} file(s))")]
    NoPathspec { files: usize },
    #[error("nothing to clean for run '{0}'")]
    NothingToClean(RunId),
    /// Neither `--exec` nor `--model` (for a plan file: `for_plan`).
    #[error("no worker: neither --exec nor --model is given")]
    NoWorker { for_plan: bool },
    #[error("--agent {name}: `{binary}` is not installed (not on PATH)")]
    AgentMissing {
        name: String,
        binary: String,
        install: String,
    },
    /// A budget with an agent whose spend swarm cannot meter (its own login, or no API
    /// declared).
    #[error("--max-cost / --max-tokens: the spend of --agent {agent} cannot be metered ({why})")]
    BudgetUnmetered { agent: String, why: String },
    #[error("--max-cost: no price is set, so the run's cost cannot be counted")]
    BudgetUnpriced,
    #[error("--repair needs --verify: the check whose failure the model repairs")]
    RepairWithoutVerify,
    #[error("--per-process {0}: {1}")]
    PerProcess(usize, &'static str),
    #[error("{0} needs a model, and none is configured")]
    ModelNeeded(&'static str),
    #[error("{what} '{url}' cannot be sent a key: {why}")]
    BadBaseUrl {
        /// `--base-url`, or the endpoint of an agent's API.
        what: String,
        url: String,
        why: String,
    },
    #[error("no API key for {what} '{model}' at {url}")]
    NoApiKey {
        what: &'static str,
        model: String,
        url: String,
    },
    #[error("--split llm needs a planner model, and none is configured")]
    NoPlannerModel,
    #[error("cannot confine worker processes here: {0}")]
    Sandbox(String),
    #[error(
        "--jobs {jobs} needs swarm to hold up to {needed} open files, and it may hold {allowed} \
         here (the hard `ulimit -n`): {}raise the hard limit (`LimitNOFILE=` for a systemd \
         service, `nofile` in /etc/security/limits.conf, `--ulimit nofile=` for a container)",
        match max_jobs { 0 => String::new(), n => format!("pass -j {n} or fewer, or ") }
    )]
    OpenFiles {
        jobs: usize,
        needed: u64,
        allowed: u64,
        max_jobs: u64,
    },
    #[error("--worktrees overlay cannot be used here: {0}")]
    NoOverlay(String),
    /// The run itself failed (swarm's own failure: exit 3; a busy run becomes
    /// [`AppError::RunBusy`]).
    #[error(transparent)]
    Run(RunError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// What a busy run kept from being done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    Resume,
    Clean,
    RunShard,
    Merge,
    Land,
}

impl From<RepoError> for AppError {
    fn from(e: RepoError) -> Self {
        match e {
            RepoError::Git(e) => AppError::Internal(e.into()),
            other => AppError::Repo(other),
        }
    }
}

impl From<PlanError> for AppError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Git(e) => AppError::Internal(e.into()),
            PlanError::Internal(e) => AppError::Internal(e),
            other => AppError::Plan(other),
        }
    }
}

impl From<crate::land::LandError> for AppError {
    fn from(e: crate::land::LandError) -> Self {
        match e {
            crate::land::LandError::Internal(e) => AppError::Internal(e),
            crate::land::LandError::Remote(e) => AppError::Remote(e),
            other => AppError::Land(other),
        }
    }
}

impl From<git2::Error> for AppError {
    fn from(e: git2::Error) -> Self {
        AppError::Internal(e.into())
    }
}

impl From<std::io::Error> for AppError {
    fn from(e: std::io::Error) -> Self {
        AppError::Internal(e.into())
    }
}

impl From<serde_json::Error> for AppError {
    fn from(e: serde_json::Error) -> Self {
        AppError::Internal(e.into())
    }
}

impl AppError {
    /// Is this the user's input to fix (rather than swarm failing)?
    pub fn is_input(&self) -> bool {
        !matches!(self, AppError::Internal(_) | AppError::Run(_))
    }

    /// The failure of a run in `mode`: another process holding it is the user's to sort out
    /// (what could not be done named after the command), anything else is swarm's.
    pub(crate) fn of_run(e: RunError, mode: RunMode) -> Self {
        match e {
            RunError::Busy { run } => AppError::RunBusy {
                run,
                doing: match mode {
                    RunMode::Resume | RunMode::RerunFailed => Busy::Resume,
                    RunMode::MergeOnly => Busy::Merge,
                    RunMode::Refactor | RunMode::DryRun | RunMode::Review | RunMode::RunShard => {
                        Busy::RunShard
                    }
                },
            },
            other => AppError::Run(other),
        }
    }
}

/// Shorthand for the result of a command's application logic.
pub type AppResult<T> = Result<T, AppError>;

/// Which of a run's commands an error is about, for its words.
#[derive(Debug, Clone, Copy)]
pub struct Role {
    /// How the message names it.
    pub who: &'static str,
    /// What becomes of the files it would not see.
    pub lost: &'static str,
}

impl Role {
    /// The worker's command (`--exec`, an agent's).
    pub const WORKER: Role = Role {
        who: "the command",
        lost: "reported `no change`",
    };
    /// `--verify`.
    pub const CHECK: Role = Role {
        who: "--verify",
        lost: "left unchecked",
    };
}
