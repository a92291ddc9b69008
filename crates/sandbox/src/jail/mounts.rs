//! The jail's mounts and its loopback, made from inside its namespaces: the worktree's
//! overlay view, the copy-on-write views of an agent's state, the hidden credential stores.

use std::ffi::CString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::errno;
use crate::overlay::{self, OverlayView};

/// A directory seen through an overlay: reads from the directory itself, writes into
/// `upper`, which the task keeps; the directory is never written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateView {
    pub dir: PathBuf,
    pub upper: PathBuf,
    /// The overlay's scratch directory (same file system as `upper`).
    pub work: PathBuf,
}

impl StateView {
    fn options(&self) -> Option<String> {
        overlay::options(&[&self.dir], &self.upper, &self.work)
    }
}

/// Brings up the loopback of the new network namespace (for the forwarder).
pub(super) fn loopback_up() -> anyhow::Result<()> {
    // SAFETY: a socket for the ioctl, an ifreq on the stack, the socket closed after.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(errno("socket"));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as i16;
        let rc = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req);
        libc::close(sock);
        if rc != 0 {
            return Err(errno(
                "cannot bring up the loopback of the network namespace",
            ));
        }
    }
    Ok(())
}

/// Hides `p` from the worker: an empty read-only directory over a directory, the empty
/// `/dev/null` over a file. A missing path needs nothing.
pub(super) fn hide(p: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::metadata(p) {
        Ok(meta) => meta,
        // Nothing there, or nothing this user could read anyway.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot hide {}", p.display())),
    };
    let target = p.to_str().context("a path to hide that is not UTF-8")?;
    let mounted = if meta.is_dir() {
        mount(
            Some("tmpfs"),
            target,
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=4k,mode=0700"),
        )
    } else {
        mount(Some("/dev/null"), target, None, libc::MS_BIND, None)
    };
    mounted.with_context(|| format!("cannot hide {}", p.display()))
}

/// Hides directory `dir` but for `keep` (paths below it): each is held (a clone of what is
/// mounted there, `open_tree`), an empty folder goes over `dir`, each is put back at its
/// place in it, and the folder is made read-only. What else `dir` holds (another worker's
/// worktree, its logs) is not there for this one.
pub(super) fn hide_but(dir: &Path, keep: &[PathBuf]) -> anyhow::Result<()> {
    let held = keep
        .iter()
        .map(|k| Ok((k, clone_tree(k)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let target = dir.to_str().context("a path to hide that is not UTF-8")?;
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        flags,
        Some("size=64k,mode=0755"),
    )
    .with_context(|| format!("cannot hide {}", dir.display()))?;
    for (place, tree) in held {
        std::fs::create_dir_all(place)
            .with_context(|| format!("cannot make a place for {}", place.display()))?;
        move_tree(tree, place)?;
    }
    mount(
        None,
        target,
        None,
        libc::MS_REMOUNT | libc::MS_RDONLY | flags,
        None,
    )
    .with_context(|| format!("cannot make the cover of {} read-only", dir.display()))
}

/// A detached clone of what is mounted at (or is) `at`, with what is mounted below it.
fn clone_tree(at: &Path) -> anyhow::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let c = CString::new(at.as_os_str().as_encoded_bytes()).context("NUL byte")?;
    // SAFETY: open_tree on a valid C string; the result is a descriptor owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_ulong,
        )
    } as i32;
    if fd < 0 {
        return Err(errno(&format!("cannot hold {}", at.display())));
    }
    // SAFETY: a descriptor open_tree just returned, owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Mounts the detached `tree` at `at`.
fn move_tree(tree: std::os::fd::OwnedFd, at: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd as _;
    let c = CString::new(at.as_os_str().as_encoded_bytes()).context("NUL byte")?;
    // SAFETY: move_mount of a descriptor this function owns onto a valid C string path.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(errno(&format!("cannot put {} back", at.display()))),
    }
}

/// Mounts the overlay `view` on its worktree (before Landlock, which then lets the worker
/// write beneath the mount point: into the upper layer, never the shared base).
pub(super) fn mount_view(view: &OverlayView) -> anyhow::Result<()> {
    overlay::open_work_dir(&view.work);
    let options = view
        .options()
        .context("the worktree's overlay paths are not UTF-8")?;
    let target = view
        .mount_point
        .to_str()
        .context("the worktree's path is not UTF-8")?;
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&options),
    )
    .context("cannot mount the worktree's overlay view")
}

/// Mounts a copy-on-write view on a directory outside the worktree (before the hidden paths
/// are covered and before Landlock, which then lets the worker write beneath it: into the
/// task's layer).
pub(super) fn mount_state_view(view: &StateView) -> anyhow::Result<()> {
    overlay::open_work_dir(&view.work);
    let options = view
        .options()
        .context("a state directory's path is not UTF-8")?;
    let target = view
        .dir
        .to_str()
        .context("a state directory's path is not UTF-8")?;
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&options),
    )
    .with_context(|| format!("cannot mount a copy-on-write view of {target}"))
}

/// `open_tree(2)` and `move_mount(2)` flags (linux/mount.h), which the libc crate lacks.
const OPEN_TREE_CLONE: libc::c_ulong = 1;
const AT_RECURSIVE: libc::c_ulong = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_ulong = 0x4;

/// Mounts `view` on a git directory, with what is mounted at (or is) `carry`, below it —
/// the worktree — kept as it was: cloned before the overlay hides it, and put back on top.
/// Where something else is mounted below the git directory (not a setup swarm makes: a test
/// of a full disk), the view would hide it, so there is none: the worker's git cannot write.
///
/// `table` is the mount table the process's namespace was copied from (`None`: it could not
/// be read, so something may be mounted below), and `mounted_here` what the process mounted
/// itself since.
pub(super) fn mount_git_view(
    view: &StateView,
    carry: &Path,
    (table, mounted_here): (Option<&[u8]>, &[&Path]),
) -> anyhow::Result<()> {
    let below = |at: &Path| at != view.dir && at != carry && at.starts_with(&view.dir);
    let mounted_below = table.is_none_or(|t| mount_points(t).any(|at| below(&at)))
        || mounted_here.iter().any(|at| below(at));
    if mounted_below {
        return Ok(());
    }
    if !carry.starts_with(&view.dir) {
        return mount_state_view(view);
    }
    let tree =
        clone_tree(carry).context("cannot hold the worktree while the git view is mounted")?;
    let mounted = mount_state_view(view);
    let moved = move_tree(tree, carry).context("cannot put the worktree back over the git view");
    mounted?;
    moved
}

/// The mount points of a mount table (`/proc/self/mountinfo`'s fifth field, with its octal
/// escapes).
fn mount_points(table: &[u8]) -> impl Iterator<Item = PathBuf> + '_ {
    table.split(|b| *b == b'\n').filter_map(|line| {
        let field = line.split(|b| *b == b' ').nth(4)?;
        Some(PathBuf::from(std::ffi::OsString::from_vec(unescape_octal(
            field,
        ))))
    })
}

/// A jail host's mount table, read again only after a mount or an unmount in its namespace
/// (the kernel marks an open `mountinfo` with `POLLPRI` then).
pub(super) struct MountTable {
    file: std::fs::File,
    text: Vec<u8>,
}

impl MountTable {
    pub(super) fn open() -> anyhow::Result<Self> {
        let mut table = Self {
            file: std::fs::File::open("/proc/self/mountinfo").context("/proc/self/mountinfo")?,
            text: Vec::new(),
        };
        table.read()?;
        Ok(table)
    }

    /// The table as it is now.
    pub(super) fn current(&mut self) -> anyhow::Result<&[u8]> {
        use std::os::fd::AsRawFd as _;
        let mut fd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: poll on one local pollfd, without waiting.
        let polled = unsafe { libc::poll(&mut fd, 1, 0) };
        if polled != 0 {
            // Changed (or poll failed: read it again all the same).
            self.read()?;
        }
        Ok(&self.text)
    }

    fn read(&mut self) -> anyhow::Result<()> {
        use std::io::{Read as _, Seek as _};
        self.text.clear();
        self.file.rewind().context("/proc/self/mountinfo")?;
        self.file
            .read_to_end(&mut self.text)
            .context("/proc/self/mountinfo")?;
        Ok(())
    }
}

/// `\040` and the like, as the kernel escapes mount points.
fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

pub(super) fn mount(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> anyhow::Result<()> {
    let c = |s: &str| CString::new(s).context("NUL byte");
    let (source, target) = (source.map(c).transpose()?, c(target)?);
    let (fstype, data) = (fstype.map(c).transpose()?, data.map(c).transpose()?);
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: valid C strings or null pointers.
    let rc = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc != 0 {
        return Err(errno(&format!("mount {}", target.to_string_lossy())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped_as_the_kernel_wrote_them() {
        assert_eq!(unescape_octal(br"/a\040b/c\134d"), b"/a b/c\\d");
        assert_eq!(unescape_octal(br"/plain\09"), br"/plain\09");
    }

    /// Set in the copy of this test run in a mount namespace of its own.
    const CHILD: &str = "SWARM_MOUNT_TABLE_TEST_CHILD";

    /// A host's table shows a mount made after it was read (and one taken away again): this
    /// test run again by `unshare -Urm`, where it may mount without touching the machine's
    /// own mounts.
    #[test]
    fn a_mount_table_sees_every_mount_made_since_it_was_read() {
        let Some(dir) = std::env::var_os(CHILD) else {
            let dir = tempfile::tempdir().unwrap();
            let out = std::process::Command::new("unshare")
                .args(["-Urm", "--propagation", "private"])
                .arg(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "jail::mounts::tests::a_mount_table_sees_every_mount_made_since_it_was_read",
                ])
                .env(CHILD, dir.path())
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{said}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(said.contains("1 passed"), "{said}");
            return;
        };
        let at = PathBuf::from(dir).join("below");
        std::fs::create_dir(&at).unwrap();
        let shows = |table: &[u8]| mount_points(table).any(|p| p == at);
        let mut table = MountTable::open().unwrap();
        assert!(!shows(table.current().unwrap()));
        mount(Some("tmpfs"), at.to_str().unwrap(), Some("tmpfs"), 0, None).unwrap();
        assert!(shows(table.current().unwrap()), "the new mount");
        let at_c = std::ffi::CString::new(at.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::umount(at_c.as_ptr()) }, 0);
        assert!(!shows(table.current().unwrap()), "the mount gone");
    }
}
