//! status, diff, clean, and the state a run leaves for them.

use crate::common::{SED_FOO_BAR, TestRepo, task_of};

fn run_with_one_failure(repo: &TestRepo) -> crate::common::Run {
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; [ "$SWARM_FILE" != b.txt ]"#;
    let run = repo.swarm(&["refactor", "x", "*.txt", "--exec", exec]);
    run.assert_code(1);
    run
}

#[test]
fn status_lists_runs_and_shows_tasks() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = run_with_one_failure(&repo);
    let id = run.run_id();
    let list = repo.swarm(&["status"]);
    list.assert_code(0);
    assert!(list.stdout.contains(&id), "{}", list.stdout);
    assert!(list.stdout.contains("finished"), "{}", list.stdout);
    // The list counts as the summary does: one merged, one failed.
    let line = list.stdout.lines().find(|l| l.contains(&id)).unwrap();
    assert!(
        line.trim_end().ends_with("main                 1 failed"),
        "{line}"
    );
    let one = repo.swarm(&["status", &id[..12]]);
    one.assert_code(0);
    assert!(one.stdout.contains("merged"), "{}", one.stdout);
    assert!(one.stdout.contains("failed"), "{}", one.stdout);
    assert!(
        one.stdout.contains("exited with status 1"),
        "{}",
        one.stdout
    );
    let json = repo.swarm(&["status", &id, "--json"]);
    json.assert_code(0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["run_id"], id.as_str());
    let missing = repo.swarm(&["status", "20991231"]);
    missing.assert_code(2);
    assert!(
        missing.stderr.contains("swarm status"),
        "{}",
        missing.stderr
    );
    // What is not a run id at all is refused with the grammar.
    let bad = repo.swarm(&["status", "nope"]);
    bad.assert_code(2);
    assert!(
        bad.stderr.contains("YYYYMMDD-HHMMSS-xxxx"),
        "{}",
        bad.stderr
    );
}

#[test]
fn report_json_on_stdout_matches_the_schema() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = repo.swarm(&["refactor", "x", ".", "--json", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    for key in [
        "schema_version",
        "run_id",
        "base",
        "into",
        "result",
        "tasks",
        "totals",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let t = &v["tasks"][0];
    for key in [
        "id",
        "files",
        "status",
        "branch",
        "commit",
        "attempts",
        "duration_ms",
        "tokens",
        "changed_files",
        "summary",
        "error",
        "output_tail",
    ] {
        assert!(t.get(key).is_some(), "missing tasks[].{key}");
    }
    assert_eq!(t["changed_files"][0], "a.txt");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["result"], repo.git(&["rev-parse", "main"]));
    assert!(t["tokens"]["prompt"].is_u64() && t["tokens"]["completion"].is_u64());
    for key in [
        "tasks",
        "merged",
        "no_change",
        "failed",
        "conflict",
        "tokens",
        "duration_ms",
    ] {
        assert!(v["totals"].get(key).is_some(), "missing totals.{key}");
    }
    assert_eq!(v["totals"]["merged"], 1);
    assert!(
        !run.stdout.contains("swarm:"),
        "human output stays on stderr"
    );
    let kinds: Vec<String> = repo
        .events(&run)
        .iter()
        .map(|e| {
            assert!(e["ts"].is_number());
            e["kind"].as_str().unwrap().to_string()
        })
        .collect();
    for kind in [
        "run_started",
        "task_started",
        "task_finished",
        "merged",
        "cleanup",
        "run_finished",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "no {kind} event in {kinds:?}"
        );
    }
}

#[test]
fn diff_shows_a_task_and_a_run() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = run_with_one_failure(&repo);
    let id = run.run_id();
    let whole = repo.swarm(&["diff", &id]);
    whole.assert_code(0);
    assert!(
        whole.stdout.contains("--- a/a.txt\n+++ b/a.txt\n"),
        "{}",
        whole.stdout
    );
    assert!(whole.stdout.contains("-foo\n+bar\n"), "{}", whole.stdout);
    assert!(
        !whole.stdout.contains("b.txt"),
        "the failed task was not merged"
    );
    assert!(
        !whole.stdout.contains("\x1b["),
        "no colour when not a terminal"
    );
    // The failed task's own diff, from its kept branch.
    let report = repo.report(&run);
    let b = task_of(&report, "b.txt");
    let task = repo.swarm(&["diff", &id, b["id"].as_str().unwrap()]);
    task.assert_code(0);
    assert!(
        task.stdout
            .contains("+++ b/b.txt\n@@ -1 +1 @@\n-foo\n+bar\n"),
        "{}",
        task.stdout
    );
}

#[test]
fn clean_removes_kept_branches_and_state() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = run_with_one_failure(&repo);
    assert_eq!(repo.swarm_branches().len(), 1);
    let cleaned = repo.swarm(&["clean", &run.run_id()]);
    cleaned.assert_code(0);
    assert!(repo.swarm_branches().is_empty());
    assert!(!repo.swarm_dir().join("runs").join(run.run_id()).exists());
    assert_eq!(
        repo.read("a.txt"),
        "bar\n",
        "clean never touches the result"
    );
    repo.swarm(&["clean"]).assert_code(2);
    repo.swarm(&["clean", "--all"]).assert_code(0);
}

#[test]
fn clean_all_recovers_leftovers_of_a_killed_run() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let mut child = repo
        .swarm_cmd()
        .args([
            "refactor",
            "x",
            ".",
            "-j",
            "2",
            "--sandbox",
            "off",
            "--exec",
            r#"echo $$ >> "$HOME/pids"; exec sleep 30"#,
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for both worktrees to exist, then kill swarm without any chance to clean up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while repo.worktrees().len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "worktrees never appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Worktrees in use are locked (the lock follows creation at once; poll for it).
    while repo
        .git(&["worktree", "list", "--porcelain"])
        .matches("\nlocked")
        .count()
        < 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "in-use worktrees were never locked"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // And both workers running (each wrote its pid), so that the kill orphans them.
    let pids = repo.home.join("pids");
    while std::fs::read_to_string(&pids).map_or(0, |p| p.lines().count()) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the workers never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(repo.worktrees().len(), 3);
    repo.swarm(&["clean", "--all"]).assert_code(0);
    repo.assert_clean_after_run();
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    // The orphaned workers are in their own process groups; end them.
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        let pid: i32 = pid.trim().parse().unwrap();
        // SAFETY: signalling a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[test]
fn sigint_stops_workers_cleans_up_and_keeps_merged_progress() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    // a.txt is quick; the others hang until interrupted.
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; [ "$SWARM_FILE" = a.txt ] || exec sleep 60"#;
    let child = repo
        .swarm_cmd()
        .args(["refactor", "x", ".", "-j", "3", "--exec", exec])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let merged = || {
        std::fs::read_dir(repo.swarm_dir().join("runs"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| std::fs::read_to_string(e.ok()?.path().join("events.jsonl")).ok())
            .is_some_and(|ev| ev.contains("\"kind\":\"merged\""))
    };
    while !merged() {
        assert!(std::time::Instant::now() < deadline, "a.txt never merged");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let run = crate::common::Run::from(out);
    run.assert_code(130);
    // Said at once, and how to go on.
    let id = run.run_id();
    assert!(
        run.stderr.contains(&format!(
            "swarm: interrupted: stopping the workers and keeping what merged — Ctrl-C again to \
             stop at once; `swarm resume {id}` finishes the run later"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains(&format!("finish it with: swarm resume {id}"))
    );
    // Tasks that never started are counted in the summary, not listed.
    assert!(!run.stderr.contains("  pending "), "{}", run.stderr);
    assert_eq!(repo.worktrees().len(), 1, "worktrees removed");
    assert_eq!(
        repo.git(&["rev-parse", "HEAD"]),
        head,
        "the target does not move"
    );
    let report = repo.report(&run);
    assert_eq!(report["state"], "interrupted");
    let result_branch = format!("swarm/{}/result", run.run_id());
    assert_eq!(
        repo.git(&["show", &format!("{result_branch}:a.txt")]),
        "bar"
    );
    let statuses: Vec<&str> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "interrupted").count(),
        2,
        "{statuses:?}"
    );
}

#[test]
fn dry_run_merges_nothing_and_merge_merges_later() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("c.txt", "nothing\n"),
    ]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let refs = || {
        repo.lines(&["for-each-ref", "--format=%(refname) %(objectname)"])
            .into_iter()
            .filter(|r| !r.starts_with("refs/heads/swarm/"))
            .collect::<Vec<_>>()
    };
    let refs_before = refs();
    let run = repo.swarm(&["refactor", "x", ".", "--dry-run", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    // Nothing moved but the task branches; the diffs are shown; those branches wait.
    assert_eq!(refs(), refs_before);
    assert_eq!(repo.git(&["rev-parse", "main"]), base);
    assert_eq!(repo.read("a.txt"), "foo\n");
    assert!(run.stdout.contains(" a.txt | 2 +-\n"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("+++ b/a.txt\n@@ -1 +1 @@\n-foo\n+bar\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains(&format!("swarm merge {}", run.run_id())),
        "{}",
        run.stderr
    );
    let report = repo.report(&run);
    let mut task_branches: Vec<String> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] == "done")
        .map(|t| t["branch"].as_str().unwrap().to_string())
        .collect();
    task_branches.sort();
    assert_eq!(repo.swarm_branches(), task_branches);
    assert_eq!(task_branches.len(), 2);
    assert_eq!(repo.worktrees().len(), 1);
    assert_eq!(report["totals"]["merged"], 0);

    let merged = repo.swarm(&["merge", &run.run_id()]);
    merged.assert_code(0);
    let oracle = repo.oracle_tree(&base, &["a.txt", "b.txt", "c.txt"], SED_FOO_BAR);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
    assert_eq!(
        repo.lines(&["rev-list", "--merges", &format!("{base}..main")])
            .len(),
        2
    );
    assert!(!merged.stderr.contains("kept"), "{}", merged.stderr);
    repo.assert_clean_after_run();
    // Nothing more to merge.
    repo.swarm(&["merge", &run.run_id()]).assert_code(0);
}

/// swarm itself failing (here: its state directory cannot be created) exits 3, which a script
/// can tell from "some tasks failed" (1) and from bad input (2); nothing is changed.
#[test]
fn swarm_failing_itself_exits_3() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    std::fs::write(repo.swarm_dir(), "not a directory\n").unwrap();
    let main = repo.git(&["rev-parse", "main"]);
    let run = repo.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(3);
    assert!(run.stderr.contains("error: "), "{}", run.stderr);
    assert_eq!(repo.git(&["rev-parse", "main"]), main);
    assert_eq!(repo.read("a.txt"), "foo\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

/// `--version` says the commit swarm was built from, when it was built from a checkout.
#[test]
fn version_names_the_commit() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(concat!("swarm ", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    let commit = std::process::Command::new("git")
        .args(["log", "-1", "--format=%h", "--abbrev=10"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(commit) = commit {
        assert!(text.contains(&format!("({commit} ")), "{text}");
    }
}

/// `-q` leaves the one-line result (and warnings, errors); `--color` decides colours even off
/// a terminal.
#[test]
fn quiet_and_color() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = repo.swarm(&["-q", "refactor", "x", "*.txt", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert!(!run.stderr.contains("started"), "{}", run.stderr);
    assert!(!run.stderr.contains("STATUS"), "{}", run.stderr);
    assert!(run.stderr.contains("2 merged"), "{}", run.stderr);
    assert!(
        run.stderr.contains("result: main is now at"),
        "{}",
        run.stderr
    );
    let id = run.run_id();
    let colored = repo.swarm(&["diff", &id, "--color", "always"]);
    colored.assert_code(0);
    assert!(colored.stdout.contains("\u{1b}["), "{}", colored.stdout);
    let plain = repo.swarm(&["diff", &id, "--color", "never"]);
    assert!(!plain.stdout.contains('\u{1b}'), "{}", plain.stdout);
    assert!(plain.stdout.contains("+bar"), "{}", plain.stdout);
}

/// Completions and the man page come from the same definitions as `--help`.
#[test]
fn completions_and_man_page() {
    let swarm = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let bash = swarm(&["completions", "bash"]);
    assert!(bash.contains("complete -F _swarm"), "{bash}");
    for option in ["--per-process", "--atomic", "--allow-empty"] {
        assert!(bash.contains(option), "bash completion lacks {option}");
    }
    assert!(swarm(&["completions", "zsh"]).starts_with("#compdef swarm"));
    assert!(swarm(&["completions", "fish"]).contains("complete -c swarm"));
    let man = swarm(&["man"]);
    assert!(man.contains(".TH swarm 1"), "{man}");
    assert!(man.contains("refactor"), "{man}");
    // A page per command, as git and jj have: refactor's documents --exec.
    let page = swarm(&["man", "refactor"]);
    assert!(page.contains(".TH swarm-refactor 1"), "{page}");
    assert!(page.contains("\\-\\-exec"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    swarm(&["man", "--dir", dir.path().to_str().unwrap()]);
    for page in ["swarm.1", "swarm-refactor.1", "swarm-resume.1"] {
        assert!(dir.path().join(page).is_file(), "{page}");
    }
    let unknown = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"))
        .args(["man", "nope"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    // --color reaches --help, and the help lists every exit code.
    let help = swarm(&["--color", "always", "refactor", "--help", "."]);
    assert!(help.contains("\x1b["), "{help}");
    assert!(!swarm(&["refactor", "--help", "."]).contains("\x1b["));
    assert!(help.contains("3 swarm itself failed"), "{help}");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// bash completes a run id where a command takes one, from the repository it is in.
#[test]
fn bash_completes_run_ids() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = repo.swarm(&["refactor", "x", ".", "--dry-run", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    let id = run.run_id();
    let script = repo.swarm(&["completions", "bash"]).stdout;
    std::fs::write(repo.root().join("swarm.bash"), script).unwrap();
    let complete = |words: &str| {
        let mut cmd = std::process::Command::new("bash");
        crate::common::hermetic(&mut cmd, &repo.home);
        let out = cmd
            .current_dir(&repo.path)
            .arg("-c")
            .arg(format!(
                "source ../swarm.bash; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
                 _swarm_with_run_ids swarm \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\""
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(complete(&format!("swarm diff {}", &id[..4])).trim(), id);
    assert_eq!(complete("swarm status ''").trim(), id);
    // Not where no run id goes.
    assert!(!complete("swarm refactor ''").contains(&id));
}

/// `-q` is quiet on every command that runs: the one-line result, warnings and errors.
#[test]
fn quiet_is_quiet_on_resume_merge_and_run() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = repo.swarm(&["refactor", "x", ".", "--dry-run", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    let merged = repo.swarm(&["merge", &run.run_id(), "-q"]);
    merged.assert_code(0);
    let lines: Vec<&str> = merged.stderr.lines().filter(|l| !l.is_empty()).collect();
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("swarm: run ") || l.starts_with("result:")),
        "{}",
        merged.stderr
    );
    assert!(!merged.stderr.contains("merging"), "{}", merged.stderr);
    let plan = repo.home.join("plan.json");
    repo.swarm(&[
        "plan",
        "x",
        "--exec",
        SED_FOO_BAR,
        "-o",
        plan.to_str().unwrap(),
    ])
    .assert_code(0);
    let ran = repo.swarm(&["run", plan.to_str().unwrap(), "-q", "-y"]);
    ran.assert_code(0);
    assert!(!ran.stderr.contains("shard 1/1"), "{}", ran.stderr);
}

/// A program of --exec that is not installed is said once, before anything starts, rather
/// than failing every task with exit 127.
#[test]
fn a_missing_exec_program_is_refused_before_the_run() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-y",
        "--exec",
        "rufff check --fix \"$SWARM_FILE\"",
    ]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("`rufff`, the program --exec starts with, is not found on PATH"),
        "{}",
        run.stderr
    );
    assert!(
        !repo.swarm_dir().join("runs").exists(),
        "nothing was created"
    );
    // Shell words, assignments and paths are not looked up.
    for exec in [
        "LC_ALL=C sed -i s/foo/bar/ a.txt",
        "cd . && sed -i s/foo/bar/ a.txt",
        "./fix.sh || true",
    ] {
        let run = repo.swarm(&["refactor", "x", ".", "-y", "--dry-run", "--exec", exec]);
        assert_ne!(run.code, 2, "{exec}: {}", run.stderr);
    }
}

/// A program that exists but cannot be run in the jail (not executable; gone) fails its task
/// with the status a shell gives (126, 127), and the worker's log says why.
#[test]
fn a_program_the_jail_cannot_run_fails_its_task_with_the_shells_status() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("tool", "sed -i s/foo/bar/ \"$1\"\n")]);
    for (exec, code, why) in [
        (
            "./tool \"$SWARM_FILE\"",
            126,
            "cannot run ./tool: Permission denied",
        ),
        (
            "./gone \"$SWARM_FILE\"",
            127,
            "cannot run ./gone: No such file",
        ),
    ] {
        let run = repo.swarm(&["refactor", "x", "a.txt", "-y", "--exec", exec]);
        let report = repo.report(&run);
        let task = task_of(&report, "a.txt");
        assert_eq!(task["status"], "failed", "{exec}: {}", run.stderr);
        let error = task["error"].as_str().unwrap();
        assert!(error.contains(&format!("status {code}")), "{exec}: {error}");
        let log = repo.run_file(
            report["run_id"].as_str().unwrap(),
            &format!("tasks/{}/worker.log", task["id"].as_str().unwrap()),
        );
        assert!(log.contains(why), "{exec}: {log}");
    }
    assert_eq!(repo.read("a.txt"), "foo\n");
}

/// `swarm diff --stat` is git's diffstat: counts, +/- bars, renames, totals (the git CLI is
/// the oracle).
#[test]
fn diff_stat_is_gits() {
    let ten: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let repo = TestRepo::with_files(&[
        ("a.txt", ten.as_str()),
        ("b.txt", "gone\n"),
        ("old.txt", ten.as_str()),
    ]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let edit = "sed -i 's/line 3/LINE 3/; s/line 7/LINE 7/' a.txt; rm b.txt; mv old.txt new.txt; \
                printf 'x\\ny\\n' > c.txt";
    let run = repo.swarm(&["refactor", "x", "a.txt", "--scope", "any", "--exec", edit]);
    run.assert_code(0);
    let ours = repo.swarm(&["diff", &run.run_id(), "--stat"]);
    ours.assert_code(0);
    let git = repo.git(&["diff", "--stat", "-M", &base, "main"]);
    // (the helper trims git's output, the first line's leading space too)
    assert_eq!(
        ours.stdout.trim(),
        git,
        "ours:\n{}\ngit:\n{git}",
        ours.stdout
    );
    assert!(
        ours.stdout.contains("old.txt => new.txt"),
        "{}",
        ours.stdout
    );
    // The patch too, byte for byte: index lines, modes, renames, a file without a final
    // newline.
    let patch = repo.swarm(&["diff", &run.run_id()]);
    patch.assert_code(0);
    let out = repo
        .git_cmd()
        .args(["diff", "-M", "--no-color", &base, "main"])
        .output()
        .unwrap();
    assert_eq!(patch.stdout, String::from_utf8_lossy(&out.stdout));
    assert!(patch.stdout.contains("index "), "{}", patch.stdout);
}

/// After a dry run, `swarm diff RUN` shows each finished task's change (waiting on its
/// branch), and the summary says what `swarm merge` would merge; with nothing finished, it
/// says so instead of suggesting a merge.
#[test]
fn a_dry_runs_diff_shows_its_tasks_and_merge_is_offered_only_for_something() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = repo.swarm(&["refactor", "x", ".", "--dry-run", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("2 finished, not merged"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains(&format!("merge with: swarm merge {}", run.run_id()))
    );
    let diff = repo.swarm(&["diff", &run.run_id(), "--stat"]);
    diff.assert_code(0);
    assert!(diff.stdout.contains("# task a-txt-"), "{}", diff.stdout);
    assert!(diff.stdout.contains(" a.txt | 2 +-"), "{}", diff.stdout);
    assert!(diff.stdout.contains(" b.txt | 2 +-"), "{}", diff.stdout);

    let run = repo.swarm(&["refactor", "x", ".", "--dry-run", "--exec", "exit 1"]);
    run.assert_code(1);
    assert!(!run.stderr.contains("swarm merge"), "{}", run.stderr);
    assert!(run.stderr.contains("nothing to merge"), "{}", run.stderr);
}

/// Runs swarm with `args` whose stdout and stderr are pipes nobody reads: both closed as
/// soon as it starts. Returns its exit code, and whether it is still readable afterwards.
fn with_closed_pipes(repo: &TestRepo, args: &[&str]) -> i32 {
    let mut child = repo
        .swarm_cmd()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    child.wait().unwrap().code().unwrap_or(-1)
}

/// `swarm refactor … 2>&1 | head -3`: the run goes on to its end, merges and exits with its
/// own code; reading commands end quietly (`swarm status | head -1`, `swarm man | true`).
#[test]
fn closed_output_pipes_neither_stop_a_run_nor_fail_a_command() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let worker = format!("sleep 0.3; echo working; {SED_FOO_BAR}");
    let code = with_closed_pipes(
        &repo,
        &["refactor", "x", ".", "-y", "--json", "--exec", &worker],
    );
    assert_eq!(code, 0);
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "bar\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    let status = repo.swarm(&["status", "--json"]);
    assert!(
        status.stdout.contains("\"state\": \"finished\""),
        "{}",
        status.stdout
    );
    let run_id = repo.swarm(&["status"]).stdout.lines().nth(1).unwrap()[..20].to_string();

    // A failing run keeps its code.
    repo.write("a.txt", "foo\n");
    repo.commit_all("again");
    let code = with_closed_pipes(&repo, &["refactor", "x", "a.txt", "-y", "--exec", "exit 3"]);
    assert_eq!(code, 1);

    for args in [
        vec!["status"],
        vec!["status", &run_id],
        vec!["diff", &run_id],
        vec!["man"],
        vec!["completions", "bash"],
    ] {
        let mut child = repo
            .swarm_cmd()
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "swarm {args:?}: {stderr}");
        assert!(stderr.is_empty(), "swarm {args:?}: {stderr}");
    }
}
