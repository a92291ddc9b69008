//! `--split llm`: a planner model groups the candidate files into tasks.
//!
//! The planner gets the instruction and each candidate file (path, size, a short outline)
//! and answers by calling one function tool, `submit_plan`: tasks with their files and an
//! instruction each, and files to skip with a reason. swarm checks the answer: every file
//! must be a candidate, in at most one task (or skipped), and every candidate must be
//! accounted for. A bad answer gets one corrective round with the problems listed; a second
//! bad answer is an error (exit 2), and nothing has been created by then.

use std::collections::{BTreeMap, BTreeSet};

use git2::{Repository, Tree};
use serde::Deserialize;
use serde_json::{Value, json};

use super::PlanError;
use super::{SkippedFile, Task, task_id};
use crate::model::client::ChatClient;
use crate::repo_path::RepoPath;

/// More candidates than this do not fit a planner's prompt: narrow the pathspec.
pub(crate) const MAX_CANDIDATES: usize = 2000;
/// Lines of outline per file, and characters per outline line.
const OUTLINE_LINES: usize = 6;
const OUTLINE_CHARS: usize = 100;

/// One file the planner may put in a task.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub path: RepoPath,
    pub size: u64,
    pub outline: Vec<String>,
}

/// The planner's plan, checked.
#[derive(Debug)]
pub(crate) struct Split {
    pub tasks: Vec<Task>,
    pub skipped: Vec<SkippedFile>,
}

/// The candidates for `files` at `tree`: sizes and outlines (the lines that declare
/// something, else the first lines).
pub(crate) fn candidates(
    repo: &Repository,
    tree: &Tree<'_>,
    files: &[RepoPath],
) -> Result<Vec<Candidate>, PlanError> {
    if files.len() > MAX_CANDIDATES {
        return Err(PlanError::TooManyForPlanner {
            max: MAX_CANDIDATES,
            selected: files.len(),
        });
    }
    let declares = regex::Regex::new(
        r"^\s*(pub(\([^)]*\))?\s+)?(async\s+)?(fn|def|class|struct|enum|trait|impl|interface|function|export|type|mod|module|package|func)\b",
    )
    .map_err(anyhow::Error::from)?;
    let mut out = Vec::with_capacity(files.len());
    for path in files {
        let blob = tree
            .get_path(path.as_path())?
            .to_object(repo)?
            .peel_to_blob()?;
        let text = String::from_utf8_lossy(blob.content());
        let short = |l: &str| l.trim_end().chars().take(OUTLINE_CHARS).collect::<String>();
        let mut outline: Vec<String> = text
            .lines()
            .filter(|l| declares.is_match(l))
            .take(OUTLINE_LINES)
            .map(short)
            .collect();
        if outline.is_empty() {
            outline = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(3)
                .map(short)
                .collect();
        }
        out.push(Candidate {
            path: path.clone(),
            size: blob.size() as u64,
            outline,
        });
    }
    Ok(out)
}

#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    tasks: Vec<AnswerTask>,
    #[serde(default)]
    skipped: Vec<AnswerSkip>,
}

#[derive(Debug, Deserialize)]
struct AnswerTask {
    files: Vec<String>,
    #[serde(default)]
    instruction: String,
}

#[derive(Debug, Deserialize)]
struct AnswerSkip {
    file: String,
    #[serde(default)]
    reason: String,
}

fn submit_plan_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "submit_plan",
        "description": "Submit the plan: the tasks (each a group of files one worker changes together, with a specific instruction) and the files that need no change.",
        "parameters": {"type": "object", "properties": {
            "tasks": {"type": "array", "items": {"type": "object", "properties": {
                "files": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                          "description": "repository-relative paths, from the candidate list"},
                "instruction": {"type": "string", "description": "what to do in these files, specifically"}},
                "required": ["files", "instruction"], "additionalProperties": false}},
            "skipped": {"type": "array", "items": {"type": "object", "properties": {
                "file": {"type": "string"},
                "reason": {"type": "string"}},
                "required": ["file", "reason"], "additionalProperties": false}}},
            "required": ["tasks", "skipped"], "additionalProperties": false}}}])
}

fn prompt(instruction: &str, candidates: &[Candidate]) -> Vec<Value> {
    let mut list = String::new();
    for c in candidates {
        list.push_str(&format!("- {} ({} bytes)\n", c.path.display(), c.size));
        for line in &c.outline {
            list.push_str(&format!("    {line}\n"));
        }
    }
    vec![
        json!({"role": "system", "content":
            "You plan a change that many workers will apply to a repository in parallel, one \
             task each, every task in its own copy and merged afterwards. Group the candidate \
             files into tasks: files that must change together (a definition and the code that \
             only makes sense with it, a module and its tests) belong to one task; otherwise \
             prefer small tasks, one file each. Give each task a short, specific instruction. \
             Put files that need no change in `skipped` with a reason. Every candidate file \
             must appear exactly once, in one task or in skipped. Answer by calling \
             submit_plan."}),
        json!({"role": "user", "content": format!(
            "Instruction:\n{instruction}\n\nCandidate files (path, size, outline):\n{list}")}),
    ]
}

/// Checks an answer against the candidates; the problems, if any.
fn check(answer: &Answer, candidates: &[Candidate]) -> Result<(), Vec<String>> {
    let known: BTreeSet<String> = candidates.iter().map(|c| c.path.display()).collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, task) in answer.tasks.iter().enumerate() {
        if task.files.is_empty() {
            problems.push(format!("task {} has no files", i + 1));
        }
        for f in &task.files {
            if !known.contains(f) {
                problems.push(format!(
                    "task {} lists {f}, which is not a candidate file",
                    i + 1
                ));
            } else if let Some(first) = seen.insert(f, i + 1) {
                problems.push(format!(
                    "{f} is in task {first} and in task {} (a file belongs to one task)",
                    i + 1
                ));
            }
        }
    }
    for s in &answer.skipped {
        if !known.contains(&s.file) {
            problems.push(format!(
                "skipped lists {}, which is not a candidate",
                s.file
            ));
        } else if let Some(task) = seen.insert(&s.file, 0) {
            problems.push(match task {
                0 => format!("{} is skipped twice", s.file),
                t => format!("{} is both in task {t} and skipped", s.file),
            });
        }
    }
    let missing: Vec<&String> = known
        .iter()
        .filter(|f| !seen.contains_key(f.as_str()))
        .collect();
    if !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().take(20).map(|s| s.as_str()).collect();
        problems.push(format!(
            "{} candidate file(s) are in no task and not skipped: {}{}",
            missing.len(),
            shown.join(", "),
            if missing.len() > 20 { ", …" } else { "" }
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Asks the planner for a split of `candidates`; one corrective round for a bad answer.
pub(crate) async fn split(
    client: &ChatClient,
    instruction: &str,
    candidates: &[Candidate],
) -> Result<Split, PlanError> {
    let tools = submit_plan_tool();
    let mut messages = prompt(instruction, candidates);
    let mut last_problems = Vec::new();
    for round in 1..=2u32 {
        let reply = client
            .chat(&messages, &tools, round, &|n| {
                tracing::info!("planner: retry {} in {:?}: {}", n.attempt, n.wait, n.reason)
            })
            .await
            .map_err(|e| PlanError::Planner(e.to_string()))?;
        let call = reply.tool_calls.iter().find(|c| c.name == "submit_plan");
        messages.push(reply.to_message());
        let parsed = match call {
            None => Err(vec!["the answer did not call submit_plan".to_string()]),
            Some(call) => serde_json::from_str::<Answer>(&call.arguments)
                .map_err(|e| vec![format!("the submit_plan arguments are not valid: {e}")])
                .and_then(|a| check(&a, candidates).map(|()| a)),
        };
        match parsed {
            Ok(answer) => return Ok(into_split(answer, instruction)),
            Err(problems) => {
                tracing::info!("planner round {round}: {problems:?}");
                let text = format!(
                    "error: the plan is not valid:\n- {}\nCall submit_plan again with a corrected, complete plan.",
                    problems.join("\n- ")
                );
                // Every tool call gets its answer; then the correction.
                for c in &reply.tool_calls {
                    messages.push(json!({"role": "tool", "tool_call_id": c.id, "content": text}));
                }
                if reply.tool_calls.is_empty() {
                    messages.push(json!({"role": "user", "content": text}));
                }
                last_problems = problems;
            }
        }
    }
    Err(PlanError::PlannerInvalid(last_problems.join("; ")))
}

fn into_split(answer: Answer, _instruction: &str) -> Split {
    let tasks = answer
        .tasks
        .into_iter()
        .map(|t| {
            let files: Vec<RepoPath> = t.files.iter().map(|f| RepoPath::from(f.as_str())).collect();
            let own = t.instruction.trim();
            Task {
                id: task_id(&files),
                files,
                instruction: (!own.is_empty()).then(|| own.to_string()),
            }
        })
        .collect();
    let skipped = answer
        .skipped
        .into_iter()
        .map(|s| SkippedFile {
            file: RepoPath::from(s.file.as_str()),
            reason: s.reason,
        })
        .collect();
    Split { tasks, skipped }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(paths: &[&str]) -> Vec<Candidate> {
        paths
            .iter()
            .map(|p| Candidate {
                path: RepoPath::from(*p),
                size: 1,
                outline: Vec::new(),
            })
            .collect()
    }

    fn answer(tasks: &[&[&str]], skipped: &[&str]) -> Answer {
        Answer {
            tasks: tasks
                .iter()
                .map(|fs| AnswerTask {
                    files: fs.iter().map(|f| f.to_string()).collect(),
                    instruction: "x".into(),
                })
                .collect(),
            skipped: skipped
                .iter()
                .map(|f| AnswerSkip {
                    file: f.to_string(),
                    reason: "r".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_valid_plan_accounts_for_every_file_once() {
        let c = cands(&["a", "b", "c"]);
        assert!(check(&answer(&[&["a", "b"]], &["c"]), &c).is_ok());
        let twice = check(&answer(&[&["a"], &["a", "b"]], &["c"]), &c).unwrap_err();
        assert!(
            twice[0].contains("a is in task 1 and in task 2"),
            "{twice:?}"
        );
        let unknown = check(&answer(&[&["a", "b", "c", "zz"]], &[]), &c).unwrap_err();
        assert!(unknown[0].contains("zz"), "{unknown:?}");
        let missing = check(&answer(&[&["a"]], &[]), &c).unwrap_err();
        assert!(missing[0].contains("2 candidate file(s)"), "{missing:?}");
        let both = check(&answer(&[&["a", "b", "c"]], &["c"]), &c).unwrap_err();
        assert!(both[0].contains("both in task 1 and skipped"), "{both:?}");
    }
}
