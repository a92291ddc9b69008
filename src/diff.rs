//! `swarm diff`, and the rendering of diffs (git's patch, git's diffstat, made by libgit2)
//! that `--dry-run` and `--review` share.

use crate::error::CommandResult;
use std::io::IsTerminal as _;

use clap::Args;
use console::Style;

use crate::exit;
use swarm_engine::app::diff::{self, Changes, Shown};
use swarm_engine::app::ids::RunSelector;

/// Show the unified diff of a run (what it merged into the target) or of one task.
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The run (an id or a unique prefix).
    pub run_id: RunSelector,
    /// One task of the run (an id or a unique prefix); default: the whole run.
    pub task_id: Option<String>,
    /// With TASK-ID: what its candidate K changed (`--tries`, `--best-of`), winner or not;
    /// default: the task's change (its winner's).
    #[arg(long, value_name = "K", requires = "task_id")]
    pub candidate: Option<u32>,
    /// Print a diffstat instead (as `git diff --stat`): each file's added and removed lines
    /// with a +/- bar, renames as `old => new`, then the totals.
    #[arg(long)]
    pub stat: bool,
}

pub(crate) fn run(args: DiffArgs) -> CommandResult<i32> {
    let cwd = std::env::current_dir()?;
    let color = super::use_color(std::io::stdout().is_terminal());
    match diff::of_run(&cwd, &args.run_id, args.task_id.as_deref(), args.candidate)? {
        Shown::Nothing(why) => eprintln!("swarm: {why}"),
        Shown::Changes(changes) => {
            super::pager::page(|out| write_changes(&changes, args.stat, color, out))?;
        }
        Shown::Tasks(tasks) => super::pager::page(|out| {
            // A run that merged nothing: each task's change, waiting on its branch.
            for (title, changes) in &tasks {
                out.write_all(format!("{title}\n").as_bytes())?;
                write_changes(changes, args.stat, color, out)?;
            }
            Ok(())
        })?,
    }
    Ok(exit::SUCCESS)
}

/// `changes` on `out`: its diffstat with `stat`, else its patch, coloured as git colours
/// them when `color` (headers bold, hunk headers cyan, removed lines red, added green).
pub(super) fn write_changes(
    changes: &Changes,
    stat: bool,
    color: bool,
    out: &mut (impl std::io::Write + ?Sized),
) -> std::io::Result<()> {
    if stat {
        return out.write_all(changes.stat.as_bytes());
    }
    if !color {
        return out.write_all(&changes.patch);
    }
    let (bold, cyan, red, green) = (
        Style::new().bold().force_styling(true),
        Style::new().cyan().force_styling(true),
        Style::new().red().force_styling(true),
        Style::new().green().force_styling(true),
    );
    let mut in_header = false;
    for line in changes.patch.split_inclusive(|b| *b == b'\n') {
        let text = String::from_utf8_lossy(line);
        let body = text.trim_end_matches('\n');
        in_header = match body.as_bytes().first() {
            _ if body.starts_with("diff --git ") => true,
            Some(b'@') => false,
            _ => in_header,
        };
        let style = match body.as_bytes().first() {
            _ if in_header => &bold,
            Some(b'@') => &cyan,
            Some(b'-') => &red,
            Some(b'+') => &green,
            _ => {
                out.write_all(line)?;
                continue;
            }
        };
        writeln!(out, "{}", style.apply_to(body))?;
    }
    Ok(())
}
