//! Secrets: which environment variables workers never see, and the redaction of every secret
//! value swarm knows from what it writes and sends.
//!
//! A variable is a secret when its name says so ([`is_secret_name`]: `*_KEY`, `*_TOKEN`,
//! `*_SECRET`, `*PASSWORD*`…, and the model variables). Worker processes get the environment
//! without them ([`worker_env`]) unless the user's `[sandbox] env` passes one by name. The
//! values of all of them (at least 8 bytes long) are redacted ([`redact`]) from the logs,
//! transcripts, events, reports and model requests swarm writes or sends, whether or not a
//! worker got them: a secret that reaches a worker another way (a file, an echo of the API
//! key in an error) still does not leave swarm.

use std::borrow::Cow;
use std::ffi::OsString;
use std::sync::OnceLock;

use crate::env_vars;

mod redactor;

pub(crate) use redactor::{Redactor, StreamRedactor};

pub(crate) use swarm_sandbox::random_bytes;

/// [`random_bytes`] in hex.
pub fn random_hex<const N: usize>() -> std::io::Result<String> {
    Ok(random_bytes::<N>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Names ending in one of these (case-insensitively) are secrets: `*_KEY`, `*_TOKEN`…
const SECRET_SUFFIXES: &[&str] = &[
    "_KEY",
    "_KEYS",
    "_TOKEN",
    "_TOKENS",
    "_SECRET",
    "_SECRETS",
    "_CREDENTIALS",
    "_AUTH",
    "_PAT",
];

/// Names containing one of these are secrets: `*PASSWORD*`.
const SECRET_PARTS: &[&str] = &["PASSWORD", "PASSWD"];

/// Variables of the model endpoint, and agent sockets that act as credentials.
const SECRET_NAMES: &[&str] = &[
    env_vars::SWARM_API_KEY,
    env_vars::OPENAI_API_KEY,
    env_vars::OPENAI_BASE_URL,
    env_vars::SWARM_BASE_URL,
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
];

/// Is a variable of this name a secret?
pub(crate) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAMES.contains(&upper.as_str())
        || SECRET_SUFFIXES.iter().any(|sfx| upper.ends_with(sfx))
        || SECRET_PARTS.iter().any(|part| upper.contains(part))
}

/// The environment of a worker process: swarm's own, without secrets (unless `pass` names
/// them) and without the variables that would point its git at another repository.
pub(crate) fn worker_env(pass: &[String]) -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| {
            let Some(name) = k.to_str() else {
                return false;
            };
            let git_location = matches!(
                name,
                "GIT_DIR"
                    | "GIT_WORK_TREE"
                    | "GIT_INDEX_FILE"
                    | "GIT_OBJECT_DIRECTORY"
                    | "GIT_COMMON_DIR"
            );
            !git_location && (!is_secret_name(name) || pass.iter().any(|p| p == name))
        })
        .collect()
}

/// The redactor of this process's environment (read once).
pub(crate) fn redactor() -> &'static Redactor {
    static REDACTOR: OnceLock<Redactor> = OnceLock::new();
    REDACTOR.get_or_init(|| Redactor::from_vars(std::env::vars_os()))
}

/// `text` with the secrets of swarm's environment replaced.
pub(crate) fn redact(text: &str) -> Cow<'_, str> {
    redactor().redact(text)
}

/// `bytes` with the secrets of swarm's environment replaced.
pub(crate) fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    redactor().redact_bytes(bytes)
}

/// `value` with the secrets in its strings replaced, when it holds any (a JSON round trip;
/// values without secrets, the usual case, cost one serialization).
pub(crate) fn redact_value<T: serde::Serialize + serde::de::DeserializeOwned>(
    value: &T,
) -> Option<T> {
    if redactor().is_empty() {
        return None;
    }
    let json = serde_json::to_string(value).ok()?;
    match redactor().redact(&json) {
        Cow::Borrowed(_) => None,
        Cow::Owned(clean) => serde_json::from_str(&clean).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        for secret in [
            "OPENAI_API_KEY",
            "SWARM_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "MYSQL_PASSWORD_FILE",
            "github_token",
            "SSH_AUTH_SOCK",
            "CLIENT_SECRET",
        ] {
            assert!(is_secret_name(secret), "{secret}");
        }
        for plain in [
            "PATH",
            "HOME",
            "KEYBOARD",
            "TOKENIZERS_PARALLELISM",
            "SWARM_FILE",
            "LANG",
        ] {
            assert!(!is_secret_name(plain), "{plain}");
        }
    }
}
