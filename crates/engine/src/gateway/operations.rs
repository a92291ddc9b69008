//! The API operations the gateway forwards: an allow-list per API, each operation one it can
//! meter (or one that spends nothing). Anything else an agent asks for is refused, with the
//! reason, before a byte goes upstream.
//!
//! A path is matched after the route's name (`/anthropic`, `/openai`…), with one optional
//! version segment (`v1`, `v1beta`, `v1alpha`: an agent's base URL may or may not carry it),
//! segment by segment: no `.`/`..`, no percent-encoding, no empty segment, a model name of
//! plain characters. The query is passed on as it is, but for the credential it may carry
//! on an API that takes its key there ([`Api::key_in_query`]).

use hyper::Method;

/// The dialect a model answer speaks, for reading its usage and its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Anthropic Messages.
    Messages,
    /// OpenAI (and OpenRouter) chat completions.
    Chat,
    /// OpenAI Responses (and its compaction).
    Responses,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

/// What one request asks of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A model answer: reserved before it is sent, metered and settled when it ends.
    Generate(Dialect),
    /// Counting a request's tokens, listing models: nothing is spent.
    Free,
    /// `HEAD` of the API's root, how an agent checks that its endpoint answers (Claude Code
    /// does): answered by the gateway itself, nothing sent upstream.
    Probe,
}

/// The APIs the gateway serves (an agent's `api = "…"`, the route's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Anthropic,
    OpenAi,
    OpenRouter,
    Gemini,
}

impl Api {
    pub(crate) fn of(route: &str) -> Option<Api> {
        match route {
            "anthropic" => Some(Api::Anthropic),
            "openai" => Some(Api::OpenAi),
            "openrouter" => Some(Api::OpenRouter),
            "gemini" => Some(Api::Gemini),
            _ => None,
        }
    }

    /// Does the API take its key in the query (`?key=`)? Gemini's does; on the others a
    /// placeholder in the query is left as it is (worthless), never swapped for the key.
    pub(crate) fn key_in_query(self) -> bool {
        self == Api::Gemini
    }

    /// The operations it forwards, as docs/AGENTS.md lists them (and `HEAD` of the root,
    /// which it answers itself).
    pub(crate) fn described(self) -> &'static str {
        match self {
            Api::Anthropic => {
                "POST messages, POST messages/count_tokens, GET models, GET models/MODEL"
            }
            Api::OpenAi => {
                "POST chat/completions, POST responses, POST responses/compact, GET models, \
                 GET models/MODEL"
            }
            Api::OpenRouter => "POST chat/completions, GET models",
            Api::Gemini => {
                "POST models/MODEL:generateContent, POST models/MODEL:streamGenerateContent, \
                 POST models/MODEL:countTokens, GET models, GET models/MODEL"
            }
        }
    }

    /// The operation `method path` asks for (`path` after the route's name), or why it is
    /// not one the gateway forwards.
    pub(crate) fn operation(self, method: &Method, path: &str) -> Result<Operation, String> {
        let refused = || {
            format!(
                "{method} {path} is not an operation swarm's gateway forwards (it forwards \
                 only what it can meter: {})",
                self.described()
            )
        };
        if *method == Method::HEAD && matches!(path, "" | "/") {
            return Ok(Operation::Probe);
        }
        let segments = segments(path).ok_or_else(refused)?;
        let segments: Vec<&str> = match segments.split_first() {
            Some((first, rest)) if matches!(*first, "v1" | "v1beta" | "v1alpha") => rest.to_vec(),
            _ => segments,
        };
        let get = *method == Method::GET;
        let post = *method == Method::POST;
        let op = match (self, segments.as_slice()) {
            (_, ["models"]) if get => Some(Operation::Free),
            (_, ["models", model]) if get && plain(model, true) => Some(Operation::Free),
            (Api::Anthropic, ["messages"]) if post => Some(Operation::Generate(Dialect::Messages)),
            (Api::Anthropic, ["messages", "count_tokens"]) if post => Some(Operation::Free),
            (Api::OpenAi | Api::OpenRouter, ["chat", "completions"]) if post => {
                Some(Operation::Generate(Dialect::Chat))
            }
            (Api::OpenAi, ["responses"] | ["responses", "compact"]) if post => {
                Some(Operation::Generate(Dialect::Responses))
            }
            (Api::Gemini, ["models", call]) if post => gemini(call),
            _ => None,
        };
        op.ok_or_else(refused)
    }
}

/// `models/MODEL:METHOD` of Gemini.
fn gemini(call: &str) -> Option<Operation> {
    let (model, method) = call.split_once(':')?;
    if !plain(model, false) {
        return None;
    }
    match method {
        "generateContent" | "streamGenerateContent" => Some(Operation::Generate(Dialect::Gemini)),
        "countTokens" => Some(Operation::Free),
        _ => None,
    }
}

/// The path's segments, if each is plain: no empty one (`//`, a trailing `/`), no `.` or
/// `..`, no percent-encoding or other character outside `A-Za-z0-9._:-`.
fn segments(path: &str) -> Option<Vec<&str>> {
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    segments.iter().all(|s| plain(s, true)).then_some(segments)
}

/// A segment of letters, digits, `.`, `_`, `-` (and `:` where `colon`), not `.` or `..`.
fn plain(segment: &str, colon: bool) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') || (colon && b == b':')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_forwards_its_own_operations_only() {
        let post = Method::POST;
        let get = Method::GET;
        let generate = |d| Ok(Operation::Generate(d));
        for (api, method, path, expected) in [
            (
                Api::Anthropic,
                &post,
                "/v1/messages",
                generate(Dialect::Messages),
            ),
            (
                Api::Anthropic,
                &post,
                "/messages",
                generate(Dialect::Messages),
            ),
            (
                Api::Anthropic,
                &post,
                "/v1/messages/count_tokens",
                Ok(Operation::Free),
            ),
            (Api::Anthropic, &get, "/v1/models", Ok(Operation::Free)),
            (
                Api::Anthropic,
                &get,
                "/v1/models/claude-sonnet-4-5",
                Ok(Operation::Free),
            ),
            (
                Api::OpenAi,
                &post,
                "/chat/completions",
                generate(Dialect::Chat),
            ),
            (
                Api::OpenAi,
                &post,
                "/v1/responses",
                generate(Dialect::Responses),
            ),
            (
                Api::OpenAi,
                &post,
                "/responses/compact",
                generate(Dialect::Responses),
            ),
            (
                Api::OpenRouter,
                &post,
                "/chat/completions",
                generate(Dialect::Chat),
            ),
            (
                Api::Gemini,
                &post,
                "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
                generate(Dialect::Gemini),
            ),
            (
                Api::Gemini,
                &post,
                "/v1beta/models/gemini-2.5-pro:countTokens",
                Ok(Operation::Free),
            ),
        ] {
            assert_eq!(
                api.operation(method, path),
                expected,
                "{api:?} {method} {path}"
            );
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let post = Method::POST;
        let get = Method::GET;
        for (api, method, path) in [
            // Another API's operation, another method, something unmetered.
            (Api::Anthropic, &post, "/v1/chat/completions"),
            (Api::OpenRouter, &post, "/responses"),
            (Api::Anthropic, &get, "/v1/messages"),
            (Api::Anthropic, &post, "/v1/files"),
            (Api::OpenAi, &post, "/v1/embeddings"),
            (Api::OpenAi, &post, "/v1/batches"),
            (Api::OpenAi, &get, "/v1/responses/resp_1"),
            (Api::OpenAi, &Method::DELETE, "/v1/models/ft:x"),
            (
                Api::Gemini,
                &post,
                "/v1beta/models/gemini-2.5-pro:embedContent",
            ),
            (Api::Gemini, &post, "/v1beta/models/a:b:generateContent"),
            (Api::Gemini, &post, "/v1beta/tunedModels/x:generateContent"),
            // Paths that are not plain.
            (Api::Anthropic, &post, "/v1/../v1/messages"),
            (Api::Anthropic, &post, "/v1/%6dessages"),
            (Api::Anthropic, &post, "/v1/messages/"),
            (Api::Anthropic, &post, "/v1//messages"),
            (Api::Anthropic, &post, "/v2/v1/messages"),
            (Api::Anthropic, &post, "v1/messages"),
            (Api::Anthropic, &get, "/v1/models/.."),
            (Api::Anthropic, &Method::HEAD, "/v1/messages"),
            (Api::Anthropic, &get, ""),
        ] {
            let refused = api.operation(method, path).unwrap_err();
            assert!(refused.contains("not an operation"), "{refused}");
        }
    }
}
