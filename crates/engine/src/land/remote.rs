//! The remote the groups' branches go to, through the `git` CLI (the user's credentials, as
//! for `git push`): what is there, pushing one branch, the remote's default branch.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use git2::{Oid, Repository};

use crate::git::shard::{RemoteError, git_stdout};

/// The URL of remote `name`, or `name` itself when it is no configured remote (a URL or
/// a path, as `git push` takes).
pub(crate) fn url_of(repo: &Repository, name: &str) -> String {
    repo.find_remote(name)
        .ok()
        .and_then(|r| r.url().ok().map(str::to_string))
        .unwrap_or_else(|| name.to_string())
}

fn git(workdir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(workdir);
    cmd
}

/// The branches under `prefix` (`swarm/<RUN>/land/`) on `remote`, by name, with their tips.
pub(crate) fn branches(
    workdir: &Path,
    remote: &str,
    prefix: &str,
) -> Result<HashMap<String, Oid>, RemoteError> {
    let mut cmd = git(workdir);
    cmd.args(["ls-remote", "--heads", "--end-of-options", remote])
        .arg(format!("refs/heads/{prefix}*"));
    let out = git_stdout(cmd, &format!("git ls-remote {remote}"))?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let (oid, name) = line.split_once('\t')?;
            let name = name.strip_prefix("refs/heads/")?;
            Some((name.to_string(), oid.parse().ok()?))
        })
        .filter(|(name, _)| name.starts_with(prefix))
        .collect())
}

/// Pushes `commit` to branch `branch` of `remote`, never forced: git refuses it if the
/// branch is there and `commit` does not contain its tip.
pub(crate) fn push(
    workdir: &Path,
    remote: &str,
    commit: Oid,
    branch: &str,
) -> Result<(), RemoteError> {
    let mut cmd = git(workdir);
    cmd.args(["push", "--quiet", "--end-of-options", remote])
        .arg(format!("{commit}:refs/heads/{branch}"));
    git_stdout(cmd, &format!("git push {remote} {branch}")).map(drop)
}

/// The branch `remote`'s HEAD names (its default branch), if it says.
pub(crate) fn default_branch(workdir: &Path, remote: &str) -> Result<Option<String>, RemoteError> {
    let mut cmd = git(workdir);
    cmd.args(["ls-remote", "--symref", "--end-of-options", remote, "HEAD"]);
    let out = git_stdout(cmd, &format!("git ls-remote {remote}"))?;
    Ok(out.lines().find_map(|line| {
        let target = line.strip_prefix("ref: ")?.split('\t').next()?;
        Some(target.strip_prefix("refs/heads/")?.to_string())
    }))
}
