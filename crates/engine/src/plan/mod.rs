//! Planning: which files, grouped into which tasks.
//!
//! A plan is computed from the tree of the base commit (never the working directory), so the
//! same base, pathspecs and options always give the same tasks with the same ids. It is saved
//! as `plan.json` in the run directory before any worker starts.

mod error;
pub(crate) mod file;
mod pathspec;
mod select;
pub(crate) mod split;

use serde::{Deserialize, Serialize};

pub use error::PlanError;
pub(crate) use pathspec::Pathspec;
pub(crate) use select::{SelectOptions, Selection, select_files};

use crate::ids::{RunId, TaskId, TaskIdx};
use crate::repo_path::RepoPath;
use crate::report::Report;
use crate::settings::Layer;

/// 2: `settings` is the layer of options the run was asked for, resolved by every command
/// (1 stored them resolved).
pub(crate) const PLAN_SCHEMA_VERSION: u32 = 2;

/// Everything needed to run a refactor, with no secret in it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub schema_version: u32,
    pub run_id: RunId,
    pub instruction: String,
    /// The commit every task starts from.
    #[serde(with = "crate::ids::oid_hex")]
    pub base: git2::Oid,
    /// The branch that receives the merges.
    pub into: String,
    pub pathspecs: Vec<String>,
    pub grep: Option<String>,
    /// The run's options as they were asked for (every source combined, nothing resolved):
    /// the worker, its checks, the limits. Each command resolves them again, under its own
    /// flags; a plan file's may not weaken the sandbox.
    pub settings: Layer,
    pub tasks: Vec<Task>,
    /// Tracked files the pathspecs name that are not in any task, with why: `binary`,
    /// `symlink`, `submodule` (swarm's edits are of text files), or the planner's reason
    /// (`--split llm`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub files: Vec<RepoPath>,
    /// What this task in particular does (written by the planner of `--split llm`, or by
    /// hand in a plan file); workers get it after the run's instruction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
}

pub(crate) use crate::report::SkippedFile;

/// `skipped` in words, by reason: "8 binary file(s), 1 symlink(s)".
pub fn describe_skipped(skipped: &[SkippedFile]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for s in skipped {
        let kind = match s.reason.as_str() {
            known @ ("binary" | "symlink" | "submodule") => known,
            _ => "planner",
        };
        match counts.iter_mut().find(|(r, _)| *r == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts
        .iter()
        .map(|(reason, n)| match *reason {
            "binary" => format!("{n} binary file(s)"),
            "symlink" => format!("{n} symlink(s)"),
            "submodule" => format!("{n} submodule(s)"),
            _ => format!("{n} left by the planner"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Plan {
    /// Checks what the types cannot: every file path is one git could store, no file is in
    /// two tasks, no two tasks share an id (and so a branch), and the target is a branch
    /// name outside `swarm/`. `Err` says what is wrong, for a plan read from a file.
    pub fn validate(&self) -> Result<(), String> {
        let mut ids = std::collections::HashSet::new();
        let mut files = std::collections::HashSet::new();
        for task in &self.tasks {
            if !ids.insert(&task.id) {
                return Err(format!("two tasks have the id {}", task.id));
            }
            if task.files.is_empty() {
                return Err(format!("task {} has no files", task.id));
            }
            for f in &task.files {
                f.check().map_err(|e| format!("task {}: {e}", task.id))?;
                if !files.insert(f) {
                    return Err(format!("{f} is in two tasks"));
                }
            }
        }
        let into_ok = git2::Branch::name_is_valid(&self.into).unwrap_or(false)
            && !self.into.starts_with(crate::ids::BRANCH_NAMESPACE);
        if !into_ok {
            return Err(format!(
                "'{}' is not a branch name swarm can merge into",
                self.into
            ));
        }
        Ok(())
    }

    /// Every task's index, in order.
    pub fn indices(&self) -> impl DoubleEndedIterator<Item = TaskIdx> + Clone + use<> {
        TaskIdx::all(self.tasks.len())
    }

    pub fn task(&self, idx: TaskIdx) -> &Task {
        &self.tasks[idx.get()]
    }

    /// Does `report` (read back from disk) describe the run of this plan: its run, its tasks
    /// in its order? Only then do this plan's [`TaskIdx`]es index the report.
    pub fn check_report(&self, report: &Report) -> Result<(), String> {
        if report.run_id != self.run_id {
            return Err(format!(
                "it is the report of run {}, not of run {}",
                report.run_id, self.run_id
            ));
        }
        if report.tasks.len() != self.tasks.len() {
            return Err(format!(
                "it lists {} tasks and the plan {}",
                report.tasks.len(),
                self.tasks.len()
            ));
        }
        match self
            .tasks
            .iter()
            .zip(&report.tasks)
            .position(|(p, r)| p.id != r.id)
        {
            Some(n) => Err(format!(
                "task {} is {} in the plan and {} in the report",
                n + 1,
                self.tasks[n].id,
                report.tasks[n].id
            )),
            None => Ok(()),
        }
    }

    /// The instruction the workers of task `idx` get: the run's, verbatim, then the task's
    /// own if it has one.
    pub fn instruction_for(&self, idx: TaskIdx) -> std::borrow::Cow<'_, str> {
        match self.task(idx).instruction.as_deref() {
            Some(own) if !own.trim().is_empty() => {
                format!("{}\n\nFor this task: {}", self.instruction, own.trim()).into()
            }
            _ => self.instruction.as_str().into(),
        }
    }
}

impl Task {
    /// The task's branch name (without `refs/heads/`).
    pub fn branch(&self, run_id: &RunId) -> String {
        run_id.task_branch(&self.id)
    }
}

/// Groups the selected files (already sorted) into tasks of `batch` files each.
pub(crate) fn make_tasks(files: Vec<RepoPath>, batch: usize) -> Vec<Task> {
    files
        .chunks(batch.max(1))
        .map(|chunk| Task {
            id: task_id(chunk),
            files: chunk.to_vec(),
            instruction: None,
        })
        .collect()
}

/// A deterministic, ref-safe id: a readable slug of the first file's path and a hash of all
/// the task's files, so the same files always get the same id whatever else is in the plan.
/// `s` in lowercase letters, digits and single `-` between them.
fn slugify(s: &str) -> String {
    let mut slug = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.trim_matches('-').to_string()
}

pub(crate) fn task_id(files: &[RepoPath]) -> TaskId {
    const SLUG_MAX: usize = 40;
    // FNV-1a, 64 bit: stable across Rust versions, unlike `DefaultHasher`.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        for &b in file.as_bytes().iter().chain(std::iter::once(&0u8)) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let first = files.first().map(|f| f.display()).unwrap_or_default();
    // Whole path components, from the file name up, as many as fit: the file name says more
    // than the leading folders, and a component cut in the middle of a word says little.
    let parts: Vec<String> = first
        .split('/')
        .map(slugify)
        .filter(|p| !p.is_empty())
        .collect();
    let mut slug = match parts.last() {
        // A file name longer than the whole: its end, from a word's start.
        Some(name) if name.len() > SLUG_MAX => {
            let cut = &name[name.len() - SLUG_MAX..];
            match cut.find('-') {
                Some(at) if at + 1 < cut.len() => cut[at + 1..].to_string(),
                _ => cut.to_string(),
            }
        }
        Some(name) => name.clone(),
        None => String::new(),
    };
    for dir in parts.iter().rev().skip(1) {
        if slug.len() + 1 + dir.len() > SLUG_MAX {
            break;
        }
        slug = format!("{dir}-{slug}");
    }
    let short = format!("{:08x}", hash >> 32);
    TaskId::from_generated(if slug.is_empty() {
        format!("t-{short}")
    } else {
        format!("{slug}-{short}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_stable_readable_and_ref_safe() {
        let a = task_id(&[RepoPath::from("src/My File.py")]);
        assert_eq!(a, task_id(&[RepoPath::from("src/My File.py")]));
        assert!(a.as_str().starts_with("src-my-file-py-"), "{a}");
        assert!(
            a.as_str()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(
            a,
            task_id(&[RepoPath::from("src/My File.py"), RepoPath::from("b")])
        );
        let long = task_id(&[RepoPath::from(&*format!("{}/x.rs", "d".repeat(100)))]);
        assert!(long.as_str().len() <= 40 + 9, "{long}");
        let odd = task_id(&[RepoPath::from_bytes(b"\xe9.txt".to_vec())]);
        assert!(odd.as_str().starts_with("txt-"), "{odd}");
        // Long paths keep whole components, the file name first.
        let id = |p: &str| {
            let id = task_id(&[RepoPath::from(p)]);
            id.as_str()[..id.as_str().len() - 9].to_string()
        };
        assert_eq!(
            id("examples/complex/complex-commands/init.py"),
            "complex-complex-commands-init-py"
        );
        assert_eq!(id(&format!("{}/x.rs", "d".repeat(100))), "x-rs");
        assert_eq!(
            id("a/an_extraordinarily_long_file_name_for_a_test_module.py"),
            "a-long-file-name-for-a-test-module-py"
        );
        assert_eq!(id("src/a.py"), "src-a-py");
    }

    #[test]
    fn batches_group_consecutive_files() {
        let files: Vec<RepoPath> = ["a", "b", "c", "d", "e"].map(RepoPath::from).into();
        let tasks = make_tasks(files, 2);
        assert_eq!(tasks.len(), 3);
        assert_eq!(tasks[2].files, vec![RepoPath::from("e")]);
    }
}
