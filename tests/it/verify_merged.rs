//! `--verify-merged`: a check on the merged result, culprits found by bisection and left out.

use std::path::Path;
use std::process::Command;

use crate::common::{TestRepo, count, statuses, task_of};

/// Replaces `value` with `val` in the task's file; the task of f11.txt also breaks it.
const BUMP_BREAKING_F11: &str = r#"sed -i 's/value/val/' "$SWARM_FILE"; [ "$SWARM_FILE" != f11.txt ] || echo BROKEN >> "$SWARM_FILE""#;

fn sixteen_files() -> (TestRepo, Vec<String>) {
    let files: Vec<(String, String)> = (1..=16)
        .map(|i| (format!("f{i:02}.txt"), format!("value = {i}\n")))
        .collect();
    let names = files.iter().map(|(n, _)| n.clone()).collect();
    (TestRepo::with_files(&files), names)
}

/// How many times the check ran: it appends a line to `counter` each time.
fn runs(counter: &Path) -> usize {
    std::fs::read_to_string(counter)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn the_task_that_breaks_the_merged_check_is_found_by_bisection_and_left_out() {
    let (repo, names) = sixteen_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let counter = repo.writable_dir().join("checks");
    let check = format!(
        "echo run >> '{}'; ! grep -l BROKEN *.txt",
        counter.display()
    );
    let run = repo.swarm(&[
        "refactor",
        "bump",
        "*.txt",
        "-y",
        "--exec",
        BUMP_BREAKING_F11,
        "--verify-merged",
        &check,
    ]);
    run.assert_code(1);

    // That task alone is excluded; the other 15 merge.
    let report = repo.report(&run);
    let st = statuses(&report);
    assert_eq!(count(&st, "merged"), 15, "{st:?}");
    assert_eq!(task_of(&report, "f11.txt")["status"], "excluded");
    assert_eq!(report["totals"]["excluded"], 1);
    let culprit = task_of(&report, "f11.txt");
    assert!(
        culprit["output_tail"].as_str().unwrap().contains("f11.txt"),
        "the check's output is kept: {culprit}"
    );
    assert!(
        run.stderr.contains("excluded  f11-txt-"),
        "stderr:\n{}",
        run.stderr
    );

    // The result equals the edit applied to every other file, and passes the check.
    let others: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| *n != "f11.txt")
        .collect();
    let oracle = repo.oracle_tree(&base, &others, r#"sed -i 's/value/val/' "$SWARM_FILE""#);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
    let broken = repo
        .git_cmd()
        .args(["grep", "-q", "BROKEN", "main", "--"])
        .status()
        .unwrap();
    assert!(!broken.success(), "the merged result still holds the break");
    assert_eq!(
        repo.lines(&[
            "rev-list",
            "--merges",
            "--first-parent",
            &format!("{base}..main")
        ])
        .len(),
        15
    );

    // Logarithmic: the tip, the base, log2(16) = 4 bisection steps, the rebuilt tip.
    let ran = runs(&counter);
    assert!(ran <= 7, "the check ran {ran} times for 16 tasks");
    assert_eq!(report["verify_merged"]["runs"], ran as u64);
    assert_eq!(report["verify_merged"]["passed"], true);
    assert_eq!(report["verify_merged"]["excluded"][0], culprit["id"]);

    // The culprit's branch is kept, with its change; every other task branch is gone.
    let branch = culprit["branch"].as_str().unwrap();
    assert_eq!(repo.swarm_branches(), vec![branch.to_string()]);
    assert!(
        repo.git(&["show", &format!("{branch}:f11.txt")])
            .contains("BROKEN")
    );
}

#[test]
fn a_check_that_fails_on_the_base_stops_without_blaming_a_task() {
    let (repo, _) = sixteen_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let counter = repo.writable_dir().join("checks");
    let check = format!("echo run >> '{}'; test -f missing.txt", counter.display());
    let run = repo.swarm(&[
        "refactor",
        "bump",
        "*.txt",
        "-y",
        "--exec",
        r#"sed -i 's/value/val/' "$SWARM_FILE""#,
        "--verify-merged",
        &check,
    ]);
    run.assert_code(1);
    assert!(
        run.stderr.contains("the check is broken, not the tasks"),
        "stderr:\n{}",
        run.stderr
    );
    // The target did not move; nothing is excluded; the merged result waits on its branch.
    assert_eq!(repo.git(&["rev-parse", "main"]), base);
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 16);
    assert_eq!(report["into_updated"], false);
    let result_branch = report["result_branch"].as_str().unwrap();
    assert_eq!(
        repo.lines(&["rev-list", "--merges", &format!("{base}..{result_branch}")])
            .len(),
        16
    );
    assert_eq!(runs(&counter), 2, "the result, then the base; no bisection");
    assert!(
        report["verify_merged"]["problem"]
            .as_str()
            .unwrap()
            .contains("fails on")
    );
}

/// A small C program: `lib.c` defines `compute_total`, `lib.h` declares it, and the other
/// files call it. Renaming it is one task per file, and dropping any one of them breaks the
/// build of the rest.
fn c_program() -> TestRepo {
    let mut files = vec![
        ("lib.h".to_string(), "int compute_total(int a, int b);\n".to_string()),
        (
            "lib.c".to_string(),
            "#include \"lib.h\"\nint compute_total(int a, int b) { return a + b; }\n".to_string(),
        ),
        (
            "main.c".to_string(),
            "#include \"lib.h\"\nint use1(void);\nint use2(void);\nint use3(void);\nint use4(void);\n\
             int main(void) { return compute_total(use1() + use2(), use3() + use4()) == 10 ? 0 : 1; }\n"
                .to_string(),
        ),
    ];
    for i in 1..=4 {
        files.push((
            format!("use{i}.c"),
            format!("#include \"lib.h\"\nint use{i}(void) {{ return compute_total({i}, 0); }}\n"),
        ));
    }
    TestRepo::with_files(&files)
}

/// Builds and runs the C program in `dir`: true when it compiles, links and exits 0.
fn builds(dir: &Path) -> bool {
    let out = dir.join("prog.bin");
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cc -Werror=implicit-function-declaration -o '{}' *.c && '{}'",
            out.display(),
            out.display()
        ))
        .current_dir(dir)
        .output()
        .unwrap()
        .status
        .success();
    let _ = std::fs::remove_file(out);
    ok
}

const BUILD: &str =
    r#"cc -Werror=implicit-function-declaration -o "$TMPDIR/prog" *.c && "$TMPDIR/prog""#;
const RENAME: &str = r#"sed -i 's/compute_total/sum_total/g' "$SWARM_FILE""#;

#[test]
fn held_out_rename_where_dropping_any_branch_breaks_the_build() {
    let repo = c_program();
    let files = [
        "lib.c", "lib.h", "main.c", "use1.c", "use2.c", "use3.c", "use4.c",
    ];
    let base = repo.git(&["rev-parse", "HEAD"]);
    assert!(builds(&repo.path), "the fixture builds at the base");

    // The fixture's property, checked with the git CLI: the rename of all files builds, and
    // leaving out any one file's rename does not.
    for dropped in files {
        let dir = tempfile::tempdir().unwrap();
        repo.git(&[
            "worktree",
            "add",
            "-q",
            "--detach",
            dir.path().to_str().unwrap(),
            &base,
        ]);
        for f in files.iter().filter(|f| **f != dropped) {
            let ok = Command::new("sh")
                .args(["-c", RENAME])
                .env("SWARM_FILE", f)
                .current_dir(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
        assert!(!builds(dir.path()), "dropping {dropped} still builds");
        repo.git(&[
            "worktree",
            "remove",
            "--force",
            dir.path().to_str().unwrap(),
        ]);
    }

    // Every task merges and the merged result builds: checked once, nothing dropped.
    let run = repo.swarm(&[
        "refactor",
        "rename compute_total to sum_total",
        "*.c",
        "*.h",
        "-y",
        "-j",
        "3",
        "--exec",
        RENAME,
        "--verify-merged",
        BUILD,
    ]);
    run.assert_code(0);
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 7);
    assert_eq!(report["verify_merged"]["runs"], 1);
    assert_eq!(report["verify_merged"]["passed"], true);
    assert!(builds(&repo.path), "main builds after the run");
    assert_eq!(
        repo.git(&["rev-parse", "main^{tree}"]),
        repo.oracle_tree(&base, &files, RENAME)
    );
    repo.assert_clean_after_run();
}

#[test]
fn a_silently_dropped_task_is_caught_and_the_target_keeps_building() {
    let repo = c_program();
    let base = repo.git(&["rev-parse", "HEAD"]);
    // The worker of use3.c fails: its rename never reaches the result.
    let dropping = format!(r#"[ "$SWARM_FILE" != use3.c ] || exit 3; {RENAME}"#);
    let run = repo.swarm(&[
        "refactor",
        "rename compute_total to sum_total",
        "*.c",
        "*.h",
        "-y",
        "--exec",
        &dropping,
        "--verify-merged",
        BUILD,
    ]);
    run.assert_code(1);
    let report = repo.report(&run);
    assert_eq!(task_of(&report, "use3.c")["status"], "failed");
    // The other six merged into a result that does not build: no single task is to blame,
    // so none is left out, the target does not move, and the run says why.
    assert_eq!(
        count(&statuses(&report), "merged"),
        6,
        "{:?}",
        statuses(&report)
    );
    assert_eq!(count(&statuses(&report), "excluded"), 0);
    assert_eq!(repo.git(&["rev-parse", "main"]), base);
    assert!(builds(&repo.path), "main still builds");
    assert_eq!(report["verify_merged"]["passed"], false);
    assert!(
        run.stderr.contains("still fails after leaving out"),
        "stderr:\n{}",
        run.stderr
    );
    let result_branch = report["result_branch"].as_str().unwrap();
    assert_eq!(
        repo.lines(&["rev-list", "--merges", &format!("{base}..{result_branch}")])
            .len(),
        6
    );
}
