//! Workers: what edits a task's files in its worktree.
//!
//! - [`exec`]: an external command (`--exec`).
//! - [`llm`]: the built-in coding agent over an OpenAI-compatible API.
//! - [`process`]: running a command as a confined, time-limited process group (workers,
//!   `--verify`, worktree setup).

pub(crate) mod agent_output;
pub(crate) mod check_writes;
pub(crate) mod diagnose;
mod direct;
mod error;
pub(crate) mod exec;
pub(crate) mod file_vars;
pub(crate) mod list_form;
pub(crate) mod llm;
mod no_git;
pub(crate) use no_git::edits_files_only;
pub(crate) mod own;
pub(crate) mod process;

pub(crate) use direct::is_shell_word;
pub(crate) use error::WorkerError;

/// How a worker ended, before swarm looks at the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Finished well (whether it changed anything is decided by the commit).
    Done,
    /// Finished and said nothing needed changing.
    NoChange,
    Failed(String),
    /// The worker's command exited with this status, not one of `--ok-exit-codes`.
    Exited(i32),
    Timeout(String),
    Interrupted,
    /// Stopped because the run's budget was spent (why).
    OverBudget(String),
}

impl Verdict {
    /// In words, for an error message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Verdict::Done => "done".into(),
            Verdict::NoChange => "no change".into(),
            Verdict::Failed(why) | Verdict::Timeout(why) | Verdict::OverBudget(why) => why.clone(),
            Verdict::Exited(code) => format!("{}{code}", crate::report::groups::EXITED),
            Verdict::Interrupted => "interrupted".into(),
        }
    }
}

/// `program` as the shell would find it on PATH.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let runnable = |p: &std::path::Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = std::path::PathBuf::from(program);
        return runnable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| runnable(p))
}
