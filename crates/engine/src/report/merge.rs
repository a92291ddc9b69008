//! What merge drivers did to a task's merge: each file a driver merged, or failed to.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::repo_path::RepoPath;

/// One file of a task's merge given to a merge driver (`.gitattributes`' `merge=NAME` with
/// `merge.NAME.driver` in git config, or `--merge-with`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverMerge {
    pub path: RepoPath,
    /// The driver's name (`mergiraf`, or the attribute's).
    pub driver: String,
    /// Did it merge the file (else the file was a conflict)?
    pub merged: bool,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

impl DriverMerge {
    /// A driver not run, for `why`.
    pub(crate) fn refused(path: &RepoPath, driver: &str, why: &str) -> Self {
        Self {
            path: path.clone(),
            driver: driver.to_owned(),
            merged: false,
            error: Some(format!("merge driver `{driver}` not run: {why}")),
            log: None,
        }
    }
}
