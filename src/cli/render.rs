//! Showing a run to a person: a live view on a terminal, plain lines otherwise, and the
//! summary table at the end. Everything goes to stderr; stdout is for `--json`.

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::events::{CheckRole, ConflictAction, Event, NetworkVerdict, Reporter};
use crate::report::{Report, TaskStatus};

pub enum TerminalReporter {
    Live(Live),
    Plain(Plain),
    /// `-q`: warnings only.
    Quiet,
}

/// `-q`, for the whole process.
static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Chooses the live view when stderr is a terminal (and not in CI), plain lines otherwise.
/// `settled` of the `tasks` are done already (a resumed run's).
pub fn reporter_for_terminal(tasks: usize, settled: usize) -> Arc<TerminalReporter> {
    let ci = std::env::var_os("CI").is_some() || std::env::var_os("GITHUB_ACTIONS").is_some();
    Arc::new(if is_quiet() {
        TerminalReporter::Quiet
    } else if std::io::stderr().is_terminal() && !ci {
        TerminalReporter::Live(Live::new(tasks))
    } else {
        TerminalReporter::Plain(Plain {
            tasks,
            settled: AtomicUsize::new(settled),
        })
    })
}

/// Plain lines, for a log: those that settle a task say how far the run is (`[12/40]`).
pub struct Plain {
    tasks: usize,
    settled: AtomicUsize,
}

impl Plain {
    fn on_event(&self, event: &Event) {
        let Some(line) = plain_text(event) else {
            return;
        };
        let settles = match event {
            Event::TaskFinished { status, .. } => *status != TaskStatus::Done,
            Event::Merged { .. } => true,
            Event::Conflict { action, .. } => *action != ConflictAction::Retry,
            _ => false,
        };
        match settles {
            true => {
                let n = self.settled.fetch_add(1, Ordering::Relaxed) + 1;
                eprintln!("swarm: [{n}/{}] {line}", self.tasks);
            }
            false => eprintln!("swarm: {line}"),
        }
    }
}

struct Handle(Arc<TerminalReporter>);

impl Reporter for Handle {
    fn on_event(&self, event: &Event) {
        let shown = super::visible::value(event);
        let event = shown.as_ref().unwrap_or(event);
        match &*self.0 {
            TerminalReporter::Live(live) => live.on_event(event),
            TerminalReporter::Plain(plain) => plain.on_event(event),
            TerminalReporter::Quiet => {
                if let Event::Warning { .. } | Event::TargetNotUpdated { .. } = event
                    && let Some(line) = plain_text(event)
                {
                    eprintln!("swarm: {line}");
                }
            }
        }
    }
}

impl TerminalReporter {
    pub fn boxed(self: &Arc<Self>) -> Box<dyn Reporter> {
        Box::new(Handle(self.clone()))
    }

    /// Clears the live view before the summary is printed.
    pub fn finish(&self) {
        if let TerminalReporter::Live(live) = self {
            live.overall.finish_and_clear();
            let _ = live.multi.clear();
        }
    }
}

pub struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    /// The line of each running task: tasks that share a worker process share one.
    workers: Mutex<HashMap<crate::ids::TaskId, Arc<(ProgressBar, String)>>>,
    counts: Mutex<HashMap<&'static str, usize>>,
    /// Tokens and US dollars spent so far.
    spent: Mutex<(u64, f64)>,
}

impl Live {
    fn new(tasks: usize) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        let overall = multi.add(ProgressBar::new(tasks as u64));
        overall.set_style(
            ProgressStyle::with_template(
                "{bar:30.cyan/blue} {pos}/{len} tasks  {elapsed_precise} (ETA {eta})  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("█▉▊▋▌▍▎▏ "),
        );
        overall.enable_steady_tick(Duration::from_millis(200));
        Self {
            multi,
            overall,
            workers: Mutex::new(HashMap::new()),
            counts: Mutex::new(HashMap::new()),
            spent: Mutex::new((0, 0.0)),
        }
    }

    fn settle(&self, task: &crate::ids::TaskId, status: &'static str) {
        self.drop_line(task);
        self.overall.inc(1);
        {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            *counts.entry(status).or_default() += 1;
        }
        self.refresh_overall();
    }

    /// The overall line: tasks by status, and what the run has spent so far.
    fn refresh_overall(&self) {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        parts.sort();
        let (tokens, cost) = *self.spent.lock().unwrap_or_else(|e| e.into_inner());
        if tokens > 0 {
            parts.push(format!("{} tokens", human_count(tokens)));
        }
        if cost > 0.0 {
            parts.push(format!("${cost:.2}"));
        }
        self.overall.set_message(parts.join(", "));
    }

    /// What a metered model answer spent, for the overall line.
    fn add_spent(&self, tokens: u64, cost_usd: f64) {
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        spent.0 = spent.0.saturating_add(tokens);
        spent.1 += cost_usd;
    }

    fn lock_workers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<crate::ids::TaskId, Arc<(ProgressBar, String)>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A line for a worker process running `tasks`, labelled `label`.
    fn add_line(&self, tasks: &[crate::ids::TaskId], label: String) {
        let bar = self
            .multi
            .insert_before(&self.overall, ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("  {spinner:.green} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(format!("{label} · starting"));
        bar.enable_steady_tick(Duration::from_millis(120));
        let line = Arc::new((bar, label));
        let mut workers = self.lock_workers();
        for task in tasks {
            workers.insert(task.clone(), line.clone());
        }
    }

    /// Task `task` no longer shows: its line goes when no other task shares it.
    fn drop_line(&self, task: &crate::ids::TaskId) {
        let Some(line) = self.lock_workers().remove(task) else {
            return;
        };
        if Arc::strong_count(&line) == 1 {
            line.0.finish_and_clear();
            self.multi.remove(&line.0);
        }
    }

    fn on_event(&self, event: &Event) {
        match event {
            Event::TaskStarted {
                task,
                files,
                attempt,
                ..
            } => {
                // A task of a shared process shows on the process's line.
                if self.lock_workers().contains_key(task) {
                    return;
                }
                let mut label = files.first().map(|f| f.display()).unwrap_or_default();
                if files.len() > 1 {
                    label.push_str(&format!(" (+{})", files.len() - 1));
                }
                if *attempt > 1 {
                    label.push_str(&format!(" [retry {attempt}]"));
                }
                self.add_line(std::slice::from_ref(task), label);
            }
            Event::GroupStarted { tasks, .. } => {
                let first = tasks.first().map(|t| t.as_str()).unwrap_or_default();
                let label = format!("{first} (+{} tasks, one process)", tasks.len() - 1);
                self.add_line(tasks, label);
            }
            Event::GroupSplit { tasks, .. } => {
                for task in tasks {
                    self.drop_line(task);
                }
                if let Some(line) = plain_text(event) {
                    let _ = self.multi.println(format!("  {line}"));
                }
            }
            Event::TaskStep { task, step } => {
                if let Some(line) = self.lock_workers().get(task) {
                    line.0.set_message(format!("{} · {step}", line.1));
                }
            }
            Event::ModelUsage {
                prompt,
                completion,
                cost_usd,
                ..
            } => {
                self.add_spent(prompt.saturating_add(*completion), cost_usd.unwrap_or(0.0));
                self.refresh_overall();
            }
            Event::TaskFinished {
                task,
                status,
                error,
                ..
            } => match status {
                TaskStatus::Done => {
                    if let Some(line) = self.lock_workers().get(task) {
                        line.0.set_message(format!("{} · merging", line.1));
                    }
                }
                other => {
                    if !other.is_success() {
                        let _ = self.multi.println(format!(
                            "  {} {task}: {}",
                            other.as_str(),
                            error.as_deref().unwrap_or("")
                        ));
                    }
                    self.settle(task, other.as_str());
                }
            },
            Event::Merged { task, .. } => self.settle(task, "merged"),
            Event::Conflict {
                task,
                paths,
                action,
            } => {
                let list: Vec<String> = paths.iter().map(|p| p.display()).collect();
                let _ = self.multi.println(format!(
                    "  conflict {task} in {}: {}",
                    list.join(", "),
                    action.as_str()
                ));
                if *action == ConflictAction::Retry {
                    self.drop_line(task);
                } else {
                    self.settle(task, "conflict");
                }
            }
            Event::Warning { task, message } => {
                let _ = self.multi.println(format!(
                    "  warning{}: {message}",
                    task.as_ref().map(|t| format!(" {t}")).unwrap_or_default()
                ));
            }
            Event::TargetNotUpdated { into, reason, .. } => {
                let _ = self
                    .multi
                    .println(format!("  {into} not updated: {reason}"));
            }
            Event::VerifyMerged { .. } | Event::Excluded { .. } | Event::Network { .. } => {
                if let Some(line) = plain_text(event) {
                    let _ = self.multi.println(format!("  {line}"));
                }
                if let Event::VerifyMerged { runs, .. } = event {
                    self.overall
                        .set_message(format!("--verify-merged: {runs} check(s) run"));
                }
            }
            _ => {}
        }
    }
}

/// One line about `event` for a log, or `None` for events not worth a line.
fn plain_text(event: &Event) -> Option<String> {
    let line = match event {
        Event::TaskStarted {
            task,
            files,
            attempt,
            ..
        } => {
            let files: Vec<String> = files.iter().map(|f| f.display()).collect();
            let retry = if *attempt > 1 {
                format!(" (attempt {attempt})")
            } else {
                String::new()
            };
            format!("started   {task}: {}{retry}", files.join(", "))
        }
        Event::TaskFinished {
            task,
            status,
            error,
            changed_files,
            ..
        } => match status {
            TaskStatus::Done => {
                format!("finished  {task}: {} file(s) changed", changed_files.len())
            }
            other => format!(
                "{:<9} {task}{}",
                other.as_str(),
                error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        },
        Event::Merged { task, commit, .. } => format!("merged    {task} ({})", &commit[..10]),
        Event::GroupStarted { tasks, .. } => format!(
            "process   for {} tasks, each committed and merged on its own: {}",
            tasks.len(),
            short_list(tasks)
        ),
        Event::GroupSplit {
            tasks,
            alone,
            error,
            log,
        } => format!(
            "split     the process for {} tasks ({}) did not succeed: {error}; they run again, \
             {}{}",
            tasks.len(),
            short_list(tasks),
            match alone.len() {
                0 => "in two halves".to_string(),
                n => format!(
                    "{} alone (named in its errors), the others together",
                    match n {
                        1 => alone[0].to_string(),
                        n => format!("{n} tasks"),
                    }
                ),
            },
            log.as_ref()
                .map(|l| format!(" (log: {l})"))
                .unwrap_or_default()
        ),
        Event::Conflict {
            task,
            paths,
            action,
        } => {
            let list: Vec<String> = paths.iter().map(|p| p.display()).collect();
            format!(
                "conflict  {task} in {}: {}",
                list.join(", "),
                action.as_str()
            )
        }
        Event::Warning { task, message } => format!(
            "warning{}: {message}",
            task.as_ref().map(|t| format!(" {t}")).unwrap_or_default()
        ),
        Event::TargetNotUpdated {
            into,
            result_branch,
            reason,
            ..
        } => format!("{into} not updated: {reason}; the result is on branch {result_branch}"),
        Event::VerifyMerged {
            commit,
            role,
            passed,
            runs,
        } => format!(
            "verify-merged #{runs} on {} ({}): {}",
            &commit[..10],
            match role {
                CheckRole::Result => "merged result",
                CheckRole::Base => "the base, to tell a broken check from a broken task",
                CheckRole::Bisect => "bisecting the merges",
            },
            if *passed { "passed" } else { "FAILED" }
        ),
        Event::Excluded { task, reason } => format!("excluded  {task}: {reason}"),
        Event::Network {
            task,
            domain,
            port,
            verdict: NetworkVerdict::Refused,
        } => format!(
            "refused   {}network access to {domain}:{port} (allow it with --allow-domain {domain})",
            task.as_ref().map(|t| format!("{t}: ")).unwrap_or_default()
        ),
        _ => return None,
    };
    Some(line)
}

/// The first and last of `tasks`.
fn short_list(tasks: &[crate::ids::TaskId]) -> String {
    match tasks {
        [] => String::new(),
        [one] => one.to_string(),
        [first, .., last] => format!("{first} … {last}"),
    }
}

/// The table printed after a run (stderr).
pub fn print_summary(report: &Report, interrupted: bool) {
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
            crate::plan::describe_skipped(&report.skipped_files),
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
        print_kept(report);
        print_verify_merged(report);
    }
    print_result(report);
    if interrupted {
        // The documented way to finish: the tasks left run, then everything merges.
        eprintln!("  finish it with: swarm resume {}", report.run_id);
    }
}

/// `1234567` as `1.2M`.
fn human_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// Unsuccessful tasks whose output the summary shows (`swarm status RUN` shows all).
const EXPLAINED: usize = 10;

/// One row per task (only the unsuccessful ones past 20 tasks).
fn print_table(report: &Report) {
    let show_all = report.tasks.len() <= 20;
    let rows: Vec<_> = report
        .tasks
        .iter()
        .filter(|t| show_all || !t.status.is_success())
        .collect();
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
                (None, TaskStatus::Merged) => {
                    format!("{} file(s) changed", task.changed_files.len())
                }
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

/// Lines shown under an unsuccessful task: what the sandbox probably did (with the setting
/// that would allow it), the last lines of its output, and its log.
pub fn failure_lines(task: &crate::report::TaskReport) -> Vec<String> {
    const LAST: usize = 5;
    const WIDTH: usize = 160;
    if task.status.is_success() || matches!(task.status, TaskStatus::Pending | TaskStatus::Running)
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
                    crate::ids::join(&v.excluded)
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
                crate::ids::short(result)
            );
        }
        (Some(result), false, Some(branch)) => {
            eprintln!(
                "result: {} was NOT updated; the merged result ({}) is on branch {branch}",
                report.into,
                crate::ids::short(result)
            );
            if let Some(hint) = &report.merge_hint {
                eprintln!("  merge it with: {hint}");
            }
        }
        _ => eprintln!("result: nothing merged; {} unchanged", report.into),
    }
}
