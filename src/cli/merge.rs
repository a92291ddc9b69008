//! `swarm merge`: merge the finished task branches of a run (after `--dry-run`, say), or of a
//! plan whose shards ran on other machines.

use std::path::Path;

use clap::Args;
use git2::Oid;

use super::refactor::{Output, check_dirty, check_sandbox, check_worker, execute};
use super::resume::{ResumeArgs, continue_run};
use super::run::{plan_base, read_plan};
use crate::error::{BadInput, exit};
use crate::git::{repo, shard};
use crate::ids::{RunId, RunSelector};
use crate::orchestrator::{Resume, RunRequest, new_report};
use crate::report::{Report, RunState, TaskStatus};
use crate::settings::OnConflict;
use crate::state::RunDir;

/// Merge a run's finished, unmerged task branches into its target, with the same --no-ff
/// merge train as `refactor` (after `swarm refactor --dry-run`, `--review`, or the shards of
/// `swarm run PLAN.json --shard K/N`).
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm refactor 'rename foo to bar' --dry-run --exec '…'
  swarm merge 20261121-133455-4f2a
  swarm merge plan.json --fetch origin --into bulk-rename --push origin

With a PLAN.json, swarm looks for each task's branch swarm/<RUN-ID>/<TASK-ID> and for the
shard records swarm/<RUN-ID>/shard-K-of-N (fetched from REMOTE with --fetch); tasks with
neither are reported as missing (status skipped) and the rest merges. --fetch and --push
shell out to `git fetch`/`git push`, with your credentials.")]
pub struct MergeArgs {
    /// The run (an id or a unique prefix; `swarm status` lists them), or a plan file.
    #[arg(value_name = "PLAN.json|RUN-ID")]
    pub target: String,
    /// First fetch the run's branches (swarm/<RUN-ID>/*) from this remote.
    #[arg(long, value_name = "REMOTE")]
    pub fetch: Option<String>,
    /// Afterwards, push the branch that received the merges to this remote.
    #[arg(long, value_name = "REMOTE")]
    pub push: Option<String>,
    /// Branch that receives the merges [default: the plan's, or the run's].
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,
    /// Check the merged result with this command (instead of the run's own
    /// --verify-merged, if any); tasks that break it are left out.
    #[arg(long, value_name = "CMD")]
    pub verify_merged: Option<String>,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also append every event to FILE as a JSON line while the run goes.
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,
}

pub async fn run(args: MergeArgs) -> anyhow::Result<i32> {
    let plan_file = Path::new(&args.target);
    if args.target.ends_with(".json") || plan_file.is_file() {
        return merge_plan(args).await;
    }
    if args.into.is_some() {
        return Err(BadInput::new("--into applies to merging a plan file")
            .hint("a run merges into the branch it was started for")
            .into());
    }
    let selector: RunSelector = args.target.parse().map_err(|e: crate::ids::IdError| {
        BadInput::new(e.to_string())
            .hint("pass a RUN-ID (`swarm status` lists them) or a plan file")
    })?;
    let info = repo::discover(&std::env::current_dir()?)?;
    let id = super::status::resolve_run_id(&info.common_dir, &selector)?;
    if let Some(remote) = &args.fetch {
        shard::fetch_run(&info.workdir, remote, &id)?;
    }
    let code = continue_run(
        ResumeArgs {
            run_id: selector,
            failed: false,
            keep: false,
            verify_merged: args.verify_merged,
            json: args.json,
            events: args.events,
        },
        true,
    )
    .await?;
    push_result(&info, &id, args.push.as_deref(), code)
}

/// Merges the branches of a plan's tasks, wherever they ran.
async fn merge_plan(args: MergeArgs) -> anyhow::Result<i32> {
    let info = repo::discover(&std::env::current_dir()?)?;
    let repo = info.open()?;
    let mut plan = read_plan(Path::new(&args.target))?;
    let base = plan_base(&repo, &plan)?;
    let run_dir = RunDir::new(&info.common_dir, &plan.run_id);
    if run_dir.is_running() {
        return Err(BadInput::new(format!(
            "run {} is in progress in this repository",
            plan.run_id
        ))
        .hint("wait for it to finish")
        .into());
    }
    if let Some(remote) = &args.fetch {
        shard::fetch_run(&info.workdir, remote, &plan.run_id)?;
    }
    plan.settings.dry_run = false;
    plan.settings.sandbox =
        super::run::local_sandbox(&plan.settings.sandbox, None, None, &info.workdir)?;
    if let Some(check) = args.verify_merged.clone() {
        plan.settings.verify_merged = Some(check);
    }
    let into = repo::resolve_into(
        &repo,
        &info,
        Some(args.into.as_deref().unwrap_or(&plan.into)),
    )?;
    plan.into = into.branch.clone();
    let into_start = into.tip.unwrap_or(base);
    let (report, records) = gather(&repo, &plan, &into.branch, into_start)?;
    let settings = &plan.settings;
    let repairs = settings.on_conflict == OnConflict::Repair;
    let api_key = if repairs {
        check_worker(settings)?
    } else {
        None
    };
    if repairs || settings.verify_merged.is_some() {
        check_sandbox(settings).await?;
    }
    check_dirty(&repo, &into, &plan.tasks, settings.scope)?;

    let count = |s: TaskStatus| report.tasks.iter().filter(|t| t.status == s).count();
    let missing: Vec<&str> = report
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Skipped)
        .map(|t| t.id.as_str())
        .collect();
    eprintln!(
        "swarm: run {}: merging {} task branch(es) of the plan's {} task(s) into {}{}",
        plan.run_id,
        count(TaskStatus::Done),
        plan.tasks.len(),
        into.branch,
        if missing.is_empty() {
            String::new()
        } else {
            format!(
                "; {} missing (no branch, no shard record): {}",
                missing.len(),
                missing.join(", ")
            )
        }
    );
    let run_id = plan.run_id.clone();
    let code = execute(
        RunRequest {
            info: info.clone(),
            plan,
            into,
            into_start,
            keep: false,
            api_key,
            resume: Some(Resume {
                report,
                tip: into_start,
                rerun_failed: false,
                merge_only: true,
            }),
        },
        &Output {
            json: args.json,
            show_diffs: true,
            events: args.events.clone(),
        },
    )
    .await?;
    if code != exit::INTERRUPTED {
        // The records are merged into this run's report now.
        crate::git::finish::delete_branches(&info.common_dir, &records);
    }
    push_result(&info, &run_id, args.push.as_deref(), code)
}

/// The report a plan's merge starts from: tasks with a branch are finished (`done`), tasks a
/// shard record describes have the record's outcome, the others are missing. Also the
/// branches of the shard records.
fn gather(
    repo: &git2::Repository,
    plan: &crate::plan::Plan,
    into: &str,
    into_start: Oid,
) -> anyhow::Result<(Report, Vec<String>)> {
    let mut report = new_report(plan, into, into_start);
    report.state = RunState::Interrupted;
    let records = shard::read_records(repo, &plan.run_id)?;
    let recorded_tasks: std::collections::HashMap<&str, &crate::report::TaskReport> = records
        .iter()
        .flat_map(|(_, r)| &r.tasks)
        .map(|t| (t.id.as_str(), t))
        .collect();
    for t in &mut report.tasks {
        let recorded = recorded_tasks.get(t.id.as_str()).copied();
        let tip = repo
            .find_branch(&t.branch, git2::BranchType::Local)
            .ok()
            .and_then(|b| b.get().target());
        match (tip, recorded) {
            (Some(tip), recorded) => {
                if let Some(r) = recorded {
                    *t = r.clone();
                }
                t.status = TaskStatus::Done;
                t.commit = Some(tip.to_string());
                if t.start.is_none() {
                    t.start = Some(plan.base.clone());
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

/// `--push`: the target if it moved, else the branch holding the result.
fn push_result(
    info: &repo::RepoInfo,
    run: &RunId,
    remote: Option<&str>,
    code: i32,
) -> anyhow::Result<i32> {
    let Some(remote) = remote else {
        return Ok(code);
    };
    if code == exit::INTERRUPTED {
        return Ok(code);
    }
    let report = RunDir::new(&info.common_dir, run).load_report()?;
    let branch = match (&report.result, report.into_updated, &report.result_branch) {
        (None, _, _) => {
            eprintln!("swarm: nothing merged, nothing pushed");
            return Ok(code);
        }
        (Some(_), true, _) => report.into.clone(),
        (Some(_), false, Some(branch)) => branch.clone(),
        (Some(_), false, None) => return Ok(code),
    };
    shard::push(&info.workdir, remote, std::slice::from_ref(&branch), false)?;
    eprintln!("swarm: pushed {branch} to {remote}");
    Ok(code)
}
