//! What the gateway's steps pass each other: a listener's state, a request on its way
//! upstream, and a request refused with its answer ([`super::forward`] takes a request in,
//! [`super::send`] sends it, [`super::answer`] streams the answer back).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use tokio_util::sync::CancellationToken;

use super::operations::{Api, Operation};
use super::{Gateway, Spent};
use crate::ids::TaskId;

/// Hop-by-hop headers (RFC 9110), and those the gateway sets itself.
pub(super) const NOT_FORWARDED: &[&str] = &[
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

pub(super) type Body = BoxBody<Bytes, std::io::Error>;

/// What one listener serves.
pub(super) struct ListenerState {
    pub(super) gateway: Arc<Gateway>,
    pub(super) task: TaskId,
    pub(super) routes: Vec<BoundRoute>,
    pub(super) spent: Arc<Mutex<Spent>>,
    /// Cancelled when a request of this process was refused for the run's budget: the
    /// process cannot go on, and is stopped.
    pub(super) short: CancellationToken,
}

/// An API served to the process: its path, where it goes, the placeholders to swap.
pub(super) struct BoundRoute {
    pub(super) name: String,
    pub(super) api: Api,
    pub(super) upstream: String,
    /// `(placeholder, real value)`.
    pub(super) swaps: Vec<(String, String)>,
}

/// A request the gateway answers itself.
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

pub(super) fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

/// The answer of a refused request, in a shape every API client reads (`error.message`).
pub(super) fn error_response(refusal: Refusal) -> Response<Body> {
    let body = serde_json::json!({
        "type": "error",
        "error": {
            "type": "swarm_gateway",
            "code": refusal.status.as_u16(),
            "message": crate::secrets::redact(&refusal.message),
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

pub(super) fn full(text: String) -> Body {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

/// A request as it goes upstream.
pub(super) struct Outgoing {
    pub(super) method: reqwest::Method,
    pub(super) url: reqwest::Url,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    pub(super) operation: Operation,
    /// The model asked for, for the price when the answer does not name it.
    pub(super) model: String,
    /// The most output it asks for, if it says.
    pub(super) max_output: Option<u64>,
}
