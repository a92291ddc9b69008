//! A connection's descriptor passed through a door (`SCM_RIGHTS`): sent by the jail's
//! forwarder with its knock, received and checked by swarm.

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};

use super::KEY_LEN;

/// The send buffer of a connection handed over (bytes).
const SEND_BUFFER: libc::c_int = 256 * 1024;

/// Sends `knock` on `door` with `fds` attached (blocking; at most 4).
pub(super) fn send(
    door: &std::os::unix::net::UnixStream,
    knock: &[u8],
    fds: &[RawFd],
) -> io::Result<()> {
    match crate::fd_passing::send(door.as_raw_fd(), knock, fds)? {
        n if n == knock.len() => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "a knock cut short",
        )),
    }
}

/// Reads a knock (the key and its last byte, nothing past it) from `conn`, with the one
/// descriptor that may come with it. Two descriptors, or a control message cut short, are
/// an error (what was received is closed).
pub(super) async fn receive(
    conn: &tokio::net::UnixStream,
) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut knock = vec![0u8; KEY_LEN + 1];
    let (mut got, mut handed) = (0, None);
    while got < knock.len() {
        conn.readable().await?;
        let read = conn.try_io(tokio::io::Interest::READABLE, || {
            receive_some(conn.as_raw_fd(), &mut knock[got..])
        });
        let (n, fd) = match read {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => other?,
        };
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if let Some(fd) = fd
            && handed.replace(fd).is_some()
        {
            return Err(io::Error::other("a knock with two descriptors"));
        }
        got += n;
    }
    Ok((knock, handed))
}

/// One `recvmsg` into `buf`: the bytes read and a descriptor that came with them.
fn receive_some(socket: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut received = crate::fd_passing::receive(socket, buf)?;
    if received.truncated || received.fds.len() > 1 {
        return Err(io::Error::other("a knock with more than one descriptor"));
    }
    Ok((received.bytes, received.fds.pop()))
}

/// `fd` as a connection swarm serves, if it is one: a connected TCP socket (not a listening
/// one, not a file, a pipe or a Unix socket).
pub(super) fn connection(fd: OwnedFd) -> Option<tokio::net::TcpStream> {
    let option = |name| socket_option(fd.as_raw_fd(), name);
    let tcp = option(libc::SO_TYPE)? == libc::SOCK_STREAM
        && matches!(option(libc::SO_DOMAIN)?, libc::AF_INET | libc::AF_INET6)
        && option(libc::SO_ACCEPTCONN)? == 0;
    if !tcp {
        return None;
    }
    let conn = std::net::TcpStream::from(fd);
    conn.peer_addr().ok()?;
    // An answer of a few hundred KiB goes out in one write, as it went into the Unix socket
    // before the forwarder carried it: no wake-up a 16 KiB chunk while the agent reads. A
    // kernel that refuses keeps its default, which only costs wake-ups.
    set_socket_option(conn.as_raw_fd(), libc::SO_SNDBUF, SEND_BUFFER);
    conn.set_nonblocking(true).ok()?;
    tokio::net::TcpStream::from_std(conn).ok()
}

/// An integer option (`SOL_SOCKET`) of socket `fd`; `None` when `fd` is not a socket.
pub(super) fn socket_option(fd: RawFd, name: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for the call; an fd that is not a socket fails.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(value)
}

/// Sets an integer option (`SOL_SOCKET`) of socket `fd`, if the kernel lets it.
fn set_socket_option(fd: RawFd, name: libc::c_int, value: libc::c_int) {
    // SAFETY: `value` is valid for the call.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}
