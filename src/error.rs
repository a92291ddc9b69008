//! Exit codes (README.md and docs/USAGE.md): what a script can rely on.
//!
//! Errors themselves are typed per layer (`SettingsError`, `RepoError`, `PlanError`…),
//! gathered by the application layer into [`crate::app::AppError`], and turned into a message,
//! a hint and one of these codes at the command line's edge (`crate::cli::error`).

pub mod exit {
    /// Every task merged or needed no change.
    pub const SUCCESS: i32 = 0;
    /// The run finished, but some tasks did not make it (failed, conflicted, timed out, left
    /// out); what succeeded is merged.
    pub const PARTIAL: i32 = 1;
    /// Bad input, or refused to start; nothing was changed.
    pub const BAD_INPUT: i32 = 2;
    /// swarm itself failed (an I/O or git error it did not expect); what it did so far is
    /// kept, as after an interruption.
    pub const FAILED: i32 = 3;
    /// Interrupted (Ctrl-C, SIGTERM); `swarm resume` finishes the run.
    pub const INTERRUPTED: i32 = 130;
}
