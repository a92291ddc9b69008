//! Selecting the files of a plan from the tree of the base commit.

use anyhow::Context as _;
use git2::{ObjectType, Oid, Repository, Tree};
use regex::bytes::Regex;

use super::{Pathspec, SkippedFile};
use crate::repo_path::RepoPath;

pub(crate) struct SelectOptions<'a> {
    pub pathspec: &'a Pathspec,
    pub grep: Option<&'a Regex>,
}

/// What the selection kept, and what it passed over (reported, never silently dropped).
#[derive(Debug, Default)]
pub(crate) struct Selection {
    pub files: Vec<RepoPath>,
    /// Tracked files the pathspecs name that cannot be tasks: `binary`, `symlink`,
    /// `submodule`.
    pub skipped: Vec<SkippedFile>,
    /// Files the pathspec matched but `--grep` did not.
    pub not_matching_grep: usize,
}

const MODE_BLOB: i32 = 0o100644;
const MODE_EXEC: i32 = 0o100755;
const MODE_LINK: i32 = 0o120000;
const MODE_COMMIT: i32 = 0o160000;

/// Regular files tracked in `tree` that the pathspec and `--grep` select, in path order.
/// Binary files (git's heuristic), symlinks and submodule entries are skipped.
pub(crate) fn select_files(
    repo: &Repository,
    tree: &Tree<'_>,
    options: &SelectOptions<'_>,
) -> anyhow::Result<Selection> {
    let mut selection = Selection::default();
    let mut candidates = Vec::new();
    walk(repo, tree, &mut Vec::new(), &mut |path, mode, oid| {
        let path = RepoPath::from_bytes(path.to_vec());
        if !options.pathspec.matches(&path) {
            return;
        }
        let skip = |file, reason: &str| SkippedFile {
            file,
            reason: reason.to_string(),
        };
        match mode {
            MODE_BLOB | MODE_EXEC => candidates.push((path, oid)),
            MODE_LINK => selection.skipped.push(skip(path, "symlink")),
            MODE_COMMIT => selection.skipped.push(skip(path, "submodule")),
            _ => {}
        }
    })?;
    for (path, oid) in candidates {
        let blob = repo
            .find_blob(oid)
            .with_context(|| format!("cannot read {path} at the base commit"))?;
        if blob.is_binary() {
            selection.skipped.push(SkippedFile {
                file: path,
                reason: "binary".into(),
            });
            continue;
        }
        if let Some(re) = options.grep
            && !re.is_match(blob.content())
        {
            selection.not_matching_grep += 1;
            continue;
        }
        selection.files.push(path);
    }
    selection.files.sort();
    selection.skipped.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(selection)
}

/// Depth-first walk over a tree giving each non-tree entry's full path as bytes (git2's own
/// walk hands out `&str` roots and cannot name non-UTF-8 directories).
fn walk(
    repo: &Repository,
    tree: &Tree<'_>,
    prefix: &mut Vec<u8>,
    visit: &mut dyn FnMut(&[u8], i32, Oid),
) -> anyhow::Result<()> {
    for entry in tree.iter() {
        let len = prefix.len();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(entry.name_bytes());
        if entry.kind() == Some(ObjectType::Tree) {
            let subtree = repo.find_tree(entry.id())?;
            walk(repo, &subtree, prefix, visit)?;
        } else {
            visit(prefix, entry.filemode(), entry.id());
        }
        prefix.truncate(len);
    }
    Ok(())
}
