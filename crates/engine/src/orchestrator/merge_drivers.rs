//! What runs the merge train's drivers: each in a fresh directory under the run's, confined
//! as a check is (no network, writes only to that directory), with `[merge] timeout`, its
//! output (secrets redacted) in the task's `merge-<n>.log`. The train runs on a thread of its
//! own, which waits for each driver on the run's runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::Shared;
use crate::git::merge::drivers::Structured;
use crate::git::merge::files::{DriverCall, DriverExit, DriverRunner, DriverSetup};
use crate::settings::MergeWith;
use crate::worker::process::{self, Exit, ProcessRequest, Program};

pub(super) struct JailedDrivers {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    runs: AtomicU32,
}

impl JailedDrivers {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            runtime: tokio::runtime::Handle::current(),
            runs: AtomicU32::new(0),
        }
    }
}

impl DriverRunner for JailedDrivers {
    fn scratch(&self) -> std::io::Result<std::path::PathBuf> {
        let dir = tempfile::Builder::new()
            .prefix("merge-")
            .tempdir_in(&self.shared.run_dir.path)?;
        Ok(dir.keep())
    }

    /// Through the engine's one removal of what swarm made under `.git/swarm` (never
    /// following a link, folders a driver closed opened first).
    fn discard(&self, dir: &std::path::Path) {
        if let Err(e) = crate::state::remove_owned(&self.shared.common_dir, dir) {
            tracing::warn!("{e:#}");
        }
    }

    fn run(&self, call: &DriverCall<'_>) -> DriverExit {
        let n = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        let log = self
            .shared
            .run_dir
            .task_dir(call.task)
            .join(format!("merge-{n}.log"));
        let settings = &self.shared.settings;
        let request = ProcessRequest {
            program: Program::Shell(call.command),
            cwd: call.dir,
            env: Vec::new(),
            log: &log,
            timeout: settings.merge_timeout(),
            idle_timeout: None,
            sandbox: Some(&settings.sandbox),
            also_writable: &[],
            view: None,
            on_access: None,
            cancel: &self.shared.cancel,
            gateway: None,
            state_views: &[],
            git_view: None,
            keep: &[],
        };
        let ran = self.runtime.block_on(process::run(request));
        let result = match ran {
            Ok(out) => match out.exit {
                Exit::Code(0) => Ok(()),
                Exit::Code(code) => Err(format!(
                    "merge driver `{}` exited with status {code}",
                    call.driver
                )),
                Exit::TimedOut => Err(format!(
                    "merge driver `{}` did not finish within {} s ([merge] timeout)",
                    call.driver, settings.merge_timeout_secs
                )),
                other => Err(format!("merge driver `{}` stopped: {other:?}", call.driver)),
            },
            Err(e) => Err(format!("merge driver `{}` could not run: {e}", call.driver)),
        };
        tracing::debug!(driver = call.driver, path = %call.path.display(), ?result, "merge driver");
        DriverExit {
            result,
            log: Some(log),
        }
    }
}

/// What the run's merge train runs its drivers with.
pub(super) fn setup(shared: &Arc<Shared>) -> anyhow::Result<DriverSetup> {
    let structured = match shared.settings.merge_with {
        Some(tool) => Some(merge_tool(tool).map_err(anyhow::Error::msg)?),
        None => None,
    };
    Ok(DriverSetup {
        runner: Box::new(JailedDrivers::new(shared.clone())),
        structured,
    })
}

/// The structured merge tool of `--merge-with`, found on PATH and asked which files it knows.
pub(crate) fn merge_tool(tool: MergeWith) -> Result<Structured, String> {
    match tool {
        MergeWith::Mergiraf => {
            let program = crate::worker::which("mergiraf").ok_or_else(|| {
                "mergiraf is not on PATH; install it with `cargo install --locked mergiraf`"
                    .to_string()
            })?;
            Structured::mergiraf(&program)
        }
    }
}
