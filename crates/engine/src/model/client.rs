//! The chat-completions client: one request with retries.
//!
//! `POST {base_url}/chat/completions` with function tools, streamed (SSE) by default. A
//! failed attempt is classified once ([`AttemptError`]) and the retry decision is one
//! exhaustive `match` ([`decide`]): 429, 408, 5xx, timeouts, refused or dropped connections
//! and cut streams are retried with exponential backoff and jitter, honouring `Retry-After`;
//! anything else fails the call at once. A 429 also halves the run-wide limit of calls in
//! flight ([`AdaptiveLimit`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use regex::Regex;

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::limit::AdaptiveLimit;
use super::sse::{self, MAX_ANSWER, Reply, StreamAssembler, StreamError};
use crate::settings::{ApiKey, ModelSettings};

#[derive(Debug, Clone)]
pub(crate) enum AttemptError {
    /// The server answered with an error status.
    Status {
        code: u16,
        retry_after: Option<Duration>,
        body: String,
    },
    /// No answer within the request timeout.
    Timeout,
    /// The connection could not be made.
    Connect(String),
    /// The connection broke, or the stream stopped, before the answer was complete.
    Interrupted(String),
    /// The answer cannot be understood, or the request cannot be built.
    Invalid(String),
    /// The request does not fit the model's context window (a 400 saying so), with the
    /// window when the server named it.
    ContextOverflow { limit: Option<u32>, body: String },
    /// A pooled connection that the server had closed (servers that close after a streamed
    /// reply while advertising keep-alive): nothing was answered; sent again at once.
    StaleConnection(String),
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptError::Status { code, body, .. } => write!(f, "HTTP {code}: {body}"),
            AttemptError::Timeout => f.write_str("the request timed out"),
            AttemptError::Connect(e) => write!(f, "cannot connect: {e}"),
            AttemptError::Interrupted(e) => write!(f, "interrupted: {e}"),
            AttemptError::Invalid(e) => write!(f, "{e}"),
            AttemptError::ContextOverflow { body, .. } => {
                write!(
                    f,
                    "the request does not fit the model's context window: {body}"
                )
            }
            AttemptError::StaleConnection(e) => write!(f, "stale connection: {e}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Try again after `after`; `throttled` when the server asked everyone to slow down.
    Retry {
        after: Duration,
        throttled: bool,
    },
    Fail,
}

/// Whether (and when) to retry after attempt number `attempt` (0-based) failed.
pub(crate) fn decide(error: &AttemptError, attempt: u32) -> Decision {
    let backoff = backoff(attempt);
    match error {
        AttemptError::Status {
            code: 429,
            retry_after,
            ..
        } => Decision::Retry {
            after: retry_after.unwrap_or(backoff),
            throttled: true,
        },
        AttemptError::Status {
            code, retry_after, ..
        } if *code == 408 || *code >= 500 => Decision::Retry {
            after: retry_after.unwrap_or(backoff),
            throttled: false,
        },
        AttemptError::Status { .. } => Decision::Fail,
        AttemptError::StaleConnection(_) => Decision::Retry {
            after: Duration::ZERO,
            throttled: false,
        },
        AttemptError::Timeout | AttemptError::Connect(_) | AttemptError::Interrupted(_) => {
            Decision::Retry {
                after: backoff,
                throttled: false,
            }
        }
        // The caller shortens the conversation; the same request would fail the same way.
        AttemptError::ContextOverflow { .. } => Decision::Fail,
        AttemptError::Invalid(_) => Decision::Fail,
    }
}

/// 0.5 s, 1 s, 2 s… capped at 30 s, each ±25 % so workers that failed together do not retry
/// together.
fn backoff(attempt: u32) -> Duration {
    let base = 0.5 * 2f64.powi(attempt.min(10) as i32);
    let jitter = 0.75 + fastrand::f64() * 0.5;
    Duration::from_secs_f64((base * jitter).min(30.0))
}

/// What the caller is told about a retry (for events and the live view).
#[derive(Debug, Clone)]
pub(crate) struct RetryNotice {
    pub attempt: u32,
    pub wait: Duration,
    pub reason: String,
}

pub(crate) struct ChatClient {
    http: reqwest::Client,
    url: String,
    /// The server's root (the base URL without `/v1`), for llama.cpp's `/props`.
    server: String,
    model: String,
    key: Option<ApiKey>,
    stream: bool,
    max_retries: u32,
    limit: Arc<AdaptiveLimit>,
    /// Fields every request carries besides the conversation (`max_tokens`, `temperature`,
    /// `tool_choice`, `[model] extra_body`).
    fields: serde_json::Map<String, Value>,
    max_output_tokens: Option<u32>,
    /// The context window in tokens (0: not known), configured, learned from the server or
    /// from an error naming it; shared by every task of the run.
    window: AtomicU32,
    asked_server: tokio::sync::OnceCell<()>,
}

impl ChatClient {
    pub(crate) fn new(
        settings: &ModelSettings,
        model: String,
        key: Option<ApiKey>,
        limit: Arc<AdaptiveLimit>,
    ) -> anyhow::Result<Self> {
        let mut http = crate::net::client(concat!("swarm/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(settings.connect_timeout_secs))
            .timeout(Duration::from_secs(settings.request_timeout_secs));
        if url::Url::parse(&settings.base_url).is_ok_and(|u| u.scheme() == "http") {
            // A server on plain HTTP (a local llama.cpp, vLLM, Ollama): no certificate is ever
            // checked (no redirect is followed), so the system's roots are not read from
            // `/etc/ssl/certs` (~9 ms of CPU at start); an HTTPS connection, were one tried,
            // trusts nobody.
            http = http.tls_certs_only([]);
        }
        let http = http.build()?;
        let mut fields = settings.extra_body.clone();
        fields.insert("tool_choice".into(), json!(settings.tool_choice));
        if let Some(max) = settings.max_output_tokens {
            fields.insert("max_tokens".into(), json!(max));
        }
        if let Some(t) = &settings.temperature {
            fields.insert("temperature".into(), Value::Number(t.clone()));
        }
        Ok(Self {
            http,
            url: format!("{}/chat/completions", settings.base_url),
            server: settings
                .base_url
                .trim_end_matches('/')
                .trim_end_matches("/v1")
                .to_string(),
            model,
            key,
            stream: settings.stream,
            max_retries: settings.max_retries,
            limit,
            fields,
            max_output_tokens: settings.max_output_tokens,
            window: AtomicU32::new(settings.context_window.unwrap_or(0)),
            asked_server: tokio::sync::OnceCell::new(),
        })
    }

    /// The model's context window in tokens, if known: configured, else asked once of the
    /// server (llama.cpp's `/props`), else learned from an error naming it.
    pub(crate) async fn context_window(&self) -> Option<u32> {
        self.asked_server
            .get_or_init(|| async {
                if self.window.load(Ordering::Relaxed) == 0
                    && let Some(n) = self.server_window().await
                {
                    self.window.store(n, Ordering::Relaxed);
                }
            })
            .await;
        Some(self.window.load(Ordering::Relaxed)).filter(|n| *n > 0)
    }

    /// After a request did not fit: the window is at most `limit` (when the server named
    /// it), else two thirds of what the request took (`sent_tokens`, estimated).
    pub(crate) fn shrink_window(&self, limit: Option<u32>, sent_tokens: u32) {
        let smaller = limit.unwrap_or(sent_tokens / 3 * 2).max(1);
        let _ = self
            .window
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(if now == 0 { smaller } else { now.min(smaller) })
            });
    }

    /// The model it asks.
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// The `max_tokens` each request asks for, if set.
    pub(crate) fn max_output_tokens(&self) -> Option<u32> {
        self.max_output_tokens
    }

    /// llama.cpp's `GET /props`: `default_generation_settings.n_ctx` (other servers answer
    /// 404, or nothing that says).
    async fn server_window(&self) -> Option<u32> {
        let mut request = self
            .http
            .get(format!("{}/props", self.server))
            .timeout(Duration::from_secs(5));
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let body = read_capped(response, 1024 * 1024).await.ok()?;
        let props: Value = serde_json::from_slice(&body).ok()?;
        props
            .pointer("/default_generation_settings/n_ctx")
            .or_else(|| props.get("n_ctx"))
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    }

    /// One model turn, retried as [`decide`] says. `turn` numbers made-up tool-call ids.
    pub(crate) async fn chat(
        &self,
        messages: &[Value],
        tools: &Value,
        turn: u32,
        on_retry: &(dyn Fn(&RetryNotice) + Send + Sync),
    ) -> Result<Reply, AttemptError> {
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "tools": tools,
        });
        for (k, v) in &self.fields {
            if body.get(k).is_none() {
                body[k] = v.clone();
            }
        }
        if self.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let mut attempt = 0;
        let mut stale_resends = 0;
        loop {
            let result = {
                let _permit = self.limit.acquire().await;
                self.attempt(&body, turn).await
            };
            let error = match result {
                Ok(reply) => {
                    self.limit.succeeded();
                    return Ok(reply);
                }
                Err(e) => e,
            };
            // Not a failure of the server's: sent again at once, without counting.
            if matches!(error, AttemptError::StaleConnection(_)) && stale_resends < STALE_RESENDS {
                stale_resends += 1;
                continue;
            }
            let Decision::Retry { after, throttled } = decide(&error, attempt) else {
                return Err(error);
            };
            if throttled {
                self.limit.throttled();
            }
            if attempt >= self.max_retries {
                return Err(error);
            }
            attempt += 1;
            on_retry(&RetryNotice {
                attempt,
                wait: after,
                reason: error.to_string(),
            });
            tokio::time::sleep(after).await;
        }
    }

    async fn attempt(&self, body: &Value, turn: u32) -> Result<Reply, AttemptError> {
        // No secret swarm knows leaves in a request body (docs/SECURITY.md).
        let body = serde_json::to_vec(body).map_err(|e| AttemptError::Invalid(e.to_string()))?;
        let body = crate::secrets::redact_bytes(&body).into_owned();
        let mut request = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(|e| match stale(&e) {
            true => AttemptError::StaleConnection(without_url(&e)),
            false => classify(e),
        })?;
        let status = response.status();
        if status.is_redirection() {
            let refused = crate::net::redirect_refused(status.as_u16(), response.headers());
            return Err(AttemptError::Invalid(format!("the model API {refused}")));
        }
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = read_capped(response, 64 * 1024).await.unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            if status.as_u16() == 400 && CONTEXT_OVERFLOW.is_match(&text) {
                return Err(AttemptError::ContextOverflow {
                    limit: context_limit(&text),
                    body: text.chars().take(500).collect(),
                });
            }
            return Err(AttemptError::Status {
                code: status.as_u16(),
                retry_after,
                body: text.chars().take(500).collect(),
            });
        }
        let is_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_stream {
            let mut assembler = StreamAssembler::default();
            let mut bytes = response.bytes_stream();
            while let Some(chunk) = bytes.next().await {
                let chunk = chunk.map_err(classify)?;
                assembler.feed(&chunk).map_err(|e| match e {
                    StreamError::Broken(e) => AttemptError::Interrupted(e),
                    StreamError::TooLarge(e) => AttemptError::Invalid(e),
                })?;
            }
            assembler.finish(turn).map_err(AttemptError::Interrupted)
        } else {
            // Also what servers that ignore `stream: true` send.
            let bytes = read_capped(response, MAX_ANSWER).await?;
            if bytes.len() > MAX_ANSWER {
                return Err(AttemptError::Invalid(format!(
                    "the answer is larger than {} MiB; swarm stops reading it",
                    MAX_ANSWER / (1024 * 1024)
                )));
            }
            let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
                AttemptError::Invalid(format!(
                    "the answer is not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                        .chars()
                        .take(300)
                        .collect::<String>()
                ))
            })?;
            sse::parse_whole(&value, turn).map_err(AttemptError::Invalid)
        }
    }
}

/// How many times one request is sent again at once, uncounted, after finding its pooled
/// connection closed. More than one: the pool may hold several connections a server closed
/// (one was still being given back when the next request opened another).
pub(crate) const STALE_RESENDS: u32 = 3;

/// How long the server asked to wait: `retry-after-ms`, else `retry-after` in seconds (at
/// most five minutes).
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite())
    };
    let seconds = number("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| number("retry-after"))?;
    Some(Duration::from_secs_f64(seconds.clamp(0.0, 300.0)))
}

/// The body of `response`, read up to `cap` bytes (and one byte more, so that the caller can
/// tell a body that is too large).
async fn read_capped(response: reqwest::Response, cap: usize) -> Result<Vec<u8>, AttemptError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(classify)?;
        let room = (cap + 1).saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() > cap {
            break;
        }
    }
    Ok(body)
}

/// Words of a 400 that says the request is larger than the model's context.
static CONTEXT_OVERFLOW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)context (length|size|window)|n_ctx|exceed_context_size|too many tokens|prompt is too long")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

/// The window an overflow error names: llama.cpp's `"n_ctx": 4096`, OpenAI's `maximum
/// context length is 8192 tokens`, `context size (4096)`.
fn context_limit(text: &str) -> Option<u32> {
    static LIMIT: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"(?i)"n_ctx"\s*:\s*(\d+)|context length is (\d+)|context (?:size|window|length)[^\d]{0,12}(\d+)"#)
            .unwrap_or_else(|e| unreachable!("{e}"))
    });
    let c = LIMIT.captures(text)?;
    (1..=3)
        .find_map(|i| c.get(i))
        .and_then(|m| m.as_str().parse().ok())
}

/// Did `send` fail because the pooled connection it used was already closed, before any
/// answer? hyper says "connection closed before message completed" when it sees the close
/// while waiting for the answer; when the close comes first, writing the request fails
/// with a reset or a broken pipe (which of the two depends on timing).
pub(crate) fn stale(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && h.is_incomplete_message()
        {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            );
        }
        source = s.source();
    }
    false
}

pub(crate) fn classify(e: reqwest::Error) -> AttemptError {
    if e.is_timeout() {
        AttemptError::Timeout
    } else if e.is_connect() {
        AttemptError::Connect(without_url(&e))
    } else if e.is_builder() {
        AttemptError::Invalid(without_url(&e))
    } else {
        // Body, decode and request errors: the connection broke under us.
        AttemptError::Interrupted(without_url(&e))
    }
}

fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_limits_named_in_errors() {
        let llama = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#;
        assert!(CONTEXT_OVERFLOW.is_match(llama));
        assert_eq!(context_limit(llama), Some(4096));
        let openai = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.";
        assert!(CONTEXT_OVERFLOW.is_match(openai));
        assert_eq!(context_limit(openai), Some(8192));
        assert!(!CONTEXT_OVERFLOW.is_match(r#"{"error":"invalid tool schema"}"#));
    }

    #[test]
    fn retry_decisions() {
        let status = |code, retry_after| AttemptError::Status {
            code,
            retry_after,
            body: String::new(),
        };
        assert_eq!(
            decide(&status(429, Some(Duration::from_secs(2))), 0),
            Decision::Retry {
                after: Duration::from_secs(2),
                throttled: true
            }
        );
        assert!(matches!(
            decide(&status(503, None), 0),
            Decision::Retry {
                throttled: false,
                ..
            }
        ));
        assert_eq!(decide(&status(400, None), 0), Decision::Fail);
        assert_eq!(decide(&status(401, None), 0), Decision::Fail);
        assert!(matches!(
            decide(&AttemptError::Timeout, 3),
            Decision::Retry { .. }
        ));
        assert_eq!(
            decide(&AttemptError::Invalid("x".into()), 0),
            Decision::Fail
        );
        let Decision::Retry { after, .. } = decide(&AttemptError::Connect("x".into()), 20) else {
            panic!()
        };
        assert!(after <= Duration::from_secs(30));
    }
}
