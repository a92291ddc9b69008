//! The title and the description of a group's request: the instruction, the group, its
//! tasks and files with what each worker said, and the checks it passed.
//!
//! Workers' words are hostile text in someone else's review queue: each is cut to one line,
//! its secrets redacted, and escaped so it cannot mention people (`@`), close the table or
//! bring HTML in.

use super::record::{LandGroup, LandRecord};
use crate::report::Report;

/// The most characters of a title (GitHub allows 256).
const TITLE_MAX: usize = 120;
/// The most task rows in a description (GitHub allows 65,536 characters in all).
const ROWS_MAX: usize = 200;
/// The most characters of one worker's summary.
const SUMMARY_MAX: usize = 160;

/// `<instruction's first line> (<group>)`.
pub(crate) fn title(report: &Report, group: &LandGroup) -> String {
    let first = report.instruction.lines().next().unwrap_or("").trim();
    let label = format!(" ({})", group.label);
    let room = TITLE_MAX.saturating_sub(label.chars().count()).max(20);
    let mut title: String = first.chars().take(room).collect();
    if first.chars().count() > room {
        title.push('…');
    }
    crate::secrets::redact(&format!("{title}{label}")).into_owned()
}

/// The request's description, in Markdown.
pub(crate) fn body(report: &Report, record: &LandRecord, group: &LandGroup) -> String {
    let position = record
        .groups
        .iter()
        .position(|g| g.name == group.name)
        .map_or(0, |p| p + 1);
    let mut out = format!(
        "{}\n\nPart {position} of {} of swarm run `{}` (grouped by {}): {}, {} task(s), {} file(s).\n",
        quote(&report.instruction),
        record.groups.len(),
        record.run_id,
        record.by,
        escape(&group.label),
        group.tasks.len(),
        group.files.len()
    );
    if !group.owners.is_empty() {
        out.push_str(&format!(
            "\nOwners (CODEOWNERS): {}\n",
            group.owners.join(" ")
        ));
    }
    out.push_str("\n| task | files | worker's summary |\n| --- | --- | --- |\n");
    for id in group.tasks.iter().take(ROWS_MAX) {
        let Some(task) = report.tasks.iter().find(|t| &t.id == id) else {
            continue;
        };
        let files: Vec<String> = task
            .changed_files
            .iter()
            .map(|f| escape(&f.display()))
            .collect();
        let summary = task.summary.as_deref().map(one_line).unwrap_or_default();
        out.push_str(&format!("| `{id}` | {} | {summary} |\n", files.join(", ")));
    }
    if group.tasks.len() > ROWS_MAX {
        out.push_str(&format!(
            "\n… and {} more task(s).\n",
            group.tasks.len() - ROWS_MAX
        ));
    }
    out.push_str(&checks(report, group));
    out.push_str(&format!(
        "\n<!-- swarm-land run={} group={} -->\n",
        record.run_id, group.name
    ));
    out
}

/// The checks the group passed: the run's own, and `--verify-merged` on this branch.
fn checks(report: &Report, group: &LandGroup) -> String {
    let mut out = String::from("\nChecks:\n");
    if let Some(v) = &report.verify_merged {
        let verdict = if v.passed { "passed" } else { "did not pass" };
        out.push_str(&format!(
            "- the run's result {verdict} `{}`\n",
            one_line(&v.command)
        ));
    }
    match &group.check {
        Some(c) if c.passed => out.push_str(&format!("- this branch passed `{}`\n", one_line(&c.command))),
        Some(c) => out.push_str(&format!("- this branch failed `{}` ({})\n", one_line(&c.command), c.how)),
        None => out.push_str("- this branch was not checked on its own (`swarm land --verify-merged CMD` checks it)\n"),
    }
    out
}

/// The instruction as a Markdown quote, escaped.
fn quote(text: &str) -> String {
    text.trim()
        .lines()
        .take(40)
        .map(|l| format!("> {}", escape(l)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A worker's words on one escaped line, at most [`SUMMARY_MAX`] characters.
fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cut: String = flat.chars().take(SUMMARY_MAX).collect();
    if flat.chars().count() > SUMMARY_MAX {
        cut.push('…');
    }
    escape(&cut)
}

/// `text` with its secrets redacted and the characters that would mention someone, end a
/// table cell or a code span, or start HTML written as entities.
fn escape(text: &str) -> String {
    let text = crate::secrets::redact(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '@' => out.push_str("&#64;"),
            '|' => out.push_str("&#124;"),
            '`' => out.push_str("&#96;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_words_cannot_mention_or_break_out() {
        let summary = one_line("ping @everyone | <img src=x>\n`code` &amp;");
        assert_eq!(
            summary,
            "ping &#64;everyone &#124; &lt;img src=x&gt; &#96;code&#96; &amp;amp;"
        );
        assert_eq!(one_line(&"x".repeat(500)).chars().count(), SUMMARY_MAX + 1);
    }
}
