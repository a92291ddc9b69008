//! Starting a worker process, confined or not, and keeping hold of it: [`Running`] is a child
//! process of swarm's, or a process in a pooled jail host (`swarm_sandbox::jail::Hosted`);
//! either way it is waited for, and signalled as a whole group, the same way.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};

use anyhow::Context as _;
use tokio::process::Command;

use super::ProcessRequest;
use crate::gateway::{GATEWAY_PORT, Listener, Place};
use crate::secrets;
use crate::settings::{AllowList, NetworkAccess};
use crate::worker::WorkerError;
use swarm_sandbox::jail::{Hosted, JailSpec};
use swarm_sandbox::proxy::{self, Proxy};
use swarm_sandbox::{self as sandbox, SandboxPolicy};

/// What a process needs while it runs: its private temporary directory, with an allow-list
/// its network proxy, for an agent its door to the model gateway.
#[derive(Default)]
pub(crate) struct Confinement {
    tmp: Option<sandbox::scratch::ScratchDir>,
    /// Where the jail says what the process left behind, if it left anything (out of its
    /// reach).
    pub(super) leftovers: Option<std::path::PathBuf>,
    proxy: Option<Proxy>,
    pub(super) gateway: Option<Listener>,
}

/// A started worker process: swarm's child (in a process group of its own), or a process in
/// a jail host.
pub(super) enum Running {
    Child {
        child: tokio::process::Child,
        pgid: Option<i32>,
        /// Until it has been waited for: its group is killed when this is dropped, so no
        /// worker process outlives the code that runs it.
        live: bool,
    },
    Hosted(Hosted),
}

impl Running {
    pub(super) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Running::Child { child, .. } => child.wait().await,
            Running::Hosted(hosted) => hosted.wait().await,
        }
    }

    /// Sends `signal` to the process's group.
    pub(super) fn signal(&mut self, signal: i32) {
        match self {
            Running::Child { pgid, .. } => signal_group(*pgid, signal),
            Running::Hosted(hosted) => hosted.signal(signal),
        }
    }

    /// How many processes of its group still run after it exited (an unconfined worker's
    /// leftovers; a jail's are counted inside it).
    pub(super) fn left_in_group(&self) -> u32 {
        match self {
            Running::Child { pgid, .. } => group_members(*pgid),
            Running::Hosted(_) => 0,
        }
    }

    /// Is nothing of it left to wait for (a child reaped; a hosted process's jail gone)?
    pub(super) fn finished(&self) -> bool {
        match self {
            Running::Child { .. } => true,
            Running::Hosted(hosted) => hosted.is_gone(),
        }
    }

    /// Dealt with: a later signal could hit a reused process group id.
    pub(super) fn forget_group(&mut self) {
        if let Running::Child { live, .. } = self {
            *live = false;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Running::Child {
            pgid, live: true, ..
        } = self
        {
            signal_group(*pgid, libc::SIGKILL);
        }
    }
}

/// Starts `req`'s process with `output` as its standard output and error: in a jail host
/// when confined and a host can run it, else in a jail of its own or unconfined. What the
/// confinement needs is kept until the process is gone.
pub(super) fn start(
    req: &ProcessRequest<'_>,
    output: std::io::PipeWriter,
) -> Result<(Running, Confinement), WorkerError> {
    let argv = req.program.argv();
    let (spec, keep) = confinement(req, &argv).map_err(WorkerError::Sandbox)?;
    let env = environment(req, &keep);
    let output = OwnedFd::from(output);
    let output = match &spec {
        Some(spec) => match off_the_runtime(|| spec.hosted(&env, output)) {
            Ok(hosted) => return Ok((Running::Hosted(hosted), keep)),
            Err(output) => output,
        },
        None => output,
    };
    let output_err = output.try_clone().map_err(WorkerError::Process)?;
    let set_up = |cmd: &mut Command| {
        cmd.stdout(output).stderr(output_err);
        cmd.current_dir(req.cwd).process_group(0).kill_on_drop(true);
        cmd.env_clear().envs(env);
    };
    // Our copies of the pipe's write end go with the command once it started, or the reader
    // would never see end-of-file.
    let child = match &spec {
        Some(spec) => {
            let mut jail = spec.command().map_err(WorkerError::Sandbox)?;
            set_up(jail.command_mut());
            jail.spawn()
        }
        None => {
            let mut cmd = Command::new(&argv[0]);
            // A jail's standard input carries its doors' keys; the worker gets /dev/null.
            cmd.args(&argv[1..]).stdin(Stdio::null());
            swarm_sandbox::open_files::restore_in_child(cmd.as_std_mut());
            set_up(&mut cmd);
            cmd.spawn()
        }
    };
    let child = child.map_err(|error| WorkerError::Start {
        program: req.program.describe(),
        error,
    })?;
    let pgid = child.id().map(|p| p as i32);
    Ok((
        Running::Child {
            child,
            pgid,
            live: true,
        },
        keep,
    ))
}

/// The jail's spec when `req` is confined (with what it needs kept until the process is
/// gone: its temporary directory, its proxy, its gateway).
fn confinement(
    req: &ProcessRequest<'_>,
    argv: &[OsString],
) -> anyhow::Result<(Option<JailSpec>, Confinement)> {
    let confined = req.sandbox.filter(|p| p.enabled);
    // In a jail with a network of its own, the gateway is a socket forwarded to its loopback;
    // elsewhere, a port of the host's loopback.
    let place = match confined {
        Some(policy) if !policy.network => Place::Jail,
        _ => Place::Host,
    };
    let gateway = req
        .gateway
        .map(|g| g.gateway.listen(g.task.clone(), g.bindings, place))
        .transpose()?;
    match confined {
        Some(policy) => {
            let (spec, keep) = jailed(req, policy, argv, gateway)?;
            Ok((Some(spec), keep))
        }
        None => {
            anyhow::ensure!(
                req.view.is_none() && req.state_views.is_empty(),
                "overlay views need the sandbox's jail"
            );
            let keep = Confinement {
                gateway,
                ..Confinement::default()
            };
            Ok((None, keep))
        }
    }
}

/// The process's whole environment: swarm's without its secrets, nor the variables that
/// would point the worker's git at another repository; its temporary directory, proxy and
/// gateway; then the request's own.
fn environment(req: &ProcessRequest<'_>, keep: &Confinement) -> Vec<(OsString, OsString)> {
    let pass = req.sandbox.map(|p| p.env.as_slice()).unwrap_or_default();
    // Later settings win, as with `Command::env`.
    let mut env: BTreeMap<OsString, OsString> = secrets::worker_env(pass).into_iter().collect();
    if let Some(tmp) = &keep.tmp {
        for var in ["TMPDIR", "TMP", "TEMP"] {
            env.insert(var.into(), tmp.path().into());
        }
    }
    if keep.proxy.is_some() {
        let loopback_allowed = req.sandbox.is_some_and(|p| p.allows_loopback());
        for (k, v) in proxy::worker_env(!loopback_allowed) {
            env.insert(k.into(), v.into());
        }
    }
    for (k, v) in no_background_git() {
        env.insert(k.into(), v.into());
    }
    for (k, v) in &req.env {
        env.insert(k.clone(), v.clone());
    }
    if let Some(gateway) = &keep.gateway {
        for (k, v) in gateway.agent_env() {
            env.insert(k.into(), v.into());
        }
    }
    env.into_iter().collect()
}

/// The jail for `policy`: its private temporary directory, its views, its forwards to the
/// proxy and the gateway.
fn jailed(
    req: &ProcessRequest<'_>,
    policy: &SandboxPolicy,
    argv: &[OsString],
    gateway: Option<Listener>,
) -> anyhow::Result<(JailSpec, Confinement)> {
    let tmp = sandbox::private_tmp().context("cannot create a temporary directory")?;
    let mut writable = vec![req.cwd.to_path_buf(), tmp.path().to_path_buf()];
    writable.extend(req.also_writable.iter().map(|p| p.to_path_buf()));
    writable.extend(policy.writable.iter().cloned());
    let mut spec = JailSpec::new(argv, req.cwd, &writable, &policy.hide, policy.network)
        .with_overlay(req.view)
        .with_git_view(req.git_view, req.cwd)
        .with_state_views(req.state_views)
        .keeping(req.keep);
    let gateway_door = gateway.as_ref().and_then(Listener::door);
    let proxy = match policy.network_access() {
        NetworkAccess::AllowList(domains) => {
            let allow = AllowList::parse(domains).map_err(anyhow::Error::msg)?;
            Some(Proxy::start(
                allow,
                req.on_access.clone(),
                gateway_door.clone(),
            )?)
        }
        NetworkAccess::None | NetworkAccess::Full => None,
    };
    if let Some(proxy) = &proxy {
        spec = spec.with_forward(proxy::FORWARD_PORT, &proxy.address());
    }
    if let Some(door) = &gateway_door {
        spec = spec.with_forward(GATEWAY_PORT, door);
    }
    let leftovers =
        swarm_sandbox::scratch::path("leftovers-").context("cannot name a temporary file")?;
    let spec = spec.with_leftovers(&leftovers);
    let keep = Confinement {
        tmp: Some(tmp),
        leftovers: Some(leftovers),
        proxy,
        gateway,
    };
    Ok((spec, keep))
}

/// How many processes of group `pgid` still run (an unconfined worker's leftovers; a jail's
/// are counted inside it). Cheap when there are none: one `killpg(…, 0)`.
fn group_members(pgid: Option<i32>) -> u32 {
    let Some(pgid) = pgid.filter(|p| *p > 0) else {
        return 0;
    };
    // SAFETY: signal 0 only checks that the group has a member.
    if unsafe { libc::killpg(pgid, 0) } != 0 {
        return 0;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let in_group = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // `pid (name) STATE PPID PGRP …`
            let mut rest = stat
                .rsplit_once(')')
                .map_or("", |(_, r)| r)
                .split_whitespace();
            let state = rest.next();
            state != Some("Z") && rest.nth(1).and_then(|g| g.parse().ok()) == Some(pgid)
        })
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| in_group(pid))
        .count() as u32
}

fn signal_group(pgid: Option<i32>, signal: i32) {
    if let Some(pgid) = pgid.filter(|p| *p > 0) {
        // SAFETY: killpg only sends a signal; ESRCH (group already gone) is fine.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// `git -c` settings for worker processes, appended to any `GIT_CONFIG_COUNT` the user has:
/// no automatic maintenance or gc that would detach and outlive the task.
fn no_background_git() -> Vec<(String, String)> {
    let n: usize = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let settings = [("maintenance.auto", "false"), ("gc.auto", "0")];
    let mut env = vec![(
        "GIT_CONFIG_COUNT".to_string(),
        (n + settings.len()).to_string(),
    )];
    for (i, (k, v)) in settings.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{}", n + i), k.to_string()));
        env.push((format!("GIT_CONFIG_VALUE_{}", n + i), v.to_string()));
    }
    env
}

/// Runs `f`, which may block (a new jail host is waited for until it is set up, a few
/// milliseconds), without stalling the runtime's other tasks: on a multi-threaded runtime
/// they move to another thread meanwhile (at `-j 64` the first wave's hosts would otherwise
/// hold the worker threads that the model gateway's streams run on).
fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
