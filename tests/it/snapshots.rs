//! The human output, as a person reads it, pinned by snapshots (`insta`): the summary of a
//! run, `swarm status`, an error with its hint, a dry run's end. What changes from run to
//! run (ids, times, commits, temporary paths) is replaced by a placeholder. A change to the
//! wording shows as a diff to review: `cargo insta review`, or `INSTA_UPDATE=always cargo
//! test` and `git diff tests/it/snapshots/`.

use crate::common::{SED_FOO_BAR, TestRepo};

/// Placeholders for what differs between runs.
fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"\d{8}-\d{6}-[0-9a-f]{4}", "[RUN]"),
        (r"\b\d+\.\d+s\b", "[TIME]"),
        (r"\b[0-9a-f]{10}\b", "[COMMIT]"),
        (r"/tmp/\.tmp[A-Za-z0-9]+", "[TMP]"),
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

fn mixed_run(repo: &TestRepo, extra: &[&str]) -> crate::common::Run {
    // a.txt merges, b.txt fails with output and a hint, c.txt needs no change.
    let exec = r#"case "$SWARM_FILE" in
  b.txt) sed -i s/foo/bar/ b.txt; echo "b.txt:1: E501 line too long"; exit 1 ;;
  c.txt) ;;
  *) sed -i s/foo/bar/ "$SWARM_FILE" ;;
esac"#;
    let mut args = vec!["refactor", "x", "-j", "1", "--exec", exec];
    args.extend_from_slice(extra);
    repo.swarm(&args)
}

fn three_files() -> TestRepo {
    TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "x\n")])
}

#[test]
fn the_summary_of_a_run() {
    let repo = three_files();
    let run = mixed_run(&repo, &[]);
    run.assert_code(1);
    assert_text!("summary", run.stderr);
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
