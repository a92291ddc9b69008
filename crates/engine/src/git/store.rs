//! Where the trees and commits swarm makes in bulk are written: loose files, as git writes
//! them, whose zlib stream holds the object in stored (uncompressed) blocks.
//!
//! A run writes some nine objects a task (its blob, its commit and merge commits, and the
//! trees between the root and each changed file, twice), and libgit2 deflates each one at
//! zlib's level 1. A folder's tree is mostly object ids, which do not compress (a 300-entry
//! tree of 9.3 KB deflates to 7.2 KB in ~100 µs, stored in ~5 µs): deflating was 6.7 % of a
//! one-file run's CPU (docs/BENCHMARKS-HISTORY.md). libgit2 cannot be asked for stored
//! blocks: its loose store at level 0 writes objects with no zlib stream at all, which no
//! git can read. So the repositories swarm writes through get one more backend, before
//! libgit2's loose one, that writes the objects given whole ([`git_odb_write`]: trees and
//! commits). Blobs, which libgit2 always streams (and which, being text, do compress), and
//! any write this backend fails, go on to libgit2's own loose store.
//!
//! The stream is written here (a header, a length before each block, a checksum), not by an
//! encoder crate: flate2's encoders, at level 0, cost 130–250 µs an object (miniz_oxide) or
//! doubled swarm's peak memory (zlib-rs), each setting up a compressor for every object.
//!
//! Each file is written under a temporary name in its fan-out folder and renamed into place,
//! as git does, so no reader sees half an object; a crash leaves a `tmp_obj_*` file, which
//! `git gc` removes. `git gc` also packs (and compresses) what this writes, as it packs any
//! loose object.
//!
//! [`git_odb_write`]: https://libgit2.org/docs/reference/main/odb/git_odb_write.html

use std::ffi::{c_int, c_void};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use git2::{Binding as _, ObjectType, Oid, Repository};
use libgit2_sys as raw;

/// Above libgit2's loose store (1) and packs (2, which write nothing), so that writes reach
/// this backend first.
const PRIORITY: c_int = 3;

/// The backend: libgit2's header first, as libgit2 sees it, then what the writes need.
#[repr(C)]
struct StoredBackend {
    parent: raw::git_odb_backend,
    objects: PathBuf,
}

/// Makes `repo`'s trees and commits go to loose files with stored zlib blocks, in `objects`
/// below its common git directory (its blobs, always streamed, still go to libgit2's store).
pub(super) fn write_stored(repo: &Repository) -> Result<(), git2::Error> {
    // A repository that asks for its objects to be synced to disk keeps libgit2's store,
    // which syncs each object file and its folder when `core.fsyncObjectFiles` says so.
    if repo
        .config()?
        .get_bool("core.fsyncObjectFiles")
        .unwrap_or(false)
    {
        return Ok(());
    }
    let odb = repo.odb()?;
    let backend = Box::new(StoredBackend {
        // SAFETY: every field of `git_odb_backend` is an integer, a raw pointer or an
        // `Option` of a function pointer, for which all zeros is a valid value (0, null,
        // `None`); `git_odb_init_backend` then sets its version.
        parent: unsafe { std::mem::zeroed() },
        objects: repo.commondir().join("objects"),
    });
    let backend = Box::into_raw(backend);
    // SAFETY: `backend` is a live, exclusively owned allocation whose first field is a
    // `git_odb_backend`. Once added, libgit2 owns it and hands it back to `free` (and only
    // there) when the object database goes; on failure it stays ours and is dropped here.
    unsafe {
        let parent = &raw mut (*backend).parent;
        if raw::git_odb_init_backend(parent, raw::GIT_ODB_BACKEND_VERSION) < 0 {
            drop(Box::from_raw(backend));
            return Err(git2::Error::from_str("cannot set up an object backend"));
        }
        (*backend).parent.write = Some(write);
        (*backend).parent.writestream = Some(no_stream);
        (*backend).parent.free = Some(free);
        let added = raw::git_odb_add_backend(odb.raw(), parent, PRIORITY);
        if added < 0 {
            drop(Box::from_raw(backend));
            return Err(git2::Error::last_error(added));
        }
    }
    Ok(())
}

/// Writes a tree or a commit, `data` of `kind`, into `repo`'s object database and gives its
/// id: straight to the backend [`write_stored`] added, where it is the first (the way
/// `git_odb_write` goes, but for its look for the object first: a hit is made fresh, and each
/// miss, the usual case for a new tree, reads the pack folder again; ~2 % of a one-file run's
/// CPU). An object only in a pack is written again, loose; one whose loose file is there is
/// made fresh ([`write_object`]). Anywhere else, `git_odb_write`.
pub(super) fn write_whole(
    repo: &Repository,
    kind: ObjectType,
    data: &[u8],
) -> Result<Oid, git2::Error> {
    let odb = repo.odb()?;
    let Some(objects) = stored_objects(&odb) else {
        return odb.write(kind, data);
    };
    let id = Oid::hash_object(kind, data)?;
    write_object(&objects, id, kind, data)
        .map_err(|e| git2::Error::from_str(&format!("cannot write object {id}: {e}")))?;
    Ok(id)
}

/// The objects folder of the backend [`write_stored`] added to `odb`, if it is the first of
/// its backends (libgit2 keeps them by priority, and no other has as high a one).
fn stored_objects(odb: &git2::Odb<'_>) -> Option<PathBuf> {
    use git2::Binding as _;
    let mut first: *mut raw::git_odb_backend = std::ptr::null_mut();
    // SAFETY: a live object database and a place for the backend's pointer, which stays
    // libgit2's (borrowed for as long as `odb` lives, which outlives this call).
    let rc = unsafe { raw::git_odb_get_backend(&mut first, odb.raw(), 0) };
    if rc != 0 || first.is_null() {
        return None;
    }
    // SAFETY: `first` is a live backend, whose first field is a `git_odb_backend`.
    let writes = unsafe { (*first).write };
    let ours: ObjectWrite = write;
    if !writes.is_some_and(|w| std::ptr::fn_addr_eq(w, ours)) {
        return None;
    }
    // SAFETY: only a `StoredBackend`, whose first field is the `git_odb_backend`, has this
    // module's `write` as its write (set in `write_stored`, nowhere else).
    Some(unsafe { (*first.cast::<StoredBackend>()).objects.clone() })
}

/// The type of a backend's `write`.
type ObjectWrite = extern "C" fn(
    *mut raw::git_odb_backend,
    *const raw::git_oid,
    *const c_void,
    usize,
    raw::git_object_t,
) -> c_int;

extern "C" fn write(
    backend: *mut raw::git_odb_backend,
    id: *const raw::git_oid,
    data: *const c_void,
    len: usize,
    kind: raw::git_object_t,
) -> c_int {
    // A panic must not cross into C; an error sends the write on to libgit2's loose store.
    let written = std::panic::catch_unwind(|| {
        // SAFETY: libgit2 calls this with the backend `write_stored` added (a
        // `StoredBackend`), the object's id, and `len` readable bytes at `data`, all alive
        // for the call.
        let (objects, id, data) = unsafe {
            let bytes: &[u8] = match len {
                0 => &[],
                _ => std::slice::from_raw_parts(data.cast::<u8>(), len),
            };
            (
                &(*backend.cast::<StoredBackend>()).objects,
                Oid::from_raw(id),
                bytes,
            )
        };
        let kind =
            ObjectType::from_raw(kind).ok_or_else(|| std::io::Error::other("object type"))?;
        write_object(objects, id, kind, data)
    });
    match written {
        Ok(Ok(())) => 0,
        _ => raw::GIT_ERROR as c_int,
    }
}

/// Streamed writes (every blob, of any size) are left to libgit2's loose store, which
/// deflates as it goes: taking them here would hold each whole blob in memory, and text
/// compresses.
extern "C" fn no_stream(
    _out: *mut *mut raw::git_odb_stream,
    _backend: *mut raw::git_odb_backend,
    _size: raw::git_object_size_t,
    _kind: raw::git_object_t,
) -> c_int {
    raw::GIT_PASSTHROUGH as c_int
}

extern "C" fn free(backend: *mut raw::git_odb_backend) {
    // SAFETY: libgit2 calls this once, when the object database is freed, with the backend
    // `write_stored` leaked from a `Box<StoredBackend>`.
    drop(unsafe { Box::from_raw(backend.cast::<StoredBackend>()) });
}

/// Writes object `id` (`kind`, `data`) as a loose file under `objects`, in stored zlib blocks,
/// through a temporary file moved into place, unless the object's file is there already: then
/// that file is only made fresh (its modification time now, as libgit2 and git freshen an
/// object written again), never replaced.
///
/// Replacing it tore reads: libgit2 reads a loose object by `stat` then `open`, so a reader
/// between the two took the old file's size (git's deflated stream) of the new file's bytes
/// (stored blocks, longer), a zlib stream cut short, on which libgit2 1.9 loops for ever
/// (libgit2 issue 7342). A run's commit hung that way in a test while another commit wrote the
/// base's root tree again. Object files never change once there, as with git and libgit2.
fn write_object(objects: &Path, id: Oid, kind: ObjectType, data: &[u8]) -> std::io::Result<()> {
    let path = loose_path(objects, id);
    let folder = path.parent().unwrap_or(objects);
    let temp = || {
        tempfile::Builder::new()
            .prefix("tmp_obj_")
            .tempfile_in(folder)
    };
    let mut file = match temp() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(folder)?;
            temp()?
        }
        made => made?,
    };
    file.write_all(&loose_object(kind, data))?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o444))?;
    match file.persist_noclobber(&path) {
        Ok(_) => Ok(()),
        // The temporary file is removed as `e.file` drops.
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
            // Best effort, as libgit2's: an object of another user's cannot be made fresh.
            let _ = std::fs::File::open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            Ok(())
        }
        Err(e) => Err(e.error),
    }
}

/// Where git keeps object `id` loose under `objects`: `<first two hex digits>/<the rest>`.
fn loose_path(objects: &Path, id: Oid) -> PathBuf {
    let hex = id.to_string();
    let (fan, name) = hex.split_at(2);
    objects.join(fan).join(name)
}

/// The most a stored block holds (its length is 16 bits).
const BLOCK: usize = 65_535;

/// Object `kind`, `data` as git stores it loose: a zlib stream (RFC 1950: a header, then the
/// Adler-32 of what it holds) of `<kind> <size>\0<data>`, in stored deflate blocks (RFC 1951,
/// type 00: a byte saying whether it is the last, the length and its complement, the bytes).
fn loose_object(kind: ObjectType, data: &[u8]) -> Vec<u8> {
    let mut raw = format!("{} {}\0", kind.str(), data.len()).into_bytes();
    raw.extend_from_slice(data);
    let blocks = raw.len().div_ceil(BLOCK);
    let mut out = Vec::with_capacity(2 + raw.len() + 5 * blocks + 4);
    // Deflate with a 32 KiB window, no preset dictionary, "fastest" (the header's check bits
    // make 0x7801 a multiple of 31).
    out.extend_from_slice(&[0x78, 0x01]);
    for (i, block) in raw.chunks(BLOCK).enumerate() {
        let len = u16::try_from(block.len()).unwrap_or(u16::MAX);
        out.push(u8::from(i + 1 == blocks));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler2::adler32_slice(&raw).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A new bare repository in a temporary folder, `set_up`, then given the backend.
    fn repository(set_up: impl FnOnce(&Repository)) -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        set_up(&repo);
        write_stored(&repo).unwrap();
        (dir, repo)
    }

    /// The git CLI's output for `args` in the repository at `git_dir`, which must succeed.
    fn git_in(git_dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// What git itself reads back: every kind of object written through the backend, in a
    /// repository whose objects are then checked by `git fsck`.
    #[test]
    fn git_reads_what_it_writes() {
        let (dir, repo) = repository(|_| ());
        let text = "line\n".repeat(20_000);
        let blob = repo.blob(text.as_bytes()).unwrap();
        let empty = repo.blob(b"").unwrap();
        let mut tree = repo.treebuilder(None).unwrap();
        tree.insert("big.txt", blob, 0o100644).unwrap();
        tree.insert("empty", empty, 0o100644).unwrap();
        let tree = repo.find_tree(tree.write().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        // A message of three stored blocks (65,535 bytes the most each), the last one short.
        let message = "a long message\n".repeat(10_000);
        let first = repo
            .commit(Some("refs/heads/main"), &sig, &sig, &message, &tree, &[])
            .unwrap();
        let parent = repo.find_commit(first).unwrap();
        let commit = repo
            .commit(Some("refs/heads/main"), &sig, &sig, "m", &tree, &[&parent])
            .unwrap();
        let objects = dir.path().join("objects");
        let loose = |id: Oid| loose_path(&objects, id);
        // The tree and the commit are stored: zlib's header, then a block of type 00. The
        // blob came as a stream (libgit2 streams even a blob from memory), so libgit2 deflated
        // it: its file holds much less than its text.
        for id in [tree.id(), first, commit] {
            let bytes = std::fs::read(loose(id)).unwrap();
            assert_eq!(
                (bytes[0], bytes[1], bytes[2] & 0b110),
                (0x78, 0x01, 0),
                "{id}"
            );
        }
        let size = std::fs::metadata(loose(blob)).unwrap().len();
        assert!(size < text.len() as u64 / 10, "{size}");
        let git = |args: &[&str]| git_in(dir.path(), args);
        git(&["fsck", "--strict", "--no-dangling"]);
        assert_eq!(git(&["cat-file", "-p", &format!("{commit}:big.txt")]), text);
        assert_eq!(
            git(&["log", "-1", "--format=%B", "main^"]).trim_end(),
            message.trim_end()
        );
        assert_eq!(
            git(&["rev-parse", "main^{tree}"]).trim(),
            tree.id().to_string()
        );
        let modes = std::fs::metadata(loose(commit))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(modes & 0o777, 0o444);
        // Nothing left under a temporary name in any fan-out folder.
        let left: Vec<_> = std::fs::read_dir(&objects)
            .unwrap()
            .flatten()
            .filter_map(|fan| std::fs::read_dir(fan.path()).ok())
            .flat_map(|entries| entries.flatten().map(|e| e.file_name()))
            .filter(|name| name.to_string_lossy().starts_with("tmp_obj_"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A tree written whole goes to the backend with no look for it first, and git reads it
    /// back; an object only in a pack (the one `git gc` made) is written again, loose.
    /// Where the backend is not there, libgit2 writes it, deflated.
    #[test]
    fn objects_written_whole_skip_libgit2s_look_first() {
        let (dir, repo) = repository(|_| ());
        let blob = repo.blob(b"same").unwrap();
        let mut bytes = b"100644 file_00.txt\0".to_vec();
        bytes.extend_from_slice(blob.as_bytes());
        let id = write_whole(&repo, ObjectType::Tree, &bytes).unwrap();
        let loose = loose_path(&dir.path().join("objects"), id);
        let stored = std::fs::read(&loose).unwrap();
        assert_eq!((stored[0], stored[1], stored[2] & 0b110), (0x78, 0x01, 0));
        assert_eq!(repo.find_tree(id).unwrap().len(), 1);
        let git = |args: &[&str]| drop(git_in(dir.path(), args));
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo.find_tree(id).unwrap();
        repo.commit(Some("refs/heads/t"), &sig, &sig, "m", &tree, &[])
            .unwrap();
        git(&["gc", "-q", "--prune=now"]);
        assert!(!loose.exists(), "packed by git gc");
        assert_eq!(write_whole(&repo, ObjectType::Tree, &bytes).unwrap(), id);
        assert!(loose.exists(), "written again, loose");
        git(&["fsck", "--strict", "--no-dangling"]);

        let plain = tempfile::tempdir().unwrap();
        let plain = Repository::init_bare(plain.path()).unwrap();
        assert!(stored_objects(&plain.odb().unwrap()).is_none());
        let blob = plain.blob(b"same").unwrap();
        let mut bytes = b"100644 file_00.txt\0".to_vec();
        bytes.extend_from_slice(blob.as_bytes());
        let id = write_whole(&plain, ObjectType::Tree, &bytes).unwrap();
        let loose = std::fs::read(loose_path(&plain.path().join("objects"), id)).unwrap();
        assert_ne!(loose[2] & 0b110, 0, "deflated by libgit2");
    }

    /// An object whose loose file is there (git's, deflated) is not replaced by the stored
    /// one: its file is the same, byte for byte, and only made fresh. Replacing it let a
    /// libgit2 reader, which reads a loose object by `stat` then `open`, take one file's
    /// length of the other's bytes and loop for ever on the zlib stream cut short.
    #[test]
    fn an_object_already_loose_is_made_fresh_not_replaced() {
        use std::os::unix::fs::MetadataExt as _;
        let (dir, repo) = repository(|_| ());
        let blob = repo.blob(b"same").unwrap();
        let listing = format!("100644 blob {blob}\tfile_00.txt\n");
        let mut mktree = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(dir.path())
            .arg("mktree")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = mktree.stdin.take().unwrap();
        stdin.write_all(listing.as_bytes()).unwrap();
        drop(stdin);
        let out = mktree.wait_with_output().unwrap();
        let id = Oid::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
        let loose = loose_path(&dir.path().join("objects"), id);
        let before = std::fs::read(&loose).unwrap();
        assert_ne!(before[2] & 0b110, 0, "deflated by git");
        let long_ago = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
        std::fs::File::open(&loose)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let inode = std::fs::metadata(&loose).unwrap().ino();

        let data = repo.odb().unwrap().read(id).unwrap().data().to_vec();
        assert_eq!(write_whole(&repo, ObjectType::Tree, &data).unwrap(), id);
        let meta = std::fs::metadata(&loose).unwrap();
        assert_eq!(meta.ino(), inode, "the file was replaced");
        assert_eq!(std::fs::read(&loose).unwrap(), before);
        assert!(meta.modified().unwrap() > long_ago, "not made fresh");
        let folder = loose.parent().unwrap();
        let names: Vec<_> = std::fs::read_dir(folder).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    /// A blob written through a writer (as a worktree's files are hashed) is left to
    /// libgit2's loose store, which deflates it.
    #[test]
    fn streamed_blobs_are_deflated_by_libgit2() {
        let (dir, repo) = repository(|_| ());
        let text = "line\n".repeat(20_000);
        let mut writer = repo.blob_writer(None).unwrap();
        writer.write_all(text.as_bytes()).unwrap();
        let id = writer.commit().unwrap();
        let file = loose_path(&dir.path().join("objects"), id);
        let size = std::fs::metadata(file).unwrap().len();
        assert!(size < text.len() as u64 / 10, "{size}");
        assert_eq!(repo.find_blob(id).unwrap().content(), text.as_bytes());
    }

    /// A repository whose objects must be synced to disk keeps libgit2's store, which syncs:
    /// a tree that compresses well is deflated there.
    #[test]
    fn objects_git_is_told_to_sync_stay_with_libgit2() {
        let (dir, repo) = repository(|repo| {
            let mut config = repo.config().unwrap();
            config.set_bool("core.fsyncObjectFiles", true).unwrap();
        });
        let blob = repo.blob(b"same").unwrap();
        let mut tree = repo.treebuilder(None).unwrap();
        for i in 0..50 {
            tree.insert(format!("file_{i:02}.txt"), blob, 0o100644)
                .unwrap();
        }
        let id = tree.write().unwrap();
        let bytes = std::fs::read(loose_path(&dir.path().join("objects"), id)).unwrap();
        assert_ne!(bytes[2] & 0b110, 0, "stored, not deflated");
    }
}
