//! The allow-list of the network proxy (`--allow-domain`, `[sandbox] allow_domains`): which
//! hosts and ports a confined worker may reach ([`crate::proxy`]).

/// One rule of the allow-list: a domain (`api.example.com`), every subdomain of one
/// (`*.example.com`), or an address; with an optional port (else 443 and 80).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

/// The domains workers may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    rules: Vec<Rule>,
}

impl AllowList {
    /// Parses `--allow-domain` values. `Err` names the value and the forms that are allowed.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let rules = entries
            .iter()
            .map(|e| {
                Self::rule(e).ok_or_else(|| {
                    format!(
                        "`{e}` is not a domain to allow: write `api.example.com`, `*.example.com` \
                     or `host:port`"
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    fn rule(entry: &str) -> Option<Rule> {
        let entry = entry.trim().to_ascii_lowercase();
        let (host, port) = split_host_port(&entry)?;
        let (host, wildcard) = match host.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (host, false),
        };
        let host = host.trim_end_matches('.');
        let valid = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
            && !host.contains('*');
        valid.then(|| Rule {
            host: host.to_string(),
            wildcard,
            port,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// May a worker connect to `host` on `port`?
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        self.rules.iter().any(|rule| {
            let name = if rule.wildcard {
                host.strip_suffix(rule.host.as_str())
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.'))
            } else {
                host == rule.host
            };
            let port_ok = match rule.port {
                Some(p) => p == port,
                None => port == 443 || port == 80,
            };
            name && port_ok
        })
    }
}

/// `host[:port]` or `[v6]:port`, the port parsed.
pub(crate) fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port.parse().ok()?))),
        _ => Some((s, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn exact_names_wildcards_and_ports() {
        let allow = list(&["api.anthropic.com", "*.example.com", "localhost:8080"]);
        assert!(allow.allows("api.anthropic.com", 443));
        assert!(allow.allows("API.Anthropic.com.", 80));
        assert!(!allow.allows("api.anthropic.com", 22));
        assert!(!allow.allows("evil-api.anthropic.com", 443));
        assert!(!allow.allows("anthropic.com", 443));
        assert!(allow.allows("a.example.com", 443));
        assert!(allow.allows("a.b.example.com", 443));
        assert!(!allow.allows("example.com", 443));
        assert!(!allow.allows("badexample.com", 443));
        assert!(allow.allows("localhost", 8080));
        assert!(!allow.allows("localhost", 443));
        assert!(!allow.allows("127.0.0.1", 8080));
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in ["", "*", "a b", "x:notaport", "*.*.com", "http://x.com/"] {
            let err = AllowList::parse(&[bad.to_string()]);
            assert!(err.is_err(), "{bad} should be refused");
        }
    }
}
