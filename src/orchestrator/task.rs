//! One attempt at one task: a pooled worktree, the worker, the commit, the scope check.

use crate::git::commit::{self, CommitError};
use crate::git::finish;
use crate::report::Tokens;
use crate::settings::Scope;
use crate::worker::Verdict;
use crate::worker::exec::{self, ExecTask};
use crate::worker::llm::agent::{self, AgentTask};
use crate::worker::process::{self, Exit, ProcessRequest};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use git2::Oid;

use super::{Shared, WorkerKind};
use crate::events::Event;
use crate::repo_path::RepoPath;
use crate::report::TaskStatus;

/// One attempt at one task, as a worker task returns it.
pub(super) struct Attempt {
    pub(super) idx: usize,
    pub(super) attempt: u32,
    pub(super) start: Oid,
    pub(super) status: TaskStatus,
    pub(super) tip: Option<Oid>,
    pub(super) changed: Vec<RepoPath>,
    pub(super) error: Option<String>,
    pub(super) summary: Option<String>,
    pub(super) output_tail: Option<String>,
    pub(super) duration: Duration,
    pub(super) tokens: Tokens,
    pub(super) turns: u32,
}

/// What a worker reports, whichever kind it is.
struct WorkerResult {
    verdict: Verdict,
    summary: Option<String>,
    output_tail: Option<String>,
    tokens: Tokens,
    turns: u32,
}

impl WorkerResult {
    fn just(verdict: Verdict, output_tail: Option<String>) -> Self {
        Self {
            verdict,
            summary: None,
            output_tail,
            tokens: Tokens::default(),
            turns: 0,
        }
    }
}

/// Runs one attempt of one task in a pooled worktree. Never fails: problems are the task's
/// status and error.
pub(super) async fn run_task(
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
        tokens: Tokens::default(),
        turns: 0,
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
            idle_timeout: Some(shared.plan.settings.idle_timeout()),
            sandbox: Some(&shared.plan.settings.sandbox),
            also_writable: &[],
            cancel: &shared.cancel,
        })
        .await?;
        match ran.exit {
            Exit::Code(0) => slot.set_up = true,
            Exit::Cancelled => outcome = Some(WorkerResult::just(Verdict::Interrupted, None)),
            other => {
                let why = format!(
                    "worktree setup `{setup}` failed ({other:?}); see {}",
                    log.display()
                );
                outcome = Some(WorkerResult::just(
                    Verdict::Failed(why),
                    Some(ran.output_tail),
                ));
            }
        }
    }
    let result = match outcome {
        Some(o) => o,
        None => {
            step("running");
            match run_worker(shared, a.idx, &slot.path, &task_dir, context).await {
                Ok(result) => result,
                Err(e) => {
                    // The worktree goes back to the pool even so (its next task resets it).
                    let shared = shared.clone();
                    tokio::task::spawn_blocking(move || shared.pool.release(slot)).await??;
                    return Err(e);
                }
            }
        }
    };
    let verdict = result.verdict;
    a.summary = result.summary;
    a.output_tail = result.output_tail.filter(|t| !t.is_empty());
    a.tokens = result.tokens;
    a.turns = result.turns;

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
    let created = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || new_user_branches(&shared)).await??
    };
    if !created.is_empty() {
        shared.sink.emit(Event::Warning {
            task: Some(task.id.clone()),
            message: format!(
                "the worker created branch(es) {}; swarm leaves them as they are",
                created.join(", ")
            ),
        });
    }
    for path in &committed.skipped {
        shared.sink.emit(Event::Warning {
            task: Some(task.id.clone()),
            message: format!("{path} could not be staged (a nested repository?); left out"),
        });
    }
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

/// Runs the task's worker in its worktree: the `--exec` command (then `--verify`, if any), or
/// the built-in agent (which runs `--verify` itself and can react to it).
async fn run_worker(
    shared: &Arc<Shared>,
    idx: usize,
    worktree: &std::path::Path,
    task_dir: &std::path::Path,
    context: Option<&str>,
) -> anyhow::Result<WorkerResult> {
    let task = &shared.plan.tasks[idx];
    let settings = &shared.plan.settings;
    match &shared.worker {
        WorkerKind::Exec(command) => {
            let ran = exec::run(ExecTask {
                command,
                instruction: &shared.plan.instruction,
                run_id: &shared.plan.run_id,
                task_id: &task.id,
                files: &task.files,
                worktree,
                task_dir,
                timeout: settings.timeout(),
                idle_timeout: settings.idle_timeout(),
                sandbox: &settings.sandbox,
                cancel: &shared.cancel,
                context,
            })
            .await?;
            let mut result = WorkerResult {
                verdict: ran.verdict,
                summary: ran.summary,
                output_tail: Some(ran.output_tail),
                tokens: Tokens::default(),
                turns: 0,
            };
            if result.verdict == Verdict::Done
                && let Some(verify) = settings.verify.as_deref()
            {
                shared.sink.emit(Event::TaskStep {
                    task: task.id.clone(),
                    step: "verify".into(),
                });
                let log = task_dir.join("verify.log");
                let ran = process::run(ProcessRequest {
                    command: verify,
                    cwd: worktree,
                    env: Vec::new(),
                    log: &log,
                    timeout: settings.timeout(),
                    idle_timeout: Some(settings.idle_timeout()),
                    sandbox: Some(&settings.sandbox),
                    also_writable: &[],
                    cancel: &shared.cancel,
                })
                .await?;
                result.verdict = match ran.exit {
                    Exit::Code(0) => Verdict::Done,
                    Exit::Cancelled => Verdict::Interrupted,
                    Exit::TimedOut => Verdict::Timeout("--verify timed out (--timeout)".into()),
                    Exit::Idle => Verdict::Timeout("--verify was stale (--idle-timeout)".into()),
                    Exit::Code(c) => {
                        Verdict::Failed(format!("--verify `{verify}` failed (exit status {c})"))
                    }
                    Exit::Signal(s) => {
                        Verdict::Failed(format!("--verify `{verify}` was killed by signal {s}"))
                    }
                };
                if result.verdict != Verdict::Done {
                    result.output_tail = Some(ran.output_tail);
                }
            }
            Ok(result)
        }
        WorkerKind::Llm(llm) => {
            let out = agent::run(AgentTask {
                shared: llm,
                events: &shared.sink,
                instruction: &shared.plan.instruction,
                task_id: &task.id,
                files: &task.files,
                worktree,
                task_dir,
                scope_task: settings.scope == Scope::Task,
                max_turns: settings.max_turns,
                max_tokens: settings.max_tokens,
                verify: settings.verify.as_deref(),
                timeout: settings.timeout(),
                idle_timeout: settings.idle_timeout(),
                sandbox: &settings.sandbox,
                run_tool: &settings.run_tool,
                cancel: &shared.cancel,
                context,
            })
            .await?;
            Ok(WorkerResult {
                verdict: out.verdict,
                summary: out.summary,
                output_tail: Some(out.output_tail),
                tokens: out.tokens,
                turns: out.turns,
            })
        }
    }
}

/// Local branches that are not swarm's.
pub(super) fn user_branches(
    common_dir: &std::path::Path,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    Ok(finish::branches_under(common_dir, "")?
        .into_iter()
        .filter(|b| !b.starts_with("swarm/"))
        .collect())
}

/// Branches that appeared since the last look (remembered, so each is reported once).
fn new_user_branches(shared: &Shared) -> anyhow::Result<Vec<String>> {
    let now = user_branches(&shared.common_dir)?;
    let mut known = shared
        .known_branches
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let created: Vec<String> = now.difference(&known).cloned().collect();
    known.extend(created.iter().cloned());
    Ok(created)
}
