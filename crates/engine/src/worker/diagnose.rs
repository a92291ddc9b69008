//! Why a confined worker failed, when the sandbox is the likely cause: read from the last
//! lines of its output and what the proxy refused, and said with the setting that would
//! allow it. A hint, never a verdict: the task's status stays what the worker made it.

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::report::NetworkUse;
use crate::settings::{NetworkAccess, home};
use swarm_sandbox::SandboxPolicy;

/// Words of a failed connection or name lookup, as programs print them.
static NETWORK_FAILURE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)could not resolve host|name or service not known|temporary failure in name resolution|getaddrinfo|enotfound|eai_again|network is unreachable|enetunreach|failed to connect|connection refused|econnrefused|dns error|error sending request|fetch failed|api connection error",
    )
    .unwrap_or_else(|e| unreachable!("{e}"))
});

/// A host named in a failure line: `Could not resolve host: api.x.com`, `ENOTFOUND api.x.com`,
/// a URL.
static HOST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:https?://|resolve host:?\s+|enotfound\s+|eai_again\s+)([a-z0-9][a-z0-9.-]*\.[a-z]{2,})")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

/// Words of a refused write.
static WRITE_REFUSED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)read-only file system|erofs|permission denied|eacces|operation not permitted|eperm",
    )
    .unwrap_or_else(|e| unreachable!("{e}"))
});

static ABSOLUTE_PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(/[^\s'"`:,()\[\]]+)"#).unwrap_or_else(|e| unreachable!("{e}")));

/// What the sandbox probably did to a failed task, and the setting that would allow it.
/// `worktree` is the task's (writes there are not the sandbox's doing); `git_dir` the
/// repository's, where no setting should let workers write.
pub(crate) fn hint(
    tail: &str,
    network: &NetworkUse,
    policy: &SandboxPolicy,
    worktree: Option<&Path>,
    git_dir: &Path,
) -> Option<String> {
    if !policy.enabled {
        return None;
    }
    if let Some(host) = network.refused_hosts.first() {
        let domain = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h);
        return Some(format!(
            "the sandbox refused network access to {}: allow it with --allow-domain {domain} \
             (or [sandbox] allow_domains in your config)",
            network.refused_hosts.join(", ")
        ));
    }
    let lines: Vec<&str> = tail.lines().rev().take(40).collect();
    if policy.network_access() == NetworkAccess::None
        && let Some(line) = lines.iter().find(|l| NETWORK_FAILURE.is_match(l))
    {
        let flag = match HOST.captures(line) {
            Some(c) => format!("--allow-domain {}", &c[1]),
            None => "--allow-domain DOMAIN".to_string(),
        };
        return Some(format!(
            "workers have no network in the sandbox, and the log shows a connection that \
             failed: allow the service it needs with {flag} (or --network for everything)"
        ));
    }
    let refused = lines
        .iter()
        .filter(|l| WRITE_REFUSED.is_match(l))
        .find_map(|l| {
            ABSOLUTE_PATH
                .captures_iter(l)
                .map(|c| c[1].to_string())
                .find(|p| worktree.is_none_or(|w| !Path::new(p).starts_with(w)))
        })?;
    if Path::new(&refused).starts_with(git_dir) {
        return Some(format!(
            "the log shows a write refused in the repository's git directory ({refused}): a \
             worker's own git (add, commit, stash) works in its own process, through \
             copy-on-write views of the repository, where the jail can mount overlays; \
             --verify, setup and the built-in worker's commands cannot write there. Leave \
             committing to swarm: it commits whatever the worker changed"
        ));
    }
    Some(write_hint(&refused, policy))
}

fn write_hint(path: &str, policy: &SandboxPolicy) -> String {
    if let Some(hidden) = policy.hide.iter().find(|h| Path::new(path).starts_with(h)) {
        return format!(
            "{path} is under {}, a credential store the sandbox hides from workers: let them \
             read it with [sandbox] unhide = [\"{}\"] in your config",
            hidden.display(),
            home::tilde(hidden)
        );
    }
    // The top directory of the path under the home directory (`~/.claude`), else the path.
    let dir = match home::home_dir()
        .as_deref()
        .and_then(|h| Path::new(path).strip_prefix(h).ok())
    {
        Some(rest) => match rest.components().next() {
            Some(first) => format!("~/{}", first.as_os_str().to_string_lossy()),
            None => path.to_string(),
        },
        None => path.to_string(),
    };
    format!(
        "the sandbox lets workers write only in their worktree and TMPDIR, and the log shows a \
         write refused at {path}: allow it with [sandbox] writable = [\"{dir}\"] in your config \
         (~/.config/swarm/config.toml)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(domains: &[&str]) -> SandboxPolicy {
        SandboxPolicy {
            enabled: true,
            network: false,
            allow_domains: domains.iter().map(|d| d.to_string()).collect(),
            writable: Vec::new(),
            hide: vec!["/home/u/.ssh".into()],
            env: Vec::new(),
        }
    }

    #[test]
    fn refused_connections_name_the_domain() {
        let used = NetworkUse {
            allowed: 0,
            refused: 1,
            refused_hosts: vec!["api.anthropic.com:443".into()],
        };
        let said =
            hint("", &used, &policy(&["x.com"]), None, Path::new("/r/.git")).unwrap_or_default();
        assert!(said.contains("--allow-domain api.anthropic.com "), "{said}");
    }

    #[test]
    fn a_failed_lookup_without_network_suggests_the_domain() {
        let tail = "doing\ncurl: (6) Could not resolve host: api.openai.com\n";
        let said = hint(
            tail,
            &NetworkUse::default(),
            &policy(&[]),
            None,
            Path::new("/r/.git"),
        )
        .unwrap_or_default();
        assert!(said.contains("--allow-domain api.openai.com"), "{said}");
        let tail = "Error: getaddrinfo ENOTFOUND api.anthropic.com\n";
        let said = hint(
            tail,
            &NetworkUse::default(),
            &policy(&[]),
            None,
            Path::new("/r/.git"),
        )
        .unwrap_or_default();
        assert!(said.contains("--allow-domain api.anthropic.com"), "{said}");
    }

    #[test]
    fn a_refused_write_outside_the_worktree_suggests_writable() {
        let tail = "Error: EROFS: read-only file system, open '/tmp/h/.claude/x.json'\n";
        let said = hint(
            tail,
            &NetworkUse::default(),
            &policy(&[]),
            None,
            Path::new("/r/.git"),
        )
        .unwrap_or_default();
        assert!(
            said.contains("[sandbox] writable = [\"/tmp/h/.claude/x.json\"]"),
            "{said}"
        );
        let tail = "cat: /home/u/.ssh/id_rsa: Permission denied\n";
        let said = hint(
            tail,
            &NetworkUse::default(),
            &policy(&[]),
            None,
            Path::new("/r/.git"),
        )
        .unwrap_or_default();
        assert!(said.contains("unhide = [\"/home/u/.ssh\"]"), "{said}");
        // In the worktree, a refused write is not the sandbox's doing.
        let tail = "sh: /w/t/a.txt: Permission denied\n";
        let none = hint(
            tail,
            &NetworkUse::default(),
            &policy(&[]),
            Some(Path::new("/w/t")),
            Path::new("/r/.git"),
        );
        assert_eq!(none, None);
    }

    #[test]
    fn no_hint_without_the_sandbox_or_a_sign() {
        let mut off = policy(&[]);
        off.enabled = false;
        let tail = "curl: (6) Could not resolve host: api.openai.com\n";
        assert_eq!(
            hint(
                tail,
                &NetworkUse::default(),
                &off,
                None,
                Path::new("/r/.git")
            ),
            None
        );
        assert_eq!(
            hint(
                "error: x\n",
                &NetworkUse::default(),
                &policy(&[]),
                None,
                Path::new("/r/.git")
            ),
            None
        );
    }

    #[test]
    fn a_refused_write_in_the_git_directory_never_suggests_writable() {
        let tail =
            "fatal: Unable to create '/r/.git/worktrees/swarm-x-1/index.lock': Permission denied";
        let said = hint(
            tail,
            &NetworkUse::default(),
            &policy(&[]),
            None,
            Path::new("/r/.git"),
        )
        .unwrap_or_default();
        assert!(said.contains("Leave committing to swarm"), "{said}");
        assert!(!said.contains("writable ="), "{said}");
    }
}
