//! What a model answer says it used, read from the bytes on their way to the agent: the
//! `usage` of Anthropic Messages (`message_start`, `message_delta`, or the whole message),
//! OpenAI chat completions (the last chunk, or the whole answer) and Responses
//! (`response.completed`, or the whole response), and Gemini's `usageMetadata`, streamed
//! (server-sent events) or whole.
//!
//! Streamed events repeat or grow their counts (Anthropic's output count is cumulative,
//! Gemini's whole usage is), so each count is the largest seen in the answer.
//!
//! A usage counts only once the answer says it is whole, in its dialect's words: a streamed
//! message's `message_stop`, a streamed chat completion's usage chunk and `[DONE]`, a
//! response's `response.completed` (or `incomplete`, `failed`), a Gemini candidate's
//! `finishReason`; a whole JSON answer is whole once it parses. An answer cut off before
//! that (by the upstream, the network or the agent) has no usage that can be trusted: the
//! gateway charges its reservation instead.

use serde_json::Value;

use super::operations::Dialect;
use crate::model::events::{EventDecoder, documents};
use crate::report::Tokens;

/// The longest event line read; a longer one is skipped.
const LINE_CAP: usize = 4 * 1024 * 1024;
/// The largest whole answer read for its usage.
const BODY_CAP: usize = 16 * 1024 * 1024;

/// The usage of one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The model that answered, as the answer names it.
    pub model: Option<String>,
    pub tokens: Tokens,
}

/// Reads an answer's usage from its bytes, chunk by chunk.
#[derive(Debug)]
pub(crate) struct UsageReader {
    /// Server-sent events, read event by event (else one JSON document, read at the end).
    events: Option<EventDecoder>,
    pending: Vec<u8>,
    /// A body over its cap: skipped.
    overflow: bool,
    seen: Seen,
}

#[derive(Debug)]
struct Seen {
    dialect: Dialect,
    found: bool,
    /// The answer said it was whole (its dialect's last event, or a whole JSON answer).
    ended: bool,
    /// A chat completion's usage chunk was seen (`[DONE]` must follow it).
    chat_usage: bool,
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
    model: Option<String>,
}

impl UsageReader {
    /// For an answer of this `Content-Type`, in `dialect`.
    pub(crate) fn new(content_type: &str, dialect: Dialect) -> Self {
        Self {
            events: content_type
                .trim_start()
                .starts_with("text/event-stream")
                .then(|| EventDecoder::new(LINE_CAP)),
            pending: Vec::new(),
            overflow: false,
            seen: Seen {
                dialect,
                found: false,
                ended: false,
                chat_usage: false,
                input: 0,
                cache_creation: 0,
                cache_read: 0,
                output: 0,
                model: None,
            },
        }
    }

    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        let seen = &mut self.seen;
        match &mut self.events {
            // A line over the cap is skipped: no usage event is that long.
            Some(events) => events.feed(chunk, &mut |data| look_at_event(data, seen)),
            None if self.overflow => {}
            None if self.pending.len() + chunk.len() > BODY_CAP => {
                self.overflow = true;
                self.pending = Vec::new();
            }
            None => self.pending.extend_from_slice(chunk),
        }
    }

    /// The answer's usage, once it said it was whole and named one.
    pub(crate) fn finish(mut self) -> Option<Answer> {
        let seen = &mut self.seen;
        match &mut self.events {
            Some(events) => events.finish(&mut |data| look_at_event(data, seen)),
            None if self.overflow => {}
            None => {
                if let Ok(value) = serde_json::from_slice::<Value>(&self.pending) {
                    match &value {
                        // Gemini without `alt=sse` streams an array of answers.
                        Value::Array(items) => items.iter().for_each(|v| look(v, seen)),
                        one => look(one, seen),
                    }
                    seen.ended = true;
                }
            }
        }
        let s = self.seen;
        (s.found && s.ended).then(|| Answer {
            model: s.model,
            tokens: Tokens {
                prompt: s
                    .input
                    .saturating_add(s.cache_creation)
                    .saturating_add(s.cache_read),
                completion: s.output,
            },
        })
    }
}

/// One event's data: the JSON documents in it, looked at for a usage and the answer's end.
fn look_at_event(data: &[u8], seen: &mut Seen) {
    let data = data.trim_ascii();
    if data == b"[DONE]" && seen.chat_usage {
        seen.ended = true;
    }
    if data.first() != Some(&b'{') {
        return;
    }
    for document in documents(data).into_iter().flatten() {
        look(&document, seen);
        seen.ended |= ends(&document, seen);
    }
}

/// Does this streamed event end the answer, in the answer's dialect?
fn ends(v: &Value, seen: &mut Seen) -> bool {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
    match seen.dialect {
        Dialect::Messages => kind == "message_stop",
        Dialect::Chat => {
            seen.chat_usage |= v.get("usage").is_some_and(Value::is_object);
            false
        }
        Dialect::Responses => {
            matches!(
                kind,
                "response.completed" | "response.incomplete" | "response.failed"
            ) && v.pointer("/response/usage").is_some_and(Value::is_object)
        }
        Dialect::Gemini => {
            v.get("usageMetadata").is_some_and(Value::is_object)
                && v.get("candidates")
                    .and_then(Value::as_array)
                    .is_some_and(|c| c.iter().any(|c| c.get("finishReason").is_some()))
        }
    }
}

/// The usage and model in one answer or event.
fn look(v: &Value, seen: &mut Seen) {
    let count = |u: &Value, keys: &[&str]| keys.iter().find_map(|k| u.get(*k)?.as_u64());
    for usage in [
        v.get("usage"),
        v.pointer("/message/usage"),
        v.pointer("/response/usage"),
    ]
    .into_iter()
    .flatten()
    .filter(|u| u.is_object())
    {
        seen.found = true;
        let max = |field: &mut u64, value: Option<u64>| *field = (*field).max(value.unwrap_or(0));
        max(
            &mut seen.input,
            count(usage, &["input_tokens", "prompt_tokens"]),
        );
        max(
            &mut seen.output,
            count(usage, &["output_tokens", "completion_tokens"]),
        );
        max(
            &mut seen.cache_creation,
            count(usage, &["cache_creation_input_tokens"]),
        );
        max(
            &mut seen.cache_read,
            count(usage, &["cache_read_input_tokens"]),
        );
    }
    if let Some(usage) = v.get("usageMetadata").filter(|u| u.is_object()) {
        seen.found = true;
        let output = count(usage, &["candidatesTokenCount"])
            .unwrap_or(0)
            .saturating_add(count(usage, &["thoughtsTokenCount"]).unwrap_or(0));
        seen.input = seen
            .input
            .max(count(usage, &["promptTokenCount"]).unwrap_or(0));
        seen.output = seen.output.max(output);
    }
    let model = [
        v.get("model"),
        v.pointer("/message/model"),
        v.pointer("/response/model"),
    ]
    .into_iter()
    .chain([v.get("modelVersion")])
    .flatten()
    .find_map(Value::as_str);
    if let Some(model) = model.filter(|m| !m.is_empty()) {
        seen.model = Some(model.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(content_type: &str, body: &str, cut: usize) -> Option<Answer> {
        let dialect = match body {
            b if b.contains("message_st") || b.contains(r#""type":"message""#) => Dialect::Messages,
            b if b.contains("response.") => Dialect::Responses,
            b if b.contains("usageMetadata") => Dialect::Gemini,
            _ => Dialect::Chat,
        };
        read_as(dialect, content_type, body, cut)
    }

    fn read_as(dialect: Dialect, content_type: &str, body: &str, cut: usize) -> Option<Answer> {
        let mut reader = UsageReader::new(content_type, dialect);
        for chunk in body.as_bytes().chunks(cut) {
            reader.feed(chunk);
        }
        reader.finish()
    }

    fn tokens(prompt: u64, completion: u64) -> Tokens {
        Tokens { prompt, completion }
    }

    #[test]
    fn anthropic_streams_and_messages() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":1000,\"cache_read_input_tokens\":200,\"output_tokens\":1}}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":50}}\n\n";
        let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        for cut in [1, 7, 4096] {
            let whole = format!("{stream}{stop}");
            let answer = read("text/event-stream; charset=utf-8", &whole, cut).unwrap();
            assert_eq!(answer.tokens, tokens(1200, 50), "cut {cut}");
            assert_eq!(answer.model.as_deref(), Some("claude-x"));
            // Cut off before its end: no usage to trust, whatever came before.
            assert_eq!(read("text/event-stream", stream, cut), None);
        }
        let whole = r#"{"type":"message","model":"claude-y","usage":{"input_tokens":10,"output_tokens":5}}"#;
        assert_eq!(
            read("application/json", whole, 3).unwrap().tokens,
            tokens(10, 5)
        );
    }

    #[test]
    fn openai_chat_responses_and_gemini() {
        let chat = "data: {\"model\":\"gpt-x\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n\
            data: {\"model\":\"gpt-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n";
        let answer = read("text/event-stream", chat, 5).unwrap();
        assert_eq!(
            (answer.tokens, answer.model.as_deref()),
            (tokens(30, 7), Some("gpt-x"))
        );
        let cut_before_done = chat.trim_end_matches("data: [DONE]\n\n");
        assert_eq!(read("text/event-stream", cut_before_done, 5), None);
        let done_without_usage =
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(read("text/event-stream", done_without_usage, 5), None);
        let responses = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"o-x\",\"usage\":{\"input_tokens\":1000,\"input_tokens_details\":{\"cached_tokens\":900},\"output_tokens\":50}}}\n\n";
        assert_eq!(
            read("text/event-stream", responses, 9).unwrap().tokens,
            tokens(1000, 50)
        );
        let in_progress = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":{\"input_tokens\":1000}}}\n\n";
        assert_eq!(read("text/event-stream", in_progress, 9), None);
        let gemini = r#"[{"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":1},"modelVersion":"gemini-z"},{"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":4,"thoughtsTokenCount":2}}]"#;
        let answer = read("application/json", gemini, 11).unwrap();
        assert_eq!(
            (answer.tokens, answer.model.as_deref()),
            (tokens(9, 6), Some("gemini-z"))
        );
        let sse = "data: {\"candidates\":[{\"content\":{}}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":1}}\n\n";
        let last = "data: {\"candidates\":[{\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":5}}\n\n";
        assert_eq!(read("text/event-stream", sse, 7), None);
        let answer = read("text/event-stream", &format!("{sse}{last}"), 7).unwrap();
        assert_eq!(answer.tokens, tokens(9, 5));
    }

    #[test]
    fn answers_without_usage_too_large_or_absurd() {
        assert_eq!(read("application/json", r#"{"data":[]}"#, 4), None);
        // Over the cap: not read, however it ends.
        let padding = "x".repeat(BODY_CAP);
        let large =
            format!(r#"{{"pad":"{padding}","usage":{{"input_tokens":1,"output_tokens":1}}}}"#);
        assert_eq!(read("application/json", &large, 1 << 20), None);
        assert_eq!(read("text/event-stream", "data: [DONE]\n\n", 4), None);
        let huge = format!(
            r#"{{"usage":{{"input_tokens":{},"cache_read_input_tokens":{},"output_tokens":1}}}}"#,
            u64::MAX,
            u64::MAX
        );
        assert_eq!(
            read("application/json", &huge, 64).unwrap().tokens.prompt,
            u64::MAX
        );
    }
}
