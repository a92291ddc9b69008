//! The one place where an error becomes what the user reads: `error: …`, a `hint: …` that
//! names the fix, and the exit code: 2 for the user's input (nothing was changed), 3 when
//! swarm itself failed. The engine's errors say their own message and hint (the MCP server
//! answers the same words); [`CommandError`] adds what only the command line decides.

use std::path::PathBuf;

use crate::exit;
use swarm_engine::app::AppError;

/// An error of a command: the engine's, or one only the command line makes (a terminal, a
/// flag, a command name).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandError {
    #[error(transparent)]
    App(#[from] AppError),
    /// `swarm man NAME` of no command.
    #[error("no command '{name}' (the commands: {known})")]
    NoSuchCommand { name: String, known: String },
    #[error("which run should be cleaned?")]
    CleanWhat,
    /// The selection is empty: a typo in CI must not pass as "nothing to do".
    #[error("{0}")]
    NoFiles(String),
    #[error("--shard auto: {0}")]
    ShardAuto(String),
    #[error("--review asks about each task on a terminal, and this is not one")]
    ReviewOffTerminal,
    #[error("--into applies to merging a plan file")]
    IntoWithRun,
    #[error("cannot write --events {}: {source}", .path.display())]
    Events {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Shorthand for the result of a command.
pub(crate) type CommandResult<T> = Result<T, CommandError>;

impl From<std::io::Error> for CommandError {
    fn from(e: std::io::Error) -> Self {
        CommandError::App(e.into())
    }
}

impl From<serde_json::Error> for CommandError {
    fn from(e: serde_json::Error) -> Self {
        CommandError::App(e.into())
    }
}

impl From<anyhow::Error> for CommandError {
    fn from(e: anyhow::Error) -> Self {
        CommandError::App(e.into())
    }
}

impl CommandError {
    /// The message and what fixes it.
    fn explain(&self) -> (String, Option<String>) {
        let hint = match self {
            CommandError::App(e) => return (e.message(), e.hint()),
            CommandError::NoSuchCommand { .. } => "`swarm --help` lists the commands",
            CommandError::CleanWhat => "pass a RUN-ID (see `swarm status`) or --all",
            CommandError::NoFiles(_) => {
                "check the pathspecs (quoted, relative to this directory; `git ls-files` lists \
                 what they match) and --grep, or pass --allow-empty if matching nothing is fine"
            }
            CommandError::ShardAuto(_) => {
                "pass the shard as --shard K/N (GitHub Actions: --shard \"${{ matrix.shard }}/N\")"
            }
            CommandError::ReviewOffTerminal => {
                "run with --dry-run, look at the diffs (swarm diff RUN-ID), then merge with swarm \
                 merge RUN-ID"
            }
            CommandError::IntoWithRun => "a run merges into the branch it was started for",
            CommandError::Events { .. } => "pass a path in a directory that exists and is writable",
        };
        (self.to_string(), Some(hint.to_string()))
    }

    /// Is this the user's input to fix (rather than swarm failing)?
    fn is_input(&self) -> bool {
        match self {
            CommandError::App(e) => e.is_input(),
            _ => true,
        }
    }
}

/// Prints `e` on stderr and gives the exit code.
pub(crate) fn report(e: &CommandError) -> i32 {
    // Whoever read the output stopped (`| head`): nothing went wrong, nothing to say.
    if let CommandError::App(AppError::Internal(inner)) = e
        && inner.chain().any(super::out::is_closed_pipe)
    {
        return exit::SUCCESS;
    }
    let (message, hint) = e.explain();
    // Messages quote paths and output that may hold control characters.
    eprintln!("error: {}", super::visible::text(&message));
    if let Some(hint) = hint {
        eprintln!("hint: {}", super::visible::text(&hint));
    }
    match e.is_input() {
        true => exit::BAD_INPUT,
        false => exit::FAILED,
    }
}
