//! Workers: what edits a task's files in its worktree.
//!
//! This version has the external command worker ([`exec`]); the process machinery it stands on
//! ([`process`]) also runs worktree setup commands.

pub mod exec;
pub mod process;
