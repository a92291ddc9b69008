//! The built-in worker: an OpenAI-compatible coding agent per task (docs/LLM.md).
//!
//! - The client, shared with the planner, is [`crate::model`].
//! - [`tools`]: the tools, confined to the task's worktree.
//! - [`agent`]: the loop: turns, budgets, `finish`, `--verify`, the transcript.

pub(crate) mod agent;
pub(crate) mod approval;
mod commands;
pub(crate) mod judge;
pub(crate) mod prompt;
mod talk;
pub(crate) mod tools;
mod written;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::events::EventSink;
use crate::gateway::Meter;
use crate::ids::{RunId, TaskId};
use crate::model::{client, limit};
use crate::repo_path::RepoPath;
use crate::settings::{ApiKey, RunToolPolicy, Settings};
use crate::worker::check_writes::CheckWrites;
use swarm_sandbox::SandboxPolicy;
use swarm_sandbox::proxy::OnAccess;

/// What every LLM worker of a run shares: one HTTP client (and its connection pool), the
/// limit of calls in flight, and the run's meter (its spend, its budgets).
pub(crate) struct LlmShared {
    pub client: client::ChatClient,
    pub meter: Arc<Meter>,
}

impl LlmShared {
    pub(crate) fn new(
        settings: &Settings,
        model: String,
        key: Option<ApiKey>,
        meter: Arc<Meter>,
    ) -> anyhow::Result<Self> {
        let limit = limit::AdaptiveLimit::new(settings.jobs);
        Ok(Self {
            client: client::ChatClient::new(&settings.model, model, key, limit)?,
            meter,
        })
    }
}

/// Ends `reservation` for the answer `asked`: settled at the usage it metered, charged whole
/// when the answer broke off (its usage cannot be trusted); `None`, given back, for an error
/// the API does not bill.
pub(crate) fn charge_for(
    reservation: crate::gateway::Reservation,
    asked: &Result<crate::model::sse::Reply, client::AttemptError>,
) -> Option<crate::gateway::meter::Charge> {
    use client::AttemptError;
    match asked {
        Ok(reply) => Some(reservation.settle(reply.usage.map(|u| (None, u)))),
        Err(
            AttemptError::Status { .. }
            | AttemptError::ContextOverflow { .. }
            | AttemptError::Connect(_)
            | AttemptError::Invalid(_),
        ) => {
            reservation.release();
            None
        }
        Err(
            AttemptError::Timeout | AttemptError::Interrupted(_) | AttemptError::StaleConnection(_),
        ) => Some(reservation.settle(None)),
    }
}

/// Who asks the model for a task: the run's client and meter, where its events go, the task.
#[derive(Clone, Copy)]
pub(crate) struct Caller<'a> {
    pub shared: &'a LlmShared,
    pub events: &'a EventSink,
    pub run_id: &'a RunId,
    pub task_id: &'a TaskId,
}

/// One task for the built-in agent: what it is asked, where, and within which limits.
pub(crate) struct AgentTask<'a> {
    pub caller: Caller<'a>,
    pub files: &'a [RepoPath],
    pub worktree: &'a Path,
    pub task_dir: &'a Path,
    pub scope_task: bool,
    pub max_turns: u32,
    pub verify: Option<&'a str>,
    /// Notes what `verify` alone writes, which is not the task's change.
    pub checks: Option<&'a CheckWrites>,
    pub timeout: Duration,
    pub idle_timeout: Duration,
    pub sandbox: &'a SandboxPolicy,
    /// Told of the connections its commands ask the allow-list proxy for.
    pub on_access: Option<OnAccess>,
    pub run_tool: &'a RunToolPolicy,
    pub cancel: &'a CancellationToken,
}
