//! How a run fails, typed: the command line's edge turns each into a message, a hint and an
//! exit code (`src/error.rs`), the application layer adds only what it knows (which command
//! was busy). What fails inside one task is that task's verdict, never a `RunError`.

use crate::ids::RunId;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Another swarm process holds the run's lock.
    #[error("run {run} is still running in another swarm process")]
    Busy { run: RunId },
    /// The confinement of the run's workers could not be set up (the model gateway, the
    /// allow-list proxy).
    #[error("cannot set up the workers' confinement: {0:#}")]
    Sandbox(#[source] anyhow::Error),
    /// The run's worktrees (the pool, the overlay views, the checkout watch) could not be
    /// made or read.
    #[error("the run's worktrees: {0:#}")]
    Worktree(#[source] anyhow::Error),
    /// The thread that owns the merge train stopped, or could not start.
    #[error("the merge thread: {0:#}")]
    MergeThread(#[source] anyhow::Error),
    /// A git operation of the run itself failed.
    #[error("git, while {doing}: {source}")]
    Git {
        doing: &'static str,
        #[source]
        source: git2::Error,
    },
    /// Reading or writing the run's own files failed.
    #[error("cannot {doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    /// Any other failure of swarm's own, with its chain of causes.
    #[error("{0:#}")]
    Other(#[source] anyhow::Error),
}

impl RunError {
    /// `e` as the most precise variant its chain allows: a git or I/O error at its root says
    /// so; `doing` says what the run was doing.
    pub(crate) fn classify(doing: &'static str, e: anyhow::Error) -> Self {
        if let Some(git) = e.downcast_ref::<git2::Error>() {
            return RunError::Git {
                doing,
                source: git2::Error::new(git.code(), git.class(), git.message()),
            };
        }
        match e.downcast::<std::io::Error>() {
            Ok(io) => RunError::Io {
                doing: doing.to_string(),
                source: io,
            },
            Err(e) => RunError::Other(e.context(doing)),
        }
    }

    /// A failure to write one of the run's files.
    pub(crate) fn io(doing: impl Into<String>, source: std::io::Error) -> Self {
        RunError::Io {
            doing: doing.into(),
            source,
        }
    }
}

impl RunError {
    /// What to do after a run failed part way: what it did is kept, as after Ctrl-C.
    pub fn hint(&self) -> &'static str {
        match self {
            RunError::Sandbox(_) => {
                "the workers could not be confined as asked (docs/SECURITY.md); what the run did is \
             kept: `swarm status` shows it, `swarm resume` goes on once the cause is fixed"
            }
            _ => {
                "what the run did is kept: `swarm status` shows it, `swarm resume` goes on once \
             the cause is fixed"
            }
        }
    }
}
