//! The external command worker (`--exec`; the protocol is docs/WORKERS.md).
//!
//! Any program that edits files works here: `sed`, `ruff --fix`, `comby`, or a coding agent
//! CLI (`claude -p`, `codex exec`). It gets the task through environment variables and a
//! TASK.md outside the worktree (in the run's task directory, which it may read but not
//! write), and may leave a verdict in `SWARM_RESULT_FILE`, in a private directory of its
//! own that swarm reads back without following links.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::process::{self, Exit, GatewayAccess, JailEnd, ProcessRequest, Program};
use crate::gateway::{Binding, Gateway, Meter, Spent};
use crate::ids::{CandidateNo, RunId, TaskId};
use crate::repo_path::RepoPath;
use crate::settings::agents::AgentSettings;
use crate::worker::agent_output::{self, AgentUsage};
use crate::worker::{Verdict, WorkerError};
use crate::{env_vars, state};
use std::sync::Arc;
use swarm_sandbox::SandboxPolicy;
use swarm_sandbox::git_view::{GitDirs, GitLayer};
use swarm_sandbox::jail::StateView;
use swarm_sandbox::overlay::OverlayView;
use swarm_sandbox::proxy::OnAccess;

pub(crate) struct ExecTask<'a> {
    pub command: &'a str,
    pub instruction: &'a str,
    pub run_id: &'a RunId,
    pub task_id: &'a TaskId,
    /// Its candidate's number (`SWARM_CANDIDATE`), with `--tries`/`--best-of`.
    pub candidate: Option<CandidateNo>,
    pub files: &'a [RepoPath],
    pub worktree: &'a Path,
    /// The overlay view mounted on `worktree` (an overlay worktree).
    pub view: Option<&'a OverlayView>,
    /// The task's directory in the run directory (log, TASK.md, result file).
    pub task_dir: &'a Path,
    pub timeout: Duration,
    pub idle_timeout: Duration,
    pub sandbox: &'a SandboxPolicy,
    /// Told of the connections it asks the allow-list proxy for.
    pub on_access: Option<OnAccess>,
    /// `--agent`: the coding agent the command runs (its sandbox needs, its output format),
    /// and the gateway of its model requests.
    pub agent: Option<AgentRun<'a>>,
    pub cancel: &'a CancellationToken,
    /// The run's meter: why an agent was stopped for the budget.
    pub meter: &'a Meter,
    /// Extra context for this attempt (e.g. the conflict a retry must avoid).
    pub context: Option<&'a str>,
    /// Exit statuses that mean the command succeeded (`--ok-exit-codes`; 0 by default).
    pub ok_exit_codes: &'a [i32],
    /// The repository directories the worker's own git writes, shown to it copy-on-write
    /// (in the jail, where overlays can be mounted); `None`: not writable.
    pub git: Option<&'a GitDirs>,
}

/// An `--agent` worker: the preset, and where its model requests go.
#[derive(Clone, Copy)]
pub(crate) struct AgentRun<'a> {
    pub settings: &'a AgentSettings,
    /// The run's gateway, and the agent's APIs it serves (none: its own login).
    pub gateway: Option<(&'a Arc<Gateway>, &'a [Binding])>,
}

#[derive(Debug)]
pub(crate) struct ExecOutcome {
    pub verdict: Verdict,
    pub summary: Option<String>,
    pub output_tail: String,
    /// What an `--agent` reported of its work (turns, tokens, cost): kept, never counted.
    pub usage: Option<AgentUsage>,
    /// The worker's jail, maybe still unmounting: finished before its worktree's view or
    /// `git` are used again (declared before `git`, so dropped before it).
    pub jail: JailEnd,
    /// What the worker's own git wrote, for the caller to adopt its commits from.
    pub git: Option<GitLayer>,
    /// Processes it left running when it exited (stopped with it).
    pub leftovers: u32,
    /// What its model requests spent, metered by the gateway.
    pub spent: Option<Spent>,
}

#[derive(Deserialize)]
struct ResultFile {
    status: String,
    #[serde(default)]
    summary: Option<String>,
}

pub(crate) fn log_path(task_dir: &Path) -> PathBuf {
    task_dir.join("worker.log")
}

/// The most of a result file swarm reads.
const RESULT_FILE_CAP: u64 = 64 * 1024;

pub(crate) async fn run(task: ExecTask<'_>) -> Result<ExecOutcome, WorkerError> {
    std::fs::create_dir_all(task.task_dir)
        .map_err(WorkerError::task_file("create", task.task_dir))?;
    let task_file = task.task_dir.join("TASK.md");
    state::write_file(
        &task_file,
        crate::secrets::redact(&task_markdown(&task)).as_bytes(),
    )
    .map_err(WorkerError::task_file("write", &task_file))?;
    let result_dir = swarm_sandbox::scratch::reusable("result-", &[]).map_err(
        WorkerError::task_file("create", "a folder for the result file"),
    )?;
    let result_file = result_dir.path().join("result.json");
    let mut env = task_env(&task, &task_file, &result_file);
    let agent_sandbox = match task.agent {
        Some(agent) => {
            env.extend(agent_env(agent.settings));
            let served = agent.gateway.is_some_and(|(_, b)| !b.is_empty());
            Some(agent_policy(task.sandbox, agent.settings, served))
        }
        None => None,
    };
    let state_views = match (task.agent, task.sandbox.enabled) {
        (Some(agent), true) => {
            state_views(agent.settings, task.task_dir).map_err(WorkerError::Sandbox)?
        }
        _ => Vec::new(),
    };
    let direct = super::direct::argv(task.command, &env);
    // An agent commits as a matter of course; a file editor run without a shell never does.
    let git_view =
        task.agent.is_some() || !direct.as_deref().is_some_and(super::no_git::writes_no_git);
    let git = match (task.git, task.sandbox.enabled && git_view) {
        (Some(dirs), true) => Some(GitLayer::new(dirs).map_err(|e| {
            WorkerError::Sandbox(anyhow::Error::new(e).context("the views of the worker's git"))
        })?),
        _ => None,
    };
    let log = log_path(task.task_dir);
    let (outcome, jail) = run_process(
        &task,
        (env, direct),
        &log,
        agent_sandbox.as_ref().unwrap_or(task.sandbox),
        &[result_dir.path()],
        &state_views,
        git.as_ref(),
    )
    .await?;
    let reported: Option<ResultFile> =
        read_result(&result_file).and_then(|b| serde_json::from_slice(&b).ok());
    let usage = task.agent.and_then(|agent| {
        let text = std::fs::read(&log).ok()?;
        agent_output::parse(agent.settings.output, &String::from_utf8_lossy(&text))
    });
    let summary = reported
        .as_ref()
        .and_then(|r| r.summary.clone())
        .or_else(|| usage.as_ref().and_then(|u| u.summary.clone()));
    let verdict = verdict(
        &task,
        outcome.exit,
        reported.as_ref(),
        usage.as_ref(),
        &summary,
    );
    Ok(ExecOutcome {
        verdict,
        summary,
        output_tail: outcome.output_tail,
        usage,
        spent: outcome.spent,
        jail,
        git,
        leftovers: outcome.leftovers,
    })
}

/// The task's variables (`SWARM_FILE`, `SWARM_FILES`, …).
fn task_env(
    task: &ExecTask<'_>,
    task_file: &Path,
    result_file: &Path,
) -> Vec<(OsString, OsString)> {
    let candidate = task
        .candidate
        .map(|k| (env_vars::SWARM_CANDIDATE.into(), k.to_string().into()));
    let mut env = check_env(task.files, task.run_id, task.task_id);
    env.extend([
        (env_vars::SWARM_INSTRUCTION.into(), task.instruction.into()),
        (env_vars::SWARM_WORKTREE.into(), task.worktree.into()),
        (env_vars::SWARM_TASK_FILE.into(), task_file.into()),
        (env_vars::SWARM_RESULT_FILE.into(), result_file.into()),
    ]);
    env.extend(candidate);
    env
}

/// What a task's files and ids give a command: `SWARM_FILE` (the first file), `SWARM_FILES`
/// (one a line), `SWARM_TASK_ID`, `SWARM_RUN_ID`. `--verify` gets these too.
pub(crate) fn check_env(
    files: &[RepoPath],
    run_id: &RunId,
    task_id: &TaskId,
) -> Vec<(OsString, OsString)> {
    let first = files
        .first()
        .map(|f| f.as_bytes().to_vec())
        .unwrap_or_default();
    let all = files
        .iter()
        .map(|f| f.as_bytes())
        .collect::<Vec<_>>()
        .join(&b'\n');
    vec![
        (env_vars::SWARM_FILE.into(), OsString::from_vec(first)),
        (env_vars::SWARM_FILES.into(), OsString::from_vec(all)),
        (env_vars::SWARM_TASK_ID.into(), task_id.as_str().into()),
        (env_vars::SWARM_RUN_ID.into(), run_id.as_str().into()),
    ]
}

/// Runs the task's command (its words `direct`, where it needs no shell) under `sandbox`,
/// with its variables `env`, writable also in `also` and its git's view; the views are
/// unmounted (made readable again) whatever happened.
async fn run_process(
    task: &ExecTask<'_>,
    (mut env, direct): (Vec<(OsString, OsString)>, Option<Vec<OsString>>),
    log: &Path,
    sandbox: &SandboxPolicy,
    also: &[&Path],
    state_views: &[StateView],
    git: Option<&GitLayer>,
) -> Result<(process::ProcessOutcome, JailEnd), WorkerError> {
    let mut also_writable = also.to_vec();
    if let Some(layer) = git {
        also_writable.push(layer.writable());
    }
    let program = match &direct {
        Some(argv) => {
            // What the shell would have set.
            env.push(("PWD".into(), task.worktree.into()));
            Program::Argv(argv)
        }
        None => Program::Shell(task.command),
    };
    let request = ProcessRequest {
        program,
        cwd: task.worktree,
        env,
        log,
        timeout: task.timeout,
        idle_timeout: Some(task.idle_timeout),
        sandbox: Some(sandbox),
        // The result file's directory, and the views of its git; nothing of swarm's.
        also_writable: &also_writable,
        view: task.view,
        on_access: task.on_access.clone(),
        cancel: task.cancel,
        gateway: task
            .agent
            .and_then(|a| a.gateway)
            .map(|(gateway, bindings)| GatewayAccess {
                gateway,
                task: task.task_id,
                bindings,
            }),
        state_views,
        git_view: git.map(|l| &l.view),
        // TASK.md, in swarm's hidden state.
        keep: &[task.task_dir],
    };
    // The jail ends while swarm goes on with what the worker left (its files, its output, its
    // result file are final once init has ended every process of it): the caller finishes
    // it before the layers it mounted are used again, and the state views' scratch folders
    // are opened up after it.
    let outcome = process::run_until_exit(request).await;
    if let Some(layer) = git {
        layer.unmounted();
    }
    outcome
}

/// What the command's end means for the task: its exit, what it reported in its result file,
/// and (an agent) what its output said.
fn verdict(
    task: &ExecTask<'_>,
    exit: Exit,
    reported: Option<&ResultFile>,
    usage: Option<&AgentUsage>,
    summary: &Option<String>,
) -> Verdict {
    match exit {
        Exit::TimedOut => Verdict::Timeout(format!(
            "timed out after {}s (--timeout)",
            task.timeout.as_secs()
        )),
        Exit::Idle => Verdict::Timeout(format!(
            "stale: no output and no file change for {}s (--idle-timeout)",
            task.idle_timeout.as_secs()
        )),
        Exit::Cancelled => Verdict::Interrupted,
        Exit::OverBudget => Verdict::OverBudget(format!(
            "stopped: {}",
            task.meter
                .exhausted()
                .unwrap_or("the run's budget is spent")
        )),
        Exit::Signal(sig) => Verdict::Failed(format!("the worker was killed by signal {sig}")),
        Exit::Code(code) if task.ok_exit_codes.contains(&code) => {
            match reported.map(|r| r.status.as_str()) {
                Some("failed") => Verdict::Failed(format!(
                    "the worker reported failure: {}",
                    summary.as_deref().unwrap_or("(no summary)")
                )),
                _ if usage.is_some_and(|u| u.error.is_some()) => Verdict::Failed(format!(
                    "the agent reported an error: {}",
                    usage.and_then(|u| u.error.as_deref()).unwrap_or("")
                )),
                Some("no_change") => Verdict::NoChange,
                _ => Verdict::Done,
            }
        }
        Exit::Code(code) => Verdict::Exited(code),
    }
}

/// What an agent gets besides the task's variables: its switches, its credentials (passed
/// by name from swarm's environment, to it only), its model.
fn agent_env(agent: &AgentSettings) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = agent
        .set_env
        .iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    if let Some(model) = &agent.model {
        env.push((env_vars::SWARM_AGENT_MODEL.into(), model.into()));
    }
    env
}

/// The sandbox of the agent's own process: the run's, plus the agent's domains (but its
/// APIs' own hosts while the gateway stands in for them: `served`), its state directories
/// (created if missing, so they can be mounted on), its own credential stores only when it
/// uses its own login, and the variables its table passes. Other processes of the task
/// (`--verify`, setup) keep the run's sandbox.
fn agent_policy(base: &SandboxPolicy, agent: &AgentSettings, served: bool) -> SandboxPolicy {
    let mut policy = base.clone();
    let gatewayed: Vec<&String> = match served {
        true => agent.routes.iter().flat_map(|r| &r.hosts).collect(),
        false => Vec::new(),
    };
    policy.allow_domains.extend(
        agent
            .allow_domains
            .iter()
            .filter(|d| !gatewayed.contains(d))
            .cloned(),
    );
    for dir in &agent.state_dirs {
        if !dir.exists() && dir.extension().is_none() {
            let _ = std::fs::create_dir_all(dir);
        }
        policy.writable.push(dir.clone());
    }
    match served {
        // Its own credentials stay hidden, as they are from every worker.
        true => policy.hide.extend(agent.credentials.iter().cloned()),
        false => policy.hide.retain(|p| !agent.credentials.contains(p)),
    }
    policy.env.extend(agent.pass_env.iter().cloned());
    policy
}

/// A copy-on-write view of each of the agent's state directories (those that are
/// directories), its writes kept in the task's directory (`agent-state/NAME/upper`).
fn state_views(agent: &AgentSettings, task_dir: &Path) -> anyhow::Result<Vec<StateView>> {
    let mut views = Vec::new();
    for dir in agent.state_dirs.iter().filter(|d| d.is_dir()) {
        let name = crate::settings::home::tilde(dir)
            .trim_start_matches("~/")
            .trim_start_matches('.')
            .replace(['/', '.'], "-");
        let layer = task_dir.join("agent-state").join(name);
        let (upper, work) = (layer.join("upper"), layer.join("work"));
        for d in [&upper, &work] {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        views.push(StateView {
            dir: dir.clone(),
            upper,
            work,
        });
    }
    Ok(views)
}

/// The worker's result file: a regular file (no link followed, no FIFO waited on), at most
/// [`RESULT_FILE_CAP`] bytes of it.
fn read_result(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(RESULT_FILE_CAP).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn task_markdown(task: &ExecTask<'_>) -> String {
    let mut md = format!(
        "# swarm task {}\n\n## Instruction\n\n{}\n\n## Files\n\n",
        task.task_id,
        task.instruction.trim()
    );
    for f in task.files {
        md.push_str(&format!("- {}\n", f.display()));
    }
    md.push_str(
        "\nEdit only these files, in the current directory (a git worktree). \
         swarm commits and merges your changes; you do not need to commit.\n",
    );
    if let Some(context) = task.context {
        md.push_str(&format!("\n## Context\n\n{}\n", context.trim()));
    }
    md
}
