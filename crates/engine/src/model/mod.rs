//! The model API client: one OpenAI-compatible chat-completions endpoint, used by the
//! built-in worker ([`crate::worker::llm`]) and by the planner of `--split llm`
//! ([`crate::plan::split`]).
//!
//! - [`client`]: one request with retries, classified once, decided by one exhaustive match.
//! - [`sse`]: reading an answer, streamed (server-sent events) or whole, with size caps.
//! - [`limit`]: the run-wide limit of requests in flight, which shrinks on 429.

pub(crate) mod client;
pub(crate) mod events;
pub(crate) mod limit;
pub(crate) mod sse;
