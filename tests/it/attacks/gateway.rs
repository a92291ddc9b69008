//! The model gateway as a hostile upstream and a hostile agent attack it (docs/SECURITY.md,
//! "Agents and the model gateway"): an upstream that redirects, echoes what it was sent,
//! answers without a usage, cuts its stream before the usage, or answers past the parse
//! cap; an agent that puts its key in the query or asks for operations the gateway cannot
//! meter. Stand-in agents are user-defined `[agents.NAME]` whose command is curl; what they
//! saw is written to a folder the user's config lets them write, outside the repository, so
//! the test reads it unredacted.

use std::path::PathBuf;

use serde_json::Value;

use crate::common::*;
use crate::hostile_upstream::{Hostile, HostileUpstream};

const KEY: &str = "sk-gateway-attack-key-51c7e2a9";

/// The user's config: one agent `probe` speaking `api`, running `exec`, allowed to write
/// into the test's `seen/` folder (returned).
fn probe(repo: &TestRepo, api: &str, exec: &str, extra: &str) -> PathBuf {
    let seen = repo.root().join("seen");
    std::fs::create_dir_all(&seen).unwrap();
    repo.user_config(&format!(
        r#"
[agents.probe]
exec = '''{exec}'''
binary = "curl"
api = "{api}"
output = "text"

[sandbox]
writable = ["{}"]
{extra}
"#,
        seen.display()
    ));
    seen
}

/// `swarm refactor` with `--agent probe`, `env` set in swarm's environment.
fn run_probe(repo: &TestRepo, env: &[(&str, String)], args: &[&str]) -> Run {
    let mut cmd = repo.swarm_cmd();
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(["refactor", "x", ".", "--agent", "probe", "-y"])
        .args(args);
    Run::from(cmd.output().unwrap())
}

fn read(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// A Messages request to `$BASE/PATH` with curl, headers `-H …`, its status (and what it
/// answered) written to `seen/NAME`.
fn ask(base: &str, path: &str, headers: &str, name: &str) -> String {
    format!(
        r#"curl -sS -m 30 -o "$SEEN/{name}.body" -D "$SEEN/{name}.head" -w '%{{http_code}}' {headers} -H 'content-type: application/json' -d '{{"model":"claude-x","max_tokens":100,"messages":[{{"role":"user","content":"hi"}}]}}' "{base}{path}" > "$SEEN/{name}""#
    )
}

#[test]
fn no_credential_follows_a_redirect_in_any_header_it_travels_in() {
    // (api, the key's variable, the endpoint's variable, the path, the header it goes in)
    let cases = [
        (
            "anthropic",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "/v1/messages",
            "x-api-key",
        ),
        (
            "anthropic",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "/v1/messages",
            "authorization",
        ),
        (
            "openai",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "/chat/completions",
            "api-key",
        ),
        (
            "gemini",
            "GEMINI_API_KEY",
            "GOOGLE_GEMINI_BASE_URL",
            "/v1beta/models/gemini-x:generateContent",
            "x-goog-api-key",
        ),
    ];
    for (api, key_var, base_var, path, header) in cases {
        let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
        // Another host (127.0.0.2 is not 127.0.0.1 to an HTTP client): where the redirect
        // would take the key.
        let elsewhere = HostileUpstream::start("127.0.0.2", Hostile::Echo);
        let upstream = HostileUpstream::start(
            "127.0.0.1",
            Hostile::Redirect(format!("{}/stolen", elsewhere.url)),
        );
        let value = match header {
            "authorization" => format!("Bearer ${key_var}"),
            _ => format!("${key_var}"),
        };
        let request = ask(
            &format!("${base_var}"),
            path,
            &format!(r#"-H "{header}: {value}""#),
            "answer",
        );
        let seen = probe(
            &repo,
            api,
            &format!(
                "SEEN={}; {request}; sed -i s/foo/bar/ \"$SWARM_FILE\"",
                repo.root().join("seen").display()
            ),
            "",
        );
        let run = run_probe(
            &repo,
            &[(key_var, KEY.into()), (base_var, upstream.url.clone())],
            &[],
        );
        run.assert_code(0);
        // The upstream got the real key once; the 307 went back to the agent as it came, and
        // nothing reached the other host.
        let got = upstream.received();
        assert_eq!(got.len(), 1, "{header}: {got:?}");
        assert!(
            got[0].header(header).unwrap().contains(KEY),
            "{header}: {got:?}"
        );
        assert_eq!(read(&seen, "answer"), "307", "{header}");
        assert!(
            read(&seen, "answer.head").contains(&format!("{}/stolen", elsewhere.url)),
            "{header}: {}",
            read(&seen, "answer.head")
        );
        assert!(
            elsewhere.received().is_empty(),
            "{header}: the key followed the redirect"
        );
    }
}

#[test]
fn the_key_goes_only_where_its_api_takes_it_and_nothing_returned_carries_it() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let upstream = HostileUpstream::start("127.0.0.1", Hostile::Echo);
    let seen_dir = repo.root().join("seen");
    // The placeholder in the query of a route whose key belongs in a header, and operations
    // the gateway does not meter (a file upload, a GET of the messages path, a path that
    // climbs out).
    let exec = [
        format!("SEEN={}", seen_dir.display()),
        ask(
            "$ANTHROPIC_BASE_URL",
            "/v1/messages?beta=true&key=$ANTHROPIC_API_KEY",
            r#"-H "x-api-key: $ANTHROPIC_API_KEY""#,
            "echo",
        ),
        ask("$ANTHROPIC_BASE_URL", "/v1/files", r#"-H "x-api-key: $ANTHROPIC_API_KEY""#, "files"),
        r#"curl -sS -o /dev/null -w '%{http_code}' -H "x-api-key: $ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL/v1/messages" > "$SEEN/get""#.to_string(),
        r#"curl -sS --path-as-is -o "$SEEN/climb.body" -w '%{http_code}' -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' "$ANTHROPIC_BASE_URL/v1/../v1/messages" > "$SEEN/climb""#.to_string(),
        "sed -i s/foo/bar/ \"$SWARM_FILE\"".to_string(),
    ]
    .join("; ");
    let seen = probe(&repo, "anthropic", &exec, "");
    let run = run_probe(
        &repo,
        &[
            ("ANTHROPIC_API_KEY", KEY.into()),
            ("ANTHROPIC_BASE_URL", upstream.url.clone()),
        ],
        &[],
    );
    run.assert_code(0);
    // One request reached the upstream: the real key in its header, the placeholder (not
    // the key) left in its query.
    let got = upstream.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].header("x-api-key"), Some(KEY));
    assert!(!got[0].target.contains(KEY), "{}", got[0].target);
    assert!(
        got[0].target.contains("key=sk-swarm-placeholder-"),
        "{}",
        got[0].target
    );
    assert!(
        got[0].target.starts_with("/v1/messages?beta=true&"),
        "{}",
        got[0].target
    );
    // Its answer echoed the key in a header and the body: the agent saw it redacted.
    let (head, body) = (read(&seen, "echo.head"), read(&seen, "echo.body"));
    assert_eq!(read(&seen, "echo"), "200");
    for text in [&head, &body] {
        assert!(!text.contains(KEY), "the agent saw the key: {text}");
    }
    assert!(
        head.to_ascii_lowercase()
            .contains("x-echo-key: [redacted anthropic_api_key]"),
        "{head}"
    );
    assert!(body.contains("[redacted ANTHROPIC_API_KEY]"), "{body}");
    // The rest was refused by the gateway itself, with the reason.
    assert_eq!(read(&seen, "files"), "404");
    assert!(
        read(&seen, "files.body")
            .contains("POST /v1/files is not an operation swarm's gateway forwards"),
        "{}",
        read(&seen, "files.body")
    );
    assert_eq!(read(&seen, "get"), "404");
    assert_eq!(read(&seen, "climb"), "404");
    let refused: Vec<Value> = repo
        .events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "gateway_refused")
        .collect();
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert_eq!(refused[0]["request"], "POST /anthropic/v1/files");
    assert_eq!(refused[0]["status"], 404);
    assert!(run.stderr.contains("refused   "), "{}", run.stderr);
}

/// What the task's answers were charged, from the run's `model_usage` events.
fn charges(repo: &TestRepo, run: &Run) -> Vec<(u64, String)> {
    repo.events(run)
        .into_iter()
        .filter(|e| e["kind"] == "model_usage")
        .map(|e| {
            let tokens = e["prompt"].as_u64().unwrap() + e["completion"].as_u64().unwrap();
            (tokens, e["basis"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn spend_whose_usage_cannot_be_read_is_charged_its_reservation_and_the_budget_holds() {
    // Answers without a usage: 30 requests asked, each charged its reservation (its input
    // estimated from its size, and its max_tokens of 100), until the budget cannot cover
    // the next: the agent is stopped, its work not merged.
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let upstream = HostileUpstream::start("127.0.0.1", Hostile::NoUsage);
    let seen_dir = repo.root().join("seen");
    let request = ask(
        "$ANTHROPIC_BASE_URL",
        "/v1/messages",
        r#"-H "x-api-key: $ANTHROPIC_API_KEY""#,
        "last",
    );
    let exec = format!(
        "SEEN={}; for i in $(seq 30); do {request}; done; sed -i s/foo/bar/ \"$SWARM_FILE\"",
        seen_dir.display()
    );
    probe(&repo, "anthropic", &exec, "");
    let env = [
        ("ANTHROPIC_API_KEY", KEY.to_string()),
        ("ANTHROPIC_BASE_URL", upstream.url.clone()),
    ];
    let run = run_probe(&repo, &env, &["--max-tokens", "2000"]);
    run.assert_code(1);
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    assert_eq!(task["status"], "skipped", "{task}");
    assert_eq!(task["over_budget"], true, "{task}");
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "foo");
    let charged = charges(&repo, &run);
    let each = charged[0].0;
    assert!(each > 100, "{charged:?}");
    assert!(
        charged
            .iter()
            .all(|(t, b)| *t == each && b == "reservation"),
        "{charged:?}"
    );
    // As many as fit in 2,000 tokens, and no more reached the upstream.
    let fit = (2000 / each) as usize;
    assert_eq!(charged.len(), fit, "{charged:?}");
    assert_eq!(upstream.received().len(), fit);
    let total = report["totals"]["tokens"]["prompt"].as_u64().unwrap()
        + report["totals"]["tokens"]["completion"].as_u64().unwrap();
    assert!(total <= 2000, "{total}");
    // The next was refused (402), with the reason the agent read, and the agent stopped.
    let refused: Vec<Value> = repo
        .events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "gateway_refused")
        .collect();
    assert_eq!(refused[0]["status"], 402, "{refused:?}");
    let reason = refused[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the run's token budget cannot cover another request"),
        "{reason}"
    );

    // A stream cut before its usage, and an answer past the parse cap: each charged its
    // whole reservation (5,000 output tokens asked), not the 10 or 2 tokens they showed.
    for hostile in [Hostile::CutStream, Hostile::Huge] {
        let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
        let upstream = HostileUpstream::start("127.0.0.1", hostile.clone());
        let request = ask(
            "$ANTHROPIC_BASE_URL",
            "/v1/messages",
            r#"-H "x-api-key: $ANTHROPIC_API_KEY""#,
            "one",
        )
        .replace(r#""max_tokens":100"#, r#""max_tokens":5000"#);
        let exec = format!(
            "SEEN={}; {request}; sed -i s/foo/bar/ \"$SWARM_FILE\"",
            repo.root().join("seen").display()
        );
        probe(&repo, "anthropic", &exec, "");
        let env = [
            ("ANTHROPIC_API_KEY", KEY.to_string()),
            ("ANTHROPIC_BASE_URL", upstream.url.clone()),
        ];
        let run = run_probe(&repo, &env, &["--max-tokens", "100000"]);
        run.assert_code(0);
        let charged = charges(&repo, &run);
        assert_eq!(charged.len(), 1, "{hostile:?}: {charged:?}");
        assert!(charged[0].0 > 5000, "{hostile:?}: {charged:?}");
        assert_eq!(charged[0].1, "reservation", "{hostile:?}");
        assert_eq!(repo.report(&run)["tasks"][0]["tokens"]["completion"], 5000);
    }
}

#[test]
fn an_endpoint_with_a_user_name_or_password_is_never_sent_a_key() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let upstream = HostileUpstream::start("127.0.0.2", Hostile::Echo);
    let sneaky = upstream.url.replace("http://", "http://localhost:1@");
    probe(&repo, "anthropic", "sed -i s/foo/bar/ \"$SWARM_FILE\"", "");
    let env = [
        ("ANTHROPIC_API_KEY", KEY.to_string()),
        ("ANTHROPIC_BASE_URL", sneaky.clone()),
    ];
    let run = run_probe(&repo, &env, &[]);
    run.assert_code(2);
    assert!(
        run.stderr.contains(&format!(
            "the endpoint of --agent probe's anthropic API '{sneaky}' cannot be sent a key: it \
             carries a user name or password"
        )),
        "{}",
        run.stderr
    );
    // The built-in worker's endpoint, the same.
    let run = Run::from(
        repo.swarm_cmd()
            .env("SWARM_API_KEY", KEY)
            .args([
                "refactor",
                "x",
                ".",
                "--model",
                "m",
                "--base-url",
                &format!("{sneaky}/v1"),
            ])
            .output()
            .unwrap(),
    );
    run.assert_code(2);
    assert!(
        run.stderr.contains("user name or password"),
        "{}",
        run.stderr
    );
    assert!(upstream.received().is_empty());
    assert!(
        !repo.swarm_dir().join("runs").exists(),
        "a refused run wrote something"
    );
}
