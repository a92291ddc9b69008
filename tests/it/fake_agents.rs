//! Test fakes of the APIs real coding-agent CLIs speak, scripted to read a file, edit it and
//! stop: Anthropic Messages (Claude Code) and OpenAI Responses (Codex). Served on 127.0.0.1
//! with server-sent events, as the real APIs stream; every request is recorded.
//!
//! The scripts are by turn: the number of assistant messages already in the conversation
//! says what to answer next. The task's file is `a.txt` in the agent's working directory,
//! which the agents state in their prompts.

use std::io::{BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::fake_model::{RawRequest, read_request};

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Which API the fake speaks.
#[derive(Debug, Clone, Copy)]
pub enum Api {
    AnthropicMessages,
    OpenAiResponses,
    /// Refuses every request with a 401 whose body echoes the key it was sent, as is and in
    /// base64 (as some servers and proxies do).
    RejectsKey,
    /// Anthropic Messages, but the first `n` requests get a 429 with `retry-after: 1`.
    Throttled(usize),
    /// Anthropic Messages, scripted as a parent agent that delegates to swarm's MCP server:
    /// `mcp__swarm__refactor` (foo to bar with sed, waiting), then `mcp__swarm__result` of the
    /// run id it answered, then a text that quotes that result.
    Delegates,
}

pub struct FakeAgentApi {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeAgentApi {
    pub fn start(api: Api) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let throttle = Arc::new(Mutex::new(match api {
            Api::Throttled(n) => n,
            _ => 0,
        }));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, throttle) = (log.clone(), throttle.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, api, &log, &throttle);
                });
            }
        });
        Self { port, seen }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(
    stream: TcpStream,
    api: Api,
    log: &Mutex<Vec<Seen>>,
    throttle: &Mutex<usize>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let Some(RawRequest {
            method,
            path,
            headers,
            body,
        }) = read_request(&mut reader)
        else {
            return Ok(());
        };
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        log.lock().unwrap().push(Seen {
            path: path.clone(),
            headers,
            body: body.clone(),
        });
        if method != "POST" {
            // No WebSocket transport here (Codex falls back to HTTPS).
            out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        if path.contains("count_tokens") {
            return json_reply(&mut out, &json!({"input_tokens": 10}));
        }
        {
            let mut left = throttle.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                let body =
                    r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
                return write!(
                    out,
                    "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        }
        let events = match api {
            Api::AnthropicMessages | Api::Throttled(_) => anthropic(&body),
            Api::Delegates => delegates(&body),
            Api::OpenAiResponses => responses(&body),
            Api::RejectsKey => {
                let key = log
                    .lock()
                    .unwrap()
                    .last()
                    .and_then(|r| r.header("x-api-key").map(str::to_string));
                return reject(&mut out, &key.unwrap_or_default());
            }
        };
        out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
        )?;
        for (event, data) in events {
            write!(out, "event: {event}\ndata: {data}\n\n")?;
        }
        out.flush()?;
        return Ok(());
    }
}

fn reject(out: &mut TcpStream, key: &str) -> std::io::Result<()> {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("key:{key}"));
    let body = json!({"type": "error", "error": {"type": "authentication_error",
        "message": format!("invalid x-api-key {key} (Basic {encoded})")}})
    .to_string();
    write!(
        out,
        "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn json_reply(out: &mut TcpStream, value: &Value) -> std::io::Result<()> {
    let body = value.to_string();
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The first line of `text` after `marker`.
fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let start = text.find(marker)? + marker.len();
    text[start..].lines().next().map(str::trim)
}

/// What the agent is asked for, by turn: read `a.txt`, replace foo by bar, say it is done.
enum Step {
    Read(String),
    Edit(String),
    Done,
}

fn step(turn: usize, cwd: Option<&str>) -> Step {
    let file = format!("{}/a.txt", cwd.unwrap_or("."));
    match turn {
        0 => Step::Read(file),
        1 => Step::Edit(file),
        _ => Step::Done,
    }
}

/// Anthropic Messages: Read, Edit, then text, as Claude Code's tools take them.
fn anthropic(body: &Value) -> Vec<(&'static str, String)> {
    let model = body["model"].as_str().unwrap_or("claude");
    let system: String = match &body["system"] {
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.as_str().unwrap_or("").to_string(),
    };
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    // The step after the tool whose result came last (Claude Code may drop or merge earlier
    // messages, so the conversation's length says less).
    let results: Vec<String> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["type"] == "tool_result")
        .filter_map(|c| c["tool_use_id"].as_str().map(str::to_string))
        .collect();
    let turn = match results.last().map(String::as_str) {
        None => 0,
        Some("toolu_read") => 1,
        Some(_) => 2,
    };
    let cwd = after(&system, "Primary working directory: ");
    let (block, stop) = match (has_tools, step(turn, cwd)) {
        (true, Step::Read(file)) => (
            json!({"type": "tool_use", "id": "toolu_read", "name": "Read", "input": {"file_path": file}}),
            "tool_use",
        ),
        (true, Step::Edit(file)) => (
            json!({"type": "tool_use", "id": "toolu_edit", "name": "Edit",
                   "input": {"file_path": file, "old_string": "foo", "new_string": "bar"}}),
            "tool_use",
        ),
        _ => (
            json!({"type": "text", "text": "Renamed foo to bar."}),
            "end_turn",
        ),
    };
    message_events(model, &block, stop)
}

/// The server-sent events of one assistant message holding `block`.
fn message_events(model: &str, block: &Value, stop: &str) -> Vec<(&'static str, String)> {
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "usage": {"input_tokens": 1000, "output_tokens": 1}}}),
    )];
    if block["type"] == "text" {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": block["text"]}}),
        ));
    } else {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block":
                {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
        ));
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta":
                {"type": "input_json_delta", "partial_json": block["input"].to_string()}}),
        ));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 50}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
        .into_iter()
        .map(|(e, d)| (e, d.to_string()))
        .collect()
}

/// The tool results in `body`'s conversation: (tool_use_id, text).
fn tool_results(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["type"] == "tool_result")
        .map(|c| {
            let text = match &c["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                _ => String::new(),
            };
            (c["tool_use_id"].as_str().unwrap_or("").to_string(), text)
        })
        .collect()
}

/// The ids of the tool calls whose results a request carries.
pub fn tool_results_of(body: &Value) -> Vec<String> {
    tool_results(body).into_iter().map(|(id, _)| id).collect()
}

/// A parent agent delegating to swarm over MCP: refactor, then result, then a summary.
fn delegates(body: &Value) -> Vec<(&'static str, String)> {
    let model = body["model"].as_str().unwrap_or("claude");
    let offers = |name: &str| {
        body["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == name))
    };
    let results = tool_results(body);
    let answered = |id: &str| {
        results
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, t)| t.clone())
    };
    let (block, stop) = if !offers("mcp__swarm__refactor") {
        (
            json!({"type": "text", "text": "(no swarm here)"}),
            "end_turn",
        )
    } else if let Some(result) = answered("toolu_result") {
        (
            json!({"type": "text", "text": format!("swarm says: {result}")}),
            "end_turn",
        )
    } else if let Some(started) = answered("toolu_refactor") {
        let run = serde_json::from_str::<Value>(&started)
            .ok()
            .and_then(|v| v["run_id"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("(no run id in {started})"));
        (
            json!({"type": "tool_use", "id": "toolu_result", "name": "mcp__swarm__result",
                   "input": {"run_id": run}}),
            "tool_use",
        )
    } else {
        (
            json!({"type": "tool_use", "id": "toolu_refactor", "name": "mcp__swarm__refactor",
                   "input": {"instruction": "rename foo to bar", "pathspecs": ["*.txt"],
                             "exec": "sed -i s/foo/bar/ \"$SWARM_FILE\"",
                             "wait_seconds": 60}}),
            "tool_use",
        )
    };
    message_events(model, &block, stop)
}

/// OpenAI Responses: a shell command that edits the file, then a message, as Codex takes
/// them (its `shell` function tool).
fn responses(body: &Value) -> Vec<(&'static str, String)> {
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let calls = input
        .iter()
        .filter(|i| i["type"] == "function_call" || i["type"] == "local_shell_call")
        .count();
    let item = if calls == 0 {
        json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
               "arguments": json!({"cmd": "sed -i s/foo/bar/ a.txt"}).to_string(),
               "status": "completed"})
    } else {
        json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Renamed foo to bar.", "annotations": []}]})
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_fake", "object": "response", "status": status, "model": body["model"],
               "output": output,
               "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": 1050}})
    };
    vec![
        (
            "response.created",
            json!({"type": "response.created", "response": response("in_progress", json!([]))}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": response("completed", json!([item]))}),
        ),
    ]
    .into_iter()
    .map(|(e, d)| (e, d.to_string()))
    .collect()
}
