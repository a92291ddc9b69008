//! `swarm merge`: merge the finished task branches of a run (after `--dry-run`, say).

use clap::Args;

use super::resume::{ResumeArgs, continue_run};

/// Merge a run's finished, unmerged task branches into its target, with the same --no-ff
/// merge train as `refactor` (after `swarm refactor --dry-run`, or `--review` later).
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  swarm refactor 'rename foo to bar' --dry-run --exec '…'\n  swarm diff 20261121-133455-4f2a\n  swarm merge 20261121-133455-4f2a"
)]
pub struct MergeArgs {
    /// The run (an id or a unique prefix; `swarm status` lists them).
    pub run_id: String,
    /// Check the merged result with this command (instead of the run's own
    /// --verify-merged, if any); tasks that break it are left out.
    #[arg(long, value_name = "CMD")]
    pub verify_merged: Option<String>,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: MergeArgs) -> anyhow::Result<i32> {
    let args = ResumeArgs {
        run_id: args.run_id,
        failed: false,
        keep: false,
        verify_merged: args.verify_merged,
        json: args.json,
    };
    continue_run(args, true).await
}
