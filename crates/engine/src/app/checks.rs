//! The checks made before a run writes anything: a worker, a model and a key where one is
//! needed, confinement that works here, and a checkout the result can be merged into.

use std::collections::HashSet;

use super::error::{AppError, AppResult, Role};
use crate::gateway::Binding;
use crate::git::repo::{self, IntoTarget};
use crate::orchestrator::Secrets;
use crate::plan::Task;
use crate::repo_path::RepoPath;
use crate::settings::{ApiKey, OnConflict, PerProcess, Scope, Settings};
use swarm_sandbox as sandbox;

/// A worker is configured (`--exec` or `--model`); the key is not needed yet (a plan file).
pub(crate) fn worker_configured(settings: &Settings) -> AppResult<()> {
    match (&settings.exec, &settings.model.name) {
        (None, None) => Err(AppError::NoWorker { for_plan: true }),
        _ => Ok(()),
    }
}

/// A worker is configured, and a model wherever one is needed (the built-in worker,
/// `--repair`, `--on-conflict repair`); returns the API key when a model is used.
pub(crate) fn worker(settings: &Settings) -> AppResult<Option<ApiKey>> {
    if settings.repair && settings.verify.is_none() {
        return Err(AppError::RepairWithoutVerify);
    }
    if settings.agent.is_none()
        && let Some(program) = settings.exec.as_deref().and_then(missing_program)
    {
        return Err(AppError::ExecNotFound(program));
    }
    if let PerProcess::Tasks(n @ 2..) = settings.per_process {
        if settings.exec.is_none() {
            return Err(AppError::PerProcess(
                n,
                "the built-in worker runs one conversation per task, not a process",
            ));
        }
        if settings.repair {
            return Err(AppError::PerProcess(
                n,
                "--repair hands each task's failing check to the model, one task at a time",
            ));
        }
    }
    if !settings.uses_model() {
        // The judge of --best-of is the run's only model call.
        return match &settings.judge_model {
            Some(judge) => endpoint_and_key(settings, judge, "judge model"),
            None => Ok(None),
        };
    }
    // With --exec, what needs the model.
    let needs_model = match (&settings.exec, settings.on_conflict) {
        (None, _) => None,
        (Some(_), OnConflict::Repair) => Some("--on-conflict repair"),
        (Some(_), _) => Some("--repair"),
    };
    let Some(model) = &settings.model.name else {
        return Err(match needs_model {
            Some(what) => AppError::ModelNeeded(what),
            None => AppError::NoWorker { for_plan: false },
        });
    };
    endpoint_and_key(settings, model, "model")
}

/// The endpoint is http(s) with no user name or password, and there is a key unless it is
/// on this machine.
pub(crate) fn endpoint_and_key(
    settings: &Settings,
    model: &str,
    what: &'static str,
) -> AppResult<Option<ApiKey>> {
    let url = &settings.model.base_url;
    if let Err(why) = crate::net::endpoint(url) {
        return Err(AppError::BadBaseUrl {
            what: "--base-url".into(),
            url: url.clone(),
            why: why.to_string(),
        });
    }
    let key = ApiKey::from_env();
    if key.is_none() && !settings.model.is_local() {
        return Err(AppError::NoApiKey {
            what,
            model: model.to_string(),
            url: url.clone(),
        });
    }
    Ok(key)
}

/// The program an `--exec` command starts with, when it is a plain name that is not on PATH
/// (`rufff check …`): better said once than failed on every task with exit 127. Commands
/// this cannot read for sure (unbalanced quotes, a variable, a path, a shell word) pass.
fn missing_program(command: &str) -> Option<String> {
    let words = shell_words::split(command).ok()?;
    // `VAR=value cmd …`: the command is after the assignments; one that substitutes a
    // command (`s=$(git status)`) is not read further.
    let assignment = |w: &String| {
        w.split_once('=').is_some_and(|(name, _)| {
            name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let assignments: Vec<&String> = words.iter().take_while(|w| assignment(w)).collect();
    if assignments.iter().any(|w| w.contains(['$', '`', '('])) {
        return None;
    }
    let first = words.get(assignments.len())?;
    let plain = !first.is_empty()
        && !first.contains(['/', '$', '`', '(', ';', '|', '&', '<', '>', '*', '?'])
        && !crate::worker::is_shell_word(first.as_bytes());
    (plain && super::agents::which(first).is_none()).then(|| first.clone())
}

/// `--merge-with`'s tool is installed and says which files it merges.
pub(crate) fn merge_tool(settings: &Settings) -> AppResult<()> {
    match settings.merge_with {
        Some(tool) => crate::orchestrator::merge_tool(tool)
            .map(drop)
            .map_err(|problem| AppError::MergeTool {
                tool: tool.to_string(),
                problem,
            }),
        None => Ok(()),
    }
}

/// The run's secrets, read from the environment once: the model's key, checked as
/// [`worker`] does, and the credentials of the `--agent`'s APIs, each checked to go only
/// where a key may go, and able to meter the run's budgets.
pub(crate) fn secrets(settings: &Settings) -> AppResult<Secrets> {
    let model_key = worker(settings)?;
    merge_tool(settings)?;
    let agent = agent_secrets(settings)?;
    Ok(Secrets { model_key, agent })
}

/// The `--agent`'s credentials alone, checked as [`secrets`] does (for a run that merges,
/// and runs no worker of the model's).
pub(crate) fn agent_secrets(settings: &Settings) -> AppResult<Vec<Binding>> {
    let agent = agent_credentials(settings);
    budgets(settings, &agent)?;
    agent_endpoints(settings, &agent)?;
    Ok(agent)
}

/// The APIs of the `--agent` swarm's gateway serves, with the credentials the environment
/// holds for them.
fn agent_credentials(settings: &Settings) -> Vec<Binding> {
    let mut bindings: Vec<Binding> = Vec::new();
    // Each agent of `--agent a,b`; an API two of them speak, once.
    for agent in &settings.rotation.agents {
        for binding in super::agents::credentials_of(agent) {
            if !bindings.iter().any(|b| b.route.name == binding.route.name) {
                bindings.push(binding);
            }
        }
    }
    bindings
}

/// Every endpoint the gateway would send an `--agent`'s key to is one a key may be sent to:
/// http(s), without a user name or password.
fn agent_endpoints(settings: &Settings, credentials: &[Binding]) -> AppResult<()> {
    let names: Vec<&str> = settings
        .rotation
        .agents
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let agent = names.join(", ");
    for binding in credentials {
        if let Err(why) = crate::net::endpoint(&binding.upstream) {
            return Err(AppError::BadBaseUrl {
                what: format!(
                    "the endpoint of --agent {agent}'s {} API",
                    binding.route.name
                ),
                url: binding.upstream.clone(),
                why: why.to_string(),
            });
        }
    }
    Ok(())
}

/// The run's budgets can be enforced: its spend is metered (an `--agent`'s through swarm's
/// gateway), and priced for `--max-cost`.
fn budgets(settings: &Settings, credentials: &[Binding]) -> AppResult<()> {
    if settings.max_cost.is_none() && settings.max_tokens.is_none() {
        return Ok(());
    }
    // Every agent of the run must be metered: one of its APIs served by the gateway.
    let unmetered = settings.rotation.agents.iter().find(|agent| {
        !credentials
            .iter()
            .any(|b| agent.routes.iter().any(|r| r.name == b.route.name))
    });
    if let Some(agent) = unmetered {
        let vars: Vec<&str> = agent
            .routes
            .iter()
            .flat_map(|r| &r.key_env)
            .map(String::as_str)
            .collect();
        return Err(AppError::BudgetUnmetered {
            agent: agent.name.clone(),
            why: match vars.is_empty() {
                true => "it declares no api for swarm's gateway".into(),
                false => format!(
                    "none of {} is set: it would use its own login",
                    vars.join(", ")
                ),
            },
        });
    }
    let spends =
        settings.agent.is_some() || settings.uses_model() || settings.judge_model.is_some();
    if settings.max_cost.is_some() && spends && !settings.model.has_prices() {
        return Err(AppError::BudgetUnpriced);
    }
    Ok(())
}

/// `--worktrees overlay` can be used by this run: an `--exec` worker (the built-in worker's
/// file tools, and `--repair`'s, run in swarm, outside the jail that mounts a view), and a
/// view mounts here.
pub(crate) async fn worktrees(settings: &Settings, common_dir: &std::path::Path) -> AppResult<()> {
    if settings.worktree.mode != crate::settings::WorktreeMode::Overlay {
        return Ok(());
    }
    let why = if settings.exec.is_none() {
        Some(
            "the built-in worker edits files from swarm itself, outside the jail where a view \
             is mounted; overlay worktrees serve --exec and --agent workers"
                .to_string(),
        )
    } else if settings.repair {
        Some("--repair runs the built-in worker in the task's worktree".to_string())
    } else {
        crate::orchestrator::views_unavailable(settings, common_dir).await
    };
    match why {
        Some(why) => Err(AppError::NoOverlay(why)),
        None => Ok(()),
    }
}

/// This machine can run the workers: confined as `settings` ask (unless the sandbox is off),
/// and `jobs` of them at once within the descriptors swarm may hold (raising its soft limit
/// to the hard one if it must).
pub(crate) async fn machine(settings: &Settings, jobs: usize) -> AppResult<()> {
    sandbox::open_files::ensure(jobs).map_err(|short| AppError::OpenFiles {
        jobs,
        needed: short.needed,
        allowed: short.allowed,
        max_jobs: short.max_jobs,
    })?;
    sandbox::probe(&settings.sandbox)
        .await
        .map_err(AppError::Sandbox)
}

/// The files of each task reach the worker's command, and `--verify`, as they are: a command
/// that names only `$SWARM_FILE` (the first file) gets no task of several files nor a process
/// of several tasks, and one that expands a file variable outside double quotes gets no file
/// name the shell would split or glob.
pub(crate) fn files_reach_the_command(settings: &Settings, tasks: &[Task]) -> AppResult<()> {
    merged_check(settings)?;
    let workers: Vec<&str> = match (&settings.exec, settings.rotation.agents.as_slice()) {
        (_, [_, ..]) => settings
            .rotation
            .agents
            .iter()
            .map(|a| a.exec.as_str())
            .collect(),
        (Some(exec), []) => vec![exec.as_str()],
        // The built-in worker reads its files itself.
        (None, []) => Vec::new(),
    };
    let commands = workers
        .into_iter()
        .map(|c| (c, Role::WORKER))
        .chain(settings.verify.as_deref().map(|c| (c, Role::CHECK)));
    // Tasks a process gets: `auto` shares processes for a worker that takes a list.
    let shared = crate::orchestrator::tasks_per_process(settings, tasks.len()) > 1;
    let per_process = (shared && tasks.len() > 1).then_some(settings.per_process);
    for (command, role) in commands {
        reaches(command, role, tasks, per_process)?;
    }
    Ok(())
}

/// `--verify-merged` names no task's file: it checks the merged result, and gets none.
pub(crate) fn merged_check(settings: &Settings) -> AppResult<()> {
    let Some(check) = settings.verify_merged.as_deref() else {
        return Ok(());
    };
    let vars = crate::worker::file_vars::file_vars(check);
    match vars.file.named || vars.files.named {
        true => Err(AppError::FilesOfNoTask),
        false => Ok(()),
    }
}

/// The files of each task reach `command` as they are ([`files_reach_the_command`]);
/// `per_process`: how several tasks share a process, if they do.
fn reaches(
    command: &str,
    role: Role,
    tasks: &[Task],
    per_process: Option<PerProcess>,
) -> AppResult<()> {
    use crate::worker::file_vars::{file_vars, splits_unquoted};
    let vars = file_vars(command);
    if vars.file.named && !vars.files.named {
        if let Some(task) = tasks.iter().find(|t| t.files.len() > 1) {
            return Err(AppError::FirstFileOnly {
                task: task.id.to_string(),
                files: task.files.len(),
                role,
            });
        }
        if let Some(per_process) = per_process {
            return Err(AppError::FirstFileOfProcess { per_process, role });
        }
    }
    for (used, var) in [(vars.file, "SWARM_FILE"), (vars.files, "SWARM_FILES")] {
        let splits = tasks
            .iter()
            .flat_map(|t| &t.files)
            .find(|f| splits_unquoted(f.as_bytes()));
        if let (true, Some(file)) = (used.unquoted, splits) {
            return Err(AppError::UnquotedFileVar {
                var,
                file: file.display(),
                role,
            });
        }
    }
    Ok(())
}

/// The checked-out target can take the result at the end: no merge (or rebase…) in
/// progress, and no uncommitted changes in the files the run may change (any file with
/// `--scope any`).
pub(crate) fn checkout(
    repo: &git2::Repository,
    into: &IntoTarget,
    tasks: &[Task],
    scope: Scope,
) -> AppResult<()> {
    if !into.checked_out_here {
        return Ok(());
    }
    let files: HashSet<&RepoPath> = tasks.iter().flat_map(|t| &t.files).collect();
    let touched = match scope {
        Scope::Task => Some(&files),
        Scope::Any => None,
    };
    Ok(repo::check_checkout(repo, touched)?)
}

/// A plan file's settings under the command line's layer (held to the rule of a plan file),
/// and every check a run of its tasks needs before it starts: the agent installed, the
/// secrets, git's filters, the command reaching the files, the sandbox. The settings, the
/// secrets, and the settings that were ignored.
pub(crate) async fn plan_file(
    info: &crate::git::repo::RepoInfo,
    repo: &git2::Repository,
    plan: &crate::plan::Plan,
    command_line: crate::settings::Layer,
) -> AppResult<(Settings, Secrets, Vec<String>)> {
    let own = (plan.settings.clone(), crate::settings::PlanSource::File);
    let resolved = Settings::resolve(command_line, Some(own), &info.workdir)?;
    let (settings, warnings) = (resolved.settings, resolved.warnings);
    super::agents::installed(&settings)?;
    let secrets = secrets(&settings)?;
    crate::git::repo::check_filters(repo, plan.tasks.iter().flat_map(|t| &t.files))?;
    files_reach_the_command(&settings, &plan.tasks)?;
    machine(&settings, settings.jobs.min(plan.tasks.len())).await?;
    Ok((settings, secrets, warnings))
}

#[cfg(test)]
mod tests {
    use super::missing_program;

    #[test]
    fn only_a_plain_program_name_is_looked_up() {
        assert_eq!(missing_program("rufff check --fix x"), Some("rufff".into()));
        assert_eq!(missing_program("LC_ALL=C rufff x"), Some("rufff".into()));
        for fine in [
            "sed -i s/a/b/ \"$SWARM_FILE\"",
            "LC_ALL=C sed -i s/a/b/ x",
            "s=$(nosuchprogram x); echo \"$s\"",
            "cd sub && nosuchprogram",
            "./fix.sh",
            "$TOOL --fix",
            "for f in $SWARM_FILES; do x; done",
            "unbalanced 'quote",
        ] {
            assert_eq!(missing_program(fine), None, "{fine}");
        }
    }
}
