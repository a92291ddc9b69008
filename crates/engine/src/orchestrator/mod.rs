//! The pipeline of one run: workers in parallel, the merge train overlapping them, then the
//! target moved once and everything cleaned up.
//!
//! One scheduler loop owns all run state (no locks around the report). Worker tasks run in a
//! `JoinSet` capped at `--jobs`; each acquires a pooled worktree, runs the worker, commits,
//! and returns. A finished task with changes goes straight to the merge thread, which owns the
//! `MergeTrain` (git2 handles are not `Sync`), so merging overlaps the workers still running.
//! Conflicts under `--on-conflict retry` are retried after the first wave, one at a time
//! (see docs/ARCHITECTURE.md). Whatever happens in the loop, `finish` runs: worktrees are
//! removed and merged branches deleted on every exit path.

use std::sync::Arc;
use std::time::Instant;

use git2::Oid;
use tokio_util::sync::CancellationToken;

use crate::events::{Event, EventSink};
use crate::gateway::{Binding, Gateway, GatewayOptions, Meter};
use crate::git::layers::LayersRoot;
use crate::git::repo::{IntoTarget, RepoInfo};
use crate::git::worktree::WorktreePool;
use crate::ids::{RunBranch, RunId, TaskId};
use crate::plan::Plan;
use crate::report::{Report, TaskStatus};
use crate::settings::{ApiKey, Settings};
use crate::state::{self, RunDir};
use crate::worker::llm::LlmShared;

mod blame;
mod error;
mod finish;
mod group;
pub(crate) use group::tasks_per_process;
mod head_start;
mod merge_drivers;
pub(crate) use merge_drivers::merge_tool;
mod merge_thread;
mod mode;
mod network;
mod permits;
mod records;
mod repair;
mod scheduler;
mod select;
mod task;
mod verify_merged;
mod views;
mod watch;
mod worker_run;

pub use error::RunError;
pub(crate) use mode::Continuation;
pub use mode::RunMode;
pub(crate) use records::new_report;
use records::{atomic_hold, close_report, open_run, spent_before};
use scheduler::Scheduler;
pub(crate) use views::views_unavailable;
use views::{git_views_work, use_views};
use watch::user_branches;

pub struct RunRequest {
    pub info: RepoInfo,
    pub plan: Plan,
    /// The plan's settings, resolved for this command (never stored).
    pub settings: Settings,
    pub into: IntoTarget,
    /// Where `into` stands for this run: its tip, or the base when swarm creates it. For a
    /// continued run whose target already holds its earlier merges, that result (the report
    /// keeps where the run first started).
    pub into_start: Oid,
    pub keep: bool,
    /// The model's key and the agent's credentials; never stored anywhere.
    pub secrets: Secrets,
    pub mode: RunMode,
    /// Where a continuing run (resume, merge) was left; `None`: a new run.
    pub continuation: Option<Continuation>,
}

/// What a run holds that is never stored: the model's key (the built-in worker, `--repair`)
/// and the credentials of the `--agent`'s APIs that its gateway swaps in. Read from the
/// environment once, where the request is made (`app`), and carried here.
#[derive(Default)]
pub struct Secrets {
    pub(crate) model_key: Option<ApiKey>,
    pub(crate) agent: Vec<Binding>,
}

/// Which worker edits the files.
pub(crate) enum WorkerKind {
    /// `--exec CMD`.
    Exec(String),
    /// The built-in agent ([`Shared::model`]).
    Llm,
}

pub struct RunOutcome {
    pub report: Report,
    pub interrupted: bool,
}

/// What every worker task shares.
struct Shared {
    plan: Plan,
    settings: Settings,
    base: Oid,
    run_dir: RunDir,
    pool: Arc<WorktreePool>,
    sink: Arc<EventSink>,
    cancel: CancellationToken,
    worker: WorkerKind,
    /// What the run's model calls share: the built-in worker's, or those of `--repair` and
    /// `--on-conflict repair` with an `--exec` worker.
    model: Option<Arc<LlmShared>>,
    common_dir: std::path::PathBuf,
    /// Local branches outside `swarm/` known so far; a new one appearing after a task means
    /// its worker created it. `None` when no worker can write the repository's refs (it is
    /// confined, and no writable path holds the git directory): listing the branches costs as
    /// much as there are task branches, after every task.
    known_branches: Option<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// Connections asked of the allow-list proxy, per task.
    network: Arc<network::NetworkLog>,
    layout: Layout,
    /// With `--sandbox off`: the user's checkout, to notice a worker writing there.
    checkout_watch: Option<watch::CheckoutWatch>,
    /// The run's spend, metered from the model APIs' answers, and its budgets.
    meter: Arc<Meter>,
    /// The model gateway of an `--agent`'s requests, for the APIs in `agent_bindings`.
    gateway: Option<Arc<Gateway>>,
    agent_bindings: Vec<Binding>,
    /// `--judge-model`: the model that compares a task's finalists.
    judge: Option<Arc<LlmShared>>,
    /// The other models of `--model a,b`, by name (`model` is the first's).
    models: std::collections::BTreeMap<String, Arc<LlmShared>>,
    /// The base's AGENTS.md for the built-in worker's turn 1, read once.
    base_notes: head_start::Notes,
    /// Full checkouts being made, reset or committed at once: one per core. More only share
    /// the cores, and at `-j 64` starve the runtime's threads (each task's model calls, its
    /// events). Overlay worktrees cost little, and their work overlaps as before.
    git_work: tokio::sync::Semaphore,
    /// Full checkouts lent at once: `--jobs`. A built-in worker gives its place back before
    /// its commit (`task::hold_while_committing`), and the next task's turn 1 goes out while
    /// its worktree waits for this one's.
    full_checkouts: Arc<tokio::sync::Semaphore>,
}

/// What a run's workers are given besides the plan: the model's key, where events go, the
/// run's cancellation, its meter.
struct Services {
    secrets: Secrets,
    sink: Arc<EventSink>,
    cancel: CancellationToken,
    meter: Arc<Meter>,
}

/// How the run's workers are laid out, decided once before the first one starts.
#[derive(Debug, Clone)]
struct Layout {
    /// Do first attempts (which start at the base) run in overlay worktrees?
    views: bool,
    /// Where the overlay worktrees keep their layers.
    layers: LayersRoot,
    /// The most tasks one worker process runs (`--per-process`).
    per_process: usize,
    /// Does a worker's own git get copy-on-write views of the repository (a confined
    /// `--exec` worker, where overlays can be mounted)?
    git_views: bool,
}

/// The machine's cores, at least 2.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

/// Can a worker process write the git directory `common_dir` (and so make a branch)?
fn workers_write_refs(
    sandbox: &crate::settings::SandboxPolicy,
    common_dir: &std::path::Path,
) -> bool {
    !sandbox.enabled || sandbox.writable.iter().any(|w| common_dir.starts_with(w))
}

pub(crate) fn result_branch(run_id: &RunId) -> String {
    run_id.branch(&RunBranch::Result)
}

/// Runs `req`. `cancel` stops the run (Ctrl-C: exit 130, resumable); every event goes to
/// `sink` (and to the run's events.jsonl).
pub(crate) async fn run(
    mut req: RunRequest,
    cancel: CancellationToken,
    sink: Arc<EventSink>,
) -> Result<RunOutcome, RunError> {
    let started = Instant::now();
    let run_dir = RunDir::new(&req.info.common_dir, &req.plan.run_id);
    // A continued run's lock, taken before its recovery; a new run takes it here.
    let held = req.continuation.as_mut().and_then(|c| c.lock.take());
    let lock = open_run(&run_dir, &req.plan, &sink, held)?;
    let views = use_views(&req, &sink).await;
    let git_views = views || git_views_work(&req).await;
    let (report, first_tip, merge_first) = match req.continuation.take() {
        None => (
            new_report(
                &req.plan,
                &req.into.branch,
                req.into_start,
                req.settings.candidates,
            ),
            req.into_start,
            Vec::new(),
        ),
        Some(continuation) => {
            for message in &continuation.recovered {
                warn_run(&sink, message.clone());
            }
            continuation.prepare(req.mode)
        }
    };
    let per_process = group::tasks_per_process(&req.settings, pending(&report));
    let layers = match views {
        true => views::layers_root(&req, per_process).await,
        false => LayersRoot::disk(&req.info.common_dir),
    };
    let layout = Layout {
        views,
        layers,
        per_process,
        git_views,
    };
    let report = announce(&req, &run_dir, &sink, report, &layout)?;
    let meter = Meter::new(&req.settings, spent_before(&report), Some(sink.clone()));
    let services = Services {
        secrets: std::mem::take(&mut req.secrets),
        sink,
        // A child token: an internal error stops the workers without looking like Ctrl-C.
        cancel: cancel.child_token(),
        meter,
    };
    let shared = Arc::new(Shared::new(
        req.plan,
        req.settings,
        &req.info,
        run_dir,
        services,
        layout,
    )?);
    let mut sched = Scheduler::new(shared.clone(), report, first_tip, req.mode);
    let driven = sched.drive(&req.info, first_tip, merge_first).await;
    let target = Target {
        info: &req.info,
        into: &req.into,
        into_start: req.into_start,
        keep: req.keep,
        mode: req.mode,
    };
    let concluded = conclude(&target, &shared, sched, driven, &cancel, started).await;
    drop(lock);
    // What the worktrees held goes in a process of its own, once the run's lock is let go: a
    // process started with the lock held has its file open until its `execve` closes it,
    // which the kernel may finish after `spawn` returns, and the next command on the run
    // (`--review`'s merge, a `swarm resume` right after) found the run busy.
    let common_dir = req.info.common_dir.clone();
    let _ = tokio::task::spawn_blocking(move || crate::state::empty_trash_later(&common_dir)).await;
    concluded
}

/// Where a run's result goes.
struct Target<'a> {
    info: &'a RepoInfo,
    into: &'a IntoTarget,
    into_start: Oid,
    keep: bool,
    mode: RunMode,
}

/// After the tasks: `--verify-merged`, `--atomic`, the target moved once, everything
/// cleaned up, the final report.
async fn conclude(
    req: &Target<'_>,
    shared: &Arc<Shared>,
    mut sched: Scheduler,
    mut driven: Result<(), RunError>,
    cancel: &CancellationToken,
    started: Instant,
) -> Result<RunOutcome, RunError> {
    let check = shared.settings.verify_merged.clone();
    if let (Ok(()), true, Some(command)) = (&driven, req.mode.merges(), check)
        && !cancel.is_cancelled()
        && sched.tip != req.into_start
    {
        driven = verify_merged::verify_merged(&mut sched, req.into_start, &command)
            .await
            .map_err(|e| RunError::classify("checking the merged result", e));
    }
    if let Err(e) = &driven {
        tracing::error!("run failed: {e:#}");
    }
    let interrupted = cancel.is_cancelled();
    let (tip, mut hold, mut report) = (sched.tip, sched.hold, sched.report);
    if shared.settings.atomic && hold.is_none() {
        hold = atomic_hold(&mut report);
    }
    let ending = finish::Ending {
        info: req.info,
        into: req.into,
        into_start: req.into_start,
        tip,
        keep: req.keep,
        stopped: interrupted || driven.is_err(),
        hold: hold.as_deref(),
    };
    // No worker process runs after this point.
    swarm_sandbox::wind_down();
    finish::finish(shared, &ending, &mut report).await;
    let report = close_report(shared, report, interrupted, started)
        .map_err(|e| RunError::classify("saving the run's report", e))?;
    driven?;
    Ok(RunOutcome {
        report,
        interrupted,
    })
}

/// A warning of the whole run.
fn warn_run(sink: &EventSink, message: String) {
    sink.emit(Event::Warning {
        task: None,
        message,
    });
}

/// The tasks of `report` still to run.
fn pending(report: &Report) -> usize {
    report
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Pending)
        .count()
}

/// Saves the report the run starts from and says the run started (and, without a git
/// identity, whose name its commits carry); gives the report.
fn announce(
    req: &RunRequest,
    run_dir: &RunDir,
    sink: &EventSink,
    mut report: Report,
    layout: &Layout,
) -> Result<Report, RunError> {
    let per_process = layout.per_process;
    report.worktrees = Some(if layout.views { "overlay" } else { "pool" }.to_string());
    report.layers = layout.views.then(|| {
        match layout.layers {
            LayersRoot::Disk(_) => crate::report::LAYERS_ON_DISK,
            LayersRoot::Memory(_) => crate::report::LAYERS_IN_MEMORY,
        }
        .to_string()
    });
    report.per_process = Some(per_process);
    report.compute_totals(0);
    state::write_json_atomic(&run_dir.report(), &report)
        .map_err(|e| RunError::classify("saving the run's report", e))?;
    sink.emit(Event::RunStarted {
        run_id: req.plan.run_id.clone(),
        base: req.plan.base.to_string(),
        into: req.into.branch.clone(),
        tasks: req.plan.tasks.len(),
        jobs: req.settings.jobs,
        worktrees: report.worktrees.clone().unwrap_or_default(),
        per_process,
    });
    if let Ok(repo) = git2::Repository::open(&req.info.common_dir)
        && crate::git::configured_signature(&repo).is_none()
    {
        warn_run(
            sink,
            format!(
                "no git identity (user.name, user.email): commits are made as {} <{}>; set \
                 them with git config, or GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL",
                crate::git::FALLBACK_NAME,
                crate::git::FALLBACK_EMAIL
            ),
        );
    }
    Ok(report)
}

/// The gateway of an `--agent`'s model requests, when swarm serves any of its APIs (it holds
/// a key for it, or the user named its endpoint); the APIs it serves.
fn agent_gateway(
    settings: &crate::settings::Settings,
    bindings: &[Binding],
    meter: &Arc<Meter>,
    sink: &Arc<EventSink>,
) -> anyhow::Result<Option<Arc<Gateway>>> {
    if settings.agent.is_none() || bindings.is_empty() {
        return Ok(None);
    }
    let options = GatewayOptions {
        jobs: settings.jobs,
        max_retries: settings.model.max_retries,
        connect_timeout: std::time::Duration::from_secs(settings.model.connect_timeout_secs),
        read_timeout: std::time::Duration::from_secs(settings.model.request_timeout_secs),
    };
    Ok(Some(Gateway::new(meter.clone(), sink.clone(), options)?))
}

impl Shared {
    /// A shell command of the run's own (`[worktree] setup`, `--verify`, `--verify-merged`)
    /// in worktree `cwd`, confined and timed like a worker, its output in `log`.
    fn shell<'a>(
        &'a self,
        command: &'a str,
        task: Option<&TaskId>,
        cwd: &'a std::path::Path,
        view: Option<&'a swarm_sandbox::overlay::OverlayView>,
        log: &'a std::path::Path,
    ) -> crate::worker::process::ProcessRequest<'a> {
        let on_access = Some(self.on_access(task));
        self.own_commands()
            .request(command, cwd, view, log, on_access)
    }

    /// The built-in worker's model of candidate `k` (`--model a,b`), else the run's.
    fn model_of(&self, k: Option<crate::ids::CandidateNo>) -> Option<Arc<LlmShared>> {
        match self.settings.rotation.model(k) {
            Some(name) if self.models.contains_key(name) => self.models.get(name).cloned(),
            _ => self.model.clone(),
        }
    }

    fn own_commands(&self) -> crate::worker::own::OwnCommands<'_> {
        self.own_commands_until(&self.cancel)
    }

    /// The run's own commands, stopped by `cancel` (a candidate's, under the run's).
    fn own_commands_until<'a>(
        &'a self,
        cancel: &'a CancellationToken,
    ) -> crate::worker::own::OwnCommands<'a> {
        crate::worker::own::OwnCommands {
            settings: &self.settings,
            cancel,
        }
    }

    /// Reports what processes of `task` ask of the allow-list proxy.
    fn on_access(&self, task: Option<&TaskId>) -> swarm_sandbox::proxy::OnAccess {
        network::on_access(&self.network, &self.sink, task)
    }

    fn new(
        plan: Plan,
        settings: Settings,
        info: &RepoInfo,
        run_dir: RunDir,
        services: Services,
        layout: Layout,
    ) -> Result<Self, RunError> {
        let Services {
            secrets,
            sink,
            cancel,
            meter,
        } = services;
        let mut settings = settings;
        state::hide_from_workers(&mut settings.sandbox, &info.common_dir);
        settings
            .sandbox
            .hide
            .extend(layout.layers.hidden().map(Into::into));
        let base = plan.base;
        // The model serves the built-in worker, and with --exec, --repair and conflict repair.
        let client = |name: &String| {
            let key = secrets.model_key.clone();
            LlmShared::new(&settings, name.clone(), key, meter.clone())
                .map(Arc::new)
                .map_err(|e| RunError::classify("starting the model client", e))
        };
        let model = match (&settings.model.name, settings.uses_model()) {
            (Some(name), true) => Some(client(name)?),
            _ => None,
        };
        // `--model a,b`: a client for each of the others, candidates taking them in turn.
        let mut models = std::collections::BTreeMap::new();
        for name in settings.rotation.models.iter().skip(1) {
            models.insert(name.clone(), client(name)?);
        }
        let judge = settings.judge_model.as_ref().map(client).transpose()?;
        let agent_bindings = secrets.agent;
        let gateway =
            agent_gateway(&settings, &agent_bindings, &meter, &sink).map_err(RunError::Sandbox)?;
        let worker = match (&settings.exec, &model) {
            (Some(command), _) => WorkerKind::Exec(command.clone()),
            (None, Some(_)) => WorkerKind::Llm,
            (None, None) => {
                return Err(RunError::Other(anyhow::anyhow!(
                    "the plan has neither an --exec command nor a --model"
                )));
            }
        };
        let checkout_watch = match settings.sandbox.enabled {
            true => None,
            false => Some(watch::CheckoutWatch::new(&info.workdir).map_err(RunError::Worktree)?),
        };
        let pool = worktree_pool(&settings, info, &plan.run_id, &layout);
        Ok(Self {
            known_branches: match workers_write_refs(&settings.sandbox, &info.common_dir) {
                true => Some(std::sync::Mutex::new(
                    user_branches(&info.common_dir)
                        .map_err(|e| RunError::classify("listing the branches", e))?,
                )),
                false => None,
            },
            network: Default::default(),
            base_notes: Default::default(),
            full_checkouts: Arc::new(tokio::sync::Semaphore::new(settings.jobs)),
            git_work: tokio::sync::Semaphore::new(cores()),
            plan,
            settings,
            base,
            run_dir,
            pool,
            sink,
            cancel,
            worker,
            model,
            common_dir: info.common_dir.clone(),
            layout,
            checkout_watch,
            meter,
            gateway,
            agent_bindings,
            judge,
            models,
        })
    }
}

/// The run's worktrees, made as `settings` and `layout` say.
fn worktree_pool(
    settings: &Settings,
    info: &RepoInfo,
    run_id: &RunId,
    layout: &Layout,
) -> Arc<WorktreePool> {
    let pool = WorktreePool::new(
        &info.common_dir,
        run_id,
        settings.worktree.copy.clone(),
        &info.workdir,
    );
    Arc::new(
        pool.reusing_base(settings.worktree.reuse_base)
            .with_layers(layout.layers.clone()),
    )
}

/// A coarse step of a running task, for the live view.
fn step(shared: &Shared, task: &TaskId, step: &str) {
    shared.sink.emit(Event::TaskStep {
        task: task.clone(),
        step: step.to_string(),
    });
}

fn warn(shared: &Shared, task: &TaskId, message: String) {
    shared.sink.emit(Event::Warning {
        task: Some(task.clone()),
        message,
    });
}
