//! The run's own commands (`[worktree] setup`, `--verify`, `--verify-merged`): run in a
//! worktree confined and timed as a worker is, with no gateway. A run and `swarm land`'s
//! checks make them here alike, and set a worktree up the same way.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::process::{self, Exit, ProcessRequest, Program};
use crate::settings::Settings;
use swarm_sandbox::overlay::OverlayView;
use swarm_sandbox::proxy::OnAccess;

/// What the run's own commands run with.
#[derive(Clone, Copy)]
pub(crate) struct OwnCommands<'a> {
    pub settings: &'a Settings,
    pub cancel: &'a CancellationToken,
}

/// How `[worktree] setup` went in a worktree.
pub(crate) enum SetUp {
    /// It passed, or there is none.
    Ready,
    /// Cancelled, or stopped for the run's budget.
    Stopped(Exit),
    /// It failed: why (naming its log), and the end of its output.
    Failed { why: String, tail: String },
}

impl<'a> OwnCommands<'a> {
    /// `command` in worktree `cwd` (with its overlay `view`), output in `log`.
    pub(crate) fn request(
        &self,
        command: &'a str,
        cwd: &'a Path,
        view: Option<&'a OverlayView>,
        log: &'a Path,
        on_access: Option<OnAccess>,
    ) -> ProcessRequest<'a> {
        ProcessRequest {
            program: Program::Shell(command),
            cwd,
            env: Vec::new(),
            log,
            timeout: self.settings.timeout(),
            idle_timeout: Some(self.settings.idle_timeout()),
            sandbox: Some(&self.settings.sandbox),
            also_writable: &[],
            view,
            on_access,
            cancel: self.cancel,
            gateway: None,
            state_views: &[],
            git_view: None,
            keep: &[],
        }
    }

    /// Runs `[worktree] setup`, if the settings have one, in a worktree that has not had it.
    pub(crate) async fn set_up(
        &self,
        cwd: &'a Path,
        view: Option<&'a OverlayView>,
        log: &'a Path,
        on_access: Option<OnAccess>,
    ) -> anyhow::Result<SetUp> {
        let Some(setup) = self.settings.worktree.setup.as_deref() else {
            return Ok(SetUp::Ready);
        };
        let ran = process::run(self.request(setup, cwd, view, log, on_access)).await?;
        Ok(match ran.exit {
            Exit::Code(0) => SetUp::Ready,
            stopped @ (Exit::Cancelled | Exit::OverBudget) => SetUp::Stopped(stopped),
            other => SetUp::Failed {
                why: format!(
                    "worktree setup `{setup}` failed ({other:?}); see {}",
                    log.display()
                ),
                tail: ran.output_tail,
            },
        })
    }
}
