//! A worker slot's jail is set up once and reused (a jail host forks each task's jail), yet
//! nothing of a task reaches the next one in the same jail: its processes, daemons
//! included, die with it; its System V IPC objects and its `/proc` are its own; its
//! `TMPDIR` and its git's writes are emptied before another task gets the same folders.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Run, SED_FOO_BAR, TestRepo};

fn three_files() -> TestRepo {
    TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")])
}

/// `-j 1`: task a leaves a `setsid` daemon beating into `out/beat` and a message queue, then
/// each task records its namespaces and what it sees of the tasks before it.
fn exec(out: &Path) -> String {
    format!(
        r#"o={out}; f="$SWARM_FILE"
readlink /proc/self/ns/net > "$o/net-$f"; echo $$ > "$o/pid-$f"
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

/// Runs `cmd` to its end, and says whether a jail host (named `swarm-jail-host`) was ever
/// among its children meanwhile.
fn run_watching_hosts(cmd: &mut Command) -> (Run, bool) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let parent = child.id().to_string();
    let mut hosts = false;
    while child.try_wait().unwrap().is_none() {
        hosts |= std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
            let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1));
            ppid == Some(parent.as_str()) && stat.contains("(swarm-jail-host)")
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    (Run::from(child.wait_with_output().unwrap()), hosts)
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .to_string()
}

/// `refactor x . -j 1 --worktrees MODE EXTRA… --exec EXEC` to its end: it succeeds, and a jail
/// host ran its tasks.
fn one_at_a_time_in_hosts(repo: &TestRepo, mode: &str, extra: &[&str], exec: &str) {
    let mut cmd = repo.swarm_cmd();
    cmd.args(["refactor", "x", ".", "-j", "1", "--worktrees", mode])
        .args(extra)
        .args(["--exec", exec]);
    let (run, hosts) = run_watching_hosts(&mut cmd);
    run.assert_code(0);
    assert!(hosts, "no jail host ran");
}

/// The network namespace each of tasks a, b and c recorded in `out`.
fn networks(out: &Path) -> Vec<String> {
    ["a", "b", "c"]
        .iter()
        .map(|t| read(out, &format!("net-{t}.txt")))
        .collect()
}

#[test]
fn a_reused_jail_keeps_nothing_of_the_task_before() {
    for mode in ["pool", "overlay"] {
        let repo = three_files();
        let out = repo.writable_dir();
        one_at_a_time_in_hosts(&repo, mode, &[], &exec(&out));
        for f in ["a.txt", "b.txt", "c.txt"] {
            assert_eq!(repo.read(f), "bar\n", "{f}");
        }
        // A jail reused: tasks share its network namespace...
        let net = networks(&out);
        match mode {
            // A full checkout holds its task's place among `-j` until its jail is gone: the
            // next task takes the same host.
            "pool" => assert!(net.windows(2).all(|w| w[0] == w[1]), "{net:?}"),
            // An overlay worktree gives it back once its worker ended: the next task may
            // start while the host still unmounts the jail before, and take another; the
            // one after finds the first idle again (each task lasts half a second).
            _ => assert!(
                net[1] == net[0] || net[2] == net[0] || net[2] == net[1],
                "{net:?}"
            ),
        }
        // ...but each has a PID namespace of its own: its shell is the second process there,
        // after its init.
        for t in ["a", "b", "c"] {
            assert_eq!(read(&out, &format!("pid-{t}.txt")), "2", "task {t}");
        }
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
}

#[test]
fn without_jail_hosts_each_task_has_a_jail_of_its_own() {
    let repo = three_files();
    let out = repo.writable_dir();
    let (run, hosts) = run_watching_hosts(
        repo.swarm_cmd()
            .args(["refactor", "x", ".", "-j", "1", "--exec", &exec(&out)])
            .env("SWARM_NO_JAIL_HOSTS", "1"),
    );
    run.assert_code(0);
    assert!(!hosts, "a jail host ran");
    assert_eq!(read(&out, "beat-b.txt"), "quiet");
}

/// `-j 1`: each task records its `TMPDIR` (path, mode, what is in it) and a setting its git
/// may have kept, then leaves a file, a folder and a link to a file outside in it, and a
/// setting in its repository's config; task b also opens its `TMPDIR` to everyone.
fn leave_things(out: &Path, victim: &Path) -> String {
    format!(
        r#"o={out}; f="$SWARM_FILE"
echo "$TMPDIR $(stat -c %a "$TMPDIR") [$(ls -A "$TMPDIR" | tr '\n' ' ')]" > "$o/tmp-$f"
git config --get swarm.left > "$o/git-$f" || true
touch "$TMPDIR/left"; mkdir -p "$TMPDIR/d/e"; ln -s {victim} "$TMPDIR/link"
git config swarm.left "$f"
[ "$f" = b.txt ] && chmod 755 "$TMPDIR"
{SED_FOO_BAR}"#,
        out = out.display(),
        victim = victim.display(),
    )
}

#[test]
fn a_reused_tmpdir_and_git_view_keep_nothing_of_the_task_before() {
    let repo = three_files();
    let out = repo.writable_dir();
    let victim = repo.home.join("victim.txt");
    std::fs::write(&victim, "untouched\n").unwrap();
    // Full checkouts, so that each task's folders are back before the next task starts.
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "-j",
        "1",
        "--worktrees",
        "pool",
        "--exec",
        &leave_things(&out, &victim),
    ]);
    run.assert_code(0);
    let seen: Vec<Vec<String>> = ["a", "b", "c"]
        .iter()
        .map(|t| {
            let line = read(&out, &format!("tmp-{t}.txt"));
            line.split(' ').map(str::to_string).collect()
        })
        .collect();
    for (t, seen) in ["a", "b", "c"].iter().zip(&seen) {
        assert_eq!(seen[1..], ["700", "[]"], "task {t}'s TMPDIR: {seen:?}");
        assert_eq!(
            read(&out, &format!("git-{t}.txt")),
            "",
            "task {t}'s git config"
        );
    }
    // a's folder, emptied, was b's; b's, opened to everyone, was deleted, not given to c.
    assert_eq!(seen[0][0], seen[1][0], "the TMPDIR was not used again");
    assert_ne!(seen[1][0], seen[2][0], "a changed TMPDIR was used again");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    let config = repo.git(&["config", "--list", "--local"]);
    assert!(!config.contains("swarm.left"), "{config}");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

/// `-j 1` with an allow-list, so each task's jail forwards a port of its loopback to swarm's
/// proxy: task a leaves a `setsid` daemon listening on that loopback, and reaches it itself;
/// each task then tries the daemon's port and the forwarded one.
fn leave_a_listener(out: &Path) -> String {
    let connect = r#"python3 -c 'import socket,sys
try: socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2); print("open")
except OSError as e: print(type(e).__name__)'"#;
    format!(
        r#"o={out}; f="$SWARM_FILE"
readlink /proc/self/ns/net > "$o/net-$f"
if [ "$f" = a.txt ]; then
  setsid python3 -c 'import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7777)); s.listen(); open("{out}/listening", "w").close()
while True:
    s.accept()[0].close()' </dev/null >/dev/null 2>&1 &
  while [ ! -e "$o/listening" ]; do sleep 0.05; done
fi
{connect} 7777 > "$o/daemon-$f"
{connect} 3128 > "$o/proxy-$f"
{SED_FOO_BAR}"#,
        out = out.display()
    )
}

#[test]
fn a_reused_jail_with_forwards_keeps_no_listener_of_the_task_before() {
    let repo = three_files();
    let out = repo.writable_dir();
    one_at_a_time_in_hosts(
        &repo,
        "pool",
        &["--allow-domain", "example.com"],
        &leave_a_listener(&out),
    );
    let net = networks(&out);
    assert!(net.windows(2).all(|w| w[0] == w[1]), "{net:?}");
    // The loopback is up for the task that listens on it, and its forward works...
    assert_eq!(read(&out, "daemon-a.txt"), "open");
    for t in ["a", "b", "c"] {
        assert_eq!(read(&out, &format!("proxy-{t}.txt")), "open", "task {t}");
    }
    // ...but what it left listening ended with it.
    for t in ["b", "c"] {
        assert_eq!(
            read(&out, &format!("daemon-{t}.txt")),
            "ConnectionRefusedError",
            "task {t}"
        );
    }
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}
