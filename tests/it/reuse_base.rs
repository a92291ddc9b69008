//! The base checkout kept between runs (`--reuse-base`): the next run brings it to its own
//! base, puts right whatever changed in it meanwhile, shares it with no other run, and
//! `swarm clean --all` removes it. What a worker saw is what its task file says: each run's
//! one task writes the listing of its view (type and path of every file) and `a.txt` into
//! `seen.txt`, which is merged; git is the oracle for the kept checkout itself.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::common::TestRepo;

/// The worker: what its view holds, into its task file.
const LOOK: &str = r#"{ find . -path ./.git -prune -o ! -type d -printf '%y %p\n' | sort; cat a.txt; } > seen.txt"#;

fn repo() -> TestRepo {
    TestRepo::with_files(&[
        ("a.txt", "one\n"),
        ("b.txt", "b\n"),
        ("dir/c.txt", "c\n"),
        ("seen.txt", "\n"),
        (".gitignore", "*.log\n"),
    ])
}

/// What [`LOOK`] writes in a view of [`repo`]'s first commit.
const FIRST_SEEN: &str = "f ./.gitignore\nf ./a.txt\nf ./b.txt\nf ./dir/c.txt\nf ./seen.txt\none\n";

/// `swarm [-v] refactor look seen.txt` in an overlay worktree running `exec`, with
/// `--reuse-base` or not.
fn refactor_look(repo: &TestRepo, exec: &str, verbose: bool, reuse: bool) -> crate::common::Run {
    let mut args = vec![
        "refactor",
        "look",
        "seen.txt",
        "--worktrees",
        "overlay",
        "-y",
    ];
    if verbose {
        args.insert(0, "-v");
    }
    if reuse {
        args.push("--reuse-base");
    }
    args.extend(["--exec", exec]);
    repo.swarm(&args)
}

/// A run with `--reuse-base` that succeeds and keeps the base it found (not made anew).
fn look(repo: &TestRepo, exec: &str) -> crate::common::Run {
    let run = refactor_look(repo, exec, false, true);
    run.assert_code(0);
    assert!(!run.stderr.contains("made anew"), "{}", run.stderr);
    run
}

fn kept(repo: &TestRepo) -> PathBuf {
    repo.swarm_dir().join("base")
}

/// git's word on the kept checkout: at `commit`, nothing modified, untracked or ignored.
fn assert_kept_at(repo: &TestRepo, commit: &str) {
    let dir = kept(repo);
    let git = |args: &[&str]| {
        let mut all = vec!["-C", dir.to_str().unwrap()];
        all.extend_from_slice(args);
        repo.git(&all)
    };
    assert_eq!(git(&["rev-parse", "HEAD"]), commit);
    assert_eq!(git(&["status", "--porcelain", "--ignored"]), "");
    let ready = std::fs::read_to_string(repo.swarm_dir().join("base.ready")).unwrap();
    assert_eq!(ready.trim(), commit);
}

#[test]
fn a_kept_base_follows_the_next_runs_base_and_clean_all_removes_it() {
    let repo = repo();
    let first = repo.git(&["rev-parse", "HEAD"]);
    look(&repo, LOOK);
    assert_eq!(repo.read("seen.txt"), FIRST_SEEN);
    assert_kept_at(&repo, &first);
    let listed = repo.git(&["worktree", "list", "--porcelain"]);
    assert!(listed.contains("/swarm/base\n"), "{listed}");
    assert!(listed.contains("locked kept by swarm"), "{listed}");
    assert_eq!(repo.swarm_branches(), Vec::<String>::new());

    // The user moves on: an edit, a deletion, a folder that becomes a file, a new file.
    repo.write("a.txt", "two\n");
    std::fs::remove_file(repo.path.join("b.txt")).unwrap();
    std::fs::remove_dir_all(repo.path.join("dir")).unwrap();
    repo.write("dir", "now a file\n");
    repo.write("e/f.txt", "f\n");
    let second = repo.commit_all("moved on");
    look(&repo, LOOK);
    assert_eq!(
        repo.read("seen.txt"),
        "f ./.gitignore\nf ./a.txt\nf ./dir\nf ./e/f.txt\nf ./seen.txt\ntwo\n"
    );
    assert_kept_at(&repo, &second);
    // The stat data libgit2 wrote for the files it updated matches what the next run
    // compares: on the same base again, nothing is written.
    repo.git(&["reset", "-q", "--hard", &second]);
    let again = refactor_look(&repo, LOOK, true, true);
    again.assert_code(0);
    assert!(
        again.stderr.contains(": 0 paths written"),
        "{}",
        again.stderr
    );

    let clean = repo.swarm(&["clean", "--all"]);
    clean.assert_code(0);
    assert!(!kept(&repo).exists(), "{}", clean.stdout);
    assert!(!repo.swarm_dir().join("base.ready").exists());
    assert_eq!(repo.worktrees().len(), 1, "{:?}", repo.worktrees());
}

#[test]
fn what_changed_in_a_kept_base_between_runs_is_put_right() {
    let repo = repo();
    let first = repo.git(&["rev-parse", "HEAD"]);
    let victim = repo.victim();
    look(&repo, LOOK);
    repo.git(&["reset", "-q", "--hard", &first]);
    // Some process of the user's, between runs: an edit, files the index does not have
    // (ignored, untracked, in a new folder), a tracked file replaced by a link out, a
    // deletion.
    let base = kept(&repo);
    std::fs::write(base.join("a.txt"), "tampered\n").unwrap();
    std::fs::write(base.join("evil.log"), "ignored\n").unwrap();
    std::fs::write(base.join("dir/new.txt"), "untracked\n").unwrap();
    std::fs::create_dir_all(base.join("nested/deeper")).unwrap();
    std::fs::write(base.join("nested/deeper/x.txt"), "x\n").unwrap();
    std::fs::remove_file(base.join("b.txt")).unwrap();
    std::os::unix::fs::symlink(victim.join("keep.txt"), base.join("b.txt")).unwrap();
    std::fs::remove_file(base.join("dir/c.txt")).unwrap();
    look(&repo, LOOK);
    assert_eq!(repo.read("seen.txt"), FIRST_SEEN);
    assert_kept_at(&repo, &first);
    assert_eq!(
        std::fs::read_to_string(victim.join("keep.txt")).unwrap(),
        "precious\n"
    );
}

/// A repository where one `--reuse-base` run kept its base checkout, then went back to its
/// base: (the repository, the base).
fn after_a_kept_run() -> (TestRepo, String) {
    let repo = repo();
    let first = repo.git(&["rev-parse", "HEAD"]);
    look(&repo, LOOK);
    repo.git(&["reset", "-q", "--hard", &first]);
    (repo, first)
}

#[test]
fn a_kept_base_swapped_for_a_link_is_made_anew_where_it_belongs() {
    let (repo, first) = after_a_kept_run();
    // The kept checkout moved elsewhere and a link left in its place, pointing at a folder
    // that looks like it: its `.git` file and its folders, nothing to remove.
    let victim = repo.root().join("elsewhere");
    std::fs::create_dir_all(victim.join("dir")).unwrap();
    let moved = repo.root().join("moved-base");
    std::fs::rename(kept(&repo), &moved).unwrap();
    std::fs::copy(moved.join(".git"), victim.join(".git")).unwrap();
    std::os::unix::fs::symlink(&victim, kept(&repo)).unwrap();
    let before = crate::common::Snapshot::of(&victim, &[]);
    let run = refactor_look(&repo, LOOK, false, true);
    run.assert_code(0);
    assert!(run.stderr.contains("made anew"), "{}", run.stderr);
    assert_eq!(repo.read("seen.txt"), FIRST_SEEN);
    crate::common::Snapshot::of(&victim, &[]).assert_same(&before);
    assert!(!kept(&repo).is_symlink());
    assert_kept_at(&repo, &first);
}

#[test]
fn a_worker_cannot_change_the_kept_base() {
    let repo = repo();
    let first = repo.git(&["rev-parse", "HEAD"]);
    let attack = format!(
        r#"b="$(git rev-parse --git-common-dir)/swarm/base"; echo pwned > "$b/a.txt"; echo pwned > "$b/planted.txt"; echo 0000 > "$b/../base.ready"; {LOOK}"#
    );
    look(&repo, &attack);
    // The writes landed in the worker's copy-on-write view of the git directory.
    assert_eq!(
        std::fs::read_to_string(kept(&repo).join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(!kept(&repo).join("planted.txt").exists());
    assert_kept_at(&repo, &first);
    repo.git(&["reset", "-q", "--hard", &first]);
    look(&repo, LOOK);
    assert_eq!(repo.read("seen.txt"), FIRST_SEEN);
}

#[test]
fn a_kept_base_cut_off_half_way_is_made_anew() {
    let repo = repo();
    let first = repo.git(&["rev-parse", "HEAD"]);
    look(&repo, LOOK);
    let made = std::fs::metadata(kept(&repo)).unwrap().ino();
    repo.git(&["reset", "-q", "--hard", &first]);
    // What a run killed while updating it leaves: no `base.ready`, files half written.
    std::fs::remove_file(repo.swarm_dir().join("base.ready")).unwrap();
    std::fs::write(kept(&repo).join("a.txt"), "half\n").unwrap();
    look(&repo, LOOK);
    assert_eq!(repo.read("seen.txt"), FIRST_SEEN);
    assert_kept_at(&repo, &first);
    let remade = std::fs::metadata(kept(&repo)).unwrap().ino();
    assert_ne!(made, remade, "the checkout was not made anew");
    // A `base.ready` that names no commit is the same.
    repo.git(&["reset", "-q", "--hard", &first]);
    std::fs::write(repo.swarm_dir().join("base.ready"), "not a commit\n").unwrap();
    look(&repo, LOOK);
    assert_kept_at(&repo, &first);
}

/// Holds `path` locked as a running swarm would, until dropped.
fn hold_lock(path: &Path) -> std::fs::File {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    use std::os::fd::AsRawFd as _;
    // SAFETY: `flock` on a descriptor this function owns.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0, "cannot lock {}", path.display());
    file
}

#[test]
fn a_run_that_finds_the_kept_base_in_use_makes_its_own_and_clean_leaves_it() {
    let (repo, _) = after_a_kept_run();
    let before = crate::common::Snapshot::of(&kept(&repo), &[]);
    let lock = hold_lock(&repo.swarm_dir().join("base.lock"));
    let run = look(&repo, LOOK);
    assert_eq!(repo.read("seen.txt"), FIRST_SEEN);
    assert!(
        run.stderr
            .contains("another run uses the kept base checkout"),
        "{}",
        run.stderr
    );
    crate::common::Snapshot::of(&kept(&repo), &[]).assert_same(&before);
    // `clean --all` leaves what a run in progress holds.
    repo.swarm(&["clean", "--all"]).assert_code(0);
    assert!(kept(&repo).join("a.txt").exists());
    drop(lock);
    repo.swarm(&["clean", "--all"]).assert_code(0);
    assert!(!kept(&repo).exists());
}

#[test]
fn reuse_base_in_swarm_toml_keeps_the_base_and_without_it_nothing_is_kept() {
    let repo = repo();
    refactor_look(&repo, LOOK, false, false).assert_code(0);
    assert!(!kept(&repo).exists());
    repo.assert_clean_after_run();
    repo.write("swarm.toml", "[worktree]\nreuse_base = true\n");
    repo.commit_all("config");
    let first = repo.git(&["rev-parse", "HEAD"]);
    refactor_look(&repo, LOOK, false, false).assert_code(0);
    assert_kept_at(&repo, &first);
}

#[test]
fn swarm_run_of_a_plan_puts_the_kept_base_right_too() {
    // A plan file keeps `--reuse-base` in its settings; `swarm run` uses it as `refactor`
    // does.
    let (repo, first) = after_a_kept_run();
    std::fs::write(kept(&repo).join("a.txt"), "tampered\n").unwrap();
    std::fs::write(kept(&repo).join("evil.log"), "ignored\n").unwrap();
    let plan = repo.root().join("plans/plan.json");
    std::fs::create_dir_all(plan.parent().unwrap()).unwrap();
    let plan = plan.to_str().unwrap();
    let args = [
        "--worktrees",
        "overlay",
        "--reuse-base",
        "--exec",
        LOOK,
        "-o",
    ];
    let mut made = vec!["plan", "look", "seen.txt"];
    made.extend_from_slice(&args);
    made.push(plan);
    repo.swarm(&made).assert_code(0);
    let run = repo.swarm(&["run", plan, "-y"]);
    run.assert_code(0);
    assert!(!run.stderr.contains("made anew"), "{}", run.stderr);
    let branches = repo.swarm_branches();
    let task = branches
        .iter()
        .find(|b| b.contains("seen-txt"))
        .unwrap_or_else(|| panic!("{branches:?}"));
    assert_eq!(
        repo.git(&["show", &format!("{task}:seen.txt")]),
        FIRST_SEEN.trim_end()
    );
    assert_kept_at(&repo, &first);
}

#[test]
fn where_git_makes_no_links_a_link_written_as_a_file_is_not_written_again() {
    let repo = repo();
    std::os::unix::fs::symlink("a.txt", repo.path.join("link")).unwrap();
    let first = repo.commit_all("a link");
    // libgit2's checkout then writes the link's target into a plain file.
    repo.git(&["config", "core.symlinks", "false"]);
    look(&repo, LOOK);
    repo.git(&["reset", "-q", "--hard", &first]);
    let again = refactor_look(&repo, LOOK, true, true);
    again.assert_code(0);
    assert!(
        again.stderr.contains("0 stale, 0 strays") && again.stderr.contains(": 0 paths written"),
        "{}",
        again.stderr
    );
    let link = std::fs::symlink_metadata(kept(&repo).join("link")).unwrap();
    assert!(link.is_file(), "{link:?}");
}
