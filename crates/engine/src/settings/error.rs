//! What can be wrong with settings: always the user's input (exit 2). The messages name the
//! settings; the command line adds how to fix them (`crate::cli`), since only it knows
//! which flag or file the user wrote.

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
        })
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
}
