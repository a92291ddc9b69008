//! One request through the gateway: the operation it asks for (only those the gateway can
//! meter, [`super::operations`]), its credentials swapped in where its API takes them, its
//! spend reserved, then sent ([`super::send`]) and its answer streamed back
//! ([`super::answer`]). A request the gateway does not forward is answered by the gateway
//! itself, with the reason, and is a `gateway_refused` event.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

use super::exchange::{
    Body, ListenerState, NOT_FORWARDED, Outgoing, Refusal, error_response, full, refuse,
};
use super::meter::{Reservation, estimated_input};
use super::operations::{Dialect, Operation};
use crate::events::Event;
use crate::report::Tokens;

/// The largest request body the gateway takes (a model request with images is a few MiB).
const REQUEST_CAP: usize = 64 * 1024 * 1024;
/// Headers that carry a credential: where placeholders are swapped for real values.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "x-api-key", "x-goog-api-key", "api-key"];
pub(super) async fn handle(
    state: Arc<ListenerState>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let asked = format!("{} {}", req.method(), req.uri().path());
    Ok(match forward(&state, req).await {
        Ok(response) => response,
        Err(refusal) => {
            if refusal.status == StatusCode::PAYMENT_REQUIRED {
                state.short.cancel();
            }
            state.gateway.sink.emit(Event::GatewayRefused {
                task: state.task.clone(),
                request: crate::secrets::redact(&asked).into_owned(),
                status: refusal.status.as_u16(),
                reason: refusal.message.clone(),
            });
            error_response(refusal)
        }
    })
}

async fn forward(state: &ListenerState, req: Request<Incoming>) -> Result<Response<Body>, Refusal> {
    let outgoing = outgoing(state, req).await?;
    let reservation = match outgoing.operation {
        Operation::Generate(dialect) => Some((reserve(state, &outgoing).await?, dialect)),
        Operation::Free => None,
        Operation::Probe => return Ok(Response::new(full(String::new()))),
    };
    match state.gateway.send(&state.task, &outgoing).await {
        Ok((answer, permit)) => Ok(super::answer::stream_back(
            state,
            answer,
            permit,
            reservation,
        )),
        Err(refusal) => {
            // Nothing was answered: nothing spent.
            if let Some((reservation, _)) = reservation {
                reservation.release();
            }
            Err(refusal)
        }
    }
}

/// Reserves what a model request may spend: its input, estimated from its size, and the
/// most output it asks for (else the model's configured cap, else the default).
async fn reserve(state: &ListenerState, outgoing: &Outgoing) -> Result<Reservation, Refusal> {
    let meter = &state.gateway.meter;
    let ask = Tokens {
        prompt: estimated_input(outgoing.body.len()),
        completion: outgoing.max_output.unwrap_or_else(|| meter.output_cap()),
    };
    meter
        .reserve(Some(&state.task), &outgoing.model, ask)
        .await
        .map_err(|why| {
            refuse(
                StatusCode::PAYMENT_REQUIRED,
                format!("swarm: {why}; no more model requests from this agent"),
            )
        })
}

/// The request as it goes upstream: an operation its route forwards, the route's endpoint,
/// the real credentials in place of the placeholders (refused without one), hop-by-hop
/// headers dropped, the body redacted.
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
    let operation = route
        .api
        .operation(&parts.method, &rest)
        .map_err(|why| refuse(StatusCode::NOT_FOUND, format!("swarm gateway: {why}")))?;
    let mut query = parts.uri.query().map(str::to_string);
    let mut headers = parts.headers;
    for name in NOT_FORWARDED {
        headers.remove(*name);
    }
    let in_query = route.api.key_in_query().then_some(&mut query);
    // A probe goes nowhere: it needs no key.
    if operation != Operation::Probe
        && !route.swaps.is_empty()
        && !swap_credentials(&mut headers, in_query, &route.swaps)
    {
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
            format!("swarm gateway: {e}: {}", crate::secrets::redact(&url)),
        )
    })?;
    let body = Limited::new(body, REQUEST_CAP)
        .collect()
        .await
        .map_err(|e| refuse(StatusCode::PAYLOAD_TOO_LARGE, format!("swarm gateway: {e}")))?
        .to_bytes();
    let prepared = prepare_body(body, &rest, operation);
    Ok(Outgoing {
        method: parts.method,
        url,
        headers,
        body: prepared.body,
        operation,
        model: prepared.model,
        max_output: prepared.max_output,
    })
}

/// Swaps every placeholder in the credential headers (and in the query, for an API that
/// takes its key there: `query` is `Some`) for its real value; `false` when none was there.
fn swap_credentials(
    headers: &mut HeaderMap,
    query: Option<&mut Option<String>>,
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
    if let Some(Some(q)) = query {
        for (placeholder, real) in swaps {
            if q.contains(placeholder.as_str()) {
                *q = q.replace(placeholder.as_str(), real);
                swapped = true;
            }
        }
    }
    swapped
}

/// A request's body as it goes upstream, and what it asks for.
struct Prepared {
    body: Bytes,
    model: String,
    max_output: Option<u64>,
}

/// The body as it goes upstream (redacted; a streamed chat completion asks for its usage),
/// the model it asks for (else the model in a Gemini path, `models/NAME:…`) and the most
/// output it asks for.
fn prepare_body(body: Bytes, path: &str, operation: Operation) -> Prepared {
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
    let max_output = match operation {
        Operation::Generate(dialect) => json.as_ref().and_then(|v| max_output(v, dialect)),
        Operation::Free | Operation::Probe => None,
    };
    let mut body = match crate::secrets::redact_bytes(&body) {
        std::borrow::Cow::Borrowed(_) => body,
        std::borrow::Cow::Owned(clean) => {
            json = serde_json::from_slice(&clean).ok();
            Bytes::from(clean)
        }
    };
    // Without `include_usage`, a streamed chat completion says nothing of its usage: the one
    // change the gateway makes to a body.
    if operation == Operation::Generate(Dialect::Chat)
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
    Prepared {
        body,
        model,
        max_output,
    }
}

/// The most output tokens a request asks for, in its dialect's field (times the answers it
/// asks for, where it may ask for several).
fn max_output(v: &Value, dialect: Dialect) -> Option<u64> {
    let number = |pointer: &str| v.pointer(pointer).and_then(Value::as_u64);
    let (cap, answers) = match dialect {
        Dialect::Messages => (number("/max_tokens"), None),
        Dialect::Chat => (
            number("/max_completion_tokens").or_else(|| number("/max_tokens")),
            number("/n"),
        ),
        Dialect::Responses => (number("/max_output_tokens"), None),
        Dialect::Gemini => (
            number("/generationConfig/maxOutputTokens"),
            number("/generationConfig/candidateCount"),
        ),
    };
    Some(cap?.saturating_mul(answers.unwrap_or(1).max(1)))
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
        assert!(swap_credentials(&mut headers, None, &swaps));
        assert_eq!(headers["x-api-key"], "sk-real");
        assert_eq!(headers["x-other"], "sk-swarm-placeholder-1");
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer other"));
        assert!(!swap_credentials(&mut headers, None, &swaps));
        // In the query only where the API takes its key there.
        let mut query = Some("alt=sse&key=sk-swarm-placeholder-1".to_string());
        assert!(swap_credentials(
            &mut HeaderMap::new(),
            Some(&mut query),
            &swaps
        ));
        assert_eq!(query.as_deref(), Some("alt=sse&key=sk-real"));
    }

    #[test]
    fn streamed_chat_completions_ask_for_their_usage() {
        let chat = Operation::Generate(Dialect::Chat);
        let body = Bytes::from_static(
            br#"{"model":"m1","stream":true,"messages":[],"n":2,"max_tokens":100}"#,
        );
        let prepared = prepare_body(body, "/chat/completions", chat);
        let v: Value = serde_json::from_slice(&prepared.body).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(
            (prepared.model.as_str(), prepared.max_output),
            ("m1", Some(200))
        );
        let same = Bytes::from_static(br#"{"model":"m2","messages":[]}"#);
        let messages = Operation::Generate(Dialect::Messages);
        assert_eq!(
            prepare_body(same.clone(), "/v1/messages", messages).body,
            same
        );
        let gemini = Operation::Generate(Dialect::Gemini);
        let body = Bytes::from_static(br#"{"generationConfig":{"maxOutputTokens":64}}"#);
        let prepared = prepare_body(
            body,
            "/v1beta/models/gemini-2.5-pro:generateContent",
            gemini,
        );
        assert_eq!(
            (prepared.model.as_str(), prepared.max_output),
            ("gemini-2.5-pro", Some(64))
        );
        let responses = Operation::Generate(Dialect::Responses);
        let body = Bytes::from_static(br#"{"model":"o","input":[]}"#);
        assert_eq!(prepare_body(body, "/responses", responses).max_output, None);
    }
}
