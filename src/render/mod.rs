//! Showing a run to a person while it goes: a live view on a terminal, plain lines
//! otherwise (the summary at the end is [`super::summary`]). Everything goes to stderr;
//! stdout is for `--json`.

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use swarm_engine::app::events::{ConflictAction, Event, Reporter};
use swarm_engine::app::report::TaskStatus;

mod lines;
use lines::plain_text;

pub(crate) enum TerminalReporter {
    Live(Live),
    Plain(Plain),
    /// `-q`: warnings only.
    Quiet,
}

/// `-q`, for the whole process.
static QUIET: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub(crate) fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A line of progress on stderr, unless `-q`.
pub(crate) fn say(line: &str) {
    if !is_quiet() {
        eprintln!("{line}");
    }
}

/// Chooses the live view when stderr is a terminal (and not in CI), plain lines otherwise.
/// `settled` of the `tasks` are done already (a resumed run's).
pub(crate) fn reporter_for_terminal(tasks: usize, settled: usize) -> Arc<TerminalReporter> {
    let ci = std::env::var_os("CI").is_some() || std::env::var_os("GITHUB_ACTIONS").is_some();
    Arc::new(if is_quiet() {
        TerminalReporter::Quiet
    } else if std::io::stderr().is_terminal() && !ci {
        TerminalReporter::Live(Live::new(tasks, settled))
    } else {
        TerminalReporter::Plain(Plain {
            tasks,
            settled: AtomicUsize::new(settled),
        })
    })
}

/// Plain lines, for a log: those that settle a task say how far the run is (`[12/40]`).
pub(crate) struct Plain {
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
    pub(crate) fn boxed(self: &Arc<Self>) -> Box<dyn Reporter> {
        Box::new(Handle(self.clone()))
    }

    /// A line of swarm's own while the run goes (above the live view, which stays whole).
    pub(crate) fn note(&self, line: &str) {
        match self {
            TerminalReporter::Live(live) => {
                let _ = live.multi.println(line);
            }
            _ => eprintln!("{line}"),
        }
    }

    /// The run is stopping (Ctrl-C): the overall line says so instead of an ETA, which would
    /// read 0s.
    pub(crate) fn stopping(&self) {
        if let TerminalReporter::Live(live) = self {
            live.overall.set_style(overall_style(STOPPING));
        }
    }

    /// Clears the live view before the summary is printed.
    pub(crate) fn finish(&self) {
        if let TerminalReporter::Live(live) = self {
            live.overall.finish_and_clear();
            let _ = live.multi.clear();
        }
    }
}

/// The overall line while tasks run, and once the run is stopping.
const RUNNING: &str = "{bar:30.cyan/blue} {pos}/{len} tasks  {elapsed_precise} (ETA {eta})  {msg}";
const STOPPING: &str = "{bar:30.cyan/blue} {pos}/{len} tasks  {elapsed_precise} (stopping)  {msg}";

fn overall_style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("█▉▊▋▌▍▎▏ ")
}

pub(crate) struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    /// The line of each running task: tasks that share a worker process share one.
    workers: Mutex<HashMap<swarm_engine::app::ids::TaskId, Arc<(ProgressBar, String)>>>,
    counts: Mutex<HashMap<&'static str, usize>>,
    /// Tokens and US dollars spent so far.
    spent: Mutex<(u64, f64)>,
}

impl Live {
    /// The view of a run of `tasks`, `settled` of which a resumed run had done before.
    fn new(tasks: usize, settled: usize) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        let overall = multi.add(ProgressBar::new(tasks as u64));
        // Counted from where the run was, its ETA from what this process does.
        overall.set_position(settled as u64);
        overall.reset_eta();
        overall.set_style(overall_style(RUNNING));
        overall.enable_steady_tick(Duration::from_millis(200));
        let mut counts = HashMap::new();
        if settled > 0 {
            counts.insert("done before", settled);
        }
        let live = Self {
            multi,
            overall,
            workers: Mutex::new(HashMap::new()),
            counts: Mutex::new(counts),
            spent: Mutex::new((0, 0.0)),
        };
        live.refresh_overall();
        live
    }

    fn settle(&self, task: &swarm_engine::app::ids::TaskId, status: &'static str) {
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
        // By status, in the summary's words: "3 merged, 1 no change".
        let mut by_status: Vec<_> = counts.iter().collect();
        by_status.sort();
        let mut parts: Vec<String> = by_status
            .into_iter()
            .map(|(k, v)| format!("{v} {}", k.replace('_', " ")))
            .collect();
        let (tokens, cost) = *self.spent.lock().unwrap_or_else(|e| e.into_inner());
        if tokens > 0 {
            parts.push(format!("{} tokens", super::summary::human_count(tokens)));
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
    ) -> std::sync::MutexGuard<
        '_,
        HashMap<swarm_engine::app::ids::TaskId, Arc<(ProgressBar, String)>>,
    > {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A line for a worker process running `tasks`, labelled `label`.
    fn add_line(&self, tasks: &[swarm_engine::app::ids::TaskId], label: String) {
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
    fn drop_line(&self, task: &swarm_engine::app::ids::TaskId) {
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
            Event::TaskStarted { .. }
            | Event::TaskStep { .. }
            | Event::TaskFinished { .. }
            | Event::CandidateFinished { .. }
            | Event::CandidateChosen { .. }
            | Event::Merged { .. }
            | Event::Conflict { .. }
            | Event::ModelUsage { .. } => self.on_task_event(event),
            Event::GroupStarted { .. } | Event::GroupSplit { .. } => self.on_group_event(event),
            _ => self.on_run_event(event),
        }
    }

    /// A task's line: started, its steps, what it spent, how it ended.
    fn on_task_event(&self, event: &Event) {
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
            Event::TaskStep { task, step } => {
                if let Some(line) = self.lock_workers().get(task) {
                    line.0.set_message(format!("{} · {step}", line.1));
                }
            }
            Event::CandidateFinished { .. } | Event::CandidateChosen { .. } => {
                if let Some(text) = plain_text(event) {
                    let _ = self.multi.println(format!("  {text}"));
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
            _ => {}
        }
    }

    /// A process that runs several tasks: its line, and its split.
    fn on_group_event(&self, event: &Event) {
        match event {
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
            _ => {}
        }
    }

    /// What concerns the whole run: warnings, the target, the checks of the merged result.
    fn on_run_event(&self, event: &Event) {
        match event {
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
            Event::VerifyMerged { .. }
            | Event::Excluded { .. }
            | Event::MergeDriver { .. }
            | Event::Network { .. }
            | Event::GatewayRefused { .. } => {
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
