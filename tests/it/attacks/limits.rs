//! A hostile model cannot make swarm's memory grow without bound.

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
