//! The user's repository and the checks made before anything is written.

use std::path::{Path, PathBuf};

use git2::{BranchType, ErrorCode, Oid, Repository, Status, StatusOptions};

use crate::repo_path::RepoPath;

/// `IndexEntry::flags_extended` bit of an entry outside a sparse checkout.
const SKIP_WORKTREE: u16 = 1 << 14;

/// What is wrong with the repository, or with what was asked of it: the user's input
/// (exit 2), except [`RepoError::Git`], a failure of git itself.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("not a git repository: {}", .0.display())]
    NotARepository(PathBuf),
    #[error("{} is a bare repository: there is no checkout to merge into", .0.display())]
    Bare(PathBuf),
    #[error("the repository has no commits yet")]
    NoCommits,
    #[error("HEAD does not point to a commit: {0}")]
    HeadNotACommit(String),
    #[error("cannot read HEAD: {0}")]
    UnreadableHead(String),
    #[error("unknown revision '{0}' for --base")]
    UnknownBase(String),
    #[error("'{0}' is not a valid branch name for --into")]
    InvalidInto(String),
    #[error("HEAD is detached, so there is no current branch to merge into")]
    Detached,
    #[error("branch '{branch}' is checked out in another worktree: {}", .path.display())]
    CheckedOutElsewhere { branch: String, path: PathBuf },
    #[error("branch '{branch}' does not point to a commit: {message}")]
    BranchNotACommit { branch: String, message: String },
    #[error(
        "{first}{} has the attribute filter={filter}, and filter.{filter} is configured: swarm \
         cannot run filter drivers, so it would commit and check out what git would not",
        if *.more > 0 { format!(" (and {} more file(s))", .more) } else { String::new() }
    )]
    Filtered {
        first: RepoPath,
        more: usize,
        filter: String,
    },
    #[error("the working tree has uncommitted changes in {}{}", list(.0), if .0.len() > 10 { ", …" } else { "" })]
    Dirty(Vec<RepoPath>),
    #[error("{0} is in progress in your checkout, so swarm could not update it at the end")]
    OperationInProgress(&'static str),
    #[error(transparent)]
    Git(#[from] git2::Error),
}

impl RepoError {
    /// What fixes it, if the user can.
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            RepoError::NotARepository(_) => {
                "run swarm inside a git checkout (or `git init` and commit first)"
            }
            RepoError::Bare(_) => {
                "run swarm in a checkout of it (`git worktree add ../wt BRANCH`, then cd there)"
            }
            RepoError::NoCommits => {
                "commit the files first (`git add -A && git commit`), then run swarm"
            }
            RepoError::UnknownBase(_) => {
                "pass a branch, tag or commit that exists (see `git log --oneline`)"
            }
            RepoError::InvalidInto(_) => {
                "pass a branch name such as `refactor/rename-foo` (not under swarm/)"
            }
            RepoError::Detached => "pass --into BRANCH (a new branch is created at --base)",
            RepoError::CheckedOutElsewhere { .. } => {
                "run swarm in that worktree, or pass another --into branch"
            }
            RepoError::Filtered { .. } => {
                "leave such files out with a pathspec exclusion such as ':!*.bin' (see .gitattributes)"
            }
            RepoError::Dirty(_) => "commit or stash them, or pass --into <new-branch>",
            RepoError::OperationInProgress(_) => {
                "finish or abort it first, or pass --into <new-branch>"
            }
            RepoError::HeadNotACommit(_)
            | RepoError::UnreadableHead(_)
            | RepoError::BranchNotACommit { .. }
            | RepoError::Git(_) => return None,
        })
    }
}

/// The first ten paths, for a message.
fn list(paths: &[RepoPath]) -> String {
    paths
        .iter()
        .take(10)
        .map(|p| p.display())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the user's repository lives.
#[derive(Debug, Clone)]
pub struct RepoInfo {
    /// `.git` of the checkout swarm was started in (`.git/worktrees/<x>` in a linked worktree).
    pub git_dir: PathBuf,
    /// The shared git directory, home of swarm's state and worktrees.
    pub common_dir: PathBuf,
    /// The user's checkout.
    pub workdir: PathBuf,
    /// The directory swarm was started in, relative to `workdir` ("" at the root).
    pub prefix: String,
}

impl RepoInfo {
    pub fn open(&self) -> Result<Repository, git2::Error> {
        Repository::open(&self.git_dir)
    }
}

/// Finds the repository containing `cwd`; refuses a bare repository.
pub(crate) fn discover(cwd: &Path) -> Result<RepoInfo, RepoError> {
    let repo =
        Repository::discover(cwd).map_err(|_| RepoError::NotARepository(cwd.to_path_buf()))?;
    let Some(workdir) = repo.workdir() else {
        return Err(RepoError::Bare(repo.path().to_path_buf()));
    };
    let workdir = workdir.to_path_buf();
    let canon_cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let canon_wd = workdir.canonicalize().unwrap_or_else(|_| workdir.clone());
    let prefix = canon_cwd
        .strip_prefix(&canon_wd)
        .ok()
        .and_then(|p| p.to_str())
        .unwrap_or("")
        .to_string();
    Ok(RepoInfo {
        git_dir: repo.path().to_path_buf(),
        common_dir: repo.commondir().to_path_buf(),
        workdir,
        prefix,
    })
}

/// Resolves `--base` to a commit.
pub(crate) fn resolve_base(repo: &Repository, rev: &str) -> Result<Oid, RepoError> {
    if rev == "HEAD" {
        return match repo.head() {
            Ok(head) => head
                .peel_to_commit()
                .map(|c| c.id())
                .map_err(|e| RepoError::HeadNotACommit(e.message().to_string())),
            Err(e) if e.code() == ErrorCode::UnbornBranch => Err(RepoError::NoCommits),
            Err(e) => Err(RepoError::UnreadableHead(e.message().to_string())),
        };
    }
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .map(|c| c.id())
        .map_err(|_| RepoError::UnknownBase(rev.to_string()))
}

/// The branch that receives the merges.
#[derive(Debug, Clone)]
pub struct IntoTarget {
    /// Short branch name.
    pub branch: String,
    /// Its tip now, or `None` if swarm will create it.
    pub tip: Option<Oid>,
    /// Is it the branch checked out in the user's checkout?
    pub checked_out_here: bool,
}

pub(crate) fn resolve_into(
    repo: &Repository,
    info: &RepoInfo,
    into: Option<&str>,
) -> Result<IntoTarget, RepoError> {
    let head_branch = current_branch(repo)?;
    let branch = match into {
        Some(b) => {
            let b = b.strip_prefix("refs/heads/").unwrap_or(b);
            if !git2::Branch::name_is_valid(b).unwrap_or(false)
                || b.starts_with(crate::ids::BRANCH_NAMESPACE)
            {
                return Err(RepoError::InvalidInto(b.to_string()));
            }
            b.to_string()
        }
        None => head_branch.clone().ok_or(RepoError::Detached)?,
    };
    let checked_out_here = head_branch.as_deref() == Some(branch.as_str());
    if !checked_out_here && let Some(path) = checked_out_elsewhere(repo, info, &branch) {
        return Err(RepoError::CheckedOutElsewhere { branch, path });
    }
    let tip = match repo.find_branch(&branch, BranchType::Local) {
        Ok(b) => Some(b.get().peel_to_commit().map(|c| c.id()).map_err(|e| {
            RepoError::BranchNotACommit {
                branch: branch.clone(),
                message: e.message().to_string(),
            }
        })?),
        Err(_) => None,
    };
    Ok(IntoTarget {
        branch,
        tip,
        checked_out_here,
    })
}

/// The short name of the branch HEAD points to; `None` when detached.
fn current_branch(repo: &Repository) -> Result<Option<String>, RepoError> {
    if repo.head_detached().unwrap_or(false) {
        return Ok(None);
    }
    let head = repo
        .find_reference("HEAD")
        .map_err(|e| RepoError::UnreadableHead(e.message().to_string()))?;
    Ok(head
        .symbolic_target()
        .ok()
        .flatten()
        .and_then(|t| t.strip_prefix("refs/heads/"))
        .map(str::to_string))
}

/// The checkout (other than the user's) that has `branch` checked out, if any.
fn checked_out_elsewhere(repo: &Repository, info: &RepoInfo, branch: &str) -> Option<PathBuf> {
    let wanted = super::branch_ref(branch);
    let mut others: Vec<Repository> = Vec::new();
    if repo.is_worktree()
        && let Ok(main) = Repository::open(&info.common_dir)
    {
        others.push(main);
    }
    if let Ok(names) = repo.worktrees() {
        for name in names.iter().flatten().flatten() {
            if let Ok(wt) = repo.find_worktree(name)
                && let Ok(r) = Repository::open_from_worktree(&wt)
            {
                others.push(r);
            }
        }
    }
    let own = info.git_dir.canonicalize().ok();
    others.into_iter().find_map(|r| {
        if r.path().canonicalize().ok() == own {
            return None;
        }
        let head = r.find_reference("HEAD").ok()?;
        (head.symbolic_target().ok().flatten() == Some(wanted.as_str()))
            .then(|| r.workdir().unwrap_or(r.path()).to_path_buf())
    })
}

/// Tracked files with uncommitted changes (staged or not) in the user's checkout. Files
/// outside a sparse checkout (skip-worktree: git does not expect them on disk) are not
/// changes, though libgit2's status sees them as deleted.
pub(crate) fn dirty_paths(repo: &Repository) -> Result<Vec<RepoPath>, git2::Error> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(false)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut opts))?;
    let index = repo.index()?;
    let outside_sparse = |path: &[u8], status: Status| {
        status == Status::WT_DELETED
            && index
                .get_path(crate::repo_path::bytes_as_path(path), 0)
                .is_some_and(|e| e.flags_extended & SKIP_WORKTREE != 0)
    };
    let mut paths: Vec<RepoPath> = statuses
        .iter()
        .filter(|s| !s.status().is_empty() && s.status() != Status::CURRENT)
        .filter(|s| !outside_sparse(s.path_bytes(), s.status()))
        .map(|s| RepoPath::from_bytes(s.path_bytes().to_vec()))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Is any filter driver configured (`filter.<name>.clean`, `.smudge`, `.process` or
/// `.required`)?
fn has_filter_driver(config: &git2::Config) -> bool {
    let Ok(mut entries) = config.entries(Some(r"^filter\..*\.(clean|smudge|process|required)$"))
    else {
        return true;
    };
    entries.next().is_some()
}

/// The filter driver git would run on `path` (its `filter` attribute, when
/// `filter.<name>.clean`, `.smudge` or `.process` is configured, or the driver is
/// `required`): swarm cannot run filter drivers, so such a file must not be committed or
/// checked out by it (Git LFS is the common case). Attributes are read from the working tree,
/// then the index, as `git add` does.
pub(crate) fn active_filter(repo: &Repository, path: &RepoPath) -> Option<String> {
    let config = repo.config().ok()?;
    // Most repositories configure no filter driver: then no attribute needs reading (which
    // would load the whole index, per file).
    if !has_filter_driver(&config) {
        return None;
    }
    [
        git2::AttrCheckFlags::FILE_THEN_INDEX,
        git2::AttrCheckFlags::INDEX_ONLY,
    ]
    .into_iter()
    .find_map(|flags| {
        let value = repo
            .get_attr_bytes(path.as_path(), "filter", flags)
            .ok()??;
        match git2::AttrValue::from_bytes(Some(value)) {
            git2::AttrValue::Bytes(name) => Some(String::from_utf8_lossy(name).into_owned()),
            git2::AttrValue::String(name) => Some(name.to_string()),
            _ => None,
        }
    })
    .filter(|name| {
        ["clean", "smudge", "process"]
            .iter()
            .any(|k| config.get_string(&format!("filter.{name}.{k}")).is_ok())
            || config
                .get_bool(&format!("filter.{name}.required"))
                .unwrap_or(false)
    })
}

/// Refuses task files that git runs through a filter driver (see [`active_filter`]).
pub(crate) fn check_filters<'a>(
    repo: &Repository,
    files: impl IntoIterator<Item = &'a RepoPath>,
) -> Result<(), RepoError> {
    let filtered: Vec<(&RepoPath, String)> = files
        .into_iter()
        .filter_map(|f| active_filter(repo, f).map(|name| (f, name)))
        .collect();
    match filtered.first() {
        None => Ok(()),
        Some((first, filter)) => Err(RepoError::Filtered {
            first: (*first).clone(),
            more: filtered.len() - 1,
            filter: filter.clone(),
        }),
    }
}

/// Refuses what would stop swarm from updating the checked-out target at the end: a merge
/// (or rebase…) in progress, and uncommitted changes (staged or not) in `touched` files
/// (`None`: any file, with `--scope any`).
pub(crate) fn check_checkout(
    repo: &Repository,
    touched: Option<&std::collections::HashSet<&RepoPath>>,
) -> Result<(), RepoError> {
    if let Some(what) = super::checkout::operation_in_progress(repo) {
        return Err(RepoError::OperationInProgress(what));
    }
    let dirty = match touched {
        Some(touched) => dirty_among(repo, touched)?,
        None => dirty_paths(repo)?,
    };
    match dirty.is_empty() {
        true => Ok(()),
        false => Err(RepoError::Dirty(dirty)),
    }
}

/// Which of `paths` have uncommitted changes (staged or not), as [`dirty_paths`] would list
/// them, in proportion to the paths rather than to the checkout: each path's index entry
/// against HEAD's, and its file against the entry (stat data, else its content; see
/// [`super::checkout::file_is_entry`]). A status walk reads every file and folder of the
/// checkout: seconds on 100,000 files, before the first worker could start.
fn dirty_among(
    repo: &Repository,
    paths: &std::collections::HashSet<&RepoPath>,
) -> Result<Vec<RepoPath>, git2::Error> {
    let index = repo.index()?;
    let written = index
        .path()
        .and_then(|p| std::fs::metadata(p).ok())
        .and_then(|m| m.modified().ok());
    let head = match repo.head() {
        Ok(head) => Some(head.peel_to_tree()?),
        Err(e) if e.code() == ErrorCode::UnbornBranch => None,
        Err(e) => return Err(e),
    };
    let workdir = repo.workdir().map(Path::to_path_buf);
    let mut dirty: Vec<RepoPath> = paths
        .iter()
        .filter(|path| {
            let entry = index.get_path(path.as_path(), 0);
            let conflicted = (1..=3).any(|stage| index.get_path(path.as_path(), stage).is_some());
            let in_head = head
                .as_ref()
                .and_then(|t| t.get_path(path.as_path()).ok())
                .map(|e| (e.id(), e.filemode() as u32));
            let staged = match (in_head, &entry) {
                (Some((id, mode)), Some(e)) => e.id != id || e.mode != mode,
                (None, None) => false,
                _ => true,
            };
            let unstaged = match (&entry, &workdir) {
                (Some(e), Some(workdir)) => {
                    e.flags_extended & SKIP_WORKTREE == 0
                        && !super::checkout::file_is_entry(repo, workdir, e, written)
                }
                _ => false,
            };
            conflicted || staged || unstaged
        })
        .map(|p| (*p).clone())
        .collect();
    dirty.sort();
    Ok(dirty)
}
