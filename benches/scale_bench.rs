//! How swarm scales with the repository and with `-j`: overlay worktrees against pooled
//! checkouts, side by side in one run, on generated repositories.
//!
//! ```text
//! cargo bench --bench scale_bench -- large   [--files 27000] [--dirs 300] [--tasks 1000] [--jobs 2] [--modes overlay,pool] [--forms file,list] [--rounds 1]
//! cargo bench --bench scale_bench -- startup [--files 5000] [--dirs 50] [--jobs 16] [--modes overlay,pool] [--reuse-base]
//! cargo bench --bench scale_bench -- codemod [--repo DIR] [--tool CMD] [--jobs 2]
//! ```
//!
//! Each takes `--swarm PATH` to run another build of swarm (an A/B) instead of this one.
//!
//! `large`: one-file `sed` tasks on a repository of `--files` files; prints, per worktree
//! mode and form of the command (`--forms`: `file` runs `sed` once per task on
//! `"$SWARM_FILE"`, `list` once for several tasks on `$SWARM_FILES`), the wall time, CPU time, swarm's own peak memory and the overhead per task
//! (wall × jobs / tasks), and checks that every mode ends with the same tree and one merge
//! per task. Beside them, git's own floor (see [`floor`]) and swarm/floor, and with both
//! forms the one-file form's wall over the list form's; with `--rounds N`, all of it N times
//! in turn, and the worst of each ratio over the rounds. Each round runs the floor first, then
//! swarm's runs, in reverse order every second round: a run pays for the inodes the run
//! before it freed (on an ext4 without a journal), so no run always comes last. The one-file
//! form is also set against its own floor: git's, plus the same `sed` run on each file by
//! `xargs -P jobs` with no jail ([`xargs_floor`]).
//!
//! `startup`: `2 × jobs` tasks whose worker sleeps 2 s; prints the time from swarm's start to
//! the moment the last of the first `jobs` workers runs (from the run's events), and the disk
//! used under `.git/swarm` at that moment.
//!
//! `codemod`: a codemod whose start-up dominates (`--tool`, a command taking file names as
//! arguments; by default a small node script that renames `foo` to `bar`) over every file of
//! a repository (`--repo`, cloned; by default 216 generated files): once in one process over
//! the whole repository, then through swarm with a process per task (`--per-process 1`) and
//! with `--per-process auto`; prints each wall time and its ratio to the single process, the
//! merges and the processes, and checks that all three end with the same tree.
//!
//! Figures are recorded in docs/BENCHMARKS.md.

// A benchmark harness: failing loudly on any unexpected state is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The shared helpers (`common`, the fake model) are `pub` for the modules beside them.
// A bench reads as one story; the 80-line limit is for the product code.
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{Shape, clone, generate, git, measure, measure_any, option, option_str};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

const SED: &str = r#"sed -i 's/foo/bar/g' "$SWARM_FILE""#;
/// The same codemod given a list of files: with `--per-process auto` (the default), one
/// process runs several one-file tasks, and each task still gets its own commit and merge.
const SED_LIST: &str = r#"sed -i 's/foo/bar/g' $SWARM_FILES"#;

/// The benches' repository shape with 20 lines a file.
fn shape(files: usize, dirs: usize, tasks: usize) -> Shape {
    Shape {
        files,
        dirs,
        tasks,
        lines: 20,
    }
}

/// The swarm binary run: this build's, or `--swarm PATH` (another build, for an A/B).
fn swarm_bin() -> String {
    option_str("--swarm", env!("CARGO_BIN_EXE_swarm"))
}

fn swarm(repo: &Path, jobs: usize, mode: &str, exec: &str) -> Command {
    let mut cmd = Command::new(swarm_bin());
    cmd.current_dir(repo)
        .args([
            "refactor",
            "bench: foo to bar",
            "src",
            "--grep",
            "foo",
            "-y",
        ])
        .args(["-j", &jobs.to_string(), "--worktrees", mode, "--exec", exec])
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com");
    cmd
}

fn modes() -> Vec<String> {
    option_str("--modes", "overlay,pool")
        .split(',')
        .map(str::to_string)
        .collect()
}

/// `--forms file,list`: the one-file form (`"$SWARM_FILE"`, a process per task) and the list
/// form (`$SWARM_FILES`, a process for several tasks).
fn forms() -> Vec<(String, &'static str)> {
    option_str("--forms", "file")
        .split(',')
        .map(|form| match form {
            "file" => (form.to_string(), SED),
            "list" => (form.to_string(), SED_LIST),
            _ => panic!("--forms takes file, list or both: file,list"),
        })
        .collect()
}

fn large() {
    let files = option("--files", 27_000) as usize;
    let dirs = option("--dirs", 300) as usize;
    let tasks = option("--tasks", 1000) as usize;
    let jobs = option("--jobs", 2) as usize;
    let rounds = option("--rounds", 1) as usize;
    let root = tempfile::tempdir().unwrap();
    eprintln!("generating {files} files in {dirs} folders ({tasks} with foo)");
    let origin = generate(root.path(), &shape(files, dirs, tasks));
    let runs: Vec<_> = modes()
        .into_iter()
        .flat_map(|mode| forms().into_iter().map(move |form| (mode.clone(), form)))
        .collect();
    let mut trees = Vec::new();
    // The worst swarm/floor of each run, over the rounds.
    let mut worst = vec![0.0f64; runs.len()];
    // The worst one-file/list of each mode (goal 5: the one-file form within 3x), over the
    // rounds.
    let mut worst_forms: Vec<(String, f64)> = Vec::new();
    // The worst one-file form over git's floor plus `xargs -P jobs` running its command.
    let mut worst_xargs = 0.0f64;
    for round in 1..=rounds {
        let mut walls = Vec::new();
        let floor_repo = root.path().join(format!("floor-{round}"));
        clone(&origin, &floor_repo);
        eprintln!("git's floor: checkout + fast-import of {tasks} tasks and merges + reset");
        let (floor_wall, floor_tree) = floor(&floor_repo);
        println!(
            "floor files={files} tasks={tasks} round={round}: wall={:.1}s (one checkout of the \
             base, git fast-import of every blob, task commit and --no-ff merge, git reset --hard)",
            floor_wall.as_secs_f64()
        );
        trees.push(floor_tree);
        let xargs_wall = xargs_floor(&floor_repo, jobs);
        println!(
            "floor+xargs files={files} tasks={tasks} round={round}: wall={:.1}s (git's floor, then \
             the one-file sed run by xargs -P {jobs} on each file, no jail: {:.1}s)",
            floor_wall.as_secs_f64() + xargs_wall,
            xargs_wall
        );
        let mut order: Vec<usize> = (0..runs.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for k in order {
            let (mode, (form, exec)) = &runs[k];
            let name =
                format!("files={files} tasks={tasks} jobs={jobs} worktrees={mode} form={form}");
            let repo = root.path().join(format!("{mode}-{form}-{round}"));
            clone(&origin, &repo);
            eprintln!("swarm --worktrees {mode}, the {form} form: {tasks} tasks, -j {jobs}");
            let (wall, tree) = large_run(&repo, jobs, mode, exec, tasks, &name);
            trees.push(tree);
            let ratio = wall / floor_wall.as_secs_f64();
            worst[k] = worst[k].max(ratio);
            println!("large {name} round={round}: swarm/floor = {ratio:.2}");
            if form == "file" {
                let ratio = wall / (floor_wall.as_secs_f64() + xargs_wall);
                worst_xargs = worst_xargs.max(ratio);
                println!("large {name} round={round}: swarm/(floor+xargs) = {ratio:.2}");
            }
            walls.push((mode.clone(), form.clone(), wall));
        }
        for (mode, ratio) in file_over_list(&walls) {
            println!(
                "large files={files} tasks={tasks} worktrees={mode} round={round}: one-file form / list form = {ratio:.2}"
            );
            match worst_forms.iter_mut().find(|(m, _)| *m == mode) {
                Some((_, worst)) => *worst = worst.max(ratio),
                None => worst_forms.push((mode, ratio)),
            }
        }
    }
    for (mode, ratio) in &worst_forms {
        println!(
            "large files={files} tasks={tasks} worktrees={mode}: worst one-file form / list form \
             of {rounds} round(s) = {ratio:.2}"
        );
    }
    for (k, (mode, (form, _))) in runs.iter().enumerate() {
        println!(
            "large files={files} tasks={tasks} jobs={jobs} worktrees={mode} form={form}: \
             worst swarm/floor of {rounds} round(s) = {:.2}",
            worst[k]
        );
    }
    if worst_xargs > 0.0 {
        println!(
            "large files={files} tasks={tasks} jobs={jobs} form=file: worst swarm/(floor+xargs) \
             of {rounds} round(s) = {worst_xargs:.2}"
        );
    }
    assert!(trees.windows(2).all(|w| w[0] == w[1]), "the runs disagree");
}

/// The one-file form's own floor beyond git's: the same `sed` on each file that mentions
/// `foo`, one process a file, run by `xargs -P jobs` in the floor's checkout of the base (no
/// jail, no worktree, no commit). Its wall time in seconds.
fn xargs_floor(repo: &Path, jobs: usize) -> f64 {
    let checkout = repo.join(".git/floor-base");
    let started = std::time::Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git grep -lz foo -- src | xargs -0 -n 1 -P {jobs} sed -i 's/foo/bar/g'"
        ))
        .current_dir(&checkout)
        .status()
        .unwrap();
    assert!(status.success(), "xargs sed");
    started.elapsed().as_secs_f64()
}

/// For each mode that ran both forms (mode, form, wall seconds): the one-file form's wall
/// over the list form's.
fn file_over_list(walls: &[(String, String, f64)]) -> Vec<(String, f64)> {
    let wall = |mode: &str, form: &str| {
        walls
            .iter()
            .find(|(m, f, _)| m == mode && f == form)
            .map(|(_, _, w)| *w)
    };
    let mut out: Vec<(String, f64)> = Vec::new();
    for (mode, _, _) in walls {
        if let (Some(file), Some(list)) = (wall(mode, "file"), wall(mode, "list"))
            && !out.iter().any(|(m, _)| m == mode)
        {
            out.push((mode.clone(), file / list));
        }
    }
    out
}

/// One swarm run of `large` in `repo` (a fresh clone): prints its figures, checks one merge
/// per task, and returns its wall time in seconds and the result's tree.
fn large_run(
    repo: &Path,
    jobs: usize,
    mode: &str,
    exec: &str,
    tasks: usize,
    name: &str,
) -> (f64, String) {
    let m = measure(&mut swarm(repo, jobs, mode, exec));
    settle(repo);
    let merges = git(repo, &["rev-list", "--merges", "--count", "HEAD"]);
    assert_eq!(merges, tasks.to_string(), "one merge per task");
    let per_task = m.wall.as_secs_f64() * jobs as f64 / tasks as f64;
    // Once the first worker runs, until the last merge: what each task costs, without the
    // run's start (the base checkout) and end (the final update and cleanup).
    let events = common::run_events(repo);
    let ts = |kind: &str| {
        events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| e["ts"].as_f64().unwrap())
            .collect::<Vec<_>>()
    };
    let started = ts("run_started")[0];
    let first_running = ts("task_step")[0];
    let last_merge = *ts("merged").last().unwrap();
    let steady = (last_merge - first_running) * jobs as f64 / tasks as f64;
    println!(
        "large {name}: wall={:.1}s user={:.1}s sys={:.1}s peak={:.0}MB per-task={:.0}ms \
         (start-up {:.1}s, then {:.1}ms a task, then {:.1}s to the end)",
        m.wall.as_secs_f64(),
        m.user_s,
        m.sys_s,
        m.peak_mb,
        per_task * 1000.0,
        first_running - started,
        steady * 1000.0,
        m.wall.as_secs_f64() - (last_merge - started)
    );
    (
        m.wall.as_secs_f64(),
        git(repo, &["rev-parse", "HEAD^{tree}"]),
    )
}

/// Waits (up to two minutes) for the process a run leaves to empty its trash (its
/// worktrees, its base checkout), then for the disk: else the next step measured would
/// compete with that clean-up.
fn settle(repo: &Path) {
    let trash = repo.join(".git/swarm/trash");
    let started = std::time::Instant::now();
    while std::fs::read_dir(&trash).is_ok_and(|mut d| d.next().is_some())
        && started.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: sync(2) takes no argument and cannot fail.
    unsafe { libc::sync() };
}

/// What git itself needs to make the history a run of one-file `sed` tasks makes, in `repo`
/// (a fresh clone): a checkout of the base (as swarm's workers need one), then one
/// `git fast-import` stream with, per file mentioning `foo`, its new blob, a task commit on
/// the base and a `--no-ff` merge of it onto `main`, then `git reset --hard` to bring the
/// checkout to the result. Returns the wall time and the result's tree.
fn floor(repo: &Path) -> (Duration, String) {
    use std::io::Write as _;
    let started = std::time::Instant::now();
    let base = git(repo, &["rev-parse", "HEAD"]);
    let checkout = repo.join(".git/floor-base");
    git(
        repo,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            checkout.to_str().unwrap(),
            "HEAD",
        ],
    );
    let listed = git(repo, &["grep", "-l", "foo", "HEAD", "--", "src"]);
    let mut stream = Vec::new();
    let mut mark = 0;
    let mut tip = base.clone();
    for name in listed.lines() {
        let path = name.trim_start_matches("HEAD:");
        let text = std::fs::read_to_string(checkout.join(path)).unwrap();
        let new = text.replace("foo", "bar");
        let (blob, task, merge) = (mark + 1, mark + 2, mark + 3);
        mark += 3;
        let who = "committer bench <bench@example.com> 1764000000 +0000";
        write!(stream, "blob\nmark :{blob}\ndata {}\n{new}\n", new.len()).unwrap();
        let message = format!("task {path}");
        write!(
            stream,
            "commit refs/heads/floor-task\nmark :{task}\n{who}\ndata {}\n{message}\nfrom {base}\nM 100644 :{blob} {path}\n\n",
            message.len()
        )
        .unwrap();
        let message = format!("merge task {path}");
        write!(
            stream,
            "commit refs/heads/main\nmark :{merge}\n{who}\ndata {}\n{message}\nfrom {tip}\nmerge :{task}\nM 100644 :{blob} {path}\n\n",
            message.len()
        )
        .unwrap();
        tip = format!(":{merge}");
    }
    let mut child = Command::new("git")
        .current_dir(repo)
        .args(["fast-import", "--quiet", "--force"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(child.wait().unwrap().success(), "git fast-import failed");
    git(repo, &["reset", "-q", "--hard", "main"]);
    let wall = started.elapsed();
    // The checkout stays until the bench ends, as what swarm removes is removed after its
    // result: on a journal-less ext4, files deleted in the last minute make every file made
    // next slower (the allocator skips their inodes), so deleting 27,000 files here would
    // slow the swarm run measured next.
    (wall, git(repo, &["rev-parse", "HEAD^{tree}"]))
}

fn startup() {
    let files = option("--files", 5000) as usize;
    let dirs = option("--dirs", 50) as usize;
    let jobs = option("--jobs", 16) as usize;
    let tasks = 2 * jobs;
    let root = tempfile::tempdir().unwrap();
    let origin = generate(root.path(), &shape(files, dirs, tasks));
    // `--reuse-base`: a first run (whose workers change nothing) leaves the base checkout
    // for the one measured, as a user's second run finds it.
    let reuse = std::env::args().any(|a| a == "--reuse-base");
    for mode in modes() {
        let repo = root.path().join(&mode);
        clone(&origin, &repo);
        let with_reuse = |cmd: &mut Command| {
            if reuse {
                cmd.arg("--reuse-base");
            }
        };
        if reuse {
            let mut first = swarm(&repo, jobs, &mode, "true");
            with_reuse(&mut first);
            let out = first.output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::remove_dir_all(repo.join(".git/swarm/runs")).unwrap();
        }
        let exec = format!("sleep 2; {SED}");
        let began = SystemTime::now();
        let mut measured = swarm(&repo, jobs, &mode, &exec);
        with_reuse(&mut measured);
        let mut child = measured
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The disk under .git/swarm while the first wave runs.
        std::thread::sleep(Duration::from_millis(1500));
        let disk = du(&repo.join(".git/swarm"));
        assert!(child.wait().unwrap().success());
        let events = common::run_events(&repo);
        let mut running: Vec<f64> = events
            .iter()
            .filter(|e| e["kind"] == "task_step" && e["step"] == "running")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        running.sort_by(f64::total_cmp);
        let run_started = events.iter().find(|e| e["kind"] == "run_started").unwrap()["ts"]
            .as_f64()
            .unwrap();
        let began = began.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        let last = running[jobs - 1] - began.as_secs_f64();
        println!(
            "startup files={files} jobs={jobs} worktrees={mode}: last of {jobs} workers running \
             {:.2}s after swarm started ({:.2}s after the run did); .git/swarm held {:.0} MB \
             while they ran",
            last,
            running[jobs - 1] - run_started,
            disk as f64 / 1e6
        );
    }
}

/// Bytes of the files under `dir` (links not followed).
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// Renames `foo` to `bar` in every file named on its command line: a real process with a
/// real (node's) start-up.
const NODE_CODEMOD: &str = r#"const fs = require('fs');
for (const f of process.argv.slice(2)) {
  const text = fs.readFileSync(f, 'utf8');
  const next = text.replace(/\bfoo\b/g, 'bar');
  if (next !== text) fs.writeFileSync(f, next);
}
"#;

fn codemod() {
    let jobs = option("--jobs", 2) as usize;
    let root = tempfile::tempdir().unwrap();
    let origin = match option_str("--repo", "").as_str() {
        "" => generate(root.path(), &shape(216, 12, 216)),
        repo => Path::new(repo).canonicalize().unwrap(),
    };
    let tool = match option_str("--tool", "").as_str() {
        "" => {
            let script = root.path().join("codemod.js");
            std::fs::write(&script, NODE_CODEMOD).unwrap();
            format!("node {}", script.display())
        }
        tool => tool.to_string(),
    };
    eprintln!("codemod `{tool}` over {}, -j {jobs}", origin.display());

    // The whole repository in one process (a failing file does not stop the others).
    let whole = root.path().join("whole");
    clone(&origin, &whole);
    let files = git(&whole, &["ls-files", "-z"]);
    let names: Vec<&str> = files.split('\0').filter(|f| !f.is_empty()).collect();
    let started = std::time::Instant::now();
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!("{tool} \"$@\" >/dev/null 2>&1"))
        .arg("tool")
        .args(&names)
        .current_dir(&whole)
        .status()
        .unwrap();
    let whole_wall = started.elapsed().as_secs_f64();
    git(&whole, &["add", "-A"]);
    let expected = git(&whole, &["write-tree"]);
    println!(
        "codemod files={} one process over the repository: wall={whole_wall:.2}s",
        names.len()
    );

    for per_process in ["1", "auto"] {
        let repo = root.path().join(format!("per-process-{per_process}"));
        clone(&origin, &repo);
        let base = git(&repo, &["rev-parse", "HEAD"]);
        let mut cmd = Command::new(swarm_bin());
        cmd.current_dir(&repo)
            .args([
                "refactor",
                "bench: codemod",
                ".",
                "-y",
                "-j",
                &jobs.to_string(),
            ])
            .args(["--per-process", per_process])
            .args(["--exec", &format!("{tool} $SWARM_FILES")])
            .env("GIT_AUTHOR_NAME", "bench")
            .env("GIT_AUTHOR_EMAIL", "bench@example.com");
        // A file the tool cannot handle fails its task, not the bench.
        let m = measure_any(&mut cmd);
        assert!(m.code.is_some_and(|c| c <= 1), "swarm failed: {}", m.stderr);
        let merges = git(
            &repo,
            &["rev-list", "--merges", "--count", &format!("{base}..HEAD")],
        );
        // Each worker process is one `running` step (a group's, of its first task).
        let (mut processes, mut splits) = (0, 0);
        for e in common::run_events(&repo) {
            match e["kind"].as_str() {
                Some("group_split") => splits += 1,
                Some("task_step") if e["step"] == "running" => processes += 1,
                _ => {}
            }
        }
        assert_eq!(
            git(&repo, &["rev-parse", "HEAD^{tree}"]),
            expected,
            "--per-process {per_process}: not the tree of one process over the repository"
        );
        println!(
            "codemod files={} jobs={jobs} per-process={per_process}: wall={:.2}s ({:.1}x one \
             process) user={:.1}s sys={:.1}s peak={:.0}MB merges={merges} processes={processes} \
             splits={splits}",
            names.len(),
            m.wall.as_secs_f64(),
            m.wall.as_secs_f64() / whole_wall,
            m.user_s,
            m.sys_s,
            m.peak_mb,
        );
    }
}

fn main() {
    let shapes = ["large", "startup", "codemod"];
    let shape = std::env::args()
        .skip(1)
        .find(|a| shapes.contains(&a.as_str()))
        .unwrap_or_else(|| "large".into());
    match shape.as_str() {
        "startup" => startup(),
        "codemod" => codemod(),
        _ => large(),
    }
}
