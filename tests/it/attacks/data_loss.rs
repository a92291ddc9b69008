//! Run ids and task ids are never paths: arguments, plan files and shard records that try to
//! make swarm write or delete outside `.git/swarm/` are refused (exit 2) before anything is
//! touched.

use crate::common::{SED_FOO_BAR, TestRepo};

fn repo_with_a_run() -> (TestRepo, String) {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let run = repo.swarm(&["refactor", "x", ".", "--keep", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    (repo, run.run_id())
}

#[test]
fn clean_refuses_run_ids_that_are_paths() {
    let (repo, id) = repo_with_a_run();
    let victim = repo.victim();
    let before = repo.outside();
    let runs = repo.swarm_dir().join("runs");
    for arg in [
        "../..".to_string(),
        "..".to_string(),
        ".".to_string(),
        String::new(),
        "../../..".to_string(),
        victim.display().to_string(),
        format!("{id}/../.."),
        format!("../runs/{id}"),
    ] {
        let run = repo.swarm(&["clean", &arg]);
        run.assert_code(2);
        assert!(
            run.stderr.contains("YYYYMMDD-HHMMSS-xxxx"),
            "{arg:?}: {}",
            run.stderr
        );
        assert!(victim.join("keep.txt").exists(), "{arg:?}");
        assert!(runs.join(&id).join("report.json").exists(), "{arg:?}");
    }
    before.assert_same(&repo.outside());
    // The repository is whole and its run still there.
    assert_eq!(repo.git(&["rev-parse", "--abbrev-ref", "HEAD"]), "main");
    repo.swarm(&["status", &id]).assert_code(0);
    // A real id still cleans, and only that run.
    repo.swarm(&["clean", &id]).assert_code(0);
    assert!(!runs.join(&id).exists());
    assert!(victim.join("keep.txt").exists());
}

#[test]
fn other_commands_refuse_run_ids_that_are_paths() {
    let (repo, _id) = repo_with_a_run();
    let victim = repo.victim();
    let before = repo.outside();
    let abs = victim.display().to_string();
    for args in [
        vec!["status", "../.."],
        vec!["diff", "../../victim"],
        vec!["resume", "/"],
        vec!["resume", abs.as_str()],
        vec!["merge", "../x"],
        vec!["merge", ".."],
    ] {
        let run = repo.swarm(&args);
        run.assert_code(2);
        assert!(run.stderr.contains("run id"), "{args:?}: {}", run.stderr);
    }
    before.assert_same(&repo.outside());
}

/// `swarm plan -o` of a one-file refactor, as JSON to edit.
fn plan_json(repo: &TestRepo) -> serde_json::Value {
    std::fs::create_dir_all(repo.root().join("plans")).unwrap();
    let path = repo.root().join("plans/plan.json");
    repo.swarm(&[
        "plan",
        "x",
        "--exec",
        SED_FOO_BAR,
        "-o",
        path.to_str().unwrap(),
    ])
    .assert_code(0);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn write_plan(repo: &TestRepo, plan: &serde_json::Value) -> String {
    let path = repo.root().join("plans/evil-plan.json");
    std::fs::write(&path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn plan_files_with_path_ids_or_paths_outside_are_refused() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let victim = repo.victim();
    let plan = plan_json(&repo);
    let before = repo.outside();
    let abs = victim.display().to_string();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let edits: Vec<(&str, Edit)> = vec![
        (
            "run_id ../../..",
            Box::new(|p| p["run_id"] = "../../..".into()),
        ),
        ("run_id absolute", {
            let abs = abs.clone();
            Box::new(move |p| p["run_id"] = abs.clone().into())
        }),
        (
            "task id ../../victim",
            Box::new(|p| p["tasks"][0]["id"] = "../../../victim".into()),
        ),
        ("task id absolute", {
            let abs = abs.clone();
            Box::new(move |p| p["tasks"][0]["id"] = abs.clone().into())
        }),
        (
            "task id result",
            Box::new(|p| p["tasks"][0]["id"] = "result".into()),
        ),
        (
            "file ../",
            Box::new(|p| p["tasks"][0]["files"][0] = "../victim/keep.txt".into()),
        ),
        ("file absolute", {
            let abs = abs.clone();
            Box::new(move |p| p["tasks"][0]["files"][0] = format!("{abs}/keep.txt").into())
        }),
        (
            "file in .git",
            Box::new(|p| p["tasks"][0]["files"][0] = ".git/config".into()),
        ),
        (
            "duplicate ids",
            Box::new(|p| {
                let id = p["tasks"][0]["id"].clone();
                p["tasks"][1]["id"] = id;
            }),
        ),
        (
            "into swarm/",
            Box::new(|p| p["into"] = "swarm/x/result".into()),
        ),
    ];
    for (what, edit) in edits {
        let mut evil = plan.clone();
        edit(&mut evil);
        let path = write_plan(&repo, &evil);
        for args in [vec!["run", path.as_str()], vec!["merge", path.as_str()]] {
            let run = repo.swarm(&args);
            run.assert_code(2);
            assert!(run.stderr.contains("plan"), "{what}: {}", run.stderr);
        }
        assert!(victim.join("keep.txt").exists(), "{what}");
        assert!(
            repo.swarm_branches().is_empty(),
            "{what}: {:?}",
            repo.swarm_branches()
        );
    }
    before.assert_same(&repo.outside());
}

#[test]
fn a_forged_shard_record_cannot_name_branches_to_delete() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    repo.git(&["branch", "precious"]);
    let plan = plan_json(&repo);
    let path = write_plan(&repo, &plan);
    repo.swarm(&["run", &path]).assert_code(0);
    let run_id = plan["run_id"].as_str().unwrap();
    let record = format!("swarm/{run_id}/shard-1-of-1");
    // The attacker rewrites the record: each task claims the branches main and precious.
    let json = repo.git(&["show", &format!("{record}:report.json")]);
    let mut report: serde_json::Value = serde_json::from_str(&json).unwrap();
    for (t, branch) in report["tasks"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip(["main", "precious"])
    {
        t["branch"] = branch.into();
    }
    report["result_branch"] = "precious".into();
    let forged = repo.root().join("plans/forged.json");
    std::fs::write(&forged, serde_json::to_string(&report).unwrap()).unwrap();
    let blob = repo.git(&["hash-object", "-w", forged.to_str().unwrap()]);
    let mut mktree = repo.git_cmd();
    mktree
        .arg("mktree")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = mktree.spawn().unwrap();
    use std::io::Write as _;
    writeln!(
        child.stdin.take().unwrap(),
        "100644 blob {blob}\treport.json"
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let tree = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let commit = repo.git(&["commit-tree", &tree, "-m", "forged"]);
    repo.git(&["update-ref", &format!("refs/heads/{record}"), &commit]);

    let merge = repo.swarm(&["merge", &path]);
    merge.assert_code(0);
    assert_eq!(repo.read("a.txt"), "bar\n");
    // Both branches the record named are still there.
    assert!(!repo.git(&["rev-parse", "--verify", "precious"]).is_empty());
    assert_eq!(repo.git(&["rev-parse", "--abbrev-ref", "HEAD"]), "main");
}

#[test]
fn resume_refuses_a_report_that_does_not_list_the_plans_tasks() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    // b.txt fails while the marker exists, so the run has something left to resume.
    let marker = repo.root().join("fail-b");
    std::fs::write(&marker, "").unwrap();
    let worker = format!(
        "test -e '{}' && test \"$SWARM_FILE\" = b.txt && exit 1; {SED_FOO_BAR}",
        marker.display()
    );
    let run = repo.swarm(&["refactor", "x", ".", "--exec", &worker]);
    run.assert_code(1);
    let id = run.run_id();
    let path = repo.swarm_dir().join("runs").join(&id).join("report.json");
    let original: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let dropped = {
        let mut r = original.clone();
        r["tasks"].as_array_mut().unwrap().pop();
        r
    };
    let swapped = {
        let mut r = original.clone();
        r["tasks"].as_array_mut().unwrap().swap(0, 1);
        r
    };
    for (what, edited) in [("a task dropped", dropped), ("two tasks swapped", swapped)] {
        std::fs::write(&path, serde_json::to_string(&edited).unwrap()).unwrap();
        let main = repo.git(&["rev-parse", "main"]);
        let branches = repo.swarm_branches();
        for args in [
            vec!["resume", &id],
            vec!["resume", &id, "--failed"],
            vec!["merge", &id],
        ] {
            let resumed = repo.swarm(&args);
            resumed.assert_code(2);
            assert!(
                resumed.stderr.contains("disagree") && resumed.stderr.contains("hint:"),
                "{what}: {}",
                resumed.stderr
            );
        }
        assert_eq!(repo.git(&["rev-parse", "main"]), main, "{what}");
        assert_eq!(repo.swarm_branches(), branches, "{what}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            serde_json::to_string(&edited).unwrap(),
            "{what}: the report was rewritten"
        );
    }
    // Put back as swarm wrote it, the run resumes.
    std::fs::write(&path, serde_json::to_string(&original).unwrap()).unwrap();
    std::fs::remove_file(&marker).unwrap();
    repo.swarm(&["resume", &id, "--failed"]).assert_code(0);
    assert_eq!(repo.read("b.txt"), "bar\n");
}
