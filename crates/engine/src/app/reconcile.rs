//! Continuing a run from what git holds (`swarm resume`, `swarm merge RUN-ID`, `swarm merge
//! PLAN.json`): the report is rebuilt from the integration branch, the task branches and the
//! shard records, since a report saved once a second may lag behind git, and a plan's shards
//! ran elsewhere.

use std::path::{Path, PathBuf};

use git2::Oid;

use super::checks;
use super::error::{AppError, AppResult, Busy};
use super::runs;
use crate::git::repo::{self, RepoInfo};
use crate::git::{merge, shard, worktree};
use crate::ids::{RunId, RunSelector};
use crate::orchestrator::Secrets;
use crate::orchestrator::{self, Continuation, RunMode, RunRequest, result_branch};
use crate::plan::{self, Plan};
use crate::report::{Report, RunState, TaskStatus};
use crate::settings::{Layer, OnConflict, PlanSource, Resolved, Settings, SettingsError};
use crate::state::{self, RunDir};

/// What continuing gave.
pub enum Continuing {
    /// Nothing left to do, and why.
    Nothing(String),
    /// A run to start, and how many tasks it runs or merges.
    Ready {
        request: Box<RunRequest>,
        to_do: usize,
        /// Settings asked for where they may not be set, and ignored.
        warnings: Vec<String>,
    },
}

/// `swarm merge RUN-ID --fetch REMOTE`: first fetches the run's branches (`swarm/<RUN-ID>/*`).
pub fn fetch_run(cwd: &Path, wanted: &RunSelector, remote: &str) -> AppResult<()> {
    let info = repo::discover(cwd)?;
    let id = runs::resolve(&info.common_dir, wanted)?;
    Ok(shard::fetch_run(&info.workdir, remote, &id)?)
}

/// The shard records a merge took in: their branches and where they pointed.
#[derive(Debug, Default)]
pub struct Records(Vec<(String, Oid)>);

/// After a plan's merge: its shard records are merged into the run's report now. Gives the
/// records' branches and where they pointed, for `--push` to remove them from the remote.
pub fn drop_records(info: &RepoInfo, records: &[String]) -> Records {
    let tips = git2::Repository::open(&info.common_dir)
        .map(|repo| {
            records
                .iter()
                .filter_map(|name| {
                    let id = repo.refname_to_id(&format!("refs/heads/{name}")).ok()?;
                    Some((name.clone(), id))
                })
                .collect()
        })
        .unwrap_or_default();
    crate::git::finish::delete_branches(&info.common_dir, records);
    Records(tips)
}

/// What `swarm resume` (or `merge`) changes of the run's settings; also what MCP's `resume`
/// hands the run it starts (`jobs`, `scope`, `ok_exit_codes`).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Overrides {
    pub verify_merged: Option<String>,
    /// `--atomic`.
    pub atomic: bool,
    pub max_tokens: Option<u64>,
    pub max_cost: Option<f64>,
    /// `swarm resume --exec`: a corrected worker command for the tasks this resume runs.
    pub exec: Option<String>,
    /// `swarm resume --verify`: a corrected check, likewise.
    pub verify: Option<String>,
    /// `swarm resume --scope`: a corrected scope, likewise.
    pub scope: Option<crate::settings::Scope>,
    /// `swarm resume --ok-exit-codes`: corrected statuses of success, likewise.
    pub ok_exit_codes: Option<Vec<i32>>,
    /// `swarm resume -j`: workers at once for the tasks this resume runs.
    pub jobs: Option<usize>,
}

impl Overrides {
    /// The overrides as the command line's layer, over the run's own.
    fn layer(self) -> AppResult<Layer> {
        let mut layer = Layer::default();
        layer.run.verify_merged = self.verify_merged;
        layer.run.atomic = self.atomic.then_some(true);
        layer.run.max_tokens = self.max_tokens;
        layer.run.exec = self.exec;
        layer.run.verify = self.verify;
        layer.run.scope = self.scope;
        layer.run.ok_exit_codes = self.ok_exit_codes;
        layer.run.jobs = self.jobs;
        layer.run.max_cost = match self.max_cost {
            // Not a number: refused as a budget of nothing is.
            Some(usd) => Some(
                serde_json::Number::from_f64(usd)
                    .ok_or(SettingsError::Zero(crate::settings::Count::MaxCost))?,
            ),
            None => None,
        };
        Ok(layer)
    }
}

/// A run's plan, and the settings it runs with again: `layer` (the command line's) over the
/// plan's own, over this machine's.
pub(crate) fn run_settings(
    info: &RepoInfo,
    run_dir: &RunDir,
    layer: Layer,
) -> AppResult<(Plan, Resolved)> {
    let plan: Plan = state::read_json(&run_dir.plan())?;
    let own = (plan.settings.clone(), PlanSource::Own);
    let resolved = Settings::resolve(layer, Some(own), &info.workdir)?;
    Ok((plan, resolved))
}

pub async fn continue_run(
    cwd: &Path,
    wanted: &RunSelector,
    mode: RunMode,
    keep: bool,
    overrides: Overrides,
) -> AppResult<Continuing> {
    let info = repo::discover(cwd)?;
    let id = runs::resolve(&info.common_dir, wanted)?;
    let run_dir = RunDir::new(&info.common_dir, &id);
    // Held from here to the run's end: nobody starts the run between its recovery and it.
    let busy = match mode {
        RunMode::MergeOnly => Busy::Merge,
        _ => Busy::Resume,
    };
    let (lock, recovered) = runs::recover_killed(&info, &id, busy)?;
    let new_exec = overrides.exec.is_some();
    let (plan, resolved) = run_settings(&info, &run_dir, overrides.layer()?)?;
    let (settings, warnings) = (resolved.settings, resolved.warnings);
    if let (true, Some(agent)) = (new_exec, &settings.agent) {
        return Err(AppError::ExecOverAgent(agent.name.clone()));
    }
    if !run_dir.report().exists() {
        return Err(AppError::NeverStarted(id));
    }
    let mut report = run_dir.load_report()?;
    if let Err(problem) = plan.check_report(&report) {
        return Err(AppError::RunRecords { run: id, problem });
    }
    let repo = info.open()?;
    let (into_start, tip) = where_it_stands(&repo, &report, &id);
    let run_start = report.into_start;
    mark_merged_from_git(&repo, &mut report, run_start, tip)?;
    let merge_only = !mode.runs_workers();
    let to_do = match left_to_do(&report, mode) {
        Ok(to_do) => to_do,
        Err(why) => return Ok(Continuing::Nothing(why)),
    };
    let into = repo::resolve_into(&repo, &info, Some(&report.into))?;
    let workers = match merge_only {
        true => 1,
        false => settings.jobs.min(to_do),
    };
    match merge_only {
        // `--exec` may have replaced the command the run was planned with.
        false => checks::files_reach_the_command(&settings, &plan.tasks)?,
        true => checks::merged_check(&settings)?,
    }
    let secrets = check_for_continuing(&settings, merge_only, workers).await?;
    checks::checkout(&repo, &into, &plan.tasks, settings.scope)?;
    // What a crashed run left behind.
    worktree::remove_run_worktrees(&info.common_dir, &id)?;
    Ok(Continuing::Ready {
        request: Box::new(RunRequest {
            info,
            plan,
            settings,
            into,
            into_start,
            keep,
            secrets,
            mode,
            continuation: Some(Continuation {
                report,
                tip,
                recovered,
                lock,
            }),
        }),
        to_do,
        warnings,
    })
}

/// Where the run's target starts for this attempt, and the integration tip so far.
fn where_it_stands(repo: &git2::Repository, report: &Report, id: &RunId) -> (Oid, Oid) {
    // Where the run started, or the result the run's last attempt moved the target to
    // (merges continue from there).
    let into_start = match (report.into_updated, report.result) {
        (true, Some(result)) => result,
        _ => report.into_start,
    };
    let tip = repo
        .refname_to_id(&crate::git::branch_ref(&result_branch(id)))
        .unwrap_or(into_start);
    // A run killed just after it moved the target (its update finished by the recovery).
    let into_start = match repo.refname_to_id(&crate::git::branch_ref(&report.into)) {
        Ok(at) if at == tip => tip,
        _ => into_start,
    };
    (into_start, tip)
}

/// How many tasks `mode` runs or merges; `Err` says why there are none.
fn left_to_do(report: &Report, mode: RunMode) -> Result<usize, String> {
    let id = &report.run_id;
    let merge_only = !mode.runs_workers();
    let to_do = report
        .tasks
        .iter()
        .filter(|t| match merge_only {
            true => t.status == TaskStatus::Done && t.commit.is_some(),
            false => t.left_to_do(mode.reruns_failed()),
        })
        .count();
    if merge_only && to_do == 0 {
        return Err(format!("run {id} has no finished task left to merge"));
    }
    if to_do == 0 && report.state == RunState::Finished {
        return Err(format!(
            "run {id} has nothing left to do{}",
            if mode.reruns_failed() {
                ""
            } else {
                " (--failed runs failed tasks again)"
            }
        ));
    }
    Ok(to_do)
}

/// The merges on the integration branch say which tasks really are merged.
fn mark_merged_from_git(
    repo: &git2::Repository,
    report: &mut Report,
    into_start: Oid,
    tip: Oid,
) -> AppResult<()> {
    for (task_id, merge, task_commit) in merge::merges_between(repo, into_start, tip)? {
        if let Some(t) = report.tasks.iter_mut().find(|t| t.id == task_id) {
            t.status = TaskStatus::Merged;
            t.merge_commit = Some(merge);
            t.commit = Some(task_commit);
            t.error = None;
            // A run killed before it saved the task's report: what the merge changed.
            if t.changed_files.is_empty() {
                let merge = repo.find_commit(merge)?;
                let (before, after) = (merge.parent(0)?.tree()?, merge.tree()?);
                t.changed_files = crate::git::changed_paths(repo, &before, &after)?;
                t.deleted_files = t
                    .changed_files
                    .iter()
                    .filter(|p| after.get_path(p.as_path()).is_err())
                    .cloned()
                    .collect();
            }
        }
    }
    Ok(())
}

/// `swarm merge` runs no worker, but may run the merged check or repair conflicts; `swarm
/// resume` runs workers, `workers` of them at once.
async fn check_for_continuing(
    settings: &Settings,
    merge_only: bool,
    workers: usize,
) -> AppResult<Secrets> {
    checks::merge_tool(settings)?;
    let repairs = settings.on_conflict == OnConflict::Repair;
    let model_key = match merge_only && !repairs {
        true => None,
        false => checks::worker(settings)?,
    };
    let mut secrets = Secrets {
        model_key,
        agent: Vec::new(),
    };
    if !merge_only || repairs || settings.verify_merged.is_some() {
        super::agents::installed(settings)?;
        secrets.agent = checks::agent_secrets(settings)?;
        checks::machine(settings, workers).await?;
    }
    Ok(secrets)
}

/// `swarm merge PLAN.json`: what is asked.
pub struct MergePlan {
    pub cwd: PathBuf,
    pub plan: PathBuf,
    pub fetch: Option<String>,
    pub into: Option<String>,
    pub verify_merged: Option<String>,
    /// `--atomic`.
    pub atomic: bool,
}

/// A plan's merge, ready to run: the request, and what the shards left.
pub struct PlanMerge {
    pub request: Box<RunRequest>,
    /// Shard record branches, deleted once merged.
    pub records: Vec<String>,
    /// Tasks with no branch and no record.
    pub missing: Vec<String>,
    pub warnings: Vec<String>,
}

/// Merges the branches of a plan's tasks, wherever they ran.
pub async fn merge_plan(req: MergePlan) -> AppResult<PlanMerge> {
    let info = repo::discover(&req.cwd)?;
    let repo = info.open()?;
    let mut plan = plan::file::read(&req.plan)?;
    let base = plan::file::base(&repo, &plan)?;
    if let Some(remote) = &req.fetch {
        shard::fetch_run(&info.workdir, remote, &plan.run_id)?;
    }
    let overrides = Overrides {
        verify_merged: req.verify_merged,
        atomic: req.atomic,
        ..Overrides::default()
    };
    let from_file = (plan.settings.clone(), PlanSource::File);
    let resolved = Settings::resolve(overrides.layer()?, Some(from_file), &info.workdir)?;
    let (settings, warnings) = (resolved.settings, resolved.warnings);
    let into = repo::resolve_into(
        &repo,
        &info,
        Some(req.into.as_deref().unwrap_or(&plan.into)),
    )?;
    plan.into = into.branch.clone();
    let into_start = into.tip.unwrap_or(base);
    let (report, records) = gather(&repo, &plan, &into.branch, into_start)?;
    let secrets = check_for_continuing(&settings, true, 1).await?;
    checks::checkout(&repo, &into, &plan.tasks, settings.scope)?;
    let missing = report
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Skipped)
        .map(|t| t.id.to_string())
        .collect();
    Ok(PlanMerge {
        request: Box::new(RunRequest {
            info,
            plan,
            settings,
            into,
            into_start,
            keep: false,
            secrets,
            mode: RunMode::MergeOnly,
            continuation: Some(Continuation {
                report,
                tip: into_start,
                recovered: Vec::new(),
                lock: None,
            }),
        }),
        records,
        missing,
        warnings,
    })
}

/// The report a plan's merge starts from: tasks with a branch are finished (`done`), tasks a
/// shard record describes have the record's outcome, the others are missing. Also the
/// branches of the shard records.
fn gather(
    repo: &git2::Repository,
    plan: &Plan,
    into: &str,
    into_start: Oid,
) -> AppResult<(Report, Vec<String>)> {
    // A shard's record says what its tasks' candidates did.
    let one = crate::settings::Candidates::One;
    let mut report = orchestrator::new_report(plan, into, into_start, one);
    report.state = RunState::Interrupted;
    let records = shard::read_records(repo, &plan.run_id)?;
    let recorded_tasks: std::collections::HashMap<_, _> = records
        .iter()
        .flat_map(|(_, r)| &r.tasks)
        .map(|t| (t.id.clone(), t))
        .collect();
    for t in &mut report.tasks {
        let recorded = recorded_tasks.get(&t.id).copied();
        // With candidates, the task's branch is its winner's, which the record names.
        let branch = recorded.map_or(t.branch.as_str(), |r| r.branch.as_str());
        let tip = repo
            .find_branch(branch, git2::BranchType::Local)
            .ok()
            .and_then(|b| b.get().target());
        match (tip, recorded) {
            (Some(tip), recorded) => {
                if let Some(r) = recorded {
                    *t = r.clone();
                }
                t.status = TaskStatus::Done;
                t.commit = Some(tip);
                if t.start.is_none() {
                    t.start = Some(plan.base);
                }
                t.error = None;
            }
            (None, Some(r)) => {
                *t = r.clone();
                if t.status == TaskStatus::Done {
                    // The record says it finished, but its branch did not arrive.
                    t.status = TaskStatus::Skipped;
                    t.error = Some(format!(
                        "missing: its shard finished it but branch {} is not here (was it pushed?)",
                        t.branch
                    ));
                }
            }
            (None, None) => {
                t.status = TaskStatus::Skipped;
                t.error = Some(format!(
                    "missing: no branch {} and no shard record (did its shard run and push?)",
                    t.branch
                ));
            }
        }
    }
    let names = records.into_iter().map(|(name, _)| name).collect();
    Ok((report, names))
}

/// What `--push` did.
#[derive(Debug, Default)]
pub struct Pushed {
    /// The branch pushed: the target if it moved, else the one holding the result.
    pub branch: Option<String>,
    /// The run's branches removed from the remote: the merged tasks' and the shard records.
    pub removed: Vec<String>,
}

/// `--push REMOTE` after a merge: the target if it moved, else the branch holding the
/// result; then the run's branches on the remote that the result holds (merged tasks', and
/// `records`, the shard records merged), each only where it still points as merged. Branches
/// of tasks that did not merge stay.
pub fn push_result(
    info: &RepoInfo,
    run: &RunId,
    remote: &str,
    records: &Records,
) -> AppResult<Pushed> {
    let report = RunDir::new(&info.common_dir, run).load_report()?;
    let branch = match (&report.result, report.into_updated, &report.result_branch) {
        (None, _, _) | (Some(_), false, None) => return Ok(Pushed::default()),
        (Some(_), true, _) => report.into.clone(),
        (Some(_), false, Some(branch)) => branch.clone(),
    };
    shard::push(&info.workdir, remote, std::slice::from_ref(&branch), false)?;
    let mut merged: std::collections::HashSet<(String, Oid)> = records.0.iter().cloned().collect();
    for task in report
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Merged)
    {
        merged.extend(task.commit.map(|c| (task.branch.clone(), c)));
        for candidate in &task.candidates {
            merged.extend(candidate.commit.map(|c| (candidate.branch.clone(), c)));
        }
    }
    let on_remote = shard::remote_run_branches(&info.workdir, remote, run)?;
    let removable: Vec<(String, Oid)> = on_remote
        .into_iter()
        .filter(|there| merged.contains(there))
        .collect();
    shard::delete_remote(&info.workdir, remote, &removable)?;
    Ok(Pushed {
        branch: Some(branch),
        removed: removable.into_iter().map(|(name, _)| name).collect(),
    })
}
