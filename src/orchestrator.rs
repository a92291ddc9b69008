//! The pipeline of one run: workers in parallel, the merge train overlapping them, then the
//! target moved once and everything cleaned up.
//!
//! One scheduler loop owns all run state (no locks around the report). Worker tasks run in a
//! `JoinSet` capped at `--jobs`; each acquires a pooled worktree, runs the worker, commits,
//! and returns. A finished task with changes goes straight to the merge thread, which owns the
//! `MergeTrain` (git2 handles are not `Sync`), so merging overlaps the workers still running.
//! Conflicts under `--on-conflict retry` are retried after the first wave, one at a time
//! (see docs/ARCHITECTURE.md). Whatever happens in the loop, [`finish`] runs: worktrees are
//! removed and merged branches deleted on every exit path.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use git2::Oid;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::events::{Event, EventSink};
use crate::git::commit::{self, CommitError};
use crate::git::finish;
use crate::git::merge::{MergeOutcome, MergeRequest, MergeTrain};
use crate::git::repo::{IntoTarget, RepoInfo};
use crate::git::worktree::WorktreePool;
use crate::plan::Plan;
use crate::repo_path::RepoPath;
use crate::report::{REPORT_SCHEMA_VERSION, Report, RunState, TaskReport, TaskStatus, Tokens};
use crate::settings::{OnConflict, Scope};
use crate::state::{self, RunDir};
use crate::worker::exec::{self, ExecTask, Verdict};
use crate::worker::process::{self, Exit, ProcessRequest};

pub struct RunRequest {
    pub info: RepoInfo,
    pub plan: Plan,
    pub into: IntoTarget,
    /// Where `into` starts: its tip, or the base when swarm creates it.
    pub into_start: Oid,
    pub keep: bool,
    pub cancel: CancellationToken,
    pub sink: Arc<EventSink>,
}

pub struct RunOutcome {
    pub report: Report,
    pub interrupted: bool,
}

/// What every worker task shares.
struct Shared {
    plan: Plan,
    base: Oid,
    run_dir: RunDir,
    pool: WorktreePool,
    sink: Arc<EventSink>,
    cancel: CancellationToken,
    command: String,
}

/// One attempt at one task, as a worker task returns it.
struct Attempt {
    idx: usize,
    attempt: u32,
    start: Oid,
    status: TaskStatus,
    tip: Option<Oid>,
    changed: Vec<RepoPath>,
    error: Option<String>,
    summary: Option<String>,
    output_tail: Option<String>,
    duration: Duration,
}

struct MergeJob {
    idx: usize,
    start: Oid,
    tip: Oid,
}

struct MergeDone {
    idx: usize,
    outcome: Result<MergeOutcome, String>,
}

pub fn result_branch(run_id: &str) -> String {
    format!("swarm/{run_id}/result")
}

pub async fn run(req: RunRequest) -> anyhow::Result<RunOutcome> {
    let started = Instant::now();
    let plan = req.plan;
    let run_dir = RunDir::new(&req.info.common_dir, &plan.run_id);
    std::fs::create_dir_all(&run_dir.path)
        .with_context(|| format!("cannot create {}", run_dir.path.display()))?;
    state::write_json_atomic(&run_dir.plan(), &plan)?;
    req.sink.log_to(&run_dir.events())?;
    let base = Oid::from_str(&plan.base)?;
    let command = plan
        .settings
        .exec
        .clone()
        .context("the plan has no --exec command")?;

    let mut report = Report {
        schema_version: REPORT_SCHEMA_VERSION,
        run_id: plan.run_id.clone(),
        instruction: plan.instruction.clone(),
        base: plan.base.clone(),
        into: req.into.branch.clone(),
        into_start: req.into_start.to_string(),
        result: None,
        into_updated: false,
        result_branch: None,
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
                changed_files: Vec::new(),
                summary: None,
                error: None,
                output_tail: None,
                branch_kept: false,
            })
            .collect(),
        totals: Default::default(),
    };
    report.compute_totals(0);
    state::write_json_atomic(&run_dir.report(), &report)?;
    req.sink.emit(Event::RunStarted {
        run_id: plan.run_id.clone(),
        base: plan.base.clone(),
        into: req.into.branch.clone(),
        tasks: plan.tasks.len(),
        jobs: plan.settings.jobs,
    });

    let pool = WorktreePool::new(
        &req.info.common_dir,
        &plan.run_id,
        plan.settings.worktree.copy.clone(),
        &req.info.workdir,
    );
    let shared = Arc::new(Shared {
        plan,
        base,
        run_dir,
        pool,
        sink: req.sink.clone(),
        cancel: req.cancel.clone(),
        command,
    });
    let mut sched = Scheduler {
        shared: shared.clone(),
        report,
        tip: req.into_start,
        stopped: None,
        last_save: Instant::now(),
    };
    let driven = sched.drive(&req.info, req.into_start).await;
    if let Err(e) = &driven {
        tracing::error!("run failed: {e:#}");
    }
    let interrupted = req.cancel.is_cancelled();
    let mut report = sched.report;
    finish(
        &shared,
        &req.info,
        &req.into,
        req.into_start,
        sched.tip,
        req.keep,
        interrupted || driven.is_err(),
        &mut report,
    )
    .await;
    report.state = if interrupted {
        RunState::Interrupted
    } else {
        RunState::Finished
    };
    report.compute_totals(started.elapsed().as_millis() as u64);
    state::write_json_atomic(&shared.run_dir.report(), &report)?;
    shared.sink.emit(Event::RunFinished {
        result: report.result.clone(),
        merged: report.totals.merged,
        failed: report.tasks.len() - report.totals.merged - report.totals.no_change,
    });
    driven?;
    Ok(RunOutcome {
        report,
        interrupted,
    })
}

struct Scheduler {
    shared: Arc<Shared>,
    report: Report,
    /// The integration tip.
    tip: Oid,
    /// Why no more tasks run or merge (`--on-conflict fail`).
    stopped: Option<String>,
    last_save: Instant,
}

impl Scheduler {
    async fn drive(&mut self, info: &RepoInfo, into_start: Oid) -> anyhow::Result<()> {
        let shared = self.shared.clone();
        let settings = &shared.plan.settings;
        let train = MergeTrain::new(
            &info.common_dir,
            &result_branch(&shared.plan.run_id),
            into_start,
        )?;
        let (job_tx, job_rx) = std::sync::mpsc::channel::<MergeJob>();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<MergeDone>();
        let merge_thread = {
            let shared = shared.clone();
            std::thread::spawn(move || merge_loop(train, &shared, job_rx, done_tx))
        };

        let mut pending: VecDeque<usize> = (0..shared.plan.tasks.len()).collect();
        let mut retries: VecDeque<(usize, Vec<RepoPath>)> = VecDeque::new();
        let mut running: JoinSet<Attempt> = JoinSet::new();
        let mut merging = 0usize;
        loop {
            let may_start = !shared.cancel.is_cancelled() && self.stopped.is_none();
            if may_start {
                while running.len() < settings.jobs
                    && let Some(idx) = pending.pop_front()
                {
                    self.set_running(idx, 1, shared.base);
                    running.spawn(run_task(shared.clone(), idx, 1, shared.base, None));
                }
                if pending.is_empty()
                    && running.is_empty()
                    && merging == 0
                    && let Some((idx, paths)) = retries.pop_front()
                {
                    let context = conflict_context(&paths);
                    self.set_running(idx, 2, self.tip);
                    running.spawn(run_task(shared.clone(), idx, 2, self.tip, Some(context)));
                }
            }
            if running.is_empty() && merging == 0 {
                break;
            }
            tokio::select! {
                Some(joined) = running.join_next(), if !running.is_empty() => {
                    let attempt = match joined {
                        Ok(a) => a,
                        Err(e) => anyhow::bail!("a worker task failed: {e}"),
                    };
                    if let Some(job) = self.on_attempt(attempt) {
                        job_tx.send(job).context("the merge thread stopped")?;
                        merging += 1;
                    }
                }
                Some(done) = done_rx.recv(), if merging > 0 => {
                    merging -= 1;
                    if let Some(retry) = self.on_merged(done) {
                        retries.push_back(retry);
                    }
                }
            }
        }
        drop(job_tx);
        let _ = merge_thread.join();
        // Tasks that never started.
        let not_run = if shared.cancel.is_cancelled() {
            None
        } else {
            self.stopped.clone()
        };
        for idx in pending
            .into_iter()
            .chain(retries.into_iter().map(|(i, _)| i))
        {
            let t = &mut self.report.tasks[idx];
            if t.status == TaskStatus::Pending {
                if let Some(reason) = &not_run {
                    t.status = TaskStatus::Skipped;
                    t.error = Some(format!("not run: {reason}"));
                }
            } else if t.status == TaskStatus::Conflict && shared.cancel.is_cancelled() {
                t.error = Some("conflicted; the retry did not run (interrupted)".into());
            }
        }
        self.save();
        Ok(())
    }

    fn set_running(&mut self, idx: usize, attempt: u32, start: Oid) {
        let t = &mut self.report.tasks[idx];
        t.status = TaskStatus::Running;
        t.attempts = attempt;
        t.start = Some(start.to_string());
        self.save();
    }

    /// Records a finished attempt; returns the merge job if it is to be merged.
    fn on_attempt(&mut self, a: Attempt) -> Option<MergeJob> {
        let t = &mut self.report.tasks[a.idx];
        t.duration_ms += a.duration.as_millis() as u64;
        t.changed_files = a.changed.clone();
        t.commit = a.tip.filter(|tip| *tip != a.start).map(|o| o.to_string());
        t.summary = a.summary.clone();
        t.output_tail = a.output_tail.clone();
        t.error = a.error.clone();
        t.status = a.status;
        let mut job = None;
        if a.status == TaskStatus::Done
            && let Some(tip) = a.tip
        {
            if let Some(reason) = &self.stopped {
                t.status = TaskStatus::Skipped;
                t.error = Some(format!("not merged: {reason}"));
            } else {
                job = Some(MergeJob {
                    idx: a.idx,
                    start: a.start,
                    tip,
                });
            }
        }
        self.shared.sink.emit(Event::TaskFinished {
            task: t.id.clone(),
            status: t.status,
            changed_files: t.changed_files.clone(),
            duration_ms: a.duration.as_millis() as u64,
            error: t.error.clone(),
        });
        self.save();
        job
    }

    /// Records a merge; returns a retry to schedule for a conflict under `retry`.
    fn on_merged(&mut self, done: MergeDone) -> Option<(usize, Vec<RepoPath>)> {
        let policy = self.shared.plan.settings.on_conflict;
        let t = &mut self.report.tasks[done.idx];
        let mut retry = None;
        match done.outcome {
            Ok(MergeOutcome::Merged { commit, fast_path }) => {
                t.status = TaskStatus::Merged;
                t.merge_commit = Some(commit.to_string());
                self.tip = commit;
                self.shared.sink.emit(Event::Merged {
                    task: t.id.clone(),
                    commit: commit.to_string(),
                    fast_path,
                });
            }
            Ok(MergeOutcome::Conflict { paths }) => {
                t.status = TaskStatus::Conflict;
                let list = paths
                    .iter()
                    .map(|p| p.display())
                    .collect::<Vec<_>>()
                    .join(", ");
                t.error = Some(format!("merge conflict in {list}"));
                let action = match policy {
                    OnConflict::Retry if t.attempts < 2 => {
                        retry = Some((done.idx, paths.clone()));
                        "retry"
                    }
                    OnConflict::Retry | OnConflict::Skip | OnConflict::Repair => "skip",
                    OnConflict::Fail => {
                        self.stopped = Some(format!(
                            "merging stopped after task {} conflicted (--on-conflict fail)",
                            t.id
                        ));
                        "stop"
                    }
                };
                self.shared.sink.emit(Event::Conflict {
                    task: t.id.clone(),
                    paths,
                    action: action.to_string(),
                });
            }
            Err(e) => {
                t.status = TaskStatus::Failed;
                t.error = Some(format!("merge failed: {e}"));
            }
        }
        self.save();
        retry
    }

    /// Saves report.json, at most once a second while tasks run (rewriting it on every state
    /// change is quadratic in the number of tasks); [`run`] always saves the final report.
    fn save(&mut self) {
        if self.last_save.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_save = Instant::now();
        self.report.compute_totals(0);
        if let Err(e) = state::write_json_atomic(&self.shared.run_dir.report(), &self.report) {
            tracing::warn!("cannot save report.json: {e:#}");
        }
    }
}

fn conflict_context(paths: &[RepoPath]) -> String {
    let list: Vec<String> = paths.iter().map(|p| format!("- {}", p.display())).collect();
    format!(
        "A previous attempt at this task conflicted with changes other tasks already merged, in:\n{}\n\
         This attempt starts from the current merged result, which contains those changes: \
         keep them and apply the instruction on top.",
        list.join("\n")
    )
}

fn merge_loop(
    mut train: MergeTrain,
    shared: &Shared,
    jobs: std::sync::mpsc::Receiver<MergeJob>,
    done: mpsc::UnboundedSender<MergeDone>,
) {
    for job in jobs {
        let task = &shared.plan.tasks[job.idx];
        let outcome = train
            .merge(&MergeRequest {
                task_id: &task.id,
                files: &task.files,
                instruction: &shared.plan.instruction,
                run_id: &shared.plan.run_id,
                start: job.start,
                tip: job.tip,
            })
            .map_err(|e| format!("{e:#}"));
        if done
            .send(MergeDone {
                idx: job.idx,
                outcome,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Runs one attempt of one task in a pooled worktree. Never fails: problems are the task's
/// status and error.
async fn run_task(
    shared: Arc<Shared>,
    idx: usize,
    attempt: u32,
    start: Oid,
    context: Option<String>,
) -> Attempt {
    let started = Instant::now();
    let mut a = Attempt {
        idx,
        attempt,
        start,
        status: TaskStatus::Failed,
        tip: None,
        changed: Vec::new(),
        error: None,
        summary: None,
        output_tail: None,
        duration: Duration::ZERO,
    };
    if let Err(e) = attempt_task(&shared, &mut a, context.as_deref()).await {
        a.status = TaskStatus::Failed;
        a.error = Some(format!("{e:#}"));
    }
    a.duration = started.elapsed();
    a
}

async fn attempt_task(
    shared: &Arc<Shared>,
    a: &mut Attempt,
    context: Option<&str>,
) -> anyhow::Result<()> {
    let task = &shared.plan.tasks[a.idx];
    let run_id = &shared.plan.run_id;
    let branch = task.branch(run_id);
    let step = |s: &str| {
        shared.sink.emit(Event::TaskStep {
            task: task.id.clone(),
            step: s.to_string(),
        })
    };

    let mut slot = {
        let shared = shared.clone();
        let (branch, start) = (branch.clone(), a.start);
        tokio::task::spawn_blocking(move || shared.pool.acquire(&branch, start)).await??
    };
    if slot.fresh {
        shared.sink.emit(Event::WorktreeCreated {
            worktree: slot.path.display().to_string(),
        });
    }
    shared.sink.emit(Event::TaskStarted {
        task: task.id.clone(),
        files: task.files.clone(),
        attempt: a.attempt,
        worktree: slot.path.display().to_string(),
    });
    let task_dir = shared.run_dir.task_dir(&task.id);
    std::fs::create_dir_all(&task_dir)?;
    let timeout = shared.plan.settings.timeout();

    let mut outcome = None;
    if let Some(setup) = shared.plan.settings.worktree.setup.as_deref()
        && !slot.set_up
    {
        step("setup");
        let log = shared.run_dir.path.join(format!("{}-setup.log", slot.name));
        let ran = process::run(ProcessRequest {
            command: setup,
            cwd: &slot.path,
            env: Vec::new(),
            log: &log,
            timeout,
            cancel: &shared.cancel,
        })
        .await?;
        match ran.exit {
            Exit::Code(0) => slot.set_up = true,
            Exit::Cancelled => outcome = Some((Verdict::Interrupted, None, None)),
            other => {
                let why = format!(
                    "worktree setup `{setup}` failed ({other:?}); see {}",
                    log.display()
                );
                outcome = Some((Verdict::Failed(why), None, Some(ran.output_tail)));
            }
        }
    }
    let (verdict, summary, output_tail) = match outcome {
        Some(o) => o,
        None => {
            step("running");
            let ran = exec::run(ExecTask {
                command: &shared.command,
                instruction: &shared.plan.instruction,
                run_id,
                task_id: &task.id,
                files: &task.files,
                worktree: &slot.path,
                task_dir: &task_dir,
                timeout,
                cancel: &shared.cancel,
                context,
            })
            .await?;
            (ran.verdict, ran.summary, Some(ran.output_tail))
        }
    };
    a.summary = summary;
    a.output_tail = output_tail.filter(|t| !t.is_empty());

    step("committing");
    let committed = {
        let path = slot.path.clone();
        let (branch, start) = (branch.clone(), a.start);
        let message = format!(
            "swarm: {}\n\n{}\n\nSwarm-Run: {run_id}\nSwarm-Task: {}\n",
            task.id,
            shared.plan.instruction.trim(),
            task.id
        );
        tokio::task::spawn_blocking(move || commit::commit_task(&path, &branch, start, &message))
            .await?
    };
    {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || shared.pool.release(slot)).await??;
    }
    let committed = match committed {
        Ok(c) => c,
        Err(e @ (CommitError::MovedHead(_) | CommitError::RewroteBranch(_))) => {
            a.status = TaskStatus::Failed;
            a.error = Some(e.to_string());
            return Ok(());
        }
        Err(CommitError::Git(e)) => return Err(e).context("cannot commit the worker's changes"),
    };
    a.tip = Some(committed.tip);
    a.changed = committed.changed;
    if committed.worker_commits > 0 {
        shared.sink.emit(Event::Warning {
            task: Some(task.id.clone()),
            message: format!(
                "the worker made {} commit(s) itself; they are kept on the task branch",
                committed.worker_commits
            ),
        });
    }
    (a.status, a.error) = match verdict {
        Verdict::Interrupted => (TaskStatus::Interrupted, Some("interrupted".into())),
        Verdict::Timeout(why) => (TaskStatus::Timeout, Some(why)),
        Verdict::Failed(why) => (TaskStatus::Failed, Some(why)),
        Verdict::Done | Verdict::NoChange if a.changed.is_empty() => (TaskStatus::NoChange, None),
        Verdict::Done | Verdict::NoChange => {
            let outside: Vec<String> = a
                .changed
                .iter()
                .filter(|p| !task.files.contains(p))
                .map(|p| p.display())
                .collect();
            if shared.plan.settings.scope == Scope::Task && !outside.is_empty() {
                (
                    TaskStatus::Failed,
                    Some(format!(
                        "changed files outside its task: {} (pass --scope any to allow)",
                        outside.join(", ")
                    )),
                )
            } else {
                (TaskStatus::Done, None)
            }
        }
    };
    Ok(())
}

/// Moves the target (unless interrupted), removes worktrees, deletes the branches that are no
/// longer needed, and fills the run-level fields of the report.
#[allow(clippy::too_many_arguments)]
async fn finish(
    shared: &Arc<Shared>,
    info: &RepoInfo,
    into: &IntoTarget,
    into_start: Oid,
    tip: Oid,
    keep: bool,
    interrupted: bool,
    report: &mut Report,
) {
    let run_id = shared.plan.run_id.clone();
    let result_branch = result_branch(&run_id);
    let merged_any = tip != into_start;
    report.result = merged_any.then(|| tip.to_string());
    if merged_any && !interrupted {
        let (info, into2) = (info.clone(), into.clone());
        let moved = tokio::task::spawn_blocking(move || {
            finish::update_target(&info, &into2, into_start, tip)
        })
        .await;
        match moved {
            Ok(Ok(Ok(()))) => {
                report.into_updated = true;
                shared.sink.emit(Event::TargetUpdated {
                    into: into.branch.clone(),
                    result: tip.to_string(),
                });
            }
            Ok(Ok(Err(reason))) => {
                report.result_branch = Some(result_branch.clone());
                shared.sink.emit(Event::TargetNotUpdated {
                    into: into.branch.clone(),
                    result_branch: result_branch.clone(),
                    reason,
                });
            }
            Ok(Err(e)) => {
                report.result_branch = Some(result_branch.clone());
                shared.sink.emit(Event::TargetNotUpdated {
                    into: into.branch.clone(),
                    result_branch: result_branch.clone(),
                    reason: format!("{e:#}"),
                });
            }
            Err(e) => tracing::error!("target update panicked: {e}"),
        }
    } else if merged_any {
        report.result_branch = Some(result_branch.clone());
    }

    let common_dir = info.common_dir.clone();
    let mut delete = Vec::new();
    let mut kept = Vec::new();
    for t in &mut report.tasks {
        let has_commit = t.commit.is_some();
        let started =
            t.status != TaskStatus::Pending && t.status != TaskStatus::Skipped || has_commit;
        if !started {
            continue;
        }
        let needed = has_commit && !matches!(t.status, TaskStatus::Merged | TaskStatus::NoChange);
        if keep || needed {
            t.branch_kept = true;
            kept.push(t.branch.clone());
        } else {
            delete.push(t.branch.clone());
        }
    }
    if report.result_branch.is_none() {
        delete.push(result_branch);
    }
    let removed_worktrees = if keep {
        0
    } else {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || shared.pool.remove_all())
            .await
            .unwrap_or(0)
    };
    let deleted_branches =
        tokio::task::spawn_blocking(move || finish::delete_branches(&common_dir, &delete))
            .await
            .unwrap_or(0);
    shared.sink.emit(Event::Cleanup {
        removed_worktrees,
        deleted_branches,
        kept_branches: kept,
    });
}
