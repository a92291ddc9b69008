//! `swarm report`: the run as one HTML page to open in a browser.

use std::path::PathBuf;

use clap::Args;

use crate::error::CommandResult;
use crate::exit;
use swarm_engine::app::ids::RunSelector;
use swarm_engine::app::page;

/// Write a run's report page: one self-contained HTML file (counts, timeline, failures
/// grouped by reason, every task's diff and output, land groups) that opens offline.
#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// The run (an id or a unique prefix).
    pub run_id: RunSelector,
    /// Where to write the page (`-` for standard output); default: `report.html` in the run's
    /// directory. Its path is printed.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub(crate) fn run(args: ReportArgs) -> CommandResult<i32> {
    let cwd = std::env::current_dir()?;
    if args.output.as_deref() == Some(std::path::Path::new("-")) {
        let (_, html) = page::render(&cwd, &args.run_id)?;
        std::io::Write::write_all(&mut std::io::stdout().lock(), &html)?;
        return Ok(exit::SUCCESS);
    }
    let written = page::write(&cwd, &args.run_id, args.output.as_deref())?;
    println!("{}", written.path.display());
    eprintln!(
        "swarm: wrote the page of {} task(s) ({} KiB); open it in a browser",
        written.tasks,
        written.bytes.div_ceil(1024)
    );
    Ok(exit::SUCCESS)
}
