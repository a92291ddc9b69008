//! All local repository work, through git2; only network operations run `git`.
//!
//! - [`repo`]: opening the user's repository and the checks that refuse bad input.
//! - [`worktree`]: the pool of reusable worktrees, one per running worker.
//! - [`commit`]: committing what a worker changed on its task branch.
//! - [`merge`]: the merge train, in memory, onto the integration branch.
//! - [`finish`]: moving the target branch once, and cleanup; [`checkout`]: the user's
//!   checkout moving with it, all or nothing.
//! - [`shard`]: shard records, and `git fetch`/`git push` (the only git processes).

pub mod checkout;
pub mod commit;
pub mod finish;
pub mod merge;
pub mod repo;
pub mod shard;
pub mod worktree;

use git2::{Repository, Signature};

use crate::repo_path::RepoPath;

/// The identity of commits swarm makes: `GIT_AUTHOR_*`/`GIT_COMMITTER_*` like git, else
/// `user.name`/`user.email`, else `swarm <swarm@localhost>`.
pub fn signature(repo: &Repository) -> Result<Signature<'static>, git2::Error> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(name), Some(email)) = (
        var("GIT_COMMITTER_NAME").or_else(|| var("GIT_AUTHOR_NAME")),
        var("GIT_COMMITTER_EMAIL").or_else(|| var("GIT_AUTHOR_EMAIL")),
    ) {
        return Signature::now(&name, &email);
    }
    repo.signature()
        .map(|s| s.to_owned())
        .or_else(|_| Signature::now("swarm", "swarm@localhost"))
}

/// Paths that differ between two trees (both sides of renames; no rename detection).
pub fn changed_paths(
    repo: &Repository,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
) -> Result<Vec<RepoPath>, git2::Error> {
    let diff = repo.diff_tree_to_tree(Some(old), Some(new), None)?;
    let mut paths = Vec::new();
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            if file.id().is_zero() {
                continue;
            }
            if let Some(p) = file.path_bytes() {
                paths.push(RepoPath::from_bytes(p.to_vec()));
            }
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// `base` with every path in `paths` set to its entry in `from` (or removed).
pub fn apply_paths(
    repo: &Repository,
    paths: &[RepoPath],
    from: &git2::Tree<'_>,
    base: &git2::Tree<'_>,
) -> Result<git2::Oid, git2::Error> {
    let mut update = git2::build::TreeUpdateBuilder::new();
    for path in paths {
        match from.get_path(path.as_path()) {
            Ok(entry) => update.upsert(path.as_bytes(), entry.id(), file_mode(entry.filemode())),
            Err(e) if e.code() == git2::ErrorCode::NotFound => update.remove(path.as_bytes()),
            Err(e) => return Err(e),
        };
    }
    update.create_updated(repo, base)
}

/// The mode of a tree entry, from its raw value.
pub fn file_mode(raw: i32) -> git2::FileMode {
    match raw {
        0o100755 => git2::FileMode::BlobExecutable,
        0o120000 => git2::FileMode::Link,
        0o160000 => git2::FileMode::Commit,
        0o040000 => git2::FileMode::Tree,
        _ => git2::FileMode::Blob,
    }
}

/// A pathspec for libgit2 that matches exactly `path` (and what is below it): every character
/// its pattern parser or `fnmatch` would read specially is escaped. (libgit2's
/// `DISABLE_PATHSPEC_MATCH` still parses the pattern, and then misses names with a
/// backslash.)
pub fn literal_pathspec(path: &RepoPath) -> Vec<u8> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() + 4);
    for (i, &b) in bytes.iter().enumerate() {
        let leading = i == 0 && matches!(b, b'!' | b'#');
        if leading || matches!(b, b'\\' | b'*' | b'?' | b'[' | b']') || b.is_ascii_whitespace() {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// Full ref name of a branch.
pub fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_pathspecs_escape_what_libgit2_would_read() {
        let spec = |p: &str| String::from_utf8(literal_pathspec(&RepoPath::from(p))).unwrap();
        assert_eq!(spec("src/a.rs"), "src/a.rs");
        assert_eq!(spec("a\\b.txt"), "a\\\\b.txt");
        assert_eq!(spec("!x [1]*?.txt"), "\\!x\\ \\[1\\]\\*\\?.txt");
        assert_eq!(spec("#notes"), "\\#notes");
    }
}
