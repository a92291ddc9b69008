//! Moving a run between machines: shard records on branches, and `git fetch`/`git push`.
//!
//! A shard of a plan (`swarm run PLAN.json --shard K/N`) leaves its task branches and one
//! more branch, `swarm/<RUN-ID>/shard-K-of-N`: a parentless commit whose tree holds the
//! shard's `report.json`. Git is then the only exchange between machines: `swarm merge`
//! fetches `swarm/<RUN-ID>/*` and learns from the records which tasks finished without a
//! change or failed, and from the branches what to merge.
//!
//! Network operations shell out to the `git` CLI (not git2), so the user's credential
//! helpers, SSH agent, `insteadOf` rules and proxies work as they do for `git push`.

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;
use git2::{BranchType, Oid, Repository};

use crate::ids::{RunBranch, RunId};
use crate::report::Report;

const RECORD_FILE: &str = "report.json";

/// `git fetch` or `git push` failed (the remote, the network, the credentials: the user's to
/// fix).
#[derive(Debug, thiserror::Error)]
#[error("{what} failed: {stderr}")]
pub struct RemoteError {
    pub what: String,
    pub stderr: String,
}

/// Writes the shard record of `report` on `branch` (replacing an earlier one).
pub(crate) fn write_record(
    repo: &Repository,
    branch: &str,
    report: &Report,
) -> anyhow::Result<Oid> {
    let json = serde_json::to_vec_pretty(report)?;
    let blob = repo.blob(&json)?;
    let mut tree = repo.treebuilder(None)?;
    tree.insert(RECORD_FILE, blob, 0o100644)?;
    let tree = repo.find_tree(tree.write()?)?;
    let sig = super::signature(repo)?;
    let message = format!(
        "swarm: shard record of run {}\n\nSwarm-Run: {}\n",
        report.run_id, report.run_id
    );
    let commit = repo.commit(None, &sig, &sig, &message, &tree, &[])?;
    repo.reference(
        &super::branch_ref(branch),
        commit,
        true,
        "swarm: shard record",
    )?;
    Ok(commit)
}

/// The shard records of run `run_id` on local branches (`swarm/<RUN-ID>/shard-K-of-N`),
/// with their branch names. A record must be of this run: its ids are checked as any
/// report's ([`Report::parse`]), and a record of another run is refused.
pub(crate) fn read_records(
    repo: &Repository,
    run_id: &RunId,
) -> anyhow::Result<Vec<(String, Report)>> {
    let prefix = run_id.branch_prefix();
    let mut records = Vec::new();
    for branch in repo.branches(Some(BranchType::Local))? {
        let (branch, _) = branch?;
        let Some(name) = branch.name()?.map(str::to_string) else {
            continue;
        };
        let is_record = name
            .strip_prefix(&prefix)
            .and_then(RunBranch::parse_shard)
            .is_some();
        if !is_record {
            continue;
        }
        let tree = branch.get().peel_to_tree()?;
        let entry = tree
            .get_name(RECORD_FILE)
            .with_context(|| format!("branch {name} holds no {RECORD_FILE}"))?;
        let blob = repo.find_blob(entry.id())?;
        let report = Report::parse(blob.content())
            .with_context(|| format!("the shard record on {name} is not a swarm report"))?;
        anyhow::ensure!(
            &report.run_id == run_id,
            "the shard record on {name} is of another run ({})",
            report.run_id
        );
        records.push((name, report));
    }
    records.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(records)
}

/// `git push --force REMOTE` of local branches `branches` (same names on the remote).
pub(crate) fn push(
    workdir: &Path,
    remote: &str,
    branches: &[String],
    force: bool,
) -> Result<(), RemoteError> {
    if branches.is_empty() {
        return Ok(());
    }
    let mut cmd = Command::new("git");
    cmd.current_dir(workdir).arg("push").arg("--quiet");
    if force {
        cmd.arg("--force");
    }
    cmd.args(["--end-of-options", remote]);
    for b in branches {
        cmd.arg(format!("refs/heads/{b}:refs/heads/{b}"));
    }
    run_git(cmd, &format!("git push {remote}"))
}

/// The `swarm/<RUN-ID>/*` branches of `remote` and where they point (`git ls-remote`).
pub(crate) fn remote_run_branches(
    workdir: &Path,
    remote: &str,
    run_id: &RunId,
) -> Result<Vec<(String, Oid)>, RemoteError> {
    let prefix = format!("refs/heads/{}", run_id.branch_prefix());
    let mut cmd = Command::new("git");
    cmd.current_dir(workdir)
        .args(["ls-remote", "--heads", "--end-of-options", remote])
        .arg(format!("{prefix}*"));
    let listed = git_stdout(cmd, &format!("git ls-remote {remote}"))?;
    Ok(listed
        .lines()
        .filter_map(|line| {
            let (id, name) = line.split_once('\t')?;
            let name = name.strip_prefix("refs/heads/")?;
            Some((name.to_string(), id.parse().ok()?))
        })
        .filter(|(name, _)| name.starts_with(&prefix["refs/heads/".len()..]))
        .collect())
}

/// Deletes branches of `remote`, each only if it still points where it is expected to
/// (`--force-with-lease`): a branch someone pushed again since is left alone.
pub(crate) fn delete_remote(
    workdir: &Path,
    remote: &str,
    branches: &[(String, Oid)],
) -> Result<(), RemoteError> {
    if branches.is_empty() {
        return Ok(());
    }
    let mut cmd = Command::new("git");
    cmd.current_dir(workdir)
        .args(["push", "--quiet", "--atomic"]);
    for (name, id) in branches {
        cmd.arg(format!("--force-with-lease=refs/heads/{name}:{id}"));
    }
    cmd.args(["--end-of-options", remote]);
    for (name, _) in branches {
        cmd.arg(format!(":refs/heads/{name}"));
    }
    run_git(cmd, &format!("git push --delete {remote}"))
}

/// Fetches every `swarm/<RUN-ID>/*` branch of `remote` into the local branches of the same
/// names.
pub(crate) fn fetch_run(workdir: &Path, remote: &str, run_id: &RunId) -> Result<(), RemoteError> {
    let prefix = run_id.branch_prefix();
    let mut cmd = Command::new("git");
    cmd.current_dir(workdir)
        .args(["fetch", "--quiet", "--no-tags", "--end-of-options", remote])
        .arg(format!("+refs/heads/{prefix}*:refs/heads/{prefix}*"));
    run_git(cmd, &format!("git fetch {remote}"))
}

fn run_git(cmd: Command, what: &str) -> Result<(), RemoteError> {
    git_stdout(cmd, what).map(drop)
}

/// Runs a `git` command; its standard output, or what it said on failure.
pub(crate) fn git_stdout(mut cmd: Command, what: &str) -> Result<String, RemoteError> {
    let out = cmd.output().map_err(|e| RemoteError {
        what: what.to_string(),
        stderr: format!("cannot run git (is it installed?): {e}"),
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(RemoteError {
        what: what.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}
