//! Nothing a worker leaves can jam clean-up: folders it closed (`chmod 000`, `chmod 500`) in
//! its worktree, in an agent's state directory or in its temporary folder are removed by the
//! janitor, `swarm clean` and the sweep of killed runs; what really cannot be removed makes
//! `swarm clean` fail, naming it. swarm runs as an unprivileged user here
//! ([`TestRepo::swarm_unprivileged_cmd`]): root's permissions would override the worker's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{Run, TestRepo, wait_until};

/// Closes folders the way a worker may: `mkdir -p D/ro/sub/deep`, a file, then `chmod 000`
/// on the deepest and `500` on the others.
fn close_folders(dir: &str) -> String {
    format!(
        "mkdir -p {dir}/ro/sub/deep && touch {dir}/ro/sub/deep/f && chmod 000 {dir}/ro/sub/deep \
         && chmod 500 {dir}/ro/sub {dir}/ro"
    )
}

fn unprivileged(repo: &TestRepo, args: &[&str]) -> Run {
    Run::from(repo.swarm_unprivileged_cmd().args(args).output().unwrap())
}

/// Everything under `dir`, as paths.
fn everything(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
            found.push(entry.path());
        }
    }
    found
}

#[test]
fn folders_a_worker_closed_in_its_worktree_or_its_agent_state_are_cleaned() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    std::fs::create_dir_all(repo.home.join(".st")).unwrap();
    repo.user_config(&format!(
        r#"
[agents.closer]
exec = '''{}; sed -i s/foo/bar/ "$SWARM_FILE"'''
binary = "sh"
writable = ["~/.st"]
"#,
        close_folders("$HOME/.st")
    ));
    // In the worktree.
    let run = unprivileged(
        &repo,
        &[
            "refactor",
            "x",
            "a.txt",
            "-y",
            "--exec",
            &close_folders("."),
        ],
    );
    // Its commit cannot read the closed folder: a view's commit fails the task; a full
    // checkout's status walk passes over it, as git's does.
    assert!(matches!(run.code, 0 | 1), "{}", run.stderr);
    // In an agent's state directory: the task merges, its layer kept with its records.
    let run = unprivileged(
        &repo,
        &["refactor", "x", "b.txt", "-y", "--agent", "closer"],
    );
    run.assert_code(0);
    assert!(
        everything(&repo.swarm_dir().join("runs"))
            .iter()
            .any(|p| p.ends_with("ro/sub/deep")),
        "the agent's closed folder is not in its layer"
    );
    let clean = unprivileged(&repo, &["clean", "--all"]);
    clean.assert_code(0);
    let left: Vec<PathBuf> = ["trash", "layers", "runs", "worktrees"]
        .iter()
        .flat_map(|d| everything(&repo.swarm_dir().join(d)))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{}", clean.stderr);
    // Nothing the worker closed was outside what swarm owns: the user's state is as it was.
    assert!(everything(&repo.home.join(".st")).is_empty());
}

#[test]
fn what_cannot_be_removed_makes_clean_fail_naming_it() {
    use std::os::unix::fs::PermissionsExt as _;
    // A folder of another user's (as root could make), with something in it: the
    // unprivileged swarm cannot open it, so cannot remove it.
    if rustix_is_root() {
        let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
        let stuck = repo.swarm_dir().join("trash").join("stuck");
        std::fs::create_dir_all(stuck.join("inside")).unwrap();
        std::fs::set_permissions(&stuck, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&stuck, Some(4242), Some(4242)).unwrap();
        let clean = unprivileged(&repo, &["clean", "--all"]);
        assert_eq!(clean.code, 3, "{}", clean.stderr);
        assert!(
            clean.stderr.contains("could not remove everything")
                && clean.stderr.contains(&stuck.display().to_string()),
            "{}",
            clean.stderr
        );
        std::os::unix::fs::chown(&stuck, Some(0), Some(0)).unwrap();
    } else {
        eprintln!("skipped: making a folder of another user's needs root");
    }
}

fn rustix_is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt as _;
        m.uid() == 0
    })
}

#[test]
fn a_killed_runs_closed_temporary_folders_are_swept() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let tmp = repo.root().join("tmp");
    let worker = format!(
        "{} && touch \"$TMPDIR/started\"; sleep 60",
        close_folders("\"$TMPDIR\"")
    );
    let mut swarm = repo
        .swarm_unprivileged_cmd()
        .args(["refactor", "x", "a.txt", "-y", "--exec", &worker])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "the worker never started", || {
        everything(&tmp).iter().any(|p| p.ends_with("started"))
    });
    swarm.kill().unwrap();
    swarm.wait().unwrap();
    let clean = unprivileged(&repo, &["clean", "--all"]);
    clean.assert_code(0);
    assert!(
        clean
            .stderr
            .contains("1 temporary folder(s) of killed runs"),
        "{}",
        clean.stderr
    );
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("swarm-doors-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
