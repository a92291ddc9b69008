//! Run settings, resolved in one place with one order:
//! flags > `SWARM_*` environment > other environment (`OPENAI_BASE_URL`) > `swarm.toml` at the
//! repository root > the user's config file > defaults.
//!
//! Each source is a [`Layer`] (clap gives flags precedence over their `SWARM_*` variables
//! while building the command line's layer); layers are combined by one trait,
//! [`layer::Combine`], and resolved once by [`Settings::from_layer`], where defaults are
//! filled in and values checked.
//!
//! The repository's `swarm.toml` cannot weaken the sandbox nor send the API key elsewhere:
//! `sandbox::restrict` drops what it may not set (as from a plan file), with a warning
//! ([`Resolved::warnings`]).

use std::path::Path;
use std::time::Duration;

pub(crate) mod agents;
mod error;
pub(crate) mod home;
pub(crate) mod layer;
mod limits;
pub(crate) mod policy;
mod rotation;
mod sandbox;

pub use error::{CandidatesProblem, Count, SettingsError};
pub(crate) use layer::Combine;
pub use layer::Layer;
pub(crate) use policy::{ApiKey, ModelSettings, RunToolPolicy, WorktreeSettings};
pub use policy::{Candidates, MergeWith, OnConflict, PerProcess, SandboxMode, Scope, WorktreeMode};
pub(crate) use rotation::Rotation;
use sandbox::Untrusted;
pub(crate) use swarm_sandbox::allow_list::AllowList;
pub(crate) use swarm_sandbox::policy::{NetworkAccess, SandboxPolicy};

/// Fully resolved settings of one run: what the engine runs by. Never stored: a plan
/// records the [`Layer`] they came from, and every command resolves it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub jobs: usize,
    pub timeout_secs: u64,
    pub on_conflict: OnConflict,
    pub scope: Scope,
    pub batch: usize,
    /// How many tasks one worker process runs at most (`--per-process`).
    pub per_process: PerProcess,
    pub exec: Option<String>,
    pub worktree: WorktreeSettings,
    pub model: ModelSettings,
    /// Model round-trips per task (LLM worker).
    pub max_turns: u32,
    /// Token budget of the whole run: no new task starts past it.
    pub max_tokens: Option<u64>,
    /// Spending cap of the whole run in US dollars: no new task starts past it.
    pub max_cost: Option<serde_json::Number>,
    /// Check run in a task's worktree after its worker; a failing task is not merged.
    pub verify: Option<String>,
    /// Check run on the merged result; the tasks that break it are found and left out.
    pub verify_merged: Option<String>,
    /// Hand a task whose `--verify` fails after its `--exec` worker to the model.
    pub repair: bool,
    /// Move the target only if every task merged or needed no change.
    pub atomic: bool,
    /// A worker process with no output and no file change this long is killed.
    pub idle_timeout_secs: u64,
    /// Exit statuses of the worker's command that mean it succeeded (`--ok-exit-codes`).
    pub ok_exit_codes: Vec<i32>,
    pub sandbox: SandboxPolicy,
    /// What the built-in worker's `run` tool may run.
    pub run_tool: RunToolPolicy,
    /// `--agent`: the coding agent that `exec` runs, and what it may reach besides the
    /// sandbox of other processes.
    pub agent: Option<agents::AgentSettings>,
    /// Candidates per task (`--tries`, `--best-of`).
    pub candidates: Candidates,
    /// The model that compares the finalists of `--best-of` (`--judge-model`).
    pub judge_model: Option<String>,
    /// The workers candidates take in turn (`--agent a,b`, `--model a,b`): `agent` and
    /// `model.name` are the first.
    pub rotation: Rotation,
    /// `--merge-with`: the structured merge tool of what git's line merge leaves in conflict.
    pub merge_with: Option<MergeWith>,
    /// Seconds one merge driver may run (`[merge] timeout`).
    pub merge_timeout_secs: u64,
}

/// Resolved settings, the layer they came from, and what the CLI should warn about.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub settings: Settings,
    /// Every source combined (what a new plan records).
    pub layer: Layer,
    /// Settings that were asked for where they may not be set (the repository's
    /// `swarm.toml` weakening the sandbox), and were ignored.
    pub warnings: Vec<String>,
}

/// Where a plan's settings come from, which says how far they are trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanSource {
    /// The run's own record (`.git/swarm/runs/<RUN-ID>/plan.json`), written by swarm here.
    Own,
    /// A plan file (`swarm run PLAN.json`, `swarm merge PLAN.json`): anyone's text, held to
    /// the rule of the repository's `swarm.toml`.
    File,
    /// The arguments of a tool call to `swarm mcp`: a model's, held to the same rule.
    ToolCall,
}

/// Only 0 means success, as for any program.
fn success_only() -> Vec<i32> {
    vec![0]
}

/// `Err` for a status of `--ok-exit-codes` that no process can exit with.
pub fn check_ok_exit_codes(codes: &[i32]) -> Result<(), SettingsError> {
    match codes.iter().find(|c| !(0..=255).contains(*c)) {
        Some(&bad) => Err(SettingsError::ExitCode(bad)),
        None => Ok(()),
    }
}

/// `Err` for a command that is empty or blank: run, it would do nothing and pass (a worker
/// that changes nothing, a check that passes every task).
fn check_commands(
    run: &layer::RunTable,
    setup: Option<&str>,
    rotation: &Rotation,
) -> Result<(), SettingsError> {
    let agents = rotation
        .agents
        .iter()
        .map(|a| (format!("[agents.{}] exec", a.name), Some(a.exec.as_str())));
    let named = [
        ("--exec / [run] exec", run.exec.as_deref()),
        ("--verify / [run] verify", run.verify.as_deref()),
        (
            "--verify-merged / [run] verify_merged",
            run.verify_merged.as_deref(),
        ),
        ("[worktree] setup", setup),
    ];
    let blank = agents
        .chain(named.map(|(what, command)| (what.to_string(), command)))
        .find(|(_, command)| command.is_some_and(|c| c.trim().is_empty()));
    match blank {
        Some((what, _)) => Err(SettingsError::EmptyCommand(what)),
        None => Ok(()),
    }
}

impl Settings {
    pub const DEFAULT_JOBS: usize = 4;
    pub const DEFAULT_TIMEOUT_SECS: u64 = 600;
    pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 300;
    pub const DEFAULT_MAX_TURNS: u32 = 50;
    pub const DEFAULT_MERGE_TIMEOUT_SECS: u64 = 60;

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }

    /// How long one merge driver may run.
    pub fn merge_timeout(&self) -> Duration {
        Duration::from_secs(self.merge_timeout_secs)
    }

    /// Does the run call a model: the built-in worker (no `--exec`), `--repair`, or
    /// `--on-conflict repair`?
    pub fn uses_model(&self) -> bool {
        self.exec.is_none() || self.repair || self.on_conflict == OnConflict::Repair
    }

    /// What a run with these settings runs, by role: its worker, `[worktree] setup`, its
    /// checks, the built-in agent and the commands it may run. What `swarm run PLAN.json`
    /// shows before it runs a plan file's.
    pub fn commands(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        match (&self.agent, &self.exec) {
            (Some(_), _) => {
                for agent in &self.rotation.agents {
                    out.push(("agent", format!("{}: {}", agent.name, agent.exec)));
                }
            }
            (None, Some(exec)) => out.push(("exec", exec.clone())),
            (None, None) => {}
        }
        if self.uses_model() {
            let model = self.model.name.as_deref().unwrap_or("(no --model)");
            let role = match self.exec {
                None => "model",
                Some(_) => "repair",
            };
            out.push((role, format!("the built-in agent, model {model}")));
        }
        if self.uses_model() && self.run_tool.enabled() {
            out.push((
                "run",
                match self.run_tool.allow_all {
                    true => "any command the model asks for (--allow-run)".to_string(),
                    false => self.run_tool.patterns.join(", "),
                },
            ));
        }
        if let Some(judge) = &self.judge_model {
            out.push(("judge", format!("model {judge} compares tied candidates")));
        }
        for (role, command) in [
            ("setup", &self.worktree.setup),
            ("verify", &self.verify),
            ("verify-merged", &self.verify_merged),
        ] {
            if let Some(command) = command {
                out.push((role, command.clone()));
            }
        }
        out
    }

    /// Resolves, once, the command line's layer over a plan's (`plan`: trusted as its
    /// source says), the environment, the repository's `swarm.toml` (in `repo_root`,
    /// restricted) and the user's config file.
    pub(crate) fn resolve(
        command_line: Layer,
        plan: Option<(Layer, PlanSource)>,
        repo_root: &Path,
    ) -> Result<Resolved, SettingsError> {
        let mut warnings = Vec::new();
        let layer = layers(command_line, plan, repo_root, &mut warnings)?;
        Ok(Resolved {
            settings: Self::from_layer(layer.clone())?,
            layer,
            warnings,
        })
    }

    /// Fills in the defaults of combined layers, and checks the values.
    pub fn from_layer(layer: Layer) -> Result<Settings, SettingsError> {
        let sandbox = sandbox::policy(&layer)?;
        let rotation = Rotation::of(&layer, |name, model| agent(name, &layer, model))?;
        let agent = rotation.agents.first().cloned();
        let (mut run, mut model) = (layer.run, layer.model);
        if let Some(first) = rotation.models.first() {
            model.name = Some(first.clone());
        }
        if let Some(agent) = &agent {
            run.exec = Some(agent.exec.clone());
        }
        check_commands(&run, layer.worktree.setup.as_deref(), &rotation)?;
        let counts = Counts::of(&run)?;
        let merge_timeout_secs = match layer.merge.timeout {
            Some(0) => return Err(SettingsError::Zero(Count::MergeTimeout)),
            Some(secs) => secs,
            None => Settings::DEFAULT_MERGE_TIMEOUT_SECS,
        };
        rotation.check(counts.candidates)?;
        check_model(&model)?;
        if run
            .max_cost
            .as_ref()
            .is_some_and(|c| c.as_f64().is_none_or(|c| c <= 0.0))
        {
            return Err(SettingsError::Zero(Count::MaxCost));
        }
        let ok_exit_codes = run.ok_exit_codes.unwrap_or_else(success_only);
        check_ok_exit_codes(&ok_exit_codes)?;
        let worktree = WorktreeSettings {
            copy: layer.worktree.copy.unwrap_or_default(),
            setup: layer.worktree.setup,
            mode: layer.worktree.mode.unwrap_or_default(),
            reuse_base: layer.worktree.reuse_base.unwrap_or(false),
        };
        for file in &worktree.copy {
            crate::repo_path::RepoPath::from(file.as_str())
                .check()
                .map_err(SettingsError::CopyPath)?;
        }
        Ok(Settings {
            jobs: counts.jobs,
            timeout_secs: counts.timeout_secs,
            on_conflict: run.on_conflict.unwrap_or(OnConflict::Retry),
            scope: run.scope.unwrap_or(Scope::Task),
            batch: counts.batch,
            per_process: counts.per_process,
            exec: run.exec,
            worktree,
            model: model_settings(model),
            max_turns: counts.max_turns,
            max_tokens: run.max_tokens,
            max_cost: run.max_cost,
            verify: run.verify,
            verify_merged: run.verify_merged,
            repair: run.repair.unwrap_or(false),
            atomic: run.atomic.unwrap_or(false),
            idle_timeout_secs: counts.idle_timeout_secs,
            ok_exit_codes,
            sandbox,
            run_tool: RunToolPolicy {
                allow_all: layer.sandbox.allow_any_run.unwrap_or(false),
                patterns: layer.sandbox.allow_run.unwrap_or_default(),
            },
            agent,
            candidates: counts.candidates,
            judge_model: run.judge_model,
            rotation,
            merge_with: layer.merge.with,
            merge_timeout_secs,
        })
    }
}

/// `--agent NAME` (with its `model`), resolved among the built-in presets and the layer's
/// `[agents]`.
fn agent(
    name: &str,
    layer: &Layer,
    model: Option<String>,
) -> Result<agents::AgentSettings, SettingsError> {
    agents::resolve(name, &layer.agents, model).map_err(|problem| match problem {
        agents::AgentProblem::Unknown => SettingsError::UnknownAgent {
            name: name.to_string(),
            known: agents::names(&layer.agents).join(", "),
        },
        agents::AgentProblem::UnknownApi(api) => SettingsError::UnknownApi {
            name: name.to_string(),
            api,
            known: agents::APIS
                .iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
                .join(", "),
        },
    })
}

/// The counts of `[run]`, with their defaults; each at least 1.
struct Counts {
    jobs: usize,
    batch: usize,
    per_process: PerProcess,
    timeout_secs: u64,
    max_turns: u32,
    idle_timeout_secs: u64,
    candidates: Candidates,
}

impl Counts {
    fn of(run: &layer::RunTable) -> Result<Self, SettingsError> {
        let at_least_one = |value, count| match value {
            0 => Err(SettingsError::Zero(count)),
            _ => Ok(value),
        };
        let jobs = at_least_one(
            run.jobs.unwrap_or(Settings::DEFAULT_JOBS) as u64,
            Count::Jobs,
        )?;
        let batch = at_least_one(run.batch.unwrap_or(1) as u64, Count::Batch)?;
        let per_process = run.per_process.unwrap_or_default();
        if per_process == PerProcess::Tasks(0) {
            return Err(SettingsError::Zero(Count::PerProcess));
        }
        let candidates = candidates(run, per_process)?;
        if run.max_tokens == Some(0) {
            return Err(SettingsError::Zero(Count::MaxTokens));
        }
        Ok(Self {
            candidates,
            jobs: jobs as usize,
            batch: batch as usize,
            per_process,
            timeout_secs: at_least_one(
                run.timeout.unwrap_or(Settings::DEFAULT_TIMEOUT_SECS),
                Count::Timeout,
            )?,
            max_turns: at_least_one(
                u64::from(run.max_turns.unwrap_or(Settings::DEFAULT_MAX_TURNS)),
                Count::MaxTurns,
            )? as u32,
            idle_timeout_secs: at_least_one(
                run.idle_timeout
                    .unwrap_or(Settings::DEFAULT_IDLE_TIMEOUT_SECS),
                Count::IdleTimeout,
            )?,
        })
    }
}

/// `--tries` or `--best-of`, each at least 1 and at most [`Candidates::MAX`], never with
/// several tasks per process; `--judge-model` only with `--best-of` 2 or more.
fn candidates(run: &layer::RunTable, per_process: PerProcess) -> Result<Candidates, SettingsError> {
    let problem = |p| Err(SettingsError::Candidates(p));
    let candidates = match (run.tries, run.best_of) {
        (Some(_), Some(_)) => return problem(CandidatesProblem::Both),
        (Some(0), None) => return Err(SettingsError::Zero(Count::Tries)),
        (None, Some(0)) => return Err(SettingsError::Zero(Count::BestOf)),
        (Some(n), None) => Candidates::Tries(n),
        (None, Some(n)) => Candidates::BestOf(n),
        (None, None) => Candidates::One,
    };
    if candidates.count() > Candidates::MAX {
        return problem(CandidatesProblem::TooMany(candidates.count()));
    }
    if candidates.several() && matches!(per_process, PerProcess::Tasks(n) if n > 1) {
        return problem(CandidatesProblem::PerProcess);
    }
    if run.judge_model.is_some() && !candidates.parallel() {
        return problem(CandidatesProblem::JudgeAlone);
    }
    Ok(candidates)
}

/// Checks `[model]`'s values: counts above zero, valid prices, a known `tool_choice`.
fn check_model(model: &layer::ModelTable) -> Result<(), SettingsError> {
    for (value, count) in [
        (model.max_output_tokens, Count::MaxOutputTokens),
        (model.context_window, Count::ContextWindow),
    ] {
        if value == Some(0) {
            return Err(SettingsError::Zero(count));
        }
    }
    let prices = model
        .price
        .iter()
        .chain(model.prices.iter().flat_map(|p| p.values()));
    if prices.clone().any(|p| !p.is_valid()) {
        return Err(SettingsError::Price);
    }
    if let Some(choice) = &model.tool_choice
        && !["auto", "required", "none"].contains(&choice.as_str())
    {
        return Err(SettingsError::ToolChoice(choice.clone()));
    }
    Ok(())
}

/// `[model]` with its defaults.
fn model_settings(model: layer::ModelTable) -> ModelSettings {
    ModelSettings {
        name: model.name,
        base_url: model
            .base_url
            .unwrap_or_else(|| ModelSettings::DEFAULT_BASE_URL.to_string())
            .trim_end_matches('/')
            .to_string(),
        stream: model.stream.unwrap_or(true),
        request_timeout_secs: model.request_timeout.unwrap_or(300),
        connect_timeout_secs: model.connect_timeout.unwrap_or(10),
        max_retries: model.max_retries.unwrap_or(6),
        max_output_tokens: model.max_output_tokens,
        temperature: model.temperature,
        tool_choice: model.tool_choice.unwrap_or_else(|| "auto".into()),
        extra_body: model.extra_body.unwrap_or_default(),
        context_window: model.context_window,
        price: model.price,
        prices: model.prices.unwrap_or_default(),
    }
}

/// The command line's layer over a plan's, the environment, the repository's `swarm.toml`
/// (restricted) and the user's config file. A plan file's layer is restricted as the
/// repository's is, but quietly where this machine's own layers grant the same.
fn layers(
    command_line: Layer,
    plan: Option<(Layer, PlanSource)>,
    repo_root: &Path,
    warnings: &mut Vec<String>,
) -> Result<Layer, SettingsError> {
    let repo = Layer::load(&repo_root.join("swarm.toml"))?;
    let mut repo = sandbox::restrict(repo, Untrusted::Repository, &Layer::default(), warnings);
    // Its limits apply last, where they are tighter than the user's (the layer's own, since
    // the repository's are taken out before the layers combine).
    let repo_limits = limits::RepositoryLimits::take(&mut repo);
    let user = Layer::load_user()?;
    let plan = match plan {
        None => Layer::default(),
        Some((plan, PlanSource::Own)) => plan,
        Some((plan, source @ (PlanSource::File | PlanSource::ToolCall))) => {
            let granted = command_line
                .clone()
                .combine(Layer::from_env())
                .combine(user.clone());
            let from = match source {
                PlanSource::ToolCall => Untrusted::ToolCall,
                _ => Untrusted::PlanFile,
            };
            sandbox::restrict(plan, from, &granted, warnings)
        }
    };
    let upper = command_line.combine(plan).combine(Layer::from_env());
    let given = limits::Given::by(&upper);
    let mut layer = upper.combine(repo).combine(user);
    limits::apply(&mut layer, repo_limits, &given, warnings);
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_repo_file_which_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("swarm.toml"),
            "[run]\njobs = 7\nscope = \"any\"\n[worktree]\nsetup = \"true\"\n",
        )
        .unwrap();
        let mut flags = Layer::default();
        flags.run.jobs = Some(3);
        let s = Settings::resolve(flags, None, dir.path()).unwrap().settings;
        assert_eq!(s.jobs, 3);
        assert_eq!(s.scope, Scope::Any);
        assert_eq!(s.timeout_secs, Settings::DEFAULT_TIMEOUT_SECS);
        assert_eq!(s.worktree.setup.as_deref(), Some("true"));
    }

    #[test]
    fn hidden_paths_add_up_across_layers() {
        let mut upper = Layer::default();
        upper.sandbox.hide = Some(vec!["/a".into()]);
        upper.sandbox.allow_run = Some(vec!["x".into()]);
        let mut lower = Layer::default();
        lower.sandbox.hide = Some(vec!["/b".into()]);
        lower.sandbox.allow_run = Some(vec!["y".into()]);
        let both = upper.combine(lower);
        assert_eq!(both.sandbox.hide.unwrap(), ["/a", "/b"]);
        assert_eq!(both.sandbox.allow_run.unwrap(), ["x"]);
    }

    #[test]
    fn zero_counts_are_refused() {
        let mut layer = Layer::default();
        layer.run.batch = Some(0);
        assert!(matches!(
            Settings::from_layer(layer),
            Err(SettingsError::Zero(Count::Batch))
        ));
    }

    #[test]
    fn per_process_is_a_count_or_auto_in_every_layer() {
        let file = |text: &str| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("swarm.toml"), text).unwrap();
            Settings::resolve(Layer::default(), None, dir.path()).map(|r| r.settings.per_process)
        };
        assert_eq!(file("").unwrap(), PerProcess::Auto);
        assert_eq!(
            file("[run]\nper_process = 8\n").unwrap(),
            PerProcess::Tasks(8)
        );
        assert_eq!(
            file("[run]\nper_process = \"auto\"\n").unwrap(),
            PerProcess::Auto
        );
        for bad in ["-1", "\"lots\"", "true", "0"] {
            assert!(
                file(&format!("[run]\nper_process = {bad}\n")).is_err(),
                "{bad}"
            );
        }
        assert_eq!("12".parse(), Ok(PerProcess::Tasks(12)));
        // plan.json keeps it as it was given.
        for value in [PerProcess::Auto, PerProcess::Tasks(3)] {
            let json = serde_json::to_string(&value).unwrap();
            assert_eq!(serde_json::from_str::<PerProcess>(&json).unwrap(), value);
        }
    }

    #[test]
    fn api_keys_never_print() {
        let key = ApiKey::new("sk-secret-123".into());
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_keys_there_are() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("swarm.toml"), "[run]\njbos = 7\n").unwrap();
        let err = Settings::resolve(Layer::default(), None, dir.path()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("jbos") && text.contains("jobs"), "{text}");
    }
}
