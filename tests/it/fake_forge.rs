//! A test fake of the forges' REST APIs that `swarm land` calls, on 127.0.0.1: GitHub's pull
//! requests (`/repos/{owner}/{repo}/pulls…`) and GitLab's merge requests
//! (`/projects/:id/merge_requests…`, `/users`). It keeps the requests it was asked to open,
//! lets a test merge or close them, checks the token, and records every call.

use std::io::{BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::fake_model::read_request;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    GitHub,
    GitLab,
}

/// A request opened on the fake.
#[derive(Debug, Clone)]
pub struct Pull {
    pub number: u64,
    /// The call that opened it, as sent.
    pub opened_with: Value,
    /// `open`, `closed`, `merged`.
    pub state: String,
    /// GitHub: the reviewers and team reviewers asked for.
    pub reviewers: Value,
}

impl Call {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Pull {
    pub fn head(&self) -> &str {
        let v = &self.opened_with;
        v["head"]
            .as_str()
            .or(v["source_branch"].as_str())
            .unwrap_or("")
    }
}

/// A call the fake received.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

#[derive(Default)]
struct State {
    pulls: Vec<Pull>,
    calls: Vec<Call>,
    /// Open the next request, then answer 502 (the answer lost on the way).
    lose_next_answer: bool,
    /// Open the next request, then answer only after a minute (for a test to kill the
    /// client in between).
    stall_next_answer: bool,
}

pub struct FakeForge {
    pub url: String,
    kind: Kind,
    token: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    port: u16,
}

impl FakeForge {
    /// Starts a fake of `kind` that accepts `token`.
    pub fn start(kind: Kind, token: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (state, stop, token) = (state.clone(), stop.clone(), token.to_string());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (state, token) = (state.clone(), token.clone());
                    std::thread::spawn(move || serve(stream, kind, &token, &state));
                }
            });
        }
        Self {
            url: format!("http://127.0.0.1:{port}"),
            kind,
            token: token.to_string(),
            state,
            stop,
            port,
        }
    }

    pub fn pulls(&self) -> Vec<Pull> {
        self.state.lock().unwrap().pulls.clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Marks request `number` merged (or `closed`).
    pub fn set_state(&self, number: u64, state: &str) {
        let mut st = self.state.lock().unwrap();
        let pull = st.pulls.iter_mut().find(|p| p.number == number).unwrap();
        pull.state = state.to_string();
    }

    pub fn lose_next_answer(&self) {
        self.state.lock().unwrap().lose_next_answer = true;
    }

    pub fn stall_next_answer(&self) {
        self.state.lock().unwrap().stall_next_answer = true;
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
}

impl Drop for FakeForge {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(stream: TcpStream, kind: Kind, token: &str, state: &Mutex<State>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    while let Some(raw) = read_request(&mut reader) {
        let call = Call {
            method: raw.method.clone(),
            path: raw.path.clone(),
            headers: raw.headers.clone(),
            body: String::from_utf8_lossy(&raw.body).into_owned(),
        };
        let header = |name: &str| {
            raw.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let authorized = match kind {
            Kind::GitHub => header("authorization") == Some(&format!("Bearer {token}")),
            Kind::GitLab => header("private-token") == Some(token),
        };
        let mut st = state.lock().unwrap();
        st.calls.push(call);
        let (status, body) = match authorized {
            false => (401, json!({"message": "Bad credentials"})),
            true => {
                let body: Value = serde_json::from_slice(&raw.body).unwrap_or(Value::Null);
                route(kind, &mut st, &raw.method, &raw.path, body)
            }
        };
        let stall = status == 201 && std::mem::take(&mut st.stall_next_answer);
        drop(st);
        if stall {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        let text = body.to_string();
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// `path?a=b&c=d` → (path, [(a, b), (c, d)]), percent-decoded.
fn split_query(full: &str) -> (String, Vec<(String, String)>) {
    let (path, query) = full.split_once('?').unwrap_or((full, ""));
    let pairs = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    (path.to_string(), pairs)
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

fn route(kind: Kind, st: &mut State, method: &str, full: &str, body: Value) -> (u16, Value) {
    let (path, query) = split_query(full);
    let q = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (kind, method, parts.as_slice()) {
        (Kind::GitHub, "GET", ["repos", owner, _, "pulls"]) => {
            let head = q("head").unwrap_or_default();
            let branch = head.strip_prefix(&format!("{owner}:")).unwrap_or("");
            let found: Vec<Value> = st
                .pulls
                .iter()
                .filter(|p| p.head() == branch)
                .map(github_json)
                .collect();
            (200, Value::Array(found))
        }
        (Kind::GitHub, "POST", ["repos", _, _, "pulls"]) => open(st, body, github_json),
        (Kind::GitHub, "POST", ["repos", _, _, "pulls", n, "requested_reviewers"]) => {
            let n: u64 = n.parse().unwrap();
            let pull = st.pulls.iter_mut().find(|p| p.number == n).unwrap();
            pull.reviewers = body;
            (201, github_json(pull))
        }
        (Kind::GitHub, "GET", ["repos", _, _, "pulls", n]) => {
            let n: u64 = n.parse().unwrap();
            match st.pulls.iter().find(|p| p.number == n) {
                Some(p) => (200, github_json(p)),
                None => (404, json!({"message": "Not Found"})),
            }
        }
        (Kind::GitLab, "GET", ["projects", _, "merge_requests"]) => {
            let branch = q("source_branch").unwrap_or_default();
            let found: Vec<Value> = st
                .pulls
                .iter()
                .filter(|p| p.head() == branch)
                .map(gitlab_json)
                .collect();
            (200, Value::Array(found))
        }
        (Kind::GitLab, "POST", ["projects", _, "merge_requests"]) => open(st, body, gitlab_json),
        (Kind::GitLab, "GET", ["projects", _, "merge_requests", n]) => {
            let n: u64 = n.parse().unwrap();
            match st.pulls.iter().find(|p| p.number == n) {
                Some(p) => (200, gitlab_json(p)),
                None => (404, json!({"message": "404 Not found"})),
            }
        }
        (Kind::GitLab, "GET", ["users"]) => match q("username").as_deref() {
            Some("ann") => (200, json!([{"id": 41, "username": "ann"}])),
            _ => (200, json!([])),
        },
        _ => (404, json!({"message": format!("no route {method} {path}")})),
    }
}

fn open(st: &mut State, body: Value, json_of: fn(&Pull) -> Value) -> (u16, Value) {
    let pull = Pull {
        number: st.pulls.len() as u64 + 1,
        opened_with: body,
        state: "open".into(),
        reviewers: Value::Null,
    };
    let answer = json_of(&pull);
    st.pulls.push(pull);
    if std::mem::take(&mut st.lose_next_answer) {
        return (502, json!({"message": "Bad Gateway"}));
    }
    (201, answer)
}

fn github_json(p: &Pull) -> Value {
    json!({
        "number": p.number,
        "html_url": format!("https://github.test/acme/app/pull/{}", p.number),
        "state": if p.state == "open" { "open" } else { "closed" },
        "merged": p.state == "merged",
        "merged_at": if p.state == "merged" { json!("2026-11-25T12:00:00Z") } else { Value::Null },
    })
}

fn gitlab_json(p: &Pull) -> Value {
    json!({
        "iid": p.number,
        "web_url": format!("https://gitlab.test/group/sub/app/-/merge_requests/{}", p.number),
        "state": if p.state == "open" { "opened" } else { p.state.as_str() },
    })
}
