//! `swarm report`: the run's page, written where asked, with the report's counts and its
//! hostile text escaped; opened in a real browser (Debian's Chromium, headless) where its
//! script filters, groups and shows diffs as the report says; and the pager of `swarm diff`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{TestRepo, count, statuses, swarm_on_a_terminal};

/// What every worker prints: a page that ran it would have a new title.
const HOSTILE_OUTPUT: &str = "</script><img src=x onerror=\"document.title=1\">";

/// Eight files, two of which the command fails on the same way, one with a name that is
/// markup; every other gets `old` replaced.
fn run_with_failures(extra: &[&str]) -> (TestRepo, crate::common::Run) {
    let mut files: Vec<(String, String)> = (1..=6)
        .map(|i| (format!("src/f{i}.txt"), format!("old value {i}\n")))
        .collect();
    files.push(("src/bad1.txt".into(), "old\n".into()));
    files.push(("src/bad2.txt".into(), "old\n".into()));
    files.push(("src/<b>tag.txt".into(), "old tag\n".into()));
    let repo = TestRepo::with_files(&files);
    let exec = format!(
        "echo '{HOSTILE_OUTPUT}'; case \"$SWARM_FILE\" in *bad*) echo \"error: cannot parse $SWARM_FILE\" >&2; exit 3;; esac; sed -i s/old/new/ \"$SWARM_FILE\""
    );
    let mut args = vec!["refactor", "old to new", "src", "-j", "2", "--exec", &exec];
    args.extend(extra);
    let run = repo.swarm(&args);
    run.assert_code(1);
    (repo, run)
}

/// The JSON the page carries, read back out of it as the page's script reads it.
fn page_data(html: &str) -> serde_json::Value {
    let start = html
        .find(r#"<script type="application/json" id="data">"#)
        .unwrap();
    let rest = &html[start..];
    let body = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    serde_json::from_str(body).unwrap()
}

#[test]
fn the_page_holds_the_report_and_no_text_of_a_worker_can_end_its_script() {
    let (repo, run) = run_with_failures(&[]);
    let id = run.run_id();
    // Default: report.html in the run's directory, its path on stdout.
    let written = repo.swarm(&["report", &id]);
    written.assert_code(0);
    let path = PathBuf::from(written.stdout.trim());
    assert_eq!(
        path,
        repo.swarm_dir().join("runs").join(&id).join("report.html")
    );
    let html = std::fs::read_to_string(&path).unwrap();

    // Offline: no address of anywhere else, and a policy that forbids loading one.
    assert!(html.contains("default-src 'none'"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    // Two scripts, each closed once: the worker's `</script>` is escaped inside the data.
    assert_eq!(html.matches("</script>").count(), 2);
    assert!(!html.contains("<img src=x"));
    assert!(!html.contains("<b>tag"));

    let data = page_data(&html);
    let report = repo.report(&run);
    assert_eq!(data["report"]["totals"], report["totals"]);
    assert_eq!(data["report"]["totals"]["failed"], 2);
    let task = data["report"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["status"] == "merged")
        .unwrap();
    assert!(
        task["output_tail"]
            .as_str()
            .unwrap()
            .contains(HOSTILE_OUTPUT)
    );
    // The two failures are one group, with its next step: each one's output names its file.
    let groups = data["extra"]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0]["tasks"].as_array().unwrap().len(), 2);
    assert!(
        groups[0]["next"]
            .as_str()
            .unwrap()
            .contains("fix those files")
    );
    // Every merged task's diff, as git shows it.
    let diffs = data["extra"]["diffs"].as_array().unwrap();
    let merged = count(&statuses(&report), "merged");
    assert_eq!(diffs.iter().filter(|d| !d.is_null()).count(), merged);
    // The timeline has a bar for every task's attempt.
    let segments = data["extra"]["timeline"]["segments"].as_array().unwrap();
    assert_eq!(segments.len(), report["tasks"].as_array().unwrap().len());

    // -o FILE and -o - write the same page.
    let out = repo.root().join("page.html");
    repo.swarm(&["report", &id[..12], "-o", out.to_str().unwrap()])
        .assert_code(0);
    let stdout = repo.swarm(&["report", &id, "-o", "-"]);
    stdout.assert_code(0);
    let (a, b) = (std::fs::read_to_string(&out).unwrap(), stdout.stdout);
    assert_eq!(page_data(&a)["report"], page_data(&b)["report"]);
    // A run that is not there: exit 2, nothing written.
    let missing = repo.swarm(&["report", "20990101-000000-0000"]);
    missing.assert_code(2);
    assert!(missing.stdout.is_empty());
}

#[test]
fn refactor_report_writes_the_page_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("page.html");
    let (repo, run) = run_with_failures(&["--report", out.to_str().unwrap()]);
    let line = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("report page: "))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert_eq!(Path::new(line), out);
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(page_data(&html)["report"]["run_id"], run.run_id());
    // The page is not part of the repository's change.
    assert!(
        repo.git(&["status", "--porcelain", "--untracked-files=no"])
            .is_empty()
    );
}

/// The pager runs on a terminal and not on a pipe.
#[test]
fn swarm_diff_pages_on_a_terminal_only() {
    let (repo, run) = run_with_failures(&[]);
    let id = run.run_id();
    let paged = repo.root().join("paged.txt");
    let pager = format!("cat > '{}'", paged.display());
    // On a pipe: straight to stdout, the pager never started.
    let mut cmd = repo.swarm_cmd();
    cmd.env("SWARM_PAGER", &pager).args(["diff", &id]);
    let piped = cmd.output().unwrap();
    assert!(piped.status.success());
    assert!(String::from_utf8_lossy(&piped.stdout).contains("+new value 1"));
    assert!(!paged.exists());
    // On a terminal: through the pager, which gets the whole diff.
    let quoted = format!("SWARM_PAGER={}", shell_quote(&pager));
    let on_tty = swarm_on_a_terminal(&repo, &["--color", "never", "diff", &id], "");
    on_tty.assert_code(0);
    assert!(
        !paged.exists(),
        "PAGER=cat (the tests' default) pages nothing"
    );
    let script = format!(
        "{quoted} {} diff {id}",
        shell_quote(env!("CARGO_BIN_EXE_swarm"))
    );
    let mut cmd = Command::new("script");
    crate::common::hermetic(&mut cmd, &repo.home);
    let out = cmd
        .args(["-q", "-e", "-c", &script, "/dev/null"])
        .current_dir(&repo.path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&paged).unwrap();
    assert!(text.contains("+new value 1"), "{text}");
    assert!(text.contains("diff --git"), "{text}");
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Debian's Chromium, from `SWARM_TEST_CHROMIUM` (`.ci/run` installs it).
fn chromium() -> PathBuf {
    PathBuf::from(
        std::env::var_os("SWARM_TEST_CHROMIUM").expect(
            "SWARM_TEST_CHROMIUM names Chromium (apt-get install chromium; .ci/run does it)",
        ),
    )
}

/// Chromium, headless, with no network and a profile of its own in `dir`, on `url`: with
/// `screenshot`, the picture it takes; else the page's DOM once its script has run.
fn browse(dir: &Path, url: &str, screenshot: Option<&Path>) -> String {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--virtual-time-budget=5000",
        "--window-size=1280,1400",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()));
    match screenshot {
        Some(png) => cmd.arg(format!("--screenshot={}", png.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out = cmd.arg(url).output().expect("Chromium starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The values of attribute `attr` on the elements of `dom` that have it.
fn attrs<'a>(dom: &'a str, attr: &str) -> Vec<&'a str> {
    let needle = format!(" {attr}=\"");
    dom.match_indices(&needle)
        .map(|(at, _)| {
            let rest = &dom[at + needle.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

#[test]
#[ignore = "needs Chromium: SWARM_TEST_CHROMIUM (.ci/run installs Debian's)"]
fn the_page_in_a_real_browser_filters_groups_and_shows_diffs_as_the_report_says() {
    let (repo, run) = run_with_failures(&[]);
    let id = run.run_id();
    let page = repo.root().join("page.html");
    repo.swarm(&["report", &id, "-o", page.to_str().unwrap()])
        .assert_code(0);
    let report = repo.report(&run);
    let tasks = report["tasks"].as_array().unwrap();
    let url = format!("file://{}", page.display());

    // The whole run: its script ran, every task listed, a chip per outcome with its count.
    let dom = browse(repo.root(), &url, None);
    assert!(
        !attrs(&dom, "data-ready").is_empty(),
        "the script did not finish"
    );
    assert!(
        dom.contains(&format!("<title>swarm run {id}</title>")),
        "a worker's markup ran"
    );
    assert_eq!(attrs(&dom, "data-task").len(), tasks.len());
    let merged = count(&statuses(&report), "merged");
    assert!(dom.contains(&format!("{merged} merged</button>")), "{dom}");
    assert!(dom.contains("2 failed</button>"), "{dom}");
    assert!(
        dom.contains("&lt;/script&gt;&lt;img src=x"),
        "the output shows as text"
    );
    // The failures grouped: one group of two, its reason and next step.
    assert_eq!(attrs(&dom, "data-group"), ["0"]);
    assert!(dom.contains("2 task(s)</strong>"), "{dom}");
    assert!(dom.contains("the worker exited with status 3"), "{dom}");
    assert!(dom.contains("fix those files and run the change"), "{dom}");

    // A filter: only the failed tasks, as the report has them.
    let dom = browse(repo.root(), &format!("{url}#status=failed"), None);
    let failed: Vec<&str> = tasks
        .iter()
        .filter(|t| t["status"] == "failed")
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    let rows: Vec<&str> = attrs(&dom, "data-task");
    assert_eq!(rows, failed);
    assert_eq!(attrs(&dom, "data-matching"), ["2"]);
    // A search by path.
    let dom = browse(repo.root(), &format!("{url}#q=f3.txt"), None);
    assert_eq!(attrs(&dom, "data-matching"), ["1"]);

    // A merged task opened: its diff, rendered.
    let task = tasks
        .iter()
        .find(|t| t["files"][0] == "src/f2.txt")
        .unwrap();
    let task_id = task["id"].as_str().unwrap();
    let dom = browse(repo.root(), &format!("{url}#task={task_id}"), None);
    assert_eq!(attrs(&dom, "data-detail"), [task_id]);
    assert!(
        dom.contains(r#"<span class="del">-old value 2</span>"#),
        "{dom}"
    );
    assert!(
        dom.contains(r#"<span class="add">+new value 2</span>"#),
        "{dom}"
    );

    // A picture of it, kept for a person to look at.
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-page");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("report.png");
    let _ = std::fs::remove_file(&png);
    browse(repo.root(), &url, Some(&png));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000);
}
