//! The run's base checkout made of your own checkout's files where they are what the base
//! holds: a hard link each, where a checkout writes a new file.
//!
//! Writing a file is making an inode, and on a disk that freed many lately (ext4 without a
//! journal skips every inode freed in the last minutes, checking each again for every file
//! it makes) the base checkout of 27,000 files took 0.5 to 3 s; linking them took 0.13 s,
//! however busy the disk. Removing the base at the end frees no inode either.
//!
//! A file is linked only when git's own index vouches for it by its stat data (kind,
//! executable bit, modification time, size, inode, as git with `core.trustctime = false`:
//! the change time moves with every link made or removed, the last run's included; not
//! marked assume-unchanged, skip-worktree or intent-to-add; when racily clean, its content
//! hashing to the blob too) and its entry is the base's blob with the base's mode. Whatever
//! else (a file you changed, a link, a submodule, another filesystem, an index libgit2
//! cannot read, a repository whose attributes name a `working-tree-encoding`, which git
//! applies in your checkout and libgit2 does not) is checked out as before. The checkout
//! writes first, into an empty folder, so it never meets a linked file; links come after,
//! made through folders opened without following a link, and a link whose file is no
//! longer the one vouched for (you replaced or wrote it meanwhile) is taken back and the
//! file checked out.
//!
//! Nothing writes into the base checkout once made (workers see it through their overlay's
//! upper layer), so your files are never written through a link. The kept base checkout
//! (`--reuse-base`), which later runs bring up to date in place, is never linked.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use git2::{Oid, Repository};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::git::stat::StatData;

/// A file of the user's checkout that the base can link, with what vouched for it.
#[derive(Debug)]
pub(super) struct Linkable {
    pub(super) path: Vec<u8>,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

/// The entries of a tree: those the user's checkout holds as they are, and the rest.
#[derive(Debug, Default)]
pub(super) struct Split {
    pub(super) linkable: Vec<Linkable>,
    pub(super) rest: Vec<Vec<u8>>,
}

/// Splits `tree` into the files the checkout at `workdir` can lend the base checkout at
/// `into`, and the rest (files, links and submodules, by path). `None` when it can lend none:
/// another filesystem, no index libgit2 can read, or a `working-tree-encoding`.
pub(super) fn split(repo: &Repository, tree: Oid, workdir: &Path, into: &Path) -> Option<Split> {
    let same_disk = std::fs::metadata(workdir).ok()?.dev() == std::fs::metadata(into).ok()?.dev();
    if !same_disk {
        return None;
    }
    let user = Repository::open(workdir).ok()?;
    let written = std::fs::metadata(user.path().join("index"))
        .and_then(|m| m.modified())
        .ok();
    let mut blobs = Vec::new();
    let mut encodings = false;
    let mut walk = |path: Vec<u8>, id: Oid, mode: i32| {
        if path.rsplit(|&b| b == b'/').next() == Some(b".gitattributes") {
            encodings |= repo
                .find_blob(id)
                .is_ok_and(|blob| names_an_encoding(blob.content()));
        }
        blobs.push((path, id, mode));
    };
    walk_blobs(repo, tree, &mut Vec::new(), &mut walk).ok()?;
    if encodings || attributes_name_an_encoding(&user) {
        return None;
    }
    // Each file's stat data checked against the index, on threads, each thread with its own
    // handle on the index.
    let vouched = super::parallel::in_parallel(&blobs, |mine| {
        let index = Repository::open(workdir).ok()?.index().ok()?;
        let each = |(path, id, mode): &(Vec<u8>, Oid, i32)| {
            lendable(&index, workdir, path, *id, *mode, written)
                .map(|meta| (meta.ino(), meta.size(), (meta.mtime(), meta.mtime_nsec())))
        };
        Some(mine.iter().map(each).collect::<Vec<_>>())
    });
    let mut split = Split::default();
    let vouched = vouched.into_iter().collect::<Option<Vec<_>>>()?;
    for ((path, _, _), stat) in blobs.into_iter().zip(vouched.into_iter().flatten()) {
        match stat {
            Some((ino, size, mtime)) => split.linkable.push(Linkable {
                path,
                ino,
                size,
                mtime,
            }),
            None => split.rest.push(path),
        }
    }
    Some(split)
}

/// Does an attributes file say `working-tree-encoding`? git re-encodes such files in your
/// checkout, and libgit2, which commits what a worker changed, does not: a view must show
/// them as libgit2 writes them.
fn names_an_encoding(attributes: &[u8]) -> bool {
    const WORD: &[u8] = b"working-tree-encoding";
    attributes.windows(WORD.len()).any(|w| w == WORD)
}

/// Does an attributes file outside the tree (the repository's `info/attributes`, yours,
/// the system's) say `working-tree-encoding`?
fn attributes_name_an_encoding(user: &Repository) -> bool {
    let mut files = vec![
        user.commondir().join("info/attributes"),
        std::path::PathBuf::from("/etc/gitattributes"),
    ];
    match user
        .config()
        .and_then(|c| c.get_path("core.attributesFile"))
    {
        Ok(path) => files.push(path),
        Err(_) => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(std::path::PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")));
            files.extend(config.map(|c| c.join("git/attributes")));
        }
    }
    files
        .iter()
        .any(|f| std::fs::read(f).is_ok_and(|text| names_an_encoding(&text)))
}

/// Every entry of `tree` that is not a folder, with its path below `prefix`, in order.
fn walk_blobs(
    repo: &Repository,
    tree: Oid,
    prefix: &mut Vec<u8>,
    each: &mut impl FnMut(Vec<u8>, Oid, i32),
) -> Result<(), git2::Error> {
    for entry in repo.find_tree(tree)?.iter() {
        let at = prefix.len();
        if at > 0 {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(entry.name_bytes());
        match entry.kind() {
            Some(git2::ObjectType::Tree) => walk_blobs(repo, entry.id(), prefix, each)?,
            _ => each(prefix.clone(), entry.id(), entry.filemode()),
        }
        prefix.truncate(at);
    }
    Ok(())
}

/// The stat data of the user's file at `path` when the index vouches that it holds blob
/// `id` with `mode` (a plain file).
fn lendable(
    index: &git2::Index,
    workdir: &Path,
    path: &[u8],
    id: Oid,
    mode: i32,
    written: Option<std::time::SystemTime>,
) -> Option<std::fs::Metadata> {
    /// `CE_VALID`: assume unchanged (git does not look at the file).
    const ASSUME_UNCHANGED: u16 = 0x8000;
    /// `CE_SKIP_WORKTREE` and `CE_INTENT_TO_ADD`, in the extended flags.
    const SKIP_OR_INTENT: u16 = 0x4000 | 0x2000;
    if mode != 0o100644 && mode != 0o100755 {
        return None;
    }
    let entry = index.get_path(Path::new(OsStr::from_bytes(path)), 0)?;
    let vouched = entry.id == id
        && entry.mode == mode as u32
        && entry.flags & ASSUME_UNCHANGED == 0
        && entry.flags_extended & SKIP_OR_INTENT == 0;
    if !vouched {
        return None;
    }
    use crate::git::stat::{kind_agrees, racily_clean, same_but_change_time};
    let file = workdir.join(OsStr::from_bytes(path));
    let meta = std::fs::symlink_metadata(&file).ok()?;
    // Not the change time: the links of the last run moved it (made, then removed), and
    // git's index keeps the old one until git refreshes it.
    if !kind_agrees(&entry, &meta) || !same_but_change_time(&entry, &meta) {
        return None;
    }
    // Racily clean (a fresh clone's files, written in the second its index was): the
    // content decides, unfiltered; a file changed after it is hashed has other times.
    let same = !racily_clean(&entry, written)
        || Oid::hash_file(git2::ObjectType::Blob, &file).is_ok_and(|hashed| hashed == id);
    same.then_some(meta)
}

/// What [`link_all`] did.
pub(super) struct Linked<'a> {
    /// The stat data of each file linked (for the index), by path.
    pub(super) stats: HashMap<&'a [u8], StatData>,
    /// The paths it could not link, for a checkout to write.
    pub(super) failed: Vec<Vec<u8>>,
}

/// Links each of `files` from the checkout at `from` into the one at `to` (made of folders
/// swarm created), on up to four threads. `Err` when a link to the wrong file could not be
/// removed: a checkout would write through it. Blocking.
pub(super) fn link_all<'a>(
    from: &Path,
    to: &Path,
    files: &'a [Linkable],
) -> std::io::Result<Linked<'a>> {
    let shares = super::parallel::in_parallel(files, |mine| {
        let mut linker = Linker::new(from, to);
        mine.iter()
            .map(|file| linker.link(file))
            .collect::<std::io::Result<Vec<_>>>()
    });
    let mut linked = Linked {
        stats: HashMap::with_capacity(files.len()),
        failed: Vec::new(),
    };
    let stats = shares.into_iter().collect::<std::io::Result<Vec<_>>>()?;
    for (file, stat) in files.iter().zip(stats.into_iter().flatten()) {
        match stat {
            Some(stat) => {
                linked.stats.insert(&file.path, stat);
            }
            None => linked.failed.push(file.path.clone()),
        }
    }
    Ok(linked)
}

/// One thread's links, keeping the folder it links into open.
struct Linker<'a> {
    from: &'a Path,
    to: &'a Path,
    /// The folder of the last file linked: its path in the checkout, and the folder itself.
    folder: Option<(Vec<u8>, OwnedFd)>,
}

impl<'a> Linker<'a> {
    fn new(from: &'a Path, to: &'a Path) -> Self {
        Self {
            from,
            to,
            folder: None,
        }
    }

    /// Links `file`, and says the link's stat data; `None` if it could not, or the link was
    /// not to the file vouched for (and is gone again); `Err` if such a link could not be
    /// removed.
    fn link(&mut self, file: &Linkable) -> std::io::Result<Option<StatData>> {
        let (parent, name) = match file.path.iter().rposition(|&b| b == b'/') {
            Some(at) => (&file.path[..at], &file.path[at + 1..]),
            None => (&[][..], &file.path[..]),
        };
        if self.folder.as_ref().is_none_or(|(p, _)| p != parent) {
            self.folder = self.open_folder(parent).map(|fd| (parent.to_vec(), fd));
        }
        let Some((_, folder)) = &self.folder else {
            return Ok(None);
        };
        let name = OsStr::from_bytes(name);
        let source = self.from.join(OsStr::from_bytes(&file.path));
        if rustix::fs::linkat(rustix::fs::CWD, &source, folder, name, AtFlags::empty()).is_err() {
            return Ok(None);
        }
        let same = rustix::fs::statat(folder, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .filter(|st| {
                st.st_ino == file.ino
                    && st.st_size as u64 == file.size
                    && (st.st_mtime, st.st_mtime_nsec as i64) == file.mtime
            });
        if same.is_none() {
            rustix::fs::unlinkat(folder, name, AtFlags::empty())?;
        }
        Ok(same.as_ref().map(StatData::of_stat))
    }

    /// The folder at `parent` in the checkout, made where missing, reached without following
    /// a link.
    fn open_folder(&self, parent: &[u8]) -> Option<OwnedFd> {
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::PATH | OFlags::CLOEXEC;
        let mut fd = rustix::fs::open(self.to, flags, Mode::empty()).ok()?;
        for part in parent.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
            let part = OsStr::from_bytes(part);
            match rustix::fs::mkdirat(&fd, part, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(_) => return None,
            }
            fd = rustix::fs::openat(&fd, part, flags, Mode::empty()).ok()?;
        }
        Some(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    fn commit(dir: &Path, message: &str) {
        let who = ["-c", "user.name=t", "-c", "user.email=t@t"];
        git(dir, &[&who[..], &["commit", "-qm", message]].concat());
    }

    /// A checkout with `clean.txt`, `changed.txt` (edited after its commit), `kept.txt`
    /// (marked assume-unchanged and edited), `run.sh` (executable) and `link` (a link).
    fn checkout(dir: &Path) -> Oid {
        git(dir, &["init", "-q"]);
        for name in ["clean.txt", "changed.txt", "kept.txt", "sub/deep.txt"] {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{name}\n")).unwrap();
        }
        std::fs::write(dir.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("clean.txt", dir.join("link")).unwrap();
        git(dir, &["add", "-A"]);
        commit(dir, "c");
        git(dir, &["update-index", "--chmod=+x", "run.sh"]);
        // Files older than the index, so that it vouches for them.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        git(dir, &["update-index", "-q", "--refresh"]);
        git(dir, &["update-index", "--assume-unchanged", "kept.txt"]);
        std::fs::write(dir.join("changed.txt"), "mine\n").unwrap();
        std::fs::write(dir.join("kept.txt"), "mine\n").unwrap();
        let repo = Repository::open(dir).unwrap();
        repo.head().unwrap().peel_to_tree().unwrap().id()
    }

    #[test]
    fn only_files_the_index_vouches_for_are_linked_and_each_is_the_file_vouched_for() {
        let dir = tempfile::tempdir().unwrap();
        let (user, base) = (dir.path().join("user"), dir.path().join("base"));
        std::fs::create_dir_all(&user).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        let tree = checkout(&user);
        let repo = Repository::open(&user).unwrap();
        let split = split(&repo, tree, &user, &base).unwrap();
        let names = |paths: Vec<&[u8]>| -> Vec<String> {
            paths
                .iter()
                .map(|p| String::from_utf8_lossy(p).into())
                .collect()
        };
        let linkable = names(split.linkable.iter().map(|l| &l.path[..]).collect());
        // run.sh's executable bit is staged, not in the checkout: not vouched for.
        assert_eq!(linkable, ["clean.txt", "sub/deep.txt"]);
        let rest = names(split.rest.iter().map(|p| &p[..]).collect());
        assert_eq!(rest, ["changed.txt", "kept.txt", "link", "run.sh"]);

        // sub/deep.txt is replaced after the split: its link is taken back.
        std::fs::remove_file(user.join("sub/deep.txt")).unwrap();
        std::fs::write(user.join("sub/deep.txt"), "sub/deep.txt\n").unwrap();
        let linked = link_all(&user, &base, &split.linkable).unwrap();
        assert_eq!(
            names(linked.failed.iter().map(|p| &p[..]).collect()),
            ["sub/deep.txt"]
        );
        assert_eq!(names(linked.stats.keys().copied().collect()), ["clean.txt"]);
        assert!(!base.join("sub/deep.txt").exists());
        let (mine, lent) = (
            std::fs::metadata(user.join("clean.txt")).unwrap(),
            std::fs::metadata(base.join("clean.txt")).unwrap(),
        );
        assert_eq!((mine.ino(), mine.nlink()), (lent.ino(), 2));
    }

    #[test]
    fn nothing_is_lent_where_git_re_encodes_files() {
        let dir = tempfile::tempdir().unwrap();
        let (user, base) = (dir.path().join("user"), dir.path().join("base"));
        std::fs::create_dir_all(user.join("sub")).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(
            user.join("sub/.gitattributes"),
            "*.utf16 working-tree-encoding=UTF-16\n",
        )
        .unwrap();
        let tree = checkout(&user);
        let repo = Repository::open(&user).unwrap();
        assert!(split(&repo, tree, &user, &base).is_none());
        // The repository's own attributes file says it.
        git(&user, &["rm", "-q", "sub/.gitattributes"]);
        commit(&user, "d");
        let tree = repo.head().unwrap().peel_to_tree().unwrap().id();
        assert!(split(&repo, tree, &user, &base).is_some());
        std::fs::write(
            user.join(".git/info/attributes"),
            "x working-tree-encoding=UTF-16\n",
        )
        .unwrap();
        assert!(split(&repo, tree, &user, &base).is_none());
    }

    #[test]
    fn a_link_in_the_way_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let (user, base, away) = (
            dir.path().join("user"),
            dir.path().join("base"),
            dir.path().join("away"),
        );
        for d in [&user, &base, &away] {
            std::fs::create_dir_all(d).unwrap();
        }
        let tree = checkout(&user);
        let repo = Repository::open(&user).unwrap();
        let split = split(&repo, tree, &user, &base).unwrap();
        // Something put a link where the base's folder `sub` goes.
        std::os::unix::fs::symlink(&away, base.join("sub")).unwrap();
        let linked = link_all(&user, &base, &split.linkable).unwrap();
        assert_eq!(linked.failed, [b"sub/deep.txt".to_vec()]);
        assert_eq!(std::fs::read_dir(&away).unwrap().count(), 0);
    }
}
