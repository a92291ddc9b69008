//! Bad input: a message naming the fix, exit 2, and nothing changed.

use std::path::Path;

use crate::common::{Run, SED_FOO_BAR, TestRepo};

/// A snapshot of everything swarm could have changed.
fn snapshot(repo: &TestRepo) -> (String, String, bool) {
    let refs = repo.git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
    let status = repo.git(&["status", "--porcelain", "--untracked-files=all"]);
    (refs, status, repo.swarm_dir().exists())
}

fn assert_refused(run: &Run, message: &str, hint: &str) {
    run.assert_code(2);
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("error: ") && l.contains(message)),
        "wanted 'error: {message}' in:\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint: ") && run.stderr.contains(hint),
        "wanted a hint with '{hint}' in:\n{}",
        run.stderr
    );
}

fn refuses(repo: &TestRepo, args: &[&str], message: &str, hint: &str) {
    let before = snapshot(repo);
    let run = repo.swarm(args);
    assert_refused(&run, message, hint);
    assert_eq!(snapshot(repo), before, "something changed");
    assert!(!repo.swarm_dir().exists());
}

fn repo() -> TestRepo {
    TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")])
}

#[test]
fn not_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"));
    crate::common::hermetic(&mut cmd, &home);
    cmd.env(
        "GIT_CEILING_DIRECTORIES",
        dir.path().parent().unwrap_or(Path::new("/")),
    );
    let run = Run::from(
        cmd.current_dir(dir.path())
            .args(["refactor", "x", ".", "--exec", "true"])
            .output()
            .unwrap(),
    );
    assert_refused(&run, "not a git repository", "git init");
}

#[test]
fn bare_repository() {
    let repo = repo();
    let bare = repo.home.join("bare.git");
    repo.git(&["clone", "-q", "--bare", ".", bare.to_str().unwrap()]);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"));
    crate::common::hermetic(&mut cmd, &repo.home);
    let run = Run::from(
        cmd.current_dir(&bare)
            .args(["refactor", "x", ".", "--exec", "true"])
            .output()
            .unwrap(),
    );
    assert_refused(&run, "is a bare repository", "git worktree add");
    assert!(!bare.join("swarm").exists());
}

#[test]
fn unborn_head() {
    let repo = TestRepo::empty();
    repo.write("a.txt", "foo\n");
    let run = repo.swarm(&["refactor", "x", ".", "--exec", "true"]);
    assert_refused(&run, "the repository has no commits yet", "commit");
    assert!(!repo.swarm_dir().exists());
}

#[test]
fn detached_head_without_into() {
    let repo = repo();
    repo.git(&["checkout", "-q", "--detach"]);
    refuses(
        &repo,
        &["refactor", "x", ".", "--exec", "true"],
        "HEAD is detached",
        "--into",
    );
}

#[test]
fn uncommitted_changes_to_task_files() {
    let repo = repo();
    repo.write("a.txt", "my precious local edit\n");
    refuses(
        &repo,
        &["refactor", "x", ".", "--exec", SED_FOO_BAR],
        "the working tree has uncommitted changes in a.txt",
        "--into <new-branch>",
    );
    assert_eq!(repo.read("a.txt"), "my precious local edit\n");
    // Staged changes count too.
    repo.git(&["add", "a.txt"]);
    refuses(
        &repo,
        &["refactor", "x", ".", "--exec", SED_FOO_BAR],
        "the working tree has uncommitted changes in a.txt",
        "stash",
    );
}

/// Each kind of change `git status` shows on a task file stops the run before anything is
/// written: swarm checks the task files alone (not a status walk of the checkout), against
/// HEAD and the index, by stat data and then content.
#[test]
fn every_kind_of_uncommitted_change_to_a_task_file_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let a_mode_alone = |repo: &TestRepo| {
        let a = repo.path.join("a.txt");
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let same_size_and_mtime = |repo: &TestRepo| {
        let a = repo.path.join("a.txt");
        let mtime = std::fs::metadata(&a).unwrap().modified().unwrap();
        std::fs::write(&a, "fox\n").unwrap();
        let file = std::fs::File::options().write(true).open(&a).unwrap();
        file.set_modified(mtime).unwrap();
    };
    type Change<'a> = (&'a str, &'a dyn Fn(&TestRepo));
    let changes: [Change; 5] = [
        ("the mode alone", &a_mode_alone),
        ("the same size and mtime", &same_size_and_mtime),
        ("deleted", &|repo| {
            std::fs::remove_file(repo.path.join("a.txt")).unwrap()
        }),
        ("deleted from the index", &|repo| {
            repo.git(&["rm", "-q", "--cached", "a.txt"]);
        }),
        ("staged, then put back in the file", &|repo| {
            repo.write("a.txt", "staged\n");
            repo.git(&["add", "a.txt"]);
            repo.write("a.txt", "foo\n");
        }),
    ];
    for (what, change) in changes {
        let repo = repo();
        // An index written after the files, so that their stat data is trusted.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        repo.git(&["update-index", "--refresh", "--really-refresh"]);
        change(&repo);
        assert!(
            repo.git(&["status", "--porcelain"]).contains("a.txt"),
            "{what}: git sees no change"
        );
        let before = snapshot(&repo);
        let run = repo.swarm(&["refactor", "x", "a.txt", "--exec", SED_FOO_BAR]);
        run.assert_code(2);
        assert!(
            run.stderr.contains("uncommitted changes in a.txt"),
            "{what}: {}",
            run.stderr
        );
        assert_eq!(snapshot(&repo), before, "{what}: something changed");
    }
}

#[test]
fn unknown_base() {
    refuses(
        &repo(),
        &[
            "refactor",
            "x",
            ".",
            "--base",
            "no-such-rev",
            "--exec",
            "true",
        ],
        "unknown revision 'no-such-rev' for --base",
        "git log",
    );
}

#[test]
fn invalid_regex() {
    refuses(
        &repo(),
        &["refactor", "x", ".", "--grep", "foo(", "--exec", "true"],
        "invalid --grep regular expression",
        "escape",
    );
}

#[test]
fn invalid_pathspec() {
    refuses(
        &repo(),
        &["refactor", "x", "src/[a", "--exec", "true"],
        "invalid pathspec 'src/[a'",
        "quote",
    );
}

#[test]
fn zero_jobs() {
    refuses(
        &repo(),
        &["refactor", "x", ".", "-j", "0", "--exec", "true"],
        "--jobs must be at least 1",
        "-j 1",
    );
}

#[test]
fn into_a_branch_checked_out_in_another_worktree() {
    let repo = repo();
    repo.git(&["branch", "other"]);
    let wt = repo.home.join("other-wt");
    repo.git(&["worktree", "add", "-q", wt.to_str().unwrap(), "other"]);
    refuses(
        &repo,
        &["refactor", "x", ".", "--into", "other", "--exec", "true"],
        "branch 'other' is checked out in another worktree",
        "run swarm in that worktree",
    );
}

#[test]
fn no_worker_command() {
    refuses(
        &repo(),
        &["refactor", "x", "."],
        "no worker: neither --exec nor --model",
        "--exec",
    );
}

#[test]
fn invalid_settings_file() {
    let repo = repo();
    repo.write("swarm.toml", "[run]\njbos = 3\n");
    repo.commit_all("settings");
    refuses(
        &repo,
        &["refactor", "x", ".", "--exec", "true"],
        "invalid settings in",
        "[run]",
    );
}

#[test]
fn bad_flag_values_are_usage_errors() {
    let repo = repo();
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "--on-conflict",
        "maybe",
        "--exec",
        "true",
    ]);
    run.assert_code(2);
    assert!(run.stderr.contains("retry, skip, fail"), "{}", run.stderr);
}

/// A selection that matches nothing is a mistake (a typo in CI must not pass), unless the
/// script says it may be empty.
#[test]
fn no_files_matched_is_an_error_unless_allowed() {
    let repo = repo();
    refuses(
        &repo,
        &["refactor", "x", "*.rs", "--exec", "true"],
        "no files matched *.rs",
        "--allow-empty",
    );
    refuses(
        &repo,
        &["refactor", "x", "--grep", "nowhere", "--exec", "true"],
        "no files matched with --grep 'nowhere'",
        "--allow-empty",
    );
    refuses(
        &repo,
        &["plan", "-o", "p.json", "x", "*.rs", "--exec", "true"],
        "no files matched *.rs",
        "--allow-empty",
    );
    let before = snapshot(&repo);
    let run = repo.swarm(&["refactor", "x", "*.rs", "--allow-empty", "--exec", "true"]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("no files matched *.rs; nothing to do"),
        "{}",
        run.stderr
    );
    assert_eq!(snapshot(&repo), before);
    assert!(!repo.swarm_dir().exists());
}

#[test]
fn repair_without_verify_or_model() {
    let repo = repo();
    refuses(
        &repo,
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            SED_FOO_BAR,
            "--repair",
        ],
        "--repair needs --verify",
        "--verify CMD",
    );
    refuses(
        &repo,
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            SED_FOO_BAR,
            "--repair",
            "--verify",
            "true",
        ],
        "--repair needs a model",
        "--model NAME",
    );
    refuses(
        &repo,
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            SED_FOO_BAR,
            "--on-conflict",
            "repair",
        ],
        "--on-conflict repair needs a model",
        "--model NAME",
    );
}

#[test]
fn review_off_a_terminal() {
    refuses(
        &repo(),
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            SED_FOO_BAR,
            "--review",
        ],
        "--review asks about each task on a terminal",
        "--dry-run",
    );
}

#[test]
fn a_domain_to_allow_that_is_not_one() {
    refuses(
        &repo(),
        &[
            "refactor",
            "x",
            ".",
            "--allow-domain",
            "http://x.com/",
            "--exec",
            "true",
        ],
        "`http://x.com/` is not a domain to allow",
        "--allow-domain api.anthropic.com",
    );
}

#[test]
fn per_process_values_and_workers_it_cannot_serve() {
    let repo = repo();
    refuses(
        &repo,
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            "true",
            "--per-process",
            "0",
        ],
        "--per-process must be at least 1",
        "--per-process 1",
    );
    // The built-in worker has no process to share; --repair repairs one task at a time.
    refuses(
        &repo,
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--model",
            "m",
            "--per-process",
            "3",
        ],
        "--per-process 3: the built-in worker runs one conversation per task",
        "--per-process 1, or auto",
    );
    refuses(
        &repo,
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            "true",
            "--verify",
            "true",
            "--repair",
            "--model",
            "m",
            "--per-process",
            "2",
        ],
        "--per-process 2: --repair",
        "--per-process 1, or auto",
    );
    let run = repo.swarm(&[
        "refactor",
        "x",
        ".",
        "--exec",
        "true",
        "--per-process",
        "many",
    ]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("neither a number of tasks nor auto"),
        "{}",
        run.stderr
    );
    assert!(!repo.swarm_dir().exists());

    repo.write("swarm.toml", "[run]\nper_process = \"lots\"\n");
    repo.commit_all("settings");
    refuses(
        &repo,
        &["refactor", "x", ".", "--exec", "true"],
        "invalid settings in",
        "per_process",
    );
}

/// `swarm plan` does not offer what only a run does (it used to accept and ignore them).
#[test]
fn plan_refuses_the_options_of_running() {
    let repo = repo();
    for flag in ["-y", "--keep", "--dry-run", "--review", "--events=e.jsonl"] {
        let run = repo.swarm(&["plan", "-o", "p.json", "x", "--exec", "true", flag]);
        run.assert_code(2);
        assert!(
            run.stderr.contains("unexpected argument"),
            "{flag}: {}",
            run.stderr
        );
        assert!(!repo.path.join("p.json").exists());
    }
}

/// A wrong type in swarm.toml names the file, the line and the key.
#[test]
fn a_wrong_type_in_the_settings_file_names_the_line_and_key() {
    let repo = repo();
    repo.write("swarm.toml", "[run]\nscope = \"task\"\njobs = \"eight\"\n");
    repo.commit_all("settings");
    refuses(
        &repo,
        &["refactor", "x", ".", "--exec", "true"],
        "swarm.toml: line 3, `jobs = \"eight\"`: invalid type: string \"eight\"",
        "[run]",
    );
}

/// A spending cap of `nan` or `inf` parses as a number, and compares false with any spend: a
/// cap of nothing. It is refused wherever a cap is given (the flag, its variable, `resume`,
/// the MCP server's own), as are 0 and less, and a token budget of 0; nothing starts.
#[test]
fn a_budget_of_nothing_or_of_no_number_is_refused() {
    let repo = repo();
    let before = snapshot(&repo);
    let says = "a number of US dollars above 0";
    for value in ["nan", "inf", "-1", "0", "five"] {
        let flag = format!("--max-cost={value}");
        let run = repo.swarm(&["refactor", "x", ".", "-y", "--exec", "true", &flag]);
        run.assert_code(2);
        assert!(run.stderr.contains(says), "{value}: {}", run.stderr);
    }
    let mut cmd = repo.swarm_cmd();
    cmd.args(["refactor", "x", ".", "-y", "--exec", "true"])
        .env("SWARM_MAX_COST", "NaN");
    let run = Run::from(cmd.output().unwrap());
    run.assert_code(2);
    assert!(run.stderr.contains(says), "{}", run.stderr);
    assert_eq!(snapshot(&repo), before, "something changed");
    for args in [
        &["mcp", "--max-cost", "nan"][..],
        &["resume", "20261202-112407-5377", "--max-cost", "inf"],
    ] {
        let run = repo.swarm(args);
        run.assert_code(2);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    // A token budget of nothing, on the command line and in the settings file.
    for args in [
        &[
            "refactor",
            "x",
            ".",
            "-y",
            "--exec",
            "true",
            "--max-tokens",
            "0",
        ][..],
        &["mcp", "--max-tokens", "0"],
    ] {
        let run = repo.swarm(args);
        run.assert_code(2);
        let said = "a number of tokens, 1 or more";
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
    }
    assert_eq!(snapshot(&repo), before, "something changed");
    repo.write("swarm.toml", "[run]\nmax_tokens = 0\n");
    repo.commit_all("settings");
    refuses(
        &repo,
        &["refactor", "x", ".", "-y", "--exec", "true"],
        "--max-tokens must be at least 1",
        "pass --max-tokens N",
    );
}
