//! Choosing a task's winner among its candidates (docs/USAGE.md, "Several candidates per
//! task"), each step in words:
//!
//! 1. it passed: finished, stayed in scope, `--verify` passed;
//! 2. agreement: the change most candidates made, compared normalised (line endings and
//!    trailing blanks ignored), as the file contents it leaves (no change is a change all
//!    those that made none agree on; among changes made equally often, a change wins over
//!    none);
//! 3. size: the smaller change (lines added and removed);
//! 4. with `--judge-model`, the model picks among those still tied; else the lowest number.

use std::collections::BTreeMap;

use git2::{Oid, Repository};

use crate::ids::CandidateNo;
use crate::report::{CandidateReport, SelectedBy, Selection, TaskStatus};

/// What a candidate's change is, for comparing: each path with the normalised content it
/// leaves there (`None`: deleted).
type Key = Vec<(Vec<u8>, Option<Oid>)>;

/// What the selection says, so far.
#[derive(Debug)]
pub(super) enum Choice {
    Winner(Selection),
    /// Still tied after size: the judge picks among these.
    Judge {
        finalists: Vec<CandidateNo>,
        steps: Vec<String>,
    },
    /// Every candidate finished and none passed.
    NonePassed,
    /// Candidates still to finish could change it.
    Open,
}

/// A candidate's change measured: its key and its size.
struct Measured {
    number: CandidateNo,
    key: Key,
    lines: usize,
}

/// Lines added and removed between `start` and `commit`.
pub(super) fn diffstat(
    repo: &Repository,
    start: Oid,
    commit: Oid,
) -> Result<(usize, usize), git2::Error> {
    let diff = diff(repo, start, commit)?;
    let stats = diff.stats()?;
    Ok((stats.insertions(), stats.deletions()))
}

/// The patch between `start` and `commit`, as text (for the judge).
pub(super) fn patch(repo: &Repository, start: Oid, commit: Oid) -> Result<String, git2::Error> {
    let diff = diff(repo, start, commit)?;
    let mut text = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            text.push(line.origin() as u8);
        }
        text.extend_from_slice(line.content());
        true
    })?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

fn diff(repo: &Repository, start: Oid, commit: Oid) -> Result<git2::Diff<'_>, git2::Error> {
    let old = repo.find_commit(start)?.tree()?;
    let new = repo.find_commit(commit)?.tree()?;
    repo.diff_tree_to_tree(Some(&old), Some(&new), None)
}

/// The change between `start` and `commit` as compared: every path it touches with the
/// content it leaves, normalised.
fn key(repo: &Repository, start: Oid, commit: Oid) -> Result<Key, git2::Error> {
    let diff = diff(repo, start, commit)?;
    let mut key = Vec::new();
    for delta in diff.deltas() {
        let new = delta.new_file();
        let path = new
            .path_bytes()
            .or(delta.old_file().path_bytes())
            .unwrap_or_default()
            .to_vec();
        let content = match delta.status() {
            git2::Delta::Deleted => None,
            _ => {
                let blob = repo.find_blob(new.id())?;
                Some(Oid::hash_object(
                    git2::ObjectType::Blob,
                    &normalised(blob.content()),
                )?)
            }
        };
        key.push((path, content));
    }
    key.sort();
    Ok(key)
}

/// `text` with CRLF as LF, blanks at line ends and blank lines at the end left out.
fn normalised(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for line in text.split(|&b| b == b'\n') {
        let end = line
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        out.extend_from_slice(&line[..end]);
        out.push(b'\n');
    }
    while out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

fn names(numbers: impl IntoIterator<Item = CandidateNo>) -> String {
    let names: Vec<String> = numbers.into_iter().map(|k| format!("c{k}")).collect();
    names.join(", ")
}

/// The selection among `candidates`, `unfinished` of them still to end (running or waiting
/// to start); `judge`: is there a `--judge-model`?
pub(super) fn choose(
    repo: &Repository,
    candidates: &[CandidateReport],
    unfinished: usize,
    judge: bool,
) -> Result<Choice, git2::Error> {
    let passing: Vec<&CandidateReport> = candidates.iter().filter(|c| c.passed()).collect();
    let failed: Vec<String> = candidates
        .iter()
        .filter(|c| c.finished() && !c.passed())
        .map(|c| format!("c{} {}", c.number, c.status.as_str()))
        .collect();
    let steps = vec![match failed.is_empty() {
        true => format!("passed: {}", names(passing.iter().map(|c| c.number))),
        false => format!(
            "passed: {} (not: {})",
            match passing.is_empty() {
                true => "none".to_string(),
                false => names(passing.iter().map(|c| c.number)),
            },
            failed.join(", ")
        ),
    }];
    if unfinished == 0 {
        match passing.as_slice() {
            [] => return Ok(Choice::NonePassed),
            [only] => {
                return Ok(Choice::Winner(won(
                    only.number,
                    SelectedBy::OnlyPassing,
                    steps,
                )));
            }
            _ => {}
        }
    }
    // A candidate that changed nothing has the empty change: it agrees with those that
    // changed nothing too.
    let measured = passing
        .iter()
        .map(|c| {
            let key = match (c.status, c.start, c.commit) {
                (TaskStatus::Done, Some(start), Some(commit)) => key(repo, start, commit)?,
                _ => Key::new(),
            };
            Ok(Measured {
                number: c.number,
                key,
                lines: c.insertions + c.deletions,
            })
        })
        .collect::<Result<Vec<_>, git2::Error>>()?;
    Ok(agree(measured, unfinished, judge, steps))
}

/// Steps 2 to 4 among the candidates that passed.
fn agree(
    measured: Vec<Measured>,
    unfinished: usize,
    judge: bool,
    mut steps: Vec<String>,
) -> Choice {
    if measured.is_empty() {
        // None passed yet; some are still to end.
        return Choice::Open;
    }
    let mut groups: BTreeMap<&Key, Vec<&Measured>> = BTreeMap::new();
    for m in &measured {
        groups.entry(&m.key).or_default().push(m);
    }
    let mut groups: Vec<Vec<&Measured>> = groups.into_values().collect();
    // Largest first; among equals, the one with the lowest number first.
    groups.sort_by_key(|g| (std::cmp::Reverse(g.len()), g[0].number));
    let top = groups[0].len();
    let second = groups.get(1).map_or(0, Vec::len);
    if unfinished > 0 {
        // Decided early only when the others cannot catch up.
        if top >= 2 && top > second + unfinished {
            steps.push(format!(
                "agreement: {}; the others can no longer outnumber them",
                agreed(&groups[0])
            ));
            return Choice::Winner(won(groups[0][0].number, SelectedBy::Agreement, steps));
        }
        return Choice::Open;
    }
    if top >= 2 && top > second {
        steps.push(format!("agreement: {}", agreed(&groups[0])));
        return Choice::Winner(won(groups[0][0].number, SelectedBy::Agreement, steps));
    }
    // Among changes made equally often, a change wins over none.
    let mut tied: Vec<&Measured> = groups
        .iter()
        .filter(|g| g.len() == top)
        .map(|g| g[0])
        .collect();
    let mut step = match top {
        1 => "agreement: no two made the same change".to_string(),
        n => format!(
            "agreement: tied, {n} candidates on each of {} changes",
            tied.len()
        ),
    };
    if tied.iter().any(|m| m.key.is_empty()) && tied.iter().any(|m| !m.key.is_empty()) {
        tied.retain(|m| !m.key.is_empty());
        step.push_str("; a change wins over none");
    }
    steps.push(step);
    let least = tied.iter().map(|m| m.lines).min().unwrap_or(0);
    let smallest: Vec<CandidateNo> = tied
        .iter()
        .filter(|m| m.lines == least)
        .map(|m| m.number)
        .collect();
    if let [one] = smallest[..] {
        steps.push(format!(
            "size: c{one} is the smallest change ({least} line(s))"
        ));
        return Choice::Winner(won(one, SelectedBy::Size, steps));
    }
    steps.push(format!(
        "size: {} tie at {least} line(s)",
        names(smallest.iter().copied())
    ));
    match judge {
        true => Choice::Judge {
            finalists: smallest,
            steps,
        },
        false => {
            steps.push(format!(
                "no --judge-model: c{} (the lowest number)",
                smallest[0]
            ));
            Choice::Winner(won(smallest[0], SelectedBy::Order, steps))
        }
    }
}

/// What the candidates of `group` agreed on, in words.
fn agreed(group: &[&Measured]) -> String {
    let who = names(group.iter().map(|m| m.number));
    match group[0].key.is_empty() {
        true => format!("{who} changed nothing"),
        false => format!("{who} made the same change"),
    }
}

fn won(winner: CandidateNo, by: SelectedBy, steps: Vec<String>) -> Selection {
    Selection { winner, by, steps }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_ignores_line_endings_and_trailing_blanks_only() {
        assert_eq!(normalised(b"a  \r\nb\n\n"), normalised(b"a\nb"));
        assert_ne!(normalised(b"a\nb"), normalised(b"a\n b"));
    }
}
