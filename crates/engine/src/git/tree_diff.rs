//! What differs between two trees ([`tree_changes`]): the folders on the way to each change,
//! both sides' entries walked together in git's order.

use git2::{Oid, Repository};

use super::{TREE_MODE, TreeChange};
use crate::repo_path::RepoPath;

/// What differs between two trees, sorted by path. Subtrees with the same id on both sides
/// are skipped, so the cost is that of the folders on the way to what changed, not of the
/// trees (libgit2's tree diff walks every entry of both). A path that is a file on one side
/// and a folder on the other is the file's removal (or addition) and each path under the
/// folder, as in git.
pub(crate) fn tree_changes(
    repo: &Repository,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
) -> Result<Vec<TreeChange>, git2::Error> {
    let mut changes = Vec::new();
    diff_level(repo, Some(old), Some(new), &mut Vec::new(), &mut changes)?;
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(changes)
}

type Entry = Option<(Oid, u32)>;

/// The changes between two versions of one folder (`None`: absent on that side), whose path
/// is `prefix` (empty, or ending in `/`). Both sides' entries are walked together in git's
/// order, which trees keep; a tree that does not (one no git writes) is read whole into a map
/// instead, so that it cannot hide a change.
fn diff_level(
    repo: &Repository,
    old: Option<&git2::Tree<'_>>,
    new: Option<&git2::Tree<'_>>,
    prefix: &mut Vec<u8>,
    out: &mut Vec<TreeChange>,
) -> Result<(), git2::Error> {
    if !in_git_order(old) || !in_git_order(new) {
        return diff_level_by_name(repo, (old, new), prefix, out);
    }
    let (mut i, mut j) = (0, 0);
    loop {
        let (was, is) = (old.and_then(|t| t.get(i)), new.and_then(|t| t.get(j)));
        let order = match (&was, &is) {
            (None, None) => return Ok(()),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => git_order(a, b),
        };
        let entry = |e: &git2::TreeEntry<'_>| Some((e.id(), e.filemode() as u32));
        let (name, was, is) = match (order, &was, &is) {
            (std::cmp::Ordering::Less, Some(a), _) => (a.name_bytes(), entry(a), None),
            (std::cmp::Ordering::Greater, _, Some(b)) => (b.name_bytes(), None, entry(b)),
            (_, Some(a), Some(b)) => (a.name_bytes(), entry(a), entry(b)),
            _ => unreachable!("an entry on the side the order names"),
        };
        i += usize::from(order != std::cmp::Ordering::Greater);
        j += usize::from(order != std::cmp::Ordering::Less);
        if was != is {
            one_name(repo, name, (was, is), prefix, out)?;
        }
    }
}

/// How git sorts two entries of a tree: by name, a folder's name as if it ended in `/`.
fn git_order(a: &git2::TreeEntry<'_>, b: &git2::TreeEntry<'_>) -> std::cmp::Ordering {
    let folder = |e: &git2::TreeEntry<'_>| e.filemode() as u32 == TREE_MODE;
    name_order((a.name_bytes(), folder(a)), (b.name_bytes(), folder(b)))
}

/// How git sorts two names of a tree, each with whether it is a folder's: byte by byte, a
/// folder's name as if it ended in `/`, a name before any longer one it begins.
pub(super) fn name_order((an, af): (&[u8], bool), (bn, bf): (&[u8], bool)) -> std::cmp::Ordering {
    let common = an.len().min(bn.len());
    match an[..common].cmp(&bn[..common]) {
        std::cmp::Ordering::Equal => {}
        order => return order,
    }
    let a = an[common..].iter().copied().chain(af.then_some(b'/'));
    let b = bn[common..].iter().copied().chain(bf.then_some(b'/'));
    a.cmp(b)
}

/// Whether `tree`'s entries are in strictly increasing git order (no name twice).
fn in_git_order(tree: Option<&git2::Tree<'_>>) -> bool {
    tree.is_none_or(|t| {
        (1..t.len()).all(|k| match (t.get(k - 1), t.get(k)) {
            (Some(a), Some(b)) => git_order(&a, &b).is_lt(),
            _ => false,
        })
    })
}

/// [`diff_level`] for a tree out of git's order: every name of both sides in a map first.
fn diff_level_by_name(
    repo: &Repository,
    (old, new): (Option<&git2::Tree<'_>>, Option<&git2::Tree<'_>>),
    prefix: &mut Vec<u8>,
    out: &mut Vec<TreeChange>,
) -> Result<(), git2::Error> {
    let mut names: std::collections::BTreeMap<Vec<u8>, (Entry, Entry)> = Default::default();
    for (tree, new_side) in [(old, false), (new, true)] {
        for e in tree.iter().flat_map(|t| t.iter()) {
            let slot = names.entry(e.name_bytes().to_vec()).or_default();
            let entry = Some((e.id(), e.filemode() as u32));
            match new_side {
                false => slot.0 = entry,
                true => slot.1 = entry,
            }
        }
    }
    for (name, sides) in names {
        if sides.0 != sides.1 {
            one_name(repo, &name, sides, prefix, out)?;
        }
    }
    Ok(())
}

/// The changes at and under `name` (in the folder `prefix`), which is `was` before and `is`
/// after (`None`: absent), the two different.
fn one_name(
    repo: &Repository,
    name: &[u8],
    (was, is): (Entry, Entry),
    prefix: &mut Vec<u8>,
    out: &mut Vec<TreeChange>,
) -> Result<(), git2::Error> {
    let len = prefix.len();
    prefix.extend_from_slice(name);
    let folder = |e: Entry| e.filter(|(_, mode)| *mode == TREE_MODE).map(|(id, _)| id);
    let leaf = |e: Entry| e.filter(|(_, mode)| *mode != TREE_MODE);
    if leaf(was).is_some() || leaf(is).is_some() {
        out.push(TreeChange {
            path: RepoPath::from_bytes(prefix.clone()),
            old: leaf(was),
            new: leaf(is),
        });
    }
    if folder(was).is_some() || folder(is).is_some() {
        let was = folder(was).map(|id| repo.find_tree(id)).transpose()?;
        let is = folder(is).map(|id| repo.find_tree(id)).transpose()?;
        prefix.push(b'/');
        diff_level(repo, was.as_ref(), is.as_ref(), prefix, out)?;
    }
    prefix.truncate(len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::tests::{raw_tree, tree_of};

    /// A tree no git writes, its entries out of order (or a name twice), still shows each
    /// change once: walked in step with a well-ordered tree, its entries would pass each other.
    #[test]
    fn a_tree_out_of_gits_order_hides_no_change() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let f = 0o100644;
        let old = tree_of(&repo, &[("a.txt", "a", f), ("b.txt", "b", f)]);
        let (a2, b) = (repo.blob(b"a2").unwrap(), repo.blob(b"b").unwrap());
        let raw = |entries: &[(&str, Oid)]| {
            let entries: Vec<_> = entries
                .iter()
                .map(|&(name, id)| ("100644", name, id))
                .collect();
            raw_tree(&repo, &entries)
        };
        let (old, a) = (repo.find_tree(old).unwrap(), repo.blob(b"a").unwrap());
        for entries in [
            vec![("b.txt", b), ("a.txt", a2)],
            vec![("a.txt", a), ("a.txt", a2), ("b.txt", b)],
        ] {
            let new = repo.find_tree(raw(&entries)).unwrap();
            let changes = tree_changes(&repo, &old, &new).unwrap();
            assert_eq!(changes.len(), 1, "{entries:?}");
            assert_eq!(changes[0].path.as_bytes(), b"a.txt");
            assert_eq!(changes[0].old, Some((a, f as u32)));
            assert_eq!(changes[0].new, Some((a2, f as u32)));
        }
    }
}
