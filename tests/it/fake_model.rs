//! The test fake of the model API: an OpenAI-compatible `/chat/completions` endpoint on
//! 127.0.0.1, answering from a script and recording every request.
//!
//! Written by hand on std's TcpListener (rather than wiremock) because tests need what a
//! mock server does not do: streams sent as real server-sent events, connections dropped
//! mid-request, slow answers, and a count of requests in flight. Also used by
//! `benches/llm_bench.rs`.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A whole JSON answer.
    Json(Value),
    /// The same answer as server-sent events, tool-call arguments in fragments.
    Stream(Value),
    /// An error status, with extra headers and a body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// Close the connection without answering.
    Drop,
    /// Answer after a delay.
    After(Duration, Box<Reply>),
    /// A stream of content deltas that never finishes (until the client hangs up, or 2 GB).
    Endless,
    /// A stream whose first line never ends (until the client hangs up, or 2 GB).
    EndlessLine,
    /// The answer as llama.cpp's server sends it: server-sent events in a chunked body on a
    /// connection it says to keep alive, which it then closes when the next request comes
    /// (without answering it).
    StreamThenCloseOnNext(Value),
    /// The answer as hosted APIs send it: server-sent events in a chunked body, the
    /// connection kept alive for the client's next request.
    StreamKeepAlive(Value),
}

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub struct Request {
    /// Requests being answered when this one arrived (itself included).
    pub in_flight: usize,
    pub arrived: std::time::Instant,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn messages(&self) -> &Vec<Value> {
        self.body["messages"].as_array().expect("messages")
    }

    /// How many answers the model has given in this conversation so far.
    pub fn turn(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    /// The task's files, from the first user message.
    pub fn task_files(&self) -> Vec<String> {
        let first = self.messages()[1]["content"].as_str().unwrap_or("");
        first
            .split("Files of this task:\n")
            .nth(1)
            .unwrap_or("")
            .lines()
            .take_while(|l| l.starts_with("- "))
            .map(|l| l[2..].to_string())
            .collect()
    }

    /// The contents of the tool results in this request's conversation, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// The content of the last message.
    pub fn last(&self) -> &Value {
        self.messages().last().expect("a message")
    }
}

type Script = dyn Fn(&Request, usize) -> Reply + Send + Sync;

pub struct FakeModel {
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
    /// Paths of the GET requests (`/props`).
    gets: Arc<Mutex<Vec<String>>>,
    max_in_flight: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    port: u16,
}

impl FakeModel {
    /// Starts the server; `script(request, n)` gives the answer to the n-th request (0-based).
    pub fn start(script: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let gets = Arc::new(Mutex::new(Vec::new()));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let counter = Arc::new(AtomicUsize::new(0));
        {
            let (requests, stop, gets) = (requests.clone(), stop.clone(), gets.clone());
            let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (requests, script, counter, gets) = (
                        requests.clone(),
                        script.clone(),
                        counter.clone(),
                        gets.clone(),
                    );
                    let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
                    std::thread::spawn(move || {
                        serve(
                            stream,
                            &requests,
                            &gets,
                            &*script,
                            &counter,
                            &in_flight,
                            &max_in_flight,
                        )
                    });
                }
            });
        }
        Self {
            url: format!("http://127.0.0.1:{port}/v1"),
            requests,
            gets,
            max_in_flight,
            stop,
            port,
        }
    }

    /// The chat requests (POST), in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The paths of the GET requests (`/props`).
    pub fn gets(&self) -> Vec<String> {
        self.gets.lock().unwrap().clone()
    }

    /// The most requests that were being answered at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One HTTP/1.1 request as read off a connection (a `Content-Length` body only).
pub struct RawRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The next request on the connection; `None` when it closes.
pub fn read_request(reader: &mut BufReader<TcpStream>) -> Option<RawRequest> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).ok()? == 0 {
        return None;
    }
    let mut words = request_line.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let path = words.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(RawRequest {
        method,
        path,
        headers,
        body,
    })
}

fn serve(
    stream: TcpStream,
    requests: &Mutex<Vec<Request>>,
    gets: &Mutex<Vec<String>>,
    script: &Script,
    counter: &AtomicUsize,
    in_flight: &AtomicUsize,
    max_in_flight: &AtomicUsize,
) {
    // As servers do (Go's, Node's, asyncio's): each chunk of a streamed answer leaves when
    // written, not held by Nagle's algorithm until the previous one is acknowledged.
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut out = stream;
    loop {
        let Some(RawRequest {
            method,
            path,
            headers,
            body,
        }) = read_request(&mut reader)
        else {
            return;
        };
        if method == "GET" {
            // What a client asks of the server besides the chat (`/props`): the script's
            // answer if it has one for this path, else 404; not a request of the chat.
            let request = Request {
                in_flight: 0,
                arrived: std::time::Instant::now(),
                path,
                headers,
                body: Value::Null,
            };
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                script(&request, usize::MAX)
            }))
            .unwrap_or_else(|_| Reply::Status(404, vec![], "{}".into()));
            gets.lock().unwrap().push(request.path);
            if !write_reply(&mut out, reply) {
                return;
            }
            continue;
        }
        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        max_in_flight.fetch_max(now, Ordering::SeqCst);
        let request = Request {
            in_flight: now,
            arrived: std::time::Instant::now(),
            path,
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        requests.lock().unwrap().push(request.clone());
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut reply = script(&request, n);
        while let Reply::After(delay, next) = reply {
            std::thread::sleep(delay);
            reply = *next;
        }
        // No longer in flight once the answer starts: the client cannot send its next request
        // before it has this one.
        in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Reply::StreamThenCloseOnNext(answer) = &reply {
            write_chunked_stream(&mut out, answer);
            // The next request on this connection gets no answer: the socket closes.
            let mut next = String::new();
            let _ = reader.read_line(&mut next);
            return;
        }
        let keep_open = write_reply(&mut out, reply);
        if !keep_open {
            return;
        }
    }
}

/// Server-sent events of `answer` in a chunked body, the connection kept alive.
fn write_chunked_stream(out: &mut TcpStream, answer: &Value) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n";
    let _ = out.write_all(head.as_bytes());
    let mut events: Vec<String> = stream_chunks(answer)
        .iter()
        .map(|c| format!("data: {c}\n\n"))
        .collect();
    events.push("data: [DONE]\n\n".into());
    for event in events {
        let _ = out.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes());
    }
    let _ = out.write_all(b"0\r\n\r\n");
    let _ = out.flush();
}

/// Writes the reply; false when the connection must close afterwards.
fn write_reply(out: &mut TcpStream, reply: Reply) -> bool {
    match reply {
        Reply::After(delay, reply) => {
            std::thread::sleep(delay);
            write_reply(out, *reply)
        }
        Reply::Drop => {
            let _ = out.shutdown(std::net::Shutdown::Both);
            false
        }
        Reply::Json(body) => {
            let body = body.to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            out.write_all(head.as_bytes()).is_ok() && out.write_all(body.as_bytes()).is_ok()
        }
        Reply::Status(code, extra, body) => {
            let mut head =
                format!("HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\n");
            for (k, v) in extra {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            out.write_all(head.as_bytes()).is_ok() && out.write_all(body.as_bytes()).is_ok()
        }
        Reply::Endless | Reply::EndlessLine => {
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = out.write_all(head.as_bytes());
            let piece = match reply {
                Reply::Endless => format!(
                    "data: {}\n\n",
                    json!({"choices": [{"index": 0, "delta": {"content": "x".repeat(4000)}}]})
                ),
                _ => "x".repeat(4096),
            };
            if matches!(reply, Reply::EndlessLine) {
                let _ = out.write_all(b"data: ");
            }
            let mut sent = 0usize;
            while sent < 2_000_000_000 && out.write_all(piece.as_bytes()).is_ok() {
                sent += piece.len();
            }
            let _ = out.shutdown(std::net::Shutdown::Both);
            false
        }
        Reply::StreamThenCloseOnNext(answer) => {
            write_chunked_stream(out, &answer);
            false
        }
        Reply::StreamKeepAlive(answer) => {
            write_chunked_stream(out, &answer);
            true
        }
        Reply::Stream(answer) => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
            let _ = out.write_all(head.as_bytes());
            for chunk in stream_chunks(&answer) {
                let _ = out.write_all(format!("data: {chunk}\n\n").as_bytes());
                let _ = out.flush();
            }
            let _ = out.write_all(b"data: [DONE]\n\n");
            let _ = out.shutdown(std::net::Shutdown::Both);
            false
        }
    }
}

/// A whole answer cut into the chunks a streaming server sends: the role, each tool call's
/// name and then its arguments in three fragments, the finish reason, and a usage chunk.
fn stream_chunks(answer: &Value) -> Vec<Value> {
    let message = &answer["choices"][0]["message"];
    let mut chunks =
        vec![json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]})];
    if let Some(text) = message["content"].as_str() {
        chunks.push(json!({"choices": [{"index": 0, "delta": {"content": text}}]}));
    }
    for (i, call) in message["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": i, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}}]}}]}));
        let args = call["function"]["arguments"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let cut: Vec<usize> = vec![0, args.len() / 3, 2 * args.len() / 3, args.len()]
            .into_iter()
            .map(|mut c| {
                while !args.is_char_boundary(c) {
                    c += 1;
                }
                c
            })
            .collect();
        for w in cut.windows(2) {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": i, "function": {"arguments": &args[w[0]..w[1]]}}]}}]}));
        }
    }
    let finish = answer["choices"][0]["finish_reason"]
        .as_str()
        .unwrap_or("tool_calls");
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
    if let Some(usage) = answer.get("usage") {
        chunks.push(json!({"choices": [], "usage": usage}));
    }
    chunks
}

/// A whole answer calling these tools (arguments as JSON strings, as OpenAI sends them).
pub fn tool_calls(calls: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("call_{i}_{}", name), "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": null, "tool_calls": calls}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    })
}

/// A tool call with arguments that are not JSON at all.
pub fn raw_tool_call(name: &str, raw_arguments: &str) -> Value {
    json!({
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_raw", "type": "function",
                         "function": {"name": name, "arguments": raw_arguments}}]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20}
    })
}

/// The scripted agent of most tests: read the task's first file, replace `old` with `new`
/// everywhere in it, finish.
pub fn rename_agent(old: &'static str, new: &'static str) -> impl Fn(&Request) -> Value {
    move |req| {
        let file = req.task_files().first().cloned().unwrap_or_default();
        match req.turn() {
            0 => tool_calls(&[("read_file", json!({"path": file}))]),
            1 => tool_calls(&[(
                "edit_file",
                json!({"path": file, "old_string": old, "new_string": new, "replace_all": true}),
            )]),
            _ => tool_calls(&[(
                "finish",
                json!({"status": "done", "summary": format!("renamed {old} to {new}")}),
            )]),
        }
    }
}
