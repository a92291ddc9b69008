//! The tools. Each answers JSON text; a refusal or a failure is an error result the model
//! reads (`isError`), never a protocol error it cannot see.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, RequestMetaObject,
    ServerCapabilities, ServerConfig,
};
use rmcp::{Peer, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use swarm_engine::app::ids::RunSelector;
use swarm_engine::app::prepare::{self, PrepareRequest, Prepared, Purpose, SplitMode};
use swarm_engine::app::{self, diff, runs};

use crate::detached::{Continuing, Detached};
use crate::launch::{self, Started};
use crate::limits::{Limits, overrides};
use crate::params::{Continue, Diff, RunRef, Status, Work};
use crate::summary;

/// The longest a call waits for a run (`wait_seconds`).
const MAX_WAIT: Duration = Duration::from_secs(600);

/// The server of one repository.
#[derive(Clone)]
pub(crate) struct Swarm {
    repo: PathBuf,
    limits: Limits,
    tool_router: ToolRouter<Self>,
}

fn answer(value: &Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(summary::text(value))])
}

fn refused(why: impl std::fmt::Display) -> CallToolResult {
    let text = swarm_engine::app::redact(&why.to_string());
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// An engine error as the model reads it: the message, and what to do, in the words the
/// command line prints (`error: …`, `hint: …`).
fn failed(e: app::AppError) -> CallToolResult {
    refused(said(&e))
}

fn said(e: &app::AppError) -> String {
    match e.hint() {
        Some(hint) => format!("error: {}\nhint: {hint}", e.message()),
        None => format!("error: {}", e.message()),
    }
}

#[tool_router]
impl Swarm {
    pub(crate) fn new(repo: PathBuf, limits: Limits) -> Self {
        Self {
            repo,
            limits,
            tool_router: Self::tool_router(),
        }
    }

    /// What a refactor would do, nothing run: its tasks and files, the commands it runs.
    #[tool(
        description = "Plan a refactor without running it: which tasks (files) it makes \
        and which commands would run. Takes the arguments of `refactor`."
    )]
    async fn plan(&self, Parameters(work): Parameters<Work>) -> CallToolResult {
        if work.dry_run.is_some() || work.wait_seconds.is_some() {
            return refused("dry_run and wait_seconds are refactor's: a plan runs nothing");
        }
        match self.planned(&work).await {
            Ok(Planned::Ready(ready, said)) => {
                let mut value = summary::plan(&ready.plan, &said);
                value["hints"] = json!(ready.hints);
                answer(&value)
            }
            Ok(Planned::Nothing(why)) => answer(&json!({"tasks": 0, "said": why})),
            Err(refusal) => refusal,
        }
    }

    /// Starts a refactor and answers with its run id at once (or its result, if it ends
    /// within `wait_seconds`).
    #[tool(
        description = "Start a refactor: split the change into per-file tasks, run a worker \
        per task in its own git worktree in parallel (`exec`: a command such as sed or a \
        codemod, with SWARM_FILE set), and merge every finished task back with --no-ff. \
        Returns the run id at once; the run goes on in the repository even if this call or \
        this server ends. With wait_seconds, waits (with progress) and returns the result."
    )]
    async fn refactor(
        &self,
        Parameters(work): Parameters<Work>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let ready = match self.planned(&work).await {
            Ok(Planned::Ready(ready, _)) => ready,
            Ok(Planned::Nothing(why)) => return answer(&json!({"started": false, "said": why})),
            Err(refusal) => return refusal,
        };
        let server = Box::new(self.limits.server.clone());
        let dry_run = work.dry_run == Some(true);
        let what = move |plan: PathBuf| -> Result<Detached, String> {
            ready.write_plan(&plan).map_err(|e| said(&e))?;
            Ok(Detached::Start {
                plan,
                server,
                dry_run,
            })
        };
        self.start(what, work.wait_seconds, meta, peer).await
    }

    /// One run's state and tasks, or every run of the repository.
    #[tool(
        description = "The state of a run (counts, spend, each task's status and why a \
        task failed), or, without run_id, the list of runs of this repository."
    )]
    async fn status(&self, Parameters(status): Parameters<Status>) -> CallToolResult {
        let Some(run) = status.run_id else {
            return match runs::list(&self.repo) {
                Ok(list) => answer(&json!(list.iter().map(listed).collect::<Vec<_>>())),
                Err(e) => failed(e),
            };
        };
        let selector = match selector(&run) {
            Ok(selector) => selector,
            Err(refusal) => return refusal,
        };
        let mut value = match runs::show(&self.repo, &selector) {
            Ok(report) => summary::status(&report),
            Err(e) => return failed(e),
        };
        if let Some(after) = status.events_after {
            match runs::events(&self.repo, &selector, after, 100) {
                Ok((events, next)) => {
                    let events: Vec<Value> = events
                        .iter()
                        .filter_map(|line| serde_json::from_str(line).ok())
                        .collect();
                    value["events"] = json!(events);
                    value["next_event"] = next.into();
                }
                Err(e) => return failed(e),
            }
        }
        answer(&value)
    }

    /// The compact outcome of a run, for the parent's context.
    #[tool(
        description = "The outcome of a run in a few kilobytes: what merged and where the \
        result is, the diffstat, each failure with the tail of its output, and the next \
        step. Use diff for the change itself."
    )]
    async fn result(&self, Parameters(run): Parameters<RunRef>) -> CallToolResult {
        match self.outcome(&run.run_id) {
            Ok(value) => answer(&value),
            Err(e) => failed(e),
        }
    }

    /// A page of a run's or a task's unified diff.
    #[tool(
        description = "The unified diff of a run (what it merged), or of one task, a page \
        at a time: pass the answer's next_offset as offset for the next page."
    )]
    async fn diff(&self, Parameters(want): Parameters<Diff>) -> CallToolResult {
        let run = match selector(&want.run_id) {
            Ok(selector) => selector,
            Err(refusal) => return refusal,
        };
        let shown = diff::of_run(&self.repo, &run, want.task.as_deref(), None);
        let text = match shown {
            Ok(diff::Shown::Nothing(why)) => why,
            Ok(diff::Shown::Changes(changes)) => String::from_utf8_lossy(&changes.patch).into(),
            Ok(diff::Shown::Tasks(tasks)) => tasks
                .iter()
                .map(|(title, c)| format!("# {title}\n{}", String::from_utf8_lossy(&c.patch)))
                .collect(),
            Err(e) => return failed(e),
        };
        let text = swarm_engine::app::redact(&text);
        let chars: Vec<char> = text.chars().collect();
        let offset = want.offset.unwrap_or(0).min(chars.len());
        let limit = want.limit.unwrap_or(8000).clamp(1, 20_000);
        let end = (offset + limit).min(chars.len());
        answer(&json!({
            "text": chars[offset..end].iter().collect::<String>(),
            "offset": offset,
            "next_offset": (end < chars.len()).then_some(end),
            "total_chars": chars.len(),
        }))
    }

    /// Finishes an interrupted run.
    #[tool(
        description = "Finish a stopped or interrupted run (tasks that had not finished run \
        again, finished ones merge; with failed: true, failed tasks run again too, with scope \
        or ok_exit_codes corrected where their failures name --scope or --ok-exit-codes)."
    )]
    async fn resume(
        &self,
        Parameters(what): Parameters<Continue>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let how = match what.failed {
            Some(true) => Continuing::ResumeFailed,
            _ => Continuing::Resume,
        };
        if let Err(why) = self.limits.check_jobs(what.jobs) {
            return refused(why);
        }
        let overrides = match overrides(&what) {
            Ok(overrides) => overrides,
            Err(why) => return refused(why),
        };
        let run = what.run_id;
        let start = move |_: PathBuf| {
            Ok(Detached::Continue {
                run,
                how,
                overrides,
            })
        };
        self.start(start, what.wait_seconds, meta, peer).await
    }

    /// Merges a dry run's finished tasks.
    #[tool(
        description = "Merge the finished, unmerged tasks of a run (after dry_run) into its \
        target with the same --no-ff merge train."
    )]
    async fn merge(
        &self,
        Parameters(what): Parameters<Continue>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        if what.jobs.is_some() {
            return refused("jobs: merge runs no worker (jobs is for resume)");
        }
        if what.scope.is_some() || what.ok_exit_codes.is_some() {
            return refused("scope, ok_exit_codes: merge runs no worker (they are for resume)");
        }
        let run = what.run_id;
        let how = Continuing::Merge;
        let start = move |_: PathBuf| {
            Ok(Detached::Continue {
                run,
                how,
                overrides: Default::default(),
            })
        };
        self.start(start, what.wait_seconds, meta, peer).await
    }

    /// Stops a running run, as Ctrl-C does: resumable.
    #[tool(
        description = "Stop a running run as Ctrl-C would: workers stop, what finished is \
        kept, and resume finishes it later."
    )]
    async fn cancel(&self, Parameters(run): Parameters<RunRef>) -> CallToolResult {
        let owner = match selector(&run.run_id) {
            Ok(selector) => runs::owner(&self.repo, &selector),
            Err(refusal) => return refusal,
        };
        match owner {
            Ok(Some((id, pid))) => match interrupt(pid) {
                Ok(()) => answer(&json!({"run_id": id.as_str(), "stopping": true,
                    "next": "call status until it is interrupted; resume finishes it"})),
                Err(e) => refused(format!("cannot stop run {id} (pid {pid}): {e}")),
            },
            Ok(None) => refused(format!("run {} is not running", run.run_id)),
            Err(e) => failed(e),
        }
    }

    /// Removes a run's worktrees, branches and records.
    #[tool(
        description = "Remove a run's worktrees, task branches and records (not its merged \
        result). Refused while the run is running."
    )]
    async fn clean(&self, Parameters(run): Parameters<RunRef>) -> CallToolResult {
        let target = match selector(&run.run_id) {
            Ok(selector) => runs::CleanTarget::One(selector),
            Err(refusal) => return refusal,
        };
        match runs::clean(&self.repo, target) {
            Ok(cleaned) => answer(&json!({
                "worktrees": cleaned.worktrees,
                "branches": cleaned.branches,
                "records": cleaned.records,
            })),
            Err(e) => failed(e),
        }
    }
}

impl Swarm {
    /// The workers at a time a run of this repository gets when the call does not say.
    fn default_jobs(&self) -> Result<usize, String> {
        app::default_jobs(&self.repo).map_err(|e| said(&e))
    }

    /// The refactor `work` asks for, planned here (nothing is run or written): its plan, and
    /// the settings that were ignored.
    async fn planned(&self, work: &Work) -> Result<Planned, CallToolResult> {
        let call = self
            .limits
            .call_layer(work, || self.default_jobs())
            .map_err(refused)?;
        // No pathspec is every tracked file (the tool's documented default), which swarm
        // wants said with `.`.
        let mut pathspecs = work.pathspecs.clone();
        if pathspecs.is_empty() {
            pathspecs.push(".".into());
        }
        let request = PrepareRequest {
            cwd: self.repo.clone(),
            instruction: work.instruction.clone(),
            pathspecs,
            grep: work.grep.clone(),
            split: SplitMode::File,
            planner_model: None,
            base: "HEAD".into(),
            into: work.into.clone(),
            settings: self.limits.server.clone(),
            call: Some(call),
            purpose: Purpose::PlanFile,
        };
        // Planning holds git's objects across its waits: it runs on a thread of its own.
        let handle = tokio::runtime::Handle::current();
        let (prepared, said) = tokio::task::spawn_blocking(move || {
            let said = std::sync::Mutex::new(Vec::new());
            let warn = |w: &str| {
                said.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(w.into())
            };
            let prepared = handle.block_on(prepare::prepare(request, &warn, &|_| {}));
            (
                prepared,
                said.into_inner().unwrap_or_else(|e| e.into_inner()),
            )
        })
        .await
        .map_err(|e| refused(format!("planning stopped: {e}")))?;
        match prepared {
            Ok(Prepared::Ready(ready)) => Ok(Planned::Ready(ready, said)),
            Ok(Prepared::Nothing(why)) => Ok(Planned::Nothing(why)),
            Ok(Prepared::NoFiles(why)) => Err(refused(format!(
                "error: {why}\nhint: check the pathspecs (relative to the repository; `git \
                 ls-files` lists what they match) and grep"
            ))),
            Err(e) => Err(failed(e)),
        }
    }

    /// Starts a run as a process of its own, `what` it does made from the path of its plan
    /// file (for a plan to write there); answers with the run id, or with its result if it
    /// ends within `wait` seconds.
    async fn start(
        &self,
        what: impl FnOnce(PathBuf) -> Result<Detached, String>,
        wait: Option<u64>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let info = match app::discover(&self.repo) {
            Ok(info) => info,
            Err(e) => return failed(e),
        };
        let started = launch::launch(&self.repo, &info.common_dir, what).await;
        let run = match started {
            Ok(Started::Run(run)) => run,
            Ok(Started::Ended {
                success: true,
                said,
            }) => {
                return answer(&json!({"started": false, "said": summary::cut(&said, 4000)}));
            }
            Ok(Started::Ended {
                success: false,
                said,
            }) => {
                return refused(summary::cut(&said, 4000));
            }
            Err(launch::Failed::Refused(why)) => return refused(why),
            Err(launch::Failed::Internal(e)) => return refused(format!("{e:#}")),
        };
        let wait = Duration::from_secs(wait.unwrap_or(0)).min(MAX_WAIT);
        self.wait(&run, wait, meta, peer).await
    }

    /// Waits up to `wait` for run `run` to end, notifying progress; its result if it ended,
    /// else where it stands.
    async fn wait(
        &self,
        run: &str,
        wait: Duration,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let Ok(selector) = run.parse::<RunSelector>() else {
            return refused(format!("{run} is not a run id"));
        };
        let started = Instant::now();
        let token = meta.get_progress_token();
        let mut said = String::new();
        loop {
            let report = match runs::show(&self.repo, &selector) {
                Ok(report) => report,
                Err(e) => return failed(e),
            };
            let ended = report.state != app::report::RunState::Running;
            if ended || started.elapsed() >= wait {
                return match ended {
                    true => self.outcome(run).map_or_else(failed, |v| answer(&v)),
                    false => answer(&json!({
                        "run_id": run,
                        "state": "running",
                        "progress": summary::progress(&report).2,
                        "next": "the run goes on by itself: call status or result later",
                    })),
                };
            }
            let (settled, total, words) = summary::progress(&report);
            if let Some(token) = &token
                && words != said
            {
                let note = ProgressNotificationParam::new(token.clone(), settled as f64)
                    .with_total(total as f64)
                    .with_message(words.clone());
                let _ = peer.notify_progress(note).await;
                said = words;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The `result` of run `run`: its report, summed up, with the diffstat of what merged.
    fn outcome(&self, run: &str) -> Result<Value, app::AppError> {
        let selector: RunSelector = run.parse().map_err(app::AppError::Id)?;
        let report = runs::show(&self.repo, &selector)?;
        let stat = match report.result {
            Some(_) => match diff::of_run(&self.repo, &selector, None, None)? {
                diff::Shown::Changes(changes) => Some(changes.stat),
                _ => None,
            },
            None => None,
        };
        let mut value = summary::result(&report, stat.as_deref());
        // The whole run, to open in a browser: `swarm report`'s page in the run's directory.
        match app::page::write(&self.repo, &selector, None) {
            Ok(written) => value["page"] = written.path.display().to_string().into(),
            Err(e) => value["page_error"] = said(&e).into(),
        }
        Ok(value)
    }
}

/// A refactor planned in the server.
enum Planned {
    /// Its plan, and the settings that were ignored (in words).
    Ready(Box<prepare::Ready>, Vec<String>),
    /// Nothing to do, and why.
    Nothing(String),
}

/// A run id (or a prefix of one) from a call; a refusal for anything else.
fn selector(run: &str) -> Result<RunSelector, CallToolResult> {
    run.parse()
        .map_err(|e| refused(format!("run_id {run:?}: {e}")))
}

/// One run of the list.
fn listed(run: &runs::Listed) -> Value {
    match &run.report {
        Some(report) => json!({
            "run_id": run.id.as_str(),
            "state": summary::status(report)["state"],
            "instruction": report.instruction,
            "into": report.into,
            "summary": report.totals.describe().join(", "),
        }),
        None => json!({"run_id": run.id.as_str(), "state": "unreadable"}),
    }
}

/// SIGINT to the process running a run: it stops as after Ctrl-C.
fn interrupt(pid: u32) -> std::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| std::io::Error::other("no such process"))?;
    rustix::process::kill_process(pid, rustix::process::Signal::INT).map_err(Into::into)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Swarm {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("swarm", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "swarm applies one change across many files of this git repository: plan shows the \
             tasks, refactor starts a run (workers in parallel, each in its own worktree, \
             merged back with --no-ff) and returns its run id; result gives the outcome, diff \
             the change. Runs belong to the repository and go on without this connection.",
            )
    }
}
