//! The tools of the built-in worker (docs/LLM.md), confined to the task's worktree.
//!
//! Every path is relative to the worktree. A path that is absolute, climbs out with `..`,
//! leads out through a symlink, or goes into `.git`, gets a result starting with `error:` and
//! nothing happens; with `--scope task`, so does a write to a file that is not one of the
//! task's. Bad arguments (invalid JSON, a missing field, an unknown tool) also get `error:`
//! results, so the model can correct itself and the loop goes on.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::repo_path::RepoPath;

/// Lines `read_file` returns when no `limit` is given.
const READ_LINES: usize = 400;
/// Characters any one tool result may have.
const RESULT_CHARS: usize = 30_000;
const LIST_MAX: usize = 500;
const SEARCH_MAX: usize = 200;

/// The JSON-schema definitions of the tools, as sent to the model; `run` only when some
/// command may be run.
pub(crate) fn definitions(with_run: bool) -> Value {
    let tool = |name: &str, description: &str, parameters: Value| {
        json!({"type": "function", "function": {
            "name": name, "description": description, "parameters": parameters}})
    };
    let mut tools = json!([
        tool(
            "read_file",
            "Read a text file of the repository, with line numbers. Large files come in pages: pass offset (1-based line) and limit (lines).",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "path relative to the repository root"},
                "offset": {"type": "integer", "minimum": 1, "description": "first line to read (default 1)"},
                "limit": {"type": "integer", "minimum": 1, "description": "number of lines (default 400)"}},
                "required": ["path"], "additionalProperties": false})
        ),
        tool(
            "edit_file",
            "Replace an exact piece of text in a file. old_string must match the file exactly (whitespace included) and be unique unless replace_all is true.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string", "description": "the exact text to replace"},
                "new_string": {"type": "string", "description": "the text to put instead"},
                "replace_all": {"type": "boolean", "description": "replace every occurrence (default false)"}},
                "required": ["path", "old_string", "new_string"], "additionalProperties": false})
        ),
        tool(
            "write_file",
            "Create a file, or replace its whole content.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}},
                "required": ["path", "content"], "additionalProperties": false})
        ),
        tool(
            "list_files",
            "List the files under a directory of the repository (default: the root), respecting .gitignore.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "directory relative to the repository root"}},
                "additionalProperties": false})
        ),
        tool(
            "search",
            "Search the repository's files (respecting .gitignore) for a regular expression; returns path:line: text.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "a regular expression (Rust syntax)"},
                "path": {"type": "string", "description": "a file or directory to search in (default: the root)"}},
                "required": ["pattern"], "additionalProperties": false})
        ),
        tool(
            "finish",
            "End the task. status done: the change is made; no_change: nothing needed changing; failed: it cannot be done (say why in summary).",
            json!({"type": "object", "properties": {
                "status": {"type": "string", "enum": ["done", "no_change", "failed"]},
                "summary": {"type": "string", "description": "what was done, in one or two sentences"}},
                "required": ["status", "summary"], "additionalProperties": false})
        ),
    ]);
    if with_run && let Some(list) = tools.as_array_mut() {
        list.insert(5, tool(
            "run",
            "Run a shell command in the repository (sandboxed: no network, writes only inside the repository). Only approved commands run; others are refused.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "the command line, run with sh -c"}},
                "required": ["command"], "additionalProperties": false}),
        ));
    }
    tools
}

/// What a tool call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// What the tool did or read, for the model.
    Text(String),
    /// Why the tool did nothing; the model reads it as `error: …`.
    Failed(String),
    /// `finish` was called.
    Finish {
        status: FinishStatus,
        summary: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FinishStatus {
    Done,
    NoChange,
    Failed,
}

/// The worktree a task's tools may touch.
pub(crate) struct Workspace {
    root: PathBuf,
    /// With `--scope task`: the only files that may be written.
    writable: Option<BTreeSet<Vec<u8>>>,
    /// What the tools wrote.
    pub(crate) written: super::written::Written,
}

macro_rules! error {
    ($($arg:tt)*) => {
        Outcome::Failed(format!($($arg)*))
    };
}

impl Outcome {
    /// The text the model gets back for this call.
    pub(crate) fn for_model(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Outcome::Text(text) => text.into(),
            Outcome::Failed(why) => format!("error: {why}").into(),
            Outcome::Finish { .. } => "finish recorded".into(),
        }
    }
}

impl Workspace {
    pub(crate) fn new(root: &Path, task_files: Option<&[RepoPath]>) -> std::io::Result<Self> {
        let root = root.canonicalize()?;
        Ok(Self {
            written: super::written::Written::new(root.clone()),
            root,
            writable: task_files.map(|f| f.iter().map(|p| p.as_bytes().to_vec()).collect()),
        })
    }

    /// Runs one tool call.
    pub(crate) fn call(&self, name: &str, arguments: &str) -> Outcome {
        let args: Value = match serde_json::from_str(if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        }) {
            Ok(v) => v,
            Err(e) => {
                return error!(
                    "the arguments of {name} are not valid JSON ({e}); send a JSON object like {{\"path\": \"src/lib.rs\"}}"
                );
            }
        };
        match name {
            "read_file" => self.read_file(&args),
            "edit_file" => self.edit_file(&args),
            "write_file" => self.write_file(&args),
            "list_files" => self.list_files(&args),
            "search" => self.search(&args),
            "finish" => finish(&args),
            other => error!(
                "there is no tool named '{other}'; the tools are read_file, edit_file, write_file, list_files, search, finish (and run, where allowed)"
            ),
        }
    }

    /// The text of file `rel` of the worktree (such as AGENTS.md), if it is one there and not
    /// a link leading elsewhere; at most `RESULT_CHARS` bytes of it.
    pub(crate) fn read_text(&self, rel: &str) -> Option<String> {
        use std::io::Read as _;
        let path = self.resolve(rel).ok()?;
        let file = std::fs::File::open(path).ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(RESULT_CHARS as u64)
            .read_to_end(&mut bytes)
            .ok()?;
        text_of(bytes)
    }

    /// The absolute path of `rel` if it stays inside the worktree (and outside `.git`).
    fn resolve(&self, rel: &str) -> Result<PathBuf, String> {
        let rel_path = Path::new(rel);
        let mut clean = PathBuf::new();
        for c in rel_path.components() {
            match c {
                Component::Normal(part) => {
                    if part == ".git" {
                        return Err(format!("'{rel}' is inside .git, which is off limits"));
                    }
                    clean.push(part);
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(format!(
                        "'{rel}' uses '..'; paths are relative to the repository root and stay inside it"
                    ));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!(
                        "'{rel}' is an absolute path; use a path relative to the repository root"
                    ));
                }
            }
        }
        let full = self.root.join(&clean);
        // Symlinks: the deepest part that exists must resolve inside the worktree.
        let mut existing = full.as_path();
        while !existing.exists() && existing.symlink_metadata().is_err() {
            match existing.parent() {
                Some(p) => existing = p,
                None => break,
            }
        }
        let real = existing
            .canonicalize()
            .map_err(|_| format!("'{rel}' leads through a broken symlink"))?;
        if !real.starts_with(&self.root) {
            return Err(format!(
                "'{rel}' leads outside the repository (through a symlink)"
            ));
        }
        if real.starts_with(self.root.join(".git")) {
            return Err(format!("'{rel}' is inside .git, which is off limits"));
        }
        Ok(full)
    }

    fn check_writable(&self, rel: &str) -> Result<(), String> {
        let Some(files) = &self.writable else {
            return Ok(());
        };
        let normal: PathBuf = Path::new(rel)
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        if files.contains(normal.as_os_str().as_encoded_bytes()) {
            return Ok(());
        }
        let list: Vec<String> = files
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        Err(format!(
            "'{rel}' is not one of this task's files; only these may be changed: {}",
            list.join(", ")
        ))
    }

    fn read_file(&self, args: &Value) -> Outcome {
        let Some(rel) = args.get("path").and_then(Value::as_str) else {
            return error!("read_file needs a \"path\"");
        };
        let path = match self.resolve(rel) {
            Ok(p) => p,
            Err(e) => return error!("{e}"),
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if path.is_dir() => {
                return error!("'{rel}' is a directory ({e}); use list_files");
            }
            Err(e) => return error!("cannot read '{rel}': {e}"),
        };
        if bytes[..bytes.len().min(8000)].contains(&0) {
            return error!("'{rel}' is a binary file");
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let offset = args
            .get("offset")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as usize;
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map(|l| l.max(1) as usize)
            .unwrap_or(READ_LINES);
        if lines.is_empty() {
            return Outcome::Text(format!("({rel} is empty)"));
        }
        if offset > lines.len() {
            return error!(
                "'{rel}' has {} lines; offset {offset} is past the end",
                lines.len()
            );
        }
        let mut out = String::new();
        let mut last = offset - 1;
        for (i, line) in lines.iter().enumerate().skip(offset - 1).take(limit) {
            let numbered = format!("{:>6}\t{line}\n", i + 1);
            if out.len() + numbered.len() > RESULT_CHARS {
                break;
            }
            out.push_str(&numbered);
            last = i + 1;
        }
        if last < lines.len() {
            out.push_str(&format!(
                "[lines {offset}-{last} of {}; call read_file with offset {} to read on]\n",
                lines.len(),
                last + 1
            ));
        }
        Outcome::Text(out)
    }

    fn edit_file(&self, args: &Value) -> Outcome {
        let (Some(rel), Some(old), Some(new)) = (
            args.get("path").and_then(Value::as_str),
            args.get("old_string").and_then(Value::as_str),
            args.get("new_string").and_then(Value::as_str),
        ) else {
            return error!("edit_file needs \"path\", \"old_string\" and \"new_string\" (strings)");
        };
        let replace_all = args
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let path = match self
            .resolve(rel)
            .and_then(|p| self.check_writable(rel).map(|()| p))
        {
            Ok(p) => p,
            Err(e) => return error!("{e}"),
        };
        if old.is_empty() {
            return error!("old_string is empty; to create or overwrite a file use write_file");
        }
        if old == new {
            return error!("old_string and new_string are the same; nothing would change");
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => return error!("cannot read '{rel}': {e}"),
        };
        let count = text.matches(old).count();
        if count == 0 {
            return error!(
                "old_string was not found in '{rel}'.{} Read the file again and copy the text exactly, whitespace included.",
                nearest_hint(&text, old)
            );
        }
        if count > 1 && !replace_all {
            let lines: Vec<String> = text
                .match_indices(old)
                .take(5)
                .map(|(at, _)| (text[..at].matches('\n').count() + 1).to_string())
                .collect();
            return error!(
                "old_string occurs {count} times in '{rel}' (lines {}); include more surrounding text to make it unique, or pass replace_all: true",
                lines.join(", ")
            );
        }
        let updated = if replace_all {
            text.replace(old, new)
        } else {
            text.replacen(old, new, 1)
        };
        self.written.note(&path);
        if let Err(e) = std::fs::write(&path, updated) {
            return error!("cannot write '{rel}': {e}");
        }
        Outcome::Text(format!(
            "edited {rel}: replaced {} occurrence(s)",
            if replace_all { count } else { 1 }
        ))
    }

    fn write_file(&self, args: &Value) -> Outcome {
        let (Some(rel), Some(content)) = (
            args.get("path").and_then(Value::as_str),
            args.get("content").and_then(Value::as_str),
        ) else {
            return error!("write_file needs \"path\" and \"content\" (strings)");
        };
        let path = match self
            .resolve(rel)
            .and_then(|p| self.check_writable(rel).map(|()| p))
        {
            Ok(p) => p,
            Err(e) => return error!("{e}"),
        };
        if path.is_dir() {
            return error!("'{rel}' is a directory");
        }
        if let Some(parent) = path.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return error!("cannot create the directory of '{rel}': {e}");
        }
        self.written.note(&path);
        match std::fs::write(&path, content) {
            Ok(()) => Outcome::Text(format!("wrote {rel} ({} bytes)", content.len())),
            Err(e) => error!("cannot write '{rel}': {e}"),
        }
    }

    fn walk(&self, rel: &str) -> Result<ignore::Walk, String> {
        let start = self.resolve(rel)?;
        if !start.exists() {
            return Err(format!("'{rel}' does not exist"));
        }
        Ok(ignore::WalkBuilder::new(start)
            .hidden(false)
            .git_ignore(true)
            .require_git(false)
            .filter_entry(|e| e.file_name() != ".git")
            .sort_by_file_name(|a, b| a.cmp(b))
            .build())
    }

    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    fn list_files(&self, args: &Value) -> Outcome {
        let rel = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let walk = match self.walk(rel) {
            Ok(w) => w,
            Err(e) => return error!("{e}"),
        };
        let mut out = Vec::new();
        let mut more = 0;
        for entry in walk.flatten() {
            if entry.depth() == 0 || !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            if out.len() < LIST_MAX {
                out.push(self.relative(entry.path()));
            } else {
                more += 1;
            }
        }
        if out.is_empty() {
            return Outcome::Text(format!("(no files under {rel})"));
        }
        let mut text = out.join("\n");
        if more > 0 {
            text.push_str(&format!("\n[{more} more files; list a subdirectory]"));
        }
        Outcome::Text(text)
    }

    fn search(&self, args: &Value) -> Outcome {
        let Some(pattern) = args.get("pattern").and_then(Value::as_str) else {
            return error!("search needs a \"pattern\"");
        };
        let re = match regex::Regex::new(pattern) {
            Ok(re) => re,
            Err(e) => return error!("invalid regular expression: {e}"),
        };
        let rel = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let walk = match self.walk(rel) {
            Ok(w) => w,
            Err(e) => return error!("{e}"),
        };
        let mut hits = Vec::new();
        let mut more = 0;
        for entry in walk.flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Ok(bytes) = std::fs::read(entry.path()) else {
                continue;
            };
            if bytes[..bytes.len().min(8000)].contains(&0) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            for (n, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    if hits.len() < SEARCH_MAX {
                        let shown: String = line.chars().take(200).collect();
                        hits.push(format!(
                            "{}:{}: {shown}",
                            self.relative(entry.path()),
                            n + 1
                        ));
                    } else {
                        more += 1;
                    }
                }
            }
        }
        if hits.is_empty() {
            return Outcome::Text(format!("no match for /{pattern}/ under {rel}"));
        }
        let mut text = hits.join("\n");
        if more > 0 {
            text.push_str(&format!(
                "\n[{more} more matches; narrow the pattern or the path]"
            ));
        }
        Outcome::Text(text)
    }
}

fn finish(args: &Value) -> Outcome {
    let status = args
        .get("status")
        .cloned()
        .map(serde_json::from_value::<FinishStatus>);
    let Some(Ok(status)) = status else {
        return error!("finish needs \"status\": one of done, no_change, failed");
    };
    let summary = args
        .get("summary")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Outcome::Finish { status, summary }
}

/// Where the text the model wanted probably is: the line most like its first line.
fn nearest_hint(text: &str, wanted: &str) -> String {
    let first = wanted
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if first.is_empty() {
        return String::new();
    }
    let best = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let ratio = similar::TextDiff::from_chars(first, line.trim()).ratio();
            (ratio, i, line)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((ratio, i, line)) if ratio > 0.5 => {
            let shown: String = line.chars().take(200).collect();
            format!(" The closest line is {}: `{shown}`.", i + 1)
        }
        _ => String::new(),
    }
}

/// A file's text as the model is given it ([`Workspace::read_text`]): its first
/// `RESULT_CHARS` bytes, if they are UTF-8.
pub(crate) fn text_of(mut bytes: Vec<u8>) -> Option<String> {
    bytes.truncate(RESULT_CHARS);
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
