//! `swarm resume`: finish an interrupted run.

use clap::Args;
use git2::Oid;

use super::refactor::{Output, check_dirty, check_sandbox, check_worker, execute};
use super::status::resolve_run_id;
use crate::error::{BadInput, exit};
use crate::git::{merge, repo, worktree};
use crate::ids::RunSelector;
use crate::orchestrator::{Resume, RunRequest, result_branch};
use crate::plan::Plan;
use crate::report::{RunState, TaskStatus};
use crate::settings::OnConflict;
use crate::state::{self, RunDir};

/// Finish an interrupted run (Ctrl-C, a crash, kill -9): tasks that had not finished run
/// again, finished ones are merged, and the target moves once at the end.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  swarm resume 20261121-133455-4f2a\n  swarm resume 20261121 --failed"
)]
pub struct ResumeArgs {
    /// The run (an id or a unique prefix; `swarm status` lists them).
    pub run_id: RunSelector,
    /// Also run failed, timed-out and conflicted tasks again.
    #[arg(long)]
    pub failed: bool,
    /// Keep worktrees and task branches after the run.
    #[arg(long)]
    pub keep: bool,
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

pub async fn run(args: ResumeArgs) -> anyhow::Result<i32> {
    continue_run(args, false).await
}

/// Continues run `args.run_id`: reruns what is left and merges (`resume`), or only merges
/// its finished, unmerged tasks (`merge_only`: `swarm merge`).
pub(super) async fn continue_run(args: ResumeArgs, merge_only: bool) -> anyhow::Result<i32> {
    let info = repo::discover(&std::env::current_dir()?)?;
    let id = resolve_run_id(&info.common_dir, &args.run_id)?;
    let run_dir = RunDir::new(&info.common_dir, &id);
    if run_dir.is_running() {
        return Err(BadInput::new(format!(
            "run {id} is still running in another swarm process"
        ))
        .hint("wait for it to finish, or stop it (Ctrl-C) and resume then")
        .into());
    }
    let mut plan: Plan = state::read_json(&run_dir.plan())?;
    // This pass merges (a --dry-run's tasks included).
    plan.settings.dry_run = false;
    if let Some(check) = args.verify_merged {
        plan.settings.verify_merged = Some(check);
    }
    let mut report = run_dir.load_report()?;
    let into_start = Oid::from_str(&report.into_start)?;
    let repo = info.open()?;
    let tip = repo
        .refname_to_id(&format!("refs/heads/{}", result_branch(&id)))
        .unwrap_or(into_start);
    // The report is saved at most once a second, so after a crash it may lag behind git: the
    // merges on the integration branch say which tasks really are merged.
    for (task_id, merge, task_commit) in merge::merges_between(&repo, into_start, tip)? {
        if let Some(t) = report.tasks.iter_mut().find(|t| t.id == task_id) {
            t.status = TaskStatus::Merged;
            t.merge_commit = Some(merge.to_string());
            t.commit = Some(task_commit.to_string());
            t.error = None;
        }
    }
    let to_do = report
        .tasks
        .iter()
        .filter(|t| match merge_only {
            true => t.status == TaskStatus::Done && t.commit.is_some(),
            false => t.status.left_to_do(args.failed),
        })
        .count();
    if merge_only && to_do == 0 {
        eprintln!("swarm: run {id} has no finished task left to merge");
        return Ok(exit::SUCCESS);
    }
    if to_do == 0 && report.state == RunState::Finished {
        eprintln!(
            "swarm: run {id} has nothing left to do{}",
            if args.failed {
                ""
            } else {
                " (--failed runs failed tasks again)"
            }
        );
        return Ok(exit::SUCCESS);
    }
    let into = repo::resolve_into(&repo, &info, Some(&report.into))?;
    // `swarm merge` runs no worker, but may run the merged check or repair conflicts.
    let settings = &plan.settings;
    let repairs = settings.on_conflict == OnConflict::Repair;
    let api_key = if merge_only && !repairs {
        None
    } else {
        check_worker(settings)?
    };
    if !merge_only || repairs || settings.verify_merged.is_some() {
        check_sandbox(settings).await?;
    }
    check_dirty(&repo, &into, &plan.tasks, plan.settings.scope)?;

    // What a crashed run left behind.
    worktree::remove_run_worktrees(&info.common_dir, &id)?;
    eprintln!(
        "swarm: run {id}: {} {to_do} task(s) of {}, -j {}, into {}",
        if merge_only { "merging" } else { "resuming" },
        plan.tasks.len(),
        plan.settings.jobs,
        into.branch
    );
    execute(
        RunRequest {
            info,
            plan,
            into,
            into_start,
            keep: args.keep,
            api_key,
            resume: Some(Resume {
                report,
                tip,
                rerun_failed: args.failed,
                merge_only,
            }),
        },
        &Output {
            json: args.json,
            show_diffs: true,
            events: args.events,
        },
    )
    .await
}
