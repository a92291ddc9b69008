//! The scheduler loop: starts workers up to `--jobs`, feeds finished tasks to the merge
//! thread, applies the conflict policy, and schedules retries after the first wave.

mod candidates;
mod record;

use crate::ids::{CandidateNo, TaskIdx};
use std::collections::{HashMap, VecDeque};
use tokio_util::sync::CancellationToken;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::group::{self, GroupEnd, run_group};
use super::permits::{Permit, Permits};
use super::repair::repair_conflict;
use super::task::{Attempt, run_task};
use super::worker_run::Runner;
use crate::git::merge::MergeTrain;
use crate::git::repo::RepoInfo;
use crate::report::Report;
use crate::state;
use std::sync::Arc;
use std::time::{Duration, Instant};

use git2::Oid;

use super::merge_thread::{
    MergeDone, MergeJob, MergeThreadStopped, merge_loop, merge_thread_stopped,
};
use super::{RunError, RunMode, Shared, result_branch};
use crate::repo_path::RepoPath;
use crate::report::TaskStatus;
use candidates::JudgeEnd;
use record::conflict_context;

/// What a task of the flight ends with.
enum Ending {
    /// A worker process's, over one task or several.
    Group(GroupEnd),
    /// The judge's answer on a task's finalists (`--judge-model`).
    Judged(JudgeEnd),
}

/// The most tasks under way for each of `--jobs`: one whose worker runs, and one committing
/// what its worker left, in an overlay worktree of its own.
const TASKS_PER_JOB: usize = 2;

/// What a conflicted task gets after the first wave.
enum FollowUp {
    /// Run again on the integration tip (`--on-conflict retry`).
    Retry(Vec<RepoPath>),
    /// The model resolves the conflicted merge (`--on-conflict repair`).
    Repair,
}

/// What is under way while the scheduler drives a run.
struct Flight {
    /// First-wave tasks not started yet.
    pending: VecDeque<TaskIdx>,
    /// The halves of processes over several tasks that did not succeed (`--per-process`),
    /// to run before other first-wave tasks.
    halves: VecDeque<Vec<TaskIdx>>,
    /// Conflicted tasks to run again or repair after the first wave.
    retries: VecDeque<(TaskIdx, FollowUp)>,
    /// Candidates to start (`--tries`, `--best-of`), before any other task.
    candidates: VecDeque<(TaskIdx, CandidateNo)>,
    /// What stops each running candidate (one that can no longer win is stopped).
    stops: HashMap<(TaskIdx, CandidateNo), CancellationToken>,
    running: JoinSet<Ending>,
    /// The `--jobs` places of running workers.
    permits: Permits,
    /// The most tasks under way: a task whose worker has ended may still be committing.
    most: usize,
    /// The tasks of each running process.
    running_ids: HashMap<tokio::task::Id, Vec<TaskIdx>>,
    /// Merge jobs sent to the merge thread and not answered yet.
    merging: usize,
    jobs: std::sync::mpsc::Sender<MergeJob>,
    done: mpsc::UnboundedReceiver<MergeDone>,
}

impl Flight {
    /// Runs one attempt at task `idx`.
    fn spawn(
        &mut self,
        idx: TaskIdx,
        attempt: impl std::future::Future<Output = Attempt> + Send + 'static,
    ) {
        self.spawn_other(idx, async move {
            Ending::Group(GroupEnd::Attempts(vec![attempt.await]))
        });
    }

    /// Runs `work` for task `idx`.
    fn spawn_other(
        &mut self,
        idx: TaskIdx,
        work: impl std::future::Future<Output = Ending> + Send + 'static,
    ) {
        let handle = self.running.spawn(work);
        self.running_ids.insert(handle.id(), vec![idx]);
    }

    /// Runs one process for several first-wave tasks, holding `permit` to its end: a
    /// group's commits are many tasks' files, and the next group's worker beside them slowed
    /// runs on ext4 (docs/ARCHITECTURE.md).
    fn spawn_group(&mut self, shared: Arc<Shared>, tasks: Vec<TaskIdx>, permit: Permit) {
        let group = permit.held_over(run_group(shared, tasks.clone()));
        let handle = self
            .running
            .spawn(async move { Ending::Group(group.await) });
        self.running_ids.insert(handle.id(), tasks);
    }

    /// Hands a finished task's `job` to the merge thread, saying whether another task runs
    /// (whose job may come soon).
    fn merge(&mut self, mut job: MergeJob) -> anyhow::Result<()> {
        job.last_for_now = self.running.is_empty();
        self.send(job)
    }

    /// Hands `job` to the merge thread as it is.
    fn send(&mut self, job: MergeJob) -> anyhow::Result<()> {
        self.jobs.send(job).map_err(|_| merge_thread_stopped())?;
        self.merging += 1;
        Ok(())
    }
}

pub(super) struct Scheduler {
    pub(super) shared: Arc<Shared>,
    pub(super) report: Report,
    /// The integration tip.
    pub(super) tip: Oid,
    /// Why no more tasks run or merge (`--on-conflict fail`).
    pub(super) stopped: Option<String>,
    pub(super) mode: RunMode,
    /// Why no new task starts (`--max-tokens`, `--max-cost` reached).
    pub(super) budget_spent: Option<String>,
    pub(super) last_save: Instant,
    /// The merge train, back from the merge thread once every merge is done.
    pub(super) train: Option<MergeTrain>,
    /// Why the target must not move even though tasks merged (`--verify-merged`).
    pub(super) hold: Option<String>,
}

impl Scheduler {
    pub(super) fn new(shared: Arc<Shared>, report: Report, tip: Oid, mode: RunMode) -> Self {
        Self {
            shared,
            report,
            tip,
            stopped: None,
            mode,
            budget_spent: None,
            last_save: Instant::now(),
            train: None,
            hold: None,
        }
    }

    /// Runs the pending tasks and merges them, starting the train at `start` (after merging
    /// the already finished tasks of `merge_first`, when resuming).
    pub(super) async fn drive(
        &mut self,
        info: &RepoInfo,
        start: Oid,
        merge_first: Vec<TaskIdx>,
    ) -> Result<(), RunError> {
        let shared = self.shared.clone();
        let train = start_train(&shared, info, start)?;
        let (job_tx, job_rx) = std::sync::mpsc::channel::<MergeJob>();
        let (done_tx, done_rx) = mpsc::unbounded_channel::<MergeDone>();
        let merge_thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("swarm-merge".into())
                .spawn(move || merge_loop(train, &shared, job_rx, done_tx))
                .map_err(|e| RunError::classify("starting the merge thread", e.into()))?
        };
        let pending = shared
            .plan
            .indices()
            .filter(|&i| {
                self.mode.runs_workers() && self.report.task(i).status == TaskStatus::Pending
            })
            .collect();
        let mut flight = Flight {
            pending,
            halves: VecDeque::new(),
            retries: VecDeque::new(),
            candidates: VecDeque::new(),
            stops: HashMap::new(),
            running: JoinSet::new(),
            permits: Permits::new(shared.settings.jobs),
            most: shared.settings.jobs.saturating_mul(TASKS_PER_JOB),
            running_ids: HashMap::new(),
            merging: 0,
            jobs: job_tx,
            done: done_rx,
        };
        for idx in merge_first {
            let t = self.report.task(idx);
            let (Some(start), Some(tip)) = (t.start, t.commit) else {
                continue;
            };
            let job = MergeJob {
                idx,
                start,
                tip,
                resolved: None,
                changes: None,
                // The others of `merge_first` come right after.
                last_for_now: false,
            };
            // If the merge thread is gone already, the task stays finished and unmerged (for
            // `swarm resume`).
            let _ = flight.send(job);
        }
        if let Err(e) = self.fly(&mut flight).await {
            // Stop the workers still running (their process groups) before giving up.
            shared.cancel.cancel();
            while flight.running.join_next().await.is_some() {}
            return Err(match e.is::<MergeThreadStopped>() {
                true => RunError::MergeThread(e),
                false => RunError::classify("running the tasks", e),
            });
        }
        super::watch::last_look(&shared).await;
        let Flight {
            pending,
            halves,
            retries,
            jobs,
            ..
        } = flight;
        drop(jobs);
        self.train = merge_thread.join().ok();
        self.mark_not_run(
            pending
                .into_iter()
                .chain(halves.into_iter().flatten())
                .chain(retries.into_iter().map(|(i, _)| i)),
        );
        self.save();
        Ok(())
    }

    /// Starts tasks and merges what finishes until nothing runs or waits to be merged.
    async fn fly(&mut self, flight: &mut Flight) -> anyhow::Result<()> {
        loop {
            self.start_what_may_start(flight)?;
            if flight.running.is_empty() && flight.merging == 0 {
                return Ok(());
            }
            let wants_worker = self.wants_worker(flight);
            tokio::select! {
                // A worker ended while its task commits: start the next (next time round).
                () = flight.permits.given_back(), if wants_worker => {}
                joined = flight.running.join_next_with_id(), if !flight.running.is_empty() => {
                    let ended = match joined {
                        Some(Ok((id, ended))) => {
                            flight.running_ids.remove(&id);
                            ended
                        }
                        Some(Err(e)) => {
                            // A panic in swarm's own code for these tasks: they fail, the run
                            // goes on.
                            for idx in flight.running_ids.remove(&e.id()).unwrap_or_default() {
                                let t = self.report.task_mut(idx);
                                t.status = TaskStatus::Failed;
                                t.error = Some(format!("internal error in swarm: {e}"));
                            }
                            continue;
                        }
                        None => continue,
                    };
                    match ended {
                        Ending::Judged(end) => self.on_judged(end, flight)?,
                        Ending::Group(GroupEnd::Attempts(attempts)) => {
                            for attempt in attempts {
                                if self.in_candidates(attempt.idx) {
                                    self.on_candidate(attempt, flight)?;
                                } else if let Some(job) = self.on_attempt(attempt) {
                                    flight.merge(job)?;
                                }
                            }
                        }
                        Ending::Group(GroupEnd::Split(split)) => {
                            self.on_split(&mut flight.halves, split);
                        }
                    }
                }
                done = flight.done.recv(), if flight.merging > 0 => {
                    let done = done.ok_or_else(merge_thread_stopped)?;
                    flight.merging -= 1;
                    if let Some(retry) = self.on_merged(done) {
                        flight.retries.push_back(retry);
                    }
                }
            }
        }
    }

    /// May any task start: the run is not stopping, nor out of budget?
    fn may_start(&self) -> bool {
        !self.shared.cancel.is_cancelled() && self.stopped.is_none() && self.budget_spent.is_none()
    }

    /// May a first-wave task start, but for a free permit?
    fn wants_worker(&self, flight: &Flight) -> bool {
        self.may_start()
            && flight.running.len() < flight.most
            && !(flight.pending.is_empty()
                && flight.halves.is_empty()
                && flight.candidates.is_empty())
    }

    /// Starts pending tasks up to `--jobs` running workers, and once the first wave is done
    /// and merged, the retries and repairs of conflicted tasks, one at a time; none when the
    /// run is stopping.
    fn start_what_may_start(&mut self, flight: &mut Flight) -> anyhow::Result<()> {
        let shared = self.shared.clone();
        if self.budget_spent.is_none()
            && let Some(reason) = self.budget_spent_now()
        {
            self.budget_spent = Some(reason);
        }
        if !self.may_start() && !flight.candidates.is_empty() {
            self.drain_candidates(flight)?;
        }
        while self.wants_worker(flight)
            && let Some(permit) = flight.permits.take()
        {
            if let Some(next) = flight.candidates.pop_front() {
                self.start_candidate(next, flight, permit);
                continue;
            }
            let tasks = match flight.halves.pop_front() {
                Some(half) => half,
                None => {
                    group::next_group(&shared.plan, &mut flight.pending, shared.layout.per_process)
                }
            };
            if let ([idx], true) = (&tasks[..], shared.settings.candidates.several()) {
                self.open_candidates(*idx, flight)?;
                match flight.candidates.pop_front() {
                    Some(next) => self.start_candidate(next, flight, permit),
                    None => permit.give_back(),
                }
                continue;
            }
            for &idx in &tasks {
                self.set_running(idx, 1, shared.base);
            }
            match tasks[..] {
                [] => continue,
                [idx] => {
                    let runner = (1, Runner::task(&shared));
                    flight.spawn(
                        idx,
                        run_task(shared.clone(), idx, runner, shared.base, None, permit),
                    )
                }
                _ => flight.spawn_group(shared.clone(), tasks, permit),
            }
        }
        if self.may_start()
            && flight.pending.is_empty()
            && flight.halves.is_empty()
            && flight.running.is_empty()
            && flight.merging == 0
            && let Some(permit) = flight.permits.take()
            && let Some((idx, follow_up)) = flight.retries.pop_front()
        {
            let attempt = self.report.task(idx).attempts + 1;
            match follow_up {
                FollowUp::Retry(paths) => {
                    let context = Some(conflict_context(&paths));
                    self.set_running(idx, attempt, self.tip);
                    let runner = (attempt, self.runner_of(idx));
                    let retry = run_task(shared.clone(), idx, runner, self.tip, context, permit);
                    flight.spawn(idx, retry);
                }
                FollowUp::Repair => {
                    let repair = self.conflict_repair(idx, attempt)?;
                    self.set_running(idx, attempt, repair.task_start);
                    let repair = repair_conflict(shared.clone(), repair);
                    flight.spawn(idx, permit.held_over(repair));
                }
            }
        }
        Ok(())
    }

    /// Why no new task may start for lack of budget (`--max-tokens`, `--max-cost`), if so:
    /// the run's meter, which counts what the model APIs answered.
    fn budget_spent_now(&self) -> Option<String> {
        self.shared.meter.exhausted().map(str::to_string)
    }

    /// Who runs task `idx` again after a conflict: its worker, or its winning candidate.
    fn runner_of(&self, idx: TaskIdx) -> Runner {
        match &self.report.task(idx).selection {
            Some(selection) => Runner::candidate(&self.shared, selection.winner),
            None => Runner::task(&self.shared),
        }
    }

    fn set_running(&mut self, idx: TaskIdx, attempt: u32, start: Oid) {
        let t = self.report.task_mut(idx);
        t.status = TaskStatus::Running;
        t.attempts = attempt;
        t.start = Some(start);
        self.save();
    }

    /// Saves report.json, at most once a second while tasks run (rewriting it on every state
    /// change is quadratic in the number of tasks); [`super::run`] always saves the final report.
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

/// The run's merge train at `start`, with the repository's merge drivers and `--merge-with`.
fn start_train(shared: &Arc<Shared>, info: &RepoInfo, start: Oid) -> Result<MergeTrain, RunError> {
    let drivers = super::merge_drivers::setup(shared)
        .map_err(|e| RunError::classify("finding the merge tool", e))?;
    MergeTrain::new(
        &info.common_dir,
        &result_branch(&shared.plan.run_id),
        start,
        Some(drivers),
    )
    .map_err(|e| RunError::classify("starting the merge train", e))
}
