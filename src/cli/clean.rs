//! `swarm clean`: remove a run's worktrees, branches and state.

use clap::Args;

use super::status::resolve_run_id;
use crate::error::{BadInput, exit};
use crate::git::{finish, repo, worktree};
use crate::state::{self, RunDir};

/// Remove a run's worktrees, task branches and state (or those of every run with --all),
/// including what a crashed run left behind.
#[derive(Debug, Args)]
pub struct CleanArgs {
    /// The run to clean (an id or a unique prefix).
    #[arg(conflicts_with = "all")]
    pub run_id: Option<String>,
    /// Clean every swarm run of this repository.
    #[arg(long)]
    pub all: bool,
}

pub fn run(args: CleanArgs) -> anyhow::Result<i32> {
    let info = repo::discover(&std::env::current_dir()?)?;
    let common = &info.common_dir;
    let (run_id, branch_prefix) = match (&args.run_id, args.all) {
        (Some(wanted), false) => {
            // A run whose state is gone may still have branches or worktrees: accept its id.
            let id = resolve_run_id(common, wanted).unwrap_or_else(|_| wanted.clone());
            let prefix = format!("swarm/{id}/");
            (Some(id), prefix)
        }
        (None, true) => (None, "swarm/".to_string()),
        _ => {
            return Err(BadInput::new("which run should be cleaned?")
                .hint("pass a RUN-ID (see `swarm status`) or --all")
                .into());
        }
    };
    let runs: Vec<String> = match &run_id {
        Some(id) => vec![id.clone()],
        None => state::list_runs(common)?,
    };
    // Runs in progress are left alone.
    let (busy, runs): (Vec<String>, Vec<String>) = runs
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
            branches = finish::branches_under(common, &branch_prefix)?;
        }
        None => {
            // Everything of swarm's but what belongs to runs in progress.
            for name in finish::branches_under(common, "swarm/")? {
                if !busy
                    .iter()
                    .any(|b| name.starts_with(&format!("swarm/{b}/")))
                {
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
        let dir = RunDir::new(common, id);
        if dir.exists() {
            std::fs::remove_dir_all(&dir.path)?;
            dirs += 1;
        }
    }
    if dirs == 0 && removed == 0 && deleted == 0 && run_id.is_some() {
        return Err(BadInput::new(format!(
            "nothing to clean for run '{}'",
            args.run_id.unwrap_or_default()
        ))
        .hint("`swarm status` lists the runs")
        .into());
    }
    eprintln!(
        "swarm: removed {removed} worktree(s), {deleted} branch(es) and {dirs} run record(s)"
    );
    Ok(exit::SUCCESS)
}
