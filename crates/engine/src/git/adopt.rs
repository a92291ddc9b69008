//! What swarm keeps of a worker's own git work, done in copy-on-write views of the repository
//! ([`swarm_sandbox::git_view`]): the commits on the task's branch. They become the
//! task branch's (where the worktree's commit goes on top), as a worker's commits do with the
//! sandbox off, and every object they need is copied into the repository by its content,
//! checked against its id. Everything else the worker's git wrote stays in its layers and
//! goes with them; other branches it made are named. A moved HEAD is reported: the task then
//! fails, with what the worker left in its worktree (committed elsewhere or not) committed on
//! its task branch, as with the sandbox off.

use std::io::Read as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::Path;

use git2::{ObjectType, Odb, Oid, Repository};

/// The upper layers of a worker's views, as [`adopt`] reads them.
pub(crate) struct Layers<'a> {
    pub objects: &'a Path,
    pub refs: &'a Path,
    pub admin: &'a Path,
}

/// What the worker's git did that swarm keeps or reports.
#[derive(Debug, Default)]
pub(crate) struct Adopted {
    /// The task branch's new tip (the worker's last commit), when it committed.
    pub tip: Option<Oid>,
    /// Branches (and other refs) the worker made or changed besides its own: not kept.
    pub other_refs: Vec<String>,
    /// Where the worker moved HEAD (another branch, a commit), if it did.
    pub moved_head: Option<String>,
}

/// Why the worker's git work cannot be kept; the task fails with it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotAdopted {
    #[error("the worker deleted its task branch")]
    DeletedBranch,
    #[error("the worker's git holds a broken object or ref: {0}")]
    Broken(String),
    #[error(transparent)]
    Git(#[from] git2::Error),
}

/// Adopts the commits a worker made on `branch` (`swarm/<RUN>/<TASK>`, started at `start`)
/// into `repo` from `layers`.
pub(crate) fn adopt(
    repo: &Repository,
    layers: &Layers<'_>,
    branch: &str,
    start: Oid,
) -> Result<Adopted, NotAdopted> {
    let wanted = format!("ref: refs/heads/{branch}");
    let moved_head = match read_small(&layers.admin.join("HEAD")) {
        Entry::Missing => None,
        Entry::File(text) if text.trim() == wanted => None,
        Entry::File(text) => {
            let text = text.trim();
            let now = match text.strip_prefix("ref: refs/heads/") {
                Some(other) => other.to_string(),
                None => format!("detached at {}", text.chars().take(10).collect::<String>()),
            };
            Some(now.chars().take(100).collect())
        }
        Entry::Gone | Entry::Other => Some("nothing".into()),
    };
    let mut adopted = Adopted {
        other_refs: other_refs(layers.refs, branch),
        moved_head,
        ..Adopted::default()
    };
    let tip = match read_small(&layers.refs.join("heads").join(branch)) {
        Entry::Missing => return Ok(adopted),
        Entry::Gone => return Err(NotAdopted::DeletedBranch),
        Entry::Other => return Err(NotAdopted::Broken(format!("refs/heads/{branch}"))),
        Entry::File(text) => Oid::from_str(text.trim())
            .map_err(|_| NotAdopted::Broken(format!("refs/heads/{branch}")))?,
    };
    if tip == start {
        return Ok(adopted);
    }
    copy_commits(repo, layers.objects, tip)?;
    repo.reference(
        &super::branch_ref(branch),
        tip,
        true,
        "swarm: the worker's own commits",
    )?;
    adopted.tip = Some(tip);
    Ok(adopted)
}

/// Copies every object reachable from `tip` that `repo` lacks from the worker's object
/// layer, by content: an object whose content does not hash to its name is refused.
fn copy_commits(repo: &Repository, objects: &Path, tip: Oid) -> Result<(), NotAdopted> {
    let main = repo.odb()?;
    let worker = Odb::new()?;
    let path = objects
        .to_str()
        .ok_or_else(|| NotAdopted::Broken("a layer path that is not UTF-8".into()))?;
    worker.add_disk_alternate(path)?;
    // Depth first from the tip; an object the repository has already has everything below
    // it (the start commit and its history, the trees of files nobody changed).
    let mut pending = vec![tip];
    let mut seen = std::collections::HashSet::new();
    while let Some(id) = pending.pop() {
        if !seen.insert(id) || main.exists(id) {
            continue;
        }
        let obj = worker.read(id)?;
        if main.write(obj.kind(), obj.data())? != id {
            return Err(NotAdopted::Broken(format!("object {id}")));
        }
        match obj.kind() {
            ObjectType::Commit => {
                let commit = repo.find_commit(id)?;
                pending.push(commit.tree_id());
                pending.extend(commit.parent_ids());
            }
            ObjectType::Tree => {
                let tree = repo.find_tree(id)?;
                // A submodule's commit is not an object of this repository.
                pending.extend(
                    tree.iter()
                        .filter(|e| e.filemode() != 0o160000)
                        .map(|e| e.id()),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// A ref or HEAD file as the layer holds it.
enum Entry {
    /// Not in the layer: unchanged.
    Missing,
    /// A whiteout: deleted in the view.
    Gone,
    File(String),
    /// A link, a folder, something too long.
    Other,
}

fn read_small(path: &Path) -> Entry {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Entry::Missing;
    };
    if meta.file_type().is_char_device() {
        return Entry::Gone;
    }
    if !meta.is_file() || meta.len() > 1024 {
        return Entry::Other;
    }
    let mut text = String::new();
    match std::fs::File::open(path).and_then(|f| f.take(1024).read_to_string(&mut text)) {
        Ok(_) => Entry::File(text),
        Err(_) => Entry::Other,
    }
}

/// The refs the worker made or changed besides `refs/heads/<branch>`.
fn other_refs(refs: &Path, branch: &str) -> Vec<String> {
    let own = Path::new("heads").join(branch);
    let mut found = Vec::new();
    let mut pending = vec![refs.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(path),
                Ok(t) if t.is_file() => {
                    let rel = path.strip_prefix(refs).unwrap_or(&path);
                    if rel != own && rel.extension().is_none_or(|e| e != "lock") {
                        found.push(format!("refs/{}", rel.display()));
                    }
                }
                _ => {}
            }
        }
    }
    found.sort();
    found
}
