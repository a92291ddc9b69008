//! `swarm mcp`: serve this repository to a coding agent over the Model Context Protocol.

use crate::error::CommandResult;
use std::path::PathBuf;

use swarm_engine::app::settings::{Layer, SandboxMode};
use swarm_engine::app::{AppError, RunMode, prepare, reconcile};
use swarm_mcp::detached::{Continuing, Detached, DetachedRun};

use clap::Args;

use crate::exit;
use swarm_engine::app;

/// Serve this repository to a coding agent as a Model Context Protocol server on stdin and
/// stdout (docs/MCP.md): tools to plan, start, follow, diff, resume, merge, cancel and clean
/// runs. Runs belong to the repository and go on when the agent's turn or this server ends.
/// What the tools may ask for is bounded by these options; they may narrow it, never widen.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  claude mcp add swarm -- swarm mcp --max-jobs 8
  swarm mcp --repo ~/src/project --allow-agent claude --max-cost 5")]
pub(crate) struct McpArgs {
    /// The repository to serve (default: the current directory's).
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// The sandbox of every run's workers: workspace-write (default) or off.
    #[arg(long, value_name = "MODE",
          value_parser = super::keywords::<SandboxMode>(SandboxMode::NAMES))]
    pub sandbox: Option<SandboxMode>,
    /// Let every run's workers reach the network.
    #[arg(long)]
    pub network: bool,
    /// A domain every run's workers may reach (repeatable).
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub allow_domains: Vec<String>,
    /// The most workers at a time a call may ask for.
    #[arg(long, value_name = "N")]
    pub max_jobs: Option<usize>,
    /// Each run's spending cap in US dollars; a call may ask for less.
    #[arg(long, value_name = "USD", value_parser = super::usd)]
    pub max_cost: Option<f64>,
    /// Each run's token budget; a call may ask for less.
    #[arg(long, value_name = "N", value_parser = super::tokens)]
    pub max_tokens: Option<u64>,
    /// A coding agent calls may name as the worker (repeatable; none by default).
    #[arg(long = "allow-agent", value_name = "NAME")]
    pub agents: Vec<String>,
}

pub(crate) async fn run(args: McpArgs) -> CommandResult<i32> {
    let cwd = std::env::current_dir()?;
    let repo = app::discover(&args.repo.unwrap_or(cwd))?.workdir;
    let mut server = Layer::default();
    server.sandbox.mode = args.sandbox;
    server.sandbox.network = args.network.then_some(true);
    server.sandbox.allow_domains = Some(args.allow_domains).filter(|d| !d.is_empty());
    let limits = swarm_mcp::Limits {
        server,
        max_jobs: args.max_jobs,
        max_cost: args.max_cost,
        max_tokens: args.max_tokens,
        agents: args.agents,
    };
    swarm_mcp::serve(repo, limits).await?;
    Ok(exit::SUCCESS)
}

/// A run `swarm mcp` started (a process of its own, its output the launch's log): its plan
/// run whole, or a run continued, as `swarm run` and `swarm resume` would, its events into
/// the file the server follows.
pub(crate) async fn detached(run: DetachedRun) -> CommandResult<i32> {
    let events = Some(run.events);
    match run.what {
        Detached::Start {
            plan,
            server,
            dry_run,
        } => {
            let mode = match dry_run {
                true => RunMode::DryRun,
                false => RunMode::Refactor,
            };
            let (request, warnings) = prepare::plan_run(&run.repo, &plan, *server, mode).await?;
            for warning in &warnings {
                eprintln!("warning: {warning}");
            }
            let output = super::execute::Output {
                json: false,
                show_diffs: dry_run,
                events,
                page: None,
            };
            super::execute::execute(request, &output).await
        }
        Detached::Continue {
            run: id,
            how,
            overrides,
        } => {
            let mode = match how {
                Continuing::Resume => RunMode::Resume,
                Continuing::ResumeFailed => RunMode::RerunFailed,
                Continuing::Merge => RunMode::MergeOnly,
            };
            let selector = id.parse().map_err(AppError::Id)?;
            let continuing =
                reconcile::continue_run(&run.repo, &selector, mode, false, overrides).await?;
            let output = super::execute::Output {
                json: false,
                show_diffs: true,
                events,
                page: None,
            };
            super::resume::run_continuing(continuing, mode, output).await
        }
    }
}
