//! `--jobs` against the open files swarm may hold (docs/USAGE.md, "Open files"): a soft limit
//! too low is raised up to the hard one and given back to the workers; a hard limit too low
//! refuses the run before it changes anything.

use std::os::unix::process::CommandExt as _;
use std::process::Command;

use crate::common::{Run, TestRepo};

/// Workers at once in these tests: sixty slots hold far more than 128 descriptors.
const JOBS: usize = 60;

/// Runs `cmd` with the open-file limits `soft` and `hard`.
fn with_limits(cmd: &mut Command, soft: u64, hard: u64) -> Run {
    // SAFETY: `setrlimit` is a system call, safe between `fork` and `exec`.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    Run::from(cmd.output().unwrap())
}

fn hard_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is valid for the call.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    limit.rlim_max
}

fn files() -> Vec<(String, String)> {
    (0..JOBS)
        .map(|i| (format!("f{i:02}.txt"), format!("foo {i}\n")))
        .collect()
}

/// Each worker writes the limits it was given into its file.
const WRITE_LIMITS: &str = "sleep 1; echo \"$(ulimit -Sn) $(ulimit -Hn)\" > \"$SWARM_FILE\"";

fn refactor(repo: &TestRepo, sandbox: &str, exec: &str) -> Command {
    let mut cmd = repo.swarm_cmd();
    cmd.args(["refactor", "limits", "*.txt", "-y", "--sandbox", sandbox])
        .args(["-j", &JOBS.to_string(), "--exec", exec]);
    cmd
}

#[test]
fn a_soft_limit_too_low_for_jobs_is_raised_and_the_workers_get_it_back() {
    let hard = hard_limit();
    assert!(
        hard >= 2 * (64 + 8 * JOBS as u64),
        "this test needs a hard open-file limit of at least 1,088 (it is {hard})"
    );
    for sandbox in ["workspace-write", "off"] {
        let repo = TestRepo::with_files(&files());
        let run = with_limits(&mut refactor(&repo, sandbox, WRITE_LIMITS), 128, hard);
        run.assert_code(0);
        let merged = repo.lines(&["log", "--merges", "--format=%H"]);
        assert_eq!(merged.len(), JOBS, "{}", run.stderr);
        for i in 0..JOBS {
            let file = repo.git(&["show", &format!("HEAD:f{i:02}.txt")]);
            assert_eq!(file, format!("128 {hard}"), "{sandbox}: f{i:02}.txt");
        }
    }
}

#[test]
fn a_hard_limit_too_low_for_jobs_refuses_the_run_and_changes_nothing() {
    let repo = TestRepo::with_files(&files());
    let head = repo.git(&["rev-parse", "HEAD"]);
    let run = with_limits(
        &mut refactor(&repo, "workspace-write", WRITE_LIMITS),
        128,
        512,
    );
    run.assert_code(2);
    assert!(
        run.stderr.contains("--jobs 60 needs swarm to hold up to 1088 open files")
            && run.stderr.contains("and it may hold 512 here (the hard `ulimit -n`): pass -j 24 or fewer, or raise the hard limit"),
        "{}",
        run.stderr
    );
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
    assert!(repo.swarm_branches().is_empty());
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    assert!(!repo.swarm_dir().join("runs").exists());
}

/// A run started with more workers than this machine's hard limit covers is resumed here
/// with fewer (`swarm resume -j`); without it, the resume is refused and names the flag.
#[test]
fn a_run_is_resumed_with_fewer_jobs_where_the_hard_limit_is_lower() {
    let repo = TestRepo::with_files(&files());
    let run = Run::from(
        refactor(&repo, "workspace-write", "exit 1")
            .output()
            .unwrap(),
    );
    run.assert_code(1);
    let id = run.run_id();
    let resume = |jobs: Option<&str>| {
        let mut cmd = repo.swarm_cmd();
        cmd.args([
            "resume",
            &id,
            "--failed",
            "--exec",
            "echo done > \"$SWARM_FILE\"",
        ]);
        if let Some(jobs) = jobs {
            cmd.args(["-j", jobs]);
        }
        with_limits(&mut cmd, 128, 512)
    };
    let refused = resume(None);
    refused.assert_code(2);
    assert!(
        refused.stderr.contains("--jobs 60 needs") && refused.stderr.contains("pass -j 24"),
        "{}",
        refused.stderr
    );
    assert!(repo.lines(&["log", "--merges", "--format=%H"]).is_empty());
    resume(Some("24")).assert_code(0);
    assert_eq!(repo.lines(&["log", "--merges", "--format=%H"]).len(), JOBS);
    assert_eq!(repo.git(&["show", "HEAD:f07.txt"]), "done");
}

/// No more workers run at once than there are files: `-j 500` over three files needs what
/// three workers need.
#[test]
fn jobs_beyond_the_files_are_not_counted() {
    let repo = TestRepo::with_files(&files());
    let mut cmd = repo.swarm_cmd();
    cmd.args(["refactor", "limits", "f0[1-3].txt", "-y", "-j", "500"])
        .args(["--exec", WRITE_LIMITS]);
    with_limits(&mut cmd, 128, 512).assert_code(0);
    assert_eq!(repo.lines(&["log", "--merges", "--format=%H"]).len(), 3);
}
