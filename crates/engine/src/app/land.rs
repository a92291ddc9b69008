//! `swarm land`'s use case: the run found and held, its settings resolved as its own checks
//! ran them, then the domain ([`crate::land`]) plans the groups, builds, checks, pushes and
//! opens them.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::error::{AppError, AppResult, Busy};
use super::{checks, reconcile, runs};
use crate::git::repo;
use crate::ids::{RunBranch, RunSelector};
use crate::land::record;
use crate::land::{self as domain, rollout};
use crate::report::Report;
use crate::settings::{Layer, Settings};
use crate::state::{RunDir, RunLock};

pub use crate::land::forge::{ForgeError, ForgeKind, PrState, PullRequest};
pub use crate::land::record::{ForgePlace, GroupCheck, LandGroup, LandRecord, Stage};
pub use crate::land::{By, Destination, ForgeChoice, LandError};

/// What `swarm land` was asked.
#[derive(Debug, Clone)]
pub struct LandRequest {
    pub cwd: PathBuf,
    pub run: RunSelector,
    pub by: Option<By>,
    pub dry_run: bool,
    pub verify_merged: Option<String>,
    pub destination: Destination,
}

/// What `swarm land` did.
#[derive(Debug)]
pub struct LandOutcome {
    pub record: LandRecord,
    pub report: Report,
    /// Said along the way (CODEOWNERS lines skipped, reviewers not requested).
    pub warnings: Vec<String>,
    /// Groups held back this time, and why (exit 1).
    pub problems: Vec<String>,
    pub dry_run: bool,
}

/// The run's land record, if `swarm land` ran on it (for `swarm status`).
pub fn load_record(cwd: &std::path::Path, wanted: &RunSelector) -> AppResult<Option<LandRecord>> {
    let info = repo::discover(cwd)?;
    let id = runs::resolve(&info.common_dir, wanted)?;
    Ok(record::load(&RunDir::new(&info.common_dir, &id))?)
}

/// Lands run `req.run` as `req` asks; `progress` is told of each step as it is done.
pub async fn land(
    req: LandRequest,
    cancel: CancellationToken,
    progress: &(dyn Fn(String) + Send + Sync),
) -> AppResult<LandOutcome> {
    domain::check_flags(&req.destination)?;
    let info = repo::discover(&req.cwd)?;
    let id = runs::resolve(&info.common_dir, &req.run)?;
    let run_dir = RunDir::new(&info.common_dir, &id);
    let Some(_lock) = RunLock::try_acquire(&run_dir)? else {
        return Err(AppError::RunBusy {
            run: id,
            doing: Busy::Land,
        });
    };
    let report = run_dir.load_report()?;
    let result = domain::finished_result(&report)?;
    let existing = record::load(&run_dir)?;
    let repo = info.open()?;
    let mut warnings = Vec::new();
    let mut record = domain::plan(
        &repo,
        &report,
        result,
        req.by,
        existing.as_ref(),
        &mut warnings,
    )?;
    let settings = match (&req.verify_merged, req.dry_run) {
        (Some(_), false) => Some(checks_settings(&info, &run_dir, &mut warnings).await?),
        _ => None,
    };
    let target = rollout::target(&req.destination, &repo, &info.workdir)?;
    if req.dry_run {
        return Ok(LandOutcome {
            record,
            report,
            warnings,
            problems: Vec::new(),
            dry_run: true,
        });
    }
    if let Some((_, place)) = target.as_ref().and_then(|t| t.forge.as_ref()) {
        record.forge = Some(place.clone());
    }
    domain::write_branches(&repo, &record)?;
    record::save(&run_dir, &record)?;
    let pool = Arc::new(crate::git::worktree::WorktreePool::new(
        &info.common_dir,
        &id,
        settings
            .as_ref()
            .map(|s| s.worktree.copy.clone())
            .unwrap_or_default(),
        &info.workdir,
    ));
    let context = rollout::Context {
        workdir: &info.workdir,
        report: &report,
        run_dir: &run_dir,
        cancel: &cancel,
        progress,
        verify: req.verify_merged.as_deref().zip(settings.as_ref()),
        pool: pool.clone(),
    };
    let problems = rollout::run(&context, target.as_ref(), &mut record, &mut warnings).await;
    // The checks' worktrees, and the branch they were checked out on.
    let (common_dir, verify) = (info.common_dir.clone(), id.branch(&RunBranch::Verify));
    tokio::task::spawn_blocking(move || {
        pool.remove_all();
        crate::git::finish::delete_branches(&common_dir, &[verify]);
        crate::state::empty_trash_later(&common_dir);
    })
    .await
    .map_err(anyhow::Error::from)?;
    let problems = problems?;
    Ok(LandOutcome {
        record,
        report,
        warnings,
        problems,
        dry_run: false,
    })
}

/// The settings the run's own checks ran with (its plan's, then this machine's), and the
/// sandbox they need probed.
async fn checks_settings(
    info: &repo::RepoInfo,
    run_dir: &RunDir,
    warnings: &mut Vec<String>,
) -> AppResult<Settings> {
    let (_, resolved) = reconcile::run_settings(info, run_dir, Layer::default())?;
    warnings.extend(resolved.warnings);
    checks::machine(&resolved.settings, 1).await?;
    Ok(resolved.settings)
}
