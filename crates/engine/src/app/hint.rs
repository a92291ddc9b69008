//! What an error of the engine says, and what fixes it: the same words for every front end
//! (the command line prints `error:` and `hint:`; the MCP server answers both to the model).
//! Each error type below the application says its own hint next to its definition
//! ([`crate::settings::SettingsError::explain`], [`crate::git::repo::RepoError::hint`]…);
//! this gathers them.

use super::error::{AppError, Busy};

impl AppError {
    /// The message: for swarm's own failure, the chain of causes that says where it failed;
    /// for settings, naming the flags.
    pub fn message(&self) -> String {
        match self {
            AppError::Settings(e) => e.explain().0,
            AppError::Internal(e) => format!("{e:#}"),
            other => other.to_string(),
        }
    }

    /// What fixes it: the flags, the commands, the next step.
    pub fn hint(&self) -> Option<String> {
        if let AppError::Settings(e) = self {
            return Some(e.explain().1.to_string());
        }
        runs_hint(self)
            .or_else(|| files_hint(self))
            .or_else(|| worker_hint(self))
            .or_else(|| input_hint(self))
    }
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
        AppError::NoSuchCandidate { .. } => Some(
            "`swarm status RUN` lists each task's candidates; leave --candidate out for the winner"
                .into(),
        ),
        AppError::RunBusy { doing, .. } => Some(doing.hint().into()),
        AppError::RunRecords { run, .. } => Some(format!(
            "the run's files under .git/swarm/runs/{run}/ were changed by hand; its branches \
         are intact (`git branch --list 'swarm/{run}/*'`), and `swarm clean {run}` removes \
         the run"
        )),
        AppError::NeverStarted(run) => Some(format!(
            "remove it with `swarm clean {run}` and start the run again"
        )),
        AppError::Run(e) => Some(e.hint().into()),
        AppError::Land(e) => e.hint(),
        _ => None,
    }
}

/// The start of the fix for a command that names only `$SWARM_FILE` where it gets several.
const NAME_THE_LIST: &str = "name \"$SWARM_FILES\" (one file a line) in the command, e.g. \
     `printf '%s\\n' \"$SWARM_FILES\" | xargs -d '\\n' CMD`";

/// The hint for which files a run works on, and how they reach its command.
fn files_hint(e: &AppError) -> Option<String> {
    match e {
        AppError::FirstFileOnly { .. } => Some(format!(
            "{NAME_THE_LIST}, or drop --batch (a process for several tasks, each its own \
             commit: --per-process)"
        )),
        AppError::FirstFileOfProcess { .. } => {
            Some(format!("{NAME_THE_LIST}, or pass --per-process 1"))
        }
        AppError::FilesOfNoTask => Some(
            "check each task's files with --verify, and the whole tree with --verify-merged \
         (e.g. --verify-merged 'ruff check .')"
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
        _ => None,
    }
}

/// The hint for what runs the tasks: the command, the agent, the model, budgets.
fn worker_hint(e: &AppError) -> Option<String> {
    match e {
    AppError::ExecNotFound(program) => Some(format!(
        "install it, or check the spelling; workers run `sh -c CMD` with your PATH (`command -v {program}` tells where it is)"
    )),
    AppError::ExecOverAgent(_) => Some(
        "leave --exec out to run the agent again (`swarm resume RUN --failed`), or start a new \
         run with the command: swarm refactor … --exec CMD"
            .into(),
    ),
    AppError::MergeTool { .. } => Some(
        "install it (`cargo install --locked mergiraf`, docs/WORKERS.md) and put it on PATH, \
         or leave --merge-with (and [merge] with) out"
            .into(),
    ),
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
        AppError::Repo(e) => e.hint().map(str::to_string),
        AppError::Plan(e) => e.hint().map(str::to_string),
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
        AppError::Internal(_) => None,
        _ => None,
    }
}

impl Busy {
    /// What to do about the other process.
    pub fn hint(self) -> &'static str {
        match self {
            Busy::Clean => {
                "stop it first (Ctrl-C in its terminal); `swarm resume` or `swarm clean` then"
            }
            Busy::Resume => "wait for it to finish, or stop it (Ctrl-C) and resume then",
            Busy::RunShard => "wait for it, or run this shard in another clone",
            Busy::Merge | Busy::Land => "wait for it to finish",
        }
    }
}
