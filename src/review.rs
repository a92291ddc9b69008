//! `--review`: each finished task's diff on the terminal, accepted or skipped before anything
//! merges.

use crate::error::CommandResult;
use std::io::Write as _;
use std::path::Path;

use swarm_engine::app::diff::Differ;
use swarm_engine::app::ids::TaskIdx;
use swarm_engine::app::report::{Report, TaskStatus};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Accept,
    Skip,
    /// Accept this task and every one after it without asking.
    AcceptRest,
    Quit,
}

fn parse(key: char) -> Option<Answer> {
    match key {
        'a' | 'y' => Some(Answer::Accept),
        's' | 'n' => Some(Answer::Skip),
        'A' => Some(Answer::AcceptRest),
        'q' => Some(Answer::Quit),
        _ => None,
    }
}

/// Shows each finished, unmerged task of `report` (its diffstat and diff, on stderr) and asks
/// what to do with it. Skipped tasks, and after `quit` every task not yet accepted, become
/// `skipped` (their branches stay); accepted ones stay `done`, for the merge. Returns how
/// many were accepted.
pub(super) fn ask(common_dir: &Path, report: &mut Report, color: bool) -> CommandResult<usize> {
    let differ = Differ::open(common_dir)?;
    let to_review: Vec<TaskIdx> = report
        .indices()
        .filter(|&i| {
            let t = report.task(i);
            t.status == TaskStatus::Done && t.commit.is_some() && t.start.is_some()
        })
        .collect();
    let mut err = std::io::stderr().lock();
    let mut accepted = 0;
    let mut rest: Option<Answer> = None;
    for (n, &idx) in to_review.iter().enumerate() {
        let t = report.task_mut(idx);
        let answer = match rest {
            Some(answer) => answer,
            None => {
                let Some(changes) = differ.task(t)? else {
                    continue;
                };
                let title = format!("task {}/{}: {}", n + 1, to_review.len(), t.id);
                writeln!(err, "\n── {title} ({}) ──", t.branch)?;
                show(&changes, color, &mut err)?;
                // The question names the task again: a long diff scrolled its header away.
                let question =
                    format!("{title}: merge it? [a]ccept, [s]kip, [A]ccept all the rest, [q]uit: ");
                write!(err, "{question}")?;
                err.flush()?;
                loop {
                    let Some(key) = super::confirm::key() else {
                        // End of input: merge nothing more than what was accepted.
                        writeln!(err)?;
                        break Answer::Quit;
                    };
                    if let Some(answer) = parse(key) {
                        writeln!(err, "{key}")?;
                        break answer;
                    }
                    if !matches!(key, '\n' | '\r') {
                        write!(err, "{key}\nplease answer a, s, A or q\n{question}")?;
                        err.flush()?;
                    }
                }
            }
        };
        match answer {
            Answer::Accept => accepted += 1,
            Answer::AcceptRest => {
                accepted += 1;
                rest = Some(Answer::Accept);
            }
            Answer::Skip => {
                t.status = TaskStatus::Skipped;
                t.review_skipped = true;
                t.error = Some("skipped in review; its branch is kept".into());
            }
            Answer::Quit => {
                t.status = TaskStatus::Skipped;
                t.review_skipped = true;
                t.error = Some("not merged: the review stopped (quit)".into());
                rest = Some(Answer::Quit);
            }
        }
    }
    Ok(accepted)
}

/// A task's diffstat and diff: through the pager on a terminal ([`super::pager`]), else on
/// standard error with the questions.
fn show(
    changes: &swarm_engine::app::diff::Changes,
    color: bool,
    err: &mut impl std::io::Write,
) -> std::io::Result<()> {
    if super::pager::wanted() {
        err.flush()?;
        return super::pager::page(|out| {
            super::diff::write_changes(changes, true, color, out)?;
            super::diff::write_changes(changes, false, color, out)
        });
    }
    super::diff::write_changes(changes, true, color, err)?;
    super::diff::write_changes(changes, false, color, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        assert_eq!(parse('a'), Some(Answer::Accept));
        assert_eq!(parse('s'), Some(Answer::Skip));
        assert_eq!(parse('A'), Some(Answer::AcceptRest));
        assert_eq!(parse('q'), Some(Answer::Quit));
        assert_eq!(parse('\n'), None);
        assert_eq!(parse('x'), None);
    }
}
