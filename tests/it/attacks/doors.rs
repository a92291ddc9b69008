//! One run's doors are its own: a worker looks for every Unix socket under the temporary
//! directory, where another run's allow-list proxy waits, and finds none; told the exact
//! path of that door, it cannot connect to it; and what a run killed with `kill -9` left
//! there is swept.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{Run, SED_FOO_BAR, TestRepo, hermetic, wait_until};

/// A local HTTP server answering `ok`; counts the requests.
fn http_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            count.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
            );
        }
    });
    (port, served)
}

/// The first file named `name` under `dir`.
fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            return Some(path);
        }
        if entry.file_type().is_ok_and(|t| t.is_dir())
            && let Some(found) = find(&path, name)
        {
            return Some(found);
        }
    }
    None
}

/// Every Unix socket under `$TMPDIR` and the paths given after the port, asked for the
/// allowed domain as a proxy would be (a plain request and a `CONNECT`), and as a gateway
/// would be.
const KNOCK: &str = r#"
import os, socket, stat, sys
port = sys.argv[1]
found = 0
paths = list(sys.argv[2:])
for root, dirs, files in os.walk(os.environ["SWARM_ATTACK_TMP"]):
    for name in files:
        path = os.path.join(root, name)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found += 1
                paths.append(path)
        except OSError:
            continue
for path in paths:
        for ask in ["GET http://api.allowed.test:%s/ HTTP/1.1\r\nHost: x\r\n\r\n" % port,
                    "CONNECT api.allowed.test:%s HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n" % port,
                    "POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"]:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(3)
                s.connect(path)
                s.sendall(ask.encode())
                got = s.recv(4096)
                print("answer:", got[:60])
                if b"200" in got:
                    print("GOT-THROUGH", path)
            except Exception as e:
                print("refused:", type(e).__name__)
print("sockets found:", found)
"#;

#[test]
fn a_worker_cannot_use_another_runs_proxy() {
    let a = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let b = TestRepo::with_files(&[("b.txt", "foo\n")]);
    let (port, served) = http_server();
    // Both runs share one temporary directory (inside a's test directory), as two runs of
    // one user share /tmp.
    let tmp = a.root().join("tmp");
    let release = a.root().join("release");
    // Run A reaches its allowed domain through its proxy, then holds the proxy open.
    let holder = format!(
        "curl -sS -m 10 http://api.allowed.test:{port}/ > \"$TMPDIR/answer\" && \
         mv \"$TMPDIR/answer\" \"$TMPDIR/reached\" && \
         while [ ! -e {} ]; do sleep 0.1; done; {SED_FOO_BAR}",
        release.display()
    );
    let allow = format!("api.allowed.test:{port}");
    let mut run_a = a.swarm_cmd();
    run_a
        .env("SWARM_TEST_PROXY_RESOLVE", "api.allowed.test=127.0.0.1")
        .args([
            "refactor",
            "x",
            "a.txt",
            "--allow-domain",
            &allow,
            "-y",
            "--exec",
            &holder,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut run_a = run_a.spawn().unwrap();
    wait_until(
        Duration::from_secs(30),
        "run A never reached its domain",
        || find(&tmp, "reached").is_some(),
    );
    assert_eq!(served.load(Ordering::SeqCst), 1);
    // Run A's proxy door is there, seen from outside any jail.
    let door = find(&tmp, "door.sock").expect("run A has a door");

    // Run B, no network at all, knocks on every door it finds, and on run A's by its path.
    std::fs::write(b.root().join("knock.py"), KNOCK).unwrap();
    let attack = format!(
        "python3 {} {port} {}; {SED_FOO_BAR}",
        b.root().join("knock.py").display(),
        door.display()
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"));
    hermetic(&mut cmd, &b.home);
    let run_b = Run::from(
        cmd.current_dir(&b.path)
            .env("TMPDIR", &tmp)
            .env("SWARM_ATTACK_TMP", &tmp)
            .args(["refactor", "x", "b.txt", "-y", "--exec", &attack])
            .output()
            .unwrap(),
    );
    std::fs::write(&release, "").unwrap();
    let status = run_a.wait().unwrap();
    assert!(status.success());
    run_b.assert_code(0);
    let report = b.report(&run_b);
    let tail = report["tasks"][0]["output_tail"]
        .as_str()
        .unwrap_or_default();
    let found: usize = tail
        .lines()
        .find_map(|l| l.strip_prefix("sockets found: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the attack did not run: {tail}"));
    assert_eq!(found, 0, "a worker sees swarm's doors: {tail}");
    // Run A's door, by its path: not there for the worker.
    assert_eq!(
        tail.matches("refused: FileNotFoundError").count(),
        3,
        "{tail}"
    );
    assert!(!tail.contains("answer:"), "{tail}");
    assert!(!tail.contains("GOT-THROUGH"), "{tail}");
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "run B reached run A's domain: {tail}"
    );
}

/// `kill -9` leaves swarm no chance to remove its sockets and its workers' temporary
/// directories; `swarm clean` (and the next run) finds them by their free lock.
#[test]
fn what_a_killed_run_left_in_the_temporary_directory_is_swept() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let tmp = repo.root().join("tmp");
    let worker = "touch \"$TMPDIR/started\"; sleep 60";
    let mut swarm = repo
        .swarm_cmd()
        .args([
            "refactor",
            "x",
            "a.txt",
            "-y",
            "--allow-domain",
            "example.com",
        ])
        .args(["--exec", worker])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "the worker never started", || {
        find(&tmp, "started").is_some()
    });
    swarm.kill().unwrap();
    swarm.wait().unwrap();
    let names = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let doors = format!("swarm-doors-{}", std::fs::metadata(&tmp).unwrap().uid());
    let left = names();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&doors), "{left:?}");
    assert!(find(&tmp, "door.sock").is_some());

    let run = repo.swarm(&["clean", "--all"]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("1 temporary folder(s) of killed runs"),
        "{}",
        run.stderr
    );
    // Only the folder every run's doors go in is left, empty.
    assert_eq!(names(), std::slice::from_ref(&doors));
    assert_eq!(std::fs::read_dir(tmp.join(&doors)).unwrap().count(), 0);
}
