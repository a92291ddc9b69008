//! The built-in worker's head start: its turn 1 is asked while its worktree is being made.
//!
//! Turn 1's request holds the instruction, the task's files (their names) and the repository's
//! AGENTS.md: nothing of the worktree, if AGENTS.md is read from the task's start commit. So a
//! worktree's checkout (or a pooled one's reset, after the task before it committed) costs a
//! task nothing while the model thinks; at `-j 64` the 64th checkout no longer delays the
//! 64th task's first answer. It applies when nothing runs in the worktree before the worker
//! (no `[worktree] setup`, which could change what turn 1 would read) and the start commit's
//! AGENTS.md is a plain file or absent; otherwise turn 1 is asked in the worktree, as the
//! other turns are.

use std::sync::Arc;

use git2::Oid;

use super::worker_run::{Runner, open_agent};
use super::{Shared, WorkerKind};
use crate::git::FileAt;
use crate::ids::TaskIdx;
use crate::repo_path::RepoPath;
use crate::worker::llm::agent::Opening;
use crate::worker::llm::tools::text_of;

/// AGENTS.md as a start commit has it, if turn 1 can be asked with it ([`agents_md_at`]).
pub(super) type Notes = tokio::sync::OnceCell<Option<Option<String>>>;

/// The most of AGENTS.md read from the object database; a larger one is read from the
/// worktree (the model is given its first 30,000 bytes either way).
const NOTES_MAX: usize = 1 << 20;

/// Turn 1 of task `idx`'s built-in worker (`runner`'s), asked now from start commit `start`;
/// `None` where it must be asked in the worktree (an `--exec` worker, a `[worktree] setup`, an
/// AGENTS.md that is not a plain file).
pub(super) async fn open(
    shared: &Arc<Shared>,
    idx: TaskIdx,
    runner: &Runner,
    start: Oid,
    context: Option<&str>,
) -> anyhow::Result<Option<Opening>> {
    if !matches!(shared.worker, WorkerKind::Llm) || shared.settings.worktree.setup.is_some() {
        return Ok(None);
    }
    let Some(llm) = shared.model_of(runner.candidate) else {
        return Ok(None);
    };
    let read = || {
        let common = shared.common_dir.clone();
        async move { tokio::task::spawn_blocking(move || agents_md_at(&common, start)).await? }
    };
    // The base's is read once; a retry's start commit, each time.
    let notes = match start == shared.base {
        true => shared.base_notes.get_or_try_init(read).await?.clone(),
        false => read().await?,
    };
    let Some(notes) = notes else {
        return Ok(None);
    };
    let task = shared.plan.task(idx);
    let task_dir = runner.dir(shared, &task.id);
    let ask = (task.files.as_slice(), context);
    let head = (runner, task_dir.as_path(), notes.as_deref());
    open_agent(shared, &llm, idx, ask, head).await.map(Some)
}

/// AGENTS.md as commit `start` has it, as the worktree's would be read: `Some(None)` where
/// there is none; `None` where it is not a plain file of at most [`NOTES_MAX`] bytes, or its
/// checkout may not be its blob (`core.autocrlf`, an attribute of the repository's, any
/// `.gitattributes` at the commit's root).
fn agents_md_at(common: &std::path::Path, start: Oid) -> anyhow::Result<Option<Option<String>>> {
    let repo = git2::Repository::open(common)?;
    let path = RepoPath::from_bytes(b"AGENTS.md");
    let attributes = RepoPath::from_bytes(b".gitattributes");
    let autocrlf = repo.config()?.get_bool("core.autocrlf").unwrap_or(false);
    if autocrlf
        || crate::git::checkout::filters_apply(&repo, &path)
        || !matches!(
            crate::git::file_at(&repo, start, &attributes, 0)?,
            FileAt::Absent
        )
    {
        return Ok(None);
    }
    Ok(match crate::git::file_at(&repo, start, &path, NOTES_MAX)? {
        FileAt::Absent => Some(None),
        FileAt::File(bytes) => Some(text_of(bytes)),
        FileAt::Other => None,
    })
}
