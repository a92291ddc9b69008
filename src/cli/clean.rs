//! `swarm clean`: remove a run's worktrees, branches and state.

use clap::Args;

use super::status::resolve_run_id;
use crate::error::{BadInput, exit};
use crate::git::{finish, repo, worktree};
use crate::ids::{RunId, RunSelector};
use crate::state::{self, RunDir};

/// Remove a run's worktrees, task branches and state (or those of every run with --all),
/// including what a crashed run left behind.
#[derive(Debug, Args)]
pub struct CleanArgs {
    /// The run to clean (an id or a unique prefix: YYYYMMDD-HHMMSS-xxxx).
    #[arg(conflicts_with = "all")]
    pub run_id: Option<RunSelector>,
    /// Clean every swarm run of this repository.
    #[arg(long)]
    pub all: bool,
}

pub fn run(args: CleanArgs) -> anyhow::Result<i32> {
    let info = repo::discover(&std::env::current_dir()?)?;
    let common = &info.common_dir;
    let run_id: Option<RunId> = match (&args.run_id, args.all) {
        // A run whose state is gone may still have branches or worktrees: a whole id is
        // accepted even without a run directory.
        (Some(wanted), false) => Some(match wanted.exact() {
            Some(id) => id,
            None => resolve_run_id(common, wanted)?,
        }),
        (None, true) => None,
        _ => {
            return Err(BadInput::new("which run should be cleaned?")
                .hint("pass a RUN-ID (see `swarm status`) or --all")
                .into());
        }
    };
    let runs: Vec<RunId> = match &run_id {
        Some(id) => vec![id.clone()],
        None => state::list_runs(common)?,
    };
    // Runs in progress are left alone.
    let (busy, runs): (Vec<RunId>, Vec<RunId>) = runs
        .into_iter()
        .partition(|id| RunDir::new(common, id).is_running());
    if let (Some(id), [_]) = (&run_id, busy.as_slice()) {
        return Err(BadInput::new(format!("run {id} is in progress"))
            .hint("stop it first (Ctrl-C in its terminal); `swarm resume` or `swarm clean` then")
            .into());
    }
    let (mut removed, mut branches) = (0, Vec::new());
    match &run_id {
        Some(id) => {
            removed += worktree::remove_run_worktrees(common, id)?;
            branches = finish::branches_under(common, &id.branch_prefix())?;
        }
        None => {
            // Everything of swarm's but what belongs to runs in progress.
            for name in finish::branches_under(common, "swarm/")? {
                if !busy.iter().any(|b| name.starts_with(&b.branch_prefix())) {
                    branches.push(name);
                }
            }
            removed += worktree::remove_run_worktrees_except(common, &busy)?;
        }
    }
    let deleted = finish::delete_branches(common, &branches);
    for id in &busy {
        eprintln!("swarm: run {id} is in progress; left alone");
    }
    let mut dirs = 0;
    for id in &runs {
        if state::remove_owned(common, &RunDir::new(common, id).path)? {
            dirs += 1;
        }
    }
    if let (0, 0, 0, Some(id)) = (dirs, removed, deleted, &run_id) {
        return Err(BadInput::new(format!("nothing to clean for run '{id}'"))
            .hint("`swarm status` lists the runs")
            .into());
    }
    eprintln!(
        "swarm: removed {removed} worktree(s), {deleted} branch(es) and {dirs} run record(s)"
    );
    Ok(exit::SUCCESS)
}
