//! `swarm status`: the runs of this repository, or one run's tasks.

use crate::error::CommandResult;
use clap::Args;

use crate::exit;
use swarm_engine::app::ids::RunSelector;
use swarm_engine::app::report::{Report, RunState};
use swarm_engine::app::runs;

/// List runs, or show one run's tasks and their states.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// A run id (or a unique prefix of one); default: list all runs.
    pub run_id: Option<RunSelector>,
    /// Print the run's report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn run(args: StatusArgs) -> CommandResult<i32> {
    let cwd = std::env::current_dir()?;
    let Some(wanted) = args.run_id else {
        let listed = runs::list(&cwd)?;
        if args.json {
            let reports: Vec<&Report> = listed.iter().filter_map(|l| l.report.as_ref()).collect();
            println!("{}", serde_json::to_string_pretty(&reports)?);
            return Ok(exit::SUCCESS);
        }
        print_list(&listed);
        return Ok(exit::SUCCESS);
    };
    let report = runs::show(&cwd, &wanted)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(exit::SUCCESS);
    }
    print_run(&report);
    if let Some(record) = swarm_engine::app::land::load_record(&cwd, &wanted)? {
        println!("\nlanded by {} (swarm land):", record.by);
        print!("{}", super::land::groups(&record));
    }
    Ok(exit::SUCCESS)
}

fn state_word(state: RunState) -> &'static str {
    match state {
        RunState::Running => "running",
        RunState::Interrupted => "interrupted",
        RunState::Finished => "finished",
    }
}

fn print_list(listed: &[runs::Listed]) {
    let shown: Vec<Option<Report>> = listed
        .iter()
        .map(|l| l.report.as_ref().and_then(super::visible::value))
        .collect();
    if listed.is_empty() {
        println!("no swarm runs in this repository");
        return;
    }
    println!(
        "{:<22} {:<11} {:>5} {:>6} {:>9}  {:<20} OTHER",
        "RUN", "STATE", "TASKS", "MERGED", "NO-CHANGE", "INTO"
    );
    for (l, shown) in listed.iter().zip(&shown) {
        match shown.as_ref().or(l.report.as_ref()) {
            Some(r) => {
                let t = &r.totals;
                let other = t.problem_words();
                println!(
                    "{:<22} {:<11} {:>5} {:>6} {:>9}  {:<20} {}",
                    l.id,
                    state_word(r.state),
                    t.tasks,
                    t.merged,
                    t.no_change,
                    r.into,
                    other.join(", ")
                );
            }
            None => println!("{:<22} unreadable (no report.json)", l.id),
        }
    }
}

fn print_run(report: &Report) {
    let shown = super::visible::value(report);
    let report = shown.as_ref().unwrap_or(report);
    println!(
        "run {}: {}, into {}, base {}",
        report.run_id,
        state_word(report.state),
        report.into,
        swarm_engine::app::ids::short(&report.base)
    );
    if let Some(result) = &report.result {
        println!(
            "result {}{}",
            swarm_engine::app::ids::short(result),
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
        let lines = super::summary::candidate_lines(t).into_iter();
        for line in lines.chain(super::summary::failure_lines(t)) {
            println!("{:<11} {:<width$} {:>3} {:>8}  {line}", "", "", "", "");
        }
    }
}
