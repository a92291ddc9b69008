//! `swarm run PLAN.json [--shard K/N]`: a plan's tasks (or one shard of them) run here and
//! leave their branches and a shard record, for `swarm merge PLAN.json` to merge, here or on
//! another machine.

use std::path::Path;
use std::str::FromStr;

use super::checks;
use super::error::AppResult;
use crate::git::repo::{self, IntoTarget, RepoInfo};
use crate::git::shard;
use crate::ids::{RunBranch, RunId};
use crate::orchestrator::{RunMode, RunRequest};
use crate::plan;
use crate::report::TaskStatus;
use crate::settings::Layer;
use crate::state::RunDir;

/// Shard K of N of a plan: the tasks at positions K, K+N, K+2N… (1-based), the same on every
/// machine since the plan is one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub k: usize,
    pub n: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("'{s}' is not a shard: use K/N with 1 <= K <= N, e.g. 2/4");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if k == 0 || n == 0 || k > n {
            return Err(bad());
        }
        Ok(Self { k, n })
    }
}

/// `--shard`: a shard given as K/N, or `auto` (`auto/N`): the index (and count) read from
/// the CI's own variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardSpec {
    Given(Shard),
    /// `auto`, with the count when the CI does not give it (a Kubernetes Indexed Job).
    Auto(Option<usize>),
}

impl FromStr for ShardSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            _ if s == "auto" => Ok(Self::Auto(None)),
            Some(("auto", n)) => match n.trim().parse() {
                Ok(n) if n > 0 => Ok(Self::Auto(Some(n))),
                _ => Err(format!(
                    "'{s}' is not a shard: use auto/N with N >= 1, e.g. auto/4"
                )),
            },
            _ => s.parse().map(Self::Given),
        }
    }
}

impl ShardSpec {
    /// The shard, reading `auto`'s index and count from the CI's variables (`var`): GitLab's
    /// `CI_NODE_INDEX`/`CI_NODE_TOTAL` (`parallel:`, 1-based), Buildkite's
    /// `BUILDKITE_PARALLEL_JOB`/`BUILDKITE_PARALLEL_JOB_COUNT` (0-based), a Kubernetes Indexed
    /// Job's `JOB_COMPLETION_INDEX` (0-based; the count given as `auto/N`).
    pub fn resolve(self, var: impl Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let given = match self {
            Self::Given(shard) => return Ok(shard),
            Self::Auto(n) => n,
        };
        let number = |name: &str| -> Result<Option<usize>, String> {
            match var(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={v} is not a number")),
            }
        };
        // (index, 1-based?, count)
        let found = if let Some(k) = number("CI_NODE_INDEX")? {
            Some((k, true, number("CI_NODE_TOTAL")?))
        } else if let Some(k) = number("BUILDKITE_PARALLEL_JOB")? {
            Some((k, false, number("BUILDKITE_PARALLEL_JOB_COUNT")?))
        } else {
            number("JOB_COMPLETION_INDEX")?.map(|k| (k, false, None))
        };
        let Some((index, one_based, count)) = found else {
            return Err(
                "no CI variable says which shard this is (GitLab's CI_NODE_INDEX, \
                        Buildkite's BUILDKITE_PARALLEL_JOB, a Kubernetes Indexed Job's \
                        JOB_COMPLETION_INDEX)"
                    .into(),
            );
        };
        let n = match (count, given) {
            (Some(c), Some(n)) if c != n => {
                return Err(format!(
                    "the CI runs {c} shards, not the {n} of --shard auto/{n}"
                ));
            }
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => {
                return Err("the CI does not say how many shards there are: pass \
                            --shard auto/N"
                    .into());
            }
        };
        let k = if one_based { index } else { index + 1 };
        if k == 0 || k > n {
            return Err(format!("shard {k} of {n} does not exist"));
        }
        Ok(Shard { k, n })
    }
}

impl Shard {
    /// Is the task at `position` (0-based) of the plan in this shard?
    pub fn has(self, position: usize) -> bool {
        position % self.n == self.k - 1
    }
}

/// A shard ready to run.
pub struct ShardRun {
    pub request: Box<RunRequest>,
    pub shard: Shard,
    /// Tasks in the whole plan.
    pub total: usize,
    pub warnings: Vec<String>,
}

/// Prepares shard `shard` of the plan at `path`. The command line's `settings` layer (`-j`,
/// `--sandbox`, `--network`) goes over the plan's settings; the sandbox is this machine's.
pub async fn prepare(
    cwd: &Path,
    path: &Path,
    shard: Shard,
    command_line: Layer,
    keep: bool,
) -> AppResult<ShardRun> {
    let info = repo::discover(cwd)?;
    let repo = info.open()?;
    let mut plan = plan::file::read(path)?;
    let base = plan::file::base(&repo, &plan)?;
    let total = plan.tasks.len();
    plan.tasks = std::mem::take(&mut plan.tasks)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| shard.has(*i))
        .map(|(_, t)| t)
        .collect();
    let (settings, secrets, warnings) =
        checks::plan_file(&info, &repo, &plan, command_line).await?;
    let into = IntoTarget {
        branch: plan.into.clone(),
        tip: None,
        checked_out_here: false,
    };
    Ok(ShardRun {
        request: Box::new(RunRequest {
            info,
            plan,
            settings,
            into,
            into_start: base,
            keep,
            secrets,
            mode: RunMode::RunShard,
            continuation: None,
        }),
        shard,
        total,
        warnings,
    })
}

/// After a shard ran: its record, and (with `push`) its branches on a remote.
pub struct Recorded {
    pub record: String,
    /// Branches pushed (the finished tasks' and the record), with `push`.
    pub pushed: Option<usize>,
}

/// Writes the shard record of run `run_id` from its report, and pushes the finished tasks'
/// branches and the record to `push`, if given.
pub fn record(
    info: &RepoInfo,
    run_id: &RunId,
    shard: Shard,
    push: Option<&str>,
) -> AppResult<Recorded> {
    let report = RunDir::new(&info.common_dir, run_id).load_report()?;
    let record = run_id.branch(&RunBranch::Shard {
        k: shard.k,
        n: shard.n,
    });
    shard::write_record(&info.open()?, &record, &report)?;
    let Some(remote) = push else {
        return Ok(Recorded {
            record,
            pushed: None,
        });
    };
    let mut branches: Vec<String> = report
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Done && t.branch_kept)
        .map(|t| t.branch.clone())
        .collect();
    branches.push(record.clone());
    shard::push(&info.workdir, remote, &branches, true)?;
    Ok(Recorded {
        record,
        pushed: Some(branches.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_the_plan_round_robin() {
        let s: Shard = "2/3".parse().unwrap();
        assert_eq!((0..7).filter(|&i| s.has(i)).collect::<Vec<_>>(), [1, 4]);
        assert!("0/3".parse::<Shard>().is_err());
        assert!("4/3".parse::<Shard>().is_err());
        assert!("3".parse::<Shard>().is_err());
        let all: Shard = "1/1".parse().unwrap();
        assert!((0..5).all(|i| all.has(i)));
    }

    #[test]
    fn auto_shards_come_from_the_ci() {
        let with = |vars: &'static [(&str, &str)], spec: &str| {
            let spec: ShardSpec = spec.parse().unwrap();
            spec.resolve(|name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            })
            .map(|s| (s.k, s.n))
        };
        // GitLab `parallel: 4`, 1-based.
        let gitlab = &[("CI_NODE_INDEX", "3"), ("CI_NODE_TOTAL", "4")];
        assert_eq!(with(gitlab, "auto"), Ok((3, 4)));
        assert!(
            with(gitlab, "auto/5")
                .unwrap_err()
                .contains("runs 4 shards")
        );
        // Buildkite, 0-based.
        let buildkite = &[
            ("BUILDKITE_PARALLEL_JOB", "0"),
            ("BUILDKITE_PARALLEL_JOB_COUNT", "2"),
        ];
        assert_eq!(with(buildkite, "auto"), Ok((1, 2)));
        // A Kubernetes Indexed Job: the index only; the count from auto/N.
        let k8s = &[("JOB_COMPLETION_INDEX", "4")];
        assert_eq!(with(k8s, "auto/5"), Ok((5, 5)));
        assert!(with(k8s, "auto").unwrap_err().contains("--shard auto/N"));
        assert!(with(k8s, "auto/4").unwrap_err().contains("does not exist"));
        // Nothing, or nonsense.
        assert!(with(&[], "auto").unwrap_err().contains("CI_NODE_INDEX"));
        assert!(with(&[("CI_NODE_INDEX", "x")], "auto").is_err());
        assert_eq!(with(&[], "2/3"), Ok((2, 3)));
        assert!("auto/0".parse::<ShardSpec>().is_err());
    }
}
