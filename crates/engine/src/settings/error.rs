//! What can be wrong with settings: always the user's input (exit 2). Each error says what
//! fixes it ([`SettingsError::explain`]), for every front end alike.

use std::path::PathBuf;

/// A number setting that must not be zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Jobs,
    Batch,
    PerProcess,
    Timeout,
    MaxTurns,
    IdleTimeout,
    MaxOutputTokens,
    ContextWindow,
    MaxCost,
    MaxTokens,
    Tries,
    BestOf,
    MergeTimeout,
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Count::Jobs => "jobs",
            Count::Batch => "batch",
            Count::PerProcess => "per_process",
            Count::Timeout => "timeout",
            Count::MaxTurns => "max_turns",
            Count::IdleTimeout => "idle_timeout",
            Count::MaxOutputTokens => "max_output_tokens",
            Count::ContextWindow => "context_window",
            Count::MaxCost => "max_cost",
            Count::MaxTokens => "max_tokens",
            Count::Tries => "tries",
            Count::BestOf => "best_of",
            Count::MergeTimeout => "[merge] timeout",
        })
    }
}

impl Count {
    /// The message of a zero given for it, and what fixes it.
    fn explain(self) -> (&'static str, &'static str) {
        match self {
            Count::Jobs => (
                "--jobs must be at least 1",
                "pass -j 1 or more (the default is 4)",
            ),
            Count::Batch => (
                "--batch must be at least 1",
                "pass --batch 1 for one file per task",
            ),
            Count::PerProcess => (
                "--per-process must be at least 1",
                "pass --per-process 1 for a process per task, or auto",
            ),
            Count::Timeout => (
                "--timeout must be at least 1 second",
                "pass --timeout SECS (the default is 600)",
            ),
            Count::MaxTurns => (
                "--max-turns must be at least 1",
                "pass --max-turns N (the default is 50)",
            ),
            Count::IdleTimeout => (
                "--idle-timeout must be at least 1 second",
                "pass --idle-timeout SECS (the default is 300)",
            ),
            Count::MaxOutputTokens => (
                "--max-output-tokens must be at least 1",
                "pass --max-output-tokens N, or leave it out for the server's default",
            ),
            Count::MaxCost => (
                "--max-cost must be more than 0",
                "pass --max-cost USD, e.g. --max-cost 5",
            ),
            Count::MaxTokens => (
                "--max-tokens must be at least 1",
                "pass --max-tokens N, the tokens the whole run may spend, or leave it out",
            ),
            Count::Tries => (
                "--tries must be at least 1",
                "pass --tries 2 or more for a second candidate when the first fails",
            ),
            Count::BestOf => (
                "--best-of must be at least 1",
                "pass --best-of 2 or more for several candidates per task",
            ),
            Count::MergeTimeout => (
                "[merge] timeout must be at least 1 second",
                "set it to the seconds a merge driver may run (the default is 60), or leave it out",
            ),
            Count::ContextWindow => (
                "[model] context_window must be at least 1",
                "set it to the model's context window in tokens, or leave it out",
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{0} must be at least 1")]
    Zero(Count),
    #[error("invalid settings in {path}: {message}", path = .path.display())]
    InvalidFile { path: PathBuf, message: String },
    #[error("cannot read {path}: {source}", path = .path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no agent '{name}' (known: {known})")]
    UnknownAgent { name: String, known: String },
    #[error(
        "[agents.{name}] api = \"{api}\" is not an API swarm's gateway serves (known: {known})"
    )]
    UnknownApi {
        name: String,
        api: String,
        known: String,
    },
    #[error("[model] tool_choice = \"{0}\" is not one of auto, required, none")]
    ToolChoice(String),
    #[error("--allow-domain / [sandbox] allow_domains: {0}")]
    AllowDomain(String),
    #[error("[model] price and [model.prices]: each rate must be a number of dollars, 0 or more")]
    Price,
    #[error("[worktree] copy: {0}")]
    CopyPath(String),
    #[error("--ok-exit-codes / [run] ok_exit_codes: {0} is not an exit status (0 to 255)")]
    ExitCode(i32),
    #[error("{0}")]
    Candidates(CandidatesProblem),
    /// A command setting that is empty or blank.
    #[error("{0} is empty: there is no command to run")]
    EmptyCommand(String),
}

/// What is wrong with `--tries`, `--best-of` and `--judge-model` together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidatesProblem {
    /// Both `--tries` and `--best-of`.
    Both,
    /// More than [`super::policy::Candidates::MAX`].
    TooMany(u32),
    /// With several tasks per worker process (`--per-process N`).
    PerProcess,
    /// `--judge-model` without `--best-of` 2 or more.
    JudgeAlone,
    /// A list of N workers (`--agent a,b`, `--model a,b`) with fewer than N candidates.
    Unused(usize),
    /// `--agent a,b` with a `--model` list of another length.
    Models { agents: usize, models: usize },
}

impl CandidatesProblem {
    fn hint(self) -> &'static str {
        match self {
            CandidatesProblem::Both => {
                "pass --tries N (one after another) or --best-of N (at once), not both"
            }
            CandidatesProblem::TooMany(_) => "pass --tries or --best-of 8 or fewer",
            CandidatesProblem::PerProcess => {
                "leave --per-process out (auto gives each task its own process then)"
            }
            CandidatesProblem::JudgeAlone => "add --best-of 2 or more, or leave --judge-model out",
            CandidatesProblem::Unused(_) => {
                "give --best-of N or --tries N with N at least the list's length; candidate K \
                 runs the K-th, in turn"
            }
            CandidatesProblem::Models { .. } => {
                "give one --model per agent, in the same order (--agent claude,codex --model \
                 claude-sonnet-4,gpt-5), or leave --model out"
            }
        }
    }
}

impl std::fmt::Display for CandidatesProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CandidatesProblem::Both => f.write_str("--tries and --best-of cannot be used together"),
            CandidatesProblem::TooMany(n) => write!(
                f,
                "--tries / --best-of {n}: a task gets at most {} candidates",
                super::policy::Candidates::MAX
            ),
            CandidatesProblem::PerProcess => f.write_str(
                "--tries / --best-of give each task worker processes of its own; they cannot \
                 be used with --per-process N above 1",
            ),
            CandidatesProblem::JudgeAlone => {
                f.write_str("--judge-model compares the candidates of --best-of N (N at least 2)")
            }
            CandidatesProblem::Unused(n) => write!(
                f,
                "a list of {n} workers (--agent or --model) runs one a candidate: it needs at \
                 least {n} candidates"
            ),
            CandidatesProblem::Models { agents, models } => write!(
                f,
                "--agent names {agents} agents but --model names {models} models"
            ),
        }
    }
}

impl SettingsError {
    /// The message, naming the flags (`--jobs`), and what fixes it.
    pub fn explain(&self) -> (String, &'static str) {
        let e = self;
        let (message, hint) = match e {
            SettingsError::Zero(count) => {
                let (message, hint) = count.explain();
                (message.to_string(), hint)
            }
            SettingsError::InvalidFile { .. } => (
                e.to_string(),
                "fix the file; its tables are [run], [worktree], [model] and [sandbox] (docs/USAGE.md)",
            ),
            SettingsError::Unreadable { .. } => (e.to_string(), "check the file's permissions"),
            SettingsError::ExitCode(_) => (
                e.to_string(),
                "list exit statuses from 0 to 255, e.g. --ok-exit-codes 0,1",
            ),
            SettingsError::UnknownAgent { .. } => (
                e.to_string(),
                "`swarm agents` lists them; define your own as [agents.NAME] in your config file",
            ),
            SettingsError::UnknownApi { .. } => (
                e.to_string(),
                "name one of them, or leave api out (the agent then gets what pass_env names, as \
             it is: docs/AGENTS.md)",
            ),
            SettingsError::Price => (
                e.to_string(),
                "write e.g. price = { prompt = 3, completion = 15 } (US dollars per million tokens)",
            ),
            SettingsError::ToolChoice(_) => (
                e.to_string(),
                "set [model] tool_choice = \"auto\" (the default), \"required\" or \"none\"",
            ),
            SettingsError::AllowDomain(_) => (
                e.to_string(),
                "pass a domain name, e.g. --allow-domain api.anthropic.com (docs/SECURITY.md)",
            ),
            SettingsError::Candidates(problem) => (e.to_string(), problem.hint()),
            SettingsError::EmptyCommand(_) => (
                e.to_string(),
                "give it the command to run (quoted, e.g. --verify 'cargo check'), or leave it out",
            ),
            SettingsError::CopyPath(_) => (
                e.to_string(),
                "list files of your checkout by their path relative to its root, e.g. copy = [\".env\"]",
            ),
        };
        (message, hint)
    }
}
