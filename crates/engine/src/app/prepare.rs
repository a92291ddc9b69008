//! Preparing a run (`swarm refactor`, `swarm plan`): the repository, the settings, the
//! checks, the files, the tasks, the plan. Nothing is written here: a run directory, branches
//! and worktrees appear only once the run starts, so a refusal changes nothing.

use std::path::PathBuf;

use git2::Oid;
use regex::bytes::RegexBuilder;

use super::checks;
use super::error::{AppError, AppResult};
use crate::git::repo::{self, IntoTarget, RepoInfo};
use crate::ids::RunId;
use crate::model::client::ChatClient;
use crate::model::limit::AdaptiveLimit;
use crate::orchestrator::Secrets;
use crate::orchestrator::{RunMode, RunRequest};
use crate::plan::{
    self, PLAN_SCHEMA_VERSION, Pathspec, Plan, SelectOptions, Selection, SkippedFile, Task,
};
use crate::repo_path::RepoPath;
use crate::settings::{Layer, PlanSource, Settings};

/// How the selected files become tasks (`--split`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplitMode {
    /// One task per file, or per `--batch` files.
    #[default]
    File,
    /// A planner model groups them and writes each task's instruction.
    Llm,
}

/// What the plan is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Run it here, now: the key, the sandbox and the checkout are checked too.
    Run,
    /// Write it to a file (`swarm plan`): those are checked where it runs.
    PlanFile,
}

/// What the user asked for.
pub struct PrepareRequest {
    pub cwd: PathBuf,
    pub instruction: String,
    pub pathspecs: Vec<String>,
    pub grep: Option<String>,
    pub split: SplitMode,
    pub planner_model: Option<String>,
    pub base: String,
    pub into: Option<String>,
    /// The command line's settings (flags and `SWARM_*` variables).
    pub settings: Layer,
    /// A tool call's settings (`swarm mcp`): a model's, under `settings` and held to the
    /// rule of a plan file (nothing that weakens the sandbox, no agent defined).
    pub call: Option<Layer>,
    pub purpose: Purpose,
}

/// A run ready to start (or to be written as a plan).
pub struct Ready {
    pub info: RepoInfo,
    pub plan: Plan,
    /// The plan's settings, resolved.
    pub settings: Settings,
    pub into: IntoTarget,
    pub into_start: Oid,
    pub(crate) secrets: Secrets,
    /// Files the selection left out, in words ("2 binary file(s)"), or empty.
    pub skipped: String,
    pub file_count: usize,
    /// What would make the run cheaper, in words (the list form of a `$SWARM_FILE` command).
    pub hints: Vec<String>,
}

/// What preparing gave.
pub enum Prepared {
    /// No file matched the pathspecs and `--grep`, in words.
    NoFiles(String),
    /// Nothing to do, and why (the planner found nothing).
    Nothing(String),
    Ready(Box<Ready>),
}

impl Ready {
    /// Writes the plan to `path` (`swarm plan -o`); returns the text written.
    pub fn write_plan(&self, path: &std::path::Path) -> AppResult<String> {
        Ok(plan::file::write(&self.plan, path)?)
    }

    /// The request that runs it in `mode`.
    pub fn into_request(self, mode: RunMode, keep: bool) -> RunRequest {
        RunRequest {
            info: self.info,
            plan: self.plan,
            settings: self.settings,
            into: self.into,
            into_start: self.into_start,
            keep,
            secrets: self.secrets,
            mode,
            continuation: None,
        }
    }
}

/// Prepares the run of `req`. `warn` gets the settings that were ignored, `note` what the
/// planner is doing (it can take a while).
pub async fn prepare(
    req: PrepareRequest,
    warn: &dyn Fn(&str),
    note: &dyn Fn(&str),
) -> AppResult<Prepared> {
    let info = repo::discover(&req.cwd)?;
    let repo = info.open()?;
    let base = repo::resolve_base(&repo, &req.base)?;
    let into = repo::resolve_into(&repo, &info, req.into.as_deref())?;
    let call = req.call.clone().map(|call| (call, PlanSource::ToolCall));
    let resolved = Settings::resolve(req.settings.clone(), call, &info.workdir)?;
    for warning in &resolved.warnings {
        warn(warning);
    }
    let (settings, layer) = (resolved.settings, resolved.layer);
    // A plan runs elsewhere, later: the key and the sandbox are checked by `swarm run`.
    let secrets = match req.purpose {
        Purpose::Run => {
            super::agents::installed(&settings)?;
            checks::secrets(&settings)?
        }
        Purpose::PlanFile => {
            checks::worker_configured(&settings)?;
            Secrets::default()
        }
    };
    let mut selection = select(&req, &info, &repo, base)?;
    let skipped = plan::describe_skipped(&selection.skipped);
    if selection.files.is_empty() {
        return Ok(Prepared::NoFiles(nothing_matched(&req, &skipped)));
    }
    if req.purpose == Purpose::Run {
        // No more workers at once than files, whatever --jobs says.
        let jobs = settings.jobs.min(selection.files.len());
        checks::machine(&settings, jobs).await?;
        checks::worktrees(&settings, &info.common_dir).await?;
    }
    let (tasks, not_tasks) = match req.split {
        SplitMode::Llm => {
            let tree = repo.find_commit(base)?.tree()?;
            let split =
                split_with_model(&req, &settings, &repo, &tree, &selection.files, note).await?;
            if split.tasks.is_empty() {
                return Ok(Prepared::Nothing(
                    "the planner found nothing to change".into(),
                ));
            }
            selection.skipped.extend(split.skipped);
            (split.tasks, selection.skipped)
        }
        SplitMode::File => (
            plan::make_tasks(selection.files, settings.batch),
            selection.skipped,
        ),
    };
    repo::check_filters(&repo, tasks.iter().flat_map(|t| &t.files))?;
    checks::files_reach_the_command(&settings, &tasks)?;
    if req.purpose == Purpose::Run {
        checks::checkout(&repo, &into, &tasks, settings.scope)?;
    }
    let hints = settings
        .exec
        .as_deref()
        .and_then(|exec| crate::worker::list_form::hint(exec, tasks.len()))
        .into_iter()
        .collect();
    let plan = new_plan(&req, base, &into, layer, tasks, not_tasks);
    let file_count = plan.tasks.iter().map(|t| t.files.len()).sum();
    Ok(Prepared::Ready(Box::new(Ready {
        into_start: into.tip.unwrap_or(base),
        info,
        plan,
        settings,
        into,
        secrets,
        skipped,
        file_count,
        hints,
    })))
}

/// The files tracked at `base` that the pathspecs and `--grep` select.
fn select(
    req: &PrepareRequest,
    info: &RepoInfo,
    repo: &git2::Repository,
    base: Oid,
) -> AppResult<Selection> {
    let grep = req
        .grep
        .as_deref()
        .map(|g| {
            RegexBuilder::new(g)
                .build()
                .map_err(|e| plan::PlanError::Grep(e.to_string()))
        })
        .transpose()?;
    let pathspec = Pathspec::new(&req.pathspecs, &info.prefix)?;
    let base_tree = repo.find_commit(base)?.tree()?;
    if req.pathspecs.is_empty() {
        instruction_is_not_a_pathspec(req, info, repo, &base_tree)?;
    }
    Ok(plan::select_files(
        repo,
        &base_tree,
        &SelectOptions {
            pathspec: &pathspec,
            grep: grep.as_ref(),
        },
    )?)
}

/// Without pathspecs, the instruction read as one must name no tracked file: `swarm
/// refactor 'src/*.py' --exec …` forgot its instruction, and would work on every file.
fn instruction_is_not_a_pathspec(
    req: &PrepareRequest,
    info: &RepoInfo,
    repo: &git2::Repository,
    base_tree: &git2::Tree<'_>,
) -> AppResult<()> {
    let Ok(pathspec) = Pathspec::new(std::slice::from_ref(&req.instruction), &info.prefix) else {
        return Ok(());
    };
    let named = plan::select_files(
        repo,
        base_tree,
        &SelectOptions {
            pathspec: &pathspec,
            grep: None,
        },
    )?;
    match named.files.len() + named.skipped.len() {
        0 => Ok(()),
        matches => Err(AppError::InstructionIsAPathspec {
            instruction: req.instruction.clone(),
            matches,
        }),
    }
}

fn new_plan(
    req: &PrepareRequest,
    base: Oid,
    into: &IntoTarget,
    settings: Layer,
    tasks: Vec<Task>,
    skipped: Vec<SkippedFile>,
) -> Plan {
    Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        run_id: RunId::new_now(),
        instruction: req.instruction.clone(),
        base,
        into: into.branch.clone(),
        pathspecs: req.pathspecs.clone(),
        grep: req.grep.clone(),
        settings,
        tasks,
        skipped,
    }
}

/// "no files matched *.rs with --grep 'x'", and what was skipped.
fn nothing_matched(req: &PrepareRequest, skipped: &str) -> String {
    let mut message = format!(
        "no files matched{}{}",
        if req.pathspecs.is_empty() {
            String::new()
        } else {
            format!(" {}", req.pathspecs.join(" "))
        },
        req.grep
            .as_deref()
            .map(|g| format!(" with --grep '{g}'"))
            .unwrap_or_default()
    );
    if !skipped.is_empty() {
        message.push_str(&format!(" (skipped {skipped})"));
    }
    message
}

/// `--split llm`: the planner model groups `files` into tasks.
async fn split_with_model(
    req: &PrepareRequest,
    settings: &Settings,
    repo: &git2::Repository,
    base_tree: &git2::Tree<'_>,
    files: &[RepoPath],
    note: &dyn Fn(&str),
) -> AppResult<plan::split::Split> {
    let Some(model) = req
        .planner_model
        .clone()
        .or_else(|| settings.model.name.clone())
    else {
        return Err(AppError::NoPlannerModel);
    };
    let key = checks::endpoint_and_key(settings, &model, "the planner model")?;
    let candidates = plan::split::candidates(repo, base_tree, files)?;
    note(&format!(
        "asking the planner ({model}) to group {} file(s) into tasks",
        candidates.len()
    ));
    let client = ChatClient::new(&settings.model, model, key, AdaptiveLimit::new(1))?;
    let split = plan::split::split(&client, &req.instruction, &candidates).await?;
    let skipped = if split.skipped.is_empty() {
        String::new()
    } else {
        let shown: Vec<String> = split
            .skipped
            .iter()
            .take(5)
            .map(|s| format!("{}: {}", s.file.display(), s.reason))
            .collect();
        format!(
            " and skipped {} file(s) ({})",
            split.skipped.len(),
            shown.join("; ")
        )
    };
    note(&format!(
        "the planner made {} task(s){skipped}",
        split.tasks.len()
    ));
    Ok(split)
}

/// The plan file at `path`, run here whole in `mode` (merging as `swarm refactor` does, or a
/// dry run): its settings held to the rule of a plan file under `command_line`, every check
/// of a run made. The request, and the settings that were ignored.
pub async fn plan_run(
    cwd: &std::path::Path,
    path: &std::path::Path,
    command_line: Layer,
    mode: RunMode,
) -> AppResult<(RunRequest, Vec<String>)> {
    let info = repo::discover(cwd)?;
    let repo = info.open()?;
    let plan = plan::file::read(path)?;
    let base = plan::file::base(&repo, &plan)?;
    let (settings, secrets, warnings) =
        checks::plan_file(&info, &repo, &plan, command_line).await?;
    checks::worktrees(&settings, &info.common_dir).await?;
    let into = repo::resolve_into(&repo, &info, Some(&plan.into))?;
    checks::checkout(&repo, &into, &plan.tasks, settings.scope)?;
    let request = RunRequest {
        into_start: into.tip.unwrap_or(base),
        info,
        plan,
        settings,
        into,
        keep: false,
        secrets,
        mode,
        continuation: None,
    };
    Ok((request, warnings))
}
