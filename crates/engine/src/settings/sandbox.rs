//! The one place that decides which settings may weaken worker confinement. Only the command
//! line and the user's own config file may (turn it off, give the network, more writable
//! paths, unhide credential stores, pass secret variables, name a remote model endpoint that
//! gets the API key); the repository's `swarm.toml` and plan files may only make it
//! stricter, and what they ask for beyond that is a warning.

use std::path::{Path, PathBuf};

use super::error::SettingsError;
use super::home;
use super::layer::Layer;
use super::policy::SandboxMode;
use swarm_sandbox::SandboxPolicy;
use swarm_sandbox::allow_list::AllowList;

/// Where a layer that may not weaken the sandbox comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Untrusted {
    /// The repository's `swarm.toml`: written by whoever wrote the repository (or planted by
    /// a merged worker edit).
    Repository,
    /// A plan file: anyone's text. It may name the agent that runs (its commands are shown
    /// before they run), not define one.
    PlanFile,
    /// A tool call to `swarm mcp`: a model's arguments, held to the rule of a plan file under
    /// the server's own command line.
    ToolCall,
}

impl Untrusted {
    /// The warning for `key = value` asked for and ignored.
    fn refused(self, key: &str, value: &str) -> String {
        match self {
            Untrusted::Repository => format!(
                "swarm.toml asks for [sandbox] {key} = {value}; ignored: weakening the sandbox \
                 must come from the command line or your own config file \
                 (~/.config/swarm/config.toml)"
            ),
            Untrusted::ToolCall => format!(
                "the call asks for [sandbox] {key} = {value}; ignored: weakening the sandbox \
                 must come from `swarm mcp`'s command line or your own config file"
            ),
            Untrusted::PlanFile => {
                let what = match key {
                    "mode" => "--sandbox off".to_string(),
                    "network" => "--network".to_string(),
                    "allow_domains" => format!("--allow-domain {value}"),
                    _ => format!("[sandbox] {key} = {value}"),
                };
                format!(
                    "the plan asks for {what}; ignored: weakening the sandbox must come from \
                     this command line or your own config file"
                )
            }
        }
    }
}

/// `layer` without what it may not set, coming from `from`: whatever weakens the sandbox
/// (off, the network, domains, writable paths, unhidden credential stores, secret
/// variables), agent presets (and, in the repository's file, the choice of agent), and a
/// model endpoint off this machine, which would get the API key. What is dropped is warned
/// about, unless `granted` (this machine's own layers) gives the same anyway.
pub(crate) fn restrict(
    mut layer: Layer,
    from: Untrusted,
    granted: &Layer,
    warnings: &mut Vec<String>,
) -> Layer {
    let mine = &granted.sandbox;
    let sandbox = &mut layer.sandbox;
    // As strict or stricter counts: `network = false` there wins over a config file's.
    if sandbox.mode == Some(SandboxMode::Off) {
        sandbox.mode = None;
        if mine.mode != Some(SandboxMode::Off) {
            warnings.push(from.refused("mode", "\"off\""));
        }
    }
    if sandbox.network == Some(true) {
        sandbox.network = None;
        if mine.network != Some(true) {
            warnings.push(from.refused("network", "true"));
        }
    }
    for (key, asked, allowed) in [
        (
            "allow_domains",
            &mut sandbox.allow_domains,
            &mine.allow_domains,
        ),
        ("writable", &mut sandbox.writable, &mine.writable),
        ("unhide", &mut sandbox.unhide, &mine.unhide),
        ("env", &mut sandbox.env, &mine.env),
    ] {
        let allowed = allowed.as_deref().unwrap_or_default();
        let extra: Vec<String> = asked
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|v| !allowed.contains(v))
            .collect();
        if !extra.is_empty() {
            warnings.push(from.refused(key, &format!("{extra:?}")));
        }
    }
    if from == Untrusted::Repository
        && let Some(agent) = layer.run.agent.take()
    {
        warnings.push(format!(
            "swarm.toml sets [run] agent = \"{agent}\"; ignored: an agent preset widens the \
             sandbox, so only --agent or your config file can choose one"
        ));
    }
    let defined: Vec<String> = std::mem::take(&mut layer.agents)
        .into_keys()
        .filter(|name| !granted.agents.contains_key(name))
        .collect();
    if !defined.is_empty() {
        warnings.push(match from {
            Untrusted::Repository => format!(
                "swarm.toml defines [agents] {defined:?}; ignored: agent presets belong in \
                 your config file (~/.config/swarm/config.toml)"
            ),
            Untrusted::PlanFile | Untrusted::ToolCall => format!(
                "the plan defines [agents] {defined:?}; ignored: agent presets belong in your \
                 config file (~/.config/swarm/config.toml)"
            ),
        });
    }
    keep_local_endpoint(&mut layer, from, granted, warnings);
    layer
}

/// The key goes where the endpoint is: an untrusted layer may only name a local server.
fn keep_local_endpoint(
    layer: &mut Layer,
    from: Untrusted,
    granted: &Layer,
    warnings: &mut Vec<String>,
) {
    if let Some(url) = layer.model.base_url.take() {
        if crate::net::is_local(&url) {
            layer.model.base_url = Some(url);
        } else if granted.model.base_url.as_deref() != Some(url.as_str()) {
            let (whose, which) = match from {
                Untrusted::Repository => ("swarm.toml sets", "the repository's own file"),
                Untrusted::PlanFile => ("the plan sets", "a plan file"),
                Untrusted::ToolCall => ("the call sets", "a tool call"),
            };
            warnings.push(format!(
                "{whose} [model] base_url = \"{url}\"; ignored: {which} may only name a \
                 server on this machine (pass --base-url, or set it in your config file)"
            ));
        }
    }
}

/// The sandbox policy of combined layers, with the defaults: confined, no network, the
/// credential stores hidden (plus `hide`, minus `unhide`). `Err` for a domain to allow that
/// is not one.
pub(crate) fn policy(layer: &Layer) -> Result<SandboxPolicy, SettingsError> {
    let sandbox = &layer.sandbox;
    let expand = |p: &String| home::expand(p);
    // The stores under `$HOME` and the account's own home; `unhide = ["~/x"]` shows `x` in
    // both.
    let home = home::home_dir();
    let homes = SandboxPolicy::homes(home.as_deref());
    let mut unhide: Vec<PathBuf> = sandbox.unhide.iter().flatten().map(expand).collect();
    let relative: Vec<PathBuf> = unhide
        .iter()
        .filter_map(|p| p.strip_prefix(home.as_deref()?).ok().map(Path::to_path_buf))
        .collect();
    unhide.extend(
        homes
            .iter()
            .flat_map(|h| relative.iter().map(|r| h.join(r))),
    );
    let mut hide: Vec<PathBuf> = homes
        .iter()
        .flat_map(|h| SandboxPolicy::default_hidden(h))
        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_loses_what_weakens_and_is_warned_only_of_what_this_machine_does_not_grant() {
        let mut plan = Layer::default();
        plan.sandbox.mode = Some(SandboxMode::Off);
        plan.sandbox.writable = Some(vec!["/cache".into(), "/etc".into()]);
        plan.sandbox.hide = Some(vec!["/secrets".into()]);
        plan.run.agent = Some("claude".into());
        let mut granted = Layer::default();
        granted.sandbox.writable = Some(vec!["/cache".into()]);
        let mut warnings = Vec::new();
        let kept = restrict(plan, Untrusted::PlanFile, &granted, &mut warnings);
        assert_eq!(kept.sandbox.mode, None);
        assert_eq!(kept.sandbox.writable, None);
        // Stricter stays; a plan names its agent.
        assert_eq!(
            kept.sandbox.hide.as_deref(),
            Some(&["/secrets".to_string()][..])
        );
        assert_eq!(kept.run.agent.as_deref(), Some("claude"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("--sandbox off"), "{warnings:?}");
        assert!(
            warnings[1].contains("[\"/etc\"]") && !warnings[1].contains("/cache"),
            "{warnings:?}"
        );
    }

    #[test]
    fn the_repository_may_make_the_sandbox_stricter_but_not_choose_an_agent() {
        let mut repo = Layer::default();
        repo.sandbox.network = Some(false);
        repo.run.agent = Some("claude".into());
        let mut warnings = Vec::new();
        let kept = restrict(
            repo,
            Untrusted::Repository,
            &Layer::default(),
            &mut warnings,
        );
        assert_eq!(kept.sandbox.network, Some(false));
        assert_eq!(kept.run.agent, None);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn a_tool_call_is_held_to_the_rule_of_a_plan_file_under_the_server() {
        let mut call = Layer::default();
        call.sandbox.mode = Some(SandboxMode::Off);
        call.sandbox.network = Some(true);
        call.model.base_url = Some("https://elsewhere.example/v1".into());
        call.run.jobs = Some(3);
        let mut warnings = Vec::new();
        let kept = restrict(call, Untrusted::ToolCall, &Layer::default(), &mut warnings);
        assert_eq!(kept.sandbox.mode, None);
        assert_eq!(kept.sandbox.network, None);
        assert_eq!(kept.model.base_url, None);
        assert_eq!(kept.run.jobs, Some(3));
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(
            warnings[0].contains("`swarm mcp`'s command line"),
            "{warnings:?}"
        );
        // What the server itself grants is kept, quietly.
        let mut server = Layer::default();
        server.sandbox.network = Some(true);
        let mut call = Layer::default();
        call.sandbox.network = Some(true);
        let mut warnings = Vec::new();
        let kept = restrict(call, Untrusted::ToolCall, &server, &mut warnings);
        assert_eq!(kept.sandbox.network, None);
        assert!(warnings.is_empty(), "{warnings:?}");
    }
}
