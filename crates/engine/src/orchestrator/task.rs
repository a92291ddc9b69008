//! One attempt at one task: a pooled worktree, the worker, the commit, the scope check.

use crate::git::commit::{self, CommitError};
use crate::git::worktree::{Lease, Slot};
use crate::ids::TaskId;
use crate::ids::TaskIdx;
use crate::report::{Reported, Tokens};
use crate::settings::Scope;
use crate::worker::Verdict;
use crate::worker::diagnose;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use swarm_sandbox::git_view::GitLayer;

use anyhow::Context as _;
use git2::Oid;

use super::permits::Permit;
use super::watch::{warn_about_checkout, warn_about_new_branches};
use super::worker_run::{
    Ended, Place, Runner, WorkerResult, check_writes, finish, run_worker, set_up,
};
use super::{Shared, head_start, step, warn};
use crate::events::Event;
use crate::git::TreeChange;
use crate::ids::CandidateNo;
use crate::repo_path::RepoPath;
use crate::report::TaskStatus;
use crate::worker::llm::agent::Opening;

/// One attempt at one task, as a worker task returns it.
pub(super) struct Attempt {
    pub(super) idx: TaskIdx,
    /// Which candidate it is, with `--tries`/`--best-of`.
    pub(super) candidate: Option<CandidateNo>,
    pub(super) attempt: u32,
    pub(super) start: Oid,
    pub(super) status: TaskStatus,
    pub(super) tip: Option<Oid>,
    pub(super) changed: Vec<RepoPath>,
    /// Those of `changed` it deleted.
    pub(super) deleted: Vec<RepoPath>,
    /// `changed` with their entries at `start` and at `tip`, where swarm made the tip (the
    /// merge need not read the trees again).
    pub(super) changes: Option<Vec<TreeChange>>,
    pub(super) error: Option<String>,
    pub(super) summary: Option<String>,
    pub(super) output_tail: Option<String>,
    pub(super) duration: Duration,
    pub(super) tokens: Tokens,
    pub(super) turns: u32,
    pub(super) cost_usd: f64,
    /// Model answers metered.
    pub(super) requests: u32,
    /// What an `--agent` said of its own spend.
    pub(super) reported: Option<Reported>,
    /// Stopped, or not started, because the run's budget was spent.
    pub(super) over_budget: bool,
    /// Connections asked of the allow-list proxy.
    pub(super) network: crate::report::NetworkUse,
    /// The log of what ran last.
    pub(super) log: Option<PathBuf>,
    /// The worktree it ran in.
    pub(super) worktree: Option<PathBuf>,
    /// What the sandbox probably did, if the attempt failed.
    pub(super) hint: Option<String>,
    /// A conflict resolved by the model: merge this tree rather than merging the branch.
    pub(super) resolved: Option<Resolved>,
}

impl Attempt {
    /// An attempt that has not produced anything yet: `status` unless it does.
    pub(super) fn new(idx: TaskIdx, attempt: u32, start: Oid, status: TaskStatus) -> Self {
        Self {
            idx,
            candidate: None,
            attempt,
            start,
            status,
            tip: None,
            changed: Vec::new(),
            deleted: Vec::new(),
            changes: None,
            error: None,
            summary: None,
            output_tail: None,
            duration: Duration::ZERO,
            tokens: Tokens::default(),
            turns: 0,
            cost_usd: 0.0,
            requests: 0,
            reported: None,
            over_budget: false,
            network: Default::default(),
            log: None,
            worktree: None,
            hint: None,
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

/// Runs one attempt of one task in a pooled worktree, its worker holding `permit` (given
/// back before the commit in an overlay worktree). Never fails: problems are the task's
/// status and error.
pub(super) async fn run_task(
    shared: Arc<Shared>,
    idx: TaskIdx,
    (attempt, runner): (u32, Runner),
    start: Oid,
    context: Option<String>,
    permit: Permit,
) -> Attempt {
    let started = Instant::now();
    let mut a = Attempt::new(idx, attempt, start, TaskStatus::Failed);
    a.candidate = runner.candidate;
    if let Err(e) = attempt_task(&shared, &mut a, (context.as_deref(), &runner), permit).await {
        a.status = TaskStatus::Failed;
        a.error = Some(format!("{e:#}"));
    }
    a.duration = started.elapsed();
    a.network = shared.network.take(&shared.plan.task(idx).id);
    warn_about_checkout(&shared, &shared.plan.task(idx).id).await;
    if !matches!(a.status, TaskStatus::Done | TaskStatus::NoChange) {
        a.hint = a.hint.take().or_else(|| {
            diagnose::hint(
                a.output_tail.as_deref().unwrap_or(""),
                &a.network,
                &shared.settings.sandbox,
                a.worktree.as_deref(),
                &shared.common_dir,
            )
        });
    }
    a
}

async fn attempt_task(
    shared: &Arc<Shared>,
    a: &mut Attempt,
    (context, runner): (Option<&str>, &Runner),
    permit: Permit,
) -> anyhow::Result<()> {
    let task = shared.plan.task(a.idx);
    let branch = runner.branch(shared, &task.id);
    // The built-in worker's turn 1 is asked while its worktree is being made.
    let tasks = [a.idx];
    let (slot, opening) = tokio::join!(
        start_attempt(shared, &tasks, (a.attempt, a.candidate), a.start, &branch),
        head_start::open(shared, a.idx, runner, a.start, context),
    );
    let opening = opening?;
    let mut slot = match slot {
        Ok(slot) => slot,
        Err(e) => {
            // What turn 1 spent is the task's all the same.
            if let Some(opening) = &opening {
                a.record_opening(opening);
            }
            return Err(e);
        }
    };
    a.worktree = Some(slot.path.clone());
    // On an error the lease gives the worktree back (its next task resets it).
    let ask = (context, opening);
    let mut result = work(shared, (a.idx, runner), &task.files, &mut slot, ask).await?;
    let _held = hold_while_committing(shared, &slot, permit);
    // Declared after `slot`, so dropped before it on an early return.
    let mut ended = std::mem::take(&mut result.ended);
    a.record_spend(&result);
    let verdict = result.verdict;
    a.summary = result.summary;
    a.output_tail = result.output_tail.filter(|t| !t.is_empty());
    a.log = result.log;

    warn_about_new_branches(shared, &task.id).await?;
    // A worktree whose link to the repository the worker changed is neither committed nor
    // used again.
    if let Err(why) = shared.pool.check_intact(&slot) {
        finish(ended.jail.take()).await;
        tokio::task::spawn_blocking(move || slot.discard()).await?;
        a.status = TaskStatus::Failed;
        a.error = Some(why);
        return Ok(());
    }
    // The common case: the worker's git wrote nothing, and its layer waits for the jail's end.
    let mut moved_head = None;
    if let Some(layer) = ended.git.take_if(|layer| !layer.untouched()) {
        finish(ended.jail.take()).await;
        match adopt_git(shared, &task.id, layer, &branch, a.start).await? {
            Ok(moved) => moved_head = moved,
            Err(why) => {
                tokio::task::spawn_blocking(move || slot.release()).await??;
                a.status = TaskStatus::Failed;
                a.error = Some(why);
                return Ok(());
            }
        }
    }
    step(shared, &task.id, "committing");
    // Only the built-in worker's tools wrote in the worktree: what they wrote is all its commit
    // stages, unless the worktree was given more (a setup's output, files copied in).
    let worktree = &shared.settings.worktree;
    let written = (worktree.setup.is_none() && worktree.copy.is_empty())
        .then(|| result.written.take())
        .flatten();
    let left = (ended, std::mem::take(&mut result.check_wrote), written);
    let committed = match commit_attempt(shared, slot, &task.id, &branch, a.start, left).await? {
        // HEAD moved in the worker's view of git: its work is committed on the task branch
        // all the same, and the task fails, as with the sandbox off.
        Ok(c) => crate::git::commit::Committed {
            moved_head: c.moved_head.or(moved_head),
            ..c
        },
        Err(CommitError::Git(e)) => return Err(e).context("cannot commit the worker's changes"),
        Err(e) => {
            if let CommitError::RewroteBranch(tip) = e {
                // Kept for inspection, like any failed task's branch.
                a.tip = Some(tip);
            }
            a.status = TaskStatus::Failed;
            a.error = Some(e.to_string());
            return Ok(());
        }
    };
    record_commit(shared, a, &task.id, committed, verdict);
    Ok(())
}

/// What the task's commit says of the attempt: its tip and changes, its status, what to
/// warn about, and the hint for a codemod that exits non-zero after doing its job.
fn record_commit(
    shared: &Shared,
    a: &mut Attempt,
    task: &TaskId,
    committed: crate::git::commit::Committed,
    verdict: Verdict,
) {
    let files = &shared.plan.task(a.idx).files;
    a.tip = Some(committed.tip);
    a.record_changes(committed.changes);
    if let Some(now) = committed.moved_head {
        a.status = TaskStatus::Failed;
        a.error = Some(format!(
            "the worker moved HEAD away from its task branch (to {now}); its changes are kept \
             on the task branch"
        ));
        return;
    }
    for path in &committed.skipped {
        warn(
            shared,
            task,
            format!("{path} could not be staged (a nested repository?); left out"),
        );
    }
    if committed.worker_commits > 0 {
        warn(
            shared,
            task,
            format!(
                "the worker made {} commit(s) itself; they are kept on the task branch",
                committed.worker_commits
            ),
        );
    }
    a.over_budget = matches!(verdict, Verdict::OverBudget(_));
    if let Verdict::Exited(code) = verdict
        && crate::report::groups::DONE_STATUSES.contains(&code)
        && !a.changed.is_empty()
    {
        a.hint = Some(format!(
            "the worker changed {} file(s) and exited with status {code}: some codemods exit \
             {code} when they did their job (pyupgrade when it rewrites a file, `ruff check \
             --fix` when findings are left); if this one does, pass --ok-exit-codes 0,{code} \
             (docs/WORKERS.md lists common ones)",
            a.changed.len()
        ));
    }
    (a.status, a.error) = outcome(verdict, &a.changed, files, shared.settings.scope);
}

impl Attempt {
    /// What the attempt's commit changed: its paths, those it deleted, and the changes
    /// themselves for the merge.
    pub(super) fn record_changes(&mut self, changes: Vec<TreeChange>) {
        self.changed = crate::git::paths(&changes);
        self.deleted = crate::git::deleted(&changes);
        self.changes = Some(changes);
    }

    /// What the worker spent, and what it said it spent.
    pub(super) fn record_spend(&mut self, result: &WorkerResult) {
        self.cost_usd = result.cost_usd;
        self.tokens = result.tokens;
        self.turns = result.turns;
        self.requests = result.requests;
        self.reported = result.reported.clone();
    }

    /// Records what a turn 1 asked ahead spent, for an attempt that ends before its worker.
    pub(super) fn record_opening(&mut self, opening: &Opening) {
        (self.tokens, self.cost_usd, self.requests, self.turns) = opening.spent();
    }
}

/// A worktree for an attempt at `tasks` (several: one process for them all), with `branch`
/// at its start commit; says so in events.
pub(super) async fn start_attempt(
    shared: &Arc<Shared>,
    tasks: &[TaskIdx],
    (attempt, candidate): (u32, Option<CandidateNo>),
    start: Oid,
    branch: &str,
) -> anyhow::Result<Lease> {
    // Views show the run's base; a retry starts elsewhere, in a full checkout.
    let view = shared.layout.views && start == shared.base;
    // A full checkout takes a place among them, and one of the few git works at a time.
    let (place, _one_of_few) = match view {
        true => (None, None),
        false => (
            Some(shared.full_checkouts.clone().acquire_owned().await?),
            Some(shared.git_work.acquire().await?),
        ),
    };
    let slot = {
        let shared = shared.clone();
        let branch = branch.to_string();
        tokio::task::spawn_blocking(move || match view {
            true => shared.pool.acquire_view(&branch, start),
            false => shared.pool.acquire(&branch, start),
        })
        .await??
        .holding(place)
    };
    if slot.fresh {
        shared.sink.emit(Event::WorktreeCreated {
            worktree: slot.path.display().to_string(),
        });
    }
    let worktree = slot.path.display().to_string();
    if tasks.len() > 1 {
        shared.sink.emit(Event::GroupStarted {
            tasks: tasks
                .iter()
                .map(|&i| shared.plan.task(i).id.clone())
                .collect(),
            worktree: worktree.clone(),
        });
    }
    for &idx in tasks {
        let task = shared.plan.task(idx);
        shared.sink.emit(Event::TaskStarted {
            task: task.id.clone(),
            files: task.files.clone(),
            attempt,
            worktree: worktree.clone(),
            candidate: candidate.map(CandidateNo::get),
        });
    }
    Ok(slot)
}

/// `[worktree] setup` if the worktree needs it, then the worker, on `files` (task `idx`'s, or
/// with `--per-process` those of every task its process runs).
pub(super) async fn work(
    shared: &Arc<Shared>,
    (idx, runner): (TaskIdx, &Runner),
    files: &[RepoPath],
    slot: &mut Slot,
    ask: (Option<&str>, Option<Opening>),
) -> anyhow::Result<WorkerResult> {
    let task = shared.plan.task(idx);
    let task_dir = runner.dir(shared, &task.id);
    std::fs::create_dir_all(&task_dir)?;
    if shared.settings.worktree.setup.is_some() && !slot.set_up {
        step(shared, &task.id, "setup");
    }
    if let Some((verdict, tail)) = set_up(shared, Some(&task.id), slot, &runner.cancel).await? {
        return Ok(WorkerResult::just(verdict, Some(tail)));
    }
    step(shared, &task.id, "running");
    let git = shared.layout.git_views.then(|| shared.pool.git_dirs(slot));
    let checks = check_writes(shared, slot);
    let place = Place {
        runner,
        worktree: &slot.path,
        view: slot.view.as_ref(),
        git: git.as_ref(),
        checks: checks.as_ref(),
    };
    let mut result = run_worker(shared, idx, files, place, &task_dir, ask).await?;
    result.check_wrote = checks.map(|c| c.take()).unwrap_or_default();
    Ok(result)
}

/// `permit`, if the commit in `slot` must hold it. The next worker starts while this one
/// commits if it can use that time: in another worktree, if one costs little to make (an
/// overlay worktree, with no `[worktree] setup` to run in it; a full checkout is a copy of
/// the repository, and a setup may install a project's dependencies); or a built-in worker,
/// which asks its turn 1 while its worktree waits for this one (full checkouts are never more
/// than `--jobs`).
fn hold_while_committing(shared: &Shared, slot: &Slot, permit: Permit) -> Option<Permit> {
    let cheap = slot.view.is_some() && shared.settings.worktree.setup.is_none();
    match cheap || matches!(shared.worker, super::WorkerKind::Llm) {
        true => {
            permit.give_back();
            None
        }
        false => Some(permit),
    }
}

/// Keeps the commits the worker made with its own git on its task branch (and says which other
/// refs it made, which are not kept); where it moved HEAD, if it did; `Err` when its commits
/// cannot be kept.
async fn adopt_git(
    shared: &Arc<Shared>,
    task: &TaskId,
    layer: GitLayer,
    branch: &str,
    start: Oid,
) -> anyhow::Result<Result<Option<String>, String>> {
    // The common case: the worker's git wrote nothing (no repository to open for it).
    if layer.untouched() {
        return Ok(Ok(None));
    }
    let (common, branch) = (shared.common_dir.clone(), branch.to_string());
    let adopted = tokio::task::spawn_blocking(move || {
        let repo = git2::Repository::open(&common)?;
        let layers = crate::git::adopt::Layers {
            objects: &layer.objects,
            refs: &layer.refs,
            admin: &layer.admin,
        };
        anyhow::Ok(crate::git::adopt::adopt(&repo, &layers, &branch, start))
    })
    .await??;
    match adopted {
        Ok(adopted) => {
            if !adopted.other_refs.is_empty() {
                warn(
                    shared,
                    task,
                    format!(
                        "the worker's own git made {}; only its task branch is kept",
                        adopted.other_refs.join(", ")
                    ),
                );
            }
            Ok(Ok(adopted.moved_head))
        }
        Err(e @ crate::git::adopt::NotAdopted::Git(_)) => {
            Err(e).context("cannot keep the worker's own commits")
        }
        Err(e) => Ok(Err(e.to_string())),
    }
}

pub(super) async fn commit_attempt(
    shared: &Arc<Shared>,
    slot: Lease,
    task: &TaskId,
    branch: &str,
    start: Oid,
    (ended, leave_out, written): (Ended, BTreeSet<RepoPath>, Option<Vec<RepoPath>>),
) -> anyhow::Result<Result<commit::Committed, CommitError>> {
    let message = commit_message(shared, task);
    let _one_of_few = match slot.view {
        Some(_) => None,
        None => Some(shared.git_work.acquire().await?),
    };
    let shared = shared.clone();
    let branch = branch.to_string();
    // One trip to a blocking thread for both: the next task waits for the worktree. What the
    // worker left is final (all its processes are gone), so the commit need not wait for its
    // jail to unmount; the worktree is given back only after.
    let (committed, released) = tokio::task::spawn_blocking(move || {
        let staged = commit::Staged {
            leave_out: &leave_out,
            written: written.as_deref(),
        };
        let committed = shared.pool.commit(&slot, &branch, start, &message, staged);
        drop(ended);
        (committed, slot.release())
    })
    .await?;
    released?;
    Ok(committed)
}

/// The message of task `task`'s commit.
pub(super) fn commit_message(shared: &Shared, task: &TaskId) -> String {
    format!(
        "swarm: {task}\n\n{}\n\nSwarm-Run: {}\nSwarm-Task: {task}\n",
        shared.plan.instruction.trim(),
        shared.plan.run_id,
    )
}

/// The attempt's status and error, from the worker's verdict and what it changed.
pub(super) fn outcome(
    verdict: Verdict,
    changed: &[RepoPath],
    files: &[RepoPath],
    scope: Scope,
) -> (TaskStatus, Option<String>) {
    match verdict {
        Verdict::Interrupted => (TaskStatus::Interrupted, Some("interrupted".into())),
        // Not merged; `swarm resume` runs it again (with a larger budget).
        Verdict::OverBudget(why) => (TaskStatus::Skipped, Some(why)),
        Verdict::Timeout(why) => (TaskStatus::Timeout, Some(why)),
        Verdict::Failed(why) => (TaskStatus::Failed, Some(why)),
        exited @ Verdict::Exited(_) => (TaskStatus::Failed, Some(exited.describe())),
        Verdict::Done | Verdict::NoChange if changed.is_empty() => (TaskStatus::NoChange, None),
        Verdict::Done | Verdict::NoChange => {
            let outside: Vec<String> = changed
                .iter()
                .filter(|p| !files.contains(p))
                .map(|p| p.display())
                .collect();
            if scope == Scope::Task && !outside.is_empty() {
                let why = crate::report::groups::out_of_scope(&outside);
                (TaskStatus::Failed, Some(why))
            } else {
                (TaskStatus::Done, None)
            }
        }
    }
}
