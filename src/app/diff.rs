//! What a run or a task changed, as data for the command line to show (`swarm diff`, the
//! diffs of `--dry-run` and `--review`): each changed file with both contents.

use std::path::Path;

use git2::{Oid, Repository};

use super::error::{AppError, AppResult};
use super::runs;
use crate::git::repo;
use crate::ids::RunSelector;
use crate::report::TaskReport;
use crate::state::RunDir;

/// One changed file.
pub struct FileDiff {
    pub old_path: String,
    pub new_path: String,
    /// git's word for the change (`Added`, `Deleted`, `Modified`…), for `--stat`.
    pub status: String,
    /// File modes; `None` where the file does not exist on that side.
    pub old_mode: Option<u32>,
    pub new_mode: Option<u32>,
    pub old: Vec<u8>,
    pub new: Vec<u8>,
    /// Lines added and removed, or `None` for a binary file.
    pub lines: Option<(usize, usize)>,
}

/// What `swarm diff` shows.
pub enum Shown {
    /// Nothing to show, and why.
    Nothing(String),
    Files(Vec<FileDiff>),
}

/// The diff of run `wanted` (from where its target started to its result), or of one of its
/// tasks (a task id or a prefix of one: from its start commit to its commit).
pub fn of_run(cwd: &Path, wanted: &RunSelector, task: Option<&str>) -> AppResult<Shown> {
    let info = repo::discover(cwd)?;
    let id = runs::resolve(&info.common_dir, wanted)?;
    let report = RunDir::new(&info.common_dir, &id).load_report()?;
    let repo = Repository::open(&info.common_dir)?;
    let Some(wanted) = task else {
        return match &report.result {
            Some(result) => Ok(Shown::Files(between(&repo, report.into_start, *result)?)),
            None => Ok(Shown::Nothing(format!("run {id} merged nothing"))),
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
    match of_task(&repo, task)? {
        Some(files) => Ok(Shown::Files(files)),
        None => Ok(Shown::Nothing(format!(
            "task {} changed nothing ({})",
            task.id,
            task.status.as_str()
        ))),
    }
}

/// What a task changed (from its start commit to its commit); `None` when it has no commit.
fn of_task(repo: &Repository, task: &TaskReport) -> AppResult<Option<Vec<FileDiff>>> {
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
    pub fn task(&self, task: &TaskReport) -> AppResult<Option<Vec<FileDiff>>> {
        of_task(&self.repo, task)
    }
}

/// The files that differ between two commits.
pub fn between(repo: &Repository, old: Oid, new: Oid) -> AppResult<Vec<FileDiff>> {
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
    let mut files = Vec::new();
    for idx in 0..diff.deltas().len() {
        let Some(delta) = diff.get_delta(idx) else {
            continue;
        };
        let (of, nf) = (delta.old_file(), delta.new_file());
        let path = |f: &git2::DiffFile<'_>| {
            f.path_bytes()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default()
        };
        let content = |f: &git2::DiffFile<'_>| -> AppResult<Vec<u8>> {
            match f.id().is_zero() {
                true => Ok(Vec::new()),
                false => Ok(repo.find_blob(f.id())?.content().to_vec()),
            }
        };
        let binary = of.is_binary() || nf.is_binary();
        let lines = match git2::Patch::from_diff(&diff, idx)? {
            Some(patch) if !binary => {
                let (_, added, removed) = patch.line_stats()?;
                Some((added, removed))
            }
            _ => None,
        };
        let mode = |f: &git2::DiffFile<'_>| (!f.id().is_zero()).then(|| u32::from(f.mode()));
        files.push(FileDiff {
            old_path: path(&of),
            new_path: path(&nf),
            status: format!("{:?}", delta.status()),
            old_mode: mode(&of),
            new_mode: mode(&nf),
            old: content(&of)?,
            new: content(&nf)?,
            lines,
        });
    }
    Ok(files)
}
