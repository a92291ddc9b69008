//! Descriptors passed along a Unix socket's bytes (`SCM_RIGHTS`), both ways, for every part
//! of swarm that passes them: a door's handed-over connections (`door/handover.rs`) and the
//! jail hosts' orders (`jail/wire.rs`).

use std::io;
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};

/// The most descriptors one message sends.
pub(crate) const MAX_SENT: usize = 4;

/// Control-message room (`CMSG_SPACE` of four ints is 32 on Linux), aligned as `cmsghdr` is.
#[repr(C, align(8))]
struct Room([u8; 32]);

/// Control-message room for receiving: more than [`MAX_SENT`], so that extra descriptors
/// are received (and closed by their caller) rather than cut off.
#[repr(C, align(8))]
struct WideRoom([u8; 64]);

/// What one `recvmsg` read.
pub(crate) struct Received {
    /// The bytes read into the caller's buffer.
    pub bytes: usize,
    /// Every descriptor that came with them (close-on-exec).
    pub fds: Vec<OwnedFd>,
    /// The kernel cut the control message short (and closed what did not fit).
    pub truncated: bool,
}

/// One `sendmsg` of `bytes` on `socket` with `fds` attached (at most [`MAX_SENT`]): the
/// bytes sent, which may be fewer than `bytes` when the socket's buffer was full (the
/// descriptors went with the first of them).
pub(crate) fn send(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_SENT {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    let data = size_of_val(fds) as u32;
    let mut room = Room([0; 32]);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: `msg` points at `iov`, `bytes` and `room`, all alive for the call; the control
    // message is written through the CMSG macros inside `room`, which has space for
    // MAX_SENT descriptors.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
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
        }
        loop {
            let sent = libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL);
            if let Ok(sent) = usize::try_from(sent) {
                return Ok(sent);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// One `recvmsg` on `socket` into `buf`, with the descriptors that came along.
pub(crate) fn receive(socket: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut room = WideRoom([0; 64]);
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
        let bytes = loop {
            let n = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if let Ok(n) = usize::try_from(n) {
                break n;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let len = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                for i in 0..len / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok(Received {
            bytes,
            fds,
            truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
        })
    }
}
