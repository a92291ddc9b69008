//! Merge drivers as git runs them: `.gitattributes`' `merge=NAME` with `merge.NAME.driver`
//! in the repository's or the user's git config, git's own `union` and `binary`, drivers that
//! fail, hang or write elsewhere, drivers a tracked file defines, and `--merge-with mergiraf`.

use std::path::Path;
use std::process::Command;

use crate::common::{TestRepo, count, hermetic, statuses};

/// A driver keeping every line of both sides once, sorted: what `CHANGES` needs whatever the
/// order tasks merge in.
const SORTED_UNION: &str = "sort -u %A %B -o %A";

/// Each task renames foo to bar in its file and appends a line naming it to `CHANGES`.
const APPEND: &str = r#"sed -i s/foo/bar/ "$SWARM_FILE" && echo "changed $SWARM_FILE" >> CHANGES"#;

/// `CHANGES` merged by driver `sorted` (or `attr`), four tasks appending to it.
fn repo_with(attr: &str) -> TestRepo {
    TestRepo::with_files(&[
        (".gitattributes", attr),
        ("CHANGES", "# changes\n"),
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        ("c.txt", "foo\n"),
        ("d.txt", "foo\n"),
    ])
}

fn append(repo: &TestRepo, policy: &str, jobs: &str) -> crate::common::Run {
    repo.swarm(&[
        "refactor",
        "x",
        "*.txt",
        "-j",
        jobs,
        "--scope",
        "any",
        "--on-conflict",
        policy,
        "--exec",
        APPEND,
    ])
}

fn attempts(report: &serde_json::Value) -> Vec<u64> {
    report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["attempts"].as_u64().unwrap())
        .collect()
}

/// `git merge --no-ff` by the git CLI of each task commit the run merged, in the run's
/// order, from the run's base, in a clone configured with `config`: the tree it gives.
fn git_cli_merge(repo: &TestRepo, base: &str, branch: &str, config: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir_in(repo.root()).unwrap();
    let clone = dir.path().join("oracle");
    let git = |cwd: &Path, args: &[&str]| {
        let mut cmd = Command::new("git");
        hermetic(&mut cmd, &repo.home);
        let out = cmd.current_dir(cwd).args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let tasks: Vec<String> = repo
        .lines(&[
            "log",
            "--first-parent",
            "--reverse",
            "--format=%P",
            &format!("{base}..{branch}"),
        ])
        .iter()
        .map(|parents| parents.split(' ').nth(1).unwrap().to_string())
        .collect();
    git(
        repo.root(),
        &[
            "clone",
            "-q",
            repo.path.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    for (key, value) in config {
        git(&clone, &["config", key, value]);
    }
    git(&clone, &["checkout", "-q", "-B", "oracle", base]);
    for task in &tasks {
        git(&clone, &["merge", "-q", "--no-ff", "--no-edit", task]);
    }
    git(&clone, &["rev-parse", "HEAD^{tree}"])
}

#[test]
fn a_driver_of_the_repositorys_config_merges_every_task_as_the_git_cli_does() {
    let repo = repo_with("CHANGES merge=sorted\n");
    repo.git(&["config", "merge.sorted.driver", SORTED_UNION]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // At -j 1 every task starts from the base: each merge after the first is a line-merge
    // conflict in CHANGES, which the driver resolves; under `fail` any conflict would stop.
    let run = append(&repo, "fail", "1");
    run.assert_code(0);
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 4, "{}", run.stderr);
    assert_eq!(attempts(&report), [1, 1, 1, 1], "no task ran twice");
    assert_eq!(report["totals"]["merged_by_driver"], 3);
    assert_eq!(report["totals"]["reruns_spared"], 3);
    let changes = repo.read("CHANGES");
    for f in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        assert!(changes.contains(&format!("changed {f}\n")), "{changes}");
        assert_eq!(repo.read(f), "bar\n");
    }
    // The git CLI, merging the same task commits in the same order with the same driver,
    // makes the same tree.
    let tree = git_cli_merge(
        &repo,
        &base,
        "main",
        &[("merge.sorted.driver", SORTED_UNION)],
    );
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), tree);
    // Each driver run is in the report, the events and a log of its own.
    let spared: Vec<_> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["rerun_spared"] == true)
        .collect();
    assert_eq!(spared.len(), 3);
    for t in spared {
        let run = &t["merge_drivers"][0];
        assert_eq!(run["path"], "CHANGES");
        assert_eq!(run["driver"], "sorted");
        assert_eq!(run["merged"], true);
        assert!(Path::new(run["log"].as_str().unwrap()).is_file());
    }
    let events = repo.events(&run);
    let driven = events
        .iter()
        .filter(|e| e["kind"] == "merge_driver")
        .count();
    assert_eq!(driven, 3);
    repo.assert_clean_after_run();
}

#[test]
fn union_and_binary_merge_as_git_does_from_the_committed_attributes_not_the_checkout() {
    let repo = repo_with("CHANGES merge=union\n");
    let base = repo.git(&["rev-parse", "HEAD"]);
    // The checkout's own .gitattributes (uncommitted) says otherwise: it is not the run's.
    repo.write(".gitattributes", "CHANGES -merge\n");
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.txt",
        "-j",
        "1",
        "--scope",
        "any",
        "--on-conflict",
        "fail",
        "--into",
        "result",
        "--exec",
        APPEND,
    ]);
    run.assert_code(0);
    let report = repo.report(&run);
    assert_eq!(attempts(&report), [1, 1, 1, 1], "{}", run.stderr);
    // git's union driver: no driver of swarm's ran.
    assert!(report["totals"]["merged_by_driver"].is_null());
    assert_eq!(
        repo.read(".gitattributes"),
        "CHANGES -merge\n",
        "left as it was"
    );
    let tree = git_cli_merge(&repo, &base, "result", &[]);
    assert_eq!(repo.git(&["rev-parse", "result^{tree}"]), tree);

    // `-merge` (binary): every merge after the first conflicts, as in git.
    let repo = repo_with("CHANGES -merge\n");
    let run = append(&repo, "skip", "1");
    run.assert_code(1);
    let st = statuses(&repo.report(&run));
    assert_eq!(
        (count(&st, "merged"), count(&st, "conflict")),
        (1, 3),
        "{st:?}"
    );
}

/// Runs the appending tasks at -j 1 under `--on-conflict skip`: one merges, and expects
/// `conflicts` to conflict. The report.
fn append_conflicting(repo: &TestRepo, conflicts: usize) -> serde_json::Value {
    let run = append(repo, "skip", "1");
    run.assert_code(1);
    let report = repo.report(&run);
    let st = statuses(&report);
    assert_eq!(
        (count(&st, "merged"), count(&st, "conflict")),
        (1, conflicts),
        "{st:?}"
    );
    report
}

/// Runs the four appending tasks with driver command `driver` at -j 1 under `--on-conflict
/// skip`: every merge after the first needs the driver.
fn with_driver(driver: &str, user_config: Option<&str>) -> (TestRepo, serde_json::Value) {
    let repo = repo_with("CHANGES merge=custom\n");
    repo.git(&["config", "merge.custom.driver", driver]);
    if let Some(toml) = user_config {
        repo.user_config(toml);
    }
    let report = append_conflicting(&repo, 3);
    (repo, report)
}

/// The conflicted tasks' driver errors.
fn driver_errors(report: &serde_json::Value) -> Vec<String> {
    report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] == "conflict")
        .map(|t| {
            assert_eq!(t["merge_drivers"][0]["merged"], false, "{t}");
            t["error"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn a_driver_that_fails_hangs_or_writes_elsewhere_is_a_conflict_for_the_policy() {
    let (_, report) = with_driver("exit 1", None);
    for error in driver_errors(&report) {
        assert!(error.contains("exited with status 1"), "{error}");
    }

    let started = std::time::Instant::now();
    let (_, report) = with_driver("sleep 60", Some("[merge]\ntimeout = 1\n"));
    assert!(started.elapsed() < std::time::Duration::from_secs(40));
    for error in driver_errors(&report) {
        assert!(error.contains("did not finish within 1 s"), "{error}");
    }

    // Writing outside its files: the jail refuses the write (the driver fails on it), and
    // a file left beside its result is refused by swarm.
    let repo = repo_with("x");
    let victim = repo.victim();
    let attack = format!(
        "echo pwned > {}/keep.txt && {SORTED_UNION}",
        victim.display()
    );
    let (_, report) = with_driver(&attack, None);
    assert_eq!(driver_errors(&report).len(), 3);
    assert_eq!(
        std::fs::read_to_string(victim.join("keep.txt")).unwrap(),
        "precious\n"
    );
    let (_, report) = with_driver(&format!("touch left-over && {SORTED_UNION}"), None);
    for error in driver_errors(&report) {
        assert!(
            error.contains("wrote files besides its result (left-over)"),
            "{error}"
        );
    }

    // Under the default policy a conflict is re-run on the merged result, as without drivers.
    let repo = repo_with("CHANGES merge=custom\n");
    repo.git(&["config", "merge.custom.driver", "exit 1"]);
    let run = append(&repo, "retry", "1");
    run.assert_code(0);
    assert_eq!(repo.report(&run)["totals"]["retried"], 3);
}

#[test]
fn a_driver_defined_by_a_tracked_file_is_never_run() {
    // `.gitconfig` is tracked: git never reads it unless the repository's config includes
    // it, and swarm does not run a driver from a file the repository's config includes.
    let evil = format!("[merge \"sorted\"]\n\tdriver = {SORTED_UNION}\n");
    for include in [false, true] {
        let repo = TestRepo::with_files(&[
            (".gitattributes", "CHANGES merge=sorted\n"),
            (".gitconfig", evil.as_str()),
            ("CHANGES", "# changes\n"),
            ("a.txt", "foo\n"),
            ("b.txt", "foo\n"),
        ]);
        if include {
            repo.git(&["config", "include.path", "../.gitconfig"]);
            // The git CLI would run it.
            assert_eq!(repo.git(&["config", "merge.sorted.driver"]), SORTED_UNION);
        }
        let report = append_conflicting(&repo, 1);
        let conflicted = report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["status"] == "conflict")
            .unwrap();
        match include {
            // Not a driver git knows: git's text merge, which conflicts.
            false => assert!(conflicted["merge_drivers"].is_null(), "{conflicted}"),
            true => {
                let error = conflicted["error"].as_str().unwrap();
                assert!(
                    error.contains("not run") && error.contains("includes"),
                    "{error}"
                );
            }
        }
    }
}

#[test]
fn shards_merge_with_the_drivers_of_the_merging_repository() {
    let repo = repo_with("CHANGES merge=sorted\n");
    repo.git(&["config", "merge.sorted.driver", SORTED_UNION]);
    let plan = repo.home.join("plan.json");
    let plan = plan.to_str().unwrap();
    repo.swarm(&[
        "plan",
        "x",
        "*.txt",
        "--scope",
        "any",
        "--on-conflict",
        "fail",
        "--exec",
        APPEND,
        "-o",
        plan,
    ])
    .assert_code(0);
    for shard in ["1/2", "2/2"] {
        repo.swarm(&["run", plan, "--shard", shard, "-y"])
            .assert_code(0);
    }
    let merged = repo.swarm(&["merge", plan]);
    merged.assert_code(0);
    let report = repo.report(&merged);
    assert_eq!(count(&statuses(&report), "merged"), 4, "{}", merged.stderr);
    assert_eq!(report["totals"]["reruns_spared"], 3);
    assert_eq!(repo.read("CHANGES").lines().count(), 5);
}

#[test]
fn merge_with_a_tool_that_is_not_installed_is_refused() {
    let repo = repo_with("");
    let head = repo.git(&["rev-parse", "HEAD"]);
    let mut cmd = repo.swarm_cmd();
    let run = crate::common::Run::from(
        cmd.env("PATH", "/usr/bin:/bin")
            .args([
                "refactor",
                "x",
                "*.txt",
                "--merge-with",
                "mergiraf",
                "--exec",
                APPEND,
            ])
            .output()
            .unwrap(),
    );
    run.assert_code(2);
    assert!(
        run.stderr.contains("mergiraf is not on PATH"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("cargo install --locked mergiraf"),
        "{}",
        run.stderr
    );
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
    assert!(repo.swarm_branches().is_empty());
}

/// Two tasks add different imports at one place of a Python file and of a Rust file: both
/// conflicts for git's line merge.
const ADD_IMPORTS: &str = r#"case "$SWARM_FILE" in
  a.txt) sed -i 's/^import sys$/import sys\nimport json/' app.py
         sed -i 's/^use std::fmt;$/use std::fmt;\nuse std::io;/' main.rs ;;
  b.txt) sed -i 's/^import sys$/import sys\nimport re/' app.py
         sed -i 's/^use std::fmt;$/use std::fmt;\nuse std::env;/' main.rs ;;
esac
echo done >> "$SWARM_FILE""#;

#[test]
#[ignore = "needs mergiraf from crates.io: SWARM_TEST_MERGIRAF=PATH (.ci/run installs it)"]
fn mergiraf_merges_imports_that_git_leaves_in_conflict() {
    let mergiraf = std::env::var_os("SWARM_TEST_MERGIRAF")
        .expect("SWARM_TEST_MERGIRAF names the mergiraf binary (.ci/run installs it)");
    let dir = Path::new(&mergiraf).parent().unwrap();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
    let repo = TestRepo::with_files(&[
        (
            "app.py",
            "import os\nimport sys\n\n\ndef main():\n    print(os.name, sys.argv)\n",
        ),
        (
            "main.rs",
            "use std::fmt;\n\nfn main() {\n    println!(\"{}\", 1);\n}\n",
        ),
        ("a.txt", ""),
        ("b.txt", ""),
    ]);
    let mut cmd = repo.swarm_cmd();
    let args = ["refactor", "imports", "*.txt", "-j", "1", "--scope", "any"];
    let run = crate::common::Run::from(
        cmd.env("PATH", &path)
            .args(args)
            .args([
                "--merge-with",
                "mergiraf",
                "--on-conflict",
                "fail",
                "--exec",
                ADD_IMPORTS,
            ])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    let report = repo.report(&run);
    assert_eq!(attempts(&report), [1, 1], "{}", run.stderr);
    assert_eq!(report["totals"]["reruns_spared"], 1);
    let app = repo.read("app.py");
    assert!(
        app.contains("import json\n") && app.contains("import re\n"),
        "{app}"
    );
    let main = repo.read("main.rs");
    assert!(
        main.contains("use std::io;") && main.contains("use std::env;"),
        "{main}"
    );
    assert!(!app.contains("<<<<<<<") && !main.contains("<<<<<<<"));
    // The same branches conflict for git's own merge.
    let drivers: Vec<_> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["merge_drivers"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(drivers.len(), 2, "{drivers:?}");
    assert!(
        drivers
            .iter()
            .all(|d| d["driver"] == "mergiraf" && d["merged"] == true)
    );
}
