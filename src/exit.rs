//! Exit codes (README.md and docs/USAGE.md): what a script can rely on.
//!
//! Errors themselves are typed per layer of the engine (`SettingsError`, `RepoError`,
//! `PlanError`…), gathered by its application layer into [`swarm_engine::app::AppError`], and
//! turned into a message, a hint and one of these codes here, at the command line's edge
//! ([`crate::error`]).

/// Every task merged or needed no change.
pub(crate) const SUCCESS: i32 = 0;
/// The run finished, but some tasks did not make it (failed, conflicted, timed out, left
/// out); what succeeded is merged.
pub(crate) const PARTIAL: i32 = 1;
/// Bad input, or refused to start; nothing was changed.
pub(crate) const BAD_INPUT: i32 = 2;
/// swarm itself failed (an I/O or git error it did not expect); what it did so far is
/// kept, as after an interruption.
pub(crate) const FAILED: i32 = 3;
/// Interrupted (Ctrl-C, SIGTERM); `swarm resume` finishes the run.
pub(crate) const INTERRUPTED: i32 = 130;
