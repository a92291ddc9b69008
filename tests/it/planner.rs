//! `--split llm`: the planner model groups files into tasks, checked and corrected once.

use serde_json::json;

use crate::common::{Run, TestRepo, count, statuses};
use crate::fake_model::{FakeModel, Reply, Request, tool_calls};

fn repo() -> TestRepo {
    TestRepo::with_files(&[
        ("src/a.py", "def helper():\n    return 1\n"),
        ("src/b.py", "from a import helper\nx = helper()\n"),
        ("src/c.py", "def helper_test():\n    return helper()\n"),
        ("src/d.py", "print('unrelated')\n"),
    ])
}

fn submit(tasks: serde_json::Value, skipped: serde_json::Value) -> serde_json::Value {
    tool_calls(&[("submit_plan", json!({"tasks": tasks, "skipped": skipped}))])
}

fn planned_run(repo: &TestRepo, fake: &FakeModel) -> Run {
    let mut cmd = repo.swarm_cmd();
    cmd.args([
        "refactor",
        "rename helper to assist",
        "*.py",
        "-y",
        "--split",
        "llm",
        "--planner-model",
        "fake-planner",
        "--base-url",
        &fake.url,
        "--exec",
        r#"for f in $SWARM_FILES; do sed -i 's/helper/assist/g' "$f"; done"#,
    ]);
    Run::from(cmd.output().unwrap())
}

fn is_correction(req: &Request) -> bool {
    req.tool_results()
        .iter()
        .any(|r| r.starts_with("error: the plan is not valid"))
}

#[test]
fn the_planner_groups_files_and_a_double_assignment_is_corrected() {
    let repo = repo();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let fake = FakeModel::start(|req, _| {
        Reply::Json(if is_correction(req) {
            submit(
                json!([
                    {"files": ["src/a.py", "src/b.py"], "instruction": "rename the definition and its import"},
                    {"files": ["src/c.py"], "instruction": "rename the call in the test"}
                ]),
                json!([{"file": "src/d.py", "reason": "does not use helper"}]),
            )
        } else {
            // src/a.py twice: refused, with the problem said.
            submit(
                json!([
                    {"files": ["src/a.py", "src/b.py"], "instruction": "rename the definition and its import"},
                    {"files": ["src/a.py", "src/c.py"], "instruction": "rename the test"}
                ]),
                json!([{"file": "src/d.py", "reason": "does not use helper"}]),
            )
        })
    });
    let run = planned_run(&repo, &fake);
    run.assert_code(0);

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "one answer, one correction");
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["submit_plan"]);
    assert_eq!(requests[0].body["model"], "fake-planner");
    let first = requests[0].messages()[1]["content"].as_str().unwrap();
    assert!(
        first.starts_with("Instruction:\nrename helper to assist\n"),
        "{first}"
    );
    assert!(
        first.contains("- src/a.py (27 bytes)\n    def helper():"),
        "{first}"
    );
    assert!(first.contains("- src/d.py ("), "{first}");
    let correction = requests[1].tool_results().join("\n");
    assert!(
        correction.contains("src/a.py is in task 1 and in task 2"),
        "{correction}"
    );

    // The corrected plan ran: two tasks, the first with two files; d.py skipped.
    let report = repo.report(&run);
    let st = statuses(&report);
    assert_eq!(st.len(), 2, "{st:?}");
    assert_eq!(count(&st, "merged"), 2, "{st:?}");
    let grouped = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["files"].as_array().unwrap().len() == 2)
        .expect("a task of two files");
    assert_eq!(grouped["files"], json!(["src/a.py", "src/b.py"]));
    let plan: serde_json::Value =
        serde_json::from_str(&repo.run_file(&run.run_id(), "plan.json")).unwrap();
    assert_eq!(plan["skipped"][0]["file"], "src/d.py");
    assert_eq!(
        plan["tasks"][0]["instruction"],
        "rename the definition and its import"
    );
    // Workers get the run's instruction, then their task's.
    let task_md = repo.run_file(
        &run.run_id(),
        &format!("tasks/{}/TASK.md", grouped["id"].as_str().unwrap()),
    );
    assert!(
        task_md.contains(
            "rename helper to assist\n\nFor this task: rename the definition and its import"
        ),
        "{task_md}"
    );
    assert_eq!(
        repo.git(&["rev-parse", "main^{tree}"]),
        repo.oracle_tree(
            &base,
            &["src/a.py", "src/b.py", "src/c.py"],
            r#"sed -i 's/helper/assist/g' "$SWARM_FILE""#
        )
    );
}

#[test]
fn a_planner_that_stays_wrong_is_a_clear_error_and_changes_nothing() {
    let repo = repo();
    let fake = FakeModel::start(|_, _| {
        // Leaves src/c.py and src/d.py out, twice.
        Reply::Json(submit(
            json!([{"files": ["src/a.py", "src/b.py"], "instruction": "x"}]),
            json!([]),
        ))
    });
    let run = planned_run(&repo, &fake);
    run.assert_code(2);
    assert!(
        run.stderr.contains("still not valid after a correction")
            && run.stderr.contains("2 candidate file(s) are in no task"),
        "{}",
        run.stderr
    );
    assert_eq!(fake.requests().len(), 2);
    assert!(!repo.swarm_dir().exists());
    assert!(repo.swarm_branches().is_empty());
}
