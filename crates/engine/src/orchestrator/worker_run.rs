//! Running a task's worker in its worktree: `[worktree] setup` once per worktree, the
//! `--exec` command (its `--verify`, and with `--repair` the model on a failing check), or
//! the built-in agent; what each ran and spent as a [`WorkerResult`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use super::{Shared, WorkerKind, step, warn};
use crate::git::worktree::Slot;
use crate::ids::{CandidateNo, TaskId, TaskIdx};
use crate::repo_path::RepoPath;
use crate::report::{Reported, Tokens};
use crate::settings::Scope;
use crate::worker::Verdict;
use crate::worker::check_writes::CheckWrites;
use crate::worker::exec::{self, AgentRun, ExecTask};
use crate::worker::llm::agent::{self, Head, Opening};
use crate::worker::llm::tools::Workspace;
use crate::worker::llm::{AgentTask, Caller, LlmShared};
use crate::worker::own::SetUp;
use crate::worker::process::{self, Exit, JailEnd};
use swarm_sandbox::git_view::GitDirs;
use swarm_sandbox::git_view::GitLayer;
use swarm_sandbox::overlay::OverlayView;
use tokio_util::sync::CancellationToken;

/// What a worker reports, whichever kind it is.
pub(super) struct WorkerResult {
    pub(super) verdict: Verdict,
    pub(super) summary: Option<String>,
    pub(super) output_tail: Option<String>,
    /// The log `output_tail` is the end of.
    pub(super) log: Option<PathBuf>,
    /// What its model answers cost (metered).
    pub(super) cost_usd: f64,
    pub(super) tokens: Tokens,
    pub(super) turns: u32,
    /// Model answers metered.
    pub(super) requests: u32,
    /// What an `--agent` said of its own spend.
    pub(super) reported: Option<Reported>,
    /// What the worker's process left: its jail, its git's writes.
    pub(super) ended: Ended,
    /// Paths `--verify` alone wrote (its caches, its build output): not the task's change.
    pub(super) check_wrote: BTreeSet<RepoPath>,
    /// The built-in worker's: every path its tools wrote, when nothing else wrote in the
    /// worktree (`worker/llm/written.rs`); its commit stages those instead of walking the
    /// worktree's status.
    pub(super) written: Option<Vec<RepoPath>>,
}

/// What a worker's process left that must go before its worktree is given back. Fields drop
/// in order: the jail is finished (blocking) before the git layer is let go.
#[derive(Default)]
pub(super) struct Ended {
    /// The jail of an `--exec` command, maybe still unmounting: finished before the
    /// worktree's view, or `git`, is used again.
    pub(super) jail: Option<JailEnd>,
    /// What the worker's own git wrote, in its views (commits to adopt).
    pub(super) git: Option<GitLayer>,
}

impl WorkerResult {
    pub(super) fn just(verdict: Verdict, output_tail: Option<String>) -> Self {
        Self {
            verdict,
            summary: None,
            output_tail,
            log: None,
            cost_usd: 0.0,
            tokens: Tokens::default(),
            turns: 0,
            requests: 0,
            reported: None,
            ended: Ended::default(),
            check_wrote: BTreeSet::new(),
            written: None,
        }
    }
}

/// Waits for a worker's jail to be gone, if it is not yet.
pub(super) async fn finish(jail: Option<JailEnd>) {
    if let Some(jail) = jail {
        jail.finish().await;
    }
}

/// Runs `[worktree] setup` in a worktree that has not had it yet. `Some` (the verdict and the
/// output tail) when it did not succeed.
pub(super) async fn set_up(
    shared: &Shared,
    task: Option<&TaskId>,
    slot: &mut Slot,
    cancel: &CancellationToken,
) -> anyhow::Result<Option<(Verdict, String)>> {
    // No setup, or done: nothing made for it on the task's path.
    if slot.set_up || shared.settings.worktree.setup.is_none() {
        return Ok(None);
    }
    let log = shared.run_dir.path.join(format!("{}-setup.log", slot.name));
    let on_access = Some(shared.on_access(task));
    let own = shared.own_commands_until(cancel);
    Ok(
        match own
            .set_up(&slot.path, slot.view.as_ref(), &log, on_access)
            .await?
        {
            SetUp::Ready => {
                slot.set_up = true;
                None
            }
            SetUp::Stopped(Exit::OverBudget) => Some((
                Verdict::OverBudget("stopped: the run's budget is spent".into()),
                String::new(),
            )),
            SetUp::Stopped(_) => Some((Verdict::Interrupted, String::new())),
            SetUp::Failed { why, tail } => Some((Verdict::Failed(why), tail)),
        },
    )
}

/// Where a worker runs: its worktree, the overlay view mounted there, the repository
/// directories its own git writes (through views); and who it is: the task's worker or one
/// of its candidates, stopped by `cancel`.
#[derive(Clone, Copy)]
pub(super) struct Place<'a> {
    pub(super) runner: &'a Runner,
    pub(super) worktree: &'a std::path::Path,
    pub(super) view: Option<&'a OverlayView>,
    pub(super) git: Option<&'a GitDirs>,
    /// With `--verify`: notes what the check alone writes, which is not the task's change.
    pub(super) checks: Option<&'a CheckWrites>,
}

/// Which of a task's workers an attempt runs: the task's own, or candidate K
/// (`--tries`, `--best-of`), and what stops it (the run's cancellation, or a candidate's own
/// under it, for a candidate that can no longer win).
#[derive(Clone)]
pub(super) struct Runner {
    pub(super) candidate: Option<CandidateNo>,
    pub(super) cancel: CancellationToken,
}

impl Runner {
    /// The task's own worker.
    pub(super) fn task(shared: &Shared) -> Self {
        Self {
            candidate: None,
            cancel: shared.cancel.clone(),
        }
    }

    /// Candidate `k` of a task, stopped with the run or on its own.
    pub(super) fn candidate(shared: &Shared, k: CandidateNo) -> Self {
        Self {
            candidate: Some(k),
            cancel: shared.cancel.child_token(),
        }
    }

    /// The branch its commits go to.
    pub(super) fn branch(&self, shared: &Shared, task: &TaskId) -> String {
        shared.plan.run_id.worker_branch(task, self.candidate)
    }

    /// Its directory in the run directory: the task's, or a candidate's inside it.
    pub(super) fn dir(&self, shared: &Shared, task: &TaskId) -> PathBuf {
        match self.candidate {
            None => shared.run_dir.task_dir(task),
            Some(k) => shared.run_dir.candidate_dir(task, k),
        }
    }
}

/// With `--verify`: what notes the paths a check alone writes in `slot`.
pub(super) fn check_writes(shared: &Shared, slot: &Slot) -> Option<CheckWrites> {
    let verify = shared.settings.verify.is_some();
    verify.then(|| CheckWrites::new(shared.pool.listing(slot)))
}

/// Runs the task's worker in its worktree: the `--exec` command, then `--verify` (and with
/// `--repair`, the model on a failing check); or the built-in agent (which runs `--verify`
/// itself and can react to it).
pub(super) async fn run_worker(
    shared: &Arc<Shared>,
    idx: TaskIdx,
    files: &[RepoPath],
    place: Place<'_>,
    task_dir: &std::path::Path,
    (context, opening): (Option<&str>, Option<Opening>),
) -> anyhow::Result<WorkerResult> {
    let task = shared.plan.task(idx);
    let WorkerKind::Exec(command) = &shared.worker else {
        let llm = shared
            .model_of(place.runner.candidate)
            .context("no model for the built-in worker")?;
        let ask = (task.files.as_slice(), context);
        return run_agent(shared, &llm, idx, place, task_dir, ask, opening).await;
    };
    // A candidate of `--agent a,b` runs its own agent's command.
    let agent = shared.settings.rotation.agent(place.runner.candidate);
    let command = agent.map_or(command.as_str(), |a| a.exec.as_str());
    let result = run_exec(shared, idx, command, files, place, task_dir, context).await?;
    let Some(verify) = shared.settings.verify.as_deref() else {
        return Ok(result);
    };
    if result.verdict != Verdict::Done {
        return Ok(result);
    }
    let checks = (command, verify, files);
    verify_then_repair(shared, idx, checks, place, task_dir, result).await
}

/// Runs the `--exec` command for the task.
async fn run_exec(
    shared: &Arc<Shared>,
    idx: TaskIdx,
    command: &str,
    files: &[RepoPath],
    place: Place<'_>,
    task_dir: &std::path::Path,
    context: Option<&str>,
) -> anyhow::Result<WorkerResult> {
    let task = shared.plan.task(idx);
    let settings = &shared.settings;
    let instruction = shared.plan.instruction_for(idx);
    let agent = settings.rotation.agent(place.runner.candidate);
    // The gateway's APIs this agent speaks: another agent's are not its to reach.
    let bindings: Vec<crate::gateway::Binding> = match agent {
        Some(agent) => shared
            .agent_bindings
            .iter()
            .filter(|b| agent.routes.iter().any(|r| r.name == b.route.name))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    let ran = exec::run(ExecTask {
        command,
        instruction: &instruction,
        run_id: &shared.plan.run_id,
        task_id: &task.id,
        candidate: place.runner.candidate,
        files,
        worktree: place.worktree,
        view: place.view,
        task_dir,
        timeout: settings.timeout(),
        idle_timeout: settings.idle_timeout(),
        sandbox: &settings.sandbox,
        on_access: Some(shared.on_access(Some(&task.id))),
        agent: agent.map(|agent| AgentRun {
            settings: agent,
            gateway: shared.gateway.as_ref().map(|g| (g, bindings.as_slice())),
        }),
        cancel: &place.runner.cancel,
        meter: &shared.meter,
        context,
        ok_exit_codes: &settings.ok_exit_codes,
        git: place.git,
    })
    .await?;
    if ran.leftovers > 0 {
        warn(
            shared,
            &task.id,
            format!(
                "the worker left {} process(es) running when it exited; they were stopped \
                 with it",
                ran.leftovers
            ),
        );
    }
    let usage = ran.usage.unwrap_or_default();
    let spent = ran.spent.unwrap_or_default();
    Ok(WorkerResult {
        verdict: ran.verdict,
        summary: ran.summary,
        output_tail: Some(ran.output_tail),
        log: Some(exec::log_path(task_dir)),
        tokens: spent.tokens,
        turns: Reported::plausible(Tokens::default(), None, usage.turns)
            .and_then(|r| r.turns)
            .unwrap_or(0),
        cost_usd: spent.cost_usd,
        requests: spent.requests,
        reported: Reported::plausible(usage.tokens, usage.cost_usd, usage.turns),
        ended: Ended {
            jail: Some(ran.jail),
            git: ran.git,
        },
        check_wrote: Default::default(),
        written: None,
    })
}

/// `--verify` after the command that finished `result`; with `--repair`, a failing check
/// hands the worktree to the model.
async fn verify_then_repair(
    shared: &Arc<Shared>,
    idx: TaskIdx,
    (command, verify, files): (&str, &str, &[RepoPath]),
    place: Place<'_>,
    task_dir: &std::path::Path,
    mut result: WorkerResult,
) -> anyhow::Result<WorkerResult> {
    let task = shared.plan.task(idx);
    // The check's jail mounts the same view: the command's must be gone first.
    finish(result.ended.jail.take()).await;
    let check = verify_exec(shared, (&task.id, files), verify, place, task_dir);
    let Some((verdict, tail)) = CheckWrites::maybe_around(place.checks, check).await? else {
        return Ok(result);
    };
    result.verdict = verdict;
    result.output_tail = Some(tail.clone());
    result.log = Some(task_dir.join("verify.log"));
    let (Verdict::Failed(_), true, Some(llm)) = (
        &result.verdict,
        shared.settings.repair,
        shared.model_of(place.runner.candidate),
    ) else {
        return Ok(result);
    };
    // Codemod first, agent second: the model fixes what the command broke.
    step(shared, &task.id, "repair");
    let context = format!(
        "The command `{command}` has already made this change in the worktree (the task's \
         files are modified). The check `{verify}` now fails:\n\n{}\n\nFix what is broken, \
         keeping the command's change, then call finish; the check runs again then.",
        tail.trim_end()
    );
    let ask = (task.files.as_slice(), Some(context.as_str()));
    let repaired = run_agent(shared, &llm, idx, place, task_dir, ask, None).await?;
    Ok(WorkerResult {
        summary: repaired.summary.or(result.summary),
        ended: result.ended,
        // The command wrote in the worktree before the model.
        written: None,
        ..repaired
    })
}

/// Runs `--verify` after an `--exec` worker, with the variables of the task's `files` (of
/// its process's tasks): `None` when it passes, else the verdict and the check's output tail.
async fn verify_exec(
    shared: &Shared,
    (task, files): (&TaskId, &[RepoPath]),
    verify: &str,
    place: Place<'_>,
    task_dir: &std::path::Path,
) -> anyhow::Result<Option<(Verdict, String)>> {
    step(shared, task, "verify");
    let log = task_dir.join("verify.log");
    let on_access = Some(shared.on_access(Some(task)));
    let mut check = shared.own_commands_until(&place.runner.cancel).request(
        verify,
        place.worktree,
        place.view,
        &log,
        on_access,
    );
    check.env = exec::check_env(files, &shared.plan.run_id, task);
    let ran = process::run(check).await?;
    let verdict = match ran.exit {
        Exit::Code(0) => return Ok(None),
        Exit::Cancelled => Verdict::Interrupted,
        Exit::OverBudget => Verdict::OverBudget("stopped: the run's budget is spent".into()),
        Exit::TimedOut => Verdict::Timeout("--verify timed out (--timeout)".into()),
        Exit::Idle => Verdict::Timeout("--verify was stale (--idle-timeout)".into()),
        Exit::Code(c) => Verdict::Failed(format!("--verify `{verify}` failed (exit status {c})")),
        Exit::Signal(s) => Verdict::Failed(format!("--verify `{verify}` was killed by signal {s}")),
    };
    Ok(Some((verdict, ran.output_tail)))
}

/// Runs the built-in agent on task `idx` in `place`'s worktree, allowed to write `files`
/// (with `--scope task`), from its turn 1 if already asked.
pub(super) async fn run_agent(
    shared: &Arc<Shared>,
    llm: &LlmShared,
    idx: TaskIdx,
    place: Place<'_>,
    task_dir: &std::path::Path,
    (files, context): (&[RepoPath], Option<&str>),
    opening: Option<Opening>,
) -> anyhow::Result<WorkerResult> {
    let task = shared.plan.task(idx);
    let settings = &shared.settings;
    let opening = match opening {
        Some(opening) => opening,
        None => {
            let notes = Workspace::new(place.worktree, None)?.read_text("AGENTS.md");
            let ask = (files, context);
            let head = (place.runner, task_dir, notes.as_deref());
            open_agent(shared, llm, idx, ask, head).await?
        }
    };
    let out = agent::run(
        AgentTask {
            caller: Caller {
                shared: llm,
                events: &shared.sink,
                run_id: &shared.plan.run_id,
                task_id: &task.id,
            },
            files,
            worktree: place.worktree,
            task_dir,
            scope_task: settings.scope == Scope::Task,
            max_turns: settings.max_turns,
            verify: settings.verify.as_deref(),
            checks: place.checks,
            timeout: settings.timeout(),
            idle_timeout: settings.idle_timeout(),
            sandbox: &settings.sandbox,
            on_access: Some(shared.on_access(Some(&task.id))),
            run_tool: &settings.run_tool,
            cancel: &place.runner.cancel,
        },
        opening,
    )
    .await?;
    Ok(WorkerResult {
        verdict: out.verdict,
        summary: out.summary,
        output_tail: Some(out.output_tail),
        log: Some(task_dir.join("transcript.jsonl")),
        cost_usd: out.cost_usd,
        tokens: out.tokens,
        turns: out.turns,
        requests: out.requests,
        reported: None,
        ended: Ended::default(),
        check_wrote: Default::default(),
        written: out.written,
    })
}

/// Asks turn 1 of task `idx`'s built-in agent (on `files`, with `context`) for `runner`, its
/// transcript in `task_dir`, `agents_md` in its first message; needs no worktree.
pub(super) async fn open_agent(
    shared: &Arc<Shared>,
    llm: &LlmShared,
    idx: TaskIdx,
    (files, context): (&[RepoPath], Option<&str>),
    (runner, task_dir, agents_md): (&Runner, &std::path::Path, Option<&str>),
) -> anyhow::Result<Opening> {
    let task = shared.plan.task(idx);
    let settings = &shared.settings;
    let instruction = shared.plan.instruction_for(idx);
    agent::open(&Head {
        caller: Caller {
            shared: llm,
            events: &shared.sink,
            run_id: &shared.plan.run_id,
            task_id: &task.id,
        },
        instruction: &instruction,
        files,
        context,
        agents_md,
        scope_task: settings.scope == Scope::Task,
        run_tool: settings.run_tool.enabled(),
        task_dir,
        max_turns: settings.max_turns,
        timeout: settings.timeout(),
        cancel: &runner.cancel,
    })
    .await
}
