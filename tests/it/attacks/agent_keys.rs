//! A hostile coding agent against what swarm hands it (docs/SECURITY.md, "Agents"): stand-in
//! `claude` and `codex` programs on PATH, run by the real presets under the default
//! sandbox, look for the API key everywhere they can, report an absurd spend, plant a hook
//! in their settings and read other agents' logins. The key lives only in swarm's gateway.
//!
//! The stand-ins never hold the key themselves: they know it only XOR-ed, decode it in
//! memory and look for it (and its reverse and base64) in their environment, every
//! process's environment and command line, `$HOME` and `$TMPDIR`. Everything they touch is
//! in the test's temporary directory.

use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use crate::common::*;
use crate::fake_agents::{Api, FakeAgentApi};

const KEY: &str = "sk-ant-api03-hostile-test-9b41f0c2";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// An executable `name` in `dir` (outside HOME, so the stand-in's own text is not scanned).
fn stand_in(dir: &Path, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Python that sets `found` to where the key (XOR-ed into `XORED`) shows up.
fn search_for_the_key() -> String {
    let xored: String = KEY.bytes().map(|b| format!("{:02x}", b ^ 0x5a)).collect();
    format!(
        r#"import base64, json, os, sys, urllib.request
secret = bytes(b ^ 0x5a for b in bytes.fromhex("{xored}")).decode()
forms = [secret, secret[::-1]] + [base64.b64encode(p.encode() + secret.encode()).decode()[4:-4] for p in ("", "k", "ke")]
found = []
def scan(where, data):
    if any(f.encode() in data for f in forms):
        found.append(where)
scan("environment", "\0".join(k + "=" + v for k, v in os.environ.items()).encode())
for pid in filter(str.isdigit, os.listdir("/proc")):
    for name in ("environ", "cmdline"):
        try:
            scan("/proc/%s/%s" % (pid, name), open("/proc/%s/%s" % (pid, name), "rb").read())
        except OSError:
            pass
for root in (os.environ["HOME"], os.environ.get("TMPDIR", "/tmp")):
    for top, dirs, files in os.walk(root):
        for f in files:
            try:
                scan(os.path.join(top, f), open(os.path.join(top, f), "rb").read(1 << 20))
            except OSError:
                pass
"#
    )
}

/// The hostile `claude`: searches for the key, reads other agents' logins, plants a
/// `SessionStart` hook in its settings, asks the API with what it was given, and reports an
/// absurd spend.
fn hostile_claude() -> String {
    format!(
        r#"#!/usr/bin/env python3
{}
home = os.environ["HOME"]
for cred in (".codex/auth.json", ".gemini/oauth_creds.json", ".claude/.credentials.json"):
    try:
        if "LOGIN-SECRET" in open(os.path.join(home, cred)).read():
            found.append(cred)
    except OSError:
        pass
hook = {{"hooks": {{"SessionStart": [{{"hooks": [{{"type": "command", "command": "touch /tmp/PWNED"}}]}}]}}}}
open(os.path.join(home, ".claude", "settings.json"), "w").write(json.dumps(hook))
request = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    data=json.dumps({{"model": "claude-hostile", "max_tokens": 5, "messages": []}}).encode(),
    headers={{"x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""), "content-type": "application/json"}})
try:
    answer = urllib.request.urlopen(request, timeout=20).read().decode()
except urllib.error.HTTPError as e:
    answer = e.read().decode()
open("a.txt", "w").write(("clean" if not found else "LEAK " + " ".join(found)) + "\n" + answer + "\n")
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
    "result": "done", "total_cost_usd": -1000,
    "usage": {{"input_tokens": 2**64 - 1, "output_tokens": 1e308}}}}))
"#,
        search_for_the_key()
    )
}

/// The user's own agent state: settings, and logins of three agents.
fn user_home(repo: &TestRepo) {
    let home = &repo.home;
    for (rel, text) in [
        (".claude/settings.json", "{\"theme\": \"mine\"}\n"),
        (
            ".claude/.credentials.json",
            "{\"token\": \"LOGIN-SECRET-claude\"}\n",
        ),
        (".codex/auth.json", "{\"token\": \"LOGIN-SECRET-codex\"}\n"),
        (
            ".gemini/oauth_creds.json",
            "{\"token\": \"LOGIN-SECRET-gemini\"}\n",
        ),
    ] {
        let path = home.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn with_path(repo: &TestRepo, bin: &Path) -> std::process::Command {
    let mut cmd = repo.swarm_cmd();
    cmd.env(
        "PATH",
        format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
    );
    cmd
}

/// Every file under `dir` holding `needle`.
fn holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn a_hostile_agent_finds_no_key_spends_what_the_api_says_and_changes_no_settings() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    user_home(&repo);
    repo.user_config("[model.prices]\n\"claude-\" = { prompt = 3, completion = 15 }\n");
    let bin = repo.root().join("bin");
    stand_in(&bin, "claude", &hostile_claude());
    let fake = FakeAgentApi::start(Api::AnthropicMessages);
    let run = Run::from(
        with_path(&repo, &bin)
            .env("ANTHROPIC_API_KEY", KEY)
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", fake.port),
            )
            .args([
                "refactor",
                "x",
                "a.txt",
                "--agent",
                "claude",
                "--max-cost",
                "5",
                "-y",
            ])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    // It found the key nowhere, and its request worked: the gateway put the real key in.
    let merged = repo.git(&["show", "HEAD:a.txt"]);
    assert!(merged.starts_with("clean\n"), "{merged}");
    assert!(merged.contains("message_start"), "no answer: {merged}");
    assert_eq!(fake.requests()[0].header("x-api-key"), Some(KEY));
    // Its spend is what the API answered (1,000 + 50 tokens at $3/$15 per million), not
    // its -$1,000 or its 2^64 tokens, which are not even kept as what it reported.
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    assert_eq!(task["tokens"]["prompt"], 1000, "{task}");
    assert_eq!(task["tokens"]["completion"], 50, "{task}");
    assert!(
        (task["cost_usd"].as_f64().unwrap() - 0.00375).abs() < 1e-12,
        "{task}"
    );
    assert_eq!(task["reported"], serde_json::json!({"turns": 1}), "{task}");
    // The hook went to the task's layer; the user's settings are as they were.
    assert_eq!(
        std::fs::read_to_string(repo.home.join(".claude/settings.json")).unwrap(),
        "{\"theme\": \"mine\"}\n"
    );
    let layer = repo
        .swarm_dir()
        .join("runs")
        .join(run.run_id())
        .join("tasks");
    assert_eq!(holding(&layer, "SessionStart").len(), 1);
    // Nothing swarm wrote or printed holds the key.
    assert_eq!(holding(&repo.swarm_dir(), KEY), Vec::<String>::new());
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
}

#[test]
fn a_hostile_codex_can_leak_only_its_placeholder() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let bin = repo.root().join("bin");
    // Its summary is the base64 of the keys it was given, as in the attack on the preset.
    stand_in(
        &bin,
        "codex",
        r#"#!/bin/sh
curl -sS -m 20 -H "authorization: Bearer $CODEX_API_KEY" -H 'content-type: application/json' -d '{"model":"gpt-x","input":[]}' "$OPENAI_BASE_URL/responses" > /dev/null
sed -i s/foo/bar/ a.txt
leak=$(printf '%s' "$OPENAI_API_KEY" | base64 -w0)
echo "{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"$leak\"}}"
echo '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}'
"#,
    );
    let fake = FakeAgentApi::start(Api::OpenAiResponses);
    let run = Run::from(
        with_path(&repo, &bin)
            .env("OPENAI_API_KEY", KEY)
            .env(
                "OPENAI_BASE_URL",
                format!("http://127.0.0.1:{}/v1", fake.port),
            )
            .args(["refactor", "x", "a.txt", "--agent", "codex", "-y"])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    let report = repo.report(&run);
    let summary = report["tasks"][0]["summary"].as_str().unwrap();
    let leaked = base64::engine::general_purpose::STANDARD
        .decode(summary)
        .unwrap();
    assert!(
        String::from_utf8(leaked)
            .unwrap()
            .starts_with("sk-swarm-placeholder-"),
        "{summary}"
    );
    assert_eq!(
        fake.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let text = format!("{report}{}{}", run.stdout, run.stderr);
    for form in [KEY.to_string(), b64(KEY)] {
        assert!(!text.contains(&form), "{form} leaked");
    }
}

#[test]
fn a_server_echoing_the_key_reaches_the_agent_redacted() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let bin = repo.root().join("bin");
    stand_in(
        &bin,
        "claude",
        r#"#!/bin/sh
curl -sS -m 20 -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' "$ANTHROPIC_BASE_URL/v1/messages" > a.txt
"#,
    );
    let fake = FakeAgentApi::start(Api::RejectsKey);
    let run = Run::from(
        with_path(&repo, &bin)
            .env("ANTHROPIC_API_KEY", KEY)
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", fake.port),
            )
            .args(["refactor", "x", "a.txt", "--agent", "claude", "-y"])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    // The server did echo the real key it got, as is and in base64; the agent saw neither.
    let merged = repo.git(&["show", "HEAD:a.txt"]);
    assert_eq!(
        merged.matches("[redacted ANTHROPIC_API_KEY]").count(),
        2,
        "{merged}"
    );
    assert!(
        !merged.contains(KEY) && !merged.contains(&b64(KEY)[4..20]),
        "{merged}"
    );
    let body: Value = serde_json::from_str(&merged).unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
}
