//! What a tool answers, sized for a model's context: a run's outcome in a few kilobytes
//! (what merged, where the result is, failures with the tail of their output, the next
//! step), never the whole report; `diff` pages for more. Everything is redacted.

use serde_json::{Value, json};
use swarm_engine::app::Plan;
use swarm_engine::app::report::{Report, RunState, TaskReport, TaskStatus};

/// The most of a `result` answer, in characters, as the seed's 8,000-character tail.
const RESULT_CHARS: usize = 8000;
/// Failures listed in full; the rest are counted.
const FAILURES: usize = 12;
/// Lines of a failure's output kept.
const TAIL_LINES: usize = 12;
/// Task ids listed by kind; the rest are counted.
const IDS: usize = 40;

/// `value` as the text of a tool's answer, redacted.
pub(crate) fn text(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    swarm_engine::app::redact(&text)
}

/// Tasks listed by `plan`; the rest are counted.
const PLANNED: usize = 100;

/// A plan, for `plan`: its tasks (the first hundred) and their files, what the selection left
/// out, the settings it runs with, and the settings that were ignored (`said`).
pub(crate) fn plan(plan: &Plan, said: &[String]) -> Value {
    json!({
        "tasks": plan.tasks.len(),
        "files": plan.tasks.iter().map(|t| t.files.len()).sum::<usize>(),
        "task_list": plan.tasks.iter().take(PLANNED).collect::<Vec<_>>(),
        "tasks_not_listed": plan.tasks.len().saturating_sub(PLANNED),
        "skipped": plan.skipped,
        "settings": plan.settings,
        "said": said.join("\n"),
    })
}

/// Progress in words: "7/20 tasks settled: 6 merged, 1 failed".
pub(crate) fn progress(report: &Report) -> (usize, usize, String) {
    let settled = report
        .tasks
        .iter()
        .filter(|t| !matches!(t.status, TaskStatus::Pending | TaskStatus::Running))
        .count();
    let total = report.tasks.len();
    let words = report.totals.describe().join(", ");
    (
        settled,
        total,
        format!("{settled}/{total} tasks settled: {words}"),
    )
}

/// Tasks `status` lists.
const STATUS_TASKS: usize = 50;

/// `status` of one run: its state and counts, and the tasks still to settle or that did not
/// merge (the first fifty, failures with their reason); the merged and unchanged are counted
/// only, so a run of thousands answers in a few kilobytes.
pub(crate) fn status(report: &Report) -> Value {
    let open: Vec<&TaskReport> = report
        .tasks
        .iter()
        .filter(|t| !t.status.is_success())
        .collect();
    let tasks: Vec<Value> = open
        .iter()
        .take(STATUS_TASKS)
        .map(|t| {
            let mut task = json!({"id": t.id.as_str(), "status": t.status.as_str(),
                                  "files": files(t)});
            if let Some(error) = &t.error {
                task["error"] = cut(error, 500).into();
            }
            task
        })
        .collect();
    json!({
        "run_id": report.run_id.as_str(),
        "state": state(report.state),
        "instruction": report.instruction,
        "into": report.into,
        "totals": report.totals,
        "progress": progress(report).2,
        "tasks": tasks,
        "tasks_not_listed": open.len().saturating_sub(STATUS_TASKS),
    })
}

/// `result`: the compact outcome for the parent's context.
pub(crate) fn result(report: &Report, diffstat: Option<&str>) -> Value {
    let ids = |wanted: fn(TaskStatus) -> bool| -> Value {
        let all: Vec<&str> = report
            .tasks
            .iter()
            .filter(|t| wanted(t.status))
            .map(|t| t.id.as_str())
            .collect();
        json!({"count": all.len(), "ids": all.iter().take(IDS).collect::<Vec<_>>()})
    };
    let failures: Vec<&TaskReport> = report
        .tasks
        .iter()
        .filter(|t| {
            !t.status.is_success()
                && !matches!(
                    t.status,
                    TaskStatus::Pending | TaskStatus::Running | TaskStatus::Done
                )
        })
        .collect();
    let mut value = json!({
        "run_id": report.run_id.as_str(),
        "state": state(report.state),
        "instruction": report.instruction,
        "into": report.into,
        "result": report.result.map(|c| c.to_string()),
        "into_updated": report.into_updated,
        "result_branch": report.result_branch,
        "summary": report.totals.describe().join(", "),
        "candidates_run": report.totals.candidates,
        "needed_more_than_one_candidate": report.totals.rescued,
        "merged_by_driver": report.totals.merged_by_driver,
        "reruns_spared_by_drivers": report.totals.reruns_spared,
        "merged": ids(|s| s == TaskStatus::Merged),
        "no_change": ids(|s| s == TaskStatus::NoChange),
        "failures_not_listed": failures.len().saturating_sub(FAILURES),
        "failures": failures.iter().take(FAILURES).map(|t| failure(t)).collect::<Vec<_>>(),
        "diffstat": diffstat.map(|s| cut(s, 3000)),
        "next": next_step(report),
    });
    // Within the bound: the failures' output goes first, then failures themselves.
    while value.to_string().len() > RESULT_CHARS {
        let Some(list) = value["failures"].as_array_mut() else {
            break;
        };
        if list.is_empty() {
            break;
        }
        list.pop();
        value["failures_not_listed"] = (failures.len() - list.len()).into();
    }
    value
}

fn failure(t: &TaskReport) -> Value {
    let tail: Vec<&str> = t.output_tail.as_deref().unwrap_or("").lines().collect();
    let tail = tail[tail.len().saturating_sub(TAIL_LINES)..].join("\n");
    json!({
        "task": t.id.as_str(),
        "files": files(t),
        "status": t.status.as_str(),
        "error": t.error,
        "hint": t.hint,
        "output_tail": cut(&tail, 1500),
    })
}

fn files(t: &TaskReport) -> Vec<String> {
    let mut files: Vec<String> = t.files.iter().take(5).map(|f| f.display()).collect();
    if t.files.len() > 5 {
        files.push(format!("(+{} more)", t.files.len() - 5));
    }
    files
}

fn state(state: RunState) -> &'static str {
    match state {
        RunState::Running => "running",
        RunState::Finished => "finished",
        RunState::Interrupted => "interrupted",
    }
}

/// What the parent should do next, in a sentence.
fn next_step(report: &Report) -> String {
    let t = &report.totals;
    match report.state {
        RunState::Running => "the run goes on: call result again later, or status".into(),
        RunState::Interrupted => {
            "the run was stopped: call resume to finish it (nothing is lost)".into()
        }
        RunState::Finished if t.unmerged > 0 => format!(
            "{} finished task(s) are not merged: review with diff, then call merge",
            t.unmerged
        ),
        RunState::Finished if t.not_ok() > 0 => format!(
            "{} task(s) did not make it (see failures); fix the cause and call resume with \
             failed: true to run them again (with scope: \"any\" or ok_exit_codes where a \
             failure's error or hint names --scope any or --ok-exit-codes), or leave them",
            t.not_ok()
        ),
        RunState::Finished => match (&report.result, report.into_updated) {
            (Some(_), true) => format!("done: the change is on branch {}", report.into),
            _ => "done: nothing needed a change".into(),
        },
    }
}

/// `text` cut to `chars` characters, saying so.
pub(crate) fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        None => text.to_string(),
        Some((at, _)) => format!("{}\n… (cut)", &text[..at]),
    }
}
