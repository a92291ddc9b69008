//! One request through the gateway: its route, its credentials swapped in, the budget, the
//! shared back-off, the upstream's answer streamed back (redacted, its usage metered).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

use super::usage::UsageReader;
use super::{Gateway, Spent};
use crate::events::Event;
use crate::ids::TaskId;
use crate::model::client::{self, AttemptError, Decision};
use crate::model::limit::Permit;
use crate::secrets::StreamRedactor;

/// The largest request body the gateway takes (a model request with images is a few MiB).
const REQUEST_CAP: usize = 64 * 1024 * 1024;
/// Headers that carry a credential: where placeholders are swapped for real values.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "x-api-key", "x-goog-api-key", "api-key"];
/// Hop-by-hop headers (RFC 9110), and those the gateway sets itself.
const NOT_FORWARDED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    // Answers must come uncompressed, so their usage can be read.
    "accept-encoding",
];

type Body = BoxBody<Bytes, std::io::Error>;

/// What one listener serves.
pub(super) struct ListenerState {
    pub(super) gateway: Arc<Gateway>,
    pub(super) task: TaskId,
    pub(super) routes: Vec<BoundRoute>,
    pub(super) spent: Arc<Mutex<Spent>>,
}

/// An API served to the process: its path, where it goes, the placeholders to swap.
pub(super) struct BoundRoute {
    pub(super) name: String,
    pub(super) upstream: String,
    /// `(placeholder, real value)`.
    pub(super) swaps: Vec<(String, String)>,
}

/// A request the gateway answers itself.
struct Refusal {
    status: StatusCode,
    message: String,
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

pub(super) async fn handle(
    state: Arc<ListenerState>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    Ok(match forward(&state, req).await {
        Ok(response) => response,
        Err(refusal) => error_response(refusal),
    })
}

/// The answer of a refused request, in a shape every API client reads (`error.message`).
fn error_response(refusal: Refusal) -> Response<Body> {
    let body = serde_json::json!({
        "type": "error",
        "error": {
            "type": "swarm_gateway",
            "code": refusal.status.as_u16(),
            "message": refusal.message,
        },
    });
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() = refusal.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn full(text: String) -> Body {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

/// A request as it goes upstream.
struct Outgoing {
    method: reqwest::Method,
    url: reqwest::Url,
    headers: HeaderMap,
    body: Bytes,
    /// The model asked for, for the price when the answer does not name it.
    model: String,
}

async fn forward(state: &ListenerState, req: Request<Incoming>) -> Result<Response<Body>, Refusal> {
    let outgoing = outgoing(state, req).await?;
    if let Some(why) = state.gateway.meter.exhausted() {
        return Err(refuse(
            StatusCode::PAYMENT_REQUIRED,
            format!("swarm: {why}; no more model requests in this run"),
        ));
    }
    let (answer, permit) = state.gateway.send(&state.task, &outgoing).await?;
    Ok(stream_back(state, answer, permit, outgoing.model))
}

/// The request as it goes upstream: its route's endpoint, the real credentials in place of
/// the placeholders (refused without one), hop-by-hop headers dropped, the body redacted.
async fn outgoing(state: &ListenerState, req: Request<Incoming>) -> Result<Outgoing, Refusal> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    let (name, rest) = path
        .trim_start_matches('/')
        .split_once('/')
        .map(|(n, r)| (n, format!("/{r}")))
        .unwrap_or((path.trim_start_matches('/'), String::new()));
    let Some(route) = state.routes.iter().find(|r| r.name == name) else {
        let served: Vec<&str> = state.routes.iter().map(|r| r.name.as_str()).collect();
        return Err(refuse(
            StatusCode::NOT_FOUND,
            format!("swarm gateway: no API at /{name} (this agent's: {served:?})"),
        ));
    };
    let mut query = parts.uri.query().map(str::to_string);
    let mut headers = parts.headers;
    for name in NOT_FORWARDED {
        headers.remove(*name);
    }
    if !route.swaps.is_empty() && !swap_credentials(&mut headers, &mut query, &route.swaps) {
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "swarm gateway: the request does not carry the key swarm gave this agent",
        ));
    }
    let mut url = format!("{}{rest}", route.upstream);
    if let Some(query) = query {
        url.push('?');
        url.push_str(&query);
    }
    let url = reqwest::Url::parse(&url).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("swarm gateway: {e}: {url}"),
        )
    })?;
    let body = Limited::new(body, REQUEST_CAP)
        .collect()
        .await
        .map_err(|e| refuse(StatusCode::PAYLOAD_TOO_LARGE, format!("swarm gateway: {e}")))?
        .to_bytes();
    let (body, model) = prepare_body(body, &rest);
    Ok(Outgoing {
        method: parts.method,
        url,
        headers,
        body,
        model,
    })
}

/// Swaps every placeholder in the credential headers and the query for its real value;
/// `false` when none was there.
fn swap_credentials(
    headers: &mut HeaderMap,
    query: &mut Option<String>,
    swaps: &[(String, String)],
) -> bool {
    let mut swapped = false;
    for name in CREDENTIAL_HEADERS {
        let Some(value) = headers.get(*name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        let mut value = value.to_string();
        for (placeholder, real) in swaps {
            if value.contains(placeholder.as_str()) {
                value = value.replace(placeholder.as_str(), real);
                swapped = true;
            }
        }
        if let Ok(mut v) = HeaderValue::from_str(&value) {
            v.set_sensitive(true);
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    if let Some(q) = query {
        for (placeholder, real) in swaps {
            if q.contains(placeholder.as_str()) {
                *q = q.replace(placeholder.as_str(), real);
                swapped = true;
            }
        }
    }
    swapped
}

/// The body as it goes upstream (redacted; a streamed chat completion asks for its usage),
/// and the model it asks for (else the model in a Gemini path, `models/NAME:…`).
fn prepare_body(body: Bytes, path: &str) -> (Bytes, String) {
    let from_path = path
        .split("models/")
        .nth(1)
        .and_then(|m| m.split([':', '/', '?']).next())
        .unwrap_or("")
        .to_string();
    let mut json: Option<Value> = serde_json::from_slice(&body).ok();
    let model = json
        .as_ref()
        .and_then(|v| v.get("model"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or(from_path);
    let mut body = match crate::secrets::redact_bytes(&body) {
        std::borrow::Cow::Borrowed(_) => body,
        std::borrow::Cow::Owned(clean) => {
            json = serde_json::from_slice(&clean).ok();
            Bytes::from(clean)
        }
    };
    // Without `include_usage`, a streamed chat completion says nothing of its usage: the one
    // change the gateway makes to a body.
    if path.ends_with("/chat/completions")
        && let Some(mut v) = json.filter(|v| v["stream"] == Value::Bool(true))
        && v.pointer("/stream_options/include_usage") != Some(&Value::Bool(true))
    {
        match v.get_mut("stream_options").and_then(Value::as_object_mut) {
            Some(options) => {
                options.insert("include_usage".into(), Value::Bool(true));
            }
            None => v["stream_options"] = serde_json::json!({"include_usage": true}),
        }
        if let Ok(bytes) = serde_json::to_vec(&v) {
            body = Bytes::from(bytes);
        }
    }
    (body, model)
}

impl Gateway {
    /// Sends `req`, waiting out rate limits together with every other request to its
    /// upstream and retrying as the built-in client does; the answer (an error status passed
    /// through when retries are spent) and its place among the requests in flight.
    async fn send(
        &self,
        task: &TaskId,
        req: &Outgoing,
    ) -> Result<(reqwest::Response, Option<Permit>), Refusal> {
        let endpoint = self.endpoint(&req.url);
        let started = tokio::time::Instant::now();
        let (mut attempt, mut stale_resent) = (0u32, false);
        loop {
            let permit = endpoint.ready().await;
            let sent = self
                .http
                .request(req.method.clone(), req.url.clone())
                .headers(req.headers.clone())
                .body(req.body.clone())
                .send()
                .await;
            let (error, answer) = match sent {
                Ok(answer) if !retryable(answer.status()) => {
                    endpoint.succeeded();
                    return Ok((answer, Some(permit)));
                }
                Ok(answer) => (
                    AttemptError::Status {
                        code: answer.status().as_u16(),
                        retry_after: client::retry_after(answer.headers()),
                        body: String::new(),
                    },
                    Some(answer),
                ),
                Err(e) if client::stale(&e) && !stale_resent => {
                    stale_resent = true;
                    continue;
                }
                Err(e) => (client::classify(e), None),
            };
            drop(permit);
            let Decision::Retry { after, throttled } = client::decide(&error, attempt) else {
                return give_up(error, answer);
            };
            let throttled = throttled
                || matches!(
                    error,
                    AttemptError::Status {
                        code: 503 | 529,
                        ..
                    }
                );
            let patient = match throttled {
                true => started.elapsed() + after < self.throttle_patience,
                false => attempt < self.max_retries,
            };
            if !patient {
                return give_up(error, answer);
            }
            if throttled {
                endpoint.throttled(after);
            } else {
                tokio::time::sleep(after).await;
            }
            attempt += 1;
            self.sink.emit(Event::ModelRetry {
                task: task.clone(),
                attempt,
                wait_ms: after.as_millis() as u64,
                reason: format!("{} (swarm's gateway sends it again)", short(&error)),
            });
        }
    }
}

/// The last answer when there is one (the agent sees the upstream's own error), else a 502.
fn give_up(
    error: AttemptError,
    answer: Option<reqwest::Response>,
) -> Result<(reqwest::Response, Option<Permit>), Refusal> {
    match answer {
        Some(answer) => Ok((answer, None)),
        None => Err(refuse(
            StatusCode::BAD_GATEWAY,
            format!("swarm gateway: {}", short(&error)),
        )),
    }
}

fn short(error: &AttemptError) -> String {
    match error {
        AttemptError::Status { code, .. } => format!("HTTP {code}"),
        other => other.to_string(),
    }
}

/// 429, 408 and server errors are worth sending again; anything else is the agent's.
fn retryable(status: reqwest::StatusCode) -> bool {
    status.as_u16() == 429 || status.as_u16() == 408 || status.is_server_error()
}

/// The upstream's answer, streamed to the agent as it comes: redacted, and its usage read
/// on the way and recorded when it ends (or when the agent stops reading).
fn stream_back(
    state: &ListenerState,
    answer: reqwest::Response,
    permit: Option<Permit>,
    model: String,
) -> Response<Body> {
    let mut response = Response::builder().status(answer.status().as_u16());
    let content_type = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    for (name, value) in answer.headers() {
        if !NOT_FORWARDED.contains(&name.as_str()) {
            response = response.header(name, value);
        }
    }
    let metering = Metering {
        reader: Some(UsageReader::new(&content_type)),
        model,
        state: MeterTarget {
            gateway: state.gateway.clone(),
            task: state.task.clone(),
            spent: state.spent.clone(),
        },
        _permit: permit,
    };
    let redactor = crate::secrets::redactor().stream();
    let body = futures_util::stream::unfold(
        Some((answer.bytes_stream(), redactor, metering)),
        |flow| async move {
            let (mut upstream, mut redactor, mut metering) = flow?;
            match upstream.next().await {
                Some(Ok(chunk)) => {
                    metering.feed(&chunk);
                    let clean = Bytes::from(redactor.push(&chunk));
                    Some((Ok(Frame::data(clean)), Some((upstream, redactor, metering))))
                }
                Some(Err(e)) => Some((Err(std::io::Error::other(e)), None)),
                None => {
                    let rest: StreamRedactor<'static> = redactor;
                    Some((Ok(Frame::data(Bytes::from(rest.finish()))), None))
                }
            }
        },
    );
    response
        .body(http_body_util::BodyExt::boxed(StreamBody::new(body)))
        .unwrap_or_else(|e| {
            error_response(refuse(
                StatusCode::BAD_GATEWAY,
                format!("swarm gateway: {e}"),
            ))
        })
}

/// Where an answer's usage is recorded.
struct MeterTarget {
    gateway: Arc<Gateway>,
    task: TaskId,
    spent: Arc<Mutex<Spent>>,
}

/// Reads an answer's usage as it passes; records it when dropped: at the end of the answer,
/// or when the agent stopped reading (the upstream counted what it sent).
struct Metering {
    reader: Option<UsageReader>,
    model: String,
    state: MeterTarget,
    /// The answer's place among the upstream's requests in flight, held to its end.
    _permit: Option<Permit>,
}

impl Metering {
    fn feed(&mut self, chunk: &[u8]) {
        if let Some(reader) = &mut self.reader {
            reader.feed(chunk);
        }
    }
}

impl Drop for Metering {
    fn drop(&mut self) {
        let Some(answer) = self.reader.take().and_then(UsageReader::finish) else {
            return;
        };
        let model = answer.model.unwrap_or_else(|| self.model.clone());
        let target = &self.state;
        let cost = target
            .gateway
            .meter
            .record(Some(&target.task), &model, answer.tokens);
        let mut spent = target.spent.lock().unwrap_or_else(|e| e.into_inner());
        spent.add(&Spent {
            tokens: answer.tokens,
            cost_usd: cost.unwrap_or(0.0),
            requests: 1,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_swapped_only_in_credentials() {
        let swaps = vec![("sk-swarm-placeholder-1".to_string(), "sk-real".to_string())];
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-api-key",
            HeaderValue::from_static("sk-swarm-placeholder-1"),
        );
        headers.insert(
            "x-other",
            HeaderValue::from_static("sk-swarm-placeholder-1"),
        );
        let mut query = None;
        assert!(swap_credentials(&mut headers, &mut query, &swaps));
        assert_eq!(headers["x-api-key"], "sk-real");
        assert_eq!(headers["x-other"], "sk-swarm-placeholder-1");
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer other"));
        assert!(!swap_credentials(&mut headers, &mut query, &swaps));
        let mut query = Some("alt=sse&key=sk-swarm-placeholder-1".to_string());
        assert!(swap_credentials(&mut HeaderMap::new(), &mut query, &swaps));
        assert_eq!(query.as_deref(), Some("alt=sse&key=sk-real"));
    }

    #[test]
    fn streamed_chat_completions_ask_for_their_usage() {
        let body = Bytes::from_static(br#"{"model":"m1","stream":true,"messages":[]}"#);
        let (body, model) = prepare_body(body, "/chat/completions");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(model, "m1");
        let same = Bytes::from_static(br#"{"model":"m2","messages":[]}"#);
        assert_eq!(prepare_body(same.clone(), "/v1/messages").0, same);
        let (_, model) = prepare_body(
            Bytes::new(),
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
        );
        assert_eq!(model, "gemini-2.5-pro");
    }
}
