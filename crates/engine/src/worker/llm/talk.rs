//! A task's conversation with the model: the messages sent, each also appended to the
//! task's `transcript.jsonl` (the API key is never part of a message), and the shortening of
//! old tool results to fit the model's context.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;

use serde_json::{Value, json};

/// The messages sent to the model, each also appended to the task's transcript.
pub(super) struct Conversation {
    pub(super) messages: Vec<Value>,
    transcript: Transcript,
}

impl Conversation {
    /// An empty conversation, its transcript appended to `path`.
    pub(super) fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            messages: Vec::new(),
            transcript: Transcript::create(path)?,
        })
    }

    pub(super) fn push(&mut self, message: Value) {
        self.transcript.append(&message);
        self.messages.push(message);
    }
}

/// Shortens the oldest tool results while the conversation is longer than `budget`
/// characters, keeping the `keep_recent` most recent ones whole.
pub(super) fn shorten_old_results(messages: &mut [Value], budget: usize, keep_recent: usize) {
    let size = |m: &Value| m.to_string().len();
    let mut total: usize = messages.iter().map(size).sum();
    if total <= budget {
        return;
    }
    let tool_positions: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m["role"] == "tool")
        .map(|(i, _)| i)
        .collect();
    let old = tool_positions.len().saturating_sub(keep_recent);
    for &i in &tool_positions[..old] {
        if total <= budget {
            break;
        }
        let Some(content) = messages[i]["content"].as_str() else {
            continue;
        };
        if content.len() <= 300 {
            continue;
        }
        let before = size(&messages[i]);
        let head: String = content.chars().take(200).collect();
        messages[i]["content"] = json!(format!(
            "{head}\n[shortened by swarm to save context; call the tool again if you need this]"
        ));
        total = total - before + size(&messages[i]);
    }
}

struct Transcript {
    out: Option<BufWriter<File>>,
}

impl Transcript {
    fn create(path: &Path) -> std::io::Result<Self> {
        let file = crate::state::append_file(path)?;
        Ok(Self {
            out: Some(BufWriter::new(file)),
        })
    }

    fn append(&mut self, message: &Value) {
        let Some(out) = self.out.as_mut() else { return };
        let message = &crate::secrets::redact_value(message).unwrap_or_else(|| message.clone());
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let line = json!({"ts": ts, "message": message});
        let ok = serde_json::to_writer(&mut *out, &line).is_ok()
            && out.write_all(b"\n").is_ok()
            && out.flush().is_ok();
        if !ok {
            tracing::warn!("cannot write the transcript; it stops here");
            self.out = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_tool_results_are_shortened_first() {
        let big = "x".repeat(30_000);
        let mut messages = vec![json!({"role": "system", "content": "s"})];
        for i in 0..10 {
            messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": big}));
        }
        shorten_old_results(&mut messages, 120_000, 6);
        // The 4 oldest are shortened; the 6 most recent stay whole, even over the limit.
        for m in &messages[1..=4] {
            assert!(
                m["content"]
                    .as_str()
                    .unwrap()
                    .contains("shortened by swarm")
            );
        }
        for m in &messages[5..=10] {
            assert_eq!(m["content"].as_str().unwrap().len(), 30_000);
        }
        // Under the limit, nothing is touched.
        let mut small = vec![json!({"role": "tool", "tool_call_id": "c", "content": big})];
        shorten_old_results(&mut small, 120_000, 6);
        assert_eq!(small[0]["content"].as_str().unwrap().len(), 30_000);
    }
}
