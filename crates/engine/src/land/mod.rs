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
//!
//! This is the domain: it takes a run's report, its repository and resolved settings, and
//! answers [`LandError`]. Finding the run, holding its lock and resolving its settings is the
//! use case's, `crate::app::land`, as for every other command.

mod body;
mod build;
pub(crate) mod forge;
mod group;
mod owners;
pub(crate) mod record;
mod remote;
pub(crate) mod rollout;
pub(crate) mod verify;

use std::collections::BTreeSet;

use git2::{Oid, Repository};

use forge::ForgeKind;
pub use group::By;
use record::{LandGroup, LandRecord};

use crate::ids::RunId;
use crate::report::{Report, RunState};

/// Which forge `--forge` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForgeChoice {
    /// The one the remote's URL points at.
    Detect,
    Kind(ForgeKind),
}

/// Where the groups go, as `--push`, `--forge`, `--forge-repo`, `--forge-api`, `--target` and
/// `--max-open` ask: nowhere (branches only), a remote, or a remote and requests on its forge.
#[derive(Debug, Clone, Default)]
pub struct Destination {
    pub push: Option<String>,
    pub forge: Option<ForgeChoice>,
    pub forge_repo: Option<String>,
    pub forge_api: Option<String>,
    pub target: Option<String>,
    pub max_open: Option<usize>,
}

/// Shorthand for what landing's steps return.
pub(crate) type LandResult<T> = Result<T, LandError>;

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
    /// The remote, asked by `git` (fetch, push, its branches).
    #[error(transparent)]
    Remote(#[from] crate::git::shard::RemoteError),
    /// swarm's own failure on the way (git, the disk, the forge's answer): exit 3.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<git2::Error> for LandError {
    fn from(e: git2::Error) -> Self {
        LandError::Internal(e.into())
    }
}

impl From<std::io::Error> for LandError {
    fn from(e: std::io::Error) -> Self {
        LandError::Internal(e.into())
    }
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
            LandError::Remote(_) | LandError::Internal(_) => return None,
        })
    }
}

/// Refuses options that need others (`--forge` without `--push`…), before anything is done.
pub(crate) fn check_flags(req: &Destination) -> LandResult<()> {
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
pub(crate) fn finished_result(report: &Report) -> Result<Oid, LandError> {
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
/// did to each; `by` as asked, else as before, else by CODEOWNERS.
pub(crate) fn plan(
    repo: &Repository,
    report: &Report,
    result: Oid,
    by: Option<By>,
    existing: Option<&LandRecord>,
    warnings: &mut Vec<String>,
) -> LandResult<LandRecord> {
    let run = report.run_id.clone();
    let was = existing.map(|r| r.by.parse::<By>());
    let by = match (by, was) {
        (Some(by), _) => by,
        (None, Some(Ok(by))) => by,
        (None, _) => By::CodeOwners,
    };
    if let Some(existing) = existing.filter(|r| r.published()) {
        if existing.result != result {
            return Err(LandError::ResultMoved { run });
        }
        if existing.by != by.to_string() {
            let (was, now) = (existing.by.clone(), by.to_string());
            return Err(LandError::GroupedOtherwise { run, was, now });
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
        return Err(LandError::History { run, why });
    }
    let mut record = LandRecord::new(run.clone(), by.to_string(), report.into_start, result);
    record.forge = existing.and_then(|r| r.forge.clone());
    for p in planned {
        let commit = build::build(repo, report.into_start, &merges, &p.merges)?;
        if let Err(why) = build::check(repo, report.into_start, result, commit, &p.files)? {
            let wrong = anyhow::anyhow!("group {}'s branch is wrong: {why}", p.name);
            return Err(wrong.into());
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
) -> LandResult<owners::CodeOwners> {
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
    })
}

/// Points `swarm/<RUN>/land/<group>` at each group's branch.
pub(crate) fn write_branches(repo: &Repository, record: &LandRecord) -> LandResult<()> {
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
