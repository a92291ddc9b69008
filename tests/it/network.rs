//! The network of a confined worker by allow-list (`--allow-domain`): the only way out of its
//! namespace is swarm's proxy, which lets through the listed domains and nothing else.
//!
//! The allowed "domain" is served by a local fake: the proxy resolves it to 127.0.0.1 through
//! the test-only `SWARM_TEST_PROXY_RESOLVE`.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;

/// A local HTTP server answering `ok` to every request; counts the requests.
fn http_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                count.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                );
            });
        }
    });
    (port, served)
}

fn with_resolve(repo: &TestRepo, args: &[&str]) -> Run {
    Run::from(
        repo.swarm_cmd()
            .env("SWARM_TEST_PROXY_RESOLVE", "api.allowed.test=127.0.0.1")
            .args(args)
            .output()
            .unwrap(),
    )
}

/// `worker` on `a.txt`, allowed to reach `api.allowed.test:PORT` (the local fake) only.
fn allowing(repo: &TestRepo, port: u16, worker: &str) -> Run {
    let allow = format!("api.allowed.test:{port}");
    let args = [
        "refactor",
        "x",
        "a.txt",
        "--allow-domain",
        &allow,
        "--exec",
        worker,
    ];
    with_resolve(repo, &args)
}

#[test]
fn an_allowed_domain_is_reached_through_the_proxy_and_counted() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let (port, served) = http_server();
    let worker = format!(
        "curl -sS -m 10 http://api.allowed.test:{port}/v1 && echo \"proxy=$HTTPS_PROXY\"; {SED_FOO_BAR}"
    );
    let run = allowing(&repo, port, &worker);
    run.assert_code(0);
    assert_eq!(served.load(Ordering::SeqCst), 1);
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    let tail = task["output_tail"].as_str().unwrap();
    assert!(tail.contains("ok\nproxy=http://127.0.0.1:"), "{tail}");
    assert_eq!(task["network"]["allowed"], 1, "{task}");
    assert_eq!(task["network"]["refused"], 0, "{task}");
    let events = repo.events(&run);
    let network: Vec<_> = events.iter().filter(|e| e["kind"] == "network").collect();
    assert_eq!(network.len(), 1, "{network:?}");
    assert_eq!(network[0]["domain"], "api.allowed.test");
    assert_eq!(network[0]["port"], port);
    assert_eq!(network[0]["verdict"], "allowed");
    assert_eq!(repo.read("a.txt"), "bar\n");
}

/// The forwarder is a thread of init, not a process of the namespace: the worker sees init
/// and itself alone (a forked forwarder made three), and the way out still works.
#[test]
fn the_forwarder_is_no_process_of_the_namespace() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let (port, served) = http_server();
    let worker = format!(
        "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo \"procs=$n\"; \
         curl -sS -m 10 http://api.allowed.test:{port}/v1; {SED_FOO_BAR}"
    );
    let run = allowing(&repo, port, &worker);
    run.assert_code(0);
    assert_eq!(served.load(Ordering::SeqCst), 1);
    let report = repo.report(&run);
    let tail = report["tasks"][0]["output_tail"].as_str().unwrap();
    assert!(tail.contains("procs=2\nok\n"), "{tail}");
    assert_eq!(repo.read("a.txt"), "bar\n");
}

/// The attack: a worker tries every other way out. A domain not on the list (through the
/// proxy), a direct connection that ignores the proxy, UDP (as DNS would go) and a name
/// lookup all fail, while the listed domain works in the same process.
#[test]
fn everything_but_the_allowed_domain_is_refused() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let (port, served) = http_server();
    let (direct_port, direct) = listener();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let probe = format!(
        r#"
import os, socket, subprocess
def attempt(name, f):
    try:
        f()
        print(name, "GOT-THROUGH")
    except Exception as e:
        print(name, "failed:", type(e).__name__)
attempt("direct", lambda: socket.create_connection(("127.0.0.1", {direct_port}), timeout=3))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(5):
        s.sendto(b"dns?", ("127.0.0.1", {udp_port}))
    s.settimeout(1)
    s.recvfrom(10)
attempt("udp", udp)
attempt("dns", lambda: socket.getaddrinfo("api.allowed.test", 443))
for url in ["http://refused.test/", "https://refused.test/", "http://api.allowed.test:{port}/"]:
    r = subprocess.run(["curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{{http_code}}", url], capture_output=True, text=True)
    print(url, r.stdout, r.stderr.strip())
"#
    );
    std::fs::write(repo.root().join("probe.py"), probe).unwrap();
    let worker = format!(
        "python3 {}; {SED_FOO_BAR}",
        repo.root().join("probe.py").display()
    );
    let run = allowing(&repo, port, &worker);
    run.assert_code(0);
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    let tail = task["output_tail"].as_str().unwrap();
    assert!(!tail.contains("GOT-THROUGH"), "{tail}");
    for line in ["direct failed", "udp failed", "dns failed"] {
        assert!(tail.contains(line), "{line}: {tail}");
    }
    assert!(tail.contains("http://refused.test/ 403"), "{tail}");
    assert!(
        tail.contains("https://refused.test/ 000 curl: (56) CONNECT tunnel failed, response 403"),
        "{tail}"
    );
    assert!(
        tail.contains(&format!("http://api.allowed.test:{port}/ 200")),
        "{tail}"
    );
    // Nothing reached the host: not the direct listener, not the UDP socket.
    assert_eq!(direct.load(Ordering::SeqCst), 0);
    let mut buf = [0u8; 16];
    assert!(udp.recv_from(&mut buf).is_err(), "a datagram got out");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    assert_eq!(task["network"]["allowed"], 1, "{task}");
    assert_eq!(task["network"]["refused"], 2, "{task}");
    assert_eq!(
        task["network"]["refused_hosts"],
        serde_json::json!(["refused.test:80", "refused.test:443"])
    );
    // The same probe with the host's network reaches the direct listener: the test can see
    // an escape when there is one.
    let open = with_resolve(
        &repo,
        &[
            "refactor",
            "x",
            "a.txt",
            "--network",
            "--exec",
            &worker.replace(SED_FOO_BAR, "true"),
        ],
    );
    open.assert_code(0);
    assert!(direct.load(Ordering::SeqCst) >= 1);
}

#[test]
fn the_repository_cannot_allow_domains() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        (
            "swarm.toml",
            "[sandbox]\nallow_domains = [\"api.allowed.test:1\"]\n",
        ),
    ]);
    let run = repo.swarm(&["refactor", "x", "a.txt", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("swarm.toml asks for [sandbox] allow_domains"),
        "{}",
        run.stderr
    );
    let plan: serde_json::Value =
        serde_json::from_str(&repo.run_file(&run.run_id(), "plan.json")).unwrap();
    assert_eq!(
        plan["settings"]["sandbox"]["allow_domains"],
        serde_json::Value::Null
    );
}
