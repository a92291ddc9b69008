//! Reading what a coding agent reports in its machine-readable output (`--agent`): its final
//! message, turns, tokens and cost, for the report and the summary, as for the built-in
//! worker. The formats are the agents' (docs/AGENTS.md); a line that does not parse is
//! skipped, so an agent that prints other text as well still reports.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::report::Tokens;
use crate::settings::agents::AgentOutput;

/// What an agent said it did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AgentUsage {
    pub summary: Option<String>,
    pub turns: u32,
    pub tokens: Tokens,
    /// In US dollars, as the agent counts it.
    pub cost_usd: Option<f64>,
    /// The agent itself said it failed (`is_error`).
    pub error: Option<String>,
}

/// Reads `log` (the worker's output) as `format`; `None` when it holds nothing of it.
pub(crate) fn parse(format: AgentOutput, log: &str) -> Option<AgentUsage> {
    match format {
        AgentOutput::Text => None,
        AgentOutput::ClaudeStreamJson => claude(log),
        AgentOutput::CodexJson => codex(log),
        AgentOutput::GeminiJson => gemini(log),
        AgentOutput::AiderText => aider(log),
    }
}

fn json_lines(log: &str) -> impl Iterator<Item = Value> + '_ {
    log.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The last `{"type":"result", …}` line of Claude Code's stream.
fn claude(log: &str) -> Option<AgentUsage> {
    let result = json_lines(log).filter(|v| v["type"] == "result").last()?;
    let usage = &result["usage"];
    let text = result["result"].as_str().map(str::to_string);
    let failed = result["is_error"].as_bool().unwrap_or(false);
    Some(AgentUsage {
        summary: text.clone().filter(|_| !failed),
        turns: count(&result["num_turns"]) as u32,
        tokens: Tokens {
            prompt: count(&usage["input_tokens"])
                + count(&usage["cache_creation_input_tokens"])
                + count(&usage["cache_read_input_tokens"]),
            completion: count(&usage["output_tokens"]),
        },
        cost_usd: result["total_cost_usd"].as_f64(),
        error: failed.then(|| text.unwrap_or_else(|| "the agent reported an error".into())),
    })
}

/// Codex's JSONL events: usage of each `turn.completed`, the last `agent_message`; an
/// `error` or `turn.failed` after the last completed turn is the agent's failure.
fn codex(log: &str) -> Option<AgentUsage> {
    let mut usage = AgentUsage::default();
    let mut seen = false;
    for event in json_lines(log) {
        match event["type"].as_str() {
            Some("turn.completed") => {
                seen = true;
                // What went wrong before (a reconnection) did not stop the turn.
                usage.error = None;
                usage.turns += 1;
                let u = &event["usage"];
                usage.tokens.prompt += count(&u["input_tokens"]);
                usage.tokens.completion += count(&u["output_tokens"]);
            }
            Some("item.completed") if event["item"]["type"] == "agent_message" => {
                seen = true;
                usage.summary = event["item"]["text"].as_str().map(str::to_string);
            }
            Some("turn.failed") | Some("error") => {
                seen = true;
                usage.error = Some(
                    event["error"]["message"]
                        .as_str()
                        .or(event["message"].as_str())
                        .unwrap_or("the agent reported an error")
                        .to_string(),
                );
            }
            _ => {}
        }
    }
    seen.then_some(usage)
}

/// Gemini CLI's one JSON object: `response`, and tokens per model in `stats.models`.
fn gemini(log: &str) -> Option<AgentUsage> {
    let start = log.find('{')?;
    let value: Value = serde_json::Deserializer::from_str(&log[start..])
        .into_iter::<Value>()
        .next()?
        .ok()?;
    let mut usage = AgentUsage {
        summary: value["response"].as_str().map(str::to_string),
        error: value["error"]["message"].as_str().map(str::to_string),
        ..Default::default()
    };
    for model in value["stats"]["models"].as_object().into_iter().flatten() {
        let tokens = &model.1["tokens"];
        usage.tokens.prompt += count(&tokens["prompt"]);
        usage.tokens.completion += count(&tokens["candidates"]);
        usage.turns += count(&model.1["api"]["totalRequests"]) as u32;
    }
    Some(usage)
}

static AIDER_TOKENS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"Tokens: ([\d.]+)(k?) sent, ([\d.]+)(k?) received\.(?: Cost: \$[\d.]+ message, \$([\d.]+) session\.)?")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

/// Aider's `Tokens: 2.1k sent, 312 received. Cost: $0.01 message, $0.03 session.` lines.
fn aider(log: &str) -> Option<AgentUsage> {
    let number = |n: &str, k: &str| {
        let v: f64 = n.parse().unwrap_or(0.0);
        (if k == "k" { v * 1000.0 } else { v }) as u64
    };
    let mut usage = AgentUsage::default();
    let mut seen = false;
    for c in AIDER_TOKENS.captures_iter(log) {
        seen = true;
        usage.turns += 1;
        usage.tokens.prompt += number(&c[1], &c[2]);
        usage.tokens.completion += number(&c[3], &c[4]);
        if let Some(session) = c.get(5) {
            usage.cost_usd = session.as_str().parse().ok();
        }
    }
    seen.then_some(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_stream_json() {
        let log = r#"{"type":"system","subtype":"init"}
{"type":"assistant","message":{}}
{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"Renamed.","total_cost_usd":0.0123,"usage":{"input_tokens":200,"cache_creation_input_tokens":10,"cache_read_input_tokens":5,"output_tokens":40}}"#;
        let u = parse(AgentOutput::ClaudeStreamJson, log).unwrap_or_default();
        assert_eq!(u.summary.as_deref(), Some("Renamed."));
        assert_eq!(
            (u.turns, u.tokens.prompt, u.tokens.completion),
            (3, 215, 40)
        );
        assert_eq!(u.cost_usd, Some(0.0123));
        assert_eq!(u.error, None);
        assert_eq!(parse(AgentOutput::ClaudeStreamJson, "not json"), None);
    }

    #[test]
    fn codex_json() {
        let log = r#"{"type":"thread.started","thread_id":"x"}
{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 2/5"}
{"type":"item.completed","item":{"id":"i0","type":"agent_message","text":"Done."}}
{"type":"turn.completed","usage":{"input_tokens":120,"cached_input_tokens":0,"output_tokens":30}}"#;
        let u = parse(AgentOutput::CodexJson, log).unwrap_or_default();
        assert_eq!(u.summary.as_deref(), Some("Done."));
        assert_eq!(
            (u.turns, u.tokens.prompt, u.tokens.completion),
            (1, 120, 30)
        );
        assert_eq!(u.error, None);
        let failed =
            format!("{log}\n{{\"type\":\"turn.failed\",\"error\":{{\"message\":\"quota\"}}}}");
        let u = parse(AgentOutput::CodexJson, &failed).unwrap_or_default();
        assert_eq!(u.error.as_deref(), Some("quota"));
    }

    #[test]
    fn gemini_json_and_aider_text() {
        let log = r#"Loaded credentials.
{"response":"Edited.","stats":{"models":{"gemini-2.5-pro":{"api":{"totalRequests":2},"tokens":{"prompt":900,"candidates":80,"total":980}}}}}"#;
        let u = parse(AgentOutput::GeminiJson, log).unwrap_or_default();
        assert_eq!(u.summary.as_deref(), Some("Edited."));
        assert_eq!(
            (u.turns, u.tokens.prompt, u.tokens.completion),
            (2, 900, 80)
        );
        let log = "Tokens: 2.1k sent, 312 received. Cost: $0.01 message, $0.03 session.\n";
        let u = parse(AgentOutput::AiderText, log).unwrap_or_default();
        assert_eq!((u.tokens.prompt, u.tokens.completion), (2100, 312));
        assert_eq!(u.cost_usd, Some(0.03));
    }
}
