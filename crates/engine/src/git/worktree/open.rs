//! Opening a worktree swarm made, through the record swarm wrote, never through the `.git`
//! file its worker controls.

use std::path::Path;

use anyhow::Context as _;
use git2::Repository;

/// Opens worktree `name` of the repository whose git directory is `common_dir` through its
/// administrative directory, checking that it is the worktree at `path`.
pub(crate) fn open_worktree(
    common_dir: &Path,
    name: &str,
    path: &Path,
) -> anyhow::Result<Repository> {
    let repo = Repository::open(common_dir.join("worktrees").join(name))
        .with_context(|| format!("cannot open worktree {name}"))?;
    crate::git::for_bulk_writes(&repo)?;
    let workdir = repo
        .workdir()
        .map(|w| w.canonicalize().unwrap_or(w.to_path_buf()));
    anyhow::ensure!(
        workdir.as_deref() == Some(path),
        "the record of worktree {name} does not point at {}",
        path.display()
    );
    Ok(repo)
}

/// What the `.git` file at `path` is now, for a message.
pub(super) fn describe_gitlink(path: &Path) -> String {
    match std::fs::symlink_metadata(path) {
        Err(_) => "it is gone".into(),
        Ok(m) if m.is_symlink() => "it is now a symbolic link".into(),
        Ok(m) if m.is_dir() => "it is now a directory".into(),
        Ok(_) => match std::fs::read(path) {
            Ok(text) => format!(
                "it now says {:?}",
                String::from_utf8_lossy(text.trim_ascii())
            ),
            Err(e) => format!("it cannot be read: {e}"),
        },
    }
}
