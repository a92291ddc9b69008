//! swarm's model gateway: every model request of a coding agent (`--agent`) goes through
//! swarm, which holds the keys, meters the answers and enforces the budgets.
//!
//! ```text
//! agent ─ANTHROPIC_BASE_URL=http://127.0.0.1:3129/anthropic, ANTHROPIC_API_KEY=<placeholder>─▶
//!   forwarder (in the jail) ─unix socket─▶ Listener (in swarm, one per process)
//!     ─ placeholder → real key, budget, shared back-off ─▶ the API (TLS, or the user's
//!       base URL, a plain-HTTP server on this machine included)
//!   ◀─ the answer, streamed as it comes, redacted, its `usage` read on the way ─
//! ```
//!
//! - **Keys.** The agent gets, under each variable that held a credential in swarm's
//!   environment, a random placeholder of its process; the listener swaps it for the real
//!   value where the API takes its key (its credential headers; the query for Gemini), and
//!   refuses a request that does not carry it. The real key is never in the jail: not in its
//!   environment, a file, or a command line.
//! - **An allow-list.** Only the operations of its APIs that it can meter, or that spend
//!   nothing, are forwarded ([`operations`]); no redirect is followed (`crate::net`).
//! - **Metering and budgets.** Each model request reserves what it may spend before it
//!   leaves, and is settled at the usage its answer metered ([`usage`]), or at the whole
//!   reservation when that usage cannot be trusted ([`Meter`]): the report's tokens and cost
//!   are these, never what the agent prints about itself. A request the budget cannot cover
//!   is answered `402` with the reason, and its agent is stopped.
//! - **Rate limits.** One [`Endpoint`] per upstream for the whole run: a 429, 503 or 529
//!   halves the requests in flight to it and holds every worker's next request until the
//!   `retry-after` (or a backoff) has passed; the request is sent again by the gateway.
//!
//! Which agent gets a gateway, and for which of its APIs, is decided once per run
//! ([`bindings`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::events::EventSink;
use crate::settings::agents::{AgentSettings, ApiRoute};

mod answer;
mod endpoint;
mod exchange;
mod forward;
mod listener;
pub(crate) mod meter;
mod operations;
mod send;
pub(crate) mod usage;

pub(crate) use endpoint::Endpoint;
pub(crate) use listener::{Listener, Place};
pub(crate) use meter::{Meter, Reservation, Spent};

pub(crate) use swarm_sandbox::proxy::GATEWAY_PORT;

/// An API of an agent that the gateway serves in this run: where its requests go, and the
/// credentials it puts in (read from swarm's environment).
#[derive(Clone)]
pub struct Binding {
    pub route: ApiRoute,
    /// The endpoint the requests go to: the first of the route's base URL variables set in
    /// swarm's environment, else the API's own.
    pub upstream: String,
    /// `(variable, value)` of each credential swarm holds for it.
    pub credentials: Vec<(String, String)>,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let vars: Vec<&str> = self.credentials.iter().map(|(v, _)| v.as_str()).collect();
        f.debug_struct("Binding")
            .field("route", &self.route.name)
            .field("upstream", &self.upstream)
            .field("credentials", &vars)
            .finish()
    }
}

/// The APIs of `agent` the gateway serves, with `env` as swarm's environment: those for which
/// swarm holds a credential, or whose endpoint the user named. None: the agent uses its own
/// login, directly.
pub(crate) fn bindings(
    agent: &AgentSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Binding> {
    let set = |var: &String| {
        env(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    agent
        .routes
        .iter()
        .filter_map(|route| {
            let named = route.base_url_env.iter().find_map(set);
            let credentials: Vec<(String, String)> = route
                .key_env
                .iter()
                .filter_map(|var| Some((var.clone(), set(var)?)))
                .collect();
            (named.is_some() || !credentials.is_empty()).then(|| Binding {
                route: route.clone(),
                upstream: named
                    .unwrap_or_else(|| route.upstream.clone())
                    .trim_end_matches('/')
                    .to_string(),
                credentials,
            })
        })
        .collect()
}

/// The gateway of one run: the upstream client, one [`Endpoint`] per upstream, the meter.
pub(crate) struct Gateway {
    http: reqwest::Client,
    endpoints: Mutex<HashMap<String, Arc<Endpoint>>>,
    pub meter: Arc<Meter>,
    sink: Arc<EventSink>,
    /// Requests in flight to one upstream at most (`--jobs`).
    jobs: usize,
    /// Retries of a request that failed for another reason than a rate limit.
    max_retries: u32,
    /// How long a request may wait out rate limits before its last answer is passed on.
    throttle_patience: Duration,
}

/// How the gateway reaches upstreams, and how patient it is.
pub(crate) struct GatewayOptions {
    pub jobs: usize,
    pub max_retries: u32,
    pub connect_timeout: Duration,
    /// No byte of an answer for this long: the request fails.
    pub read_timeout: Duration,
}

impl Gateway {
    pub(crate) fn new(
        meter: Arc<Meter>,
        sink: Arc<EventSink>,
        options: GatewayOptions,
    ) -> anyhow::Result<Arc<Self>> {
        // No redirect followed: a 30x goes back to the agent as it came.
        let mut http = crate::net::client(concat!("swarm-gateway/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(options.connect_timeout)
            .read_timeout(options.read_timeout);
        for (name, ip) in swarm_sandbox::proxy::test_resolve() {
            http = http.resolve(&name, std::net::SocketAddr::new(ip, 0));
        }
        Ok(Arc::new(Self {
            http: http.build()?,
            endpoints: Mutex::new(HashMap::new()),
            meter,
            sink,
            jobs: options.jobs.max(1),
            max_retries: options.max_retries,
            throttle_patience: options.read_timeout,
        }))
    }

    /// The shared state of requests to `upstream` (its scheme, host and port).
    fn endpoint(&self, url: &reqwest::Url) -> Arc<Endpoint> {
        let key = format!(
            "{}://{}:{}",
            url.scheme(),
            url.host_str().unwrap_or(""),
            url.port_or_known_default().unwrap_or(0)
        );
        let mut endpoints = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        endpoints
            .entry(key)
            .or_insert_with(|| Arc::new(Endpoint::new(self.jobs)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::agents::resolve;

    #[test]
    fn the_gateway_serves_apis_with_a_key_or_a_named_endpoint() {
        let claude = resolve("claude", &Default::default(), None).unwrap();
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |var: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == var)
                    .map(|(_, v)| v.to_string())
            }
        };
        // Its own login: nothing for the gateway.
        assert!(bindings(&claude, &env(&[])).is_empty());
        let keyed = bindings(&claude, &env(&[("ANTHROPIC_API_KEY", "sk-real-123456")]));
        assert_eq!(keyed.len(), 1);
        assert_eq!(keyed[0].upstream, "https://api.anthropic.com");
        assert_eq!(
            keyed[0].credentials,
            [(
                "ANTHROPIC_API_KEY".to_string(),
                "sk-real-123456".to_string()
            )]
        );
        assert!(!format!("{keyed:?}").contains("sk-real"));
        // A local server without a key.
        let local = bindings(
            &claude,
            &env(&[("ANTHROPIC_BASE_URL", "http://localhost:11434/")]),
        );
        assert_eq!(local[0].upstream, "http://localhost:11434");
        assert!(local[0].credentials.is_empty());
    }
}
