//! Committing an overlay worktree: what its view's upper layer holds, on its task branch.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use git2::{FileMode, Oid, Repository};

use super::{CommitError, Committed, commit_with, remove_all, secret_check};
use crate::git::ignore::LazyIgnore;
use crate::git::view::upper_changes;
use crate::repo_path::RepoPath;
use swarm_sandbox::overlay;

/// The base checkout a view shows, as its commits read it.
#[derive(Clone, Copy)]
pub(crate) struct ViewBase<'a> {
    /// The base checkout's repository: its working files hold the `.gitignore` and
    /// `.gitattributes` files that say which untracked paths stay out and how files are
    /// converted, and its objects are the worktree's.
    pub repo: &'a Repository,
    /// Nothing can turn a conversion or a filter driver on for the base's files
    /// ([`crate::git::filters`]): a file's blob is its bytes, written without asking
    /// libgit2 for its attributes.
    pub filters_off: bool,
}

/// Commits the changes of an overlay worktree (opened through its administrative directory),
/// read from its view's `upper` directory, on `branch` (which must be HEAD). `base` is the
/// base checkout the view shows. The worktree's index is left as it was: the view is reset
/// before it is used again. Paths in `leave_out` (what a check alone wrote) are not
/// committed. Blocking.
pub(crate) fn commit_view(
    repo: &Repository,
    base: ViewBase<'_>,
    branch: &str,
    start: Oid,
    message: &str,
    upper: &Path,
    leave_out: &BTreeSet<RepoPath>,
) -> Result<Committed, CommitError> {
    commit_with(
        repo,
        branch,
        start,
        message,
        |repo, tip_tree, start_tree| {
            stage_view(repo, base, (tip_tree, start_tree), upper, leave_out)
        },
    )
}

/// The tree of an overlay worktree: `tip_tree` with what its `upper` directory holds. Paths
/// the worker changed in its own commits but that the upper directory does not cover show
/// the base's version in the view (the base is `start_tree`), so they get it back.
fn stage_view(
    repo: &Repository,
    base: ViewBase<'_>,
    (tip_tree, start_tree): (&git2::Tree<'_>, &git2::Tree<'_>),
    upper: &Path,
    leave_out: &BTreeSet<RepoPath>,
) -> Result<(Oid, Vec<RepoPath>), CommitError> {
    let io = |e: std::io::Error| git2::Error::from_str(&format!("cannot read the worktree: {e}"));
    let rules = LazyIgnore::new(base.repo, upper);
    let mut changes = upper_changes(upper, tip_tree, &|p, d| rules.ignored(p, d)).map_err(io)?;
    changes.removed.retain(|p| !leave_out.contains(p));
    changes.present.retain(|(p, _)| !leave_out.contains(p));
    changes.skipped.retain(|p| !leave_out.contains(p));
    let mut removals: BTreeSet<PathBuf> = changes
        .removed
        .iter()
        .map(|p| p.as_path().to_path_buf())
        .collect();
    let mut update = crate::git::TreeEdit::new();
    if tip_tree.id() != start_tree.id() {
        for rel in crate::git::changed_paths(repo, start_tree, tip_tree)? {
            if covered_by_upper(upper, &rel) {
                continue;
            }
            match start_tree.get_path(rel.as_path()) {
                Ok(entry) => {
                    update.upsert(
                        rel.as_bytes(),
                        entry.id(),
                        crate::git::file_mode(entry.filemode()),
                    );
                }
                Err(_) => {
                    removals.insert(rel.as_path().to_path_buf());
                }
            }
        }
    }
    let base_tree = repo.find_tree(remove_all(repo, tip_tree, &removals)?)?;
    let filemode = repo
        .config()
        .and_then(|c| c.get_bool("core.filemode"))
        .unwrap_or(true);
    for (rel, at) in &changes.present {
        // With no attribute anywhere, no file has a `filter` attribute either.
        if let Some(name) = (!base.filters_off)
            .then(|| crate::git::repo::active_filter(base.repo, rel))
            .flatten()
        {
            return Err(CommitError::Filtered(rel.clone(), name));
        }
        secret_check(rel, at)?;
        let old_mode = tip_tree
            .get_path(rel.as_path())
            .ok()
            .map(|e| crate::git::file_mode(e.filemode()));
        // Blobs go to the object database the base shares with the worktree.
        let (id, mode) = hash_view_file(base, rel, at, filemode, old_mode)?;
        update.upsert(rel.as_bytes(), id, mode);
    }
    tracing::debug!(
        "staged {} changed and {} removed path(s) of a view",
        changes.present.len(),
        removals.len()
    );
    Ok((update.create_updated(repo, &base_tree)?, changes.skipped))
}

/// Does `upper` say what the view holds at `rel` (an entry there, or a deleted, replaced or
/// opaque folder above it)?
fn covered_by_upper(upper: &Path, rel: &RepoPath) -> bool {
    if std::fs::symlink_metadata(upper.join(rel.as_path())).is_ok() {
        return true;
    }
    rel.as_path()
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .any(|a| {
            let at = upper.join(a);
            std::fs::symlink_metadata(&at).is_ok_and(|m| !m.is_dir() || overlay::is_opaque(&at))
        })
}

/// A file up to this size whose blob is its bytes is read whole and written as one object;
/// a larger one is streamed.
const READ_WHOLE: u64 = 8 << 20;

/// The blob of the view's file or link at `at` (path `rel` in the repository), with git's
/// conversions for `rel` applied, and its mode. With the base's filters off, libgit2 is not
/// asked for `rel`'s attributes (a look-up of each folder's `.gitattributes` on the way,
/// and a temporary file the stream is written to and read back from), as a commit would
/// find none.
fn hash_view_file(
    base: ViewBase<'_>,
    rel: &RepoPath,
    at: &Path,
    filemode: bool,
    old_mode: Option<FileMode>,
) -> Result<(Oid, FileMode), git2::Error> {
    use std::io::Read as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let repo = base.repo;
    let io = |e: std::io::Error| git2::Error::from_str(&format!("cannot read {rel}: {e}"));
    let meta = std::fs::symlink_metadata(at).map_err(io)?;
    if meta.is_symlink() {
        let target = std::fs::read_link(at).map_err(io)?;
        return Ok((repo.blob(target.as_os_str().as_bytes())?, FileMode::Link));
    }
    let mut file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(at)
        .map_err(io)?;
    let id = if base.filters_off && meta.len() <= READ_WHOLE {
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).map_err(io)?;
        repo.blob(&bytes)?
    } else {
        let hint = (!base.filters_off).then(|| rel.as_path());
        let mut writer = repo.blob_writer(hint)?;
        std::io::copy(&mut file, &mut writer).map_err(io)?;
        writer.commit()?
    };
    let mode = if !filemode {
        old_mode
            .filter(|m| matches!(m, FileMode::Blob | FileMode::BlobExecutable))
            .unwrap_or(FileMode::Blob)
    } else if meta.permissions().mode() & 0o100 != 0 {
        FileMode::BlobExecutable
    } else {
        FileMode::Blob
    };
    Ok((id, mode))
}
