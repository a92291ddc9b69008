//! All local repository work, through git2; only network operations run `git`.
//!
//! - [`repo`]: opening the user's repository and the checks that refuse bad input.
//! - [`worktree`]: the pool of reusable worktrees, one per running worker.
//! - [`commit`]: committing what a worker changed on its task branch; [`adopt`]: the
//!   commits a confined worker made with its own git.
//! - [`merge`]: the merge train, in memory, onto the integration branch.
//! - [`finish`]: moving the target branch once, and cleanup; [`checkout`]: the user's
//!   checkout moving with it, all or nothing, and what a run killed with `kill -9` half way
//!   through it left ([`checkout::interrupted`]).
//! - [`shard`]: shard records, and `git fetch`/`git push` (the only git processes).
//! - [`tree_diff`]: what differs between two trees, walking only the folders that differ;
//!   [`tree_edit`]: a tree with some paths set or removed, written as libgit2 writes it.

pub(crate) mod adopt;
pub(crate) mod checkout;
pub(crate) mod commit;
pub(crate) mod filters;
pub(crate) mod finish;
pub(crate) mod ignore;
pub(crate) mod layers;
pub(crate) mod merge;
pub(crate) mod repo;
pub(crate) mod shard;
pub(crate) mod stat;
pub(crate) mod store;
mod tree_diff;
mod tree_edit;
pub(crate) mod view;
pub(crate) mod worktree;

use git2::{Oid, Repository, Signature};

use crate::repo_path::RepoPath;

pub(crate) use tree_diff::tree_changes;
pub(crate) use tree_edit::TreeEdit;

/// The identity of commits swarm makes: `GIT_AUTHOR_*`/`GIT_COMMITTER_*` like git, else
/// `user.name`/`user.email`, else `swarm <swarm@localhost>`.
pub(crate) fn signature(repo: &Repository) -> Result<Signature<'static>, git2::Error> {
    match configured_signature(repo) {
        Some(sig) => Ok(sig),
        None => Signature::now(FALLBACK_NAME, FALLBACK_EMAIL),
    }
}

unsafe extern "C" {
    /// libgit2's `git_repository_set_ident` (copies both strings), which git2 does not wrap.
    fn git_repository_set_ident(
        repo: *mut libgit2_sys::git_repository,
        name: *const std::ffi::c_char,
        email: *const std::ffi::c_char,
    ) -> std::ffi::c_int;
}

/// Readies `repo`, one swarm commits or merges through task after task: its trees and
/// commits stored, not deflated ([`store::write_stored`]), and its reflog entries in swarm's
/// name ([`log_as_committer`]).
pub(crate) fn for_bulk_writes(repo: &Repository) -> Result<(), git2::Error> {
    store::write_stored(repo)?;
    log_as_committer(repo)
}

/// Gives `repo` swarm's committer ([`signature`]) as the identity of its reflog entries, as
/// git writes them. Otherwise libgit2 looks its own up for every branch it moves: a snapshot
/// of the whole configuration, each of its files checked for changes (3 % of a one-file run's
/// CPU: docs/BENCHMARKS-HISTORY.md, "No fast bins").
fn log_as_committer(repo: &Repository) -> Result<(), git2::Error> {
    use git2::Binding as _;
    let sig = signature(repo)?;
    let c = |s: Option<&str>| s.and_then(|s| std::ffi::CString::new(s).ok());
    // A name or address that is not UTF-8 keeps libgit2's own lookup.
    let (Some(name), Some(email)) = (c(sig.name().ok()), c(sig.email().ok())) else {
        return Ok(());
    };
    // SAFETY: a live repository handle and two NUL-terminated strings, which libgit2 copies.
    let rc = unsafe { git_repository_set_ident(repo.raw(), name.as_ptr(), email.as_ptr()) };
    match rc {
        0 => Ok(()),
        rc => Err(git2::Error::last_error(rc)),
    }
}

/// Who commits when neither the environment nor git's config says.
pub(crate) const FALLBACK_NAME: &str = "swarm";
pub(crate) const FALLBACK_EMAIL: &str = "swarm@localhost";

/// The identity the environment (`GIT_COMMITTER_*`, `GIT_AUTHOR_*`) or git's config
/// (`user.name`, `user.email`) gives, if any.
pub(crate) fn configured_signature(repo: &Repository) -> Option<Signature<'static>> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(name), Some(email)) = (
        var("GIT_COMMITTER_NAME").or_else(|| var("GIT_AUTHOR_NAME")),
        var("GIT_COMMITTER_EMAIL").or_else(|| var("GIT_AUTHOR_EMAIL")),
    ) {
        return Signature::now(&name, &email).ok();
    }
    repo.signature().ok().map(|s| s.to_owned())
}

/// Paths that differ between two trees (both sides of renames; no rename detection).
pub(crate) fn changed_paths(
    repo: &Repository,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
) -> Result<Vec<RepoPath>, git2::Error> {
    Ok(paths(&tree_changes(repo, old, new)?))
}

/// The paths of `changes`.
pub(crate) fn paths(changes: &[TreeChange]) -> Vec<RepoPath> {
    changes.iter().map(|c| c.path.clone()).collect()
}

/// The paths `changes` delete: set to nothing, and no folder now either (nothing set under
/// them; a file that became a folder is not deleted).
pub(crate) fn deleted(changes: &[TreeChange]) -> Vec<RepoPath> {
    let set_inside = |folder: &RepoPath| {
        (changes.iter()).any(|c| c.new.is_some() && c.path.is_inside(folder.as_bytes()))
    };
    changes
        .iter()
        .filter(|c| c.new.is_none() && !set_inside(&c.path))
        .map(|c| c.path.clone())
        .collect()
}

/// A file (or link, or submodule) that differs between two trees: its entry on each side,
/// `(id, mode)`, `None` where it is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeChange {
    pub path: RepoPath,
    pub old: Option<(Oid, u32)>,
    pub new: Option<(Oid, u32)>,
}

const TREE_MODE: u32 = 0o040000;

/// The entry at `path` in `tree` as `(id, mode)`, `None` where there is none.
pub(crate) fn entry_at(
    tree: &git2::Tree<'_>,
    path: &RepoPath,
) -> Result<Option<(Oid, u32)>, git2::Error> {
    match tree.get_path(path.as_path()) {
        Ok(e) => Ok(Some((e.id(), e.filemode() as u32))),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What commit `commit` has at `path`, for reading it without a checkout.
pub(crate) enum FileAt {
    Absent,
    /// A regular file (executable or not) of at most the size asked for: its bytes.
    File(Vec<u8>),
    /// A link, a directory, a submodule, or a file over the size asked for.
    Other,
}

/// The file at `path` in `commit`, read if it is a regular file of at most `max` bytes (its
/// size is looked up before it is read).
pub(crate) fn file_at(
    repo: &Repository,
    commit: Oid,
    path: &RepoPath,
    max: usize,
) -> Result<FileAt, git2::Error> {
    let tree = repo.find_commit(commit)?.tree()?;
    let Some((id, mode)) = entry_at(&tree, path)? else {
        return Ok(FileAt::Absent);
    };
    let regular = mode == 0o100644 || mode == 0o100755;
    if !regular || repo.odb()?.read_header(id)?.0 > max {
        return Ok(FileAt::Other);
    }
    Ok(FileAt::File(repo.find_blob(id)?.content().to_vec()))
}

/// An index entry of `path` at blob `id` with `mode`, with no stat data.
pub(crate) fn index_entry(path: &RepoPath, id: git2::Oid, mode: u32) -> git2::IndexEntry {
    let bytes = path.as_bytes().to_vec();
    git2::IndexEntry {
        ctime: git2::IndexTime::new(0, 0),
        mtime: git2::IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: 0,
        id,
        flags: bytes.len().min(0xfff) as u16,
        flags_extended: 0,
        path: bytes,
    }
}

/// `base` with every path in `paths` set to its entry in `from` (or removed).
pub(crate) fn apply_paths(
    repo: &Repository,
    paths: &[RepoPath],
    from: &git2::Tree<'_>,
    base: &git2::Tree<'_>,
) -> Result<Oid, git2::Error> {
    let entries = paths
        .iter()
        .map(|path| Ok((path, entry_at(from, path)?)))
        .collect::<Result<Vec<_>, git2::Error>>()?;
    update_tree(repo, base, &entries)
}

/// `base` with each change's new entry at its path (or none): the tree the changes lead to,
/// when `base` is the tree they start from.
pub(crate) fn apply_changes(
    repo: &Repository,
    changes: &[TreeChange],
    base: &git2::Tree<'_>,
) -> Result<Oid, git2::Error> {
    let entries: Vec<_> = changes.iter().map(|c| (&c.path, c.new)).collect();
    update_tree(repo, base, &entries)
}

/// `base` with each path set to its entry (or removed), in one edit of the tree. Where that
/// fails because an entry changes kind (a folder that becomes a file, or the reverse, also
/// where a path is set under what was a file), libgit2 does not replace one kind by the other
/// in one edit: those paths are removed first, with what was under them, then the rest set.
fn update_tree(
    repo: &Repository,
    base: &git2::Tree<'_>,
    entries: &[(&RepoPath, Option<(Oid, u32)>)],
) -> Result<Oid, git2::Error> {
    if let Ok(tree) = edit_tree(repo, base, entries, &[]) {
        return Ok(tree);
    }
    let replaced = kind_changes(base, entries)?;
    let mut update = TreeEdit::new();
    for path in &replaced {
        update.remove(path.as_slice());
    }
    let emptied = repo.find_tree(update.create_updated(repo, base)?)?;
    edit_tree(repo, &emptied, entries, &replaced)
}

/// `base` with each path set to its entry, or removed unless it is one of `gone` or under one.
fn edit_tree(
    repo: &Repository,
    base: &git2::Tree<'_>,
    entries: &[(&RepoPath, Option<(Oid, u32)>)],
    gone: &[Vec<u8>],
) -> Result<Oid, git2::Error> {
    let is_gone = |path: &RepoPath| {
        gone.iter()
            .any(|gone| path.as_bytes() == gone.as_slice() || path.is_inside(gone))
    };
    let mut update = TreeEdit::new();
    for (path, entry) in entries {
        match entry {
            Some((id, mode)) => update.upsert(path.as_bytes(), *id, file_mode(*mode as i32)),
            None if is_gone(path) => &mut update,
            None => update.remove(path.as_bytes()),
        };
    }
    update.create_updated(repo, base)
}

/// The paths of `base` whose kind `entries` change: set to the other kind, or removed where
/// another entry is set under them, or a file (or link) in `base` that an entry is set under.
fn kind_changes(
    base: &git2::Tree<'_>,
    entries: &[(&RepoPath, Option<(Oid, u32)>)],
) -> Result<Vec<Vec<u8>>, git2::Error> {
    let is_folder = |(_, mode): (Oid, u32)| mode == TREE_MODE;
    // The folders that entries are set in.
    let folders: std::collections::BTreeSet<&[u8]> = entries
        .iter()
        .filter(|(_, entry)| entry.is_some())
        .flat_map(|(path, _)| {
            let path = path.as_bytes();
            (0..path.len())
                .filter(|&i| path[i] == b'/')
                .map(|i| &path[..i])
        })
        .collect();
    let mut replaced = Vec::new();
    for folder in &folders {
        let path = RepoPath::from_bytes(folder.to_vec());
        if entry_at(base, &path)?.is_some_and(|old| !is_folder(old)) {
            replaced.push(folder.to_vec());
        }
    }
    for (path, entry) in entries {
        let changes_kind = match (entry, entry_at(base, path)?) {
            (Some(new), Some(old)) => is_folder(*new) != is_folder(old),
            (None, Some(_)) => folders.contains(path.as_bytes()),
            (_, None) => false,
        };
        if changes_kind {
            replaced.push(path.as_bytes().to_vec());
        }
    }
    replaced.sort();
    replaced.dedup();
    Ok(replaced)
}

/// Fills `entry`'s stat data from `meta` (of the file just written, not followed if a link),
/// as git does: the index's fields are 32 bits wide and truncated the same way.
pub(crate) fn set_stat(entry: &mut git2::IndexEntry, meta: &std::fs::Metadata) {
    stat::StatData::of(meta).set(entry);
}

/// The mode of a tree entry, from its raw value.
pub(crate) fn file_mode(raw: i32) -> git2::FileMode {
    match raw {
        0o100755 => git2::FileMode::BlobExecutable,
        0o120000 => git2::FileMode::Link,
        0o160000 => git2::FileMode::Commit,
        0o040000 => git2::FileMode::Tree,
        _ => git2::FileMode::Blob,
    }
}

/// A pathspec for libgit2 that matches exactly `path` (and what is below it): every character
/// its pattern parser or `fnmatch` would read specially is escaped. (libgit2's
/// `DISABLE_PATHSPEC_MATCH` still parses the pattern, and then misses names with a
/// backslash.)
pub(crate) fn literal_pathspec(path: &RepoPath) -> Vec<u8> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() + 4);
    for (i, &b) in bytes.iter().enumerate() {
        let leading = i == 0 && matches!(b, b'!' | b'#');
        if leading || matches!(b, b'\\' | b'*' | b'?' | b'[' | b']') || b.is_ascii_whitespace() {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// Full ref name of a branch.
pub(crate) fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

/// Points the HEAD of `repo` (a task's worktree) at the task branch `branch_ref`. Written as
/// a symbolic reference: from a symbolic HEAD, libgit2's `set_head` opens every worktree of
/// the repository to check that none has the branch checked out, and only swarm's worktrees
/// ever have a task branch, one at a time.
pub(crate) fn point_head(repo: &Repository, branch_ref: &str) -> Result<(), git2::Error> {
    repo.reference_symbolic("HEAD", branch_ref, true, "swarm: task branch")
        .map(drop)
}

/// Runs `work` on up to `threads` shares of `items` (as even as they go), each on a scoped
/// thread of its own; each share's result, or its panic, in the order of the shares.
pub(crate) fn on_threads<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    work: impl Fn(&[T]) -> R + Sync,
) -> Vec<std::thread::Result<R>> {
    let share = items.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = items
            .chunks(share)
            .map(|mine| s.spawn(move || work(mine)))
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree's entry as text: its mode as stored, its name, its object.
    pub(super) type RawEntry<'a> = (&'a str, &'a str, Oid);

    /// A tree written byte by byte, its entries in the order given.
    pub(super) fn raw_tree(repo: &Repository, entries: &[RawEntry<'_>]) -> Oid {
        let mut bytes = Vec::new();
        for (mode, name, id) in entries {
            bytes.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            bytes.extend_from_slice(id.as_bytes());
        }
        repo.odb()
            .unwrap()
            .write(git2::ObjectType::Tree, &bytes)
            .unwrap()
    }

    /// The tree of `files`: path, content, mode.
    pub(super) fn tree_of(repo: &Repository, files: &[(&str, &str, i32)]) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, content, mode) in files {
            let id = repo.blob(content.as_bytes()).unwrap();
            let mut entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: *mode as u32,
                uid: 0,
                gid: 0,
                file_size: 0,
                id,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            entry.flags = path.len().min(0xfff) as u16;
            index.add(&entry).unwrap();
        }
        index.write_tree_to(repo).unwrap()
    }

    #[test]
    fn tree_changes_are_what_libgit2s_diff_finds() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let (f, x, l) = (0o100644, 0o100755, 0o120000);
        let old = tree_of(
            &repo,
            &[
                ("a.txt", "a", f),
                ("same/s.txt", "s", f),
                ("gone/g.txt", "g", f),
                ("swap", "file", f),
                ("dir/inner.txt", "i", f),
                ("run.sh", "echo", f),
                ("lnk", "a.txt", f),
                ("deep/er/d.txt", "d", f),
            ],
        );
        let new = tree_of(
            &repo,
            &[
                ("a.txt", "a2", f),
                ("same/s.txt", "s", f),
                ("swap/now.txt", "folder", f),
                ("dir", "a file now", f),
                ("run.sh", "echo", x),
                ("lnk", "a.txt", l),
                ("deep/er/d.txt", "d", f),
                ("deep/er/new.txt", "n", f),
                ("fresh/a/b.txt", "b", f),
            ],
        );
        let (old, new) = (repo.find_tree(old).unwrap(), repo.find_tree(new).unwrap());
        let diff = repo
            .diff_tree_to_tree(Some(&old), Some(&new), None)
            .unwrap();
        let mut expected: Vec<TreeChange> = Vec::new();
        for d in diff.deltas() {
            let side =
                |f: git2::DiffFile<'_>| (!f.id().is_zero()).then(|| (f.id(), u32::from(f.mode())));
            let path = d
                .new_file()
                .path_bytes()
                .or(d.old_file().path_bytes())
                .unwrap();
            let path = RepoPath::from_bytes(path.to_vec());
            match expected.iter_mut().find(|c| c.path == path) {
                Some(same) => {
                    same.old = same.old.or(side(d.old_file()));
                    same.new = same.new.or(side(d.new_file()));
                }
                None => expected.push(TreeChange {
                    path,
                    old: side(d.old_file()),
                    new: side(d.new_file()),
                }),
            }
        }
        expected.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(tree_changes(&repo, &old, &new).unwrap(), expected);
        assert_eq!(expected.len(), 10, "{expected:#?}");
        // What a task's changes carry to its merge rebuild its tree, as the paths read from
        // the tree itself do (a file that became a folder, and back, included).
        let paths: Vec<RepoPath> = expected.iter().map(|c| c.path.clone()).collect();
        assert_eq!(apply_paths(&repo, &paths, &new, &old).unwrap(), new.id());
        assert_eq!(apply_changes(&repo, &expected, &old).unwrap(), new.id());
        // The deleted ones are those the new tree has nothing at (a file that became a folder
        // is not deleted).
        let gone: Vec<RepoPath> = paths
            .iter()
            .filter(|p| new.get_path(p.as_path()).is_err())
            .cloned()
            .collect();
        assert_eq!(deleted(&expected), gone);
        assert!(!gone.iter().any(|p| p.as_bytes() == b"swap"), "{gone:?}");
        // Part of them, as one task's share of a process's changes: a file set under what
        // was a file, with no change naming that file.
        let part: Vec<TreeChange> = expected
            .iter()
            .filter(|c| c.path.as_bytes() != b"swap")
            .cloned()
            .collect();
        let tree = repo
            .find_tree(apply_changes(&repo, &part, &old).unwrap())
            .unwrap();
        assert_eq!(tree.get_path("swap/now.txt".as_ref()).unwrap().id(), {
            new.get_path("swap/now.txt".as_ref()).unwrap().id()
        });
    }

    #[test]
    fn literal_pathspecs_escape_what_libgit2_would_read() {
        let spec = |p: &str| String::from_utf8(literal_pathspec(&RepoPath::from(p))).unwrap();
        assert_eq!(spec("src/a.rs"), "src/a.rs");
        assert_eq!(spec("a\\b.txt"), "a\\\\b.txt");
        assert_eq!(spec("!x [1]*?.txt"), "\\!x\\ \\[1\\]\\*\\?.txt");
        assert_eq!(spec("#notes"), "\\#notes");
    }

    #[test]
    fn reflog_entries_name_swarms_committer_without_looking_again() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        repo.config()
            .unwrap()
            .set_str("user.name", "Before")
            .unwrap();
        repo.config()
            .unwrap()
            .set_str("user.email", "b@example.com")
            .unwrap();
        let tree = repo
            .find_tree(tree_of(&repo, &[("a", "a", 0o100644)]))
            .unwrap();
        let sig = Signature::now("c", "c@example.com").unwrap();
        let commit = repo.commit(None, &sig, &sig, "m", &tree, &[]).unwrap();
        log_as_committer(&repo).unwrap();
        let who = signature(&repo).unwrap();
        // libgit2's own lookup would now find this one (and never the environment's).
        repo.config()
            .unwrap()
            .set_str("user.name", "After")
            .unwrap();
        repo.reference("refs/heads/t", commit, false, "made")
            .unwrap();
        let log = repo.reflog("refs/heads/t").unwrap();
        let entry = log.get(0).unwrap();
        assert_eq!(entry.committer().name(), who.name());
        assert_eq!(entry.committer().email(), who.email());
    }
}
