//! `--per-process`: one worker process for several tasks. Each task is still committed on its
//! own branch and merged with its own merge commit, and a process that does not succeed for
//! all of its tasks is split until each failure is one task's own.

use serde_json::Value;

use crate::common::{Run, TestRepo, count, statuses, task_of};

/// A codemod over every file of its list; a file holding BAD stops it, saying which.
const SED_LIST: &str = r#"for f in $SWARM_FILES; do
  if grep -q BAD "$f"; then echo "error: $f is bad" >&2; exit 1; fi
  sed -i 's/foo/bar/' "$f"
done"#;

/// The same edit, one file (`SWARM_FILE`), for the git oracle.
const SED_ONE: &str = r#"sed -i 's/foo/bar/' "$SWARM_FILE""#;

/// `n` files f01.txt… holding `foo`; those in `bad` hold BAD too.
fn files(n: usize, bad: &[usize]) -> TestRepo {
    let files: Vec<(String, String)> = (1..=n)
        .map(|i| {
            let extra = if bad.contains(&i) { "BAD\n" } else { "" };
            (format!("f{i:02}.txt"), format!("foo {i}\n{extra}"))
        })
        .collect();
    TestRepo::with_files(&files)
}

fn names(n: usize, except: &[usize]) -> Vec<String> {
    (1..=n)
        .filter(|i| !except.contains(i))
        .map(|i| format!("f{i:02}.txt"))
        .collect()
}

/// `swarm refactor 'foo to bar' '*.txt' -y -j JOBS [--per-process N] --exec EXEC EXTRA…`.
fn refactor(
    repo: &TestRepo,
    jobs: &str,
    per_process: Option<&str>,
    exec: &str,
    extra: &[&str],
) -> Run {
    let mut args = vec!["refactor", "foo to bar", "*.txt", "-y", "-j", jobs];
    if let Some(n) = per_process {
        args.extend(["--per-process", n]);
    }
    args.extend(["--exec", exec]);
    args.extend_from_slice(extra);
    repo.swarm(&args)
}

/// `main`'s tree is the edit applied by git to f01…f`n` but the `except` ones.
fn assert_main_is_the_edit_of(repo: &TestRepo, base: &str, n: usize, except: &[usize]) {
    let files = names(n, except);
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    let oracle = repo.oracle_tree(base, &files, SED_ONE);
    assert_eq!(repo.git(&["rev-parse", "main^{tree}"]), oracle);
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The sizes of the processes split, in order; each split must have been in halves (its
/// output blamed no task).
fn halvings(events: &[Value]) -> Vec<usize> {
    let splits = of_kind(events, "group_split");
    assert!(
        splits
            .iter()
            .all(|s| s["alone"].as_array().unwrap().is_empty()),
        "{splits:?}"
    );
    splits
        .iter()
        .map(|s| s["tasks"].as_array().unwrap().len())
        .collect()
}

/// The files each merge on `main` since `base` brought in (its second parent against the
/// base), in merge order.
fn merged_files(repo: &TestRepo, base: &str) -> Vec<Vec<String>> {
    let mut merges = merges(repo, base);
    merges.reverse();
    merges
        .iter()
        .map(|m| repo.lines(&["diff", "--name-only", base, &format!("{m}^2")]))
        .collect()
}

/// The merge commits on `main` since `base`, newest first.
fn merges(repo: &TestRepo, base: &str) -> Vec<String> {
    repo.lines(&[
        "rev-list",
        "--merges",
        "--first-parent",
        &format!("{base}..main"),
    ])
}

#[test]
fn one_process_runs_several_tasks_and_each_task_merges_on_its_own() {
    let repo = files(12, &[]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let run = refactor(&repo, "2", Some("4"), SED_LIST, &[]);
    run.assert_code(0);
    let report = repo.report(&run);
    assert_eq!(report["per_process"], 4);
    assert_eq!(count(&statuses(&report), "merged"), 12, "{}", run.stderr);

    // Three processes of four tasks each.
    let events = repo.events(&run);
    let groups = of_kind(&events, "group_started");
    assert_eq!(groups.len(), 3, "{}", run.stderr);
    assert!(
        groups
            .iter()
            .all(|g| g["tasks"].as_array().unwrap().len() == 4)
    );
    assert_eq!(of_kind(&events, "task_started").len(), 12);

    // The result is the edit of every file, and each file came in by a merge of its own,
    // whose branch holds that file's change only, on the base.
    assert_main_is_the_edit_of(&repo, &base, 12, &[]);
    let mut merged = merged_files(&repo, &base);
    assert_eq!(merged.len(), 12);
    assert!(merged.iter().all(|files| files.len() == 1), "{merged:?}");
    merged.sort();
    assert_eq!(merged.concat(), names(12, &[]));
    for m in merges(&repo, &base) {
        assert_eq!(
            repo.git(&["rev-parse", &format!("{m}^2^")]),
            base,
            "a task commit's parent is the base"
        );
    }
    repo.assert_clean_after_run();
}

#[test]
fn a_shared_process_that_deletes_a_file_reports_it_deleted() {
    let repo = files(4, &[]);
    let exec = r#"for f in $SWARM_FILES; do
  case "$f" in *f02.txt) rm "$f" ;; *) sed -i 's/foo/bar/' "$f" ;; esac
done"#;
    let run = refactor(&repo, "1", Some("4"), exec, &[]);
    run.assert_code(0);
    assert_eq!(
        repo.lines(&["ls-tree", "--name-only", "main"]),
        names(4, &[2])
    );
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 4, "{}", run.stderr);
    assert_eq!(task_of(&report, "f02.txt")["deleted_files"][0], "f02.txt");
    assert!(task_of(&report, "f01.txt")["deleted_files"].is_null());
    assert!(
        run.stderr
            .contains("1 file(s) changed, 1 deleted (f02.txt)"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_failing_process_is_split_and_only_the_task_of_the_failing_file_fails() {
    let repo = files(12, &[7]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let run = refactor(&repo, "1", Some("12"), SED_LIST, &[]);
    run.assert_code(1);
    let report = repo.report(&run);
    let st = statuses(&report);
    assert_eq!(count(&st, "merged"), 11, "{st:?}");
    let culprit = task_of(&report, "f07.txt");
    assert_eq!(culprit["status"], "failed");
    assert!(
        culprit["error"]
            .as_str()
            .unwrap()
            .contains("exited with status 1")
    );
    assert!(
        culprit["output_tail"]
            .as_str()
            .unwrap()
            .contains("f07.txt is bad")
    );
    assert_eq!(culprit["attempts"], 1);

    // Its output named f07.txt: that task ran alone, the eleven others together.
    let events = repo.events(&run);
    let splits = of_kind(&events, "group_split");
    assert_eq!(splits.len(), 1, "{}", run.stderr);
    assert_eq!(splits[0]["alone"], serde_json::json!([culprit["id"]]));
    assert!(
        run.stderr.contains("alone (named in its output)"),
        "{}",
        run.stderr
    );
    assert_eq!(of_kind(&events, "group_started").len(), 2);

    assert_main_is_the_edit_of(&repo, &base, 12, &[7]);
    assert_eq!(merged_files(&repo, &base).len(), 11);
}

#[test]
fn a_process_that_fails_without_naming_a_file_is_split_in_halves() {
    let repo = files(8, &[3]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // The same codemod, silent about why.
    let silent = SED_LIST.replace(r#"echo "error: $f is bad" >&2; "#, "");
    let run = refactor(&repo, "1", Some("8"), &silent, &[]);
    run.assert_code(1);
    let report = repo.report(&run);
    let st = statuses(&report);
    assert_eq!(count(&st, "merged"), 7, "{st:?}");
    assert_eq!(task_of(&report, "f03.txt")["status"], "failed");
    // 8 → 4 + 4 → (2 + 2) → (1 + 1): three splits, each in halves.
    let events = repo.events(&run);
    assert_eq!(halvings(&events), [8, 4, 2], "{}", run.stderr);
    assert_main_is_the_edit_of(&repo, &base, 8, &[3]);
}

/// The processes of a run, in the order they started, each as the ids of its tasks: a
/// `group_started` and the `task_started` of its tasks, or a `task_started` alone.
fn processes(events: &[Value]) -> Vec<Vec<String>> {
    let mut processes: Vec<Vec<String>> = Vec::new();
    let mut in_group: Vec<String> = Vec::new();
    for e in events {
        let id = |v: &Value| v.as_str().unwrap().to_string();
        match e["kind"].as_str() {
            Some("group_started") => {
                in_group = e["tasks"].as_array().unwrap().iter().map(id).collect();
                processes.push(in_group.clone());
            }
            Some("task_started") => {
                let task = id(&e["task"]);
                match in_group.iter().position(|t| *t == task) {
                    Some(at) => drop(in_group.remove(at)),
                    None => processes.push(vec![task]),
                }
            }
            _ => {}
        }
    }
    processes
}

/// A formatter that lists each file it wrote, as prettier does, and reports the files it
/// cannot parse as ruff and eslint do (a location under a line about the problem; a path
/// alone heading an indented error), then exits 1.
const FORMATTER: &str = r#"bad=0
for f in $SWARM_FILES; do
  if grep -q BAD "$f"; then
    bad=1
    case "$f" in
      f03.txt) printf 'invalid-syntax: unexpected token\n --> %s:2:1\n\n' "$f" ;;
      *) printf '\n%s/%s\n  2:1  error  Parsing error: unexpected token\n\n' "$PWD" "$f" ;;
    esac
  else
    sed -i 's/foo/bar/' "$f"
    echo "$f 3ms"
  fi
done
exit $bad"#;

#[test]
fn a_process_whose_output_names_two_of_its_files_retries_exactly_those_alone() {
    let repo = files(12, &[3, 9]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    let run = refactor(&repo, "1", Some("12"), FORMATTER, &[]);
    run.assert_code(1);
    let report = repo.report(&run);
    let id = |file: &str| task_of(&report, file)["id"].as_str().unwrap().to_string();
    let (f03, f09) = (id("f03.txt"), id("f09.txt"));

    // Four processes: the twelve, the ten others together, then f03 and f09 alone.
    let events = repo.events(&run);
    let processes = processes(&events);
    let sizes: Vec<usize> = processes.iter().map(Vec::len).collect();
    assert_eq!(sizes, [12, 10, 1, 1], "{processes:?}\n{}", run.stderr);
    assert!(!processes[1].contains(&f03) && !processes[1].contains(&f09));
    let mut alone = [processes[2][0].clone(), processes[3][0].clone()];
    alone.sort();
    assert_eq!(alone, [f03.clone(), f09.clone()]);
    let splits = of_kind(&events, "group_split");
    assert_eq!(splits.len(), 1, "{}", run.stderr);
    assert_eq!(splits[0]["alone"], serde_json::json!([f03, f09]));
    let named_by = splits[0]["named_by"].as_array().unwrap();
    assert_eq!(named_by[0], "--> f03.txt:2:1");
    assert!(
        named_by[1].as_str().unwrap().ends_with("/f09.txt"),
        "{named_by:?}"
    );

    // The report says why each ran alone; the others merged, each on its own.
    for (file, line) in [("f03.txt", "--> f03.txt:2:1"), ("f09.txt", "/f09.txt")] {
        let task = task_of(&report, file);
        assert_eq!(task["status"], "failed");
        let why = task["ran_alone"].as_str().unwrap();
        assert!(why.starts_with("a process over 12 tasks failed"), "{why}");
        assert!(why.contains(line), "{why}");
    }
    assert_eq!(task_of(&report, "f01.txt").get("ran_alone"), None);
    assert_main_is_the_edit_of(&repo, &base, 12, &[3, 9]);
    assert_eq!(merged_files(&repo, &base).len(), 10);
}

#[test]
fn an_output_naming_a_file_of_another_process_falls_back_to_halving() {
    let repo = files(8, &[3]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // It blames f07.txt, a task of the other process of four, for its own f03.txt.
    let misleading = SED_LIST.replace(r#""error: $f is bad""#, r#""error: f07.txt is bad""#);
    let run = refactor(&repo, "1", Some("4"), &misleading, &[]);
    run.assert_code(1);
    let events = repo.events(&run);
    assert_eq!(halvings(&events), [4, 2], "{}", run.stderr);
    // The first process, then its halves, its failing half's halves and the other process of
    // four, in an order that depends on which commit ends first (a task's worker gives its
    // place back before its commit).
    let mut sizes: Vec<usize> = processes(&events).iter().map(Vec::len).collect();
    assert_eq!(sizes[0], 4, "{}", run.stderr);
    sizes.sort_unstable();
    assert_eq!(sizes, [1, 1, 2, 2, 4, 4], "{}", run.stderr);
    let report = repo.report(&run);
    assert_eq!(task_of(&report, "f03.txt")["status"], "failed");
    assert_eq!(task_of(&report, "f07.txt")["status"], "merged");
    assert_main_is_the_edit_of(&repo, &base, 8, &[3]);
}

#[test]
fn a_change_that_belongs_to_no_task_of_the_process_is_traced_to_its_task() {
    let repo = files(6, &[]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    // It exits 0 and says f01.txt had an error: a process that exited well blames no one.
    let stray = r#"echo "error: f01.txt looked odd"; for f in $SWARM_FILES; do sed -i 's/foo/bar/' "$f"; [ "$f" != f04.txt ] || echo x > extra.txt; done"#;
    let run = refactor(&repo, "1", Some("6"), stray, &[]);
    run.assert_code(1);
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 5, "{}", run.stderr);
    let culprit = task_of(&report, "f04.txt");
    assert_eq!(culprit["status"], "failed");
    assert!(
        culprit["error"]
            .as_str()
            .unwrap()
            .contains("changed files outside its task: extra.txt"),
        "{culprit}"
    );
    let events = repo.events(&run);
    let splits = of_kind(&events, "group_split");
    assert!(
        splits[0]["error"]
            .as_str()
            .unwrap()
            .contains("extra.txt, which is no file of its tasks")
    );
    assert!(
        splits[0]["alone"].as_array().unwrap().is_empty(),
        "{splits:?}"
    );
    assert_eq!(task_of(&report, "f01.txt").get("ran_alone"), None);
    assert_main_is_the_edit_of(&repo, &base, 6, &[4]);
}

#[test]
fn a_process_that_times_out_is_split() {
    let repo = files(4, &[]);
    let stuck = r#"for f in $SWARM_FILES; do
  [ "$f" != f02.txt ] || { echo "error: stuck on $f"; sleep 30; }
  sed -i 's/foo/bar/' "$f"
done"#;
    let run = refactor(&repo, "1", Some("4"), stuck, &["--timeout", "1"]);
    run.assert_code(1);
    let report = repo.report(&run);
    assert_eq!(count(&statuses(&report), "merged"), 3, "{}", run.stderr);
    assert_eq!(task_of(&report, "f02.txt")["status"], "timeout");
    let events = repo.events(&run);
    let splits = of_kind(&events, "group_split");
    assert!(
        splits[0]["error"].as_str().unwrap().contains("timed out"),
        "{splits:?}"
    );
}

/// `--verify-merged` finds the one file that breaks the merged result, though a process
/// shared by eight tasks changed it.
#[test]
fn verify_merged_blames_one_task_of_a_shared_process() {
    let repo = files(16, &[]);
    let breaking = r#"for f in $SWARM_FILES; do sed -i 's/foo/bar/' "$f"; [ "$f" != f11.txt ] || echo BROKEN >> "$f"; done"#;
    let run = refactor(
        &repo,
        "2",
        Some("8"),
        breaking,
        &["--verify-merged", "! grep -l BROKEN *.txt"],
    );
    run.assert_code(1);
    let report = repo.report(&run);
    let st = statuses(&report);
    assert_eq!(count(&st, "merged"), 15, "{st:?}");
    assert_eq!(task_of(&report, "f11.txt")["status"], "excluded");
    assert_eq!(of_kind(&repo.events(&run), "group_started").len(), 2);
    assert!(
        !repo
            .git_cmd()
            .args(["grep", "-q", "BROKEN", "main", "--"])
            .status()
            .unwrap()
            .success()
    );
}

#[test]
fn auto_shares_processes_only_for_commands_that_take_a_list_of_files() {
    let repo = files(12, &[]);
    let run = refactor(&repo, "1", None, SED_LIST, &[]);
    run.assert_code(0);
    // 12 tasks, one job: two processes of six.
    assert_eq!(repo.report(&run)["per_process"], 6);
    assert_eq!(of_kind(&repo.events(&run), "group_started").len(), 2);

    let repo = files(12, &[]);
    let run = refactor(&repo, "1", None, SED_ONE, &[]);
    run.assert_code(0);
    assert_eq!(repo.report(&run)["per_process"], 1);
    assert!(of_kind(&repo.events(&run), "group_started").is_empty());
    assert_eq!(count(&statuses(&repo.report(&run)), "merged"), 12);

    // `SWARM_FILES` in the command's text but not expanded: a command of one file still.
    let repo = files(12, &[]);
    let quoted = format!("echo 'no $SWARM_FILES here' >/dev/null; {SED_ONE}");
    let run = refactor(&repo, "1", None, &quoted, &[]);
    run.assert_code(0);
    assert_eq!(repo.report(&run)["per_process"], 1);
    assert_eq!(count(&statuses(&repo.report(&run)), "merged"), 12);
}

/// A command that names `$SWARM_FILE` and runs a tool that takes a list gets a hint with the
/// list form at plan time; the list form, or a few tasks, get none. The command runs as given.
#[test]
fn the_one_file_form_of_a_list_tool_is_told_its_list_form() {
    let repo = files(24, &[]);
    let run = repo.swarm(&["refactor", "x", "*.txt", "--exec", SED_ONE]);
    run.assert_code(0);
    let hint = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("hint: "))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(hint.starts_with("sed takes a list of files"), "{hint}");
    assert!(hint.contains("each of the 24 tasks"), "{hint}");
    assert!(
        hint.ends_with(r#"--exec 'sed -i '\''s/foo/bar/'\'' $SWARM_FILES'"#),
        "{hint}"
    );
    // The run used the one-file form as asked: a process per task.
    assert_eq!(repo.report(&run)["per_process"], 1);
    let listed = files(24, &[]);
    let run = listed.swarm(&["refactor", "x", "*.txt", "--exec", SED_LIST]);
    run.assert_code(0);
    assert!(!run.stderr.contains("hint: "), "{}", run.stderr);
    let few = files(3, &[]);
    let run = few.swarm(&["refactor", "x", "*.txt", "--exec", SED_ONE]);
    run.assert_code(0);
    assert!(!run.stderr.contains("hint: "), "{}", run.stderr);
}
