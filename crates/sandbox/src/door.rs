//! A door of swarm's that one jail may use: a Unix socket (the allow-list proxy, a model
//! gateway listener) that serves only connections which first present its key.
//!
//! Neither Landlock nor a network namespace stops `connect()` to a socket bound to a path, so
//! a worker could otherwise find another run's proxy under the temporary directory and use
//! its allow-list. The key is random per door and reaches only the jail that may use it:
//! swarm writes it into a pipe that is the jail's standard input (never its command line,
//! which `/proc` shows), the jail reads it before the worker exists and hands it to its
//! forwarder, and the jail's processes are not dumpable, so the worker cannot read it from
//! their memory ([`super::jail`]). The forwarder presents it on every knock.
//!
//! A knock is the key and one byte, in one message: [`HANDED`] with the descriptor of a
//! connection the forwarder accepted on the jail's loopback (`SCM_RIGHTS`), which swarm then
//! serves itself, so that no process of the jail copies the bytes; or [`STREAM`] with none,
//! and the knocking stream is the connection (swarm's proxy passing a request on to a
//! gateway). Anything else — a wrong key, a descriptor that is not a connected TCP socket,
//! two descriptors, a byte with the wrong descriptor count — is refused and every descriptor
//! received is closed.
//!
//! The key is the second wall: the first is that no worker sees a door at all. Every door's
//! socket is in one folder ([`crate::scratch::doors`]) that every jail covers with an empty
//! mount; the forwarder reaches its own through a descriptor opened before that.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;

mod handover;
mod limit;

pub use limit::{MAX_OPEN_PER_DOOR, OpenLimit, OpenPermit};

/// Bytes of a key.
pub(crate) const KEY_LEN: usize = 32;
/// A knock's last byte: a connection's descriptor comes with it.
const HANDED: u8 = b'H';
/// A knock's last byte: the knocking stream is the connection.
const STREAM: u8 = b'S';
/// How long a connection may take to present its key.
const ADMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A door's key.
#[derive(Clone, PartialEq, Eq)]
pub struct DoorKey(pub [u8; KEY_LEN]);

impl std::fmt::Debug for DoorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorKey(…)")
    }
}

impl DoorKey {
    /// A new random key.
    pub fn random() -> io::Result<Self> {
        crate::random_bytes().map(Self)
    }
}

/// A listening socket in a private directory of swarm's, and the key it asks for.
pub struct Door {
    dir: tempfile::TempDir,
    key: DoorKey,
}

impl Door {
    /// Binds a new door in a directory named `prefix…`.
    pub fn bind(prefix: &str) -> io::Result<(Self, tokio::net::UnixListener)> {
        let dir = crate::scratch::door_dir(prefix)?;
        let listener = tokio::net::UnixListener::bind(dir.path().join("door.sock"))?;
        let door = Self {
            dir,
            key: DoorKey::random()?,
        };
        Ok((door, listener))
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("door.sock")
    }

    pub fn key(&self) -> &DoorKey {
        &self.key
    }

    /// Where a jail's forwarder knocks: the socket and the key.
    pub fn address(&self) -> DoorAddress {
        DoorAddress {
            socket: self.socket(),
            key: self.key.clone(),
        }
    }
}

/// What it takes to use a door.
#[derive(Debug, Clone)]
pub struct DoorAddress {
    pub socket: PathBuf,
    pub key: DoorKey,
}

impl DoorAddress {
    /// Connects from swarm itself (the proxy passing a request on to a gateway listener).
    pub async fn connect(&self) -> io::Result<tokio::net::UnixStream> {
        let mut conn = tokio::net::UnixStream::connect(&self.socket).await?;
        let mut knock = self.key.0.to_vec();
        knock.push(STREAM);
        conn.write_all(&knock).await?;
        Ok(conn)
    }
}

/// What a knock let in.
#[derive(Debug)]
pub enum Entered {
    /// A connection of the jail's loopback, handed over by its forwarder.
    Handed(tokio::net::TcpStream),
    /// The knocking stream itself.
    Stream(tokio::net::UnixStream),
}

/// Reads a knock on `conn` (within a timeout): what it lets in, or `None` when it is
/// refused (every descriptor it brought closed).
pub async fn enter(conn: tokio::net::UnixStream, key: &DoorKey) -> Option<Entered> {
    let (knock, handed) = tokio::time::timeout(ADMIT_TIMEOUT, handover::receive(&conn))
        .await
        .ok()?
        .ok()?;
    let (presented, last) = knock.split_at(KEY_LEN);
    if !same(presented, &key.0) {
        return None;
    }
    match (last, handed) {
        ([HANDED], Some(fd)) => handover::connection(fd).map(Entered::Handed),
        ([STREAM], None) => Some(Entered::Stream(conn)),
        _ => None,
    }
}

/// Serves the knocks on `listener` until it fails, each on a task of its own: what a knock
/// lets in goes to `serve`, which holds its place in `limit` until it returns. Past the
/// limit, the next connection waits unaccepted ([`OpenLimit`]).
pub async fn serve_knocks<S, F>(
    listener: tokio::net::UnixListener,
    key: DoorKey,
    limit: OpenLimit,
    serve: S,
) where
    S: Fn(Entered) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    while let Some(permit) = limit.reserve().await {
        let Ok((conn, _)) = listener.accept().await else {
            return;
        };
        let (key, serve) = (key.clone(), serve.clone());
        tokio::spawn(async move {
            if let Some(entered) = enter(conn, &key).await {
                serve(entered).await;
            }
            drop(permit);
        });
    }
}

/// Compared in constant time.
fn same(presented: &[u8], key: &[u8]) -> bool {
    presented.len() == key.len()
        && presented
            .iter()
            .zip(key.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Hands `conn` over to the door at `socket` from the jail's forwarder, presenting `key`
/// (blocking); the forwarder's copy of the connection is closed when `conn` drops. `socket`
/// is `/proc/self/fd/N` of the socket file opened before the jail covered every door.
pub(crate) fn hand_over(socket: &Path, key: &[u8], conn: &std::net::TcpStream) -> io::Result<()> {
    let door = std::os::unix::net::UnixStream::connect(socket)?;
    let mut knock = key.to_vec();
    knock.push(HANDED);
    handover::send(&door, &knock, &[std::os::fd::AsRawFd::as_raw_fd(conn)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::os::fd::{AsRawFd, FromRawFd as _, OwnedFd};

    /// A door, a knocking end of it (blocking) and a loopback connection to hand over.
    struct Bench {
        door: Door,
        listener: tokio::net::UnixListener,
        tcp: std::net::TcpListener,
    }

    impl Bench {
        fn new() -> Self {
            let (door, listener) = Door::bind("test-").unwrap();
            let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            Self {
                door,
                listener,
                tcp,
            }
        }

        /// A client connected to the loopback listener, and the connection it accepted.
        fn pair(&self) -> (std::net::TcpStream, std::net::TcpStream) {
            let client = std::net::TcpStream::connect(self.tcp.local_addr().unwrap()).unwrap();
            (client, self.tcp.accept().unwrap().0)
        }

        /// Knocks with `knock` (and `fd`, if any), then reads what the door let in.
        async fn knock(&self, knock: &[u8], fds: &[&dyn AsRawFd]) -> Option<Entered> {
            let conn = std::os::unix::net::UnixStream::connect(self.door.socket()).unwrap();
            match fds {
                [] => (&conn).write_all(knock).unwrap(),
                fds => {
                    let fds: Vec<_> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
                    handover::send(&conn, knock, &fds).unwrap();
                }
            }
            // What is sent stays in flight without its sender.
            drop(conn);
            let (accepted, _) = self.listener.accept().await.unwrap();
            enter(accepted, self.door.key()).await
        }
    }

    fn with(key: &DoorKey, last: u8) -> Vec<u8> {
        let mut knock = key.0.to_vec();
        knock.push(last);
        knock
    }

    #[tokio::test]
    async fn a_connection_handed_over_is_served_by_swarm() {
        let bench = Bench::new();
        let (mut client, accepted) = bench.pair();
        let knock = with(bench.door.key(), HANDED);
        let Some(Entered::Handed(conn)) = bench.knock(&knock, &[&accepted]).await else {
            panic!("a connection handed over with the key is let in");
        };
        // The forwarder's copy closes; swarm's end still talks to the client.
        drop(accepted);
        let mut conn = conn.into_std().unwrap();
        // With room for a whole answer in one write.
        let size = handover::socket_option(conn.as_raw_fd(), libc::SO_SNDBUF).unwrap();
        assert!(size >= 256 * 1024, "{size}");
        conn.set_nonblocking(false).unwrap();
        conn.write_all(b"from swarm").unwrap();
        drop(conn);
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        assert_eq!(got, "from swarm");
    }

    #[tokio::test]
    async fn past_its_limit_a_door_lets_the_next_connection_wait_unserved() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (door, listener) = Door::bind("test-").unwrap();
        let server = tokio::spawn(serve_knocks(
            listener,
            door.key().clone(),
            OpenLimit::of(2),
            |entered| async move {
                let Entered::Stream(mut conn) = entered else {
                    return;
                };
                // Held open until the client ends it.
                let _ = conn.write_all(b"in").await;
                let _ = conn.read(&mut [0u8; 1]).await;
            },
        ));
        let address = door.address();
        let served = |mut conn: tokio::net::UnixStream| async move {
            let mut got = [0u8; 2];
            let read = conn.read_exact(&mut got);
            let served = tokio::time::timeout(Duration::from_millis(300), read).await;
            (served.is_ok_and(|r| r.is_ok()), conn)
        };
        let (first, first_conn) = served(address.connect().await.unwrap()).await;
        let (second, _second_conn) = served(address.connect().await.unwrap()).await;
        assert!(
            first && second,
            "two connections within the limit are served"
        );
        let (third, third_conn) = served(address.connect().await.unwrap()).await;
        assert!(!third, "a third one waits");
        drop(first_conn);
        let (third, _) = served(third_conn).await;
        assert!(third, "and is served once one ends");
        server.abort();
    }

    #[tokio::test]
    async fn only_the_key_opens_the_door() {
        let bench = Bench::new();
        let (_client, accepted) = bench.pair();
        let mut wrong = bench.door.key().0;
        wrong[7] ^= 1;
        let wrong = with(&DoorKey(wrong), HANDED);
        assert!(bench.knock(&wrong, &[&accepted]).await.is_none());
        let short = &bench.door.key().0[..10];
        assert!(bench.knock(short, &[]).await.is_none());
        assert_eq!(format!("{:?}", bench.door.key()), "DoorKey(…)");
    }

    #[tokio::test]
    async fn a_knock_that_says_one_thing_and_brings_another_is_refused() {
        let bench = Bench::new();
        let (_client, accepted) = bench.pair();
        let key = bench.door.key().clone();
        // A stream knock with a descriptor, a handed one without, an unknown last byte.
        assert!(
            bench
                .knock(&with(&key, STREAM), &[&accepted])
                .await
                .is_none()
        );
        assert!(bench.knock(&with(&key, HANDED), &[]).await.is_none());
        assert!(bench.knock(&with(&key, b'X'), &[]).await.is_none());
        assert!(matches!(
            bench.knock(&with(&key, STREAM), &[]).await,
            Some(Entered::Stream(_))
        ));
        // Two connections at once.
        let (_other, second) = bench.pair();
        let two = bench
            .knock(&with(&key, HANDED), &[&accepted, &second])
            .await;
        assert!(two.is_none());
    }

    #[tokio::test]
    async fn a_descriptor_that_is_not_a_connection_is_refused() {
        let bench = Bench::new();
        let knock = with(bench.door.key(), HANDED);
        // A listening socket: swarm would serve whoever connects to it.
        let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(bench.knock(&knock, &[&listening]).await.is_none());
        // A file and a Unix socket.
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(bench.knock(&knock, &[&file]).await.is_none());
        let (unix, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(bench.knock(&knock, &[&unix]).await.is_none());
        // A TCP socket never connected.
        // SAFETY: a new socket, owned at once.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        assert!(raw >= 0);
        // SAFETY: `raw` is a new descriptor no one else owns.
        let unconnected = unsafe { OwnedFd::from_raw_fd(raw) };
        assert!(bench.knock(&knock, &[&unconnected]).await.is_none());
    }
}
