//! How many model calls may be in flight at once, across every worker of a run.
//!
//! It starts at `--jobs` (one call per running worker). A 429 from the server halves it for
//! everyone, not only for the worker that got it; each run of successful calls as long as the
//! current limit raises it by one again, up to the start value (additive increase,
//! multiplicative decrease, as TCP does).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug)]
struct State {
    limit: usize,
    in_flight: usize,
    successes: usize,
}

#[derive(Debug)]
pub(crate) struct AdaptiveLimit {
    max: usize,
    state: Mutex<State>,
    freed: Notify,
}

/// A slot for one model call; dropping it frees the slot.
pub(crate) struct Permit {
    owner: Arc<AdaptiveLimit>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.owner.lock().in_flight -= 1;
        self.owner.freed.notify_waiters();
    }
}

impl AdaptiveLimit {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            state: Mutex::new(State {
                limit: max.max(1),
                in_flight: 0,
                successes: 0,
            }),
            freed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) async fn acquire(self: &Arc<Self>) -> Permit {
        loop {
            let freed = self.freed.notified();
            {
                let mut st = self.lock();
                if st.in_flight < st.limit {
                    st.in_flight += 1;
                    return Permit {
                        owner: self.clone(),
                    };
                }
            }
            freed.await;
        }
    }

    /// The server said 429: everyone slows down.
    pub(crate) fn throttled(&self) {
        let mut st = self.lock();
        st.limit = (st.limit / 2).max(1);
        st.successes = 0;
    }

    pub(crate) fn succeeded(&self) {
        let mut st = self.lock();
        st.successes += 1;
        if st.successes >= st.limit && st.limit < self.max {
            st.limit += 1;
            st.successes = 0;
            drop(st);
            self.freed.notify_waiters();
        }
    }

    #[cfg(test)]
    pub(crate) fn current(&self) -> usize {
        self.lock().limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shrinks_on_throttle_and_recovers() {
        let limit = AdaptiveLimit::new(8);
        limit.throttled();
        assert_eq!(limit.current(), 4);
        limit.throttled();
        limit.throttled();
        limit.throttled();
        assert_eq!(limit.current(), 1);
        for _ in 0..40 {
            let _p = limit.acquire().await;
            limit.succeeded();
        }
        assert_eq!(limit.current(), 8);
    }

    #[tokio::test]
    async fn caps_calls_in_flight() {
        let limit = AdaptiveLimit::new(2);
        let a = limit.acquire().await;
        let _b = limit.acquire().await;
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), limit.acquire());
        assert!(waiting.await.is_err(), "a third call must wait");
        drop(a);
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), limit.acquire());
        assert!(third.await.is_ok());
    }
}
