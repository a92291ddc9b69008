//! Confinement of worker processes (`--sandbox workspace-write`, the default), and of swarm's
//! own writes into worktrees.
//!
//! Every process swarm starts for a task (the `--exec` command, `--verify`, worktree `setup`,
//! `--verify-merged`, the built-in worker's `run` tool) runs in a [`jail`]:
//!
//! - writes: Landlock; read and execute everywhere, write only beneath the task's worktree,
//!   a private temporary directory (its `TMPDIR`), a few devices and `[sandbox] writable`;
//! - processes: a PID namespace of its own, whose init ends every process of the task when the
//!   worker ends and dies with swarm; `/proc` shows only the task's processes, and signals
//!   cannot reach swarm or other tasks (Landlock's signal scoping, where the kernel has it);
//! - network: a network namespace with only a loopback that is down; with `--allow-domain`,
//!   the loopback up and a forwarder to swarm's allow-list proxy ([`proxy`]); the host's
//!   network with `--network`;
//! - secrets: the user's credential stores (`~/.ssh`, `~/.aws`…, [`policy::DEFAULT_HIDDEN`]) are
//!   covered by empty mounts, and secret variables are not in the environment
//!   (the engine's `secrets`).
//!
//! Where the jail cannot be set up, [`probe`] fails and swarm refuses to start rather than run
//! workers unconfined.
//!
//! swarm's own code also writes into worktrees (resetting a pooled worktree, copying
//! `[worktree] copy` files), where a worker may have left symbolic links pointing anywhere.
//! That code runs in a thread confined by the same Landlock rules ([`confined`]), so a write
//! through such a link fails instead of landing outside.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod allow_list;
pub mod door;
mod fd_passing;
pub mod files;
pub mod git_view;
pub mod jail;
pub mod janitor;
pub mod open_files;
pub mod overlay;
pub mod policy;
pub mod proxy;
pub mod scratch;

pub use policy::{NetworkAccess, SandboxPolicy};

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
/// Devices any program may need to write to.
const WRITABLE_DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// Confines the calling thread (and what it starts) to writing beneath `writable` and the
/// devices, and, where the kernel has them, to signalling and reaching abstract sockets of its
/// own Landlock domain only. Irreversible for the thread.
pub(crate) fn restrict_writes(writable: &[PathBuf]) -> anyhow::Result<()> {
    let abi = ABI::V6;
    // A writable path that does not exist (yet) grants nothing.
    let writable: Vec<&PathBuf> = writable.iter().filter(|p| p.exists()).collect();
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(
            WRITABLE_DEVICES,
            AccessFs::from_all(abi),
        ))?
        .restrict_self()?;
    anyhow::ensure!(
        status.ruleset != RulesetStatus::NotEnforced,
        "Landlock is not available in this kernel"
    );
    Ok(())
}

/// Runs `work` in a thread of its own that may write only beneath `writable` (Landlock), for
/// swarm's own writes into places a worker controlled. Where Landlock is not available the
/// work runs unconfined (its callers also refuse to follow links themselves).
pub fn confined<T: Send>(
    writable: &[PathBuf],
    work: impl FnOnce() -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Err(e) = restrict_writes(writable) {
                tracing::debug!("swarm's own writes are not confined: {e:#}");
            }
            work()
        })
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a confined thread of swarm panicked")))
    })
}

/// Checks that workers can be confined on this system, by running `true` in a jail with this
/// policy. `Err` says what is missing.
pub async fn probe(policy: &SandboxPolicy) -> Result<(), String> {
    if !policy.enabled {
        return Ok(());
    }
    if !cfg!(target_os = "linux") {
        return Err("worker confinement needs Linux (Landlock and namespaces)".into());
    }
    let dir = crate::scratch::dir("probe-").map_err(|e| e.to_string())?;
    let mut spec = jail::JailSpec::new(
        &["true".into()],
        dir.path(),
        &[dir.path().to_path_buf()],
        &policy.hide,
        policy.network,
    );
    // With an allow-list, the loopback and the forwarder are part of the jail.
    let proxy = match policy.network_access() {
        NetworkAccess::AllowList(_) => Some(
            proxy::Proxy::start(Default::default(), None, None).map_err(|e| format!("{e:#}"))?,
        ),
        _ => None,
    };
    if let Some(proxy) = &proxy {
        spec = spec.with_forward(proxy::FORWARD_PORT, &proxy.address());
    }
    run_probe(&spec).await
}

/// Runs a probe's jail to its end: `Err` says why it failed, in the jail's words.
async fn run_probe(spec: &jail::JailSpec) -> Result<(), String> {
    let cmd = spec.command().map_err(|e| e.to_string())?;
    let out = cmd.output().await.map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr)
        .trim()
        .trim_start_matches("swarm: cannot confine the worker process: ")
        .to_string();
    Err(if why.is_empty() {
        format!("a confined test process failed ({})", out.status)
    } else {
        why
    })
}

/// Checks that overlay worktrees work here: a jail with this policy mounts a view whose layers
/// are made under `layers` (the file system real views use), writes a file and deletes one.
/// `Err` says what failed.
pub async fn probe_overlay(policy: &SandboxPolicy, layers: &std::path::Path) -> Result<(), String> {
    if !policy.enabled {
        return Err("overlay worktrees are mounted by the sandbox's jail (--sandbox off)".into());
    }
    // The folders made here go again afterwards (a refused run changes nothing); removing
    // one that a run has started to use fails harmlessly.
    let made: Vec<std::path::PathBuf> = layers
        .ancestors()
        .take_while(|a| !a.exists())
        .map(std::path::Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(layers).map_err(|e| e.to_string())?;
    let probed = probe_overlay_in(policy, layers).await;
    for dir in &made {
        let _ = std::fs::remove_dir(dir);
    }
    probed
}

async fn probe_overlay_in(policy: &SandboxPolicy, layers: &std::path::Path) -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("probe-")
        .tempdir_in(layers)
        .map_err(|e| e.to_string())?;
    let at = |name: &str| dir.path().join(name);
    let view = overlay::OverlayView {
        mount_point: at("view"),
        base: at("base"),
        upper: at("upper"),
        work: at("work"),
    };
    for d in ["view", "base", "upper", "work"] {
        std::fs::create_dir(at(d)).map_err(|e| e.to_string())?;
    }
    std::fs::write(at("base").join("old"), "").map_err(|e| e.to_string())?;
    let spec = jail::JailSpec::new(
        &["sh".into(), "-c".into(), "echo > new && rm old".into()],
        &view.mount_point,
        std::slice::from_ref(&view.mount_point),
        &[],
        policy.network,
    )
    .with_overlay(Some(&view));
    let ran = run_probe(&spec).await;
    let shown = view.upper.join("new").is_file()
        && std::fs::symlink_metadata(view.upper.join("old"))
            .is_ok_and(|m| overlay::is_whiteout(&m));
    overlay::open_work_dir(&view.work);
    match ran {
        Ok(()) if shown => Ok(()),
        Ok(()) => Err("an overlay view did not show the changes it should".into()),
        Err(why) => Err(why),
    }
}

/// The end of a run's processes: the idle jail hosts told to end and the scratch folders kept
/// for use again handed to the janitor, so that both are done while the run merges its last
/// tasks and cleans up, not after its summary. Anything confined started after this gets a
/// new host and new folders. Blocking, but quick: a socket closed a host, a message a folder.
pub fn wind_down() {
    jail::retire_idle_hosts();
    scratch::release_kept();
}

/// A private temporary directory for one worker process, emptied when dropped (and used
/// again, [`scratch::reusable`]).
pub fn private_tmp() -> std::io::Result<scratch::ScratchDir> {
    crate::scratch::reusable("tmp-", &[])
}

/// `N` bytes from the kernel's random source: keys, placeholders and tokens nobody can guess.
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    use std::io::Read as _;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}
