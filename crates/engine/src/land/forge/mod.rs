//! The forges that take pull requests (GitHub) and merge requests (GitLab), through their
//! REST APIs: find the request of a branch, open one, read its state.
//!
//! Where the forge is: the remote's URL (`git@github.com:owner/name.git`,
//! `https://gitlab.example.com/group/sub/name`), else `--forge-repo`; the API's base URL from
//! `--forge-api`, else the variable each forge's CI sets (`GITHUB_API_URL`, `CI_API_V4_URL`),
//! else the host's usual one. The token comes from the environment only and lives in a
//! [`Token`], which does not print; the base URL must be https unless it is this machine, so
//! the token never travels in the clear.

mod github;
mod gitlab;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::env_vars::{
    CI_API_V4_URL, CI_JOB_TOKEN, GH_TOKEN, GITHUB_API_URL, GITHUB_TOKEN, GITLAB_TOKEN,
};

/// Which forge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    #[serde(rename = "github")]
    GitHub,
    #[serde(rename = "gitlab")]
    GitLab,
}

impl ForgeKind {
    pub fn name(self) -> &'static str {
        match self {
            ForgeKind::GitHub => "github",
            ForgeKind::GitLab => "gitlab",
        }
    }

    /// What the forge calls a request to merge a branch.
    pub fn request_word(self) -> &'static str {
        match self {
            ForgeKind::GitHub => "pull request",
            ForgeKind::GitLab => "merge request",
        }
    }

    /// The variables the token is read from, in order.
    pub fn token_vars(self) -> [&'static str; 2] {
        match self {
            ForgeKind::GitHub => [GITHUB_TOKEN, GH_TOKEN],
            ForgeKind::GitLab => [GITLAB_TOKEN, CI_JOB_TOKEN],
        }
    }
}

/// A request's state on the forge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrState {
    Open,
    Merged,
    Closed,
}

impl PrState {
    pub fn as_str(self) -> &'static str {
        match self {
            PrState::Open => "open",
            PrState::Merged => "merged",
            PrState::Closed => "closed",
        }
    }
}

/// A pull or merge request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequest {
    /// GitHub's number, GitLab's `iid`.
    pub number: u64,
    pub url: String,
    pub state: PrState,
}

/// A forge's API token: never printed, never written.
#[derive(Clone)]
pub(crate) struct Token {
    value: String,
    /// The variable it came from (GitLab's job token goes in another header).
    var: &'static str,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(${})", self.var)
    }
}

impl Token {
    /// The token of `kind` from the environment, or the variables that would hold it.
    pub(crate) fn from_env(kind: ForgeKind) -> Result<Self, [&'static str; 2]> {
        kind.token_vars()
            .into_iter()
            .find_map(|var| {
                let value = std::env::var(var).ok().filter(|v| !v.trim().is_empty())?;
                Some(Self {
                    value: value.trim().to_string(),
                    var,
                })
            })
            .ok_or(kind.token_vars())
    }
}

/// Where a remote's URL points: its host and the repository's path there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteUrl {
    pub host: String,
    pub path: String,
}

impl RemoteUrl {
    /// Reads `git@host:path.git`, `ssh://[user@]host[:port]/path`, `https://host/path.git`;
    /// `None` for a local path or anything else.
    pub(crate) fn parse(url: &str) -> Option<Self> {
        let (host, path) = match url.split_once("://") {
            Some((scheme, rest)) => {
                if !matches!(scheme, "https" | "http" | "ssh" | "git" | "git+ssh") {
                    return None;
                }
                let (authority, path) = rest.split_once('/')?;
                let host = authority.rsplit('@').next()?;
                (host.split(':').next()?, path)
            }
            None => {
                let (authority, path) = url.split_once(':')?;
                if authority.contains('/') {
                    return None;
                }
                (authority.rsplit('@').next()?, path)
            }
        };
        let path = path.trim_matches('/');
        let path = path
            .strip_suffix(".git")
            .unwrap_or(path)
            .trim_end_matches('/');
        (!host.is_empty() && path.contains('/')).then(|| Self {
            host: host.to_ascii_lowercase(),
            path: path.to_string(),
        })
    }

    /// The forge the host looks like (`github.com`, `gitlab.example.org`).
    pub(crate) fn kind(&self) -> Option<ForgeKind> {
        let host = &self.host;
        if host == "github.com" || host.split('.').any(|p| p == "github") {
            Some(ForgeKind::GitHub)
        } else if host == "gitlab.com" || host.split('.').any(|p| p == "gitlab") {
            Some(ForgeKind::GitLab)
        } else {
            None
        }
    }
}

/// The API base URL of `kind`: `explicit`, else its CI's variable, else the host's usual one.
pub(crate) fn api_base(kind: ForgeKind, explicit: Option<&str>, host: Option<&str>) -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let base = match kind {
        ForgeKind::GitHub => explicit
            .map(str::to_string)
            .or_else(|| var(GITHUB_API_URL))
            .unwrap_or_else(|| match host {
                Some(h) if h != "github.com" => format!("https://{h}/api/v3"),
                _ => "https://api.github.com".into(),
            }),
        ForgeKind::GitLab => explicit
            .map(str::to_string)
            .or_else(|| var(CI_API_V4_URL))
            .unwrap_or_else(|| format!("https://{}/api/v4", host.unwrap_or("gitlab.com"))),
    };
    base.trim_end_matches('/').to_string()
}

/// Is `url` one a token may be sent to: https, or http to this machine, with no user name
/// or password in it?
pub(crate) fn safe_for_token(url: &str) -> bool {
    crate::net::endpoint(url).is_ok_and(|parsed| match parsed.scheme() {
        "https" => true,
        _ => crate::net::host_is_local(&parsed),
    })
}

/// A call to the forge that failed.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {message}")]
pub struct ForgeError {
    /// `POST /repos/o/r/pulls`.
    pub call: String,
    pub status: Option<u16>,
    pub message: String,
}

/// What a new request says.
pub(crate) struct NewRequest<'a> {
    pub head: &'a str,
    pub base: &'a str,
    pub title: &'a str,
    pub body: &'a str,
    /// CODEOWNERS owners (`@user`, `@org/team`, emails); those the forge can take become
    /// reviewers.
    pub owners: &'a [String],
}

/// One forge, one repository on it.
pub(crate) struct Forge {
    pub kind: ForgeKind,
    pub repo: String,
    pub api: String,
    token: Token,
    http: reqwest::Client,
}

impl Forge {
    pub(crate) fn new(
        kind: ForgeKind,
        repo: String,
        api: String,
        token: Token,
    ) -> anyhow::Result<Self> {
        let http = crate::net::client(concat!("swarm/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(crate::net::CONNECT_TIMEOUT)
            .timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            kind,
            repo,
            api,
            token,
            http,
        })
    }

    /// The request whose source is branch `head`, in any state.
    pub(crate) async fn find(&self, head: &str) -> Result<Option<PullRequest>, ForgeError> {
        match self.kind {
            ForgeKind::GitHub => github::find(self, head).await,
            ForgeKind::GitLab => gitlab::find(self, head).await,
        }
    }

    /// Opens a request; the warnings say which owners could not be asked to review.
    pub(crate) async fn open(
        &self,
        new: &NewRequest<'_>,
    ) -> Result<(PullRequest, Vec<String>), ForgeError> {
        match self.kind {
            ForgeKind::GitHub => github::open(self, new).await,
            ForgeKind::GitLab => gitlab::open(self, new).await,
        }
    }

    /// The state of request `number`.
    pub(crate) async fn state(&self, number: u64) -> Result<PrState, ForgeError> {
        match self.kind {
            ForgeKind::GitHub => github::state(self, number).await,
            ForgeKind::GitLab => gitlab::state(self, number).await,
        }
    }

    /// Sends `request` (to `path` under the API) with the token, and reads a JSON answer.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, ForgeError> {
        let call = format!("{method} {path}");
        let fail = |status: Option<u16>, message: String| ForgeError {
            call: call.clone(),
            status,
            message: crate::secrets::redact(&message).replace(&self.token.value, "[token]"),
        };
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.api))
            .map_err(|e| fail(None, format!("not a URL: {e}")))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut request = self.http.request(method.clone(), url);
        request = match (self.kind, self.token.var) {
            (ForgeKind::GitHub, _) => request
                .bearer_auth(&self.token.value)
                .header("accept", "application/vnd.github+json")
                .header("x-github-api-version", "2022-11-28"),
            (ForgeKind::GitLab, CI_JOB_TOKEN) => request.header("job-token", &self.token.value),
            (ForgeKind::GitLab, _) => request.header("private-token", &self.token.value),
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        let answer = request
            .send()
            .await
            .map_err(|e| fail(None, e.without_url().to_string()))?;
        let status = answer.status();
        if status.is_redirection() {
            let refused = crate::net::redirect_refused(status.as_u16(), answer.headers());
            return Err(fail(Some(status.as_u16()), refused));
        }
        let text = answer
            .text()
            .await
            .map_err(|e| fail(Some(status.as_u16()), e.without_url().to_string()))?;
        if !status.is_success() {
            let short: String = text.chars().take(300).collect();
            return Err(fail(Some(status.as_u16()), format!("{status}: {short}")));
        }
        serde_json::from_str(&text).map_err(|e| {
            fail(
                Some(status.as_u16()),
                format!("an answer that is not JSON ({e})"),
            )
        })
    }
}

/// A request read from a forge's answer: its number and web URL in the fields `number` and
/// `url` name (`number`/`html_url` on GitHub, `iid`/`web_url` on GitLab), its state by
/// `state_of`.
fn read_request(
    value: &serde_json::Value,
    [number, url]: [&str; 2],
    state_of: fn(&serde_json::Value) -> PrState,
    call: &str,
) -> Result<PullRequest, ForgeError> {
    match (value[number].as_u64(), value[url].as_str()) {
        (Some(n), Some(u)) => Ok(PullRequest {
            number: n,
            url: u.to_string(),
            state: state_of(value),
        }),
        _ => Err(ForgeError {
            call: call.to_string(),
            status: None,
            message: format!("the answer has no {number} or {url}"),
        }),
    }
}

/// The first request of a list the forge answered (none: no request), as [`read_request`].
fn first_request(
    answer: &serde_json::Value,
    fields: [&str; 2],
    state_of: fn(&serde_json::Value) -> PrState,
    call: &str,
) -> Result<Option<PullRequest>, ForgeError> {
    answer
        .as_array()
        .and_then(|all| all.first())
        .map(|first| read_request(first, fields, state_of, call))
        .transpose()
}

/// `text` with every byte but letters, digits and `-._~` percent-encoded (a GitLab project
/// path as its id).
fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Does `name` look like a user name a forge accepts (so it cannot smuggle a query in)?
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls() {
        let parse = |u: &str| RemoteUrl::parse(u).map(|r| (r.host, r.path));
        let gh = Some(("github.com".to_string(), "acme/app".to_string()));
        assert_eq!(parse("git@github.com:acme/app.git"), gh);
        assert_eq!(parse("https://github.com/acme/app"), gh);
        assert_eq!(
            parse("https://x-access-token:abc@github.com/acme/app.git/"),
            gh
        );
        assert_eq!(parse("ssh://git@github.com:22/acme/app.git"), gh);
        assert_eq!(
            parse("git@gitlab.example.org:group/sub/app.git"),
            Some(("gitlab.example.org".into(), "group/sub/app".into()))
        );
        assert_eq!(parse("/srv/git/app.git"), None);
        assert_eq!(parse("../app.git"), None);
        assert_eq!(parse("file:///srv/app.git"), None);
        let kind = |u: &str| RemoteUrl::parse(u).and_then(|r| r.kind());
        assert_eq!(kind("git@github.com:a/b"), Some(ForgeKind::GitHub));
        assert_eq!(kind("https://github.acme.com/a/b"), Some(ForgeKind::GitHub));
        assert_eq!(kind("https://gitlab.com/a/b"), Some(ForgeKind::GitLab));
        assert_eq!(kind("https://git.example.com/a/b"), None);
    }

    #[test]
    fn a_token_goes_only_over_https_or_to_this_machine() {
        assert!(safe_for_token("https://api.github.com"));
        assert!(safe_for_token("http://127.0.0.1:8080/api"));
        assert!(safe_for_token("http://localhost:1/"));
        assert!(!safe_for_token("http://api.example.com"));
        assert!(!safe_for_token("ftp://127.0.0.1"));
        assert!(!safe_for_token("not a url"));
        assert!(!safe_for_token("http://127.0.0.1.evil.example/api"));
        assert!(!safe_for_token("http://localhost:1@192.0.2.2/api"));
        assert!(!safe_for_token(
            "https://user:token@gitlab.example.com/api/v4"
        ));
    }

    #[test]
    fn names_and_ids() {
        assert_eq!(encode_component("group/sub/app"), "group%2Fsub%2Fapp");
        assert!(plain_name("octo-cat_1.x"));
        assert!(!plain_name("a&b=c"));
        let token = Token {
            value: "secret".into(),
            var: GITHUB_TOKEN,
        };
        assert_eq!(format!("{token:?}"), "Token($GITHUB_TOKEN)");
    }
}
