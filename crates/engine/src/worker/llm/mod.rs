//! The built-in worker: an OpenAI-compatible coding agent per task (docs/LLM.md).
//!
//! - The client, shared with the planner, is [`crate::model`].
//! - [`tools`]: the tools, confined to the task's worktree.
//! - [`agent`]: the loop: turns, budgets, `finish`, `--verify`, the transcript.

pub(crate) mod agent;
pub(crate) mod approval;
mod commands;
pub(crate) mod prompt;
pub(crate) mod tools;

use std::sync::Arc;

use crate::gateway::Meter;
use crate::model::{client, limit};
use crate::settings::{ApiKey, Settings};

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
