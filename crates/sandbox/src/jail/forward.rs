//! The jail's forwarder: the only way out of a worker's network namespace. It accepts the
//! connections to ports of its loopback and hands each one over to a Unix socket of swarm's
//! (its allow-list proxy, its model gateway), which serves it ([`crate::door`]).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::Bytes;
use crate::door::{self, DoorKey};

/// A forwarding thread's stack: it only accepts and hands over (std's default is 2 MiB).
const STACK: usize = 64 * 1024;

/// Starts the forwarder in init, a thread per port of `forwards`: each listens on the
/// namespace's loopback, at its port, before the worker starts, and hands each connection
/// over to the Unix socket of that port (swarm's proxy, swarm's gateway; `doors`, their
/// sockets opened as paths). Threads, not a process: no fork, copy-on-write faults and exit
/// a task (within the benchmarks' noise, docs/BENCHMARKS-HISTORY.md, but one process a
/// running agent fewer); they end with init. The threads inherit the caller's signal mask.
pub(super) fn start_forwarders(
    forwards: &[(u16, Bytes)],
    doors: &[std::os::fd::OwnedFd],
    keys: &[DoorKey],
) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd as _;
    for (((port, _), door), key) in forwards.iter().zip(doors).zip(keys) {
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, *port))
            .with_context(|| format!("cannot listen on the namespace's loopback, port {port}"))?;
        // The door's folder is covered in the jail: reached through the descriptor, which
        // init keeps open for its life (close-on-exec: the worker never holds it).
        let socket = PathBuf::from(format!("/proc/self/fd/{}", door.as_raw_fd()));
        let key = key.clone();
        std::thread::Builder::new()
            .name("forwarder".into())
            .stack_size(STACK)
            .spawn(move || forward(&listener, &socket, &key))
            .context("cannot start the forwarder")?;
    }
    Ok(())
}

/// Hands each connection to `listener` over to the door at `socket`, presenting `key`: swarm
/// serves it from then on, and the jail keeps no copy of it.
fn forward(listener: &std::net::TcpListener, socket: &Path, key: &DoorKey) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        // Small writes (a CONNECT, its answer) must not wait for delayed acknowledgements.
        let _ = conn.set_nodelay(true);
        // A door that cannot be reached closes the connection: the client sees it end.
        let _ = door::hand_over(socket, &key.0, &conn);
    }
}
