//! `swarm diff`, and the rendering of diffs (unified, `--stat`, diffstat) that `--dry-run`
//! and `--review` share.

use std::io::IsTerminal as _;

use clap::Args;
use similar::{ChangeTag, TextDiff};

use crate::app::AppResult;
use crate::app::diff::{self, FileDiff, Shown};
use crate::error::exit;
use crate::ids::RunSelector;

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

pub fn run(args: DiffArgs) -> AppResult<i32> {
    let cwd = std::env::current_dir()?;
    match diff::of_run(&cwd, &args.run_id, args.task_id.as_deref())? {
        Shown::Nothing(why) => eprintln!("swarm: {why}"),
        Shown::Files(files) => {
            let color = super::use_color(std::io::stdout().is_terminal());
            let mut out = std::io::stdout().lock();
            write_diff(&files, args.stat, color, &mut out)?;
        }
    }
    Ok(exit::SUCCESS)
}

/// A diffstat, like `git diff --stat`: one line per changed file with its added and removed
/// lines, then the totals.
pub(super) fn write_diffstat(
    files: &[FileDiff],
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let path = |f: &FileDiff| {
        if f.new_path.is_empty() {
            f.old_path.clone()
        } else {
            f.new_path.clone()
        }
    };
    let width = files.iter().map(|f| path(f).len()).max().unwrap_or(0);
    let (mut added, mut removed) = (0, 0);
    for f in files {
        match f.lines {
            Some((a, r)) => {
                added += a;
                removed += r;
                writeln!(out, " {:<width$} | +{a} -{r}", path(f))?;
            }
            None => writeln!(out, " {:<width$} | binary", path(f))?,
        }
    }
    writeln!(
        out,
        " {} file(s) changed, {added} insertion(s)(+), {removed} deletion(s)(-)",
        files.len()
    )
}

/// A unified diff of `files` (with `stat`, only their status and path).
pub(super) fn write_diff(
    files: &[FileDiff],
    stat: bool,
    color: bool,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    for f in files {
        let (op, np) = (&f.old_path, &f.new_path);
        if stat {
            writeln!(out, "{}\t{np}", f.status)?;
            continue;
        }
        writeln!(out, "{}", paint("1", &format!("diff --git a/{op} b/{np}")))?;
        match (f.old_mode, f.new_mode) {
            (Some(old), Some(new)) if old != new => {
                writeln!(out, "old mode {old:o}")?;
                writeln!(out, "new mode {new:o}")?;
            }
            (None, Some(new)) => writeln!(out, "new file mode {new:o}")?,
            (Some(old), None) => writeln!(out, "deleted file mode {old:o}")?,
            _ => {}
        }
        if f.old == f.new {
            continue;
        }
        let (Ok(a), Ok(b)) = (std::str::from_utf8(&f.old), std::str::from_utf8(&f.new)) else {
            writeln!(out, "Binary files a/{op} and b/{np} differ")?;
            continue;
        };
        let old_name = match f.old_mode {
            None => "/dev/null".to_string(),
            Some(_) => format!("a/{op}"),
        };
        let new_name = match f.new_mode {
            None => "/dev/null".to_string(),
            Some(_) => format!("b/{np}"),
        };
        writeln!(out, "{}", paint("1", &format!("--- {old_name}")))?;
        writeln!(out, "{}", paint("1", &format!("+++ {new_name}")))?;
        write_hunks(a, b, &paint, out)?;
    }
    Ok(())
}

fn write_hunks(
    a: &str,
    b: &str,
    paint: &dyn Fn(&str, &str) -> String,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let text = TextDiff::from_lines(a, b);
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
    Ok(())
}
