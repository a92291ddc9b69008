//! The built-in worker against what a real local server (llama.cpp's `llama-server`) does,
//! reproduced by the fake: closing the connection after a streamed reply while advertising
//! keep-alive, cutting an answer off at its output limit, a context window of a few thousand
//! tokens (announced at `/props`, or only named in a 400).

use serde_json::{Value, json};

use crate::common::{Run, TestRepo};
use crate::fake_model::{FakeModel, Reply, Request, raw_tool_call, rename_agent};

const KEY: &str = "sk-test-SECRET-5e0c11";

fn run(repo: &TestRepo, fake: &FakeModel, args: &[&str]) -> Run {
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_API_KEY", KEY)
        .args(["refactor", "rename foo to bar", "src", "-y"])
        .args(["--model", "local-model", "--base-url", &fake.url])
        .args(args);
    Run::from(cmd.output().unwrap())
}

fn kinds<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn chat(requests: &[Request]) -> Vec<&Request> {
    requests
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect()
}

#[test]
fn a_server_closing_after_each_streamed_reply_costs_no_retry() {
    let repo = TestRepo::with_files(&[("src/a.py", "foo()\n")]);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| Reply::StreamThenCloseOnNext(agent(req)));
    let run = run(&repo, &fake, &["-j", "1"]);
    run.assert_code(0);
    assert_eq!(repo.read("src/a.py"), "bar()\n");
    // Each turn answered once; the requests sent on closed connections were sent again at
    // once, not counted against the retry budget and not reported as retries.
    assert_eq!(chat(&fake.requests()).len(), 3);
    let events = repo.events(&run);
    assert_eq!(kinds(&events, "model_retry"), Vec::<&Value>::new());
}

/// An answer whose `finish_reason` is `length`: a tool call cut in the middle.
fn cut_off() -> Value {
    let mut answer = raw_tool_call("edit_file", r#"{"path": "src/a.py", "old_str"#);
    answer["choices"][0]["finish_reason"] = json!("length");
    answer
}

#[test]
fn an_answer_cut_off_at_the_output_limit_is_not_run_and_the_model_is_told() {
    let repo = TestRepo::with_files(&[("src/a.py", "foo()\n")]);
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, n| match n {
        1 => Reply::Stream(cut_off()),
        _ => Reply::Stream(agent(req)),
    });
    let run = run(&repo, &fake, &["--max-output-tokens", "64"]);
    run.assert_code(0);
    assert_eq!(repo.read("src/a.py"), "bar()\n");
    let all = fake.requests();
    let requests = chat(&all);
    assert_eq!(requests.len(), 4);
    for r in &requests {
        assert_eq!(r.body["max_tokens"], 64);
        assert_eq!(r.body["tool_choice"], "auto");
    }
    // The cut answer is not in the conversation; the model was told instead.
    let after = requests[2].messages();
    let last = after.last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("cut off at the output limit")
    );
    assert!(
        !after.iter().any(|m| m.to_string().contains("old_str")),
        "{after:?}"
    );
    let events = repo.events(&run);
    assert!(
        kinds(&events, "tool_result")
            .iter()
            .all(|e| e["ok"] == true)
    );
}

#[test]
fn answers_cut_off_again_and_again_fail_the_task_naming_the_setting() {
    let repo = TestRepo::with_files(&[("src/a.py", "foo()\n")]);
    let fake = FakeModel::start(|_, _| Reply::Json(cut_off()));
    let run = run(&repo, &fake, &["--max-output-tokens", "64"]);
    run.assert_code(1);
    let report = repo.report(&run);
    let error = report["tasks"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("cut off at the output limit 3 times"),
        "{error}"
    );
    assert!(
        error.contains("raise --max-output-tokens (now 64)"),
        "{error}"
    );
    assert_eq!(repo.read("src/a.py"), "foo()\n");
}

/// A file far larger than the fake's context window, read whole on the first turn.
fn big_repo() -> TestRepo {
    let body = format!("foo()\n{}", "# padding line of a long file\n".repeat(1000));
    TestRepo::with_files(&[("src/a.py", body.as_str())])
}

/// The fake's context window: a request over `n_ctx` tokens (3 characters each) is a 400,
/// as llama.cpp answers it.
fn over(req: &Request, n_ctx: usize) -> Option<Reply> {
    (req.body.to_string().len() / 3 > n_ctx).then(|| {
        Reply::Status(
            400,
            vec![],
            json!({"error": {"code": 400, "type": "exceed_context_size_error",
                "message": "the request exceeds the available context size, try increasing it",
                "n_prompt_tokens": req.body.to_string().len() / 3, "n_ctx": n_ctx}})
            .to_string(),
        )
    })
}

#[test]
fn the_context_window_announced_at_props_is_respected() {
    let repo = big_repo();
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| {
        if req.path == "/props" {
            return Reply::Json(json!({"default_generation_settings": {"n_ctx": 4096}}));
        }
        over(req, 4096).unwrap_or_else(|| Reply::Stream(agent(req)))
    });
    let run = run(&repo, &fake, &[]);
    run.assert_code(0);
    assert!(repo.read("src/a.py").starts_with("bar()\n"));
    assert_eq!(fake.gets(), ["/props"]);
    // Every request fitted: none was refused, none retried.
    assert_eq!(chat(&fake.requests()).len(), 3);
    assert!(kinds(&repo.events(&run), "model_retry").is_empty());
}

#[test]
fn a_request_the_server_says_is_too_long_is_shortened_and_sent_again() {
    let repo = big_repo();
    let agent = rename_agent("foo", "bar");
    let fake = FakeModel::start(move |req, _| {
        if req.path == "/props" {
            return Reply::Status(404, vec![], "{}".into());
        }
        over(req, 4096).unwrap_or_else(|| Reply::Stream(agent(req)))
    });
    let run = run(&repo, &fake, &[]);
    run.assert_code(0);
    assert!(repo.read("src/a.py").starts_with("bar()\n"));
    let events = repo.events(&run);
    let retries = kinds(&events, "model_retry");
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0]["reason"]
            .as_str()
            .unwrap()
            .contains("does not fit the context window"),
        "{retries:?}"
    );
    // The refused request was sent again, shorter, and fitted.
    let all = fake.requests();
    let requests = chat(&all);
    assert_eq!(requests.len(), 4);
    assert!(requests[3].body.to_string().len() / 3 <= 4096);
}
