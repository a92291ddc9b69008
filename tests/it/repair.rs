//! The model repairing what others left: a codemod's failing `--verify` (`--repair`), and a
//! merge conflict (`--on-conflict repair`), both with the scripted fake model.

use serde_json::{Value, json};

use crate::common::{Run, TestRepo, count, statuses, task_of};
use crate::fake_model::{FakeModel, Reply, Request, tool_calls};

const KEY: &str = "sk-test-repair";

fn with_model(repo: &TestRepo, fake: &FakeModel, args: &[&str]) -> Run {
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", KEY).args(args).args([
        "-y",
        "--model",
        "fake-model",
        "--base-url",
        &fake.url,
    ]);
    Run::from(cmd.output().unwrap())
}

fn first_user_message(req: &Request) -> &str {
    req.messages()[1]["content"].as_str().unwrap()
}

#[test]
fn a_codemod_whose_output_fails_verify_is_repaired_by_the_model() {
    let files: Vec<(String, String)> = (0..4)
        .map(|i| {
            (
                format!("src/m{i}.py"),
                format!("def f{i}():\n    return foo({i})\n"),
            )
        })
        .collect();
    let repo = TestRepo::with_files(&files);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // The codemod does the bulk, but breaks m2.py.
    let codemod = r#"sed -i 's/foo/bar/g' "$SWARM_FILE"; [ "$SWARM_FILE" != src/m2.py ] || echo BROKEN >> "$SWARM_FILE""#;
    // The model removes what broke the check, then finishes.
    let fake = FakeModel::start(|req, _| {
        let file = req.task_files().first().cloned().unwrap_or_default();
        Reply::Json(match req.turn() {
            0 => tool_calls(&[(
                "edit_file",
                json!({"path": file, "old_string": "BROKEN\n", "new_string": ""}),
            )]),
            _ => tool_calls(&[(
                "finish",
                json!({"status": "done", "summary": "removed the stray line"}),
            )]),
        })
    });
    let run = with_model(
        &repo,
        &fake,
        &[
            "refactor",
            "rename foo to bar",
            "src",
            "--exec",
            codemod,
            "--verify",
            "! grep -rn BROKEN src",
            "--repair",
        ],
    );
    run.assert_code(0);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let oracle = repo.oracle_tree(&base, &names, r#"sed -i 's/foo/bar/g' "$SWARM_FILE""#);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);

    // Only the broken task went to the model, with the instruction and the failure.
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "two turns for one task");
    for req in &requests {
        assert_eq!(req.task_files(), ["src/m2.py"]);
        let first = first_user_message(req);
        assert!(
            first.starts_with("Instruction:\nrename foo to bar\n"),
            "{first}"
        );
        assert!(
            first.contains("`! grep -rn BROKEN src` now fails"),
            "{first}"
        );
        assert!(
            first.contains("src/m2.py:3:BROKEN"),
            "the check's output: {first}"
        );
    }
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 4);
    let repaired = task_of(&report, "src/m2.py");
    assert_eq!(repaired["summary"], "removed the stray line");
    assert_eq!(repaired["turns"], 2);
    assert!(repaired["tokens"]["prompt"].as_u64().unwrap() > 0);
    assert_eq!(task_of(&report, "src/m0.py")["turns"], 0);
    repo.assert_clean_after_run();
}

/// Resolves diff3-style conflict markers by keeping both sides (ours first), dropping the
/// ancestor: what the scripted model writes back.
fn keep_both(text: &str) -> String {
    let mut out = String::new();
    let mut in_base = false;
    for line in text.lines() {
        if line.starts_with("<<<<<<< ") || line.starts_with(">>>>>>> ") {
            in_base = false;
        } else if line.starts_with("|||||||") {
            in_base = true;
        } else if line == "=======" {
            in_base = false;
        } else if !in_base {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The numbered lines of a read_file result, without their numbers.
fn unnumbered(result: &str) -> String {
    result
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(_, text)| format!("{text}\n")))
        .collect()
}

#[test]
fn a_conflict_is_resolved_by_the_model_and_merged_after_verify() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("CHANGELOG", "# changes\n"),
    ]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // Every task appends to the changelog: the second merge conflicts there.
    let worker = r#"echo changed >> "$SWARM_FILE"; echo "- $SWARM_FILE" >> CHANGELOG"#;
    // Every changed file must be listed in the changelog.
    let verify = r#"for f in *.txt; do if grep -q changed "$f"; then grep -q -- "- $f" CHANGELOG || { echo "$f is not in CHANGELOG"; exit 1; }; fi; done"#;
    // The model first keeps only the already merged side (the check catches that), then both.
    let fake = FakeModel::start(|req, _| {
        let told_check_failed = req.last()["role"] == "user"
            && req.last()["content"]
                .as_str()
                .unwrap_or("")
                .contains("failed after your change");
        let read = req
            .tool_results()
            .into_iter()
            .find(|r| r.contains("<<<<<<< already merged"))
            .map(|r| unnumbered(&r));
        Reply::Json(match (req.turn(), read) {
            (0, _) => tool_calls(&[("read_file", json!({"path": "CHANGELOG"}))]),
            (1, Some(text)) => {
                let ours_only: String = text
                    .lines()
                    .take_while(|l| !l.starts_with("|||||||"))
                    .filter(|l| !l.starts_with("<<<<<<<"))
                    .map(|l| format!("{l}\n"))
                    .collect();
                tool_calls(&[(
                    "write_file",
                    json!({"path": "CHANGELOG", "content": ours_only}),
                )])
            }
            (_, Some(text)) if told_check_failed => tool_calls(&[(
                "write_file",
                json!({"path": "CHANGELOG", "content": keep_both(&text)}),
            )]),
            _ => tool_calls(&[(
                "finish",
                json!({"status": "done", "summary": "kept both entries"}),
            )]),
        })
    });
    let run = with_model(
        &repo,
        &fake,
        &[
            "refactor",
            "note each file in the changelog",
            "*.txt",
            "-j",
            "2",
            "--scope",
            "any",
            "--exec",
            worker,
            "--verify",
            verify,
            "--on-conflict",
            "repair",
        ],
    );
    run.assert_code(0);

    // Both tasks merged, each with one --no-ff merge; the changelog has both entries.
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 2, "{}", run.stderr);
    let changelog = repo.git(&["show", "main:CHANGELOG"]);
    assert!(
        changelog.contains("- a.txt") && changelog.contains("- b.txt"),
        "{changelog}"
    );
    assert!(
        !changelog.contains("<<<<<<<") && !changelog.contains("|||||||"),
        "{changelog}"
    );
    assert_eq!(repo.git(&["show", "main:a.txt"]), "a\nchanged");
    assert_eq!(repo.git(&["show", "main:b.txt"]), "b\nchanged");
    let merges = repo.lines(&[
        "rev-list",
        "--merges",
        "--first-parent",
        &format!("{base}..main"),
    ]);
    assert_eq!(merges.len(), 2);
    let resolved = repo.git(&["log", "-1", "--format=%B", &merges[0]]);
    assert!(
        resolved.contains("the model resolved the merge conflict"),
        "{resolved}"
    );
    // Its second parent is the task's own branch tip, unchanged by the repair.
    let repaired: &Value = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["summary"] == "kept both entries")
        .expect("a repaired task");
    assert_eq!(
        repo.git(&["rev-parse", &format!("{}^2", merges[0])]),
        repaired["commit"].as_str().unwrap()
    );
    assert_eq!(repaired["attempts"], 2);

    // What the model was given: the instruction, the conflicted file, both sides and the
    // ancestor; and the failing check after its first answer.
    let requests = fake.requests();
    let first = first_user_message(&requests[0]);
    assert!(
        first.starts_with("Instruction:\nnote each file in the changelog\n"),
        "{first}"
    );
    assert!(
        first.contains("conflict markers") && first.contains("- CHANGELOG"),
        "{first}"
    );
    let read = requests[1].tool_results().join("\n");
    for marker in [
        "<<<<<<< already merged",
        "|||||||",
        "=======",
        ">>>>>>> this task",
    ] {
        assert!(read.contains(marker), "no {marker} in {read}");
    }
    assert!(
        requests.iter().any(|r| r.last()["content"]
            .as_str()
            .is_some_and(|c| c.contains("is not in CHANGELOG"))),
        "the check's failure went back to the model"
    );
    repo.assert_clean_after_run();
}
