//! A whole tree checked out by several threads: the run's base checkout, which every overlay
//! worktree waits for before its worker can start.
//!
//! libgit2 checks a tree out on one thread (5,000 files: ~0.24 s, most of a run's start-up).
//! Here the tree is cut into parts (the folders and files nearest its root, at least a few
//! per thread), each thread checks out its parts through a handle of its own without
//! touching the index, and the index is then written once: the tree's entries, each with the
//! stat data of the file just written, as libgit2's own checkout would have left it.
//!
//! A thread's parts are given to libgit2 as a list of paths, not as pathspecs
//! (`disable_pathspec_match`): libgit2 then looks each entry up in the sorted list and skips
//! the folders of other threads, where a pathspec is matched against every entry of the tree.
//! A tree of 1,000 folders (100,000 files) makes 500 pathspecs a thread, and matching them
//! took 4 s of CPU before the first worker could start.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use anyhow::Context as _;
use git2::build::CheckoutBuilder;
use git2::{Oid, Repository};

use crate::git::stat::StatData;

/// Parts each thread gets, at least (so that a part bigger than the others evens out).
const PARTS_PER_THREAD: usize = 4;
/// The most threads: writing files gains little beyond.
const MOST_THREADS: usize = 4;

/// Checks out `tree` in full into the worktree at `workdir` (empty but for its `.git`), and
/// writes its index at `index_path`. `open` opens the worktree's repository, once per thread.
/// Blocking.
pub(super) fn check_out(
    open: &(dyn Fn() -> anyhow::Result<Repository> + Sync),
    tree: Oid,
    workdir: &Path,
    index_path: &Path,
) -> anyhow::Result<()> {
    let threads = threads();
    let repo = open()?;
    let parts = parts(&repo, tree, threads * PARTS_PER_THREAD)?;
    check_out_paths(open, tree, &parts, threads)
        .with_context(|| format!("cannot check out {}", workdir.display()))?;
    write_index(&repo, tree, workdir, index_path)
}

/// How many threads check out: as many as cores, up to [`MOST_THREADS`].
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MOST_THREADS))
}

/// Checks out `paths` of `tree` (files, or folders in full) in the worktree `open` opens, on
/// up to `threads` threads, each through a handle of its own, without touching the index.
/// Nothing at all when `paths` is empty (where libgit2 would check out the whole tree).
/// Blocking.
fn check_out_paths(
    open: &(dyn Fn() -> anyhow::Result<Repository> + Sync),
    tree: Oid,
    paths: &[Vec<u8>],
    threads: usize,
) -> anyhow::Result<()> {
    let threads = threads.clamp(1, MOST_THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<&Vec<u8>> = paths.iter().skip(t).step_by(threads).collect();
                s.spawn(move || -> anyhow::Result<()> {
                    if mine.is_empty() {
                        return Ok(());
                    }
                    let repo = open()?;
                    let tree = repo.find_tree(tree)?;
                    let mut checkout = CheckoutBuilder::new();
                    checkout
                        .force()
                        .update_index(false)
                        .disable_pathspec_match(true);
                    for path in mine {
                        checkout.path(path.as_slice());
                    }
                    repo.checkout_tree(tree.as_object(), Some(&mut checkout))?;
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a checkout thread panicked")))
        })
    })
}

/// Runs `work` on shares of `items`, one thread each (as many as cores, up to
/// [`MOST_THREADS`]): the kept base checkout's survey, the run's base checkout's links.
pub(super) fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    work: impl Fn(&[T]) -> R + Sync,
) -> Vec<R> {
    crate::git::on_threads(items, threads(), work)
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| std::panic::resume_unwind(e)))
        .collect()
}

/// The paths of at least `want` parts of `tree` (fewer if it has fewer entries):
/// its entries, with folders replaced by their entries level by level.
fn parts(repo: &Repository, tree: Oid, want: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    // (path, the folder's tree if it is one)
    let mut front: Vec<(Vec<u8>, Option<Oid>)> = vec![(Vec::new(), Some(tree))];
    loop {
        if front.len() >= want || front.iter().all(|(_, folder)| folder.is_none()) {
            break;
        }
        let mut next = Vec::new();
        for (path, folder) in front {
            let Some(folder) = folder else {
                next.push((path, None));
                continue;
            };
            for entry in repo.find_tree(folder)?.iter() {
                let mut child = path.clone();
                if !child.is_empty() {
                    child.push(b'/');
                }
                child.extend_from_slice(entry.name_bytes());
                let is_folder = entry.kind() == Some(git2::ObjectType::Tree);
                next.push((child, is_folder.then(|| entry.id())));
            }
        }
        front = next;
    }
    Ok(front
        .into_iter()
        .filter(|(path, _)| !path.is_empty())
        .map(|(path, _)| path)
        .collect())
}

/// The index of a fresh checkout of `tree` at `workdir`: every entry of the tree, with the
/// stat data of its file. A new file (no earlier index whose time would make entries look
/// racily clean to libgit2, which would then hash them all again).
fn write_index(
    repo: &Repository,
    tree: Oid,
    workdir: &Path,
    index_path: &Path,
) -> anyhow::Result<()> {
    crate::state::remove_file_if_present(index_path)
        .with_context(|| format!("cannot replace {}", index_path.display()))?;
    let mut index = git2::Index::open(index_path)?;
    index.read_tree(&repo.find_tree(tree)?)?;
    // One entry at a time, by position: replacing an entry by one of the same path keeps
    // every position, and a copy of all the entries at once would double the index's memory
    // (~16 MB at 100,000 files, at the run's peak).
    for position in 0..index.len() {
        let Some(mut entry) = index.get(position) else {
            continue;
        };
        // A submodule is an empty folder here; git leaves its stat data empty too.
        if entry.mode == 0o160000 {
            continue;
        }
        let file = workdir.join(OsStr::from_bytes(&entry.path));
        let meta = std::fs::symlink_metadata(&file)
            .with_context(|| format!("{} was not checked out", file.display()))?;
        StatData::of(&meta).set(&mut entry);
        index.add(&entry)?;
    }
    index.write()?;
    Ok(())
}
