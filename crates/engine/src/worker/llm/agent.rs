//! The agent loop of one task.
//!
//! Turn after turn: send the conversation, run the tool calls the model asks for, give back
//! their results, until the model calls `finish`. With `--verify`, a `finish` with status
//! done runs the check in the worktree; if it fails, its output goes back to the model and
//! the loop goes on. The loop also ends at `--max-turns`, at the task's timeout, when the run
//! is interrupted, or when the run's token budget is spent. Every message is appended to the
//! task's `transcript.jsonl` (the API key is never part of a message).
//!
//! Turn 1 needs no worktree ([`open`]): the orchestrator asks it while the task's worktree is
//! being made, and [`run`] goes on from its answer.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::commands::{run_command, run_verify};
use super::talk::{Conversation, shorten_old_results};
use super::tools::{self, FinishStatus, Outcome, Workspace};
use super::{AgentTask, Caller};
use crate::events::Event;
use crate::gateway::Reservation;
use crate::gateway::meter::estimated_input;
use crate::model::client::{AttemptError, RetryNotice};
use crate::model::sse::Reply;
use crate::repo_path::RepoPath;
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
    /// Every path its tools wrote, if nothing else wrote in the worktree (no `run` tool, no
    /// `--verify`) and the loop ended by itself.
    pub written: Option<Vec<RepoPath>>,
}

#[derive(Default)]
struct LoopState {
    tokens: Tokens,
    turns: u32,
    cost_usd: f64,
    requests: u32,
    tail: VecDeque<String>,
    summary: Option<String>,
    written: Option<Vec<RepoPath>>,
}

/// What turn 1 needs, none of it in the worktree: the built-in worker asks its first
/// question while its worktree is being made.
pub(crate) struct Head<'a> {
    pub caller: Caller<'a>,
    pub instruction: &'a str,
    pub files: &'a [RepoPath],
    pub context: Option<&'a str>,
    /// The repository's AGENTS.md, for the first message.
    pub agents_md: Option<&'a str>,
    pub scope_task: bool,
    /// The `run` tool is offered.
    pub run_tool: bool,
    pub task_dir: &'a Path,
    pub max_turns: u32,
    pub timeout: Duration,
    pub cancel: &'a CancellationToken,
}

/// A task's turn 1, asked: its conversation so far, what it spent, the answer (or why the
/// task stops), and when it began (the task's `--timeout` counts from then).
pub(crate) struct Opening {
    talk: Conversation,
    state: LoopState,
    asked: Asked,
    began: Instant,
}

impl Opening {
    /// What it spent: tokens, cost, answers metered, turns.
    pub(crate) fn spent(&self) -> (Tokens, f64, u32, u32) {
        let s = &self.state;
        (s.tokens, s.cost_usd, s.requests, s.turns)
    }
}

/// A turn's answer, or the verdict that ends the task before one.
enum Asked {
    Reply(Reply),
    Stop(Verdict),
}

/// Starts the task's conversation (system and task messages) and asks turn 1.
pub(crate) async fn open(head: &Head<'_>) -> anyhow::Result<Opening> {
    let began = Instant::now();
    std::fs::create_dir_all(head.task_dir)?;
    let mut talk = Conversation::create(&head.task_dir.join("transcript.jsonl"))?;
    let first =
        super::prompt::task_message(head.instruction, head.files, head.context, head.agents_md);
    talk.push(json!({"role": "system", "content": super::prompt::system(head.scope_task)}));
    talk.push(json!({"role": "user", "content": crate::secrets::redact(&first)}));
    let mut state = LoopState::default();
    let definitions = tools::definitions(head.run_tool);
    let asked = match head.max_turns {
        0 => Asked::Stop(out_of_turns(0, None)),
        _ => tokio::select! {
            asked = next_turn(head.caller, &mut state, &mut talk, &definitions) => asked,
            () = tokio::time::sleep(head.timeout) => Asked::Stop(timed_out(head.timeout)),
            () = head.cancel.cancelled() => Asked::Stop(Verdict::Interrupted),
        },
    };
    Ok(Opening {
        talk,
        state,
        asked,
        began,
    })
}

/// The task's turns after `opening`, in `task`'s worktree, until it ends.
pub(crate) async fn run(task: AgentTask<'_>, opening: Opening) -> anyhow::Result<AgentOutcome> {
    let Opening {
        mut talk,
        mut state,
        asked,
        began,
    } = opening;
    let left = task.timeout.saturating_sub(began.elapsed());
    let verdict = {
        let looping = run_loop(&task, &mut state, &mut talk, asked);
        tokio::select! {
            verdict = looping => verdict?,
            () = tokio::time::sleep(left) => timed_out(task.timeout),
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
        written: state.written,
    })
}

fn timed_out(timeout: Duration) -> Verdict {
    Verdict::Timeout(format!(
        "timed out after {}s (--timeout)",
        timeout.as_secs()
    ))
}

/// Reserves, then asks the next turn.
async fn next_turn(
    caller: Caller<'_>,
    state: &mut LoopState,
    talk: &mut Conversation,
    definitions: &Value,
) -> Asked {
    // The run's budget (`--max-tokens`, `--max-cost`): what the request may spend is
    // reserved before it is sent.
    let reservation = match reserve(caller, talk, definitions).await {
        Ok(reservation) => reservation,
        Err(why) => return Asked::Stop(Verdict::OverBudget(format!("stopped: {why}"))),
    };
    state.turns += 1;
    let turn = state.turns;
    match ask(caller, state, talk, definitions, turn, reservation).await {
        Ok(reply) => Asked::Reply(reply),
        Err(e) => Asked::Stop(Verdict::Failed(format!("the model API failed: {e}"))),
    }
}

/// Answer after answer: runs the tools each asks for, until one ends the task; then what the
/// tools wrote, if nothing else wrote.
async fn run_loop(
    task: &AgentTask<'_>,
    state: &mut LoopState,
    talk: &mut Conversation,
    asked: Asked,
) -> anyhow::Result<Verdict> {
    let workspace = Workspace::new(task.worktree, task.scope_task.then_some(task.files))?;
    if task.verify.is_some() {
        // The check runs in the worktree, and may write there.
        workspace.written.lost_track();
    }
    let verdict = turns(task, &workspace, state, talk, asked).await;
    state.written = workspace.written.paths();
    verdict
}

/// The loop itself: `asked`'s answer, its tools, the next turn, until the task ends.
async fn turns(
    task: &AgentTask<'_>,
    workspace: &Workspace,
    state: &mut LoopState,
    talk: &mut Conversation,
    mut asked: Asked,
) -> anyhow::Result<Verdict> {
    let definitions = tools::definitions(task.run_tool.enabled());
    let mut verify_failure: Option<String> = None;
    let mut cut_off = 0;
    loop {
        let reply = match asked {
            Asked::Reply(reply) => reply,
            Asked::Stop(verdict) => return Ok(verdict),
        };
        if reply.cut_off {
            // Half a tool call is not run: the answer is dropped, and the model told why.
            cut_off += 1;
            if cut_off >= MAX_CUT_OFF {
                return Ok(cut_off_too_often(task, cut_off));
            }
            talk.push(json!({"role": "user", "content": CUT_OFF}));
        } else {
            cut_off = 0;
            let ended = on_reply(task, workspace, state, talk, &reply).await?;
            match ended {
                Ended::Verdict(verdict) => return Ok(verdict),
                Ended::VerifyFailed(output) => verify_failure = Some(output),
                Ended::No => {}
            }
        }
        if state.turns >= task.max_turns {
            return Ok(out_of_turns(task.max_turns, verify_failure));
        }
        asked = next_turn(task.caller, state, talk, &definitions).await;
    }
}

/// What an answer did: ended the task, called finish with a `--verify` that fails, or neither.
enum Ended {
    Verdict(Verdict),
    VerifyFailed(String),
    No,
}

/// Runs the tools `reply` asks for; if it called finish, the check.
async fn on_reply(
    task: &AgentTask<'_>,
    workspace: &Workspace,
    state: &mut LoopState,
    talk: &mut Conversation,
    reply: &Reply,
) -> anyhow::Result<Ended> {
    if reply.tool_calls.is_empty() {
        talk.push(json!({"role": "user", "content":
            "Continue with the tools. When the task is complete, call finish."}));
        return Ok(Ended::No);
    }
    let turn = state.turns;
    let Some((status, summary)) = call_tools(task, workspace, state, talk, reply, turn).await?
    else {
        return Ok(Ended::No);
    };
    state.summary = Some(summary.clone());
    Ok(match on_finish(task, status, &summary).await? {
        Ok(verdict) => Ended::Verdict(verdict),
        Err((verify, output)) => {
            let text = crate::secrets::redact(&format!(
                "The check `{verify}` failed after your change:\n\n{output}\n\nFix the \
                 problem (within this task's files), then call finish again."
            ))
            .into_owned();
            talk.push(json!({"role": "user", "content": text}));
            Ended::VerifyFailed(output)
        }
    })
}

/// The task ran out of turns (`--max-turns`), maybe with `--verify` still failing.
fn out_of_turns(max_turns: u32, verify_failure: Option<String>) -> Verdict {
    Verdict::Failed(match verify_failure {
        Some(output) => format!(
            "--verify still fails after {max_turns} turns (--max-turns): {}",
            last_lines(&output, 5)
        ),
        None => format!("the model did not call finish within {max_turns} turns (--max-turns)"),
    })
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
        match task.caller.shared.client.max_output_tokens() {
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
    task.caller.events.emit(Event::TaskStep {
        task: task.caller.task_id.clone(),
        step: "verify".into(),
    });
    let ran = CheckWrites::maybe_around(task.checks, run_verify(verify, task)).await?;
    Ok(match ran {
        None => Ok(Verdict::Done),
        Some(output) => Err((verify, output)),
    })
}

/// Reserves what the next request may spend: the conversation and the tools as they stand
/// (shortening only makes them smaller), and the most output it asks for.
async fn reserve(
    caller: Caller<'_>,
    talk: &Conversation,
    definitions: &Value,
) -> Result<Reservation, String> {
    let meter = &caller.shared.meter;
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
        .reserve(Some(caller.task_id), caller.shared.client.model(), ask)
        .await
}

/// One request to the model (turn `turn`), the conversation shortened to fit the model's
/// context window (and shorter again if the server says it does not); its answer joins the
/// conversation unless it was cut off. Its `reservation` is settled with what the answer
/// metered; given back when the API refused it (an error it does not bill), charged whole
/// when the answer broke off.
async fn ask(
    caller: Caller<'_>,
    state: &mut LoopState,
    talk: &mut Conversation,
    definitions: &Value,
    turn: u32,
    reservation: Reservation,
) -> Result<Reply, AttemptError> {
    let asked = ask_fitting(caller, talk, definitions, turn).await;
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
    caller: Caller<'_>,
    talk: &mut Conversation,
    definitions: &Value,
    turn: u32,
) -> Result<Reply, AttemptError> {
    let mut overflows = 0;
    loop {
        // With a known window, recent results are shortened too if they must be.
        let (budget, keep_recent) = match context_budget(caller, definitions).await {
            Some(budget) => (budget, 0),
            None => (CONTEXT_CHARS, KEEP_RECENT),
        };
        shorten_old_results(&mut talk.messages, budget, keep_recent);
        match ask_once(caller, talk, definitions, turn).await {
            Err(AttemptError::ContextOverflow { limit, body }) if overflows < MAX_OVERFLOW => {
                overflows += 1;
                let sent: usize = talk.messages.iter().map(|m| m.to_string().len()).sum();
                caller
                    .shared
                    .client
                    .shrink_window(limit, (sent / CHARS_PER_TOKEN) as u32);
                caller.events.emit(Event::ModelRetry {
                    task: caller.task_id.clone(),
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
async fn context_budget(caller: Caller<'_>, definitions: &Value) -> Option<usize> {
    let client = &caller.shared.client;
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
    caller: Caller<'_>,
    talk: &Conversation,
    definitions: &Value,
    turn: u32,
) -> Result<Reply, AttemptError> {
    caller.events.emit(Event::TaskStep {
        task: caller.task_id.clone(),
        step: format!("turn {turn}: thinking"),
    });
    caller.events.emit(Event::ModelRequest {
        task: caller.task_id.clone(),
        turn,
    });
    let on_retry = |n: &RetryNotice| {
        caller.events.emit(Event::ModelRetry {
            task: caller.task_id.clone(),
            attempt: n.attempt,
            wait_ms: n.wait.as_millis() as u64,
            reason: n.reason.clone(),
        });
    };
    caller
        .shared
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
    talk: &mut Conversation,
    reply: &Reply,
    turn: u32,
) -> anyhow::Result<Option<(FinishStatus, String)>> {
    let mut finished = None;
    for call in &reply.tool_calls {
        let target = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|a| a.get("path").and_then(Value::as_str).map(str::to_string));
        task.caller.events.emit(Event::TaskStep {
            task: task.caller.task_id.clone(),
            step: format!(
                "turn {turn}: {}{}",
                call.name,
                target
                    .as_deref()
                    .map(|p| format!(" {p}"))
                    .unwrap_or_default()
            ),
        });
        task.caller.events.emit(Event::ToolCall {
            task: task.caller.task_id.clone(),
            tool: call.name.clone(),
            path: target.clone(),
        });
        let outcome = if call.name == "run" {
            workspace.written.lost_track();
            run_command(task, &call.arguments).await?
        } else {
            workspace.call(&call.name, &call.arguments)
        };
        if let Outcome::Finish { status, summary } = &outcome {
            finished = Some((*status, summary.clone()));
        }
        // What a tool read or ran never carries a secret to the model.
        let content = crate::secrets::redact(&outcome.for_model()).into_owned();
        task.caller.events.emit(Event::ToolResult {
            task: task.caller.task_id.clone(),
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
