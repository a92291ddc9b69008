//! Committing what a worker changed, on its task branch.
//!
//! Workers never need to commit. After a worker ends, swarm finds what changed with one status
//! scan of the worktree (new files, deletions, mode changes; ignored files stay out), stages
//! exactly those paths (so clean/smudge filters apply as with `git add`), and builds the new
//! tree by applying them to HEAD's tree: cost proportional to the change, not to the size of
//! the repository (`write_tree` over a 5,000-file index costs ~40 ms; this costs ~1 ms).
//!
//! A worker that committed by itself is fine as long as its commits sit on the task branch on
//! top of the start commit; one that moved HEAD elsewhere or rewrote the branch has broken
//! the task.
//!
//! The worktree is read as git would: a tracked path below a symbolic link (or below a file)
//! no longer exists, however the link resolves, so nothing outside the worktree is read into
//! a commit; a type change (file to folder, folder to link) is a removal and an addition.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository, Status, StatusOptions};

use crate::repo_path::RepoPath;

mod view;

pub(crate) use view::{ViewBase, commit_view};

#[derive(Debug)]
pub(crate) struct Committed {
    /// The task branch tip after committing (== start when nothing changed).
    pub tip: Oid,
    /// What differs between the start commit and the tip: paths, with their entries on each
    /// side.
    pub changes: Vec<super::TreeChange>,
    /// Commits the worker made by itself.
    pub worker_commits: usize,
    /// Paths that could not be staged (e.g. a nested repository), left out of the commit.
    pub skipped: Vec<RepoPath>,
    /// Where the worker had moved HEAD (another branch, a detached commit). swarm put HEAD
    /// back on the task branch and committed the worktree there, so the work is kept, but
    /// the task has failed.
    pub moved_head: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CommitError {
    /// The branch now points at this commit, which does not contain the start commit.
    #[error("the worker rewrote the task branch: {} no longer descends from the start commit", crate::ids::short(.0))]
    RewroteBranch(Oid),
    /// A changed file holds the value of a secret variable swarm knows (it was passed to the
    /// worker with `[sandbox] env`, or found another way): it is not committed, so it cannot
    /// be merged or pushed.
    #[error("the worker wrote the value of {1} into {0}; swarm does not commit secrets")]
    Secret(RepoPath, String),
    /// A file's name holds a secret value.
    #[error("the worker named a file after the value of {1} ({0}); swarm does not commit secrets")]
    SecretName(RepoPath, String),
    /// A commit the worker made holds a secret value in its message.
    #[error(
        "the worker's commit {} holds the value of {} in its message; swarm does not commit secrets",
        crate::ids::short(.0),
        .1
    )]
    SecretMessage(Oid, String),
    /// A changed file git runs through a filter driver, which swarm cannot run.
    #[error(
        "the worker changed {0}, which has the attribute filter={1}; swarm cannot run filter drivers, so it does not commit it"
    )]
    Filtered(RepoPath, String),
    #[error(transparent)]
    Git(#[from] git2::Error),
}

/// What a commit stages of a full checkout.
#[derive(Clone, Copy)]
pub(crate) struct Staged<'a> {
    /// Left out of the commit (what a check alone wrote).
    pub leave_out: &'a BTreeSet<RepoPath>,
    /// `Some`: the only paths anything wrote in the worktree (the built-in worker's tools,
    /// when nothing else wrote there), staged without walking the worktree's status.
    pub written: Option<&'a [RepoPath]>,
}

/// Commits the changes of the worktree `repo` (opened through its administrative directory,
/// see [`super::worktree::WorktreePool::open`]) on `branch` (which must be HEAD). Blocking.
pub(crate) fn commit_task(
    repo: &Repository,
    branch: &str,
    start: Oid,
    message: &str,
    staged: Staged<'_>,
) -> Result<Committed, CommitError> {
    commit_with(repo, branch, start, message, |repo, tip_tree, _| {
        stage_changes(repo, tip_tree, staged)
    })
}

/// The part of a commit common to both kinds of worktree: HEAD put back on the task branch if
/// the worker moved it, the worker's own commits checked, and `stage`'s tree (built from the
/// tip's tree and the start's) committed when it differs from the tip's.
fn commit_with(
    repo: &Repository,
    branch: &str,
    start: Oid,
    message: &str,
    stage: impl FnOnce(
        &Repository,
        &git2::Tree<'_>,
        &git2::Tree<'_>,
    ) -> Result<(Oid, Vec<RepoPath>), CommitError>,
) -> Result<Committed, CommitError> {
    let wanted = super::branch_ref(branch);
    let head = repo.find_reference("HEAD")?;
    let head_target = head.symbolic_target().ok().flatten();
    let moved_head = if head_target != Some(wanted.as_str()) {
        let now = match head_target {
            Some(t) => t.trim_start_matches("refs/heads/").to_string(),
            None => head
                .target()
                .map(|o| format!("detached at {}", crate::ids::short(&o)))
                .unwrap_or_else(|| "unreadable".into()),
        };
        // Back on the task branch: what the worker changed (committed elsewhere or not) is
        // committed there, relative to the task's own history.
        super::point_head(repo, &wanted)?;
        Some(now)
    } else {
        None
    };
    let mut tip = repo.refname_to_id(&wanted)?;
    let mut worker_commits = 0;
    if tip != start {
        if !repo.graph_descendant_of(tip, start)? {
            return Err(CommitError::RewroteBranch(tip));
        }
        worker_commits = repo.graph_ahead_behind(tip, start)?.0;
        if let Err(e) = secrets_in_commits(repo, start, tip) {
            // No branch keeps them (a failed task's branch is kept for inspection).
            repo.reference(&wanted, start, true, "swarm: drop commits holding a secret")?;
            return Err(e);
        }
    }

    let tip_commit = repo.find_commit(tip)?;
    let tip_tree = tip_commit.tree()?;
    let start_tree = repo.find_commit(start)?.tree()?;
    let (tree_id, skipped) = stage(repo, &tip_tree, &start_tree)?;
    if tree_id != tip_tree.id() {
        let tree = repo.find_tree(tree_id)?;
        let sig = super::signature(repo)?;
        tip = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&tip_commit])?;
    }
    let new_tree = repo.find_commit(tip)?.tree()?;
    let changes = super::tree_changes(repo, &start_tree, &new_tree)?;
    Ok(Committed {
        tip,
        changes,
        worker_commits,
        skipped,
        moved_head,
    })
}

/// One task's share of what a worker process did for several tasks (`--per-process`): the
/// start commit's tree with `share` applied (changes from the start to the process's
/// commit), committed with `start` as its only parent, and `branch` pointed there (at `start`
/// itself when `share` is empty). Returns the branch's new tip. Blocking.
pub(crate) fn commit_share(
    repo: &Repository,
    start: Oid,
    share: &[super::TreeChange],
    branch: &str,
    message: &str,
) -> Result<Oid, git2::Error> {
    let start_commit = repo.find_commit(start)?;
    let tip = if share.is_empty() {
        start
    } else {
        let tree = super::apply_changes(repo, share, &start_commit.tree()?)?;
        let sig = super::signature(repo)?;
        repo.commit(
            None,
            &sig,
            &sig,
            message,
            &repo.find_tree(tree)?,
            &[&start_commit],
        )?
    };
    repo.reference(
        &super::branch_ref(branch),
        tip,
        true,
        "swarm: a task's share of its process",
    )?;
    Ok(tip)
}

/// Paths that differ from HEAD in the index or the working tree (untracked included, ignored
/// not). One scan of the worktree.
pub(crate) fn dirty_paths(repo: &Repository) -> Result<Vec<Vec<u8>>, git2::Error> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .renames_head_to_index(false)
        .renames_index_to_workdir(false);
    let statuses = repo.statuses(Some(&mut opts))?;
    Ok(statuses
        .iter()
        .filter(|s| s.status() != Status::CURRENT && !s.status().is_ignored())
        .map(|s| s.path_bytes().to_vec())
        .collect())
}

/// The paths of `written` git's status would list if they changed: tracked ones, and
/// untracked ones not ignored. The others stay out of the commit, as they would after a walk.
fn status_would_list(repo: &Repository, written: &[RepoPath]) -> Result<Vec<Vec<u8>>, git2::Error> {
    let index = repo.index()?;
    let mut paths = Vec::with_capacity(written.len());
    for rel in written {
        if index.get_path(rel.as_path(), 0).is_some() || !repo.is_path_ignored(rel.as_path())? {
            paths.push(rel.as_bytes().to_vec());
        }
    }
    Ok(paths)
}

/// Stages every changed path but those left out, and returns the tree of HEAD with those
/// paths applied.
fn stage_changes(
    repo: &Repository,
    head_tree: &git2::Tree<'_>,
    staged: Staged<'_>,
) -> Result<(Oid, Vec<RepoPath>), CommitError> {
    let mut paths = match staged.written {
        Some(written) => status_would_list(repo, written)?,
        None => dirty_paths(repo)?,
    };
    paths.retain(|p| !staged.leave_out.contains(p.as_slice()));
    if paths.is_empty() {
        return Ok((head_tree.id(), Vec::new()));
    }
    let changed_count = paths.len();
    let workdir = repo.workdir().unwrap_or(Path::new("."));
    let mut index = repo.index()?;
    let mut dirs = RealDirs::new(workdir);
    // Removals first, in the index and in the tree, so that a path that changed type (file to
    // folder, folder to link) can be added where the old entries were.
    let (present, gone): (Vec<RepoPath>, Vec<RepoPath>) = paths
        .into_iter()
        .map(RepoPath::from_bytes)
        .partition(|rel| dirs.holds_file(rel));
    let removals = clear_old_entries(&mut index, head_tree, &present, &gone);
    let base_tree = repo.find_tree(remove_all(repo, head_tree, &removals)?)?;
    let mut update = super::TreeEdit::new();
    let mut skipped = Vec::new();
    for rel in present {
        if let Some(name) = super::repo::active_filter(repo, &rel) {
            return Err(CommitError::Filtered(rel, name));
        }
        // Before the content becomes an object of the repository.
        secret_check(&rel, &workdir.join(rel.as_path()))?;
        if let Err(e) = index.add_path(rel.as_path()) {
            tracing::warn!("cannot stage {rel}: {}", e.message());
            skipped.push(rel);
            continue;
        }
        let Some(entry) = index.get_path(rel.as_path(), 0) else {
            skipped.push(rel);
            continue;
        };

        let mode = super::file_mode(entry.mode as i32);
        update.upsert(rel.as_bytes(), entry.id, mode);
    }
    index.write()?;
    tracing::debug!("staged {} changed path(s)", changed_count - skipped.len());
    Ok((update.create_updated(repo, &base_tree)?, skipped))
}

/// Removes from `index` the entries the changed paths replace: deleted files (`gone`), and
/// for each path still there (`present`), a folder's entries where it is now a file or a
/// link, or a file where it is now a folder. Returns the paths to remove from the tree.
fn clear_old_entries(
    index: &mut git2::Index,
    head_tree: &git2::Tree<'_>,
    present: &[RepoPath],
    gone: &[RepoPath],
) -> BTreeSet<PathBuf> {
    let mut removals: BTreeSet<PathBuf> = BTreeSet::new();
    for rel in gone {
        // Deleted (the index may not have it if the worker staged the deletion).
        let _ = index.remove_path(rel.as_path());
        if head_tree.get_path(rel.as_path()).is_ok() {
            removals.insert(rel.as_path().to_path_buf());
        }
    }
    for rel in present {
        // An entry standing where a folder now is, or the entries of a folder replaced by a
        // file or a link.
        let _ = index.remove_path(rel.as_path());
        let _ = index.remove_dir(rel.as_path(), 0);
        if let Ok(entry) = head_tree.get_path(rel.as_path())
            && entry.kind() == Some(git2::ObjectType::Tree)
        {
            removals.insert(rel.as_path().to_path_buf());
        }
        for parent in rel.as_path().ancestors().skip(1) {
            if parent.as_os_str().is_empty() {
                break;
            }
            if let Ok(entry) = head_tree.get_path(parent)
                && entry.kind() != Some(git2::ObjectType::Tree)
            {
                let _ = index.remove_path(parent);
                removals.insert(parent.to_path_buf());
            }
        }
    }
    removals
}

/// `tree` without `removals` (a folder removed whole takes what is below it along).
fn remove_all(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    removals: &BTreeSet<PathBuf>,
) -> Result<Oid, git2::Error> {
    let mut remove = super::TreeEdit::new();
    for path in removals {
        let below_another = path.ancestors().skip(1).any(|a| removals.contains(a));
        if !below_another {
            remove.remove(path.as_os_str().as_bytes());
        }
    }
    remove.create_updated(repo, tree)
}

/// Refuses a changed file whose name, or content, holds a secret value swarm knows.
fn secret_check(rel: &RepoPath, at: &Path) -> Result<(), CommitError> {
    let secrets = crate::secrets::redactor();
    if let Some(name) = secrets.find(rel.as_bytes()) {
        return Err(CommitError::SecretName(rel.clone(), name.to_string()));
    }
    match secret_in(at) {
        Some(name) => Err(CommitError::Secret(rel.clone(), name)),
        None => Ok(()),
    }
}

/// Refuses the worker's own commits (`start..tip`) if a message, a file name or a file
/// they add holds a secret value swarm knows: they would be merged as they are.
fn secrets_in_commits(repo: &Repository, start: Oid, tip: Oid) -> Result<(), CommitError> {
    let secrets = crate::secrets::redactor();
    if secrets.is_empty() {
        return Ok(());
    }
    let mut walk = repo.revwalk()?;
    walk.push(tip)?;
    walk.hide(start)?;
    for id in walk {
        let commit = repo.find_commit(id?)?;
        if let Some(name) = secrets.find(commit.message_bytes()) {
            return Err(CommitError::SecretMessage(commit.id(), name.to_string()));
        }
        let parent_tree = match commit.parent(0) {
            Ok(parent) => Some(parent.tree()?),
            Err(_) => None,
        };
        let tree = commit.tree()?;
        let empty = repo.find_tree(repo.treebuilder(None)?.write()?)?;
        for change in super::tree_changes(repo, parent_tree.as_ref().unwrap_or(&empty), &tree)? {
            if let Some(name) = secrets.find(change.path.as_bytes()) {
                return Err(CommitError::SecretName(change.path, name.to_string()));
            }
            let Some((blob, _)) = change.new else {
                continue;
            };
            if let Some(name) = repo
                .find_blob(blob)
                .ok()
                .and_then(|b| secrets.find(b.content()).map(str::to_string))
            {
                return Err(CommitError::Secret(change.path, name));
            }
        }
    }
    Ok(())
}

/// The name of a secret variable whose value the file (or link) at `path` holds.
fn secret_in(path: &Path) -> Option<String> {
    let secrets = crate::secrets::redactor();
    if secrets.is_empty() {
        return None;
    }
    let meta = std::fs::symlink_metadata(path).ok()?;
    let content = if meta.is_symlink() {
        std::fs::read_link(path)
            .ok()?
            .as_os_str()
            .as_bytes()
            .to_vec()
    } else if meta.is_file() {
        std::fs::read(path).ok()?
    } else {
        return None;
    };
    secrets.find(&content).map(str::to_string)
}

/// Which directories of a worktree are real directories (not links, not files), looked up
/// once each with `lstat`.
struct RealDirs {
    root: PathBuf,
    known: HashMap<PathBuf, bool>,
}

impl RealDirs {
    fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            known: HashMap::new(),
        }
    }

    /// Is `rel` a file or a link in the worktree, reached through real directories only (as
    /// git sees it; a path below a link does not exist)?
    fn holds_file(&mut self, rel: &RepoPath) -> bool {
        let path = rel.as_path();
        let parents_real = path
            .parent()
            .into_iter()
            .flat_map(Path::ancestors)
            .filter(|p| !p.as_os_str().is_empty())
            .all(|dir| self.is_real_dir(dir));
        parents_real && std::fs::symlink_metadata(self.root.join(path)).is_ok_and(|m| !m.is_dir())
    }

    fn is_real_dir(&mut self, rel: &Path) -> bool {
        if let Some(known) = self.known.get(rel) {
            return *known;
        }
        let real = std::fs::symlink_metadata(self.root.join(rel)).is_ok_and(|m| m.is_dir());
        self.known.insert(rel.to_path_buf(), real);
        real
    }
}
