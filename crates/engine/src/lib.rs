//! swarm's engine: it splits one change across many files of a git repository into per-file
//! tasks, runs a worker per task in its own git worktree and branch, in parallel, and merges
//! every finished branch back with a `--no-ff` merge commit.
//!
//! Its one public module is [`app`], what a front end (the command line; later an MCP
//! server) calls: prepare a run, run it, continue, merge, list, diff and clean runs. The data
//! flow below it, private to this crate: `plan` → `git` (worktrees, commits, merges) →
//! `worker` (in the `swarm_sandbox` jail) → `orchestrator` → `report` / `state`. The engine
//! emits [`app::events`]; it never prints: it has no terminal crate to print with.

pub mod app;
mod env_vars;
mod events;
mod gateway;
mod git;
mod ids;
mod land;
mod model;
mod net;
mod orchestrator;
mod plan;
mod repo_path;
mod report;
mod secrets;
mod settings;
mod state;
mod worker;
