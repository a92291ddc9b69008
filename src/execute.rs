//! Running a prepared run on the terminal: Ctrl-C handling, the live view (or plain lines),
//! then the summary, the dry run's diffs, GitHub Actions output, `--json`, and the exit code.
//! Shared by every command that runs something.

use crate::error::{CommandError, CommandResult};
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::render;
use crate::exit;
use swarm_engine::app;
use swarm_engine::app::diff::Differ;
use swarm_engine::app::events::EventSink;
use swarm_engine::app::report::TaskStatus;
use swarm_engine::app::{RunOutcome, RunRequest};

/// How a run shows itself beyond the terminal.
pub(crate) struct Output {
    /// `--json`: the report on stdout.
    pub json: bool,
    /// A run that merges nothing prints each finished task's diff on stdout.
    pub show_diffs: bool,
    /// `--events FILE`: every event as a JSON line, while the run goes.
    pub events: Option<PathBuf>,
    /// `--report [FILE]`: the report page written at the end (`None` inside: the run's
    /// directory).
    pub page: Option<Option<PathBuf>>,
}

/// Runs `request` with the terminal's reporter and Ctrl-C handling.
pub(crate) async fn on_terminal(
    request: RunRequest,
    events: Option<&std::path::Path>,
) -> CommandResult<RunOutcome> {
    let cancel = CancellationToken::new();
    let settled = request.continuation.as_ref().map_or(0, |c| {
        c.report
            .tasks
            .iter()
            .filter(|t| t.status.is_success())
            .count()
    });
    let reporter = render::reporter_for_terminal(request.plan.tasks.len(), settled);
    spawn_signal_handler(
        cancel.clone(),
        reporter.clone(),
        request.plan.run_id.clone(),
    );
    let sink = Arc::new(EventSink::new(reporter.boxed()));
    if let Some(path) = events {
        sink.log_to(path).map_err(|source| CommandError::Events {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let outcome = app::execute(request, cancel, sink).await;
    reporter.finish();
    Ok(outcome?)
}

/// Runs `request` on the terminal, prints the summary (and the report with `--json`), and
/// gives the exit code.
pub(crate) async fn execute(request: RunRequest, out: &Output) -> CommandResult<i32> {
    let merges = request.mode.merges();
    let common_dir = request.info.common_dir.clone();
    // The live lines and the summary quote workers: no workflow commands among them.
    let stopped = super::github::Stopped::start();
    let outcome = on_terminal(request, out.events.as_deref()).await?;
    let show_diffs = !merges && out.show_diffs;
    if show_diffs && !out.json {
        print_task_diffs(&common_dir, &outcome.report)?;
    }
    super::summary::print_summary(&outcome.report, outcome.interrupted, merges);
    if let Some(to) = &out.page {
        write_page(&outcome.report.run_id, to.as_deref())?;
    }
    drop(stopped);
    if super::github::enabled() {
        super::github::publish(&outcome.report);
    }
    if show_diffs && !outcome.interrupted {
        match outcome.report.totals.unmerged {
            0 => eprintln!("dry run: nothing merged, and nothing to merge"),
            _ => eprintln!(
                "dry run: nothing merged; merge with: swarm merge {}",
                outcome.report.run_id
            ),
        }
    }
    if out.json {
        // The run's exit code stands even if nobody reads its report any more.
        let mut stdout = std::io::stdout().lock();
        let _ = serde_json::to_writer_pretty(&mut stdout, &outcome.report);
        let _ = writeln!(stdout);
    }
    Ok(exit_code(&outcome, merges))
}

/// `--report`: the run's page, its path said on stderr.
pub(crate) fn write_page(
    run: &swarm_engine::app::ids::RunId,
    to: Option<&std::path::Path>,
) -> CommandResult<()> {
    let cwd = std::env::current_dir()?;
    let written = app::page::write(&cwd, &run.into(), to)?;
    eprintln!("report page: {}", written.path.display());
    Ok(())
}

/// 0 when everything succeeded (for a run that merges nothing: every task finished, its
/// change waiting on its branch), 130 when interrupted, 1 otherwise.
fn exit_code(outcome: &RunOutcome, merges: bool) -> i32 {
    let report = &outcome.report;
    let succeeded = if merges {
        report.all_succeeded() && report.result_branch.is_none()
    } else {
        report
            .tasks
            .iter()
            .all(|t| matches!(t.status, TaskStatus::Done | TaskStatus::NoChange))
    };
    if outcome.interrupted {
        exit::INTERRUPTED
    } else if succeeded {
        exit::SUCCESS
    } else {
        exit::PARTIAL
    }
}

/// The diff of every task a dry run finished, on stdout.
fn print_task_diffs(
    common_dir: &std::path::Path,
    report: &swarm_engine::app::report::Report,
) -> CommandResult<()> {
    let differ = Differ::open(common_dir)?;
    let color = super::use_color(std::io::stdout().is_terminal());
    let mut out = std::io::stdout().lock();
    for t in report.tasks.iter().filter(|t| t.status == TaskStatus::Done) {
        let Some(changes) = differ.task(t)? else {
            continue;
        };
        writeln!(out, "# task {} ({})", t.id, t.branch)?;
        super::diff::write_changes(&changes, true, color, &mut out)?;
        super::diff::write_changes(&changes, false, color, &mut out)?;
    }
    Ok(())
}

/// First SIGINT/SIGTERM: stop new tasks, stop workers, clean up, exit 130. A second one exits
/// at once.
fn spawn_signal_handler(
    cancel: CancellationToken,
    reporter: Arc<render::TerminalReporter>,
    run: swarm_engine::app::ids::RunId,
) {
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        let mut signals = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            signals += 1;
            if signals == 1 {
                reporter.note(&format!(
                    "swarm: interrupted: stopping the workers and keeping what merged — Ctrl-C \
                     again to stop at once; `swarm resume {run}` finishes the run later"
                ));
                reporter.stopping();
                cancel.cancel();
            } else {
                reporter.finish();
                eprintln!("swarm: stopped at once; finish it with: swarm resume {run}");
                std::process::exit(exit::INTERRUPTED);
            }
        }
    });
}
