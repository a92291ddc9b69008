//! Settings layers: the command line (with its `SWARM_*` variables), the environment, the
//! repository's `swarm.toml` and the user's config file are each a [`Layer`], a struct of
//! `Option` fields shaped like the file format, so "not given" stays visible. Layers are
//! combined by one trait, [`Combine`], the higher layer winning field by field (lists of
//! hidden paths add up instead), and the result resolved once into
//! [`super::Settings`].
//!
//! The file format is this type: the valid keys are its fields (`deny_unknown_fields`), and a
//! typo is refused with the list serde derives from them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::agents::AgentTable;
use super::error::SettingsError;
use super::policy::{MergeWith, OnConflict, PerProcess, SandboxMode, Scope, WorktreeMode};
use crate::env_vars;

/// Two layers into one: `self` wins where it has a value.
pub(crate) trait Combine {
    fn combine(self, lower: Self) -> Self;
}

impl<T> Combine for Option<T> {
    fn combine(self, lower: Self) -> Self {
        self.or(lower)
    }
}

/// Implements [`Combine`] field by field.
macro_rules! combine_fields {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl Combine for $ty {
            fn combine(self, lower: Self) -> Self {
                Self { $($field: self.$field.combine(lower.$field),)* }
            }
        }
    };
}

/// One layer of settings: `swarm.toml`, the user's config file, or what the command line
/// and the environment give.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    #[serde(default)]
    pub run: RunTable,
    #[serde(default)]
    pub worktree: WorktreeTable,
    #[serde(default)]
    pub model: ModelTable,
    #[serde(default)]
    pub sandbox: SandboxTable,
    #[serde(default)]
    pub merge: MergeTable,
    /// `[agents.NAME]`: the user's own agent presets (user config only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, AgentTable>,
}

/// Agent presets: the higher layer's preset of a name replaces the lower's.
impl Combine for BTreeMap<String, AgentTable> {
    fn combine(self, mut lower: Self) -> Self {
        lower.extend(self);
        lower
    }
}

combine_fields!(Layer {
    run,
    worktree,
    model,
    sandbox,
    merge,
    agents
});

/// `[merge]`: how the merge train merges a file both sides changed.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MergeTable {
    /// `--merge-with`: a structured merge tool for what git's line merge leaves in conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with: Option<MergeWith>,
    /// Seconds one merge driver may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

combine_fields!(MergeTable { with, timeout });

/// `[run]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunTable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_conflict: Option<OnConflict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_process: Option<PerProcess>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The run's spending cap in US dollars (`--max-cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_merged: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<bool>,
    /// Move the target only if every task merged (`--atomic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<u64>,
    /// Exit statuses of the worker's command that mean success (`--ok-exit-codes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok_exit_codes: Option<Vec<i32>>,
    /// `--agent NAME`: a coding-agent preset as the worker (not in the repository's file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `--model` with `--agent`: the agent's model (the command line only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_model: Option<String>,
    /// `--tries N`: candidates one after another until one passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tries: Option<u32>,
    /// `--best-of N`: candidates at once, swarm choosing among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_of: Option<u32>,
    /// `--judge-model NAME`: the model that compares finalists of `--best-of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_model: Option<String>,
}

combine_fields!(RunTable {
    jobs,
    timeout,
    on_conflict,
    scope,
    batch,
    per_process,
    exec,
    max_turns,
    max_tokens,
    max_cost,
    verify,
    verify_merged,
    repair,
    atomic,
    idle_timeout,
    ok_exit_codes,
    agent,
    agent_model,
    tries,
    best_of,
    judge_model,
});

/// `[worktree]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreeTable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<WorktreeMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_base: Option<bool>,
}

combine_fields!(WorktreeTable {
    copy,
    setup,
    mode,
    reuse_base
});

/// `[model]`: the OpenAI-compatible endpoint of the built-in worker. No key here: keys come
/// from the environment only, so they never end up in a committed file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// `max_tokens` of each request (`--max-output-tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<serde_json::Number>,
    /// `auto` (the default), `required`, or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<String>,
    /// More fields of each request body (`top_k`, `repeat_penalty`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// The model's context window in tokens (else learned from the server, else large).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// US dollars per million tokens, for the run's cost (`--max-cost`): no price list ships.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<super::policy::Price>,
    /// Prices of named models (`[model.prices] "claude-sonnet-4" = { … }`): a model takes the
    /// price of the longest name it starts with, else `price`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<BTreeMap<String, super::policy::Price>>,
}

combine_fields!(ModelTable {
    name,
    base_url,
    stream,
    request_timeout,
    connect_timeout,
    max_retries,
    max_output_tokens,
    temperature,
    tool_choice,
    extra_body,
    context_window,
    price,
    prices,
});

/// `[sandbox]`: worker confinement and the built-in worker's `run` tool.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxTable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SandboxMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Domains workers may reach through swarm's proxy (`--allow-domain`); these add up
    /// across layers (user config and command line only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_domains: Option<Vec<String>>,
    /// More paths workers may write to (`~` is the home directory), e.g. a build cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<Vec<String>>,
    /// More paths hidden from workers (besides the credential stores); these add up across
    /// layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hide: Option<Vec<String>>,
    /// Credential stores workers may read after all (user config only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhide: Option<Vec<String>>,
    /// Secret environment variables passed to workers anyway (user config only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    /// Command patterns the `run` tool may run without `--allow-run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_run: Option<Vec<String>>,
    /// `--allow-run`: any command (the command line only; not a file key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_any_run: Option<bool>,
}

impl Combine for SandboxTable {
    fn combine(self, lower: Self) -> Self {
        let add_up = |upper: Option<Vec<String>>, lower: Option<Vec<String>>| match (upper, lower) {
            (Some(mut a), Some(b)) => {
                a.extend(b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
        Self {
            mode: self.mode.combine(lower.mode),
            network: self.network.combine(lower.network),
            allow_domains: add_up(self.allow_domains, lower.allow_domains),
            writable: self.writable.combine(lower.writable),
            hide: add_up(self.hide, lower.hide),
            unhide: self.unhide.combine(lower.unhide),
            env: self.env.combine(lower.env),
            allow_run: self.allow_run.combine(lower.allow_run),
            allow_any_run: self.allow_any_run.combine(lower.allow_any_run),
        }
    }
}

impl Layer {
    /// The worker a front end was asked for: an `--agent` (whose `--model` is the agent's
    /// own), or the built-in worker's `--model`.
    pub fn set_worker(&mut self, agent: Option<String>, model: Option<String>) {
        match agent {
            Some(agent) => {
                self.run.agent = Some(agent);
                self.run.agent_model = model;
            }
            None => self.model.name = model,
        }
    }

    /// What the environment gives besides the `SWARM_*` variables the command line reads:
    /// `OPENAI_BASE_URL`.
    pub fn from_env() -> Self {
        let mut layer = Self::default();
        layer.model.base_url = std::env::var(env_vars::OPENAI_BASE_URL)
            .ok()
            .filter(|v| !v.trim().is_empty());
        layer
    }

    /// A settings file; an empty layer when it does not exist.
    pub fn load(path: &Path) -> Result<Self, SettingsError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(SettingsError::Unreadable {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let layer: Self = toml::from_str(&text).map_err(|e| SettingsError::InvalidFile {
            path: path.to_path_buf(),
            message: match e.span() {
                // The line, which names the key.
                Some(span) => {
                    let line = text[..span.start].matches('\n').count() + 1;
                    let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
                    let end = text[span.start..]
                        .find('\n')
                        .map_or(text.len(), |i| span.start + i);
                    format!(
                        "line {line}, `{}`: {}",
                        text[start..end].trim(),
                        e.message()
                    )
                }
                None => e.message().to_string(),
            },
        })?;
        // Keys of a plan's layer that only the command line gives.
        for (given, key, flag) in [
            (
                layer.run.agent_model.is_some(),
                "agent_model",
                "--model with --agent",
            ),
            (
                layer.sandbox.allow_any_run.is_some(),
                "allow_any_run",
                "--allow-run",
            ),
        ] {
            if given {
                return Err(SettingsError::InvalidFile {
                    path: path.to_path_buf(),
                    message: format!("`{key}` is not a key of a settings file (it is {flag})"),
                });
            }
        }
        Ok(layer)
    }

    /// The user's own config file (`$SWARM_CONFIG`, else `$XDG_CONFIG_HOME/swarm/config.toml`,
    /// else `~/.config/swarm/config.toml`); an empty layer when there is none.
    pub fn load_user() -> Result<Self, SettingsError> {
        match user_config_path() {
            Some(path) => Self::load(&path),
            None => Ok(Self::default()),
        }
    }
}

fn user_config_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env_vars::SWARM_CONFIG) {
        return Some(PathBuf::from(path));
    }
    let base = std::env::var_os(env_vars::XDG_CONFIG_HOME)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(env_vars::HOME).map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("swarm").join("config.toml"))
}
