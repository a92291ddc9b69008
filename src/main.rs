//! swarm's command line: clap types (one module per subcommand), rendering, and the exit-code
//! edge, over the engine's one public API ([`swarm_engine::app`]).

// What the command line prints never fails it ([`out`]): these shadow std's macros in every
// module below.
macro_rules! eprintln {
    () => { $crate::out::err_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::err_line(format_args!($($arg)*)) };
}
macro_rules! println {
    () => { $crate::out::out_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::out_line(format_args!($($arg)*)) };
}
macro_rules! print {
    ($($arg:tt)*) => { $crate::out::out(format_args!($($arg)*)) };
}

mod agents;
mod clean;
mod completions;
mod confirm;
mod diff;
mod error;
mod execute;
mod exit;
mod github;
mod land;
mod mcp;
mod merge;
mod out;
mod page;
mod pager;
mod plan;
mod refactor;
mod render;
mod resume;
mod review;
mod run;
mod status;
mod summary;
mod visible;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use swarm_engine::app::ProcessStart;

use clap::{Parser, Subcommand};

fn main() -> ExitCode {
    // A worker process's jail is swarm itself, re-executed (docs/SECURITY.md); otherwise the
    // process-wide settings of libgit2 and the allocator.
    match swarm_engine::app::start_process() {
        ProcessStart::Done(code) => return code,
        ProcessStart::Go { warnings } => {
            for warning in warnings {
                eprintln!("swarm: {warning}");
            }
        }
    }
    if let Some(request) = swarm_mcp::detached::DetachedRun::of_this_process() {
        return run_detached(request);
    }
    run()
}

/// A run `swarm mcp` started, as a process of its own (`swarm_mcp::detached`).
fn run_detached(request: Result<swarm_mcp::detached::DetachedRun, String>) -> ExitCode {
    init_tracing(0);
    let request = match request {
        Ok(request) => request,
        Err(why) => {
            eprintln!("error: the run's request: {why}");
            return ExitCode::from(exit::FAILED as u8);
        }
    };
    in_runtime(mcp::detached(request))
}

/// Apply one change across many files with parallel workers, each in its own git worktree and
/// branch, merged back into your branch with --no-ff.
#[derive(Debug, Parser)]
#[command(
    name = "swarm",
    version = env!("SWARM_VERSION"),
    propagate_version = true,
    max_term_width = 100
)]
#[command(after_help = "\
Examples:
  swarm refactor 'rename foo to bar' 'src/**/*.py' --grep foo -j 8 \\
      --exec 'sed -i \"s/\\bfoo\\b/bar/g\" \"$SWARM_FILE\"'
  swarm status
  swarm diff 20261121-133455-4f2a
  swarm resume 20261121-133455-4f2a
  swarm clean --all")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More diagnostics on stderr (-v: debug, -vv: trace); RUST_LOG works too.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print only warnings, errors and the one-line result: no progress, no task table.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Colours: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, value_name = "WHEN", default_value_t = clap::ColorChoice::Auto)]
    color: clap::ColorChoice,
}

/// `--color`, for the whole process.
static COLOR: std::sync::OnceLock<clap::ColorChoice> = std::sync::OnceLock::new();

#[derive(Debug, Subcommand)]
enum Command {
    Refactor(Box<refactor::RefactorArgs>),
    Plan(Box<plan::PlanArgs>),
    Run(run::RunArgs),
    Status(status::StatusArgs),
    Diff(diff::DiffArgs),
    Report(page::ReportArgs),
    Merge(merge::MergeArgs),
    Land(land::LandArgs),
    Resume(resume::ResumeArgs),
    Clean(clean::CleanArgs),
    Agents(agents::AgentsArgs),
    Mcp(mcp::McpArgs),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
}

/// The parser of a keyword option, which lists its possible values in `--help`.
fn keywords<T>(names: &'static [&'static str]) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: std::str::FromStr<Err = String> + Clone + Send + Sync + 'static,
{
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(names).try_map(|s| s.parse::<T>())
}

/// The parser of a sum of US dollars (`--max-cost`): a finite number above 0. `nan` or `inf`
/// would otherwise parse, and a cap that compares false with every spend is no cap.
fn usd(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(usd) if usd.is_finite() && usd > 0.0 => Ok(usd),
        _ => Err("a number of US dollars above 0, e.g. 5 or 0.50".into()),
    }
}

/// The parser of a token budget (`--max-tokens`): a whole number above 0.
fn tokens(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("a number of tokens, 1 or more, e.g. 2000000".into()),
    }
}

fn run() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `--color` decides the colours of `--help` and of clap's errors too, which clap prints
    // before it has parsed anything.
    let mut command = <Cli as clap::CommandFactory>::command();
    if let Some(choice) = color_arg(&args) {
        command = command.color(choice);
    }
    let matches = command.get_matches_from(args);
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let _ = COLOR.set(cli.color);
    console::set_colors_enabled(use_color(std::io::stdout().is_terminal()));
    console::set_colors_enabled_stderr(use_color(std::io::stderr().is_terminal()));
    render::set_quiet(cli.quiet);
    init_tracing(cli.verbose);
    in_runtime(async {
        match cli.command {
            Command::Refactor(args) => refactor::run(*args).await,
            Command::Plan(args) => plan::run(*args).await,
            Command::Run(args) => run::run(args).await,
            Command::Status(args) => status::run(args),
            Command::Diff(args) => diff::run(args),
            Command::Report(args) => page::run(args),
            Command::Merge(args) => merge::run(args).await,
            Command::Land(args) => land::run(args).await,
            Command::Resume(args) => resume::run(args).await,
            Command::Clean(args) => clean::run(args),
            Command::Agents(args) => agents::run(args).await,
            Command::Mcp(args) => mcp::run(args).await,
            Command::Completions(args) => completions::run(args),
            Command::Man(args) => completions::man(args),
        }
    })
}

/// Runs a command on the async runtime; its exit code.
fn in_runtime(command: impl std::future::Future<Output = error::CommandResult<i32>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILED as u8);
        }
    };
    let result = runtime.block_on(command);
    // The command has waited for everything it needs: what blocking threads remain are idle
    // (at -j 64 ~150 of them, which took 10-20 ms to wake and join) or reading the pipe of a
    // worker that escaped its process group, which must not keep swarm alive. They end with
    // the process.
    runtime.shutdown_background();
    swarm_engine::app::close_scratch();
    let code = match result {
        Ok(code) => code,
        Err(e) => error::report(&e),
    };
    ExitCode::from(code as u8)
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "swarm=debug,swarm_engine=debug,swarm_sandbox=debug",
        _ => "swarm=trace,swarm_engine=trace,swarm_sandbox=trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(use_color(std::io::stderr().is_terminal()))
        .without_time()
        .try_init();
}

/// The value of `--color` (`--color X` or `--color=X`) among `args`, before clap parses them.
fn color_arg(args: &[std::ffi::OsString]) -> Option<clap::ColorChoice> {
    let value = args.iter().enumerate().find_map(|(i, a)| {
        let a = a.to_str()?;
        match a.strip_prefix("--color") {
            Some("") => args.get(i + 1)?.to_str(),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        }
    })?;
    match value {
        "always" => Some(clap::ColorChoice::Always),
        "never" => Some(clap::ColorChoice::Never),
        "auto" => Some(clap::ColorChoice::Auto),
        _ => None,
    }
}

/// Colours for an output that is (or not) a terminal: as `--color` says; by default only on
/// a terminal and without NO_COLOR.
pub(crate) fn use_color(is_terminal: bool) -> bool {
    match COLOR.get().copied().unwrap_or_default() {
        clap::ColorChoice::Always => true,
        clap::ColorChoice::Never => false,
        clap::ColorChoice::Auto => {
            is_terminal && std::env::var_os(swarm_engine::app::env_vars::NO_COLOR).is_none()
        }
    }
}
