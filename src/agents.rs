//! `swarm agents`: the coding-agent presets, whether each is installed, where its model
//! requests go, and what it may read and write.

use crate::error::CommandResult;
use clap::Args;

use crate::exit;
use swarm_engine::app::agents::{self, Listed};
use swarm_engine::app::settings::tilde;

/// List the coding agents `--agent` takes: the built-in presets and your [agents.NAME], with
/// whether each program is found, its version, where its model requests go (swarm's
/// gateway, with your environment as it is now), and what it may read and write under the
/// sandbox.
#[derive(Debug, Args)]
pub(crate) struct AgentsArgs {
    /// Print the list as JSON on stdout (an object per agent).
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(args: AgentsArgs) -> CommandResult<i32> {
    let listed = agents::list().await?;
    if args.json {
        let all: Vec<serde_json::Value> = listed.iter().map(as_json).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(exit::SUCCESS);
    }
    for agent in listed {
        let s = &agent.settings;
        let found = match (&agent.found, &agent.version) {
            (Some(path), Some(version)) => format!("{version} ({})", path.display()),
            (Some(path), None) => path.display().to_string(),
            (None, _) => format!("not found; install: {}", s.install),
        };
        println!("{}: {found}", s.name);
        if let Some(against) = agent.written_against {
            println!("  preset written against: {against}");
        }
        println!("  runs:     {}", s.exec);
        for line in describe(&agent) {
            println!("  {line}");
        }
    }
    Ok(exit::SUCCESS)
}

/// The domains the agent reaches itself, through the allow-list proxy (its API's are the
/// gateway's while it serves them).
fn direct_domains(agent: &Listed) -> Vec<&str> {
    let served: Vec<&String> = agent.gateway.iter().flat_map(|b| &b.route.hosts).collect();
    agent
        .settings
        .allow_domains
        .iter()
        .filter(|d| !served.contains(d))
        .map(String::as_str)
        .collect()
}

/// One agent for `--json`: what the text says, as fields.
fn as_json(agent: &Listed) -> serde_json::Value {
    let s = &agent.settings;
    let apis: Vec<serde_json::Value> = agent
        .gateway
        .iter()
        .map(|b| {
            let keys: Vec<&str> = b.credentials.iter().map(|(v, _)| v.as_str()).collect();
            serde_json::json!({"api": b.route.name, "upstream": b.upstream, "keys": keys})
        })
        .collect();
    let tildes =
        |paths: &[std::path::PathBuf]| -> Vec<String> { paths.iter().map(|p| tilde(p)).collect() };
    serde_json::json!({
        "name": s.name,
        "installed": agent.found.is_some(),
        "path": agent.found,
        "version": agent.version,
        "install": s.install,
        "written_against": agent.written_against,
        "runs": s.exec,
        "model": match (agent.gateway.is_empty(), s.routes.is_empty()) {
            (false, _) => "gateway",
            (true, false) => "own login",
            (true, true) => "direct",
        },
        "gateway": apis,
        "network": direct_domains(agent),
        "credentials": tildes(&s.credentials),
        "credentials_readable": agent.gateway.is_empty() && !s.credentials.is_empty(),
        "state": tildes(&s.state_dirs),
        "pass_env": s.pass_env,
    })
}

/// Where its requests go, and what it may read and write.
fn describe(agent: &Listed) -> Vec<String> {
    let s = &agent.settings;
    let mut lines = Vec::new();
    for binding in &agent.gateway {
        let key = match binding.credentials.is_empty() {
            true => "no key (the endpoint needs none)".to_string(),
            false => {
                let vars: Vec<&str> = binding
                    .credentials
                    .iter()
                    .map(|(v, _)| v.as_str())
                    .collect();
                format!(
                    "key from {} (the agent sees a placeholder)",
                    vars.join(", ")
                )
            }
        };
        lines.push(format!(
            "model:    {} through swarm's gateway to {}, {key}; metered",
            binding.route.name, binding.upstream
        ));
    }
    if agent.gateway.is_empty() {
        let vars: Vec<&str> = s
            .routes
            .iter()
            .flat_map(|r| &r.key_env)
            .map(String::as_str)
            .collect();
        lines.push(match vars.is_empty() {
            true => {
                "model:    not through swarm's gateway (no api in its table): not metered".into()
            }
            false => format!(
                "model:    its own login, directly (no {} in your environment): not metered",
                vars.join(" or ")
            ),
        });
    }
    let direct = direct_domains(agent);
    lines.push(format!(
        "network:  {}",
        match direct.is_empty() {
            true => "swarm's gateway only".to_string(),
            false => direct.join(", "),
        }
    ));
    let credentials: Vec<String> = s.credentials.iter().map(|p| tilde(p)).collect();
    if !credentials.is_empty() {
        let how = match agent.gateway.is_empty() {
            true => "readable (its own login)",
            false => "hidden",
        };
        lines.push(format!(
            "reads:    its credentials {}: {how}",
            credentials.join(", ")
        ));
    }
    let state: Vec<String> = s.state_dirs.iter().map(|p| tilde(p)).collect();
    lines.push(format!(
        "writes:   its worktree, TMPDIR{}",
        match state.is_empty() {
            true => String::new(),
            false => format!(
                "; {} copy-on-write: your files unchanged, its writes kept in \
                 .git/swarm/runs/RUN/tasks/TASK/agent-state/",
                state.join(", ")
            ),
        }
    ));
    if !s.pass_env.is_empty() {
        lines.push(format!("env:      {} (as they are)", s.pass_env.join(", ")));
    }
    lines
}
