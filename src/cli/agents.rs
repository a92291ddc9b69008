//! `swarm agents`: the coding-agent presets, whether each is installed, and what it may reach.

use clap::Args;

use crate::app::AppResult;
use crate::app::agents;
use crate::error::exit;

/// List the coding agents `--agent` takes: the built-in presets and your [agents.NAME], with
/// whether each program is found, its version, and what it may reach under the sandbox.
#[derive(Debug, Args)]
pub struct AgentsArgs {}

pub async fn run(_args: AgentsArgs) -> AppResult<i32> {
    for agent in agents::list().await? {
        let s = &agent.settings;
        let found = match (&agent.found, &agent.version) {
            (Some(path), Some(version)) => format!("{version} ({})", path.display()),
            (Some(path), None) => path.display().to_string(),
            (None, _) => format!("not found; install: {}", s.install),
        };
        println!("{}: {found}", s.name);
        if let Some(against) = agent.written_against {
            println!("  preset written against: {against}");
        }
        println!("  runs:     {}", s.exec);
        println!("  network:  {}", s.allow_domains.join(", "));
        let writable: Vec<String> = s.writable.iter().map(|p| p.display().to_string()).collect();
        println!("  writes:   its worktree, TMPDIR, {}", writable.join(", "));
        println!("  env:      {}", s.pass_env.join(", "));
    }
    Ok(exit::SUCCESS)
}
