//! The merge train: each finished task merged as it arrives, in memory, with `--no-ff`.
//!
//! Nothing here touches a working directory. The integration tip lives on
//! `swarm/<RUN-ID>/result` and every merge is one two-parent commit: first parent the previous
//! tip, second parent the task's tip.
//!
//! Most bulk-edit merges touch disjoint paths. When every path the task changed is still the
//! same in the integration tree as in the task's start tree, a three-way merge can only take
//! the task's side for those paths and ours for the rest, so the merged tree is built directly
//! by applying the task's changed paths to the integration tree (a `TreeUpdateBuilder`,
//! proportional to the changed paths). Otherwise git2's full `merge_commits` decides, with
//! rename detection, and a conflicted index is reported as a conflict.

use std::path::Path;

use anyhow::Context as _;
use git2::{MergeOptions, Oid, Repository, Tree};

use crate::ids::{RunId, TaskId};
use crate::repo_path::RepoPath;

pub(crate) enum MergeOutcome {
    Merged { commit: Oid, fast_path: bool },
    Conflict { paths: Vec<RepoPath> },
}

pub(crate) struct MergeTrain {
    repo: Repository,
    result_ref: String,
    tip: Oid,
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
}

impl MergeTrain {
    /// Starts a train at `into_start`, creating the integration branch `result_branch`.
    pub(crate) fn new(
        common_dir: &Path,
        result_branch: &str,
        into_start: Oid,
    ) -> anyhow::Result<Self> {
        let repo = Repository::open(common_dir)?;
        let result_ref = super::branch_ref(result_branch);
        repo.reference(&result_ref, into_start, true, "swarm: start integration")
            .with_context(|| format!("cannot create branch {result_branch}"))?;
        Ok(Self {
            repo,
            result_ref,
            tip: into_start,
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

    /// Makes the task's `--no-ff` merge commit with `tree` (parents: the tip and the task's
    /// tip) and moves the integration branch to it.
    fn commit_merge(
        &mut self,
        req: &MergeRequest<'_>,
        tree: Oid,
        note: &str,
    ) -> anyhow::Result<Oid> {
        let ours = self.repo.find_commit(self.tip)?;
        let theirs = self.repo.find_commit(req.tip)?;
        let tree = self.repo.find_tree(tree)?;
        let sig = super::signature(&self.repo)?;
        let message = merge_message(req, note);
        let commit = self
            .repo
            .commit(None, &sig, &sig, &message, &tree, &[&ours, &theirs])?;
        self.repo.reference_matching(
            &self.result_ref,
            commit,
            true,
            self.tip,
            &format!("swarm: merge task {}", req.task_id),
        )?;
        self.tip = commit;
        Ok(commit)
    }

    pub(crate) fn merge(&mut self, req: &MergeRequest<'_>) -> anyhow::Result<MergeOutcome> {
        let (tree_id, fast_path, paths) = match self.merged_tree(req)? {
            Ok(merged) => merged,
            Err(paths) => return Ok(MergeOutcome::Conflict { paths }),
        };
        let commit = self.commit_merge(req, tree_id, "")?;
        tracing::debug!(
            task = req.task_id.as_str(),
            fast_path,
            paths,
            "merged as {}",
            crate::ids::short(&commit)
        );
        Ok(MergeOutcome::Merged { commit, fast_path })
    }

    /// The tree of the tip merged with the task: (tree, by the fast path?, paths the task
    /// changed), or the conflicting paths.
    fn merged_tree(
        &self,
        req: &MergeRequest<'_>,
    ) -> anyhow::Result<Result<(Oid, bool, usize), Vec<RepoPath>>> {
        let ours = self.repo.find_commit(self.tip)?;
        let theirs = self.repo.find_commit(req.tip)?;
        let start_tree = self.repo.find_commit(req.start)?.tree()?;
        let ours_tree = ours.tree()?;
        let theirs_tree = theirs.tree()?;

        let changed = super::changed_paths(&self.repo, &start_tree, &theirs_tree)?;
        if untouched_since_start(&changed, &start_tree, &ours_tree)? {
            // A directory/file clash can still make the tree edit fail; the full merge below
            // then decides.
            if let Ok(tree) = super::apply_paths(&self.repo, &changed, &theirs_tree, &ours_tree) {
                return Ok(Ok((tree, true, changed.len())));
            }
        }
        let mut opts = MergeOptions::new();
        opts.find_renames(true);
        let mut index = self.repo.merge_commits(&ours, &theirs, Some(&opts))?;
        if index.has_conflicts() {
            return Ok(Err(conflict_paths(&index)?));
        }
        Ok(Ok((index.write_tree_to(&self.repo)?, false, changed.len())))
    }
}

/// Is every path in `paths` identical (same blob and mode, or absent in both) in `a` and `b`?
fn untouched_since_start(
    paths: &[RepoPath],
    a: &Tree<'_>,
    b: &Tree<'_>,
) -> Result<bool, git2::Error> {
    for path in paths {
        if super::entry_at(a, path)? != super::entry_at(b, path)? {
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

/// Prepares a worktree (checked out at `ours`) for a conflict to be resolved by hand: the
/// merge of `theirs` is written into its files, conflicted ones with diff3-style markers
/// (ours, the common ancestor, theirs), while its index stays at `ours`, so every
/// difference from HEAD is part of the resolution. Returns the conflicted paths. `repo` is
/// the worktree, opened through its administrative directory.
pub(crate) fn write_conflicts(
    repo: &Repository,
    ours: Oid,
    theirs: Oid,
) -> anyhow::Result<Vec<RepoPath>> {
    let ours_commit = repo.find_commit(ours)?;
    let theirs_commit = repo.find_commit(theirs)?;
    let mut opts = MergeOptions::new();
    opts.find_renames(true);
    let mut merged = repo.merge_commits(&ours_commit, &theirs_commit, Some(&opts))?;
    let paths = conflict_paths(&merged)?;
    let mut checkout = git2::build::CheckoutBuilder::new();
    checkout
        .force()
        .allow_conflicts(true)
        .conflict_style_diff3(true)
        .our_label("already merged")
        .their_label("this task");
    repo.checkout_index(Some(&mut merged), Some(&mut checkout))
        .context("cannot write the conflicted merge into the worktree")?;
    let mut index = repo.index()?;
    index.read_tree(&ours_commit.tree()?)?;
    index.write()?;
    Ok(paths)
}

/// Paths among `paths` (in `worktree`) that still hold conflict markers (regular files only:
/// a link is not followed).
pub(crate) fn with_conflict_markers(worktree: &Path, paths: &[RepoPath]) -> Vec<RepoPath> {
    paths
        .iter()
        .filter(|p| {
            let path = worktree.join(p.as_path());
            let file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
            file && std::fs::read(&path).is_ok_and(|bytes| {
                bytes
                    .split(|&b| b == b'\n')
                    .any(|line| line.starts_with(b"<<<<<<< ") || line.starts_with(b">>>>>>> "))
            })
        })
        .cloned()
        .collect()
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
