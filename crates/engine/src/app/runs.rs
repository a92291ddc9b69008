//! The runs of a repository: finding one by id or prefix, listing them with their state, and
//! removing what a run left (`swarm status`, `swarm clean`).

use std::path::Path;

use anyhow::Context as _;

use super::error::{AppError, AppResult, Busy};
use crate::git::{finish, repo, worktree};
use crate::ids::{RunId, RunSelector};
use crate::report::{Report, RunState};
use crate::state::{self, RunDir};

/// A full run id, from an id or a unique prefix of one.
pub fn resolve(common_dir: &Path, wanted: &RunSelector) -> AppResult<RunId> {
    let ids = state::list_runs(common_dir)?;
    if let Some(id) = wanted.exact().filter(|id| ids.contains(id)) {
        return Ok(id);
    }
    let matches: Vec<&RunId> = ids.iter().filter(|id| wanted.matches(id)).collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(AppError::NoSuchRun(wanted.to_string())),
        _ => Err(AppError::AmbiguousRun {
            selector: wanted.to_string(),
            count: matches.len(),
        }),
    }
}

/// The state to show: a report that says "running" while no process holds the run's lock
/// belongs to a run that was interrupted (a crash, `kill -9`).
pub fn effective_state(run_dir: &RunDir, state: RunState) -> RunState {
    match state {
        RunState::Running if run_dir.is_running() => RunState::Running,
        RunState::Running | RunState::Interrupted => RunState::Interrupted,
        RunState::Finished => RunState::Finished,
    }
}

/// One run in the list: its report, with the state it is really in (`None`: unreadable).
pub struct Listed {
    pub id: RunId,
    pub report: Option<Report>,
}

/// Every run of the repository at `cwd`, oldest first.
pub fn list(cwd: &Path) -> AppResult<Vec<Listed>> {
    let info = repo::discover(cwd)?;
    let ids = state::list_runs(&info.common_dir)?;
    Ok(ids
        .into_iter()
        .map(|id| {
            let run_dir = RunDir::new(&info.common_dir, &id);
            let report = run_dir.load_report().ok().map(|mut r| {
                r.state = effective_state(&run_dir, r.state);
                r
            });
            Listed { id, report }
        })
        .collect())
}

/// The process running run `wanted`, if one holds it now (its pid, from `owner.json`).
pub fn owner(cwd: &Path, wanted: &RunSelector) -> AppResult<Option<(RunId, u32)>> {
    let info = repo::discover(cwd)?;
    let id = resolve(&info.common_dir, wanted)?;
    let run_dir = RunDir::new(&info.common_dir, &id);
    if !run_dir.is_running() {
        return Ok(None);
    }
    let owner: state::Owner = state::read_json(&run_dir.owner())?;
    Ok(Some((id, owner.pid)))
}

/// The events of run `wanted` from the `after`-th on (0: from the first), at most `limit`,
/// each a JSON line as `events.jsonl` holds it; and how many there are so far, the cursor of
/// the next poll.
pub fn events(
    cwd: &Path,
    wanted: &RunSelector,
    after: usize,
    limit: usize,
) -> AppResult<(Vec<String>, usize)> {
    use std::io::BufRead as _;
    let info = repo::discover(cwd)?;
    let id = resolve(&info.common_dir, wanted)?;
    let path = RunDir::new(&info.common_dir, &id).events();
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e.into()),
    };
    let mut lines = Vec::new();
    let mut count = 0;
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if count >= after && lines.len() < limit {
            lines.push(line);
        }
        count += 1;
    }
    Ok((lines, count.min(after + limit)))
}

/// One run's report, with the state it is really in.
pub fn show(cwd: &Path, wanted: &RunSelector) -> AppResult<Report> {
    let info = repo::discover(cwd)?;
    let id = resolve(&info.common_dir, wanted)?;
    let run_dir = RunDir::new(&info.common_dir, &id);
    let mut report = run_dir.load_report()?;
    report.state = effective_state(&run_dir, report.state);
    Ok(report)
}

/// Puts right what a swarm process killed while it held run `id` left: locks on the run's
/// branches, a final update of the checkout cut off half way ([`crate::git::checkout::interrupted`]).
/// Takes the run's lock for it, and gives it to the caller with what it did (no lock: the
/// run has no records).
pub(crate) fn recover_killed(
    info: &repo::RepoInfo,
    id: &RunId,
    doing: Busy,
) -> AppResult<(Option<state::RunLock>, Vec<String>)> {
    use crate::git::checkout::interrupted;
    let run_dir = RunDir::new(&info.common_dir, id);
    let Some(lock) = (match run_dir.path.is_dir() {
        true => state::RunLock::try_acquire(&run_dir)?,
        false => return Ok((None, Vec::new())),
    }) else {
        return Err(AppError::RunBusy {
            run: id.clone(),
            doing,
        });
    };
    let mut said: Vec<String> = interrupted::clear_branch_locks(&info.common_dir, id)
        .into_iter()
        .map(|lock| {
            format!(
                "removed {}, left by a swarm that was killed",
                lock.strip_prefix(&info.common_dir)
                    .unwrap_or(&lock)
                    .display()
            )
        })
        .collect();
    let repo = info.open()?;
    let staging = run_dir.path.join("checkout");
    said.extend(interrupted::recover_update(&repo, &info.git_dir, &staging)?);
    Ok((Some(lock), said))
}

/// Which runs to clean.
pub enum CleanTarget {
    One(RunSelector),
    All,
}

/// What cleaning removed, and the runs it left alone (in progress).
pub struct Cleaned {
    pub worktrees: usize,
    pub branches: usize,
    pub records: usize,
    pub busy: Vec<RunId>,
    /// Temporary directories of swarm processes that were killed (sockets, workers' files).
    pub scratch: usize,
    /// What killed runs left in the repository and was put right.
    pub recovered: Vec<String>,
}

/// Removes a run's (or every run's) worktrees, `swarm/<RUN-ID>/*` branches and state,
/// including what a crashed run left; runs in progress are refused (one) or left alone (all).
pub fn clean(cwd: &Path, target: CleanTarget) -> AppResult<Cleaned> {
    let info = repo::discover(cwd)?;
    let common = &info.common_dir;
    let run_id: Option<RunId> = match &target {
        // A run whose state is gone may still have branches or worktrees: a whole id is
        // accepted even without a run directory.
        CleanTarget::One(wanted) => Some(match wanted.exact() {
            Some(id) => id,
            None => resolve(common, wanted)?,
        }),
        CleanTarget::All => None,
    };
    let runs: Vec<RunId> = match &run_id {
        Some(id) => vec![id.clone()],
        None => state::list_runs(common)?,
    };
    let (busy, runs): (Vec<RunId>, Vec<RunId>) = runs
        .into_iter()
        .partition(|id| RunDir::new(common, id).is_running());
    if let (Some(id), [_]) = (&run_id, busy.as_slice()) {
        return Err(AppError::RunBusy {
            run: id.clone(),
            doing: Busy::Clean,
        });
    }
    // A checkout a killed run left half updated is put back before its records go.
    let mut recovered = Vec::new();
    for id in &runs {
        recovered.extend(recover_killed(&info, id, Busy::Clean)?.1);
    }
    let (worktrees, branches) = match &run_id {
        Some(id) => (
            worktree::remove_run_worktrees(common, id)?,
            finish::branches_under(common, &id.branch_prefix())?,
        ),
        None => {
            // Everything of swarm's but what belongs to runs in progress.
            let branches = finish::branches_under(common, crate::ids::BRANCH_NAMESPACE)?
                .into_iter()
                .filter(|name| !busy.iter().any(|b| name.starts_with(&b.branch_prefix())))
                .collect();
            let kept = worktree::remove_kept_base(common)?;
            (
                worktree::remove_run_worktrees_except(common, &busy)? + usize::from(kept),
                branches,
            )
        }
    };
    let deleted = finish::delete_branches(common, &branches);
    remove_launch_logs(common, &runs, run_id.is_none(), &busy);
    let mut records = 0;
    for id in &runs {
        if state::remove_owned(common, &RunDir::new(common, id).path)? {
            records += 1;
        }
    }
    // What runs moved aside for a process of their own to delete, if it has not yet; what
    // cannot be removed is said, not passed over.
    state::empty_trash(common).context("swarm clean could not remove everything")?;
    if let (0, 0, 0, Some(id)) = (records, worktrees, deleted, &run_id) {
        return Err(AppError::NothingToClean(id.clone()));
    }
    Ok(Cleaned {
        worktrees,
        branches: deleted,
        records,
        busy,
        scratch: swarm_sandbox::scratch::sweep(&std::env::temp_dir()),
        recovered,
    })
}

/// The logs `swarm mcp` kept of the runs it started (`.git/swarm/mcp/<RUN-ID>-…`) go with
/// their runs; with `--all`, so do those of launches that never started one.
fn remove_launch_logs(common: &Path, runs: &[RunId], all: bool, busy: &[RunId]) {
    let Ok(entries) = std::fs::read_dir(common.join("swarm").join("mcp")) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let of = |id: &RunId| name.starts_with(&format!("{id}-"));
        if runs.iter().any(of) || (all && !busy.iter().any(of)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
