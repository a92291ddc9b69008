//! The test environment: a temporary repository, a temporary HOME, no global git config, a
//! fixed author, and no SWARM_*/OPENAI_* variables leaking in from the caller.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use std::os::unix::fs::PermissionsExt as _;

use serde_json::Value;
use tempfile::TempDir;

pub struct TestRepo {
    _dir: TempDir,
    /// The test's own folder on a tmpfs, where swarm keeps layers in memory.
    _runtime: Option<TempDir>,
    pub home: PathBuf,
    pub path: PathBuf,
}

pub fn hermetic(cmd: &mut Command, home: &Path) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("SWARM_")
            || key.starts_with("OPENAI_")
            // The agents' keys and endpoints (swarm's gateway reads them).
            || key.starts_with("ANTHROPIC_")
            || key.starts_with("CLAUDE_CODE_")
            || key.starts_with("CODEX_")
            || key.starts_with("GEMINI_")
            || key.starts_with("GOOGLE_")
            || key.starts_with("OPENROUTER_")
            || key.starts_with("GIT_")
            || key == "CI"
            // Forges' tokens and CI's files (`swarm land`, the step summary).
            || key.starts_with("GITHUB_")
            || key.starts_with("GH_")
            || key.starts_with("GITLAB_")
            || key.starts_with("CI_")
            // The CI's shard variables (`--shard auto`).
            || key.starts_with("CI_NODE_")
            || key.starts_with("BUILDKITE_PARALLEL_")
            || key == "JOB_COMPLETION_INDEX"
            || key == "RUST_LOG"
        {
            cmd.env_remove(&key);
        }
    }
    // swarm's sockets and workers' temporary files, inside the test's directory too.
    let tmp = home.with_file_name("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    cmd.env("HOME", home)
        .env("TMPDIR", &tmp)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test Author")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "Test Author")
        .env("GIT_COMMITTER_EMAIL", "author@example.com")
        .env("SWARM_KILL_GRACE_MS", "300")
        // On a pseudo-terminal swarm pages `diff` and `--review` (src/pager.rs): not in tests
        // that do not ask for it.
        .env("PAGER", "cat");
    // Layers in memory go to `$XDG_RUNTIME_DIR` first: a tmpfs folder of the test's own
    // (`runtime` in its directory names it), never the machine's /dev/shm.
    match std::fs::read_link(home.with_file_name("runtime")) {
        Ok(runtime) => cmd.env("XDG_RUNTIME_DIR", runtime),
        Err(_) => cmd
            .env_remove("XDG_RUNTIME_DIR")
            .env("SWARM_LAYERS_ON_DISK", "1"),
    };
    // The suite runs once per kind of worktree (`.ci/run`): `SWARM_TEST_WORKTREES=pool` makes
    // every run use full checkouts, where a test does not choose with `--worktrees`.
    if let Some(mode) = std::env::var_os("SWARM_TEST_WORKTREES") {
        cmd.env("SWARM_WORKTREES", mode);
    }
}

impl TestRepo {
    /// An empty repository on branch `main` (no commit yet).
    pub fn empty() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let path = dir.path().join("repo");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&path).unwrap();
        let runtime = tempfile::tempdir_in("/dev/shm").ok();
        if let Some(runtime) = &runtime {
            // Open to the unprivileged user of `swarm_unprivileged_cmd` too, which otherwise
            // could not make its folder here and would use the machine's /dev/shm.
            std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o777))
                .unwrap();
            std::os::unix::fs::symlink(runtime.path(), dir.path().join("runtime")).unwrap();
        }
        let repo = Self {
            _dir: dir,
            _runtime: runtime,
            home,
            path,
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    /// A repository whose first commit holds `files`.
    pub fn with_files(files: &[(impl AsRef<str>, impl AsRef<str>)]) -> Self {
        let repo = Self::empty();
        for (path, content) in files {
            repo.write(path.as_ref(), content.as_ref());
        }
        repo.commit_all("initial");
        repo
    }

    /// The test's temporary directory: the repository, HOME and victims live in it, and
    /// nothing a test does may touch anything outside it.
    pub fn root(&self) -> &Path {
        self._dir.path()
    }

    /// A directory outside the repository (in the test's temporary directory) holding
    /// `keep.txt`, for attacks to aim at.
    pub fn victim(&self) -> PathBuf {
        let dir = self.root().join("victim");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "precious\n").unwrap();
        dir
    }

    /// Everything under the test's directory, except what swarm itself may write in the git
    /// directory (its state, objects, its own branches and worktrees' records), the folder
    /// of every run's doors in the temporary directory (made once, kept) and the test's own
    /// `plans/`.
    pub fn outside(&self) -> Snapshot {
        use std::os::unix::fs::MetadataExt as _;
        let git = self.path.join(".git");
        let uid = std::fs::metadata(self.root()).unwrap().uid();
        let doors = self.root().join("tmp").join(format!("swarm-doors-{uid}"));
        Snapshot::of(
            self.root(),
            &[
                git.join("swarm"),
                git.join("objects"),
                git.join("logs"),
                git.join("refs/heads/swarm"),
                git.join("worktrees"),
                git.join("packed-refs"),
                git.join("ORIG_HEAD"),
                doors,
                self.root().join("plans"),
            ],
        )
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.path.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    /// Writes the user's config file (`$XDG_CONFIG_HOME/swarm/config.toml`).
    pub fn user_config(&self, toml: &str) {
        let dir = self.home.join(".config").join("swarm");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), toml).unwrap();
    }

    /// A directory outside the repository that worker processes may write to (listed in
    /// `[sandbox] writable` of the user's config), e.g. to count how often a check runs.
    pub fn writable_dir(&self) -> PathBuf {
        let dir = self.home.join("outside");
        std::fs::create_dir_all(&dir).unwrap();
        self.user_config(&format!("[sandbox]\nwritable = [\"{}\"]\n", dir.display()));
        dir
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path.join(rel)).unwrap()
    }

    pub fn commit_all(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// A bare remote next to the repository (`origin`), holding its `main`.
    pub fn bare_remote(&self) -> PathBuf {
        let remote = self.home.join("remote.git");
        let out = self
            .git_cmd()
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&remote)
            .output()
            .unwrap();
        assert!(out.status.success());
        self.git(&["remote", "add", "origin", remote.to_str().unwrap()]);
        self.git(&["push", "-q", "origin", "main"]);
        remote
    }

    pub fn git_cmd(&self) -> Command {
        let mut cmd = Command::new("git");
        hermetic(&mut cmd, &self.home);
        cmd.current_dir(&self.path);
        cmd
    }

    /// Runs git, asserts success, returns trimmed stdout.
    pub fn git(&self, args: &[&str]) -> String {
        let out = self.git_cmd().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn lines(&self, args: &[&str]) -> Vec<String> {
        self.git(args)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The tmpfs folder swarm finds as `$XDG_RUNTIME_DIR` (`None` without `/dev/shm`).
    pub fn runtime_dir(&self) -> Option<&Path> {
        self._runtime.as_ref().map(TempDir::path)
    }

    pub fn swarm_cmd(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_swarm"));
        hermetic(&mut cmd, &self.home);
        cmd.current_dir(&self.path);
        cmd
    }

    pub fn swarm(&self, args: &[&str]) -> Run {
        Run::from(self.swarm_cmd().args(args).output().unwrap())
    }

    /// `swarm` as an unprivileged user: in a user namespace where this process's user (root,
    /// where the tests run as root) is uid 1000, with no capability, so permissions hold for
    /// swarm as they do for a user's own runs (root's would override a worker's `chmod 000`).
    pub fn swarm_unprivileged_cmd(&self) -> Command {
        let mut cmd = Command::new("unshare");
        hermetic(&mut cmd, &self.home);
        cmd.current_dir(&self.path)
            .args(["--user", "--map-user=1000", "--map-group=1000", "--"])
            .arg(env!("CARGO_BIN_EXE_swarm"));
        cmd
    }

    /// Branches under swarm/.
    pub fn swarm_branches(&self) -> Vec<String> {
        self.lines(&["branch", "--list", "swarm/*", "--format=%(refname:short)"])
    }

    pub fn worktrees(&self) -> Vec<String> {
        self.lines(&["worktree", "list", "--porcelain"])
            .into_iter()
            .filter(|l| l.starts_with("worktree "))
            .collect()
    }

    pub fn swarm_dir(&self) -> PathBuf {
        self.path.join(".git").join("swarm")
    }

    /// A file of a run's directory, e.g. `report.json` or `tasks/<id>/TASK.md`.
    pub fn run_file(&self, run_id: &str, rel: &str) -> String {
        let path = self.swarm_dir().join("runs").join(run_id).join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    pub fn report(&self, run: &Run) -> Value {
        serde_json::from_str(&self.run_file(&run.run_id(), "report.json")).unwrap()
    }

    /// The run's events.jsonl, parsed.
    pub fn events(&self, run: &Run) -> Vec<Value> {
        self.run_file(&run.run_id(), "events.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Nothing of swarm is left: no worktree but the checkout, no swarm/ branch.
    pub fn assert_clean_after_run(&self) {
        assert_eq!(
            self.worktrees().len(),
            1,
            "worktrees left: {:?}",
            self.worktrees()
        );
        assert!(
            self.swarm_branches().is_empty(),
            "{:?}",
            self.swarm_branches()
        );
        let wt_dir = self.swarm_dir().join("worktrees");
        if wt_dir.exists() {
            assert_eq!(std::fs::read_dir(&wt_dir).unwrap().count(), 0);
        }
    }

    /// Tree id the git CLI gets by running `edit` (a shell command, with SWARM_FILE set) on
    /// each of `files` in a fresh clone at `base`.
    pub fn oracle_tree(&self, base: &str, files: &[&str], edit: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let clone = dir.path().join("oracle");
        let out = self
            .git_cmd()
            .args(["clone", "-q", "--no-checkout"])
            .arg(&self.path)
            .arg(&clone)
            .output()
            .unwrap();
        assert!(out.status.success());
        let git = |args: &[&str]| {
            let mut cmd = Command::new("git");
            hermetic(&mut cmd, &self.home);
            let out = cmd.current_dir(&clone).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        git(&["checkout", "-q", "--detach", base]);
        for file in files {
            let status = Command::new("sh")
                .arg("-c")
                .arg(edit)
                .current_dir(&clone)
                .env("SWARM_FILE", file)
                .status()
                .unwrap();
            assert!(status.success());
        }
        git(&["add", "-A"]);
        git(&["write-tree"])
    }
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Self {
        Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code {} (wanted {code})\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// The run id announced on stderr ("swarm: run <ID>: ...").
    pub fn run_id(&self) -> String {
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix("swarm: run "))
            .and_then(|rest| rest.split([':', ' ']).next())
            .unwrap_or_else(|| panic!("no run id in:\n{}", self.stderr))
            .to_string()
    }
}

/// A TCP listener on 127.0.0.1 that counts the connections it accepts (to tell whether a
/// worker reached the network).
pub fn listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stream.is_ok() {
                count.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (port, accepted)
}

/// Runs `cmd` to the end, reading the peak memory (VmHWM) of the process it starts: its own
/// address space, reset at exec (unlike wait4's rusage, which inherits the test's peak).
pub fn run_measuring_peak(cmd: &mut Command) -> (Run, u64) {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(line) = text.lines().find(|l| l.starts_with("VmHWM:"))
        {
            peak_kb = peak_kb.max(line.split_whitespace().nth(1).unwrap().parse().unwrap());
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(peak_kb > 1000, "no memory reading");
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    (run, peak_kb)
}

pub const SED_FOO_BAR: &str = r#"sed -i 's/\bfoo\b/bar/g' "$SWARM_FILE""#;

/// Status of each task in a report, by its first file.
pub fn statuses(report: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["files"][0].as_str().unwrap_or("?").to_string(),
                t["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The report entry of the task whose first file is `file`.
pub fn task_of<'a>(report: &'a Value, file: &str) -> &'a Value {
    report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["files"][0] == file)
        .unwrap_or_else(|| panic!("no task for {file}"))
}

/// How many tasks of `statuses(report)` have `status`.
pub fn count(statuses: &[(String, String)], status: &str) -> usize {
    statuses.iter().filter(|(_, s)| s == status).count()
}

/// What is in a directory tree: each path with its type and content (links not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot(BTreeMap<PathBuf, String>);

impl Snapshot {
    pub fn of(dir: &Path, skip: &[PathBuf]) -> Self {
        let mut entries = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(read) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in read.flatten() {
                let path = entry.path();
                if skip.iter().any(|s| path.starts_with(s)) {
                    continue;
                }
                // Gone meanwhile (a run's trash being emptied in the background).
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                let what = if meta.is_symlink() {
                    let target = std::fs::read_link(&path).unwrap_or_default();
                    format!("link -> {}", target.display())
                } else if meta.is_dir() {
                    stack.push(path.clone());
                    "dir".to_string()
                } else if meta.is_file() {
                    let bytes = std::fs::read(&path).unwrap_or_default();
                    format!(
                        "file {:o} {}",
                        meta.permissions().mode() & 0o777,
                        String::from_utf8_lossy(&bytes)
                    )
                } else {
                    "special".to_string()
                };
                entries.insert(path, what);
            }
        }
        Self(entries)
    }

    /// The paths whose content (or link target) holds `needle`.
    pub fn holding(&self, needle: &str) -> Vec<&PathBuf> {
        self.0
            .iter()
            .filter(|(_, what)| what.contains(needle))
            .map(|(path, _)| path)
            .collect()
    }

    /// The contents of every file, for searching.
    pub fn texts(&self) -> Vec<String> {
        self.0.values().cloned().collect()
    }

    /// Leaves out `paths` (and what is under them).
    pub fn forget(&mut self, paths: &[PathBuf]) {
        self.0
            .retain(|p, _| !paths.iter().any(|f| p.starts_with(f)));
    }

    /// Panics with the differences if `other` is not the same, but for `changed` (and what is
    /// below those paths).
    pub fn assert_same_except(&self, other: &Snapshot, changed: &[PathBuf]) {
        let (mut a, mut b) = (self.clone(), other.clone());
        a.forget(changed);
        b.forget(changed);
        a.assert_same(&b);
    }

    /// Panics with the differences if `other` is not the same.
    pub fn assert_same(&self, other: &Snapshot) {
        let mut diff = Vec::new();
        for (path, what) in &self.0 {
            match other.0.get(path) {
                Some(now) if now == what => {}
                Some(now) => diff.push(format!("changed {}: {what:?} -> {now:?}", path.display())),
                None => diff.push(format!("removed {}", path.display())),
            }
        }
        for path in other.0.keys().filter(|p| !self.0.contains_key(*p)) {
            diff.push(format!("added {}", path.display()));
        }
        assert!(
            diff.is_empty(),
            "outside the worktrees:\n{}",
            diff.join("\n")
        );
    }
}

/// Runs swarm with `args` on a pseudo-terminal (util-linux `script`), typing `input`.
pub fn swarm_on_a_terminal(repo: &TestRepo, args: &[&str], input: &str) -> Run {
    use std::io::Write as _;
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let command: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_swarm"))
        .chain(args.iter().copied())
        .map(quote)
        .collect();
    let mut cmd = std::process::Command::new("script");
    hermetic(&mut cmd, &repo.home);
    cmd.args(["-q", "-e", "-c", &command.join(" "), "/dev/null"])
        .current_dir(&repo.path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .expect("util-linux `script` runs swarm on a pseudo-terminal for this test");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    Run::from(child.wait_with_output().unwrap())
}

/// Waits until `done` holds, polling every 50 ms; fails naming `what` after `limit`.
pub fn wait_until(limit: std::time::Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
