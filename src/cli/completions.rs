//! `swarm completions SHELL` and `swarm man`: shell completions and the man page, generated
//! from the same clap definitions as `--help`, so they cannot disagree with it.

use std::io::Write as _;

use clap::{Args, CommandFactory as _};

use crate::app::AppResult;
use crate::error::exit;

/// Print a completion script for a shell.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm completions bash > ~/.local/share/bash-completion/completions/swarm
  swarm completions zsh > \"${fpath[1]}/_swarm\"
  swarm completions fish > ~/.config/fish/completions/swarm.fish")]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> AppResult<i32> {
    let mut command = super::Cli::command();
    // Into memory first: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "swarm", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(exit::SUCCESS)
}

/// Print the man page (roff): `swarm man > swarm.1; man ./swarm.1`.
#[derive(Debug, Args)]
pub struct ManArgs {}

pub fn man(_: ManArgs) -> AppResult<i32> {
    let mut out = Vec::new();
    clap_mangen::Man::new(super::Cli::command()).render(&mut out)?;
    std::io::stdout().lock().write_all(&out)?;
    Ok(exit::SUCCESS)
}
