//! The files of a merge that a driver merges: after libgit2's merge of the tip and a task, each
//! file both sides changed whose `merge` attribute names a driver git config defines is merged
//! by that command, as `git merge` would, whatever libgit2's text merge made of it; and with a
//! structured merge tool (`--merge-with`), each file libgit2 left in conflict that the tool
//! knows is given to it. A driver that fails, times out, leaves anything but its result in its
//! directory, or is defined where swarm takes no command from, makes its file a conflict.

use std::path::{Path, PathBuf};

use git2::{Index, Repository, Tree};

use super::drivers::{self, AttributeSource, Choice, Drivers};
use crate::ids::TaskId;
use crate::repo_path::RepoPath;
use crate::report::DriverMerge;

/// Runs a driver's command for the merge train (the engine's jail, its clock, its log).
pub(crate) trait DriverRunner: Send {
    /// A new, empty directory for a driver's files.
    fn scratch(&self) -> std::io::Result<PathBuf>;
    /// Removes a directory [`Self::scratch`] made, whatever the driver left in it.
    fn discard(&self, dir: &Path);
    /// Runs `call.command` with `sh -c` in `call.dir`, confined to writing there, timed.
    fn run(&self, call: &DriverCall<'_>) -> DriverExit;
}

/// A driver's directory, discarded when dropped (on every path out of [`run_one`]).
struct Scratch<'a> {
    runner: &'a dyn DriverRunner,
    dir: PathBuf,
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        self.runner.discard(&self.dir);
    }
}

/// One run of a merge driver.
pub(crate) struct DriverCall<'a> {
    pub task: &'a TaskId,
    pub path: &'a RepoPath,
    pub driver: &'a str,
    pub command: &'a str,
    pub dir: &'a Path,
}

/// How a driver's command ended.
pub(crate) struct DriverExit {
    /// `Err`: why it is a conflict (its status, its time limit).
    pub result: Result<(), String>,
    /// Its output.
    pub log: Option<PathBuf>,
}

/// What a train needs to run drivers: what runs them, and the structured merge tool.
pub(crate) struct DriverSetup {
    pub runner: Box<dyn DriverRunner>,
    pub structured: Option<super::drivers::Structured>,
}

/// The drivers of a train and what runs them.
pub(crate) struct FileMerging {
    pub drivers: Drivers,
    pub runner: Box<dyn DriverRunner>,
}

/// What the drivers of one merge did.
#[derive(Default)]
pub(super) struct Driven {
    pub runs: Vec<DriverMerge>,
    /// Files a driver did not merge: conflicts.
    pub failed: Vec<RepoPath>,
}

/// The largest file a driver may leave as its result.
const MOST_BYTES: u64 = 256 * 1024 * 1024;

/// A file both sides changed: its entries `(id, mode)` at the base (if any), ours and theirs.
struct BothChanged<'a> {
    path: &'a RepoPath,
    base: Option<(git2::Oid, u32)>,
    ours: (git2::Oid, u32),
    theirs: (git2::Oid, u32),
}

/// Runs the drivers of the files both sides changed into `index` (libgit2's merge of ours and
/// the task), resolving each file a driver merged; `changes` are the task's.
pub(super) fn run_drivers(
    repo: &Repository,
    merging: &FileMerging,
    task: &TaskId,
    ours: &Tree<'_>,
    changes: &[crate::git::TreeChange],
    index: &mut Index,
) -> anyhow::Result<Driven> {
    let mut driven = Driven::default();
    for change in changes {
        let Some(file) = both_changed(ours, change)? else {
            continue;
        };
        let (attr, marker_size) = AttributeSource::merge_of(repo, file.path)?;
        let conflicted = index.conflict_get(file.path.as_path()).is_ok();
        let (name, command) = match merging.drivers.choice(&attr) {
            Choice::Command { name, command } => (name, command),
            Choice::Refused { name, why } => {
                driven.runs.push(DriverMerge::refused(file.path, name, why));
                driven.failed.push(file.path.clone());
                continue;
            }
            Choice::BuiltIn => match merging.drivers.structured_for(&attr, file.path) {
                Some(tool) if conflicted => (tool.name.as_str(), tool.command.as_str()),
                _ => continue,
            },
        };
        let command = drivers::command_line(command, file.path, marker_size);
        let runner = merging.runner.as_ref();
        let (run, merged) = run_one(repo, runner, (task, name, &command), &file)?;
        driven.runs.push(run);
        match merged {
            Some(blob) => {
                let _ = index.conflict_remove(file.path.as_path());
                let mode = match file.base {
                    Some((_, mode)) if mode == file.ours.1 => file.theirs.1,
                    _ => file.ours.1,
                };
                index.add(&crate::git::index_entry(file.path, blob, mode))?;
            }
            None => driven.failed.push(file.path.clone()),
        }
    }
    Ok(driven)
}

/// `change` (the task's) where ours changed the same file differently, both regular files.
fn both_changed<'a>(
    ours: &Tree<'_>,
    change: &'a crate::git::TreeChange,
) -> Result<Option<BothChanged<'a>>, git2::Error> {
    let regular = |e: Option<(git2::Oid, u32)>| e.filter(|(_, mode)| mode & 0o170000 == 0o100000);
    let ours_entry = crate::git::entry_at(ours, &change.path)?;
    if ours_entry == change.old || ours_entry == change.new {
        return Ok(None);
    }
    Ok(match (regular(ours_entry), regular(change.new)) {
        (Some(ours), Some(theirs)) => Some(BothChanged {
            path: &change.path,
            base: regular(change.old),
            ours,
            theirs,
        }),
        _ => None,
    })
}

/// Runs driver `name` (`command`, placeholders filled) for `task` on `file`: its record, and
/// the blob of its result if it merged the file.
fn run_one(
    repo: &Repository,
    runner: &dyn DriverRunner,
    (task, name, command): (&TaskId, &str, &str),
    file: &BothChanged<'_>,
) -> anyhow::Result<(DriverMerge, Option<git2::Oid>)> {
    let dir = Scratch {
        runner,
        dir: runner.scratch()?,
    };
    let sides = [
        file.base.map(|(id, _)| id),
        Some(file.ours.0),
        Some(file.theirs.0),
    ];
    for (name, id) in drivers::FILES.iter().zip(sides) {
        let content = match id {
            Some(id) => repo.find_blob(id)?.content().to_vec(),
            None => Vec::new(),
        };
        std::fs::write(dir.dir.join(name), content)?;
    }
    let exit = runner.run(&DriverCall {
        task,
        path: file.path,
        driver: name,
        command,
        dir: &dir.dir,
    });
    let merged = exit.result.and_then(|()| result_of(&dir.dir));
    let record = |error: Option<String>| DriverMerge {
        path: file.path.clone(),
        driver: name.to_owned(),
        merged: error.is_none(),
        error,
        log: exit.log.clone(),
    };
    Ok(match merged {
        Ok(bytes) => (record(None), Some(repo.blob(&bytes)?)),
        Err(why) => (record(Some(why)), None),
    })
}

/// The result a driver left in `dir` (`%A`), if it left nothing else there.
fn result_of(dir: &Path) -> Result<Vec<u8>, String> {
    let mut others = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let name = entry.map_err(|e| e.to_string())?.file_name();
        if !drivers::FILES.iter().any(|f| name == *f) {
            others.push(name.to_string_lossy().into_owned());
        }
    }
    if !others.is_empty() {
        others.sort();
        return Err(format!(
            "the driver wrote files besides its result ({}): it may write only %A",
            others.join(", ")
        ));
    }
    let path = dir.join(drivers::FILES[1]);
    let meta = std::fs::symlink_metadata(&path)
        .map_err(|_| "the driver removed its result file (%A)".to_owned())?;
    if !meta.is_file() {
        return Err("the driver replaced its result file (%A) with something else".into());
    }
    if meta.len() > MOST_BYTES {
        return Err(format!(
            "the driver's result is {} bytes, more than the {MOST_BYTES} a merged file may be",
            meta.len()
        ));
    }
    std::fs::read(&path).map_err(|e| format!("cannot read the driver's result: {e}"))
}
