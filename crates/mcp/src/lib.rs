//! `swarm mcp`: swarm as a Model Context Protocol server over stdio, the delegate a coding
//! agent hands a bulk edit to (docs/MCP.md). A second front end over the engine's `app`:
//! it reads runs through it (status, result, diff, clean), plans through it, and starts
//! runs as swarm processes of their own on a typed request ([`detached`]), so a run belongs
//! to the repository, not to the connection.
//!
//! Tool arguments come from a model: they are a settings layer the engine holds to the rule
//! of a plan file, under the server's own, and may only narrow what the server's command
//! line allows ([`Limits`]); everything answered is redacted.
//!
//! Its stdout is the protocol: printing is a lint error here.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod detached;
mod launch;
mod limits;
mod params;
mod server;
mod summary;

use std::path::PathBuf;

use rmcp::ServiceExt as _;

pub use limits::Limits;

/// Serves the repository at `repo` on stdin and stdout until the client goes away.
pub async fn serve(repo: PathBuf, limits: Limits) -> anyhow::Result<()> {
    let service = server::Swarm::new(repo, limits)
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}
