//! The built-in LLM worker against the fake model API.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Run, TestRepo, count, statuses};
use crate::fake_model::{FakeModel, Reply, Request, raw_tool_call, rename_agent, tool_calls};

const KEY: &str = "sk-test-SECRET-7d1f00";

fn foo_repo(n: usize) -> TestRepo {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| {
            (
                format!("src/m{i}.py"),
                format!("def foo_{i}():\n    return foo({i})\n"),
            )
        })
        .collect();
    TestRepo::with_files(&files)
}

fn llm_run(repo: &TestRepo, fake: &FakeModel, args: &[&str]) -> Run {
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", KEY)
        .args(["refactor", "rename foo to bar"])
        .args(args)
        .args(["--model", "fake-model", "--base-url", &fake.url]);
    Run::from(cmd.output().unwrap())
}

/// Checks the shape of every conversation the fake received.
fn assert_well_formed(requests: &[Request]) {
    for req in requests {
        assert_eq!(req.path, "/v1/chat/completions");
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(req.body["model"], "fake-model");
        let names: Vec<&str> = req.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                assert_eq!(t["type"], "function");
                assert!(t["function"]["parameters"]["type"] == "object");
                t["function"]["name"].as_str().unwrap()
            })
            .collect();
        assert_eq!(
            names,
            [
                "read_file",
                "edit_file",
                "write_file",
                "list_files",
                "search",
                "finish"
            ]
        );
        let messages = req.messages();
        assert_eq!(messages[0]["role"], "system");
        assert_eq!(messages[1]["role"], "user");
        let first = messages[1]["content"].as_str().unwrap();
        assert!(
            first.starts_with("Instruction:\nrename foo to bar\n"),
            "{first}"
        );
        // Every tool message answers a call of the assistant message before it, in order.
        let mut open: Vec<String> = Vec::new();
        for m in &messages[2..] {
            match m["role"].as_str().unwrap() {
                "assistant" => {
                    assert!(open.is_empty(), "unanswered tool calls {open:?}");
                    open = m["tool_calls"]
                        .as_array()
                        .map(|c| {
                            c.iter()
                                .map(|c| c["id"].as_str().unwrap().to_string())
                                .collect()
                        })
                        .unwrap_or_default();
                }
                "tool" => {
                    assert!(!open.is_empty(), "a tool message without a call");
                    assert_eq!(m["tool_call_id"].as_str().unwrap(), open.remove(0));
                }
                "user" => assert!(open.is_empty()),
                other => panic!("unexpected role {other}"),
            }
        }
    }
}

#[test]
fn a_rename_across_files_merges_to_the_oracle_tree_streaming() {
    let repo = foo_repo(6);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Stream(agent(req)));
    let run = llm_run(&repo, &fake, &["src", "-j", "3"]);
    run.assert_code(0);
    let files: Vec<String> = (0..6).map(|i| format!("src/m{i}.py")).collect();
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    let oracle = repo.oracle_tree(&base, &files, r#"sed -i 's/foo/bar/g' "$SWARM_FILE""#);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
    assert_eq!(
        repo.lines(&["rev-list", "--merges", &format!("{base}..main")])
            .len(),
        6
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 18, "3 turns per task");
    assert!(
        fake.max_in_flight() <= 3,
        "{} calls in flight at -j 3",
        fake.max_in_flight()
    );
    assert_well_formed(&requests);
    for req in &requests {
        assert_eq!(req.body["stream"], true);
        assert_eq!(req.body["stream_options"]["include_usage"], true);
    }
    let report = repo.report(&run);
    for t in report["tasks"].as_array().unwrap() {
        assert_eq!(t["status"], "merged");
        assert_eq!(t["turns"], 3);
        assert_eq!(t["tokens"]["prompt"], 300);
        assert_eq!(t["tokens"]["completion"], 60);
        assert_eq!(t["summary"], "renamed foo to bar");
        assert!(
            t["output_tail"]
                .as_str()
                .unwrap()
                .contains("[edit_file] edited")
        );
    }
    assert_eq!(report["totals"]["tokens"]["prompt"], 1800);
    repo.assert_clean_after_run();
}

#[test]
fn non_streaming_mode_from_swarm_toml() {
    let repo = foo_repo(2);
    repo.write("swarm.toml", "[model]\nstream = false\n");
    repo.commit_all("settings");
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Json(agent(req)));
    llm_run(&repo, &fake, &["src"]).assert_code(0);
    assert_eq!(repo.read("src/m1.py"), "def bar_1():\n    return bar(1)\n");
    let requests = fake.requests();
    assert_well_formed(&requests);
    assert!(requests.iter().all(|r| r.body.get("stream").is_none()));
}

#[test]
fn rate_limits_server_errors_and_dropped_connections_are_survived() {
    let repo = foo_repo(2);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, n| match n {
        0 => Reply::Status(
            429,
            vec![("retry-after", "1".into())],
            r#"{"error":"slow down"}"#.into(),
        ),
        1 => Reply::Status(500, vec![], "boom".into()),
        2 => Reply::Status(503, vec![("retry-after", "0".into())], "busy".into()),
        3 => Reply::Drop,
        _ => Reply::Stream(agent(req)),
    });
    let started = Instant::now();
    let run = llm_run(&repo, &fake, &["src", "-j", "1"]);
    run.assert_code(0);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    assert_eq!(repo.read("src/m0.py"), "def bar_0():\n    return bar(0)\n");
    assert_eq!(repo.read("src/m1.py"), "def bar_1():\n    return bar(1)\n");
    let retries: Vec<Value> = repo
        .events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "model_retry")
        .collect();
    // The dropped connection (closed before any answer, as a server closing a kept-alive
    // connection does) is sent again at once, and not counted as a retry.
    assert_eq!(retries.len(), 3, "{retries:?}");
    assert!(retries[0]["reason"].as_str().unwrap().contains("429"));
    assert!(retries[0]["wait_ms"].as_u64().unwrap() >= 1000);
}

#[test]
fn a_429_slows_every_worker_down() {
    let repo = foo_repo(6);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, n| {
        if n == 0 {
            // Answered once every worker has a request in flight.
            let status =
                Reply::Status(429, vec![("retry-after", "0.1".into())], "slow down".into());
            Reply::After(Duration::from_millis(300), Box::new(status))
        } else {
            Reply::After(
                Duration::from_millis(1000),
                Box::new(Reply::Json(agent(req))),
            )
        }
    });
    llm_run(&repo, &fake, &["src", "-j", "6"]).assert_code(0);
    let requests = fake.requests();
    assert_eq!(
        requests[..6].iter().map(|r| r.in_flight).max(),
        Some(6),
        "6 workers at first"
    );
    // The 429 (at 0.3 s) halved the run's limit to 3 while 5 other calls were in flight: the
    // retry waited for a slot (the others end at ~1 s) although its own Retry-After was 0.1 s,
    // and the next requests found at most 4 in flight (3, recovering by one per round of
    // successes), not the 6 of before.
    let waited = requests[6].arrived - requests[0].arrived;
    assert!(
        waited >= Duration::from_millis(800),
        "the retry came back after {waited:?}"
    );
    let later_max = requests[6..12].iter().map(|r| r.in_flight).max().unwrap();
    assert!(later_max <= 4, "{later_max} in flight after the 429");
    assert_eq!(repo.read("src/m5.py"), "def bar_5():\n    return bar(5)\n");
}

#[test]
fn a_client_error_is_not_retried_and_fails_the_task() {
    let repo = foo_repo(1);
    let fake = FakeModel::start(|_, _| Reply::Status(401, vec![], r#"{"error":"bad key"}"#.into()));
    let run = llm_run(&repo, &fake, &["src"]);
    run.assert_code(1);
    assert_eq!(fake.requests().len(), 1);
    let report = repo.report(&run);
    let error = report["tasks"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("HTTP 401") && error.contains("bad key"),
        "{error}"
    );
}

#[test]
fn bad_tool_calls_and_path_escapes_get_errors_and_write_nothing() {
    let repo = foo_repo(1);
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), repo.path.join("escape")).unwrap();
    repo.commit_all("a symlink out");
    let fake = FakeModel::start(|req, _| {
        let file = req.task_files()[0].clone();
        Reply::Json(match req.turn() {
            0 => raw_tool_call("read_file", "{oops"),
            1 => tool_calls(&[
                ("delete_everything", json!({})),
                ("write_file", json!({"path": "../x.py", "content": "pwned"})),
                (
                    "write_file",
                    json!({"path": "/tmp/swarm-pwned.py", "content": "pwned"}),
                ),
                ("read_file", json!({"path": "/etc/passwd"})),
                (
                    "write_file",
                    json!({"path": "escape/pwned.py", "content": "pwned"}),
                ),
                (
                    "write_file",
                    json!({"path": ".git/config", "content": "pwned"}),
                ),
                (
                    "edit_file",
                    json!({"path": "README.md", "old_string": "a", "new_string": "b"}),
                ),
                (
                    "write_file",
                    json!({"path": "other.py", "content": "out of scope"}),
                ),
                (
                    "edit_file",
                    json!({"path": file, "old_string": "foo", "new_string": "bar", "replace_all": true}),
                ),
            ]),
            _ => tool_calls(&[("finish", json!({"status": "done", "summary": "ok"}))]),
        })
    });
    let run = llm_run(&repo, &fake, &["src"]);
    run.assert_code(0);
    let requests = fake.requests();
    assert_well_formed(&requests);
    // Turn 2 saw the error of the malformed call; turn 3 the results of the batch.
    let second = requests[1].messages();
    assert!(
        second.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .starts_with("error: the arguments of read_file are not valid JSON")
    );
    let results: Vec<String> = requests[2].tool_results().into_iter().skip(1).collect();
    assert_eq!(results.len(), 9);
    for r in &results[..8] {
        assert!(r.starts_with("error: "), "{r}");
    }
    assert!(results[8].starts_with("edited src/m0.py"), "{}", results[8]);
    assert!(!repo.path.parent().unwrap().join("x.py").exists());
    assert!(!std::path::Path::new("/tmp/swarm-pwned.py").exists());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(!repo.git(&["config", "--list", "--local"]).contains("pwned"));
    assert!(!repo.path.join("other.py").exists());
    assert_eq!(repo.read("src/m0.py"), "def bar_0():\n    return bar(0)\n");
    assert_eq!(repo.lines(&["ls-files"]), vec!["escape", "src/m0.py"]);
}

#[test]
fn a_model_that_never_finishes_stops_at_max_turns() {
    let repo = foo_repo(1);
    let fake = FakeModel::start(|req, _| {
        Reply::Json(tool_calls(&[(
            "read_file",
            json!({"path": req.task_files()[0]}),
        )]))
    });
    let run = llm_run(&repo, &fake, &["src", "--max-turns", "3"]);
    run.assert_code(1);
    assert_eq!(fake.requests().len(), 3);
    let report = repo.report(&run);
    let t = &report["tasks"][0];
    assert_eq!(t["status"], "failed");
    assert!(
        t["error"]
            .as_str()
            .unwrap()
            .contains("did not call finish within 3 turns"),
        "{t}"
    );
    assert_eq!(t["turns"], 3);
}

#[test]
fn verify_failures_go_back_to_the_model() {
    let repo = foo_repo(1);
    let fake = FakeModel::start(|req, _| {
        let file = req.task_files()[0].clone();
        let last = req.last()["content"].as_str().unwrap_or("").to_string();
        Reply::Json(if last.contains("failed after your change") {
            // The check's output reached the model: fix and finish again.
            assert!(last.contains("still wrong"), "{last}");
            tool_calls(&[
                ("write_file", json!({"path": file, "content": "fixed\n"})),
                ("finish", json!({"status": "done", "summary": "fixed"})),
            ])
        } else {
            tool_calls(&[
                ("write_file", json!({"path": file, "content": "wrong\n"})),
                ("finish", json!({"status": "done", "summary": "first try"})),
            ])
        })
    });
    let verify = r#"if grep -rq wrong src; then echo still wrong; exit 1; fi"#;
    let run = llm_run(&repo, &fake, &["src", "--verify", verify]);
    run.assert_code(0);
    assert_eq!(repo.read("src/m0.py"), "fixed\n");
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(repo.report(&run)["tasks"][0]["summary"], "fixed");
}

#[test]
fn a_task_whose_verify_keeps_failing_is_not_merged() {
    let repo = foo_repo(1);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| {
        if req.last()["content"]
            .as_str()
            .unwrap_or("")
            .contains("failed after your change")
        {
            Reply::Json(tool_calls(&[(
                "finish",
                json!({"status": "done", "summary": "again"}),
            )]))
        } else {
            Reply::Json(agent(req))
        }
    });
    let run = llm_run(
        &repo,
        &fake,
        &["src", "--max-turns", "5", "--verify", "echo nope; exit 3"],
    );
    run.assert_code(1);
    let report = repo.report(&run);
    let t = &report["tasks"][0];
    assert_eq!(t["status"], "failed");
    assert!(
        t["error"]
            .as_str()
            .unwrap()
            .contains("--verify still fails"),
        "{t}"
    );
    assert_eq!(repo.read("src/m0.py"), "def foo_0():\n    return foo(0)\n");
    assert_eq!(repo.swarm_branches().len(), 1, "the branch is kept");
}

/// `answer` with the usage it reports set to `prompt` and `completion` tokens.
fn with_usage(mut answer: Value, prompt: u64, completion: u64) -> Value {
    answer["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion});
    answer
}

#[test]
fn the_token_budget_stops_new_tasks() {
    let repo = foo_repo(4);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Json(with_usage(agent(req), 5000, 1000)));
    // Each turn uses 6,000 tokens; each request reserves its size (under 2,000 tokens) and
    // its 20 output tokens. The first task's 3 turns (18,000) fit; the second task's first
    // request still fits in 20,000 and its answer brings the spend to 24,000; its second is
    // refused, so it stops there, its work not merged (`swarm resume` runs it again), and
    // no other task starts.
    let args = [
        "src",
        "-j",
        "1",
        "--max-tokens",
        "20000",
        "--max-output-tokens",
        "20",
    ];
    let run = llm_run(&repo, &fake, &args);
    run.assert_code(1);
    let report = repo.report(&run);
    let s = statuses(&report);
    assert_eq!(count(&s, "merged"), 1, "{s:?}");
    assert_eq!(count(&s, "skipped"), 3, "{s:?}");
    let tasks = report["tasks"].as_array().unwrap();
    let second = &tasks[1];
    assert_eq!(second["over_budget"], true, "{second}");
    assert_eq!(second["tokens"]["prompt"], 5000, "{second}");
    assert!(
        second["error"].as_str().unwrap().contains(
            "stopped: the run's token budget cannot cover another request (24000 of \
             --max-tokens 20000 used; the request may use"
        ),
        "{second}"
    );
    for skipped in &tasks[2..] {
        assert_eq!(skipped["over_budget"], true, "{skipped}");
        assert!(
            skipped["error"]
                .as_str()
                .unwrap()
                .contains("the run's token budget is spent (24000 of --max-tokens 20000 used)"),
            "{skipped}"
        );
    }
    // Each request asked for at most the 20 output tokens reserved.
    assert!(fake.requests().iter().all(|r| r.body["max_tokens"] == 20));
    assert_eq!(fake.requests().len(), 4);
    assert_eq!(report["totals"]["tokens"]["prompt"], 20000);
    assert_eq!(report["totals"]["requests"], 4);
}

#[test]
fn agents_md_is_given_as_project_context() {
    let repo = foo_repo(1);
    repo.write("AGENTS.md", "Always use four spaces.\n");
    repo.commit_all("agents");
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Json(agent(req)));
    llm_run(&repo, &fake, &["src"]).assert_code(0);
    let first = fake.requests()[0].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(first.contains("Always use four spaces."), "{first}");
    assert!(first.contains("- src/m0.py"), "{first}");
}

#[test]
fn the_api_key_appears_in_no_file_swarm_wrote() {
    let repo = foo_repo(3);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, n| {
        if n == 0 {
            Reply::Status(500, vec![], "transient".into())
        } else {
            Reply::Stream(agent(req))
        }
    });
    let run = llm_run(&repo, &fake, &["src", "--keep", "--json"]);
    run.assert_code(0);
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
    let mut checked = 0;
    let mut stack = vec![repo.path.join(".git")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                checked += 1;
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(KEY),
                    "the key is in {}",
                    path.display()
                );
            }
        }
    }
    assert!(checked > 10);
    let transcript = repo.run_file(
        &run.run_id(),
        &format!(
            "tasks/{}/transcript.jsonl",
            repo.report(&run)["tasks"][0]["id"].as_str().unwrap()
        ),
    );
    assert!(transcript.contains("\"role\":\"tool\""));
}

#[test]
fn no_model_or_no_key_is_refused() {
    let repo = foo_repo(1);
    let run = Run::from(
        repo.swarm_cmd()
            .args(["refactor", "x", ".", "--model", "gpt-4.1-mini"])
            .output()
            .unwrap(),
    );
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("error: no API key for model 'gpt-4.1-mini' at https://api.openai.com/v1"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint: set SWARM_API_KEY"),
        "{}",
        run.stderr
    );
    assert!(!repo.swarm_dir().exists());
    // A local server needs no key.
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Json(agent(req)));
    let run = Run::from(
        repo.swarm_cmd()
            .args([
                "refactor",
                "x",
                ".",
                "--model",
                "local",
                "--base-url",
                &fake.url,
            ])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert_eq!(fake.requests()[0].header("authorization"), None);
}

#[test]
fn a_slow_model_is_cut_off_at_the_task_timeout() {
    let repo = foo_repo(1);
    let fake = FakeModel::start(|_, _| {
        Reply::After(
            Duration::from_secs(8),
            Box::new(Reply::Json(tool_calls(&[]))),
        )
    });
    let started = Instant::now();
    let run = llm_run(&repo, &fake, &["src", "--timeout", "1"]);
    run.assert_code(1);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let report = repo.report(&run);
    assert_eq!(report["tasks"][0]["status"], "timeout");
    assert_eq!(repo.worktrees().len(), 1);
}

#[test]
fn run_commands_need_approval_and_every_decision_is_audited() {
    let repo = foo_repo(1);
    repo.write("swarm.toml", "[sandbox]\nallow_run = [\"grep *\"]\n");
    repo.commit_all("allow grep");
    let script = |req: &Request, _| {
        Reply::Json(match req.turn() {
            0 => tool_calls(&[
                ("run", json!({"command": "grep -c foo src/m0.py"})),
                ("run", json!({"command": "rm -rf src"})),
            ]),
            _ => tool_calls(&[(
                "finish",
                json!({"status": "no_change", "summary": "looked"}),
            )]),
        })
    };
    let fake = FakeModel::start(script);
    llm_run(&repo, &fake, &["src"]).assert_code(0);
    let requests = fake.requests();
    let names: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"run"), "{names:?}");
    let results = requests[1].tool_results();
    assert_eq!(results[0], "[exit status 0]\n2\n");
    assert!(
        results[1].starts_with("error: the command `rm -rf src` is not allowed (allowed: grep *)"),
        "{}",
        results[1]
    );
    assert!(repo.path.join("src/m0.py").exists());
    let run_id = std::fs::read_dir(repo.swarm_dir().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let events = repo.run_file(&run_id.to_string_lossy(), "events.jsonl");
    let approvals: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == "approval")
        .collect();
    assert_eq!(approvals.len(), 2, "{approvals:?}");
    assert_eq!(approvals[0]["allowed"], true);
    assert_eq!(approvals[0]["rule"], "grep *");
    assert_eq!(approvals[0]["command"], "grep -c foo src/m0.py");
    assert_eq!(approvals[1]["allowed"], false);
    assert!(approvals[1]["task"].is_string());

    // Without an allow-list the tool is not offered, and --allow-run allows anything.
    let fake = FakeModel::start(script);
    let repo = foo_repo(1);
    llm_run(&repo, &fake, &["src", "--allow-run"]).assert_code(0);
    let results = fake.requests()[1].tool_results();
    assert!(
        results[1].starts_with("[exit status 0]"),
        "rm ran: {}",
        results[1]
    );
    // It ran in the task's worktree; deleting the task's own file is in scope, so it merged.
    assert!(!repo.path.join("src/m0.py").exists());
}

#[test]
fn the_built_in_workers_tokens_are_priced_for_the_cost_budget() {
    let repo = foo_repo(4);
    // $100 a million tokens: each turn's 6,000 cost $0.60, each task's 3 turns $1.80. A
    // request reserves its size and its 20 output tokens (under $0.20). The second task's
    // first request fits in $2.00 and its answer brings the spend to $2.40: it stops there,
    // and no third starts.
    repo.user_config("[model]\nprice = { prompt = 100, completion = 100 }\n");
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::Json(with_usage(agent(req), 5000, 1000)));
    let args = [
        "src",
        "-j",
        "1",
        "--max-cost",
        "2",
        "--max-output-tokens",
        "20",
    ];
    let run = llm_run(&repo, &fake, &args);
    run.assert_code(1);
    let report = repo.report(&run);
    let s = statuses(&report);
    assert_eq!(count(&s, "merged"), 1, "{s:?}");
    assert_eq!(count(&s, "skipped"), 3, "{s:?}");
    let tasks = report["tasks"].as_array().unwrap();
    let cost = |t: &Value| t["cost_usd"].as_f64().unwrap();
    let first = tasks.iter().find(|t| t["status"] == "merged").unwrap();
    assert!((cost(first) - 1.8).abs() < 1e-9, "{first}");
    assert!((cost(&tasks[1]) - 0.6).abs() < 1e-9, "{}", tasks[1]);
    assert!((report["totals"]["cost_usd"].as_f64().unwrap() - 2.4).abs() < 1e-9);
    assert!(run.stderr.contains("$2.40 spent"), "{}", run.stderr);
}
