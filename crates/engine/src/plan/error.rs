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

impl PlanError {
    /// What fixes it, if the user can.
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            PlanError::PathspecMagic(_) => {
                "supported: plain paths, globs like 'src/**/*.rs', and exclusions ':!path'"
            }
            PlanError::Pathspec { .. } => {
                "quote globs so the shell does not expand them, e.g. 'src/**/*.py'"
            }
            PlanError::Grep(_) => {
                "--grep takes a Rust regex; escape special characters, e.g. 'foo\\(' "
            }
            PlanError::TooManyForPlanner { .. } => {
                "narrow the pathspecs or --grep, or split per file (drop --split llm)"
            }
            PlanError::Planner(_) => {
                "check --planner-model/--model, --base-url and the API key, or drop --split llm"
            }
            PlanError::PlannerInvalid(_) => {
                "run again, use a stronger --planner-model, or write the plan with swarm plan … -o \
             PLAN.json and fix it by hand"
            }
            PlanError::Unreadable { .. } => {
                "write one with: swarm plan INSTRUCTION [PATHSPEC]... -o PLAN.json"
            }
            PlanError::NotAPlan { .. } | PlanError::Invalid { .. } => {
                "write one with swarm plan … -o PLAN.json (and keep its fields when editing it)"
            }
            PlanError::Schema { .. } => "write the plan again with this version of swarm",
            PlanError::BaseMissing(_) => {
                "fetch it (git fetch origin), or write the plan in this repository"
            }
            PlanError::Unwritable { .. } => {
                "pass a path in a directory that exists and is writable"
            }
            PlanError::Git(_) | PlanError::Internal(_) => return None,
        })
    }
}
