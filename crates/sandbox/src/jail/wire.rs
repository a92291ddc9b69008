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
    let (n, passed) = recv_with_fds(fd, &mut head)?;
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

/// `recvmsg` into `buf`, with the descriptors passed along (`SCM_RIGHTS`).
fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    // Room for a few descriptors, so extra ones are received (and closed), not truncated.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live locals below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = loop {
        // SAFETY: recvmsg into the buffers `msg` points at; descriptors come close-on-exec.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    };
    let mut passed = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `control`.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    passed.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n, passed))
}

/// A value as sent: its length (4 bytes, little-endian), then its JSON.
pub(super) fn frame<T: Serialize>(value: &T) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(value)?;
    let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    let mut framed = len.to_le_bytes().to_vec();
    framed.extend_from_slice(&body);
    Ok(framed)
}

/// swarm's side: writes `bytes` to the host (or the host factory), `fds` (two at most)
/// passed along with the first of them (`SCM_RIGHTS`).
pub(super) fn send(
    socket: &UnixStream,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut sent = 0;
    if !fds.is_empty() {
        sent = send_with_fds(socket, bytes, fds)?;
    }
    let mut socket = socket;
    socket.write_all(&bytes[sent..])
}

fn send_with_fds(
    socket: &UnixStream,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<usize> {
    if fds.len() > 2 {
        return Err(std::io::Error::other(
            "more than two descriptors in one message",
        ));
    }
    let size = (std::mem::size_of::<i32>() * fds.len()) as u32;
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live locals below, and the
    // control buffer has room for two descriptors' message (CMSG_SPACE of two ints, 24
    // bytes, in 32).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(size) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size) as usize;
        for (i, fd) in fds.iter().enumerate() {
            let at = libc::CMSG_DATA(cmsg).cast::<i32>().add(i);
            at.write_unaligned(fd.as_raw_fd());
        }
        loop {
            let n = libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if n > 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}
