//! The unsuccessful tasks of a run grouped by why: one group per status and shape of error
//! (the error with the task's own files and id taken out), with how many, the first files,
//! and the next step: what fixes it, and the `swarm resume` that runs them again.

use super::{LAYERS_IN_MEMORY, Report, TaskReport, TaskStatus};
use crate::named::naming_line;

/// How swarm's error for a task that changed files of other tasks (`--scope task`) begins;
/// the files follow, then [`OUT_OF_SCOPE_END`].
pub const OUT_OF_SCOPE: &str = "changed files outside its task: ";
/// How that error ends.
pub const OUT_OF_SCOPE_END: &str = " (pass --scope any to allow)";

/// How swarm's error for a worker that exited with a status not among `--ok-exit-codes`
/// begins; the status follows.
pub const EXITED: &str = "the worker exited with status ";
/// The statuses some codemods exit with when they did their job (pyupgrade 1 when it
/// rewrote a file, `ruff check --fix` 1 when findings are left): a worker that changed files
/// and exited with one is told of `--ok-exit-codes`.
pub const DONE_STATUSES: std::ops::RangeInclusive<i32> = 1..=3;

/// swarm's error for a task that changed `outside`, files of no task of its.
pub fn out_of_scope(outside: &[String]) -> String {
    format!("{OUT_OF_SCOPE}{}{OUT_OF_SCOPE_END}", outside.join(", "))
}

/// Tasks that failed the same way.
pub struct Group<'a> {
    pub status: TaskStatus,
    /// The error, with `<file>` for the task's own file names.
    pub reason: String,
    pub tasks: Vec<&'a TaskReport>,
    /// Did the run keep its layers in memory (the report's `layers`)? Then "no space" may be
    /// the tmpfs's.
    pub layers_in_memory: bool,
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
            layers_in_memory: report.layers.as_deref() == Some(LAYERS_IN_MEMORY),
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
    // The files it changed differ from task to task; why it failed does not.
    if reason.starts_with(OUT_OF_SCOPE) && reason.ends_with(OUT_OF_SCOPE_END) {
        return format!("{OUT_OF_SCOPE}<files>{OUT_OF_SCOPE_END}");
    }
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
        TaskStatus::Failed if let Some(short) = machine_ran_short(group) => {
            let (short, or) = match (short, group.layers_in_memory) {
                ("disk space", true) => (
                    "disk space, or of room in memory where the run kept its layers",
                    " (SWARM_LAYERS_ON_DISK=1 keeps them on the disk)",
                ),
                _ => (short, ""),
            };
            format!(
                "this machine ran short of {short}: free some, or run fewer at once, then: \
                 swarm resume {run} --failed -j N{or}"
            )
        }
        TaskStatus::Failed if group.reason.starts_with(OUT_OF_SCOPE) => format!(
            "let the command change its task's files only, or allow the others: swarm resume \
             {run} --failed --scope any"
        ),
        TaskStatus::Failed if let Some(code) = exited_having_changed(group) => format!(
            "if status {code} is this command's success, let it pass: swarm resume {run} \
             --failed --ok-exit-codes 0,{code}; else fix the command, then: swarm resume {run} \
             --failed --exec 'FIXED COMMAND'"
        ),
        TaskStatus::Failed if named_in_own_output(group) => format!(
            "each one's output points at its own file (one the command cannot handle, or \
             findings it could not fix): fix those files and run the change on them again (a \
             new run, from the fixed commit), or fix the command, then: swarm resume {run} \
             --failed --exec 'FIXED COMMAND'"
        ),
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

/// The status the group's workers exited with, where it is one of [`DONE_STATUSES`] and every
/// one of them changed files.
fn exited_having_changed(group: &Group<'_>) -> Option<i32> {
    let code: i32 = group.reason.strip_prefix(EXITED)?.parse().ok()?;
    let changed = group.tasks.iter().all(|t| !t.changed_files.is_empty());
    (DONE_STATUSES.contains(&code) && changed).then_some(code)
}

/// Did each of the group's workers exit with a failing status, its output naming one of its
/// task's files in a diagnostic, as formatters name a file they cannot parse?
fn named_in_own_output(group: &Group<'_>) -> bool {
    group.reason.starts_with(EXITED)
        && group.tasks.iter().all(|t| {
            let lines: Vec<&str> = t.output_tail.as_deref().unwrap_or("").lines().collect();
            let named = |f: &crate::repo_path::RepoPath| naming_line(&lines, &f.display());
            t.files.iter().any(|f| named(f).is_some())
        })
}

/// What the machine ran short of, when the group's error says so, or the output of each of
/// its tasks' workers does (a file editor that could not write its file: `sed: couldn't
/// flush …: No space left on device`).
fn machine_ran_short(group: &Group<'_>) -> Option<&'static str> {
    ran_short_of(&group.reason).or_else(|| {
        let said = |t: &&TaskReport| t.output_tail.as_deref().and_then(ran_short_of);
        let first = group.tasks.first().and_then(said)?;
        group
            .tasks
            .iter()
            .all(|t| said(t) == Some(first))
            .then_some(first)
    })
}

/// What the machine ran short of, when `reason` is the system's word for it (as the C
/// library says it, in swarm's errors and libgit2's alike): no command fixes that.
fn ran_short_of(reason: &str) -> Option<&'static str> {
    const SHORT: [(&str, &str); 6] = [
        ("Too many open files", "open files"),
        ("Resource temporarily unavailable", "processes"),
        ("Cannot allocate memory", "memory"),
        ("No space left on device", "disk space"),
        ("Disk quota exceeded", "disk quota"),
        ("No file descriptors available", "open files"),
    ];
    SHORT
        .iter()
        .find(|(said, _)| reason.contains(said))
        .map(|(_, short)| *short)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report whose failed tasks have `errors`, as a run writes it.
    fn report(errors: &[&str]) -> Report {
        let tasks: Vec<serde_json::Value> = errors
            .iter()
            .enumerate()
            .map(|(i, error)| {
                serde_json::json!({
                    "id": format!("f{i}-txt-0000000{i}"), "files": [format!("f{i}.txt")],
                    "status": "failed", "branch": "b", "commit": null, "start": null,
                    "merge_commit": null, "attempts": 1, "duration_ms": 1,
                    "tokens": {"prompt": 0, "completion": 0}, "turns": 0,
                    "changed_files": [], "error": error,
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "run_id": "20261130-220225-118f", "instruction": "x",
            "base": "4d1aaf558fc415453bfa86362d723c19408906aa", "into": "main",
            "into_start": "4d1aaf558fc415453bfa86362d723c19408906aa", "state": "finished",
            "started_at": "2026-11-30T22:02:25Z", "tasks": tasks, "result": null,
            "into_updated": false, "result_branch": null, "worktrees": "overlay",
            "per_process": 1, "totals": {"tasks": 4, "merged": 0, "no_change": 0,
            "failed": 4, "conflict": 0, "timeout": 0, "skipped": 0, "interrupted": 0,
            "unfinished": 0, "unmerged": 0, "excluded": 0, "retried": 0,
            "tokens": {"prompt": 0, "completion": 0}, "duration_ms": 1},
        }))
        .unwrap()
    }

    #[test]
    fn a_machine_that_ran_short_is_not_told_to_fix_the_command() {
        // Errors as a run at `-j 500` under a soft limit of 1,024 wrote them.
        let report = report(&[
            "cannot create /r/.git/swarm/runs/R/tasks/f0-txt-00000000/worker.log: Too many \
             open files (os error 24)",
            "cannot create branch swarm/R/f1-txt-00000001: could not open '/r/.git/config': \
             Too many open files; class=Os (2)",
            "cannot start `sh -c x`: Resource temporarily unavailable (os error 11)",
            "the worker exited with status 3",
        ]);
        let steps: Vec<String> = groups(&report).iter().map(|g| next_step(g, "R")).collect();
        let short = |of: &str| {
            format!(
                "this machine ran short of {of}: free some, or run fewer at once, then: swarm \
                 resume R --failed -j N"
            )
        };
        assert_eq!(
            steps.iter().filter(|s| **s == short("open files")).count(),
            2
        );
        assert!(steps.contains(&short("processes")), "{steps:?}");
        // No space: on the disk, or on the tmpfs of a run's layers in memory.
        let full = ["cannot write: No space left on device (os error 28)"];
        let mut full = self::report(&full);
        assert_eq!(next_step(&groups(&full)[0], "R"), short("disk space"));
        full.layers = Some(LAYERS_IN_MEMORY.into());
        // A worker that said so itself, its exit status being all swarm knows.
        let mut said = self::report(&["the worker exited with status 4"]);
        said.tasks[0].output_tail =
            Some("sed: couldn't flush f0.txt: No space left on device\n".into());
        said.layers = Some(LAYERS_IN_MEMORY.into());
        assert_eq!(
            next_step(&groups(&said)[0], "R"),
            next_step(&groups(&full)[0], "R")
        );
        assert_eq!(
            next_step(&groups(&full)[0], "R"),
            "this machine ran short of disk space, or of room in memory where the run kept its \
             layers: free some, or run fewer at once, then: swarm resume R --failed -j N \
             (SWARM_LAYERS_ON_DISK=1 keeps them on the disk)"
        );
        assert!(
            steps.contains(
                &"fix the command, then: swarm resume R --failed --exec 'FIXED COMMAND'"
                    .to_string()
            ),
            "{steps:?}"
        );
    }

    #[test]
    fn tasks_that_changed_other_files_are_one_group_told_of_scope_any() {
        let report = report(&[
            &out_of_scope(&["src/a.rs".into(), "src/b.rs".into()]),
            &out_of_scope(&["src/c.rs".into()]),
            "the worker exited with status 3",
        ]);
        let groups = groups(&report);
        assert_eq!(groups.len(), 2, "one group for both tasks out of scope");
        assert_eq!(groups[0].tasks.len(), 2);
        assert_eq!(first_files(&groups[0]), "f0.txt, f1.txt");
        assert_eq!(
            next_step(&groups[0], "R"),
            "let the command change its task's files only, or allow the others: swarm resume R \
             --failed --scope any"
        );
        assert_eq!(
            next_step(&groups[1], "R"),
            "fix the command, then: swarm resume R --failed --exec 'FIXED COMMAND'"
        );
    }

    #[test]
    fn workers_that_changed_files_and_exited_1_are_told_of_ok_exit_codes() {
        let mut report = report(&[
            "the worker exited with status 1",
            "the worker exited with status 1",
        ]);
        for task in &mut report.tasks {
            task.changed_files = task.files.clone();
        }
        assert_eq!(
            next_step(&groups(&report)[0], "R"),
            "if status 1 is this command's success, let it pass: swarm resume R --failed \
             --ok-exit-codes 0,1; else fix the command, then: swarm resume R --failed --exec \
             'FIXED COMMAND'"
        );
        // One of them changed nothing: the status is not its success.
        report.tasks[1].changed_files.clear();
        assert_eq!(
            next_step(&groups(&report)[0], "R"),
            "fix the command, then: swarm resume R --failed --exec 'FIXED COMMAND'"
        );
    }

    #[test]
    fn files_their_own_output_names_in_an_error_are_told_to_be_fixed() {
        let mut report = report(&[
            "the worker exited with status 123",
            "the worker exited with status 123",
        ]);
        report.tasks[0].output_tail = Some("error: cannot format f0.txt: Cannot parse\n".into());
        report.tasks[1].output_tail = Some(" --> /tmp/wt-3/f1.txt:1:7\n".into());
        assert_eq!(
            next_step(&groups(&report)[0], "R"),
            "each one's output points at its own file (one the command cannot handle, or \
             findings it could not fix): fix those files and run the change on them again (a \
             new run, from the fixed commit), or fix the command, then: swarm resume R \
             --failed --exec 'FIXED COMMAND'"
        );
        // One names another task's file: the command, then.
        report.tasks[1].output_tail = Some("error: cannot format f0.txt\n".into());
        assert_eq!(
            next_step(&groups(&report)[0], "R"),
            "fix the command, then: swarm resume R --failed --exec 'FIXED COMMAND'"
        );
    }
}
