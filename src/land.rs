//! `swarm land`: a finished run as one branch and one pull (merge) request per group of its
//! tasks (docs/USAGE.md, "Landing a run as pull requests").

use crate::error::CommandResult;
use std::fmt::Write as _;

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::exit;
use swarm_engine::app::ids::RunSelector;
use swarm_engine::app::land::{
    By, Destination, ForgeChoice, ForgeKind, LandOutcome, LandRecord, LandRequest, Stage,
};

/// Turn a finished run into branches and pull requests: one per group of its tasks, by
/// CODEOWNERS, folder or file count, each built with the run's own --no-ff merges.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  swarm land 20261125-101500-4f2a --dry-run
  swarm land 20261125-101500-4f2a --by dir:2 --push origin
  GITHUB_TOKEN=… swarm land 20261125-101500-4f2a --push origin --forge --max-open 5

Run it again (same flags) to open the next requests once some are merged or closed; it
never pushes or opens a group twice. `swarm status RUN-ID` shows each group's request.")]
pub(crate) struct LandArgs {
    /// The run (an id or a unique prefix; `swarm status` lists them).
    pub run_id: RunSelector,
    /// How to split the run's tasks: codeowners (the repository's CODEOWNERS), dir:N (the
    /// first N folders of each file) or files:N (at most N files a group) [default: as the
    /// run was landed before, else codeowners].
    #[arg(long, value_name = "HOW", value_parser = parse_by)]
    pub by: Option<By>,
    /// Print the groups, their owners and files; build, push and open nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Check each group's branch with this command before it is pushed; a group that fails
    /// is held back.
    #[arg(long, value_name = "CMD")]
    pub verify_merged: Option<String>,
    /// Push the groups' branches (swarm/<RUN-ID>/land/<group>) to this remote, never forced.
    #[arg(long, value_name = "REMOTE")]
    pub push: Option<String>,
    /// Open a pull request (GitHub) or merge request (GitLab) per pushed branch; with no
    /// value, the forge the remote's URL points at.
    #[arg(long, value_name = "FORGE", num_args = 0..=1, default_missing_value = "auto",
          value_parser = parse_forge)]
    pub forge: Option<ForgeChoice>,
    /// The repository on the forge, when the remote's URL does not say [e.g. acme/app].
    #[arg(long, value_name = "OWNER/NAME")]
    pub forge_repo: Option<String>,
    /// The forge's API [default: GITHUB_API_URL or CI_API_V4_URL, else the host's].
    #[arg(long, value_name = "URL")]
    pub forge_api: Option<String>,
    /// The branch the requests merge into [default: the remote's default branch].
    #[arg(long, value_name = "BRANCH")]
    pub target: Option<String>,
    /// Keep at most N requests open; run `swarm land` again to open more as they land.
    #[arg(long, value_name = "N")]
    pub max_open: Option<usize>,
    /// Print the land record (land.json) as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn parse_by(s: &str) -> Result<By, String> {
    s.parse()
}

fn parse_forge(s: &str) -> Result<ForgeChoice, String> {
    match s {
        "auto" => Ok(ForgeChoice::Detect),
        "github" => Ok(ForgeChoice::Kind(ForgeKind::GitHub)),
        "gitlab" => Ok(ForgeChoice::Kind(ForgeKind::GitLab)),
        _ => Err(format!("`{s}` is none of github, gitlab")),
    }
}

pub(crate) async fn run(args: LandArgs) -> CommandResult<i32> {
    let request = LandRequest {
        cwd: std::env::current_dir()?,
        run: args.run_id,
        by: args.by,
        dry_run: args.dry_run,
        verify_merged: args.verify_merged,
        destination: Destination {
            push: args.push,
            forge: args.forge,
            forge_repo: args.forge_repo,
            forge_api: args.forge_api,
            target: args.target,
            max_open: args.max_open,
        },
    };
    let cancel = CancellationToken::new();
    {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        });
    }
    let progress = |line: String| eprintln!("{}", super::visible::text(&line));
    let outcome = swarm_engine::app::land::land(request, cancel.clone(), &progress).await?;
    for warning in &outcome.warnings {
        eprintln!("warning: {}", super::visible::text(warning));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome.record)?);
    } else if outcome.dry_run {
        print!("{}", dry_run(&outcome));
    } else {
        print!("{}", groups(&outcome.record));
    }
    if !outcome.dry_run && super::github::enabled() {
        super::github::append_summary(&step_summary(&outcome.record));
    }
    for problem in &outcome.problems {
        eprintln!("held back: {}", super::visible::text(problem));
    }
    Ok(match (cancel.is_cancelled(), outcome.problems.is_empty()) {
        (true, _) => exit::INTERRUPTED,
        (false, true) => exit::SUCCESS,
        (false, false) => exit::PARTIAL,
    })
}

/// The most files listed per group by `--dry-run`.
const FILES_SHOWN: usize = 20;

fn dry_run(outcome: &LandOutcome) -> String {
    let record = &outcome.record;
    let mut out = format!(
        "run {}: {} group(s) by {} (dry run: nothing built, pushed or opened)\n",
        record.run_id,
        record.groups.len(),
        record.by
    );
    for g in &record.groups {
        let _ = writeln!(
            out,
            "\n{}  {}: {} task(s), {} file(s)",
            g.name,
            g.label,
            g.tasks.len(),
            g.files.len()
        );
        if !g.owners.is_empty() {
            let _ = writeln!(out, "  owners: {}", g.owners.join(" "));
        }
        for f in g.files.iter().take(FILES_SHOWN) {
            let _ = writeln!(out, "  {}", f.display());
        }
        if g.files.len() > FILES_SHOWN {
            let _ = writeln!(out, "  … and {} more", g.files.len() - FILES_SHOWN);
        }
    }
    super::visible::text(&out).into_owned()
}

/// One line per group (its stage, request and branch), then the burndown.
pub(crate) fn groups(record: &LandRecord) -> String {
    let width = record
        .groups
        .iter()
        .map(|g| g.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!(
        "{:<width$} {:<8} {:>5} {:>5}  REQUEST / BRANCH\n",
        "GROUP", "STAGE", "TASKS", "FILES"
    );
    for g in &record.groups {
        let request = match (&g.request, &g.problem) {
            (Some(r), _) => format!("#{} {}", r.number, r.url),
            (None, Some(problem)) => problem.clone(),
            (None, None) => g.branch.clone(),
        };
        let _ = writeln!(
            out,
            "{:<width$} {:<8} {:>5} {:>5}  {request}",
            g.name,
            g.stage().as_str(),
            g.tasks.len(),
            g.files.len()
        );
    }
    let _ = writeln!(out, "{}", burndown(record));
    super::visible::text(&out).into_owned()
}

/// `2 landed, 1 open, 0 closed, 0 pushed, 3 waiting, 0 held (of 6 groups)`.
pub(crate) fn burndown(record: &LandRecord) -> String {
    let parts: Vec<String> = record
        .burndown()
        .iter()
        .map(|(stage, n)| format!("{n} {}", stage.as_str()))
        .collect();
    format!("{} (of {} groups)", parts.join(", "), record.groups.len())
}

/// The step summary's section: a table of the groups and their requests.
fn step_summary(record: &LandRecord) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace(['\n', '\r'], " ");
    let mut out = format!(
        "## swarm land {}\n\n{}\n\n| group | stage | request | tasks | files |\n| --- | --- | --- | --- | --- |\n",
        record.run_id,
        burndown(record)
    );
    for g in &record.groups {
        let request = match &g.request {
            Some(r) => format!("[#{}]({})", r.number, cell(&r.url)),
            None if g.stage() == Stage::Held => cell(g.problem.as_deref().unwrap_or("")),
            None => format!("`{}`", g.branch),
        };
        let _ = writeln!(
            out,
            "| {} ({}) | {} | {request} | {} | {} |",
            g.name,
            cell(&g.label),
            g.stage().as_str(),
            g.tasks.len(),
            g.files.len()
        );
    }
    out
}
