//! Checking, pushing and opening the groups, in their order, each step recorded as soon as
//! it is done: a group whose check fails is held back; a branch on the remote that swarm did
//! not put there is left alone; a request already open for a branch is found, not opened
//! again; with `--max-open N`, groups wait while N requests are open.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use git2::{Oid, Repository};
use tokio_util::sync::CancellationToken;

use super::forge::{
    self, Forge, ForgeError, ForgeKind, NewRequest, PrState, PullRequest, RemoteUrl, Token,
};
use super::record::{self, ForgePlace, LandRecord};
use super::{Destination, ForgeChoice, LandError, LandResult, remote};
use crate::git::worktree::WorktreePool;
use crate::report::Report;
use crate::settings::Settings;
use crate::state::RunDir;

/// Where the groups go: the remote, and the forge when requests are opened.
pub(crate) struct Target {
    pub remote: String,
    pub forge: Option<(Forge, ForgePlace)>,
    pub max_open: Option<usize>,
}

/// What every step needs.
pub(crate) struct Context<'a> {
    pub workdir: &'a Path,
    pub report: &'a Report,
    pub run_dir: &'a RunDir,
    pub cancel: &'a CancellationToken,
    pub progress: &'a (dyn Fn(String) + Send + Sync),
    /// `--verify-merged`, and the settings it runs with.
    pub verify: Option<(&'a str, &'a Settings)>,
    pub pool: Arc<WorktreePool>,
}

/// The target `req` asks for, resolved and checked before anything is changed.
pub(crate) fn target(
    req: &Destination,
    repo: &Repository,
    workdir: &Path,
) -> LandResult<Option<Target>> {
    let Some(remote) = req.push.clone() else {
        return Ok(None);
    };
    let Some(choice) = req.forge else {
        return Ok(Some(Target {
            remote,
            forge: None,
            max_open: None,
        }));
    };
    let url = remote::url_of(repo, &remote);
    let parsed = RemoteUrl::parse(&url);
    let kind =
        match choice {
            ForgeChoice::Kind(kind) => kind,
            ForgeChoice::Detect => parsed.as_ref().and_then(RemoteUrl::kind).ok_or_else(|| {
                LandError::UnknownForge {
                    remote: remote.clone(),
                    url: url.clone(),
                }
            })?,
        };
    let path = match &req.forge_repo {
        Some(given) => given.clone(),
        None => parsed
            .as_ref()
            .map(|p| p.path.clone())
            .ok_or_else(|| LandError::NoForgeRepo {
                remote: remote.clone(),
                url: url.clone(),
            })?,
    };
    if !repository_path(kind, &path) {
        return Err(match &req.forge_repo {
            Some(_) => LandError::BadForgeRepo(path),
            None => LandError::NoForgeRepo { remote, url },
        });
    }
    let api = forge::api_base(
        kind,
        req.forge_api.as_deref(),
        parsed.as_ref().map(|p| p.host.as_str()),
    );
    if !forge::safe_for_token(&api) {
        return Err(LandError::InsecureApi {
            forge: kind.name(),
            url: api,
        });
    }
    let token = Token::from_env(kind).map_err(|vars| LandError::NoToken {
        forge: kind.name(),
        vars: vars.join(" or "),
    })?;
    let target_branch = match &req.target {
        Some(branch) => branch.clone(),
        None => remote::default_branch(workdir, &remote)?
            .ok_or_else(|| LandError::NoTarget(remote.clone()))?,
    };
    let place = ForgePlace {
        kind,
        repo: path.clone(),
        api: api.clone(),
        target: target_branch,
    };
    let forge = Forge::new(kind, path, api, token)?;
    Ok(Some(Target {
        remote,
        forge: Some((forge, place)),
        max_open: req.max_open,
    }))
}

/// Is `path` a repository's path on the forge: `owner/name` on GitHub, `group[/sub…]/name`
/// on GitLab, each part a plain name?
fn repository_path(kind: ForgeKind, path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let plain = parts.iter().all(|p| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    });
    plain
        && match kind {
            ForgeKind::GitHub => parts.len() == 2,
            ForgeKind::GitLab => parts.len() >= 2,
        }
}

/// Checks, pushes and opens what `target` asks for; the problems that held groups back.
pub(crate) async fn run(
    cx: &Context<'_>,
    target: Option<&Target>,
    record: &mut LandRecord,
    warnings: &mut Vec<String>,
) -> LandResult<Vec<String>> {
    let mut problems = Vec::new();
    let Some(target) = target else {
        for i in 0..record.groups.len() {
            if cx.cancel.is_cancelled() {
                break;
            }
            checked(cx, record, i, &mut problems).await?;
        }
        return Ok(problems);
    };
    if let Some((forge, _)) = &target.forge
        && let Err(e) = refresh(cx, forge, record).await
    {
        problems.push(e.to_string());
        return Ok(problems);
    }
    let prefix = record::branch(&record.run_id, "");
    let out_there = remote::branches(cx.workdir, &target.remote, &prefix)?;
    let mut open = record
        .groups
        .iter()
        .filter(|g| g.request.as_ref().is_some_and(|r| r.state == PrState::Open))
        .count();
    for i in 0..record.groups.len() {
        let full = target.max_open.is_some_and(|max| open >= max);
        if cx.cancel.is_cancelled()
            || record.groups[i].request.is_some()
            || (target.forge.is_some() && full)
        {
            continue;
        }
        if !checked(cx, record, i, &mut problems).await?
            || !pushed(cx, target, &out_there, record, i, &mut problems)?
        {
            continue;
        }
        let Some((forge, place)) = &target.forge else {
            continue;
        };
        match request(cx, forge, place, record, i, warnings).await {
            Ok(pull) => open += usize::from(pull.state == PrState::Open),
            Err(e) => {
                record.groups[i].problem = Some(e.to_string());
                problems.push(format!("{}: {e}", record.groups[i].name));
                record::save(cx.run_dir, record)?;
                break;
            }
        }
    }
    Ok(problems)
}

/// Reads the state of every request not merged yet.
async fn refresh(cx: &Context<'_>, forge: &Forge, record: &mut LandRecord) -> LandResult<()> {
    for i in 0..record.groups.len() {
        let Some(pull) = record.groups[i].request.clone() else {
            continue;
        };
        if pull.state == PrState::Merged {
            continue;
        }
        let state = forge
            .state(pull.number)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        if state != pull.state {
            (cx.progress)(format!(
                "{} #{} is {}",
                record.groups[i].name,
                pull.number,
                state.as_str()
            ));
        }
        if let Some(r) = record.groups[i].request.as_mut() {
            r.state = state;
        }
    }
    record::save(cx.run_dir, record)?;
    Ok(())
}

/// Runs `--verify-merged` on group `i` unless it passed it already; does it pass?
async fn checked(
    cx: &Context<'_>,
    record: &mut LandRecord,
    i: usize,
    problems: &mut Vec<String>,
) -> LandResult<bool> {
    let Some((command, settings)) = cx.verify else {
        return Ok(true);
    };
    let group = &record.groups[i];
    if group
        .check
        .as_ref()
        .is_some_and(|c| c.command == command && c.passed)
    {
        return Ok(true);
    }
    let checker = super::verify::Checker {
        settings,
        pool: cx.pool.clone(),
        run_id: &record.run_id,
        run_dir: cx.run_dir,
        cancel: cx.cancel,
    };
    let Some(check) = checker.check(&group.name, command, group.commit).await? else {
        return Ok(false);
    };
    let passed = check.passed;
    (cx.progress)(format!(
        "{} {} `{command}`",
        group.name,
        if passed { "passed" } else { "failed" }
    ));
    if !passed {
        let problem = format!(
            "{}: `{command}` failed ({}); see {}",
            group.name,
            check.how,
            check.log.display()
        );
        problems.push(problem.clone());
        record.groups[i].problem = Some(problem);
    }
    record.groups[i].check = Some(check);
    record::save(cx.run_dir, record)?;
    Ok(passed)
}

/// Pushes group `i`'s branch unless the remote has it already; is it there now?
fn pushed(
    cx: &Context<'_>,
    target: &Target,
    out_there: &HashMap<String, Oid>,
    record: &mut LandRecord,
    i: usize,
    problems: &mut Vec<String>,
) -> LandResult<bool> {
    let group = &record.groups[i];
    let outcome = match out_there.get(&group.branch) {
        Some(tip) if *tip == group.commit => Ok(()),
        Some(tip) => Err(format!(
            "{} on {} is at {}, not at what swarm built ({}): someone changed it, and swarm leaves it",
            group.branch,
            target.remote,
            crate::ids::short(tip),
            crate::ids::short(&group.commit)
        )),
        None => remote::push(cx.workdir, &target.remote, group.commit, &group.branch)
            .map(|()| (cx.progress)(format!("{} pushed to {}", group.branch, target.remote)))
            .map_err(|e| e.to_string()),
    };
    let group = &mut record.groups[i];
    let ok = match outcome {
        Ok(()) => {
            group.pushed = Some(target.remote.clone());
            group.problem = None;
            true
        }
        Err(problem) => {
            problems.push(format!("{}: {problem}", group.name));
            group.problem = Some(problem);
            false
        }
    };
    record::save(cx.run_dir, record)?;
    Ok(ok)
}

/// Finds or opens group `i`'s request.
async fn request(
    cx: &Context<'_>,
    forge: &Forge,
    place: &ForgePlace,
    record: &mut LandRecord,
    i: usize,
    warnings: &mut Vec<String>,
) -> Result<PullRequest, ForgeError> {
    let group = &record.groups[i];
    let pull = match forge.find(&group.branch).await? {
        Some(found) => found,
        None => {
            let title = super::body::title(cx.report, group);
            let body = super::body::body(cx.report, record, group);
            let (pull, said) = forge
                .open(&NewRequest {
                    head: &group.branch,
                    base: &place.target,
                    title: &title,
                    body: &body,
                    owners: &group.owners,
                })
                .await?;
            warnings.extend(said);
            (cx.progress)(format!(
                "{} opened {} #{}: {}",
                group.name,
                place.kind.request_word(),
                pull.number,
                pull.url
            ));
            pull
        }
    };
    let group = &mut record.groups[i];
    group.request = Some(pull.clone());
    group.problem = None;
    if let Err(e) = record::save(cx.run_dir, record) {
        return Err(ForgeError {
            call: "saving land.json".into(),
            status: None,
            message: e.to_string(),
        });
    }
    Ok(pull)
}
