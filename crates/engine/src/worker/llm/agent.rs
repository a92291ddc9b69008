//! The agent loop of one task.
//!
//! Turn after turn: send the conversation, run the tool calls the model asks for, give back
//! their results, until the model calls `finish`. With `--verify`, a `finish` with status
//! done runs the check in the worktree; if it fails, its output goes back to the model and
//! the loop goes on. The loop also ends at `--max-turns`, at the task's timeout, when the run
//! is interrupted, or when the run's token budget is spent. Every message is appended to the
//! task's `transcript.jsonl` (the API key is never part of a message).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;

use serde_json::{Value, json};

use super::AgentTask;
use super::commands::{run_command, run_verify};
use super::tools::{self, FinishStatus, Outcome, Workspace};
use crate::events::Event;
use crate::gateway::Reservation;
use crate::gateway::meter::estimated_input;
use crate::model::client::{AttemptError, RetryNotice};
use crate::model::sse::Reply;
use crate::report::Tokens;
use crate::worker::Verdict;
use crate::worker::check_writes::CheckWrites;

/// Characters of conversation above which old tool results are shortened, when the model's
/// context window is not known.
const CONTEXT_CHARS: usize = 120_000;
/// Characters per token, counted low (code and JSON take more tokens than prose), to size the
/// conversation to a window given in tokens.
const CHARS_PER_TOKEN: usize = 3;
/// Answers cut off at the output limit in a row before the task fails.
const MAX_CUT_OFF: u32 = 3;
/// Times one turn is sent again, shorter, after the server said it does not fit.
const MAX_OVERFLOW: u32 = 3;
/// The most recent tool results are never shortened.
const KEEP_RECENT: usize = 6;
/// Tool results kept for the report, and their size.
const TAIL_RESULTS: usize = 12;
const TAIL_CHARS: usize = 8000;

#[derive(Debug)]
pub(crate) struct AgentOutcome {
    pub verdict: Verdict,
    pub summary: Option<String>,
    pub tokens: Tokens,
    pub turns: u32,
    /// What its answers cost at the model's price (0 without one).
    pub cost_usd: f64,
    /// Answers that said what they used.
    pub requests: u32,
    /// The last tool results (at most 12, at most 8,000 characters).
    pub output_tail: String,
}

#[derive(Default)]
struct LoopState {
    tokens: Tokens,
    turns: u32,
    cost_usd: f64,
    requests: u32,
    tail: VecDeque<String>,
    summary: Option<String>,
}

pub(crate) async fn run(task: AgentTask<'_>) -> anyhow::Result<AgentOutcome> {
    std::fs::create_dir_all(task.task_dir)?;
    let mut transcript = Transcript::create(&task.task_dir.join("transcript.jsonl"))?;
    let mut state = LoopState::default();
    let verdict = {
        let looping = run_loop(&task, &mut state, &mut transcript);
        tokio::select! {
            verdict = looping => verdict?,
            () = tokio::time::sleep(task.timeout) => Verdict::Timeout(format!(
                "timed out after {}s (--timeout)", task.timeout.as_secs()
            )),
            () = task.cancel.cancelled() => Verdict::Interrupted,
        }
    };
    let mut output_tail = String::new();
    for result in &state.tail {
        output_tail.push_str(result);
        output_tail.push('\n');
    }
    if output_tail.len() > TAIL_CHARS {
        let cut = output_tail.len() - TAIL_CHARS;
        let cut = (cut..output_tail.len())
            .find(|i| output_tail.is_char_boundary(*i))
            .unwrap_or(cut);
        output_tail.drain(..cut);
    }
    Ok(AgentOutcome {
        verdict,
        summary: state.summary,
        tokens: state.tokens,
        turns: state.turns,
        cost_usd: state.cost_usd,
        requests: state.requests,
        output_tail,
    })
}

async fn run_loop(
    task: &AgentTask<'_>,
    state: &mut LoopState,
    transcript: &mut Transcript,
) -> anyhow::Result<Verdict> {
    let workspace = Workspace::new(task.worktree, task.scope_task.then_some(task.files))?;
    let agents_md = workspace.read_text("AGENTS.md");
    let definitions = tools::definitions(task.run_tool.enabled());
    let first = super::prompt::task_message(
        task.instruction,
        task.files,
        task.context,
        agents_md.as_deref(),
    );
    let mut talk = Conversation {
        messages: Vec::new(),
        transcript,
    };
    talk.push(json!({"role": "system", "content": super::prompt::system(task.scope_task)}));
    talk.push(json!({"role": "user", "content": crate::secrets::redact(&first)}));
    let mut verify_failure: Option<String> = None;
    let mut cut_off = 0;
    while state.turns < task.max_turns {
        // The run's budget (`--max-tokens`, `--max-cost`): what the request may spend is
        // reserved before it is sent.
        let reservation = match reserve(task, &talk, &definitions).await {
            Ok(reservation) => reservation,
            Err(why) => return Ok(Verdict::OverBudget(format!("stopped: {why}"))),
        };
        state.turns += 1;
        let turn = state.turns;
        let reply = match ask(task, state, &mut talk, &definitions, turn, reservation).await {
            Ok(reply) => reply,
            Err(e) => return Ok(Verdict::Failed(format!("the model API failed: {e}"))),
        };
        if reply.cut_off {
            // Half a tool call is not run: the answer is dropped, and the model told why.
            cut_off += 1;
            if cut_off >= MAX_CUT_OFF {
                return Ok(cut_off_too_often(task, cut_off));
            }
            talk.push(json!({"role": "user", "content": CUT_OFF}));
            continue;
        }
        cut_off = 0;
        if reply.tool_calls.is_empty() {
            talk.push(json!({"role": "user", "content":
                "Continue with the tools. When the task is complete, call finish."}));
            continue;
        }
        let finished = call_tools(task, &workspace, state, &mut talk, &reply, turn).await?;
        let Some((status, summary)) = finished else {
            continue;
        };
        state.summary = Some(summary.clone());
        match on_finish(task, status, &summary).await? {
            Ok(verdict) => return Ok(verdict),
            Err((verify, output)) => {
                let text = crate::secrets::redact(&format!(
                    "The check `{verify}` failed after your change:\n\n{output}\n\nFix the \
                     problem (within this task's files), then call finish again."
                ))
                .into_owned();
                verify_failure = Some(output);
                talk.push(json!({"role": "user", "content": text}));
            }
        }
    }
    Ok(Verdict::Failed(match verify_failure {
        Some(output) => format!(
            "--verify still fails after {} turns (--max-turns): {}",
            task.max_turns,
            last_lines(&output, 5)
        ),
        None => format!(
            "the model did not call finish within {} turns (--max-turns)",
            task.max_turns
        ),
    }))
}

/// What the model is told when its answer was cut off at the output limit.
const CUT_OFF: &str = "Your last answer was cut off at the output limit before it was \
    complete, so it was discarded. Answer again with less: one tool call, and small edits \
    (edit_file with short old and new text) rather than whole files.";

/// The task fails: the model's answers were cut off `times` in a row.
fn cut_off_too_often(task: &AgentTask<'_>, times: u32) -> Verdict {
    Verdict::Failed(format!(
        "the model's answers were cut off at the output limit {times} times in a row \
         (finish_reason: length){}",
        match task.shared.client.max_output_tokens() {
            Some(n) => format!("; raise --max-output-tokens (now {n})"),
            None => "; set --max-output-tokens higher than the server's default".into(),
        }
    ))
}

/// The model called finish with `status`: the task's verdict, or (`Err`) the check that
/// still fails and its output, for the model to fix.
async fn on_finish<'a>(
    task: &AgentTask<'a>,
    status: FinishStatus,
    summary: &str,
) -> anyhow::Result<Result<Verdict, (&'a str, String)>> {
    match status {
        FinishStatus::NoChange => return Ok(Ok(Verdict::NoChange)),
        FinishStatus::Failed => {
            return Ok(Ok(Verdict::Failed(format!(
                "the worker gave up: {summary}"
            ))));
        }
        FinishStatus::Done => {}
    }
    let Some(verify) = task.verify else {
        return Ok(Ok(Verdict::Done));
    };
    task.events.emit(Event::TaskStep {
        task: task.task_id.clone(),
        step: "verify".into(),
    });
    let ran = CheckWrites::maybe_around(task.checks, run_verify(verify, task)).await?;
    Ok(match ran {
        None => Ok(Verdict::Done),
        Some(output) => Err((verify, output)),
    })
}

/// The messages sent to the model, each also appended to the task's transcript.
struct Conversation<'t> {
    messages: Vec<Value>,
    transcript: &'t mut Transcript,
}

impl Conversation<'_> {
    fn push(&mut self, message: Value) {
        self.transcript.append(&message);
        self.messages.push(message);
    }
}

/// Reserves what the next request may spend: the conversation and the tools as they stand
/// (shortening only makes them smaller), and the most output it asks for.
async fn reserve(
    task: &AgentTask<'_>,
    talk: &Conversation<'_>,
    definitions: &Value,
) -> Result<Reservation, String> {
    let meter = &task.shared.meter;
    let size: usize = talk
        .messages
        .iter()
        .map(|m| m.to_string().len())
        .sum::<usize>()
        + definitions.to_string().len();
    let ask = Tokens {
        prompt: estimated_input(size),
        completion: meter.output_cap(),
    };
    meter
        .reserve(Some(task.task_id), task.shared.client.model(), ask)
        .await
}

/// One request to the model (turn `turn`), the conversation shortened to fit the model's
/// context window (and shorter again if the server says it does not); its answer joins the
/// conversation unless it was cut off. Its `reservation` is settled with what the answer
/// metered; given back when the API refused it (an error it does not bill), charged whole
/// when the answer broke off.
async fn ask(
    task: &AgentTask<'_>,
    state: &mut LoopState,
    talk: &mut Conversation<'_>,
    definitions: &Value,
    turn: u32,
    reservation: Reservation,
) -> Result<Reply, AttemptError> {
    let asked = ask_fitting(task, talk, definitions, turn).await;
    let Some(charge) = super::charge_for(reservation, &asked) else {
        return asked;
    };
    state.tokens.prompt += charge.tokens.prompt;
    state.tokens.completion += charge.tokens.completion;
    state.requests += 1;
    state.cost_usd += charge.cost_usd.unwrap_or(0.0);
    if let Ok(reply) = &asked
        && !reply.cut_off
    {
        talk.push(reply.to_message());
    }
    asked
}

/// [`ask_once`], the conversation shortened to fit (again if the server says it does not).
async fn ask_fitting(
    task: &AgentTask<'_>,
    talk: &mut Conversation<'_>,
    definitions: &Value,
    turn: u32,
) -> Result<Reply, AttemptError> {
    let mut overflows = 0;
    loop {
        // With a known window, recent results are shortened too if they must be.
        let (budget, keep_recent) = match context_budget(task, definitions).await {
            Some(budget) => (budget, 0),
            None => (CONTEXT_CHARS, KEEP_RECENT),
        };
        shorten_old_results(&mut talk.messages, budget, keep_recent);
        match ask_once(task, talk, definitions, turn).await {
            Err(AttemptError::ContextOverflow { limit, body }) if overflows < MAX_OVERFLOW => {
                overflows += 1;
                let sent: usize = talk.messages.iter().map(|m| m.to_string().len()).sum();
                task.shared
                    .client
                    .shrink_window(limit, (sent / CHARS_PER_TOKEN) as u32);
                task.events.emit(Event::ModelRetry {
                    task: task.task_id.clone(),
                    attempt: overflows,
                    wait_ms: 0,
                    reason: format!(
                        "the conversation does not fit the context window; shortened: {body}"
                    ),
                });
            }
            other => return other,
        }
    }
}

/// Characters the conversation may take: the context window (when known) less the answer's
/// room and the tool definitions, at [`CHARS_PER_TOKEN`].
async fn context_budget(task: &AgentTask<'_>, definitions: &Value) -> Option<usize> {
    let client = &task.shared.client;
    let window = client.context_window().await?;
    let window = window as usize;
    let answer = client
        .max_output_tokens()
        .map_or(window / 4, |n| n as usize)
        .min(window / 2);
    let tools = definitions.to_string().len() / CHARS_PER_TOKEN;
    Some((window.saturating_sub(answer + tools) * CHARS_PER_TOKEN).max(2000))
}

async fn ask_once(
    task: &AgentTask<'_>,
    talk: &Conversation<'_>,
    definitions: &Value,
    turn: u32,
) -> Result<Reply, AttemptError> {
    task.events.emit(Event::TaskStep {
        task: task.task_id.clone(),
        step: format!("turn {turn}: thinking"),
    });
    task.events.emit(Event::ModelRequest {
        task: task.task_id.clone(),
        turn,
    });
    let on_retry = |n: &RetryNotice| {
        task.events.emit(Event::ModelRetry {
            task: task.task_id.clone(),
            attempt: n.attempt,
            wait_ms: n.wait.as_millis() as u64,
            reason: n.reason.clone(),
        });
    };
    task.shared
        .client
        .chat(&talk.messages, definitions, turn, &on_retry)
        .await
}

/// Runs the tool calls of `reply`, each result joining the conversation; returns what
/// `finish` said, if it was called.
async fn call_tools(
    task: &AgentTask<'_>,
    workspace: &Workspace,
    state: &mut LoopState,
    talk: &mut Conversation<'_>,
    reply: &Reply,
    turn: u32,
) -> anyhow::Result<Option<(FinishStatus, String)>> {
    let mut finished = None;
    for call in &reply.tool_calls {
        let target = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|a| a.get("path").and_then(Value::as_str).map(str::to_string));
        task.events.emit(Event::TaskStep {
            task: task.task_id.clone(),
            step: format!(
                "turn {turn}: {}{}",
                call.name,
                target
                    .as_deref()
                    .map(|p| format!(" {p}"))
                    .unwrap_or_default()
            ),
        });
        task.events.emit(Event::ToolCall {
            task: task.task_id.clone(),
            tool: call.name.clone(),
            path: target.clone(),
        });
        let outcome = if call.name == "run" {
            run_command(task, &call.arguments).await?
        } else {
            workspace.call(&call.name, &call.arguments)
        };
        if let Outcome::Finish { status, summary } = &outcome {
            finished = Some((*status, summary.clone()));
        }
        // What a tool read or ran never carries a secret to the model.
        let content = crate::secrets::redact(&outcome.for_model()).into_owned();
        task.events.emit(Event::ToolResult {
            task: task.task_id.clone(),
            tool: call.name.clone(),
            ok: !matches!(outcome, Outcome::Failed(_)),
        });
        remember(&mut state.tail, &call.name, &content);
        talk.push(json!({"role": "tool", "tool_call_id": call.id, "content": content}));
    }
    Ok(finished)
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

fn remember(tail: &mut VecDeque<String>, tool: &str, content: &str) {
    let shown: String = content.chars().take(1500).collect();
    tail.push_back(format!("[{tool}] {shown}"));
    while tail.len() > TAIL_RESULTS {
        tail.pop_front();
    }
}

/// Shortens the oldest tool results while the conversation is longer than `budget`
/// characters, keeping the `keep_recent` most recent ones whole.
fn shorten_old_results(messages: &mut [Value], budget: usize, keep_recent: usize) {
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
        shorten_old_results(&mut messages, CONTEXT_CHARS, KEEP_RECENT);
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
        shorten_old_results(&mut small, CONTEXT_CHARS, KEEP_RECENT);
        assert_eq!(small[0]["content"].as_str().unwrap().len(), 30_000);
    }
}
