//! Starting runs that belong to the repository, not to the connection: each is `swarm
//! refactor` (or `resume`, `merge`) started as a process of its own, in a process group of
//! its own, writing its log and events under `.git/swarm/mcp/` (named after the run once it
//! started: `swarm clean` removes them with it). When the client's turn is
//! interrupted or this server exits, the run goes on; `status`, `result`, another `swarm mcp`
//! or `swarm status` on the command line pick it up, as for any run. A run stopped anyway
//! (`cancel`, a reboot) is finished by `resume`, as any interrupted run is.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a run may take to plan before its start is announced (a planner model can take
/// a while).
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// How a launched command ended before its run started, or that it did start.
pub(crate) enum Started {
    /// The run's id.
    Run(String),
    /// It ended first: nothing to run (`resume` of a finished run), or an error; what it
    /// said.
    Ended { success: bool, said: String },
}

/// Starts `swarm COMMAND FLAGS --events=… -- POSITIONAL` in `repo`, detached, and waits for
/// its run to start.
pub(crate) async fn launch(
    repo: &Path,
    common_dir: &Path,
    command: &str,
    flags: &[String],
    positional: &[String],
) -> anyhow::Result<Started> {
    let dir = common_dir.join("swarm").join("mcp");
    std::fs::create_dir_all(&dir)?;
    let (stem, out) = new_log(&dir)?;
    let events = dir.join(format!("{stem}.events.jsonl"));
    let log = dir.join(format!("{stem}.log"));
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg(command)
        .args(flags)
        .arg("--yes")
        .arg(format!("--events={}", events.display()))
        .arg("--")
        .args(positional)
        .current_dir(repo)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        // Its own group: the client's Ctrl-C, or its end, does not reach the run.
        .process_group(0);
    let mut child = cmd.spawn()?;
    let ended: Arc<Mutex<Option<bool>>> = Arc::default();
    {
        let ended = ended.clone();
        // Reaped when it ends, whether or not anyone still waits.
        std::thread::spawn(move || {
            let success = child.wait().map(|s| s.success()).unwrap_or(false);
            *ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(success);
        });
    }
    let started = wait_for_start(&events, &log, &ended).await?;
    if let Started::Run(run) = &started {
        // Named after their run, they go with it (`swarm clean`).
        for (path, kind) in [(&log, "log"), (&events, "events.jsonl")] {
            let _ = std::fs::rename(path, dir.join(format!("{run}-{stem}.{kind}")));
        }
    }
    Ok(started)
}

/// A log file no other launch has, claimed by creating it (`create_new`: two launches in
/// the same instant, or a link left there, cannot share or redirect it); its name's stem.
fn new_log(dir: &Path) -> std::io::Result<(String, std::fs::File)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    for n in 0..1000 {
        let stem = format!("{}-{}-{n}", now.as_millis(), std::process::id());
        let created = std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(dir.join(format!("{stem}.log")));
        match created {
            Ok(file) => return Ok((stem, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "cannot name a new log in {}",
        dir.display()
    )))
}

async fn wait_for_start(
    events: &Path,
    log: &PathBuf,
    ended: &Mutex<Option<bool>>,
) -> anyhow::Result<Started> {
    let started = Instant::now();
    loop {
        if let Some(run) = run_started(events) {
            return Ok(Started::Run(run));
        }
        let done = *ended.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(success) = done {
            // The events it wrote before it ended, then what it said.
            if let Some(run) = run_started(events) {
                return Ok(Started::Run(run));
            }
            let said = std::fs::read_to_string(log).unwrap_or_default();
            return Ok(Started::Ended {
                success,
                said: swarm_engine::app::redact(said.trim()),
            });
        }
        if started.elapsed() > START_TIMEOUT {
            anyhow::bail!(
                "the run has not started after {}s; its log is {}",
                START_TIMEOUT.as_secs(),
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run id of the `run_started` event in `events`, once it is there.
fn run_started(events: &Path) -> Option<String> {
    let file = std::fs::File::open(events).ok()?;
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            let event: serde_json::Value = serde_json::from_str(&line).ok()?;
            (event["kind"] == "run_started")
                .then(|| event["run_id"].as_str().map(str::to_string))
                .flatten()
        })
}
