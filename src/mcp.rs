//! `swarm mcp`: serve this repository to a coding agent over the Model Context Protocol.

use crate::error::CommandResult;
use std::path::PathBuf;

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
    #[arg(long, value_name = "MODE", value_parser = ["workspace-write", "off"])]
    pub sandbox: Option<String>,
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
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Each run's token budget; a call may ask for less.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// A coding agent calls may name as the worker (repeatable; none by default).
    #[arg(long = "allow-agent", value_name = "NAME")]
    pub agents: Vec<String>,
}

pub(crate) async fn run(args: McpArgs) -> CommandResult<i32> {
    let cwd = std::env::current_dir()?;
    let repo = app::discover(&args.repo.unwrap_or(cwd))?.workdir;
    let limits = swarm_mcp::Limits {
        sandbox: args.sandbox,
        network: args.network,
        allow_domains: args.allow_domains,
        max_jobs: args.max_jobs,
        max_cost: args.max_cost,
        max_tokens: args.max_tokens,
        agents: args.agents,
    };
    swarm_mcp::serve(repo, limits).await?;
    Ok(exit::SUCCESS)
}
