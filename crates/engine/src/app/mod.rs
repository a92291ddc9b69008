//! The application layer: what a command does between its parsed arguments and the engine.
//!
//! ```text
//! swarm (src/: clap, rendering, exit codes)     swarm-mcp (tools over stdio)
//!   │                                              │
//! app/  prepare a run · continue one from git · shards · land · runs · diffs · checks
//!   │     (no clap, no terminal; typed errors, each with its message and hint)
//! engine: settings, plan, git, worker, orchestrator, land, report, state, events
//! ```
//!
//! Nothing below `app` uses it (`tests/it/layers.rs`).
//!
//! Each command resolves one [`RunMode`] here and hands the
//! engine one [`RunRequest`].

pub mod agents;
pub(crate) mod checks;
pub mod diff;
pub mod error;
mod hint;
pub mod land;
pub mod page;
pub mod prepare;
mod process;
pub mod reconcile;
pub mod runs;
pub mod shard;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use error::{AppError, AppResult, Busy};
pub use process::{ProcessStart, start_process};

pub use crate::git::repo::{RepoError, RepoInfo};
pub use crate::orchestrator::{RunError, RunMode, RunOutcome, RunRequest};
pub use crate::plan::{Plan, PlanError, describe_skipped};
pub use crate::secrets::random_hex;

/// The names of the environment variables swarm reads (`SWARM_JOBS`…).
pub mod env_vars {
    pub use crate::env_vars::*;
}

/// What a run emits while it goes, for a front end to show.
pub mod events {
    pub use crate::events::{
        CheckRole, ConflictAction, Event, EventSink, NetworkVerdict, Reporter, UsageBasis,
    };
}

/// Runs' and tasks' names.
pub mod ids {
    pub use crate::ids::{RunId, RunSelector, TaskId, TaskIdx, abbrev, join, short};
}

/// What a run did (`report.json`, docs/USAGE.md).
pub mod report {
    pub use crate::report::groups;
    pub use crate::report::{
        CandidateReport, DriverMerge, Report, RunState, SelectedBy, Selection, TaskReport,
        TaskStatus,
    };
}

/// Settings: a front end's [`settings::Layer`] of options, and what they resolve to.
pub mod settings {
    pub use crate::settings::home::tilde;
    pub use crate::settings::{
        Candidates, CandidatesProblem, Count, Layer, MergeWith, OnConflict, PerProcess,
        SandboxMode, Scope, Settings, SettingsError, WorktreeMode, check_ok_exit_codes,
    };
}

use crate::events::EventSink;
use crate::orchestrator;
use crate::report::Report;
use crate::state::{self, RunDir};

/// Runs `request` to the end (or to `cancel`), every event into `sink`.
pub async fn execute(
    request: RunRequest,
    cancel: CancellationToken,
    sink: Arc<EventSink>,
) -> AppResult<RunOutcome> {
    // What runs killed with `kill -9` left in the temporary directory (their sockets, their
    // workers' temporary files): nobody else cleans it.
    // Waited for at the end, not before the run: the process's end would cut it short.
    let sweeping =
        tokio::task::spawn_blocking(|| swarm_sandbox::scratch::sweep(&std::env::temp_dir()));
    // Deletes what tasks leave off their path; started here, where no thread is confined.
    swarm_sandbox::janitor::start();
    // Starts the one-off jails, which die with the thread that started them: one that lasts.
    if let Err(e) = swarm_sandbox::jail::starter::start() {
        tracing::debug!("no thread to start jails yet ({e}): the first jail makes it");
    }
    let mode = request.mode;
    let outcome = orchestrator::run(request, cancel, sink)
        .await
        .map_err(|e| AppError::of_run(e, mode));
    let _ = sweeping.await;
    outcome
}

/// Saves a run's report (after `--review` marked what it skipped).
pub fn save_report(common_dir: &std::path::Path, report: &Report) -> AppResult<()> {
    let path = RunDir::new(common_dir, &report.run_id).report();
    Ok(state::write_json_atomic(&path, report)?)
}

/// Ends this process's idle jail hosts and removes its scratch directory (its sockets and
/// temporary files), when the command ends.
pub fn close_scratch() {
    swarm_sandbox::jail::end_hosts();
    swarm_sandbox::scratch::close();
}

/// The repository at (or above) `cwd`: its work tree and git directories.
pub fn discover(cwd: &std::path::Path) -> AppResult<RepoInfo> {
    Ok(crate::git::repo::discover(cwd)?)
}

/// The workers at a time a run of the repository at (or above) `cwd` gets when its command
/// line does not say: from the environment, the repository's `swarm.toml` and the user's
/// config, else the default.
pub fn default_jobs(cwd: &std::path::Path) -> AppResult<usize> {
    let info = discover(cwd)?;
    let resolved =
        crate::settings::Settings::resolve(settings::Layer::default(), None, &info.workdir)?;
    Ok(resolved.settings.jobs)
}

/// `text` with every secret swarm knows of (its environment's keys and tokens, in any of
/// their forms) replaced, for anything a front end returns.
pub fn redact(text: &str) -> String {
    crate::secrets::redact(text).into_owned()
}
