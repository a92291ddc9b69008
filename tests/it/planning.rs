//! Planning: which files become tasks.

use std::os::unix::ffi::OsStrExt as _;

use crate::common::{SED_FOO_BAR, TestRepo, statuses};

fn plan_files(repo: &TestRepo, run_id: &str) -> Vec<Vec<String>> {
    let plan: serde_json::Value =
        serde_json::from_str(&repo.run_file(run_id, "plan.json")).unwrap();
    plan["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.to_string())
                .collect()
        })
        .collect()
}

#[test]
fn binary_files_symlinks_and_submodules_are_skipped() {
    let sub = TestRepo::with_files(&[("inner.txt", "foo\n")]);
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    std::fs::write(repo.path.join("blob.bin"), b"foo\x00\x01\x02").unwrap();
    std::os::unix::fs::symlink("a.txt", repo.path.join("link.txt")).unwrap();
    repo.git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        sub.path.to_str().unwrap(),
        "vendored",
    ]);
    repo.commit_all("more");
    let run = repo.swarm(&["refactor", "x", ":!.gitmodules", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert_eq!(
        plan_files(&repo, &run.run_id()),
        vec![vec!["\"a.txt\"".to_string()]]
    );
    assert_eq!(
        std::fs::read(repo.path.join("blob.bin")).unwrap(),
        b"foo\x00\x01\x02"
    );
    assert_eq!(
        repo.git(&["ls-tree", "main", "link.txt"]).split(' ').next(),
        Some("120000")
    );
    // Nothing the pathspecs name vanishes without a word: each is in the plan, the report
    // and the summary.
    let skipped = |text: &str| {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["skipped"]
            .as_array()
            .or(v["skipped_files"].as_array())
            .unwrap()
            .iter()
            .map(|s| {
                format!(
                    "{} {}",
                    s["file"].as_str().unwrap(),
                    s["reason"].as_str().unwrap()
                )
            })
            .collect::<Vec<_>>()
    };
    let want = ["blob.bin binary", "link.txt symlink", "vendored submodule"];
    assert_eq!(skipped(&repo.run_file(&run.run_id(), "plan.json")), want);
    assert_eq!(skipped(&repo.run_file(&run.run_id(), "report.json")), want);
    assert!(
        run.stderr
            .contains("not tasks: 1 binary file(s), 1 symlink(s), 1 submodule(s)"),
        "{}",
        run.stderr
    );
}

/// git matches a pathspec literally too: a file whose name holds glob characters is a task
/// when named (ansible has `completely{{ 1 % 0 }} safe template.j2`).
#[test]
fn file_names_with_glob_characters_are_matched_as_git_does() {
    let repo = TestRepo::with_files(&[
        ("p[1].txt", "foo\n"),
        ("q{a,b}.txt", "foo\n"),
        ("t/completely{{ 1 % 0 }} safe template.j2", "foo\n"),
        ("p1.txt", "foo\n"),
    ]);
    let run = repo.swarm(&[
        "refactor",
        "x",
        "p[1].txt",
        "q{a,b}.txt",
        "t/completely{{ 1 % 0 }} safe template.j2",
        "--exec",
        SED_FOO_BAR,
    ]);
    run.assert_code(0);
    for file in [
        "p[1].txt",
        "q{a,b}.txt",
        "t/completely{{ 1 % 0 }} safe template.j2",
    ] {
        assert_eq!(repo.read(file), "bar\n", "{file}");
    }
    // The glob matches too, as in git: p[1].txt also names p1.txt.
    assert_eq!(repo.read("p1.txt"), "bar\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

#[test]
fn spaced_and_non_utf8_names_are_handled() {
    let repo = TestRepo::with_files(&[("with space/a b.txt", "foo\n")]);
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(repo.path.join(latin1), "foo\n").unwrap();
    repo.commit_all("names");
    let run = repo.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert_eq!(repo.read("with space/a b.txt"), "bar\n");
    assert_eq!(std::fs::read(repo.path.join(latin1)).unwrap(), b"bar\n");
    assert_eq!(
        repo.lines(&["rev-list", "--merges", "HEAD~2..HEAD"]).len(),
        2
    );
    // The plan keeps the exact bytes of the name.
    let files = plan_files(&repo, &run.run_id());
    assert!(
        files
            .iter()
            .any(|f| f[0] == "[99,97,102,233,46,116,120,116]"),
        "{files:?}"
    );
    repo.assert_clean_after_run();
}

#[test]
fn batch_groups_files_into_tasks() {
    let files: Vec<(String, String)> = (0..5)
        .map(|i| (format!("f{i}.txt"), "foo\n".into()))
        .collect();
    let repo = TestRepo::with_files(&files);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let exec = r#"for f in $SWARM_FILES; do sed -i s/foo/bar/ "$f"; done"#;
    let run = repo.swarm(&["refactor", "x", ".", "--batch", "2", "--exec", exec]);
    run.assert_code(0);
    let merges = repo.lines(&[
        "rev-list",
        "--merges",
        "--reverse",
        &format!("{base}..main"),
    ]);
    assert_eq!(merges.len(), 3);
    let sizes: Vec<usize> = merges
        .iter()
        .map(|m| {
            repo.lines(&["diff", "--name-only", &format!("{m}^1"), m])
                .len()
        })
        .collect();
    let mut sorted = sizes.clone();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2, 2]);
    for i in 0..5 {
        assert_eq!(repo.read(&format!("f{i}.txt")), "bar\n");
    }
}

#[test]
fn pathspecs_globs_directories_exclusions_and_grep() {
    let repo = TestRepo::with_files(&[
        ("src/a.py", "foo\n"),
        ("src/deep/b.py", "foo\n"),
        ("src/deep/c.py", "no match\n"),
        ("src/d.rs", "foo\n"),
        ("vendor/e.py", "foo\n"),
        ("top.py", "foo\n"),
    ]);
    let run = repo.swarm(&[
        "refactor",
        "x",
        "*.py",
        ":!vendor",
        "--grep",
        "fo+",
        "--exec",
        SED_FOO_BAR,
    ]);
    run.assert_code(0);
    let report = repo.report(&run);
    let files: Vec<String> = statuses(&report).into_iter().map(|(f, _)| f).collect();
    assert_eq!(files, vec!["src/a.py", "src/deep/b.py", "top.py"]);
    let run = repo.swarm(&["refactor", "x", "src/**/*.rs", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    assert_eq!(repo.read("src/d.rs"), "bar\n");
    assert_eq!(repo.read("vendor/e.py"), "foo\n");
}

#[test]
fn pathspecs_are_relative_to_the_current_directory() {
    let repo = TestRepo::with_files(&[("sub/a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = crate::common::Run::from(
        repo.swarm_cmd()
            .current_dir(repo.path.join("sub"))
            .args(["refactor", "x", "*.txt", "--exec", SED_FOO_BAR])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert_eq!(repo.read("sub/a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "foo\n");
}

#[test]
fn task_ids_are_deterministic() {
    let repo = TestRepo::with_files(&[("a.txt", "x\n"), ("b.txt", "y\n")]);
    let one = repo.swarm(&["refactor", "x", ".", "--exec", "true"]);
    let two = repo.swarm(&["refactor", "x", ".", "--exec", "true"]);
    let ids = |run: &crate::common::Run| -> Vec<String> {
        repo.report(run)["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&one), ids(&two));
    assert_ne!(one.run_id(), two.run_id());
}

#[test]
fn settings_come_from_swarm_toml_below_flags_and_env() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "foo\n"),
        ("b.txt", "foo\n"),
        (
            "swarm.toml",
            "[run]\njobs = 1\nexec = \"sed -i s/foo/toml/ \\\"$SWARM_FILE\\\"\"\n",
        ),
    ]);
    let run = repo.swarm(&["refactor", "x", "*.txt"]);
    run.assert_code(0);
    assert!(run.stderr.contains("-j 1"), "{}", run.stderr);
    assert_eq!(repo.read("a.txt"), "toml\n");
    // Environment beats the file; a flag beats the environment.
    let run = crate::common::Run::from(
        repo.swarm_cmd()
            .env("SWARM_JOBS", "3")
            .env("SWARM_EXEC", "sed -i s/toml/env/ \"$SWARM_FILE\"")
            .args(["refactor", "x", "*.txt", "-j", "2"])
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert!(run.stderr.contains("-j 2"), "{}", run.stderr);
    assert_eq!(repo.read("b.txt"), "env\n");
}
