//! The resolved policies of a run: what workers may do, how they are confined, which model
//! endpoint they use. Everything here is plain data (saved in plan.json, never a secret but
//! for [`ApiKey`], which is not serializable); the engine reads it, the layers of
//! [`super::layer`] produce it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::env_vars;

/// What a task whose merge conflicts gets (`--on-conflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    Retry,
    Skip,
    Fail,
    Repair,
}

/// How many candidates each task gets, and how (`--tries`, `--best-of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Candidates {
    /// One worker per task (the default).
    #[default]
    One,
    /// Up to N, one after another, until one passes (`--tries N`).
    Tries(u32),
    /// N at once; swarm chooses among those that pass (`--best-of N`).
    BestOf(u32),
}

impl Candidates {
    /// The most candidates a task may get (a cap: each one is a worker's spend).
    pub const MAX: u32 = crate::ids::CandidateNo::MOST;

    /// How many candidates a task gets at most.
    pub fn count(self) -> u32 {
        match self {
            Candidates::One => 1,
            Candidates::Tries(n) | Candidates::BestOf(n) => n,
        }
    }

    /// More than one candidate per task: they get branches `swarm/<RUN>/<TASK>/c<K>`.
    pub fn several(self) -> bool {
        self.count() > 1
    }

    /// Do a task's candidates run at once (`--best-of`)?
    pub fn parallel(self) -> bool {
        matches!(self, Candidates::BestOf(n) if n > 1)
    }
}

/// May a worker change files outside its task?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Task,
    Any,
}

macro_rules! keyword_enum {
    ($ty:ident, $what:literal, $($text:literal => $variant:ident),+) => {
        impl $ty {
            /// Its keywords, as written on the command line and in settings files.
            pub const NAMES: &'static [&'static str] = &[$($text),+];
        }
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok(Self::$variant),)+
                    _ => Err(format!(
                        concat!("unknown ", $what, " '{}' (expected one of: {})"),
                        s,
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $(Self::$variant => $text,)+ })
            }
        }
    };
}

/// `--sandbox`: confine worker processes or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    WorkspaceWrite,
    Off,
}

keyword_enum!(SandboxMode, "sandbox mode", "workspace-write" => WorkspaceWrite, "off" => Off);
keyword_enum!(OnConflict, "conflict policy", "retry" => Retry, "skip" => Skip, "fail" => Fail, "repair" => Repair);
keyword_enum!(Scope, "scope", "task" => Task, "any" => Any);
keyword_enum!(MergeWith, "merge tool", "mergiraf" => Mergiraf);
keyword_enum!(WorktreeMode, "worktree mode", "auto" => Auto, "overlay" => Overlay, "pool" => Pool);

/// `--merge-with`: a structured merge tool the merge train gives each file git's line merge
/// left in conflict, for the languages it knows, before `--on-conflict` decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeWith {
    /// mergiraf (syntax-aware; run as a program, never linked).
    Mergiraf,
}

/// `--worktrees`: how a worker's worktree is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorktreeMode {
    /// Overlay views where the run can use them, pooled checkouts otherwise.
    #[default]
    Auto,
    /// Overlay views, or refuse to start.
    Overlay,
    /// Pooled full checkouts.
    Pool,
}

/// `--per-process`: how many tasks one worker process runs at most. Each task is still
/// committed on its own branch and merged on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PerProcess {
    /// Several when the worker is a command that takes a list of files (it names
    /// `SWARM_FILES`) and nothing else needs a process per task; one otherwise.
    #[default]
    Auto,
    /// At most this many (checked to be at least 1).
    Tasks(usize),
}

impl FromStr for PerProcess {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            n => n.parse().map(Self::Tasks).map_err(|_| {
                format!("'{s}' is neither a number of tasks nor auto (expected e.g. 1, 20, auto)")
            }),
        }
    }
}

impl fmt::Display for PerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Tasks(n) => write!(f, "{n}"),
        }
    }
}

/// A number or `"auto"`, in TOML and in plan.json.
impl Serialize for PerProcess {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Tasks(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for PerProcess {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = PerProcess;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of tasks or \"auto\"")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<PerProcess, E> {
                Ok(PerProcess::Tasks(n as usize))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<PerProcess, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(format!("{n} is not a number of tasks")))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<PerProcess, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// How worktrees are prepared for workers (`[worktree]` in `swarm.toml`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeSettings {
    /// Gitignored files copied from the user's checkout into each worktree.
    pub copy: Vec<String>,
    /// Command run once per worktree after it is created.
    pub setup: Option<String>,
    /// Overlay views or pooled checkouts (`--worktrees`).
    #[serde(default)]
    pub mode: WorktreeMode,
    /// Keep the base checkout of overlay worktrees for the next run (`--reuse-base`).
    #[serde(default)]
    pub reuse_base: bool,
}

/// The model endpoint of the built-in worker (no secret: this is saved in plan.json).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSettings {
    pub name: Option<String>,
    pub base_url: String,
    /// Server-sent events (the default) or one JSON answer per request.
    pub stream: bool,
    pub request_timeout_secs: u64,
    pub connect_timeout_secs: u64,
    /// Retries of one request (429, 5xx, timeouts, dropped connections).
    pub max_retries: u32,
    /// `max_tokens` of each request; none: the server's default.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<serde_json::Number>,
    /// `tool_choice` of each request (`auto` by default).
    #[serde(default = "ModelSettings::default_tool_choice")]
    pub tool_choice: String,
    /// More fields of each request body.
    #[serde(default)]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// The context window in tokens; none: learned from the server (llama.cpp `/props`, an
    /// error naming the limit), else large.
    #[serde(default)]
    pub context_window: Option<u32>,
    /// What a model costs, for `--max-cost` (the user's price; none ships): of models not in
    /// `prices`.
    #[serde(default)]
    pub price: Option<Price>,
    /// Prices of named models: a model takes the price of the longest name it starts with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
}

/// US dollars per million tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub prompt: serde_json::Number,
    pub completion: serde_json::Number,
}

impl Price {
    /// What `tokens` cost.
    pub fn of(&self, tokens: &crate::report::Tokens) -> f64 {
        let per = |n: &serde_json::Number| n.as_f64().unwrap_or(0.0) / 1e6;
        tokens.prompt as f64 * per(&self.prompt) + tokens.completion as f64 * per(&self.completion)
    }

    /// Is it at least `other` on both counts (a repository may raise a price, never lower
    /// it)?
    pub fn at_least(&self, other: &Price) -> bool {
        let f = |n: &serde_json::Number| n.as_f64().unwrap_or(0.0);
        f(&self.prompt) >= f(&other.prompt) && f(&self.completion) >= f(&other.completion)
    }

    /// Both rates finite and not negative.
    pub fn is_valid(&self) -> bool {
        [&self.prompt, &self.completion]
            .iter()
            .all(|n| n.as_f64().is_some_and(|v| v.is_finite() && v >= 0.0))
    }
}

impl ModelSettings {
    pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

    fn default_tool_choice() -> String {
        "auto".into()
    }

    /// The price of `model`: that of the longest name in `prices` it starts with, else
    /// `price`.
    pub fn price_of(&self, model: &str) -> Option<&Price> {
        self.prices
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| price)
            .or(self.price.as_ref())
    }

    /// Is any price set?
    pub fn has_prices(&self) -> bool {
        self.price.is_some() || !self.prices.is_empty()
    }

    /// Is the endpoint on this machine (where servers such as Ollama need no key)?
    pub fn is_local(&self) -> bool {
        crate::net::is_local(&self.base_url)
    }
}

/// An API key. It prints as `***`, is never serialized, and is only ever put in the
/// `Authorization` header of a request.
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    #[cfg(test)]
    pub(crate) fn new(key: String) -> Self {
        Self(key)
    }

    /// The key itself, for the `Authorization` header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `SWARM_API_KEY`, else `OPENAI_API_KEY`.
    pub(crate) fn from_env() -> Option<Self> {
        [env_vars::SWARM_API_KEY, env_vars::OPENAI_API_KEY]
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
            .map(|k| Self(k.trim().to_string()))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// What the built-in worker's `run` tool may run: nothing by default, the commands matching
/// `[sandbox] allow_run`, or anything with `--allow-run` (still confined). The worker's
/// approval code matches commands against the patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunToolPolicy {
    pub allow_all: bool,
    pub patterns: Vec<String>,
}

impl RunToolPolicy {
    pub fn enabled(&self) -> bool {
        self.allow_all || !self.patterns.is_empty()
    }
}
