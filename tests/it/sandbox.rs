//! The walls around worker processes, tried from inside a worker. Each test runs the same
//! attempts confined (refused, the legitimate edit still merges) and with `--sandbox off`
//! (they succeed), so a sandbox that does nothing would fail the first test.

use std::sync::atomic::Ordering;

use crate::common::{Run, TestRepo, listener};

/// A worker that edits its own file, then tries to write where it must not and to connect
/// to `port` on 127.0.0.1, printing WROTE/DENIED for each attempt.
fn attempts(repo: &TestRepo, port: u16) -> String {
    let checkout = repo.path.display();
    format!(
        r#"sed -i s/foo/bar/ "$SWARM_FILE"
sleep 0.5  # both tasks' worktrees exist now
try() {{ if (echo x > "$2") 2>/dev/null; then echo "WROTE $1"; else echo "DENIED $1"; fi; }}
for d in "$SWARM_WORKTREE"/../*/; do
  [ "$d" -ef "$SWARM_WORKTREE" ] || try sibling "$d/sibling-$SWARM_TASK_ID"
done
try checkout "{checkout}/checkout-$SWARM_TASK_ID"
try gitdir "{checkout}/.git/gitdir-$SWARM_TASK_ID"
try home "$HOME/home-$SWARM_TASK_ID"
try tmp "$TMPDIR/tmp-ok"
if python3 -c "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)" 2>/dev/null
then echo "WROTE network"; else echo "DENIED network"; fi
"#
    )
}

fn outputs(repo: &TestRepo, run: &Run) -> String {
    repo.report(run)["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["output_tail"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn leftovers(repo: &TestRepo) -> Vec<String> {
    let mut found = Vec::new();
    for dir in [repo.path.clone(), repo.path.join(".git"), repo.home.clone()] {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("checkout-")
                || name.starts_with("gitdir-")
                || name.starts_with("home-")
            {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn confined_workers_write_only_their_worktree_and_have_no_network() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let (port, accepted) = listener();
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-j",
        "2",
        "--exec",
        &attempts(&repo, port),
    ]);
    // The printed lines make the workers' output non-empty; each wrote only its own file.
    run.assert_code(0);
    let out = outputs(&repo, &run);
    for wall in ["checkout", "home", "network"] {
        assert!(out.contains(&format!("DENIED {wall}")), "{wall}:\n{out}");
        assert!(!out.contains(&format!("WROTE {wall}")), "{wall}:\n{out}");
    }
    // The other task's worktree is not there to try: swarm's state is covered but for the
    // worker's own worktree and task directory.
    assert!(
        !out.contains(" sibling"),
        "a sibling worktree was visible:\n{out}"
    );
    // The git directory is a copy-on-write view for the worker's own git: a write there may
    // succeed, into a layer that is thrown away. What counts is that nothing reached the
    // real files: no leftover below, and each task changed only its own file.
    assert!(out.contains(" gitdir"), "gitdir:\n{out}");
    assert!(
        out.contains("WROTE tmp"),
        "the private TMPDIR is writable:\n{out}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    assert!(leftovers(&repo).is_empty(), "{:?}", leftovers(&repo));
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "bar\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

#[test]
fn the_same_attempts_succeed_without_the_sandbox() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let (port, accepted) = listener();
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-j",
        "2",
        "--sandbox",
        "off",
        "--exec",
        &attempts(&repo, port),
    ]);
    // Writing into each other's worktree puts the sibling file in the other task (out of
    // scope), so tasks fail here; what matters is that every write went through.
    let out = outputs(&repo, &run);
    for wall in ["sibling", "checkout", "gitdir", "home", "network"] {
        assert!(out.contains(&format!("WROTE {wall}")), "{wall}:\n{out}");
    }
    assert!(accepted.load(Ordering::SeqCst) >= 2);
    assert_eq!(leftovers(&repo).len(), 6, "{:?}", leftovers(&repo));
}

#[test]
fn network_can_be_allowed() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let (port, accepted) = listener();
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "--network",
        "--exec",
        &attempts(&repo, port),
    ]);
    run.assert_code(0);
    let out = outputs(&repo, &run);
    assert!(
        out.contains("WROTE network") && out.contains("DENIED home"),
        "{out}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn verify_commands_are_confined_too() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let gitdir_file = repo.path.join(".git").join("verify-pwned");
    let verify = format!("echo x > {} || exit 7", gitdir_file.display());
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "--verify",
        &verify,
        "--exec",
        crate::common::SED_FOO_BAR,
    ]);
    run.assert_code(1);
    assert!(!gitdir_file.exists());
    let report = repo.report(&run);
    assert!(
        report["tasks"][0]["error"]
            .as_str()
            .unwrap()
            .contains("exit status 7")
    );
    assert_eq!(
        repo.read("a.txt"),
        "foo\n",
        "a failing --verify is not merged"
    );
}

/// A worker the sandbox stopped: the summary and `swarm status` show its last lines, its log
/// and the setting that would have allowed it.
#[test]
fn a_worker_the_sandbox_stopped_is_explained() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let home = repo.root().join("home");
    let worker = format!(
        r#"if [ "$SWARM_FILE" = a.txt ]; then
  echo calling the API; curl -sS https://api.agent.test/v1 ; exit 1
else
  mkdir -p {home}/.agent-state 2>&1; echo state > {home}/.agent-state/s.json; exit 2
fi"#,
        home = home.display()
    );
    let run = repo.swarm(&["refactor", "x", ".", "--exec", &worker]);
    run.assert_code(1);
    let report = repo.report(&run);
    let a = crate::common::task_of(&report, "a.txt");
    let b = crate::common::task_of(&report, "b.txt");
    let hint_a = a["hint"].as_str().unwrap_or_default();
    assert!(hint_a.contains("--allow-domain api.agent.test"), "{a}");
    let hint_b = b["hint"].as_str().unwrap_or_default();
    assert!(
        hint_b.contains(&format!("write refused at {}/.agent-state", home.display())),
        "{b}"
    );
    let log = a["log"].as_str().unwrap();
    assert!(
        log.ends_with("worker.log") && std::path::Path::new(log).exists(),
        "{a}"
    );
    for shown in [&run.stderr, &repo.swarm(&["status", &run.run_id()]).stdout] {
        assert!(shown.contains(&format!("hint: {hint_a}")), "{shown}");
        assert!(shown.contains(&format!("hint: {hint_b}")), "{shown}");
        assert!(shown.contains("│ calling the API"), "{shown}");
        assert!(
            shown.contains("Could not resolve host: api.agent.test"),
            "{shown}"
        );
        assert!(shown.contains(&format!("log: {log}")), "{shown}");
    }
}

/// A file editor that swarm runs without a shell (`sed` here) gets no view of the git
/// directory: its write there is refused (the task fails and nothing lands in `.git`). The
/// same command through a shell gets a copy-on-write view: its write lands in swarm's layer,
/// the edit merges, and `.git` is still unchanged.
#[test]
fn a_file_editor_run_without_a_shell_gets_no_git_view() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let probe = repo.path.join(".git/probe");
    let sed = format!(
        r#"sed -i -e s/foo/bar/ -e 'w {}' "$SWARM_FILE""#,
        probe.display()
    );
    let run = repo.swarm(&["refactor", "x", "a.txt", "--exec", &sed]);
    run.assert_code(1);
    let report = repo.report(&run);
    let tail = report["tasks"][0]["output_tail"].as_str().unwrap();
    assert!(tail.contains(".git/probe: Permission denied"), "{tail}");
    assert!(!probe.exists(), "the write reached the git directory");
    assert_eq!(repo.read("a.txt"), "foo\n");

    let shell = format!("sh -c '{}'", sed.replace('\'', r"'\''"));
    let run = repo.swarm(&["refactor", "x", "a.txt", "--exec", &shell]);
    run.assert_code(0);
    assert!(!probe.exists(), "the write reached the git directory");
    assert_eq!(repo.read("a.txt"), "bar\n");
}

#[test]
fn an_agents_state_view_is_kept_with_its_task_and_its_scratch_folder_opened() {
    use std::os::unix::fs::PermissionsExt as _;
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    std::fs::create_dir_all(repo.home.join(".st")).unwrap();
    std::fs::write(repo.home.join(".st/old.txt"), "old\n").unwrap();
    repo.user_config(
        r#"
[agents.keeper]
exec = '''echo new > "$HOME/.st/new.txt" && cat "$HOME/.st/old.txt" && sed -i s/foo/bar/ "$SWARM_FILE"'''
binary = "sh"
writable = ["~/.st"]
"#,
    );
    let run = repo.swarm(&["refactor", "x", "a.txt", "-y", "--agent", "keeper"]);
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "main:a.txt"]), "bar");
    // Copy-on-write: the agent read the user's state and wrote into its own layer.
    assert!(
        !repo.home.join(".st/new.txt").exists(),
        "the user's state changed"
    );
    let task = repo.report(&run)["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let layer = format!("tasks/{task}/agent-state/st");
    let kept = repo.run_file(&run.run_id(), &format!("{layer}/upper/new.txt"));
    assert_eq!(kept, "new\n");
    // overlayfs leaves its folder in `work` at mode 000 when the view is unmounted: opened
    // up again once the jail is gone, so that the task's folder can be removed.
    let run_dir = repo.swarm_dir().join("runs").join(run.run_id());
    let inner = run_dir.join(layer).join("work/work");
    let mode = std::fs::metadata(&inner).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{} is left at {mode:o}", inner.display());
}
