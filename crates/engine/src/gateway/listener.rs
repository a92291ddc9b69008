//! One agent process's door to the gateway: an HTTP server on a Unix socket to which the
//! jail hands the connections to `127.0.0.1:`[`super::GATEWAY_PORT`] over, served as they
//! are (or, when the process shares the host's
//! network, on a port of the host's loopback), the placeholders of its credentials, and what
//! its requests spent.

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;

use tokio_util::sync::CancellationToken;

use super::exchange::{BoundRoute, ListenerState};
use super::forward;
use super::operations::Api;
use super::{Binding, GATEWAY_PORT, Gateway, Spent};
use crate::ids::TaskId;
use swarm_sandbox::door::{self, Door, DoorAddress, Entered, OpenLimit};

/// Where the agent process reaches its listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// In a jail with its own network: a Unix socket, forwarded to `127.0.0.1:3129` there.
    Jail,
    /// On the host's network (`--network`, `--sandbox off`): a port of the host's loopback,
    /// which any local process can reach, so the placeholder is what lets a request in.
    Host,
}

/// A running listener; it stops (and its socket goes) when dropped.
pub(crate) struct Listener {
    /// The door the jail's forwarder uses ([`Place::Jail`]).
    door: Option<Door>,
    /// What the agent's environment gets: each base URL variable, each placeholder.
    env: Vec<(String, String)>,
    spent: Arc<Mutex<Spent>>,
    /// Cancelled once a request of the process was refused for the run's budget.
    short: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Starts a listener for the process of `task`, serving `bindings`.
    pub(crate) fn listen(
        self: &Arc<Self>,
        task: TaskId,
        bindings: &[Binding],
        place: Place,
    ) -> anyhow::Result<Listener> {
        let mut env = Vec::new();
        let mut routes = Vec::new();
        for binding in bindings {
            let mut swaps = Vec::new();
            for (var, real) in &binding.credentials {
                let placeholder = placeholder()?;
                env.push((var.clone(), placeholder.clone()));
                swaps.push((placeholder, real.clone()));
            }
            routes.push(BoundRoute {
                name: binding.route.name.clone(),
                api: Api::of(&binding.route.name)
                    .with_context(|| format!("no API {} in the gateway", binding.route.name))?,
                upstream: binding.upstream.clone(),
                swaps,
            });
        }
        let spent = Arc::new(Mutex::new(Spent::default()));
        let short = CancellationToken::new();
        let state = Arc::new(ListenerState {
            gateway: self.clone(),
            task,
            routes,
            spent: spent.clone(),
            short: short.clone(),
        });
        let (door, url, server) = match place {
            Place::Jail => serve_door(state)?,
            Place::Host => serve_host(state)?,
        };
        for binding in bindings {
            for var in &binding.route.base_url_env {
                env.push((var.clone(), format!("{url}/{}", binding.route.name)));
            }
        }
        Ok(Listener {
            door,
            env,
            spent,
            short,
            server,
        })
    }
}

/// The listener's door, for a jail: its address, its base URL in the jail and its server.
fn serve_door(state: Arc<ListenerState>) -> anyhow::Result<(Option<Door>, String, JoinHandle<()>)> {
    let (door, listener) = Door::bind("gw-").context("cannot start the model gateway")?;
    let key = door.key().clone();
    let server = tokio::spawn(door::serve_knocks(
        listener,
        key,
        OpenLimit::default(),
        move |entered| {
            let state = state.clone();
            async move {
                match entered {
                    Entered::Handed(conn) => serve(conn, state).await,
                    Entered::Stream(conn) => serve(conn, state).await,
                }
            }
        },
    ));
    let url = format!("http://127.0.0.1:{GATEWAY_PORT}");
    Ok((Some(door), url, server))
}

/// The listener on a port of the host's loopback, for a process that shares its network,
/// with a door's limit of open connections.
fn serve_host(state: Arc<ListenerState>) -> anyhow::Result<(Option<Door>, String, JoinHandle<()>)> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("cannot start the model gateway")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let limit = OpenLimit::default();
    let server = tokio::spawn(async move {
        while let Some(permit) = limit.reserve().await {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let _ = conn.set_nodelay(true);
            let state = state.clone();
            tokio::spawn(async move {
                serve(conn, state).await;
                drop(permit);
            });
        }
    });
    Ok((None, url, server))
}

/// Serves one connection (HTTP/1.1, kept alive) to its end.
async fn serve<IO>(conn: IO, state: Arc<ListenerState>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| forward::handle(state.clone(), req));
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(conn), service)
        .await;
}

impl Listener {
    /// The door the jail forwards to ([`Place::Jail`]).
    pub(crate) fn door(&self) -> Option<DoorAddress> {
        self.door.as_ref().map(Door::address)
    }

    /// The agent's variables: its APIs' base URLs pointing here, a placeholder for each of
    /// its credentials.
    pub(crate) fn agent_env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Cancelled once one of the process's requests was refused for the run's budget: it
    /// cannot go on, and is stopped.
    pub(crate) fn short(&self) -> CancellationToken {
        self.short.clone()
    }

    /// What the process's requests spent so far.
    pub(crate) fn spent(&self) -> Spent {
        *self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A placeholder credential: random, so that only the process it was given to can use the
/// listener, and worthless anywhere else.
fn placeholder() -> anyhow::Result<String> {
    let hex = crate::secrets::random_hex::<16>().context("cannot read /dev/urandom")?;
    Ok(format!("sk-swarm-placeholder-{hex}"))
}
