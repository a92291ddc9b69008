//! What confines a run's worker processes: the policy the jail, Landlock and the proxy
//! apply, as the engine's settings resolve it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Credential stores hidden from workers, relative to the home directory.
pub(crate) const DEFAULT_HIDDEN: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".git-credentials",
    ".netrc",
    ".docker/config.json",
    ".gnupg",
    ".kube",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".local/share/keyrings",
    // Coding agents' logins: a worker never reads another agent's (an agent reads its own
    // only when it uses its own login rather than swarm's gateway).
    ".claude/.credentials.json",
    ".claude.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
    ".gemini/mcp-oauth-tokens.json",
    ".local/share/opencode/auth.json",
    ".config/github-copilot",
];

/// What confines worker processes in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Confine at all? (`--sandbox off` turns it off.)
    pub enabled: bool,
    /// May workers reach the network (`--network`)?
    pub network: bool,
    /// Domains workers may reach through swarm's proxy when `network` is off
    /// (`--allow-domain`, `[sandbox] allow_domains`).
    #[serde(default)]
    pub allow_domains: Vec<String>,
    /// More writable paths (`[sandbox] writable`), e.g. a tool's cache directory.
    pub writable: Vec<PathBuf>,
    /// Paths hidden from workers (the credential stores, `[sandbox] hide`, minus `unhide`).
    #[serde(default)]
    pub hide: Vec<PathBuf>,
    /// Secret variables passed to workers anyway (`[sandbox] env`).
    #[serde(default)]
    pub env: Vec<String>,
}

/// What the network of a confined worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkAccess<'a> {
    /// A namespace with nothing in it.
    None,
    /// A namespace whose only way out is swarm's proxy, for these domains.
    AllowList(&'a [String]),
    /// The host's network (`--network`).
    Full,
}

impl SandboxPolicy {
    pub fn network_access(&self) -> NetworkAccess<'_> {
        match (self.network, self.allow_domains.is_empty()) {
            (true, _) => NetworkAccess::Full,
            (false, true) => NetworkAccess::None,
            (false, false) => NetworkAccess::AllowList(&self.allow_domains),
        }
    }

    /// Does the allow-list name a server on this machine's loopback (`localhost:11434`)?
    /// Then a worker's loopback requests go through the proxy, which reaches it.
    pub fn allows_loopback(&self) -> bool {
        self.allow_domains.iter().any(|d| {
            let host = crate::allow_list::split_host_port(d).map_or(d.as_str(), |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.eq_ignore_ascii_case("localhost") || host.starts_with("127.") || host == "::1"
        })
    }

    /// The default hidden paths under `home`.
    pub fn default_hidden(home: &Path) -> Vec<PathBuf> {
        DEFAULT_HIDDEN.iter().map(|p| home.join(p)).collect()
    }
}
