//! The jail on its own, without the engine: a confined `sh -c` writes only where it may,
//! sees no network and no credential store, lives in a process namespace of its own, and its
//! exit status comes through. Every path it is given lives in this test's temporary folder.
//!
//! The jail is this binary re-executed (`/proc/self/exe __swarm-jail SPEC`), so the test has
//! its own `main` (`harness = false`) that becomes the jail when asked to, as swarm's does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use swarm_sandbox::jail::{FACTORY_NAME, HOST_NAME, JailSpec};

/// What a confined shell printed, and its exit status.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn jailed(script: &str, cwd: &Path, writable: &[PathBuf], hide: &[PathBuf]) -> Ran {
    let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
    let spec = JailSpec::new(&argv, cwd, writable, hide, false);
    let out = spec.command().unwrap().output().await.unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn writes_land_only_in_the_writable_folder(dir: &Path) {
    let work = dir.join("work");
    let victim = dir.join("victim");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&victim).unwrap();
    let script = format!("echo in > inside.txt; echo out > {}/x", victim.display());
    let ran = jailed(&script, &work, std::slice::from_ref(&work), &[]).await;
    assert_ne!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(
        std::fs::read_to_string(work.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!victim.join("x").exists(), "a write landed outside");
}

async fn there_is_no_network_and_no_other_process(dir: &Path) {
    let ran = jailed(
        "cat /proc/net/dev; echo; ls /proc | grep -c '^[0-9]'",
        dir,
        &[dir.to_path_buf()],
        &[],
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let (devices, processes) = ran.stdout.rsplit_once("\n\n").unwrap();
    let interfaces: Vec<&str> = devices
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    assert_eq!(interfaces, ["lo"], "{devices}");
    // init, the shell, ls and grep: the host's processes are not there.
    let count: usize = processes.trim().parse().unwrap();
    assert!(count <= 5, "{count} processes seen");
}

async fn a_hidden_store_is_empty(dir: &Path) {
    let store = dir.join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("token"), "secret-value").unwrap();
    let script = format!("cat {}/token; ls -A {}", store.display(), store.display());
    let ran = jailed(
        &script,
        dir,
        &[dir.join("work")],
        std::slice::from_ref(&store),
    )
    .await;
    assert!(!ran.stdout.contains("secret-value"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("token"), "{}", ran.stdout);
}

async fn the_exit_status_comes_through(dir: &Path) {
    let ran = jailed("exit 7", dir, &[], &[]).await;
    assert_eq!(ran.code, Some(7), "{}", ran.stderr);
}

/// Runs `script` in a jail host: its exit status, what it printed (read to the end once the
/// status came), and its hosted process, whose jail may still be going.
async fn hosted(script: &str, cwd: &Path) -> (Option<i32>, String, swarm_sandbox::jail::Hosted) {
    let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
    hosted_argv(&argv, cwd).await
}

async fn hosted_argv(
    argv: &[OsString],
    cwd: &Path,
) -> (Option<i32>, String, swarm_sandbox::jail::Hosted) {
    use std::io::Read as _;
    let spec = JailSpec::new(argv, cwd, &[], &[], false);
    let (mut reader, writer) = std::io::pipe().unwrap();
    let env = [("PATH".into(), std::env::var_os("PATH").unwrap())];
    let Ok(mut hosted) = spec.hosted(&env, writer.into()) else {
        panic!("no jail host could run it")
    };
    let status = hosted.wait().await.unwrap();
    // The pipe ends with the status: nothing of the task holds it any more.
    let mut out = String::new();
    reader.read_to_string(&mut out).unwrap();
    (status.code(), out, hosted)
}

/// A hosted worker's status comes as soon as it ended, its output whole; its jail's end
/// (its mounts going) is reported after, and only then does the host run the next task.
async fn a_hosted_status_comes_before_the_jail_is_gone(dir: &Path) {
    let (code, first, mut jail) = hosted("readlink /proc/self/ns/net; exit 3", dir).await;
    assert_eq!(code, Some(3), "{first}");
    assert!(first.starts_with("net:["), "{first}");
    let finished = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::task::spawn_blocking(move || jail.finish().map(|()| jail)),
    )
    .await
    .expect("the jail's end was never reported");
    let jail = finished.unwrap().unwrap();
    assert!(jail.is_gone());
    drop(jail);
    // The same host again (it keeps its network namespace for every task).
    let (code, second, _jail) = hosted("readlink /proc/self/ns/net", dir).await;
    assert_eq!(code, Some(0), "{second}");
    assert_eq!(first, second);
}

/// A one-off jail dies with swarm (its parent-death signal), never with the thread that
/// started it: Linux sends that signal when the parent *thread* ends, and swarm starts jails
/// from the async runtime's threads, which end after 10 s idle.
async fn a_jail_outlives_the_thread_that_started_it(dir: &Path) {
    let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), "sleep 1; echo alive".into()];
    let spec = JailSpec::new(&argv, dir, &[], &[], false);
    let runtime = tokio::runtime::Handle::current();
    let child = std::thread::spawn(move || {
        let _in_runtime = runtime.enter();
        let mut cmd = spec.command().unwrap();
        cmd.command_mut().stdout(std::process::Stdio::piped());
        let child = cmd.spawn().unwrap();
        // The thread ends once the jail is set up (its parent-death signal asked for).
        std::thread::sleep(std::time::Duration::from_millis(300));
        child
    })
    .join()
    .unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (Some(0), "alive\n"),
        "the jail ended with the thread that started it: {:?}",
        out.status
    );
}

/// This process's children: pid, name (`comm`) and whether each has ended (a zombie, not
/// reaped yet).
fn children() -> Vec<(u32, String, bool)> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| {
            let pid: u32 = p.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(p.path().join("stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1.to_string();
            let mut fields = rest.split_whitespace();
            let (state, ppid) = (fields.next()?, fields.next()?);
            (ppid == me).then_some((pid, name, state == "Z"))
        })
        .collect()
}

/// The pids of this process's children that are jail hosts (forked by the host factory as
/// this process's children), and whether each has ended; every child that ended (a zombie,
/// not reaped yet) is listed, the factory among them.
fn hosts() -> Vec<(u32, bool)> {
    let host = HOST_NAME.to_str().unwrap();
    children()
        .into_iter()
        .filter(|(_, name, ended)| name == host || *ended)
        .map(|(pid, _, ended)| (pid, ended))
        .collect()
}

/// This process's children named `name` that have not ended.
fn children_named(name: &std::ffi::CStr) -> Vec<u32> {
    let name = name.to_str().unwrap();
    children()
        .into_iter()
        .filter(|(_, named, ended)| named == name && !*ended)
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Hosts are forked by one factory process; one killed (`kill -9`) does not turn hosts off:
/// the next host is forked by a new factory, and every one of them ends with `end_hosts`.
async fn a_killed_host_factory_is_replaced(dir: &Path) {
    swarm_sandbox::jail::end_hosts();
    // Its host stays busy while `first` is held, so the next process needs a new host.
    let (code, out, first) = hosted("readlink /proc/self/ns/net", dir).await;
    assert_eq!(code, Some(0), "{out}");
    let factories = children_named(FACTORY_NAME);
    assert_eq!(factories.len(), 1, "one host factory: {factories:?}");
    // SAFETY: kill with a pid of this process's own unreaped child.
    assert_eq!(unsafe { libc::kill(factories[0] as i32, libc::SIGKILL) }, 0);
    let (code, again, second) = hosted("readlink /proc/self/ns/net", dir).await;
    assert_eq!(code, Some(0), "{again}");
    assert_ne!(out, again, "the busy host ran the next process");
    let now = children_named(FACTORY_NAME);
    assert!(
        now.len() == 1 && now != factories,
        "no new factory: {factories:?} then {now:?}"
    );
    assert_eq!(children_named(HOST_NAME).len(), 2, "two hosts");
    tokio::task::spawn_blocking(move || drop((first, second)))
        .await
        .unwrap();
    swarm_sandbox::jail::end_hosts();
    assert_eq!(hosts(), [], "a host outlived end_hosts");
    assert!(
        children_named(FACTORY_NAME).is_empty(),
        "a factory outlived end_hosts"
    );
}

/// At a run's end (`wind_down`) an idle host is told to end and its scratch folders kept for
/// use again are deleted, while the process goes on: the host ends at once (it is only
/// reaped at `end_hosts`), a process started after gets a new host, and `end_hosts` leaves
/// none.
async fn a_wound_down_host_ends_and_the_next_process_gets_a_new_one(dir: &Path) {
    // What the tests before left idle.
    swarm_sandbox::jail::end_hosts();
    let (code, first, jail) = hosted("readlink /proc/self/ns/net", dir).await;
    assert_eq!(code, Some(0), "{first}");
    tokio::task::spawn_blocking(move || drop(jail))
        .await
        .unwrap();
    let idle = hosts();
    assert_eq!(idle.len(), 1, "one idle host: {idle:?}");
    let kept = swarm_sandbox::private_tmp().unwrap();
    let kept_path = kept.path().to_path_buf();
    drop(kept);
    assert!(
        kept_path.is_dir(),
        "an emptied folder is kept for use again"
    );
    swarm_sandbox::wind_down();
    let ended = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        // The host factory ends with it.
        let now = hosts();
        now.contains(&(idle[0].0, true)) && now.iter().all(|(_, ended)| *ended)
    });
    assert!(ended, "the idle host did not end: {:?}", hosts());
    assert!(!kept_path.exists(), "a kept folder outlived the wind-down");
    let (code, second, jail) = hosted("readlink /proc/self/ns/net", dir).await;
    assert_eq!(code, Some(0), "{second}");
    assert_ne!(first, second, "the ended host ran the next process");
    tokio::task::spawn_blocking(move || drop(jail))
        .await
        .unwrap();
    swarm_sandbox::jail::end_hosts();
    assert_eq!(hosts(), [], "a host outlived end_hosts");
}

/// A hosted jail that fails before its worker runs (an argument no `execve` can take) says
/// nothing early: its status still comes, the jail's own, and its end after it.
async fn a_hosted_jail_that_fails_still_reports_its_status(dir: &Path) {
    let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), "true\0x".into()];
    let (code, out, mut jail) = hosted_argv(&argv, dir).await;
    assert_eq!(code, Some(125), "{out}");
    assert!(out.contains("cannot confine the worker process"), "{out}");
    let jail = tokio::task::spawn_blocking(move || jail.finish().map(|()| jail))
        .await
        .unwrap()
        .unwrap();
    assert!(jail.is_gone());
}

/// A view is mounted `volatile` (its unmount does not sync the disk) but on tmpfs, and mounts
/// again on the same layers: the mark a volatile mount leaves in its `work` folder is lifted
/// before the next mount, even when nothing lifted it after the last one. Run here, and on
/// `/dev/shm` where that is a tmpfs.
async fn a_volatile_view_mounts_again_on_the_same_layers(dir: &Path) {
    mount_a_view_twice(dir).await;
    let shm = Path::new("/dev/shm");
    if on_tmpfs(shm) {
        let in_memory = tempfile::tempdir_in(shm).unwrap();
        mount_a_view_twice(in_memory.path()).await;
    }
}

#[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between targets.
fn on_tmpfs(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|fs| fs.f_type as i64 == 0x0102_1994)
}

async fn mount_a_view_twice(dir: &Path) {
    let at = |name: &str| dir.join(name);
    for d in ["view", "base", "upper", "work"] {
        std::fs::create_dir(at(d)).unwrap();
    }
    let view = swarm_sandbox::overlay::OverlayView {
        mount_point: at("view"),
        base: at("base"),
        upper: at("upper"),
        work: at("work"),
    };
    let volatile = !on_tmpfs(dir);
    let mark = at("work/work/incompat/volatile");
    swarm_sandbox::janitor::start();
    for round in ["one", "two", "three"] {
        if round == "three" {
            // Before the third mount, swarm's own way: the work folder moved out whole.
            swarm_sandbox::overlay::retire_work_dir(&view.work, &at("graveyard"));
            assert!(!at("work/work").exists(), "the work folder was not retired");
        }
        let script = format!(
            "echo {round} > {round}.txt && grep -c ' {} .*volatile' /proc/self/mountinfo",
            view.mount_point.display()
        );
        let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
        let writable = std::slice::from_ref(&view.mount_point);
        let spec =
            JailSpec::new(&argv, &view.mount_point, writable, &[], false).with_overlay(Some(&view));
        let out = spec.command().unwrap().output().await.unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let (code, mounts) = if volatile { (0, "1") } else { (1, "0") };
        assert_eq!(
            out.status.code(),
            Some(code),
            "round {round} in {dir:?}: {said}"
        );
        assert_eq!(
            said.trim(),
            mounts,
            "round {round}: volatile should be {volatile}"
        );
        assert_eq!(
            std::fs::symlink_metadata(&mark).is_ok(),
            volatile,
            "round {round}"
        );
        let written = std::fs::read_to_string(at(&format!("upper/{round}.txt"))).unwrap();
        assert_eq!(written, format!("{round}\n"));
    }
    swarm_sandbox::overlay::open_work_dir(&view.work);
    assert!(
        !at("work/work/incompat").exists(),
        "the mark is still there"
    );
    swarm_sandbox::janitor::drain();
    let left: Vec<_> = std::fs::read_dir(at("graveyard")).unwrap().collect();
    assert!(left.is_empty(), "the janitor left {left:?}");
    std::fs::remove_dir_all(at("work")).unwrap();
}

fn main() -> ExitCode {
    if let Some(code) = swarm_sandbox::jail::main_if_jail() {
        return code;
    }
    // swarm's scratch folders (what hosts and jails use, what a wind-down deletes) in this
    // test's own temporary folder, never the machine's.
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("TMPDIR", tmp.path()) };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let policy = swarm_sandbox::SandboxPolicy {
            enabled: true,
            network: false,
            allow_domains: Vec::new(),
            writable: Vec::new(),
            hide: Vec::new(),
            env: Vec::new(),
        };
        if let Err(why) = swarm_sandbox::probe(&policy).await {
            panic!("the jail cannot be set up on this machine: {why}");
        }
        let dir = tempfile::tempdir().unwrap();
        let each = |name: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(&path).unwrap();
            println!("test {name} ...");
            path
        };
        writes_land_only_in_the_writable_folder(&each("writes")).await;
        there_is_no_network_and_no_other_process(&each("namespaces")).await;
        a_hidden_store_is_empty(&each("hidden")).await;
        the_exit_status_comes_through(&each("status")).await;
        a_hosted_status_comes_before_the_jail_is_gone(&each("hosted")).await;
        a_hosted_jail_that_fails_still_reports_its_status(&each("hosted-fails")).await;
        a_volatile_view_mounts_again_on_the_same_layers(&each("volatile")).await;
        a_wound_down_host_ends_and_the_next_process_gets_a_new_one(&each("wound-down")).await;
        a_jail_outlives_the_thread_that_started_it(&each("outlives")).await;
        a_killed_host_factory_is_replaced(&each("factory")).await;
        println!("10 jail tests passed");
    });
    swarm_sandbox::jail::end_hosts();
    swarm_sandbox::scratch::close();
    ExitCode::SUCCESS
}
