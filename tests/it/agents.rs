//! The `--agent` presets with the real agent CLIs, under the default sandbox, pointed at a
//! local fake of their API through swarm's model gateway (`fake_agents.rs`): the edit is
//! merged, the metered tokens and cost are in the report, the real key reached the API (the
//! agent only had a placeholder), and the key is in no file swarm wrote.
//!
//! The tests that run a real CLI are `#[ignore]`d, with the reason, so that `cargo test`
//! counts them as ignored rather than passing them without running anything. `.ci/run`
//! installs the CLIs (npm, PyPI; pinned versions), sets `SWARM_TEST_AGENTS` to their `bin`
//! directory and runs them with `cargo test --test it -- --ignored`; elsewhere they are
//! looked up on PATH, and one that is not installed fails the test that needs it.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;
use crate::fake_agents::{Api, FakeAgentApi};
use crate::fake_model::{FakeModel, Reply};

const KEY: &str = "sk-test-agent-key-4f9a1c";

/// The directory holding `program` (`SWARM_TEST_AGENTS`, else PATH); the test fails without.
pub(crate) fn agent_dir(program: &str) -> PathBuf {
    let dirs = std::env::var_os("SWARM_TEST_AGENTS")
        .into_iter()
        .chain(std::env::var_os("PATH"))
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    dirs.into_iter()
        .find(|d| d.join(program).is_file())
        .unwrap_or_else(|| {
            panic!("`{program}` is not installed: set SWARM_TEST_AGENTS to where it is")
        })
}

pub(crate) fn path_with(dir: &Path) -> std::ffi::OsString {
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
    // Every answer metered by the gateway: the fake's usage is 1,000 in and 50 out each.
    let metered = task["requests"].as_u64().unwrap();
    assert!(metered >= 1, "{task}");
    assert_eq!(
        task["tokens"]["prompt"].as_u64().unwrap(),
        1000 * metered,
        "{task}"
    );
    assert_eq!(
        task["tokens"]["completion"].as_u64().unwrap(),
        50 * metered,
        "{task}"
    );
    assert_eq!(task["summary"], "Renamed foo to bar.", "{task}");
    // The gateway forwarded what the agent asked, but for a WebSocket upgrade (Codex tries
    // one first, then HTTPS), and settled each answer with its own usage.
    let events = repo.events(run);
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "gateway_refused")
        .filter(|e| {
            !e["request"]
                .as_str()
                .unwrap()
                .starts_with("GET /openai/responses")
        })
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
    assert!(
        events
            .iter()
            .filter(|e| e["kind"] == "model_usage")
            .all(|e| e["basis"] == "metered"),
        "{events:?}"
    );
    // The real key reached the API in every model request (the gateway put it in place of
    // the agent's placeholder), and nothing swarm wrote holds it.
    let requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.body != Value::Null)
        .collect();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.header(key_header).is_some_and(|v| v.contains(KEY))),
        "a request without the real key: {:?}",
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
#[ignore = "needs the real agent CLIs: .ci/run installs them"]
fn claude_code_edits_through_the_gateway_under_the_default_sandbox() {
    let dir = agent_dir("claude");
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    repo.user_config("[model.prices]\n\"claude-\" = { prompt = 3, completion = 15 }\n");
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
    // The cost is the metered tokens at the user's price; what Claude Code says it spent is
    // kept beside it.
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    let tokens = |k: &str| task["tokens"][k].as_f64().unwrap();
    let priced = tokens("prompt") * 3e-6 + tokens("completion") * 15e-6;
    assert!(
        (task["cost_usd"].as_f64().unwrap() - priced).abs() < 1e-9,
        "{task}"
    );
    assert!(task["reported"]["cost_usd"].as_f64().is_some(), "{task}");
    assert!((report["totals"]["cost_usd"].as_f64().unwrap() - priced).abs() < 1e-9);
    assert!(run.stderr.contains(" spent"), "{}", run.stderr);
    // Claude Code's own files went to the task's layer, not to ~/.claude.
    let layer = repo
        .swarm_dir()
        .join("runs")
        .join(run.run_id())
        .join("tasks");
    assert!(
        !files_containing(&layer, "").is_empty()
            && files_containing(&layer, "")
                .iter()
                .any(|p| p.to_string_lossy().contains("agent-state/claude/upper")),
        "nothing in the task's copy-on-write layer"
    );
    assert_eq!(
        files_containing(&repo.home.join(".claude"), ""),
        Vec::<PathBuf>::new(),
        "the agent wrote into the user's ~/.claude"
    );
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
#[ignore = "needs the real agent CLIs: .ci/run installs them"]
fn codex_edits_through_the_gateway_under_the_default_sandbox() {
    let dir = agent_dir("codex");
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

/// Claude Code and Codex as two candidates of one task (`--agent claude,codex --best-of
/// 2`): each edits through the gateway with its own API's key, both make the same change,
/// and the agreed change merges.
#[test]
#[ignore = "needs the real agent CLIs: .ci/run installs them"]
fn claude_code_and_codex_are_two_candidates_of_one_task() {
    let (claude, codex) = (agent_dir("claude"), agent_dir("codex"));
    let anthropic = FakeAgentApi::start(Api::AnthropicMessages);
    let openai = FakeAgentApi::start(Api::OpenAiResponses);
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let mut cmd = repo.swarm_cmd();
    let mut dirs = vec![claude, codex];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap())
        .env(
            "SWARM_TEST_PROXY_RESOLVE",
            "api.anthropic.test=127.0.0.1,api.openai.test=127.0.0.1",
        )
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://api.anthropic.test:{}", anthropic.port),
        )
        .env("ANTHROPIC_API_KEY", KEY)
        .env(
            "OPENAI_BASE_URL",
            format!("http://api.openai.test:{}/v1", openai.port),
        )
        .env("OPENAI_API_KEY", KEY)
        .args(["refactor", "rename foo to bar", "a.txt", "-y", "-j", "2"])
        .args([
            "--agent",
            "claude,codex",
            "--best-of",
            "2",
            "--timeout",
            "90",
        ]);
    let run = Run::from(cmd.output().unwrap());
    show_task_logs_if_failed(&repo, &run);
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "bar", "{}", run.stderr);
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    let candidates = task["candidates"].as_array().unwrap();
    let workers: Vec<&str> = candidates
        .iter()
        .map(|c| c["worker"].as_str().unwrap())
        .collect();
    assert_eq!(workers, ["claude", "codex"], "{task}");
    assert!(candidates.iter().all(|c| c["status"] == "done"), "{task}");
    assert_eq!(task["selection"]["by"], "agreement", "{task}");
    // Each agent reached its own API, with the real key the gateway put in.
    for (fake, header) in [(&anthropic, "x-api-key"), (&openai, "authorization")] {
        let asked: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.body != Value::Null)
            .collect();
        assert!(!asked.is_empty());
        assert!(
            asked
                .iter()
                .all(|r| r.header(header).is_some_and(|v| v.contains(KEY)))
        );
    }
    // Both candidates' spend is the task's.
    let spent: u64 = candidates
        .iter()
        .map(|c| c["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(task["requests"].as_u64().unwrap(), spent, "{task}");
    assert_eq!(
        files_containing(&repo.swarm_dir(), KEY),
        Vec::<PathBuf>::new()
    );
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
    assert_eq!(plan["settings"]["run"]["agent"], serde_json::Value::Null);
    assert_eq!(plan["settings"]["agents"], serde_json::Value::Null);
    let run = repo.swarm(&["refactor", "x", "a.txt", "--agent", "evil", "-y"]);
    run.assert_code(2);
    assert!(run.stderr.contains("no agent 'evil'"), "{}", run.stderr);
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
    // What an agent says it spent is kept as `reported`; the metered counts (none here: the
    // stand-ins call no API) are the task's tokens.
    let task = &repo.report(&run)["tasks"][0];
    assert_eq!(task["summary"], "Renamed.", "{task}");
    assert_eq!(task["turns"], 2);
    assert_eq!(task["reported"]["tokens"]["prompt"], 900);
    assert_eq!(task["reported"]["tokens"]["completion"], 80);
    assert_eq!(task["tokens"]["prompt"], 0);
    let run = repo.swarm(&["refactor", "x", "a.txt", "--agent", "aider", "-y"]);
    run.assert_code(0);
    let task = &repo.report(&run)["tasks"][0];
    assert_eq!(task["reported"]["tokens"]["prompt"], 2100, "{task}");
    assert_eq!(task["reported"]["tokens"]["completion"], 312);
    assert_eq!(task["reported"]["cost_usd"], 0.03);
    assert_eq!(task.get("cost_usd"), None, "{task}");
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
    // The same as JSON, for scripts.
    let json = Run::from(
        repo.swarm_cmd()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .args(["agents", "--json"])
            .output()
            .unwrap(),
    );
    json.assert_code(0);
    let all: Value = serde_json::from_str(&json.stdout).unwrap();
    let claude = all
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "claude")
        .unwrap();
    assert_eq!(claude["installed"], true);
    assert_eq!(claude["version"], "9.9.9 (Claude Code)");
    assert_eq!(claude["model"], "own login");
    assert_eq!(claude["network"][0], "api.anthropic.com");
    assert!(out.contains("  network:  api.mine.dev"), "{out}");
}

#[test]
#[ignore = "needs the real agent CLIs: .ci/run installs them"]
fn aider_edits_through_the_gateway_under_the_default_sandbox() {
    let dir = agent_dir("aider");
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
    // Metered by the gateway: the fake's usage, once per answer.
    let metered = task["requests"].as_u64().unwrap();
    assert!(metered >= 1, "{task}");
    assert_eq!(task["tokens"]["prompt"].as_u64().unwrap(), 1000 * metered);
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
