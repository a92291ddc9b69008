//! The run's records: the report it starts from and ends with, the lock and files it opens
//! with, what earlier attempts spent.

use std::time::Instant;

use git2::Oid;

use super::{RunError, Shared};
use crate::events::{Event, EventSink};
use crate::gateway::Spent;
use crate::ids::CandidateNo;
use crate::plan::Plan;
use crate::report::{
    CandidateReport, REPORT_SCHEMA_VERSION, Report, RunState, TaskReport, TaskStatus, Tokens,
};
use crate::settings::Candidates;
use crate::state::{self, RunDir};

/// Why `--atomic` keeps the target where it is, if so: a task that did not merge.
pub(super) fn atomic_hold(report: &mut Report) -> Option<String> {
    report.compute_totals(0);
    let t = &report.totals;
    (t.not_ok() > 0).then(|| {
        format!(
            "--atomic: {} of {} task(s) did not merge ({})",
            t.not_ok(),
            t.tasks,
            t.problem_words().join(", ")
        )
    })
}

/// The report of a run of `plan` that has not started: every task pending (with its
/// `candidates` pending).
pub(crate) fn new_report(
    plan: &Plan,
    into: &str,
    into_start: Oid,
    candidates: Candidates,
) -> Report {
    Report {
        schema_version: REPORT_SCHEMA_VERSION,
        run_id: plan.run_id.clone(),
        instruction: plan.instruction.clone(),
        base: plan.base,
        into: into.to_string(),
        into_start,
        result: None,
        into_updated: false,
        result_branch: None,
        merge_hint: None,
        state: RunState::Running,
        started_at: state::now_rfc3339(),
        tasks: plan
            .tasks
            .iter()
            .map(|t| TaskReport {
                id: t.id.clone(),
                files: t.files.clone(),
                status: TaskStatus::Pending,
                branch: t.branch(&plan.run_id),
                commit: None,
                start: None,
                merge_commit: None,
                attempts: 0,
                duration_ms: 0,
                tokens: Tokens::default(),
                turns: 0,
                cost_usd: 0.0,
                requests: 0,
                reported: None,
                changed_files: Vec::new(),
                deleted_files: Vec::new(),
                summary: None,
                error: None,
                output_tail: None,
                branch_kept: false,
                log: None,
                hint: None,
                over_budget: false,
                network: Default::default(),
                candidates: match candidates.several() {
                    true => CandidateNo::up_to(candidates.count())
                        .map(|k| CandidateReport::new(&plan.run_id, &t.id, k))
                        .collect(),
                    false => Vec::new(),
                },
                selection: None,
                merge_drivers: Vec::new(),
                rerun_spared: false,
                review_skipped: false,
                ran_alone: None,
            })
            .collect(),
        totals: Default::default(),
        verify_merged: None,
        worktrees: None,
        layers: None,
        per_process: None,
        skipped_files: plan.skipped.clone(),
    }
}

/// What the earlier attempts of a continued run spent (nothing for a new run).
pub(super) fn spent_before(report: &Report) -> Spent {
    let mut spent = Spent::default();
    for t in &report.tasks {
        spent.add(&Spent {
            tokens: t.tokens,
            cost_usd: t.cost_usd,
            requests: t.requests,
        });
    }
    spent
}

/// Takes the run's lock and writes what a run starts with: its owner, its plan, the event
/// log. Refuses a run that another swarm process holds.
pub(super) fn open_run(
    run_dir: &RunDir,
    plan: &Plan,
    sink: &EventSink,
    held: Option<state::RunLock>,
) -> Result<state::RunLock, RunError> {
    let lock = match held {
        Some(lock) => lock,
        None => {
            std::fs::create_dir_all(&run_dir.path)
                .map_err(|e| RunError::io(format!("create {}", run_dir.path.display()), e))?;
            state::RunLock::try_acquire(run_dir)
                .map_err(|e| RunError::io("lock the run", e))?
                .ok_or_else(|| RunError::Busy {
                    run: plan.run_id.clone(),
                })?
        }
    };
    let owner = state::Owner {
        pid: std::process::id(),
        started_at: state::now_rfc3339(),
    };
    state::write_json_atomic(&run_dir.owner(), &owner)
        .and_then(|()| state::write_json_atomic(&run_dir.plan(), plan))
        .map_err(|e| RunError::classify("writing the run's records", e))?;
    sink.log_to_run_file(&run_dir.events())
        .map_err(|e| RunError::io(format!("write {}", run_dir.events().display()), e))?;
    Ok(lock)
}

/// The final report: its state and totals, secrets redacted (the CLI prints from it), saved,
/// and announced.
pub(super) fn close_report(
    shared: &Shared,
    mut report: Report,
    interrupted: bool,
    started: Instant,
) -> anyhow::Result<Report> {
    report.state = if interrupted {
        RunState::Interrupted
    } else {
        RunState::Finished
    };
    report.compute_totals(started.elapsed().as_millis() as u64);
    let report = report.redacted();
    state::write_json_atomic(&shared.run_dir.report(), &report)?;
    shared.sink.emit(Event::RunFinished {
        result: report.result.map(|r| r.to_string()),
        merged: report.totals.merged,
        failed: report.totals.not_ok(),
    });
    Ok(report)
}
