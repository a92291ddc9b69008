//! The application layer: what a command does between its parsed arguments and the engine.
//!
//! ```text
//! cli/  (clap types, one thin function per command, rendering, errors → message + hint)
//!   │
//! app/  prepare a run · continue one from git · shards · runs · diffs · checks
//!   │     (no clap, no terminal; typed errors, data for the CLI to show)
//! engine: settings, plan, git, worker, orchestrator, report, state, events
//! ```
//!
//! Each command resolves one [`RunMode`](crate::orchestrator::RunMode) here and hands the
//! engine one [`RunRequest`].

pub mod agents;
pub mod checks;
pub mod diff;
pub mod error;
pub mod prepare;
pub mod reconcile;
pub mod runs;
pub mod shard;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use error::{AppError, AppResult, Busy};

use crate::events::EventSink;
use crate::orchestrator::{self, RunOutcome, RunRequest};
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
    tokio::task::spawn_blocking(|| crate::scratch::sweep(&std::env::temp_dir()));
    Ok(orchestrator::run(request, cancel, sink).await?)
}

/// Saves a run's report (after `--review` marked what it skipped).
pub fn save_report(common_dir: &std::path::Path, report: &Report) -> AppResult<()> {
    let path = RunDir::new(common_dir, &report.run_id).report();
    Ok(state::write_json_atomic(&path, report)?)
}
