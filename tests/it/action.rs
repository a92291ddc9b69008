//! The composite action's scripts (action.yml runs ci/action/*.sh): the run script turns
//! inputs into swarm's arguments without letting one become shell code, and the install
//! script takes a release binary only when its SHA-256 matches, else builds with cargo.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Run, SED_FOO_BAR, TestRepo, hermetic};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("ci/action")
        .join(name)
}

#[test]
fn the_run_script_passes_inputs_as_arguments() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n"), ("c.txt", "foo\n")]);
    let outputs = repo.home.join("outputs");
    let mut cmd = Command::new("bash");
    hermetic(&mut cmd, &repo.home);
    let run = Run::from(
        cmd.arg(script("run.sh"))
            .current_dir(&repo.path)
            .env("SWARM_BIN", env!("CARGO_BIN_EXE_swarm"))
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_OUTPUT", &outputs)
            .env("GITHUB_STEP_SUMMARY", repo.home.join("summary"))
            // An instruction that would run a command if it were spliced into a script.
            .env("INPUT_INSTRUCTION", "foo to bar $(touch pwned)")
            .env("INPUT_PATHSPECS", "a.txt\nb.txt\n")
            .env("INPUT_EXEC", SED_FOO_BAR)
            .env("INPUT_ATOMIC", "true")
            .env("INPUT_ARGS", "--timeout 60 -j 2")
            .env("INPUT_REPORT_PAGE", repo.home.join("page/report.html"))
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    // The report page, for the action's next step to upload.
    let page = std::fs::read_to_string(repo.home.join("page/report.html")).unwrap();
    assert!(page.contains(&format!("<title>swarm run {}</title>", run.run_id())));
    let outputs = std::fs::read_to_string(outputs).unwrap();
    assert!(outputs.contains("merged=2\n"), "{outputs}");
    assert!(outputs.contains("into-updated=true\n"), "{outputs}");
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("c.txt"), "foo\n", "only the pathspecs given");
    assert!(!repo.path.join("pwned").exists() && !repo.home.join("pwned").exists());
    let report = repo.report(&run);
    assert_eq!(report["instruction"], "foo to bar $(touch pwned)");
}

/// `merge-with` becomes `--merge-with`: here, with no mergiraf installed, its refusal.
#[test]
fn the_run_script_passes_merge_with() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let mut cmd = Command::new("bash");
    hermetic(&mut cmd, &repo.home);
    let run = Run::from(
        cmd.arg(script("run.sh"))
            .current_dir(&repo.path)
            .env("PATH", "/usr/bin:/bin")
            .env("SWARM_BIN", env!("CARGO_BIN_EXE_swarm"))
            .env("INPUT_INSTRUCTION", "foo to bar")
            .env("INPUT_EXEC", SED_FOO_BAR)
            .env("INPUT_MERGE_WITH", "mergiraf")
            .output()
            .unwrap(),
    );
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("--merge-with mergiraf: mergiraf is not on PATH"),
        "{}",
        run.stderr
    );
}

/// The attack: inputs a workflow fills from a pull request or an issue (pathspecs, the
/// instruction, grep, into) that look like options. None becomes one: the sandbox stays on
/// (the worker cannot write into HOME) and the network off.
#[test]
fn the_run_script_lets_no_input_become_an_option() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    let victim = repo.home.join("escaped");
    let worker = format!("touch {} 2>/dev/null; {SED_FOO_BAR}", victim.display());
    let mut cmd = Command::new("bash");
    hermetic(&mut cmd, &repo.home);
    let run = Run::from(
        cmd.arg(script("run.sh"))
            .current_dir(&repo.path)
            .env("SWARM_BIN", env!("CARGO_BIN_EXE_swarm"))
            .env("INPUT_INSTRUCTION", "--sandbox=off")
            .env("INPUT_PATHSPECS", "--sandbox=off\n--network\na.txt\n")
            .env("INPUT_GREP", "--sandbox=off")
            .env("INPUT_EXEC", &worker)
            .env("INPUT_ALLOW_EMPTY", "true")
            .output()
            .unwrap(),
    );
    // --grep is a regular expression that no file matches: nothing to do, and it says so.
    run.assert_code(0);
    assert!(
        !victim.exists(),
        "the sandbox was turned off: {}",
        run.stderr
    );
    assert_eq!(repo.read("a.txt"), "foo\n");

    let mut cmd = Command::new("bash");
    hermetic(&mut cmd, &repo.home);
    let run = Run::from(
        cmd.arg(script("run.sh"))
            .current_dir(&repo.path)
            .env("SWARM_BIN", env!("CARGO_BIN_EXE_swarm"))
            .env("INPUT_INSTRUCTION", "--sandbox=off")
            .env("INPUT_PATHSPECS", "--sandbox=off\n--network\na.txt\n")
            .env("INPUT_EXEC", &worker)
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert!(
        !victim.exists(),
        "the sandbox was turned off: {}",
        run.stderr
    );
    assert_eq!(repo.read("a.txt"), "bar\n");
    assert_eq!(repo.read("b.txt"), "foo\n", "only the pathspecs given");
    assert_eq!(repo.report(&run)["instruction"], "--sandbox=off");
}

/// The release file name for this machine, as ci/action/install.sh computes it.
fn archive() -> String {
    format!("swarm-{}-unknown-linux-musl.tar.gz", std::env::consts::ARCH)
}

/// A release directory as the release workflow makes it, its "binary" a script that says its
/// version (the real one is megabytes; what is tested is how it is fetched and checked).
fn release(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("swarm"),
        "#!/bin/sh\necho 'swarm 9.9.9 (released)'\n",
    )
    .unwrap();
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "chmod +x swarm && tar -czf {0} swarm && sha256sum {0} > {0}.sha256 && rm swarm",
            archive()
        ))
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(ok.success());
}

fn install(home: &Path, env: &[(&str, String)]) -> Run {
    let mut cmd = Command::new("bash");
    hermetic(&mut cmd, home);
    cmd.arg(script("install.sh"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::from(cmd.output().unwrap())
}

#[test]
fn the_install_script_checks_the_release_and_falls_back_to_cargo() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (releases, bin, path_file) = (
        dir.path().join("release"),
        dir.path().join("bin"),
        dir.path().join("github_path"),
    );
    release(&releases);
    let base = [
        (
            "SWARM_RELEASE_URL",
            format!("file://{}", releases.display()),
        ),
        ("SWARM_INSTALL_DIR", bin.display().to_string()),
        ("GITHUB_PATH", path_file.display().to_string()),
    ];
    let run = install(&home, &base);
    run.assert_code(0);
    let version = Command::new(bin.join("swarm"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        "swarm 9.9.9 (released)\n"
    );
    assert_eq!(
        std::fs::read_to_string(&path_file).unwrap().trim(),
        bin.display().to_string()
    );

    // A binary that is not the one published is refused, and nothing is built instead.
    std::fs::remove_file(bin.join("swarm")).unwrap();
    let sums = releases.join(format!("{}.sha256", archive()));
    std::fs::write(&sums, format!("{}  {}\n", "0".repeat(64), archive())).unwrap();
    let run = install(&home, &base);
    run.assert_code(1);
    assert!(
        run.stderr.contains("does not match its published SHA-256"),
        "{}",
        run.stderr
    );
    assert!(!bin.join("swarm").exists());

    // No release to be had: cargo builds it (a stand-in cargo records how it was asked).
    let fake = dir.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    let asked = dir.path().join("cargo-args");
    std::fs::write(
        fake.join("cargo"),
        format!("#!/bin/sh\necho \"$@\" > '{}'\n", asked.display()),
    )
    .unwrap();
    Command::new("chmod")
        .args(["+x", fake.join("cargo").to_str().unwrap()])
        .status()
        .unwrap();
    let run = install(
        &home,
        &[
            ("SWARM_RELEASE_URL", "file:///nonexistent/release".into()),
            ("SWARM_INSTALL_DIR", bin.display().to_string()),
            ("SWARM_REPOSITORY", "owner/swarm".into()),
            ("SWARM_VERSION", "v9.9.9".into()),
            (
                "PATH",
                format!("{}:{}", fake.display(), std::env::var("PATH").unwrap()),
            ),
        ],
    );
    run.assert_code(0);
    assert!(run.stderr.contains("no prebuilt binary"), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(&asked).unwrap().trim(),
        format!(
            "install --locked --root {} --git https://github.com/owner/swarm --tag v9.9.9 swarm",
            dir.path().display()
        )
    );
}

/// The land step: the run's groups become pull requests on `$GITHUB_REPOSITORY` through
/// `$GITHUB_API_URL`, listed in the step summary; an input cannot become another option.
#[test]
fn the_land_script_opens_a_pull_request_per_group() {
    use crate::fake_forge::{FakeForge, Kind};
    let repo = TestRepo::with_files(&[("src/a.txt", "foo\n"), ("docs/b.txt", "foo\n")]);
    repo.bare_remote();
    let run = repo.swarm(&["refactor", "foo to bar", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    let forge = FakeForge::start(Kind::GitHub, "ghs_actiontoken");
    let summary = repo.home.join("summary");
    let land = |by: &str| {
        let mut cmd = Command::new("bash");
        hermetic(&mut cmd, &repo.home);
        Run::from(
            cmd.arg(script("land.sh"))
                .current_dir(&repo.path)
                .env("SWARM_BIN", env!("CARGO_BIN_EXE_swarm"))
                .env("GITHUB_ACTIONS", "true")
                .env("GITHUB_STEP_SUMMARY", &summary)
                .env("GITHUB_REPOSITORY", "acme/app")
                .env("GITHUB_API_URL", &forge.url)
                .env("GITHUB_TOKEN", forge.token())
                .env("SWARM_RUN_ID", run.run_id())
                .env("INPUT_LAND", by)
                .env("INPUT_MAX_OPEN", "1")
                .output()
                .unwrap(),
        )
    };
    let refused = land("--sandbox=off");
    refused.assert_code(2);
    assert!(forge.pulls().is_empty());

    land("dir:1").assert_code(0);
    let pulls = forge.pulls();
    assert_eq!(pulls.len(), 1, "--max-open 1");
    assert_eq!(
        pulls[0].head(),
        format!("swarm/{}/land/01-docs", run.run_id())
    );
    let summary = std::fs::read_to_string(summary).unwrap();
    assert!(summary.contains("## swarm land"), "{summary}");
    assert!(
        summary.contains("[#1](https://github.test/acme/app/pull/1)"),
        "{summary}"
    );
    assert!(summary.contains("1 waiting"), "{summary}");
}
