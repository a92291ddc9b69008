//! Sending one request upstream: waiting out rate limits together with every other request
//! to the same upstream, and retrying as the built-in client does.

use super::Gateway;
use super::exchange::{Outgoing, Refusal, refuse};
use crate::events::Event;
use crate::ids::TaskId;
use crate::model::client::{self, AttemptError, Decision};
use crate::model::limit::Permit;
use hyper::StatusCode;

impl Gateway {
    /// Sends `req`, waiting out rate limits together with every other request to its
    /// upstream and retrying as the built-in client does; the answer (an error status passed
    /// through when retries are spent) and its place among the requests in flight.
    pub(super) async fn send(
        &self,
        task: &TaskId,
        req: &Outgoing,
    ) -> Result<(reqwest::Response, Option<Permit>), Refusal> {
        let endpoint = self.endpoint(&req.url);
        let started = tokio::time::Instant::now();
        let (mut attempt, mut stale_resends) = (0u32, 0);
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
                Err(e) if client::stale(&e) && stale_resends < client::STALE_RESENDS => {
                    stale_resends += 1;
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
