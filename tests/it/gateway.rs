//! swarm's model gateway, with stand-in agents (user-defined `[agents.NAME]` with
//! `api = "anthropic"` whose command calls the API with curl) against the local fake of the
//! Anthropic Messages API: budgets on what the API answered, running agents cut when a
//! budget is spent, a repository that cannot raise a budget, rate limits waited out for
//! everyone, and servers on the host's loopback reached under the default sandbox.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::fake_agents::{Api, FakeAgentApi};

const KEY: &str = "sk-ant-test-gateway-7c2e91d4";

/// One Messages request through the gateway, with the agent's (placeholder) key.
const ASK: &str = r#"curl -sS -m 30 -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' -d '{"model":"claude-priced","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages""#;

/// An agent that asks the API once (the fake answers 1,000 tokens in and 50 out: $0.40 at
/// these prices), edits its file, and says it spent -$1,000 (which counts for nothing).
fn priced_agent(exec_before_edit: &str) -> String {
    format!(
        r#"
[agents.priced]
exec = '''{exec_before_edit} sed -i s/foo/bar/ "$SWARM_FILE"; echo '{{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"done","total_cost_usd":-1000,"usage":{{"input_tokens":1,"output_tokens":1}}}}' '''
binary = "curl"
api = "anthropic"
output = "claude-stream-json"

[model.prices]
"claude-" = {{ prompt = 250, completion = 3000 }}
"#
    )
}

/// `swarm ARGS` with the API's key and endpoint in swarm's environment.
fn with_api(repo: &TestRepo, fake: &FakeAgentApi, args: &[&str]) -> Run {
    Run::from(
        repo.swarm_cmd()
            .env("ANTHROPIC_API_KEY", KEY)
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", fake.port),
            )
            .args(args)
            .output()
            .unwrap(),
    )
}

fn files(n: usize) -> Vec<(String, &'static str)> {
    (0..n).map(|i| (format!("f{i}.txt"), "foo\n")).collect()
}

fn statuses(report: &Value) -> Vec<String> {
    report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_cost_budget_counts_what_the_api_answered_not_what_the_agent_says() {
    let repo = TestRepo::with_files(&files(5));
    repo.user_config(&priced_agent(&format!("{ASK} > /dev/null;")));
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    let args = [
        "refactor",
        "x",
        ".",
        "--agent",
        "priced",
        "-j",
        "1",
        "--max-cost",
        "1",
        "-y",
    ];
    let run = with_api(&repo, &fake, &args);
    run.assert_code(1);
    let report = repo.report(&run);
    // Each request reserves a few cents (its size, its max_tokens of 10) and is settled at
    // what the API answered, $0.40: $0.40, $0.80, then the third request still fits the
    // dollar left and is let through, and its answer brings the spend to $1.20. Its task
    // finished cleanly and keeps its change; no fourth task starts. Each agent said it
    // spent -$1,000.
    let merged = statuses(&report).iter().filter(|s| *s == "merged").count();
    assert_eq!(merged, 3, "{report}");
    for t in report["tasks"].as_array().unwrap() {
        match t["status"].as_str().unwrap() {
            "merged" => {
                assert_eq!(t["tokens"]["prompt"], 1000, "{t}");
                assert_eq!(t["tokens"]["completion"], 50, "{t}");
                assert_eq!(t["requests"], 1, "{t}");
                assert!((t["cost_usd"].as_f64().unwrap() - 0.40).abs() < 1e-9, "{t}");
            }
            _ => {
                assert_eq!(t["status"], "skipped", "{t}");
                assert_eq!(t["over_budget"], true, "{t}");
                let error = t["error"].as_str().unwrap();
                assert!(
                    error.contains("cost budget is spent ($1.20 of --max-cost $1.00)"),
                    "{error}"
                );
            }
        }
    }
    // A negative cost is not kept even as what the agent reported.
    assert_eq!(report["tasks"][0]["reported"]["turns"], 1);
    assert_eq!(report["tasks"][0]["reported"].get("cost_usd"), None);
    assert!((report["totals"]["cost_usd"].as_f64().unwrap() - 1.2).abs() < 1e-9);
    assert_eq!(report["totals"]["requests"], 3);
    assert!(run.stderr.contains("$1.20 spent"), "{}", run.stderr);
    // Every request reached the API with the real key, never the agent's placeholder.
    for r in fake.requests() {
        assert_eq!(r.header("x-api-key"), Some(KEY));
    }
    // What the gateway metered is in the events, answer by answer.
    let usage: Vec<Value> = repo
        .events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "model_usage")
        .collect();
    assert_eq!(usage.len(), 3);
    assert_eq!(usage[0]["model"], "claude-priced");
    assert_eq!(usage[0]["basis"], "metered");

    // A larger budget finishes the rest, counting on from what the run spent.
    let again = with_api(&repo, &fake, &["resume", &run.run_id(), "--max-cost", "5"]);
    again.assert_code(0);
    let report = repo.report(&again);
    assert!(statuses(&report).iter().all(|s| s == "merged"), "{report}");
    assert!((report["totals"]["cost_usd"].as_f64().unwrap() - 2.0).abs() < 1e-9);
    for i in 0..5 {
        assert_eq!(repo.git(&["show", &format!("HEAD:f{i}.txt")]), "bar");
    }
}

#[test]
fn a_request_the_budget_cannot_cover_stops_its_agent_and_finished_work_is_kept() {
    let repo = TestRepo::with_files(&files(3));
    // Each agent asks (1,050 tokens metered; each request reserves about 30: its size, its
    // max_tokens of 10), edits, asks again, and goes on waiting if that was refused. Under
    // 3,170: the first agent's two requests fit (2,100), and it merges; the second agent's
    // first one brings the spend to 3,150, so its second is refused (402), which stops it
    // at once, its edit not merged. No third task starts.
    let agent = format!(
        r#"{ASK} > /dev/null; sed -i 's/foo/bar/' "$SWARM_FILE"; case "$({ASK} -w " status=%{{http_code}}")" in *status=402*) sleep 5 & wait;; esac;"#
    );
    repo.user_config(&priced_agent(&agent).replace(r#"sed -i s/foo/bar/ "$SWARM_FILE";"#, ""));
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    let started = Instant::now();
    let args = [
        "refactor",
        "x",
        ".",
        "--agent",
        "priced",
        "-j",
        "1",
        "--max-run-tokens",
        "3170",
        "-y",
    ];
    let run = with_api(&repo, &fake, &args);
    run.assert_code(1);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the refused agent was not stopped"
    );
    let report = repo.report(&run);
    let tasks = report["tasks"].as_array().unwrap();
    // The first task: both its requests were let through; it finished and merged though
    // its second answer brought the spend to 2,100.
    let merged: Vec<&Value> = tasks.iter().filter(|t| t["status"] == "merged").collect();
    assert_eq!(merged.len(), 1, "{report}");
    assert_eq!(merged[0]["requests"], 2, "{report}");
    let stopped: Vec<&Value> = tasks.iter().filter(|t| t["requests"] == 1).collect();
    assert_eq!(stopped.len(), 1, "{report}");
    assert_eq!(stopped[0]["status"], "skipped", "{report}");
    assert_eq!(stopped[0]["over_budget"], true, "{report}");
    let error = stopped[0]["error"].as_str().unwrap();
    let why = "the run's token budget cannot cover another request (3150 of --max-tokens 3170 used";
    assert!(error.contains(why), "{error}");
    // The agent was answered 402 with the reason, a `gateway_refused` event.
    let refused: Vec<Value> = repo
        .events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "gateway_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["status"], 402);
    assert_eq!(refused[0]["task"], stopped[0]["id"]);
    assert!(
        refused[0]["reason"].as_str().unwrap().contains(why),
        "{refused:?}"
    );
    assert!(
        tasks
            .iter()
            .all(|t| t["status"] == "merged" || t["over_budget"] == true),
        "{report}"
    );
    let file = |t: &Value| t["files"][0].as_str().unwrap().to_string();
    assert_eq!(
        repo.git(&["show", &format!("HEAD:{}", file(merged[0]))]),
        "bar"
    );
    assert_eq!(
        repo.git(&["show", &format!("HEAD:{}", file(stopped[0]))]),
        "foo"
    );
    assert_eq!(fake.requests().len(), 3);
    let again = with_api(
        &repo,
        &fake,
        &["resume", &run.run_id(), "--max-tokens", "100000"],
    );
    again.assert_code(0);
    for i in 0..3 {
        assert_eq!(repo.git(&["show", &format!("HEAD:f{i}.txt")]), "bar");
    }
}

#[test]
fn the_repositorys_swarm_toml_cannot_raise_a_budget_or_lower_a_price() {
    let mut files = files(3);
    files.push((
        "swarm.toml".into(),
        "[run]\nmax_cost = 100000.0\n\n[model.prices]\n\"claude-\" = { prompt = 0, completion = 0 }\n",
    ));
    let repo = TestRepo::with_files(&files);
    repo.user_config(&format!(
        "{}\n[run]\nmax_cost = 0.5\n",
        priced_agent(&format!("{ASK} > /dev/null;"))
    ));
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    let run = with_api(
        &repo,
        &fake,
        &[
            "refactor", "x", "f*.txt", "--agent", "priced", "-j", "1", "-y",
        ],
    );
    run.assert_code(1);
    for key in ["[run] max_cost = 100000", "[model.prices] \"claude-\""] {
        assert!(
            run.stderr.contains(&format!("swarm.toml sets {key}")),
            "{key}: {}",
            run.stderr
        );
    }
    let report = repo.report(&run);
    // $0.40; the second request still fits the $0.10 left and brings the spend to $0.80;
    // no third task starts: the user's $0.50 holds (at the repository's price of nothing,
    // or its budget, all three would merge).
    let merged = statuses(&report).iter().filter(|s| *s == "merged").count();
    assert_eq!(merged, 2, "{report}");
    assert!((report["totals"]["cost_usd"].as_f64().unwrap() - 0.8).abs() < 1e-9);
}

#[test]
fn budgets_need_spend_that_can_be_metered_and_priced() {
    let repo = TestRepo::with_files(&files(1));
    repo.user_config(&priced_agent(""));
    // No key in swarm's environment: the agent would use its own login, unmetered.
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "--agent",
        "priced",
        "--max-cost",
        "1",
        "-y",
    ]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("the spend of --agent priced cannot be metered (none of ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN is set"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint: set its API key"),
        "{}",
        run.stderr
    );
    // A cost budget without a price.
    repo.user_config(&priced_agent("").replace("[model.prices]", "[model.extra_body]"));
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    let run = with_api(
        &repo,
        &fake,
        &[
            "refactor",
            "x",
            ".",
            "--agent",
            "priced",
            "--max-cost",
            "1",
            "-y",
        ],
    );
    run.assert_code(2);
    assert!(run.stderr.contains("no price is set"), "{}", run.stderr);
    assert!(!repo.swarm_dir().exists(), "a refused run wrote something");
}

#[test]
fn rate_limits_are_waited_out_by_the_gateway_for_every_agent() {
    let repo = TestRepo::with_files(&files(4));
    repo.user_config(&priced_agent(&format!("{ASK} > /dev/null;")));
    // The first three requests get a 429 with retry-after: 1.
    let fake = FakeAgentApi::start(Api::Throttled(3));
    let run = with_api(
        &repo,
        &fake,
        &["refactor", "x", ".", "--agent", "priced", "-j", "4", "-y"],
    );
    run.assert_code(0);
    let report = repo.report(&run);
    assert!(statuses(&report).iter().all(|s| s == "merged"), "{report}");
    assert_eq!(report["totals"]["requests"], 4, "{report}");
    let retries: Vec<Value> = repo
        .events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "model_retry")
        .collect();
    assert_eq!(retries.len(), 3, "{retries:?}");
    assert!(
        retries[0]["reason"]
            .as_str()
            .unwrap()
            .contains("HTTP 429 (swarm's gateway sends it again)"),
        "{retries:?}"
    );
}

/// A plain-HTTP server on the host's loopback, as Ollama or llama-server would be.
#[test]
fn agents_reach_a_model_server_on_the_hosts_loopback_under_the_default_sandbox() {
    let repo = TestRepo::with_files(&files(1));
    repo.user_config(&priced_agent(&format!("{ASK} > /dev/null;")));
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    // The base URL alone (no key): the gateway forwards to localhost.
    let run = Run::from(
        repo.swarm_cmd()
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://localhost:{}", fake.port),
            )
            .args(["refactor", "x", ".", "--agent", "priced", "-y"])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert_eq!(repo.report(&run)["tasks"][0]["requests"], 1);
    assert_eq!(fake.requests().len(), 1);

    // `--allow-domain localhost:PORT` for any worker: loopback requests go to the proxy,
    // which reaches the host's.
    repo.write("f0.txt", "foo\n");
    repo.commit_all("again");
    let allow = format!("localhost:{}", fake.port);
    let worker = format!(
        "curl -sS -m 10 -d '{{}}' http://localhost:{}/v1/messages > /dev/null && sed -i s/foo/bar/ f0.txt",
        fake.port
    );
    let run = repo.swarm(&[
        "refactor",
        "x",
        "f0.txt",
        "--allow-domain",
        &allow,
        "--exec",
        &worker,
        "-y",
    ]);
    run.assert_code(0);
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(repo.report(&run)["tasks"][0]["network"]["allowed"], 1);
}
