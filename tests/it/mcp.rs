//! `swarm mcp` driven by a real MCP client: the Python SDK from PyPI (`mcp`), through
//! `tests/it/mcp/client.py`, which makes the tool calls a spec lists and prints what came
//! back. The results are checked with the git CLI as the oracle.
//!
//! These tests need the SDK: `.ci/run` installs it (pinned) into `target/mcp-client` and sets
//! `SWARM_TEST_MCP_PYTHONPATH`; `cargo test` lists them as ignored, and `cargo test --test it
//! mcp:: -- --ignored` runs them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{SED_FOO_BAR, TestRepo, hermetic};

/// Where the Python SDK is; the test fails without it.
fn sdk() -> String {
    std::env::var("SWARM_TEST_MCP_PYTHONPATH").unwrap_or_else(|_| {
        panic!(
            "the Python MCP SDK is not installed: `pip install --target DIR mcp==2.3.0` and \
             set SWARM_TEST_MCP_PYTHONPATH=DIR (.ci/run does)"
        )
    })
}

/// Runs `calls` against `swarm mcp SERVER_ARGS` in `repo` with the real client; what it saw.
fn session(repo: &TestRepo, server_args: &[&str], calls: Value) -> Value {
    let args = [&["mcp"][..], server_args].concat();
    let spec = json!({
        "command": env!("CARGO_BIN_EXE_swarm"),
        "args": args,
        "cwd": &repo.path,
        "calls": calls,
    });
    let file = repo.home.join("mcp-spec.json");
    std::fs::write(&file, spec.to_string()).unwrap();
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp/client.py");
    let mut cmd = Command::new("python3");
    hermetic(&mut cmd, &repo.home);
    let out = cmd
        .arg(client)
        .arg(&file)
        .env("PYTHONPATH", sdk())
        .env("DEPLOY_SERVICE_TOKEN", SECRET)
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The JSON answer of call `n`, which must have succeeded.
fn answer(seen: &Value, n: usize) -> Value {
    let call = &seen["calls"][n];
    assert_eq!(
        call["is_error"], false,
        "{}: {}",
        call["name"], call["text"]
    );
    serde_json::from_str(call["text"].as_str().unwrap()).unwrap()
}

/// The refusal of call `n`, which must have been refused.
fn refusal(seen: &Value, n: usize) -> String {
    let call = &seen["calls"][n];
    assert_eq!(call["is_error"], true, "{}: {}", call["name"], call["text"]);
    call["text"].as_str().unwrap().to_string()
}

/// A secret of the server's environment (a name swarm treats as a secret).
const SECRET: &str = "mcp-secret-value-7c41d9e2";

fn four_files() -> TestRepo {
    TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("c.txt", "foo\n"),
        ("d.txt", "foo\n"),
    ])
}

/// Waits for run `id` to end, by its report; its state.
fn wait_for_end(repo: &TestRepo, id: &str) -> String {
    let started = Instant::now();
    loop {
        let status = repo.swarm(&["status", id, "--json"]);
        if let Ok(report) = serde_json::from_str::<Value>(&status.stdout)
            && report["state"] != "running"
        {
            return report["state"].as_str().unwrap_or_default().to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{}",
            status.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs the Python MCP SDK: .ci/run installs it"]
fn an_agent_plans_starts_follows_and_reads_a_run() {
    let repo = four_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let slow = format!("sleep 0.6; {SED_FOO_BAR}");
    let seen = session(
        &repo,
        &["--max-jobs", "4"],
        json!([
            {"name": "plan", "arguments": {"instruction": "foo to bar", "pathspecs": ["*.txt"],
                                           "exec": SED_FOO_BAR}},
            {"name": "refactor", "arguments": {"instruction": "foo to bar", "pathspecs": ["*.txt"],
                                               "exec": slow, "jobs": 1, "wait_seconds": 60}},
            {"name": "status", "arguments": {}},
        ]),
    );
    let tools = [
        "cancel", "clean", "diff", "merge", "plan", "refactor", "result", "resume", "status",
    ];
    assert_eq!(seen["tools"], json!(tools));
    // The server says its own name, not its SDK's.
    assert_eq!(
        seen["server"],
        json!({"name": "swarm", "version": env!("CARGO_PKG_VERSION")})
    );
    let plan = answer(&seen, 0);
    assert_eq!(plan["tasks"], 4);
    assert_eq!(plan["settings"]["run"]["exec"], SED_FOO_BAR);
    let result = answer(&seen, 1);
    assert_eq!(result["state"], "finished", "{result}");
    assert_eq!(result["merged"]["count"], 4, "{result}");
    assert!(
        result["diffstat"]
            .as_str()
            .unwrap()
            .contains("4 files changed"),
        "{result}"
    );
    let progress = seen["calls"][1]["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress notification");
    assert_eq!(progress[0]["total"], 4.0);
    // Planning ran nothing: the one run is the refactor's.
    let runs = answer(&seen, 2);
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["run_id"], result["run_id"]);
    // The merged tree is the git oracle's.
    let files = ["a.txt", "b.txt", "c.txt", "d.txt"];
    assert_eq!(
        repo.git(&["rev-parse", "main^{tree}"]),
        repo.oracle_tree(&base, &files, SED_FOO_BAR)
    );
    // One task's diff, a page at a time.
    let run = result["run_id"].as_str().unwrap();
    let task = result["merged"]["ids"][0].as_str().unwrap();
    let seen = session(
        &repo,
        &[],
        json!([
            {"name": "diff", "arguments": {"run_id": run, "task": task, "limit": 40}},
            {"name": "diff", "arguments": {"run_id": run, "task": task, "offset": 40}},
            {"name": "result", "arguments": {"run_id": run}},
            {"name": "status", "arguments": {"run_id": run, "events_after": 0}},
        ]),
    );
    // The run's events, for a client that polls.
    let status = answer(&seen, 3);
    let kinds: Vec<&str> = status["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    assert_eq!(status["next_event"], kinds.len());
    let (first, rest) = (answer(&seen, 0), answer(&seen, 1));
    assert_eq!(first["next_offset"], 40);
    let whole = format!(
        "{}{}",
        first["text"].as_str().unwrap(),
        rest["text"].as_str().unwrap()
    );
    assert!(whole.contains("-foo\n+bar"), "{whole}");
    // The pages make the diff the command line prints (git's own, tested against git).
    assert_eq!(whole, repo.swarm(&["diff", run, task]).stdout);
    let result = answer(&seen, 2);
    assert_eq!(result["run_id"], run);
    // The run's report page, written where the result says, with every task of the run.
    let page = std::fs::read_to_string(result["page"].as_str().unwrap()).unwrap();
    assert!(page.contains(&format!("<title>swarm run {run}</title>")));
    assert_eq!(page.matches(r#""status":"merged""#).count(), 4);
    // status lists what did not merge only: here nothing.
    assert_eq!(status["tasks"], json!([]), "{status}");
}

#[test]
#[ignore = "needs the Python MCP SDK: .ci/run installs it"]
fn a_run_outlives_the_server_that_started_it() {
    let repo = four_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let slow = format!("sleep 1; {SED_FOO_BAR}");
    // The client ends (and with it the server) right after the run starts.
    let seen = session(
        &repo,
        &[],
        json!([{"name": "refactor", "arguments": {"instruction": "foo to bar",
                                                  "exec": slow, "jobs": 1}}]),
    );
    let started = answer(&seen, 0);
    assert_eq!(started["state"], "running", "{started}");
    let run = started["run_id"].as_str().unwrap();
    assert_eq!(wait_for_end(&repo, run), "finished");
    let report: Value = serde_json::from_str(&repo.run_file(run, "report.json")).unwrap();
    assert_eq!(report["totals"]["merged"], 4, "{report}");
    let files = ["a.txt", "b.txt", "c.txt", "d.txt"];
    assert_eq!(
        repo.git(&["rev-parse", "main^{tree}"]),
        repo.oracle_tree(&base, &files, SED_FOO_BAR)
    );
    // A new server picks the run up; its launch log goes with the run.
    let logs = || -> Vec<String> {
        std::fs::read_dir(repo.swarm_dir().join("mcp"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(run))
            .collect()
    };
    assert_eq!(logs().len(), 2, "{:?}", logs());
    let seen = session(
        &repo,
        &[],
        json!([{"name": "result", "arguments": {"run_id": run}},
               {"name": "clean", "arguments": {"run_id": run}}]),
    );
    assert_eq!(answer(&seen, 0)["merged"]["count"], 4);
    assert_eq!(answer(&seen, 1)["records"], 1);
    assert_eq!(logs(), Vec::<String>::new());
}

#[test]
#[ignore = "needs the Python MCP SDK: .ci/run installs it"]
fn a_call_may_narrow_what_the_server_allows_never_widen_it() {
    let repo = four_files();
    let victim = repo.victim();
    let escape = format!("echo x > {}/pwned; {SED_FOO_BAR}", victim.display());
    let seen = session(
        &repo,
        &["--max-jobs", "2", "--max-cost", "1"],
        json!([
            {"name": "refactor", "arguments": {"instruction": "x", "exec": "true", "sandbox": "off"}},
            {"name": "refactor", "arguments": {"instruction": "x", "exec": "true", "network": true}},
            {"name": "refactor", "arguments": {"instruction": "x", "exec": "true",
                                               "pathspecs": ["../outside.txt"]}},
            {"name": "refactor", "arguments": {"instruction": "x", "exec": "true", "jobs": 16}},
            {"name": "refactor", "arguments": {"instruction": "x", "exec": "true", "max_cost": 50}},
            {"name": "refactor", "arguments": {"instruction": "x", "agent": "claude"}},
            // Allowed: confined exactly as on the command line.
            {"name": "refactor", "arguments": {"instruction": "x", "pathspecs": ["a.txt"],
                                               "exec": escape, "wait_seconds": 60}},
            // A worker that prints a secret of the server's environment and fails.
            {"name": "refactor", "arguments": {"instruction": "x", "pathspecs": ["b.txt"],
                "exec": format!("echo {SECRET}; exit 3"), "wait_seconds": 60}},
            {"name": "plan", "arguments": {"instruction": "x", "exec": "true",
                                           "wait_seconds": 5}},
        ]),
    );
    for call in seen["calls"].as_array().unwrap() {
        assert!(!call["text"].as_str().unwrap().contains(SECRET), "{call}");
    }
    assert!(refusal(&seen, 8).contains("a plan runs nothing"));
    let failed = answer(&seen, 7);
    assert_eq!(failed["failures"][0]["status"], "failed", "{failed}");
    // The worker did print it: what came back says where it was.
    let tail = failed["failures"][0]["output_tail"].as_str().unwrap();
    assert!(tail.contains("[redacted DEPLOY_SERVICE_TOKEN]"), "{tail}");
    assert!(refusal(&seen, 0).contains("unknown field `sandbox`"));
    assert!(refusal(&seen, 1).contains("unknown field `network`"));
    assert!(refusal(&seen, 2).contains("stay inside"));
    assert!(refusal(&seen, 3).contains("at most 2"));
    assert!(refusal(&seen, 4).contains("at most 1 USD"));
    assert!(refusal(&seen, 5).contains("--allow-agent"));
    // Nothing ran for the refused calls: one run, the allowed one, whose worker could not
    // write outside its worktree.
    let result = answer(&seen, 6);
    assert_eq!(result["state"], "finished", "{result}");
    assert!(
        !victim.join("pwned").exists(),
        "a write landed outside the worktree"
    );
    // It named no `jobs`: it got the run's default (4), held to the server's 2.
    let run = result["run_id"].as_str().unwrap();
    let started = repo
        .run_file(run, "events.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["kind"] == "run_started")
        .unwrap();
    assert_eq!(started["jobs"], 2, "{started}");
    let runs = repo.swarm(&["status"]);
    assert_eq!(runs.stdout.lines().count(), 3, "{}", runs.stdout);
}

#[test]
#[ignore = "needs the Python MCP SDK: .ci/run installs it"]
fn a_run_is_cancelled_then_resumed_and_a_dry_run_merged() {
    let repo = four_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let slow = format!("sleep 1; {SED_FOO_BAR}");
    let seen = session(
        &repo,
        &[],
        json!([{"name": "refactor", "arguments": {"instruction": "foo to bar",
                                                  "exec": slow, "jobs": 1}}]),
    );
    let run = answer(&seen, 0)["run_id"].as_str().unwrap().to_string();
    let seen = session(
        &repo,
        &[],
        json!([{"name": "cancel", "arguments": {"run_id": run}}]),
    );
    assert_eq!(answer(&seen, 0)["stopping"], true);
    assert_eq!(wait_for_end(&repo, &run), "interrupted");
    // A resume may ask for other jobs, within the server's cap; merge runs no worker.
    let seen = session(
        &repo,
        &["--max-jobs", "3"],
        json!([
            {"name": "resume", "arguments": {"run_id": run, "jobs": 4}},
            {"name": "merge", "arguments": {"run_id": run, "jobs": 2}},
            {"name": "resume", "arguments": {"run_id": run, "jobs": 3, "wait_seconds": 60}},
        ]),
    );
    assert!(refusal(&seen, 0).contains("at most 3 (the server's limit), not 4"));
    assert!(refusal(&seen, 1).contains("jobs is for resume"));
    let resumed = answer(&seen, 2);
    assert_eq!(resumed["state"], "finished", "{resumed}");
    assert_eq!(resumed["merged"]["count"], 4, "{resumed}");
    let jobs: Vec<Value> = repo
        .run_file(&run, "events.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "run_started")
        .map(|e| e["jobs"].clone())
        .collect();
    assert_eq!(
        jobs,
        [json!(1), json!(3)],
        "the run's own, then the resume's"
    );
    let files = ["a.txt", "b.txt", "c.txt", "d.txt"];
    let oracle = repo.oracle_tree(&base, &files, SED_FOO_BAR);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);

    // A dry run merges nothing until `merge`.
    let repo = four_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let seen = session(
        &repo,
        &[],
        json!([{"name": "refactor", "arguments": {"instruction": "foo to bar",
            "exec": SED_FOO_BAR, "dry_run": true, "wait_seconds": 60}}]),
    );
    let dry = answer(&seen, 0);
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), base, "{dry}");
    assert_eq!(dry["failures"], json!([]), "{dry}");
    assert!(
        dry["next"].as_str().unwrap().contains("call merge"),
        "{dry}"
    );
    let run = dry["run_id"].as_str().unwrap();
    let seen = session(
        &repo,
        &[],
        json!([{"name": "merge", "arguments": {"run_id": run, "wait_seconds": 60}}]),
    );
    assert_eq!(answer(&seen, 0)["merged"]["count"], 4);
    let oracle = repo.oracle_tree(&base, &files, SED_FOO_BAR);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
}

/// A resume corrects what the failures name, as `swarm resume` does: `ok_exit_codes` for a
/// codemod that exits 1 when it rewrote its file, `scope` for one that wrote other files;
/// what cannot be a setting is refused, and merge takes neither.
#[test]
#[ignore = "needs the Python MCP SDK: .ci/run installs it"]
fn a_resume_corrects_the_scope_and_the_statuses_of_success() {
    let repo = four_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let rewrites = format!("{SED_FOO_BAR}; exit 1");
    let seen = session(
        &repo,
        &[],
        json!([{"name": "refactor", "arguments": {"instruction": "foo to bar",
            "exec": rewrites, "wait_seconds": 60}}]),
    );
    let failed = answer(&seen, 0);
    assert_eq!(failed["failures"].as_array().unwrap().len(), 4, "{failed}");
    assert!(
        failed["failures"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("--ok-exit-codes 0,1"),
        "{failed}"
    );
    let run = failed["run_id"].as_str().unwrap();
    let seen = session(
        &repo,
        &[],
        json!([
            {"name": "resume", "arguments": {"run_id": run, "ok_exit_codes": [0, 300]}},
            {"name": "resume", "arguments": {"run_id": run, "scope": "everything"}},
            {"name": "merge", "arguments": {"run_id": run, "scope": "any"}},
            {"name": "resume", "arguments": {"run_id": run, "failed": true,
                "ok_exit_codes": [0, 1], "scope": "any", "wait_seconds": 60}},
        ]),
    );
    assert!(refusal(&seen, 0).contains("300 is not an exit status"));
    assert!(refusal(&seen, 1).contains("scope: unknown scope 'everything'"));
    assert!(refusal(&seen, 2).contains("they are for resume"));
    let resumed = answer(&seen, 3);
    assert_eq!(resumed["merged"]["count"], 4, "{resumed}");
    let files = ["a.txt", "b.txt", "c.txt", "d.txt"];
    let oracle = repo.oracle_tree(&base, &files, SED_FOO_BAR);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
}

/// End to end: the real Claude Code CLI, with swarm as its MCP server, against a local fake
/// of the Messages API scripted as a parent agent that calls `refactor`, then `result`.
#[test]
#[ignore = "needs the real Claude Code CLI: .ci/run installs it"]
fn claude_code_delegates_a_refactor_to_swarm_over_mcp() {
    use crate::fake_agents::{Api, FakeAgentApi};
    let dir = crate::agents::agent_dir("claude");
    let repo = four_files();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let fake = FakeAgentApi::start(Api::Delegates);
    let config = repo.home.join("mcp.json");
    let servers = json!({"mcpServers": {"swarm": {"command": env!("CARGO_BIN_EXE_swarm"),
                                                  "args": ["mcp"]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let mut cmd = Command::new(dir.join("claude"));
    hermetic(&mut cmd, &repo.home);
    let out = cmd
        .current_dir(&repo.path)
        .env("PATH", crate::agents::path_with(&dir))
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", fake.port),
        )
        .env("ANTHROPIC_API_KEY", "sk-ant-test-delegate")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .args(["-p", "Rename foo to bar in every .txt file, with swarm."])
        .args([
            "--model",
            "claude-fake-1",
            "--strict-mcp-config",
            "--mcp-config",
        ])
        .arg(&config)
        .args(["--allowedTools", "mcp__swarm__refactor mcp__swarm__result"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The parent quoted the result swarm gave it: every task merged.
    assert!(
        said.contains("swarm says:") && said.contains("4 merged"),
        "{said}"
    );
    let files = ["a.txt", "b.txt", "c.txt", "d.txt"];
    assert_eq!(
        repo.git(&["rev-parse", "main^{tree}"]),
        repo.oracle_tree(&base, &files, SED_FOO_BAR)
    );
    // It called the two tools, in order.
    let called: Vec<String> = fake
        .requests()
        .iter()
        .flat_map(|r| super::fake_agents::tool_results_of(&r.body))
        .collect();
    assert!(called.iter().any(|id| id == "toolu_refactor"), "{called:?}");
    assert!(called.iter().any(|id| id == "toolu_result"), "{called:?}");
}

/// An engine error reaches the model as it reaches the terminal: the same message and the
/// same hint, word for word.
#[test]
#[ignore = "needs the Python MCP SDK: .ci/run installs it"]
fn an_engine_errors_hint_reaches_the_model_as_it_reaches_the_terminal() {
    let repo = four_files();
    let run = repo.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = serde_json::from_str::<Value>(&run.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let seen = session(
        &repo,
        &[],
        json!([
            {"name": "status", "arguments": {"run_id": "2099"}},
            {"name": "diff", "arguments": {"run_id": id, "task": "no-such-task"}},
        ]),
    );
    for (n, args) in [
        (0, vec!["status", "2099"]),
        (1, vec!["diff", &id, "no-such-task"]),
    ] {
        let terminal = repo.swarm(&args);
        assert_eq!(terminal.code, 2, "{}", terminal.stderr);
        assert!(terminal.stderr.contains("\nhint: "), "{}", terminal.stderr);
        assert_eq!(refusal(&seen, n), terminal.stderr.trim_end(), "{args:?}");
    }
}

/// `refactor` with `best_of`: every task gets candidates, and `result` says how many tasks
/// needed more than one (those whose first candidate failed its check).
#[test]
#[ignore = "needs the Python MCP SDK: .ci/run installs it"]
fn a_model_asks_for_the_best_of_three_and_reads_how_many_needed_it() {
    let repo = four_files();
    // The first candidate ends first (the others wait 2 s), so agreement never stops it
    // unfinished: it fails on b, c and d, and passes on a.
    let flaky = r#"if [ "$SWARM_CANDIDATE" = 1 ] && [ "$SWARM_FILE" != a.txt ]; then echo broken > "$SWARM_FILE"; elif [ "$SWARM_CANDIDATE" = 1 ]; then sed -i s/foo/bar/ "$SWARM_FILE"; else sleep 2; sed -i s/foo/bar/ "$SWARM_FILE"; fi"#;
    let seen = session(
        &repo,
        &[],
        json!([
            {"name": "refactor", "arguments": {"instruction": "foo to bar", "pathspecs": ["*.txt"],
                                               "exec": flaky, "verify": "! grep -q broken *.txt",
                                               "best_of": 3, "wait_seconds": 60}},
            {"name": "refactor", "arguments": {"instruction": "x", "exec": "true", "best_of": 9}},
        ]),
    );
    let result = answer(&seen, 0);
    assert_eq!(result["state"], "finished", "{result}");
    assert_eq!(result["merged"]["count"], 4, "{result}");
    assert_eq!(result["needed_more_than_one_candidate"], 3, "{result}");
    assert!(result["candidates_run"].as_u64().unwrap() >= 8, "{result}");
    for f in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        assert_eq!(repo.git(&["show", &format!("main:{f}")]), "bar", "{f}");
    }
    let refused = refusal(&seen, 1);
    assert!(refused.contains("at most 8 candidates"), "{refused}");
}
