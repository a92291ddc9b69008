//! `swarm status`: the runs of this repository, or one run's tasks.

use clap::Args;

use crate::error::{BadInput, exit};
use crate::git::repo;
use crate::ids::{RunId, RunSelector};
use crate::report::Report;
use crate::state::{self, RunDir};

/// List runs, or show one run's tasks and their states.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A run id (or a unique prefix of one); default: list all runs.
    pub run_id: Option<RunSelector>,
    /// Print the run's report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: StatusArgs) -> anyhow::Result<i32> {
    let info = repo::discover(&std::env::current_dir()?)?;
    let Some(wanted) = args.run_id else {
        let ids = state::list_runs(&info.common_dir)?;
        if args.json {
            let reports: Vec<Report> = ids
                .iter()
                .filter_map(|id| RunDir::new(&info.common_dir, id).load_report().ok())
                .collect();
            println!("{}", serde_json::to_string_pretty(&reports)?);
            return Ok(exit::SUCCESS);
        }
        if ids.is_empty() {
            println!("no swarm runs in this repository");
            return Ok(exit::SUCCESS);
        }
        println!(
            "{:<22} {:<11} {:>5} {:>6} {:>9} {:>6}  INTO",
            "RUN", "STATE", "TASKS", "MERGED", "NO-CHANGE", "FAILED"
        );
        for id in ids {
            match RunDir::new(&info.common_dir, &id).load_report() {
                Ok(r) => {
                    let state = effective_state(&RunDir::new(&info.common_dir, &id), r.state);
                    let t = &r.totals;
                    let not_ok = t.tasks - t.merged - t.no_change;
                    println!(
                        "{:<22} {:<11} {:>5} {:>6} {:>9} {:>6}  {}",
                        id, state, t.tasks, t.merged, t.no_change, not_ok, r.into
                    );
                }
                Err(_) => println!("{id:<22} unreadable (no report.json)"),
            }
        }
        return Ok(exit::SUCCESS);
    };
    let id = resolve_run_id(&info.common_dir, &wanted)?;
    let run_dir = RunDir::new(&info.common_dir, &id);
    let mut report = run_dir.load_report()?;
    if effective_state(&run_dir, report.state) == "interrupted" {
        report.state = crate::report::RunState::Interrupted;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(exit::SUCCESS);
    }
    println!(
        "run {}: {}, into {}, base {}",
        report.run_id,
        effective_state(&run_dir, report.state),
        report.into,
        &report.base[..10.min(report.base.len())]
    );
    if let Some(result) = &report.result {
        println!(
            "result {}{}",
            &result[..10.min(result.len())],
            match (&report.result_branch, report.into_updated) {
                (_, true) => format!(" ({} updated)", report.into),
                (Some(b), false) => format!(" (on branch {b}; {} not updated)", report.into),
                (None, false) => String::new(),
            }
        );
    }
    let width = report
        .tasks
        .iter()
        .map(|t| t.id.as_str().len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<11} {:<width$} {:>3} {:>8}  FILES / ERROR",
        "STATUS", "TASK", "TRY", "TIME"
    );
    for t in &report.tasks {
        let detail = match &t.error {
            Some(e) => e.clone(),
            None => t
                .files
                .iter()
                .map(|f| f.display())
                .collect::<Vec<_>>()
                .join(", "),
        };
        println!(
            "{:<11} {:<width$} {:>3} {:>7.1}s  {detail}",
            t.status.as_str(),
            t.id,
            t.attempts,
            t.duration_ms as f64 / 1000.0
        );
    }
    Ok(exit::SUCCESS)
}

/// The state to show: a report that says "running" while no process holds the run's lock
/// belongs to a run that was interrupted (a crash, `kill -9`).
fn effective_state(run_dir: &RunDir, state: crate::report::RunState) -> &'static str {
    use crate::report::RunState;
    match state {
        RunState::Running if run_dir.is_running() => "running",
        RunState::Running | RunState::Interrupted => "interrupted",
        RunState::Finished => "finished",
    }
}

/// A full run id, from an id or a unique prefix of one.
pub fn resolve_run_id(common_dir: &std::path::Path, wanted: &RunSelector) -> anyhow::Result<RunId> {
    let ids = state::list_runs(common_dir)?;
    if let Some(id) = wanted.exact().filter(|id| ids.contains(id)) {
        return Ok(id);
    }
    let matches: Vec<&RunId> = ids.iter().filter(|id| wanted.matches(id)).collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(
            BadInput::new(format!("no swarm run '{wanted}' in this repository"))
                .hint("`swarm status` lists the runs")
                .into(),
        ),
        _ => Err(
            BadInput::new(format!("'{wanted}' matches {} runs", matches.len()))
                .hint("give more characters of the run id (`swarm status` lists them)")
                .into(),
        ),
    }
}
