//! A connection's descriptor passed through a door (`SCM_RIGHTS`): sent by the jail's
//! forwarder with its knock, received and checked by swarm.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use super::KEY_LEN;

/// The send buffer of a connection handed over (bytes).
const SEND_BUFFER: libc::c_int = 256 * 1024;

/// Control-message room for one descriptor (`CMSG_SPACE(sizeof(int))` is 24 on Linux),
/// aligned as `cmsghdr` is.
#[repr(C, align(8))]
struct Room([u8; 32]);

/// Sends `knock` on `door` with `fds` attached (blocking; at most 4).
pub(super) fn send(
    door: &std::os::unix::net::UnixStream,
    knock: &[u8],
    fds: &[RawFd],
) -> io::Result<()> {
    let mut room = Room([0; 32]);
    let data = u32::try_from(std::mem::size_of_val(fds))
        .ok()
        // SAFETY: a computation on a length.
        .filter(|data| unsafe { libc::CMSG_SPACE(*data) } as usize <= room.0.len())
        .ok_or_else(|| io::Error::other("too many descriptors for one knock"))?;
    let mut iov = libc::iovec {
        iov_base: knock.as_ptr().cast_mut().cast(),
        iov_len: knock.len(),
    };
    // SAFETY: `msg` points at `iov`, `knock` and `room`, all alive for the call; the control
    // message is written through the CMSG macros inside `room`, which has space for it.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = room.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(data) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(data) as usize;
        let at = libc::CMSG_DATA(cmsg).cast::<RawFd>();
        for (i, fd) in fds.iter().enumerate() {
            at.add(i).write_unaligned(*fd);
        }
        libc::sendmsg(door.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    match usize::try_from(sent) {
        Ok(n) if n == knock.len() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "a knock cut short",
        )),
        Err(_) => Err(io::Error::last_os_error()),
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
    let mut room = Room([0; 32]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msg` points at `iov` (inside `buf`) and `room`, alive for the call and the
    // parsing after it; the CMSG macros stay within `msg_controllen`, which the kernel set.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = room.0.as_mut_ptr().cast();
        msg.msg_controllen = room.0.len();
        let n = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let bytes = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > 1 {
            return Err(io::Error::other("a knock with more than one descriptor"));
        }
        Ok((n, fds.pop()))
    }
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
