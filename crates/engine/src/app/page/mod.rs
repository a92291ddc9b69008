//! `swarm report`: a run as one self-contained HTML page (docs/USAGE.md, "The report page"):
//! its counts, a timeline of the worker slots, the failures grouped by reason, every task with
//! its diff, output and checks, and the land groups. Nothing on it is fetched: the data is
//! JSON inside the page and the page's script draws it, so it opens from a file, a CI
//! artifact, a mail.
//!
//! Everything on it comes from workers, models and forges, and is treated as such: the data
//! is escaped into a script element that never runs, the script puts text into the page as
//! text only, and the page's own policy forbids every load from elsewhere.

mod html;
mod timeline;

use std::path::{Path, PathBuf};

use git2::Repository;
use serde::Serialize;

use super::error::AppResult;
use super::{diff, runs};
use crate::git::repo;
use crate::ids::RunSelector;
use crate::land::record::{self, LandRecord};
use crate::report::{Report, groups};
use crate::state::RunDir;

use timeline::Timeline;

/// The most of one task's patch the page holds; `swarm diff RUN TASK` shows the rest.
const PATCH_CAP: usize = 64 * 1024;
/// The most of all patches together, so a run of many large changes stays a page a browser
/// opens: the tasks past it show their diffstat only.
const PATCHES_CAP: usize = 48 * 1024 * 1024;

/// A page written.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub bytes: usize,
    pub tasks: usize,
}

/// The page of run `wanted`, as bytes.
pub fn render(cwd: &Path, wanted: &RunSelector) -> AppResult<(Report, Vec<u8>)> {
    let (_, report, page) = render_in(cwd, wanted)?;
    Ok((report, page))
}

/// The page of run `wanted`, with the run's directory.
fn render_in(cwd: &Path, wanted: &RunSelector) -> AppResult<(RunDir, Report, Vec<u8>)> {
    let info = repo::discover(cwd)?;
    let id = runs::resolve(&info.common_dir, wanted)?;
    let run_dir = RunDir::new(&info.common_dir, &id);
    let mut report = run_dir.load_report()?;
    report.state = runs::effective_state(&run_dir, report.state);
    let repo = Repository::open(&info.common_dir)?;
    let data = gather(&repo, &run_dir, &report)?;
    let page = html::page(&report, &data)?;
    Ok((run_dir, report, page))
}

/// Writes the page of run `wanted` to `out`, or into the run's directory as `report.html`.
/// The file is replaced whole (a reader never sees half of it; a link there is replaced, not
/// followed).
pub fn write(cwd: &Path, wanted: &RunSelector, out: Option<&Path>) -> AppResult<Written> {
    let (run_dir, report, page) = render_in(cwd, wanted)?;
    let path = out.map_or_else(|| run_dir.page(), Path::to_path_buf);
    crate::state::write_atomic(&path, &page)?;
    Ok(Written {
        path,
        bytes: page.len(),
        tasks: report.tasks.len(),
    })
}

/// What the page shows besides the report.
#[derive(Serialize)]
struct Extra<'a> {
    swarm: &'static str,
    generated_at: String,
    timeline: Timeline,
    groups: Vec<Group>,
    /// Each task's change, by its index; `None` for a task with no commit.
    diffs: Vec<Option<TaskDiff>>,
    land: Option<Land<'a>>,
}

/// A group of tasks that failed the same way ([`groups`]).
#[derive(Serialize)]
struct Group {
    status: &'static str,
    reason: String,
    tasks: Vec<usize>,
    files: String,
    next: String,
}

#[derive(Serialize)]
struct TaskDiff {
    stat: String,
    /// The patch, or as much of it as the page holds.
    patch: Option<String>,
    /// Was the patch cut (or left out)?
    cut: bool,
}

#[derive(Serialize)]
struct Land<'a> {
    record: &'a LandRecord,
    /// Each group's stage, by index.
    stages: Vec<&'static str>,
}

fn gather(repo: &Repository, run_dir: &RunDir, report: &Report) -> AppResult<Vec<u8>> {
    let timeline = timeline::read(&run_dir.events(), report)?;
    let index: std::collections::HashMap<&str, usize> = report
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let run = report.run_id.as_str();
    let groups = groups::groups(report)
        .iter()
        .map(|g| Group {
            status: g.status.as_str(),
            reason: g.reason.clone(),
            tasks: g.tasks.iter().map(|t| index[t.id.as_str()]).collect(),
            files: groups::first_files(g),
            next: groups::next_step(g, run),
        })
        .collect();
    let record = record::load(run_dir)?;
    let extra = Extra {
        swarm: env!("CARGO_PKG_VERSION"),
        generated_at: crate::state::now_rfc3339(),
        timeline,
        groups,
        diffs: diffs(repo, report)?,
        land: record.as_ref().map(|record| Land {
            record,
            stages: record.groups.iter().map(|g| g.stage().as_str()).collect(),
        }),
    };
    Ok(serde_json::to_vec(&extra)?)
}

/// Each task's change, its patch cut at [`PATCH_CAP`] and left out past [`PATCHES_CAP`].
fn diffs(repo: &Repository, report: &Report) -> AppResult<Vec<Option<TaskDiff>>> {
    let mut budget = PATCHES_CAP;
    let mut out = Vec::with_capacity(report.tasks.len());
    for task in &report.tasks {
        let (Some(start), Some(commit)) = (task.start, task.commit) else {
            out.push(None);
            continue;
        };
        // A commit gone (collected, a shard's record from elsewhere) is a task without a diff.
        let Ok(changes) = diff::between(repo, start, commit) else {
            out.push(None);
            continue;
        };
        let whole = changes.patch.len();
        let keep = whole.min(PATCH_CAP).min(budget);
        budget -= keep;
        let patch =
            (keep > 0).then(|| String::from_utf8_lossy(&changes.patch[..keep]).into_owned());
        out.push(Some(TaskDiff {
            stat: changes.stat,
            patch,
            cut: keep < whole,
        }));
    }
    Ok(out)
}
