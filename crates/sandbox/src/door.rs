//! A door of swarm's that one jail may use: a Unix socket (the allow-list proxy, a model
//! gateway listener) that serves only connections which first present its key.
//!
//! Neither Landlock nor a network namespace stops `connect()` to a socket bound to a path, so
//! a worker could otherwise find another run's proxy under the temporary directory and use
//! its allow-list. The key is random per door and reaches only the jail that may use it:
//! swarm writes it into a pipe that is the jail's standard input (never its command line,
//! which `/proc` shows), the jail reads it before the worker exists and hands it to its
//! forwarder, and the jail's processes are not dumpable, so the worker cannot read it from
//! their memory ([`super::jail`]). The forwarder presents it on every connection.
//!
//! The key is the second wall: the first is that no worker sees a door at all. Every door's
//! socket is in one folder ([`crate::scratch::doors`]) that every jail covers with an empty
//! mount; the forwarder reaches its own through a descriptor opened before that.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

/// Bytes of a key.
pub(crate) const KEY_LEN: usize = 32;
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
        conn.write_all(&self.key.0).await?;
        Ok(conn)
    }
}

/// Whether `conn` starts with `key` (read within a timeout; compared in constant time).
pub async fn admit<S: AsyncRead + Unpin>(conn: &mut S, key: &DoorKey) -> bool {
    let mut presented = [0u8; KEY_LEN];
    match tokio::time::timeout(ADMIT_TIMEOUT, conn.read_exact(&mut presented)).await {
        Ok(Ok(_)) => {
            presented
                .iter()
                .zip(key.0.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
        }
        _ => false,
    }
}

/// Connects to `socket` from the jail's forwarder, presenting `key` (blocking). `socket` is
/// `/proc/self/fd/N` of the socket file opened before the jail covered every door.
pub(crate) fn knock(socket: &Path, key: &[u8]) -> io::Result<std::os::unix::net::UnixStream> {
    use std::io::Write as _;
    let mut conn = std::os::unix::net::UnixStream::connect(socket)?;
    conn.write_all(key)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_key_opens_the_door() {
        let key = DoorKey::random().unwrap();
        let mut right: &[u8] = &key.0.clone();
        assert!(admit(&mut right, &key).await);
        let mut wrong = key.0;
        wrong[7] ^= 1;
        let mut wrong: &[u8] = &wrong;
        assert!(!admit(&mut wrong, &key).await);
        let mut short: &[u8] = &key.0[..10];
        assert!(!admit(&mut short, &key).await);
        assert_eq!(format!("{key:?}"), "DoorKey(…)");
    }
}
