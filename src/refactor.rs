//! `swarm refactor`: plan, run the workers, merge, clean up.

use crate::error::{CommandError, CommandResult};
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;

use clap::Args;

use super::execute::{Output, execute, on_terminal};
use crate::exit;
use swarm_engine::app::env_vars;
use swarm_engine::app::prepare::{self, PrepareRequest, Prepared, Purpose, Ready};
use swarm_engine::app::reconcile;
use swarm_engine::app::settings::{
    Layer, MergeWith, OnConflict, PerProcess, SandboxMode, Scope, WorktreeMode,
};
use swarm_engine::app::{self, AppError};
use swarm_engine::app::{RunMode, RunRequest};

/// Plan, run the workers in parallel, merge every task branch with --no-ff, clean up.
///
/// Each selected file becomes a task (or each group of --batch files). A task runs in its own
/// worktree on branch swarm/<RUN-ID>/<TASK-ID>; swarm commits what the worker changed and
/// merges the branch into the target as soon as the task finishes.
#[derive(Debug, Args)]
#[command(
    after_help = "More options, examples, and what workers get: swarm refactor --help",
    after_long_help = "\
Examples:
  # Rename a function in every Python file that mentions it, 8 workers at a time:
  swarm refactor 'rename foo to bar' 'src/**/*.py' --grep foo -j 8 \\
      --exec 'sed -i \"s/\\bfoo\\b/bar/g\" \"$SWARM_FILE\"'

  # Fix lint in every Python file, into a new branch (ruff exits 1 when findings are left):
  swarm refactor 'ruff fixes' '*.py' --into lint-fixes -y --ok-exit-codes 0,1 \\
      --exec 'ruff check --fix --force-exclude \"$SWARM_FILE\"'

Workers get SWARM_FILE, SWARM_FILES, SWARM_INSTRUCTION, SWARM_TASK_ID, SWARM_RUN_ID,
SWARM_WORKTREE, SWARM_TASK_FILE and SWARM_RESULT_FILE (see docs/WORKERS.md).
Exit codes: 0 all merged or unchanged, 1 some tasks failed/conflicted/timed out,
2 bad input (nothing changed), 3 swarm itself failed, 130 interrupted."
)]
pub(crate) struct RefactorArgs {
    #[command(flatten)]
    pub planning: PlanningArgs,

    /// Keep worktrees and task branches after the run.
    #[arg(hide_short_help = true, help_heading = "Output", long)]
    pub keep: bool,

    /// Run the workers but merge nothing: print each task's diff and keep its branch;
    /// `swarm merge RUN-ID` merges them later.
    #[arg(help_heading = "Output", long)]
    pub dry_run: bool,

    /// Run the workers, then show each task's diff and ask accept/skip/quit before merging
    /// it (on a terminal).
    #[arg(help_heading = "Output", long, conflicts_with = "dry_run")]
    pub review: bool,

    /// Print the run report as JSON on stdout (human output stays on stderr).
    #[arg(help_heading = "Output", long)]
    pub json: bool,

    /// Also append every event to FILE as a JSON line while the run goes (besides the run's
    /// own events.jsonl).
    #[arg(
        hide_short_help = true,
        help_heading = "Output",
        long,
        value_name = "FILE"
    )]
    pub events: Option<std::path::PathBuf>,

    /// At the end, write the run's report page (`swarm report`): to FILE, or by default
    /// `report.html` in the run's directory; its path is printed.
    #[arg(help_heading = "Output", long, value_name = "FILE", num_args = 0..=1)]
    pub report: Option<Option<std::path::PathBuf>>,

    /// Do not ask for confirmation (swarm asks only on a terminal).
    #[arg(help_heading = "Output", short = 'y', long)]
    pub yes: bool,
}

/// What plans a run: the files, the tasks, the worker and every setting a plan file keeps
/// (`refactor` and `plan` share them).
#[derive(Debug, Args)]
pub(crate) struct PlanningArgs {
    /// What to do, in words; given to every worker (SWARM_INSTRUCTION).
    pub instruction: String,

    /// Files to work on, among those tracked at --base: globs ('src/**/*.rs', '*.py'),
    /// files, directories, or exclusions (':!vendor'). Default: every tracked file.
    pub pathspecs: Vec<String>,

    /// Keep only files whose content matches this regular expression.
    #[arg(help_heading = "Selection", long, value_name = "REGEX")]
    pub grep: Option<String>,

    /// Exit 0 when no file matches the pathspecs and --grep (else it is an error, exit 2, as
    /// a typo in CI should be).
    #[arg(hide_short_help = true, help_heading = "Selection", long)]
    pub allow_empty: bool,

    /// Files per task [default: 1].
    #[arg(hide_short_help = true, help_heading = "Selection", long, value_name = "N", env = env_vars::SWARM_BATCH)]
    pub batch: Option<usize>,

    /// Tasks one worker process runs at most: N, or auto (several when the --exec command
    /// takes a list of files, naming $SWARM_FILES; one otherwise). Each task is still
    /// committed and merged on its own; a failing process's tasks run again in halves
    /// [default: auto].
    #[arg(hide_short_help = true, help_heading = "Worker", long, value_name = "N|auto", env = env_vars::SWARM_PER_PROCESS)]
    pub per_process: Option<PerProcess>,

    /// How files become tasks: file (one task per file, or per --batch files) or llm (a
    /// planner model groups them and writes each task's instruction) [default: file].
    #[arg(
        hide_short_help = true,
        help_heading = "Selection",
        long,
        value_name = "HOW",
        conflicts_with = "batch"
    )]
    pub split: Option<SplitMode>,

    /// Model of --split llm [default: the worker model, --model].
    #[arg(
        hide_short_help = true,
        help_heading = "Selection",
        long,
        value_name = "NAME"
    )]
    pub planner_model: Option<String>,

    /// Worker command, run with `sh -c` in the task's worktree.
    #[arg(help_heading = "Worker", long, value_name = "CMD", env = env_vars::SWARM_EXEC)]
    pub exec: Option<String>,

    /// Workers running at once [default: 4].
    #[arg(help_heading = "Worker", short, long, value_name = "N", env = env_vars::SWARM_JOBS)]
    pub jobs: Option<usize>,

    /// Commit the tasks start from.
    #[arg(
        hide_short_help = true,
        help_heading = "Selection",
        long,
        value_name = "REV",
        default_value = "HEAD"
    )]
    pub base: String,

    /// Branch that receives the merges [default: the current branch]; created at --base if it
    /// does not exist.
    #[arg(help_heading = "Selection", long, value_name = "BRANCH")]
    pub into: Option<String>,

    /// A structured merge tool for each file git's line merge leaves in conflict, in the
    /// languages it knows, before --on-conflict decides: mergiraf (installed on PATH; run
    /// confined, as a merge driver). The repository's own merge drivers (.gitattributes
    /// `merge=NAME` and `merge.NAME.driver` in git config) run with or without it.
    #[arg(help_heading = "Checks and merging", long, value_name = "TOOL", env = env_vars::SWARM_MERGE_WITH,
          value_parser = super::keywords::<MergeWith>(MergeWith::NAMES))]
    pub merge_with: Option<MergeWith>,

    /// What a task whose merge conflicts gets: retry (once, on the merged result), skip (keep
    /// its branch), fail (stop merging), repair (the model resolves it; needs --model)
    /// [default: retry].
    #[arg(help_heading = "Checks and merging", long, value_name = "POLICY", env = env_vars::SWARM_ON_CONFLICT,
          value_parser = super::keywords::<OnConflict>(OnConflict::NAMES))]
    pub on_conflict: Option<OnConflict>,

    /// May a worker change files outside its task? task: no (such a task fails), any: yes
    /// [default: task].
    #[arg(help_heading = "Checks and merging", long, value_name = "SCOPE", env = env_vars::SWARM_SCOPE,
          value_parser = super::keywords::<Scope>(Scope::NAMES))]
    pub scope: Option<Scope>,

    /// Model of the built-in worker (used when there is no --exec), e.g. gpt-4.1-mini.
    #[arg(help_heading = "Worker", long, value_name = "NAME", env = env_vars::SWARM_MODEL)]
    pub model: Option<String>,

    /// OpenAI-compatible endpoint [default: OPENAI_BASE_URL, else https://api.openai.com/v1].
    /// The key comes from SWARM_API_KEY or OPENAI_API_KEY.
    #[arg(hide_short_help = true, help_heading = "Worker", long, value_name = "URL", env = env_vars::SWARM_BASE_URL)]
    pub base_url: Option<String>,

    /// Model round-trips per task (built-in worker) [default: 50].
    #[arg(hide_short_help = true, help_heading = "Worker", long, value_name = "N", env = env_vars::SWARM_MAX_TURNS)]
    pub max_turns: Option<u32>,

    /// Token budget of the whole run (the built-in worker's tokens and what --agent workers
    /// report): no new task starts once it is spent; `swarm resume` finishes the rest.
    #[arg(hide_short_help = true, help_heading = "Safety and limits", long, visible_alias = "max-run-tokens", value_name = "N", env = env_vars::SWARM_MAX_TOKENS, value_parser = super::tokens)]
    pub max_tokens: Option<u64>,

    /// Spending cap of the whole run in US dollars (what --agent workers report, and the
    /// built-in worker's tokens at your [model] price): no new task starts once it is
    /// reached; `swarm resume --max-cost MORE` finishes the rest.
    #[arg(help_heading = "Safety and limits", long, value_name = "USD", value_parser = super::usd, env = env_vars::SWARM_MAX_COST)]
    pub max_cost: Option<f64>,

    /// The most tokens of one model answer (`max_tokens` of each request), so that a local
    /// server with no cap cannot generate for minutes [default: the server's].
    #[arg(hide_short_help = true, help_heading = "Worker", long, value_name = "N", env = env_vars::SWARM_MAX_OUTPUT_TOKENS)]
    pub max_output_tokens: Option<u32>,

    /// Check run in a task's worktree after its worker (`sh -c`); a failing task is not
    /// merged. The built-in worker sees the failure and gets to fix it.
    #[arg(help_heading = "Checks and merging", long, value_name = "CMD", env = env_vars::SWARM_VERIFY)]
    pub verify: Option<String>,

    /// Check run (`sh -c`, confined) on the merged result before the target moves. If it
    /// fails, swarm finds the tasks that break it by bisecting the merge sequence, leaves
    /// them out (status `excluded`, branch kept) and merges the rest.
    #[arg(help_heading = "Checks and merging", long, value_name = "CMD", env = env_vars::SWARM_VERIFY_MERGED)]
    pub verify_merged: Option<String>,

    /// With --exec and --model: a task whose --verify fails after the command is handed to
    /// the built-in agent, in the same worktree, with the failure output.
    #[arg(hide_short_help = true, help_heading = "Checks and merging", long)]
    pub repair: bool,

    /// Exit statuses of the worker's command that mean success, comma-separated (`0,1` for
    /// codemods that exit 1 when they rewrote a file or left findings: pyupgrade, `ruff check
    /// --fix`) [default: 0].
    #[arg(help_heading = "Worker", long, value_name = "CODES", value_delimiter = ',', env = env_vars::SWARM_OK_EXIT_CODES)]
    pub ok_exit_codes: Option<Vec<i32>>,

    /// A worker process with no output and no file change for this many seconds is stale and
    /// killed [default: 300].
    #[arg(hide_short_help = true, help_heading = "Worker", long, value_name = "SECS", env = env_vars::SWARM_IDLE_TIMEOUT)]
    pub idle_timeout: Option<u64>,

    /// Confinement of worker processes: workspace-write (each in a jail: write only in the
    /// task's worktree and a private temp dir, no network, credential stores hidden, no
    /// process outlives it) or off [default: workspace-write]. Only this flag or your own
    /// config can turn it off, not the repository's swarm.toml.
    #[arg(help_heading = "Safety and limits", long, value_name = "MODE", env = env_vars::SWARM_SANDBOX,
          value_parser = super::keywords::<SandboxMode>(SandboxMode::NAMES))]
    pub sandbox: Option<SandboxMode>,

    /// How each worker's worktree is made: overlay (a view of one shared checkout through
    /// an overlay mount in the worker's jail: start-up and per-task cost follow the change,
    /// not the repository), pool (full checkouts, reused), or auto (overlay where the run
    /// can use it) [default: auto].
    #[arg(hide_short_help = true, help_heading = "Safety and limits", long, value_name = "MODE", env = env_vars::SWARM_WORKTREES,
          value_parser = super::keywords::<WorktreeMode>(WorktreeMode::NAMES))]
    pub worktrees: Option<WorktreeMode>,

    /// Keep the base checkout of overlay worktrees in .git/swarm/base for the next run, which
    /// brings it to its own base in proportion to what changed instead of checking the whole
    /// tree out again (swarm clean --all removes it).
    #[arg(hide_short_help = true, help_heading = "Safety and limits", long)]
    pub reuse_base: bool,

    /// Let worker processes reach the network.
    #[arg(help_heading = "Safety and limits", long)]
    pub network: bool,

    /// A coding agent as the worker: claude, codex, gemini, aider, opencode, or one of your
    /// [agents.NAME] (`swarm agents` lists them). It runs under the sandbox with what that
    /// agent needs (its API's domains, its state directory, its key variables); --model is
    /// passed to it (docs/AGENTS.md).
    #[arg(help_heading = "Worker", long, value_name = "NAME", env = env_vars::SWARM_AGENT, conflicts_with = "exec")]
    pub agent: Option<String>,

    /// Let worker processes reach this domain (and nothing else) through swarm's proxy:
    /// `api.example.com`, `*.example.com`, or `host:port` (else ports 443 and 80).
    /// Repeatable; adds to `[sandbox] allow_domains` of your config.
    #[arg(
        help_heading = "Safety and limits",
        long = "allow-domain",
        value_name = "DOMAIN"
    )]
    pub allow_domains: Vec<String>,

    /// Let the built-in worker's `run` tool run any command (still confined); without it,
    /// only commands matching `[sandbox] allow_run` in swarm.toml.
    #[arg(hide_short_help = true, help_heading = "Worker", long)]
    pub allow_run: bool,

    /// Wall-clock limit of one task, in seconds [default: 600].
    #[arg(help_heading = "Worker", long, value_name = "SECS", env = env_vars::SWARM_TIMEOUT)]
    pub timeout: Option<u64>,

    /// Move the target only if every task merged (or needed no change); otherwise the merged
    /// result stays on swarm/<RUN-ID>/result and the target where it was.
    #[arg(help_heading = "Checks and merging", long)]
    pub atomic: bool,

    /// Up to N candidates per task, one after another: a candidate that fails (its exit,
    /// its scope, --verify) gets another from the task's base; the first that passes wins
    /// (at most 8; branches swarm/<RUN-ID>/<TASK-ID>/c<K>, SWARM_CANDIDATE=K).
    #[arg(help_heading = "Worker", long, value_name = "N", env = env_vars::SWARM_TRIES, conflicts_with = "best_of")]
    pub tries: Option<u32>,

    /// N candidates per task at once, within --jobs; swarm chooses: it must pass, then the
    /// change most candidates agree on, then the smaller change, then --judge-model (at
    /// most 8).
    #[arg(help_heading = "Worker", long, value_name = "N", env = env_vars::SWARM_BEST_OF)]
    pub best_of: Option<u32>,

    /// With --best-of: a model (at the --base-url endpoint) that picks between finalists
    /// that still tie, against the instruction; its answers are metered and budgeted.
    #[arg(hide_short_help = true, help_heading = "Worker", long, value_name = "NAME", env = env_vars::SWARM_JUDGE_MODEL)]
    pub judge_model: Option<String>,
}

impl PlanningArgs {
    /// The settings given on the command line (and in their `SWARM_*` variables).
    pub(super) fn layer(&self) -> Layer {
        let mut layer = Layer::default();
        let run = &mut layer.run;
        run.jobs = self.jobs;
        run.timeout = self.timeout;
        run.on_conflict = self.on_conflict;
        run.scope = self.scope;
        run.batch = self.batch;
        run.per_process = self.per_process;
        run.exec = self.exec.clone();
        run.max_turns = self.max_turns;
        run.max_tokens = self.max_tokens;
        run.max_cost = self.max_cost.and_then(serde_json::Number::from_f64);
        run.verify = self.verify.clone();
        run.verify_merged = self.verify_merged.clone();
        run.repair = self.repair.then_some(true);
        run.atomic = self.atomic.then_some(true);
        run.idle_timeout = self.idle_timeout;
        run.ok_exit_codes = self.ok_exit_codes.clone();
        run.tries = self.tries;
        run.best_of = self.best_of;
        run.judge_model = self.judge_model.clone();
        layer.set_worker(self.agent.clone(), self.model.clone());
        layer.model.base_url = self.base_url.clone();
        layer.model.max_output_tokens = self.max_output_tokens;
        layer.sandbox.mode = self.sandbox;
        layer.worktree.mode = self.worktrees;
        layer.merge.with = self.merge_with;
        layer.worktree.reuse_base = self.reuse_base.then_some(true);
        layer.sandbox.network = self.network.then_some(true);
        layer.sandbox.allow_domains = Some(self.allow_domains.clone()).filter(|d| !d.is_empty());
        layer.sandbox.allow_any_run = self.allow_run.then_some(true);
        layer
    }

    fn prepare_request(&self, purpose: Purpose) -> CommandResult<PrepareRequest> {
        Ok(PrepareRequest {
            cwd: std::env::current_dir()?,
            instruction: self.instruction.clone(),
            pathspecs: self.pathspecs.clone(),
            grep: self.grep.clone(),
            split: match self.split {
                Some(SplitMode::Llm) => prepare::SplitMode::Llm,
                Some(SplitMode::File) | None => prepare::SplitMode::File,
            },
            planner_model: self.planner_model.clone(),
            base: self.base.clone(),
            into: self.into.clone(),
            settings: self.layer(),
            call: None,
            purpose,
        })
    }
}

/// Prepares a run, printing the warnings and the planner's progress; `None`: nothing to do
/// (said on stderr).
async fn prepared(args: &PlanningArgs, purpose: Purpose) -> CommandResult<Option<Ready>> {
    let warn = |w: &str| eprintln!("warning: {w}");
    let note = |n: &str| eprintln!("swarm: {n}");
    match prepare::prepare(args.prepare_request(purpose)?, &warn, &note).await? {
        Prepared::NoFiles(why) if args.allow_empty => {
            eprintln!("swarm: {why}; nothing to do");
            Ok(None)
        }
        Prepared::NoFiles(why) => Err(CommandError::NoFiles(why)),
        Prepared::Nothing(why) => {
            eprintln!("swarm: {why}");
            Ok(None)
        }
        Prepared::Ready(ready) => {
            for hint in &ready.hints {
                super::render::say(&format!("hint: {hint}"));
            }
            Ok(Some(*ready))
        }
    }
}

pub(crate) async fn run(args: RefactorArgs) -> CommandResult<i32> {
    let Some(ready) = prepared(&args.planning, Purpose::Run).await? else {
        return Ok(exit::SUCCESS);
    };
    let interactive = super::confirm::interactive();
    // Every tracked file is what a person confirms on a terminal, or asks for with `.`; a
    // script that forgot its pathspecs is stopped.
    let everything = args.planning.pathspecs.is_empty() && args.planning.grep.is_none();
    if everything && (!interactive || args.yes) {
        let files = ready.file_count;
        return Err(AppError::NoPathspec { files }.into());
    }
    if interactive && !args.yes && !confirm(&ready, everything, &ready.skipped)? {
        eprintln!("swarm: nothing done");
        return Ok(exit::SUCCESS);
    }
    if args.review && !interactive {
        return Err(CommandError::ReviewOffTerminal);
    }
    // The run's id from the start (the live view too), to find it with `swarm status`.
    if !super::render::is_quiet() {
        eprintln!(
            "swarm: run {}: {} task(s) over {} file(s), -j {}, into {}{}",
            ready.plan.run_id,
            ready.plan.tasks.len(),
            ready.file_count,
            ready.settings.jobs,
            ready.into.branch,
            match ready.skipped.as_str() {
                "" => String::new(),
                skipped => format!("; not tasks: {skipped}"),
            }
        );
    }
    let mode = match (args.review, args.dry_run) {
        (true, _) => RunMode::Review,
        (false, true) => RunMode::DryRun,
        (false, false) => RunMode::Refactor,
    };
    let request = ready.into_request(mode, args.keep);
    if args.review {
        let out = Output {
            json: args.json,
            show_diffs: true,
            events: args.events.clone(),
            page: args.report.clone(),
        };
        return review_then_merge(request, out).await;
    }
    execute(
        request,
        &Output {
            json: args.json,
            show_diffs: true,
            events: args.events.clone(),
            page: args.report.clone(),
        },
    )
    .await
}

/// `swarm plan`: the same planning as `refactor`, written to `output` instead of run (and
/// with `json`, printed on stdout).
pub(super) async fn plan_only(args: PlanningArgs, output: &Path, json: bool) -> CommandResult<i32> {
    let Some(ready) = prepared(&args, Purpose::PlanFile).await? else {
        return Ok(exit::SUCCESS);
    };
    let text = ready.write_plan(output)?;
    if json {
        print!("{text}");
    }
    let plan = &ready.plan;
    eprintln!(
        "swarm: plan {}: {} task(s) over {} file(s), base {}, written to {}",
        plan.run_id,
        plan.tasks.len(),
        ready.file_count,
        swarm_engine::app::ids::short(&plan.base),
        output.display()
    );
    eprintln!(
        "  run it: swarm run {0}   (or one shard per machine: swarm run {0} --shard 1/N --push origin)",
        output.display()
    );
    Ok(exit::SUCCESS)
}

/// `--split`: how the selected files become tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SplitMode {
    File,
    Llm,
}

/// `--review`: the workers run as for `--dry-run`, each finished task is shown and accepted
/// or skipped, then the accepted ones are merged as `swarm merge` would.
async fn review_then_merge(request: RunRequest, out: Output) -> CommandResult<i32> {
    let common_dir = request.info.common_dir.clone();
    let (run_id, keep) = (request.plan.run_id.clone(), request.keep);
    let outcome = on_terminal(request, out.events.as_deref()).await?;
    let mut report = outcome.report;
    if outcome.interrupted {
        super::summary::print_summary(&report, true, true);
        return Ok(exit::INTERRUPTED);
    }
    let color = super::use_color(std::io::stderr().is_terminal());
    let accepted = super::review::ask(&common_dir, &mut report, color)?;
    report.compute_totals(report.totals.duration_ms);
    app::save_report(&common_dir, &report)?;
    if accepted == 0 {
        super::summary::print_summary(&report, false, false);
        eprintln!("review: nothing accepted, nothing merged");
        if let Some(to) = &out.page {
            super::execute::write_page(&report.run_id, to.as_deref())?;
        }
        return Ok(if report.all_succeeded() {
            exit::SUCCESS
        } else {
            exit::PARTIAL
        });
    }
    let cwd = std::env::current_dir()?;
    let continuing = reconcile::continue_run(
        &cwd,
        &(&run_id).into(),
        RunMode::MergeOnly,
        keep,
        Default::default(),
    )
    .await?;
    super::resume::run_continuing(continuing, RunMode::MergeOnly, out).await
}

fn confirm(ready: &Ready, everything: bool, skipped: &str) -> CommandResult<bool> {
    let plan = &ready.plan;
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "swarm will run {} task(s) over {} file(s){} with {} worker(s) at a time,\n\
         running:",
        plan.tasks.len(),
        ready.file_count,
        match everything {
            true => " (no pathspec: every tracked file)",
            false => "",
        },
        ready.settings.jobs,
    )?;
    for line in super::confirm::command_lines(&ready.settings) {
        writeln!(err, "{line}")?;
    }
    writeln!(err, "and merge them into '{}'.", plan.into)?;
    if !skipped.is_empty() {
        writeln!(err, "(not tasks: {skipped})")?;
    }
    drop(err);
    Ok(super::confirm::ask()?)
}
