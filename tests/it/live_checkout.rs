//! Nothing of your checkout enters a task: the run's base checkout (and every full checkout
//! of the pool) is written from the base commit and shares no file with your checkout, so
//! what you edit during a run, in place as editors save, is seen by no worker, committed by
//! no task and merged nowhere. git and the files' inodes are the oracle.

use std::os::unix::fs::MetadataExt as _;
use std::time::{Duration, Instant};

use crate::common::TestRepo;

/// The worker: the link count of `b.txt` and `dir/c.txt` as its worktree shows them, the
/// text of `mine.txt`, and the files whose stat data its git index does not hold (none).
const LOOK: &str = r#"d=$(git diff-files --name-only | tr '\n' ' ')
{ stat -c %h b.txt dir/c.txt; cat mine.txt; echo "[$d]"; } > seen.txt"#;

fn repo() -> TestRepo {
    let repo = TestRepo::with_files(&[
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("dir/c.txt", "c\n"),
        ("mine.txt", "committed\n"),
        ("seen.txt", "\n"),
    ]);
    // Your work in progress, uncommitted.
    repo.write("mine.txt", "yours, not committed\n");
    repo
}

fn links(repo: &TestRepo, rel: &str) -> u64 {
    std::fs::metadata(repo.path.join(rel)).unwrap().nlink()
}

#[test]
fn no_worktree_shares_a_file_with_your_checkout_or_sees_your_edits() {
    for (worktrees, reuse) in [("overlay", false), ("overlay", true), ("pool", false)] {
        let repo = repo();
        let mut args = vec![
            "refactor",
            "look",
            "seen.txt",
            "--worktrees",
            worktrees,
            "-y",
        ];
        if reuse {
            args.push("--reuse-base");
        }
        args.extend(["--exec", LOOK]);
        repo.swarm(&args).assert_code(0);
        // One link each (the worktree's own file), the committed mine.txt, a clean index.
        let saw = "1\n1\ncommitted\n[]";
        assert_eq!(
            repo.git(&["show", "HEAD:seen.txt"]),
            saw,
            "{worktrees} {reuse}"
        );
        assert_eq!(links(&repo, "b.txt"), 1, "{worktrees} {reuse}");
        assert_eq!(links(&repo, "dir/c.txt"), 1, "{worktrees} {reuse}");
        assert_eq!(repo.read("mine.txt"), "yours, not committed\n");
        assert_eq!(repo.git(&["status", "--porcelain"]), "M mine.txt");
    }
}

/// The case of issue 49: every task's worker reads `src/hdr.h` (not a task file) as its
/// context and appends it to its own file; while they wait, you write `src/hdr.h` in place.
#[test]
fn a_file_you_write_in_place_during_the_run_reaches_no_task() {
    for worktrees in ["overlay", "pool"] {
        let files: Vec<(String, String)> = (0..4)
            .map(|i| (format!("src/m{i}.c"), format!("int m{i};\n")))
            .chain([("src/hdr.h".to_string(), "int shared;\n".to_string())])
            .collect();
        let repo = TestRepo::with_files(&files);
        let out = repo.writable_dir();
        let exec = format!(
            r#"touch {out}/started-$SWARM_TASK_ID; while [ ! -e {out}/go ]; do sleep 0.05; done; cat src/hdr.h >> "$SWARM_FILE""#,
            out = out.display()
        );
        let child = repo
            .swarm_cmd()
            .args(["refactor", "inline the header", "src/*.c", "-y", "-j", "2"])
            .args(["--worktrees", worktrees, "--exec", &exec])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let started = || {
            std::fs::read_dir(&out)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("started-"))
                .count()
        };
        while started() < 2 {
            assert!(
                Instant::now() < deadline,
                "{worktrees}: the workers never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // An editor saving src/hdr.h in place (VS Code always does; vim for a file with
        // two links), while two workers run and two wait.
        let mut hdr = std::fs::OpenOptions::new()
            .append(true)
            .open(repo.path.join("src/hdr.h"))
            .unwrap();
        std::io::Write::write_all(&mut hdr, b"USERSECRET\n").unwrap();
        drop(hdr);
        std::fs::write(out.join("go"), "").unwrap();
        let run = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(0), "{worktrees}: {stderr}");
        // Every task merged the header as the base commit has it; no commit of any branch
        // holds your line, and your edit is yours, uncommitted.
        for i in 0..4 {
            assert_eq!(
                repo.git(&["show", &format!("HEAD:src/m{i}.c")]),
                format!("int m{i};\nint shared;"),
                "{worktrees}"
            );
        }
        let commits = repo.lines(&["rev-list", "--all"]);
        let mut grep = vec!["grep", "-l", "USERSECRET"];
        grep.extend(commits.iter().map(String::as_str));
        let found = repo.git_cmd().args(&grep).output().unwrap();
        assert!(
            found.stdout.is_empty(),
            "{worktrees}: {}",
            String::from_utf8_lossy(&found.stdout)
        );
        assert_eq!(repo.read("src/hdr.h"), "int shared;\nUSERSECRET\n");
        assert_eq!(repo.git(&["status", "--porcelain"]), "M src/hdr.h");
    }
}
