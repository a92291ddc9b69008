//! The built-in agent's processes: the commands its `run` tool asks for, and `--verify`;
//! both confined like any worker process, with the task's limits.

use serde_json::Value;

use super::AgentTask;
use super::approval::{self, Approval};
use super::tools::Outcome;
use crate::events::Event;
use crate::worker::process::{self, Exit, ProcessRequest, Program};

/// The `run` tool: the command runs (confined, with the task's limits) only if the policy
/// allows it; every decision is an `approval` event.
pub(super) async fn run_command(task: &AgentTask<'_>, arguments: &str) -> anyhow::Result<Outcome> {
    let command = serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|a| a.get("command").and_then(Value::as_str).map(str::to_string));
    let Some(command) = command.filter(|c| !c.trim().is_empty()) else {
        return Ok(Outcome::Failed("run needs {\"command\": \"...\"}".into()));
    };
    let approval = approval::decide(task.run_tool, &command);
    let words: Vec<std::ffi::OsString>;
    let (program, rule) = match &approval {
        Approval::Shell { rule } => (Program::Shell(&command), rule.clone()),
        Approval::Argv { rule, argv } => {
            words = argv.iter().map(Into::into).collect();
            (Program::Argv(&words), rule.clone())
        }
        Approval::Denied(why) => {
            task.caller.events.emit(Event::Approval {
                task: task.caller.task_id.clone(),
                command: command.clone(),
                allowed: false,
                rule: None,
            });
            return Ok(Outcome::Failed(why.to_string()));
        }
    };
    task.caller.events.emit(Event::Approval {
        task: task.caller.task_id.clone(),
        command: command.clone(),
        allowed: true,
        rule: Some(rule),
    });
    let log = task.task_dir.join("run.log");
    let ran = process::run(request(task, program, &log)).await?;
    let output: String = ran
        .output_tail
        .chars()
        .rev()
        .take(6000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Ok(Outcome::Text(format!("[{}]\n{output}", describe(ran.exit))))
}

/// Runs `--verify` in the worktree, with the task's variables (`SWARM_FILE`…); `None` when
/// it passes, else its output tail.
pub(super) async fn run_verify(
    command: &str,
    task: &AgentTask<'_>,
) -> anyhow::Result<Option<String>> {
    let log = task.task_dir.join("verify.log");
    let mut check = request(task, Program::Shell(command), &log);
    let caller = &task.caller;
    check.env = crate::worker::exec::check_env(task.files, caller.run_id, caller.task_id);
    let ran = process::run(check).await?;
    Ok(match ran.exit {
        Exit::Code(0) => None,
        other => Some(format!(
            "{}\n[{}]",
            ran.output_tail.trim_end(),
            describe(other)
        )),
    })
}

fn describe(exit: Exit) -> String {
    match exit {
        Exit::Code(c) => format!("exit status {c}"),
        Exit::Signal(s) => format!("killed by signal {s}"),
        Exit::TimedOut => "timed out".into(),
        Exit::Idle => "stale (no output, no file change)".into(),
        Exit::Cancelled => "interrupted".into(),
        Exit::OverBudget => "stopped: the run's budget is spent".into(),
    }
}

/// A process of the task's, confined and limited as its worker is, writing nothing but its
/// worktree; its output goes to `log`.
fn request<'a>(
    task: &'a AgentTask<'_>,
    program: Program<'a>,
    log: &'a std::path::Path,
) -> ProcessRequest<'a> {
    ProcessRequest {
        program,
        cwd: task.worktree,
        env: Vec::new(),
        log,
        timeout: task.timeout,
        idle_timeout: Some(task.idle_timeout),
        sandbox: Some(task.sandbox),
        also_writable: &[],
        view: None,
        on_access: task.on_access.clone(),
        cancel: task.cancel,
        gateway: None,
        state_views: &[],
        git_view: None,
        keep: &[],
    }
}
