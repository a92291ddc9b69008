//! Run settings, resolved in one place with one order:
//! flags > `SWARM_*` environment > `swarm.toml` at the repository root > the user's config
//! file > defaults.
//!
//! clap already gives flags precedence over their environment variables; every field of
//! [`Overrides`] is an `Option` so that "not given" stays visible and the files can fill it.
//!
//! The repository's `swarm.toml` is written by whoever wrote the repository, so it cannot
//! weaken the sandbox: `mode = "off"`, `network = true`, `writable`, `unhide` and `env` are
//! taken only from the command line or the user's own config file; asked for in
//! `swarm.toml` alone, they are ignored with a warning ([`Resolved::warnings`]). Nor can it
//! send the API key elsewhere: its `[model] base_url` counts only for a server on this
//! machine.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::env_vars;
use crate::error::BadInput;
use crate::worker::sandbox::SandboxPolicy;

mod sandbox;

pub use sandbox::{resolve_sandbox, sandbox_for_plan};

/// What a task whose merge conflicts gets (`--on-conflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    Retry,
    Skip,
    Fail,
    Repair,
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

/// Values given on the command line or in `SWARM_*` variables; `None` means not given.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub jobs: Option<usize>,
    pub timeout_secs: Option<u64>,
    pub on_conflict: Option<OnConflict>,
    pub scope: Option<Scope>,
    pub batch: Option<usize>,
    pub exec: Option<String>,
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub max_turns: Option<u32>,
    pub max_tokens: Option<u64>,
    pub verify: Option<String>,
    pub verify_merged: Option<String>,
    /// `--repair`.
    pub repair: Option<bool>,
    pub idle_timeout_secs: Option<u64>,
    pub sandbox: Option<SandboxMode>,
    /// `--network` (only "true" can be given on the command line).
    pub network: Option<bool>,
    /// `--allow-run`.
    pub allow_run: Option<bool>,
}

/// The `[run]` and `[worktree]` tables of `swarm.toml` and of the user's config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    #[serde(default)]
    pub run: RunTable,
    #[serde(default)]
    pub worktree: WorktreeTable,
    #[serde(default)]
    pub model: ModelTable,
    #[serde(default)]
    pub sandbox: SandboxTable,
}

/// `[sandbox]`: worker confinement and the built-in worker's `run` tool.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxTable {
    pub mode: Option<SandboxMode>,
    pub network: Option<bool>,
    /// More paths workers may write to (`~` is the home directory), e.g. a build cache.
    pub writable: Option<Vec<String>>,
    /// More paths hidden from workers (besides the credential stores).
    pub hide: Option<Vec<String>>,
    /// Credential stores workers may read after all (user config only).
    pub unhide: Option<Vec<String>>,
    /// Secret environment variables passed to workers anyway (user config only).
    pub env: Option<Vec<String>>,
    /// Command patterns the `run` tool may run without `--allow-run` (`*` matches anything).
    pub allow_run: Option<Vec<String>>,
}

/// `[model]`: the OpenAI-compatible endpoint of the built-in worker. No key here: keys come
/// from the environment only, so they never end up in a committed file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    pub name: Option<String>,
    pub base_url: Option<String>,
    pub stream: Option<bool>,
    pub request_timeout: Option<u64>,
    pub connect_timeout: Option<u64>,
    pub max_retries: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunTable {
    pub jobs: Option<usize>,
    pub timeout: Option<u64>,
    pub on_conflict: Option<OnConflict>,
    pub scope: Option<Scope>,
    pub batch: Option<usize>,
    pub exec: Option<String>,
    pub max_turns: Option<u32>,
    pub max_tokens: Option<u64>,
    pub verify: Option<String>,
    pub verify_merged: Option<String>,
    pub repair: Option<bool>,
    pub idle_timeout: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreeTable {
    pub copy: Option<Vec<String>>,
    pub setup: Option<String>,
}

/// How worktrees are prepared for workers (`[worktree]` in `swarm.toml`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeSettings {
    /// Gitignored files copied from the user's checkout into each worktree.
    pub copy: Vec<String>,
    /// Command run once per worktree after it is created.
    pub setup: Option<String>,
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
}

impl ModelSettings {
    pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

    /// Is the endpoint on this machine (where servers such as Ollama need no key)?
    pub fn is_local(&self) -> bool {
        Self::url_is_local(&self.base_url)
    }

    /// Is `url` an endpoint on this machine?
    pub fn url_is_local(url: &str) -> bool {
        let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
        let host = rest.split(['/', ':']).next().unwrap_or("");
        let host = if rest.starts_with('[') {
            rest.split(']').next().unwrap_or("").trim_start_matches('[')
        } else {
            host
        };
        host == "localhost" || host.starts_with("127.") || host == "::1"
    }
}

/// An API key. It prints as `***`, is never serialized, and is only ever put in the
/// `Authorization` header of a request.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> Self {
        Self(key)
    }

    /// The key itself, for the `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `SWARM_API_KEY`, else `OPENAI_API_KEY`.
    pub fn from_env() -> Option<Self> {
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

/// Fully resolved settings of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub jobs: usize,
    pub timeout_secs: u64,
    pub on_conflict: OnConflict,
    pub scope: Scope,
    pub batch: usize,
    pub exec: Option<String>,
    pub worktree: WorktreeSettings,
    pub model: ModelSettings,
    /// Model round-trips per task (LLM worker).
    pub max_turns: u32,
    /// Token budget of the whole run: no new task starts past it.
    pub max_tokens: Option<u64>,
    /// Check run in a task's worktree after its worker; a failing task is not merged.
    pub verify: Option<String>,
    /// Check run on the merged result; the tasks that break it are found and left out.
    #[serde(default)]
    pub verify_merged: Option<String>,
    /// Hand a task whose `--verify` fails after its `--exec` worker to the model.
    #[serde(default)]
    pub repair: bool,
    /// A worker process with no output and no file change this long is killed.
    pub idle_timeout_secs: u64,
    pub sandbox: SandboxPolicy,
    /// What the built-in worker's `run` tool may run.
    pub run_tool: RunToolPolicy,
    /// Run the workers but merge nothing (`--dry-run`); `swarm merge` merges later.
    #[serde(default)]
    pub dry_run: bool,
}

/// What the built-in worker's `run` tool may run: nothing by default, the commands matching
/// `[sandbox] allow_run`, or anything with `--allow-run` (still confined). The matching is
/// [`crate::worker::llm::approval`]'s.
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

impl Settings {
    pub const DEFAULT_JOBS: usize = 4;
    pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }

    /// Does the run call a model: the built-in worker (no `--exec`), `--repair`, or
    /// `--on-conflict repair`?
    pub fn uses_model(&self) -> bool {
        self.exec.is_none() || self.repair || self.on_conflict == OnConflict::Repair
    }

    /// Resolves `overrides` over the repository's `swarm.toml` (in `repo_root`) and the
    /// user's config file.
    pub fn resolve(overrides: Overrides, repo_root: &Path) -> anyhow::Result<Resolved> {
        let repo_file = load_file(&repo_root.join("swarm.toml"))?;
        let user_file = load_user_file()?;
        let mut warnings = Vec::new();
        let layers = [&repo_file, &user_file];
        let sandbox = resolve_sandbox(&overrides, Some(&repo_file), &user_file, &mut warnings);

        let jobs = overrides
            .jobs
            .or_else(|| layers.iter().find_map(|l| l.run.jobs))
            .unwrap_or(Self::DEFAULT_JOBS);
        if jobs == 0 {
            return Err(BadInput::new("--jobs must be at least 1")
                .hint("pass -j 1 or more (the default is 4)")
                .into());
        }
        let batch = overrides
            .batch
            .or_else(|| layers.iter().find_map(|l| l.run.batch))
            .unwrap_or(1);
        if batch == 0 {
            return Err(BadInput::new("--batch must be at least 1")
                .hint("pass --batch 1 for one file per task")
                .into());
        }
        let timeout_secs = overrides
            .timeout_secs
            .or_else(|| layers.iter().find_map(|l| l.run.timeout))
            .unwrap_or(Self::DEFAULT_TIMEOUT_SECS);
        if timeout_secs == 0 {
            return Err(BadInput::new("--timeout must be at least 1 second").into());
        }
        let on_conflict = overrides
            .on_conflict
            .or_else(|| layers.iter().find_map(|l| l.run.on_conflict))
            .unwrap_or(OnConflict::Retry);
        let scope = overrides
            .scope
            .or_else(|| layers.iter().find_map(|l| l.run.scope))
            .unwrap_or(Scope::Task);
        let exec = overrides
            .exec
            .or_else(|| layers.iter().find_map(|l| l.run.exec.clone()));
        let worktree = WorktreeSettings {
            copy: layers
                .iter()
                .find_map(|l| l.worktree.copy.clone())
                .unwrap_or_default(),
            setup: layers.iter().find_map(|l| l.worktree.setup.clone()),
        };
        for file in &worktree.copy {
            crate::repo_path::RepoPath::from(file.as_str())
                .check()
                .map_err(|e| {
                    BadInput::new(format!("[worktree] copy: {e}"))
                        .hint("list files of your checkout by their path relative to its root, e.g. copy = [\".env\"]")
                })?;
        }
        let m = |f: fn(&ModelTable) -> Option<u64>| layers.iter().find_map(|l| f(&l.model));
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        // The repository's endpoint only if it is on this machine: the key goes where the
        // endpoint is.
        let repo_base_url = repo_file.model.base_url.clone().filter(|url| {
            let local = ModelSettings::url_is_local(url);
            if !local {
                warnings.push(format!(
                    "swarm.toml sets [model] base_url = \"{url}\"; ignored: the repository's own \
                     file may only name a server on this machine (pass --base-url, or set it in \
                     your config file)"
                ));
            }
            local
        });
        let model = ModelSettings {
            name: overrides
                .model
                .or_else(|| layers.iter().find_map(|l| l.model.name.clone())),
            base_url: overrides
                .base_url
                .or_else(|| env(env_vars::OPENAI_BASE_URL))
                .or(repo_base_url)
                .or_else(|| user_file.model.base_url.clone())
                .unwrap_or_else(|| ModelSettings::DEFAULT_BASE_URL.to_string())
                .trim_end_matches('/')
                .to_string(),
            stream: layers.iter().find_map(|l| l.model.stream).unwrap_or(true),
            request_timeout_secs: m(|t| t.request_timeout).unwrap_or(300),
            connect_timeout_secs: m(|t| t.connect_timeout).unwrap_or(10),
            max_retries: layers.iter().find_map(|l| l.model.max_retries).unwrap_or(6),
        };
        let max_turns = overrides
            .max_turns
            .or_else(|| layers.iter().find_map(|l| l.run.max_turns))
            .unwrap_or(50);
        if max_turns == 0 {
            return Err(BadInput::new("--max-turns must be at least 1").into());
        }
        let idle_timeout_secs = overrides
            .idle_timeout_secs
            .or_else(|| layers.iter().find_map(|l| l.run.idle_timeout))
            .unwrap_or(300);
        if idle_timeout_secs == 0 {
            return Err(BadInput::new("--idle-timeout must be at least 1 second").into());
        }

        let run_tool = RunToolPolicy {
            allow_all: overrides.allow_run.unwrap_or(false),
            patterns: layers
                .iter()
                .find_map(|l| l.sandbox.allow_run.clone())
                .unwrap_or_default(),
        };
        let settings = Settings {
            jobs,
            timeout_secs,
            on_conflict,
            scope,
            batch,
            exec,
            worktree,
            model,
            max_turns,
            max_tokens: overrides
                .max_tokens
                .or_else(|| layers.iter().find_map(|l| l.run.max_tokens)),
            verify: overrides
                .verify
                .or_else(|| layers.iter().find_map(|l| l.run.verify.clone())),
            verify_merged: overrides
                .verify_merged
                .or_else(|| layers.iter().find_map(|l| l.run.verify_merged.clone())),
            repair: overrides
                .repair
                .or_else(|| layers.iter().find_map(|l| l.run.repair))
                .unwrap_or(false),
            idle_timeout_secs,
            sandbox,
            run_tool,
            dry_run: false,
        };
        Ok(Resolved { settings, warnings })
    }
}

/// Resolved settings, and what the CLI should warn about.
#[derive(Debug)]
pub struct Resolved {
    pub settings: Settings,
    /// Settings that were asked for where they may not be set (the repository's
    /// `swarm.toml` weakening the sandbox), and were ignored.
    pub warnings: Vec<String>,
}

/// The user's own config file (`$SWARM_CONFIG`, else `$XDG_CONFIG_HOME/swarm/config.toml`,
/// else `~/.config/swarm/config.toml`); empty settings when there is none.
pub fn load_user_file() -> anyhow::Result<FileSettings> {
    match user_config_path() {
        Some(path) => load_file(&path),
        None => Ok(FileSettings::default()),
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

/// A settings file; empty settings when it does not exist.
pub fn load_file(path: &Path) -> anyhow::Result<FileSettings> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileSettings::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    toml::from_str(&text).map_err(|e| {
        BadInput::new(format!("invalid settings in {}: {}", path.display(), e.message()))
            .hint("fix the file; the tables are [run] (jobs, timeout, idle_timeout, on_conflict, scope, batch, exec, max_turns, max_tokens, verify, verify_merged, repair), [worktree] (copy, setup), [model] (name, base_url, stream, request_timeout, connect_timeout, max_retries) and [sandbox] (mode, network, writable, hide, unhide, env, allow_run)")
            .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_repo_file_which_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("swarm.toml"),
            "[run]\njobs = 7\nscope = \"any\"\n[worktree]\nsetup = \"true\"\n",
        )
        .unwrap();
        let s = Settings::resolve(
            Overrides {
                jobs: Some(3),
                ..Default::default()
            },
            dir.path(),
        )
        .unwrap()
        .settings;
        assert_eq!(s.jobs, 3);
        assert_eq!(s.scope, Scope::Any);
        assert_eq!(s.timeout_secs, Settings::DEFAULT_TIMEOUT_SECS);
        assert_eq!(s.worktree.setup.as_deref(), Some("true"));
    }

    #[test]
    fn api_keys_never_print() {
        let key = ApiKey::new("sk-secret-123".into());
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
    }

    #[test]
    fn local_endpoints() {
        let mut m = ModelSettings {
            name: None,
            base_url: "http://127.0.0.1:11434/v1".into(),
            stream: true,
            request_timeout_secs: 1,
            connect_timeout_secs: 1,
            max_retries: 0,
        };
        assert!(m.is_local());
        m.base_url = "http://localhost:8000/v1".into();
        assert!(m.is_local());
        m.base_url = "http://[::1]:8000/v1".into();
        assert!(m.is_local());
        m.base_url = "https://api.openai.com/v1".into();
        assert!(!m.is_local());
        m.base_url = "https://localhost.evil.example/v1".into();
        assert!(!m.is_local());
    }

    #[test]
    fn unknown_key_is_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("swarm.toml"), "[run]\njbos = 7\n").unwrap();
        let err = Settings::resolve(Overrides::default(), dir.path()).unwrap_err();
        assert!(err.downcast_ref::<BadInput>().is_some(), "{err:#}");
    }
}
