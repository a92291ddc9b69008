//! Confinement of worker processes (`--sandbox workspace-write`, the default; SPEC §6).
//!
//! Every process swarm starts for a task (the `--exec` command, `--verify`, worktree `setup`,
//! the built-in worker's `run` tool) may read anything but write only inside its own worktree,
//! a private temporary directory (its `TMPDIR`), a few devices (`/dev/null`…) and the paths
//! listed in `[sandbox] writable`; and it has no network unless `--network`.
//!
//! - Writes: a Landlock ruleset, built in the parent and enforced in the child just before
//!   `exec` (`landlock_restrict_self` also sets `no_new_privs`). It binds the process and
//!   everything it starts; sibling worktrees, the repository's git directory, the user's
//!   checkout and `$HOME` are all outside the writable roots.
//! - Network: a new user namespace (mapping the caller's own uid/gid, so files keep their
//!   owner and git does not see a "dubious owner") with a new network namespace, whose only
//!   interface, loopback, is down: every connection fails, 127.0.0.1 included.
//!
//! Code run between `fork` and `exec` must be async-signal-safe: everything is prepared in
//! the parent (ruleset, map contents as C strings) and the child only makes syscalls.
//! Where the confinement cannot be applied, [`probe`] fails and swarm refuses to start rather
//! than run unconfined.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
};
use serde::{Deserialize, Serialize};

/// Devices any program may need to write to.
const WRITABLE_DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// What confines worker processes in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Confine at all? (`--sandbox off` turns it off.)
    pub enabled: bool,
    /// May workers reach the network (`--network`)?
    pub network: bool,
    /// More writable paths (`[sandbox] writable`), e.g. a tool's cache directory.
    pub writable: Vec<PathBuf>,
}

/// Confinement prepared for one process, to be applied in the child.
pub struct Confinement {
    ruleset: Option<RulesetCreated>,
    isolate_network: bool,
    setgroups: CString,
    uid_map: CString,
    gid_map: CString,
}

impl Confinement {
    /// Prepares the confinement of a process whose writable roots are `roots` (its worktree
    /// and temporary directory) plus the policy's extra paths.
    pub fn prepare(policy: &SandboxPolicy, roots: &[&Path]) -> std::io::Result<Self> {
        let abi = ABI::V5;
        let err = |e: landlock::RulesetError| std::io::Error::other(e.to_string());
        let writable: Vec<PathBuf> = roots
            .iter()
            .map(|p| p.to_path_buf())
            .chain(policy.writable.iter().cloned())
            .collect();
        let ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(err)?
            .create()
            .map_err(err)?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
            .map_err(err)?
            .add_rules(path_beneath_rules(&writable, AccessFs::from_all(abi)))
            .map_err(err)?
            .add_rules(path_beneath_rules(
                WRITABLE_DEVICES,
                AccessFs::from_all(abi),
            ))
            .map_err(err)?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let c = |s: String| CString::new(s).map_err(std::io::Error::other);
        Ok(Self {
            ruleset: Some(ruleset),
            isolate_network: !policy.network,
            setgroups: c("deny".into())?,
            uid_map: c(format!("{uid} {uid} 1"))?,
            gid_map: c(format!("{gid} {gid} 1"))?,
        })
    }

    /// Arranges for `cmd`'s child to confine itself just before `exec`.
    pub fn install(mut self, cmd: &mut tokio::process::Command) {
        let apply = move || -> std::io::Result<()> {
            if self.isolate_network {
                // SAFETY: unshare and raw file writes are async-signal-safe syscalls.
                unsafe {
                    if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    write_proc(c"/proc/self/setgroups", &self.setgroups)?;
                    write_proc(c"/proc/self/uid_map", &self.uid_map)?;
                    write_proc(c"/proc/self/gid_map", &self.gid_map)?;
                }
            }
            let Some(ruleset) = self.ruleset.take() else {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            };
            match ruleset.restrict_self() {
                Ok(status) if status.ruleset != RulesetStatus::NotEnforced => Ok(()),
                // Not enforced: refuse to run the program unconfined.
                Ok(_) | Err(_) => Err(std::io::Error::from_raw_os_error(libc::ENOSYS)),
            }
        };
        let mut apply = Some(apply);
        // SAFETY: the closure only makes syscalls (unshare, open/write/close,
        // prctl, landlock_restrict_self); nothing is allocated on the success path.
        unsafe {
            cmd.pre_exec(move || match apply.take() {
                Some(mut f) => f(),
                None => Ok(()),
            });
        }
    }
}

/// Writes `content` to a /proc file with raw syscalls.
///
/// # Safety
/// Only async-signal-safe calls; meant for the child between fork and exec.
unsafe fn write_proc(path: &std::ffi::CStr, content: &CString) -> std::io::Result<()> {
    // SAFETY: valid NUL-terminated strings; the fd is closed on every path.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let bytes = content.as_bytes();
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if written != bytes.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Checks that workers can be confined on this system, by confining `true`.
pub async fn probe(policy: &SandboxPolicy) -> Result<(), String> {
    if !policy.enabled {
        return Ok(());
    }
    if !cfg!(target_os = "linux") {
        return Err("worker confinement needs Linux (Landlock)".into());
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let confinement = Confinement::prepare(policy, &[dir.path()]).map_err(|e| e.to_string())?;
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.args(["-c", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    confinement.install(&mut cmd);
    let status = cmd.status().await.map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSYS) => "Landlock is not available in this kernel".to_string(),
        Some(libc::EPERM) | Some(libc::EINVAL) if !policy.network => format!(
            "cannot create a user and network namespace to cut workers off the network ({e})"
        ),
        _ => e.to_string(),
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("a confined test process failed ({status})"))
    }
}

/// A private temporary directory for one worker process, deleted when dropped.
pub fn private_tmp() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("swarm-tmp-").tempdir()
}
