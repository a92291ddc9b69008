//! Where a run keeps its state: `<git-common-dir>/swarm/runs/<RUN-ID>/`.
//!
//! ```text
//! swarm/
//!   runs/<RUN-ID>/plan.json, report.json, events.jsonl
//!   runs/<RUN-ID>/tasks/<TASK-ID>/worker.log, TASK.md, verify.log, transcript.jsonl
//!   worktrees/<RUN-ID>-<n>/          (pooled worktrees, removed at the end)
//! ```
//!
//! Every path here is built from typed ids ([`RunId`], [`TaskId`]), so it stays under
//! `swarm/`. Files are written without following symbolic links ([`create_file`],
//! [`append_file`], [`write_json_atomic`]), and swarm deletes only what [`remove_owned`] accepts:
//! paths under `swarm/`, removed without following links.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ids::{RunId, TaskId};
use crate::report::Report;
pub(crate) use swarm_sandbox::files::{rename_noreplace, try_lock};

/// Hides swarm's state in the repository (`.git/swarm/`: the run's worktrees, their layers,
/// every task's logs and files) from every worker `policy` confines: a worker sees its own
/// worktree and its own task's files there, nothing of another's (`JailSpec::keep`).
pub(crate) fn hide_from_workers(policy: &mut swarm_sandbox::SandboxPolicy, common_dir: &Path) {
    policy.hide.push(swarm_dir(common_dir));
}

pub(crate) fn swarm_dir(common_dir: &Path) -> PathBuf {
    common_dir.join("swarm")
}

pub(crate) fn runs_dir(common_dir: &Path) -> PathBuf {
    swarm_dir(common_dir).join("runs")
}

pub(crate) fn worktrees_dir(common_dir: &Path) -> PathBuf {
    swarm_dir(common_dir).join("worktrees")
}

/// The layers (upper and work directories) of overlay worktrees, `<RUN-ID>-<n>` each.
pub(crate) fn layers_dir(common_dir: &Path) -> PathBuf {
    swarm_dir(common_dir).join("layers")
}

#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
}

impl RunDir {
    pub fn new(common_dir: &Path, run_id: &RunId) -> Self {
        Self {
            path: runs_dir(common_dir).join(run_id.as_str()),
        }
    }

    pub fn plan(&self) -> PathBuf {
        self.path.join("plan.json")
    }

    pub fn report(&self) -> PathBuf {
        self.path.join("report.json")
    }

    pub fn events(&self) -> PathBuf {
        self.path.join("events.jsonl")
    }

    /// The report page `swarm report` writes by default.
    pub fn page(&self) -> PathBuf {
        self.path.join("report.html")
    }

    pub fn task_dir(&self, task_id: &TaskId) -> PathBuf {
        self.path.join("tasks").join(task_id.as_str())
    }

    /// Candidate `k`'s directory in task `task_id`'s (`--tries`, `--best-of`).
    pub(crate) fn candidate_dir(&self, task_id: &TaskId, k: crate::ids::CandidateNo) -> PathBuf {
        self.task_dir(task_id).join(format!("c{k}"))
    }

    /// Is there a directory (not a symbolic link) for this run?
    pub fn exists(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_dir())
    }

    pub fn load_report(&self) -> anyhow::Result<Report> {
        let path = self.report();
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        Report::parse(&bytes).with_context(|| format!("{} is not valid", path.display()))
    }

    pub fn owner(&self) -> PathBuf {
        self.path.join("owner.json")
    }

    /// Is a live swarm process running this run? (It holds the run's lock.)
    pub fn is_running(&self) -> bool {
        match RunLock::try_acquire(self) {
            Ok(Some(_lock)) => false,
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

/// The exclusive lock a swarm process holds on a run while it works on it (`flock` on
/// `runs/<RUN-ID>/lock`). The kernel releases it when the process ends, however it ends, so
/// a run whose report says "running" but whose lock is free was interrupted (even by
/// `kill -9`), with no guessing from process ids.
#[derive(Debug)]
pub(crate) struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    /// Takes the lock, or `None` if another process holds it.
    pub(crate) fn try_acquire(run: &RunDir) -> std::io::Result<Option<Self>> {
        let file = lock_file(&run.path.join("lock"))?;
        Ok(try_lock(&file)?.then_some(Self { _file: file }))
    }
}

/// Who runs a run (`owner.json`), for `swarm status`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub(crate) struct Owner {
    pub pid: u32,
    pub started_at: String,
}

/// The current time as an RFC 3339 UTC timestamp, to the second (`2026-11-25T13:39:52Z`).
pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The ids of all runs with a directory, oldest first. Entries whose names are not run ids
/// are not runs.
pub(crate) fn list_runs(common_dir: &Path) -> anyhow::Result<Vec<RunId>> {
    let dir = runs_dir(common_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut ids: Vec<RunId> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok()?.parse().ok())
        .collect();
    ids.sort();
    Ok(ids)
}

/// Writes `value` as pretty JSON to `path` atomically (a reader never sees half a file; a
/// symbolic link at `path` is replaced, not followed).
pub(crate) fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_vec_pretty(value)?;
    text.push(b'\n');
    // No state file holds a secret (docs/SECURITY.md).
    replace_whole(path, &crate::secrets::redact_bytes(&text), 0o600)
}

/// Writes `contents` to `path` atomically, as [`write_json_atomic`] does, readable as any
/// new file of the user's (the umask decides), not only by its owner: a file for people
/// (the report page), not a state file.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    replace_whole(path, contents, 0o666)
}

/// `contents` into a new file of `mode` beside `path`, then renamed over it: a reader never
/// sees half a file, and a symbolic link at `path` is replaced, not followed.
fn replace_whole(path: &Path, contents: &[u8], mode: u32) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .tempfile_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, contents)?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{} is not valid", path.display()))
}
/// Unlinks `path` (a file, or a link itself, never what it points to) if it is there.
pub(crate) fn remove_file_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Creates `path` afresh for writing: whatever is there (a file, a symbolic link a worker
/// planted) is unlinked first, and the new file is created exclusively without following a
/// link, so swarm never writes through a link.
pub(crate) fn create_file(path: &Path) -> std::io::Result<File> {
    remove_file_if_present(path)?;
    File::options()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Opens the lock file `path` (creating it, never truncating it) to `flock` it, refusing a
/// symbolic link; not inherited by the processes swarm starts.
pub(crate) fn lock_file(path: &Path) -> std::io::Result<File> {
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Opens `path` for appending (creating it), refusing a symbolic link.
pub(crate) fn append_file(path: &Path) -> std::io::Result<File> {
    File::options()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Writes `contents` to a file made by [`create_file`].
pub(crate) fn write_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    std::io::Write::write_all(&mut create_file(path)?, contents)
}

/// Where the directories swarm removes at the end of a run go first
/// (`<git-common-dir>/swarm/trash`): moving a directory there is one rename, whatever its
/// size, so a run reports its result without waiting on the disk; a process of its own
/// empties it afterwards ([`empty_trash_later`]), and `swarm clean` empties it too.
pub(crate) fn trash_dir(common_dir: &Path) -> PathBuf {
    swarm_dir(common_dir).join("trash")
}

/// Takes `path` (a directory swarm made under `swarm/`, as for [`remove_owned`]) out of the
/// way at once: moved into the trash, or removed if it cannot be moved.
pub(crate) fn discard_owned(common_dir: &Path, path: &Path) -> anyhow::Result<bool> {
    check_owned(common_dir, path)?;
    let is_dir = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta.is_dir(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", path.display())),
    };
    if is_dir {
        let trash = trash_dir(common_dir);
        let name = format!(
            "{}-{}",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            crate::secrets::random_hex::<8>().unwrap_or_default()
        );
        // The trash must be a directory of swarm's, not a link leading elsewhere.
        let _ = std::fs::create_dir(&trash);
        let trash_is_dir = std::fs::symlink_metadata(&trash).is_ok_and(|m| m.is_dir());
        if trash_is_dir && std::fs::rename(path, trash.join(name)).is_ok() {
            return Ok(true);
        }
    }
    remove_owned(common_dir, path)
}

/// Removes everything in the trash: how many entries went, else why the first of those that
/// could not be removed is left.
pub(crate) fn empty_trash(common_dir: &Path) -> anyhow::Result<usize> {
    let Ok(entries) = std::fs::read_dir(trash_dir(common_dir)) else {
        return Ok(0);
    };
    let (mut removed, mut left) = (0, None);
    for entry in entries.flatten() {
        match remove_owned(common_dir, &entry.path()) {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) => left = left.or(Some(e)),
        }
    }
    left.map_or(Ok(removed), Err)
}

/// Empties the trash (if anything is in it) in a process of its own, started from swarm's
/// binary in a new process group with no terminal output, which goes on after this one ends:
/// the run's result does not wait for the disk to delete its worktrees.
pub(crate) fn empty_trash_later(common_dir: &Path) {
    let has_entries =
        std::fs::read_dir(trash_dir(common_dir)).is_ok_and(|mut entries| entries.next().is_some());
    if !has_entries {
        return;
    }
    let started = std::env::current_exe().and_then(|exe| {
        use std::os::unix::process::CommandExt as _;
        std::process::Command::new(exe)
            .env(crate::env_vars::SWARM_EMPTY_TRASH, common_dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
    });
    if let Err(e) = started {
        tracing::debug!("cannot empty the trash in the background ({e}); emptying it now");
        let _ = empty_trash(common_dir);
    }
}

/// Checks that `path` is under `<git-common-dir>/swarm/`, through directories only.
fn check_owned(common_dir: &Path, path: &Path) -> anyhow::Result<()> {
    let root = swarm_dir(common_dir);
    let inside = path
        .strip_prefix(&root)
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .is_some_and(|rel| rel.components().all(|c| matches!(c, Component::Normal(_))));
    anyhow::ensure!(
        inside,
        "refusing to remove {}: swarm removes only what it made under {}",
        path.display(),
        root.display()
    );
    // No directory between `swarm/` and `path` may be a link (that would lead elsewhere).
    let mut dir = root.clone();
    for c in path
        .strip_prefix(&root)?
        .parent()
        .into_iter()
        .flat_map(Path::components)
    {
        dir.push(c);
        let meta = std::fs::symlink_metadata(&dir);
        anyhow::ensure!(
            meta.as_ref().is_ok_and(|m| m.is_dir()),
            "refusing to remove {}: {} is not a directory",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Removes `path`, a directory (or file) swarm made under `<git-common-dir>/swarm/`, without
/// following symbolic links: a link is removed, never what it points to. Anything else is
/// refused. The engine deletes a directory tree only this way, but for a view's reset
/// emptying its own upper layer (confined to it) and the sandbox's janitor deleting what was
/// moved into its graveyards.
pub(crate) fn remove_owned(common_dir: &Path, path: &Path) -> anyhow::Result<bool> {
    check_owned(common_dir, path)?;
    swarm_sandbox::files::remove_no_follow(path)
        .with_context(|| format!("cannot remove {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_is_confined_to_the_swarm_directory() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join("repo/.git");
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(runs_dir(&common)).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("keep"), "x").unwrap();
        for bad in [
            victim.clone(),
            common.clone(),
            swarm_dir(&common),
            runs_dir(&common).join(".."),
            runs_dir(&common).join("../../.."),
        ] {
            assert!(remove_owned(&common, &bad).is_err(), "{}", bad.display());
        }
        // A link planted under swarm/ is removed itself, not followed.
        let link = runs_dir(&common).join("20261121-133952-5a75");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(remove_owned(&common, &link).unwrap());
        assert!(victim.join("keep").exists());
        // Nor is a path beneath a link.
        std::os::unix::fs::symlink(&victim, runs_dir(&common).join("l")).unwrap();
        assert!(remove_owned(&common, &runs_dir(&common).join("l/keep")).is_err());
        assert!(victim.join("keep").exists());
    }

    #[test]
    fn discarding_goes_through_the_trash_and_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join("repo/.git");
        let worktree = swarm_dir(&common).join("worktrees/r-1");
        std::fs::create_dir_all(worktree.join("src")).unwrap();
        std::fs::write(worktree.join("src/a.txt"), "a").unwrap();
        assert!(discard_owned(&common, &worktree).unwrap());
        assert!(!worktree.exists());
        assert_eq!(std::fs::read_dir(trash_dir(&common)).unwrap().count(), 1);
        assert_eq!(empty_trash(&common).unwrap(), 1);
        assert_eq!(std::fs::read_dir(trash_dir(&common)).unwrap().count(), 0);
        // A trash that is a link elsewhere is not used: the directory is removed in place.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::remove_dir(trash_dir(&common)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, trash_dir(&common)).unwrap();
        std::fs::create_dir_all(worktree.join("src")).unwrap();
        assert!(discard_owned(&common, &worktree).unwrap());
        assert!(!worktree.exists());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        assert!(discard_owned(&common, &dir.path().join("outside")).is_err());
    }

    #[test]
    fn created_files_replace_links_instead_of_following_them() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let log = dir.path().join("verify.log");
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        write_file(&log, b"output").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "output");
        std::os::unix::fs::symlink(&victim, dir.path().join("t.jsonl")).unwrap();
        assert!(append_file(&dir.path().join("t.jsonl")).is_err());
    }
}
