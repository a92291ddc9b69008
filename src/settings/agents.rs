//! Coding-agent presets (`--agent NAME`): a known command line plus what that agent needs
//! from the sandbox (the domains of its API, its state directory, the variables holding its
//! credentials), and how to read its machine-readable output. The built-in presets are here;
//! users define their own as `[agents.NAME]` in their config (never in a repository's
//! `swarm.toml`: a preset widens the sandbox). docs/AGENTS.md documents each.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::home::expand;

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
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTable {
    /// The command line (`sh -c`), as for `--exec`.
    pub exec: Option<String>,
    /// The program that must be on PATH (its first word by default).
    pub binary: Option<String>,
    pub allow_domains: Option<Vec<String>>,
    /// Paths it may write besides its worktree (`~` is the home directory).
    pub writable: Option<Vec<String>>,
    /// Variables passed to it (and only to it) even if they look secret.
    pub pass_env: Option<Vec<String>>,
    pub output: Option<AgentOutput>,
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
    pub allow_domains: Vec<String>,
    pub writable: Vec<PathBuf>,
    pub pass_env: Vec<String>,
    /// Variables set for it (no secrets: switches such as telemetry off).
    pub set_env: Vec<(String, String)>,
    pub output: AgentOutput,
    /// `--model`, given to the agent as `SWARM_AGENT_MODEL`.
    pub model: Option<String>,
}

/// A built-in preset.
pub struct Preset {
    pub name: &'static str,
    pub binary: &'static str,
    pub install: &'static str,
    /// The version this preset was written against and checked with.
    pub written_against: &'static str,
    pub exec: &'static str,
    pub allow_domains: &'static [&'static str],
    /// Relative to the home directory.
    pub writable: &'static [&'static str],
    pub pass_env: &'static [&'static str],
    pub set_env: &'static [(&'static str, &'static str)],
    /// A variable naming its API's base URL; its host is allowed too when set.
    pub base_url_env: &'static [&'static str],
    pub output: AgentOutput,
}

pub const PRESETS: &[Preset] = &[
    Preset {
        name: "claude",
        binary: "claude",
        install: "npm install -g @anthropic-ai/claude-code",
        written_against: "Claude Code 2.1.197",
        exec: r#"claude -p "$(cat "$SWARM_TASK_FILE")" --output-format stream-json --verbose --dangerously-skip-permissions ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"}"#,
        allow_domains: &["api.anthropic.com"],
        writable: &[".claude"],
        pass_env: &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
        ],
        set_env: &[
            // swarm's jail is the sandbox: lets it skip its prompts when the user is root.
            ("IS_SANDBOX", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            // Its state in one directory it may write (else it also writes ~/.claude.json).
            ("CLAUDE_CONFIG_DIR", "~/.claude"),
        ],
        base_url_env: &["ANTHROPIC_BASE_URL"],
        output: AgentOutput::ClaudeStreamJson,
    },
    Preset {
        name: "codex",
        binary: "codex",
        install: "npm install -g @openai/codex",
        written_against: "codex-cli 0.169.0",
        exec: r#"CODEX_API_KEY="${CODEX_API_KEY:-$OPENAI_API_KEY}" codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -c check_for_update_on_startup=false ${OPENAI_BASE_URL:+-c "openai_base_url=\"$OPENAI_BASE_URL\""} ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"} - < "$SWARM_TASK_FILE""#,
        allow_domains: &["api.openai.com", "chatgpt.com"],
        writable: &[".codex"],
        pass_env: &["OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL"],
        set_env: &[],
        base_url_env: &["OPENAI_BASE_URL"],
        output: AgentOutput::CodexJson,
    },
    Preset {
        name: "gemini",
        binary: "gemini",
        install: "npm install -g @google/gemini-cli",
        written_against: "Gemini CLI 0.61.0 (flags checked; not run against an API here)",
        exec: r#"gemini -p "$(cat "$SWARM_TASK_FILE")" --yolo --output-format json ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"}"#,
        allow_domains: &[
            "generativelanguage.googleapis.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
        ],
        writable: &[".gemini"],
        pass_env: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        // Each task's worktree is a new folder: untrusted, --yolo would be turned off.
        set_env: &[("GEMINI_CLI_TRUST_WORKSPACE", "true")],
        base_url_env: &["GOOGLE_GEMINI_BASE_URL"],
        output: AgentOutput::GeminiJson,
    },
    Preset {
        name: "aider",
        binary: "aider",
        install: "pipx install aider-chat",
        written_against: "aider 0.86.2 (tested)",
        // No git of its own (swarm commits; its setup would write .git/config), and nothing of
        // aider's in the worktree: no .gitignore entry, history files or repo-map cache (they
        // would be committed, or fail --scope task).
        exec: r#"printf '%s\n' "$SWARM_FILES" | xargs -d '\n' aider --yes-always --no-git --no-auto-commits --no-dirty-commits --no-gitignore --no-check-update --no-show-release-notes --analytics-disable --no-pretty --no-detect-urls --no-suggest-shell-commands --map-tokens 0 --chat-history-file "$TMPDIR/aider.chat.md" --input-history-file "$TMPDIR/aider.input.md" --message-file "$SWARM_TASK_FILE" ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"}"#,
        allow_domains: &["api.openai.com", "api.anthropic.com", "openrouter.ai"],
        writable: &[".aider", ".cache"],
        pass_env: &[
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "OPENROUTER_API_KEY",
            "OPENAI_API_BASE",
        ],
        // litellm's price list stays local (no fetch the proxy would refuse).
        set_env: &[("LITELLM_LOCAL_MODEL_COST_MAP", "True")],
        base_url_env: &["OPENAI_API_BASE"],
        output: AgentOutput::AiderText,
    },
    Preset {
        name: "opencode",
        binary: "opencode",
        install: "npm install -g opencode-ai",
        written_against: "opencode 1.18.33 (flags checked; not run against an API here)",
        exec: r#"opencode run "$(cat "$SWARM_TASK_FILE")" ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"}"#,
        allow_domains: &["api.anthropic.com", "api.openai.com", "models.dev"],
        writable: &[
            ".local/share/opencode",
            ".local/state/opencode",
            ".cache/opencode",
            ".config/opencode",
        ],
        pass_env: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
        set_env: &[],
        base_url_env: &[],
        output: AgentOutput::Text,
    },
];

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The names `--agent` takes: the built-in presets and the user's.
pub fn names(user: &BTreeMap<String, AgentTable>) -> Vec<String> {
    let mut names: Vec<String> = PRESETS.iter().map(|p| p.name.to_string()).collect();
    names.extend(user.keys().cloned());
    names.sort();
    names.dedup();
    names
}

/// `--agent NAME` resolved: the user's `[agents.NAME]` over the built-in preset of that name.
/// `None` when neither exists.
pub fn resolve(
    name: &str,
    user: &BTreeMap<String, AgentTable>,
    model: Option<String>,
) -> Option<AgentSettings> {
    let builtin = preset(name);
    let table = user.get(name);
    if builtin.is_none() && table.is_none() {
        return None;
    }
    let from_builtin = |f: fn(&Preset) -> &[&str]| -> Vec<String> {
        builtin
            .map(|b| f(b).iter().map(|s| s.to_string()).collect())
            .unwrap_or_default()
    };
    let table = table.cloned().unwrap_or_default();
    let exec = table
        .exec
        .or_else(|| builtin.map(|b| b.exec.to_string()))
        .unwrap_or_default();
    let binary = table
        .binary
        .or_else(|| builtin.map(|b| b.binary.to_string()))
        .unwrap_or_else(|| exec.split_whitespace().next().unwrap_or("").to_string());
    let mut allow_domains = table
        .allow_domains
        .unwrap_or_else(|| from_builtin(|b| b.allow_domains));
    // An API elsewhere (a proxy of the user's, a local server) is where the agent goes.
    for var in builtin.map(|b| b.base_url_env).unwrap_or_default() {
        if let Some(host) = std::env::var(var).ok().as_deref().and_then(url_host) {
            allow_domains.push(host);
        }
    }
    let writable = match table.writable {
        Some(w) => w.iter().map(|p| expand(p)).collect(),
        None => builtin
            .map(|b| {
                b.writable
                    .iter()
                    .map(|p| expand(&format!("~/{p}")))
                    .collect()
            })
            .unwrap_or_default(),
    };
    Some(AgentSettings {
        name: name.to_string(),
        exec,
        install: builtin
            .map(|b| b.install.to_string())
            .unwrap_or_else(|| format!("install `{binary}` and put it on PATH")),
        binary,
        allow_domains,
        writable,
        pass_env: table
            .pass_env
            .unwrap_or_else(|| from_builtin(|b| b.pass_env)),
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
    })
}

/// `host:port` of an http(s) URL (the port only when it is not the scheme's).
fn url_host(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?.rsplit('@').next()?;
    let default = match scheme {
        "https" => ":443",
        "http" => ":80",
        _ => return None,
    };
    let authority = authority.strip_suffix(default).unwrap_or(authority);
    (!authority.is_empty()).then(|| authority.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_resolve_and_user_tables_override() {
        let user = BTreeMap::new();
        let claude = resolve("claude", &user, Some("sonnet".into())).unwrap_or_else(|| panic!());
        assert_eq!(claude.binary, "claude");
        assert!(claude.exec.contains("--output-format stream-json"));
        assert!(
            claude
                .allow_domains
                .contains(&"api.anthropic.com".to_string())
        );
        assert_eq!(claude.model.as_deref(), Some("sonnet"));
        assert!(resolve("nope", &user, None).is_none());
        let mut user = BTreeMap::new();
        user.insert(
            "mine".to_string(),
            AgentTable {
                exec: Some("my-agent --go".into()),
                allow_domains: Some(vec!["api.mine.dev".into()]),
                ..Default::default()
            },
        );
        let mine = resolve("mine", &user, None).unwrap_or_else(|| panic!());
        assert_eq!(
            (mine.binary.as_str(), mine.output),
            ("my-agent", AgentOutput::Text)
        );
        assert!(names(&user).contains(&"mine".to_string()));
    }

    #[test]
    fn base_url_hosts() {
        assert_eq!(
            url_host("https://api.x.com/v1").as_deref(),
            Some("api.x.com")
        );
        assert_eq!(
            url_host("http://127.0.0.1:8080/").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(url_host("https://gw.corp:443").as_deref(), Some("gw.corp"));
        assert_eq!(url_host("ftp://x"), None);
    }
}
