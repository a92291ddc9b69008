//! What every request of a run to one upstream shares: how many may be in flight (halved on a
//! rate limit, grown back by successes: [`AdaptiveLimit`]), and until when all of them wait
//! after the upstream said to slow down. Sixteen agents that hit a limit together wait
//! together, once, instead of each retrying on its own.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::model::limit::{AdaptiveLimit, Permit};

pub(crate) struct Endpoint {
    limit: Arc<AdaptiveLimit>,
    /// No request is sent before this.
    hold_until: Mutex<Option<Instant>>,
}

impl Endpoint {
    pub(crate) fn new(jobs: usize) -> Self {
        Self {
            limit: AdaptiveLimit::new(jobs),
            hold_until: Mutex::new(None),
        }
    }

    /// Waits until a request may be sent, and takes a place among those in flight.
    pub(crate) async fn ready(&self) -> Permit {
        loop {
            let until = *self.hold_until.lock().unwrap_or_else(|e| e.into_inner());
            match until {
                Some(until) if until > Instant::now() => {
                    // Spread the requests that waited, so they do not all arrive at once.
                    let spread = Duration::from_millis(fastrand::u64(0..200));
                    tokio::time::sleep_until(until + spread).await;
                }
                _ => break,
            }
        }
        self.limit.acquire().await
    }

    /// The upstream said to slow down: fewer requests in flight, and none for `wait`.
    pub(crate) fn throttled(&self, wait: Duration) {
        self.limit.throttled();
        let until = Instant::now() + wait;
        let mut hold = self.hold_until.lock().unwrap_or_else(|e| e.into_inner());
        if hold.is_none_or(|h| h < until) {
            *hold = Some(until);
        }
    }

    pub(crate) fn succeeded(&self) {
        self.limit.succeeded();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_rate_limit_holds_every_request_and_halves_the_flight() {
        let endpoint = Endpoint::new(8);
        endpoint.throttled(Duration::from_millis(300));
        assert_eq!(endpoint.limit.current(), 4);
        let started = Instant::now();
        drop(endpoint.ready().await);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // A shorter wait does not shorten a longer one.
        endpoint.throttled(Duration::from_millis(600));
        endpoint.throttled(Duration::from_millis(100));
        let started = Instant::now();
        let _second = endpoint.ready().await;
        assert!(started.elapsed() >= Duration::from_millis(600));
    }
}
