//! The allow-list proxy: a worker's only way out of its network namespace when the run
//! allows some domains (`--allow-domain`, `[sandbox] allow_domains`).
//!
//! ```text
//! worker ─HTTP(S)_PROXY─▶ 127.0.0.1:PORT (the forwarder, in the jail, hands the connection
//!     over a unix socket) ─▶ this proxy (in swarm, outside) ─TCP─▶ allowed host
//! ```
//!
//! The proxy runs in swarm, in the host's network, and listens on a Unix socket in a
//! directory of its own (the worker cannot write there), a [`Door`] that serves only the
//! connections presenting its key. Inside the jail, init's forwarder hands each connection
//! to `127.0.0.1:`[`FORWARD_PORT`] over to that socket with the key ([`super::jail`],
//! [`super::door`]), and the proxy serves the jail's socket itself; a worker of
//! another jail that finds the socket cannot use it. The proxy reads one
//! request head: `CONNECT host:port` is a tunnel, an absolute-form `GET http://host/…` is
//! passed on as origin-form; either is allowed only when the host matches the allow-list
//! (and the port is the rule's, else 443 or 80), and refused with a 403 naming the domain
//! otherwise. The worker never resolves a name: DNS is not reachable from the namespace, and
//! a client that ignores the proxy variables has no network at all.
//!
//! Every connection asked for is reported to the caller's [`OnAccess`] (the `network` event,
//! and the task's counts in the report).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::door::{self, Door, DoorAddress, Entered, OpenLimit};
use crate::allow_list::{AllowList, split_host_port};

/// The port the jail's forwarder listens on, on the loopback of the worker's namespace.
pub const FORWARD_PORT: u16 = 3128;
/// The port the jail forwards to the model gateway's socket, on the loopback of the worker's
/// network namespace.
pub const GATEWAY_PORT: u16 = 3129;
/// Test-only: names the allow-list proxy resolves to given addresses (`name=addr,…`).
pub const SWARM_TEST_PROXY_RESOLVE: &str = "SWARM_TEST_PROXY_RESOLVE";
/// The most of a request head the proxy reads.
const HEAD_CAP: usize = 32 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// One connection a worker asked for, and the proxy's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub host: String,
    pub port: u16,
    pub allowed: bool,
}

/// Told of every connection asked for.
pub type OnAccess = Arc<dyn Fn(&Access) + Send + Sync>;

/// A running proxy; it stops (and its socket goes) when dropped.
pub struct Proxy {
    door: Door,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy for `allow` on a Unix socket in a private directory. A request for the
    /// model gateway's address in the jail goes to `gateway`'s socket (clients that send
    /// even loopback requests through the proxy).
    pub fn start(
        allow: AllowList,
        on_access: Option<OnAccess>,
        gateway: Option<DoorAddress>,
    ) -> anyhow::Result<Self> {
        let (door, listener) = Door::bind("net-").context("cannot start the network proxy")?;
        let key = door.key().clone();
        let shared = Arc::new(Rules {
            allow,
            on_access,
            resolve: test_resolve(),
            gateway,
        });
        let task = tokio::spawn(door::serve_knocks(
            listener,
            key,
            OpenLimit::default(),
            move |entered| {
                let shared = shared.clone();
                async move {
                    // Only a forwarder knocks here: a connection handed over.
                    if let Entered::Handed(conn) = entered {
                        let _ = serve(conn, &shared).await;
                    }
                }
            },
        ));
        Ok(Self { door, task })
    }

    /// Where the jail's forwarder hands its connections over.
    pub fn address(&self) -> DoorAddress {
        self.door.address()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The proxy variables a worker behind it gets. `direct_loopback`: loopback addresses are
/// the namespace's own (`NO_PROXY`); without it (the allow-list names a server on the host's
/// loopback, such as `localhost:11434`), every request goes to the proxy, which reaches the
/// host's.
pub fn worker_env(direct_loopback: bool) -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{FORWARD_PORT}");
    let mut env = vec![
        ("HTTPS_PROXY", url.clone()),
        ("https_proxy", url.clone()),
        ("HTTP_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("ALL_PROXY", url.clone()),
        ("all_proxy", url),
    ];
    let local = match direct_loopback {
        true => "localhost,127.0.0.1,::1".to_string(),
        false => String::new(),
    };
    env.extend([("NO_PROXY", local.clone()), ("no_proxy", local)]);
    env
}

/// What a proxy decides with.
struct Rules {
    allow: AllowList,
    on_access: Option<OnAccess>,
    resolve: Vec<(String, std::net::IpAddr)>,
    /// The model gateway's door, for requests to its address in the jail.
    gateway: Option<DoorAddress>,
}

impl Rules {
    /// Is `host:port` the model gateway as the jail sees it?
    fn is_gateway(&self, host: &str, port: u16) -> bool {
        self.gateway.is_some() && port == GATEWAY_PORT && matches!(host, "127.0.0.1" | "localhost")
    }
}

/// Test-only name resolution (`SWARM_TEST_PROXY_RESOLVE=name=addr,…`), so the tests can
/// allow a domain and serve it from a local fake. Read from swarm's own environment, which
/// neither workers nor repositories set.
pub fn test_resolve() -> Vec<(String, std::net::IpAddr)> {
    std::env::var(SWARM_TEST_PROXY_RESOLVE)
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| {
            let (name, addr) = pair.split_once('=')?;
            Some((name.trim().to_ascii_lowercase(), addr.trim().parse().ok()?))
        })
        .collect()
}

/// What the client asked for.
struct Request {
    host: String,
    port: u16,
    /// `None` for a tunnel; else the head to send upstream (origin-form).
    forward: Option<Vec<u8>>,
}

async fn serve(mut conn: TcpStream, rules: &Rules) -> anyhow::Result<()> {
    let (head_len, buf) = read_head(&mut conn).await?;
    let request = match parse_request(&buf[..head_len]) {
        Ok(r) => r,
        Err(why) => return respond(&mut conn, "400 Bad Request", &why).await,
    };
    if let Some(gateway) = rules
        .gateway
        .as_ref()
        .filter(|_| rules.is_gateway(&request.host, request.port))
    {
        let upstream = gateway.connect().await?;
        return pass_on(conn, upstream, &request, &buf, head_len).await;
    }
    let allowed = rules.allow.allows(&request.host, request.port);
    if let Some(tell) = &rules.on_access {
        tell(&Access {
            host: request.host.clone(),
            port: request.port,
            allowed,
        });
    }
    if !allowed {
        let why = format!(
            "swarm: network access to {}:{} is not allowed from the sandbox (allow it with \
             --allow-domain {})",
            request.host, request.port, request.host
        );
        return respond(&mut conn, "403 Forbidden", &why).await;
    }
    let upstream = match connect(&request.host, request.port, &rules.resolve).await {
        Ok(s) => s,
        Err(e) => {
            let why = format!("swarm: cannot reach {}:{}: {e}", request.host, request.port);
            return respond(&mut conn, "502 Bad Gateway", &why).await;
        }
    };
    pass_on(conn, upstream, &request, &buf, head_len).await
}

/// Opens the tunnel, or sends the request on, then copies both ways.
async fn pass_on<S>(
    mut conn: TcpStream,
    mut upstream: S,
    request: &Request,
    buf: &[u8],
    head_len: usize,
) -> anyhow::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match &request.forward {
        None => {
            conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await?
        }
        Some(head) => upstream.write_all(head).await?,
    }
    // What the client sent after the head (a TLS hello, a request body).
    upstream.write_all(&buf[head_len..]).await?;
    tokio::io::copy_bidirectional(&mut conn, &mut upstream).await?;
    Ok(())
}

/// Reads until the end of the request head; returns its length and everything read.
async fn read_head(conn: &mut TcpStream) -> anyhow::Result<(usize, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "the client closed before its request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok((end + 4, buf));
        }
        anyhow::ensure!(buf.len() <= HEAD_CAP, "request head too long");
    }
}

fn parse_request(head: &[u8]) -> Result<Request, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err("swarm: not an HTTP proxy request".into()),
    }
    let (method, target) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(target)
            .and_then(|(h, p)| Some((h, p?)))
            .ok_or("swarm: CONNECT needs host:port")?;
        return Ok(Request {
            host: host.to_ascii_lowercase(),
            port,
            forward: None,
        });
    }
    let rest = target
        .strip_prefix("http://")
        .ok_or("swarm: the proxy takes CONNECT, or plain http:// URLs")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = split_host_port(authority).ok_or("swarm: bad host in the URL")?;
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name.starts_with("proxy-") {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Request {
        host: host.to_ascii_lowercase(),
        port: port.unwrap_or(80),
        forward: Some(out),
    })
}

async fn connect(
    host: &str,
    port: u16,
    resolve: &[(String, std::net::IpAddr)],
) -> anyhow::Result<TcpStream> {
    let pinned = resolve.iter().find(|(name, _)| name == host);
    let stream = match pinned {
        Some((_, ip)) => {
            tokio::time::timeout(
                CONNECT_TIMEOUT,
                TcpStream::connect(SocketAddr::new(*ip, port)),
            )
            .await
        }
        None => tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port))).await,
    };
    let stream = stream.context("timed out")??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn respond(conn: &mut TcpStream, status: &str, body: &str) -> anyhow::Result<()> {
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}\n",
        body.len() + 1
    );
    conn.write_all(reply.as_bytes()).await?;
    conn.shutdown().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let r = parse_request(b"CONNECT api.x.com:443 HTTP/1.1\r\nHost: api.x.com\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (r.host.as_str(), r.port, r.forward.is_none()),
            ("api.x.com", 443, true)
        );
        let r = parse_request(
            b"GET http://Api.X.com:8080/v1/x?y HTTP/1.1\r\nHost: api.x.com\r\nProxy-Connection: k\r\n\r\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.host.as_str(), r.port), ("api.x.com", 8080));
        assert_eq!(
            String::from_utf8_lossy(&r.forward.unwrap_or_default()),
            "GET /v1/x?y HTTP/1.1\r\nHost: api.x.com\r\n\r\n"
        );
        assert!(parse_request(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"CONNECT nohost HTTP/1.1\r\n\r\n").is_err());
    }
}
