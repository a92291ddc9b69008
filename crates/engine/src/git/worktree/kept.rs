//! The base checkout kept from one run to the next (`--reuse-base`, `[worktree] reuse_base`).
//!
//! Without it, every run with overlay worktrees checks its whole base out before its first
//! worker starts (100,000 files: 3–5 s) and deletes it at the end. Kept, it is git's worktree
//! `swarm-base` at `<git-common-dir>/swarm/base`, and the next run brings it to its own base
//! in proportion to what differs:
//!
//! - One run at a time: a run holds `swarm/base.lock` (`flock`) from the moment it takes the
//!   checkout until the run ends. A run that finds it taken makes a base checkout of its own,
//!   as without the option.
//! - `swarm/base.ready` names the commit the checkout holds, whole. It is removed before the
//!   checkout is touched and written once it is whole again: a run killed half way leaves no
//!   `ready`, and the next run makes the checkout anew.
//! - Nothing of swarm's writes there between runs (workers see it only as the read-only lower
//!   layer of their overlays; their git writes to a layer of its own), but any process of the
//!   user's can. So a run trusts nothing it finds there ([`survey`]): every file of the index
//!   is compared with its stat data, the change time included (no process can set it back),
//!   and every folder is listed for what the index does not have. What is not the index's is
//!   removed (an ignored file there would be in every view); what differs is written again,
//!   with the files that changed between the two bases.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use git2::build::CheckoutBuilder;
use git2::{Oid, Repository};

use super::parallel::in_parallel;
use super::{Head, Threads, WorktreePool, copy_into, open_worktree};
use crate::repo_path::RepoPath;
use crate::state;
use swarm_sandbox as sandbox;

/// git's name of the kept checkout's worktree.
const NAME: &str = "swarm-base";

/// Where the kept checkout is.
fn kept_dir(common_dir: &Path) -> PathBuf {
    state::swarm_dir(common_dir).join("base")
}

fn ready_file(common_dir: &Path) -> PathBuf {
    state::swarm_dir(common_dir).join("base.ready")
}

/// The lock on the kept checkout, or `None` while another run holds it.
fn take_lock(common_dir: &Path) -> std::io::Result<Option<File>> {
    std::fs::create_dir_all(state::swarm_dir(common_dir))?;
    let file = state::lock_file(&state::swarm_dir(common_dir).join("base.lock"))?;
    Ok(state::try_lock(&file)?.then_some(file))
}

/// The commit `base.ready` names, if it names one.
fn read_ready(common_dir: &Path) -> Option<Oid> {
    let text = std::fs::read(ready_file(common_dir)).ok()?;
    std::str::from_utf8(text.trim_ascii()).ok()?.parse().ok()
}

impl WorktreePool {
    /// The kept base checkout, whole at `start`: its name, its path, and the lock this run
    /// holds on it; `None` while another run uses it. Blocking.
    pub(super) fn kept_base(
        &self,
        repo: &Repository,
        start: Oid,
    ) -> anyhow::Result<Option<(String, PathBuf, File)>> {
        let common = &self.common_dir;
        let Some(lock) = take_lock(common).context("cannot lock the kept base checkout")? else {
            tracing::warn!("another run uses the kept base checkout; this run makes its own");
            return Ok(None);
        };
        let path = kept_dir(common);
        let held = read_ready(common);
        state::remove_file_if_present(&ready_file(common))?;
        let refreshed = held.is_some_and(|old| match self.refresh(old, start, &path) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("the kept base checkout is made anew: {e:#}");
                false
            }
        });
        if !refreshed {
            self.remake_kept(repo, start, &path)?;
        }
        state::write_file(&ready_file(common), format!("{start}\n").as_bytes())
            .context("cannot write swarm/base.ready")?;
        Ok(Some((NAME.to_string(), path.canonicalize()?, lock)))
    }

    /// Brings the kept checkout from `old` (what `base.ready` said) to `start`, putting right
    /// whatever else changed in it. Blocking.
    fn refresh(&self, old: Oid, start: Oid, path: &Path) -> anyhow::Result<()> {
        let admin = self.admin_dir(NAME);
        // A link there would take the confinement, and every write, where it points.
        let meta = std::fs::symlink_metadata(path)?;
        anyhow::ensure!(meta.is_dir(), "{} is not a folder", path.display());
        sandbox::confined(&[path.to_path_buf(), admin.clone()], || {
            let began = std::time::Instant::now();
            let wt = open_worktree(&self.common_dir, NAME, &path.canonicalize()?)?;
            check_gitlink(path, &admin)?;
            // Where links are not made, libgit2 writes a link's target into a plain file.
            let links = wt.config()?.get_bool("core.symlinks").unwrap_or(true);
            let found = survey(&wt.index()?, path, links)?;
            tracing::debug!(
                "kept base checkout surveyed in {:?}: {} stale, {} strays",
                began.elapsed(),
                found.stale.len(),
                found.strays.len()
            );
            for stray in &found.strays {
                state::remove_owned(&self.common_dir, stray)
                    .with_context(|| format!("cannot remove {}", stray.display()))?;
            }
            let mut paths = found.stale;
            if old != start {
                let (old, new) = (wt.find_commit(old)?.tree()?, wt.find_commit(start)?.tree()?);
                let changed = crate::git::changed_paths(&wt, &old, &new)?;
                paths.extend(changed.into_iter().map(|p| p.as_bytes().to_vec()));
            }
            paths.sort();
            paths.dedup();
            let tree = wt.find_commit(start)?.tree()?;
            let filters_off = self.filters.off_for(&wt, tree.id());
            check_out_paths(&wt, (&tree, filters_off), &paths)?;
            wt.set_head_detached(start)?;
            tracing::debug!(
                "kept base checkout at {start} in {:?}: {} paths written",
                began.elapsed(),
                paths.len()
            );
            self.copy_in(path)
        })
    }

    /// Makes the kept checkout from nothing: what was there goes (to the trash), then a
    /// worktree is registered and checked out as a run's own base checkout is. Blocking.
    fn remake_kept(&self, repo: &Repository, start: Oid, path: &Path) -> anyhow::Result<()> {
        super::remove_worktree(repo, NAME, path)?;
        self.register_at(repo, NAME, path, Head::Detached(start))?;
        self.populate(NAME, &path.canonicalize()?, Threads::Several)?;
        let reason = "kept by swarm for the next run (--reuse-base); swarm clean --all removes it";
        if let Err(e) = repo
            .find_worktree(NAME)
            .and_then(|wt| wt.lock(Some(reason)))
        {
            tracing::debug!("cannot lock worktree {NAME}: {e}");
        }
        Ok(())
    }

    /// Copies `[worktree] copy` from the user's checkout into the worktree at `path`.
    pub(super) fn copy_in(&self, path: &Path) -> anyhow::Result<()> {
        for rel in &self.copy {
            copy_into(&self.user_workdir, path, &RepoPath::from(rel.as_str()))?;
        }
        Ok(())
    }
}

/// Removes the kept checkout (for `swarm clean --all`), unless a run in progress holds it.
/// `Ok(true)` if there was one.
pub(crate) fn remove_kept_base(common_dir: &Path) -> anyhow::Result<bool> {
    let Some(_lock) = take_lock(common_dir)? else {
        return Ok(false);
    };
    state::remove_file_if_present(&ready_file(common_dir))?;
    let repo = Repository::open(common_dir)?;
    let path = kept_dir(common_dir);
    let there = repo.find_worktree(NAME).is_ok() || std::fs::symlink_metadata(&path).is_ok();
    super::remove_worktree(&repo, NAME, &path)?;
    Ok(there)
}

/// `Err` unless the checkout's `.git` file is a file pointing at its record `admin`.
fn check_gitlink(path: &Path, admin: &Path) -> anyhow::Result<()> {
    let dot_git = path.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git)?;
    anyhow::ensure!(meta.is_file(), "its .git is not a file");
    let text = std::fs::read(&dot_git)?;
    let target = text
        .trim_ascii()
        .strip_prefix(b"gitdir: ")
        .context("its .git file names no git directory")?;
    let target = Path::new(OsStr::from_bytes(target)).canonicalize()?;
    anyhow::ensure!(
        target == admin.canonicalize()?,
        "its .git file points elsewhere"
    );
    Ok(())
}

/// What differs between a checkout and its index.
#[derive(Debug, Default)]
struct Survey {
    /// Files of the index missing or changed (their stat data differs).
    stale: Vec<Vec<u8>>,
    /// What is there and not in the index: untracked and ignored files, folders, links.
    strays: Vec<PathBuf>,
}

/// Compares the checkout at `root` with `index`: each entry's stat data, and each folder's
/// listing, on a few threads (100,000 files: ~0.25 s on one, most of it in `statx`). `Err`
/// if a folder of the index is not a folder there, or a submodule's folder is not empty
/// (then the checkout is made anew).
fn survey(index: &git2::Index, root: &Path, links: bool) -> anyhow::Result<Survey> {
    let entries: Vec<git2::IndexEntry> = index.iter().collect();
    let files: HashSet<&[u8]> = entries.iter().map(|e| e.path.as_slice()).collect();
    let mut folders: HashSet<&[u8]> = HashSet::from([&b""[..]]);
    for entry in &entries {
        let mut parent = entry.path.as_slice();
        while let Some(slash) = parent.iter().rposition(|&b| b == b'/') {
            parent = &parent[..slash];
            if !folders.insert(parent) {
                break;
            }
        }
    }
    let mut found = Survey::default();
    for part in in_parallel(&entries, |mine| compare_files(mine, root, links)) {
        let (stale, strays) = part?;
        found.stale.extend(stale);
        found.strays.extend(strays);
    }
    let listed: Vec<&[u8]> = folders.iter().copied().collect();
    for part in in_parallel(&listed, |mine| list_folders(mine, root, &folders, &files)) {
        found.strays.extend(part?);
    }
    Ok(found)
}

/// The files of `entries` missing or changed (their paths), and what stands where the index
/// has something of another kind (to be removed first: a checkout would write through a
/// link). `Err` if a submodule's folder is not empty.
fn compare_files(
    entries: &[git2::IndexEntry],
    root: &Path,
    links: bool,
) -> anyhow::Result<(Vec<Vec<u8>>, Vec<PathBuf>)> {
    let (mut stale, mut strays) = (Vec::new(), Vec::new());
    for entry in entries {
        let file = root.join(OsStr::from_bytes(&entry.path));
        if entry.mode == 0o160000 {
            let empty = std::fs::read_dir(&file).is_ok_and(|mut d| d.next().is_none());
            anyhow::ensure!(empty, "submodule folder {} is not empty", file.display());
            continue;
        }
        match std::fs::symlink_metadata(&file) {
            Ok(meta) if same_stat(entry, &meta, links) => {}
            Ok(meta) if !same_kind(entry, &meta, links) => {
                strays.push(file);
                stale.push(entry.path.clone());
            }
            _ => stale.push(entry.path.clone()),
        }
    }
    Ok((stale, strays))
}

/// What the listings of `mine` (folders of the index) hold that the index does not have.
/// `Err` if one of the index's folders is not a folder there.
fn list_folders(
    mine: &[&[u8]],
    root: &Path,
    folders: &HashSet<&[u8]>,
    files: &HashSet<&[u8]>,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut strays = Vec::new();
    for folder in mine {
        let dir = root.join(OsStr::from_bytes(folder));
        let listing =
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
        for child in listing {
            let child = child?;
            let mut rel = folder.to_vec();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(child.file_name().as_bytes());
            let is_dir = child.file_type()?.is_dir();
            let is_folder = folders.contains(rel.as_slice());
            anyhow::ensure!(
                is_dir || !is_folder,
                "{} is not a folder",
                child.path().display()
            );
            let known = is_folder || files.contains(rel.as_slice());
            let gitlink = folder.is_empty() && child.file_name() == ".git";
            if !known && !gitlink {
                strays.push(child.path());
            }
        }
    }
    Ok(strays)
}

/// Is the file `meta` describes of the kind `entry` says (a link, a file, executable or not)?
/// A link is a plain file where the checkout makes no `links`.
fn same_kind(entry: &git2::IndexEntry, meta: &std::fs::Metadata, links: bool) -> bool {
    match entry.mode {
        0o120000 if links => meta.file_type().is_symlink(),
        0o120000 => meta.is_file(),
        0o100755 => meta.is_file() && meta.mode() & 0o111 != 0,
        _ => meta.is_file() && meta.mode() & 0o111 == 0,
    }
}

/// Does the file `meta` describes still match `entry` (kind, size, times, inode, owner)?
/// (libgit2 is built with `GIT_USE_NSEC`: the times are to the nanosecond. Its checkout
/// leaves the device out, as git does unless `core.checkStat` says otherwise.)
fn same_stat(entry: &git2::IndexEntry, meta: &std::fs::Metadata, links: bool) -> bool {
    same_kind(entry, meta, links)
        && entry.ctime == git2::IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32)
        && entry.mtime == git2::IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32)
        && entry.ino == meta.ino() as u32
        && entry.uid == meta.uid()
        && entry.gid == meta.gid()
        && entry.file_size == meta.size() as u32
}

/// Checks `paths` of `tree` out (written, or removed where the tree has none), forced,
/// through git's filters unless `filters_off`, and updates the index. Plain paths go to
/// libgit2 as a list it looks each entry up in; a path its pattern parser would read
/// otherwise (a backslash, a leading `!` or `#`, a space) as an escaped pathspec.
fn check_out_paths(
    wt: &Repository,
    (tree, filters_off): (&git2::Tree<'_>, bool),
    paths: &[Vec<u8>],
) -> anyhow::Result<()> {
    let special = |p: &&Vec<u8>| {
        p.starts_with(b"!")
            || p.starts_with(b"#")
            || p.iter().any(|&b| b == b'\\' || b.is_ascii_whitespace())
    };
    let (odd, plain): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) = paths.iter().partition(special);
    if !plain.is_empty() {
        let mut checkout = CheckoutBuilder::new();
        checkout
            .force()
            .disable_filters(filters_off)
            .disable_pathspec_match(true);
        for p in plain {
            checkout.path(p.as_slice());
        }
        wt.checkout_tree(tree.as_object(), Some(&mut checkout))?;
    }
    if !odd.is_empty() {
        let mut checkout = CheckoutBuilder::new();
        checkout.force().disable_filters(filters_off);
        for p in odd {
            checkout.path(crate::git::literal_pathspec(&RepoPath::from_bytes(
                p.clone(),
            )));
        }
        wt.checkout_tree(tree.as_object(), Some(&mut checkout))?;
    }
    Ok(())
}
