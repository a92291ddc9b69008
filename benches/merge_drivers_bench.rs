//! Tasks that each add an import and a registration line to one shared file, merged with
//! git's line merge alone, with the repository's merge driver, and with mergiraf.
//!
//! ```text
//! cargo bench --bench merge_drivers_bench -- [--tasks 16] [--jobs 4] [--work-ms 300] [--rounds 3] [--dir DIR]
//! ```
//!
//! For each language (Python, Rust, TypeScript, JSON), a repository of `--tasks` one-file
//! tasks whose worker (`--exec`, `--scope any`, after `--work-ms` of "work": an agent's
//! session is seconds to minutes) also inserts an import and a registration line at fixed
//! places of one shared file (`registry.py`, `lib.rs`, `index.ts`, `package.json`): every
//! merge after the first is a conflict for git's line merge. Three ways to merge:
//!
//! - `plain`: no driver; `--on-conflict retry` re-runs each conflicting task on the merged
//!   result (once; a task that conflicts again stays `conflict`);
//! - `driver`: `.gitattributes` names a driver the repository's `.git/config` defines, git's
//!   union merge as a command (`git merge-file --union %A %O %B`);
//! - `mergiraf`: `--merge-with mergiraf` (from `PATH`, or `$SWARM_BENCH_MERGIRAF`; skipped
//!   where there is none).
//!
//! Printed per language and way: tasks merged, re-runs (attempts beyond the first), merges a
//! driver spared, wall seconds (mean, min–max over `--rounds`). Each run's merged tree is
//! checked against the git CLI merging the same task commits in the same order, with the same
//! driver (for mergiraf, set up as its documentation says); a difference is printed.
//! `--dir` puts the repositories on that disk (default: the system's temporary directory).

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::too_many_lines)]
#![allow(unreachable_pub)]

mod common;

use common::{fixed_identity, git, git_command, option, option_str};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A shared file: its name, its first content, and the two `sed` insertions a task makes
/// (`N` is the task's number): after which line, what.
struct Language {
    name: &'static str,
    file: &'static str,
    content: &'static str,
    inserts: [(&'static str, &'static str); 2],
}

const LANGUAGES: [Language; 4] = [
    Language {
        name: "Python",
        file: "registry.py",
        content: "import os\n\n__all__ = [\n    \"base\",\n]\n",
        inserts: [
            ("^import os$", "import handlers.hN"),
            ("^__all__ = \\[$", "    \"hN\","),
        ],
    },
    Language {
        name: "Rust",
        file: "lib.rs",
        content: "mod base;\n\nuse std::fmt;\n",
        inserts: [
            ("^mod base;$", "mod hN;"),
            ("^use std::fmt;$", "use crate::hN::Handler as HN;"),
        ],
    },
    Language {
        name: "TypeScript",
        file: "index.ts",
        content: "import { base } from \"./base\";\n\nexport const handlers = {\n  base,\n};\n",
        inserts: [
            ("^import { base }", "import { hN } from \"./hN\";"),
            ("^export const handlers", "  hN,"),
        ],
    },
    Language {
        name: "JSON",
        file: "package.json",
        content: "{\n  \"handlers\": {\n    \"base\": \"base\"\n  },\n  \"dependencies\": {\n    \"base\": \"1.0.0\"\n  }\n}\n",
        inserts: [
            ("\"handlers\": {$", "    \"hN\": \"handlers/hN\","),
            ("\"dependencies\": {$", "    \"hN\": \"1.0.N\","),
        ],
    },
];

const DRIVER: &str = "git merge-file --union %A %O %B";
const MERGIRAF_DRIVER: &str = "merge --git %O %A %B -s %S -x %X -y %Y -p %P -l %L";

#[derive(Clone, Copy, PartialEq)]
enum Way {
    Plain,
    Driver,
    Mergiraf,
}

struct Outcome {
    merged: u64,
    reruns: u64,
    spared: u64,
    wall: f64,
    same_as_git: bool,
}

fn main() {
    let tasks = option("--tasks", 16);
    let jobs = option("--jobs", 4);
    let work_ms = option("--work-ms", 300);
    let rounds = option("--rounds", 3);
    let dir = option_str("--dir", &std::env::temp_dir().to_string_lossy());
    let mergiraf = std::env::var_os("SWARM_BENCH_MERGIRAF")
        .map(PathBuf::from)
        .or_else(|| which("mergiraf"));
    println!(
        "{tasks} tasks, -j {jobs}, {work_ms} ms of work a task, {rounds} round(s), in {dir}; mergiraf: {}",
        mergiraf
            .as_ref()
            .map_or("not found".to_string(), |m| m.display().to_string())
    );
    println!(
        "{:<11} {:<9} {:>7} {:>7} {:>7} {:>18} {:>12}",
        "language", "merge", "merged", "re-runs", "spared", "wall s (min–max)", "= git CLI"
    );
    for lang in &LANGUAGES {
        for way in [Way::Plain, Way::Driver, Way::Mergiraf] {
            if way == Way::Mergiraf && mergiraf.is_none() {
                continue;
            }
            let runs: Vec<Outcome> = (0..rounds)
                .map(|_| round(lang, way, mergiraf.as_deref(), (tasks, jobs, work_ms), &dir))
                .collect();
            let k = runs.len() as f64;
            let mean = |f: fn(&Outcome) -> f64| runs.iter().map(f).sum::<f64>() / k;
            let least = runs.iter().map(|r| r.wall).fold(f64::MAX, f64::min);
            let most = runs.iter().map(|r| r.wall).fold(0.0, f64::max);
            let name = match way {
                Way::Plain => "plain",
                Way::Driver => "driver",
                Way::Mergiraf => "mergiraf",
            };
            println!(
                "{:<11} {name:<9} {:>7.1} {:>7.1} {:>7.1} {:>8.2} ({least:.2}–{most:.2}) {:>12}",
                lang.name,
                mean(|r| r.merged as f64),
                mean(|r| r.reruns as f64),
                mean(|r| r.spared as f64),
                mean(|r| r.wall),
                match runs.iter().all(|r| r.same_as_git) {
                    true => "yes",
                    false => "DIFFERS",
                },
            );
        }
    }
}

/// The worker: after the work, one line in its own file and the two insertions in the shared
/// file, numbered by its file's number.
fn worker(lang: &Language, work_ms: u64) -> String {
    let mut script = format!(
        "sleep {}; n=$(basename \"$SWARM_FILE\" .txt | tr -dc 0-9); echo done >> \"$SWARM_FILE\"",
        work_ms as f64 / 1000.0
    );
    for (after, text) in lang.inserts {
        let after = after.replace('"', "\\\"");
        let text = text.replace('N', "$n").replace('"', "\\\"");
        script.push_str(&format!("; sed -i \"/{after}/a\\\\{text}\" {}", lang.file));
    }
    script
}

/// One run of `tasks` tasks on `lang`'s shared file, merged `way`.
fn round(
    lang: &Language,
    way: Way,
    mergiraf: Option<&Path>,
    (tasks, jobs, work_ms): (u64, u64, u64),
    dir: &str,
) -> Outcome {
    let tmp = tempfile::tempdir_in(dir).unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..tasks {
        std::fs::write(repo.join(format!("h{i:03}.txt")), "task\n").unwrap();
    }
    std::fs::write(repo.join(lang.file), lang.content).unwrap();
    if way == Way::Driver {
        std::fs::write(
            repo.join(".gitattributes"),
            format!("{} merge=u\n", lang.file),
        )
        .unwrap();
        git(&repo, &["config", "merge.u.driver", DRIVER]);
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "generated"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_swarm"));
    cmd.current_dir(&repo)
        .args(["refactor", "x", "*.txt", "-y", "--json", "--scope", "any"])
        .args(["-j", &jobs.to_string(), "--exec", &worker(lang, work_ms)]);
    fixed_identity(&mut cmd);
    if let (Way::Mergiraf, Some(m)) = (way, mergiraf) {
        let path = format!(
            "{}:{}",
            m.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env("PATH", path).args(["--merge-with", "mergiraf"]);
    }
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let wall = started.elapsed().as_secs_f64();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let totals = &report["totals"];
    let attempts: u64 = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["attempts"].as_u64().unwrap())
        .sum();
    let config: Vec<(String, String)> = match (way, mergiraf) {
        (Way::Driver, _) => vec![("merge.u.driver".into(), DRIVER.into())],
        (Way::Mergiraf, Some(m)) => vec![(
            "merge.mergiraf.driver".into(),
            format!("{} {MERGIRAF_DRIVER}", m.display()),
        )],
        _ => Vec::new(),
    };
    let attributes = match way {
        Way::Mergiraf => Some(format!("{} merge=mergiraf\n", lang.file)),
        _ => None,
    };
    let same_as_git = git_cli_tree(&repo, &base, &config, attributes.as_deref())
        == git(&repo, &["rev-parse", "main^{tree}"]);
    Outcome {
        merged: totals["merged"].as_u64().unwrap(),
        reruns: attempts - tasks,
        spared: totals["reruns_spared"].as_u64().unwrap_or(0),
        wall,
        same_as_git,
    }
}

/// The tree the git CLI makes merging, with `git merge --no-ff`, the task commits `main`
/// merged since `base`, in its order, in a clone with `config` (and `attributes` in its
/// `info/attributes`).
fn git_cli_tree(
    repo: &Path,
    base: &str,
    config: &[(String, String)],
    attributes: Option<&str>,
) -> String {
    let clone = repo.with_file_name("oracle");
    git(
        repo.parent().unwrap(),
        &[
            "clone",
            "-q",
            repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    for (key, value) in config {
        git(&clone, &["config", key, value]);
    }
    if let Some(attributes) = attributes {
        std::fs::write(clone.join(".git/info/attributes"), attributes).unwrap();
    }
    git(&clone, &["checkout", "-q", "-B", "oracle", base]);
    let log = git(
        &clone,
        &[
            "log",
            "--first-parent",
            "--reverse",
            "--format=%P",
            &format!("{base}..origin/main"),
        ],
    );
    for parents in log.lines() {
        let task = parents.split(' ').nth(1).unwrap();
        let merged = git_command(&clone)
            .args(["merge", "-q", "--no-ff", "--no-edit", task])
            .output()
            .unwrap();
        if !merged.status.success() {
            return format!("git merge of {task} conflicted");
        }
    }
    git(&clone, &["rev-parse", "HEAD^{tree}"])
}

/// `program` on `PATH`.
fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}
