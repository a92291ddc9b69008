//! `--on-conflict repair`: the model resolves a task's conflicted merge.
//!
//! After the first wave, one at a time, a pooled worktree at the integration tip gets the
//! conflicted merge written in (diff3 markers, by libgit2, from a confined thread); the
//! built-in agent edits it; `--verify` runs on its `finish`; what it leaves (no marker left)
//! becomes the tree of the task's `--no-ff` merge commit.

use crate::ids::TaskId;
use crate::ids::TaskIdx;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use git2::Oid;

use super::Shared;
use super::step;
use super::task::{Attempt, Resolved};
use super::worker_run::{Place, check_writes, run_agent, set_up};
use crate::events::Event;
use crate::git::worktree::{self, Slot};
use crate::git::{commit, merge};
use crate::repo_path::RepoPath;
use crate::report::TaskStatus;
use crate::worker::Verdict;
use crate::worker::llm::LlmShared;

/// What a conflict repair starts from.
pub(super) struct ConflictRepair {
    pub(super) idx: TaskIdx,
    /// The integration tip the task's merge conflicted with.
    pub(super) tip: Oid,
    /// The task's own start and tip (its branch is not changed).
    pub(super) task_start: Oid,
    pub(super) task_tip: Oid,
    pub(super) attempt: u32,
    pub(super) changed: Vec<RepoPath>,
}

/// `--on-conflict repair`: the model resolves the task's conflicted merge in a worktree at
/// the integration tip; the result (after `--verify`) is the tree of the task's merge commit.
pub(super) async fn repair_conflict(shared: Arc<Shared>, r: ConflictRepair) -> Attempt {
    let started = Instant::now();
    let mut a = Attempt {
        tip: Some(r.task_tip),
        changed: r.changed.clone(),
        ..Attempt::new(r.idx, r.attempt, r.task_start, TaskStatus::Conflict)
    };
    if let Err(e) = attempt_repair(&shared, &r, &mut a).await {
        a.status = TaskStatus::Conflict;
        a.error = Some(format!("merge conflict; repairing it failed: {e:#}"));
    }
    a.duration = started.elapsed();
    a
}

async fn attempt_repair(
    shared: &Arc<Shared>,
    r: &ConflictRepair,
    a: &mut Attempt,
) -> anyhow::Result<()> {
    let task = shared.plan.task(r.idx);
    let llm = shared
        .model
        .clone()
        .context("--on-conflict repair needs a model")?;
    let branch = shared.plan.run_id.branch(&crate::ids::RunBranch::Repair);
    let slot = {
        let (shared, branch, tip) = (shared.clone(), branch.clone(), r.tip);
        tokio::task::spawn_blocking(move || shared.pool.acquire(&branch, tip)).await??
    };
    let (slot_back, conflicted) = {
        let (shared, tip, theirs) = (shared.clone(), r.tip, r.task_tip);
        tokio::task::spawn_blocking(move || {
            let written = shared
                .pool
                .write_in(&slot, |repo| merge::write_conflicts(repo, tip, theirs));
            (slot, written)
        })
        .await?
    };
    let mut slot = slot_back;
    let outcome = match (
        conflicted,
        set_up(shared, None, &mut slot, &shared.cancel).await,
    ) {
        (Ok(conflicted), Ok(None)) => {
            resolve_in(shared, &llm, r, &slot, &branch, conflicted, a).await
        }
        (Ok(_), Ok(Some((verdict, _)))) => Err(anyhow::anyhow!(verdict.describe())),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    if let Err(why) = shared.pool.check_intact(&slot) {
        tokio::task::spawn_blocking(move || slot.discard()).await?;
        return Err(anyhow::anyhow!(why)).context(format!("task {}", task.id));
    }
    tokio::task::spawn_blocking(move || slot.release()).await??;
    if let Err(e) = outcome {
        return Err(e).context(format!("task {}", task.id));
    }
    Ok(())
}

/// The agent's part of a conflict repair, in the prepared worktree.
async fn resolve_in(
    shared: &Arc<Shared>,
    llm: &LlmShared,
    r: &ConflictRepair,
    slot: &Slot,
    branch: &str,
    conflicted: Vec<RepoPath>,
    a: &mut Attempt,
) -> anyhow::Result<()> {
    let task = shared.plan.task(r.idx);
    let worktree = slot.path.as_path();
    shared.sink.emit(Event::TaskStarted {
        task: task.id.clone(),
        files: task.files.clone(),
        attempt: r.attempt,
        worktree: worktree.display().to_string(),
        candidate: None,
    });
    step(shared, &task.id, "repairing the conflict");
    let context = repair_context(&conflicted);
    let mut files = task.files.clone();
    for p in &conflicted {
        if !files.contains(p) {
            files.push(p.clone());
        }
    }
    let task_dir = shared.run_dir.task_dir(&task.id);
    std::fs::create_dir_all(&task_dir)?;
    let checks = check_writes(shared, slot);
    let runner = super::worker_run::Runner::task(shared);
    let place = Place {
        runner: &runner,
        worktree,
        view: None,
        git: None,
        checks: checks.as_ref(),
    };
    let ask = (files.as_slice(), Some(context.as_str()));
    let result = run_agent(shared, llm, r.idx, place, &task_dir, ask, None).await?;
    a.record_spend(&result);
    a.summary = result.summary;
    a.output_tail = result.output_tail.filter(|t| !t.is_empty());
    let why = match result.verdict {
        Verdict::Done | Verdict::NoChange => None,
        Verdict::Interrupted => {
            a.status = TaskStatus::Interrupted;
            a.error = Some("interrupted while repairing a merge conflict".into());
            return Ok(());
        }
        Verdict::OverBudget(why) => {
            a.status = TaskStatus::Skipped;
            a.over_budget = true;
            a.error = Some(why);
            return Ok(());
        }
        Verdict::Failed(why) | Verdict::Timeout(why) => Some(why),
        exited @ Verdict::Exited(_) => Some(exited.describe()),
    };
    let left = merge::with_conflict_markers(worktree, &conflicted);
    let why = why.or_else(|| {
        (!left.is_empty()).then(|| {
            let list: Vec<String> = left.iter().map(|p| p.display()).collect();
            format!("conflict markers are left in {}", list.join(", "))
        })
    });
    if let Some(why) = why {
        let list: Vec<String> = conflicted.iter().map(|p| p.display()).collect();
        a.error = Some(format!(
            "merge conflict in {}; the model did not resolve it: {why}",
            list.join(", ")
        ));
        return Ok(());
    }
    shared.pool.check_intact(slot).map_err(anyhow::Error::msg)?;
    let leave_out = checks.map(|c| c.take()).unwrap_or_default();
    let committed = commit_resolution(shared, slot, branch, (r.tip, leave_out), &task.id).await?;
    a.status = TaskStatus::Done;
    a.resolved = Some(Resolved {
        tree: committed,
        on: r.tip,
    });
    Ok(())
}

/// What the agent is told about the conflict it resolves.
fn repair_context(conflicted: &[RepoPath]) -> String {
    let list: Vec<String> = conflicted
        .iter()
        .map(|p| format!("- {}", p.display()))
        .collect();
    format!(
        "This task's change is done, but merging it conflicts with changes other tasks already \
         merged. The worktree holds the merged result so far with this task's change applied; \
         these files contain conflict markers:\n{}\n\nEach conflict shows the already merged \
         version after `<<<<<<< already merged`, the common ancestor after `|||||||`, and this \
         task's version after `=======`, up to `>>>>>>> this task`. Resolve every conflict so \
         that both the already merged changes and this task's change (the instruction above) \
         are kept, remove every marker, then call finish.",
        list.join("\n")
    )
}

/// Commits the resolved merge in `slot` onto `branch` (at integration tip `tip`); returns
/// its tree.
async fn commit_resolution(
    shared: &Shared,
    slot: &Slot,
    branch: &str,
    (tip, leave_out): (Oid, BTreeSet<RepoPath>),
    task: &TaskId,
) -> anyhow::Result<Oid> {
    let branch = branch.to_string();
    let (common_dir, name, path) = (
        shared.common_dir.clone(),
        slot.name.clone(),
        slot.path.clone(),
    );
    let message = format!("swarm: resolve the merge of {task}\n");
    tokio::task::spawn_blocking(move || {
        let repo = worktree::open_worktree(&common_dir, &name, &path)?;
        let c = commit::commit_task(
            &repo,
            &branch,
            tip,
            &message,
            commit::Staged {
                leave_out: &leave_out,
                written: None,
            },
        )?;
        Ok::<_, anyhow::Error>(repo.find_commit(c.tip)?.tree_id())
    })
    .await?
}
