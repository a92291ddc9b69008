//! Run and task identifiers: the only strings swarm turns into paths and ref names.
//!
//! A run id names a directory under `.git/swarm/runs/`, the run's worktrees and the branch
//! namespace `swarm/<RUN-ID>/`; a task id names a directory of its run and a branch. Both are
//! parsed once, where they enter (command-line arguments, plan files, reports, shard records,
//! directory names), into types that cannot hold anything else: no `/`, no `.`, nothing
//! absolute, nothing empty. A path or ref name built from them therefore stays where swarm
//! put it, whatever a plan file or an argument says.
//!
//! - [`RunId`]: `YYYYMMDD-HHMMSS-xxxx` (UTC start time, 4 hex digits), exactly.
//! - [`TaskId`]: 1 to 64 characters `a-z`, `0-9` and single `-` between them (so `..`, `/`
//!   and `.` are impossible), and none of the names of a run's own branches
//!   ([`RunBranch`]).
//! - [`RunSelector`]: what a user types for a run: a full id or a prefix of one.
//! - [`TaskIdx`]: a task's position in its plan and in its run's report.
//! - commit ids are `git2::Oid`, written as 40 hex digits ([`oid_hex`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The grammar of run ids, for error messages.
pub(crate) const RUN_ID_GRAMMAR: &str = "YYYYMMDD-HHMMSS-xxxx (digits, then 4 hex digits), e.g. 20261121-133952-5a75, or a prefix of one";
/// The grammar of task ids, for error messages.
pub(crate) const TASK_ID_GRAMMAR: &str = "1 to 64 characters a-z, 0-9 and single '-' between them (e.g. src-a-py-2c8ce989), not result, verify, repair, shard-K-of-N";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("'{0}' is not a run id: run ids look like {RUN_ID_GRAMMAR}")]
    Run(String),
    #[error("'{0}' is not a task id: task ids are {TASK_ID_GRAMMAR}")]
    Task(String),
}

/// Every branch swarm makes lives under this prefix, and no user branch may (`--into`).
pub(crate) const BRANCH_NAMESPACE: &str = "swarm/";

/// A run's id: `YYYYMMDD-HHMMSS-xxxx`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

/// The shape of a run id, position by position.
fn run_id_char_ok(pos: usize, c: u8) -> bool {
    match pos {
        8 | 15 => c == b'-',
        0..=14 => c.is_ascii_digit(),
        16..=19 => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        _ => false,
    }
}

const RUN_ID_LEN: usize = 20;

impl RunId {
    /// A new run id: the UTC start time to the second, then 4 hex digits, so ids sort by
    /// start time and two runs started in the same second still differ.
    pub fn new_now() -> Self {
        let now = jiff::Timestamp::now();
        let noise = (u64::from(now.subsec_nanosecond().unsigned_abs())
            ^ (u64::from(std::process::id()) << 7))
            & 0xffff;
        Self(format!("{}-{noise:04x}", now.strftime("%Y%m%d-%H%M%S")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `swarm/<RUN-ID>/`: every branch of the run starts with this.
    pub fn branch_prefix(&self) -> String {
        format!("{BRANCH_NAMESPACE}{}/", self.0)
    }

    /// The short name of one of the run's branches.
    pub fn branch(&self, which: &RunBranch) -> String {
        format!("{BRANCH_NAMESPACE}{}/{}", self.0, which.name())
    }

    /// The short name of a task's branch: `swarm/<RUN-ID>/<TASK-ID>`.
    pub fn task_branch(&self, task: &TaskId) -> String {
        self.branch(&RunBranch::Task(task.clone()))
    }

    /// The branch of a task's worker: its own (`None`), or candidate K's
    /// (`swarm/<RUN-ID>/<TASK-ID>/c<K>`).
    pub fn worker_branch(&self, task: &TaskId, candidate: Option<CandidateNo>) -> String {
        match candidate {
            None => self.task_branch(task),
            Some(k) => self.branch(&RunBranch::Candidate(task.clone(), k)),
        }
    }
}

impl FromStr for RunId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, IdError> {
        let ok =
            s.len() == RUN_ID_LEN && s.bytes().enumerate().all(|(pos, c)| run_id_char_ok(pos, c));
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(IdError::Run(s.to_string()))
        }
    }
}

impl TryFrom<String> for RunId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        s.parse()
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// What a user types to name a run: a whole run id or a non-empty prefix of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSelector(String);

impl RunSelector {
    /// Does `id` match (is it this id, or does it start with this prefix)?
    pub fn matches(&self, id: &RunId) -> bool {
        id.as_str().starts_with(&self.0)
    }

    /// The run id itself, when the whole id was given.
    pub fn exact(&self) -> Option<RunId> {
        self.0.parse().ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&RunId> for RunSelector {
    fn from(id: &RunId) -> Self {
        Self(id.0.clone())
    }
}

impl FromStr for RunSelector {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, IdError> {
        let ok = !s.is_empty()
            && s.len() <= RUN_ID_LEN
            && s.bytes().enumerate().all(|(pos, c)| run_id_char_ok(pos, c));
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(IdError::Run(s.to_string()))
        }
    }
}

impl fmt::Display for RunSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A task's id, unique within its plan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

const TASK_ID_MAX: usize = 64;

impl TaskId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Does `s` have the shape of a task id (before the reserved names are checked)?
    fn well_formed(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= TASK_ID_MAX
            && s.split('-').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            })
    }

    /// A task id from a generated slug that may collide with a reserved name: such a slug gets
    /// a `t-` in front.
    pub(crate) fn from_generated(slug: String) -> Self {
        match slug.parse() {
            Ok(id) => id,
            Err(_) => Self(format!("t-{slug}")),
        }
    }
}

impl FromStr for TaskId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, IdError> {
        if Self::well_formed(s) && !RunBranch::is_reserved(s) {
            Ok(Self(s.to_string()))
        } else {
            Err(IdError::Task(s.to_string()))
        }
    }
}

impl TryFrom<String> for TaskId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        s.parse()
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl PartialEq<str> for TaskId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// A candidate's number within its task (`--tries`, `--best-of`): 1 to
/// [`CandidateNo::MOST`], so the branch it names is one swarm made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct CandidateNo(u32);

impl CandidateNo {
    /// The most candidates a task may get.
    pub const MOST: u32 = 8;

    pub fn get(self) -> u32 {
        self.0
    }

    /// Candidates 1 to `n` (at most the cap).
    pub fn up_to(n: u32) -> impl Iterator<Item = CandidateNo> {
        (1..=n.min(Self::MOST)).map(CandidateNo)
    }
}

impl TryFrom<u32> for CandidateNo {
    type Error = String;
    fn try_from(n: u32) -> Result<Self, String> {
        match (1..=Self::MOST).contains(&n) {
            true => Ok(Self(n)),
            false => Err(format!("{n} is not a candidate number")),
        }
    }
}

impl From<CandidateNo> for u32 {
    fn from(k: CandidateNo) -> u32 {
        k.0
    }
}

impl fmt::Display for CandidateNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A task's position in its plan, and in every report of the plan's run: `plan.tasks` and
/// `report.tasks` list the same tasks in the same order ([`crate::plan::Plan::check_report`]
/// checks a report read back from disk). Made only by [`crate::plan::Plan::indices`] and
/// [`crate::report::Report::indices`], so it is always in bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskIdx(usize);

impl TaskIdx {
    pub(crate) fn all(len: usize) -> impl DoubleEndedIterator<Item = TaskIdx> + Clone {
        (0..len).map(TaskIdx)
    }

    pub(crate) fn get(self) -> usize {
        self.0
    }
}

/// The first 10 hex digits of a commit id, for people.
pub fn short(oid: &git2::Oid) -> String {
    abbrev(oid, 10)
}

/// The first `n` hex digits of a commit id.
pub fn abbrev(oid: &git2::Oid, n: usize) -> String {
    let s = oid.to_string();
    s[..s.len().min(n)].to_string()
}

/// Commit ids (`git2::Oid`) in JSON: 40 hex digits, as git writes them.
pub(crate) mod oid_hex {
    use git2::Oid;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(oid: &Oid, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(oid)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Oid, D::Error> {
        let text = String::deserialize(d)?;
        Oid::from_str(&text)
            .map_err(|_| serde::de::Error::custom(format!("'{text}' is not a commit id")))
    }

    /// The same for `Option<Oid>` (`null` when absent).
    pub(crate) mod option {
        use git2::Oid;
        use serde::{Deserialize, Deserializer, Serializer};

        pub(crate) fn serialize<S: Serializer>(oid: &Option<Oid>, s: S) -> Result<S::Ok, S::Error> {
            match oid {
                Some(oid) => s.collect_str(oid),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Oid>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| {
                    Oid::from_str(&text).map_err(|_| {
                        serde::de::Error::custom(format!("'{text}' is not a commit id"))
                    })
                })
                .transpose()
        }
    }
}

/// Task ids separated by ", ", for messages.
pub fn join(ids: &[TaskId]) -> String {
    ids.iter()
        .map(TaskId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The branches of a run, under `swarm/<RUN-ID>/`. Only task branches are named after
/// something from outside (a [`TaskId`]); the others have fixed names that no task id can
/// take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunBranch {
    Task(TaskId),
    /// Candidate K of a task (`--tries`, `--best-of`): `<TASK-ID>/c<K>`. A task with
    /// candidates has no branch `<TASK-ID>` (git cannot hold both).
    Candidate(TaskId, CandidateNo),
    /// The integration branch the merge train builds.
    Result,
    /// The worktree that checks the merged result (`--verify-merged`).
    Verify,
    /// The worktree where the model resolves a conflict.
    Repair,
    /// The record of shard K of N (`swarm run --shard K/N`).
    Shard {
        k: usize,
        n: usize,
    },
    /// A group's branch of `swarm land`: `land/<group>`.
    Land(String),
}

impl RunBranch {
    fn name(&self) -> String {
        match self {
            RunBranch::Task(id) => id.0.clone(),
            RunBranch::Candidate(id, k) => format!("{}/c{}", id.0, k.0),
            RunBranch::Result => "result".into(),
            RunBranch::Verify => "verify".into(),
            RunBranch::Repair => "repair".into(),
            RunBranch::Shard { k, n } => format!("shard-{k}-of-{n}"),
            RunBranch::Land(group) => format!("land/{group}"),
        }
    }

    /// Is `name` one of the fixed names (so not available to tasks)?
    fn is_reserved(name: &str) -> bool {
        matches!(name, "result" | "verify" | "repair" | "land") || Self::parse_shard(name).is_some()
    }

    /// `shard-K-of-N` → (K, N).
    pub fn parse_shard(name: &str) -> Option<(usize, usize)> {
        let rest = name.strip_prefix("shard-")?;
        let (k, n) = rest.split_once("-of-")?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        if !digits(k) || !digits(n) {
            return None;
        }
        Some((k.parse().ok()?, n.parse().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_run_ids_parse() {
        let id = RunId::new_now();
        assert_eq!(id.as_str().parse::<RunId>(), Ok(id.clone()));
    }

    #[test]
    fn run_ids_are_exactly_the_generated_shape() {
        assert!("20261121-133952-5a75".parse::<RunId>().is_ok());
        for bad in [
            "",
            ".",
            "..",
            "../..",
            "/",
            "/etc",
            "20261121-133952-5a7",
            "20261121-133952-5a75/..",
            "20261121-133952-5A75",
            "20261121_133952-5a75",
            "20261121-133952-5a75-",
        ] {
            assert!(bad.parse::<RunId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn selectors_are_prefixes_of_the_shape() {
        for good in ["2026", "20261121-", "20261121-133952-5a75"] {
            assert!(good.parse::<RunSelector>().is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "/",
            "../..",
            "2026/",
            "x",
            "20261121-133952-5a75-",
        ] {
            assert!(bad.parse::<RunSelector>().is_err(), "{bad:?}");
        }
        let sel: RunSelector = "20261121".parse().unwrap();
        assert!(sel.matches(&"20261121-133952-5a75".parse().unwrap()));
        assert!(!sel.matches(&"20261122-133952-5a75".parse().unwrap()));
    }

    #[test]
    fn task_ids_cannot_be_paths_or_helper_names() {
        for good in ["src-a-py-2c8ce989", "t-1", "a", "shard-a-txt-12345678"] {
            assert!(good.parse::<TaskId>().is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../../x",
            "/etc",
            "a/b",
            "a--b",
            "-a",
            "a-",
            "A",
            "a.b",
            "result",
            "verify",
            "repair",
            "shard-1-of-2",
            "placeholder_1",
            &"a".repeat(65),
        ] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad:?}");
        }
        assert_eq!(TaskId::from_generated("result".into()).as_str(), "t-result");
    }

    #[test]
    fn branch_names() {
        let run: RunId = "20261121-133952-5a75".parse().unwrap();
        assert_eq!(
            run.branch(&RunBranch::Result),
            "swarm/20261121-133952-5a75/result"
        );
        assert_eq!(
            run.branch(&RunBranch::Shard { k: 2, n: 3 }),
            "swarm/20261121-133952-5a75/shard-2-of-3"
        );
        assert_eq!(RunBranch::parse_shard("shard-2-of-3"), Some((2, 3)));
        assert_eq!(RunBranch::parse_shard("shard-a-of-3"), None);
    }
}
