//! A whole tree checked out, and its index written by swarm: by several threads for the
//! run's base checkout, which every overlay worktree waits for before its worker can start;
//! by one for a pooled full checkout (several jobs make theirs at once already).
//!
//! The index is swarm's in both (libgit2's checkout leaves it alone): written once every file
//! is, newer than all of them, so that no entry is racily clean and a worker's commit finds
//! the checkout clean by its stat data alone, with no file hashed again.
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
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use anyhow::Context as _;
use git2::build::CheckoutBuilder;
use git2::{Oid, Repository};

use crate::git::stat::StatData;

/// Parts each thread gets, at least (so that a part bigger than the others evens out).
const PARTS_PER_THREAD: usize = 4;
/// The most threads: writing files gains little beyond.
const MOST_THREADS: usize = 4;

/// Checks out `tree` in full into the worktree at `workdir` (empty but for its `.git`) on
/// `threads` threads (one: the whole tree at once), through git's checkout filters unless
/// `filters_off` ([`crate::git::filters`]), and writes its index at `index_path`. `repo` is
/// the worktree's repository; `open` opens it again for each further thread. Blocking.
///
/// Through the filters, the index holds the tree first: an attribute lookup then reads each
/// `.gitattributes` from the index as well as from the worktree, where it may not be written
/// yet (another thread's part, or a name sorted before it) or be half written (libgit2 reads
/// both, the worktree's first, and both say the same once it is written).
pub(super) fn check_out(
    (repo, open): (
        &Repository,
        &(dyn Fn() -> anyhow::Result<Repository> + Sync),
    ),
    (tree, filters_off): (Oid, bool),
    (workdir, index_path): (&Path, &Path),
    threads: usize,
) -> anyhow::Result<()> {
    if !filters_off {
        let mut index = git2::Index::open(index_path)?;
        index.read_tree(&repo.find_tree(tree)?)?;
        index.write()?;
    }
    let checked_out = match threads {
        0 | 1 => {
            let mut checkout = CheckoutBuilder::new();
            checkout
                .force()
                .disable_filters(filters_off)
                .update_index(false);
            repo.checkout_tree(repo.find_tree(tree)?.as_object(), Some(&mut checkout))
                .map_err(anyhow::Error::from)
        }
        _ => {
            let parts = parts(repo, tree, threads * PARTS_PER_THREAD)?;
            check_out_paths(open, (tree, filters_off), &parts, threads)
        }
    };
    checked_out.with_context(|| format!("cannot check out {}", workdir.display()))?;
    write_index(repo, tree, workdir, index_path)
}

/// How many threads check out: as many as cores, up to [`MOST_THREADS`].
pub(super) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MOST_THREADS))
}

/// Checks out `paths` of `tree` (files, or folders in full) in the worktree `open` opens, on
/// up to `threads` threads, each through a handle of its own, without touching the index.
/// Nothing at all when `paths` is empty (where libgit2 would check out the whole tree).
/// Blocking.
fn check_out_paths(
    open: &(dyn Fn() -> anyhow::Result<Repository> + Sync),
    (tree, filters_off): (Oid, bool),
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
                        .disable_filters(filters_off)
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
/// stat data of its file. A new file, written once the file system's clock is past every
/// file's time ([`wait_past`]): no entry is then "racily clean" to libgit2, which would hash
/// every such file again at each status, a worker's commit among them.
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
    let mut newest = (0, 0);
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
        newest = newest.max((meta.mtime(), meta.mtime_nsec()));
        StatData::of(&meta).set(&mut entry);
        index.add(&entry)?;
    }
    wait_past(newest);
    index.write()?;
    Ok(())
}

/// The longest [`wait_past`] waits: a few ticks of the kernel's clock. A file's time further
/// ahead (set by hand) only leaves its entry racily clean, which is slower, not wrong.
const MOST_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Waits until the clock the kernel stamps files with (the coarse real-time clock, a tick of
/// a few milliseconds) is past `newest` (seconds, nanoseconds), so that a file written
/// next (the index) is newer than every file written so far.
fn wait_past(newest: (i64, i64)) {
    let began = std::time::Instant::now();
    while coarse_now() <= newest && began.elapsed() < MOST_WAIT {
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
}

/// The coarse real-time clock, as (seconds, nanoseconds).
fn coarse_now() -> (i64, i64) {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &raw mut now) };
    (now.tv_sec, now.tv_nsec)
}
