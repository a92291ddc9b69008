//! How running a worker's process fails, as opposed to the process failing: a process that
//! exits non-zero, times out or is killed is an [`super::process::Exit`], its task's verdict;
//! a `WorkerError` is swarm unable to run it at all. The orchestrator turns either into the
//! task's outcome; the run goes on. Each message says its cause itself, and names no
//! `source`: the task's error is written with the whole chain (`{:#}`), which would say it
//! twice.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    /// A file or folder of the task's own (its log, `TASK.md`, its result file's folder).
    #[error("cannot {doing} {}: {error}", path.display())]
    TaskFile {
        doing: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// The process could not be started.
    #[error("cannot start `{program}`: {error}")]
    Start { program: String, error: io::Error },
    /// Its confinement (the jail, its private temporary folder, the allow-list proxy, the
    /// gateway's listener, the views of its git or state) could not be set up.
    #[error("cannot confine the worker: {0:#}")]
    Sandbox(anyhow::Error),
    /// Its output pipe, or waiting for it, failed.
    #[error("lost track of the worker's process: {0}")]
    Process(io::Error),
}

impl WorkerError {
    /// A task file that could not be made or written.
    pub(crate) fn task_file(
        doing: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |error| WorkerError::TaskFile { doing, path, error }
    }
}
