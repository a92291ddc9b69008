//! `swarm refactor`: plan, run the workers, merge, clean up.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::sync::Arc;

use clap::Args;
use regex::bytes::RegexBuilder;
use tokio_util::sync::CancellationToken;

use super::render;
use crate::env_vars;
use crate::error::{BadInput, exit};
use crate::events::EventSink;
use crate::git::repo;
use crate::orchestrator::{self, RunRequest};
use crate::plan::{self, PLAN_SCHEMA_VERSION, Pathspec, Plan, SelectOptions};
use crate::repo_path::RepoPath;
use crate::report::TaskStatus;
use crate::settings::{ApiKey, OnConflict, Overrides, SandboxMode, Scope, Settings};
use crate::state;
use crate::worker::sandbox;

/// Plan, run the workers in parallel, merge every task branch with --no-ff, clean up.
///
/// Each selected file becomes a task (or each group of --batch files). A task runs in its own
/// worktree on branch swarm/<RUN-ID>/<TASK-ID>; swarm commits what the worker changed and
/// merges the branch into the target as soon as the task finishes.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  # Rename a function in every Python file that mentions it, 8 workers at a time:
  swarm refactor 'rename foo to bar' 'src/**/*.py' --grep foo -j 8 \\
      --exec 'sed -i \"s/\\bfoo\\b/bar/g\" \"$SWARM_FILE\"'

  # Fix lint in every Python file, into a new branch:
  swarm refactor 'ruff fixes' '*.py' --into lint-fixes -y --exec 'ruff check --fix \"$SWARM_FILE\"'

Workers get SWARM_FILE, SWARM_FILES, SWARM_INSTRUCTION, SWARM_TASK_ID, SWARM_RUN_ID,
SWARM_WORKTREE, SWARM_TASK_FILE and SWARM_RESULT_FILE (see docs/WORKERS.md).
Exit codes: 0 all merged or unchanged, 1 some tasks failed/conflicted/timed out,
2 bad input (nothing changed), 130 interrupted.")]
pub struct RefactorArgs {
    /// What to do, in words; given to every worker (SWARM_INSTRUCTION).
    pub instruction: String,

    /// Files to work on, among those tracked at --base: globs ('src/**/*.rs', '*.py'),
    /// files, directories, or exclusions (':!vendor'). Default: every tracked file.
    pub pathspecs: Vec<String>,

    /// Keep only files whose content matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub grep: Option<String>,

    /// Files per task [default: 1].
    #[arg(long, value_name = "N", env = env_vars::SWARM_BATCH)]
    pub batch: Option<usize>,

    /// How files become tasks: file (one task per file, or per --batch files) or llm (a
    /// planner model groups them and writes each task's instruction) [default: file].
    #[arg(long, value_name = "HOW", conflicts_with = "batch")]
    pub split: Option<SplitMode>,

    /// Model of --split llm [default: the worker model, --model].
    #[arg(long, value_name = "NAME")]
    pub planner_model: Option<String>,

    /// Worker command, run with `sh -c` in the task's worktree.
    #[arg(long, value_name = "CMD", env = env_vars::SWARM_EXEC)]
    pub exec: Option<String>,

    /// Workers running at once [default: 4].
    #[arg(short, long, value_name = "N", env = env_vars::SWARM_JOBS)]
    pub jobs: Option<usize>,

    /// Commit the tasks start from.
    #[arg(long, value_name = "REV", default_value = "HEAD")]
    pub base: String,

    /// Branch that receives the merges [default: the current branch]; created at --base if it
    /// does not exist.
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,

    /// What a task whose merge conflicts gets: retry (once, on the merged result), skip (keep
    /// its branch), fail (stop merging) [default: retry].
    #[arg(long, value_name = "POLICY", env = env_vars::SWARM_ON_CONFLICT)]
    pub on_conflict: Option<OnConflict>,

    /// May a worker change files outside its task? task: no (such a task fails), any: yes
    /// [default: task].
    #[arg(long, value_name = "SCOPE", env = env_vars::SWARM_SCOPE)]
    pub scope: Option<Scope>,

    /// Model of the built-in worker (used when there is no --exec), e.g. gpt-4.1-mini.
    #[arg(long, value_name = "NAME", env = env_vars::SWARM_MODEL)]
    pub model: Option<String>,

    /// OpenAI-compatible endpoint [default: OPENAI_BASE_URL, else https://api.openai.com/v1].
    /// The key comes from SWARM_API_KEY or OPENAI_API_KEY.
    #[arg(long, value_name = "URL", env = env_vars::SWARM_BASE_URL)]
    pub base_url: Option<String>,

    /// Model round-trips per task (built-in worker) [default: 50].
    #[arg(long, value_name = "N", env = env_vars::SWARM_MAX_TURNS)]
    pub max_turns: Option<u32>,

    /// Token budget of the whole run: no new task starts once it is spent.
    #[arg(long, value_name = "N", env = env_vars::SWARM_MAX_TOKENS)]
    pub max_tokens: Option<u64>,

    /// Check run in a task's worktree after its worker (`sh -c`); a failing task is not
    /// merged. The built-in worker sees the failure and gets to fix it.
    #[arg(long, value_name = "CMD", env = env_vars::SWARM_VERIFY)]
    pub verify: Option<String>,

    /// Check run (`sh -c`, confined) on the merged result before the target moves. If it
    /// fails, swarm finds the tasks that break it by bisecting the merge sequence, leaves
    /// them out (status `excluded`, branch kept) and merges the rest.
    #[arg(long, value_name = "CMD", env = env_vars::SWARM_VERIFY_MERGED)]
    pub verify_merged: Option<String>,

    /// With --exec and --model: a task whose --verify fails after the command is handed to
    /// the built-in agent, in the same worktree, with the failure output.
    #[arg(long)]
    pub repair: bool,

    /// A worker process with no output and no file change for this many seconds is stale and
    /// killed [default: 300].
    #[arg(long, value_name = "SECS", env = env_vars::SWARM_IDLE_TIMEOUT)]
    pub idle_timeout: Option<u64>,

    /// Confinement of worker processes: workspace-write (each in a jail: write only in the
    /// task's worktree and a private temp dir, no network, credential stores hidden, no
    /// process outlives it) or off [default: workspace-write]. Only this flag or your own
    /// config can turn it off, not the repository's swarm.toml.
    #[arg(long, value_name = "MODE", env = env_vars::SWARM_SANDBOX)]
    pub sandbox: Option<SandboxMode>,

    /// Let worker processes reach the network.
    #[arg(long)]
    pub network: bool,

    /// Let the built-in worker's `run` tool run any command (still confined); without it,
    /// only commands matching `[sandbox] allow_run` in swarm.toml.
    #[arg(long)]
    pub allow_run: bool,

    /// Wall-clock limit of one task, in seconds [default: 600].
    #[arg(long, value_name = "SECS", env = env_vars::SWARM_TIMEOUT)]
    pub timeout: Option<u64>,

    /// Keep worktrees and task branches after the run.
    #[arg(long)]
    pub keep: bool,

    /// Run the workers but merge nothing: print each task's diff and keep its branch;
    /// `swarm merge RUN-ID` merges them later.
    #[arg(long)]
    pub dry_run: bool,

    /// Run the workers, then show each task's diff and ask accept/skip/quit before merging
    /// it (on a terminal).
    #[arg(long, conflicts_with = "dry_run")]
    pub review: bool,

    /// Print the run report as JSON on stdout (human output stays on stderr).
    #[arg(long)]
    pub json: bool,

    /// Also append every event to FILE as a JSON line while the run goes (besides the run's
    /// own events.jsonl).
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,

    /// Do not ask for confirmation (swarm asks only on a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
}

pub async fn run(args: RefactorArgs) -> anyhow::Result<i32> {
    plan_and_run(args, None).await
}

/// `swarm plan`: the same planning as `refactor`, written to `output` instead of run.
pub(super) async fn plan_only(args: RefactorArgs, output: &std::path::Path) -> anyhow::Result<i32> {
    plan_and_run(args, Some(output)).await
}

async fn plan_and_run(
    args: RefactorArgs,
    plan_output: Option<&std::path::Path>,
) -> anyhow::Result<i32> {
    let cwd = std::env::current_dir()?;
    let info = repo::discover(&cwd)?;
    let repo = info.open()?;
    let base = repo::resolve_base(&repo, &args.base)?;
    let into = repo::resolve_into(&repo, &info, args.into.as_deref())?;
    let settings = Settings::resolve(
        Overrides {
            jobs: args.jobs,
            timeout_secs: args.timeout,
            on_conflict: args.on_conflict,
            scope: args.scope,
            batch: args.batch,
            exec: args.exec.clone(),
            model: args.model.clone(),
            base_url: args.base_url.clone(),
            max_turns: args.max_turns,
            max_tokens: args.max_tokens,
            verify: args.verify.clone(),
            verify_merged: args.verify_merged.clone(),
            repair: args.repair.then_some(true),
            idle_timeout_secs: args.idle_timeout,
            sandbox: args.sandbox,
            network: args.network.then_some(true),
            allow_run: args.allow_run.then_some(true),
        },
        &info.workdir,
    )?;
    for warning in &settings.warnings {
        eprintln!("warning: {warning}");
    }
    let settings = settings.settings;
    // A plan runs elsewhere, later: the key and the sandbox are checked by `swarm run`.
    let api_key = match plan_output {
        None => {
            let key = check_worker(&settings)?;
            check_sandbox(&settings).await?;
            key
        }
        Some(_) => {
            check_worker_configured(&settings)?;
            None
        }
    };
    let mut settings = settings;
    settings.dry_run = args.dry_run;
    let grep = args
        .grep
        .as_deref()
        .map(|g| {
            RegexBuilder::new(g).build().map_err(|e| {
                BadInput::new(format!("invalid --grep regular expression: {e}"))
                    .hint("--grep takes a Rust regex; escape special characters, e.g. 'foo\\(' ")
            })
        })
        .transpose()?;
    let pathspec = Pathspec::new(&args.pathspecs, &info.prefix)?;
    let base_tree = repo.find_commit(base)?.tree()?;
    let selection = plan::select_files(
        &repo,
        &base_tree,
        &SelectOptions {
            pathspec: &pathspec,
            grep: grep.as_ref(),
        },
    )?;
    let skipped = describe_skipped(&selection);
    if selection.files.is_empty() {
        eprintln!(
            "swarm: no files matched{}{}; nothing to do",
            if args.pathspecs.is_empty() {
                String::new()
            } else {
                format!(" {}", args.pathspecs.join(" "))
            },
            args.grep
                .as_deref()
                .map(|g| format!(" with --grep '{g}'"))
                .unwrap_or_default()
        );
        if !skipped.is_empty() {
            eprintln!("swarm: skipped {skipped}");
        }
        return Ok(exit::SUCCESS);
    }
    let (tasks, planner_skipped) = match args.split {
        Some(SplitMode::Llm) => {
            let split =
                split_with_model(&args, &settings, &repo, &base_tree, &selection.files).await?;
            if split.tasks.is_empty() {
                eprintln!("swarm: the planner found nothing to change; nothing to do");
                return Ok(exit::SUCCESS);
            }
            (split.tasks, split.skipped)
        }
        Some(SplitMode::File) | None => (
            plan::make_tasks(selection.files, settings.batch),
            Vec::new(),
        ),
    };

    repo::check_filters(&repo, tasks.iter().flat_map(|t| &t.files))?;
    if plan_output.is_none() {
        check_dirty(&repo, &into, &tasks, settings.scope)?;
    }

    let run_id = crate::ids::RunId::new_now();
    let plan = Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        run_id: run_id.clone(),
        instruction: args.instruction.clone(),
        base: base.to_string(),
        into: into.branch.clone(),
        pathspecs: args.pathspecs.clone(),
        grep: args.grep.clone(),
        settings,
        tasks,
        skipped: planner_skipped,
    };
    let file_count: usize = plan.tasks.iter().map(|t| t.files.len()).sum();
    if let Some(output) = plan_output {
        return write_plan(&plan, output, file_count, args.json);
    }
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if interactive && !args.yes && !confirm(&plan, file_count, &skipped)? {
        eprintln!("swarm: nothing done");
        return Ok(exit::SUCCESS);
    }

    if args.review && !interactive {
        return Err(BadInput::new("--review asks about each task on a terminal, and this is not one")
            .hint("run with --dry-run, look at the diffs (swarm diff RUN-ID), then merge with swarm merge RUN-ID")
            .into());
    }
    let into_start = into.tip.unwrap_or(base);
    if !interactive {
        eprintln!(
            "swarm: run {run_id}: {} task(s) over {file_count} file(s), -j {}, into {}",
            plan.tasks.len(),
            plan.settings.jobs,
            into.branch
        );
    }
    let request = RunRequest {
        info,
        plan,
        into,
        into_start,
        keep: args.keep,
        api_key,
        resume: None,
    };
    if args.review {
        return review_then_merge(request, args.json, args.events.clone()).await;
    }
    execute(
        request,
        &Output {
            json: args.json,
            show_diffs: true,
            events: args.events.clone(),
        },
    )
    .await
}

/// `--split`: how the selected files become tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitMode {
    File,
    Llm,
}

/// `--split llm`: the planner model groups `files` into tasks.
async fn split_with_model(
    args: &RefactorArgs,
    settings: &Settings,
    repo: &git2::Repository,
    base_tree: &git2::Tree<'_>,
    files: &[RepoPath],
) -> anyhow::Result<plan::split::Split> {
    let Some(model) = args
        .planner_model
        .clone()
        .or_else(|| settings.model.name.clone())
    else {
        return Err(BadInput::new("--split llm needs a planner model, and none is configured")
            .hint("pass --planner-model NAME (or --model NAME) with SWARM_API_KEY (or OPENAI_API_KEY) set")
            .into());
    };
    let key = ApiKey::from_env();
    if key.is_none() && !settings.model.is_local() {
        return Err(BadInput::new(format!(
            "no API key for the planner model '{model}' at {}",
            settings.model.base_url
        ))
        .hint("set SWARM_API_KEY (or OPENAI_API_KEY); servers on localhost need none")
        .into());
    }
    let candidates = plan::split::candidates(repo, base_tree, files)?;
    eprintln!(
        "swarm: asking the planner ({model}) to group {} file(s) into tasks",
        candidates.len()
    );
    let client = crate::model::client::ChatClient::new(
        &settings.model,
        model,
        key,
        crate::model::limit::AdaptiveLimit::new(1),
    )?;
    let split = plan::split::split(&client, &args.instruction, &candidates).await?;
    eprintln!(
        "swarm: the planner made {} task(s){}",
        split.tasks.len(),
        if split.skipped.is_empty() {
            String::new()
        } else {
            format!(
                " and skipped {} file(s) ({})",
                split.skipped.len(),
                split
                    .skipped
                    .iter()
                    .take(5)
                    .map(|s| format!("{}: {}", s.file.display(), s.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
    );
    Ok(split)
}

/// `--review`: the workers run as for `--dry-run`, each finished task is shown and accepted
/// or skipped, then the accepted ones are merged as `swarm merge` would.
async fn review_then_merge(
    mut request: RunRequest,
    json: bool,
    events: Option<std::path::PathBuf>,
) -> anyhow::Result<i32> {
    let common_dir = request.info.common_dir.clone();
    let run_id = request.plan.run_id.clone();
    let keep = request.keep;
    request.plan.settings.dry_run = true;
    let outcome = run_on_terminal(request, events.as_deref()).await?;
    let mut report = outcome.report;
    if outcome.interrupted {
        render::print_summary(&report, true);
        return Ok(exit::INTERRUPTED);
    }
    let color = super::use_color(std::io::stderr().is_terminal());
    let accepted = super::review::ask(&common_dir, &mut report, color)?;
    report.compute_totals(report.totals.duration_ms);
    state::write_json_atomic(&state::RunDir::new(&common_dir, &run_id).report(), &report)?;
    if accepted == 0 {
        render::print_summary(&report, false);
        eprintln!("review: nothing accepted, nothing merged");
        return Ok(if report.all_succeeded() {
            exit::SUCCESS
        } else {
            exit::PARTIAL
        });
    }
    super::resume::continue_run(
        super::resume::ResumeArgs {
            run_id: (&run_id).into(),
            failed: false,
            keep,
            verify_merged: None,
            json,
            events,
        },
        true,
    )
    .await
}

/// How a run shows itself beyond the terminal.
pub(super) struct Output {
    /// `--json`: the report on stdout.
    pub json: bool,
    /// A dry run prints each task's diff on stdout.
    pub show_diffs: bool,
    /// `--events FILE`: every event as a JSON line, while the run goes.
    pub events: Option<std::path::PathBuf>,
}

/// Runs a prepared run with the terminal's reporter and Ctrl-C handling.
async fn run_on_terminal(
    request: RunRequest,
    events: Option<&std::path::Path>,
) -> anyhow::Result<orchestrator::RunOutcome> {
    let cancel = CancellationToken::new();
    spawn_signal_handler(cancel.clone());
    let reporter = render::reporter_for_terminal(request.plan.tasks.len());
    let sink = Arc::new(EventSink::new(reporter.boxed()));
    if let Some(path) = events {
        sink.log_to(path).map_err(|e| {
            BadInput::new(format!("cannot write --events {}: {e}", path.display()))
                .hint("pass a path in a directory that exists and is writable")
        })?;
    }
    let outcome = orchestrator::run(request, cancel, sink).await;
    reporter.finish();
    outcome
}

/// Runs a prepared run with the terminal's reporter and Ctrl-C handling, prints the summary
/// (and the report with `--json`), and gives the exit code. Shared by `refactor` and `resume`.
pub(super) async fn execute(request: RunRequest, out: &Output) -> anyhow::Result<i32> {
    let (json, show_diffs) = (out.json, out.show_diffs);
    let dry_run = request.plan.settings.dry_run;
    let common_dir = request.info.common_dir.clone();
    let outcome = run_on_terminal(request, out.events.as_deref()).await?;
    if dry_run && show_diffs && !json {
        print_dry_run(&common_dir, &outcome.report)?;
    }
    render::print_summary(&outcome.report, outcome.interrupted);
    if super::github::enabled() {
        super::github::publish(&outcome.report);
    }
    if dry_run && show_diffs && !outcome.interrupted {
        eprintln!(
            "dry run: nothing merged; merge with: swarm merge {}",
            outcome.report.run_id
        );
    }
    if json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &outcome.report)?;
        writeln!(out)?;
    }
    // A dry run succeeds when every task finished (its changes wait on their branches).
    let succeeded = if dry_run {
        outcome
            .report
            .tasks
            .iter()
            .all(|t| matches!(t.status, TaskStatus::Done | TaskStatus::NoChange))
    } else {
        outcome.report.all_succeeded() && outcome.report.result_branch.is_none()
    };
    Ok(if outcome.interrupted {
        exit::INTERRUPTED
    } else if succeeded {
        exit::SUCCESS
    } else {
        exit::PARTIAL
    })
}

/// The diff of every task a dry run finished, on stdout.
fn print_dry_run(
    common_dir: &std::path::Path,
    report: &crate::report::Report,
) -> anyhow::Result<()> {
    let repo = git2::Repository::open(common_dir)?;
    let color = super::use_color(std::io::stdout().is_terminal());
    let mut out = std::io::stdout().lock();
    for t in &report.tasks {
        if let (TaskStatus::Done, Some(start), Some(commit)) = (t.status, &t.start, &t.commit) {
            writeln!(out, "# task {} ({})", t.id, t.branch)?;
            super::diff::write_diffstat(&repo, start, commit, &mut out)?;
            super::diff::write_diff(&repo, start, commit, false, color, &mut out)?;
        }
    }
    Ok(())
}

/// Refuses uncommitted changes (staged or not) in files the run may change, and a merge (or
/// rebase…) in progress, when the target is the checked-out branch.
pub(super) fn check_dirty(
    repo: &git2::Repository,
    into: &repo::IntoTarget,
    tasks: &[crate::plan::Task],
    scope: Scope,
) -> anyhow::Result<()> {
    if !into.checked_out_here {
        return Ok(());
    }
    if let Some(what) = crate::git::checkout::operation_in_progress(repo) {
        return Err(BadInput::new(format!(
            "{what} is in progress in your checkout, so swarm could not update it at the end"
        ))
        .hint("finish or abort it first, or pass --into <new-branch>")
        .into());
    }
    let dirty = repo::dirty_paths(repo)?;
    let touched: Vec<&RepoPath> = match scope {
        Scope::Task => dirty
            .iter()
            .filter(|p| tasks.iter().any(|t| t.files.contains(p)))
            .collect(),
        Scope::Any => dirty.iter().collect(),
    };
    if touched.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = touched.iter().take(10).map(|p| p.display()).collect();
    Err(BadInput::new(format!(
        "the working tree has uncommitted changes in {}{}",
        list.join(", "),
        if touched.len() > 10 { ", …" } else { "" }
    ))
    .hint("commit or stash them, or pass --into <new-branch>")
    .into())
}

/// Refuses to start where workers cannot be confined (unless `--sandbox off`).
pub(super) async fn check_sandbox(settings: &Settings) -> anyhow::Result<()> {
    sandbox::probe(&settings.sandbox).await.map_err(|why| {
        BadInput::new(format!("cannot confine worker processes here: {why}"))
            .hint("pass --sandbox off to run workers unconfined (no Landlock, no namespaces: see docs/SECURITY.md)")
            .into()
    })
}

/// Writes `plan` for `swarm run` (stdout too with `--json`).
fn write_plan(
    plan: &Plan,
    output: &std::path::Path,
    file_count: usize,
    json: bool,
) -> anyhow::Result<i32> {
    let text = serde_json::to_string_pretty(plan)? + "\n";
    std::fs::write(output, &text).map_err(|e| {
        BadInput::new(format!(
            "cannot write the plan to {}: {e}",
            output.display()
        ))
    })?;
    if json {
        print!("{text}");
    }
    eprintln!(
        "swarm: plan {}: {} task(s) over {file_count} file(s), base {}, written to {}",
        plan.run_id,
        plan.tasks.len(),
        &plan.base[..10.min(plan.base.len())],
        output.display()
    );
    eprintln!(
        "  run it: swarm run {0}   (or one shard per machine: swarm run {0} --shard 1/N --push origin)",
        output.display()
    );
    Ok(exit::SUCCESS)
}

/// A worker is configured (`--exec` or `--model`); the key is not needed yet.
fn check_worker_configured(settings: &Settings) -> anyhow::Result<()> {
    if settings.exec.is_none() && settings.model.name.is_none() {
        return Err(
            BadInput::new("no worker: neither --exec nor --model is given")
                .hint("pass --exec CMD or --model NAME; the plan records it for swarm run")
                .into(),
        );
    }
    Ok(())
}

/// Checks that a worker is configured, and a model wherever one is needed (the built-in
/// worker, `--repair`, `--on-conflict repair`); returns the API key if a model is used.
pub(super) fn check_worker(settings: &Settings) -> anyhow::Result<Option<ApiKey>> {
    if settings.repair && settings.verify.is_none() {
        return Err(BadInput::new(
            "--repair needs --verify: the check whose failure the model repairs",
        )
        .hint("pass --verify CMD (e.g. --verify 'cargo check'), or drop --repair")
        .into());
    }
    if !settings.uses_model() {
        return Ok(None);
    }
    // With --exec, what needs the model.
    let needs_model = match (&settings.exec, settings.on_conflict) {
        (None, _) => None,
        (Some(_), OnConflict::Repair) => Some("--on-conflict repair"),
        (Some(_), _) => Some("--repair"),
    };
    let Some(model) = &settings.model.name else {
        return Err(match needs_model {
            Some(what) => BadInput::new(format!("{what} needs a model, and none is configured"))
                .hint("pass --model NAME (or [model] name in swarm.toml) with SWARM_API_KEY (or OPENAI_API_KEY) set"),
            None => BadInput::new("no worker: neither --exec nor --model is given")
                .hint("pass --exec CMD (e.g. --exec 'sed -i \"s/old/new/g\" \"$SWARM_FILE\"'), or --model NAME with SWARM_API_KEY (or OPENAI_API_KEY) set for the built-in agent"),
        }
        .into());
    };
    let url = &settings.model.base_url;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(BadInput::new(format!("--base-url '{url}' is not an http(s) URL"))
            .hint("pass the endpoint's base, e.g. https://api.openai.com/v1 or http://localhost:11434/v1")
            .into());
    }
    let key = ApiKey::from_env();
    if key.is_none() && !settings.model.is_local() {
        return Err(
            BadInput::new(format!("no API key for model '{model}' at {url}"))
                .hint("set SWARM_API_KEY (or OPENAI_API_KEY); servers on localhost need none")
                .into(),
        );
    }
    Ok(key)
}

fn describe_skipped(s: &plan::Selection) -> String {
    let mut parts = Vec::new();
    for (n, what) in [
        (s.skipped_binary, "binary file(s)"),
        (s.skipped_symlinks, "symlink(s)"),
        (s.skipped_submodules, "submodule(s)"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    parts.join(", ")
}

fn confirm(plan: &Plan, files: usize, skipped: &str) -> anyhow::Result<bool> {
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "swarm will run {} task(s) over {files} file(s) with {} worker(s) at a time,\n\
         each with: {}\nand merge them into '{}'.",
        plan.tasks.len(),
        plan.settings.jobs,
        plan.settings.exec.as_deref().unwrap_or_default(),
        plan.into
    )?;
    if !skipped.is_empty() {
        writeln!(err, "(skipped {skipped})")?;
    }
    write!(err, "Proceed? [Y/n] ")?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "" | "y" | "Y" | "yes"))
}

/// First SIGINT/SIGTERM: stop new tasks, stop workers, clean up, exit 130. A second one exits
/// at once.
fn spawn_signal_handler(cancel: CancellationToken) {
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        let mut signals = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            signals += 1;
            if signals == 1 {
                eprintln!(
                    "\nswarm: interrupted; stopping workers and cleaning up (again to quit at once)"
                );
                cancel.cancel();
            } else {
                std::process::exit(exit::INTERRUPTED);
            }
        }
    });
}
