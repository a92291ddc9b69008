//! Where a run's workers get their worktrees: overlay views or full checkouts, whether a
//! worker's git gets views of its own, and where the views' layers are kept.

use crate::events::{Event, EventSink};
use crate::git::layers::{self, LayersRoot};
use crate::settings::WorktreeMode;
use crate::state;

use super::RunRequest;

const MIB: u64 = 1 << 20;

/// Do the run's workers get overlay worktrees (`--worktrees`)? Only `--exec` workers in the
/// jail can (the built-in worker's file tools, and `--repair`'s, run in swarm itself, outside
/// any jail's view), and not when the worktrees are kept for inspection (`--keep`). `auto`
/// falls back to pooled checkouts where a probe cannot mount a view, saying so in the log;
/// `overlay` was checked before the run (exit 2).
pub(crate) async fn use_views(req: &RunRequest, sink: &EventSink) -> bool {
    let settings = &req.settings;
    if settings.worktree.mode == WorktreeMode::Pool
        || settings.exec.is_none()
        || settings.repair
        || req.keep
        || !req.mode.runs_workers()
    {
        return false;
    }
    match views_unavailable(settings, &req.info.common_dir).await {
        None => true,
        Some(why) => {
            sink.emit(Event::Warning {
                task: None,
                message: format!(
                    "overlay worktrees are not available here ({why}); full checkouts are used"
                ),
            });
            false
        }
    }
}

/// Can a confined `--exec` worker's git be given copy-on-write views here (overlays mount in
/// its jail)? Asked when the worktrees are not views themselves.
pub(super) async fn git_views_work(req: &RunRequest) -> bool {
    let settings = &req.settings;
    settings.sandbox.enabled
        && settings.exec.is_some()
        && req.mode.runs_workers()
        && views_unavailable(settings, &req.info.common_dir)
            .await
            .is_none()
}

/// Why overlay worktrees cannot be used with these settings in this repository, if so.
pub(crate) async fn views_unavailable(
    settings: &crate::settings::Settings,
    common_dir: &std::path::Path,
) -> Option<String> {
    swarm_sandbox::probe_overlay(&settings.sandbox, &state::layers_dir(common_dir))
        .await
        .err()
}

/// Where the run's overlay worktrees keep their layers: in memory when every process in a
/// view only edits its task's files (a file editor run without a shell: no agent, no
/// `--verify`, no `[worktree] setup`), a tmpfs has twice the room they may take
/// ([`room_needed`]) and an overlay mounts there; else on the repository's disk.
pub(super) async fn layers_root(req: &RunRequest, per_process: usize) -> LayersRoot {
    let settings = &req.settings;
    let common_dir = &req.info.common_dir;
    let disk = LayersRoot::disk(common_dir);
    let edits_only = settings.agent.is_none()
        && settings.worktree.setup.is_none()
        && settings.verify.is_none()
        && settings
            .exec
            .as_deref()
            .is_some_and(crate::worker::edits_files_only);
    if !edits_only {
        return disk;
    }
    let sizing = std::time::Instant::now();
    let needed = match room_needed(req, per_process) {
        Ok(needed) => {
            tracing::debug!(
                "layers need {needed} bytes (sized in {:?})",
                sizing.elapsed()
            );
            needed
        }
        Err(e) => {
            tracing::debug!("layers on the disk: cannot size the tasks' files: {e:#}");
            return disk;
        }
    };
    let Some(memory) = layers::memory_root(common_dir, needed) else {
        return disk;
    };
    match swarm_sandbox::probe_overlay(&settings.sandbox, memory.path()).await {
        Ok(()) => memory,
        Err(why) => {
            tracing::debug!("layers on the disk: no overlay mounts in memory: {why}");
            let _ = std::fs::remove_dir(memory.path());
            disk
        }
    }
}

/// The most the layers of the run's views may hold at once: for each worker at a time,
/// twice the files of its process's tasks at their largest (a file, and the copy an editor
/// writes before renaming it over the first) and a mebibyte (overlayfs' own folders, a
/// tool's cache); and 64 MiB for what views keep between tasks (files git ignores).
fn room_needed(req: &RunRequest, per_process: usize) -> anyhow::Result<u64> {
    let repo = git2::Repository::open(&req.info.common_dir)?;
    let tree = repo.find_commit(req.plan.base)?.tree()?;
    let odb = repo.odb()?;
    let mut largest = 0u64;
    for task in &req.plan.tasks {
        let mut bytes = 0u64;
        for file in &task.files {
            if let Ok(entry) = tree.get_path(file.as_path()) {
                bytes += odb.read_header(entry.id())?.0 as u64;
            }
        }
        largest = largest.max(bytes);
    }
    let workers = req.settings.jobs.min(req.plan.tasks.len()).max(1) as u64;
    let per_worker = 2 * per_process as u64 * largest + MIB;
    Ok(workers * per_worker + 64 * MIB)
}
