//! `swarm merge`: merge the finished task branches of a run (after `--dry-run`, say), or of a
//! plan whose shards ran on other machines.

use crate::error::{CommandError, CommandResult};
use std::path::Path;

use clap::Args;

use super::execute::{Output, execute};
use crate::exit;
use swarm_engine::app::AppError;
use swarm_engine::app::RepoInfo;
use swarm_engine::app::RunMode;
use swarm_engine::app::ids::{RunId, RunSelector};
use swarm_engine::app::reconcile::{self, Continuing, MergePlan};

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
pub(crate) struct MergeArgs {
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
    /// Move the target only if every task merged; otherwise the result stays on
    /// swarm/<RUN-ID>/result.
    #[arg(long)]
    pub atomic: bool,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also append every event to FILE as a JSON line while the run goes.
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,
    /// Do not ask before running a plan file's checks (swarm asks only on a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
}

pub(crate) async fn run(args: MergeArgs) -> CommandResult<i32> {
    let cwd = std::env::current_dir()?;
    let plan_file = Path::new(&args.target);
    if args.target.ends_with(".json") || plan_file.is_file() {
        return merge_plan(args, cwd).await;
    }
    if args.into.is_some() {
        return Err(CommandError::IntoWithRun);
    }
    let selector: RunSelector = args.target.parse().map_err(AppError::Id)?;
    if let Some(remote) = &args.fetch {
        reconcile::fetch_run(&cwd, &selector, remote)?;
    }
    let continuing = reconcile::continue_run(
        &cwd,
        &selector,
        RunMode::MergeOnly,
        false,
        reconcile::Overrides {
            verify_merged: args.verify_merged,
            atomic: args.atomic,
            ..Default::default()
        },
    )
    .await?;
    let target = match &continuing {
        Continuing::Ready { request, .. } => {
            Some((request.info.clone(), request.plan.run_id.clone()))
        }
        Continuing::Nothing(_) => None,
    };
    let out = Output {
        json: args.json,
        show_diffs: true,
        events: args.events,
        page: None,
    };
    let code = super::resume::run_continuing(continuing, RunMode::MergeOnly, out).await?;
    match target {
        Some((info, id)) => push(
            &info,
            &id,
            args.push.as_deref(),
            code,
            &reconcile::Records::default(),
        ),
        None => Ok(code),
    }
}

/// Merges the branches of a plan's tasks, wherever they ran.
async fn merge_plan(args: MergeArgs, cwd: std::path::PathBuf) -> CommandResult<i32> {
    let merge = reconcile::merge_plan(MergePlan {
        cwd: cwd.clone(),
        plan: args.target.clone().into(),
        fetch: args.fetch.clone(),
        into: args.into.clone(),
        verify_merged: args.verify_merged.clone(),
        atomic: args.atomic,
    })
    .await?;
    for warning in &merge.warnings {
        eprintln!("warning: {warning}");
    }
    // Merging runs no worker: only the checks and the repairs of the merged result.
    let commands: Vec<_> = merge
        .request
        .settings
        .commands()
        .into_iter()
        .filter(|(role, _)| matches!(*role, "verify-merged" | "repair" | "run"))
        .collect();
    let intro = format!("swarm: merging {} runs:", args.target);
    if !super::confirm::commands_then_ask(&intro, &commands, args.yes)? {
        eprintln!("swarm: nothing done");
        return Ok(exit::SUCCESS);
    }
    let request = &merge.request;
    let done = request
        .continuation
        .as_ref()
        .map(|c| {
            c.report
                .tasks
                .iter()
                .filter(|t| t.status == swarm_engine::app::report::TaskStatus::Done)
                .count()
        })
        .unwrap_or(0);
    super::render::say(&format!(
        "swarm: run {}: merging {done} task branch(es) of the plan's {} task(s) into {}{}",
        request.plan.run_id,
        request.plan.tasks.len(),
        request.into.branch,
        if merge.missing.is_empty() {
            String::new()
        } else {
            format!(
                "; {} missing (no branch, no shard record): {}",
                merge.missing.len(),
                merge.missing.join(", ")
            )
        }
    ));
    if super::render::is_quiet() && !merge.missing.is_empty() {
        eprintln!(
            "warning: {} task(s) missing (no branch, no shard record): {}",
            merge.missing.len(),
            merge.missing.join(", ")
        );
    }
    let (run_id, info) = (request.plan.run_id.clone(), request.info.clone());
    let code = execute(
        *merge.request,
        &Output {
            json: args.json,
            show_diffs: true,
            events: args.events.clone(),
            page: None,
        },
    )
    .await?;
    let mut records = reconcile::Records::default();
    if code != exit::INTERRUPTED {
        // The records are merged into this run's report now.
        records = reconcile::drop_records(&info, &merge.records);
    }
    push(&info, &run_id, args.push.as_deref(), code, &records)
}

/// `--push`: the target if it moved, else the branch holding the result; then the merged
/// tasks' branches and the shard `records` are removed from the remote.
fn push(
    info: &RepoInfo,
    run: &RunId,
    remote: Option<&str>,
    code: i32,
    records: &reconcile::Records,
) -> CommandResult<i32> {
    let Some(remote) = remote.filter(|_| code != exit::INTERRUPTED) else {
        return Ok(code);
    };
    let pushed = reconcile::push_result(info, run, remote, records)?;
    match pushed.branch {
        Some(branch) => eprintln!("swarm: pushed {branch} to {remote}"),
        None => eprintln!("swarm: nothing merged, nothing pushed"),
    }
    if !pushed.removed.is_empty() {
        eprintln!(
            "swarm: removed {} merged branch(es) of the run from {remote}",
            pushed.removed.len()
        );
    }
    Ok(code)
}
