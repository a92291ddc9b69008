//! Where a run keeps its state (SPEC §2): `<git-common-dir>/swarm/runs/<RUN-ID>/`.
//!
//! ```text
//! swarm/
//!   runs/<RUN-ID>/plan.json, report.json, events.jsonl
//!   runs/<RUN-ID>/tasks/<TASK-ID>/worker.log, TASK.md, result.json
//!   worktrees/<RUN-ID>-<n>/          (pooled worktrees, removed at the end)
//! ```

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::report::Report;

pub fn swarm_dir(common_dir: &Path) -> PathBuf {
    common_dir.join("swarm")
}

pub fn runs_dir(common_dir: &Path) -> PathBuf {
    swarm_dir(common_dir).join("runs")
}

pub fn worktrees_dir(common_dir: &Path) -> PathBuf {
    swarm_dir(common_dir).join("worktrees")
}

#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
}

impl RunDir {
    pub fn new(common_dir: &Path, run_id: &str) -> Self {
        Self {
            path: runs_dir(common_dir).join(run_id),
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

    pub fn task_dir(&self, task_id: &str) -> PathBuf {
        self.path.join("tasks").join(task_id)
    }

    pub fn exists(&self) -> bool {
        self.path.is_dir()
    }

    pub fn load_report(&self) -> anyhow::Result<Report> {
        read_json(&self.report())
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
pub struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    /// Takes the lock, or `None` if another process holds it.
    pub fn try_acquire(run: &RunDir) -> std::io::Result<Option<Self>> {
        use std::os::fd::AsRawFd as _;
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(run.path.join("lock"))?;
        // SAFETY: flock on an fd we own.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Some(Self { _file: file }));
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(err)
        }
    }
}

/// Who runs a run (`owner.json`), for `swarm status`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Owner {
    pub pid: u32,
    pub started_at: String,
}

/// A new run id: UTC start time to the second, then 4 hex digits, so ids sort by start time
/// and two runs started in the same second still differ.
pub fn new_run_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    let noise = (u64::from(now.subsec_nanos()) ^ (u64::from(std::process::id()) << 7)) & 0xffff;
    format!(
        "{y:04}{mo:02}{d:02}-{:02}{:02}{:02}-{noise:04x}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// The current time as an RFC 3339 UTC timestamp.
pub fn now_rfc3339() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a (year, month, day) date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The ids of all runs with a directory, oldest first.
pub fn list_runs(common_dir: &Path) -> anyhow::Result<Vec<String>> {
    let dir = runs_dir(common_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut ids: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    Ok(ids)
}

/// Writes `value` as pretty JSON to `path` atomically (a reader never sees half a file).
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    serde_json::to_writer_pretty(&mut tmp, value)?;
    std::io::Write::write_all(&mut tmp, b"\n")?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

pub fn read_json<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{} is not valid", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_from_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn run_ids_sort_by_time() {
        let id = new_run_id();
        assert_eq!(id.len(), "20261121-133455-abcd".len(), "{id}");
    }
}
