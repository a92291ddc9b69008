//! The jail of one worker process, set up by swarm re-executing itself
//! (`swarm __swarm-jail SPEC`), so the setup is ordinary Rust code in a fresh, single-threaded
//! process rather than async-signal-safe code between `fork` and `exec`.
//!
//! ```text
//! swarm ── jail (this process; in swarm's process group; dies with swarm: PDEATHSIG)
//!            │ unshare: user (own uid/gid), PID, mount, IPC and, unless --network, network
//!            └─ init (PID 1 of the new PID namespace; dies with the jail)
//!                 │ /proc remounted (only this namespace's processes), credential stores
//!                 │ hidden (empty mounts), Landlock (writes, signals, abstract sockets)
//!                 │ the forwarder (threads of init): hands 127.0.0.1:3128's connections to
//!                 │   swarm's proxy (an allow-list), 127.0.0.1:3129's to its model gateway
//!                 └─ the worker: `sh -c CMD` (or an argv), and everything it starts
//! ```
//!
//! With an allow-list (`--allow-domain`), or for an agent whose model requests go through
//! swarm's gateway, the network namespace gets its loopback up and init starts a forwarder
//! that hands each connection to `127.0.0.1:`[`super::proxy::FORWARD_PORT`] over to the Unix
//! socket of swarm's proxy ([`super::proxy`]), which decides, and `127.0.0.1:`
//! [`crate::proxy::GATEWAY_PORT`] to the model gateway's (the engine's `gateway`)
//! ([`crate::door`]). An agent's state
//! directories are copy-on-write views ([`StateView`]): it reads the user's settings, and
//! what it writes stays in its task's layer.
//!
//! When the worker exits, init kills every process left in the PID namespace, daemons that
//! left the process group with `setsid` included, reaps them, and only then reports the
//! worker's status and exits: nothing of a task outlives it. When swarm dies (even by
//! `kill -9`), the jail gets SIGKILL, init with it, and the namespace with init. Processes
//! inside see only their own namespace in `/proc` and cannot name, let alone signal, swarm
//! or another task's processes (Landlock's signal scoping says the same where the kernel has
//! it).
//!
//! A worker slot's processes share a jail host ([`host`]): the user, mount and network
//! namespaces once per slot, and for each process an init cloned from it into the rest made
//! new (a nested user namespace, PID, mount, IPC), which then runs as above.
//!
//! The jail's exit status is the worker's (a signal is re-raised), so swarm reads it like a
//! plain child's. A hosted task's init writes that status to its host before it exits, so
//! that swarm can go on while init's exit unmounts the namespace ([`host`]). A jail that
//! cannot be set up prints why and exits [`JAIL_FAILED`] before the worker runs: nothing
//! runs unconfined.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use super::door::{DoorAddress, DoorKey, KEY_LEN};
use super::overlay::OverlayView;

mod factory;
mod forward;
mod host;
mod hosted;
mod init;
mod mounts;
pub mod starter;
mod wire;

pub use factory::{FACTORY_NAME, HOST_NAME};
pub use hosted::{Hosted, NO_HOSTS_VAR, end_hosts, retire_idle_hosts};
use init::init_main;
pub use mounts::StateView;
use mounts::loopback_up;

/// The argument that makes swarm a jail.
pub(crate) const ARG: &str = "__swarm-jail";
/// Exit status of a jail that could not be set up (the worker did not run).
pub(crate) const JAIL_FAILED: u8 = 125;

/// An argument or a path: text when it is UTF-8, bytes otherwise (they need not be).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Bytes {
    Text(String),
    Raw(Vec<u8>),
}

impl Bytes {
    fn of(s: &std::ffi::OsStr) -> Self {
        match s.to_str() {
            Some(text) => Bytes::Text(text.to_string()),
            None => Bytes::Raw(s.as_bytes().to_vec()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Bytes::Text(text) => text.as_bytes(),
            Bytes::Raw(raw) => raw,
        }
    }
}

/// What one jail runs, and how it confines it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JailSpec {
    /// The program and its arguments (`sh -c CMD` for a command line).
    pub argv: Vec<Bytes>,
    pub cwd: Bytes,
    /// Writable roots (Landlock); everything else is read-only.
    pub writable: Vec<Bytes>,
    /// Paths whose content is hidden (an empty directory, or an empty file); always the
    /// folder of swarm's doors.
    pub hide: Vec<Bytes>,
    /// Paths shown as they are even inside a hidden folder (besides `cwd`, which always
    /// is): the worker's own files among swarm's hidden state.
    #[serde(default)]
    pub keep: Vec<Bytes>,
    /// Keep the network (no network namespace).
    pub network: bool,
    /// Ports of the namespace's loopback forwarded to Unix sockets of swarm's: its
    /// allow-list proxy, its model gateway.
    #[serde(default)]
    pub forwards: Vec<(u16, Bytes)>,
    /// The key of each of `forwards`' doors, in their order: sent on the jail's standard
    /// input by [`JailSpec::command`], never on its command line.
    #[serde(skip)]
    pub keys: Vec<DoorKey>,
    /// swarm's pid: if the jail's parent is not swarm any more, swarm has died.
    pub parent: u32,
    /// Mounted on the worktree before anything runs: the worker's view of it.
    #[serde(default)]
    pub overlay: Option<OverlayView>,
    /// Copy-on-write views of directories outside the worktree (an agent's state): the
    /// directory as it is below, the writes in a layer of swarm's.
    #[serde(default)]
    pub state_views: Vec<StateView>,
    /// A copy-on-write view of the repository's git directory (a worker's own git), and the
    /// worktree below it to keep as it is mounted.
    #[serde(default)]
    pub git_view: Option<(StateView, Bytes)>,
    /// Where the jail writes how many processes the worker left running when it exited
    /// (stopped with it), if any did.
    #[serde(default)]
    pub leftovers: Option<Bytes>,
}

impl JailSpec {
    pub fn new(
        argv: &[OsString],
        cwd: &Path,
        writable: &[PathBuf],
        hide: &[PathBuf],
        network: bool,
    ) -> Self {
        // Every door of swarm's is covered, in every jail (its own forwarder opens its doors
        // before the cover: `init`).
        let doors = crate::scratch::doors().ok().map(Path::to_path_buf);
        Self {
            argv: argv.iter().map(|a| Bytes::of(a)).collect(),
            cwd: Bytes::of(cwd.as_os_str()),
            writable: writable.iter().map(|p| Bytes::of(p.as_os_str())).collect(),
            hide: hide
                .iter()
                .chain(&doors)
                .map(|p| Bytes::of(p.as_os_str()))
                .collect(),
            network,
            keep: Vec::new(),
            forwards: Vec::new(),
            keys: Vec::new(),
            parent: std::process::id(),
            overlay: None,
            state_views: Vec::new(),
            git_view: None,
            leftovers: None,
        }
    }

    /// Mounts `view` on its worktree in the jail's mount namespace.
    pub fn with_overlay(mut self, view: Option<&OverlayView>) -> Self {
        self.overlay = view.cloned();
        self
    }

    /// Forwards `127.0.0.1:port` in the namespace to `door`.
    pub fn with_forward(mut self, port: u16, door: &DoorAddress) -> Self {
        self.forwards
            .push((port, Bytes::of(door.socket.as_os_str())));
        self.keys.push(door.key.clone());
        self
    }

    /// Shows the git directory of `view` copy-on-write, `worktree` (below it) as it is.
    pub fn with_git_view(mut self, view: Option<&StateView>, worktree: &Path) -> Self {
        self.git_view = view.map(|v| (v.clone(), Bytes::of(worktree.as_os_str())));
        self
    }

    /// What this jail shows as it is below the hidden folder `p`: its `cwd` and its `keep`.
    pub(super) fn kept_inside(&self, p: &Path) -> Vec<PathBuf> {
        std::iter::once(&self.cwd)
            .chain(&self.keep)
            .map(path)
            .filter(|k| k.starts_with(p) && k != p)
            .collect()
    }

    /// Which hidden folders are hidden in this process's own mount namespace, in the order a
    /// one-off jail's init hides them (after its doors are opened and its views mounted),
    /// rather than once in a jail host's: those that hold what the process keeps as it is, or
    /// hold or lie in a door of its forwards or a layer of its views. Gathered once for all
    /// the hidden folders (some forty: the credential stores).
    pub(super) fn hidden_by_itself(&self) -> impl Fn(&Path) -> bool + use<> {
        let kept: Vec<PathBuf> = std::iter::once(&self.cwd)
            .chain(&self.keep)
            .map(path)
            .collect();
        let views = self
            .state_views
            .iter()
            .chain(self.git_view.iter().map(|(v, _)| v))
            .flat_map(|v| [&v.dir, &v.upper, &v.work]);
        let overlay = self
            .overlay
            .iter()
            .flat_map(|v| [&v.mount_point, &v.base, &v.upper, &v.work]);
        let used: Vec<PathBuf> = self
            .forwards
            .iter()
            .map(|(_, s)| path(s))
            .chain(views.chain(overlay).cloned())
            .collect();
        move |p: &Path| {
            kept.iter().any(|k| k.starts_with(p) && k != p)
                || used.iter().any(|q| q.starts_with(p) || p.starts_with(q))
        }
    }

    /// Shows `paths` as they are, though a hidden folder holds them.
    pub fn keeping(mut self, paths: &[&Path]) -> Self {
        self.keep = paths.iter().map(|p| Bytes::of(p.as_os_str())).collect();
        self
    }

    /// Writes into `file` how many processes the worker left behind, if any.
    pub fn with_leftovers(mut self, file: &Path) -> Self {
        self.leftovers = Some(Bytes::of(file.as_os_str()));
        self
    }

    /// Shows each of `views` on its directory, copy-on-write.
    pub fn with_state_views(mut self, views: &[StateView]) -> Self {
        self.state_views = views.to_vec();
        self
    }

    /// The command that runs this spec in a jail. Its standard input is set: a pipe holding
    /// the doors' keys (the worker's is `/dev/null`).
    pub fn command(&self) -> anyhow::Result<JailCommand> {
        use std::io::Write as _;
        let mut cmd = tokio::process::Command::new("/proc/self/exe");
        cmd.arg(ARG).arg(serde_json::to_string(self)?);
        crate::open_files::restore_in_child(cmd.as_std_mut());
        if self.keys.is_empty() {
            cmd.stdin(std::process::Stdio::null());
            return Ok(JailCommand(cmd));
        }
        let (keys, mut sender) = std::io::pipe().context("cannot create a pipe for the jail")?;
        for key in &self.keys {
            sender.write_all(&key.0)?;
        }
        drop(sender);
        cmd.stdin(keys);
        Ok(JailCommand(cmd))
    }
}

/// A one-off jail's command: set up by its caller ([`JailCommand::command_mut`]), started
/// only from the thread that starts every jail (`starter`), so that the jail dies with swarm,
/// never with the thread that asked for it.
#[derive(Debug)]
pub struct JailCommand(tokio::process::Command);

impl JailCommand {
    /// The command, for its output, folder and environment (its standard input is the
    /// jail's).
    pub fn command_mut(&mut self) -> &mut tokio::process::Command {
        &mut self.0
    }

    /// Starts the jail. Call it from the async runtime the child belongs to.
    pub fn spawn(self) -> std::io::Result<tokio::process::Child> {
        starter::spawn(self.0)
    }

    /// Starts the jail and waits for its end, with what it wrote on its standard output and
    /// error (both captured, whatever was set).
    pub async fn output(mut self) -> std::io::Result<std::process::Output> {
        self.0
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        self.spawn()?.wait_with_output().await
    }
}

/// When this process was started as a jail: sets it up and runs the worker (returning only
/// if that failed). `None` for an ordinary swarm command line.
pub fn main_if_jail() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    match args.next()? {
        arg if arg == ARG => {}
        arg if arg == factory::ARG => return Some(factory::main()),
        _ => return None,
    }
    let error = match args
        .next()
        .map(|a| serde_json::from_slice::<JailSpec>(a.as_bytes()))
    {
        Some(Ok(mut spec)) => match read_keys(&mut spec) {
            Ok(()) => run(&spec),
            Err(e) => e,
        },
        Some(Err(e)) => anyhow::anyhow!("unreadable jail spec: {e}"),
        None => anyhow::anyhow!("no jail spec"),
    };
    eprintln!("swarm: cannot confine the worker process: {error:#}");
    Some(ExitCode::from(JAIL_FAILED))
}

/// Reads the doors' keys from standard input (to its end), then makes `/dev/null` the
/// standard input the worker inherits.
fn read_keys(spec: &mut JailSpec) -> anyhow::Result<()> {
    use std::io::Read as _;
    let mut keys = Vec::new();
    std::io::stdin()
        .lock()
        .take((KEY_LEN * spec.forwards.len() + 1) as u64)
        .read_to_end(&mut keys)
        .context("cannot read the jail's keys")?;
    anyhow::ensure!(
        keys.len() == KEY_LEN * spec.forwards.len(),
        "the jail got {} bytes of keys for {} forwards",
        keys.len(),
        spec.forwards.len()
    );
    spec.keys = keys
        .chunks(KEY_LEN)
        .map(|c| DoorKey(c.try_into().unwrap_or([0; KEY_LEN])))
        .collect();
    let null = std::fs::File::open("/dev/null").context("/dev/null")?;
    // SAFETY: dup2 onto our own standard input; `null` is closed when dropped.
    if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 0) } < 0 {
        return Err(errno("dup2"));
    }
    Ok(())
}

fn path(bytes: &Bytes) -> PathBuf {
    PathBuf::from(OsString::from_vec(bytes.as_bytes().to_vec()))
}

fn errno(what: &str) -> anyhow::Error {
    anyhow::anyhow!("{what}: {}", std::io::Error::last_os_error())
}

/// The jail process: namespaces, then init. Returns only on failure.
fn run(spec: &JailSpec) -> anyhow::Error {
    match jail(spec) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

enum Never {}

fn jail(spec: &JailSpec) -> anyhow::Result<Never> {
    watch_parent(spec.parent, "swarm has exited")?;
    let argv = argv_of(spec)?;
    enter_namespaces(TASK_NAMESPACES | network(spec.network))?;
    contained(spec, &argv)
}

/// Dies with the parent (SIGKILL), which must be `parent` (else it is gone already: `gone`).
fn watch_parent(parent: u32, gone: &str) -> anyhow::Result<()> {
    // SAFETY: prctl/getppid have no memory effects.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(errno("prctl(PR_SET_PDEATHSIG)"));
        }
        if libc::getppid() as u32 != parent {
            bail!("{gone}");
        }
    }
    Ok(())
}

fn argv_of(spec: &JailSpec) -> anyhow::Result<Vec<CString>> {
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("an argument contains a NUL byte")?;
    anyhow::ensure!(!argv.is_empty(), "nothing to run");
    Ok(argv)
}

/// The namespaces made for each process, whether its jail is a one-off or forked by a host:
/// everything a task could change (its processes, its mounts, System V IPC, its user
/// namespace's keyrings).
const TASK_NAMESPACES: libc::c_int =
    libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC;

/// The network namespace, unless `network` (the host's network is kept).
fn network(network: bool) -> libc::c_int {
    match network {
        true => 0,
        false => libc::CLONE_NEWNET,
    }
}

/// The jail once in its namespaces: init and the worker; this process then waits for init
/// and ends the way the worker did. (A jail host's task has no such process: the host makes
/// init in the namespaces itself, [`host`].)
fn contained(spec: &JailSpec, argv: &[CString]) -> anyhow::Result<Never> {
    // Not dumpable from here on (uid_map is written): the worker, which runs as the same
    // user, cannot read the doors' keys from the memory of init or the forwarder, nor trace
    // them. Its own exec makes it dumpable again.
    not_dumpable()?;
    if !spec.forwards.is_empty() && !spec.network {
        loopback_up()?;
    }
    let status = pipe()?;
    let lifeline = pipe()?;
    // SAFETY: single-threaded; the child only runs `init`.
    let init = unsafe { libc::fork() };
    if init < 0 {
        return Err(errno("fork"));
    }
    if init == 0 {
        // SAFETY: closing fds this process owns.
        unsafe {
            libc::close(status[0]);
            libc::close(lifeline[1]);
        }
        let e = match init_main(spec, argv, (status[1], lifeline[0]), None) {
            Ok(never) => match never {},
            Err(e) => e,
        };
        eprintln!("swarm: cannot confine the worker process: {e:#}");
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(i32::from(JAIL_FAILED)) };
    }
    // SAFETY: closing our copies; the signals the worker gets directly (same process group)
    // must not end the jail before the worker has had its grace period.
    unsafe {
        libc::close(status[1]);
        libc::close(lifeline[0]);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let init_status = wait_for(init)?;
    // The worker's status, as init saw it; nothing if init itself was killed.
    match read_worker_status(status[0]) {
        None => exit_like(init_status),
        Some((worker, left)) => {
            write_leftovers(spec, left);
            exit_like(worker)
        }
    }
}

/// Writes into the file `spec` names how many processes its worker left behind, if any did.
/// Called outside init (the one-off jail, the host): swarm's code, outside the worker's
/// Landlock domain, and the file, in swarm's scratch directory, out of the worker's reach.
fn write_leftovers(spec: &JailSpec, left: u32) {
    if let (Some(file), 1..) = (&spec.leftovers, left) {
        let _ = std::fs::write(path(file), left.to_string());
    }
}

/// What init wrote on its status pipe `fd` when the worker ended: the worker's wait status and
/// how many processes it left running. `None` if init ended without writing it.
fn read_worker_status(fd: i32) -> Option<(i32, u32)> {
    let mut buf = [0u8; 8];
    // SAFETY: reading into a local buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    let word = |at: usize| [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
    (n == 8).then(|| (i32::from_ne_bytes(word(0)), u32::from_ne_bytes(word(4))))
}

/// Makes this process not dumpable: nothing running as the same user can read its memory
/// or trace it.
fn not_dumpable() -> anyhow::Result<()> {
    // SAFETY: prctl has no memory effects.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } != 0 {
        return Err(errno("prctl(PR_SET_DUMPABLE)"));
    }
    Ok(())
}

/// The wait status a process that runs [`exit_like`]`(status)` ends with.
fn final_status(status: i32) -> i32 {
    if libc::WIFSIGNALED(status) {
        libc::WTERMSIG(status)
    } else if libc::WIFEXITED(status) {
        status & 0xff00
    } else {
        1 << 8
    }
}

/// Moves this process into new namespaces (`flags`, a user namespace among them), as the
/// caller's own uid and gid inside: files keep their owner, git sees no
/// "dubious ownership".
fn enter_namespaces(flags: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: getuid and getgid take nothing and cannot fail.
    let uid = unsafe { libc::getuid() };
    // SAFETY: as above.
    let gid = unsafe { libc::getgid() };
    // SAFETY: this process is single-threaded (a fresh exec, or a fork of one), as
    // unshare(CLONE_NEWUSER) needs.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(errno(
            "cannot create namespaces (user, PID, mount, network)",
        ));
    }
    map_ids(uid, gid)
}

/// Maps, in this process's new user namespace, `uid` and `gid` (its own outside) to
/// themselves.
fn map_ids(uid: libc::uid_t, gid: libc::gid_t) -> anyhow::Result<()> {
    std::fs::write("/proc/self/setgroups", "deny").context("/proc/self/setgroups")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).context("uid_map")?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).context("gid_map")?;
    Ok(())
}

fn pipe() -> anyhow::Result<[i32; 2]> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(errno("pipe"));
    }
    Ok(fds)
}

fn wait_for(pid: i32) -> anyhow::Result<i32> {
    loop {
        let mut st = 0;
        // SAFETY: waitpid into a local.
        let rc = unsafe { libc::waitpid(pid, &mut st, 0) };
        if rc == pid {
            return Ok(st);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(errno("waitpid"));
        }
    }
}

/// Ends this process the way the worker ended: the same exit code, or the same signal.
fn exit_like(status: i32) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: resetting our own dispositions and signalling ourselves; no core dump.
        unsafe {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    })
}
