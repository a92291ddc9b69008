//! Where a credential may go, decided once, on a parsed URL.
//!
//! Every place that sends a key or a token (the built-in worker's model client, the agents'
//! gateway, `swarm land`'s forge client) and every place that decides whether an endpoint
//! is this machine (a repository's or a plan's `[model] base_url`, a forge API over plain
//! HTTP) goes through this module:
//!
//! - [`is_local`]: a URL is on this machine when its host, as the `url` crate (reqwest's own
//!   parser) reads it, is an IP literal that is loopback (`127.0.0.0/8`, `::1`, an
//!   IPv4-mapped loopback) or exactly `localhost`, and it carries no user name or password.
//!   `127.0.0.1.evil.example`, `localhost.evil.example` and `localhost:1@192.0.2.2` are
//!   names or addresses elsewhere: not local.
//! - [`client`]: an HTTP client that follows no redirect. reqwest's default policy follows
//!   up to ten and drops only `Authorization`, `Cookie` and `Proxy-Authorization` when the
//!   host changes, so `x-api-key`, `x-goog-api-key`, `api-key` and `PRIVATE-TOKEN` would go
//!   along to wherever a `Location` points. A 30x is an answer like any other here: the
//!   gateway passes it back to the agent, the model and forge clients fail naming it.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::header::{HeaderMap, LOCATION};
use url::Url;

/// Why an endpoint a credential would be sent to is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EndpointError {
    #[error("not a URL ({0})")]
    Unparsable(String),
    #[error("not an http(s) URL")]
    Scheme,
    #[error("it carries a user name or password (the key would go to whoever they name)")]
    Userinfo,
}

/// `text` as an endpoint a credential may be sent to: an http or https URL without a user
/// name or password.
pub(crate) fn endpoint(text: &str) -> Result<Url, EndpointError> {
    let url = Url::parse(text.trim()).map_err(|e| EndpointError::Unparsable(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(EndpointError::Scheme);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(EndpointError::Userinfo);
    }
    Ok(url)
}

/// Is `text` an endpoint on this machine (see the module's doc)? Anything that does not
/// parse as an [`endpoint`] is not.
pub(crate) fn is_local(text: &str) -> bool {
    endpoint(text).is_ok_and(|url| host_is_local(&url))
}

/// Is the host of `url` this machine: a loopback IP literal, or exactly `localhost`?
pub(crate) fn host_is_local(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).to_canonical().is_loopback(),
        None => false,
    }
}

/// A client for requests that carry a credential: it follows no redirect.
pub(crate) fn client(user_agent: &'static str) -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(user_agent)
}

/// rustls needs a process-wide crypto provider; swarm uses ring's.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What a client that follows no redirect says of a 30x: where it pointed.
pub(crate) fn redirect_refused(status: u16, headers: &HeaderMap) -> String {
    let location = headers
        .get(LOCATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_else(|| "nowhere".to_string());
    format!(
        "answered {status} redirecting to {location}; swarm follows no redirect with a \
         credential (point swarm at the final address itself)"
    )
}

/// How long a connection may take to be made.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_literals_and_localhost_are_local() {
        for (url, local) in [
            ("http://127.0.0.1:11434/v1", true),
            ("http://127.255.0.9/v1", true),
            ("http://localhost:8000/v1", true),
            ("http://LOCALHOST:8000/v1", true),
            ("http://[::1]:8000/v1", true),
            ("http://[::ffff:127.0.0.1]:8000/", true),
            // What reqwest would connect to: the url crate reads these as 127.0.0.1.
            ("http://127.1:9/", true),
            ("http://0x7f.1:9/", true),
            ("http://2130706433:9/", true),
            ("https://api.openai.com/v1", false),
            ("http://127.0.0.1.evil.example:9/v1", false),
            ("http://127.evil.example/", false),
            ("https://localhost.evil.example/v1", false),
            ("http://localhost./v1", false),
            ("http://localhost:1@192.0.2.2:9/v1", false),
            ("http://user:pw@127.0.0.1:9/v1", false),
            ("http://[::ffff:192.0.2.2]:9/", false),
            ("http://[::2]:9/", false),
            ("http://0.0.0.0:9/", false),
            ("http://xn--lcalhost-9za/", false),
            ("http://lоcalhost/", false),
            ("ftp://127.0.0.1/", false),
            ("file:///etc/passwd", false),
            ("127.0.0.1:8080", false),
            ("not a url", false),
            ("", false),
        ] {
            assert_eq!(is_local(url), local, "{url}");
        }
    }

    #[test]
    fn endpoints_with_userinfo_or_another_scheme_are_refused() {
        assert_eq!(
            endpoint("http://localhost:1@192.0.2.2:9/v1"),
            Err(EndpointError::Userinfo)
        );
        assert_eq!(endpoint("http://:pw@h/"), Err(EndpointError::Userinfo));
        assert_eq!(endpoint("unix:/run/x"), Err(EndpointError::Scheme));
        assert!(endpoint("https://api.example.com/v1").is_ok());
    }

    /// Random URLs made of the pieces tricky hosts are made of: whatever the parser makes
    /// of one, a URL called local resolves only to loopback addresses (the system's
    /// resolver is the oracle: it reads IP literals itself and `localhost` from the hosts
    /// file, and is asked nothing else, since nothing else is called local).
    #[test]
    fn no_url_called_local_reaches_another_address() {
        const PIECES: &[&str] = &[
            "127",
            "0",
            "1",
            "255",
            "0x7f",
            "0177",
            "localhost",
            "LocalHost",
            ".",
            ".",
            ":",
            "@",
            "evil",
            "example",
            "[",
            "]",
            "::1",
            "::ffff:",
            "%2e",
            "%00",
            "xn--",
            "ｌ",
            "lоcal",
            "\u{3002}",
            "192.0.2.2",
            "2130706433",
            "#",
            "?",
            "/",
            "\\",
            " ",
            "user",
        ];
        let mut rng = fastrand::Rng::with_seed(48);
        let mut called_local = 0;
        for _ in 0..20_000 {
            let n = rng.usize(1..7);
            let host: String = (0..n).map(|_| PIECES[rng.usize(..PIECES.len())]).collect();
            let text = format!("http://{host}:9/v1");
            if !is_local(&text) {
                continue;
            }
            called_local += 1;
            let url = Url::parse(&text).unwrap();
            let addrs = url.socket_addrs(|| None).unwrap_or_default();
            assert!(
                !addrs.is_empty(),
                "{text} is called local but resolves to nothing"
            );
            assert!(
                addrs.iter().all(|a| a.ip().to_canonical().is_loopback()),
                "{text} is called local but resolves to {addrs:?}"
            );
        }
        assert!(
            called_local > 50,
            "only {called_local} local URLs generated"
        );
    }

    #[test]
    fn a_refused_redirect_names_where_it_pointed() {
        let mut headers = HeaderMap::new();
        headers.insert(LOCATION, "http://other.example/v1".parse().unwrap());
        let text = redirect_refused(307, &headers);
        assert!(
            text.contains("307 redirecting to http://other.example/v1"),
            "{text}"
        );
    }
}
