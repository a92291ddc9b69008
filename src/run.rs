//! `swarm run`: run a plan's tasks (or one shard of them) and leave their branches.

use crate::error::{CommandError, CommandResult};
use std::path::PathBuf;

use clap::Args;

use super::execute::{Output, execute};
use crate::exit;
use swarm_engine::app::env_vars;
use swarm_engine::app::settings::{Layer, SandboxMode};
use swarm_engine::app::shard::{self, Shard, ShardSpec};

/// Run the tasks of a plan written by `swarm plan` (all, or one shard) and leave their
/// branches, merging nothing; `--push` sends them to a remote for `swarm merge PLAN.json`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm run plan.json                          # every task, here
  swarm run plan.json --shard 2/4 --push origin

A shard K/N takes the tasks at positions K, K+N, K+2N… of the plan, the same on every
machine. Besides the task branches swarm/<RUN-ID>/<TASK-ID>, a shard leaves the branch
swarm/<RUN-ID>/shard-K-of-N with its report, so the merge knows which tasks needed no
change or failed. Pushing shells out to `git push`, with your credentials.")]
pub(crate) struct RunArgs {
    /// The plan file (`swarm plan -o PLAN.json`).
    #[arg(value_name = "PLAN.json")]
    pub plan: PathBuf,
    /// Run only shard K of N (1 <= K <= N); auto: K and N from the CI (GitLab parallel:,
    /// Buildkite parallelism), auto/N: K from a Kubernetes Indexed Job's index.
    #[arg(long, value_name = "K/N|auto")]
    pub shard: Option<ShardSpec>,
    /// Push the task branches and the shard record to this remote (`git push --force`).
    #[arg(long, value_name = "REMOTE")]
    pub push: Option<String>,
    /// Workers running at once [default: the plan's].
    #[arg(short, long, value_name = "N", env = env_vars::SWARM_JOBS)]
    pub jobs: Option<usize>,
    /// Worker confinement [default: workspace-write]. A plan file cannot weaken the sandbox:
    /// only this flag, --network or your own config file can.
    #[arg(long, value_name = "MODE", value_parser = super::keywords::<SandboxMode>(SandboxMode::NAMES))]
    pub sandbox: Option<SandboxMode>,
    /// Let worker processes reach the network.
    #[arg(long)]
    pub network: bool,
    /// Let worker processes reach this domain (and nothing else) through swarm's proxy.
    /// Repeatable.
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub allow_domains: Vec<String>,
    /// Keep the worktrees after the run.
    #[arg(long)]
    pub keep: bool,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also append every event to FILE as a JSON line while the run goes.
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,
    /// Do not ask before running the plan's commands (swarm asks only on a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
}

pub(crate) async fn run(args: RunArgs) -> CommandResult<i32> {
    let cwd = std::env::current_dir()?;
    let mut settings = Layer::default();
    settings.run.jobs = args.jobs;
    settings.sandbox.mode = args.sandbox;
    settings.sandbox.network = args.network.then_some(true);
    settings.sandbox.allow_domains = Some(args.allow_domains.clone()).filter(|d| !d.is_empty());
    let shard_of = match args.shard {
        None => Shard { k: 1, n: 1 },
        Some(spec) => spec
            .resolve(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
            .map_err(CommandError::ShardAuto)?,
    };
    let prepared = shard::prepare(&cwd, &args.plan, shard_of, settings, args.keep).await?;
    for warning in &prepared.warnings {
        eprintln!("warning: {warning}");
    }
    let request = prepared.request;
    let intro = format!("swarm: {} runs:", args.plan.display());
    if !super::confirm::commands_then_ask(&intro, &request.settings.commands(), args.yes)? {
        eprintln!("swarm: nothing done");
        return Ok(exit::SUCCESS);
    }
    let (run_id, info) = (request.plan.run_id.clone(), request.info.clone());
    super::render::say(&format!(
        "swarm: run {run_id}: shard {}/{}: {} of the plan's {} task(s), -j {}",
        shard_of.k,
        shard_of.n,
        request.plan.tasks.len(),
        prepared.total,
        request.settings.jobs
    ));
    let code = execute(
        *request,
        &Output {
            json: args.json,
            show_diffs: false,
            events: args.events.clone(),
            page: None,
        },
    )
    .await?;
    if code == exit::INTERRUPTED {
        return Ok(code);
    }
    let recorded = shard::record(&info, &run_id, shard_of, args.push.as_deref())?;
    match (&args.push, recorded.pushed) {
        (Some(remote), Some(n)) => eprintln!(
            "swarm: pushed {n} branch(es) to {remote}; merge every shard with: swarm merge {} --fetch {remote}",
            args.plan.display()
        ),
        _ => eprintln!(
            "swarm: shard record on {}; merge with: swarm merge {} (in this clone, or after \
             pushing swarm/{run_id}/* elsewhere)",
            recorded.record,
            args.plan.display()
        ),
    }
    Ok(code)
}
