//! GitHub Actions (`GITHUB_ACTIONS=true`): workflow commands on stderr (a `::group::` per task
//! log, `::error` annotations), a Markdown summary appended to `$GITHUB_STEP_SUMMARY`, and
//! step outputs appended to `$GITHUB_OUTPUT`.
//!
//! The runner treats a log line starting with `::` as a command (`::add-mask::`, `::error
//! file=…::`, `::stop-commands::`), even after leading spaces. Workers' and models' text
//! reaches the log in the live lines, the summary and the task groups, so every such
//! stretch is between `::stop-commands::TOKEN` and `::TOKEN::` (GitHub's documented way),
//! with a random token no worker can know in advance ([`Stopped`]); swarm's own commands are
//! written outside them, their properties and messages escaped.

use std::fmt::Write as _;
use std::io::Write as _;

use swarm_engine::app::report::{Report, TaskStatus};

/// Rows of the summary table beyond which only unsuccessful tasks are listed.
const SUMMARY_ROWS: usize = 300;

pub(super) fn enabled() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// A token for `::stop-commands::` that no worker can guess.
fn token() -> String {
    let random = swarm_engine::app::random_hex::<16>()
        .unwrap_or_else(|_| format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..)));
    format!("swarm-{random}")
}

/// Log lines in which the runner runs no workflow command, until dropped.
pub(super) struct Stopped {
    token: String,
}

impl Stopped {
    /// Stops the runner's commands (in GitHub Actions; elsewhere there is nothing to stop).
    pub(super) fn start() -> Option<Self> {
        enabled().then(|| {
            let token = token();
            eprintln!("::stop-commands::{token}");
            Self { token }
        })
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        eprintln!("::{}::", self.token);
    }
}

/// Publishes `report` to the workflow: groups, annotations, summary, outputs.
pub(super) fn publish(report: &Report) {
    let shown = super::visible::value(report);
    let report = shown.as_ref().unwrap_or(report);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(commands(report).as_bytes());
    drop(err);
    append("GITHUB_STEP_SUMMARY", &summary(report));
    append("GITHUB_OUTPUT", &outputs(report));
}

/// Appends `text` to the job's step summary (Markdown).
pub(super) fn append_summary(text: &str) {
    append("GITHUB_STEP_SUMMARY", text);
}

/// Appends `text` to the file `$var` names, if set.
fn append(var: &str, text: &str) {
    let Some(path) = std::env::var_os(var) else {
        return;
    };
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = appended {
        eprintln!("::warning::cannot append to ${var}: {e}");
    }
}

/// A `::group::` per task that left output, and an `::error` per task that did not succeed.
fn commands(report: &Report) -> String {
    let mut out = String::new();
    for t in &report.tasks {
        let Some(tail) = t.output_tail.as_deref().filter(|s| !s.trim().is_empty()) else {
            continue;
        };
        let files: Vec<String> = t.files.iter().map(|f| f.display()).collect();
        let _ = writeln!(
            out,
            "::group::{} {} ({})",
            t.status.as_str(),
            t.id,
            escape_data(&files.join(", "))
        );
        // The worker's own "::" lines must not become commands.
        let token = token();
        let _ = writeln!(out, "::stop-commands::{token}");
        for line in tail.lines() {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "::{token}::");
        let _ = writeln!(out, "::endgroup::");
    }
    for t in &report.tasks {
        if t.status.is_success() || matches!(t.status, TaskStatus::Pending | TaskStatus::Done) {
            continue;
        }
        let file = t
            .changed_files
            .first()
            .or(t.files.first())
            .map(|f| format!("file={},", escape_property(&f.display())))
            .unwrap_or_default();
        let message = t.error.as_deref().unwrap_or(t.status.as_str());
        let _ = writeln!(
            out,
            "::error {file}title={}::{}",
            escape_property(&format!("swarm: task {} {}", t.id, t.status.as_str())),
            escape_data(message)
        );
    }
    if let Some(problem) = report
        .verify_merged
        .as_ref()
        .and_then(|v| v.problem.as_deref())
    {
        let _ = writeln!(
            out,
            "::error title={}::{}",
            escape_property("swarm: --verify-merged"),
            escape_data(problem)
        );
    }
    out
}

fn summary(report: &Report) -> String {
    let t = &report.totals;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### swarm run `{}`: {}\n",
        report.run_id,
        cell(&report.instruction)
    );
    let counts: Vec<String> = t
        .describe()
        .into_iter()
        .enumerate()
        .map(|(i, part)| match i {
            // Merged, and every problem, in bold; "no change" is not news.
            1 => part,
            _ => format!("**{part}**"),
        })
        .collect();
    let _ = writeln!(
        out,
        "{} of {} task(s) · {}\n",
        counts.join(", "),
        t.tasks,
        result_words(report)
    );
    skipped_and_checks(report, &mut out);
    task_table(report, &mut out);
    out.push('\n');
    out
}

/// Where the result is, in words.
fn result_words(report: &Report) -> String {
    match (&report.result, report.into_updated, &report.result_branch) {
        (Some(r), true, _) => format!(
            "`{}` is now at `{}`",
            report.into,
            swarm_engine::app::ids::abbrev(r, 12)
        ),
        (Some(r), false, Some(b)) => format!(
            "`{}` was not updated; the result `{}` is on branch `{b}`",
            report.into,
            swarm_engine::app::ids::abbrev(r, 12)
        ),
        _ => format!("nothing merged; `{}` unchanged", report.into),
    }
}

/// The files that were not tasks, and `--verify-merged`'s outcome.
fn skipped_and_checks(report: &Report, out: &mut String) {
    if !report.skipped_files.is_empty() {
        let files: Vec<String> = report
            .skipped_files
            .iter()
            .take(20)
            .map(|s| format!("`{}` ({})", cell(&s.file.display()), cell(&s.reason)))
            .collect();
        let _ = writeln!(
            out,
            "Not tasks: {}: {}{}\n",
            swarm_engine::app::describe_skipped(&report.skipped_files),
            files.join(", "),
            if report.skipped_files.len() > 20 {
                ", …"
            } else {
                ""
            }
        );
    }
    if let Some(v) = &report.verify_merged {
        let _ = writeln!(
            out,
            "`--verify-merged {}`: {} ({} run(s){})\n",
            cell(&v.command),
            match (&v.problem, v.passed) {
                (Some(p), _) => cell(p),
                (None, true) => "passed".into(),
                (None, false) => "did not finish".into(),
            },
            v.runs,
            if v.excluded.is_empty() {
                String::new()
            } else {
                format!(", left out: {}", swarm_engine::app::ids::join(&v.excluded))
            }
        );
    }
}

/// A row per task (only those that did not succeed, in a large run).
fn task_table(report: &Report, out: &mut String) {
    let all = report.tasks.len() <= SUMMARY_ROWS;
    let _ = writeln!(
        out,
        "| task | files | status | detail |\n| --- | --- | --- | --- |"
    );
    for task in report
        .tasks
        .iter()
        .filter(|t| all || !t.status.is_success())
    {
        let files: Vec<String> = task.files.iter().map(|f| f.display()).collect();
        let detail = match (&task.error, &task.summary) {
            (Some(e), _) => e.clone(),
            (None, Some(s)) => s.clone(),
            (None, None) if task.status == TaskStatus::Merged => task.change_words(),
            (None, None) => String::new(),
        };
        // With candidates: which won, and by which step.
        let detail = match &task.selection {
            Some(s) => format!(
                "{detail} (chose c{} of {}: {})",
                s.winner,
                task.candidates.len(),
                s.by.as_str()
            ),
            None => detail,
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            task.id,
            cell(&files.join(", ")),
            task.status.as_str(),
            cell(&detail)
        );
    }
    if !all {
        let _ = writeln!(
            out,
            "\n(only the tasks that did not succeed are listed; `swarm status {}` lists all)",
            report.run_id
        );
    }
}

fn outputs(report: &Report) -> String {
    let t = &report.totals;
    let mut out = String::new();
    for (k, v) in [
        ("run-id", report.run_id.to_string()),
        (
            "result",
            report.result.map(|r| r.to_string()).unwrap_or_default(),
        ),
        ("into", report.into.clone()),
        ("into-updated", report.into_updated.to_string()),
        (
            "result-branch",
            report.result_branch.clone().unwrap_or_default(),
        ),
        ("tasks", t.tasks.to_string()),
        ("merged", t.merged.to_string()),
        ("no-change", t.no_change.to_string()),
        ("failed", t.failed.to_string()),
        ("conflict", t.conflict.to_string()),
        ("timeout", t.timeout.to_string()),
        ("excluded", t.excluded.to_string()),
        ("skipped", t.skipped.to_string()),
        ("interrupted", t.interrupted.to_string()),
    ] {
        let _ = writeln!(out, "{k}={}", v.replace(['\r', '\n'], " "));
    }
    out
}

/// A Markdown table cell: one line, no unescaped `|`.
fn cell(text: &str) -> String {
    text.replace(['\r', '\n'], " ").replace('|', "\\|")
}

/// The message of a workflow command.
fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A property value of a workflow command.
fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_follow_the_workflow_command_rules() {
        assert_eq!(escape_data("50%\nnext\r"), "50%25%0Anext%0D");
        assert_eq!(escape_property("a:b,c"), "a%3Ab%2Cc");
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
