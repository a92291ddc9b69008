//! The jail's forwarder: the only way out of a worker's network namespace, from ports of its
//! loopback to Unix sockets of swarm's (its allow-list proxy, its model gateway).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Bytes, errno};
use crate::door::{self, DoorKey};

/// Forks the forwarder: it listens on the namespace's loopback, at each port of `forwards`,
/// before the worker starts, and passes each connection on to the Unix socket of that port
/// (swarm's proxy, swarm's gateway; `doors`, their sockets opened as paths), a thread per
/// direction. It dies with init, like every
/// process of the namespace. Returns its pid.
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

/// Passes each connection to `listener` on to `socket`, presenting `key` first.
fn forward(listener: &std::net::TcpListener, socket: &Path, key: &DoorKey) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        // Small writes (a CONNECT, its answer) must not wait for delayed acknowledgements.
        let _ = conn.set_nodelay(true);
        let (socket, key) = (socket.to_path_buf(), key.clone());
        std::thread::spawn(move || {
            if let Ok(upstream) = door::knock(&socket, &key.0) {
                splice(conn, upstream);
            }
        });
    }
}

/// Copies both ways until each side has finished sending.
fn splice(client: std::net::TcpStream, upstream: std::os::unix::net::UnixStream) {
    use std::net::Shutdown;
    let (Ok(mut client_w), Ok(mut upstream_r)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let (mut client_r, mut upstream_w) = (client, upstream);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_r, &mut upstream_w);
        let _ = upstream_w.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream_r, &mut client_w);
    let _ = client_w.shutdown(Shutdown::Write);
    let _ = up.join();
}
