//! The merge train: each finished task merged as it arrives, in memory, with `--no-ff`.
//!
//! Nothing here touches a working directory. The integration tip lives on
//! `swarm/<RUN-ID>/result` and every merge is one two-parent commit: first parent the previous
//! tip, second parent the task's tip.
//!
//! Most bulk-edit merges touch disjoint paths. When every path the task changed is still the
//! same in the integration tree as in the task's start tree, a three-way merge can only take
//! the task's side for those paths and ours for the rest, so the merged tree is built directly
//! by applying the task's changed paths to the integration tree (a [`super::TreeEdit`],
//! proportional to the changed paths). Otherwise git2's full `merge_commits` decides, with
//! rename detection, and a conflicted index is reported as a conflict.
//!
//! The full merge reads attributes from the integration tip's tree, never from a checkout
//! ([`drivers::AttributeSource`]), and where they name a merge driver git config defines, or
//! with a structured merge tool (`--merge-with`), that driver merges the file as `git merge`
//! would ([`files`]).
//!
//! When tasks finish faster than they merge, the train takes every waiting task at once
//! ([`MergeTrain::merge_many`]): each gets its own merge commit, and the integration branch
//! moves once, to the last of them (a reference update, with its lock file and reflog entry,
//! was a third of a merge's time on a disk where making a file is slow).

mod conflicts;
pub(crate) mod drivers;
pub(crate) mod files;

use std::path::Path;

use anyhow::Context as _;
use git2::{MergeOptions, Oid, Repository, Tree};

use crate::ids::{RunId, TaskId};
use crate::repo_path::RepoPath;
use crate::report::DriverMerge;
pub(crate) use conflicts::{with_conflict_markers, write_conflicts};
use files::{DriverSetup, FileMerging};

pub(crate) enum MergeOutcome {
    Merged {
        commit: Oid,
        fast_path: bool,
        /// The files merge drivers were given.
        drivers: Vec<DriverMerge>,
        /// git's line merge conflicted, and the drivers resolved every file.
        spared: bool,
    },
    Conflict {
        paths: Vec<RepoPath>,
        drivers: Vec<DriverMerge>,
    },
}

pub(crate) struct MergeTrain {
    /// Opened bare: nothing of a checkout (its `.gitattributes`, its index) enters a merge.
    repo: Repository,
    result_ref: String,
    tip: Oid,
    /// The merge drivers, and what runs them (`None`: git's built-in ones only).
    merging: Option<FileMerging>,
}

/// A merge's tree, or its conflict.
struct Merged {
    tree: Oid,
    fast_path: bool,
    /// The paths the task changed.
    paths: usize,
    drivers: Vec<DriverMerge>,
    spared: bool,
}

/// A merge that conflicts: the paths, and what the drivers did.
struct Conflicted {
    paths: Vec<RepoPath>,
    drivers: Vec<DriverMerge>,
}

/// One task ready to merge.
pub(crate) struct MergeRequest<'a> {
    pub task_id: &'a TaskId,
    pub files: &'a [RepoPath],
    pub instruction: &'a str,
    pub run_id: &'a RunId,
    /// The commit the task started from.
    pub start: Oid,
    /// The task branch tip.
    pub tip: Oid,
    /// What differs between `start` and `tip`, where the caller knows it (else it is read
    /// from the two trees).
    pub changes: Option<&'a [super::TreeChange]>,
}

impl MergeTrain {
    /// Starts a train at `into_start`, creating the integration branch `result_branch`.
    pub(crate) fn new(
        common_dir: &Path,
        result_branch: &str,
        into_start: Oid,
        drivers: Option<DriverSetup>,
    ) -> anyhow::Result<Self> {
        let repo = Repository::open_bare(common_dir)?;
        super::for_bulk_writes(&repo)?;
        let merging = match drivers {
            Some(setup) => Some(FileMerging {
                drivers: drivers::Drivers::read(&repo, setup.structured)?,
                runner: setup.runner,
            }),
            None => None,
        };
        let result_ref = super::branch_ref(result_branch);
        repo.reference(&result_ref, into_start, true, "swarm: start integration")
            .with_context(|| format!("cannot create branch {result_branch}"))?;
        Ok(Self {
            repo,
            result_ref,
            tip: into_start,
            merging,
        })
    }

    pub(crate) fn tip(&self) -> Oid {
        self.tip
    }

    /// The task merges on the integration branch since `from` (see [`merges_between`]).
    pub(crate) fn merges_since(&self, from: Oid) -> anyhow::Result<Vec<(TaskId, Oid, Oid)>> {
        merges_between(&self.repo, from, self.tip)
    }

    /// Moves the integration branch back to `to` (an earlier tip), to merge a different
    /// sequence of tasks from there.
    pub(crate) fn reset(&mut self, to: Oid) -> anyhow::Result<()> {
        self.repo
            .reference(&self.result_ref, to, true, "swarm: rebuild integration")?;
        self.tip = to;
        Ok(())
    }

    /// Does commit `commit` contain `ancestor` (or is it)?
    pub(crate) fn contains(&self, commit: Oid, ancestor: Oid) -> anyhow::Result<bool> {
        Ok(commit == ancestor || self.repo.graph_descendant_of(commit, ancestor)?)
    }

    /// Merges a task whose conflict was resolved elsewhere: one two-parent commit (the tip and
    /// the task's tip) with the resolved tree, made only if the tip is still `expected_tip`.
    pub(crate) fn merge_resolved(
        &mut self,
        req: &MergeRequest<'_>,
        tree: Oid,
        expected_tip: Oid,
    ) -> anyhow::Result<Oid> {
        anyhow::ensure!(
            self.tip == expected_tip,
            "the integration branch moved while the conflict was being resolved"
        );
        self.commit_merge(req, tree, "the model resolved the merge conflict")
    }

    /// Makes the task's `--no-ff` merge commit with `tree` and moves the integration branch
    /// to it.
    fn commit_merge(
        &mut self,
        req: &MergeRequest<'_>,
        tree: Oid,
        note: &str,
    ) -> anyhow::Result<Oid> {
        let sig = super::signature(&self.repo)?;
        let before = self.tip;
        let commit = self.write_merge(&sig, req, tree, note)?;
        self.move_result(before, &format!("swarm: merge task {}", req.task_id))?;
        Ok(commit)
    }

    /// Writes the task's `--no-ff` merge commit with `tree` (parents: the tip and the task's
    /// tip) and makes it the tip, in memory: [`Self::move_result`] moves the branch.
    fn write_merge(
        &mut self,
        sig: &git2::Signature<'_>,
        req: &MergeRequest<'_>,
        tree: Oid,
        note: &str,
    ) -> anyhow::Result<Oid> {
        let ours = self.repo.find_commit(self.tip)?;
        let theirs = self.repo.find_commit(req.tip)?;
        let tree = self.repo.find_tree(tree)?;
        let message = merge_message(req, note);
        let commit = self
            .repo
            .commit(None, sig, sig, &message, &tree, &[&ours, &theirs])?;
        self.tip = commit;
        Ok(commit)
    }

    /// Moves the integration branch from `before` to the tip; where it cannot, the tip is
    /// `before` again.
    fn move_result(&mut self, before: Oid, message: &str) -> anyhow::Result<()> {
        let moved = self
            .repo
            .reference_matching(&self.result_ref, self.tip, true, before, message);
        if let Err(e) = moved {
            self.tip = before;
            return Err(anyhow::Error::from(e).context("cannot move the integration branch"));
        }
        Ok(())
    }

    pub(crate) fn merge(&mut self, req: &MergeRequest<'_>) -> anyhow::Result<MergeOutcome> {
        let sig = super::signature(&self.repo)?;
        let before = self.tip;
        let outcome = self.merge_unrecorded(&sig, req)?;
        if self.tip != before {
            self.move_result(before, &format!("swarm: merge task {}", req.task_id))?;
        }
        Ok(outcome)
    }

    /// Merges `reqs` in order, as [`Self::merge`] would one by one, then moves the
    /// integration branch once, to the last merge. Each request's outcome is its own; with
    /// `until_conflict`, the requests after the first conflict are not tried and have none
    /// (the outcomes are fewer). `Err` (no merge of them kept, the tip where it was) when the
    /// branch cannot be moved.
    pub(crate) fn merge_many(
        &mut self,
        reqs: &[MergeRequest<'_>],
        until_conflict: bool,
    ) -> anyhow::Result<Vec<anyhow::Result<MergeOutcome>>> {
        let sig = super::signature(&self.repo)?;
        let before = self.tip;
        let mut outcomes = Vec::with_capacity(reqs.len());
        for req in reqs {
            let outcome = self.merge_unrecorded(&sig, req);
            let conflict = matches!(outcome, Ok(MergeOutcome::Conflict { .. }));
            outcomes.push(outcome);
            if conflict && until_conflict {
                break;
            }
        }
        if self.tip != before {
            self.move_result(before, &format!("swarm: merge {} tasks", reqs.len()))?;
        }
        Ok(outcomes)
    }

    /// One merge of [`Self::merge_many`]: the tip moves in memory only.
    fn merge_unrecorded(
        &mut self,
        sig: &git2::Signature<'_>,
        req: &MergeRequest<'_>,
    ) -> anyhow::Result<MergeOutcome> {
        let merged = match merged_tree(&self.repo, self.tip, req, self.merging.as_ref())? {
            Ok(merged) => merged,
            Err(Conflicted { paths, drivers }) => {
                return Ok(MergeOutcome::Conflict { paths, drivers });
            }
        };
        let note = match merged.spared {
            true => "merge drivers merged what git's line merge left in conflict",
            false => "",
        };
        let commit = self.write_merge(sig, req, merged.tree, note)?;
        log_merge(req, merged.fast_path, merged.paths, commit);
        Ok(MergeOutcome::Merged {
            commit,
            fast_path: merged.fast_path,
            drivers: merged.drivers,
            spared: merged.spared,
        })
    }
}

fn log_merge(req: &MergeRequest<'_>, fast_path: bool, paths: usize, commit: Oid) {
    tracing::debug!(
        task = req.task_id.as_str(),
        fast_path,
        paths,
        "merged as {}",
        crate::ids::short(&commit)
    );
}

/// The tree of `tip` merged with the task, or the conflicting paths (and what the drivers
/// did).
fn merged_tree(
    repo: &Repository,
    tip: Oid,
    req: &MergeRequest<'_>,
    merging: Option<&FileMerging>,
) -> anyhow::Result<Result<Merged, Conflicted>> {
    let ours = repo.find_commit(tip)?;
    let ours_tree = ours.tree()?;
    let read;
    let changes = match req.changes {
        Some(changes) => changes,
        None => {
            let start_tree = repo.find_commit(req.start)?.tree()?;
            let theirs_tree = repo.find_commit(req.tip)?.tree()?;
            read = super::tree_changes(repo, &start_tree, &theirs_tree)?;
            &read
        }
    };
    let merged = |tree, fast_path, drivers, spared| Merged {
        tree,
        fast_path,
        paths: changes.len(),
        drivers,
        spared,
    };
    if untouched_since_start(changes, &ours_tree)? {
        // A directory/file clash can still make the tree edit fail; the full merge below
        // then decides.
        if let Ok(tree) = super::apply_changes(repo, changes, &ours_tree) {
            return Ok(Ok(merged(tree, true, Vec::new(), false)));
        }
    }
    drivers::AttributeSource::set(repo, &ours_tree, changes.iter().map(|c| c.path.clone()))?;
    let theirs = repo.find_commit(req.tip)?;
    let mut opts = MergeOptions::new();
    opts.find_renames(true);
    let mut index = repo.merge_commits(&ours, &theirs, Some(&opts))?;
    let plain_conflict = index.has_conflicts();
    let driven = match merging {
        Some(m) if m.drivers.any() => {
            files::run_drivers(repo, m, req.task_id, &ours_tree, changes, &mut index)?
        }
        _ => files::Driven::default(),
    };
    if index.has_conflicts() || !driven.failed.is_empty() {
        let mut paths = conflict_paths(&index)?;
        paths.extend(driven.failed);
        paths.sort();
        paths.dedup();
        return Ok(Err(Conflicted {
            paths,
            drivers: driven.runs,
        }));
    }
    let tree = index.write_tree_to(repo)?;
    Ok(Ok(merged(tree, false, driven.runs, plain_conflict)))
}

/// Is each changed path's entry in `tree` still what the task started from?
fn untouched_since_start(
    changes: &[super::TreeChange],
    tree: &Tree<'_>,
) -> Result<bool, git2::Error> {
    for change in changes {
        if super::entry_at(tree, &change.path)? != change.old {
            return Ok(false);
        }
    }
    Ok(true)
}

fn conflict_paths(index: &git2::Index) -> Result<Vec<RepoPath>, git2::Error> {
    let mut paths = Vec::new();
    for conflict in index.conflicts()? {
        let conflict = conflict?;
        for entry in [conflict.our, conflict.their, conflict.ancestor]
            .into_iter()
            .flatten()
        {
            paths.push(RepoPath::from_bytes(entry.path));
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

fn merge_message(req: &MergeRequest<'_>, note: &str) -> String {
    const SHOWN: usize = 3;
    let mut files: Vec<String> = req.files.iter().take(SHOWN).map(|f| f.display()).collect();
    if req.files.len() > SHOWN {
        files.push(format!("and {} more", req.files.len() - SHOWN));
    }
    let note = if note.is_empty() {
        String::new()
    } else {
        format!("\n\n({note})")
    };
    format!(
        "swarm: merge task {} ({})\n\n{}{note}\n\nSwarm-Run: {}\nSwarm-Task: {}\n",
        req.task_id,
        files.join(", "),
        req.instruction.trim(),
        req.run_id,
        req.task_id
    )
}

/// The task merges on the first-parent chain from `from` (excluded) to `tip`, oldest first:
/// (task id, merge commit, task commit), read from each merge's `Swarm-Task:` trailer.
pub(crate) fn merges_between(
    repo: &Repository,
    from: Oid,
    tip: Oid,
) -> anyhow::Result<Vec<(TaskId, Oid, Oid)>> {
    let mut merged = Vec::new();
    let mut at = tip;
    while at != from {
        let commit = repo.find_commit(at)?;
        if commit.parent_count() != 2 {
            break;
        }
        let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
        let task = message.lines().find_map(|l| {
            l.strip_prefix("Swarm-Task: ")?
                .trim()
                .parse::<TaskId>()
                .ok()
        });
        if let Some(task) = task {
            merged.push((task, at, commit.parent_id(1)?));
        }
        at = commit.parent_id(0)?;
    }
    merged.reverse();
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::{MergeOutcome, MergeRequest, MergeTrain};
    use crate::ids::{RunId, TaskId};
    use crate::repo_path::RepoPath;
    use git2::{Oid, Repository, Signature};

    /// A commit on `parent` (or a root commit) with `files` written over its tree.
    fn commit(repo: &Repository, parent: Option<Oid>, files: &[(&str, &str)]) -> Oid {
        let sig = Signature::now("t", "t@example.com").unwrap();
        let parent = parent.map(|p| repo.find_commit(p).unwrap());
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, text) in files {
            let blob = repo.blob(text.as_bytes()).unwrap();
            update.upsert(*path, blob, git2::FileMode::Blob);
        }
        let base = match &parent {
            Some(p) => p.tree().unwrap(),
            None => repo
                .find_tree(repo.treebuilder(None).unwrap().write().unwrap())
                .unwrap(),
        };
        let tree = repo
            .find_tree(update.create_updated(repo, &base).unwrap())
            .unwrap();
        let parents: Vec<_> = parent.iter().collect();
        repo.commit(None, &sig, &sig, "c", &tree, &parents).unwrap()
    }

    #[test]
    fn merges_taken_together_are_each_a_merge_and_move_the_branch_once() {
        // The changes read from the trees, and the changes the worker's side hands over.
        merge_four(false);
        merge_four(true);
    }

    fn merge_four(changes_given: bool) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        // A bare repository keeps no reflog unless asked.
        let mut config = repo.config().unwrap();
        config.set_bool("core.logAllRefUpdates", true).unwrap();
        let base = commit(
            &repo,
            None,
            &[("a.txt", "a"), ("b.txt", "b"), ("c.txt", "c")],
        );
        let tasks = [
            commit(&repo, Some(base), &[("a.txt", "a1")]),
            commit(&repo, Some(base), &[("b.txt", "b1"), ("new/n.txt", "n")]),
            commit(&repo, Some(base), &[("a.txt", "a2")]),
            commit(&repo, Some(base), &[("c.txt", "c1")]),
        ];
        let run: RunId = RunId::new_now();
        let ids: Vec<TaskId> = (1..=4).map(|k| format!("t{k}").parse().unwrap()).collect();
        let files = [RepoPath::from("a.txt")];
        let mut train = MergeTrain::new(dir.path(), "swarm/r/result", base, None).unwrap();
        let base_tree = repo.find_commit(base).unwrap().tree().unwrap();
        let changes: Vec<_> = tasks
            .iter()
            .map(|&tip| {
                let tree = repo.find_commit(tip).unwrap().tree().unwrap();
                crate::git::tree_changes(&repo, &base_tree, &tree).unwrap()
            })
            .collect();
        let reqs: Vec<MergeRequest<'_>> = tasks
            .iter()
            .zip(&ids)
            .zip(&changes)
            .map(|((&tip, task_id), changes)| MergeRequest {
                task_id,
                files: &files,
                instruction: "edit",
                run_id: &run,
                start: base,
                tip,
                changes: changes_given.then_some(changes.as_slice()),
            })
            .collect();
        // Under `--on-conflict fail`, nothing after the conflict (the third) is tried.
        let mut stopping = MergeTrain::new(dir.path(), "swarm/r/stopped", base, None).unwrap();
        let tried = stopping.merge_many(&reqs, true).unwrap();
        assert!(tried.len() == 3 && matches!(tried[2], Ok(MergeOutcome::Conflict { .. })));
        let outcomes = train.merge_many(&reqs, false).unwrap();
        let merged: Vec<Oid> = outcomes
            .iter()
            .filter_map(|o| match o {
                Ok(MergeOutcome::Merged { commit, .. }) => Some(*commit),
                _ => None,
            })
            .collect();
        // The third task edits what the first one merged: a conflict, merged by no commit.
        assert!(matches!(outcomes[2], Ok(MergeOutcome::Conflict { .. })));
        assert_eq!(merged.len(), 3);
        let result = repo.find_reference("refs/heads/swarm/r/result").unwrap();
        assert_eq!(result.target(), Some(merged[2]));
        assert_eq!(train.tip(), merged[2]);
        // One merge commit a task, in order: first parent the one before, second the task.
        let mut before = base;
        for (commit, task) in merged.iter().zip([tasks[0], tasks[1], tasks[3]]) {
            let commit = repo.find_commit(*commit).unwrap();
            assert_eq!(commit.parent_ids().collect::<Vec<_>>(), [before, task]);
            before = commit.id();
        }
        let tree = repo.find_commit(merged[2]).unwrap().tree().unwrap();
        for (path, text) in [
            ("a.txt", "a1"),
            ("b.txt", "b1"),
            ("new/n.txt", "n"),
            ("c.txt", "c1"),
        ] {
            let blob = tree.get_path(std::path::Path::new(path)).unwrap().id();
            assert_eq!(repo.find_blob(blob).unwrap().content(), text.as_bytes());
        }
        // The branch moved once for the three: its creation, then one entry.
        let log = repo.reflog("refs/heads/swarm/r/result").unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(
            log.get(0).unwrap().message_bytes(),
            Some(&b"swarm: merge 4 tasks"[..])
        );
    }
}
