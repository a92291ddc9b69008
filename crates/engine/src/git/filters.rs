//! Whether git's checkout filters can change a file of a tree, so that a worktree's checkout
//! may skip them.
//!
//! libgit2 runs two filters on a checkout: end-of-line conversion and `ident`. Before each
//! file it looks up that file's attributes, and each lookup resolves the file's folder with
//! `realpath`, a `readlink` per component of the path: with the built-in worker at `-j 64`,
//! whose every slot is a full checkout, 17 % of swarm's CPU (docs/BENCHMARKS-HISTORY.md).
//! Both filters do nothing unless an attribute asks for them or `core.autocrlf` is on, so
//! when neither can be, the checkout runs with its filters off and writes every file byte
//! for byte as its blob, which is what the filters would have written.
//!
//! Off only when every source of attributes and conversion is known absent, never guessed:
//!
//! - `core.autocrlf` is unset or false, and `extensions.worktreeConfig` is not set (a
//!   worktree's own config could turn it on);
//! - no `info/attributes` in the git directory, no file at `core.attributesFile`, no
//!   `attributes` file in git's user folders (`~/.config/git`), no `gitattributes` in its
//!   system folders (`/etc`), wherever libgit2 itself would look;
//! - no `.gitattributes` anywhere in the tree (every folder is read, once per tree).
//!
//! Anything else (an attribute file that exists, whatever it says; a setting that cannot be
//! read) keeps the filters on, as before.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use git2::{ConfigLevel, Oid, Repository};

/// What a pool of worktrees knows about its repository's checkout filters.
#[derive(Default)]
pub(crate) struct Filters {
    /// No setting or attribute file outside the tree can turn a filter on; read once.
    outside_off: OnceLock<bool>,
    /// Trees without a `.gitattributes`, by id.
    trees: Mutex<HashMap<Oid, bool>>,
}

impl Filters {
    /// Whether a checkout of `tree` in `repo` (a worktree of the pool's repository) may run
    /// with its filters off. Blocking: may read every folder of `tree`.
    pub(crate) fn off_for(&self, repo: &Repository, tree: Oid) -> bool {
        if !*self.outside_off.get_or_init(|| nothing_outside(repo)) {
            return false;
        }
        if let Some(&off) = self.lock().get(&tree) {
            return off;
        }
        let off = !has_gitattributes(repo, tree).unwrap_or(true);
        self.lock().insert(tree, off);
        off
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Oid, bool>> {
        self.trees.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether no attribute can be set, and no filter turned on, for any of `paths` in the
/// checkout of `repo`: nothing outside the tree can, and no folder on the way to one of them
/// holds a `.gitattributes`, in the checkout's files (committed or not) or in its index.
/// Where this is false, each path's attributes are asked for. Blocking.
pub(crate) fn none_for_paths<'a>(
    repo: &Repository,
    paths: impl IntoIterator<Item = &'a crate::repo_path::RepoPath>,
) -> bool {
    let (Some(workdir), Ok(index)) = (repo.workdir(), repo.index()) else {
        return false;
    };
    let mut folders = std::collections::BTreeSet::new();
    for path in paths {
        folders.extend(path.as_path().ancestors().skip(1).map(Path::to_path_buf));
    }
    let attributes_in = |folder: &PathBuf| {
        let file = folder.join(".gitattributes");
        let on_disk = !matches!(
            std::fs::symlink_metadata(workdir.join(&file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound
        );
        on_disk || (0..=3).any(|stage| index.get_path(&file, stage).is_some())
    };
    !folders.iter().any(attributes_in) && nothing_outside(repo)
}

/// No config and no attribute file outside the tree can turn a filter on.
fn nothing_outside(repo: &Repository) -> bool {
    let Ok(config) = repo.config() else {
        return false;
    };
    let autocrlf_off = match config.get_entry("core.autocrlf") {
        Err(e) => e.code() == git2::ErrorCode::NotFound,
        Ok(_) => config.get_bool("core.autocrlf") == Ok(false),
    };
    let worktree_config = config.get_entry("extensions.worktreeConfig").is_ok();
    let mut files: Vec<PathBuf> = vec![repo.commondir().join("info").join("attributes")];
    match config.get_path("core.attributesFile") {
        Ok(path) => files.push(path),
        Err(e) if e.code() == git2::ErrorCode::NotFound => {}
        Err(_) => return false,
    }
    let (Some(user), Some(system)) = (
        search_path(ConfigLevel::XDG),
        search_path(ConfigLevel::System),
    ) else {
        return false;
    };
    files.extend(user.iter().map(|dir| dir.join("attributes")));
    files.extend(system.iter().map(|dir| dir.join("gitattributes")));
    let none_exists = files
        .iter()
        .all(|f| matches!(std::fs::symlink_metadata(f), Err(e) if e.kind() == std::io::ErrorKind::NotFound));
    tracing::debug!(
        autocrlf_off,
        worktree_config,
        none_exists,
        "checkout filters"
    );
    autocrlf_off && !worktree_config && none_exists
}

/// The folders libgit2 searches at `level`, as it was told them (`:`-separated).
fn search_path(level: ConfigLevel) -> Option<Vec<PathBuf>> {
    // SAFETY: swarm never changes libgit2's search paths, so no thread writes them while
    // this reads.
    let joined = unsafe { git2::opts::get_search_path(level) }.ok()?;
    Some(
        joined
            .as_bytes()
            .split(|b| *b == b':')
            .filter(|dir| !dir.is_empty())
            .map(|dir| Path::new(OsStr::from_bytes(dir)).to_path_buf())
            .collect(),
    )
}

/// Whether any folder of `tree` holds a `.gitattributes` (of any kind, in any case: a
/// case-insensitive disk reads `.GitAttributes` as one).
fn has_gitattributes(repo: &Repository, tree: Oid) -> Result<bool, git2::Error> {
    let mut found = false;
    repo.find_tree(tree)?
        .walk(git2::TreeWalkMode::PreOrder, |_, entry| {
            if entry.name_bytes().eq_ignore_ascii_case(b".gitattributes") {
                found = true;
                return git2::TreeWalkResult::Abort;
            }
            git2::TreeWalkResult::Ok
        })
        .or_else(|e| match found {
            true => Ok(()),
            false => Err(e),
        })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository, Oid) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let mut index = repo.index().unwrap();
        for (path, text) in files {
            let at = dir.path().join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(&at, text).unwrap();
            index.add_path(Path::new(path)).unwrap();
        }
        let tree = index.write_tree().unwrap();
        (dir, repo, tree)
    }

    #[test]
    fn a_gitattributes_in_any_folder_keeps_the_filters_on() {
        let (_dir, repo, tree) = repo_with(&[("a.txt", "a\n"), ("x/y/.gitattributes", "* text\n")]);
        assert!(has_gitattributes(&repo, tree).unwrap());
        let (_dir, repo, tree) = repo_with(&[("a.txt", "a\n"), ("x/y/z.txt", "z\n")]);
        assert!(!has_gitattributes(&repo, tree).unwrap());
    }

    #[test]
    fn autocrlf_or_an_info_attributes_file_keeps_the_filters_on() {
        let (dir, repo, tree) = repo_with(&[("a.txt", "a\n")]);
        let plain = nothing_outside(&repo);
        let filters = Filters::default();
        assert_eq!(filters.off_for(&repo, tree), plain);
        repo.config()
            .unwrap()
            .set_str("core.autocrlf", "input")
            .unwrap();
        assert!(!nothing_outside(&repo));
        repo.config()
            .unwrap()
            .set_bool("core.autocrlf", false)
            .unwrap();
        assert_eq!(nothing_outside(&repo), plain);
        std::fs::create_dir_all(dir.path().join(".git/info")).unwrap();
        std::fs::write(dir.path().join(".git/info/attributes"), "").unwrap();
        assert!(!nothing_outside(&repo));
    }
}
