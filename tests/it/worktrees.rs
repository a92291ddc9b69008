//! Overlay worktrees (`--worktrees overlay`): a worker sees one shared base checkout through
//! an overlay mounted in its jail, and what it changed is the view's upper layer. Each kind of
//! change is committed as git would commit it, on both kinds of worktree, and a worker in a
//! view can change neither the shared base nor anything outside its view.

use crate::common::{SED_FOO_BAR, TestRepo, task_of};

/// Every kind of change a worker can make: an edit, a deletion, a folder removed and made
/// again (an opaque folder in the view), a file that becomes a folder, new nested folders, a
/// link, an executable bit, and ignored output that stays out.
const EVERY_CHANGE: &str = "\
echo changed >> a.txt; rm del.txt; rm -r dir; mkdir dir; echo new > dir/z.txt; \
rm swap; mkdir swap; echo in > swap/inner; mkdir -p new/deep; echo d > new/deep/n.txt; \
ln -s a.txt lnk; chmod +x run.sh; mkdir -p target; echo out > target/o; echo t > junk.log";

fn repo() -> TestRepo {
    TestRepo::with_files(&[
        ("a.txt", "a\n"),
        ("del.txt", "gone\n"),
        ("dir/x.txt", "x\n"),
        ("dir/y.txt", "y\n"),
        ("swap", "a file\n"),
        ("run.sh", "echo hi\n"),
        (".gitignore", "target/\n*.log\n"),
    ])
}

#[test]
fn a_view_commits_every_kind_of_change_as_git_does() {
    for mode in ["overlay", "pool"] {
        let repo = repo();
        let base = repo.git(&["rev-parse", "HEAD"]);
        let oracle = repo.oracle_tree(&base, &["a.txt"], EVERY_CHANGE);
        let run = repo.swarm(&[
            "refactor",
            "every change",
            "a.txt",
            "--scope",
            "any",
            "--worktrees",
            mode,
            "-y",
            "--exec",
            EVERY_CHANGE,
        ]);
        run.assert_code(0);
        let report = repo.report(&run);
        assert_eq!(report["worktrees"], mode, "{}", run.stderr);
        assert_eq!(
            repo.git(&["rev-parse", "main^{tree}"]),
            oracle,
            "--worktrees {mode}: the merged tree is not what git commits"
        );
        let task = task_of(&report, "a.txt");
        let mut changed: Vec<&str> = task["changed_files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        changed.sort();
        assert_eq!(
            changed,
            [
                "a.txt",
                "del.txt",
                "dir/x.txt",
                "dir/y.txt",
                "dir/z.txt",
                "lnk",
                "new/deep/n.txt",
                "run.sh",
                "swap",
                "swap/inner"
            ],
            "--worktrees {mode}"
        );
        let layers = repo.swarm_dir().join("layers");
        assert!(
            !layers.exists() || layers.read_dir().unwrap().next().is_none(),
            "the views' layers are left behind"
        );
    }
}

/// The attack: a worker in a view looks up where swarm keeps the base checkout and the
/// layers, and writes to them, to the folder around its view and to the user's checkout; the
/// next task, in the same view, copies what it sees of `a.txt`.
#[test]
fn a_worker_in_a_view_changes_neither_the_shared_base_nor_anything_outside_it() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "original\n"),
        ("one.txt", "1\n"),
        ("two.txt", "2\n"),
    ]);
    let attack = r#"
        common=$(git rev-parse --git-common-dir)
        if [ "$SWARM_FILE" = one.txt ]; then
            for d in "$common"/swarm/worktrees/*; do
                [ "$d" -ef "$PWD" ] && continue # its own view
                echo pwned > "$d/a.txt" 2>/dev/null && echo "escaped: $d/a.txt"
            done
            for d in "$common"/swarm/layers/*/upper; do
                echo pwned > "$d/evil.txt" 2>/dev/null && echo "escaped: $d"
            done
            echo pwned > ../outside.txt 2>/dev/null && echo "escaped: .."
            echo pwned > "$common/../pwned.txt" 2>/dev/null && echo "escaped: checkout"
            echo edited > one.txt
        else
            cp a.txt two.txt
        fi
    "#;
    let run = repo.swarm(&[
        "refactor",
        "attack",
        "one.txt",
        "two.txt",
        "-j",
        "1",
        "--worktrees",
        "overlay",
        "-y",
        "--exec",
        attack,
    ]);
    run.assert_code(0);
    let report = repo.report(&run);
    assert_eq!(report["worktrees"], "overlay");
    let log = repo.run_file(
        report["run_id"].as_str().unwrap(),
        &format!(
            "tasks/{}/worker.log",
            task_of(&report, "one.txt")["id"].as_str().unwrap()
        ),
    );
    // The writes under the git directory (the base checkout, the layers, next to the view)
    // land in the worker's copy-on-write view of it, thrown away with it; the checkout is
    // outside, and refused.
    assert!(!log.contains("escaped: checkout"), "{log}");
    assert!(
        !crate::common::Snapshot::of(&repo.swarm_dir(), &[])
            .texts()
            .iter()
            .any(|t| t.ends_with(" pwned\n")),
        "a write reached the real .git/swarm"
    );
    assert_eq!(repo.read("one.txt"), "edited\n");
    assert_eq!(
        repo.read("two.txt"),
        "original\n",
        "the next task saw a changed base"
    );
    assert_eq!(
        repo.git(&["ls-tree", "-r", "--name-only", "main"]),
        "a.txt\none.txt\ntwo.txt"
    );
    assert!(!repo.path.join("pwned.txt").exists());
    assert!(!repo.swarm_dir().join("worktrees/outside.txt").exists());
}

#[test]
fn overlay_worktrees_are_refused_where_they_cannot_work() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n")]);
    for (extra, says) in [
        (&["--sandbox", "off", "--exec", "true"][..], "--sandbox off"),
        (
            &["--model", "m", "--base-url", "http://127.0.0.1:9"][..],
            "built-in worker",
        ),
    ] {
        let mut args = vec!["refactor", "x", "a.txt", "--worktrees", "overlay", "-y"];
        args.extend_from_slice(extra);
        let run = repo.swarm(&args);
        run.assert_code(2);
        assert!(
            run.stderr
                .contains("--worktrees overlay cannot be used here")
                && run.stderr.contains(says),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("--worktrees auto"), "{}", run.stderr);
        assert!(!repo.swarm_dir().exists(), "a refused run left .git/swarm");
    }
    // `auto` falls back to full checkouts, and says which the run used.
    let run = repo.swarm(&[
        "refactor",
        "x",
        "a.txt",
        "--sandbox",
        "off",
        "-y",
        "--exec",
        "sed -i s/foo/bar/ a.txt",
    ]);
    run.assert_code(0);
    assert_eq!(repo.report(&run)["worktrees"], "pool");
    assert_eq!(repo.read("a.txt"), "bar\n");
}

/// The base checkout is written by several threads and its index by swarm: in a view, git
/// finds the worktree clean at once, stat data included (`git diff-files` compares stat data
/// without refreshing anything), for files in nested folders, an executable, a link and a
/// file git converts on checkout (CRLF), and folders whose names would be patterns as
/// pathspecs (the checkout threads are given plain paths).
#[test]
fn a_view_is_clean_for_git_at_once() {
    let repo = TestRepo::with_files(&[
        ("a.txt", "a\n"),
        ("deep/er/still/b.txt", "b\n"),
        ("odd [x] */c?.txt", "c\n"),
        ("odd [x] *y/d.txt", "d\n"),
        ("run.sh", "echo hi\n"),
        ("crlf.txt", "one\ntwo\n"),
        (".gitattributes", "crlf.txt text eol=crlf\n"),
    ]);
    for i in 0..40 {
        repo.write(&format!("dir{}/f{i}.txt", i % 7), &format!("{i}\n"));
    }
    std::os::unix::fs::symlink("a.txt", repo.path.join("lnk")).unwrap();
    repo.git(&["update-index", "--add", "--chmod=+x", "run.sh"]);
    repo.commit_all("more");
    let look =
        r#"s=$(git status --porcelain; git diff-files --name-only); printf '[%s]\n' "$s" > a.txt"#;
    let run = repo.swarm(&["refactor", "look", "a.txt", "-y", "--exec", look]);
    run.assert_code(0);
    assert_eq!(
        repo.report(&run)["worktrees"],
        std::env::var("SWARM_TEST_WORKTREES").unwrap_or("overlay".into())
    );
    assert_eq!(
        repo.read("a.txt"),
        "[]\n",
        "git saw changes in a fresh worktree"
    );
}

/// The end of a run takes its worktrees out of the way at once (moved into
/// `.git/swarm/trash`) and a process of its own deletes them after the result is out; what
/// such a process did not finish, `swarm clean` does.
#[test]
fn worktrees_are_moved_aside_at_the_end_and_deleted_after() {
    let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
    repo.swarm(&["refactor", "x", ".", "--exec", SED_FOO_BAR])
        .assert_code(0);
    repo.assert_clean_after_run();
    let trash = repo.swarm_dir().join("trash");
    let entries = |dir: &std::path::Path| std::fs::read_dir(dir).map_or(0, |d| d.count());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while entries(&trash) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the trash was not emptied"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // What an emptying process killed half way left.
    std::fs::create_dir_all(trash.join("7-0123abcd/src")).unwrap();
    std::fs::write(trash.join("7-0123abcd/src/a.txt"), "left\n").unwrap();
    repo.swarm(&["clean", "--all"]);
    assert_eq!(entries(&trash), 0);
}

/// `-j N` is how many workers run at once, on both kinds of worktree: in overlay worktrees a
/// finished task commits while the next worker runs in another, and still no more than N
/// workers run. Each worker writes when it started and ended (nanoseconds) into its file.
#[test]
fn no_more_workers_run_at_once_than_jobs() {
    let files: Vec<(String, String)> = (0..8)
        .map(|i| (format!("f{i}.txt"), "-\n".to_string()))
        .collect();
    let clock = r#"s=$(date +%s%N); sleep 0.3; echo "$s $(date +%s%N)" > "$SWARM_FILE""#;
    for mode in ["overlay", "pool"] {
        let repo = TestRepo::with_files(&files);
        let run = repo.swarm(&[
            "refactor",
            "clock",
            "f*.txt",
            "-j",
            "2",
            "--worktrees",
            mode,
            "-y",
            "--exec",
            clock,
        ]);
        run.assert_code(0);
        let spans: Vec<(u128, u128)> = (0..8)
            .map(|i| {
                let text = repo.read(&format!("f{i}.txt"));
                let (s, e) = text.trim().split_once(' ').unwrap();
                (s.parse().unwrap(), e.parse().unwrap())
            })
            .collect();
        // The most spans holding one instant: the start of one of them.
        let most = spans
            .iter()
            .map(|&(at, _)| spans.iter().filter(|&&(s, e)| s <= at && at < e).count())
            .max()
            .unwrap();
        assert_eq!(
            most, 2,
            "--worktrees {mode}: {most} workers at once at -j 2"
        );
    }
}

/// A worktree used again (`-j 1`: one worktree for every task) has its HEAD on the task's
/// own branch for each worker (its reset points it there), so the worker's git commits there.
#[test]
fn each_worker_s_git_is_on_its_own_task_branch() {
    const SAY_HEAD: &str = r#"git symbolic-ref HEAD > "$SWARM_FILE"; echo "$SWARM_RUN_ID/$SWARM_TASK_ID" >> "$SWARM_FILE""#;
    for mode in ["overlay", "pool"] {
        let files = ["a.txt", "b.txt", "c.txt", "d.txt"];
        let repo = TestRepo::with_files(&files.map(|f| (f, "x\n")));
        let run = repo.swarm(&[
            "refactor",
            "say head",
            ".",
            "-j",
            "1",
            "--worktrees",
            mode,
            "-y",
            "--exec",
            SAY_HEAD,
        ]);
        run.assert_code(0);
        for file in files {
            let said = repo.git(&["show", &format!("main:{file}")]);
            let (head, task) = said.trim().split_once('\n').unwrap();
            assert_eq!(
                head,
                format!("refs/heads/swarm/{task}"),
                "--worktrees {mode}: the worker of {file} was on another branch"
            );
        }
    }
}

/// A view used again (`-j 1`) shows each worker the base, whatever the worker before it did
/// to the folders: a folder removed and made again (opaque in the upper layer) and new
/// nested folders, which the reset moves out for the janitor to delete, leave nothing behind,
/// not even an empty folder git would not see.
#[test]
fn a_view_used_again_shows_the_base_after_folders_were_made_and_removed() {
    const SEE_THEN_CHANGE: &str = r#"find . -name .git -prune -o -print | LC_ALL=C sort > "$SWARM_FILE"; rm -r dir && mkdir dir && echo "$SWARM_TASK_ID" > "dir/$SWARM_TASK_ID" && mkdir -p "new-$SWARM_TASK_ID/deep" && echo n > "new-$SWARM_TASK_ID/deep/n""#;
    let files = ["t1.txt", "t2.txt", "t3.txt", "t4.txt", "dir/x.txt"];
    let repo = TestRepo::with_files(&files.map(|f| (f, "x\n")));
    let seen_in_base = std::process::Command::new("sh")
        .args(["-c", "find . -name .git -prune -o -print | LC_ALL=C sort"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    let base = String::from_utf8(seen_in_base.stdout).unwrap();
    let run = repo.swarm(&[
        "refactor",
        "see, then change folders",
        "t*.txt",
        "-j",
        "1",
        "--scope",
        "any",
        "--worktrees",
        "overlay",
        "-y",
        "--exec",
        SEE_THEN_CHANGE,
    ]);
    run.assert_code(0);
    let events = repo.run_file(&run.run_id(), "events.jsonl");
    let views = events.matches("\"kind\":\"worktree_created\"").count();
    assert!(views < 4, "{views} views for 4 tasks: none was used again");
    for file in &files[..4] {
        assert_eq!(
            repo.git(&["show", &format!("main:{file}")]),
            base.trim_end(),
            "the worker of {file} did not see the base"
        );
    }
    let tree = repo.lines(&["ls-tree", "-r", "--name-only", "main"]);
    assert_eq!(tree.iter().filter(|p| p.starts_with("dir/")).count(), 4);
    assert_eq!(tree.iter().filter(|p| p.ends_with("/deep/n")).count(), 4);
    repo.assert_clean_after_run();
}

/// Where an attribute or `core.autocrlf` asks git to convert line ends, a worker sees the
/// files as git checks them out (CRLF), in a new full checkout, in one reset for the next
/// task, and in the base checkout under overlay worktrees: swarm's checkouts skip git's
/// filters only when nothing can turn one on, and a `.gitattributes` in a nested folder, an
/// `info/attributes` and `core.autocrlf` each can. Each task counts the CRLF lines of both
/// files before writing its own; with `-j 1` the second task sees the file the first one
/// changed as the reset put it back.
#[test]
fn line_end_conversion_reaches_the_workers_checkouts() {
    let count =
        r#"cr=$(printf '\r'); echo "$(cat sub/a.txt sub/b.txt | grep -c "$cr")" > "$SWARM_FILE""#;
    type Setup = fn(&TestRepo);
    let setups: [(&str, Setup); 3] = [
        ("a nested .gitattributes", |repo| {
            repo.write("sub/.gitattributes", "*.txt text eol=crlf\n");
            repo.commit_all("attributes");
        }),
        ("info/attributes", |repo| {
            std::fs::create_dir_all(repo.path.join(".git/info")).unwrap();
            std::fs::write(
                repo.path.join(".git/info/attributes"),
                "*.txt text eol=crlf\n",
            )
            .unwrap();
        }),
        ("core.autocrlf", |repo| {
            repo.git(&["config", "core.autocrlf", "true"]);
        }),
    ];
    for (what, setup) in setups {
        for mode in ["pool", "overlay"] {
            let repo = TestRepo::with_files(&[("sub/a.txt", "1\n2\n"), ("sub/b.txt", "3\n4\n")]);
            setup(&repo);
            let run = repo.swarm(&[
                "refactor",
                "count",
                "sub/a.txt",
                "sub/b.txt",
                "-j",
                "1",
                "-y",
                "--worktrees",
                mode,
                "--exec",
                count,
            ]);
            run.assert_code(0);
            for file in ["sub/a.txt", "sub/b.txt"] {
                let committed = repo.git(&["show", &format!("HEAD:{file}")]);
                assert_eq!(committed.trim(), "4", "{what}, {mode}: {file}");
            }
        }
    }
}

/// Your checkout gets the merged files as git would check them out: with CRLF where a
/// `.gitattributes` in the file's folder (committed, or only in your checkout) asks for it,
/// byte for byte where none does; git then finds the checkout clean.
#[test]
fn line_end_conversion_reaches_your_checkout() {
    let repo = TestRepo::with_files(&[
        ("sub/a.txt", "foo\n"),
        ("sub/.gitattributes", "*.txt text eol=crlf\n"),
        ("other/b.md", "foo\n"),
        ("plain/c.txt", "foo\n"),
    ]);
    // Uncommitted, yours: git's checkout reads it too.
    repo.write("other/.gitattributes", "*.md text eol=crlf\n");
    let run = repo.swarm(&[
        "refactor",
        "x",
        "sub",
        "other",
        "plain",
        "-y",
        "--exec",
        SED_FOO_BAR,
    ]);
    run.assert_code(0);
    let bytes = |rel: &str| std::fs::read(repo.path.join(rel)).unwrap();
    assert_eq!(bytes("sub/a.txt"), b"bar\r\n");
    assert_eq!(bytes("other/b.md"), b"bar\r\n");
    assert_eq!(bytes("plain/c.txt"), b"bar\n");
    assert_eq!(repo.git(&["show", "HEAD:sub/a.txt"]), "bar");
    assert_eq!(
        repo.git(&["status", "--porcelain"]).trim(),
        "?? other/.gitattributes"
    );
}

/// A commit takes a file in as `git add` would: its line ends converted where an attribute
/// (in a nested folder, in `info/attributes`) or `core.autocrlf` asks, and byte for byte
/// where nothing can (a view then writes the blob from the file without asking libgit2 for
/// its attributes). The oracle is `git hash-object --path` on the same bytes.
#[test]
fn a_commit_converts_line_ends_exactly_where_git_add_would() {
    type Setup = fn(&TestRepo);
    let setups: [(&str, Setup, bool); 4] = [
        ("nothing", |_| {}, false),
        (
            "a nested .gitattributes",
            |repo| {
                repo.write("sub/.gitattributes", "*.txt text\n");
                repo.commit_all("attributes");
            },
            true,
        ),
        (
            "info/attributes",
            |repo| {
                std::fs::create_dir_all(repo.path.join(".git/info")).unwrap();
                std::fs::write(repo.path.join(".git/info/attributes"), "*.txt text\n").unwrap();
            },
            true,
        ),
        (
            "core.autocrlf",
            |repo| {
                repo.git(&["config", "core.autocrlf", "true"]);
            },
            true,
        ),
    ];
    for (what, setup, converts) in setups {
        for mode in ["overlay", "pool"] {
            let repo = TestRepo::with_files(&[("sub/a.txt", "1\n2\n")]);
            setup(&repo);
            let bytes = repo.home.join("crlf");
            std::fs::write(&bytes, "x\r\ny\r\n").unwrap();
            let exec = format!("cat {} > \"$SWARM_FILE\"", bytes.display());
            let args = ["refactor", "crlf", "sub/a.txt", "-y", "--worktrees", mode];
            repo.swarm(&[&args[..], &["--exec", &exec]].concat())
                .assert_code(0);
            let path = bytes.to_str().unwrap();
            let git_add = repo.git(&["hash-object", "--path", "sub/a.txt", path]);
            let raw = repo.git(&["hash-object", "--no-filters", path]);
            assert_eq!(git_add != raw, converts, "{what}: git's own conversion");
            let committed = repo.git(&["rev-parse", "HEAD:sub/a.txt"]);
            assert_eq!(committed, git_add, "{what}, {mode}");
        }
    }
}

/// The branches swarm makes and moves for its tasks keep no reflog (a failed task's branch,
/// kept for inspection, has none), while the branch a run moves keeps its own, with swarm's
/// entry added.
#[test]
fn task_branches_keep_no_reflog_and_the_target_keeps_its_own() {
    for mode in ["overlay", "pool"] {
        let repo = TestRepo::with_files(&[("a.txt", "foo\n"), ("b.txt", "foo\n")]);
        let entries = || repo.lines(&["reflog", "show", "main"]).len();
        let before = entries();
        let args = ["refactor", "x", "a.txt", "-y", "--worktrees", mode];
        repo.swarm(&[&args[..], &["--exec", SED_FOO_BAR]].concat())
            .assert_code(0);
        assert_eq!(
            entries(),
            before + 1,
            "{mode}: swarm's move of main is logged"
        );
        let fails = format!("{SED_FOO_BAR}; exit 3");
        let args = ["refactor", "x", "b.txt", "-y", "--worktrees", mode];
        repo.swarm(&[&args[..], &["--exec", &fails]].concat())
            .assert_code(1);
        assert!(
            !repo.swarm_branches().is_empty(),
            "{mode}: the failed task's branch"
        );
        let logs = repo.path.join(".git/logs/refs/heads/swarm");
        assert!(!logs.exists(), "{mode}: {} exists", logs.display());
    }
}
