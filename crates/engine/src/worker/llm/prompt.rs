//! What the model is told.

use crate::repo_path::RepoPath;

pub(crate) fn system(scope_task: bool) -> String {
    let scope = if scope_task {
        "Change only the files listed for this task; writes to other files are refused."
    } else {
        "Change the listed files; change other files only where the instruction needs it."
    };
    format!(
        "You are a careful software engineer working on one small task of a larger change that \
         is being applied across a repository by many workers at once. Each worker has its own \
         copy of the repository; your edits are committed and merged automatically.\n\n\
         - Work only on your task. {scope}\n\
         - Use the tools: read a file before you edit it; make exact, minimal edits with \
         edit_file (or write_file for a new file); keep the existing style.\n\
         - Paths are relative to the repository root.\n\
         - When the task is complete, call finish with status done and a one-sentence summary. \
         If the files need no change, call finish with status no_change. If the task cannot be \
         done, call finish with status failed and say why.\n\
         - Do not ask questions: nobody will answer. Do not stop without calling finish."
    )
}

/// The first user message: the instruction verbatim, the task's files, and context.
pub(crate) fn task_message(
    instruction: &str,
    files: &[RepoPath],
    context: Option<&str>,
    agents_md: Option<&str>,
) -> String {
    let mut text = format!("Instruction:\n{instruction}\n\nFiles of this task:\n");
    for f in files {
        text.push_str(&format!("- {}\n", f.display()));
    }
    if let Some(context) = context {
        text.push_str(&format!("\nContext:\n{}\n", context.trim()));
    }
    if let Some(agents) = agents_md {
        text.push_str(&format!(
            "\nProject notes (AGENTS.md of the repository):\n{}\n",
            agents.trim()
        ));
    }
    text
}
