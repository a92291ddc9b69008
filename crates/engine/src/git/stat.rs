//! What git's index says of a file by its stat data alone, as git decides it.

use git2::{IndexEntry, IndexTime};

/// Is `meta` the kind of file `entry` is (a link, or a file with the same executable bit)?
pub(crate) fn kind_agrees(entry: &IndexEntry, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match entry.mode & 0o170000 {
        0o120000 => meta.file_type().is_symlink(),
        0o100000 => meta.is_file() && (entry.mode & 0o111 != 0) == (meta.mode() & 0o111 != 0),
        _ => false,
    }
}

/// Does the index vouch for the file with `meta` by its stat data alone, as git decides it:
/// its times, size and inode those of `entry`, and `entry` older than the index (written at
/// `index_written`), else it is "racily clean" and only its content can tell.
pub(crate) fn stat_vouches(
    entry: &IndexEntry,
    meta: &std::fs::Metadata,
    index_written: Option<std::time::SystemTime>,
) -> bool {
    !racily_clean(entry, index_written) && stat_agrees(entry, meta)
}

/// Was `entry` written in the same second as the index, or later (or is the index's time
/// unknown)? A file changed in that second may keep the stat data the index has.
pub(crate) fn racily_clean(
    entry: &IndexEntry,
    index_written: Option<std::time::SystemTime>,
) -> bool {
    index_written.is_none_or(|written| {
        let written = written
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        u64::try_from(entry.mtime.seconds()).map_or(true, |m| m >= written)
    })
}

/// Are the times, size and inode of `meta` those of `entry`?
pub(crate) fn stat_agrees(entry: &IndexEntry, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    same_but_change_time(entry, meta) && index_time(meta.ctime(), meta.ctime_nsec()) == entry.ctime
}

/// Are the modification time, size and inode of `meta` those of `entry` (git's
/// `core.trustctime = false`)? A file's change time also moves when a link to it is made or
/// removed.
pub(crate) fn same_but_change_time(entry: &IndexEntry, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    index_time(meta.mtime(), meta.mtime_nsec()) == entry.mtime
        && meta.size() as u32 == entry.file_size
        && meta.ino() as u32 == entry.ino
}

/// The stat data git's index keeps of a file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatData {
    ctime: IndexTime,
    mtime: IndexTime,
    dev: u32,
    ino: u32,
    uid: u32,
    gid: u32,
    size: u32,
}

impl StatData {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            ctime: index_time(meta.ctime(), meta.ctime_nsec()),
            mtime: index_time(meta.mtime(), meta.mtime_nsec()),
            dev: meta.dev() as u32,
            ino: meta.ino() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            size: meta.size() as u32,
        }
    }

    /// Gives `entry` this stat data (truncated to the index's 32-bit fields, as git does).
    pub(crate) fn set(&self, entry: &mut IndexEntry) {
        entry.ctime = self.ctime;
        entry.mtime = self.mtime;
        entry.dev = self.dev;
        entry.ino = self.ino;
        entry.uid = self.uid;
        entry.gid = self.gid;
        entry.file_size = self.size;
    }
}

/// A time as the index keeps it: 32-bit fields, truncated as git (and `set_stat`) truncate
/// them.
fn index_time(seconds: i64, nanoseconds: i64) -> IndexTime {
    IndexTime::new(seconds as i32, nanoseconds as u32)
}
