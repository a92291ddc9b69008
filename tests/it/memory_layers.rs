//! Layers in memory for file editors (docs/USAGE.md, "Files"; docs/ARCHITECTURE.md): a run
//! whose every process in a view is a file editor run without a shell keeps its views'
//! layers on a tmpfs (`$XDG_RUNTIME_DIR`, else `/dev/shm`) where there is room, hidden from
//! every worker, and removed at its end or by `swarm clean` after a crash; any other run
//! keeps them on the disk. The workers themselves say where their view's upper layer is
//! (`/proc/self/mountinfo`), and git says what was merged.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Run, TestRepo};

const FILES: usize = 6;

fn repo() -> TestRepo {
    let files: Vec<(String, String)> = (0..FILES)
        .map(|i| (format!("f{i}.txt"), format!("foo {i}\n")))
        .collect();
    TestRepo::with_files(&files)
}

fn uid() -> u32 {
    // SAFETY: `geteuid` cannot fail.
    unsafe { libc::geteuid() }
}

/// A file editor by its name (`sed`), as swarm tells one: it appends to its file where its
/// view's upper layer is and what it sees of this user's folder of layers in `runtime`, and
/// tries to write there; then sleeps a minute while the test's `slow` file exists.
fn fake_sed(repo: &TestRepo, runtime: &Path) -> PathBuf {
    let bin = repo.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let dir = runtime.join(format!("swarm-{}", uid()));
    let script = format!(
        "#!/bin/sh\n\
         dir='{}'\n\
         echo \"upper: $(grep -o 'upperdir=[^,]*' /proc/self/mountinfo | head -n 1)\" >> \"$1\"\n\
         echo \"seen: $(ls -A \"$dir\" 2>/dev/null | tr '\\n' ' ')\" >> \"$1\"\n\
         touch \"$dir/planted\" 2>/dev/null\n\
         if [ -e '{}' ]; then sleep 60; fi\n",
        dir.display(),
        slow(repo).display()
    );
    let sed = bin.join("sed");
    std::fs::write(&sed, script).unwrap();
    std::fs::set_permissions(&sed, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    sed
}

/// While this file exists, the workers of `fake_sed` take a minute.
fn slow(repo: &TestRepo) -> PathBuf {
    repo.root().join("slow")
}

fn refactor(repo: &TestRepo, exec: &str, extra: &[&str]) -> Command {
    let mut cmd = repo.swarm_cmd();
    cmd.args([
        "refactor",
        "edit",
        "*.txt",
        "-y",
        "-j",
        "3",
        "--worktrees",
        "overlay",
    ])
    .args(["--scope", "any", "--exec", exec])
    .args(extra);
    cmd
}

/// What the worker of `file` wrote after `prefix` in the merged result.
fn said(repo: &TestRepo, file: &str, prefix: &str) -> String {
    let text = repo.git(&["show", &format!("HEAD:{file}")]);
    text.lines()
        .find_map(|l| l.strip_prefix(prefix).map(str::trim))
        .unwrap_or_else(|| panic!("{file} has no {prefix:?}: {text}"))
        .to_string()
}

fn merges(repo: &TestRepo) -> usize {
    repo.git(&["rev-list", "--merges", "--count", "HEAD"])
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_file_editors_layers_are_in_memory_hidden_from_workers_and_gone_after() {
    let repo = repo();
    let runtime = repo.runtime_dir().expect("/dev/shm").to_path_buf();
    let sed = fake_sed(&repo, &runtime);
    let run = Run::from(
        refactor(&repo, &format!("{} \"$SWARM_FILE\"", sed.display()), &[])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert_eq!(repo.report(&run)["layers"], "memory");
    assert_eq!(merges(&repo), FILES);
    let mine = runtime.join(format!("swarm-{}", uid()));
    for i in 0..FILES {
        let file = format!("f{i}.txt");
        let upper = said(&repo, &file, "upper: upperdir=");
        assert!(
            Path::new(&upper).starts_with(&mine),
            "{file}: the upper layer is at {upper}"
        );
        // Nothing of the other tasks' layers, nor of their folders, is visible.
        assert_eq!(said(&repo, &file, "seen:"), "", "{file}");
    }
    assert!(
        !mine.join("planted").exists(),
        "a worker wrote among the layers"
    );
    let left: Vec<_> = std::fs::read_dir(&mine).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in memory: {left:?}");
    repo.assert_clean_after_run();
}

#[test]
fn a_command_run_by_a_shell_or_with_verify_or_told_to_keeps_its_layers_on_disk() {
    let disk = |extra: &[&str], shell: bool, on_disk: bool| {
        let repo = repo();
        let runtime = repo.runtime_dir().expect("/dev/shm").to_path_buf();
        let sed = fake_sed(&repo, &runtime);
        let exec = match shell {
            true => format!("{} \"$SWARM_FILE\" && true", sed.display()),
            false => format!("{} \"$SWARM_FILE\"", sed.display()),
        };
        let mut cmd = refactor(&repo, &exec, extra);
        if on_disk {
            cmd.env("SWARM_LAYERS_ON_DISK", "1");
        }
        let run = Run::from(cmd.output().unwrap());
        run.assert_code(0);
        assert_eq!(repo.report(&run)["layers"], "disk", "{extra:?} {shell}");
        assert_eq!(merges(&repo), FILES);
        let upper = said(&repo, "f0.txt", "upper: upperdir=");
        let layers = repo.swarm_dir().join("layers");
        assert!(
            Path::new(&upper).starts_with(layers.canonicalize().unwrap_or(layers)),
            "{extra:?} {shell}: the upper layer is at {upper}"
        );
    };
    disk(&[], true, false);
    disk(&["--verify", "true"], false, false);
    disk(&[], false, true);
}

/// swarm in a mount namespace of its own whose `/dev/shm` is a tmpfs of `size` (the test's
/// `$XDG_RUNTIME_DIR` is under the machine's, hidden by it): nothing reaches the machine's.
fn with_shm_of(repo: &TestRepo, size: &str, exec: &str) -> Run {
    let inner = refactor(repo, exec, &[]);
    let mut cmd = Command::new("unshare");
    cmd.current_dir(&repo.path)
        .env_clear()
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$0\" \"$@\""
        ))
        .arg(inner.get_program())
        .args(inner.get_args());
    Run::from(cmd.output().unwrap())
}

#[test]
fn layers_go_to_memory_only_where_there_is_twice_their_room() {
    // Three workers' files and folders, and 64 MiB for what views keep: about 67 MiB, which
    // half of 100 MiB does not hold and half of 1 GiB does.
    for (size, expected, at) in [("100m", "disk", None), ("1g", "memory", Some("/dev/shm"))] {
        let repo = repo();
        let sed = fake_sed(&repo, Path::new("/dev/shm"));
        let run = with_shm_of(&repo, size, &format!("{} \"$SWARM_FILE\"", sed.display()));
        run.assert_code(0);
        assert_eq!(repo.report(&run)["layers"], expected, "{size}");
        assert_eq!(merges(&repo), FILES, "{size}");
        let upper = said(&repo, "f0.txt", "upper: upperdir=");
        match at {
            Some(at) => assert!(upper.starts_with(at), "{size}: {upper}"),
            None => assert!(upper.contains("/.git/swarm/layers/"), "{size}: {upper}"),
        }
    }
}

/// The layers folders in this user's folder `mine`, of every repository.
fn layers_in(mine: &Path) -> Vec<PathBuf> {
    let Ok(repos) = std::fs::read_dir(mine) else {
        return Vec::new();
    };
    repos
        .flatten()
        .flat_map(|r| std::fs::read_dir(r.path()).into_iter().flatten().flatten())
        .map(|slot| slot.path())
        .collect()
}

/// Starts a run whose workers take a minute, and kills it (`kill -9`) once three of them are
/// running: gives this user's folder of layers in memory, which the run left layers in.
fn kill_mid_run(repo: &TestRepo) -> PathBuf {
    let runtime = repo.runtime_dir().expect("/dev/shm").to_path_buf();
    let sed = fake_sed(repo, &runtime);
    std::fs::write(slow(repo), "").unwrap();
    let mut child = refactor(repo, &format!("{} \"$SWARM_FILE\"", sed.display()), &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mine = runtime.join(format!("swarm-{}", uid()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while layers_in(&mine).len() < 3 {
        assert!(Instant::now() < deadline, "no worker started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !layers_in(&mine).is_empty(),
        "the killed run left no layers to clean"
    );
    mine
}

#[test]
fn layers_in_memory_a_killed_run_left_are_removed_by_swarm_clean() {
    let repo = repo();
    let mine = kill_mid_run(&repo);
    repo.swarm(&["clean", "--all"]).assert_code(0);
    assert!(layers_in(&mine).is_empty(), "left: {:?}", layers_in(&mine));
    repo.assert_clean_after_run();
}

#[test]
fn a_killed_run_resumed_merges_everything_and_leaves_nothing_in_memory() {
    let repo = repo();
    let mine = kill_mid_run(&repo);
    std::fs::remove_file(slow(&repo)).unwrap();
    let runs: Vec<_> = std::fs::read_dir(repo.swarm_dir().join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = repo.swarm(&["resume", &runs[0]]);
    run.assert_code(0);
    assert_eq!(merges(&repo), FILES);
    assert_eq!(repo.report(&run)["layers"], "memory");
    assert!(layers_in(&mine).is_empty(), "left: {:?}", layers_in(&mine));
    repo.assert_clean_after_run();
}
