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
            .args(["refactor", "x", ".", "-y", "--exec", FAIL_ON_B])
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
    let group = format!("::group::failed {b} (b.txt)\n::stop-commands::");
    let at = run
        .stderr
        .find(&group)
        .unwrap_or_else(|| panic!("no {group} in:\n{}", run.stderr));
    let after = &run.stderr[at + group.len()..];
    assert!(
        after.contains("\ncannot edit b.txt: 50% done\n::swarm-"),
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
        ".",
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
        ".",
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

/// The commands a GitHub Actions runner would run from `log`: lines starting with `::`
/// (after leading spaces), except between `::stop-commands::TOKEN` and `::TOKEN::`.
fn runner_commands(log: &str) -> Vec<String> {
    let mut stopped: Option<String> = None;
    let mut commands = Vec::new();
    for line in log.lines() {
        let line = line.trim_start();
        if let Some(token) = &stopped {
            if line == format!("::{token}::") {
                stopped = None;
            }
            continue;
        }
        if let Some(token) = line.strip_prefix("::stop-commands::") {
            stopped = Some(token.to_string());
        } else if line.starts_with("::") {
            commands.push(line.to_string());
        }
    }
    commands
}

/// The attack: a worker prints workflow commands (to mask, to annotate, to stop commands
/// itself) and terminal escapes (a window title, a cleared screen), and reports a summary
/// with a raw ESC. The runner sees only swarm's own commands; nothing reaches the terminal,
/// the log or the step summary raw.
#[test]
fn worker_output_cannot_forge_workflow_commands_or_drive_the_terminal() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let summary = repo.home.join("step_summary.md");
    let hostile = r#"printf '::add-mask::foo\n  ::error file=README::forged\n::stop-commands::x\n::warning::forged too\n::x::\n::notice::forged\n\033]0;pwned\007\033[2Jcleared\n'; sed -i s/foo/bar/ "$SWARM_FILE"; printf '{"status":"failed","summary":"sum \\u001b[31mred\\u001b[0m\\n::warning::forged in a summary"}' > "$SWARM_RESULT_FILE""#;
    let run = Run::from(
        repo.swarm_cmd()
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary)
            .args(["refactor", "x", ".", "-y", "--exec", hostile])
            .output()
            .unwrap(),
    );
    run.assert_code(1);
    let commands = runner_commands(&run.stderr);
    assert!(!commands.is_empty(), "{}", run.stderr);
    for command in &commands {
        // swarm's own: groups, and annotations whose message quotes the worker escaped.
        let own = command.starts_with("::group::")
            || command == "::endgroup::"
            || command.starts_with("::error file=a.txt,title=swarm")
            || command.starts_with("::error file=b.txt,title=swarm");
        assert!(own, "{command}\n{}", run.stderr);
    }
    let md = std::fs::read_to_string(&summary).unwrap();
    for text in [&run.stderr, &md] {
        assert!(
            !text.contains('\x1b') && !text.contains('\x07'),
            "raw: {text:?}"
        );
    }
    assert!(
        run.stderr.contains("^[]0;pwned^G^[[2Jcleared"),
        "{}",
        run.stderr
    );

    // Outside Actions, with --color never: the failure's last lines are shown made visible.
    repo.write("a.txt", "foo\n");
    let run = repo.swarm(&[
        "refactor", "x", "a.txt", "-y", "--color", "never", "--exec", hostile,
    ]);
    run.assert_code(1);
    assert!(!run.stderr.contains('\x1b') && !run.stderr.contains('\x07'));
    assert!(
        run.stderr.contains("│ ^[]0;pwned^G^[[2Jcleared"),
        "{}",
        run.stderr
    );
    // report.json keeps the text as it was (JSON escapes it).
    let report = repo.report(&run);
    assert!(
        report["tasks"][0]["output_tail"]
            .as_str()
            .unwrap()
            .contains("\x1b[2J")
    );
}
