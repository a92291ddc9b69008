//! The jail's forwarder: the only way out of a worker's network namespace. It accepts the
//! connections to ports of its loopback and hands each one over to a Unix socket of swarm's
//! (its allow-list proxy, its model gateway), which serves it ([`crate::door`]).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Bytes, errno};
use crate::door::{self, DoorKey};

/// Forks the forwarder: it listens on the namespace's loopback, at each port of `forwards`,
/// before the worker starts, and hands each connection over to the Unix socket of that port
/// (swarm's proxy, swarm's gateway; `doors`, their sockets opened as paths), a thread per
/// port. It dies with init, like every process of the namespace. Returns its pid.
pub(super) fn start_forwarders(
    forwards: &[(u16, Bytes)],
    doors: &[std::os::fd::OwnedFd],
    keys: &[DoorKey],
    close: &[i32],
) -> anyhow::Result<i32> {
    use std::os::fd::AsRawFd as _;
    let mut listeners = Vec::new();
    for (((port, _), door), key) in forwards.iter().zip(doors).zip(keys) {
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, *port))
            .with_context(|| format!("cannot listen on the namespace's loopback, port {port}"))?;
        // The door's folder is covered in the jail: reached through the descriptor.
        let socket = PathBuf::from(format!("/proc/self/fd/{}", door.as_raw_fd()));
        listeners.push((listener, socket, key.clone()));
    }
    // SAFETY: init is single-threaded; the child runs only the forwarding loops and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno("fork"));
    }
    if pid > 0 {
        return Ok(pid);
    }
    // SAFETY: closing fds this process owns; ignoring the signals that stop the worker, so a
    // worker stopped gracefully can still reach swarm while it ends (the forwarder dies with
    // init, which the kernel ends with the namespace).
    unsafe {
        for fd in close {
            libc::close(*fd);
        }
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let loops: Vec<_> = listeners
        .into_iter()
        .map(|(listener, socket, key)| {
            std::thread::spawn(move || forward(&listener, &socket, &key))
        })
        .collect();
    for handle in loops {
        let _ = handle.join();
    }
    // SAFETY: leaving without the parent's destructors.
    unsafe { libc::_exit(0) }
}

/// Hands each connection to `listener` over to the door at `socket`, presenting `key`: swarm
/// serves it from then on, and this process keeps no copy of it.
fn forward(listener: &std::net::TcpListener, socket: &Path, key: &DoorKey) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        // Small writes (a CONNECT, its answer) must not wait for delayed acknowledgements.
        let _ = conn.set_nodelay(true);
        // A door that cannot be reached closes the connection: the client sees it end.
        let _ = door::hand_over(socket, &key.0, &conn);
    }
}
