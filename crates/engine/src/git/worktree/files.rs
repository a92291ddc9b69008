//! Writing into a worktree a worker has had: the reset for the next task, and the files
//! copied in from the user's checkout (`[worktree] copy`). Both run confined
//! ([`super::WorktreePool::write_in`]) and never follow a link a worker planted.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use anyhow::Context as _;
use git2::Repository;
use git2::build::CheckoutBuilder;

use crate::repo_path::RepoPath;
use crate::state;

/// Points the idle worktree `wt` (at `path`) at `branch_ref` and makes its files those of
/// `start`, through git's checkout filters unless `filters_off`
/// ([`crate::git::filters`]).
///
/// When the worktree is clean (its files and index are exactly its HEAD commit, as they are
/// after swarm committed a task), only the paths that differ between that commit and `start`
/// are checked out: proportional to the previous task's change. Otherwise (a worker left
/// something behind that was not committed) the paths that differ from HEAD are put back
/// too, untracked files removed; ignored files survive either way. What differs from HEAD is
/// `left_by_commit` when swarm's own commit just left the worktree so (that commit's status
/// walk found it), else a status walk of its own. Paths are literal (no
/// pathspec patterns: [`crate::git::literal_pathspec`]), and links standing on them are removed
/// first.
pub(super) fn reset(
    wt: &Repository,
    path: &Path,
    branch_ref: &str,
    (start, filters_off): (&git2::Commit<'_>, bool),
    left_by_commit: Option<Vec<Vec<u8>>>,
) -> anyhow::Result<()> {
    let dirty = match left_by_commit {
        Some(left) => left,
        None => crate::git::commit::dirty_paths(wt)?,
    };
    let head_tree = wt.head().ok().and_then(|h| h.peel_to_tree().ok());
    tracing::debug!(
        worktree = %path.display(),
        clean = dirty.is_empty(),
        "reset for {}",
        branch_ref
    );
    let mut paths: Vec<RepoPath> = match &head_tree {
        Some(tree) => crate::git::changed_paths(wt, tree, &start.tree()?)?,
        None => Vec::new(),
    };
    paths.extend(dirty.iter().map(|p| RepoPath::from_bytes(p.clone())));
    paths.sort();
    paths.dedup();
    crate::git::point_head(wt, branch_ref)?;
    if paths.is_empty() && head_tree.is_some() {
        return Ok(());
    }
    clear_links(path, &paths)?;
    let mut checkout = CheckoutBuilder::new();
    checkout.force().disable_filters(filters_off);
    if head_tree.is_some() {
        for p in &paths {
            checkout.path(crate::git::literal_pathspec(p));
        }
    }
    if !dirty.is_empty() {
        checkout.remove_untracked(true);
    }
    wt.checkout_head(Some(&mut checkout))
        .with_context(|| format!("cannot reset worktree {}", path.display()))?;
    Ok(())
}

/// Removes every symbolic link (and every file where a folder belongs) standing on `paths`
/// under `root`, so that writing them cannot go through a link a worker planted.
pub(super) fn clear_links(root: &Path, paths: &[RepoPath]) -> std::io::Result<()> {
    for p in paths {
        let parts: Vec<&[u8]> = p.as_bytes().split(|b| *b == b'/').collect();
        let mut at = root.to_path_buf();
        for (i, part) in parts.iter().enumerate() {
            at.push(OsStr::from_bytes(part));
            let meta = match std::fs::symlink_metadata(&at) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(e),
            };
            let last = i + 1 == parts.len();
            if meta.is_symlink() || (!last && !meta.is_dir()) {
                std::fs::remove_file(&at)?;
                break;
            }
        }
    }
    Ok(())
}

/// Copies `rel` (`[worktree] copy`) from the user's checkout into a new worktree: a regular
/// file reached through real directories on both sides (no link is followed, so a link in the
/// checkout cannot bring in a file from elsewhere, nor one in the worktree send it out).
pub(super) fn copy_into(checkout: &Path, worktree: &Path, rel: &RepoPath) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let real_dirs = |root: &Path| {
        rel.as_path()
            .parent()
            .into_iter()
            .flat_map(Path::ancestors)
            .filter(|a| !a.as_os_str().is_empty())
            .all(|a| std::fs::symlink_metadata(root.join(a)).is_ok_and(|m| m.is_dir()))
    };
    let from = checkout.join(rel.as_path());
    let is_file = std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file());
    if !is_file || !real_dirs(checkout) {
        tracing::warn!("[worktree] copy: {rel} is not a file of your checkout; skipped");
        return Ok(());
    }
    let mut source = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&from)
        .with_context(|| format!("cannot read {}", from.display()))?;
    let to = worktree.join(rel.as_path());
    if let Some(parent) = rel.as_path().parent() {
        clear_links(
            worktree,
            &[RepoPath::from_bytes(parent.as_os_str().as_bytes().to_vec())],
        )?;
        std::fs::create_dir_all(worktree.join(parent))?;
    }
    anyhow::ensure!(
        real_dirs(worktree),
        "[worktree] copy: cannot place {rel} in the worktree"
    );
    let mut target =
        state::create_file(&to).with_context(|| format!("cannot copy {rel} into the worktree"))?;
    std::io::copy(&mut source, &mut target)?;
    Ok(())
}
