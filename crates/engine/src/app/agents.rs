//! `swarm agents` and the check that an `--agent`'s program is installed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{AppError, AppResult};
use crate::settings::agents::{self, AgentSettings};
use crate::settings::{Layer, Settings};

/// One agent as `swarm agents` shows it.
pub struct Listed {
    pub settings: AgentSettings,
    /// Where its program is on PATH.
    pub found: Option<PathBuf>,
    /// What `PROGRAM --version` printed (first line).
    pub version: Option<String>,
    /// The version the built-in preset was written against (none for the user's).
    pub written_against: Option<&'static str>,
    /// Its APIs that swarm's gateway would serve with your environment as it is now (none:
    /// it would use its own login).
    pub gateway: Vec<crate::gateway::Binding>,
}

/// The presets (built-in and the user's config), each with its program looked up.
pub async fn list() -> AppResult<Vec<Listed>> {
    let user = Layer::load_user()?.agents;
    let mut listed = Vec::new();
    for name in agents::names(&user) {
        let Ok(settings) = agents::resolve(&name, &user, None) else {
            continue;
        };
        let found = which(&settings.binary);
        let version = match &found {
            Some(path) => version(path).await,
            None => None,
        };
        listed.push(Listed {
            gateway: credentials_of(&settings),
            written_against: agents::preset(&name)
                .filter(|_| !user.contains_key(&name))
                .map(|p| p.written_against),
            settings,
            found,
            version,
        });
    }
    Ok(listed)
}

/// The agent's program is on PATH (checked before anything is created).
pub fn installed(settings: &Settings) -> AppResult<()> {
    let missing = settings
        .rotation
        .agents
        .iter()
        .find(|agent| which(&agent.binary).is_none());
    match missing {
        Some(agent) => Err(AppError::AgentMissing {
            name: agent.name.clone(),
            binary: agent.binary.clone(),
            install: agent.install.clone(),
        }),
        None => Ok(()),
    }
}

pub use crate::worker::which;

async fn version(program: &Path) -> Option<String> {
    let run = tokio::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// The APIs of `agent` swarm's gateway serves, with the credentials the environment holds
/// for them now: the one place an agent's credentials are read.
pub(crate) fn credentials_of(
    agent: &crate::settings::agents::AgentSettings,
) -> Vec<crate::gateway::Binding> {
    crate::gateway::bindings(agent, &|var| std::env::var(var).ok())
}
