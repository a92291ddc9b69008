//! One worker process for several tasks (`--per-process`).
//!
//! Starting a formatter or a codemod often costs more than its work on one file. So several
//! tasks can share one process, in one worktree: it gets all their files (`SWARM_FILES`), and
//! what it changed is committed once, then shared out. Each task gets a commit of the changes
//! to its own files, on its own branch, with the start commit as parent: it merges, and
//! `--verify-merged` blames it, on its own, exactly as if it had had a process of its own.
//!
//! A process that does not succeed for all of its tasks (it fails, times out, fails
//! `--verify`, changes a path that is no file of its tasks, commits by itself…) keeps
//! nothing, and its tasks run again in smaller processes, down to a process per task, where
//! a failure is that task's own and is reported as usual. The tasks whose files the failed
//! process's output names as a diagnostic ([`super::blame`]) run alone, the others together
//! again; when it names none, they run in two halves.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use git2::Oid;

use super::blame::{Blame, failed_output, suspects};
use super::task::{Attempt, commit_attempt, commit_message, outcome, start_attempt, work};
use super::watch::{warn_about_checkout, warn_about_new_branches};
use super::worker_run::Runner;
use super::{Shared, step, warn};
use crate::git::TreeChange;
use crate::git::commit::{self, CommitError};
use crate::ids::TaskIdx;
use crate::plan::{Plan, Task};
use crate::repo_path::RepoPath;
use crate::report::TaskStatus;
use crate::settings::{PerProcess, Settings};
use crate::worker::Verdict;
use crate::worker::file_vars::file_vars;

/// With `--per-process auto`, how many processes each job gets, at least: enough to keep the
/// jobs evenly busy to the end, and a failing process is cheap to split.
const PROCESSES_PER_JOB: usize = 2;
/// With `--per-process auto`, the most tasks of one process.
const AUTO_MOST: usize = 64;
/// The most bytes of file names one process gets in `SWARM_FILES` (Linux refuses to start a
/// program with a variable over 128 KiB).
const FILE_NAMES_MOST: usize = 64 * 1024;

/// How many tasks one worker process runs at most, in a run of `tasks` tasks. `auto`: one,
/// unless the worker is a command that names `SWARM_FILES` (so it takes a list of files) and
/// is not a coding agent (whose work, not its start-up, is what costs) nor followed by
/// `--repair` (which repairs one task at a time), and tasks get one candidate each.
pub(crate) fn tasks_per_process(settings: &Settings, tasks: usize) -> usize {
    match settings.per_process {
        PerProcess::Tasks(n) => n.max(1),
        PerProcess::Auto => {
            let takes_list = settings
                .exec
                .as_deref()
                .is_some_and(|command| file_vars(command).files.named);
            let alone =
                settings.agent.is_some() || settings.repair || settings.candidates.several();
            if !takes_list || alone {
                return 1;
            }
            tasks
                .div_ceil(settings.jobs * PROCESSES_PER_JOB)
                .clamp(1, AUTO_MOST)
        }
    }
}

/// Takes the tasks of the next process from the front of `pending`: up to `most` of them,
/// with the same instruction, whose file names fit in one variable. Empty when nothing is
/// pending.
pub(super) fn next_group(
    plan: &Plan,
    pending: &mut VecDeque<TaskIdx>,
    most: usize,
) -> Vec<TaskIdx> {
    let Some(first) = pending.pop_front() else {
        return Vec::new();
    };
    let mut group = vec![first];
    let mut names = file_names(plan.task(first));
    while group.len() < most
        && let Some(&next) = pending.front()
    {
        let task = plan.task(next);
        names += file_names(task);
        if task.instruction != plan.task(first).instruction || names > FILE_NAMES_MOST {
            break;
        }
        group.push(next);
        pending.pop_front();
    }
    group
}

fn file_names(task: &Task) -> usize {
    task.files.iter().map(|f| f.as_bytes().len() + 1).sum()
}

/// How a process over one or several tasks ended.
pub(super) enum GroupEnd {
    /// Each task's attempt.
    Attempts(Vec<Attempt>),
    /// It did not succeed for all of its tasks: they run again in smaller processes.
    Split(Split),
}

/// A process over several tasks that did not succeed.
pub(super) struct Split {
    pub(super) tasks: Vec<TaskIdx>,
    pub(super) error: String,
    pub(super) log: Option<PathBuf>,
    /// The tasks its output blamed, which run alone.
    pub(super) suspects: Vec<Blame>,
}

/// Why a process over several tasks is not shared out.
struct Unshared {
    error: String,
    log: Option<PathBuf>,
    /// The output of the process, when it failed (not when it exited well and what it did
    /// could not be shared out); the end of it.
    output: Option<String>,
}

/// Runs `tasks` (two or more, starting at the base) in one worker process, and commits each
/// task's share of what it changed on the task's branch. Never fails: a problem splits the
/// group.
pub(super) async fn run_group(shared: Arc<Shared>, tasks: Vec<TaskIdx>) -> GroupEnd {
    let started = Instant::now();
    let ran = attempt_group(&shared, &tasks).await;
    let network = shared.network.take(&shared.plan.task(tasks[0]).id);
    warn_about_checkout(&shared, &shared.plan.task(tasks[0]).id).await;
    let unshared = match ran {
        Ok(Ok(mut attempts)) => {
            for a in &mut attempts {
                a.duration = started.elapsed();
            }
            attempts[0].network = network;
            return GroupEnd::Attempts(attempts);
        }
        Ok(Err(unshared)) => unshared,
        Err(e) => Unshared {
            error: format!("{e:#}"),
            log: None,
            output: None,
        },
    };
    // Nothing of it is kept: the first task's branch goes back to the start.
    let branch = shared.plan.task(tasks[0]).branch(&shared.plan.run_id);
    if let Err(e) = reset_branch(&shared, branch).await {
        tracing::warn!("cannot reset a task branch: {e:#}");
    }
    // Reading up to a megabyte of output and looking in it for each file: off the runtime.
    let (log, tail, of) = (unshared.log.clone(), unshared.output, tasks.clone());
    let suspects = tokio::task::spawn_blocking(move || {
        tail.map_or_else(Vec::new, |tail| {
            suspects(&shared.plan, &of, &failed_output(log.as_deref(), &tail))
        })
    })
    .await
    .unwrap_or_default();
    GroupEnd::Split(Split {
        suspects,
        tasks,
        error: unshared.error,
        log: unshared.log,
    })
}

async fn attempt_group(
    shared: &Arc<Shared>,
    tasks: &[TaskIdx],
) -> anyhow::Result<Result<Vec<Attempt>, Unshared>> {
    let plan = &shared.plan;
    let first = plan.task(tasks[0]);
    let branch = first.branch(&plan.run_id);
    let files: Vec<RepoPath> = tasks
        .iter()
        .flat_map(|&idx| plan.task(idx).files.iter().cloned())
        .collect();
    let mut slot = start_attempt(shared, tasks, (1, None), shared.base, &branch).await?;
    let worktree = slot.path.clone();
    // On an error the lease gives the worktree back (its next task resets it).
    let runner = Runner::task(shared);
    let mut result = work(shared, (tasks[0], &runner), &files, &mut slot, (None, None)).await?;
    super::worker_run::finish(result.ended.jail.take()).await;
    // Only the output of a process that failed blames anyone.
    let unshared_by = |error: String, failed: bool| Unshared {
        error,
        log: result.log.clone(),
        output: failed.then(|| result.output_tail.clone().unwrap_or_default()),
    };
    let failed = |error| unshared_by(error, true);
    let unshared = |error| unshared_by(error, false);
    match &result.verdict {
        Verdict::Interrupted | Verdict::OverBudget(_) => {
            return Ok(Ok(stopped(shared, tasks, &result)));
        }
        Verdict::Failed(why) | Verdict::Timeout(why) => return Ok(Err(failed(why.clone()))),
        Verdict::Exited(_) => return Ok(Err(failed(result.verdict.describe()))),
        Verdict::Done | Verdict::NoChange => {}
    }
    warn_about_new_branches(shared, &first.id).await?;
    if let Err(why) = shared.pool.check_intact(&slot) {
        tokio::task::spawn_blocking(move || slot.discard()).await?;
        return Ok(Err(unshared(why)));
    }
    step(shared, &first.id, "committing");
    let left = (
        Default::default(),
        std::mem::take(&mut result.check_wrote),
        None,
    );
    let committed = match commit_attempt(shared, slot, &first.id, &branch, shared.base, left)
        .await?
    {
        Ok(committed) => committed,
        Err(CommitError::Git(e)) => return Err(e).context("cannot commit the worker's changes"),
        Err(e) => return Ok(Err(unshared(e.to_string()))),
    };
    let shares = match shareable(shared, tasks, committed) {
        Ok(shareable) => shareable,
        Err(why) => return Ok(Err(unshared(why))),
    };
    let tips = commit_shares(shared, tasks, &shares).await?;
    Ok(Ok(tasks
        .iter()
        .zip(shares)
        .zip(tips)
        .enumerate()
        .map(|(k, ((&idx, share), tip))| {
            let mut a = Attempt::new(idx, 1, shared.base, TaskStatus::Failed);
            a.record_changes(share);
            (a.status, a.error) = outcome(
                result.verdict.clone(),
                &a.changed,
                &plan.task(idx).files,
                shared.settings.scope,
            );
            a.tip = Some(tip);
            a.summary = result.summary.clone();
            a.worktree = Some(worktree.clone());
            a.log = result.log.clone();
            // The process's output and spend once, not once per task.
            if k == 0 {
                a.output_tail = result.output_tail.clone().filter(|t| !t.is_empty());
                a.record_spend(&result);
            }
            a
        })
        .collect()))
}

/// The attempts of a process that was interrupted, or stopped by the run's budget: its
/// spend is counted once.
fn stopped(
    shared: &Shared,
    tasks: &[TaskIdx],
    result: &super::worker_run::WorkerResult,
) -> Vec<Attempt> {
    tasks
        .iter()
        .enumerate()
        .map(|(k, &idx)| match &result.verdict {
            Verdict::OverBudget(why) => {
                let mut a = Attempt::new(idx, 1, shared.base, TaskStatus::Skipped);
                a.error = Some(why.clone());
                a.over_budget = true;
                if k == 0 {
                    a.record_spend(result);
                }
                a
            }
            _ => {
                let mut a = Attempt::new(idx, 1, shared.base, TaskStatus::Interrupted);
                a.error = Some("interrupted".into());
                a
            }
        })
        .collect()
}

/// The process's changes, as each task's share of them; `Err` says why it cannot be
/// shared out (it moved HEAD, committed by itself, or changed a file of no task).
fn shareable(
    shared: &Shared,
    tasks: &[TaskIdx],
    committed: crate::git::commit::Committed,
) -> Result<Vec<Vec<TreeChange>>, String> {
    let first = &shared.plan.task(tasks[0]).id;
    if let Some(now) = committed.moved_head {
        return Err(format!(
            "the worker moved HEAD away from its branch (to {now})"
        ));
    }
    if committed.worker_commits > 0 {
        return Err(format!(
            "the worker made {} commit(s) itself, which cannot be shared out among its tasks",
            committed.worker_commits
        ));
    }
    for path in &committed.skipped {
        warn(
            shared,
            first,
            format!("{path} could not be staged (a nested repository?); left out"),
        );
    }
    match share_out(&shared.plan, tasks, committed.changes) {
        Ok(shares) => Ok(shares),
        Err(path) => Err(format!(
            "it changed {path}, which is no file of its tasks, so that change belongs to none \
             of them"
        )),
    }
}

/// The paths of `changed` that belong to each task (by position in `tasks`); `Err` with a
/// path that belongs to none.
fn share_out(
    plan: &Plan,
    tasks: &[TaskIdx],
    changes: Vec<TreeChange>,
) -> Result<Vec<Vec<TreeChange>>, RepoPath> {
    let mut owner: HashMap<&RepoPath, usize> = HashMap::new();
    for (k, &idx) in tasks.iter().enumerate() {
        for file in &plan.task(idx).files {
            owner.entry(file).or_insert(k);
        }
    }
    let mut shares = vec![Vec::new(); tasks.len()];
    for change in changes {
        match owner.get(&change.path) {
            Some(&k) => shares[k].push(change),
            None => return Err(change.path),
        }
    }
    Ok(shares)
}

/// Commits each task's share of the process's changes on the task's branch; returns the
/// branches' tips (the base where a share is empty).
async fn commit_shares(
    shared: &Arc<Shared>,
    tasks: &[TaskIdx],
    shares: &[Vec<TreeChange>],
) -> anyhow::Result<Vec<Oid>> {
    let jobs: Vec<(String, String, Vec<TreeChange>)> = tasks
        .iter()
        .zip(shares)
        .map(|(&idx, share)| {
            let task = shared.plan.task(idx);
            (
                task.branch(&shared.plan.run_id),
                commit_message(shared, &task.id),
                share.clone(),
            )
        })
        .collect();
    let (common_dir, base) = (shared.common_dir.clone(), shared.base);
    tokio::task::spawn_blocking(move || {
        let repo = git2::Repository::open(&common_dir)?;
        jobs.iter()
            .map(|(branch, message, share)| {
                commit::commit_share(&repo, base, share, branch, message)
            })
            .collect::<Result<Vec<_>, _>>()
            .context("cannot commit a task's share of its process's changes")
    })
    .await?
}

/// Points `branch`, if it exists, back at the run's base.
async fn reset_branch(shared: &Arc<Shared>, branch: String) -> anyhow::Result<()> {
    let (common_dir, base) = (shared.common_dir.clone(), shared.base);
    tokio::task::spawn_blocking(move || {
        let repo = git2::Repository::open(&common_dir)?;
        let name = crate::git::branch_ref(&branch);
        if repo.find_reference(&name).is_ok() {
            repo.reference(
                &name,
                base,
                true,
                "swarm: a split process's branch back at its base",
            )?;
        }
        anyhow::Ok(())
    })
    .await?
}
