//! swarm's side of the jail hosts ([`super::host`]): idle hosts wait in a pool, one is taken
//! for each confined process that a host can run, and given back once that process's jail
//! has ended. A host whose task did not end cleanly (swarm stopped waiting for it) is
//! killed, and everything of its task with it.

use std::ffi::OsString;
use std::io::{BufReader, PipeReader};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;

use super::factory::{self, ChildPid};
use super::host::HostSpec;
use super::wire::{Order, Report, frame, read_report, send};
use super::{Bytes, JailSpec};

/// Set (to anything) in swarm's environment: every confined process gets a one-off jail (to
/// compare the two, or to rule hosts out when something looks wrong).
pub const NO_HOSTS_VAR: &str = "SWARM_NO_JAIL_HOSTS";
/// Idle hosts kept at most; more are ended when given back.
const MAX_IDLE: usize = 64;

static IDLE: Mutex<Vec<Host>> = Mutex::new(Vec::new());
/// Hosts (and host factories) told to end ([`retire_idle_hosts`]), not reaped yet.
static ENDING: Mutex<Vec<ChildPid>> = Mutex::new(Vec::new());
/// A host could not be set up here: one-off jails from then on.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// One host process: its orders socket and its reports.
struct Host {
    spec: HostSpec,
    process: ChildPid,
    orders: UnixStream,
    reports: Option<BufReader<PipeReader>>,
}

/// A confined process running in a jail host, like a child process: [`Hosted::wait`],
/// [`Hosted::signal`] (its whole process group). Its status comes as soon as the worker has
/// ended, while its jail may still be unmounting: [`Hosted::finish`] waits for the jail to be
/// gone, after which its layers may be used again and its host goes back to the pool.
/// Dropped after its status came, it finishes (blocking); dropped before, its host is killed,
/// and the process with it.
pub struct Hosted {
    host: Option<Host>,
    /// The report being read (kept, so that a `wait` cancelled and called again goes on).
    pending: Option<tokio::task::JoinHandle<(BufReader<PipeReader>, std::io::Result<Report>)>>,
    ended: Option<ExitStatus>,
    /// Has the host said that the jail is gone?
    gone: bool,
}

impl JailSpec {
    /// Starts this spec in a jail host, with `env` as its whole environment and `output` as
    /// its standard output and error. `Err` gives `output` back when no host can run it
    /// (hosts disabled or not working here): run [`JailSpec::command`] instead.
    pub fn hosted(&self, env: &[(OsString, OsString)], output: OwnedFd) -> Result<Hosted, OwnedFd> {
        if UNAVAILABLE.load(Ordering::Relaxed) || std::env::var_os(NO_HOSTS_VAR).is_some() {
            return Err(output);
        }
        // A hidden folder that holds what the task keeps, or its doors, is hidden in the
        // task's own namespace (around what it keeps; after its init opened the doors); the
        // others once, in the host's.
        let by_itself = self.hidden_by_itself();
        let (own, shared): (Vec<Bytes>, Vec<Bytes>) = self
            .hide
            .iter()
            .cloned()
            .partition(|p| by_itself(&super::path(p)));
        let key = HostSpec {
            hide: shared,
            network: self.network,
            loopback: !self.forwards.is_empty() && !self.network,
            parent: std::process::id(),
        };
        let mut task = self.clone();
        task.hide = own;
        let order = Order::Run {
            spec: Box::new(task),
            env: env
                .iter()
                .map(|(k, v)| (Bytes::of(k), Bytes::of(v)))
                .collect(),
            keys: self.keys.iter().map(|k| k.0).collect(),
        };
        let Ok(order) = frame(&order) else {
            return Err(output);
        };
        // An idle host may have died meanwhile: then one more try, with a new one.
        for _ in 0..2 {
            let host = match take(&key) {
                Ok(host) => host,
                Err(e) => {
                    tracing::debug!("jail hosts are not available: {e:#}");
                    UNAVAILABLE.store(true, Ordering::Relaxed);
                    return Err(output);
                }
            };
            match send(&host.orders, &order, &[output.as_fd()]) {
                Ok(()) => {
                    return Ok(Hosted {
                        host: Some(host),
                        pending: None,
                        ended: None,
                        gone: false,
                    });
                }
                Err(_) => host.discard(),
            }
        }
        Err(output)
    }
}

impl Hosted {
    /// Waits for the process's jail to end: its status, as a one-off jail's would be.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.ended {
            return Ok(status);
        }
        let gone = || std::io::Error::other("the jail host is gone");
        let host = self.host.as_mut().ok_or_else(gone)?;
        let pending = match &mut self.pending {
            Some(pending) => pending,
            slot @ None => {
                let mut reports = host.reports.take().ok_or_else(gone)?;
                slot.insert(tokio::task::spawn_blocking(move || {
                    let report = read_report(&mut reports);
                    (reports, report)
                }))
            }
        };
        let (reports, report) = pending.await.map_err(std::io::Error::other)?;
        self.pending = None;
        host.reports = Some(reports);
        match report? {
            Report::Exited(status) => {
                let status = ExitStatus::from_raw(status);
                self.ended = Some(status);
                Ok(status)
            }
            other => Err(std::io::Error::other(format!(
                "the jail host reported {other:?}"
            ))),
        }
    }

    /// Is its jail gone (or has it not run at all)?
    pub fn is_gone(&self) -> bool {
        self.gone || self.host.is_none()
    }

    /// Waits for the process's jail to be gone (its mounts with it), after its status came.
    /// Blocking.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if self.gone {
            return Ok(());
        }
        let host = self.host.as_mut().filter(|_| self.ended.is_some());
        let reports = host.and_then(|h| h.reports.as_mut());
        let reports = reports.ok_or_else(|| std::io::Error::other("no status from the jail"))?;
        match read_report(reports)? {
            Report::Gone => {
                self.gone = true;
                Ok(())
            }
            other => Err(std::io::Error::other(format!(
                "the jail host reported {other:?}"
            ))),
        }
    }

    /// Sends `signal` to the process's whole group (its jail, init and the worker); nothing
    /// once it has ended.
    pub fn signal(&mut self, signal: i32) {
        if self.ended.is_some() {
            return;
        }
        let Some(host) = &self.host else { return };
        let sent = frame(&Order::Signal(signal)).and_then(|f| send(&host.orders, &f, &[]));
        if sent.is_err() {
            // The host cannot be told: ending it ends the task.
            if let Some(host) = self.host.take() {
                host.discard();
            }
        }
    }
}

impl Drop for Hosted {
    fn drop(&mut self) {
        // What mounts its jail held is not used again before the jail is gone.
        let finished = self.ended.is_some() && self.finish().is_ok();
        let Some(host) = self.host.take() else { return };
        match finished {
            true => give_back(host),
            false => host.discard(),
        }
    }
}

impl Host {
    fn start(spec: HostSpec) -> anyhow::Result<Host> {
        let (orders, theirs) = UnixStream::pair().context("a socket for a jail host")?;
        let (reports, their_reports) = std::io::pipe().context("a pipe for a jail host")?;
        let process = factory::start_host(&spec, [theirs.into(), their_reports.into()])?;
        let mut host = Host {
            spec,
            process,
            orders,
            reports: Some(BufReader::new(reports)),
        };
        let ready = host
            .reports
            .as_mut()
            .context("no reports from a jail host")
            .and_then(|r| read_report(r).context("a jail host's first report"));
        match ready {
            Ok(Report::Ready) => {
                factory::probed();
                Ok(host)
            }
            Ok(Report::Failed(why)) => {
                host.discard();
                anyhow::bail!("{why}")
            }
            Ok(other) => {
                host.discard();
                anyhow::bail!("a jail host reported {other:?} first")
            }
            Err(e) => {
                host.discard();
                Err(e)
            }
        }
    }

    /// Ends the host, and with it (its parent-death signal) any task of it.
    fn discard(mut self) {
        self.process.kill();
        self.process.wait();
    }
}

/// Tells the idle hosts to end (each sees its socket close and exits) without waiting for
/// them: at a run's end they exit while it merges and cleans up; [`end_hosts`] reaps them.
/// A process started after this gets a new host.
pub fn retire_idle_hosts() {
    let idle = std::mem::take(&mut *IDLE.lock().unwrap_or_else(|e| e.into_inner()));
    let children = idle.into_iter().map(|host| host.process);
    let mut ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
    ending.extend(children);
    ending.extend(factory::retire());
}

/// Ends the idle hosts and waits for every host told to end: none outlives the command, and
/// their time counts as this process's children's. Every socket is closed before the first
/// wait, so the hosts end side by side (one after the other, 64 hosts held a run's exit
/// ~35 ms).
pub fn end_hosts() {
    retire_idle_hosts();
    let ending = std::mem::take(&mut *ENDING.lock().unwrap_or_else(|e| e.into_inner()));
    for mut process in ending {
        process.wait();
    }
}

/// An idle host for `spec`, or a new one.
fn take(spec: &HostSpec) -> anyhow::Result<Host> {
    let idle = {
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        idle.iter()
            .position(|h| h.spec == *spec)
            .map(|at| idle.swap_remove(at))
    };
    match idle {
        Some(host) => Ok(host),
        None => Host::start(spec.clone()),
    }
}

fn give_back(host: Host) {
    let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
    if idle.len() < MAX_IDLE {
        idle.push(host);
    } else {
        drop(idle);
        host.discard();
    }
}
