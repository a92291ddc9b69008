//! What can be wrong with the planning input: pathspecs, `--grep`, a plan file, the planner's
//! answer. The user's to fix (exit 2), except [`PlanError::Git`] and [`PlanError::Internal`].

use std::path::PathBuf;

use super::PLAN_SCHEMA_VERSION;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("unsupported pathspec magic in '{0}'")]
    PathspecMagic(String),
    #[error("invalid pathspec '{spec}': {message}")]
    Pathspec { spec: String, message: String },
    #[error("invalid --grep regular expression: {0}")]
    Grep(String),
    #[error("--split llm plans at most {max} files, and {selected} are selected")]
    TooManyForPlanner { max: usize, selected: usize },
    #[error("the planner model failed: {0}")]
    Planner(String),
    #[error("the planner's plan is still not valid after a correction: {0}")]
    PlannerInvalid(String),
    #[error("cannot read the plan {}: {source}", .path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a swarm plan: {message}", .path.display())]
    NotAPlan { path: PathBuf, message: String },
    #[error("{} is not a valid swarm plan: {message}", .path.display())]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{} is a plan of schema version {found}; this swarm reads version {PLAN_SCHEMA_VERSION}",
        .path.display()
    )]
    Schema { path: PathBuf, found: u32 },
    #[error("the plan's base commit {0} is not in this repository")]
    BaseMissing(String),
    #[error("cannot write the plan to {}: {source}", .path.display())]
    Unwritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Git(#[from] git2::Error),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}
