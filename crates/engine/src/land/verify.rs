//! `swarm land --verify-merged CMD`: each group's branch checked on its own before it is
//! pushed, in a worktree of the run's pool (its `[worktree] setup` first), confined and timed
//! as the run's own checks are. Checks run one after another, reusing the worktree, so
//! build output stays warm from one group to the next.

use std::sync::Arc;

use git2::Oid;
use tokio_util::sync::CancellationToken;

use super::record::GroupCheck;
use crate::git::worktree::{Lease, WorktreePool};
use crate::ids::{RunBranch, RunId};
use crate::settings::Settings;
use crate::state::RunDir;
use crate::worker::own::{OwnCommands, SetUp};
use crate::worker::process::{self, Exit};

/// What checks the groups of one run.
pub(crate) struct Checker<'a> {
    pub settings: &'a Settings,
    pub pool: Arc<WorktreePool>,
    pub run_id: &'a RunId,
    pub run_dir: &'a RunDir,
    pub cancel: &'a CancellationToken,
}

impl Checker<'_> {
    /// Runs `command` on `commit` (group `name`); `None` when cancelled.
    pub(crate) async fn check(
        &self,
        name: &str,
        command: &str,
        commit: Oid,
    ) -> anyhow::Result<Option<GroupCheck>> {
        let branch = self.run_id.branch(&RunBranch::Verify);
        let lease = {
            let pool = self.pool.clone();
            tokio::task::spawn_blocking(move || pool.acquire(&branch, commit)).await??
        };
        let log = super::record::check_log(self.run_dir, name);
        let ran = self.run_in(&lease, command, &log).await;
        tokio::task::spawn_blocking(move || lease.release()).await??;
        let Some(exit) = ran? else {
            return Ok(None);
        };
        let how = match exit {
            Exit::Code(c) => format!("exit status {c}"),
            Exit::Signal(s) => format!("killed by signal {s}"),
            Exit::TimedOut => "timed out (--timeout)".into(),
            Exit::Idle => "stale: no output for --idle-timeout".into(),
            Exit::Cancelled | Exit::OverBudget => return Ok(None),
        };
        Ok(Some(GroupCheck {
            command: command.to_string(),
            passed: exit == Exit::Code(0),
            how,
            log,
        }))
    }

    /// The worktree's setup (once), then the command; how the command ended.
    async fn run_in(
        &self,
        lease: &Lease,
        command: &str,
        log: &std::path::Path,
    ) -> anyhow::Result<Option<Exit>> {
        let own = OwnCommands {
            settings: self.settings,
            cancel: self.cancel,
        };
        if lease.fresh {
            let setup_log = self.run_dir.path.join(format!("{}-setup.log", lease.name));
            match own
                .set_up(&lease.path, lease.view.as_ref(), &setup_log, None)
                .await?
            {
                SetUp::Ready => {}
                SetUp::Stopped(_) => return Ok(None),
                SetUp::Failed { why, .. } => anyhow::bail!(why),
            }
        }
        let request = own.request(command, &lease.path, lease.view.as_ref(), log, None);
        Ok(Some(process::run(request).await?.exit))
    }
}
