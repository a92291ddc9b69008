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
    // Where people keep the keys they export, and the shell history that typed them.
    ".profile",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_history",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zsh_history",
    ".config/fish",
    ".env",
    ".envrc",
    // Other tools' tokens and passwords.
    ".pgpass",
    ".my.cnf",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".config/op",
    ".s3cfg",
    ".boto",
    ".gem/credentials",
    ".config/rclone",
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
            // As the engine decides it for URLs (`net::is_local`): exactly `localhost`, or a
            // loopback IP literal (`127.0.0.1.example.com` is a name elsewhere).
            host.eq_ignore_ascii_case("localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.to_canonical().is_loopback())
        })
    }

    /// The default hidden paths under `home`.
    pub fn default_hidden(home: &Path) -> Vec<PathBuf> {
        DEFAULT_HIDDEN.iter().map(|p| home.join(p)).collect()
    }

    /// The home directories whose credential stores are hidden: `home` (`$HOME`), and the
    /// account's own from the password database when it is another (a changed `HOME` does
    /// not move the stores a worker can read by their path).
    pub fn homes(home: Option<&Path>) -> Vec<PathBuf> {
        let mut homes: Vec<PathBuf> = home.into_iter().map(Path::to_path_buf).collect();
        if let Some(account) = account_home()
            && !homes.contains(&account)
        {
            homes.push(account);
        }
        homes
    }
}

/// The home directory of this process's user in the password database.
fn account_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd is plain data that getpwuid_r fills in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes only into `entry` and `buf` (whose length it is given), and
    // sets `found` to `&entry` or null.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::getuid(),
            &mut entry,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() || entry.pw_dir.is_null() {
        return None;
    }
    // SAFETY: pw_dir points at a NUL-terminated string inside `buf`, alive here.
    let dir = unsafe { std::ffi::CStr::from_ptr(entry.pw_dir) };
    let dir = Path::new(std::ffi::OsStr::from_bytes(dir.to_bytes()));
    (dir.is_absolute() && dir != Path::new("/")).then(|| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The password database, as `getent` reads it, is the oracle.
    #[test]
    fn the_accounts_own_home_is_hidden_too() {
        let uid = rustix::process::getuid().as_raw().to_string();
        let out = std::process::Command::new("getent")
            .args(["passwd", &uid])
            .output()
            .unwrap();
        let line = String::from_utf8(out.stdout).unwrap();
        let account = line.trim().split(':').nth(5).unwrap().to_string();
        let homes = SandboxPolicy::homes(Some(Path::new("/nonexistent/home")));
        assert_eq!(homes[0], Path::new("/nonexistent/home"));
        assert_eq!(homes[1], Path::new(&account), "{homes:?}");
        // The same home once.
        assert_eq!(SandboxPolicy::homes(Some(Path::new(&account))).len(), 1);
        let hidden = SandboxPolicy::default_hidden(&homes[1]);
        assert!(hidden.contains(&Path::new(&account).join(".netrc")));
        assert!(hidden.contains(&Path::new(&account).join(".bashrc")));
    }
}
