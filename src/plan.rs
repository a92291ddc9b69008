//! `swarm plan`: write a plan to run later, elsewhere, or in shards.

use crate::error::CommandResult;
use std::path::PathBuf;

use clap::Args;

use super::refactor::{PlanningArgs, plan_only};

/// Write the plan of a refactor (base commit, tasks with ids and files, the instruction and
/// worker settings; never a secret) without running it. `swarm run PLAN.json` runs it, whole
/// or one shard per machine, and `swarm merge PLAN.json` merges what the shards left.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm plan 'ruff fixes' '*.py' --ok-exit-codes 0,1 --exec 'ruff check --fix \"$SWARM_FILE\"' -o plan.json
  swarm run plan.json --shard 1/4 --push origin      # on each of 4 machines
  swarm merge plan.json --fetch origin --push origin  # once they are done

The options are those of `swarm refactor` that a plan keeps; the ones about running and
merging here (-y, --keep, --dry-run, --review, --events) belong to `swarm run` and
`swarm merge`.")]
pub(crate) struct PlanArgs {
    /// Where to write the plan (JSON).
    #[arg(short, long, value_name = "PLAN.json")]
    pub output: PathBuf,
    #[command(flatten)]
    pub planning: PlanningArgs,
    /// Also print the plan on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(args: PlanArgs) -> CommandResult<i32> {
    plan_only(args.planning, &args.output, args.json).await
}
