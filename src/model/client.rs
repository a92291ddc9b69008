//! The chat-completions client: one request with retries.
//!
//! `POST {base_url}/chat/completions` with function tools, streamed (SSE) by default. A
//! failed attempt is classified once ([`AttemptError`]) and the retry decision is one
//! exhaustive `match` ([`decide`]): 429, 408, 5xx, timeouts, refused or dropped connections
//! and cut streams are retried with exponential backoff and jitter, honouring `Retry-After`;
//! anything else fails the call at once. A 429 also halves the run-wide limit of calls in
//! flight ([`AdaptiveLimit`]).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::limit::AdaptiveLimit;
use super::sse::{self, MAX_ANSWER, Reply, StreamAssembler, StreamError};
use crate::settings::{ApiKey, ModelSettings};

#[derive(Debug, Clone)]
pub enum AttemptError {
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
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptError::Status { code, body, .. } => write!(f, "HTTP {code}: {body}"),
            AttemptError::Timeout => f.write_str("the request timed out"),
            AttemptError::Connect(e) => write!(f, "cannot connect: {e}"),
            AttemptError::Interrupted(e) => write!(f, "interrupted: {e}"),
            AttemptError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Try again after `after`; `throttled` when the server asked everyone to slow down.
    Retry {
        after: Duration,
        throttled: bool,
    },
    Fail,
}

/// Whether (and when) to retry after attempt number `attempt` (0-based) failed.
pub fn decide(error: &AttemptError, attempt: u32) -> Decision {
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
        AttemptError::Timeout | AttemptError::Connect(_) | AttemptError::Interrupted(_) => {
            Decision::Retry {
                after: backoff,
                throttled: false,
            }
        }
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
pub struct RetryNotice {
    pub attempt: u32,
    pub wait: Duration,
    pub reason: String,
}

pub struct ChatClient {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<ApiKey>,
    stream: bool,
    max_retries: u32,
    limit: Arc<AdaptiveLimit>,
}

impl ChatClient {
    pub fn new(
        settings: &ModelSettings,
        model: String,
        key: Option<ApiKey>,
        limit: Arc<AdaptiveLimit>,
    ) -> anyhow::Result<Self> {
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(settings.connect_timeout_secs))
            .timeout(Duration::from_secs(settings.request_timeout_secs))
            .user_agent(concat!("swarm/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", settings.base_url),
            model,
            key,
            stream: settings.stream,
            max_retries: settings.max_retries,
            limit,
        })
    }

    /// One model turn, retried as [`decide`] says. `turn` numbers made-up tool-call ids.
    pub async fn chat(
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
            "tool_choice": "auto",
        });
        if self.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let mut attempt = 0;
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
        let response = request.send().await.map_err(classify)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|s| Duration::from_secs_f64(s.clamp(0.0, 300.0)));
            let text = read_capped(response, 64 * 1024).await.unwrap_or_default();
            return Err(AttemptError::Status {
                code: status.as_u16(),
                retry_after,
                body: String::from_utf8_lossy(&text).chars().take(500).collect(),
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

fn classify(e: reqwest::Error) -> AttemptError {
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

/// rustls needs a process-wide crypto provider; swarm uses ring's.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

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
