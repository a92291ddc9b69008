//! Coding-agent presets (`--agent NAME`): a known command line plus what that agent needs
//! (the model APIs it speaks, which swarm's gateway serves; its state directories; its
//! credential stores), and how to read its machine-readable output. The built-in presets are here;
//! users define their own as `[agents.NAME]` in their config (never in a repository's
//! `swarm.toml`: a preset widens the sandbox). docs/AGENTS.md documents each.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::home::expand;

mod presets;

pub(crate) use presets::{APIS, PRESETS, Preset, RouteSpec, preset};

/// How an agent reports what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AgentOutput {
    /// Nothing swarm reads.
    #[default]
    Text,
    /// Claude Code `--output-format stream-json`: the last `{"type":"result"}` line.
    ClaudeStreamJson,
    /// Codex `exec --json`: `turn.completed` usage and the last `agent_message`.
    CodexJson,
    /// Gemini CLI `--output-format json`: `response` and `stats.models.*.tokens`.
    GeminiJson,
    /// Aider's `Tokens: … sent, … received. Cost: $… message, $… session.` lines.
    AiderText,
}

/// `[agents.NAME]` in the user's config file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTable {
    /// The command line (`sh -c`), as for `--exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<String>,
    /// The program that must be on PATH (its first word by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// Domains it reaches directly through the allow-list proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_domains: Option<Vec<String>>,
    /// Its state directories (`~` is the home directory): copy-on-write views per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<Vec<String>>,
    /// Its credential stores: hidden unless it uses its own login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Vec<String>>,
    /// Variables passed to it (and only to it) even if they look secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_env: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<AgentOutput>,
    /// The model API it speaks (`anthropic`, `openai`, `gemini`, `openrouter`): its requests
    /// go through swarm's gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Where its API's requests go (instead of the API's own endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The variables it reads its endpoint from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_env: Option<Vec<String>>,
    /// The variables it reads its key from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<Vec<String>>,
}

/// A model API an agent speaks, served by swarm's gateway (names of variables only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiRoute {
    /// The API (`anthropic`, `openai`…), also the gateway's path for it.
    pub name: String,
    /// Where its requests go unless the first of `base_url_env` set in swarm's environment
    /// names another endpoint.
    pub upstream: String,
    /// The variables the agent reads its endpoint from (set to the gateway for it).
    pub base_url_env: Vec<String>,
    /// The variables holding its credentials: read by swarm, a placeholder for the agent.
    pub key_env: Vec<String>,
    /// The vendor's hosts, not reached directly while the gateway stands in.
    pub hosts: Vec<String>,
}

impl From<&RouteSpec> for ApiRoute {
    fn from(spec: &RouteSpec) -> Self {
        Self {
            name: spec.name.to_string(),
            upstream: spec.upstream.to_string(),
            base_url_env: strings(spec.base_url_env),
            key_env: strings(spec.key_env),
            hosts: strings(spec.hosts),
        }
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Paths relative to the home directory.
fn home_paths(list: &[&str]) -> Vec<PathBuf> {
    list.iter().map(|p| expand(&format!("~/{p}"))).collect()
}

/// A resolved agent: what `--agent NAME` runs, and what it may reach. Saved in plan.json
/// (names of variables only, never their values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSettings {
    pub name: String,
    pub exec: String,
    pub binary: String,
    /// How to install it, for the error when it is missing.
    pub install: String,
    /// Domains it reaches directly (the vendor's hosts of the APIs the gateway serves are
    /// left out while it does).
    pub allow_domains: Vec<String>,
    /// Its state directories: each a copy-on-write view per task.
    #[serde(alias = "writable")]
    pub state_dirs: Vec<PathBuf>,
    /// Its credential stores (hidden unless it uses its own login).
    #[serde(default)]
    pub credentials: Vec<PathBuf>,
    /// Variables passed to it as they are (a user's agent without an API for the gateway).
    pub pass_env: Vec<String>,
    /// Variables set for it (no secrets: switches such as telemetry off).
    pub set_env: Vec<(String, String)>,
    pub output: AgentOutput,
    /// `--model`, given to the agent as `SWARM_AGENT_MODEL`.
    pub model: Option<String>,
    /// The model APIs it speaks, through swarm's gateway.
    #[serde(default)]
    pub routes: Vec<ApiRoute>,
}

/// The names `--agent` takes: the built-in presets and the user's.
pub(crate) fn names(user: &BTreeMap<String, AgentTable>) -> Vec<String> {
    let mut names: Vec<String> = PRESETS.iter().map(|p| p.name.to_string()).collect();
    names.extend(user.keys().cloned());
    names.sort();
    names.dedup();
    names
}

/// Why `--agent NAME` cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AgentProblem {
    /// Neither a preset nor a table of the user's.
    Unknown,
    /// `api = "…"` names no API the gateway knows.
    UnknownApi(String),
}

/// `--agent NAME` resolved: the user's `[agents.NAME]` over the built-in preset of that name.
pub(crate) fn resolve(
    name: &str,
    user: &BTreeMap<String, AgentTable>,
    model: Option<String>,
) -> Result<AgentSettings, AgentProblem> {
    let builtin = preset(name);
    let table = user.get(name);
    if builtin.is_none() && table.is_none() {
        return Err(AgentProblem::Unknown);
    }
    let table = table.cloned().unwrap_or_default();
    let routes = routes(builtin, &table)?;
    let exec = table
        .exec
        .or_else(|| builtin.map(|b| b.exec.to_string()))
        .unwrap_or_default();
    let binary = table
        .binary
        .or_else(|| builtin.map(|b| b.binary.to_string()))
        .unwrap_or_else(|| exec.split_whitespace().next().unwrap_or("").to_string());
    let listed = |user: Option<Vec<String>>, builtin: Option<&[&str]>| match user {
        Some(list) => list.iter().map(|p| expand(p)).collect(),
        None => builtin.map(home_paths).unwrap_or_default(),
    };
    Ok(AgentSettings {
        name: name.to_string(),
        exec,
        install: builtin
            .map(|b| b.install.to_string())
            .unwrap_or_else(|| format!("install `{binary}` and put it on PATH")),
        binary,
        allow_domains: table.allow_domains.unwrap_or_else(|| {
            builtin
                .map(|b| strings(b.allow_domains))
                .unwrap_or_default()
        }),
        state_dirs: listed(table.writable, builtin.map(|b| b.state_dirs)),
        credentials: listed(table.credentials, builtin.map(|b| b.credentials)),
        pass_env: table.pass_env.unwrap_or_default(),
        set_env: builtin
            .map(|b| {
                b.set_env
                    .iter()
                    // A value `~/dir` is a path under the home directory.
                    .map(|(k, v)| (k.to_string(), expand(v).display().to_string()))
                    .collect()
            })
            .unwrap_or_default(),
        output: table
            .output
            .or_else(|| builtin.map(|b| b.output))
            .unwrap_or_default(),
        model,
        routes,
    })
}

/// The APIs of an agent: the preset's, or the one the table names; `upstream`,
/// `base_url_env` and `key_env` of the table change the first.
fn routes(builtin: Option<&Preset>, table: &AgentTable) -> Result<Vec<ApiRoute>, AgentProblem> {
    let mut routes: Vec<ApiRoute> = match &table.api {
        Some(name) => vec![
            presets::api(name)
                .ok_or_else(|| AgentProblem::UnknownApi(name.clone()))?
                .into(),
        ],
        None => builtin
            .map(|b| b.routes.iter().map(ApiRoute::from).collect())
            .unwrap_or_default(),
    };
    if let Some(first) = routes.first_mut() {
        if let Some(upstream) = &table.upstream {
            first.upstream = upstream.trim_end_matches('/').to_string();
        }
        if let Some(vars) = &table.base_url_env {
            first.base_url_env = vars.clone();
        }
        if let Some(vars) = &table.key_env {
            first.key_env = vars.clone();
        }
    }
    Ok(routes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_resolve_and_user_tables_override() {
        let user = BTreeMap::new();
        let claude = resolve("claude", &user, Some("sonnet".into())).unwrap();
        assert_eq!(claude.binary, "claude");
        assert!(claude.exec.contains("--output-format stream-json"));
        assert_eq!(claude.routes[0].name, "anthropic");
        assert!(
            claude.routes[0]
                .key_env
                .contains(&"CLAUDE_CODE_OAUTH_TOKEN".to_string())
        );
        assert!(claude.pass_env.is_empty(), "keys go through the gateway");
        assert_eq!(claude.model.as_deref(), Some("sonnet"));
        assert_eq!(resolve("nope", &user, None), Err(AgentProblem::Unknown));
        let mut user = BTreeMap::new();
        user.insert(
            "mine".to_string(),
            AgentTable {
                exec: Some("my-agent --go".into()),
                allow_domains: Some(vec!["api.mine.dev".into()]),
                api: Some("openai".into()),
                upstream: Some("https://api.mine.dev/v1/".into()),
                key_env: Some(vec!["MINE_KEY".into()]),
                ..Default::default()
            },
        );
        let mine = resolve("mine", &user, None).unwrap();
        assert_eq!(
            (mine.binary.as_str(), mine.output),
            ("my-agent", AgentOutput::Text)
        );
        assert_eq!(mine.routes[0].upstream, "https://api.mine.dev/v1");
        assert_eq!(mine.routes[0].key_env, ["MINE_KEY"]);
        assert_eq!(mine.routes[0].base_url_env, ["OPENAI_BASE_URL"]);
        assert!(names(&user).contains(&"mine".to_string()));
        user.get_mut("mine").unwrap().api = Some("nope".into());
        assert_eq!(
            resolve("mine", &user, None),
            Err(AgentProblem::UnknownApi("nope".into()))
        );
    }
}
