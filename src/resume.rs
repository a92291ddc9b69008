//! `swarm resume`: finish an interrupted run.

use crate::error::CommandResult;
use clap::Args;

use super::execute::{Output, execute};
use crate::exit;
use swarm_engine::app::RunMode;
use swarm_engine::app::ids::RunSelector;
use swarm_engine::app::reconcile::{self, Continuing};
use swarm_engine::app::settings::Scope;

/// Finish an interrupted run (Ctrl-C, a crash, kill -9): tasks that had not finished run
/// again, finished ones are merged, and the target moves once at the end.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  swarm resume 20261121-133455-4f2a\n  swarm resume 20261121 --failed"
)]
pub(crate) struct ResumeArgs {
    /// The run (an id or a unique prefix; `swarm status` lists them).
    pub run_id: RunSelector,
    /// Also run failed, timed-out and conflicted tasks again.
    #[arg(long)]
    pub failed: bool,
    /// Keep worktrees and task branches after the run.
    #[arg(long)]
    pub keep: bool,
    /// A corrected worker command for the tasks this resume runs (with --failed, the failed
    /// ones); the run's plan keeps its own.
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// A corrected --verify check for the tasks this resume runs.
    #[arg(long, value_name = "CMD")]
    pub verify: Option<String>,
    /// A corrected --scope for the tasks this resume runs: `any` where the command also
    /// writes files of other tasks (as rustfmt writes the modules a file declares).
    #[arg(long, value_name = "SCOPE", value_parser = super::keywords::<Scope>(Scope::NAMES))]
    pub scope: Option<Scope>,
    /// Corrected --ok-exit-codes for the tasks this resume runs (`0,1` for a codemod that
    /// exits 1 when it rewrote a file: pyupgrade, `ruff check --fix`).
    #[arg(long, value_name = "CODES", value_delimiter = ',')]
    pub ok_exit_codes: Option<Vec<i32>>,
    /// Check the merged result with this command (instead of the run's own
    /// --verify-merged, if any); tasks that break it are left out.
    #[arg(long, value_name = "CMD")]
    pub verify_merged: Option<String>,
    /// A new token budget for the whole run (tasks skipped for the old one run now).
    #[arg(long, visible_alias = "max-run-tokens", value_name = "N", value_parser = super::tokens)]
    pub max_tokens: Option<u64>,
    /// A new spending cap for the whole run, in US dollars.
    #[arg(long, value_name = "USD", value_parser = super::usd)]
    pub max_cost: Option<f64>,
    /// Workers running at once for the tasks this resume runs (the run's own --jobs if not
    /// given), e.g. on a machine smaller than the one that started the run.
    #[arg(short = 'j', long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also append every event to FILE as a JSON line while the run goes.
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,
    /// Accepted for scripts that pass it to every command: resume does not ask (it runs the
    /// run's own plan).
    #[arg(short = 'y', long)]
    pub yes: bool,
}

pub(crate) async fn run(args: ResumeArgs) -> CommandResult<i32> {
    let mode = match args.failed {
        true => RunMode::RerunFailed,
        false => RunMode::Resume,
    };
    let cwd = std::env::current_dir()?;
    let overrides = reconcile::Overrides {
        verify_merged: args.verify_merged,
        max_tokens: args.max_tokens,
        max_cost: args.max_cost,
        // An --atomic run stays atomic: the setting is the plan's.
        atomic: false,
        exec: args.exec.clone(),
        verify: args.verify.clone(),
        scope: args.scope,
        ok_exit_codes: args.ok_exit_codes.clone(),
        jobs: args.jobs,
    };
    let continuing =
        reconcile::continue_run(&cwd, &args.run_id, mode, args.keep, overrides).await?;
    if matches!(continuing, Continuing::Ready { .. }) {
        let scope = args.scope.map(|s| s.to_string());
        let codes = args.ok_exit_codes.as_ref().map(|codes| {
            let codes: Vec<String> = codes.iter().map(i32::to_string).collect();
            codes.join(",")
        });
        let corrected = [
            ("--exec", &args.exec),
            ("--verify", &args.verify),
            ("--scope", &scope),
            ("--ok-exit-codes", &codes),
        ];
        for (flag, command) in corrected {
            if let Some(command) = command {
                super::render::say(&format!(
                    "swarm: the tasks this resume runs use {flag} {command} (not the run's own)"
                ));
            }
        }
    }
    let out = Output {
        json: args.json,
        show_diffs: true,
        events: args.events,
        page: None,
    };
    run_continuing(continuing, mode, out).await
}

/// Announces and runs a continuing run (resume, merge of a run).
pub(super) async fn run_continuing(
    continuing: Continuing,
    mode: RunMode,
    out: Output,
) -> CommandResult<i32> {
    let (request, to_do) = match continuing {
        Continuing::Nothing(why) => {
            super::render::say(&format!("swarm: {why}"));
            return Ok(exit::SUCCESS);
        }
        Continuing::Ready {
            request,
            to_do,
            warnings,
        } => {
            for warning in &warnings {
                eprintln!("warning: {warning}");
            }
            (request, to_do)
        }
    };
    super::render::say(&format!(
        "swarm: run {}: {} {to_do} task(s) of {}, -j {}, into {}",
        request.plan.run_id,
        if mode.runs_workers() {
            "resuming"
        } else {
            "merging"
        },
        request.plan.tasks.len(),
        request.settings.jobs,
        request.into.branch
    ));
    execute(*request, &out).await
}
