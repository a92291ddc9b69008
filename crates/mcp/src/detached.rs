//! What a run the server starts is asked, typed: the plan file it planned (or the run to
//! continue) and the server's own settings. The server writes it to a file and starts swarm
//! again on it, a process of its own that outlives the connection; that process reads it
//! back ([`DetachedRun::of_this_process`]) and runs it as the command line runs a plan or a
//! resume. No flag of the command line is spelled here: the plan's schema and the settings'
//! `Layer` (the config file's schema) are the contract.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use swarm_engine::app::reconcile::Overrides;
use swarm_engine::app::settings::Layer;

/// The first argument that makes a swarm process a run the MCP server started (as the jail's
/// own argument makes one a jail); the request file's path follows it.
pub const ARG: &str = "__swarm-mcp-run";

/// A run the server starts.
#[derive(Debug, Serialize, Deserialize)]
pub struct DetachedRun {
    /// The repository it belongs to.
    pub repo: PathBuf,
    /// Where every event goes as a JSON line (the server follows the run there).
    pub events: PathBuf,
    pub what: Detached,
}

/// What the run does.
#[derive(Debug, Serialize, Deserialize)]
pub enum Detached {
    /// Runs the plan file `plan` (planned by the server) whole: merging, or a dry run. Its
    /// settings are held to the rule of a plan file under `server`, the server's own.
    Start {
        plan: PathBuf,
        server: Box<Layer>,
        dry_run: bool,
    },
    /// Continues run `run`: resumes it (with its failed tasks, `failed`; with what the call
    /// changed of the run's settings: jobs, scope, statuses of success), or merges what it
    /// finished.
    Continue {
        run: String,
        how: Continuing,
        #[serde(default)]
        overrides: Overrides,
    },
}

/// How a run is continued.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Continuing {
    Resume,
    ResumeFailed,
    Merge,
}

impl DetachedRun {
    /// The request this process was started with, if it was started as a run of the
    /// server's; `Err` names what is wrong with it.
    pub fn of_this_process() -> Option<Result<DetachedRun, String>> {
        let mut args = std::env::args_os().skip(1);
        if args.next()? != ARG {
            return None;
        }
        let Some(path) = args.next() else {
            return Some(Err(format!("{ARG} needs the request file")));
        };
        Some(Self::read(Path::new(&path)))
    }

    fn read(path: &Path) -> Result<DetachedRun, String> {
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}
