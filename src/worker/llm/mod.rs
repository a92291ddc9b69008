//! The built-in worker: an OpenAI-compatible coding agent per task (docs/LLM.md).
//!
//! - The client, shared with the planner, is [`crate::model`].
//! - [`tools`]: the tools, confined to the task's worktree.
//! - [`agent`]: the loop: turns, budgets, `finish`, `--verify`, the transcript.

pub mod agent;
pub mod approval;
pub mod prompt;
pub mod tools;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::{client, limit};
use crate::settings::{ApiKey, Settings};

/// What every LLM worker of a run shares: one HTTP client (and its connection pool), the
/// limit of calls in flight, and the run's token count.
pub struct LlmShared {
    pub client: client::ChatClient,
    pub limit: Arc<limit::AdaptiveLimit>,
    pub tokens_used: AtomicU64,
    /// Of which completion tokens (for the run's cost).
    pub completion_used: AtomicU64,
}

impl LlmShared {
    pub fn new(settings: &Settings, model: String, key: Option<ApiKey>) -> anyhow::Result<Self> {
        let limit = limit::AdaptiveLimit::new(settings.jobs);
        Ok(Self {
            client: client::ChatClient::new(&settings.model, model, key, limit.clone())?,
            limit,
            tokens_used: AtomicU64::new(0),
            completion_used: AtomicU64::new(0),
        })
    }

    pub fn tokens_used(&self) -> u64 {
        self.tokens_used.load(Ordering::Relaxed)
    }

    /// The run's tokens so far, prompt and completion.
    pub fn tokens(&self) -> crate::report::Tokens {
        let completion = self.completion_used.load(Ordering::Relaxed);
        crate::report::Tokens {
            prompt: self.tokens_used().saturating_sub(completion),
            completion,
        }
    }
}
