//! Several candidates per task (`--tries`, `--best-of`): which to start, what each one's end
//! says, and the choice of the winner, whose commit then merges as any task's.
//!
//! A candidate's state lives in the report (`candidates[]`), so a resumed run keeps the
//! finished ones; what stops a running one is in the flight.

use anyhow::Context as _;

use super::{Ending, Flight, Scheduler};
use crate::events::Event;
use crate::ids::{CandidateNo, TaskIdx};
use crate::orchestrator::merge_thread::MergeJob;
use crate::orchestrator::select::{self, Choice};
use crate::orchestrator::task::Attempt;
use crate::orchestrator::worker_run::Runner;
use crate::report::{CandidateReport, SelectedBy, Selection, TaskStatus};
use crate::settings::Candidates;
use crate::worker::llm::judge::{self, Judged};

/// What the judge said of a task's finalists.
pub(super) struct JudgeEnd {
    pub(super) idx: TaskIdx,
    pub(super) judged: Judged,
    pub(super) steps: Vec<String>,
}

/// A finished candidate's record in its directory (`tasks/<TASK>/c<K>/`): written as it
/// finishes, so a killed run's resume keeps it whatever the report says.
const RECORD: &str = "candidate.json";

/// Candidate `k`'s record in its directory `dir`, if it finished.
fn recorded(dir: &std::path::Path, k: CandidateNo) -> Option<CandidateReport> {
    let text = std::fs::read(dir.join(RECORD)).ok()?;
    let c: CandidateReport = serde_json::from_slice(&text).ok()?;
    (c.number == k && c.finished()).then_some(c)
}

impl Scheduler {
    /// Does task `idx` run as candidates, rather than as one worker (a task whose winner is
    /// chosen runs its conflict retry as that winner)?
    pub(super) fn in_candidates(&self, idx: TaskIdx) -> bool {
        let t = self.report.task(idx);
        !t.candidates.is_empty() && t.selection.is_none()
    }

    /// Starts task `idx`: queues the candidates left to run (every unfinished one with
    /// `--best-of`, the next with `--tries`), or chooses at once when none is left (a resumed
    /// task whose candidates all finished).
    pub(super) fn open_candidates(
        &mut self,
        idx: TaskIdx,
        flight: &mut Flight,
    ) -> anyhow::Result<()> {
        let (run_dir, id) = (&self.shared.run_dir, &self.shared.plan.task(idx).id);
        let base = self.shared.base;
        let t = self.report.task_mut(idx);
        t.status = TaskStatus::Running;
        t.start = Some(base);
        t.attempts = 1;
        let mut adopted = Vec::new();
        for c in t.candidates.iter_mut().filter(|c| !c.finished()) {
            // A killed process may have recorded it, finished, before the report was saved.
            let dir = run_dir.candidate_dir(id, c.number);
            match recorded(&dir, c.number).filter(|r| r.start == Some(base)) {
                Some(finished) => {
                    *c = CandidateReport {
                        branch: c.branch.clone(),
                        ..finished
                    };
                    adopted.push(c.clone());
                }
                None => c.status = TaskStatus::Pending,
            }
        }
        // What they spent, which the report saved before the kill did not count yet.
        for c in adopted {
            t.duration_ms += c.duration_ms;
            t.add_spend(c.tokens, c.cost_usd, c.requests);
        }
        self.advance(idx, flight)
    }

    /// Starts candidate `k` of task `idx` in `flight`, holding `permit`.
    pub(super) fn start_candidate(
        &mut self,
        (idx, k): (TaskIdx, CandidateNo),
        flight: &mut Flight,
        permit: crate::orchestrator::permits::Permit,
    ) {
        let shared = self.shared.clone();
        let runner = Runner::candidate(&shared, k);
        flight.stops.insert((idx, k), runner.cancel.clone());
        if let Some(c) = self.candidate_mut(idx, k) {
            c.status = TaskStatus::Running;
            c.start = Some(shared.base);
            c.worker = shared.settings.rotation.label(Some(k));
        }
        self.save();
        let base = shared.base;
        flight.spawn(
            idx,
            crate::orchestrator::task::run_task(shared, idx, (1, runner), base, None, permit),
        );
    }

    fn candidate_mut(&mut self, idx: TaskIdx, k: CandidateNo) -> Option<&mut CandidateReport> {
        self.report
            .task_mut(idx)
            .candidates
            .iter_mut()
            .find(|c| c.number == k)
    }

    /// Records candidate `a`'s end on its task, then moves the task on.
    pub(super) fn on_candidate(&mut self, a: Attempt, flight: &mut Flight) -> anyhow::Result<()> {
        let k = a
            .candidate
            .context("a candidate's attempt without its number")?;
        flight.stops.remove(&(a.idx, k));
        let stats = match a.tip.filter(|tip| *tip != a.start) {
            Some(tip) => self.diffstat(a.start, tip),
            None => (0, 0),
        };
        let run_stopped = self.shared.cancel.is_cancelled();
        let t = self.report.task_mut(a.idx);
        t.duration_ms += a.duration.as_millis() as u64;
        t.add_spend(a.tokens, a.cost_usd, a.requests);
        t.turns += a.turns;
        t.network.add(&a.network);
        let task = t.id.clone();
        let Some(c) = t.candidates.iter_mut().find(|c| c.number == k) else {
            anyhow::bail!("task {task} has no candidate {k}");
        };
        // One the budget stopped has not finished: it runs again on `swarm resume`.
        c.status = match a.over_budget && a.status == TaskStatus::Skipped {
            true => TaskStatus::Pending,
            false => a.status,
        };
        c.commit = a.tip.filter(|tip| *tip != a.start);
        c.changed_files = a.changed.clone();
        (c.insertions, c.deletions) = stats;
        c.duration_ms = a.duration.as_millis() as u64;
        c.tokens = a.tokens;
        c.cost_usd = a.cost_usd;
        c.requests = a.requests;
        c.log = a.log.clone();
        c.error = match (a.status, run_stopped) {
            (TaskStatus::Interrupted, false) => Some("stopped: the winner was chosen".into()),
            _ => a.error.clone(),
        };
        if c.finished() {
            let dir = self.shared.run_dir.candidate_dir(&task, k);
            if let Err(e) = crate::state::write_json_atomic(&dir.join(RECORD), &*c) {
                tracing::warn!("cannot record candidate {k} of {task}: {e:#}");
            }
        }
        self.shared.sink.emit(Event::CandidateFinished {
            task,
            candidate: k.get(),
            status: a.status,
            error: c.error.clone(),
            insertions: c.insertions,
            deletions: c.deletions,
            cost_usd: a.cost_usd,
        });
        self.advance(a.idx, flight)
    }

    fn diffstat(&self, start: git2::Oid, tip: git2::Oid) -> (usize, usize) {
        git2::Repository::open(&self.shared.common_dir)
            .and_then(|repo| select::diffstat(&repo, start, tip))
            .unwrap_or((0, 0))
    }

    /// Moves task `idx` on after a candidate's end: starts the next, stops those that can no
    /// longer win, or chooses.
    fn advance(&mut self, idx: TaskIdx, flight: &mut Flight) -> anyhow::Result<()> {
        let t = self.report.task(idx);
        let running = t
            .candidates
            .iter()
            .filter(|c| c.status == TaskStatus::Running)
            .count();
        let queued = flight.candidates.iter().filter(|(i, _)| *i == idx).count();
        let left: Vec<CandidateNo> = t
            .candidates
            .iter()
            .filter(|c| c.status == TaskStatus::Pending)
            .map(|c| c.number)
            .collect();
        if self.shared.cancel.is_cancelled() {
            // Interrupted: `swarm resume` runs what did not finish.
            return match running {
                0 => self.park(idx, flight),
                _ => Ok(()),
            };
        }
        let may_start = self.may_start();
        if let Candidates::Tries(_) = self.shared.settings.candidates {
            if let Some(first) = t.candidates.iter().find(|c| c.passed()) {
                let steps = vec![format!("c{} passed", first.number)];
                let selection = Selection {
                    winner: first.number,
                    by: SelectedBy::FirstToPass,
                    steps,
                };
                return self.decided(idx, selection, flight);
            }
            if running + queued > 0 {
                return Ok(());
            }
            return match (left.first(), may_start) {
                (Some(&next), true) => {
                    flight.candidates.push_front((idx, next));
                    Ok(())
                }
                (Some(_), false) => Ok(self.park(idx, flight)?),
                (None, _) => self.none_passed(idx),
            };
        }
        // --best-of: every candidate at once.
        if running + queued == 0 && !left.is_empty() {
            if !may_start {
                return self.park(idx, flight);
            }
            for &k in left.iter().rev() {
                flight.candidates.push_front((idx, k));
            }
            return Ok(());
        }
        let unfinished = running + queued;
        let repo = git2::Repository::open(&self.shared.common_dir)?;
        let judge = self.shared.judge.is_some();
        match select::choose(&repo, &self.report.task(idx).candidates, unfinished, judge)? {
            Choice::Open => Ok(()),
            Choice::Winner(selection) => {
                // Those still to run can no longer win: stopped, or never started.
                flight.candidates.retain(|(i, _)| *i != idx);
                for ((i, _), stop) in &flight.stops {
                    if *i == idx {
                        stop.cancel();
                    }
                }
                let unstarted = self.report.task_mut(idx).candidates.iter_mut();
                for c in unstarted.filter(|c| c.status == TaskStatus::Pending) {
                    c.status = TaskStatus::Skipped;
                    c.error = Some("not run: the winner was chosen".into());
                }
                match running {
                    0 => self.decided(idx, selection, flight),
                    // Chosen again once the stopped ones have ended.
                    _ => Ok(()),
                }
            }
            Choice::NonePassed => self.none_passed(idx),
            Choice::Judge { finalists, steps } => self.ask_judge(idx, finalists, steps, flight),
        }
    }

    /// Task `idx` cannot start its next candidates (Ctrl-C, the budget, merging stopped):
    /// interrupted for `swarm resume`, else skipped; a `--best-of` task chooses among those
    /// that passed.
    fn park(&mut self, idx: TaskIdx, flight: &mut Flight) -> anyhow::Result<()> {
        flight.candidates.retain(|(i, _)| *i != idx);
        let t = self.report.task_mut(idx);
        if self.shared.cancel.is_cancelled() {
            t.status = TaskStatus::Interrupted;
            t.error = Some("interrupted".into());
            return Ok(());
        }
        let why = self
            .stopped
            .clone()
            .or_else(|| self.budget_spent.clone())
            .unwrap_or_else(|| "the run stopped".into());
        if t.candidates.iter().any(|c| c.passed()) && self.stopped.is_none() {
            for c in t
                .candidates
                .iter_mut()
                .filter(|c| c.status == TaskStatus::Pending)
            {
                c.status = TaskStatus::Skipped;
                c.error = Some(format!("not run: {why}"));
            }
            return self.advance(idx, flight);
        }
        t.status = TaskStatus::Skipped;
        t.over_budget = self.stopped.is_none();
        t.error = Some(format!("not run: {why}"));
        Ok(())
    }

    /// No candidate of task `idx` passed: it fails with every candidate's reason.
    fn none_passed(&mut self, idx: TaskIdx) -> anyhow::Result<()> {
        let t = self.report.task_mut(idx);
        let reasons: Vec<String> = t
            .candidates
            .iter()
            .filter(|c| c.finished())
            .map(|c| {
                format!(
                    "c{}: {}",
                    c.number,
                    c.error.as_deref().unwrap_or(c.status.as_str())
                )
            })
            .collect();
        let all_timed_out = t
            .candidates
            .iter()
            .filter(|c| c.finished())
            .all(|c| c.status == TaskStatus::Timeout);
        t.status = match all_timed_out {
            true => TaskStatus::Timeout,
            false => TaskStatus::Failed,
        };
        t.error = Some(format!("no candidate passed: {}", reasons.join("; ")));
        let last = t.candidates.iter().rev().find(|c| c.finished());
        t.log = last.and_then(|c| c.log.clone());
        self.finished_event(idx);
        self.save();
        Ok(())
    }

    /// Asks the judge to pick among `finalists`, in a task of its own.
    fn ask_judge(
        &mut self,
        idx: TaskIdx,
        finalists: Vec<CandidateNo>,
        steps: Vec<String>,
        flight: &mut Flight,
    ) -> anyhow::Result<()> {
        let llm = self.shared.judge.clone().context("no --judge-model")?;
        let repo = git2::Repository::open(&self.shared.common_dir)?;
        let t = self.report.task(idx);
        let mut shown = Vec::new();
        for k in finalists {
            let c = t
                .candidates
                .iter()
                .find(|c| c.number == k)
                .context("no such finalist")?;
            let (Some(start), Some(commit)) = (c.start, c.commit) else {
                continue;
            };
            shown.push((k, select::patch(&repo, start, commit)?));
        }
        let instruction = self.shared.plan.instruction_for(idx).into_owned();
        let task = t.id.clone();
        crate::orchestrator::step(&self.shared, &task, "judging candidates");
        let judging = async move {
            let judged = judge::judge(&llm, &task, &instruction, &shown).await;
            Ending::Judged(JudgeEnd { idx, judged, steps })
        };
        flight.spawn_other(idx, judging);
        Ok(())
    }

    /// What the judge said: its pick wins; with no usable answer, the lowest number.
    pub(super) fn on_judged(&mut self, end: JudgeEnd, flight: &mut Flight) -> anyhow::Result<()> {
        let JudgeEnd {
            idx,
            judged,
            mut steps,
        } = end;
        let t = self.report.task_mut(idx);
        t.add_spend(judged.tokens, judged.cost_usd, 1);
        let finalist = |k: CandidateNo| t.candidates.iter().any(|c| c.number == k && c.passed());
        let (winner, by) = match judged.choice {
            Ok((k, reason)) if finalist(k) => {
                steps.push(format!("judge: c{k}: {reason}"));
                (k, SelectedBy::Judge)
            }
            Ok((k, _)) => {
                steps.push(format!(
                    "judge named c{k}, not a finalist; c1 rule: the lowest number"
                ));
                (self.lowest_passing(idx)?, SelectedBy::Order)
            }
            Err(why) => {
                steps.push(format!("judge: {why}; the lowest number"));
                (self.lowest_passing(idx)?, SelectedBy::Order)
            }
        };
        self.decided(idx, Selection { winner, by, steps }, flight)
    }

    fn lowest_passing(&self, idx: TaskIdx) -> anyhow::Result<CandidateNo> {
        let t = self.report.task(idx);
        t.candidates
            .iter()
            .find(|c| c.passed())
            .map(|c| c.number)
            .context("no candidate passed")
    }

    /// The winner of task `idx` is chosen: the task takes its change, and merges it.
    fn decided(
        &mut self,
        idx: TaskIdx,
        selection: Selection,
        flight: &mut Flight,
    ) -> anyhow::Result<()> {
        let run = self.shared.plan.run_id.clone();
        let t = self.report.task_mut(idx);
        let winner = selection.winner;
        let c = t
            .candidates
            .iter()
            .find(|c| c.number == winner)
            .context("the winner is not a candidate")?
            .clone();
        self.shared.sink.emit(Event::CandidateChosen {
            task: t.id.clone(),
            candidate: winner.get(),
            by: selection.by,
            steps: selection.steps.clone(),
        });
        t.selection = Some(selection);
        // With --tries, those after the winner were never needed.
        t.candidates.retain(|c| c.status != TaskStatus::Pending);
        t.name_branches(&run);
        t.status = c.status;
        t.commit = c.commit;
        t.start = c.start;
        t.changed_files = c.changed_files.clone();
        t.error = None;
        t.log = c.log.clone();
        self.finished_event(idx);
        let t = self.report.task_mut(idx);
        if let (TaskStatus::Done, Some(tip), Some(start)) = (t.status, t.commit, t.start) {
            if let Some(reason) = &self.stopped {
                super::record::not_merged(t, reason);
            } else if self.mode.merges() {
                flight.merge(MergeJob {
                    idx,
                    start,
                    tip,
                    resolved: None,
                    changes: None,
                    last_for_now: false,
                })?;
            }
        }
        self.save();
        Ok(())
    }

    /// Says that task `idx` finished, with its candidates' spend.
    fn finished_event(&self, idx: TaskIdx) {
        let t = self.report.task(idx);
        self.shared.sink.emit(Event::TaskFinished {
            task: t.id.clone(),
            status: t.status,
            changed_files: t.changed_files.clone(),
            duration_ms: t.duration_ms,
            error: t.error.clone(),
            tokens: t.tokens.prompt + t.tokens.completion,
            cost_usd: t.cost_usd,
        });
    }

    /// The run stops starting workers: the candidates waiting to start go, and their tasks
    /// settle ([`Self::park`]).
    pub(super) fn drain_candidates(&mut self, flight: &mut Flight) -> anyhow::Result<()> {
        let mut tasks: Vec<TaskIdx> = flight.candidates.drain(..).map(|(i, _)| i).collect();
        tasks.dedup();
        for idx in tasks {
            let running = self
                .report
                .task(idx)
                .candidates
                .iter()
                .any(|c| c.status == TaskStatus::Running);
            if !running {
                self.park(idx, flight)?;
            }
        }
        Ok(())
    }
}
