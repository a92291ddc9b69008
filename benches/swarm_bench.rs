//! swarm vs the naive git CLI flow, on one generated repository, in the same run.
//!
//! ```text
//! cargo bench --bench swarm_bench -- [--files 5000] [--tasks 200] [--jobs 2]
//! ```
//!
//! Generates a repository of `--files` text files, `--tasks` of which contain `foo`, and
//! applies `sed s/foo/bar/` to those files, one task per file, `--jobs` at a time:
//!
//! 1. through `swarm refactor --grep foo --exec sed…` (the release binary), and
//! 2. through the naive flow with the git CLI, per task: `git worktree add -b`, edit,
//!    `git commit -a`, `git merge --no-ff` in the main checkout (one merge at a time),
//!    `git worktree remove`.
//!
//! Both start from clones of the same commit; the bench checks that both end with the same
//! tree, then prints wall times and the ratio. See docs/BENCHMARKS.md for recorded figures.

// A benchmark harness: failing loudly on any unexpected state is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The shared helpers (`common`, the fake model) are `pub` for the modules beside them.
// A bench reads as one story; the 80-line limit is for the product code.
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{Shape, clone, generate, git};

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SED: &str = r#"sed -i 's/foo/bar/g' "$SWARM_FILE""#;

struct Options {
    files: usize,
    tasks: usize,
    jobs: usize,
}

fn parse_options() -> Options {
    let mut o = Options {
        files: 5000,
        tasks: 200,
        jobs: 2,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = || -> usize {
            args.get(i + 1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{} needs a number", args[i]))
        };
        match args[i].as_str() {
            "--files" => o.files = value(),
            "--tasks" => o.tasks = value(),
            "--jobs" => o.jobs = value(),
            // `cargo bench` passes --bench; ignore what is not ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    assert!(o.tasks <= o.files, "--tasks must not exceed --files");
    o
}

fn run_swarm(repo: &Path, jobs: usize) -> Duration {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_swarm"))
        .current_dir(repo)
        .args([
            "refactor",
            "bench: foo to bar",
            "src",
            "--grep",
            "foo",
            "-y",
        ])
        .args(["-j", &jobs.to_string(), "--exec", SED])
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(
        out.status.success(),
        "swarm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

fn run_naive(repo: &Path, jobs: usize) -> Duration {
    let files: Vec<String> = git(repo, &["grep", "-l", "foo", "--", "src"])
        .lines()
        .map(str::to_string)
        .collect();
    let wt_root = repo.parent().unwrap().join("naive-worktrees");
    std::fs::create_dir_all(&wt_root).unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let merge_lock = Arc::new(Mutex::new(()));
    let files = Arc::new(files);
    let started = Instant::now();
    let workers: Vec<_> = (0..jobs)
        .map(|_| {
            let (next, merge_lock, files) = (next.clone(), merge_lock.clone(), files.clone());
            let (repo, wt_root) = (repo.to_path_buf(), wt_root.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(file) = files.get(i) else { break };
                    let branch = format!("task-{i}");
                    let wt = wt_root.join(&branch);
                    let wt_s = wt.to_str().unwrap();
                    git(
                        &repo,
                        &["worktree", "add", "-q", "-b", &branch, wt_s, "main"],
                    );
                    let status = Command::new("sh")
                        .args(["-c", SED])
                        .current_dir(&wt)
                        .env("SWARM_FILE", file)
                        .status()
                        .unwrap();
                    assert!(status.success());
                    git(&wt, &["commit", "-q", "-a", "-m", &format!("task {i}")]);
                    {
                        let _guard = merge_lock.lock().unwrap();
                        git(
                            &repo,
                            &[
                                "merge",
                                "-q",
                                "--no-ff",
                                "-m",
                                &format!("merge task {i}"),
                                &branch,
                            ],
                        );
                    }
                    git(&repo, &["worktree", "remove", wt_s]);
                    git(&repo, &["branch", "-q", "-d", &branch]);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    started.elapsed()
}

fn main() {
    let o = parse_options();
    let root = tempfile::tempdir().unwrap();
    eprintln!(
        "generating {} files ({} with foo) in {}",
        o.files,
        o.tasks,
        root.path().display()
    );
    let origin = generate(
        root.path(),
        &Shape {
            files: o.files,
            dirs: 50,
            tasks: o.tasks,
            lines: 40,
        },
    );
    let (swarm_repo, naive_repo) = (root.path().join("swarm"), root.path().join("naive"));
    clone(&origin, &swarm_repo);
    clone(&origin, &naive_repo);

    eprintln!("swarm: {} tasks, -j {}", o.tasks, o.jobs);
    let swarm = run_swarm(&swarm_repo, o.jobs);
    eprintln!(
        "naive git CLI flow: {} tasks, {} at a time",
        o.tasks, o.jobs
    );
    let naive = run_naive(&naive_repo, o.jobs);

    let tree = |r: &Path| git(r, &["rev-parse", "HEAD^{tree}"]);
    assert_eq!(
        tree(&swarm_repo),
        tree(&naive_repo),
        "the two flows disagree"
    );
    let merges = |r: &Path| git(r, &["rev-list", "--merges", "--count", "HEAD"]);
    assert_eq!(merges(&swarm_repo), o.tasks.to_string());
    assert_eq!(merges(&naive_repo), o.tasks.to_string());

    let ratio = swarm.as_secs_f64() / naive.as_secs_f64();
    println!(
        "files={} tasks={} jobs={}  swarm={:.2}s  naive={:.2}s  swarm/naive={:.3} (1/{:.1})  {}",
        o.files,
        o.tasks,
        o.jobs,
        swarm.as_secs_f64(),
        naive.as_secs_f64(),
        ratio,
        1.0 / ratio,
        if ratio <= 0.1 {
            "target met (<= 1/10)"
        } else {
            "TARGET MISSED (> 1/10)"
        }
    );
}
