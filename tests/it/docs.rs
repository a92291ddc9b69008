//! docs/USAGE.md and `--help` agree: every option a command's `--help` lists is documented
//! where a reader of USAGE.md looks for it (the command's row of the commands table, or for
//! `refactor` and `plan`, the table of `refactor`'s options).

use std::collections::BTreeSet;

const USAGE: &str = include_str!("../../docs/USAGE.md");

/// Options every command has, documented once in the text under the commands table.
const GLOBAL: &[&str] = &["--help", "--version", "--verbose", "--quiet", "--color"];

/// The long options `swarm <command> --help` lists.
fn options(command: &str) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_swarm"))
        .args([command, "--help"])
        .env("COLUMNS", "200")
        .output()
        .unwrap();
    assert!(out.status.success());
    // An option's line starts with `  -x, --long` or `      --long`; its description's
    // lines are indented further.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("  -") || l.starts_with("      --"))
        .filter_map(|l| {
            l.split([' ', ','])
                .find(|w| w.starts_with("--"))
                .map(|w| w.trim_end_matches("...").to_string())
        })
        .filter(|o| !GLOBAL.contains(&o.as_str()))
        .collect()
}

/// The text of section `title` of USAGE.md (to the next `## `).
fn section(title: &str) -> &'static str {
    let start = USAGE
        .find(title)
        .unwrap_or_else(|| panic!("no {title} in USAGE.md"));
    let rest = &USAGE[start + title.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The row of `swarm <command>` in the commands table.
fn row(command: &str) -> &'static str {
    section("## Commands")
        .lines()
        .find(|l| l.starts_with(&format!("| `swarm {command}")))
        .unwrap_or_else(|| panic!("no row for swarm {command} in USAGE.md"))
}

#[test]
fn every_option_of_help_is_in_usage() {
    let mut missing = Vec::new();
    let refactor_options = section("## Options of `refactor`");
    for command in [
        "refactor",
        "plan",
        "run",
        "status",
        "diff",
        "merge",
        "land",
        "resume",
        "agents",
        "mcp",
        "clean",
        "completions",
        "man",
    ] {
        let documented = match command {
            "refactor" => refactor_options.to_string(),
            "plan" => format!("{}{refactor_options}", row(command)),
            _ => row(command).to_string(),
        };
        for option in options(command) {
            // As written in a table: `--opt`, [--opt], -o/--opt, or in a sentence.
            if !["`", " ", "[", "/"]
                .iter()
                .any(|before| documented.contains(&format!("{before}{option}")))
            {
                missing.push(format!("swarm {command} {option}"));
            }
        }
    }
    // The options of every command: in the text under the commands table.
    let globals = section("## Commands");
    for global in GLOBAL.iter().filter(|g| **g != "--help") {
        if !globals.contains(global) {
            missing.push(format!("swarm {global}"));
        }
    }
    assert!(
        missing.is_empty(),
        "options in --help but not in docs/USAGE.md:\n{}",
        missing.join("\n")
    );
}

/// Every test or function the docs name (`` `file.rs::name` ``, a test under `tests/it/` or
/// the sandbox crate's `tests/`, or a function in a crate's `src/`) exists: a threat table
/// that points at a renamed or deleted test promises a check nobody runs.
#[test]
fn every_test_the_docs_name_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_dir(root.join("docs")).unwrap();
    let name = regex::Regex::new(r"`((?:[a-z_]+/)?[a-z_]+\.rs)::([a-z0-9_]+)`").unwrap();
    let mut missing = Vec::new();
    let mut named = 0;
    for doc in docs.map(|d| d.unwrap().path()) {
        let text = std::fs::read_to_string(&doc).unwrap();
        for cap in name.captures_iter(&text) {
            let source = [
                "tests/it",
                "src",
                "crates/engine/src",
                "crates/mcp/src",
                "crates/sandbox/src",
                // Its own tests (`tests/jail.rs`).
                "crates/sandbox",
            ]
            .iter()
            .find_map(|dir| std::fs::read_to_string(root.join(dir).join(&cap[1])).ok());
            let Some(source) = source else {
                missing.push(format!("{}: {} (no such file)", doc.display(), &cap[0]));
                continue;
            };
            named += 1;
            if !["(", "<"]
                .iter()
                .any(|after| source.contains(&format!("fn {}{after}", &cap[2])))
            {
                missing.push(format!("{}: {}", doc.display(), &cap[0]));
            }
        }
    }
    assert!(
        named > 40,
        "the docs name only {named} tests: is the pattern right?"
    );
    assert!(
        missing.is_empty(),
        "tests and functions named in docs/ that do not exist:\n{}",
        missing.join("\n")
    );
}
