//! `--verify-merged CMD`: check the merged result before the target moves, and when the check
//! fails, find the merged tasks that break it, leave them out and merge the rest again.
//!
//! The k-th merge commit on the integration branch holds exactly the first k merged tasks, so
//! "which task breaks the check" is a search over positions of one chain: the check passes at
//! position 0 (where the target started; it is checked first, and a failure there means the
//! check is broken, not the tasks) and fails at the tip, so a binary search finds the first
//! failing position in O(log n) runs of the check. The task merged there is left out
//! (`excluded`, branch kept), the tasks after it are merged again, in memory, from the
//! position before it, and the new tip is checked. That repeats for up to [`MAX_EXCLUDED`]
//! culprits, and no more than half of the merged tasks. Checks run in a pooled worktree (confined like any worker process), reset in
//! proportion to the change between two checked commits, so build output stays warm; a tree
//! checked once is never checked again.
//!
//! When leaving tasks out does not make the check pass (tasks that only work together, such
//! as a rename split across files, or a flaky check), nothing is left out after all: the
//! result keeps every task, stays on `swarm/<RUN-ID>/result`, and the target is not moved.

use crate::ids::TaskIdx;
use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;
use git2::Oid;

use super::Shared;
use super::scheduler::Scheduler;
use super::worker_run::set_up;
use crate::events::{CheckRole, Event};
use crate::git::merge::{MergeOutcome, MergeRequest, MergeTrain};
use crate::report::{TaskStatus, VerifyMergedReport};
use crate::worker::Verdict;
use crate::worker::process::{self, Exit};

/// The most tasks one run leaves out before concluding that leaving tasks out does not help
/// (and never more than half of the merged tasks, see [`exclusion_limit`]).
pub(crate) const MAX_EXCLUDED: usize = 5;

/// How many of `merged` tasks may be left out. A result that passes only without most of its
/// tasks says more about the tasks as a whole (or about the check) than about culprits.
fn exclusion_limit(merged: usize) -> usize {
    (merged / 2).clamp(1, MAX_EXCLUDED)
}

/// One merge on the integration chain.
#[derive(Debug, Clone, Copy)]
struct Link {
    merge: Oid,
    idx: TaskIdx,
}

#[derive(Debug, Clone)]
struct Check {
    passed: bool,
    /// The tail of the check's output, with how it ended.
    output: String,
    /// The whole output.
    log: std::path::PathBuf,
}

/// Runs the check on commits of the integration branch, at most once per tree.
struct Checker {
    shared: Arc<Shared>,
    command: String,
    by_tree: HashMap<Oid, Check>,
    runs: u32,
}

impl Checker {
    /// Checks `commit`; `None` when the run was interrupted.
    async fn check(&mut self, commit: Oid, role: CheckRole) -> anyhow::Result<Option<Check>> {
        let tree = {
            let common_dir = self.shared.common_dir.clone();
            tokio::task::spawn_blocking(move || {
                Ok::<_, anyhow::Error>(
                    git2::Repository::open(common_dir)?
                        .find_commit(commit)?
                        .tree_id(),
                )
            })
            .await??
        };
        if let Some(known) = self.by_tree.get(&tree) {
            return Ok(Some(known.clone()));
        }
        let shared = &self.shared;
        let branch = shared.plan.run_id.branch(&crate::ids::RunBranch::Verify);
        let mut slot = {
            let shared = shared.clone();
            tokio::task::spawn_blocking(move || shared.pool.acquire(&branch, commit)).await??
        };
        let log = shared
            .run_dir
            .path
            .join(format!("verify-merged-{}.log", self.runs + 1));
        let ran = match set_up(shared, None, &mut slot, &shared.cancel).await {
            Ok(None) => {
                self.runs += 1;
                process::run(shared.shell(
                    &self.command,
                    None,
                    &slot.path,
                    slot.view.as_ref(),
                    &log,
                ))
                .await
                .map(Some)
                .map_err(anyhow::Error::from)
            }
            Ok(Some((Verdict::Interrupted, _))) => Ok(None),
            Ok(Some((verdict, _))) => Err(anyhow::anyhow!(
                "cannot prepare a worktree for --verify-merged: {}",
                verdict.describe()
            )),
            Err(e) => Err(e),
        };
        tokio::task::spawn_blocking(move || slot.release()).await??;
        let Some(ran) = ran? else {
            return Ok(None);
        };
        let how = match ran.exit {
            Exit::Cancelled | Exit::OverBudget => return Ok(None),
            Exit::Code(c) => format!("exit status {c}"),
            Exit::Signal(s) => format!("killed by signal {s}"),
            Exit::TimedOut => "timed out (--timeout)".into(),
            Exit::Idle => "stale: no output for --idle-timeout".into(),
        };
        let check = Check {
            passed: ran.exit == Exit::Code(0),
            output: format!("{}\n[{how}]", ran.output_tail.trim_end()),
            log,
        };
        shared.sink.emit(Event::VerifyMerged {
            commit: commit.to_string(),
            role,
            passed: check.passed,
            runs: self.runs,
        });
        self.by_tree.insert(tree, check.clone());
        Ok(Some(check))
    }
}

/// Checks the merged result of `sched` (from `into_start` to `sched.tip`) with `command`,
/// leaving out the tasks that break it. Fills `report.verify_merged`; sets `sched.hold` when
/// the target must not move.
pub(super) async fn verify_merged(
    sched: &mut Scheduler,
    into_start: Oid,
    command: &str,
) -> anyhow::Result<()> {
    let shared = sched.shared.clone();
    let train = sched
        .train
        .take()
        .context("the merge train did not come back")?;
    let mut checker = Checker {
        shared: shared.clone(),
        command: command.to_string(),
        by_tree: HashMap::new(),
        runs: 0,
    };
    let mut outcome = VerifyMergedReport {
        command: command.to_string(),
        passed: false,
        runs: 0,
        excluded: Vec::new(),
        problem: None,
    };
    let Some(failing) = checker.check(sched.tip, CheckRole::Result).await? else {
        return Ok(());
    };
    if !failing.passed {
        let Some(base) = checker.check(into_start, CheckRole::Base).await? else {
            return Ok(());
        };
        if !base.passed {
            outcome.problem = Some(format!(
                "--verify-merged `{command}` fails on {} (where {} started) already, so the \
                 check is broken, not the tasks; fix the check (output: {})",
                crate::ids::short(&into_start),
                shared.plan.into,
                base.log.display()
            ));
        }
    }
    let mut search = Search {
        chain: Chain {
            links: chain(sched, &train, into_start)?,
            into_start,
        },
        train: Some(train),
        checker,
        outcome,
    };
    let Some(last) = search.leave_out_culprits(sched, failing).await? else {
        return Ok(());
    };
    let Search {
        train,
        checker,
        mut outcome,
        ..
    } = search;
    if let Some(problem) = &outcome.problem {
        sched.hold = Some(problem.clone());
    }
    outcome.passed = last.passed;
    outcome.runs = checker.runs;
    sched.report.verify_merged = Some(outcome);
    sched.train = train;
    Ok(())
}

/// The merges on the integration branch, by position: 0 is where the target started, k the
/// k-th merge (holding exactly the first k merged tasks).
struct Chain {
    links: Vec<Link>,
    into_start: Oid,
}

impl Chain {
    fn at(&self, position: usize) -> Oid {
        match position {
            0 => self.into_start,
            p => self.links[p - 1].merge,
        }
    }
}

/// The search for the tasks that break the check.
struct Search {
    chain: Chain,
    /// The merge train (away while tasks are merged again).
    train: Option<MergeTrain>,
    checker: Checker,
    outcome: VerifyMergedReport,
}

impl Search {
    /// While the tip fails the check (and the check is not broken), finds the first merge that
    /// breaks it, leaves that task out and merges the later ones again; up to the limit, past
    /// which every task is put back. Returns the last check of the tip; `None` when the run
    /// was interrupted.
    async fn leave_out_culprits(
        &mut self,
        sched: &mut Scheduler,
        mut failing: Check,
    ) -> anyhow::Result<Option<Check>> {
        let limit = exclusion_limit(self.chain.links.len());
        let original = (sched.tip, sched.report.tasks.clone());
        let first = failing.clone();
        let mut good = 0;
        while !failing.passed && self.outcome.problem.is_none() {
            let Some((culprit, failure)) = self.first_failing(good, failing.clone()).await? else {
                return Ok(None);
            };
            if self.outcome.excluded.len() == limit {
                // Leaving tasks out does not help: keep them all, do not move the target.
                self.train
                    .as_mut()
                    .context("the merge train did not come back")?
                    .reset(original.0)?;
                sched.tip = original.0;
                sched.report.tasks = original.1;
                self.outcome.problem = Some(format!(
                    "--verify-merged `{}` still fails after leaving out {limit} task(s) ({}); \
                     the tasks may only work together (a rename split across files, say) or \
                     the check may be flaky, so none is left out and {} is not moved (output: \
                     {})",
                    self.checker.command,
                    crate::ids::join(&self.outcome.excluded),
                    sched.shared.plan.into,
                    first.log.display()
                ));
                self.outcome.excluded.clear();
                return Ok(Some(failing));
            }
            let link = self.chain.links[culprit - 1];
            self.outcome
                .excluded
                .push(exclude(sched, link.idx, &failure));
            let left_out = sched.report.task(link.idx).commit;
            let from = self.chain.at(culprit - 1);
            let train = self
                .train
                .take()
                .context("the merge train did not come back")?;
            let (train, links) =
                rebuild(sched, train, &self.chain.links, culprit - 1, from, left_out).await?;
            (self.train, self.chain.links) = (Some(train), links);
            good = culprit - 1;
            let Some(c) = self.checker.check(sched.tip, CheckRole::Result).await? else {
                return Ok(None);
            };
            failing = c;
        }
        Ok(Some(failing))
    }

    /// The first position of the chain that fails the check, knowing that position `good`
    /// passes and the tip fails (`failing`), with its check; `None` when interrupted.
    async fn first_failing(
        &mut self,
        good: usize,
        failing: Check,
    ) -> anyhow::Result<Option<(usize, Check)>> {
        let (mut lo, mut hi) = (good, self.chain.links.len());
        let mut first_failure = failing;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let Some(c) = self
                .checker
                .check(self.chain.at(mid), CheckRole::Bisect)
                .await?
            else {
                return Ok(None);
            };
            if c.passed {
                lo = mid;
            } else {
                hi = mid;
                first_failure = c;
            }
        }
        Ok(Some((hi, first_failure)))
    }
}

/// Leaves task `idx` out of the result: `excluded`, with the failing check's output.
fn exclude(sched: &mut Scheduler, idx: TaskIdx, failure: &Check) -> crate::ids::TaskId {
    let reason = format!(
        "breaks --verify-merged (passes before it is merged, fails after; output: {})",
        failure.log.display()
    );
    let t = sched.report.task_mut(idx);
    t.status = TaskStatus::Excluded;
    t.error = Some(reason.clone());
    t.output_tail = Some(failure.output.clone());
    t.merge_commit = None;
    let task = t.id.clone();
    sched.shared.sink.emit(Event::Excluded {
        task: task.clone(),
        reason,
    });
    task
}

/// The merges on the integration branch, oldest first.
fn chain(sched: &Scheduler, train: &MergeTrain, into_start: Oid) -> anyhow::Result<Vec<Link>> {
    let merges = train.merges_since(into_start)?;
    let by_id: HashMap<&str, TaskIdx> = sched
        .report
        .indices()
        .map(|i| (sched.report.task(i).id.as_str(), i))
        .collect();
    let mut links = Vec::with_capacity(merges.len());
    for (task_id, merge, _) in merges {
        let idx = *by_id
            .get(task_id.as_str())
            .with_context(|| format!("merge {merge} names task {task_id}, not in the plan"))?;
        links.push(Link { merge, idx });
    }
    Ok(links)
}

/// Merges the tasks of `chain` after position `keep` + 1 again, on top of position `keep`
/// (commit `from`), leaving out the task merged at `keep` + 1. A task whose start commit
/// contains the left-out task's commit (a retry made on top of it) cannot go without it and
/// is left out too. Returns the train and the new chain.
async fn rebuild(
    sched: &mut Scheduler,
    train: MergeTrain,
    chain: &[Link],
    keep: usize,
    from: Oid,
    left_out: Option<Oid>,
) -> anyhow::Result<(MergeTrain, Vec<Link>)> {
    let shared = sched.shared.clone();
    let mut todo = Vec::new();
    for link in &chain[keep + 1..] {
        let t = sched.report.task_mut(link.idx);
        let (Some(start), Some(tip)) = (t.start, t.commit) else {
            continue;
        };
        todo.push((link.idx, start, tip));
        // Finished, not merged: what `swarm resume` merges if this is interrupted.
        t.status = TaskStatus::Done;
        t.merge_commit = None;
    }
    let mut new_chain = chain[..keep].to_vec();
    let (train, outcomes) = tokio::task::spawn_blocking(move || {
        let mut train = train;
        let outcomes = remerge(&mut train, &shared, from, &todo, left_out);
        (train, outcomes)
    })
    .await?;
    for (idx, result) in outcomes? {
        let t = sched.report.task_mut(idx);
        match result {
            Remerged::Merged(commit) => {
                t.status = TaskStatus::Merged;
                t.merge_commit = Some(commit);
                new_chain.push(Link { merge: commit, idx });
            }
            Remerged::Conflict(paths) => {
                let list: Vec<String> = paths.iter().map(|p| p.display()).collect();
                t.status = TaskStatus::Conflict;
                t.error = Some(format!(
                    "merge conflict in {} once a task breaking --verify-merged was left out",
                    list.join(", ")
                ));
            }
            Remerged::NeedsLeftOut => {
                t.status = TaskStatus::Excluded;
                t.error = Some(
                    "its retry was made on top of a task left out by --verify-merged; \
                     `swarm resume RUN-ID --failed` runs it again"
                        .into(),
                );
            }
        }
    }
    sched.tip = train.tip();
    Ok((train, new_chain))
}

enum Remerged {
    Merged(Oid),
    Conflict(Vec<crate::repo_path::RepoPath>),
    NeedsLeftOut,
}

fn remerge(
    train: &mut MergeTrain,
    shared: &Shared,
    from: Oid,
    todo: &[(TaskIdx, Oid, Oid)],
    left_out: Option<Oid>,
) -> anyhow::Result<Vec<(TaskIdx, Remerged)>> {
    train.reset(from)?;
    let mut outcomes = Vec::with_capacity(todo.len());
    for &(idx, start, tip) in todo {
        if let Some(left_out) = left_out
            && train.contains(start, left_out)?
        {
            outcomes.push((idx, Remerged::NeedsLeftOut));
            continue;
        }
        let task = shared.plan.task(idx);
        let outcome = train.merge(&MergeRequest {
            task_id: &task.id,
            files: &task.files,
            instruction: &shared.plan.instruction,
            run_id: &shared.plan.run_id,
            start,
            tip,
            changes: None,
        })?;
        outcomes.push((
            idx,
            match outcome {
                MergeOutcome::Merged { commit, .. } => Remerged::Merged(commit),
                MergeOutcome::Conflict { paths, .. } => Remerged::Conflict(paths),
            },
        ));
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_half_of_the_merged_tasks_and_five_are_left_out() {
        assert_eq!(exclusion_limit(1), 1);
        assert_eq!(exclusion_limit(2), 1);
        assert_eq!(exclusion_limit(5), 2);
        assert_eq!(exclusion_limit(16), 5);
        assert_eq!(exclusion_limit(1000), MAX_EXCLUDED);
    }
}
