//! The one place where an error becomes what the user reads: `error: …`, a `hint: …` that
//! names the fix (flags, commands), and the exit code: 2 for the user's input (nothing was
//! changed), 3 when swarm itself failed.

use crate::exit;
use swarm_engine::app::PlanError;
use swarm_engine::app::RepoError;
use swarm_engine::app::settings::{Count, SettingsError};
use swarm_engine::app::{AppError, Busy, RunError};

/// Prints `e` on stderr and gives the exit code.
pub(crate) fn report(e: &AppError) -> i32 {
    // Whoever read the output stopped (`| head`): nothing went wrong, nothing to say.
    if let AppError::Internal(inner) = e
        && inner.chain().any(super::out::is_closed_pipe)
    {
        return exit::SUCCESS;
    }
    let (message, hint) = describe(e);
    // Messages quote paths and output that may hold control characters.
    eprintln!("error: {}", super::visible::text(&message));
    if let Some(hint) = hint {
        eprintln!("hint: {}", super::visible::text(&hint));
    }
    match e.is_input() {
        true => exit::BAD_INPUT,
        false => exit::FAILED,
    }
}

/// The message and the hint of `e`.
fn describe(e: &AppError) -> (String, Option<String>) {
    if let AppError::Settings(e) = e {
        return settings(e);
    }
    let hint = runs_hint(e)
        .or_else(|| worker_hint(e))
        .or_else(|| input_hint(e));
    let message = match e {
        // The chain of causes says where it failed.
        AppError::Internal(e) => format!("{e:#}"),
        other => other.to_string(),
    };
    (message, hint)
}

/// The hint for finding runs and tasks, and for a run that is busy or failed.
fn runs_hint(e: &AppError) -> Option<String> {
    match e {
        AppError::Id(_) => Some("pass a RUN-ID (`swarm status` lists them) or a plan file".into()),
        AppError::Remote(_) => Some(
            "check the remote's name/URL and your credentials (swarm uses git's own setup)".into(),
        ),
        AppError::NoSuchRun(_) | AppError::NothingToClean(_) => {
            Some("`swarm status` lists the runs".into())
        }
        AppError::AmbiguousRun { .. } => {
            Some("give more characters of the run id (`swarm status` lists them)".into())
        }
        AppError::NoSuchTask { run, .. } => Some(format!("`swarm status {run}` lists its tasks")),
        AppError::AmbiguousTask(_) => Some("give more characters of the task id".into()),
        AppError::RunBusy { doing, .. } => Some(busy(*doing).into()),
        AppError::RunRecords { run, .. } => Some(format!(
            "the run's files under .git/swarm/runs/{run}/ were changed by hand; its branches \
         are intact (`git branch --list 'swarm/{run}/*'`), and `swarm clean {run}` removes \
         the run"
        )),
        AppError::NeverStarted(run) => Some(format!(
            "remove it with `swarm clean {run}` and start the run again"
        )),
        AppError::CleanWhat => Some("pass a RUN-ID (see `swarm status`) or --all".into()),
        AppError::ShardAuto(_) => Some(
            "pass the shard as --shard K/N (GitHub Actions: --shard \"${{ matrix.shard }}/N\")"
                .into(),
        ),
        AppError::Run(e) => Some(run(e).into()),
        AppError::Land(e) => e.hint(),
        _ => None,
    }
}

/// The hint for what runs the tasks: the command, the agent, the model, budgets.
fn worker_hint(e: &AppError) -> Option<String> {
    match e {
    AppError::FirstFileOnly { .. } => Some(
        "name \"$SWARM_FILES\" (one file a line) in the command, e.g. `printf '%s\\n' \
         \"$SWARM_FILES\" | xargs -d '\\n' CMD`, or drop --batch (a process for several \
         tasks, each its own commit: --per-process)"
            .into(),
    ),
    AppError::UnquotedFileVar { .. } => Some(
        "quote it: \"$SWARM_FILE\"; for the list, `printf '%s\\n' \"$SWARM_FILES\" | xargs \
         -d '\\n' CMD` (one file a line)"
            .into(),
    ),
    AppError::InstructionIsAPathspec { .. } => Some(
        "the instruction comes first, then the pathspecs: swarm refactor 'WHAT TO DO' \
         'PATHSPEC' …; to work on every tracked file with that instruction, pass `.`"
            .into(),
    ),
    AppError::NoPathspec { .. } => Some(
        "pass `.` to work on every tracked file, or pathspecs ('src/**/*.py') or --grep to \
         choose"
            .into(),
    ),
    AppError::ExecNotFound(program) => Some(format!(
        "install it, or check the spelling; workers run `sh -c CMD` with your PATH (`command -v {program}` tells where it is)"
    )),
    AppError::NoWorker { for_plan: true } => {
        Some("pass --exec CMD or --model NAME; the plan records it for swarm run".into())
    }
    AppError::NoWorker { for_plan: false } => Some(
        "pass --exec CMD (e.g. --exec 'sed -i \"s/old/new/g\" \"$SWARM_FILE\"'), or --model \
         NAME with SWARM_API_KEY (or OPENAI_API_KEY) set for the built-in agent"
            .into(),
    ),
    AppError::AgentMissing { install, .. } => Some(format!(
        "install it ({install}), or run `swarm agents` to see which agents are found"
    )),
    AppError::PerProcess(..) => Some("pass --per-process 1, or auto".into()),
    AppError::BudgetUnmetered { .. } => Some(
        "set its API key in your environment, so swarm's gateway meters its requests \
         (`swarm agents` shows which variables), or declare the api of your [agents.NAME]; \
         or drop the budget"
            .into(),
    ),
    AppError::BudgetUnpriced => Some(
        "set [model] price = { prompt = …, completion = … } (US dollars per million tokens) \
         or [model.prices] per model in your config: swarm ships no price list"
            .into(),
    ),
    AppError::RepairWithoutVerify => {
        Some("pass --verify CMD (e.g. --verify 'cargo check'), or drop --repair".into())
    }
    AppError::ModelNeeded(_) => Some(
        "pass --model NAME (or [model] name in swarm.toml) with SWARM_API_KEY (or \
         OPENAI_API_KEY) set"
            .into(),
    ),
    AppError::BadBaseUrl { .. } => Some(
        "pass the endpoint's base, e.g. https://api.openai.com/v1 or http://localhost:11434/v1"
            .into(),
    ),
    AppError::NoApiKey { .. } => Some(
        "set SWARM_API_KEY (or OPENAI_API_KEY); servers on localhost need none".into(),
    ),
    AppError::NoPlannerModel => Some(
        "pass --planner-model NAME (or --model NAME) with SWARM_API_KEY (or OPENAI_API_KEY) set"
            .into(),
    ),
        _ => None,
    }
}

/// The hint for the rest of the input: repository, plan, files, sandbox, options.
fn input_hint(e: &AppError) -> Option<String> {
    match e {
        AppError::Repo(e) => repo(e).map(str::to_string),
        AppError::Plan(e) => plan(e).map(str::to_string),
        AppError::NoSuchCommand { .. } => Some("`swarm --help` lists the commands".into()),
        AppError::NoFiles(_) => Some(
            "check the pathspecs (quoted, relative to this directory; `git ls-files` lists \
         what they match) and --grep, or pass --allow-empty if matching nothing is fine"
                .into(),
        ),
        AppError::NoOverlay(_) => Some(
            "pass --worktrees auto (overlay worktrees where they work, full checkouts \
         elsewhere) or --worktrees pool"
                .into(),
        ),
        AppError::Sandbox(_) => Some(
            "pass --sandbox off to run workers unconfined (no Landlock, no namespaces: see \
         docs/SECURITY.md)"
                .into(),
        ),
        AppError::ReviewOffTerminal => Some(
            "run with --dry-run, look at the diffs (swarm diff RUN-ID), then merge with swarm \
         merge RUN-ID"
                .into(),
        ),
        AppError::IntoWithRun => Some("a run merges into the branch it was started for".into()),
        AppError::Events { .. } => {
            Some("pass a path in a directory that exists and is writable".into())
        }
        AppError::Internal(_) => None,
        _ => None,
    }
}

/// What to do after a run failed part way: what it did is kept, as after Ctrl-C.
fn run(e: &RunError) -> &'static str {
    match e {
        RunError::Sandbox(_) => {
            "the workers could not be confined as asked (docs/SECURITY.md); what the run did is \
             kept: `swarm status` shows it, `swarm resume` goes on once the cause is fixed"
        }
        _ => {
            "what the run did is kept: `swarm status` shows it, `swarm resume` goes on once \
             the cause is fixed"
        }
    }
}

fn busy(doing: Busy) -> &'static str {
    match doing {
        Busy::Clean => {
            "stop it first (Ctrl-C in its terminal); `swarm resume` or `swarm clean` then"
        }
        Busy::Resume => "wait for it to finish, or stop it (Ctrl-C) and resume then",
        Busy::RunShard => "wait for it, or run this shard in another clone",
        Busy::Merge | Busy::Land => "wait for it to finish",
    }
}

/// Settings errors name flags here, where they are known as flags.
fn settings(e: &SettingsError) -> (String, Option<String>) {
    let (message, hint) = match e {
        SettingsError::Zero(count) => {
            let (message, hint) = match count {
                Count::Jobs => (
                    "--jobs must be at least 1",
                    "pass -j 1 or more (the default is 4)",
                ),
                Count::Batch => (
                    "--batch must be at least 1",
                    "pass --batch 1 for one file per task",
                ),
                Count::PerProcess => (
                    "--per-process must be at least 1",
                    "pass --per-process 1 for a process per task, or auto",
                ),
                Count::Timeout => (
                    "--timeout must be at least 1 second",
                    "pass --timeout SECS (the default is 600)",
                ),
                Count::MaxTurns => (
                    "--max-turns must be at least 1",
                    "pass --max-turns N (the default is 50)",
                ),
                Count::IdleTimeout => (
                    "--idle-timeout must be at least 1 second",
                    "pass --idle-timeout SECS (the default is 300)",
                ),
                Count::MaxOutputTokens => (
                    "--max-output-tokens must be at least 1",
                    "pass --max-output-tokens N, or leave it out for the server's default",
                ),
                Count::MaxCost => (
                    "--max-cost must be more than 0",
                    "pass --max-cost USD, e.g. --max-cost 5",
                ),
                Count::ContextWindow => (
                    "[model] context_window must be at least 1",
                    "set it to the model's context window in tokens, or leave it out",
                ),
            };
            (message.to_string(), hint)
        }
        SettingsError::InvalidFile { .. } => (
            e.to_string(),
            "fix the file; its tables are [run], [worktree], [model] and [sandbox] (docs/USAGE.md)",
        ),
        SettingsError::Unreadable { .. } => (e.to_string(), "check the file's permissions"),
        SettingsError::ExitCode(_) => (
            e.to_string(),
            "list exit statuses from 0 to 255, e.g. --ok-exit-codes 0,1",
        ),
        SettingsError::UnknownAgent { .. } => (
            e.to_string(),
            "`swarm agents` lists them; define your own as [agents.NAME] in your config file",
        ),
        SettingsError::UnknownApi { .. } => (
            e.to_string(),
            "name one of them, or leave api out (the agent then gets what pass_env names, as \
             it is: docs/AGENTS.md)",
        ),
        SettingsError::Price => (
            e.to_string(),
            "write e.g. price = { prompt = 3, completion = 15 } (US dollars per million tokens)",
        ),
        SettingsError::ToolChoice(_) => (
            e.to_string(),
            "set [model] tool_choice = \"auto\" (the default), \"required\" or \"none\"",
        ),
        SettingsError::AllowDomain(_) => (
            e.to_string(),
            "pass a domain name, e.g. --allow-domain api.anthropic.com (docs/SECURITY.md)",
        ),
        SettingsError::CopyPath(_) => (
            e.to_string(),
            "list files of your checkout by their path relative to its root, e.g. copy = [\".env\"]",
        ),
    };
    (message, Some(hint.to_string()))
}

fn repo(e: &RepoError) -> Option<&'static str> {
    Some(match e {
        RepoError::NotARepository(_) => {
            "run swarm inside a git checkout (or `git init` and commit first)"
        }
        RepoError::Bare(_) => {
            "run swarm in a checkout of it (`git worktree add ../wt BRANCH`, then cd there)"
        }
        RepoError::NoCommits => {
            "commit the files first (`git add -A && git commit`), then run swarm"
        }
        RepoError::UnknownBase(_) => {
            "pass a branch, tag or commit that exists (see `git log --oneline`)"
        }
        RepoError::InvalidInto(_) => {
            "pass a branch name such as `refactor/rename-foo` (not under swarm/)"
        }
        RepoError::Detached => "pass --into BRANCH (a new branch is created at --base)",
        RepoError::CheckedOutElsewhere { .. } => {
            "run swarm in that worktree, or pass another --into branch"
        }
        RepoError::Filtered { .. } => {
            "leave such files out with a pathspec exclusion such as ':!*.bin' (see .gitattributes)"
        }
        RepoError::Dirty(_) => "commit or stash them, or pass --into <new-branch>",
        RepoError::OperationInProgress(_) => {
            "finish or abort it first, or pass --into <new-branch>"
        }
        RepoError::HeadNotACommit(_)
        | RepoError::UnreadableHead(_)
        | RepoError::BranchNotACommit { .. }
        | RepoError::Git(_) => return None,
    })
}

fn plan(e: &PlanError) -> Option<&'static str> {
    Some(match e {
        PlanError::PathspecMagic(_) => {
            "supported: plain paths, globs like 'src/**/*.rs', and exclusions ':!path'"
        }
        PlanError::Pathspec { .. } => {
            "quote globs so the shell does not expand them, e.g. 'src/**/*.py'"
        }
        PlanError::Grep(_) => {
            "--grep takes a Rust regex; escape special characters, e.g. 'foo\\(' "
        }
        PlanError::TooManyForPlanner { .. } => {
            "narrow the pathspecs or --grep, or split per file (drop --split llm)"
        }
        PlanError::Planner(_) => {
            "check --planner-model/--model, --base-url and the API key, or drop --split llm"
        }
        PlanError::PlannerInvalid(_) => {
            "run again, use a stronger --planner-model, or write the plan with swarm plan … -o \
             PLAN.json and fix it by hand"
        }
        PlanError::Unreadable { .. } => {
            "write one with: swarm plan INSTRUCTION [PATHSPEC]... -o PLAN.json"
        }
        PlanError::NotAPlan { .. } | PlanError::Invalid { .. } => {
            "write one with swarm plan … -o PLAN.json (and keep its fields when editing it)"
        }
        PlanError::Schema { .. } => "write the plan again with this version of swarm",
        PlanError::BaseMissing(_) => {
            "fetch it (git fetch origin), or write the plan in this repository"
        }
        PlanError::Unwritable { .. } => "pass a path in a directory that exists and is writable",
        PlanError::Git(_) | PlanError::Internal(_) => return None,
    })
}
