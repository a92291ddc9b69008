//! The tools' arguments, with the settings' names. They come from a model: unknown fields
//! are refused (a `sandbox` or `network` field is not a field), and the values become the
//! call's settings layer ([`crate::limits`]), typed.

use schemars::JsonSchema;
use serde::Deserialize;

/// A refactor to plan (`plan`) or start (`refactor`): the options of `swarm refactor`,
/// without those that widen what workers may do (the sandbox, the network, `--allow-run`),
/// which only the server's own command line sets.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Work {
    /// What to change, said once for every task (workers get it as SWARM_INSTRUCTION).
    pub instruction: String,
    /// Which files: git pathspecs relative to the repository root (`src/**/*.py`); all
    /// tracked text files if empty.
    #[serde(default)]
    pub pathspecs: Vec<String>,
    /// Only files whose content matches this regular expression.
    pub grep: Option<String>,
    /// The command each worker runs in its worktree (`sh -c`), with SWARM_FILE set to its
    /// file: `sed -i 's/a/b/' "$SWARM_FILE"`, `ruff check --fix "$SWARM_FILE"`.
    pub exec: Option<String>,
    /// A coding agent as the worker (`claude`, `codex`…), if the server allows it.
    pub agent: Option<String>,
    /// The model of the built-in worker (or of the agent).
    pub model: Option<String>,
    /// Workers at a time.
    pub jobs: Option<usize>,
    /// Files per task.
    pub batch: Option<usize>,
    /// Tasks one worker process runs (`auto` or a number).
    pub per_process: Option<String>,
    /// A check run in each task's worktree after its worker; a failing task is not merged.
    pub verify: Option<String>,
    /// A check run on the merged result; the tasks that break it are found and left out.
    pub verify_merged: Option<String>,
    /// The branch that receives the merges (created if it does not exist).
    pub into: Option<String>,
    /// Move the target only if every task merged.
    pub atomic: Option<bool>,
    /// `task` (a worker may change only its own files) or `any`.
    pub scope: Option<String>,
    /// `retry`, `fail`, `skip` or `repair`.
    pub on_conflict: Option<String>,
    /// `mergiraf`: a structured merge tool (installed where the server runs) for each file
    /// git's line merge leaves in conflict, before `on_conflict` decides. The repository's
    /// own merge drivers run either way.
    pub merge_with: Option<String>,
    /// Exit statuses of the worker's command that mean success (`[0, 1]` for ruff).
    pub ok_exit_codes: Option<Vec<i32>>,
    /// Seconds a worker may take.
    pub timeout: Option<u64>,
    /// Candidates per task, one after another until one passes its checks (1 to 8).
    pub tries: Option<u32>,
    /// Candidates per task at once; swarm chooses the one that passes and that most agree
    /// on, then the smallest (1 to 8; each one's spend counts against the budget).
    pub best_of: Option<u32>,
    /// The run's spending cap in US dollars (at most the server's).
    pub max_cost: Option<f64>,
    /// The run's token budget (at most the server's).
    pub max_tokens: Option<u64>,
    /// `refactor` only: run every task but merge nothing (review with `diff`, then `merge`).
    pub dry_run: Option<bool>,
    /// `refactor` only: wait up to this many seconds for the run to end, with progress
    /// notifications; the run goes on after that (and after this server ends): ask `status`
    /// or `result`.
    pub wait_seconds: Option<u64>,
}

/// A run, by its id (or a unique prefix of it).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunRef {
    pub run_id: String,
}

/// `status`: one run, or every run of the repository.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Status {
    /// The run; every run of the repository if absent.
    pub run_id: Option<String>,
    /// With run_id: also the run's events from this one on (0: from the first), at most
    /// 100; the answer's `next_event` is where the next poll starts.
    pub events_after: Option<usize>,
}

/// `resume` and `merge`: continue a run.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Continue {
    pub run_id: String,
    /// `resume` only: run failed, timed-out and conflicted tasks again too.
    pub failed: Option<bool>,
    /// `resume` only: workers at once for the tasks this resume runs (the run's own if
    /// absent; at most the server's limit).
    pub jobs: Option<usize>,
    /// `resume` only: a corrected scope for the tasks this resume runs, "task" or "any"
    /// ("any" merges the tasks that failed for changing files of other tasks).
    pub scope: Option<String>,
    /// `resume` only: corrected exit statuses of success for the tasks this resume runs
    /// ([0, 1] merges the tasks of a codemod that exits 1 when it rewrote its file).
    pub ok_exit_codes: Option<Vec<i32>>,
    /// Wait up to this many seconds for it to end, as for `refactor`.
    pub wait_seconds: Option<u64>,
}

/// `diff`: a page of a run's (or one task's) unified diff.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Diff {
    pub run_id: String,
    /// One task (its id or a unique prefix); the run's whole diff if absent.
    pub task: Option<String>,
    /// Where the page starts, in characters (the previous page's `next_offset`).
    pub offset: Option<usize>,
    /// The page's length in characters (at most 20000; 8000 if absent).
    pub limit: Option<usize>,
}
