//! The run's base checkout lends your own checkout's files where git's index vouches for
//! them (a hard link each), never what you changed, and never into the base checkout kept
//! between runs (`--reuse-base`), which later runs write in place. The worker reports what
//! its view shows into its task file: each file's link count (2 when lent) and the text of
//! the file you changed; git and the files' inodes are the oracle.

use std::os::unix::fs::MetadataExt as _;

use crate::common::TestRepo;

/// The worker: the link count of `b.txt` and `dir/c.txt` as its view shows them, the text
/// of `mine.txt`, and the files whose stat data git's index (of a view, made with the base's
/// index) does not hold, before anything refreshes it: none.
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

fn refactor(repo: &TestRepo, reuse: bool) -> crate::common::Run {
    let mut args = vec![
        "refactor",
        "look",
        "seen.txt",
        "--worktrees",
        "overlay",
        "-y",
    ];
    if reuse {
        args.push("--reuse-base");
    }
    args.extend(["--exec", LOOK]);
    repo.swarm(&args)
}

fn inode(repo: &TestRepo, rel: &str) -> (u64, u64) {
    let meta = std::fs::metadata(repo.path.join(rel)).unwrap();
    (meta.ino(), meta.nlink())
}

#[test]
fn the_base_lends_your_unchanged_files_and_checks_out_the_one_you_changed() {
    let repo = repo();
    let before = [inode(&repo, "b.txt"), inode(&repo, "dir/c.txt")];
    refactor(&repo, false).assert_code(0);
    // b.txt and dir/c.txt were lent (two links: yours and the base's); the worker saw the
    // committed mine.txt, not your edit.
    assert_eq!(repo.read("seen.txt"), "2\n2\ncommitted\n[]\n");
    assert_eq!(
        repo.git(&["show", "HEAD:seen.txt"]),
        "2\n2\ncommitted\n[]",
        "the merged result"
    );
    // Your files: the same inodes, the same text, your edit still there and uncommitted.
    let inodes = |repo: &TestRepo| [inode(repo, "b.txt").0, inode(repo, "dir/c.txt").0];
    assert_eq!(inodes(&repo), [before[0].0, before[1].0]);
    assert_eq!(repo.read("b.txt"), "b\n");
    assert_eq!(repo.read("dir/c.txt"), "c\n");
    assert_eq!(repo.read("mine.txt"), "yours, not committed\n");
    assert_eq!(repo.git(&["status", "--porcelain"]), "M mine.txt");
}

#[test]
fn the_kept_base_lends_nothing() {
    let repo = repo();
    refactor(&repo, true).assert_code(0);
    assert_eq!(repo.read("seen.txt"), "1\n1\ncommitted\n[]\n");
    // Nothing of yours is linked into the kept checkout, which stays after the run.
    assert_eq!(inode(&repo, "b.txt").1, 1);
    assert_eq!(inode(&repo, "dir/c.txt").1, 1);
    assert_eq!(repo.read("mine.txt"), "yours, not committed\n");
}

#[test]
fn a_lent_file_you_write_in_place_during_the_run_fails_its_task() {
    let repo = repo();
    let out = repo.writable_dir();
    // The worker says it started, waits for the test's word, then changes a.txt.
    let exec = format!(
        r#"touch {out}/started; while [ ! -e {out}/go ]; do sleep 0.05; done; sed -i s/a/A/ a.txt"#,
        out = out.display()
    );
    let child = repo
        .swarm_cmd()
        .args(["refactor", "edit", "a.txt", "--worktrees", "overlay", "-y"])
        .args(["--exec", &exec])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !out.join("started").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // An editor writing a.txt in place (as vim does to a file with two links).
    let head = repo.git(&["rev-parse", "HEAD"]);
    std::fs::write(repo.path.join("a.txt"), "a, edited\n").unwrap();
    std::fs::write(out.join("go"), "").unwrap();
    let run = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_ne!(run.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("a.txt changed in your checkout while the task ran"),
        "{stderr}"
    );
    // Nothing merged, and your edit is yours.
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
    assert_eq!(repo.read("a.txt"), "a, edited\n");
}

#[test]
fn a_second_run_lends_again_what_the_first_moved_the_change_time_of() {
    let repo = repo();
    refactor(&repo, false).assert_code(0);
    // The first run's link (and its removal) moved b.txt's change time; git's index has
    // the old one.
    let (ino, _) = inode(&repo, "b.txt");
    let run = repo.swarm(&[
        "refactor",
        "again",
        "seen.txt",
        "--worktrees",
        "overlay",
        "-y",
        "--exec",
        "stat -c %i b.txt > seen.txt",
    ]);
    run.assert_code(0);
    assert_eq!(repo.read("seen.txt"), format!("{ino}\n"), "{}", run.stderr);
}
