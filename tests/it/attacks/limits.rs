//! A hostile model cannot make swarm's memory grow without bound, nor a hostile agent the
//! descriptors swarm holds.

use std::time::{Duration, Instant};

use crate::common::{TestRepo, run_measuring_peak};
use crate::fake_model::{FakeModel, Reply};

#[test]
fn endless_answers_are_cut_off_with_a_clear_error() {
    for (reply, what) in [
        (Reply::Endless, "larger than 16 MiB"),
        (Reply::EndlessLine, "longer than 1024 KiB"),
    ] {
        let repo = TestRepo::with_files(&[("a.py", "foo\n")]);
        let fake = FakeModel::start(move |_, _| reply.clone());
        let started = Instant::now();
        let mut cmd = repo.swarm_cmd();
        cmd.args([
            "refactor",
            "x",
            ".",
            "--model",
            "m",
            "--base-url",
            &fake.url,
            "--timeout",
            "120",
        ]);
        let (run, peak_kb) = run_measuring_peak(&mut cmd);
        run.assert_code(1);
        assert!(
            started.elapsed() < Duration::from_secs(100),
            "{:?}",
            started.elapsed()
        );
        let report = repo.report(&run);
        let error = report["tasks"][0]["error"].as_str().unwrap();
        assert!(error.contains(what), "{error}");
        // One request: a reply that is too large is not asked for again.
        assert_eq!(fake.requests().len(), 1);
        let peak_mb = peak_kb / 1024;
        assert!(
            peak_mb < 120,
            "swarm peaked at {peak_mb} MB on an endless answer"
        );
    }
}

/// An agent opens 200 connections to its model gateway and holds them: swarm serves at most
/// a door's 64 at once (docs/SECURITY.md), so its own descriptors stay far below what the
/// agent opened, and the run goes on once the agent lets them go.
#[test]
fn an_agent_holding_connections_open_cannot_make_swarm_hold_as_many() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let seen = repo.root().join("seen");
    std::fs::create_dir_all(&seen).unwrap();
    let exec = format!(
        "bash -c 'for i in $(seq 200); do exec {{fd}}<>/dev/tcp/127.0.0.1/3129 || exit 9; done; \
         touch {seen}/flooded; sleep 3; sed -i s/foo/bar/ \"$SWARM_FILE\"'",
        seen = seen.display()
    );
    repo.user_config(&format!(
        "[agents.flood]\nexec = '''{exec}'''\nbinary = \"bash\"\napi = \"anthropic\"\n\
         output = \"text\"\n\n[sandbox]\nwritable = [\"{}\"]\n",
        seen.display()
    ));
    let mut cmd = repo.swarm_cmd();
    cmd.args(["refactor", "x", "a.txt", "--agent", "flood", "-y"])
        .env("ANTHROPIC_API_KEY", "sk-flood-key-0123456789")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let fds = format!("/proc/{}/fd", child.id());
    // swarm's descriptors while the agent holds its connections.
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.join("flooded").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        seen.join("flooded").exists(),
        "the agent opened its connections"
    );
    for _ in 0..40 {
        let open = std::fs::read_dir(&fds).map_or(0, Iterator::count);
        most = most.max(open);
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = crate::common::Run::from(child.wait_with_output().unwrap());
    run.assert_code(0);
    assert_eq!(repo.git(&["show", "HEAD:a.txt"]), "bar");
    assert!(
        most < 64 + 100,
        "swarm held {most} descriptors while an agent held 200 connections"
    );
}
