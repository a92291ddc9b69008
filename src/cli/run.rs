//! `swarm run`: run a plan's tasks (or one shard of them) and leave their branches.

use std::path::PathBuf;
use std::str::FromStr;

use clap::Args;
use git2::Oid;

use super::refactor::{Output, check_sandbox, check_worker, execute};
use crate::error::{BadInput, exit};
use crate::git::repo::{self, IntoTarget};
use crate::git::shard;
use crate::ids::RunBranch;
use crate::orchestrator::RunRequest;
use crate::plan::{PLAN_SCHEMA_VERSION, Plan};
use crate::report::TaskStatus;
use crate::settings::{self, Overrides, SandboxMode};
use crate::state::RunDir;
use crate::worker::sandbox::SandboxPolicy;

/// Run the tasks of a plan written by `swarm plan` (all, or one shard) and leave their
/// branches, merging nothing; `--push` sends them to a remote for `swarm merge PLAN.json`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm run plan.json                          # every task, here
  swarm run plan.json --shard 2/4 --push origin

A shard K/N takes the tasks at positions K, K+N, K+2N… of the plan, the same on every
machine. Besides the task branches swarm/<RUN-ID>/<TASK-ID>, a shard leaves the branch
swarm/<RUN-ID>/shard-K-of-N with its report, so the merge knows which tasks needed no
change or failed. Pushing shells out to `git push`, with your credentials.")]
pub struct RunArgs {
    /// The plan file (`swarm plan -o PLAN.json`).
    #[arg(value_name = "PLAN.json")]
    pub plan: PathBuf,
    /// Run only shard K of N (1 <= K <= N).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    /// Push the task branches and the shard record to this remote (`git push --force`).
    #[arg(long, value_name = "REMOTE")]
    pub push: Option<String>,
    /// Workers running at once [default: the plan's].
    #[arg(short, long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Worker confinement [default: workspace-write]. A plan file cannot weaken the sandbox:
    /// only this flag, --network or your own config file can.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,
    /// Let worker processes reach the network.
    #[arg(long)]
    pub network: bool,
    /// Keep the worktrees after the run.
    #[arg(long)]
    pub keep: bool,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also append every event to FILE as a JSON line while the run goes.
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,
}

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

impl Shard {
    /// Is the task at `position` (0-based) of the plan in this shard?
    pub fn has(self, position: usize) -> bool {
        position % self.n == self.k - 1
    }
}

/// Reads a plan file, refusing what is not one.
pub(super) fn read_plan(path: &std::path::Path) -> anyhow::Result<Plan> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        BadInput::new(format!("cannot read the plan {}: {e}", path.display()))
            .hint("write one with: swarm plan INSTRUCTION [PATHSPEC]... -o PLAN.json")
    })?;
    let plan: Plan = serde_json::from_str(&text).map_err(|e| {
        BadInput::new(format!("{} is not a swarm plan: {e}", path.display()))
            .hint("write one with swarm plan … -o PLAN.json (and keep its fields when editing it)")
    })?;
    plan.validate().map_err(|e| {
        BadInput::new(format!("{} is not a valid swarm plan: {e}", path.display()))
            .hint("write one with swarm plan … -o PLAN.json (and keep its fields when editing it)")
    })?;
    if plan.schema_version != PLAN_SCHEMA_VERSION {
        return Err(BadInput::new(format!(
            "{} is a plan of schema version {}; this swarm reads version {PLAN_SCHEMA_VERSION}",
            path.display(),
            plan.schema_version
        ))
        .hint("write the plan again with this version of swarm")
        .into());
    }
    Ok(plan)
}

/// The sandbox of a plan read from a file, on this machine: the plan cannot weaken it (see
/// [`settings::sandbox_for_plan`]); warnings go to stderr.
pub(super) fn local_sandbox(
    plan: &SandboxPolicy,
    mode: Option<SandboxMode>,
    network: Option<bool>,
    workdir: &std::path::Path,
) -> anyhow::Result<SandboxPolicy> {
    let overrides = Overrides {
        sandbox: mode,
        network,
        ..Overrides::default()
    };
    let repo_file = settings::load_file(&workdir.join("swarm.toml"))?;
    let mut warnings = Vec::new();
    let local = settings::resolve_sandbox(
        &overrides,
        Some(&repo_file),
        &settings::load_user_file()?,
        &mut warnings,
    );
    let policy = settings::sandbox_for_plan(plan, local, &mut warnings);
    for w in warnings {
        eprintln!("warning: {w}");
    }
    Ok(policy)
}

/// The plan's base commit, which must be in this repository.
pub(super) fn plan_base(repo: &git2::Repository, plan: &Plan) -> anyhow::Result<Oid> {
    Oid::from_str(&plan.base)
        .ok()
        .filter(|oid| repo.find_commit(*oid).is_ok())
        .ok_or_else(|| {
            BadInput::new(format!(
                "the plan's base commit {} is not in this repository",
                plan.base
            ))
            .hint("fetch it (git fetch origin), or write the plan in this repository")
            .into()
        })
}

pub async fn run(args: RunArgs) -> anyhow::Result<i32> {
    let info = repo::discover(&std::env::current_dir()?)?;
    let repo = info.open()?;
    let mut plan = read_plan(&args.plan)?;
    let base = plan_base(&repo, &plan)?;
    let shard = args.shard.unwrap_or(Shard { k: 1, n: 1 });
    let total = plan.tasks.len();
    plan.tasks = std::mem::take(&mut plan.tasks)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| shard.has(*i))
        .map(|(_, t)| t)
        .collect();
    if let Some(jobs) = args.jobs {
        if jobs == 0 {
            return Err(BadInput::new("--jobs must be at least 1").into());
        }
        plan.settings.jobs = jobs;
    }
    plan.settings.sandbox = local_sandbox(
        &plan.settings.sandbox,
        args.sandbox,
        args.network.then_some(true),
        &info.workdir,
    )?;
    let run_dir = RunDir::new(&info.common_dir, &plan.run_id);
    if run_dir.is_running() {
        return Err(BadInput::new(format!(
            "run {} is in progress in another swarm process",
            plan.run_id
        ))
        .hint("wait for it, or run this shard in another clone")
        .into());
    }
    let api_key = check_worker(&plan.settings)?;
    repo::check_filters(&repo, plan.tasks.iter().flat_map(|t| &t.files))?;
    check_sandbox(&plan.settings).await?;
    // Run, commit, keep the branches: the merge happens elsewhere (`swarm merge`).
    plan.settings.dry_run = true;
    let run_id = plan.run_id.clone();
    eprintln!(
        "swarm: run {run_id}: shard {}/{}: {} of the plan's {total} task(s), -j {}",
        shard.k,
        shard.n,
        plan.tasks.len(),
        plan.settings.jobs
    );
    let into = IntoTarget {
        branch: plan.into.clone(),
        tip: None,
        checked_out_here: false,
    };
    let workdir = info.workdir.clone();
    let common_dir = info.common_dir.clone();
    let code = execute(
        RunRequest {
            info,
            plan,
            into,
            into_start: base,
            keep: args.keep,
            api_key,
            resume: None,
        },
        &Output {
            json: args.json,
            show_diffs: false,
            events: args.events.clone(),
        },
    )
    .await?;
    if code == exit::INTERRUPTED {
        return Ok(code);
    }
    let report = RunDir::new(&common_dir, &run_id).load_report()?;
    let record = run_id.branch(&RunBranch::Shard {
        k: shard.k,
        n: shard.n,
    });
    shard::write_record(&repo, &record, &report)?;
    let Some(remote) = args.push else {
        eprintln!(
            "swarm: shard record on {record}; merge with: swarm merge {} (in this clone, or \
             after pushing swarm/{run_id}/* elsewhere)",
            args.plan.display()
        );
        return Ok(code);
    };
    let mut branches: Vec<String> = report
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Done && t.branch_kept)
        .map(|t| t.branch.clone())
        .collect();
    branches.push(record);
    shard::push(&workdir, &remote, &branches, true)?;
    eprintln!(
        "swarm: pushed {} branch(es) to {remote}; merge every shard with: swarm merge {} --fetch {remote}",
        branches.len(),
        args.plan.display()
    );
    Ok(code)
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
}
