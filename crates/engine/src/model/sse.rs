//! Reading a chat-completions answer, streamed (server-sent events) or whole.
//!
//! Real servers differ, and all of these are accepted: `content: null` beside `tool_calls`,
//! no `usage`, tool calls without an `id` (one is made up, and used consistently), `arguments`
//! given as a JSON object instead of a string, several tool calls in one turn, and reasoning
//! fields (`reasoning`, `reasoning_content`), which are ignored. In a stream, tool-call
//! fragments are joined by their `index`; the usage comes in a final chunk with no choices
//! when `stream_options.include_usage` is honoured.

use std::collections::BTreeMap;

use serde_json::Value;

use super::events::{EventDecoder, documents};
use crate::report::Tokens;

/// The longest line of an event stream (one `data:` chunk) swarm reads.
pub(crate) const MAX_LINE: usize = 1024 * 1024;
/// The most bytes of one answer (streamed or whole) swarm reads.
pub(crate) const MAX_ANSWER: usize = 16 * 1024 * 1024;

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StreamError {
    /// The stream is broken (a chunk that is not JSON, an error event).
    Broken(String),
    /// The answer is larger than swarm reads ([`MAX_LINE`], [`MAX_ANSWER`]).
    TooLarge(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (normally a JSON object as a string).
    pub arguments: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reply {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Tokens>,
    /// The server stopped the answer at its output limit (`finish_reason: "length"`): its
    /// text or tool calls may be incomplete.
    pub cut_off: bool,
}

impl Reply {
    /// The answer as an assistant message of the conversation (its tool calls included).
    pub(crate) fn to_message(&self) -> Value {
        let mut message = serde_json::json!({"role": "assistant", "content": self.content});
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|c| {
                    serde_json::json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
        }
        message
    }
}

fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn usage_of(v: &Value) -> Option<Tokens> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    Some(Tokens {
        prompt: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// Makes up ids for tool calls that came without one.
fn fill_ids(calls: &mut [ToolCall], turn: u32) {
    for (i, call) in calls.iter_mut().enumerate() {
        if call.id.is_empty() {
            call.id = format!("call_{turn}_{i}");
        }
    }
}

/// Parses a whole (non-streamed) answer.
pub(crate) fn parse_whole(body: &Value, turn: u32) -> Result<Reply, String> {
    let message = body
        .pointer("/choices/0/message")
        .ok_or_else(|| format!("the answer has no choices[0].message: {}", excerpt(body)))?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut tool_calls: Vec<ToolCall> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    name: c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    arguments: arguments_text(
                        c.pointer("/function/arguments").unwrap_or(&Value::Null),
                    ),
                })
                .collect()
        })
        .unwrap_or_default();
    fill_ids(&mut tool_calls, turn);
    Ok(Reply {
        content,
        tool_calls,
        usage: usage_of(body),
        cut_off: body.pointer("/choices/0/finish_reason") == Some(&Value::from("length")),
    })
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Joins the chunks of a streamed answer.
pub(crate) struct StreamAssembler {
    events: EventDecoder,
    /// Bytes fed so far.
    total: usize,
    content: String,
    saw_content: bool,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Tokens>,
    finished: bool,
    /// `finish_reason: "length"`.
    cut_off: bool,
    done: bool,
}

impl Default for StreamAssembler {
    fn default() -> Self {
        Self {
            events: EventDecoder::new(MAX_LINE),
            total: 0,
            content: String::new(),
            saw_content: false,
            calls: BTreeMap::new(),
            usage: None,
            finished: false,
            cut_off: false,
            done: false,
        }
    }
}

impl StreamAssembler {
    /// Feeds raw bytes of the event stream. Memory is bounded: a line longer than
    /// [`MAX_LINE`] or an answer longer than [`MAX_ANSWER`] is an error.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        self.total += bytes.len();
        if self.total > MAX_ANSWER {
            return Err(StreamError::TooLarge(format!(
                "the answer is larger than {} MiB; swarm stops reading it",
                MAX_ANSWER / (1024 * 1024)
            )));
        }
        let mut complete = Vec::new();
        self.events
            .feed(bytes, &mut |data| complete.push(data.to_vec()));
        if self.events.overflowed() {
            return Err(StreamError::TooLarge(format!(
                "a line of the event stream is longer than {} KiB; swarm stops reading it",
                MAX_LINE / 1024
            )));
        }
        for data in complete {
            self.event(&data).map_err(StreamError::Broken)?;
        }
        Ok(())
    }

    /// One event's data: `[DONE]`, or chunks of the answer.
    fn event(&mut self, data: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(data);
        let trimmed = text.trim();
        if trimmed == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if trimmed.is_empty() {
            return Ok(());
        }
        for chunk in documents(data) {
            let chunk = chunk.map_err(|e| format!("unreadable stream chunk ({e}): {trimmed}"))?;
            self.chunk(&chunk)?;
        }
        Ok(())
    }

    fn chunk(&mut self, chunk: &Value) -> Result<(), String> {
        if let Some(err) = chunk.get("error") {
            return Err(format!("the server reported an error mid-stream: {err}"));
        }
        if let Some(u) = usage_of(chunk) {
            self.usage = Some(u);
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(());
        };
        if choice.get("finish_reason").is_some_and(|f| !f.is_null()) {
            self.finished = true;
            self.cut_off = choice["finish_reason"] == "length";
        }
        let delta = choice.get("delta").or_else(|| choice.get("message"));
        let Some(delta) = delta else { return Ok(()) };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.saw_content = true;
            self.content.push_str(text);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, c) in calls.iter().enumerate() {
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                let call = self.calls.entry(index).or_default();
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    call.id = id.to_string();
                }
                if let Some(name) = c.pointer("/function/name").and_then(Value::as_str) {
                    call.name.push_str(name);
                }
                if let Some(args) = c.pointer("/function/arguments") {
                    call.arguments.push_str(&arguments_text(args));
                }
            }
        }
        Ok(())
    }

    /// The whole answer; `Err` when the stream stopped before it was complete.
    pub(crate) fn finish(mut self, turn: u32) -> Result<Reply, String> {
        let mut last = Vec::new();
        self.events.finish(&mut |data| last.push(data.to_vec()));
        for data in last {
            self.event(&data)?;
        }
        if !self.done && !self.finished {
            return Err("the stream ended before the answer was complete".into());
        }
        let mut tool_calls: Vec<ToolCall> = self
            .calls
            .into_values()
            .map(|c| ToolCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        fill_ids(&mut tool_calls, turn);
        Ok(Reply {
            content: self.saw_content.then_some(self.content),
            tool_calls,
            usage: self.usage,
            cut_off: self.cut_off,
        })
    }
}

fn excerpt(v: &Value) -> String {
    let s = v.to_string();
    s.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_answers_from_odd_servers() {
        let body = json!({"choices": [{"message": {"content": null, "reasoning_content": "hmm",
        "tool_calls": [
            {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a"}}},
            {"id": "x1", "function": {"name": "finish", "arguments": "{\"status\":\"done\",\"summary\":\"s\"}"}}
        ]}}]});
        let reply = parse_whole(&body, 3).unwrap();
        assert_eq!(reply.content, None);
        assert_eq!(reply.usage, None);
        assert_eq!(reply.tool_calls[0].id, "call_3_0");
        assert_eq!(reply.tool_calls[0].arguments, "{\"path\":\"a\"}");
        assert_eq!(reply.tool_calls[1].id, "x1");
    }

    #[test]
    fn stream_fragments_join_by_index() {
        let mut a = StreamAssembler::default();
        let chunks = [
            r#"data: {"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"c0","function":{"name":"edit_","arguments":""}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c1","function":{"name":"finish","arguments":"{\"sta"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"file","arguments":"{\"path\":"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}},{"index":1,"function":{"arguments":"tus\":\"done\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}}"#,
            "data: [DONE]",
        ];
        let text = chunks.join("\n\n") + "\n\n";
        // Fed in awkward pieces, as a network delivers them.
        for piece in text.as_bytes().chunks(7) {
            a.feed(piece).unwrap();
        }
        let reply = a.finish(1).unwrap();
        assert_eq!(reply.tool_calls.len(), 2);
        assert_eq!(reply.tool_calls[0].name, "edit_file");
        assert_eq!(reply.tool_calls[0].arguments, "{\"path\":\"a.rs\"}");
        assert_eq!(reply.tool_calls[1].arguments, "{\"status\":\"done\"}");
        assert_eq!(
            reply.usage,
            Some(Tokens {
                prompt: 11,
                completion: 7
            })
        );
    }

    #[test]
    fn endless_lines_and_answers_are_cut_off() {
        let mut a = StreamAssembler::default();
        let chunk = vec![b'x'; 64 * 1024];
        let mut fed = 0;
        let err = loop {
            match a.feed(&chunk) {
                Ok(()) => fed += chunk.len(),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, StreamError::TooLarge(_)), "{err:?}");
        assert!(fed <= MAX_LINE, "{fed}");
        let mut a = StreamAssembler::default();
        let line = b"data: {\"choices\":[{\"delta\":{\"content\":\"xxxxxxxxxxxxxxxxxx\"}}]}\n\n";
        let mut fed = 0;
        let err = loop {
            match a.feed(line) {
                Ok(()) => fed += line.len(),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, StreamError::TooLarge(_)), "{err:?}");
        assert!(fed <= MAX_ANSWER, "{fed}");
    }

    #[test]
    fn a_cut_stream_is_an_error() {
        let mut a = StreamAssembler::default();
        a.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"hal\"}}]}\n\n")
            .unwrap();
        assert!(a.finish(1).is_err());
    }
}
