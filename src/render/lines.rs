//! One plain line per event worth one: what a log, a pipe and `--quiet`-less CI output show,
//! and what the live view prints above its bars.

use swarm_engine::app::events::{CheckRole, Event, NetworkVerdict};
use swarm_engine::app::report::TaskStatus;

/// One line about `event` for a log, or `None` for events not worth a line.
pub(super) fn plain_text(event: &Event) -> Option<String> {
    task_line(event)
        .or_else(|| candidate_line(event))
        .or_else(|| group_line(event))
        .or_else(|| run_line(event))
}

/// A task's line: started, finished, merged, in conflict.
fn task_line(event: &Event) -> Option<String> {
    let line = match event {
        Event::TaskStarted {
            task,
            files,
            attempt,
            candidate,
            ..
        } => {
            let files: Vec<String> = files.iter().map(|f| f.display()).collect();
            let retry = match (attempt, candidate) {
                (_, Some(k)) => format!(" (candidate {k})"),
                (2.., None) => format!(" (attempt {attempt})"),
                _ => String::new(),
            };
            format!("started   {task}: {}{retry}", files.join(", "))
        }
        Event::TaskFinished {
            task,
            status,
            error,
            changed_files,
            ..
        } => match status {
            TaskStatus::Done => {
                format!("finished  {task}: {} file(s) changed", changed_files.len())
            }
            other => format!(
                "{:<9} {task}{}",
                other.as_str(),
                error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        },
        Event::Merged { task, commit, .. } => format!("merged    {task} ({})", &commit[..10]),
        Event::Conflict {
            task,
            paths,
            action,
        } => {
            let list: Vec<String> = paths.iter().map(|p| p.display()).collect();
            format!(
                "conflict  {task} in {}: {}",
                list.join(", "),
                action.as_str()
            )
        }
        Event::GatewayRefused {
            task,
            request,
            status,
            reason,
        } => format!("refused   {task}: {request} ({status}): {reason}"),
        Event::MergeDriver {
            task,
            path,
            driver,
            merged,
            error,
        } => match (merged, error) {
            (true, _) => format!("driver    {task}: {driver} merged {}", path.display()),
            (false, error) => format!(
                "driver    {task}: {driver} did not merge {}: {}",
                path.display(),
                error.as_deref().unwrap_or("a conflict")
            ),
        },
        _ => return None,
    };
    Some(line)
}

/// A candidate's line (`--tries`, `--best-of`): how it ended, which won.
fn candidate_line(event: &Event) -> Option<String> {
    let line = match event {
        Event::CandidateFinished {
            task,
            candidate,
            status,
            error,
            insertions,
            deletions,
            cost_usd,
        } => format!(
            "candidate {task} c{candidate}: {} (+{insertions} -{deletions}{}){}",
            status.as_str(),
            match *cost_usd > 0.0 {
                true => format!(", ${cost_usd:.2}"),
                false => String::new(),
            },
            error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
        Event::CandidateChosen {
            task,
            candidate,
            by,
            ..
        } => format!("chose     {task} c{candidate} ({})", by.as_str()),
        _ => return None,
    };
    Some(line)
}

/// A process that runs several tasks: started, split.
fn group_line(event: &Event) -> Option<String> {
    let line = match event {
        Event::GroupStarted { tasks, .. } => format!(
            "process   for {} tasks, each committed and merged on its own: {}",
            tasks.len(),
            short_list(tasks)
        ),
        Event::GroupSplit {
            tasks,
            alone,
            error,
            log,
            ..
        } => format!(
            "split     the process for {} tasks ({}) did not succeed: {error}; they run again, \
             {}{}",
            tasks.len(),
            short_list(tasks),
            match alone.len() {
                0 => "in two halves".to_string(),
                n => format!(
                    "{} alone (named in its output), the others together",
                    match n {
                        1 => alone[0].to_string(),
                        n => format!("{n} tasks"),
                    }
                ),
            },
            log.as_ref()
                .map(|l| format!(" (log: {l})"))
                .unwrap_or_default()
        ),
        _ => return None,
    };
    Some(line)
}

/// What concerns the whole run: warnings, the target, checks, exclusions, the network.
fn run_line(event: &Event) -> Option<String> {
    let line = match event {
        Event::Warning { task, message } => format!(
            "warning{}: {message}",
            task.as_ref().map(|t| format!(" {t}")).unwrap_or_default()
        ),
        Event::TargetNotUpdated {
            into,
            result_branch,
            reason,
            ..
        } => format!("{into} not updated: {reason}; the result is on branch {result_branch}"),
        Event::VerifyMerged {
            commit,
            role,
            passed,
            runs,
        } => format!(
            "verify-merged #{runs} on {} ({}): {}",
            &commit[..10],
            match role {
                CheckRole::Result => "merged result",
                CheckRole::Base => "the base, to tell a broken check from a broken task",
                CheckRole::Bisect => "bisecting the merges",
            },
            if *passed { "passed" } else { "FAILED" }
        ),
        Event::Excluded { task, reason } => format!("excluded  {task}: {reason}"),
        Event::Network {
            task,
            domain,
            port,
            verdict: NetworkVerdict::Refused,
        } => format!(
            "refused   {}network access to {domain}:{port} (allow it with --allow-domain {domain})",
            task.as_ref().map(|t| format!("{t}: ")).unwrap_or_default()
        ),
        _ => return None,
    };
    Some(line)
}

/// The first and last of `tasks`.
fn short_list(tasks: &[swarm_engine::app::ids::TaskId]) -> String {
    match tasks {
        [] => String::new(),
        [one] => one.to_string(),
        [first, .., last] => format!("{first} … {last}"),
    }
}
