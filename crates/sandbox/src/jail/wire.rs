//! The protocol between swarm and a jail host ([`super::host`]), both sides of it, one task
//! at a time:
//!
//! - swarm → host, on the host's standard input (a Unix stream socket): an [`Order`], its
//!   length (4 bytes, little-endian) then its JSON; with `Run`, the write end of the task's
//!   output pipe rides along with the first byte (`SCM_RIGHTS`).
//! - host → swarm, on the host's standard output (a pipe): one JSON [`Report`] a line:
//!   `Ready` once set up (or `Failed`), then `Exited` with each task's wait status.

use std::io::{BufRead, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Bytes, JailSpec};
use crate::door::KEY_LEN;

/// The longest order swarm sends (a spec and an environment).
const MAX_ORDER: usize = 16 << 20;

/// What swarm tells a host.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Order {
    /// Run a task's jail: this spec (its `hide` is the host's), with this environment.
    Run {
        spec: Box<JailSpec>,
        env: Vec<(Bytes, Bytes)>,
        /// The keys of the spec's forwards' doors, in their order (a spec never holds them in
        /// its JSON).
        #[serde(default)]
        keys: Vec<[u8; KEY_LEN]>,
    },
    /// Send this signal to the running task's process group.
    Signal(i32),
}

/// What a host tells swarm.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Report {
    Ready,
    Failed(String),
    /// The task's worker ended with this wait status (the one a one-off jail would end
    /// with): every process of the task is gone, but its jail may still be unmounting.
    Exited(i32),
    /// The task's jail is gone too, its mounts with it: its layers may be used again, and the
    /// host takes its next order.
    Gone,
}

/// The host's side: writes `report` as a line to its standard output.
pub(super) fn send_report(report: &Report) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(report)?;
    line.push(b'\n');
    std::io::stdout().lock().write_all(&line)
}

/// swarm's side: the next report of a host.
pub(super) fn read_report(reports: &mut impl BufRead) -> std::io::Result<Report> {
    let mut line = String::new();
    if reports.read_line(&mut line)? == 0 {
        return Err(std::io::Error::other("the jail host ended"));
    }
    serde_json::from_str(&line).map_err(std::io::Error::other)
}

/// The host's side: reads one order from `fd`, with the descriptor sent along it if any (any
/// more are closed); `None` at the end.
pub(super) fn read_order(fd: RawFd) -> std::io::Result<Option<(Order, Option<OwnedFd>)>> {
    Ok(read_framed(fd)?.map(|(order, passed)| (order, passed.into_iter().next())))
}

/// Reads one framed value ([`frame`]) from `fd`, with the descriptors sent along it; `None`
/// at the end.
pub(super) fn read_framed<T: DeserializeOwned>(
    fd: RawFd,
) -> std::io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut head = [0u8; 4];
    let received = crate::fd_passing::receive(fd, &mut head)?;
    let (n, passed) = (received.bytes, received.fds);
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: `fd` stays open for the host's life; ManuallyDrop keeps it so.
    let mut socket = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    socket.read_exact(&mut head[n..])?;
    let len = u32::from_le_bytes(head) as usize;
    if len > MAX_ORDER {
        return Err(std::io::Error::other("an order too long"));
    }
    let mut body = vec![0u8; len];
    socket.read_exact(&mut body)?;
    let value = serde_json::from_slice(&body).map_err(std::io::Error::other)?;
    Ok(Some((value, passed)))
}

/// A value as sent: its length (4 bytes, little-endian), then its JSON.
pub(super) fn frame<T: Serialize>(value: &T) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(value)?;
    let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    let mut framed = len.to_le_bytes().to_vec();
    framed.extend_from_slice(&body);
    Ok(framed)
}

/// swarm's side: writes `bytes` to the host (or the host factory), `fds` passed along with
/// the first of them (`SCM_RIGHTS`).
pub(super) fn send(
    socket: &UnixStream,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut sent = 0;
    if !fds.is_empty() {
        let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        sent = crate::fd_passing::send(socket.as_raw_fd(), bytes, &raw)?;
    }
    let mut socket = socket;
    socket.write_all(&bytes[sent..])
}
