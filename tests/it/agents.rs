//! The `--agent` presets with the real agent CLIs, under the default sandbox, pointed at a
//! local fake of their API through swarm's proxy (`fake_agents.rs`): the edit is merged,
//! tokens, turns and cost are in the report, and the API key is in no file swarm wrote.
//!
//! The CLIs come from npm: `.ci/run` installs them (pinned versions) and sets
//! `SWARM_TEST_AGENTS` to their `bin` directory, with `SWARM_REQUIRE_AGENT_TESTS=1` so that
//! a missing one fails. Elsewhere they are looked up on PATH, and a test whose CLI is not
//! installed says so and does nothing.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;
use crate::fake_agents::{Api, FakeAgentApi};
use crate::fake_model::{FakeModel, Reply};

const KEY: &str = "sk-test-agent-key-4f9a1c";

/// The directory holding `program`, or `None` (then the test is skipped, unless required).
fn agent_dir(program: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("SWARM_TEST_AGENTS")
        .into_iter()
        .chain(std::env::var_os("PATH"))
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let found = dirs.into_iter().find(|d| d.join(program).is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("SWARM_REQUIRE_AGENT_TESTS").is_none(),
            "`{program}` is not installed, and SWARM_REQUIRE_AGENT_TESTS is set"
        );
        eprintln!("skipped: `{program}` is not installed (see tests/it/agents.rs)");
    }
    found
}

fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).unwrap()
}

/// Every file under `dir` that contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| {
                needle.is_empty() || b.windows(needle.len()).any(|w| w == needle.as_bytes())
            }) {
                found.push(path);
            }
        }
    }
    found
}

/// `swarm refactor 'rename foo to bar' a.txt -y ARGS` with the agent's CLI (in `dir`) on PATH,
/// `env` (its API's base URL and key), and the API's `host` resolved to the local fake.
fn run_agent(
    repo: &TestRepo,
    dir: &Path,
    host: &str,
    env: &[(&str, String)],
    args: &[&str],
) -> Run {
    let mut cmd = repo.swarm_cmd();
    cmd.env("PATH", path_with(dir))
        .env("SWARM_TEST_PROXY_RESOLVE", format!("{host}=127.0.0.1"))
        .args(["refactor", "rename foo to bar", "a.txt", "-y"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::from(cmd.output().unwrap())
}

/// What the agent printed, to see why a run failed.
fn show_task_logs_if_failed(repo: &TestRepo, run: &Run) {
    if run.code == 0 {
        return;
    }
    let tasks = repo
        .swarm_dir()
        .join("runs")
        .join(run.run_id())
        .join("tasks");
    for log in files_containing(&tasks, "") {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!("== {}\n{text}", log.display());
    }
}

/// What every preset run must show: merged, usage reported, the key only where it belongs.
fn assert_agent_run(repo: &TestRepo, run: &Run, fake: &FakeAgentApi, key_header: &str) {
    show_task_logs_if_failed(repo, run);
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "bar", "{}", run.stderr);
    let report = repo.report(run);
    let task = &report["tasks"][0];
    assert_eq!(task["status"], "merged", "{task}");
    assert!(task["tokens"]["prompt"].as_u64().unwrap() >= 1000, "{task}");
    assert!(
        task["tokens"]["completion"].as_u64().unwrap() >= 50,
        "{task}"
    );
    assert!(task["turns"].as_u64().unwrap() >= 1, "{task}");
    assert!(task["network"]["allowed"].as_u64().unwrap() >= 1, "{task}");
    assert_eq!(task["summary"], "Renamed foo to bar.", "{task}");
    // The key reached the agent's API, and nothing swarm wrote holds it.
    let requests = fake.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.header(key_header).is_some_and(|v| v.contains(KEY))),
        "the key did not reach the API: {:?}",
        requests.iter().map(|r| &r.headers).collect::<Vec<_>>()
    );
    assert_eq!(
        files_containing(&repo.swarm_dir(), KEY),
        Vec::<PathBuf>::new()
    );
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
    assert!(run.stderr.contains("1 merged"), "{}", run.stderr);
    // The summary line counts what the agent spent.
    assert!(run.stderr.contains("k tokens"), "{}", run.stderr);
}

#[test]
fn claude_code_edits_through_the_proxy_under_the_default_sandbox() {
    let Some(dir) = agent_dir("claude") else {
        return;
    };
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let env = [
        (
            "ANTHROPIC_BASE_URL",
            format!("http://api.anthropic.test:{}", fake.port),
        ),
        ("ANTHROPIC_API_KEY", KEY.to_string()),
    ];
    let run = run_agent(
        &repo,
        &dir,
        "api.anthropic.test",
        &env,
        &[
            "--agent",
            "claude",
            "--model",
            "claude-fake-1",
            "--timeout",
            "60",
        ],
    );
    assert_agent_run(&repo, &run, &fake, "x-api-key");
    // --model reached the agent, and the agent its API.
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.path.starts_with("/v1/messages") && r.body["model"] == "claude-fake-1"),
        "{:?}",
        fake.requests()
            .iter()
            .map(|r| (&r.path, &r.body["model"]))
            .collect::<Vec<_>>()
    );
    let report = repo.report(&run);
    assert!(
        report["tasks"][0]["cost_usd"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(
        report["totals"]["cost_usd"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(run.stderr.contains(" spent"), "{}", run.stderr);
}

#[test]
fn a_missing_agent_is_refused_before_anything_starts() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = Run::from(
        repo.swarm_cmd()
            .env("PATH", "/usr/bin:/bin")
            .args(["refactor", "x", "a.txt", "--agent", "gemini", "-y"])
            .output()
            .unwrap(),
    );
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("--agent gemini: `gemini` is not installed"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("npm install -g @google/gemini-cli"),
        "{}",
        run.stderr
    );
    assert!(!repo.swarm_dir().exists());
    let run = repo.swarm(&["refactor", "x", "a.txt", "--agent", "nope", "-y"]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("no agent 'nope' (known: aider, claude, codex, gemini, opencode)"),
        "{}",
        run.stderr
    );
}

#[test]
fn codex_edits_through_the_proxy_under_the_default_sandbox() {
    let Some(dir) = agent_dir("codex") else {
        return;
    };
    let fake = FakeAgentApi::start(Api::OpenAiResponses);
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let env = [
        (
            "OPENAI_BASE_URL",
            format!("http://api.openai.test:{}/v1", fake.port),
        ),
        ("OPENAI_API_KEY", KEY.to_string()),
    ];
    let run = run_agent(
        &repo,
        &dir,
        "api.openai.test",
        &env,
        &["--agent", "codex", "--timeout", "60"],
    );
    assert_agent_run(&repo, &run, &fake, "authorization");
}

/// An agent preset widens the sandbox, so the repository's file cannot choose or define one.
#[test]
fn the_repository_cannot_choose_or_define_an_agent() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        (
            "swarm.toml",
            "[run]\nagent = \"claude\"\n\n[agents.evil]\nexec = \"true\"\nwritable = [\"/\"]\n",
        ),
    ]);
    let run = repo.swarm(&["refactor", "x", "a.txt", "--exec", SED_FOO_BAR, "-y"]);
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("swarm.toml sets [run] agent = \"claude\"; ignored"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("swarm.toml defines [agents] [\"evil\"]; ignored"),
        "{}",
        run.stderr
    );
    let plan: serde_json::Value =
        serde_json::from_str(&repo.run_file(&run.run_id(), "plan.json")).unwrap();
    assert_eq!(plan["settings"]["agent"], serde_json::Value::Null);
    let run = repo.swarm(&["refactor", "x", "a.txt", "--agent", "evil", "-y"]);
    run.assert_code(2);
    assert!(run.stderr.contains("no agent 'evil'"), "{}", run.stderr);
}

/// A user-defined agent that speaks Claude Code's stream-json: edits its file and reports 40
/// cents and 1,500 tokens.
const PRICED_AGENT: &str = r#"
[agents.priced]
exec = '''sed -i s/foo/bar/ "$SWARM_FILE"; echo '{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"done","total_cost_usd":0.40,"usage":{"input_tokens":1000,"output_tokens":500}}' '''
binary = "sed"
output = "claude-stream-json"
"#;

#[test]
fn the_run_stops_starting_tasks_at_its_cost_budget_and_resume_finishes_them() {
    let files: Vec<(String, &str)> = (0..5).map(|i| (format!("f{i}.txt"), "foo\n")).collect();
    let repo = TestRepo::with_files(&files);
    repo.user_config(PRICED_AGENT);
    let run = repo.swarm(&[
        "refactor",
        "x",
        "--agent",
        "priced",
        "-j",
        "1",
        "--max-cost",
        "1",
        "-y",
    ]);
    run.assert_code(1);
    let report = repo.report(&run);
    let tasks = report["tasks"].as_array().unwrap();
    let merged = tasks.iter().filter(|t| t["status"] == "merged").count();
    // $0.40, $0.80, $1.20: the third task ends past the cap; no fourth starts.
    assert_eq!(merged, 3, "{report}");
    let skipped: Vec<&Value> = tasks.iter().filter(|t| t["status"] == "skipped").collect();
    assert_eq!(skipped.len(), 2);
    for t in &skipped {
        assert_eq!(t["over_budget"], true, "{t}");
        let error = t["error"].as_str().unwrap();
        assert!(
            error.contains("cost budget is spent ($1.20 of --max-cost $1.00)"),
            "{error}"
        );
    }
    assert!((report["totals"]["cost_usd"].as_f64().unwrap() - 1.2).abs() < 1e-9);
    assert!(run.stderr.contains("$1.20 spent"), "{}", run.stderr);
    assert!(run.stderr.contains("4.5k tokens"), "{}", run.stderr);

    // A larger budget finishes the rest.
    let again = repo.swarm(&["resume", &run.run_id(), "--max-cost", "5"]);
    again.assert_code(0);
    let report = repo.report(&again);
    assert!(
        report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "merged")
    );
    for i in 0..5 {
        assert_eq!(repo.git(&["show", &format!("HEAD:f{i}.txt")]), "bar");
    }
}

#[test]
fn the_run_stops_at_its_token_budget_too() {
    let files: Vec<(String, &str)> = (0..4).map(|i| (format!("f{i}.txt"), "foo\n")).collect();
    let repo = TestRepo::with_files(&files);
    repo.user_config(PRICED_AGENT);
    let run = repo.swarm(&[
        "refactor",
        "x",
        "--agent",
        "priced",
        "-j",
        "1",
        "--max-run-tokens",
        "3000",
        "-y",
    ]);
    run.assert_code(1);
    let report = repo.report(&run);
    let merged = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] == "merged")
        .count();
    assert_eq!(merged, 2, "{report}");
}

/// Gemini CLI and Aider were not installed here: scripts printing their documented output
/// formats stand in (the preset's own command replaced in the user's config), so the
/// parsing of each format is tested end to end.
#[test]
fn stand_ins_for_gemini_and_aider_report_their_usage() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    repo.user_config(
        r#"
[agents.gemini]
exec = '''sed -i s/foo/bar/ "$SWARM_FILE"; echo 'Loaded cached credentials.'; echo '{"response":"Renamed.","stats":{"models":{"gemini-2.5-pro":{"api":{"totalRequests":2},"tokens":{"prompt":900,"candidates":80,"total":980}}}}}' '''
binary = "sed"

[agents.aider]
exec = '''sed -i s/bar/baz/ "$SWARM_FILE"; echo 'Applied edit to a.txt'; echo 'Tokens: 2.1k sent, 312 received. Cost: $0.01 message, $0.03 session.' '''
binary = "sed"
"#,
    );
    let run = repo.swarm(&["refactor", "x", "a.txt", "--agent", "gemini", "-y"]);
    run.assert_code(0);
    let task = &repo.report(&run)["tasks"][0];
    assert_eq!(task["summary"], "Renamed.", "{task}");
    assert_eq!(task["turns"], 2);
    assert_eq!(task["tokens"]["prompt"], 900);
    assert_eq!(task["tokens"]["completion"], 80);
    let run = repo.swarm(&["refactor", "x", "a.txt", "--agent", "aider", "-y"]);
    run.assert_code(0);
    let task = &repo.report(&run)["tasks"][0];
    assert_eq!(task["tokens"]["prompt"], 2100, "{task}");
    assert_eq!(task["tokens"]["completion"], 312);
    assert_eq!(task["cost_usd"], 0.03);
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "baz");
}

#[test]
fn swarm_agents_shows_what_is_installed_and_what_each_may_reach() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let bin = repo.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\necho '9.9.9 (Claude Code)'\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    repo.user_config("[agents.mine]\nexec = 'my-agent --go'\nallow_domains = ['api.mine.dev']\n");
    let run = Run::from(
        repo.swarm_cmd()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .args(["agents"])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    let out = &run.stdout;
    assert!(
        out.contains(&format!(
            "claude: 9.9.9 (Claude Code) ({})",
            claude.display()
        )),
        "{out}"
    );
    assert!(out.contains("  network:  api.anthropic.com"), "{out}");
    assert!(
        out.contains("codex: not found; install: npm install -g @openai/codex"),
        "{out}"
    );
    assert!(out.contains("mine: not found"), "{out}");
    assert!(out.contains("  network:  api.mine.dev"), "{out}");
}

#[test]
fn aider_edits_through_the_proxy_under_the_default_sandbox() {
    let Some(dir) = agent_dir("aider") else {
        return;
    };
    // Aider speaks OpenAI chat completions (through litellm) and edits with a whole-file
    // block in its answer.
    let fake = FakeModel::start(|_, _| {
        Reply::Stream(json!({
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "a.txt\n```\nbar\n```\n"}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50}}))
    });
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let base = fake.url.replace("127.0.0.1", "api.openai.test");
    let env = [
        ("OPENAI_API_BASE", base),
        ("OPENAI_API_KEY", KEY.to_string()),
    ];
    let run = run_agent(
        &repo,
        &dir,
        "api.openai.test",
        &env,
        &[
            "--agent",
            "aider",
            "--model",
            "openai/fake-model",
            "--timeout",
            "120",
        ],
    );
    show_task_logs_if_failed(&repo, &run);
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "bar");
    // Only the task's file changed: nothing of aider's own was committed.
    assert_eq!(
        repo.git(&["diff", "--name-only", "HEAD~1", "HEAD"]),
        "a.txt"
    );
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    assert!(task["tokens"]["prompt"].as_u64().unwrap() > 0, "{task}");
    assert!(task["network"]["allowed"].as_u64().unwrap() >= 1, "{task}");
    let requests = fake.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}")))
    );
    assert!(requests.iter().all(|r| r.body["model"] == "fake-model"));
    assert_eq!(
        files_containing(&repo.swarm_dir(), KEY),
        Vec::<PathBuf>::new()
    );
}
