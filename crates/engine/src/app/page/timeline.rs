//! Where a run's time went: each task's attempts and candidates as bars on the worker slots,
//! read from the run's `events.jsonl` (each line stamped with its time).

use std::collections::HashMap;
use std::io::BufRead as _;
use std::path::Path;

use serde::Serialize;

use crate::report::Report;

/// One bar: a task's attempt or candidate, from its start to its end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Segment {
    /// The task's index in the report.
    pub task: usize,
    /// The worker slot it ran in (bars that overlap in time get different slots).
    pub slot: usize,
    /// From the first event of the run, in milliseconds.
    pub start_ms: u64,
    pub end_ms: u64,
    /// How the attempt ended (`failed`, `done`…); `running` when the log ends first.
    pub status: String,
    pub attempt: u32,
    /// The candidate's number (`--tries`, `--best-of`), 0 without.
    pub candidate: u32,
}

/// The bars, on how many slots, over how long.
#[derive(Debug, Default, Serialize)]
pub(super) struct Timeline {
    pub slots: usize,
    pub span_ms: u64,
    pub segments: Vec<Segment>,
}

/// The timeline of `report`'s run from its event log (empty when there is none). A line that
/// is not an event swarm writes is passed over: the log is read, never trusted.
pub(super) fn read(events: &Path, report: &Report) -> std::io::Result<Timeline> {
    let file = match std::fs::File::open(events) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Timeline::default()),
        Err(e) => return Err(e),
    };
    let index: HashMap<&str, usize> = report
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(&line?) {
            lines.push(value);
        }
    }
    Ok(from_events(&lines, &index))
}

/// The bars the events describe, laid on slots.
fn from_events(lines: &[serde_json::Value], index: &HashMap<&str, usize>) -> Timeline {
    let Some(first) = lines.iter().find_map(|l| l["ts"].as_f64()) else {
        return Timeline::default();
    };
    let at = |line: &serde_json::Value| {
        let ts = line["ts"].as_f64().unwrap_or(first);
        ((ts - first).max(0.0) * 1000.0) as u64
    };
    let mut open: HashMap<(usize, u32), (u64, u32)> = HashMap::new();
    let mut segments = Vec::new();
    let mut last = 0;
    for line in lines {
        let now = at(line);
        last = last.max(now);
        let Some(task) = line["task"].as_str().and_then(|t| index.get(t)).copied() else {
            continue;
        };
        let candidate = line["candidate"].as_u64().unwrap_or(0) as u32;
        let status = line["status"].as_str().unwrap_or("running").to_string();
        match line["kind"].as_str() {
            Some("task_started") => {
                let attempt = line["attempt"].as_u64().unwrap_or(1) as u32;
                open.insert((task, candidate), (now, attempt));
            }
            Some("task_finished" | "candidate_finished") => {
                if let Some((start, attempt)) = open.remove(&(task, candidate)) {
                    segments.push(segment(task, start, now, status, attempt, candidate));
                }
            }
            _ => {}
        }
    }
    // Whatever the log leaves open ran until its last line (a kill, a Ctrl-C).
    for ((task, candidate), (start, attempt)) in open {
        segments.push(segment(
            task,
            start,
            last,
            "running".into(),
            attempt,
            candidate,
        ));
    }
    let slots = lay_on_slots(&mut segments);
    Timeline {
        slots,
        span_ms: last,
        segments,
    }
}

fn segment(
    task: usize,
    start: u64,
    end: u64,
    status: String,
    attempt: u32,
    candidate: u32,
) -> Segment {
    Segment {
        task,
        slot: 0,
        start_ms: start,
        end_ms: end.max(start),
        status,
        attempt,
        candidate,
    }
}

/// Gives each bar the first slot free at its start (bars sorted by start), and says how many
/// slots that took: as many as ran at once at the busiest moment.
fn lay_on_slots(segments: &mut [Segment]) -> usize {
    segments.sort_by_key(|s| (s.start_ms, s.end_ms, s.task));
    let mut free_at: Vec<u64> = Vec::new();
    for s in segments.iter_mut() {
        s.slot = match free_at.iter().position(|end| *end <= s.start_ms) {
            Some(slot) => slot,
            None => {
                free_at.push(0);
                free_at.len() - 1
            }
        };
        free_at[s.slot] = s.end_ms;
    }
    free_at.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn overlapping_attempts_take_their_own_slots_and_open_ones_end_with_the_log() {
        let index: HashMap<&str, usize> = [("a", 0), ("b", 1), ("c", 2)].into_iter().collect();
        let lines = vec![
            json!({"ts": 100.0, "kind": "run_started"}),
            json!({"ts": 100.0, "kind": "task_started", "task": "a", "attempt": 1}),
            json!({"ts": 100.5, "kind": "task_started", "task": "b", "attempt": 1}),
            json!({"ts": 101.0, "kind": "task_finished", "task": "a", "status": "failed"}),
            json!({"ts": 101.0, "kind": "task_started", "task": "c", "attempt": 2}),
            json!({"ts": 102.0, "kind": "task_finished", "task": "b", "status": "done"}),
            json!({"ts": 103.0, "kind": "task_started", "task": "nobody", "attempt": 1}),
            json!({"ts": 104.0, "kind": "run_finished"}),
        ];
        let t = from_events(&lines, &index);
        assert_eq!((t.slots, t.span_ms), (2, 4000));
        let got: Vec<(usize, usize, u64, u64, &str, u32)> = t
            .segments
            .iter()
            .map(|s| {
                (
                    s.task,
                    s.slot,
                    s.start_ms,
                    s.end_ms,
                    s.status.as_str(),
                    s.attempt,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, 0, 0, 1000, "failed", 1),
                (1, 1, 500, 2000, "done", 1),
                (2, 0, 1000, 4000, "running", 2),
            ]
        );
    }
}
