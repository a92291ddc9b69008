//! The upstream's answer on its way back to the agent: its status, its headers and its body
//! redacted, its usage read as it passes, and its reservation settled when it ends.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::StreamBody;
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};

use super::Spent;
use super::exchange::{Body, ListenerState, NOT_FORWARDED, Refusal, error_response, refuse};
use super::meter::Reservation;
use super::operations::Dialect;
use super::usage::UsageReader;
use crate::model::limit::Permit;
use crate::secrets::StreamRedactor;

/// The upstream's answer, streamed to the agent as it comes: redacted (headers and body; the
/// status line is hyper's own for the code), its usage read on the way, and its
/// reservation settled when it ends (or when the agent stops reading).
pub(super) fn stream_back(
    state: &ListenerState,
    answer: reqwest::Response,
    permit: Option<Permit>,
    charge: Option<(Reservation, Dialect)>,
) -> Response<Body> {
    let status = answer.status();
    let mut response = Response::builder().status(status.as_u16());
    let content_type = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    for (name, value) in answer.headers() {
        if NOT_FORWARDED.contains(&name.as_str()) {
            continue;
        }
        match crate::secrets::redact_bytes(value.as_bytes()) {
            std::borrow::Cow::Borrowed(_) => response = response.header(name, value),
            std::borrow::Cow::Owned(clean) => {
                if let Ok(clean) = HeaderValue::from_bytes(&clean) {
                    response = response.header(name, clean);
                }
            }
        }
    }
    let metering = charge.map(|(reservation, dialect)| Metering {
        reader: UsageReader::new(&content_type, dialect),
        reservation: Some(reservation),
        billed: status.is_success(),
        spent: state.spent.clone(),
    });
    let flow = Flow {
        upstream: answer.bytes_stream(),
        redactor: crate::secrets::redactor().stream(),
        metering,
        _permit: permit,
    };
    let body = futures_util::stream::unfold(Some(flow), |flow| async move {
        let mut flow = flow?;
        match flow.upstream.next().await {
            Some(Ok(chunk)) => {
                if let Some(m) = &mut flow.metering {
                    m.reader.feed(&chunk);
                }
                let clean = Bytes::from(flow.redactor.push(&chunk));
                Some((Ok(Frame::data(clean)), Some(flow)))
            }
            Some(Err(e)) => Some((Err(std::io::Error::other(e)), None)),
            None => {
                let Flow { redactor, .. } = flow;
                let rest: StreamRedactor<'static> = redactor;
                Some((Ok(Frame::data(Bytes::from(rest.finish()))), None))
            }
        }
    });
    response
        .body(http_body_util::BodyExt::boxed(StreamBody::new(body)))
        .unwrap_or_else(|e| error_response(bad_gateway(e)))
}

fn bad_gateway(e: impl std::fmt::Display) -> Refusal {
    refuse(
        hyper::StatusCode::BAD_GATEWAY,
        format!("swarm gateway: {e}"),
    )
}

/// An answer on its way: what is left of it upstream, the redaction of what passed, its
/// metering, and its place among the upstream's requests in flight (held to its end).
struct Flow<S> {
    upstream: S,
    redactor: StreamRedactor<'static>,
    metering: Option<Metering>,
    _permit: Option<Permit>,
}

/// Reads a model answer's usage as it passes; settles its reservation when dropped: at the
/// end of the answer, or when the agent stopped reading or the upstream broke off. The usage
/// counts if the answer said it was whole (its dialect's last event, a whole JSON body),
/// whether or not the connection then ended cleanly: an agent may hang up as soon as it has
/// the last event (Codex does).
struct Metering {
    reader: UsageReader,
    reservation: Option<Reservation>,
    /// A 2xx answer (an error answer is not billed by the APIs).
    billed: bool,
    /// What the listener's process spent.
    spent: Arc<Mutex<Spent>>,
}

impl Drop for Metering {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        let reader = std::mem::replace(&mut self.reader, UsageReader::new("", Dialect::Chat));
        let metered = reader.finish().map(|a| (a.model, a.tokens));
        let charge = match (metered, self.billed) {
            (metered @ Some(_), _) | (metered @ None, true) => reservation.settle(metered),
            (None, false) => return reservation.release(),
        };
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        spent.add(&Spent {
            tokens: charge.tokens,
            cost_usd: charge.cost_usd.unwrap_or(0.0),
            requests: 1,
        });
    }
}
