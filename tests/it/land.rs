//! `swarm land`: a finished run as one branch and one request per group, pushed to a bare
//! remote and opened on a local fake of GitHub's and GitLab's APIs; every branch checked with
//! the git CLI.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{Run, SED_FOO_BAR, TestRepo};
use crate::fake_forge::{FakeForge, Kind};
use crate::hostile_upstream::{Hostile, HostileUpstream};

const CODEOWNERS: &str = "\
# who reviews what
*                    @acme/core
/src/api/            @acme/api
/src/ui/             @ann
/src/ui/legacy/
*.md                 docs@example.com
";

/// The groups CODEOWNERS gives, worked out by hand (last matching rule wins): name, owners,
/// files.
const EXPECTED: [(&str, &[&str], &[&str]); 5] = [
    (
        "01-docs-example.com",
        &["docs@example.com"],
        &["README.md", "src/api/notes.md"],
    ),
    ("02-acme-core", &["@acme/core"], &["lib.rs"]),
    (
        "03-acme-api",
        &["@acme/api"],
        &["src/api/a.rs", "src/api/b.rs"],
    ),
    ("04-ann", &["@ann"], &["src/ui/c.rs"]),
    ("05-unowned", &[], &["src/ui/legacy/old.rs"]),
];

const TOKEN: &str = "ghp_landtesttoken0123456789";

struct Landed {
    repo: TestRepo,
    remote: PathBuf,
    run: String,
    report: Value,
}

/// A repository with CODEOWNERS and a bare remote, after a `sed` run over its files.
fn refactored() -> Landed {
    let mut files: Vec<(String, String)> = EXPECTED
        .iter()
        .flat_map(|(_, _, files)| files.iter())
        .map(|f| (f.to_string(), format!("foo in {f}\n")))
        .collect();
    files.push((".github/CODEOWNERS".into(), CODEOWNERS.into()));
    files.push(("untouched.txt".into(), "nothing here\n".into()));
    let repo = TestRepo::with_files(&files);
    let remote = repo.bare_remote();
    let run = repo.swarm(&["refactor", "rename foo to bar", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    let report = repo.report(&run);
    Landed {
        run: run.run_id(),
        repo,
        remote,
        report,
    }
}

impl Landed {
    fn land(&self, args: &[&str]) -> Run {
        let mut cmd = self.repo.swarm_cmd();
        cmd.arg("land").arg(&self.run).args(args);
        Run::from(cmd.output().unwrap())
    }

    fn land_on(&self, forge: &FakeForge, args: &[&str]) -> Run {
        Run::from(self.land_on_cmd(forge, args).output().unwrap())
    }

    /// `swarm land RUN --push origin --forge …` on `forge`, with its token.
    fn land_on_cmd(&self, forge: &FakeForge, args: &[&str]) -> std::process::Command {
        let mut cmd = self.repo.swarm_cmd();
        let (var, kind, repo) = match forge.kind() {
            Kind::GitHub => ("GITHUB_TOKEN", "github", "acme/app"),
            Kind::GitLab => ("GITLAB_TOKEN", "gitlab", "group/sub/app"),
        };
        cmd.env(var, forge.token())
            .args(["land", &self.run, "--push", "origin", "--forge", kind])
            .args(["--forge-repo", repo, "--forge-api", &forge.url])
            .args(args);
        cmd
    }

    fn remote_git(&self, args: &[&str]) -> String {
        let mut cmd = self.repo.git_cmd();
        cmd.arg("--git-dir").arg(&self.remote).args(args);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn branch(&self, group: &str) -> String {
        format!("swarm/{}/land/{group}", self.run)
    }

    fn start(&self) -> String {
        self.report["into_start"].as_str().unwrap().to_string()
    }

    fn result(&self) -> String {
        self.report["result"].as_str().unwrap().to_string()
    }

    /// The task commit the run merged for `file`.
    fn task_commit(&self, file: &str) -> String {
        crate::common::task_of(&self.report, file)["commit"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn codeowners_groups_become_branches_equal_to_the_result_on_their_files() {
    let l = refactored();
    let dry = l.land(&["--dry-run"]);
    dry.assert_code(0);
    for (name, owners, files) in EXPECTED {
        assert!(dry.stdout.contains(name), "{name}:\n{}", dry.stdout);
        for f in files {
            assert!(
                dry.stdout.contains(&format!("  {f}\n")),
                "{f}:\n{}",
                dry.stdout
            );
        }
        if !owners.is_empty() {
            assert!(
                dry.stdout
                    .contains(&format!("owners: {}", owners.join(" "))),
                "{}",
                dry.stdout
            );
        }
    }
    assert!(
        l.repo
            .lines(&["branch", "--list", "swarm/*/land/*"])
            .is_empty(),
        "a dry run builds no branch"
    );
    assert!(
        !Path::new(
            &l.repo
                .swarm_dir()
                .join("runs")
                .join(&l.run)
                .join("land.json")
        )
        .exists()
    );

    let landed = l.land(&["--push", "origin"]);
    landed.assert_code(0);
    let (start, result) = (l.start(), l.result());
    for (name, _, files) in EXPECTED {
        let branch = l.branch(name);
        // The remote has what swarm built.
        let tip = l.remote_git(&["rev-parse", &format!("refs/heads/{branch}")]);
        assert_eq!(tip, l.repo.git(&["rev-parse", &branch]).trim());
        // Only its files changed, each as in the run's result.
        let changed = lines(&l.repo.git(&["diff", "--name-only", &start, &branch]));
        assert_eq!(changed, files.to_vec(), "{name}");
        let against_result = l.repo.git(&["diff", "--name-only", &result, &branch, "--"]);
        let mut others: Vec<&str> = EXPECTED
            .iter()
            .filter(|(n, _, _)| *n != name)
            .flat_map(|(_, _, f)| f.iter().copied())
            .collect();
        others.sort_unstable();
        assert_eq!(
            lines(&against_result),
            others,
            "{name}: equal to the result on its files"
        );
        // One --no-ff merge commit per task, whose second parent is the task's own commit.
        let merges = lines(&l.repo.git(&[
            "rev-list",
            "--first-parent",
            "--merges",
            &format!("{start}..{branch}"),
        ]));
        assert_eq!(merges.len(), files.len(), "{name}");
        let all =
            lines(
                &l.repo
                    .git(&["rev-list", "--first-parent", &format!("{start}..{branch}")]),
            );
        assert_eq!(
            all, merges,
            "{name}: nothing but merges on the first-parent chain"
        );
        let second_parents: Vec<String> = merges
            .iter()
            .map(|m| {
                l.repo
                    .git(&["rev-parse", &format!("{m}^2")])
                    .trim()
                    .to_string()
            })
            .collect();
        for f in files {
            assert!(
                second_parents.contains(&l.task_commit(f)),
                "{name}: {f}'s task commit"
            );
        }
    }
    // Running it again pushes nothing new: the same commits are built.
    let before = l.remote_git(&["for-each-ref", "--format=%(objectname) %(refname)"]);
    l.land(&["--push", "origin"]).assert_code(0);
    assert_eq!(
        before,
        l.remote_git(&["for-each-ref", "--format=%(objectname) %(refname)"])
    );
    let status = l.repo.swarm(&["status", &l.run]);
    assert!(
        status
            .stdout
            .contains("0 landed, 0 open, 0 closed, 5 pushed"),
        "{}",
        status.stdout
    );
}

#[test]
fn github_pull_requests_open_at_most_max_open_and_the_next_when_one_lands() {
    let l = refactored();
    let forge = FakeForge::start(Kind::GitHub, TOKEN);
    let first = l.land_on(&forge, &["--max-open", "2"]);
    first.assert_code(0);
    let pulls = forge.pulls();
    assert_eq!(pulls.len(), 2, "{}", first.stderr);
    let heads: Vec<&str> = pulls.iter().map(|p| p.head()).collect();
    assert_eq!(heads, [l.branch(EXPECTED[0].0), l.branch(EXPECTED[1].0)]);

    // The request's fields.
    let opened = &pulls[1].opened_with;
    assert_eq!(opened["base"], "main", "the remote's default branch");
    assert_eq!(opened["title"], "rename foo to bar (@acme/core)");
    let body = opened["body"].as_str().unwrap();
    for needle in [
        "rename foo to bar",
        "Part 2 of 5",
        &l.run,
        "lib.rs",
        crate::common::task_of(&l.report, "lib.rs")["id"]
            .as_str()
            .unwrap(),
        "Owners (CODEOWNERS): @acme/core",
        "not checked on its own",
    ] {
        assert!(body.contains(needle), "{needle} in:\n{body}");
    }
    assert_eq!(
        pulls[1].reviewers["team_reviewers"],
        serde_json::json!(["core"])
    );

    // Again, with nothing merged: nothing opened.
    l.land_on(&forge, &["--max-open", "2"]).assert_code(0);
    assert_eq!(forge.pulls().len(), 2);

    // One lands: the next group opens, asking @ann as a reviewer further on.
    forge.set_state(1, "merged");
    forge.set_state(2, "closed");
    let third = l.land_on(&forge, &["--max-open", "2"]);
    third.assert_code(0);
    let pulls = forge.pulls();
    assert_eq!(pulls.len(), 4, "{}", third.stderr);
    assert_eq!(pulls[3].head(), l.branch("04-ann"));
    assert_eq!(pulls[3].reviewers["reviewers"], serde_json::json!(["ann"]));

    let status = l.repo.swarm(&["status", &l.run]);
    assert!(
        status
            .stdout
            .contains("1 landed, 2 open, 1 closed, 0 pushed, 1 waiting, 0 held"),
        "{}",
        status.stdout
    );
    assert!(
        status
            .stdout
            .contains("https://github.test/acme/app/pull/4"),
        "{}",
        status.stdout
    );

    // The token went only in the Authorization header: no file swarm wrote has it.
    for call in forge.calls() {
        assert!(!call.body.contains(TOKEN), "{call:?}");
    }
    assert_no_file_holds(l.repo.root(), TOKEN);
}

#[test]
fn a_request_whose_answer_was_lost_is_found_not_opened_again() {
    let l = refactored();
    let forge = FakeForge::start(Kind::GitHub, TOKEN);
    forge.lose_next_answer();
    let cut = l.land_on(&forge, &[]);
    cut.assert_code(1);
    assert!(cut.stderr.contains("held back"), "{}", cut.stderr);
    assert_eq!(
        forge.pulls().len(),
        1,
        "the forge opened the first, and its answer was lost"
    );

    let again = l.land_on(&forge, &[]);
    again.assert_code(0);
    let heads: Vec<String> = forge.pulls().iter().map(|p| p.head().to_string()).collect();
    let expected: Vec<String> = EXPECTED.iter().map(|(n, _, _)| l.branch(n)).collect();
    assert_eq!(heads, expected, "each group once");
    let status = l.repo.swarm(&["status", &l.run]);
    assert!(
        status
            .stdout
            .contains("#1 https://github.test/acme/app/pull/1"),
        "{}",
        status.stdout
    );
}

/// `kill -9` after the forge opened a request and before swarm heard of it: the next land
/// finds that request, opens the others once each, and the lock the killed process held is
/// free.
#[test]
fn a_land_killed_while_opening_duplicates_nothing_when_run_again() {
    let l = refactored();
    let forge = FakeForge::start(Kind::GitHub, TOKEN);
    forge.stall_next_answer();
    let mut child = l
        .land_on_cmd(&forge, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while forge.pulls().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no request opened");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    l.land_on(&forge, &[]).assert_code(0);
    let heads: Vec<String> = forge.pulls().iter().map(|p| p.head().to_string()).collect();
    let expected: Vec<String> = EXPECTED.iter().map(|(n, _, _)| l.branch(n)).collect();
    assert_eq!(heads, expected, "each group once");
}

#[test]
fn gitlab_merge_requests_name_user_reviewers_by_id() {
    let l = refactored();
    let forge = FakeForge::start(Kind::GitLab, "glpat-landtest");
    l.land_on(&forge, &["--by", "dir:2", "--target", "main"])
        .assert_code(0);
    let pulls = forge.pulls();
    let heads: Vec<&str> = pulls.iter().map(|p| p.head()).collect();
    assert_eq!(
        heads,
        [
            l.branch("01-root"),
            l.branch("02-src-api"),
            l.branch("03-src-ui")
        ],
    );
    assert_eq!(pulls[2].opened_with["target_branch"], "main");
    assert_eq!(pulls[2].opened_with["title"], "rename foo to bar (src/ui/)");
    // `--by dir:2` has no owners; with CODEOWNERS, @ann is user 41.
    assert_eq!(pulls[2].opened_with["reviewer_ids"], serde_json::json!([]));
    let calls = forge.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.path.starts_with("/projects/group%2Fsub%2Fapp/")),
        "{calls:?}"
    );
    assert_eq!(calls.iter().filter(|c| c.method == "POST").count(), 3);
    assert!(
        calls
            .iter()
            .all(|c| c.header("private-token") == Some("glpat-landtest"))
    );

    let other = refactored();
    let forge = FakeForge::start(Kind::GitLab, "glpat-landtest");
    other.land_on(&forge, &[]).assert_code(0);
    let ann = forge
        .pulls()
        .into_iter()
        .find(|p| p.head().ends_with("04-ann"))
        .unwrap();
    assert_eq!(ann.opened_with["reviewer_ids"], serde_json::json!([41]));
}

#[test]
fn a_branch_someone_else_put_on_the_remote_is_left_alone() {
    let l = refactored();
    let theirs = l.repo.git(&["rev-parse", "HEAD~1"]).trim().to_string();
    let taken = l.branch("02-acme-core");
    l.repo.git(&[
        "push",
        "-q",
        "origin",
        &format!("{theirs}:refs/heads/{taken}"),
    ]);
    let run = l.land(&["--push", "origin"]);
    run.assert_code(1);
    assert!(run.stderr.contains("someone changed it"), "{}", run.stderr);
    assert_eq!(
        l.remote_git(&["rev-parse", &format!("refs/heads/{taken}")]),
        theirs
    );
    l.remote_git(&[
        "rev-parse",
        &format!("refs/heads/{}", l.branch("03-acme-api")),
    ]);
}

#[test]
fn verify_merged_holds_back_the_group_whose_branch_fails_it() {
    let l = refactored();
    let run = l.land(&[
        "--push",
        "origin",
        "--verify-merged",
        "! grep -q bar lib.rs",
    ]);
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("02-acme-core: `! grep -q bar lib.rs` failed"),
        "{}",
        run.stderr
    );
    let pushed = l.remote_git(&[
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads/swarm",
    ]);
    assert!(!pushed.contains("02-acme-core"), "{pushed}");
    assert_eq!(lines(&pushed).len(), 4, "{pushed}");
    // The checks' worktrees and their branch are gone.
    assert_eq!(
        l.repo
            .worktrees()
            .iter()
            .filter(|l| l.starts_with("worktree "))
            .count(),
        1
    );
    let left = l.repo.swarm_branches();
    assert!(left.iter().all(|b| b.contains("/land/")), "{left:?}");
}

#[test]
fn bad_land_input_is_refused_with_exit_2_and_changes_nothing() {
    let l = refactored();
    let cases: [(&[&str], &str); 8] = [
        (&["--forge", "github"], "--push"),
        (&["--max-open", "2"], "--forge"),
        (&["--by", "owners"], "codeowners, dir:N, files:N"),
        (
            &[
                "--push",
                "origin",
                "--forge",
                "github",
                "--forge-repo",
                "acme/app",
                "--forge-api",
                "http://api.example.com",
            ],
            "https",
        ),
        (
            &[
                "--push",
                "origin",
                "--forge",
                "github",
                "--forge-repo",
                "acme/app",
            ],
            "GITHUB_TOKEN or GH_TOKEN",
        ),
        (&["--push", "origin", "--forge"], "--forge github"),
        // Names that look local and are not: the token would go to whoever owns them.
        (
            &[
                "--push",
                "origin",
                "--forge",
                "gitlab",
                "--forge-repo",
                "group/app",
                "--forge-api",
                "http://127.0.0.1.evil.example/api/v4",
            ],
            "https",
        ),
        (
            &[
                "--push",
                "origin",
                "--forge",
                "gitlab",
                "--forge-repo",
                "group/app",
                "--forge-api",
                "http://localhost:1@192.0.2.2/api/v4",
            ],
            "user name or password",
        ),
    ];
    for (args, says) in cases {
        let run = l.land(args);
        run.assert_code(2);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    assert!(
        l.repo
            .lines(&["branch", "--list", "swarm/*/land/*"])
            .is_empty()
    );
    assert_eq!(
        l.remote_git(&["for-each-ref", "--format=%(refname)"]),
        "refs/heads/main"
    );

    // No CODEOWNERS: the hint names the other ways to split.
    let plain = TestRepo::with_files(&[("a.txt", "foo\n")]);
    let run = plain.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR]);
    run.assert_code(0);
    let land = plain.swarm(&["land", &run.run_id()]);
    land.assert_code(2);
    assert!(land.stderr.contains("--by dir:N"), "{}", land.stderr);
}

#[test]
fn a_forge_token_follows_no_redirect() {
    let l = refactored();
    // The API (on this machine, so plain http is allowed) redirects to another host.
    let elsewhere = HostileUpstream::start("127.0.0.2", Hostile::Echo);
    let api = HostileUpstream::start(
        "127.0.0.1",
        Hostile::Redirect(format!("{}/api/v4/stolen", elsewhere.url)),
    );
    let token = "glpat-redirect-test-token-0042";
    let mut cmd = l.repo.swarm_cmd();
    cmd.env("GITLAB_TOKEN", token)
        .args(["land", &l.run, "--push", "origin", "--forge", "gitlab"])
        .args(["--forge-repo", "group/app", "--forge-api"])
        .arg(format!("{}/api/v4", api.url));
    let run = Run::from(cmd.output().unwrap());
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "307 redirecting to {}/api/v4/stolen",
            elsewhere.url
        )),
        "{}",
        run.stderr
    );
    let asked = api.received();
    assert!(!asked.is_empty());
    assert_eq!(asked[0].header("private-token"), Some(token));
    assert!(
        elsewhere.received().is_empty(),
        "the token followed the redirect"
    );
    assert!(!run.stderr.contains(token));
}

/// No file under `root` (the repository, its git directory, HOME, the remote) holds `secret`.
fn assert_no_file_holds(root: &Path, secret: &str) {
    let holding = crate::common::Snapshot::of(root, &[]);
    assert!(
        holding.holding(secret).is_empty(),
        "{:?}",
        holding.holding(secret)
    );
}
