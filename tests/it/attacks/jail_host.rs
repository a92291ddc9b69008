//! A worker slot's jail is set up once and reused (a jail host forks each task's jail), yet
//! nothing of a task reaches the next one in the same jail: its processes, daemons
//! included, die with it; its System V IPC objects and its `/proc` are its own.

use std::path::Path;
use std::time::Duration;

use crate::common::{SED_FOO_BAR, TestRepo};

fn three_files() -> TestRepo {
    TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")])
}

/// `-j 1`: task a leaves a `setsid` daemon beating into `out/beat` and a message queue, then
/// each task records its namespaces and what it sees of the tasks before it.
fn exec(out: &Path) -> String {
    format!(
        r#"o={out}; f="$SWARM_FILE"
readlink /proc/self/ns/net > "$o/net-$f"; readlink /proc/self/ns/pid > "$o/pid-$f"
if [ "$f" = a.txt ]; then
  setsid sh -c 'trap "" TERM INT HUP; i=0; while [ $i -lt 300 ]; do echo beat >> {out}/beat; i=$((i+1)); sleep 0.05; done' </dev/null >/dev/null 2>&1 &
  ipcmk -Q >/dev/null
  sleep 0.3
else
  s1=$(wc -c < "$o/beat"); sleep 0.5; s2=$(wc -c < "$o/beat")
  [ "$s1" = "$s2" ] && echo quiet > "$o/beat-$f" || echo beating > "$o/beat-$f"
  ipcs -q | grep -c '^0x' > "$o/queues-$f" || true
  ls /proc | grep -c '^[0-9]' > "$o/procs-$f" || true
fi
{SED_FOO_BAR}"#,
        out = out.display()
    )
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .to_string()
}

#[test]
fn a_reused_jail_keeps_nothing_of_the_task_before() {
    let repo = three_files();
    let out = repo.writable_dir();
    let run = repo.swarm(&["refactor", "x", "-j", "1", "--exec", &exec(&out)]);
    run.assert_code(0);
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(repo.read(f), "bar\n", "{f}");
    }
    // One jail for the slot: the three tasks share its network namespace...
    let net: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|t| read(&out, &format!("net-{t}.txt")))
        .collect();
    assert!(net.windows(2).all(|w| w[0] == w[1]), "{net:?}");
    // ...but each has a PID namespace of its own.
    let pid: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|t| read(&out, &format!("pid-{t}.txt")))
        .collect();
    assert!(pid[0] != pid[1] && pid[1] != pid[2], "{pid:?}");
    for t in ["b", "c"] {
        assert_eq!(read(&out, &format!("beat-{t}.txt")), "quiet", "task {t}");
        assert_eq!(read(&out, &format!("queues-{t}.txt")), "0", "task {t}");
        // Its init, its shell and the two commands counting.
        let procs: u32 = read(&out, &format!("procs-{t}.txt")).parse().unwrap();
        assert!(procs <= 4, "task {t} sees {procs} processes");
    }
    let beat = out.join("beat");
    let size = std::fs::metadata(&beat).unwrap().len();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        std::fs::metadata(&beat).unwrap().len(),
        size,
        "the daemon runs on"
    );
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

#[test]
fn without_jail_hosts_each_task_has_a_jail_of_its_own() {
    let repo = three_files();
    let out = repo.writable_dir();
    let run = crate::common::Run::from(
        repo.swarm_cmd()
            .args(["refactor", "x", "-j", "1", "--exec", &exec(&out)])
            .env("SWARM_NO_JAIL_HOSTS", "1")
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    let (a, b) = (read(&out, "net-a.txt"), read(&out, "net-b.txt"));
    assert_ne!(a, b, "the one-off jails share a network namespace");
    assert_eq!(read(&out, "beat-b.txt"), "quiet");
}
