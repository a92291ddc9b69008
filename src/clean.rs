//! `swarm clean`: remove a run's worktrees, branches and state.

use crate::error::{CommandError, CommandResult};
use clap::Args;

use crate::exit;
use swarm_engine::app::ids::RunSelector;
use swarm_engine::app::runs::{self, CleanTarget};

/// Remove a run's worktrees, task branches and state (or those of every run with --all),
/// including what a crashed run left behind.
#[derive(Debug, Args)]
pub(crate) struct CleanArgs {
    /// The run to clean (an id or a unique prefix: YYYYMMDD-HHMMSS-xxxx).
    #[arg(conflicts_with = "all")]
    pub run_id: Option<RunSelector>,
    /// Clean every swarm run of this repository, and the base checkout --reuse-base keeps.
    #[arg(long)]
    pub all: bool,
}

pub(crate) fn run(args: CleanArgs) -> CommandResult<i32> {
    let target = match (args.run_id, args.all) {
        (Some(id), false) => CleanTarget::One(id),
        (None, true) => CleanTarget::All,
        _ => return Err(CommandError::CleanWhat),
    };
    let cleaned = runs::clean(&std::env::current_dir()?, target)?;
    for said in &cleaned.recovered {
        eprintln!("swarm: {said}");
    }
    for id in &cleaned.busy {
        eprintln!("swarm: run {id} is in progress; left alone");
    }
    eprintln!(
        "swarm: removed {} worktree(s), {} branch(es) and {} run record(s){}",
        cleaned.worktrees,
        cleaned.branches,
        cleaned.records,
        match cleaned.scratch {
            0 => String::new(),
            n => format!(
                ", and {n} temporary folder(s) of killed runs in {}",
                std::env::temp_dir().display()
            ),
        }
    );
    Ok(exit::SUCCESS)
}
