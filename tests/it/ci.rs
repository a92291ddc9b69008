//! Running in CI: GitHub Actions output, `--json` and `--events` for machines.

use crate::common::{Run, SED_FOO_BAR, TestRepo};

/// a.txt is edited; the worker fails on b.txt.
const FAIL_ON_B: &str = r#"[ "$SWARM_FILE" != b.txt ] || { echo "cannot edit b.txt: 50% done"; exit 4; }; sed -i 's/foo/bar/' "$SWARM_FILE""#;

#[test]
fn github_actions_gets_groups_annotations_a_summary_and_outputs() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let summary = repo.home.join("step_summary.md");
    let outputs = repo.home.join("github_output");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let run = Run::from(
        repo.swarm_cmd()
            .env("GITHUB_ACTIONS", "true")
            .env("CI", "true")
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("GITHUB_OUTPUT", &outputs)
            .args(["refactor", "x", "-y", "--exec", FAIL_ON_B])
            .output()
            .unwrap(),
    );
    run.assert_code(1);
    for text in [&run.stdout, &run.stderr] {
        assert!(!text.contains('\r'), "a carriage return in:\n{text}");
        assert!(!text.contains('\x1b'), "a colour in:\n{text}");
    }
    let report = repo.report(&run);
    let id_of = |file: &str| {
        report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["files"][0] == file)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (a, b) = (id_of("a.txt"), id_of("b.txt"));
    // The failed task's log in a group, and an annotation on its file (escaped).
    assert!(
        run.stderr.contains(&format!(
            "::group::failed {b} (b.txt)\ncannot edit b.txt: 50% done\n"
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("::endgroup::"), "{}", run.stderr);
    let annotation = format!("::error file=b.txt,title=swarm%3A task {b} failed::");
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with(&annotation))
        .unwrap_or_else(|| panic!("no {annotation} in:\n{}", run.stderr));
    assert!(line.contains("exited with status 4"), "{line}");
    assert_eq!(
        run.stderr.matches("::error ").count(),
        1,
        "only failed tasks are annotated"
    );

    // A Markdown table appended to the step summary.
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("earlier step\n"), "appended, not replaced");
    assert!(md.contains("| task | files | status | detail |\n| --- | --- | --- | --- |\n"));
    assert!(
        md.contains(&format!("| `{a}` | a.txt | merged | 1 file(s) changed |")),
        "{md}"
    );
    assert!(md.contains(&format!("| `{b}` | b.txt | failed |")), "{md}");
    assert!(md.contains("**1 merged**"), "{md}");

    // Step outputs.
    let out = std::fs::read_to_string(&outputs).unwrap();
    let main = repo.git(&["rev-parse", "main"]);
    for line in [
        format!("result={main}"),
        format!("run-id={}", run.run_id()),
        "merged=1".to_string(),
        "failed=1".to_string(),
        "into=main".to_string(),
        "into-updated=true".to_string(),
    ] {
        assert!(out.lines().any(|l| l == line), "no {line} in:\n{out}");
    }
}

#[test]
fn events_stream_to_a_file_as_json_lines() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let file = repo.home.join("events.jsonl");
    let run = repo.swarm(&[
        "refactor",
        "x",
        "-y",
        "--exec",
        SED_FOO_BAR,
        "--events",
        file.to_str().unwrap(),
    ]);
    run.assert_code(0);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The same events as the run's own events.jsonl, in order.
    assert_eq!(lines, repo.events(&run));
    let kinds: Vec<&str> = lines.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_finished"));
    assert_eq!(kinds.iter().filter(|k| **k == "merged").count(), 2);
    for e in &lines {
        assert!(e["ts"].is_number());
    }
}

#[test]
fn events_to_a_path_that_cannot_be_written_is_bad_input() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = repo.swarm(&[
        "refactor",
        "x",
        "-y",
        "--exec",
        SED_FOO_BAR,
        "--events",
        "/nonexistent-dir/events.jsonl",
    ]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("cannot write --events"),
        "{}",
        run.stderr
    );
}
