//! The unsuccessful tasks of a run grouped by why: one group per status and shape of error
//! (the error with the task's own files and id taken out), with how many, the first files,
//! and the next step: what fixes it, and the `swarm resume` that runs them again.

use super::{Report, TaskReport, TaskStatus};

/// Tasks that failed the same way.
pub struct Group<'a> {
    pub status: TaskStatus,
    /// The error, with `<file>` for the task's own file names.
    pub reason: String,
    pub tasks: Vec<&'a TaskReport>,
}

/// The unsuccessful tasks (not pending, running or finished-unmerged), grouped, the largest
/// group first (then by status, then reason).
pub fn groups(report: &Report) -> Vec<Group<'_>> {
    let mut by_reason: std::collections::BTreeMap<(&str, String), Vec<&TaskReport>> =
        Default::default();
    for task in report.tasks.iter().filter(|t| unsuccessful(t)) {
        let key = (task.status.as_str(), shape(task));
        by_reason.entry(key).or_default().push(task);
    }
    let mut groups: Vec<Group<'_>> = by_reason
        .into_iter()
        .map(|((_, reason), tasks)| Group {
            status: tasks[0].status,
            reason,
            tasks,
        })
        .collect();
    groups.sort_by(|a, b| {
        b.tasks
            .len()
            .cmp(&a.tasks.len())
            .then(a.status.as_str().cmp(b.status.as_str()))
            .then(a.reason.cmp(&b.reason))
    });
    groups
}

/// Not interrupted either: the summary's `finish it with: swarm resume RUN` is their step.
fn unsuccessful(task: &TaskReport) -> bool {
    !task.status.is_success()
        && !matches!(
            task.status,
            TaskStatus::Pending | TaskStatus::Running | TaskStatus::Done | TaskStatus::Interrupted
        )
}

/// The task's error with its own file names and id replaced, so that tasks failing the same
/// way read the same.
fn shape(task: &TaskReport) -> String {
    let mut reason = task
        .error
        .clone()
        .unwrap_or_else(|| match task.over_budget {
            true => "the run's budget was spent".to_string(),
            false => task.status.as_str().replace('_', " "),
        });
    reason = reason.replace(task.id.as_str(), "<task>");
    // Longest first, so that `a/b.py` is not half replaced by `b.py`.
    let mut files: Vec<String> = task.files.iter().map(|f| f.display()).collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.len()));
    for file in files.iter().filter(|f| !f.is_empty()) {
        reason = reason.replace(file.as_str(), "<file>");
    }
    reason
}

/// The group's files, the first three and how many more.
pub fn first_files(group: &Group<'_>) -> String {
    const SHOWN: usize = 3;
    let files: Vec<String> = group
        .tasks
        .iter()
        .flat_map(|t| t.files.iter().map(|f| f.display()))
        .collect();
    let mut shown = files
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if files.len() > SHOWN {
        shown.push_str(&format!(" and {} more", files.len() - SHOWN));
    }
    shown
}

/// What to do about the group: the fix, and the command that runs its tasks again.
pub fn next_step(group: &Group<'_>, run: &str) -> String {
    let over_budget = group.tasks.iter().any(|t| t.over_budget);
    let reviewed = group.tasks.iter().all(|t| t.review_skipped);
    match group.status {
        TaskStatus::Skipped if reviewed => {
            format!(
                "none: skipped in review, their branches kept (swarm diff {run} TASK shows one)"
            )
        }
        TaskStatus::Failed if group.reason.contains("--verify") => {
            format!("fix the code or the check, then: swarm resume {run} --failed [--verify CMD]")
        }
        TaskStatus::Failed => {
            format!("fix the command, then: swarm resume {run} --failed --exec 'FIXED COMMAND'")
        }
        TaskStatus::Skipped if over_budget => {
            format!("swarm resume {run} --max-cost MORE (or --max-tokens MORE) runs them")
        }
        TaskStatus::Conflict => {
            format!("swarm resume {run} --failed runs them again on the merged result")
        }
        _ => format!("swarm resume {run} --failed runs them again"),
    }
}
