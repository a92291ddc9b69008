//! Every environment variable swarm reads or sets, in one place.

/// Settings (read; a flag beats its variable, the variable beats the files).
pub const SWARM_JOBS: &str = "SWARM_JOBS";
pub const SWARM_TIMEOUT: &str = "SWARM_TIMEOUT";
pub const SWARM_ON_CONFLICT: &str = "SWARM_ON_CONFLICT";
pub const SWARM_SCOPE: &str = "SWARM_SCOPE";
pub const SWARM_BATCH: &str = "SWARM_BATCH";
pub const SWARM_PER_PROCESS: &str = "SWARM_PER_PROCESS";
pub const SWARM_TRIES: &str = "SWARM_TRIES";
pub const SWARM_BEST_OF: &str = "SWARM_BEST_OF";
pub const SWARM_JUDGE_MODEL: &str = "SWARM_JUDGE_MODEL";
pub const SWARM_MERGE_WITH: &str = "SWARM_MERGE_WITH";
pub const SWARM_EXEC: &str = "SWARM_EXEC";
pub const SWARM_AGENT: &str = "SWARM_AGENT";
pub const SWARM_MODEL: &str = "SWARM_MODEL";
pub const SWARM_BASE_URL: &str = "SWARM_BASE_URL";
pub const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";
/// API keys: read from the environment only (never from flags or files, never written).
pub const SWARM_API_KEY: &str = "SWARM_API_KEY";
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
pub const SWARM_MAX_TURNS: &str = "SWARM_MAX_TURNS";
pub const SWARM_MAX_TOKENS: &str = "SWARM_MAX_TOKENS";
pub const SWARM_MAX_OUTPUT_TOKENS: &str = "SWARM_MAX_OUTPUT_TOKENS";
pub const SWARM_MAX_COST: &str = "SWARM_MAX_COST";
pub const SWARM_VERIFY: &str = "SWARM_VERIFY";
pub const SWARM_VERIFY_MERGED: &str = "SWARM_VERIFY_MERGED";
pub const SWARM_IDLE_TIMEOUT: &str = "SWARM_IDLE_TIMEOUT";
pub const SWARM_OK_EXIT_CODES: &str = "SWARM_OK_EXIT_CODES";
pub const SWARM_SANDBOX: &str = "SWARM_SANDBOX";
pub const SWARM_WORKTREES: &str = "SWARM_WORKTREES";
/// Path of the user's config file, instead of `$XDG_CONFIG_HOME/swarm/config.toml`.
pub const SWARM_CONFIG: &str = "SWARM_CONFIG";
/// Grace period between SIGTERM and SIGKILL for a timed-out worker, in milliseconds.
pub const SWARM_KILL_GRACE_MS: &str = "SWARM_KILL_GRACE_MS";
pub use swarm_sandbox::proxy::SWARM_TEST_PROXY_RESOLVE;
pub const XDG_CONFIG_HOME: &str = "XDG_CONFIG_HOME";
pub const HOME: &str = "HOME";
pub const NO_COLOR: &str = "NO_COLOR";
/// The pager of `swarm diff` and `--review` on a terminal, before `PAGER` (as `GIT_PAGER`).
pub const SWARM_PAGER: &str = "SWARM_PAGER";
pub const PAGER: &str = "PAGER";

/// Given to every worker process (docs/WORKERS.md).
pub const SWARM_FILE: &str = "SWARM_FILE";
pub const SWARM_FILES: &str = "SWARM_FILES";
pub const SWARM_INSTRUCTION: &str = "SWARM_INSTRUCTION";
pub const SWARM_TASK_ID: &str = "SWARM_TASK_ID";
/// A candidate's number (1..N) with `--tries`/`--best-of`.
pub const SWARM_CANDIDATE: &str = "SWARM_CANDIDATE";
pub const SWARM_RUN_ID: &str = "SWARM_RUN_ID";
pub const SWARM_WORKTREE: &str = "SWARM_WORKTREE";
pub const SWARM_TASK_FILE: &str = "SWARM_TASK_FILE";
pub const SWARM_RESULT_FILE: &str = "SWARM_RESULT_FILE";
/// Every variable above, the task's own (`worker::exec::task_env` sets them).
pub const TASK_VARS: [&str; 9] = [
    SWARM_FILE,
    SWARM_FILES,
    SWARM_INSTRUCTION,
    SWARM_TASK_ID,
    SWARM_CANDIDATE,
    SWARM_RUN_ID,
    SWARM_WORKTREE,
    SWARM_TASK_FILE,
    SWARM_RESULT_FILE,
];
/// `--model` with `--agent`: the agent's model, for its preset's command line.
pub const SWARM_AGENT_MODEL: &str = "SWARM_AGENT_MODEL";

/// Internal: set on the swarm process that empties `<git-common-dir>/swarm/trash` after a run
/// (its value: the git common directory).
pub const SWARM_EMPTY_TRASH: &str = "SWARM_EMPTY_TRASH";

// `swarm land`: the forges' tokens and API base URLs, named as their CI sets them.
/// A GitHub token (`GITHUB_TOKEN` in Actions), for `swarm land --forge github`.
pub const GITHUB_TOKEN: &str = "GITHUB_TOKEN";
/// A GitHub token as the `gh` CLI reads it.
pub const GH_TOKEN: &str = "GH_TOKEN";
/// GitHub's REST API (set by Actions; GitHub Enterprise's own).
pub const GITHUB_API_URL: &str = "GITHUB_API_URL";
/// A GitLab personal, project or group access token.
pub const GITLAB_TOKEN: &str = "GITLAB_TOKEN";
/// The token GitLab CI gives each job.
pub const CI_JOB_TOKEN: &str = "CI_JOB_TOKEN";
/// GitLab's REST API v4 (set by GitLab CI).
pub const CI_API_V4_URL: &str = "CI_API_V4_URL";
