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
    /// Print a diffstat instead (as `git diff --stat`): each file's added and removed lines
    /// with a +/- bar, renames as `old => new`, then the totals.
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

/// The widest +/- bar of a diffstat, as git's on an 80-column terminal.
const BAR_MAX: usize = 40;

/// A diffstat, as `git diff --stat` prints it: one line per file with its changed lines and a
/// bar of `+` and `-` (scaled down when the largest change is wider than the bar), a rename
/// as `old => new`, binary files with their sizes, then the totals.
pub(super) fn write_diffstat(
    files: &[FileDiff],
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let name = |f: &FileDiff| match (f.old_mode, f.new_mode) {
        (Some(_), Some(_)) if f.old_path != f.new_path => {
            format!("{} => {}", f.old_path, f.new_path)
        }
        (None, _) => f.new_path.clone(),
        _ => f.old_path.clone(),
    };
    let width = files.iter().map(|f| name(f).len()).max().unwrap_or(0);
    let most = files
        .iter()
        .filter_map(|f| f.lines.map(|(a, r)| a + r))
        .max()
        .unwrap_or(0);
    let digits = most.to_string().len();
    let scale = |n: usize| match most > BAR_MAX {
        // Scaled, but a change is never shown as nothing.
        true if n > 0 => (n * BAR_MAX / most).max(1),
        true => 0,
        false => n,
    };
    let (mut added, mut removed) = (0, 0);
    for f in files {
        match f.lines {
            Some((a, r)) => {
                added += a;
                removed += r;
                let bar = format!("{}{}", "+".repeat(scale(a)), "-".repeat(scale(r)));
                let line = format!(" {:<width$} | {:>digits$} {bar}", name(f), a + r);
                writeln!(out, "{}", line.trim_end())?;
            }
            None => writeln!(
                out,
                " {:<width$} | Bin {} -> {} bytes",
                name(f),
                f.old.len(),
                f.new.len()
            )?,
        }
    }
    let plural = |n: usize, one: &str, many: &str| match n {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    };
    let mut totals = vec![plural(files.len(), "file changed", "files changed")];
    if added > 0 {
        totals.push(plural(added, "insertion(+)", "insertions(+)"));
    }
    if removed > 0 {
        totals.push(plural(removed, "deletion(-)", "deletions(-)"));
    }
    writeln!(out, " {}", totals.join(", "))
}

/// A unified diff of `files` (with `stat`, their diffstat).
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
    if stat {
        return write_diffstat(files, out);
    }
    for f in files {
        let (op, np) = (&f.old_path, &f.new_path);
        writeln!(out, "{}", paint("1", &format!("diff --git a/{op} b/{np}")))?;
        if f.old_mode.is_some() && f.new_mode.is_some() && op != np {
            writeln!(out, "rename from {op}\nrename to {np}")?;
        }
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
