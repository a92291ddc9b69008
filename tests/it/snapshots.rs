//! The human output, as a person reads it, pinned by snapshots (`insta`): the summary of a
//! run, the plain log (retries, a split process, failures), `swarm status` (the list and one
//! run), `swarm diff --stat`, the GitHub step summary, the main errors with their hints, a
//! dry run's end, `--help`. What changes from run to run (ids, times, commits, temporary
//! paths, the order of merges that race the next worker) is replaced by a placeholder. A change to the
//! wording shows as a diff to review: `cargo insta review`, or `INSTA_UPDATE=always cargo
//! test` and `git diff tests/it/snapshots/`.

use crate::common::{SED_FOO_BAR, TestRepo};

/// Placeholders for what differs between runs.
fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"\d{8}-\d{6}-[0-9a-f]{4}", "[RUN]"),
        (r"\b\d+\.\d+s\b", "[TIME]"),
        (r"\b[0-9a-f]{10,40}\b", "[COMMIT]"),
        (r"/tmp/\.tmp[A-Za-z0-9]+", "[TMP]"),
        // `--help` shows the value of each option's variable in the test's environment.
        (r"\[env: (\w+)=[^\]]*\]", "[env: $1]"),
    ]
}

/// `text` with the run's own details replaced.
macro_rules! assert_text {
    ($name:expr, $text:expr) => {
        insta::with_settings!({ filters => filters(), prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!($name, $text);
        });
    };
}

/// One task after another, commit included, so that the log's order is fixed: in full
/// checkouts a task holds its place among `-j` to its end (in an overlay worktree its
/// commit overlaps the next worker).
const ONE_BY_ONE: [&str; 4] = ["-j", "1", "--worktrees", "pool"];

fn mixed_run(repo: &TestRepo, extra: &[&str]) -> crate::common::Run {
    // a.txt merges, b.txt fails with output and a hint, c.txt needs no change.
    let exec = r#"case "$SWARM_FILE" in
  b.txt) sed -i s/foo/bar/ b.txt; echo "b.txt:1: E501 line too long"; exit 1 ;;
  c.txt) ;;
  *) sed -i s/foo/bar/ "$SWARM_FILE" ;;
esac"#;
    let mut args = vec!["refactor", "x", "."];
    args.extend_from_slice(&ONE_BY_ONE);
    args.extend_from_slice(&["--exec", exec]);
    args.extend_from_slice(extra);
    repo.swarm(&args)
}

/// A log whose merges race the next worker (the merge thread runs beside it): the merge
/// lines last, in task order, and the progress counter hidden.
fn steady(log: &str) -> String {
    let counter = regex::Regex::new(r"\[\d+/\d+\]").unwrap();
    let log = counter.replace_all(log, "[k/n]");
    let (mut merges, rest): (Vec<&str>, Vec<&str>) =
        log.lines().partition(|l| l.contains("] merged "));
    merges.sort_unstable();
    format!(
        "{}\n--- the merges, as they came ---\n{}\n",
        rest.join("\n"),
        merges.join("\n")
    )
}

fn three_files() -> TestRepo {
    TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "x\n")])
}

#[test]
fn the_summary_of_a_run() {
    let repo = three_files();
    let run = mixed_run(&repo, &[]);
    run.assert_code(1);
    assert_text!("summary", steady(&run.stderr));
}

/// Past 20 tasks the summary lists no task: what did not merge is grouped by reason (same
/// status, same error but for the file), each group with its first output and next step.
#[test]
fn the_summary_of_a_big_run_groups_failures_by_reason() {
    let files: Vec<(String, &str)> = (1..=24)
        .map(|i| (format!("f{i:02}.txt"), "foo\n"))
        .collect();
    let repo = TestRepo::with_files(&files);
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; case "$SWARM_FILE" in
  f0[1-3].txt) echo "error: cannot parse $SWARM_FILE"; exit 3 ;;
  f04.txt) echo "Traceback: boom"; exit 4 ;;
esac"#;
    let run = repo.swarm(&["refactor", "x", ".", "-j", "2", "--exec", exec]);
    run.assert_code(1);
    // The summary is the last "swarm: run" line and what follows.
    let summary = run.stderr.rsplit("\nswarm: run ").next().unwrap();
    assert_text!("summary_grouped", format!("swarm: run {summary}"));
}

#[test]
fn the_status_of_a_run() {
    let repo = three_files();
    let run = mixed_run(&repo, &[]);
    let status = repo.swarm(&["status", &run.run_id()]);
    status.assert_code(0);
    assert_text!("status", status.stdout);
}

#[test]
fn a_dry_runs_end() {
    let repo = three_files();
    let run = repo.swarm(&["refactor", "x", "a.txt", "--dry-run", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert_text!(
        "dry_run",
        format!("{}\n--- stdout ---\n{}", run.stderr, run.stdout)
    );
}

#[test]
fn an_error_and_its_hint() {
    let repo = three_files();
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-y",
        "--ok-exit-codes",
        "0,256",
        "--exec",
        "true",
    ]);
    run.assert_code(2);
    assert_text!("error_ok_exit_codes", run.stderr);
    let run = repo.swarm(&["refactor", "x", "nothing*.rs", "-y", "--exec", "true"]);
    run.assert_code(2);
    assert_text!("error_no_files", run.stderr);
}

/// The plain log of a run whose tasks conflict and are retried from the merged result, and
/// of one whose shared process splits after a failure.
#[test]
fn the_plain_log_of_retries_and_a_split() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("shared.txt", "start\n"),
    ]);
    // Each task also appends to shared.txt: the second merge conflicts, and is retried.
    let exec = r#"sed -i s/foo/bar/ "$SWARM_FILE"; echo "$SWARM_FILE" >> shared.txt"#;
    let mut args = vec!["refactor", "x", "a.txt", "b.txt", "--scope", "any"];
    args.extend_from_slice(&ONE_BY_ONE);
    args.extend_from_slice(&["--exec", exec]);
    let run = repo.swarm(&args);
    run.assert_code(0);
    assert_text!("log_retry", steady(&run.stderr));
    // One process for three files fails on one of them: split, then each alone.
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    let exec = r#"for f in $SWARM_FILES; do
  if [ "$f" = b.txt ]; then echo "$f: cannot parse" >&2; exit 2; fi
  sed -i s/foo/bar/ "$f"
done"#;
    let mut args = vec!["refactor", "x", ".", "--per-process", "3"];
    args.extend_from_slice(&ONE_BY_ONE);
    args.extend_from_slice(&["--exec", exec]);
    let run = repo.swarm(&args);
    run.assert_code(1);
    assert_text!("log_split", steady(&run.stderr));
}

/// `swarm status` with no run: every run of the repository, one line each.
#[test]
fn the_list_of_runs() {
    let repo = three_files();
    mixed_run(&repo, &[]).assert_code(1);
    // Run ids sort by the second they start in: two runs, two seconds.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    repo.swarm(&["refactor", "y", "a.txt", "--dry-run", "--exec", "true"])
        .assert_code(0);
    let status = repo.swarm(&["status"]);
    status.assert_code(0);
    assert_text!("status_list", status.stdout);
}

/// `swarm diff RUN --stat`: git's own diffstat of the run.
#[test]
fn the_diffstat_of_a_run() {
    let repo = three_files();
    let run = mixed_run(&repo, &[]);
    let diff = repo.swarm(&["diff", &run.run_id(), "--stat"]);
    diff.assert_code(0);
    assert_text!("diff_stat", diff.stdout);
}

/// The GitHub Actions step summary of a run with a failure.
#[test]
fn the_github_step_summary() {
    let repo = three_files();
    let summary = repo.home.join("step_summary.md");
    let mut cmd = repo.swarm_cmd();
    cmd.env("GITHUB_ACTIONS", "true")
        .env("CI", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_OUTPUT", repo.home.join("github_output"));
    let exec = r#"if [ "$SWARM_FILE" = b.txt ]; then echo "b broke" >&2; exit 3; fi
sed -i s/foo/bar/ "$SWARM_FILE""#;
    let run = crate::common::Run::from(
        cmd.args(["refactor", "x", ".", "-j", "1", "-y", "--exec", exec])
            .output()
            .unwrap(),
    );
    run.assert_code(1);
    assert_text!("github_summary", std::fs::read_to_string(&summary).unwrap());
}

/// The errors a user meets first, each with the hint that names the fix.
#[test]
fn the_main_errors_and_their_hints() {
    let repo = three_files();
    let outside = tempfile::tempdir().unwrap();
    let mut said = String::new();
    let mut show = |what: &str, run: crate::common::Run, code: i32| {
        run.assert_code(code);
        said.push_str(&format!("$ swarm {what}\n{}\n", run.stderr));
    };
    show(
        "refactor x (no worker)",
        repo.swarm(&["refactor", "x", ".", "-y"]),
        2,
    );
    show(
        "refactor x --exec no-such-codemod",
        repo.swarm(&[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            "no-such-codemod \"$SWARM_FILE\"",
        ]),
        2,
    );
    show("status 2099", repo.swarm(&["status", "2099"]), 2);
    show(
        "resume (no run)",
        repo.swarm(&["resume", "20990101-000000-abcd"]),
        2,
    );
    show(
        "refactor x -j 0",
        repo.swarm(&["refactor", "x", ".", "-j", "0", "--exec", "true"]),
        2,
    );
    let mut cmd = repo.swarm_cmd();
    cmd.current_dir(outside.path());
    show(
        "refactor x (not a repository)",
        crate::common::Run::from(
            cmd.args(["refactor", "x", ".", "--exec", "true"])
                .output()
                .unwrap(),
        ),
        2,
    );
    repo.write("a.txt", "edited by hand\n");
    show(
        "refactor x (uncommitted change)",
        repo.swarm(&["refactor", "x", ".", "-y", "--exec", SED_FOO_BAR]),
        2,
    );
    assert_text!("errors", said);
}

/// `--help`, top level and the main command's: what a newcomer reads first.
#[test]
fn the_help() {
    let repo = three_files();
    let help = repo.swarm(&["--help"]);
    help.assert_code(0);
    assert_text!("help", help.stdout);
    let help = repo.swarm(&["refactor", "--help", "."]);
    help.assert_code(0);
    assert_text!("help_refactor", help.stdout);
}
