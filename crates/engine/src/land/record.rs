//! `land.json` in the run's directory: the groups of `swarm land`, their branches, and what
//! became of each (checked, pushed, its pull request). Written after every step, so a land
//! cut off anywhere (a crash, the network) goes on from there when run again. It holds no
//! token, ever.

use std::path::PathBuf;

use git2::Oid;
use serde::{Deserialize, Serialize};

use super::forge::{ForgeKind, PrState, PullRequest};
use crate::ids::{RunId, TaskId, oid_hex};
use crate::repo_path::RepoPath;
use crate::state::{self, RunDir};

const SCHEMA_VERSION: u32 = 1;

/// Where the groups' requests are opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgePlace {
    pub kind: ForgeKind,
    /// `owner/name` (GitLab: `group/sub/name`).
    pub repo: String,
    /// The API's base URL.
    pub api: String,
    /// The branch the requests merge into.
    pub target: String,
}

/// What `--verify-merged` found on a group's branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCheck {
    pub command: String,
    pub passed: bool,
    /// How it ended (`exit status 1`).
    pub how: String,
    pub log: PathBuf,
}

/// One group: one branch, one request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LandGroup {
    /// `NN-slug`.
    pub name: String,
    /// `swarm/<RUN-ID>/land/<name>` (derived from the name when read).
    #[serde(skip_deserializing)]
    pub branch: String,
    pub label: String,
    pub owners: Vec<String>,
    pub tasks: Vec<TaskId>,
    pub files: Vec<RepoPath>,
    /// The branch's tip, as swarm built it.
    #[serde(with = "oid_hex")]
    pub commit: Oid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<GroupCheck>,
    /// The remote the branch was pushed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<PullRequest>,
    /// What kept it back last time (its check failed, the remote branch was changed, the
    /// push or the forge failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl LandGroup {
    /// Where it is in the rollout.
    pub fn stage(&self) -> Stage {
        let check_failed = self.check.as_ref().is_some_and(|c| !c.passed);
        match &self.request {
            Some(r) => match r.state {
                PrState::Merged => Stage::Landed,
                PrState::Open => Stage::Open,
                PrState::Closed => Stage::Closed,
            },
            None if self.problem.is_some() => Stage::Held,
            None if self.pushed.is_some() => Stage::Pushed,
            None if check_failed => Stage::Held,
            None => Stage::Waiting,
        }
    }
}

/// A group's place in the burndown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Its request was merged.
    Landed,
    Open,
    /// Its request was closed without merging.
    Closed,
    /// Its branch is pushed, and no request is open for it (no `--forge`).
    Pushed,
    /// Not pushed, or not opened yet (`--max-open`).
    Waiting,
    /// Held back: its check failed, or its branch could not be pushed.
    Held,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Landed => "landed",
            Stage::Open => "open",
            Stage::Closed => "closed",
            Stage::Pushed => "pushed",
            Stage::Waiting => "waiting",
            Stage::Held => "held",
        }
    }
}

/// `land.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LandRecord {
    pub schema_version: u32,
    pub run_id: RunId,
    /// `codeowners`, `dir:N`, `files:N`.
    pub by: String,
    /// Where the groups' branches start (where the run's target was when it started).
    #[serde(with = "oid_hex")]
    pub into_start: Oid,
    /// The run's result the groups were made from.
    #[serde(with = "oid_hex")]
    pub result: Oid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge: Option<ForgePlace>,
    pub groups: Vec<LandGroup>,
}

impl LandRecord {
    pub(crate) fn new(run_id: RunId, by: String, into_start: Oid, result: Oid) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            run_id,
            by,
            into_start,
            result,
            forge: None,
            groups: Vec::new(),
        }
    }

    /// How many groups are at each stage: landed, open, closed, pushed, waiting, held.
    pub fn burndown(&self) -> [(Stage, usize); 6] {
        [
            Stage::Landed,
            Stage::Open,
            Stage::Closed,
            Stage::Pushed,
            Stage::Waiting,
            Stage::Held,
        ]
        .map(|s| (s, self.groups.iter().filter(|g| g.stage() == s).count()))
    }

    /// Has anything left this machine (a branch pushed, a request opened)?
    pub(crate) fn published(&self) -> bool {
        self.groups
            .iter()
            .any(|g| g.pushed.is_some() || g.request.is_some())
    }
}

fn path(run_dir: &RunDir) -> PathBuf {
    run_dir.path.join("land.json")
}

/// The run's land record, if it has one. Branch names are derived from the run and the
/// group names, which must have the shape swarm gives them.
pub(crate) fn load(run_dir: &RunDir) -> anyhow::Result<Option<LandRecord>> {
    let path = path(run_dir);
    if !path.exists() {
        return Ok(None);
    }
    let mut record: LandRecord = state::read_json(&path)?;
    anyhow::ensure!(
        record.schema_version == SCHEMA_VERSION,
        "{} has schema {}, not {SCHEMA_VERSION}",
        path.display(),
        record.schema_version
    );
    for group in &mut record.groups {
        anyhow::ensure!(
            well_formed(&group.name),
            "{}: `{}` is not a group name swarm gives",
            path.display(),
            group.name
        );
        group.branch = branch(&record.run_id, &group.name);
    }
    Ok(Some(record))
}

pub(crate) fn save(run_dir: &RunDir, record: &LandRecord) -> anyhow::Result<()> {
    state::write_json_atomic(&path(run_dir), record)
}

/// `swarm/<RUN-ID>/land/<name>`.
pub(crate) fn branch(run: &RunId, name: &str) -> String {
    run.branch(&crate::ids::RunBranch::Land(name.to_string()))
}

/// `NN-slug`, as [`super::group`] makes them.
fn well_formed(name: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(ok)
        && !name.starts_with(['.', '-'])
        && !name.contains("..")
        && !name.ends_with(".lock")
}

/// The log of a group's check.
pub(crate) fn check_log(run_dir: &RunDir, name: &str) -> PathBuf {
    run_dir.path.join(format!("land-{name}-verify.log"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn group_names() {
        for good in ["01-src-api", "12-org-web-ann", "3-a.b"] {
            assert!(super::well_formed(good), "{good}");
        }
        for bad in ["", "../x", "a/b", "x.lock", ".x", "a b", "a..b"] {
            assert!(!super::well_formed(bad), "{bad}");
        }
    }
}
