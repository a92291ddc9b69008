//! What a run or a task changed, as data for the command line to show (`swarm diff`, the
//! diffs of `--dry-run` and `--review`): each changed file with both contents.

use std::path::Path;

use git2::{Oid, Repository};

use super::error::{AppError, AppResult};
use super::runs;
use crate::git::repo;
use crate::ids::RunSelector;
use crate::report::{TaskReport, TaskStatus};
use crate::state::RunDir;

/// What changed between two commits, as git prints it: the patch of `git diff -M` and the
/// diffstat of `git diff --stat -M`, both made by libgit2, so that they read as git's do.
pub struct Changes {
    pub patch: Vec<u8>,
    pub stat: String,
    /// How many files changed.
    pub files: usize,
}

/// What `swarm diff` shows.
pub enum Shown {
    /// Nothing to show, and why.
    Nothing(String),
    Changes(Changes),
    /// A run that merged nothing (a dry run): each finished task's change, under a title.
    Tasks(Vec<(String, Changes)>),
}

/// The diff of run `wanted` (from where its target started to its result), or of one of its
/// tasks (a task id or a prefix of one: from its start commit to its commit).
///
/// `candidate`: with a task, what its candidate K changed (`--tries`, `--best-of`), winner or
/// not.
pub fn of_run(
    cwd: &Path,
    wanted: &RunSelector,
    task: Option<&str>,
    candidate: Option<u32>,
) -> AppResult<Shown> {
    let info = repo::discover(cwd)?;
    let id = runs::resolve(&info.common_dir, wanted)?;
    let report = RunDir::new(&info.common_dir, &id).load_report()?;
    let repo = Repository::open(&info.common_dir)?;
    let Some(wanted) = task else {
        return match &report.result {
            Some(result) => Ok(Shown::Changes(between(&repo, report.into_start, *result)?)),
            None => unmerged_tasks(&repo, &report),
        };
    };
    let matching: Vec<&TaskReport> = report
        .tasks
        .iter()
        .filter(|t| t.id.as_str().starts_with(wanted))
        .collect();
    let task = match matching.as_slice() {
        [one] => *one,
        [] => {
            return Err(AppError::NoSuchTask {
                task: wanted.to_string(),
                run: id,
            });
        }
        _ => return Err(AppError::AmbiguousTask(wanted.to_string())),
    };
    if let Some(k) = candidate {
        return of_candidate(&repo, task, k);
    }
    match of_task(&repo, task)? {
        Some(changes) => Ok(Shown::Changes(changes)),
        None => Ok(Shown::Nothing(format!(
            "task {} changed nothing ({})",
            task.id,
            task.status.as_str()
        ))),
    }
}

/// A run that merged nothing: what its finished tasks changed, each under a title (`# task
/// ID (branch)`); or why there is nothing.
fn unmerged_tasks(repo: &Repository, report: &crate::report::Report) -> AppResult<Shown> {
    let mut shown = Vec::new();
    for task in report.tasks.iter().filter(|t| t.status == TaskStatus::Done) {
        if let Some(changes) = of_task(repo, task)? {
            shown.push((format!("# task {} ({})", task.id, task.branch), changes));
        }
    }
    Ok(match shown.is_empty() {
        true => Shown::Nothing(format!(
            "run {} merged nothing, and none of its tasks has a change waiting to merge",
            report.run_id
        )),
        false => Shown::Tasks(shown),
    })
}

/// What candidate `k` of `task` changed.
fn of_candidate(repo: &Repository, task: &TaskReport, k: u32) -> AppResult<Shown> {
    let Some(c) = task.candidates.iter().find(|c| c.number.get() == k) else {
        let have: Vec<String> = task
            .candidates
            .iter()
            .map(|c| c.number.to_string())
            .collect();
        return Err(AppError::NoSuchCandidate {
            task: task.id.to_string(),
            candidate: k,
            have: have.join(", "),
        });
    };
    Ok(match (c.start, c.commit) {
        (Some(start), Some(commit)) => Shown::Changes(between(repo, start, commit)?),
        _ => Shown::Nothing(format!(
            "candidate {k} of task {} changed nothing ({})",
            task.id,
            c.status.as_str()
        )),
    })
}

/// What a task changed (from its start commit to its commit); `None` when it has no commit.
fn of_task(repo: &Repository, task: &TaskReport) -> AppResult<Option<Changes>> {
    match (&task.start, &task.commit) {
        (Some(start), Some(commit)) => Ok(Some(between(repo, *start, *commit)?)),
        _ => Ok(None),
    }
}

/// Diffs of the tasks of one repository, one at a time (for `--dry-run` and `--review`).
pub struct Differ {
    repo: Repository,
}

impl Differ {
    pub fn open(common_dir: &Path) -> AppResult<Self> {
        Ok(Self {
            repo: Repository::open(common_dir)?,
        })
    }

    /// What `task` changed; `None` when it has no commit.
    pub fn task(&self, task: &TaskReport) -> AppResult<Option<Changes>> {
        of_task(&self.repo, task)
    }
}

/// What differs between two commits, as git prints it.
pub fn between(repo: &Repository, old: Oid, new: Oid) -> AppResult<Changes> {
    let tree = |oid: Oid| -> AppResult<git2::Tree<'_>> {
        let commit = repo.find_commit(oid).map_err(|e| {
            anyhow::anyhow!("commit {oid} is gone (was it garbage-collected?): {e}")
        })?;
        Ok(commit.tree()?)
    };
    let (old_tree, new_tree) = (tree(old)?, tree(new)?);
    let mut diff = repo.diff_tree_to_tree(Some(&old_tree), Some(&new_tree), None)?;
    // Renames as git shows them (a file removed and one added with mostly the same content).
    diff.find_similar(Some(git2::DiffFindOptions::new().renames(true)))?;
    let mut patch = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        // Lines of a hunk come without their sign; headers with all of theirs.
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin() as u8);
        }
        patch.extend_from_slice(line.content());
        true
    })?;
    let stats = diff.stats()?;
    let stat = stats
        .to_buf(git2::DiffStatsFormat::FULL, 80)?
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok(Changes {
        patch,
        stat,
        files: stats.files_changed(),
    })
}
