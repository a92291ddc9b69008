//! `swarm diff`: the unified diff of a run, or of one task.

use std::io::IsTerminal as _;

use anyhow::Context as _;
use clap::Args;
use git2::{Oid, Repository};
use similar::{ChangeTag, TextDiff};

use super::status::resolve_run_id;
use crate::error::{BadInput, exit};
use crate::git::repo;
use crate::ids::RunSelector;
use crate::state::RunDir;

/// Show the unified diff of a run (what it merged into the target) or of one task.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The run (an id or a unique prefix).
    pub run_id: RunSelector,
    /// One task of the run (an id or a unique prefix); default: the whole run.
    pub task_id: Option<String>,
    /// Print only the changed paths with their status.
    #[arg(long)]
    pub stat: bool,
}

pub fn run(args: DiffArgs) -> anyhow::Result<i32> {
    let info = repo::discover(&std::env::current_dir()?)?;
    let id = resolve_run_id(&info.common_dir, &args.run_id)?;
    let report = RunDir::new(&info.common_dir, &id).load_report()?;
    let (old, new) = match &args.task_id {
        None => match &report.result {
            Some(result) => (report.into_start.clone(), result.clone()),
            None => {
                eprintln!("swarm: run {id} merged nothing");
                return Ok(exit::SUCCESS);
            }
        },
        Some(wanted) => {
            let matching: Vec<_> = report
                .tasks
                .iter()
                .filter(|t| t.id.as_str().starts_with(wanted.as_str()))
                .collect();
            let task = match matching.as_slice() {
                [one] => *one,
                [] => {
                    return Err(BadInput::new(format!("no task '{wanted}' in run {id}"))
                        .hint(format!("`swarm status {id}` lists its tasks"))
                        .into());
                }
                _ => {
                    return Err(BadInput::new(format!("'{wanted}' matches several tasks"))
                        .hint("give more characters of the task id")
                        .into());
                }
            };
            match (&task.start, &task.commit) {
                (Some(start), Some(commit)) => (start.clone(), commit.clone()),
                _ => {
                    eprintln!(
                        "swarm: task {} changed nothing ({})",
                        task.id,
                        task.status.as_str()
                    );
                    return Ok(exit::SUCCESS);
                }
            }
        }
    };
    let repo = Repository::open(&info.common_dir)?;
    let color = super::use_color(std::io::stdout().is_terminal());
    let mut out = std::io::stdout().lock();
    write_diff(&repo, &old, &new, args.stat, color, &mut out)?;
    Ok(exit::SUCCESS)
}

/// A diffstat between two commits, like `git diff --stat`: one line per changed file with
/// its added and removed lines, then the totals.
pub(super) fn write_diffstat(
    repo: &Repository,
    old: &str,
    new: &str,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let tree = |sha: &str| -> anyhow::Result<git2::Tree<'_>> {
        Ok(repo.find_commit(Oid::from_str(sha)?)?.tree()?)
    };
    let diff = repo.diff_tree_to_tree(Some(&tree(old)?), Some(&tree(new)?), None)?;
    let mut rows = Vec::new();
    for idx in 0..diff.deltas().len() {
        let Some(delta) = diff.get_delta(idx) else {
            continue;
        };
        let path = delta
            .new_file()
            .path_bytes()
            .or(delta.old_file().path_bytes())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        let counts = match git2::Patch::from_diff(&diff, idx)? {
            Some(patch) if !delta.new_file().is_binary() && !delta.old_file().is_binary() => {
                let (_, added, removed) = patch.line_stats()?;
                Some((added, removed))
            }
            _ => None,
        };
        rows.push((path, counts));
    }
    let width = rows.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
    let (mut added, mut removed) = (0, 0);
    for (path, counts) in &rows {
        match counts {
            Some((a, r)) => {
                added += a;
                removed += r;
                writeln!(out, " {path:<width$} | +{a} -{r}")?;
            }
            None => writeln!(out, " {path:<width$} | binary")?,
        }
    }
    writeln!(
        out,
        " {} file(s) changed, {added} insertion(s)(+), {removed} deletion(s)(-)",
        rows.len()
    )?;
    Ok(())
}

pub(super) fn write_diff(
    repo: &Repository,
    old: &str,
    new: &str,
    stat: bool,
    color: bool,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let tree = |sha: &str| -> anyhow::Result<git2::Tree<'_>> {
        let oid = Oid::from_str(sha)?;
        Ok(repo
            .find_commit(oid)
            .with_context(|| format!("commit {sha} is gone (was it garbage-collected?)"))?
            .tree()?)
    };
    let (old_tree, new_tree) = (tree(old)?, tree(new)?);
    let diff = repo.diff_tree_to_tree(Some(&old_tree), Some(&new_tree), None)?;
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    for delta in diff.deltas() {
        let (of, nf) = (delta.old_file(), delta.new_file());
        let path = |f: &git2::DiffFile<'_>| {
            f.path_bytes()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default()
        };
        let (op, np) = (path(&of), path(&nf));
        if stat {
            writeln!(out, "{:?}\t{np}", delta.status())?;
            continue;
        }
        let blob = |f: &git2::DiffFile<'_>| -> anyhow::Result<Vec<u8>> {
            if f.id().is_zero() {
                Ok(Vec::new())
            } else {
                Ok(repo.find_blob(f.id())?.content().to_vec())
            }
        };
        let (a, b) = (blob(&of)?, blob(&nf)?);
        writeln!(out, "{}", paint("1", &format!("diff --git a/{op} b/{np}")))?;
        if of.mode() != nf.mode() && !of.id().is_zero() && !nf.id().is_zero() {
            writeln!(out, "old mode {:o}", u32::from(of.mode()))?;
            writeln!(out, "new mode {:o}", u32::from(nf.mode()))?;
        }
        if of.id().is_zero() {
            writeln!(out, "new file mode {:o}", u32::from(nf.mode()))?;
        } else if nf.id().is_zero() {
            writeln!(out, "deleted file mode {:o}", u32::from(of.mode()))?;
        }
        if a == b {
            continue;
        }
        let (Ok(a), Ok(b)) = (std::str::from_utf8(&a), std::str::from_utf8(&b)) else {
            writeln!(out, "Binary files a/{op} and b/{np} differ")?;
            continue;
        };
        let text = TextDiff::from_lines(a, b);
        let old_name = if of.id().is_zero() {
            "/dev/null".to_string()
        } else {
            format!("a/{op}")
        };
        let new_name = if nf.id().is_zero() {
            "/dev/null".to_string()
        } else {
            format!("b/{np}")
        };
        writeln!(out, "{}", paint("1", &format!("--- {old_name}")))?;
        writeln!(out, "{}", paint("1", &format!("+++ {new_name}")))?;
        for hunk in text.unified_diff().context_radius(3).iter_hunks() {
            writeln!(out, "{}", paint("36", &hunk.header().to_string()))?;
            for change in hunk.iter_changes() {
                let (sign, code) = match change.tag() {
                    ChangeTag::Delete => ("-", "31"),
                    ChangeTag::Insert => ("+", "32"),
                    ChangeTag::Equal => (" ", ""),
                };
                let mut line = format!("{sign}{}", change.value());
                if !line.ends_with('\n') {
                    line.push_str("\n\\ No newline at end of file\n");
                }
                let line = line.trim_end_matches('\n');
                if code.is_empty() {
                    writeln!(out, "{line}")?;
                } else {
                    writeln!(out, "{}", paint(code, line))?;
                }
            }
        }
    }
    Ok(())
}
