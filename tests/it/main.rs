//! Integration tests: the real `swarm` binary on temporary git repositories, with the git CLI
//! as the independent oracle.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Helpers are `pub` for the test modules beside them; nothing outside this binary uses them.
// A test reads as one story, however long; the 80-line limit is for the product code.
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod action;
mod agents;
mod attacks;
mod bad_input;
mod candidates;
mod ci;
mod commands;
mod common;
mod docs;
mod fake_agents;
mod fake_forge;
mod fake_model;
mod first_day;
mod gateway;
mod half_done;
mod head_start;
mod hostile_upstream;
mod land;
mod layers;
mod live_checkout;
mod llm;
mod llm_server;
mod mcp;
mod memory_layers;
mod merge_drivers;
mod merging;
mod module_graph;
mod network;
mod open_files;
mod per_process;
mod planner;
mod planning;
mod recovery;
mod refactor;
mod repair;
mod report_page;
mod reuse_base;
mod sandbox;
mod shards;
mod snapshots;
mod tools_commit;
mod verify;
mod verify_merged;
mod workers;
mod worktrees;
