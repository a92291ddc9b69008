//! The [`Redactor`]: every secret value swarm knows, in the forms a program is likely to
//! print it in, replaced by `[redacted NAME]`.
//!
//! A value is looked for as it is, reversed, in hex, URL-encoded and in base64 (both
//! alphabets, at each of the three byte alignments it can have inside a longer encoded
//! text, such as `Basic base64(user:key)`): a server that echoes a key it was sent in an
//! error, or a worker that encodes a value before printing it, is caught by the same
//! matcher. A value split across lines, or encrypted, is not: a worker given a secret can
//! always send it out in a form nobody knows (docs/SECURITY.md says so), which is why model
//! keys stay in swarm's gateway and never reach a worker.
//!
//! All forms of all values are one Aho-Corasick automaton, so redacting costs one pass over
//! the text whatever the number of secrets.

use std::borrow::Cow;
use std::ffi::OsString;

use aho_corasick::{AhoCorasick, MatchKind};

use super::is_secret_name;

/// Values shorter than this are not redacted (they would match ordinary text), and neither
/// are shorter encoded forms.
pub(crate) const MIN_SECRET_LEN: usize = 8;

/// Replaces every known secret value, in its known forms, with `[redacted NAME]`.
pub(crate) struct Redactor {
    /// One automaton over every form of every value; `None` when there is no secret.
    matcher: Option<AhoCorasick>,
    /// Each pattern's bytes (for [`Redactor::partial_tail`]) and the variable it belongs to.
    patterns: Vec<(Vec<u8>, String)>,
    /// Each pattern's replacement, `[redacted NAME]`.
    replacements: Vec<String>,
}

impl Redactor {
    /// The secrets of an environment.
    pub(crate) fn from_vars(vars: impl Iterator<Item = (OsString, OsString)>) -> Self {
        Self::from_values(vars.filter_map(|(k, v)| {
            let name = k.to_str()?;
            let value = v.to_str()?.trim();
            is_secret_name(name).then(|| (name.to_string(), value.to_string()))
        }))
    }

    /// Secrets given as `(name, value)`.
    pub(crate) fn from_values(values: impl Iterator<Item = (String, String)>) -> Self {
        let mut patterns: Vec<(Vec<u8>, String)> = values
            .filter(|(_, value)| value.len() >= MIN_SECRET_LEN)
            .flat_map(|(name, value)| {
                forms(value.as_bytes())
                    .into_iter()
                    .map(move |form| (form, name.clone()))
            })
            .filter(|(form, _)| form.len() >= MIN_SECRET_LEN)
            .collect();
        patterns.sort();
        patterns.dedup_by(|a, b| a.0 == b.0);
        let matcher = match patterns.is_empty() {
            true => None,
            false => AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(patterns.iter().map(|(p, _)| p))
                .ok(),
        };
        let replacements = patterns
            .iter()
            .map(|(_, name)| format!("[redacted {name}]"))
            .collect();
        Self {
            matcher,
            patterns,
            replacements,
        }
    }

    /// The name of the first secret variable one of whose forms is in `bytes`, if any.
    pub(crate) fn find(&self, bytes: &[u8]) -> Option<&str> {
        let found = self.matcher.as_ref()?.find(bytes)?;
        Some(self.patterns[found.pattern().as_usize()].1.as_str())
    }

    /// `text` with every secret replaced (borrowed when there is none, the usual case).
    pub(crate) fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.matcher.as_ref() {
            Some(m) if m.is_match(text) => Cow::Owned(m.replace_all(text, &self.replacements)),
            _ => Cow::Borrowed(text),
        }
    }

    /// Bytes with every secret replaced.
    pub(crate) fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        match self.matcher.as_ref() {
            Some(m) if m.is_match(bytes) => {
                Cow::Owned(m.replace_all_bytes(bytes, &self.replacements))
            }
            _ => Cow::Borrowed(bytes),
        }
    }

    /// How many bytes at the end of `bytes` could be the start of a secret (so a stream
    /// writer holds them back until it knows).
    pub(crate) fn partial_tail(&self, bytes: &[u8]) -> usize {
        self.patterns
            .iter()
            .map(|(s, _)| {
                (1..s.len().min(bytes.len() + 1))
                    .rev()
                    .find(|&k| bytes.ends_with(&s[..k]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// A redactor for a stream of bytes cut anywhere (a pipe, a streamed answer).
    pub(crate) fn stream(&self) -> StreamRedactor<'_> {
        StreamRedactor {
            redactor: self,
            pending: Vec::new(),
        }
    }
}

/// Redacts a byte stream chunk by chunk: bytes that could begin a secret wait for the next
/// chunk, so a secret cut in two is still replaced whole.
pub(crate) struct StreamRedactor<'r> {
    redactor: &'r Redactor,
    pending: Vec<u8>,
}

impl StreamRedactor<'_> {
    /// What of `chunk` (and what was held back before it) can be passed on now.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.redactor.is_empty() {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let mut clean = self.redactor.redact_bytes(&self.pending).into_owned();
        let hold = self.redactor.partial_tail(&clean);
        self.pending = clean.split_off(clean.len() - hold);
        clean
    }

    /// The rest, at the end of the stream.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.redactor.redact_bytes(&self.pending).into_owned()
    }
}

/// The forms of `value` looked for: as it is, reversed, hex (both cases), URL-encoded, and
/// the parts of its base64 (both alphabets) that do not depend on what surrounds it, at each
/// alignment.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![value.to_vec(), value.iter().rev().copied().collect()];
    let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
    forms.push(hex.to_uppercase().into_bytes());
    forms.push(hex.into_bytes());
    forms.push(url_encoded(value));
    for engine in [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for offset in 0..3 {
            forms.push(base64_core(engine, value, offset));
        }
    }
    forms
}

/// The characters of the base64 of a text that holds `value` at byte `offset` (mod 3) that
/// depend on `value` alone: the groups of three bytes that are all `value`'s, and the
/// characters of the first group that take no bit from the bytes before it.
fn base64_core(engine: &impl base64::Engine, value: &[u8], offset: usize) -> Vec<u8> {
    let mut padded = vec![0u8; offset];
    padded.extend_from_slice(value);
    // Whole groups only: the last partial one depends on what follows.
    padded.truncate(padded.len() / 3 * 3);
    let encoded = engine.encode(&padded).into_bytes();
    // Characters of the first group that take bits from the `offset` bytes before: 0, 2, 3.
    let skip = [0, 2, 3][offset];
    encoded.get(skip..).unwrap_or_default().to_vec()
}

/// `value` percent-encoded as a URL component (unreserved characters kept).
fn url_encoded(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    fn redactor(pairs: &[(&str, &str)]) -> Redactor {
        Redactor::from_vars(pairs.iter().map(|(k, v)| (k.into(), v.into())))
    }

    #[test]
    fn every_known_value_is_replaced() {
        let r = redactor(&[
            ("OPENAI_API_KEY", "sk-test-1234567890"),
            ("GITHUB_TOKEN", "ghp_abcdefgh"),
            ("SHORT_KEY", "abc"),
            ("PATH", "/usr/bin:/bin"),
        ]);
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
        assert_eq!(r.find(b"a ghp_abcdefgh b"), Some("GITHUB_TOKEN"));
    }

    #[test]
    fn encoded_forms_are_replaced_wherever_they_stand() {
        let key = "sk-ant-api03-Zq9xW2vB7nM4kL1pR8sT";
        let r = redactor(&[("ANTHROPIC_API_KEY", key), ("DB_PASSWORD", "p@ss/w0rd+x")]);
        let reversed: String = key.chars().rev().collect();
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        let mut texts = vec![
            format!("echo {reversed}"),
            format!("hex {hex} / {}", hex.to_uppercase()),
        ];
        assert_eq!(
            r.redact("?pw=p%40ss%2Fw0rd%2Bx&"),
            "?pw=[redacted DB_PASSWORD]&"
        );
        // Base64 of texts holding the key at every alignment, in both alphabets.
        for prefix in ["", "u", "us", "user:"] {
            for engine in [&STANDARD, &URL_SAFE] {
                let encoded = engine.encode(format!("{prefix}{key}\n"));
                texts.push(format!("Authorization: Basic {encoded}"));
            }
        }
        for text in texts {
            let clean = r.redact(&text);
            assert!(
                clean.contains("[redacted ANTHROPIC_API_KEY]"),
                "not redacted: {text} -> {clean}"
            );
            assert_eq!(r.find(text.as_bytes()), Some("ANTHROPIC_API_KEY"), "{text}");
        }
    }

    #[test]
    fn a_stream_cut_inside_a_secret_is_redacted_whole() {
        let r = redactor(&[("MY_TOKEN", "tok-0123456789")]);
        let mut stream = r.stream();
        let mut out = stream.push(b"data: tok-012");
        out.extend(stream.push(b"3456789 end\n"));
        out.extend(stream.finish());
        assert_eq!(out, b"data: [redacted MY_TOKEN] end\n");
    }
}
