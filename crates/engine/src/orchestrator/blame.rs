//! Which tasks a failed process's output blames (`--per-process`): the tasks whose files it
//! names in a diagnostic ([`crate::named`]). Only the output of a process that failed is
//! read: a file named by one that exited well is not blamed.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use crate::ids::TaskIdx;
use crate::named::naming_line;
use crate::plan::Plan;

/// The most bytes of a failed process's log read for names: its end.
const READ_MOST: u64 = 1 << 20;

/// A task whose file a failed process's output named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blame {
    pub(crate) idx: TaskIdx,
    /// The line that named it, trimmed and cut.
    pub(crate) line: String,
}

/// The output of a failed process: the end of its log, or `tail` when the log cannot be read.
pub(super) fn failed_output(log: Option<&Path>, tail: &str) -> String {
    let read = |path: &Path| -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(READ_MOST)))?;
        let mut bytes = Vec::new();
        file.take(READ_MOST).read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    log.and_then(|path| read(path).ok())
        .unwrap_or_else(|| tail.to_owned())
}

/// The tasks of `tasks` whose files `output` names as a diagnostic (one of the forms above),
/// with the line that named each. None when it names more than half of them: a tool that
/// reports on every file blames no one, and halving costs less.
pub(super) fn suspects(plan: &Plan, tasks: &[TaskIdx], output: &str) -> Vec<Blame> {
    let lines: Vec<&str> = output.lines().collect();
    let named: Vec<Blame> = tasks
        .iter()
        .filter_map(|&idx| {
            let line = plan
                .task(idx)
                .files
                .iter()
                .find_map(|file| naming_line(&lines, &file.display()))?;
            Some(Blame { idx, line })
        })
        .collect();
    match named.len() * 2 <= tasks.len() {
        true => named,
        false => Vec::new(),
    }
}
