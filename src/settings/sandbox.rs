//! The sandbox part of the settings: the one place that decides which settings may weaken
//! worker confinement. Only the command line and the user's own config file may (turn it off,
//! give the network, more writable paths, unhide credential stores, pass secret variables);
//! the repository's `swarm.toml` and plan files may only make it stricter, and what they ask
//! for beyond that is a warning.

use std::path::PathBuf;

use super::{FileSettings, Overrides, SandboxMode};
use crate::env_vars;
use crate::worker::sandbox::SandboxPolicy;

/// The sandbox of a plan read from a file (`swarm run PLAN.json`, `swarm merge PLAN.json`):
/// a plan file may come from anywhere, so it is held to the same rule as the repository's
/// `swarm.toml`. The sandbox is this machine's (`local`: the command line, the user's config,
/// the defaults); what the plan asks for beyond it is ignored with a warning, and what it
/// hides is hidden too.
pub fn sandbox_for_plan(
    plan: &SandboxPolicy,
    mut local: SandboxPolicy,
    warnings: &mut Vec<String>,
) -> SandboxPolicy {
    let mut refuse = |what: String| {
        warnings.push(format!(
            "the plan asks for {what}; ignored: weakening the sandbox must come from this \
             command line or your own config file"
        ))
    };
    if !plan.enabled && local.enabled {
        refuse("--sandbox off".into());
    }
    if plan.network && !local.network {
        refuse("--network".into());
    }
    let extra: Vec<String> = plan
        .writable
        .iter()
        .filter(|p| !local.writable.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    if !extra.is_empty() {
        refuse(format!("[sandbox] writable = {extra:?}"));
    }
    let extra: Vec<&String> = plan.env.iter().filter(|v| !local.env.contains(v)).collect();
    if !extra.is_empty() {
        refuse(format!("[sandbox] env = {extra:?}"));
    }
    local.hide.extend(plan.hide.iter().cloned());
    local.hide.sort();
    local.hide.dedup();
    local
}

/// The sandbox from the command line (`sandbox`, `network`), the repository's file (which may
/// only make it stricter), the user's file and the defaults.
pub fn resolve_sandbox(
    overrides: &Overrides,
    repo_file: Option<&FileSettings>,
    user_file: &FileSettings,
    warnings: &mut Vec<String>,
) -> SandboxPolicy {
    let (repo, user) = (
        repo_file.map(|f| &f.sandbox).cloned().unwrap_or_default(),
        &user_file.sandbox,
    );
    let mut refuse = |what: String| {
        warnings.push(format!(
            "swarm.toml asks for [sandbox] {what}; ignored: weakening the sandbox must come \
             from the command line or your own config file (~/.config/swarm/config.toml)"
        ))
    };
    if repo.mode == Some(SandboxMode::Off) {
        refuse("mode = \"off\"".into());
    }
    if repo.network == Some(true) {
        refuse("network = true".into());
    }
    for (key, asked) in [
        ("writable", &repo.writable),
        ("unhide", &repo.unhide),
        ("env", &repo.env),
    ] {
        if let Some(list) = asked.as_ref().filter(|l| !l.is_empty()) {
            refuse(format!("{key} = {list:?}"));
        }
    }
    let mode = overrides
        .sandbox
        .or(user.mode)
        .or(repo.mode.filter(|m| *m == SandboxMode::WorkspaceWrite))
        .unwrap_or(SandboxMode::WorkspaceWrite);
    let network = overrides.network.or(user.network).unwrap_or(false);
    let home = std::env::var_os(env_vars::HOME).map(PathBuf::from);
    let expand = |p: &String| match (p.strip_prefix("~/"), &home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(p),
    };
    let unhide: Vec<PathBuf> = user.unhide.iter().flatten().map(expand).collect();
    let mut hide: Vec<PathBuf> = home
        .as_deref()
        .map(SandboxPolicy::default_hidden)
        .unwrap_or_default();
    hide.extend(
        user.hide
            .iter()
            .chain(repo.hide.iter())
            .flatten()
            .map(expand),
    );
    hide.retain(|p| !unhide.contains(p));
    hide.sort();
    hide.dedup();
    SandboxPolicy {
        enabled: mode == SandboxMode::WorkspaceWrite,
        network,
        writable: user.writable.iter().flatten().map(expand).collect(),
        hide,
        env: user.env.clone().unwrap_or_default(),
    }
}
