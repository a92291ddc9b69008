//! The built-in `--agent` presets and the model APIs they speak (docs/AGENTS.md documents
//! each). Each was written against the version it names.

use super::AgentOutput;

/// A model API an agent speaks, as swarm's gateway serves it: where its requests go by
/// default, the variables the agent reads its endpoint and its credentials from, and the
/// vendor's hosts (which the agent does not reach directly when the gateway stands in).
pub struct RouteSpec {
    pub name: &'static str,
    pub upstream: &'static str,
    pub base_url_env: &'static [&'static str],
    pub key_env: &'static [&'static str],
    pub hosts: &'static [&'static str],
}

/// Anthropic Messages (`ANTHROPIC_BASE_URL` without `/v1`, keys in `x-api-key` or a
/// bearer token).
pub(crate) const ANTHROPIC: RouteSpec = RouteSpec {
    name: "anthropic",
    upstream: "https://api.anthropic.com",
    base_url_env: &["ANTHROPIC_BASE_URL"],
    key_env: &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"],
    hosts: &["api.anthropic.com"],
};

/// OpenAI chat completions and Responses (the base URL with `/v1`, a bearer key).
pub(crate) const OPENAI: RouteSpec = RouteSpec {
    name: "openai",
    upstream: "https://api.openai.com/v1",
    base_url_env: &["OPENAI_BASE_URL"],
    key_env: &["OPENAI_API_KEY"],
    hosts: &["api.openai.com"],
};

/// Google's Gemini API (`x-goog-api-key`).
pub(crate) const GEMINI: RouteSpec = RouteSpec {
    name: "gemini",
    upstream: "https://generativelanguage.googleapis.com",
    base_url_env: &["GOOGLE_GEMINI_BASE_URL"],
    key_env: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    hosts: &["generativelanguage.googleapis.com"],
};

/// OpenRouter (OpenAI chat completions).
pub(crate) const OPENROUTER: RouteSpec = RouteSpec {
    name: "openrouter",
    upstream: "https://openrouter.ai/api/v1",
    base_url_env: &["OPENROUTER_API_BASE"],
    key_env: &["OPENROUTER_API_KEY"],
    hosts: &["openrouter.ai"],
};

/// The APIs a user's `[agents.NAME] api = "…"` may name.
pub(crate) const APIS: &[&RouteSpec] = &[&ANTHROPIC, &OPENAI, &GEMINI, &OPENROUTER];

/// A built-in preset.
pub(crate) struct Preset {
    pub name: &'static str,
    pub binary: &'static str,
    pub install: &'static str,
    /// The version this preset was written against and checked with.
    pub written_against: &'static str,
    pub exec: &'static str,
    /// Domains it reaches directly (without the gateway: its own login).
    pub allow_domains: &'static [&'static str],
    /// Its state directories, relative to the home directory (copy-on-write views).
    pub state_dirs: &'static [&'static str],
    /// Its credential stores, relative to the home directory: hidden from every worker, and
    /// shown to it only when it uses its own login.
    pub credentials: &'static [&'static str],
    pub set_env: &'static [(&'static str, &'static str)],
    /// The APIs its requests go to, through swarm's gateway.
    pub routes: &'static [RouteSpec],
    pub output: AgentOutput,
}

pub(crate) const PRESETS: &[Preset] = &[
    Preset {
        name: "claude",
        binary: "claude",
        install: "npm install -g @anthropic-ai/claude-code",
        written_against: "Claude Code 2.1.197",
        exec: r#"claude -p "$(cat "$SWARM_TASK_FILE")" --output-format stream-json --verbose --dangerously-skip-permissions ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"}"#,
        allow_domains: &["api.anthropic.com"],
        state_dirs: &[".claude"],
        credentials: &[".claude/.credentials.json"],
        set_env: &[
            // swarm's jail is the sandbox: lets it skip its prompts when the user is root.
            ("IS_SANDBOX", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            // Its state in one directory (else it also writes ~/.claude.json).
            ("CLAUDE_CONFIG_DIR", "~/.claude"),
        ],
        routes: &[RouteSpec {
            // A long-lived token of `claude setup-token` is a credential like the keys.
            key_env: &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ],
            ..ANTHROPIC
        }],
        output: AgentOutput::ClaudeStreamJson,
    },
    Preset {
        name: "codex",
        binary: "codex",
        install: "npm install -g @openai/codex",
        written_against: "codex-cli 0.169.0",
        exec: r#"CODEX_API_KEY="${CODEX_API_KEY:-$OPENAI_API_KEY}" codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -c check_for_update_on_startup=false ${OPENAI_BASE_URL:+-c "openai_base_url=\"$OPENAI_BASE_URL\""} ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"} - < "$SWARM_TASK_FILE""#,
        allow_domains: &["api.openai.com", "chatgpt.com"],
        state_dirs: &[".codex"],
        credentials: &[".codex/auth.json"],
        set_env: &[],
        routes: &[RouteSpec {
            key_env: &["OPENAI_API_KEY", "CODEX_API_KEY"],
            ..OPENAI
        }],
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
        state_dirs: &[".gemini"],
        credentials: &[".gemini/oauth_creds.json", ".gemini/mcp-oauth-tokens.json"],
        // Each task's worktree is a new folder: untrusted, --yolo would be turned off.
        set_env: &[("GEMINI_CLI_TRUST_WORKSPACE", "true")],
        routes: &[GEMINI],
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
        state_dirs: &[".aider", ".cache"],
        credentials: &[],
        // litellm's price list stays local (no fetch the proxy would refuse).
        set_env: &[("LITELLM_LOCAL_MODEL_COST_MAP", "True")],
        // litellm reads OPENAI_API_BASE or OPENAI_BASE_URL, ANTHROPIC_API_BASE or
        // ANTHROPIC_BASE_URL.
        routes: &[
            RouteSpec {
                base_url_env: &["OPENAI_API_BASE", "OPENAI_BASE_URL"],
                ..OPENAI
            },
            RouteSpec {
                base_url_env: &["ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"],
                key_env: &["ANTHROPIC_API_KEY"],
                ..ANTHROPIC
            },
            OPENROUTER,
        ],
        output: AgentOutput::AiderText,
    },
    Preset {
        name: "opencode",
        binary: "opencode",
        install: "npm install -g opencode-ai",
        written_against: "opencode 1.18.33 (flags checked; not run against an API here)",
        exec: r#"opencode run "$(cat "$SWARM_TASK_FILE")" ${SWARM_AGENT_MODEL:+--model "$SWARM_AGENT_MODEL"}"#,
        allow_domains: &["api.anthropic.com", "api.openai.com", "models.dev"],
        state_dirs: &[
            ".local/share/opencode",
            ".local/state/opencode",
            ".cache/opencode",
            ".config/opencode",
        ],
        credentials: &[".local/share/opencode/auth.json"],
        set_env: &[],
        // The AI SDK's providers: ANTHROPIC_BASE_URL and OPENAI_BASE_URL, both with `/v1`.
        routes: &[
            RouteSpec {
                upstream: "https://api.anthropic.com/v1",
                key_env: &["ANTHROPIC_API_KEY"],
                ..ANTHROPIC
            },
            OPENAI,
        ],
        output: AgentOutput::Text,
    },
];

pub(crate) fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The route of an API a user's agent names.
pub(crate) fn api(name: &str) -> Option<&'static RouteSpec> {
    APIS.iter().copied().find(|r| r.name == name)
}
