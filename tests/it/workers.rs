//! Misbehaving workers: each is contained, reported, and never corrupts the result.

use std::time::{Duration, Instant};

use crate::common::{Run, SED_FOO_BAR, TestRepo, task_of};

fn two_files() -> TestRepo {
    TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")])
}

/// Runs swarm with `exec` for b.txt and a plain sed for a.txt.
fn run_with_b(repo: &TestRepo, b_exec: &str, extra: &[&str]) -> Run {
    let exec = format!(
        r#"if [ "$SWARM_FILE" = b.txt ]; then {b_exec}
else {SED_FOO_BAR}; fi"#
    );
    let mut args = vec!["refactor", "x", "*.txt", "-j", "2", "--exec", exec.as_str()];
    args.extend_from_slice(extra);
    repo.swarm(&args)
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn a_worker_ignoring_sigterm_is_killed_at_the_timeout() {
    let repo = two_files();
    let pidfile = repo.home.join("hang.pid");
    let hang = format!(
        r#"trap '' TERM; echo $$ > {}; sed -i s/foo/partial/ b.txt; while :; do sleep 0.1; done"#,
        pidfile.display()
    );
    let started = Instant::now();
    // (--sandbox off: the worker writes its pid outside its worktree.)
    let run = run_with_b(&repo, &hang, &["--timeout", "2", "--sandbox", "off"]);
    run.assert_code(1);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "timeout");
    assert!(b["error"].as_str().unwrap().contains("timed out after 2s"));
    assert_eq!(task_of(&report, "a.txt")["status"], "merged");
    assert_eq!(repo.read("b.txt"), "foo\n");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_alive(pid), "the hung worker {pid} survived");
    assert_eq!(repo.worktrees().len(), 1);
}

#[test]
fn a_worker_that_exits_1_after_editing_is_not_merged() {
    let repo = two_files();
    let run = run_with_b(
        &repo,
        "sed -i s/foo/half/ b.txt; echo 'boom: it broke' >&2; exit 1",
        &[],
    );
    run.assert_code(1);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "foo\n");
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "failed");
    assert!(b["error"].as_str().unwrap().contains("status 1"));
    assert!(
        b["output_tail"]
            .as_str()
            .unwrap()
            .contains("boom: it broke")
    );
    // Its work is kept on its branch for inspection.
    let branch = b["branch"].as_str().unwrap();
    assert_eq!(repo.swarm_branches(), vec![branch.to_string()]);
    assert_eq!(repo.git(&["show", &format!("{branch}:b.txt")]), "half");
    assert!(run.stderr.contains(branch), "{}", run.stderr);
}

#[test]
fn a_worker_killed_by_a_signal_fails() {
    let repo = two_files();
    let run = run_with_b(&repo, "kill -9 $$", &[]);
    run.assert_code(1);
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "failed");
    assert!(b["error"].as_str().unwrap().contains("signal 9"), "{b}");
    assert_eq!(task_of(&report, "a.txt")["status"], "merged");
}

#[test]
fn a_background_child_writing_after_exit_never_lands() {
    let repo = two_files();
    let marker = repo.home.join("late-write-happened");
    let sneaky = format!(
        r#"(sleep 1; echo late >> b.txt; touch {}) & sed -i s/foo/bar/ b.txt"#,
        marker.display()
    );
    let run = run_with_b(&repo, &sneaky, &["--sandbox", "off"]);
    run.assert_code(0);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!marker.exists(), "the background child outlived its worker");
    assert_eq!(repo.read("b.txt"), "bar\n");
    assert_eq!(repo.git(&["show", "main:b.txt"]), "bar");
}

#[test]
fn a_worker_printing_50_mb_does_not_grow_swarm() {
    let repo = two_files();
    let exec = format!(
        r#"if [ "$SWARM_FILE" = b.txt ]; then head -c 50000000 /dev/zero | tr '\0' x; fi; {SED_FOO_BAR}"#
    );
    let mut cmd = repo.swarm_cmd();
    cmd.args(["refactor", "x", "*.txt", "-j", "2", "--exec", &exec]);
    let (run, peak_kb) = crate::common::run_measuring_peak(&mut cmd);
    run.assert_code(0);
    let peak_mb = peak_kb / 1024;
    assert!(
        peak_mb < 40,
        "swarm peaked at {peak_mb} MB while a worker printed 50 MB"
    );
    assert_eq!(repo.read("b.txt"), "bar\n");
    let run_id = run.run_id();
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    let log = repo
        .swarm_dir()
        .join("runs")
        .join(&run_id)
        .join("tasks")
        .join(b["id"].as_str().unwrap())
        .join("worker.log");
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size <= 8 * 1024 * 1024 + 200, "log is {size} bytes");
    let tail = std::fs::read(&log).unwrap();
    assert!(String::from_utf8_lossy(&tail[tail.len() - 120..]).contains("truncated"));
}

#[test]
fn a_worker_reading_stdin_gets_eof() {
    let repo = two_files();
    let started = Instant::now();
    let run = run_with_b(
        &repo,
        "cat > /dev/null; read line; sed -i s/foo/bar/ b.txt",
        &[],
    );
    run.assert_code(0);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(repo.read("b.txt"), "bar\n");
}

#[test]
fn a_deletion_is_merged() {
    let repo = two_files();
    let run = run_with_b(&repo, "rm b.txt", &[]);
    run.assert_code(0);
    assert!(!repo.path.join("b.txt").exists());
    assert_eq!(repo.lines(&["ls-files"]), vec!["a.txt".to_string()]);
    assert_eq!(repo.read("a.txt"), "bar\n");
    // Said as git's diffstat would: a deletion is not just "a change".
    assert!(
        run.stderr.contains("1 file(s) changed, 1 deleted (b.txt)"),
        "{}",
        run.stderr
    );
    let report = repo.report(&run);
    assert_eq!(task_of(&report, "b.txt")["deleted_files"][0], "b.txt");
}

/// Folders the result empties leave your checkout, innermost first, as with `git merge`; one
/// holding a file git does not track stays, with that file.
#[test]
fn folders_the_result_empties_leave_your_checkout() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("d/one.txt", "foo\n"),
        ("d/e/two.txt", "foo\n"),
        ("kept/three.txt", "foo\n"),
    ]);
    repo.write("kept/notes.log", "mine\n");
    let exec = format!(r#"case $SWARM_FILE in a.txt) {SED_FOO_BAR};; *) rm "$SWARM_FILE";; esac"#);
    let run = repo.swarm(&["refactor", "x", "**/*.txt", "-j", "2", "--exec", &exec]);
    run.assert_code(0);
    assert_eq!(repo.lines(&["ls-files"]), vec!["a.txt".to_string()]);
    assert!(!repo.path.join("d").exists(), "{}", run.stderr);
    assert!(!repo.path.join("kept/three.txt").exists());
    assert_eq!(repo.read("kept/notes.log"), "mine\n");
    assert_eq!(repo.git(&["status", "--porcelain"]).trim(), "?? kept/");
}

#[test]
fn a_mode_change_is_merged() {
    let repo = two_files();
    let run = run_with_b(&repo, "chmod +x b.txt", &[]);
    run.assert_code(0);
    assert!(
        repo.git(&["ls-tree", "main", "b.txt"])
            .starts_with("100755 ")
    );
    assert!(
        repo.git(&["ls-tree", "main", "a.txt"])
            .starts_with("100644 ")
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(repo.path.join("b.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o111, 0, "the checkout got the mode too");
}

#[test]
fn a_worker_may_commit_by_itself() {
    let repo = two_files();
    let run = run_with_b(
        &repo,
        "sed -i s/foo/bar/ b.txt && git commit -qam 'worker commit' && echo more >> b.txt",
        // A confined worker cannot write to the git directory, so it cannot commit.
        &["--sandbox", "off"],
    );
    run.assert_code(0);
    assert_eq!(repo.read("b.txt"), "bar\nmore\n");
    let subjects = repo.lines(&["log", "--format=%s", "main"]);
    assert!(
        subjects.iter().any(|s| s == "worker commit"),
        "{subjects:?}"
    );
    assert!(run.stderr.contains("commit(s) itself"), "{}", run.stderr);
}

/// Under the default sandbox, a worker's own git works on its worktree (add, commit, mv,
/// stash, a branch of its own) in copy-on-write views of the repository: its commits on its
/// task branch are kept, and nothing else it did reaches the repository.
#[test]
fn a_confined_worker_uses_git_on_its_own_worktree() {
    let repo = two_files();
    let worker = "sed -i s/foo/bar/ b.txt && git add b.txt && git commit -qm 'worker commit' \
         && echo stash >> b.txt && git stash -q && git stash drop -q \
         && git branch side && git tag mine && git update-ref refs/heads/main HEAD \
         && echo more >> b.txt";
    let run = run_with_b(&repo, worker, &[]);
    run.assert_code(0);
    assert_eq!(repo.read("b.txt"), "bar\nmore\n");
    let subjects = repo.lines(&["log", "--format=%s", "main"]);
    assert!(
        subjects.iter().any(|s| s == "worker commit"),
        "{subjects:?}"
    );
    assert!(run.stderr.contains("commit(s) itself"), "{}", run.stderr);
    assert!(
        run.stderr.contains("refs/heads/main, refs/heads/side")
            && run.stderr.contains("refs/tags/mine"),
        "{}",
        run.stderr
    );
    // Its branch, its tag and its stash stayed in its views; main is swarm's result.
    assert_eq!(
        repo.lines(&["branch", "--list", "side"]),
        Vec::<String>::new()
    );
    assert_eq!(repo.lines(&["tag"]), Vec::<String>::new());
    assert_eq!(repo.lines(&["stash", "list"]), Vec::<String>::new());
    assert!(
        repo.git(&["log", "-1", "--format=%s", "main"])
            .starts_with("swarm: merge")
    );
    repo.git(&["fsck", "--strict"]);
}

/// The attack: a worker overwrites the object its own commit is stored under with other
/// content (a repository that trusts names over contents would be corrupt for good). The
/// object is refused, the task fails, the repository holds no such object.
#[test]
fn a_forged_object_in_a_workers_git_is_refused() {
    let repo = two_files();
    let forge = r#"sed -i s/foo/bar/ b.txt && git commit -qam w && python3 -c '
import os, subprocess, zlib
c = subprocess.check_output(["git", "rev-parse", "HEAD"]).decode().strip()
objects = subprocess.check_output(["git", "rev-parse", "--git-path", "objects"]).decode().strip()
path = os.path.join(objects, c[:2], c[2:])
os.chmod(path, 0o644)
open(path, "wb").write(zlib.compress(b"blob 6\0forged"))
print("forged", c)
'"#;
    let run = run_with_b(&repo, forge, &[]);
    run.assert_code(1);
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "failed");
    assert!(
        b["error"].as_str().unwrap().contains("broken object"),
        "{b}"
    );
    let tail = b["output_tail"].as_str().unwrap();
    let forged = tail
        .lines()
        .find_map(|l| l.strip_prefix("forged "))
        .unwrap_or_else(|| panic!("the attack did not run: {tail}"));
    let exists = repo
        .git_cmd()
        .args(["cat-file", "-e", forged])
        .output()
        .unwrap();
    assert!(
        !exists.status.success(),
        "the forged object reached the repository"
    );
    repo.git(&["fsck", "--strict"]);
}

#[test]
fn a_worker_that_moves_head_fails() {
    let repo = two_files();
    let run = run_with_b(
        &repo,
        "git checkout -q -b elsewhere && sed -i s/foo/bar/ b.txt",
        &["--sandbox", "off"],
    );
    run.assert_code(1);
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "failed");
    assert!(b["error"].as_str().unwrap().contains("moved HEAD"), "{b}");
    assert_eq!(repo.read("b.txt"), "foo\n");
    assert_eq!(repo.read("a.txt"), "bar\n");
}

#[test]
fn the_result_file_can_report_failure() {
    let repo = two_files();
    let run = run_with_b(
        &repo,
        r#"sed -i s/foo/bar/ b.txt; echo '{"status":"failed","summary":"could not decide"}' > "$SWARM_RESULT_FILE""#,
        &[],
    );
    run.assert_code(1);
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "failed");
    assert_eq!(b["summary"], "could not decide");
}

#[test]
fn workers_get_the_documented_environment() {
    let repo = TestRepo::with_files(&[("dir/my file.txt", "x\n"), ("other.txt", "y\n")]);
    let exec = r#"{ echo "file=$SWARM_FILE"; echo "files=$SWARM_FILES"; echo "instr=$SWARM_INSTRUCTION"; echo "task=$SWARM_TASK_ID"; echo "run=$SWARM_RUN_ID"; [ "$SWARM_WORKTREE" = "$(pwd -P)" ] && echo wt-ok; grep -q 'dir/my file.txt' "$SWARM_TASK_FILE" && echo taskfile-ok; [ -n "$SWARM_RESULT_FILE" ] && echo result-ok; git config gc.auto; git config maintenance.auto; } > "$SWARM_FILE""#;
    let run = repo.swarm(&["refactor", "do the thing", "dir", "--exec", exec]);
    run.assert_code(0);
    let out = repo.read("dir/my file.txt");
    let report = repo.report(&run);
    let id = report["tasks"][0]["id"].as_str().unwrap();
    let expected = format!(
        "file=dir/my file.txt\nfiles=dir/my file.txt\ninstr=do the thing\ntask={id}\nrun={}\nwt-ok\ntaskfile-ok\nresult-ok\n0\nfalse\n",
        run.run_id()
    );
    assert_eq!(out, expected);
}

#[test]
fn a_worker_that_creates_a_branch_is_reported() {
    let repo = two_files();
    let run = run_with_b(
        &repo,
        "git branch side-branch && sed -i s/foo/bar/ b.txt",
        &["--sandbox", "off"],
    );
    run.assert_code(0);
    assert!(
        run.stderr.contains("created branch(es) side-branch"),
        "{}",
        run.stderr
    );
    assert_eq!(repo.read("b.txt"), "bar\n");
    assert_eq!(repo.lines(&["branch", "--list", "side-branch"]).len(), 1);
}

#[test]
fn an_idle_worker_is_killed_at_the_idle_limit_and_a_busy_one_is_not() {
    let repo = two_files();
    let started = Instant::now();
    // b.txt: silent and idle; a.txt: busy printing for 2.5 s, then edits.
    let exec = format!(
        r#"if [ "$SWARM_FILE" = b.txt ]; then sleep 60; else for i in 1 2 3 4 5 6 7 8 9 10; do echo working $i; sleep 0.25; done; {SED_FOO_BAR}; fi"#
    );
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.txt",
        "-j",
        "2",
        "--idle-timeout",
        "1",
        "--exec",
        &exec,
    ]);
    run.assert_code(1);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    assert_eq!(b["status"], "timeout");
    assert!(
        b["error"].as_str().unwrap().contains("--idle-timeout"),
        "{b}"
    );
    assert_eq!(task_of(&report, "a.txt")["status"], "merged");
}

/// A plain log (not a terminal) says how far the run is on each line that settles a task,
/// and a failed task's hint names the task to inspect.
#[test]
fn plain_logs_count_settled_tasks_and_hints_name_the_task() {
    let repo = two_files();
    let run = run_with_b(&repo, "sed -i s/foo/baz/ b.txt; exit 3", &[]);
    run.assert_code(1);
    for n in ["[1/2]", "[2/2]"] {
        assert_eq!(run.stderr.matches(n).count(), 1, "{n}:\n{}", run.stderr);
    }
    let report = repo.report(&run);
    let failed = task_of(&report, "b.txt")["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        run.stderr
            .contains(&format!("inspect: swarm diff {} {failed}", run.run_id())),
        "{}",
        run.stderr
    );
}

/// With no git identity at all, swarm says who its commits are by.
#[test]
fn commits_without_a_git_identity_are_announced() {
    let repo = two_files();
    let mut cmd = repo.swarm_cmd();
    for var in [
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ] {
        cmd.env_remove(var);
    }
    let run = Run::from(
        cmd.args(["refactor", "x", "*.txt", "--exec", SED_FOO_BAR])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert!(
        run.stderr.contains(
            "no git identity (user.name, user.email): commits are made as swarm <swarm@localhost>"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(
        repo.git(&["log", "-1", "--format=%an <%ae>", "main^2"]),
        "swarm <swarm@localhost>"
    );
    // With an identity, not a word.
    let run = run_with_b(&repo, SED_FOO_BAR, &[]);
    assert!(!run.stderr.contains("no git identity"), "{}", run.stderr);
}

/// With `--sandbox off`, a worker that writes into the user's checkout is named.
#[test]
fn a_worker_writing_into_the_checkout_is_reported_with_the_sandbox_off() {
    let repo = two_files();
    let stray = repo.path.join("stray.txt");
    let exec = format!(
        r#"[ "$SWARM_FILE" != b.txt ] || echo x > '{}'; {SED_FOO_BAR}"#,
        stray.display()
    );
    // One at a time, so the change is the finishing task's.
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.txt",
        "-j",
        "1",
        "--sandbox",
        "off",
        "--exec",
        &exec,
    ]);
    run.assert_code(0);
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt")["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        run.stderr.contains(&format!(
            "warning {b}: your checkout changed while this task ran (--sandbox off lets workers write there): stray.txt"
        )),
        "{}",
        run.stderr
    );
    // Only that task is named.
    assert_eq!(
        run.stderr.matches("your checkout changed").count(),
        1,
        "{}",
        run.stderr
    );
}

/// A command that is one program and its arguments runs without `sh -c`, with the words and
/// the `PWD` the shell would have given it; one that needs a shell still gets one. Seen from
/// the program: its parent is the jail's init (process 1 of the task's namespace) only when
/// no shell stood between them.
#[test]
fn a_one_program_command_runs_without_a_shell_as_the_shell_would_run_it() {
    let program = r#"python3 -c 'import os, sys; open(sys.argv[1], "w").write(repr([os.getppid() == 1, os.environ["PWD"] == os.getcwd(), sys.argv[2:]]))' "$SWARM_FILE" "a  b" '' x"y"'z'"#;
    for (exec, direct) in [
        (program.to_string(), true),
        (format!("{program}; true"), false),
    ] {
        let repo = TestRepo::with_files(&[("dir/my file.txt", "x\n")]);
        let run = repo.swarm(&["refactor", "x", "dir", "--exec", &exec]);
        run.assert_code(0);
        assert_eq!(
            repo.git(&["show", "HEAD:dir/my file.txt"]),
            format!(
                "[{}, True, ['a  b', '', 'xyz']]",
                if direct { "True" } else { "False" }
            ),
            "{exec}"
        );
    }
}

/// Run without a shell, a program that cannot be run fails as it would with one: status 126
/// in the jail; unconfined, the task says it could not start it, and why, once.
#[test]
fn a_program_that_cannot_be_run_exits_126_as_with_a_shell() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("tool.sh", "#!/bin/sh\n")]);
    let exec = "./tool.sh \"$SWARM_FILE\"";
    for (extra, expected) in [
        (&[][..], "the worker exited with status 126"),
        (
            &["--sandbox", "off"][..],
            "cannot start `./tool.sh a.txt`: Permission denied (os error 13)",
        ),
    ] {
        let mut args = vec!["refactor", "x", "a.txt", "--exec", exec];
        args.extend_from_slice(extra);
        let run = repo.swarm(&args);
        run.assert_code(1);
        let report = repo.report(&run);
        assert_eq!(task_of(&report, "a.txt")["error"], expected);
    }
}
