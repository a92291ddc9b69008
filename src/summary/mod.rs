//! The summary after a run (stderr): the counts, a line per task with why the unsuccessful
//! ones failed, kept branches, the merged check, and where the result is.

use super::render::is_quiet;
use swarm_engine::app::report::{Report, TaskStatus, groups};

/// The table printed after a run (stderr). `merges`: does the run merge (else where its
/// branches go is the command's to say: a dry run, a shard, a review that took nothing)?
pub(crate) fn print_summary(report: &Report, interrupted: bool, merges: bool) {
    let shown = super::visible::value(report);
    let report = shown.as_ref().unwrap_or(report);
    let t = &report.totals;
    let secs = t.duration_ms as f64 / 1000.0;
    let mut counts = t.describe();
    let tokens = t.tokens.prompt + t.tokens.completion;
    if tokens > 0 {
        counts.push(format!("{} tokens", human_count(tokens)));
    }
    if t.cost_usd > 0.0 {
        counts.push(format!("${:.2} spent", t.cost_usd));
    }
    if t.candidates > 0 {
        counts.push(format!(
            "{} candidates run ({} task(s) needed more than one)",
            t.candidates, t.rescued
        ));
    }
    eprintln!(
        "\nswarm: run {} {} in {secs:.1}s: {} task(s): {}",
        report.run_id,
        if interrupted {
            "interrupted"
        } else {
            "finished"
        },
        t.tasks,
        counts.join(", ")
    );
    if !report.skipped_files.is_empty() {
        let shown: Vec<String> = report
            .skipped_files
            .iter()
            .take(3)
            .map(|s| s.file.display())
            .collect();
        eprintln!(
            "  not tasks: {} ({}{}; all in the report's skipped_files)",
            swarm_engine::app::describe_skipped(&report.skipped_files),
            shown.join(", "),
            if report.skipped_files.len() > 3 {
                ", …"
            } else {
                ""
            }
        );
    }
    if !is_quiet() {
        print_table(report);
        print_groups(report);
        print_kept(report);
        print_verify_merged(report);
    }
    if merges {
        print_result(report);
    }
    if interrupted {
        // The documented way to finish: the tasks left run, then everything merges.
        eprintln!("  finish it with: swarm resume {}", report.run_id);
    }
}

/// `1234567` as `1.2M`.
pub(super) fn human_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// Unsuccessful tasks whose output the summary shows (`swarm status RUN` shows all).
const EXPLAINED: usize = 10;

/// Past this many tasks, the table is left out: the unsuccessful ones are shown by group.
const LISTED: usize = 20;

/// Past this many tasks that changed nothing, the table counts them instead of listing them.
const FOLDED: usize = 3;

/// One row per task, up to [`LISTED`] tasks.
fn print_table(report: &Report) {
    if report.tasks.len() > LISTED {
        return;
    }
    // Tasks that never started are counted, not listed one by one; so are many that changed
    // nothing beside a few that did (a dry run that found one change in eighteen files).
    let unchanged = report
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::NoChange)
        .count();
    let fold = unchanged > FOLDED && unchanged < report.tasks.len();
    let rows: Vec<_> = report
        .tasks
        .iter()
        .filter(|t| t.status != TaskStatus::Pending)
        .filter(|t| !(fold && t.status == TaskStatus::NoChange))
        .collect();
    if fold {
        eprintln!("  {unchanged} task(s) changed nothing (not listed)");
    }
    if !rows.is_empty() {
        let width = rows
            .iter()
            .map(|t| t.id.as_str().len())
            .max()
            .unwrap_or(4)
            .max(4);
        eprintln!("  {:<11} {:<width$}  DETAIL", "STATUS", "TASK");
        // Why they failed, for the first few; `swarm status RUN` has it for all.
        let mut explained = 0;
        for task in rows {
            let detail = match (&task.error, task.status) {
                (Some(e), _) => e.clone(),
                (None, TaskStatus::Merged) => task.change_words(),
                (None, TaskStatus::Done) => format!("{}, not merged yet", task.change_words()),
                (None, _) => task
                    .files
                    .iter()
                    .map(|f| f.display())
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            eprintln!(
                "  {:<11} {:<width$}  {detail}",
                task.status.as_str(),
                task.id
            );
            // A task that made it: how its winner was chosen; one that did not: each one.
            let lines = candidate_lines(task);
            let shown = match task.status.is_success() {
                true => &lines[lines.len().saturating_sub(1)..],
                false => &lines[..],
            };
            for line in shown {
                eprintln!("  {:<11} {:<width$}  {line}", "", "");
            }
            let lines = failure_lines(task);
            if !lines.is_empty() && explained < EXPLAINED {
                explained += 1;
                for line in lines {
                    eprintln!("  {:<11} {:<width$}  {line}", "", "");
                }
            }
        }
    }
}

/// The unsuccessful tasks by reason, each group with its next step. Past [`LISTED`] tasks
/// (no table), a group also shows its first task's output, as the table would.
fn print_groups(report: &Report) {
    let groups = groups::groups(report);
    if groups.is_empty() {
        return;
    }
    let listed = report.tasks.len() <= LISTED;
    eprintln!(
        "{}",
        match listed {
            true => "next steps:",
            false => "what did not merge, by reason:",
        }
    );
    for group in &groups {
        eprintln!(
            "  {} {}: {} ({})",
            group.tasks.len(),
            group.status.as_str().replace('_', " "),
            group.reason,
            groups::first_files(group)
        );
        if !listed && let Some(first) = group.tasks.first() {
            for line in failure_lines(first) {
                eprintln!("      {line}");
            }
        }
        eprintln!(
            "    next: {}",
            groups::next_step(group, report.run_id.as_str())
        );
    }
}

/// Lines shown under a task with candidates (`--tries`, `--best-of`): each one's outcome,
/// diffstat and spend, then the winner and why.
pub(crate) fn candidate_lines(task: &swarm_engine::app::report::TaskReport) -> Vec<String> {
    let winner = task.selection.as_ref().map(|s| s.winner);
    let mut lines: Vec<String> = task
        .candidates
        .iter()
        .filter(|c| c.status != TaskStatus::Pending)
        .map(|c| {
            let mut line = format!("c{} {:<11} {}", c.number, c.status.as_str(), c.diffstat());
            if let Some(worker) = &c.worker {
                line.push_str(&format!(" by {worker}"));
            }
            if c.cost_usd > 0.0 {
                line.push_str(&format!(", ${:.2}", c.cost_usd));
            }
            match (Some(c.number) == winner, &c.error) {
                (true, _) => line.push_str("  ← winner"),
                (false, Some(e)) => line.push_str(&format!(": {e}")),
                (false, None) => {}
            }
            line
        })
        .collect();
    if let Some(s) = &task.selection {
        lines.push(format!(
            "chose c{} ({}): {}",
            s.winner,
            s.by.as_str(),
            s.steps.join("; ")
        ));
    }
    lines
}

/// Lines shown under an unsuccessful task: what the sandbox probably did (with the setting
/// that would allow it), the last lines of its output, and its log.
pub(crate) fn failure_lines(task: &swarm_engine::app::report::TaskReport) -> Vec<String> {
    const LAST: usize = 5;
    const WIDTH: usize = 160;
    if task.status.is_success()
        || task.review_skipped
        || matches!(
            task.status,
            TaskStatus::Pending | TaskStatus::Running | TaskStatus::Done
        )
    {
        return Vec::new();
    }
    let mut lines = Vec::new();
    if let Some(hint) = &task.hint {
        lines.push(format!("hint: {hint}"));
    }
    let tail: Vec<&str> = task
        .output_tail
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let last = &tail[tail.len().saturating_sub(LAST)..];
    if !last.is_empty() {
        lines.push("last lines of output:".to_string());
        for line in last {
            let mut shown: String = line.chars().take(WIDTH).collect();
            if line.chars().count() > WIDTH {
                shown.push('…');
            }
            lines.push(format!("│ {shown}"));
        }
    }
    if let Some(log) = task.log.as_deref().filter(|l| l.exists()) {
        lines.push(format!("log: {}", log.display()));
    }
    lines
}

/// The branches kept for inspection, and how to inspect or remove them.
fn print_kept(report: &Report) {
    let kept: Vec<_> = report.tasks.iter().filter(|t| t.branch_kept).collect();
    if let Some(first) = kept.first() {
        eprintln!(
            "kept {} branch(es): {}{}",
            kept.len(),
            kept.iter()
                .take(5)
                .map(|t| t.branch.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            if kept.len() > 5 { " …" } else { "" }
        );
        eprintln!(
            "  inspect: swarm diff {} {}   remove: swarm clean {}",
            report.run_id, first.id, report.run_id
        );
    }
}

fn print_verify_merged(report: &Report) {
    let Some(v) = &report.verify_merged else {
        return;
    };
    match (&v.problem, v.passed) {
        (Some(problem), _) => eprintln!("verify-merged: {problem}"),
        (None, true) => eprintln!(
            "verify-merged: `{}` passes on the result ({} check run(s){})",
            v.command,
            v.runs,
            if v.excluded.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} task(s) left out: {}",
                    v.excluded.len(),
                    swarm_engine::app::ids::join(&v.excluded)
                )
            }
        ),
        (None, false) => eprintln!("verify-merged: `{}` did not finish", v.command),
    }
}

/// Where the result is: the target moved, or a branch and the commands that merge it.
fn print_result(report: &Report) {
    match (&report.result, report.into_updated, &report.result_branch) {
        (Some(result), true, _) => {
            eprintln!(
                "result: {} is now at {}",
                report.into,
                swarm_engine::app::ids::short(result)
            );
        }
        (Some(result), false, Some(branch)) => {
            eprintln!(
                "result: {} was NOT updated; the merged result ({}) is on branch {branch}",
                report.into,
                swarm_engine::app::ids::short(result)
            );
            if let Some(hint) = &report.merge_hint {
                eprintln!("  merge it with: {hint}");
            }
        }
        _ => eprintln!("result: nothing merged; {} unchanged", report.into),
    }
}
