//! swarm applies one change across many files of a git repository: it splits the change into
//! per-file tasks, runs a worker per task in its own git worktree and branch, in parallel, and
//! merges every finished branch back with a `--no-ff` merge commit.
//!
//! The data flow, and the folders that follow it: [`cli`] (arguments, rendering) →
//! [`plan`] → [`git`] (worktrees, commits, merges) → [`worker`] → [`orchestrator`] →
//! [`report`] / [`state`]. The engine emits [`events`]; only the CLI prints.

pub mod app;
pub mod cli;
pub mod env_vars;
pub mod error;
pub mod events;
pub mod gateway;
pub mod git;
pub mod ids;
pub mod model;
pub mod orchestrator;
pub mod plan;
pub mod repo_path;
pub mod report;
pub mod scratch;
pub mod secrets;
pub mod settings;
pub mod state;
pub mod worker;
