//! `swarm land RUN-ID`: a finished run as reviewable pieces, one branch and one pull (or
//! merge) request per group of its tasks.
//!
//! 1. [`group`]: the run's task merges (read from its result's history) are split `--by`
//!    CODEOWNERS ([`owners`]), folder or file count; merges that share a path share a group.
//! 2. [`build`]: each group's branch is built in memory from where the run started, with the
//!    run's own `--no-ff` merge of each of its tasks; it is checked to equal the run's result
//!    on its files and the base elsewhere. Building is deterministic, so running `land` again
//!    makes the same commits.
//! 3. [`verify`]: `--verify-merged CMD` checks each group's branch before it is pushed.
//! 4. [`rollout`]: the branches are pushed (never forced) and the requests opened through
//!    the [`forge`]'s API, at most `--max-open` open at a time; each later `land` reads the
//!    requests' states and opens the next ones.
//!
//! Every step is recorded in `land.json` ([`record`]) as soon as it is done, and each is
//! looked up before it is done again (the remote's branch, the forge's request for the
//! branch), so a land cut off anywhere duplicates nothing when run again.

mod body;
mod build;
pub(crate) mod forge;
mod group;
mod owners;
pub(crate) mod record;
mod remote;
mod rollout;
mod verify;

use std::collections::BTreeSet;
use std::path::PathBuf;

use git2::{Oid, Repository};
use tokio_util::sync::CancellationToken;

use forge::ForgeKind;
pub use group::By;
use record::{LandGroup, LandRecord};

use crate::app::error::{AppError, AppResult, Busy};
use crate::app::runs;
use crate::git::repo;
use crate::ids::{RunBranch, RunId, RunSelector};
use crate::report::{Report, RunState};
use crate::state::{RunDir, RunLock};

/// Which forge `--forge` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForgeChoice {
    /// The one the remote's URL points at.
    Detect,
    Kind(ForgeKind),
}

/// What `swarm land` was asked.
#[derive(Debug, Clone)]
pub struct LandRequest {
    pub cwd: PathBuf,
    pub run: RunSelector,
    pub by: Option<By>,
    pub dry_run: bool,
    pub verify_merged: Option<String>,
    pub push: Option<String>,
    pub forge: Option<ForgeChoice>,
    pub forge_repo: Option<String>,
    pub forge_api: Option<String>,
    pub target: Option<String>,
    pub max_open: Option<usize>,
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

/// Input `swarm land` refuses (exit 2), before it changes anything.
#[derive(Debug, thiserror::Error)]
pub enum LandError {
    #[error("run {run} is {state}: only a finished run can be landed")]
    NotFinished { run: RunId, state: &'static str },
    #[error("run {0} merged nothing: there is nothing to land")]
    NothingMerged(RunId),
    #[error("no CODEOWNERS file in {at} (.github/CODEOWNERS, CODEOWNERS or docs/CODEOWNERS)")]
    NoCodeOwners { at: String },
    #[error(
        "run {run} was landed --by {was} and its branches are out; it cannot be split --by {now}"
    )]
    GroupedOtherwise {
        run: RunId,
        was: String,
        now: String,
    },
    #[error("run {run} has a new result since its branches went out")]
    ResultMoved { run: RunId },
    #[error("run {run} cannot be landed: {why}")]
    History { run: RunId, why: String },
    #[error("--{0} needs --push REMOTE")]
    NeedsPush(&'static str),
    #[error("--{0} needs --forge")]
    NeedsForge(&'static str),
    #[error("--max-open 0 would open nothing")]
    MaxOpenZero,
    #[error("cannot tell which forge remote '{remote}' is on ({url})")]
    UnknownForge { remote: String, url: String },
    #[error("cannot tell the repository of remote '{remote}' on the forge ({url})")]
    NoForgeRepo { remote: String, url: String },
    #[error("--forge-repo '{0}' is not OWNER/NAME")]
    BadForgeRepo(String),
    #[error(
        "the {forge} API at '{url}' is not https, or http on this machine, without a user name or \
         password: the token would travel in the clear, or to whoever the URL names"
    )]
    InsecureApi { forge: &'static str, url: String },
    #[error("no {forge} token in the environment")]
    NoToken { forge: &'static str, vars: String },
    #[error("remote '{0}' names no default branch for the requests to go into")]
    NoTarget(String),
}

impl LandError {
    /// What fixes it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            LandError::NotFinished { run, .. } => format!("finish it first: `swarm resume {run}`"),
            LandError::NothingMerged(run) => format!("`swarm status {run}` shows its tasks"),
            LandError::NoCodeOwners { .. } => {
                "pass --by dir:N (the first N folders) or --by files:N".into()
            }
            LandError::GroupedOtherwise { was, .. } => format!("pass --by {was}, as before"),
            LandError::ResultMoved { run } | LandError::History { run, .. } => format!(
                "land it from scratch: delete .git/swarm/runs/{run}/land.json and the pushed branches swarm/{run}/land/*"
            ),
            LandError::NeedsPush(_) => {
                "pass --push origin (the remote to push the groups' branches to)".into()
            }
            LandError::NeedsForge(_) => "pass --forge (with --push REMOTE) to open requests".into(),
            LandError::MaxOpenZero => "pass --max-open 1 or more".into(),
            LandError::UnknownForge { .. } => "pass --forge github or --forge gitlab".into(),
            LandError::NoForgeRepo { .. } | LandError::BadForgeRepo(_) => {
                "pass --forge-repo OWNER/NAME".into()
            }
            LandError::InsecureApi { .. } => "pass --forge-api https://…".into(),
            LandError::NoToken { vars, .. } => format!("set {vars}"),
            LandError::NoTarget(_) => "pass --target BRANCH".into(),
        })
    }
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
    check_flags(&req)?;
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
    let result = finished_result(&report)?;
    let existing = record::load(&run_dir)?;
    let repo = info.open()?;
    let mut warnings = Vec::new();
    let mut record = plan(
        &repo,
        &report,
        result,
        &req,
        existing.as_ref(),
        &mut warnings,
    )?;
    let settings = match (&req.verify_merged, req.dry_run) {
        (Some(_), false) => Some(run_settings(&info, &run_dir, &mut warnings).await?),
        _ => None,
    };
    let target = rollout::target(&req, &repo, &info.workdir)?;
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
    write_branches(&repo, &record)?;
    record::save(&run_dir, &record)?;
    let pool = std::sync::Arc::new(crate::git::worktree::WorktreePool::new(
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

fn check_flags(req: &LandRequest) -> Result<(), LandError> {
    if req.forge.is_some() && req.push.is_none() {
        return Err(LandError::NeedsPush("forge"));
    }
    if req.forge.is_none() {
        let forge_only = [
            ("max-open", req.max_open.is_some()),
            ("target", req.target.is_some()),
            ("forge-repo", req.forge_repo.is_some()),
            ("forge-api", req.forge_api.is_some()),
        ];
        if let Some((flag, _)) = forge_only.into_iter().find(|(_, given)| *given) {
            return Err(LandError::NeedsForge(flag));
        }
    }
    match req.max_open {
        Some(0) => Err(LandError::MaxOpenZero),
        _ => Ok(()),
    }
}

/// The result of a finished run that merged something.
fn finished_result(report: &Report) -> Result<Oid, LandError> {
    let state = match report.state {
        RunState::Finished => None,
        RunState::Running | RunState::Interrupted => Some("interrupted"),
    };
    if let Some(state) = state {
        return Err(LandError::NotFinished {
            run: report.run_id.clone(),
            state,
        });
    }
    report
        .result
        .filter(|r| *r != report.into_start)
        .ok_or_else(|| LandError::NothingMerged(report.run_id.clone()))
}

/// The groups of the run and their branches (built, not written), with what an earlier land
/// did to each.
fn plan(
    repo: &Repository,
    report: &Report,
    result: Oid,
    req: &LandRequest,
    existing: Option<&LandRecord>,
    warnings: &mut Vec<String>,
) -> AppResult<LandRecord> {
    let run = report.run_id.clone();
    let was = existing.map(|r| r.by.parse::<By>());
    let by = match (req.by, was) {
        (Some(by), _) => by,
        (None, Some(Ok(by))) => by,
        (None, _) => By::CodeOwners,
    };
    if let Some(existing) = existing.filter(|r| r.published()) {
        if existing.result != result {
            return Err(LandError::ResultMoved { run }.into());
        }
        if existing.by != by.to_string() {
            let (was, now) = (existing.by.clone(), by.to_string());
            return Err(LandError::GroupedOtherwise { run, was, now }.into());
        }
    }
    let merges =
        build::read_merges(repo, report.into_start, result)?.map_err(|why| LandError::History {
            run: run.clone(),
            why,
        })?;
    let owners = match by {
        By::CodeOwners => Some(code_owners(repo, report.into_start, warnings)?),
        _ => None,
    };
    let planned = group::group(&merges, by, owners.as_ref());
    let covered: BTreeSet<_> = planned.iter().flat_map(|g| &g.files).collect();
    let left = build::uncovered(repo, report.into_start, result, &covered)?;
    if let Some(first) = left.first() {
        let why = format!(
            "its result changes {} outside any task merge",
            first.display()
        );
        return Err(LandError::History { run, why }.into());
    }
    let mut record = LandRecord::new(run.clone(), by.to_string(), report.into_start, result);
    record.forge = existing.and_then(|r| r.forge.clone());
    for p in planned {
        let commit = build::build(repo, report.into_start, &merges, &p.merges)?;
        if let Err(why) = build::check(repo, report.into_start, result, commit, &p.files)? {
            return Err(anyhow::anyhow!("group {}'s branch is wrong: {why}", p.name).into());
        }
        let before = existing.and_then(|r| {
            r.groups
                .iter()
                .find(|g| g.name == p.name && g.commit == commit)
        });
        record.groups.push(LandGroup {
            branch: record::branch(&run, &p.name),
            tasks: p.merges.iter().map(|&i| merges[i].task.clone()).collect(),
            name: p.name,
            label: p.label,
            owners: p.owners,
            files: p.files,
            commit,
            check: before.and_then(|b| b.check.clone()),
            pushed: before.and_then(|b| b.pushed.clone()),
            request: before.and_then(|b| b.request.clone()),
            problem: None,
        });
    }
    Ok(record)
}

/// The CODEOWNERS rules in force at `at`.
fn code_owners(
    repo: &Repository,
    at: Oid,
    warnings: &mut Vec<String>,
) -> AppResult<owners::CodeOwners> {
    let tree = repo.find_commit(at)?.tree()?;
    for location in owners::LOCATIONS {
        let Ok(entry) = tree.get_path(std::path::Path::new(location)) else {
            continue;
        };
        let Ok(blob) = repo.find_blob(entry.id()) else {
            continue;
        };
        let (rules, said) = owners::CodeOwners::parse(&String::from_utf8_lossy(blob.content()));
        warnings.extend(said.into_iter().map(|w| format!("{location}: {w}")));
        return Ok(rules);
    }
    Err(LandError::NoCodeOwners {
        at: format!("commit {}", crate::ids::short(&at)),
    }
    .into())
}

/// The settings the run's own checks ran with (its plan's, then this machine's).
async fn run_settings(
    info: &repo::RepoInfo,
    run_dir: &RunDir,
    warnings: &mut Vec<String>,
) -> AppResult<crate::settings::Settings> {
    use crate::settings::{Layer, PlanSource, Settings};
    let plan: crate::plan::Plan = crate::state::read_json(&run_dir.plan())?;
    let own = (plan.settings.clone(), PlanSource::Own);
    let resolved = Settings::resolve(Layer::default(), Some(own), &info.workdir)?;
    warnings.extend(resolved.warnings);
    crate::app::checks::sandbox(&resolved.settings.sandbox).await?;
    Ok(resolved.settings)
}

/// Points `swarm/<RUN>/land/<group>` at each group's branch.
fn write_branches(repo: &Repository, record: &LandRecord) -> AppResult<()> {
    for group in &record.groups {
        repo.reference(
            &format!("refs/heads/{}", group.branch),
            group.commit,
            true,
            "swarm: land",
        )?;
    }
    Ok(())
}
