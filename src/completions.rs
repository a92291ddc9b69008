//! `swarm completions SHELL` and `swarm man`: shell completions and the man page, generated
//! from the same clap definitions as `--help`, so they cannot disagree with it.

use crate::error::{CommandError, CommandResult};
use std::io::Write as _;

use clap::{Args, CommandFactory as _};

use crate::exit;

/// Print a completion script for a shell.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm completions bash > ~/.local/share/bash-completion/completions/swarm
  swarm completions zsh > \"${fpath[1]}/_swarm\"
  swarm completions fish > ~/.config/fish/completions/swarm.fish")]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

pub(crate) fn run(args: CompletionsArgs) -> CommandResult<i32> {
    let mut command = super::Cli::command();
    // Into memory first: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "swarm", &mut script);
    script.extend_from_slice(run_ids(args.shell).as_bytes());
    std::io::stdout().lock().write_all(&script)?;
    Ok(exit::SUCCESS)
}

/// The commands whose first argument is a run id.
const TAKE_A_RUN: &str = "status diff report merge land resume clean";

/// What completes a run id where a command takes one: the runs of the repository the shell
/// is in (`.git/swarm/runs`), read when asked, so no swarm process starts on a key press.
/// For bash and fish; the other shells complete the commands and options only.
fn run_ids(shell: clap_complete::Shell) -> String {
    match shell {
        clap_complete::Shell::Bash => format!(
            r#"
# Run ids, from the repository the shell is in.
_swarm_run_ids() {{
    local dir
    dir=$(git rev-parse --git-common-dir 2>/dev/null) && ls "$dir/swarm/runs" 2>/dev/null
}}
_swarm_with_run_ids() {{
    _swarm "$@"
    local cur=${{COMP_WORDS[COMP_CWORD]}}
    if [ "$COMP_CWORD" -eq 2 ] && [[ "$cur" != -* ]] && [[ " {TAKE_A_RUN} " == *" ${{COMP_WORDS[1]}} "* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_swarm_run_ids)" -- "$cur")
    fi
}}
complete -F _swarm_with_run_ids -o nosort -o bashdefault -o default swarm
"#
        ),
        clap_complete::Shell::Fish => format!(
            r#"
# Run ids, from the repository the shell is in.
function __swarm_run_ids
    set -l dir (command git rev-parse --git-common-dir 2>/dev/null); and command ls "$dir/swarm/runs" 2>/dev/null
end
complete -c swarm -n "__fish_seen_subcommand_from {TAKE_A_RUN}; and test (count (commandline -opc)) -eq 2" -f -a "(__swarm_run_ids)"
"#
        ),
        _ => String::new(),
    }
}

/// Print a man page (roff): swarm's, or a command's (`swarm man refactor`), as git and jj
/// have one per command; or write them all into a folder, for packagers.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm man refactor > swarm-refactor.1 && man ./swarm-refactor.1
  swarm man --dir /usr/share/man/man1     # swarm.1, swarm-refactor.1, swarm-plan.1…")]
pub(crate) struct ManArgs {
    /// The command whose page to print (refactor, plan, run…); default: swarm's own.
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
    /// Write every page (swarm.1 and swarm-COMMAND.1) into this folder instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<std::path::PathBuf>,
}

pub(crate) fn man(args: ManArgs) -> CommandResult<i32> {
    let cli = super::Cli::command();
    if let Some(dir) = &args.dir {
        clap_mangen::generate_to(cli, dir)?;
        return Ok(exit::SUCCESS);
    }
    let page = match &args.command {
        None => cli,
        Some(name) => {
            let Some(sub) = cli.find_subcommand(name).cloned() else {
                let names: Vec<String> = cli
                    .get_subcommands()
                    .map(|c| c.get_name().to_string())
                    .collect();
                return Err(CommandError::NoSuchCommand {
                    name: name.clone(),
                    known: names.join(", "),
                });
            };
            // Named as its page is: `swarm-refactor`.
            let full = format!("swarm-{}", sub.get_name());
            sub.display_name(full)
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    std::io::stdout().lock().write_all(&out)?;
    Ok(exit::SUCCESS)
}
