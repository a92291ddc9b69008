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
    without_reflogs(&repo).with_context(|| format!("cannot open worktree {name}"))?;
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

unsafe extern "C" {
    /// libgit2's `git_config_backend_from_string` (`git2/sys/config.h`): a read-only
    /// configuration held in memory, parsed from `cfg`. git2 does not wrap it.
    fn git_config_backend_from_string(
        out: *mut *mut libgit2_sys::git_config_backend,
        cfg: *const std::ffi::c_char,
        len: usize,
        opts: *const std::ffi::c_void,
    ) -> std::ffi::c_int;
}

/// Makes the references swarm moves through `repo` for its tasks (the task branch, made by the
/// pool and committed to in its worktree; the worktree's `HEAD`, pointed at it and detached
/// again) keep no reflog: a read-only `core.logAllRefUpdates = false` in memory, above every
/// configuration file, for this handle only. Those reflogs were a file made per task and four
/// entries appended, each after looking for its file first, for references that go at the
/// end of the run with their logs; the user's branches are moved through other handles and
/// keep theirs.
pub(super) fn without_reflogs(repo: &Repository) -> Result<(), git2::Error> {
    use git2::Binding as _;
    const NO_REFLOGS: &str = "[core]\n\tlogAllRefUpdates = false\n";
    let config = repo.config()?;
    let mut backend = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and a buffer of the given length; no options.
    let rc = unsafe {
        git_config_backend_from_string(
            &mut backend,
            NO_REFLOGS.as_ptr().cast(),
            NO_REFLOGS.len(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(git2::Error::last_error(rc));
    }
    // SAFETY: live handles; on success the configuration owns the backend.
    let rc = unsafe {
        libgit2_sys::git_config_add_backend(
            config.raw(),
            backend,
            libgit2_sys::GIT_CONFIG_LEVEL_APP,
            repo.raw(),
            0,
        )
    };
    if rc != 0 {
        let error = git2::Error::last_error(rc);
        // SAFETY: the backend was not taken, so it is still ours to free.
        if let Some(free) = unsafe { (*backend).free } {
            free(backend);
        }
        return Err(error);
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worktree_handle_moves_references_without_reflogs_and_others_keep_them() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        repo.config()
            .unwrap()
            .set_bool("core.logAllRefUpdates", true)
            .unwrap();
        let tree = repo.treebuilder(None).unwrap().write().unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let sig = git2::Signature::now("s", "s@example.com").unwrap();
        let first = repo.commit(None, &sig, &sig, "1", &tree, &[]).unwrap();
        let quiet = Repository::open(dir.path()).unwrap();
        without_reflogs(&quiet).unwrap();
        quiet
            .reference("refs/heads/task", first, false, "made")
            .unwrap();
        quiet
            .reference_symbolic("HEAD", "refs/heads/task", true, "on")
            .unwrap();
        let parent = quiet.find_commit(first).unwrap();
        let tree = quiet.find_tree(tree.id()).unwrap();
        quiet
            .commit(Some("HEAD"), &sig, &sig, "2", &tree, &[&parent])
            .unwrap();
        quiet.set_head_detached(first).unwrap();
        let logs = dir.path().join(".git/logs");
        assert!(!logs.join("refs/heads/task").exists());
        assert!(!logs.join("HEAD").exists());
        // Settings are still read and written as before, through the files.
        assert!(
            quiet
                .config()
                .unwrap()
                .get_bool("core.logAllRefUpdates")
                .is_ok_and(|v| !v)
        );
        quiet.config().unwrap().set_str("swarm.probe", "x").unwrap();
        assert_eq!(
            repo.config()
                .unwrap()
                .snapshot()
                .unwrap()
                .get_str("swarm.probe")
                .unwrap(),
            "x"
        );
        // Another handle on the same repository keeps its reflogs.
        repo.reference("refs/heads/user", first, false, "made")
            .unwrap();
        assert!(logs.join("refs/heads/user").exists());
    }
}
