//! One attempt at one task: a pooled worktree, the worker, the commit, the scope check.

use crate::git::commit::{self, CommitError};
use crate::git::finish;
use crate::git::worktree::Slot;
use crate::plan::TaskIdx;
use crate::report::Tokens;
use crate::settings::Scope;
use crate::worker::Verdict;
use crate::worker::exec::{self, ExecTask};
use crate::worker::llm::LlmShared;
use crate::worker::llm::agent::{self, AgentTask};
use crate::worker::process::{self, Exit, ProcessRequest, Program};
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
    pub(super) idx: TaskIdx,
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
    /// A conflict resolved by the model: merge this tree rather than merging the branch.
    pub(super) resolved: Option<Resolved>,
}

impl Attempt {
    /// An attempt that has not produced anything yet: `status` unless it does.
    pub(super) fn new(idx: TaskIdx, attempt: u32, start: Oid, status: TaskStatus) -> Self {
        Self {
            idx,
            attempt,
            start,
            status,
            tip: None,
            changed: Vec::new(),
            error: None,
            summary: None,
            output_tail: None,
            duration: Duration::ZERO,
            tokens: Tokens::default(),
            turns: 0,
            resolved: None,
        }
    }
}

/// The tree of a task's merge, resolved by the model on top of integration tip `on`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolved {
    pub(super) tree: Oid,
    pub(super) on: Oid,
}

/// What a worker reports, whichever kind it is.
pub(super) struct WorkerResult {
    pub(super) verdict: Verdict,
    pub(super) summary: Option<String>,
    pub(super) output_tail: Option<String>,
    pub(super) tokens: Tokens,
    pub(super) turns: u32,
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
    idx: TaskIdx,
    attempt: u32,
    start: Oid,
    context: Option<String>,
) -> Attempt {
    let started = Instant::now();
    let mut a = Attempt::new(idx, attempt, start, TaskStatus::Failed);
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
    let task = shared.plan.task(a.idx);
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
    if shared.plan.settings.worktree.setup.is_some() && !slot.set_up {
        step("setup");
    }
    let outcome = set_up(shared, &mut slot)
        .await?
        .map(|(verdict, tail)| WorkerResult::just(verdict, Some(tail)));
    let result = match outcome {
        Some(o) => o,
        None => {
            step("running");
            // On an error the lease gives the worktree back (its next task resets it).
            run_worker(shared, a.idx, &slot.path, &task_dir, context).await?
        }
    };
    let verdict = result.verdict;
    a.summary = result.summary;
    a.output_tail = result.output_tail.filter(|t| !t.is_empty());
    a.tokens = result.tokens;
    a.turns = result.turns;

    // Branches the worker made, whatever else it did.
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
    // A worktree whose link to the repository the worker changed is neither committed nor
    // used again.
    if let Err(why) = shared.pool.check_intact(&slot) {
        tokio::task::spawn_blocking(move || slot.discard()).await?;
        a.status = TaskStatus::Failed;
        a.error = Some(why);
        return Ok(());
    }

    step("committing");
    let (slot, committed) = {
        let shared = shared.clone();
        let (branch, start) = (branch.clone(), a.start);
        let message = format!(
            "swarm: {}\n\n{}\n\nSwarm-Run: {run_id}\nSwarm-Task: {}\n",
            task.id,
            shared.plan.instruction.trim(),
            task.id
        );
        tokio::task::spawn_blocking(move || {
            let committed = shared
                .pool
                .open(&slot)
                .map_err(|e| CommitError::Git(git2::Error::from_str(&format!("{e:#}"))))
                .and_then(|repo| commit::commit_task(&repo, &branch, start, &message));
            (slot, committed)
        })
        .await?
    };
    tokio::task::spawn_blocking(move || slot.release()).await??;
    let committed = match committed {
        Ok(c) => c,
        Err(e @ CommitError::RewroteBranch(tip)) => {
            // Kept for inspection, like any failed task's branch.
            a.tip = Some(tip);
            a.status = TaskStatus::Failed;
            a.error = Some(e.to_string());
            return Ok(());
        }
        Err(e @ (CommitError::Filtered(..) | CommitError::Secret(..))) => {
            a.status = TaskStatus::Failed;
            a.error = Some(e.to_string());
            return Ok(());
        }
        Err(CommitError::Git(e)) => return Err(e).context("cannot commit the worker's changes"),
    };
    a.tip = Some(committed.tip);
    a.changed = committed.changed;
    if let Some(now) = committed.moved_head {
        a.status = TaskStatus::Failed;
        a.error = Some(format!(
            "the worker moved HEAD away from its task branch (to {now}); its changes are kept \
             on the task branch"
        ));
        return Ok(());
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

/// Runs `[worktree] setup` in a worktree that has not had it yet. `Some` (the verdict and the
/// output tail) when it did not succeed.
pub(super) async fn set_up(
    shared: &Shared,
    slot: &mut Slot,
) -> anyhow::Result<Option<(Verdict, String)>> {
    let Some(setup) = shared.plan.settings.worktree.setup.as_deref() else {
        return Ok(None);
    };
    if slot.set_up {
        return Ok(None);
    }
    let log = shared.run_dir.path.join(format!("{}-setup.log", slot.name));
    let ran = process::run(ProcessRequest {
        program: Program::Shell(setup),
        cwd: &slot.path,
        env: Vec::new(),
        log: &log,
        timeout: shared.plan.settings.timeout(),
        idle_timeout: Some(shared.plan.settings.idle_timeout()),
        sandbox: Some(&shared.plan.settings.sandbox),
        also_writable: &[],
        cancel: &shared.cancel,
    })
    .await?;
    Ok(match ran.exit {
        Exit::Code(0) => {
            slot.set_up = true;
            None
        }
        Exit::Cancelled => Some((Verdict::Interrupted, String::new())),
        other => Some((
            Verdict::Failed(format!(
                "worktree setup `{setup}` failed ({other:?}); see {}",
                log.display()
            )),
            ran.output_tail,
        )),
    })
}

/// Runs the task's worker in its worktree: the `--exec` command, then `--verify` (and with
/// `--repair`, the model on a failing check); or the built-in agent (which runs `--verify`
/// itself and can react to it).
async fn run_worker(
    shared: &Arc<Shared>,
    idx: TaskIdx,
    worktree: &std::path::Path,
    task_dir: &std::path::Path,
    context: Option<&str>,
) -> anyhow::Result<WorkerResult> {
    let task = shared.plan.task(idx);
    let settings = &shared.plan.settings;
    let WorkerKind::Exec(command) = &shared.worker else {
        let llm = shared
            .model
            .as_deref()
            .context("no model for the built-in worker")?;
        return run_agent(shared, llm, idx, worktree, task_dir, &task.files, context).await;
    };
    let instruction = shared.plan.instruction_for(idx);
    let ran = exec::run(ExecTask {
        command,
        instruction: &instruction,
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
    let Some(verify) = settings.verify.as_deref() else {
        return Ok(result);
    };
    if result.verdict != Verdict::Done {
        return Ok(result);
    }
    shared.sink.emit(Event::TaskStep {
        task: task.id.clone(),
        step: "verify".into(),
    });
    let ran = process::run(ProcessRequest {
        program: Program::Shell(verify),
        cwd: worktree,
        env: Vec::new(),
        log: &task_dir.join("verify.log"),
        timeout: settings.timeout(),
        idle_timeout: Some(settings.idle_timeout()),
        sandbox: Some(&settings.sandbox),
        also_writable: &[],
        cancel: &shared.cancel,
    })
    .await?;
    result.verdict = match ran.exit {
        Exit::Code(0) => return Ok(result),
        Exit::Cancelled => Verdict::Interrupted,
        Exit::TimedOut => Verdict::Timeout("--verify timed out (--timeout)".into()),
        Exit::Idle => Verdict::Timeout("--verify was stale (--idle-timeout)".into()),
        Exit::Code(c) => Verdict::Failed(format!("--verify `{verify}` failed (exit status {c})")),
        Exit::Signal(s) => Verdict::Failed(format!("--verify `{verify}` was killed by signal {s}")),
    };
    result.output_tail = Some(ran.output_tail.clone());
    let (Verdict::Failed(_), true, Some(llm)) =
        (&result.verdict, settings.repair, shared.model.as_deref())
    else {
        return Ok(result);
    };
    // Codemod first, agent second: the model fixes what the command broke.
    shared.sink.emit(Event::TaskStep {
        task: task.id.clone(),
        step: "repair".into(),
    });
    let context = format!(
        "The command `{command}` has already made this change in the worktree (the task's \
         files are modified). The check `{verify}` now fails:\n\n{}\n\nFix what is broken, \
         keeping the command's change, then call finish; the check runs again then.",
        ran.output_tail.trim_end()
    );
    let repaired = run_agent(
        shared,
        llm,
        idx,
        worktree,
        task_dir,
        &task.files,
        Some(&context),
    )
    .await?;
    Ok(WorkerResult {
        summary: repaired.summary.or(result.summary),
        ..repaired
    })
}

/// Runs the built-in agent on task `idx` in `worktree`, allowed to write `files` (with
/// `--scope task`).
pub(super) async fn run_agent(
    shared: &Arc<Shared>,
    llm: &LlmShared,
    idx: TaskIdx,
    worktree: &std::path::Path,
    task_dir: &std::path::Path,
    files: &[RepoPath],
    context: Option<&str>,
) -> anyhow::Result<WorkerResult> {
    let task = shared.plan.task(idx);
    let settings = &shared.plan.settings;
    let instruction = shared.plan.instruction_for(idx);
    let out = agent::run(AgentTask {
        shared: llm,
        events: &shared.sink,
        instruction: &instruction,
        task_id: &task.id,
        files,
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

/// Local branches that are not swarm's.
pub(super) fn user_branches(
    common_dir: &std::path::Path,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    Ok(finish::branches_under(common_dir, "")?
        .into_iter()
        .filter(|b| !b.starts_with(crate::ids::BRANCH_NAMESPACE))
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
