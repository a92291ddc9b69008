//! Starting runs that belong to the repository, not to the connection: each is swarm started
//! again on a typed request ([`crate::detached`]: a plan the server wrote, or a run to
//! continue), as a process of its own, in a process group of its own, writing its log and
//! events under `.git/swarm/mcp/` (named after the run once it started: `swarm clean`
//! removes them with it). When the client's turn is
//! interrupted or this server exits, the run goes on; `status`, `result`, another `swarm mcp`
//! or `swarm status` on the command line pick it up, as for any run. A run stopped anyway
//! (`cancel`, a reboot) is finished by `resume`, as any interrupted run is.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::detached::{Detached, DetachedRun};

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

/// Why a launch did not start its process.
pub(crate) enum Failed {
    /// What it was to do could not be made (its plan not written), for the model.
    Refused(String),
    Internal(anyhow::Error),
}

impl From<std::io::Error> for Failed {
    fn from(e: std::io::Error) -> Self {
        Failed::Internal(e.into())
    }
}

/// Starts swarm on a [`DetachedRun`] in `repo`, detached, and waits for its run to start.
/// `what` makes what the run does from the path its plan may be written to. The files of a
/// launch share one name; the plan and the request go once the run has read them, the log
/// and the events take the run's name once it has one.
pub(crate) async fn launch(
    repo: &Path,
    common_dir: &Path,
    what: impl FnOnce(PathBuf) -> Result<Detached, String>,
) -> Result<Started, Failed> {
    let dir = common_dir.join("swarm").join("mcp");
    std::fs::create_dir_all(&dir)?;
    let (stem, out) = new_log(&dir)?;
    let file = |kind: &str| dir.join(format!("{stem}.{kind}"));
    let (events, log, plan, request) = (
        file("events.jsonl"),
        file("log"),
        file("plan.json"),
        file("request.json"),
    );
    let what = match what(plan.clone()) {
        Ok(what) => what,
        Err(why) => {
            // Nothing started: nothing of this launch is left.
            let _ = std::fs::remove_file(&plan);
            let _ = std::fs::remove_file(&log);
            return Err(Failed::Refused(why));
        }
    };
    let run = DetachedRun {
        repo: repo.to_path_buf(),
        events: events.clone(),
        what,
    };
    let text = serde_json::to_vec(&run).map_err(|e| Failed::Internal(e.into()))?;
    // A new file, as the log is: never one that was there, never through a link.
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(&request)?
        .write_all(&text)?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg(crate::detached::ARG)
        .arg(&request)
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
    let started = wait_for_start(&events, &log, &ended)
        .await
        .map_err(Failed::Internal)?;
    // Read by now: the run keeps its own copy of the plan (`.git/swarm/runs/<RUN-ID>/`).
    for kind in ["plan.json", "request.json"] {
        let _ = std::fs::remove_file(file(kind));
    }
    if let Started::Run(run) = &started {
        // Named after their run, they go with it (`swarm clean`).
        for kind in ["log", "events.jsonl"] {
            let _ = std::fs::rename(file(kind), dir.join(format!("{run}-{stem}.{kind}")));
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
