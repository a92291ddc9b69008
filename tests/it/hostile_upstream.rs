//! A hostile model API (or anything on its path): it redirects, echoes what it was sent,
//! answers without a usage, cuts a stream before its usage, or answers past the gateway's
//! parse cap. Served on a loopback address of the test's choosing (`127.0.0.2` is another
//! host to an HTTP client, though the same machine), recording every request.

use std::io::{BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::fake_model::{RawRequest, read_request};

/// What the upstream does with every request.
#[derive(Debug, Clone)]
pub enum Hostile {
    /// `307 Temporary Redirect` to this location.
    Redirect(String),
    /// A whole Messages answer (with a usage) that echoes the request's path and query and
    /// its `x-api-key` in response headers and in the body.
    Echo,
    /// A whole Messages answer without a usage.
    NoUsage,
    /// A streamed message: `message_start` (10 input tokens), one text delta, then the
    /// connection closed, before `message_delta` and `message_stop`.
    CutStream,
    /// A whole Messages answer of 17 MiB, its (tiny) usage at the end.
    Huge,
}

/// A request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The path with its query.
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct HostileUpstream {
    /// `http://IP:PORT`.
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl HostileUpstream {
    pub fn start(ip: &str, hostile: Hostile) -> Self {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, hostile) = (log.clone(), hostile.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &hostile, &log);
                });
            }
        });
        Self { url, received }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, hostile: &Hostile, log: &Mutex<Vec<Received>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    let Some(RawRequest { path, headers, .. }) = read_request(&mut reader) else {
        return Ok(());
    };
    let key = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-api-key"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    log.lock().unwrap().push(Received {
        target: path.clone(),
        headers,
    });
    let usage = json!({"input_tokens": 1, "output_tokens": 1});
    let message = |extra: serde_json::Value| {
        let mut m = json!({"type": "message", "id": "msg_1", "role": "assistant",
            "model": "claude-hostile", "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn"});
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        m.to_string()
    };
    match hostile {
        Hostile::Redirect(location) => write!(
            out,
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        Hostile::Echo => {
            let body = message(json!({"usage": usage, "echo": {"key": key, "target": path}}));
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Echo-Key: {key}\r\nX-Echo-Target: {path}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        Hostile::NoUsage => json(&mut out, &message(json!({}))),
        Hostile::Huge => {
            let pad = "x".repeat(17 * 1024 * 1024);
            json(&mut out, &message(json!({"pad": pad, "usage": usage})))
        }
        Hostile::CutStream => {
            out.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
            )?;
            let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": "claude-hostile", "content": [],
                "usage": {"input_tokens": 10, "output_tokens": 0}}});
            let delta = json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "a long answer..."}});
            write!(out, "event: message_start\ndata: {start}\n\n")?;
            write!(out, "event: content_block_delta\ndata: {delta}\n\n")?;
            out.flush()
        }
    }
}

fn json(out: &mut TcpStream, body: &str) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    out.write_all(body.as_bytes())
}
