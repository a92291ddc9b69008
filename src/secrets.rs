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

/// Values shorter than this are not redacted (they would match ordinary text).
const MIN_SECRET_LEN: usize = 8;

/// Is a variable of this name a secret?
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAMES.contains(&upper.as_str())
        || SECRET_SUFFIXES.iter().any(|sfx| upper.ends_with(sfx))
        || SECRET_PARTS.iter().any(|part| upper.contains(part))
}

/// The environment of a worker process: swarm's own, without secrets (unless `pass` names
/// them) and without the variables that would point its git at another repository.
pub fn worker_env(pass: &[String]) -> Vec<(OsString, OsString)> {
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

/// Replaces every known secret value with `[redacted NAME]`.
pub struct Redactor {
    /// (value, what to write instead), longest first so a secret containing another is
    /// replaced whole.
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// The secrets of an environment.
    pub fn from_vars(vars: impl Iterator<Item = (OsString, OsString)>) -> Self {
        let mut secrets: Vec<(String, String)> = vars
            .filter_map(|(k, v)| {
                let name = k.to_str()?;
                let value = v.to_str()?.trim();
                (is_secret_name(name) && value.len() >= MIN_SECRET_LEN)
                    .then(|| (value.to_string(), format!("[redacted {name}]")))
            })
            .collect();
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        Self { secrets }
    }

    /// The name of the first secret variable whose value is in `bytes`, if any.
    pub fn find(&self, bytes: &[u8]) -> Option<&str> {
        self.secrets
            .iter()
            .find(|(s, _)| find(bytes, s.as_bytes(), 0).is_some())
            .map(|(_, with)| with.trim_start_matches("[redacted ").trim_end_matches(']'))
    }

    /// `text` with every secret replaced (borrowed when there is none, the usual case).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.secrets.iter().any(|(s, _)| text.contains(s.as_str())) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_string();
        for (secret, with) in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), with);
            }
        }
        Cow::Owned(out)
    }

    /// Bytes with every secret replaced.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let found = |s: &str| find(bytes, s.as_bytes(), 0).is_some();
        if !self.secrets.iter().any(|(s, _)| found(s)) {
            return Cow::Borrowed(bytes);
        }
        let mut out = bytes.to_vec();
        for (secret, with) in &self.secrets {
            let mut at = 0;
            while let Some(pos) = find(&out, secret.as_bytes(), at) {
                out.splice(pos..pos + secret.len(), with.bytes());
                at = pos + with.len();
            }
        }
        Cow::Owned(out)
    }

    /// How many bytes at the end of `bytes` could be the start of a secret (so a stream
    /// writer holds them back until it knows).
    pub fn partial_tail(&self, bytes: &[u8]) -> usize {
        self.secrets
            .iter()
            .map(|(s, _)| {
                let s = s.as_bytes();
                (1..s.len().min(bytes.len() + 1))
                    .rev()
                    .find(|&k| bytes.ends_with(&s[..k]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    (from..=haystack.len() - needle.len()).find(|&i| &haystack[i..i + needle.len()] == needle)
}

/// The redactor of this process's environment (read once).
pub fn redactor() -> &'static Redactor {
    static REDACTOR: OnceLock<Redactor> = OnceLock::new();
    REDACTOR.get_or_init(|| Redactor::from_vars(std::env::vars_os()))
}

/// `text` with the secrets of swarm's environment replaced.
pub fn redact(text: &str) -> Cow<'_, str> {
    redactor().redact(text)
}

/// `bytes` with the secrets of swarm's environment replaced.
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    redactor().redact_bytes(bytes)
}

/// `value` with the secrets in its strings replaced, when it holds any (a JSON round trip;
/// values without secrets, the usual case, cost one serialization).
pub fn redact_value<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> Option<T> {
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

    #[test]
    fn redaction_replaces_every_known_value() {
        let r = Redactor::from_vars(
            [
                ("OPENAI_API_KEY", "sk-test-1234567890"),
                ("GITHUB_TOKEN", "ghp_abcdefgh"),
                ("SHORT_KEY", "abc"),
                ("PATH", "/usr/bin:/bin"),
            ]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into())),
        );
        assert_eq!(
            r.redact("key sk-test-1234567890 and ghp_abcdefgh; abc /usr/bin"),
            "key [redacted OPENAI_API_KEY] and [redacted GITHUB_TOKEN]; abc /usr/bin"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(
            &*r.redact_bytes(b"x sk-test-1234567890 y"),
            b"x [redacted OPENAI_API_KEY] y"
        );
        assert_eq!(r.partial_tail(b"output sk-te"), 5);
        assert_eq!(r.partial_tail(b"output"), 0);
    }
}
