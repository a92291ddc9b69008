//! swarm's engine: it splits one change across many files of a git repository into per-file
//! tasks, runs a worker per task in its own git worktree and branch, in parallel, and merges
//! every finished branch back with a `--no-ff` merge commit.
//!
//! Its one public module is [`app`], what a front end (the command line, the MCP server)
//! calls: prepare a run, run it, continue, merge, land, list, diff and clean runs; each error
//! with its hint. The data flow below it, private to this crate: `plan` → `git` (worktrees,
//! commits, merges) → `worker` (in the `swarm_sandbox` jail) → `orchestrator` → `report` /
//! `state`; `land` turns a finished run into branches and requests. The engine emits
//! [`app::events`] and hands warnings back; it never prints: it has no terminal crate to
//! print with, and printing is a lint error.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod app;
mod env_vars;
mod events;
mod gateway;
mod git;
mod ids;
mod land;
mod model;
mod named;
mod net;
mod orchestrator;
mod plan;
mod repo_path;
mod report;
mod secrets;
mod settings;
mod state;
mod worker;
