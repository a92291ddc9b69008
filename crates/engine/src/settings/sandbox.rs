//! The one place that decides which settings may weaken worker confinement. Only the command
//! line and the user's own config file may (turn it off, give the network, more writable
//! paths, unhide credential stores, pass secret variables, name a remote model endpoint that
//! gets the API key); the repository's `swarm.toml` and plan files may only make it
//! stricter, and what they ask for beyond that is a warning.

use std::path::PathBuf;

use super::error::SettingsError;
use super::home;
use super::layer::Layer;
use super::policy::{ModelSettings, SandboxMode};
use swarm_sandbox::SandboxPolicy;
use swarm_sandbox::allow_list::AllowList;

/// The repository's `swarm.toml` without what it may not set: it is written by whoever
/// wrote the repository (or planted by a merged worker edit). What is dropped is warned
/// about.
pub(crate) fn restrict_repository_layer(mut layer: Layer, warnings: &mut Vec<String>) -> Layer {
    let mut refuse = |what: String| {
        warnings.push(format!(
            "swarm.toml asks for [sandbox] {what}; ignored: weakening the sandbox must come \
             from the command line or your own config file (~/.config/swarm/config.toml)"
        ))
    };
    let sandbox = &mut layer.sandbox;
    if sandbox.mode == Some(SandboxMode::Off) {
        refuse("mode = \"off\"".into());
        sandbox.mode = None;
    }
    if sandbox.network == Some(true) {
        refuse("network = true".into());
        sandbox.network = None;
    }
    for (key, asked) in [
        ("allow_domains", &mut sandbox.allow_domains),
        ("writable", &mut sandbox.writable),
        ("unhide", &mut sandbox.unhide),
        ("env", &mut sandbox.env),
    ] {
        if let Some(list) = asked.take().filter(|l| !l.is_empty()) {
            refuse(format!("{key} = {list:?}"));
        }
    }
    if let Some(agent) = layer.run.agent.take() {
        warnings.push(format!(
            "swarm.toml sets [run] agent = \"{agent}\"; ignored: an agent preset widens the \
             sandbox, so only --agent or your config file can choose one"
        ));
    }
    if !layer.agents.is_empty() {
        let names: Vec<&String> = layer.agents.keys().collect();
        warnings.push(format!(
            "swarm.toml defines [agents] {names:?}; ignored: agent presets belong in your \
             config file (~/.config/swarm/config.toml)"
        ));
        layer.agents.clear();
    }
    // The key goes where the endpoint is: the repository may only name a local server.
    if let Some(url) = layer.model.base_url.take() {
        if ModelSettings::url_is_local(&url) {
            layer.model.base_url = Some(url);
        } else {
            warnings.push(format!(
                "swarm.toml sets [model] base_url = \"{url}\"; ignored: the repository's own \
                 file may only name a server on this machine (pass --base-url, or set it in \
                 your config file)"
            ));
        }
    }
    layer
}

/// The sandbox policy of combined layers, with the defaults: confined, no network, the
/// credential stores hidden (plus `hide`, minus `unhide`). `Err` for a domain to allow that
/// is not one.
pub(crate) fn policy(layer: &Layer) -> Result<SandboxPolicy, SettingsError> {
    let sandbox = &layer.sandbox;
    let expand = |p: &String| home::expand(p);
    let unhide: Vec<PathBuf> = sandbox.unhide.iter().flatten().map(expand).collect();
    let mut hide: Vec<PathBuf> = home::home_dir()
        .as_deref()
        .map(SandboxPolicy::default_hidden)
        .unwrap_or_default();
    hide.extend(sandbox.hide.iter().flatten().map(expand));
    hide.retain(|p| !unhide.contains(p));
    hide.sort();
    hide.dedup();
    let mut allow_domains = sandbox.allow_domains.clone().unwrap_or_default();
    AllowList::parse(&allow_domains).map_err(SettingsError::AllowDomain)?;
    allow_domains.sort();
    allow_domains.dedup();
    Ok(SandboxPolicy {
        enabled: sandbox.mode.unwrap_or(SandboxMode::WorkspaceWrite) == SandboxMode::WorkspaceWrite,
        network: sandbox.network.unwrap_or(false),
        allow_domains,
        writable: sandbox.writable.iter().flatten().map(expand).collect(),
        hide,
        env: sandbox.env.clone().unwrap_or_default(),
    })
}

/// The sandbox of a plan read from a file (`swarm run PLAN.json`, `swarm merge PLAN.json`):
/// a plan file may come from anywhere, so it is held to the same rule as the repository's
/// `swarm.toml`. The sandbox is this machine's (`local`: the command line, the user's config,
/// the defaults); what the plan asks for beyond it is ignored with a warning, and what it
/// hides is hidden too.
pub(crate) fn sandbox_for_plan(
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
    let extra: Vec<&String> = plan
        .allow_domains
        .iter()
        .filter(|d| !local.allow_domains.contains(d))
        .collect();
    if !extra.is_empty() {
        refuse(format!("--allow-domain {extra:?}"));
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
