//! A tree with some paths set or removed ([`TreeEdit`]), as libgit2's
//! `git_tree_create_updated` makes it, for a fraction of its cost.
//!
//! libgit2 copies every entry of each folder on the way to a change into a hash map, sorts
//! them again, prints each one's mode and frees them: for a file in a folder of 300 entries,
//! that was 8 % of a one-file run's CPU (docs/BENCHMARKS-HISTORY.md). Here each such folder
//! is written from its entries as they are stored, in git's order, the changed ones in their
//! place. The bytes are libgit2's: the same order, each mode printed as libgit2 prints it, a
//! folder left empty dropped from its parent (the root written even when empty).
//!
//! Whatever this does not do as libgit2 does goes to libgit2 with the same edits, so that
//! the result, or the error, is libgit2's: a name the folder does not have yet (a file or a
//! folder added, which libgit2 sorts in), an entry that changes kind (a file becoming a
//! folder, or a submodule), a path given twice, a folder whose entries are out of git's order
//! or hold a name twice. Every entry set is checked by libgit2 itself, as it checks it: the
//! name (`.git` refused), the mode, the object there.

use std::collections::BTreeMap;
use std::hash::{BuildHasher as _, RandomState};

use git2::{ObjectType, Oid, Repository};

use super::tree_diff::name_order;

/// A folder's mode in a tree.
const FOLDER: u32 = 0o040000;

/// A submodule's mode, for which libgit2 checks an entry's name and not its object.
const SUBMODULE: u32 = 0o160000;

/// The entry a path is set to, `None` where it is removed.
type Target = Option<(Oid, git2::FileMode)>;

/// What a name of a folder becomes: `Some(None)` removed, `Some(Some((id, mode)))` set,
/// `None` where libgit2 decides.
type Outcome = Option<Option<(Oid, u32)>>;

/// Edits of a tree, made in one [`create_updated`](TreeEdit::create_updated), as with
/// `git2::build::TreeUpdateBuilder`.
#[derive(Default)]
pub(crate) struct TreeEdit {
    edits: Vec<(Vec<u8>, Target)>,
}

impl TreeEdit {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Sets `path` to `id` with `mode` (the folders on the way made where missing).
    pub(crate) fn upsert(&mut self, path: &[u8], id: Oid, mode: git2::FileMode) -> &mut Self {
        self.edits.push((path.to_vec(), Some((id, mode))));
        self
    }

    /// Removes `path` (a folder left empty goes with it).
    pub(crate) fn remove(&mut self, path: &[u8]) -> &mut Self {
        self.edits.push((path.to_vec(), None));
        self
    }

    /// Writes `base` with the edits (the folders on the way to them written again) and gives
    /// the new tree's id; `base`'s own, unwritten, when there are none (a commit that removes
    /// nothing asks for that every time).
    pub(crate) fn create_updated(
        &self,
        repo: &Repository,
        base: &git2::Tree<'_>,
    ) -> Result<Oid, git2::Error> {
        if self.edits.is_empty() {
            return Ok(base.id());
        }
        match self.in_place(repo, base)? {
            Some(id) => Ok(id),
            None => self.with_libgit2(repo, base),
        }
    }

    /// [`create_updated`](Self::create_updated) where the edits only change or remove what
    /// `base` has, `None` where libgit2 is to decide.
    fn in_place(
        &self,
        repo: &Repository,
        base: &git2::Tree<'_>,
    ) -> Result<Option<Oid>, git2::Error> {
        let mut edits: Vec<(&[u8], Target)> =
            self.edits.iter().map(|(p, t)| (p.as_slice(), *t)).collect();
        edits.sort_by(|a, b| a.0.cmp(b.0));
        if edits.windows(2).any(|w| w[0].0 == w[1].0) {
            return Ok(None);
        }
        let mut writer = Writer {
            repo,
            check: repo.treebuilder(None)?,
        };
        Ok(match writer.folder(base, &edits)? {
            Some(Some(id)) => Some(id),
            Some(None) => Some(super::store::write_whole(repo, ObjectType::Tree, &[])?),
            None => None,
        })
    }

    fn with_libgit2(&self, repo: &Repository, base: &git2::Tree<'_>) -> Result<Oid, git2::Error> {
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, target) in &self.edits {
            match target {
                Some((id, mode)) => update.upsert(path.as_slice(), *id, *mode),
                None => update.remove(path.as_slice()),
            };
        }
        update.create_updated(repo, base)
    }
}

/// The edits of one name of a folder: its own (the name set or removed), and those below it
/// (paths relative to it).
#[derive(Default)]
struct AtName<'e> {
    own: Option<Target>,
    below: Vec<(&'e [u8], Target)>,
}

struct Writer<'r> {
    repo: &'r Repository,
    /// An empty builder each entry set is inserted into first, for libgit2's checks.
    check: git2::TreeBuilder<'r>,
}

impl Writer<'_> {
    /// `tree` with `edits` (paths relative to it, sorted): `Some(Some(id))` written,
    /// `Some(None)` left empty, `None` where libgit2 decides.
    fn folder(
        &mut self,
        tree: &git2::Tree<'_>,
        edits: &[(&[u8], Target)],
    ) -> Result<Option<Option<Oid>>, git2::Error> {
        let mut by_name: BTreeMap<&[u8], AtName<'_>> = BTreeMap::new();
        for &(path, target) in edits {
            match path.iter().position(|&b| b == b'/') {
                Some(slash) => by_name
                    .entry(&path[..slash])
                    .or_default()
                    .below
                    .push((&path[slash + 1..], target)),
                None => by_name.entry(path).or_default().own = Some(target),
            }
        }
        if !one_of_each_name(tree) {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(tree.len() * 40);
        for e in tree.iter() {
            let (name, was) = (e.name_bytes(), (e.id(), mode_of(&e)));
            let now = match by_name.remove(name) {
                None => Some(was),
                Some(at) => match self.at_name(name, was, at)? {
                    Some(now) => now,
                    None => return Ok(None),
                },
            };
            if let Some((id, mode)) = now {
                put(&mut bytes, name, mode, id);
            }
        }
        // A name the folder does not have yet: libgit2 adds it where it sorts.
        if !by_name.is_empty() {
            return Ok(None);
        }
        Ok(Some(match bytes.is_empty() {
            true => None,
            false => Some(super::store::write_whole(
                self.repo,
                ObjectType::Tree,
                &bytes,
            )?),
        }))
    }

    /// What `name`, which the folder has as `was`, becomes with `at`, its edits.
    fn at_name(
        &mut self,
        name: &[u8],
        was: (Oid, u32),
        at: AtName<'_>,
    ) -> Result<Outcome, git2::Error> {
        match at.own {
            // A path set or removed and another below it: a file and a folder at once.
            Some(_) if !at.below.is_empty() => Ok(None),
            Some(None) => Ok(Some(None)),
            Some(Some((id, mode))) => {
                let mode = u32::from(mode);
                let taken = kind(was.1) == kind(mode) && self.check(name, id, mode);
                Ok(taken.then_some(Some((id, mode))))
            }
            None if !is_folder(was.1) => Ok(None),
            None => {
                let tree = self.repo.find_tree(was.0)?;
                Ok(match self.folder(&tree, &at.below)? {
                    // Its name checked as libgit2 checks it (a submodule's mode: the name
                    // alone; the tree was just written).
                    Some(Some(id)) => self
                        .check(name, id, SUBMODULE)
                        .then_some(Some((id, FOLDER))),
                    Some(None) => Some(None),
                    None => None,
                })
            }
        }
    }

    /// Whether libgit2 takes the entry: a name a tree may hold (not `.git`, `..` nor one with
    /// a `/`), a mode it knows, and (but for a submodule) an object of the mode's kind that is
    /// there.
    fn check(&mut self, name: &[u8], id: Oid, mode: u32) -> bool {
        let taken = self.check.insert(name, id, mode as i32).is_ok();
        taken && self.check.clear().is_ok()
    }
}

/// Whether `tree`'s entries are in strictly increasing git order and no name is there twice
/// (a file and a folder of the same name sort apart, so names are compared in a folder
/// holding both; a collision of their hashes only sends the folder to libgit2).
fn one_of_each_name(tree: &git2::Tree<'_>) -> bool {
    let key = |e: &git2::TreeEntry<'_>| is_folder(mode_of(e));
    let ordered = (1..tree.len()).all(|k| match (tree.get(k - 1), tree.get(k)) {
        (Some(a), Some(b)) => {
            name_order((a.name_bytes(), key(&a)), (b.name_bytes(), key(&b))).is_lt()
        }
        _ => false,
    });
    let folders = tree.iter().filter(|e| is_folder(mode_of(e))).count();
    if !ordered || folders == 0 || folders == tree.len() {
        return ordered;
    }
    let state = RandomState::new();
    let mut seen = std::collections::HashSet::with_capacity(tree.len());
    tree.iter()
        .all(|e| seen.insert(state.hash_one(e.name_bytes())))
}

fn mode_of(e: &git2::TreeEntry<'_>) -> u32 {
    e.filemode_raw() as u32
}

fn is_folder(mode: u32) -> bool {
    kind(mode) == ObjectType::Tree
}

/// The kind of object a mode names, as libgit2 tells them apart.
fn kind(mode: u32) -> ObjectType {
    match mode & 0o170000 {
        0o160000 => ObjectType::Commit,
        0o040000 => ObjectType::Tree,
        _ => ObjectType::Blob,
    }
}

/// One entry as a tree stores it: the mode in octal as libgit2 prints it (`40000`, with no
/// leading zero), a space, the name, a NUL, the id's bytes.
fn put(bytes: &mut Vec<u8>, name: &[u8], mode: u32, id: Oid) {
    use std::io::Write as _;
    let _ = write!(bytes, "{mode:o} ");
    bytes.extend_from_slice(name);
    bytes.push(0);
    bytes.extend_from_slice(id.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::tests::{RawEntry, raw_tree, tree_of};

    /// A small generator of test cases, the same on every run.
    struct Dice(u64);

    impl Dice {
        fn roll(&mut self, sides: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % sides as u64) as usize
        }
    }

    const MODES: [git2::FileMode; 3] = [
        git2::FileMode::Blob,
        git2::FileMode::BlobExecutable,
        git2::FileMode::Link,
    ];

    fn both(edit: &TreeEdit, repo: &Repository, base: &git2::Tree<'_>) -> Result<Oid, String> {
        let ours = edit
            .create_updated(repo, base)
            .map_err(|e| e.message().to_string());
        let theirs = edit
            .with_libgit2(repo, base)
            .map_err(|e| e.message().to_string());
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "ours {ours:?}, libgit2's {theirs:?}"
        );
        if let (Ok(a), Ok(b)) = (&ours, &theirs) {
            assert_eq!(a, b, "the same edits give libgit2's tree");
        }
        ours
    }

    /// No edit is the base tree itself, with nothing written.
    #[test]
    fn no_edits_give_the_base_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        super::super::for_bulk_writes(&repo).unwrap();
        let blob = repo.blob(b"same").unwrap();
        let mut builder = repo.treebuilder(None).unwrap();
        builder.insert("f", blob, 0o100644).unwrap();
        let base = repo.find_tree(builder.write().unwrap()).unwrap();
        let files = || {
            let fans = std::fs::read_dir(dir.path().join("objects")).unwrap();
            let fans = fans
                .flatten()
                .filter_map(|f| std::fs::read_dir(f.path()).ok());
            let entries = fans.flat_map(|e| e.flatten().map(|e| e.path()));
            let times = entries.map(|p| (std::fs::metadata(&p).unwrap().modified().unwrap(), p));
            times.collect::<Vec<_>>()
        };
        let before = files();
        assert_eq!(
            TreeEdit::new().create_updated(&repo, &base).unwrap(),
            base.id()
        );
        assert_eq!(files(), before);
    }

    /// Random edits of random trees: the tree written in place is libgit2's, byte for byte
    /// (the same id), and edits of what the tree has never go to libgit2; the other edits
    /// (added names, a path set twice, removed where absent, a file becoming a folder) give
    /// libgit2's result or its error.
    #[test]
    fn edits_write_the_tree_libgit2_writes() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
        let folders = ["", "a/", "a/b/", "a/b-c/", "c/", "c.d/e/"];
        let (mut in_place, mut others) = (0, 0);
        for round in 0..400 {
            let mut files = Vec::new();
            for k in 0..1 + dice.roll(12) {
                let folder = folders[dice.roll(folders.len())];
                let mode = i32::from(MODES[dice.roll(3)]);
                files.push((format!("{folder}f{k}"), format!("{round} {k}"), mode));
            }
            let files: Vec<(&str, &str, i32)> = files
                .iter()
                .map(|(p, c, m)| (p.as_str(), c.as_str(), *m))
                .collect();
            let base = repo.find_tree(tree_of(&repo, &files)).unwrap();
            let mut edit = TreeEdit::new();
            let mut only_in_place = true;
            for (k, (path, _, _)) in files.iter().enumerate() {
                match dice.roll(6) {
                    0 | 1 => {
                        let id = repo.blob(format!("new {round} {k}").as_bytes()).unwrap();
                        edit.upsert(path.as_bytes(), id, MODES[dice.roll(3)]);
                    }
                    2 => {
                        edit.remove(path.as_bytes());
                    }
                    _ => {}
                }
            }
            let id = repo.blob(b"other").unwrap();
            match dice.roll(8) {
                0 => edit.upsert(b"a/new", id, git2::FileMode::Blob),
                1 => edit.remove(b"c/absent"),
                2 => edit.upsert(format!("{}/under", files[0].0).as_bytes(), id, MODES[0]),
                3 => edit
                    .upsert(files[0].0.as_bytes(), id, MODES[0])
                    .remove(files[0].0.as_bytes()),
                _ => &mut edit,
            };
            only_in_place &= edit.edits.len() <= files.len()
                && edit
                    .edits
                    .iter()
                    .all(|(p, _)| files.iter().any(|f| f.0.as_bytes() == p.as_slice()));
            let result = both(&edit, &repo, &base);
            if only_in_place {
                let written = edit.in_place(&repo, &base).unwrap();
                assert_eq!(
                    written,
                    result.ok(),
                    "round {round}: edits of what the tree has"
                );
                in_place += 1;
            } else {
                others += 1;
            }
        }
        assert!(
            in_place > 150 && others > 100,
            "{in_place} in place, {others} others"
        );
    }

    /// Trees no git writes, or that a repository may hold to attack swarm: entries out of
    /// order or a name twice go to libgit2, which sorts or keeps one; a `.git` entry, set or
    /// written again with something below it, is refused as libgit2 refuses it; old modes
    /// (`100664`, `040000`) come out as libgit2 prints them.
    #[test]
    fn a_hostile_base_tree_gives_libgit2s_result_or_its_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let (x, y) = (repo.blob(b"x").unwrap(), repo.blob(b"y").unwrap());
        let folder = raw_tree(&repo, &[("100644", "inner", x)]);
        let cases: [(&[RawEntry<'_>], &str, bool); 6] = [
            (&[("100644", "b", x), ("100644", "a", x)], "a", false),
            (
                &[
                    ("100644", "a", x),
                    ("40000", "a", folder),
                    ("100644", "z", x),
                ],
                "z",
                false,
            ),
            (&[("100644", "a", x), ("100644", "a", y)], "a", false),
            (&[("100664", "a", x), ("040000", "d", folder)], "a", true),
            (&[("100644", ".git", x), ("100644", "z", x)], ".git", false),
            (
                &[("40000", ".git", folder), ("100644", "z", x)],
                ".git/inner",
                false,
            ),
        ];
        for (entries, path, in_place) in cases {
            let base = repo.find_tree(raw_tree(&repo, entries)).unwrap();
            let mut edit = TreeEdit::new();
            edit.upsert(path.as_bytes(), y, git2::FileMode::Blob);
            let result = both(&edit, &repo, &base);
            assert_eq!(
                edit.in_place(&repo, &base).unwrap().is_some(),
                in_place,
                "{entries:?}: {result:?}"
            );
            if path.starts_with(".git") {
                assert!(result.is_err(), "{path} refused: {result:?}");
            }
        }
        let base = repo
            .find_tree(raw_tree(
                &repo,
                &[("100664", "a", x), ("040000", "d", folder)],
            ))
            .unwrap();
        let mut edit = TreeEdit::new();
        let written = edit
            .remove(b"d/inner")
            .create_updated(&repo, &base)
            .unwrap();
        let bytes = repo.find_object(written, None).unwrap();
        let tree = bytes.as_tree().unwrap();
        assert_eq!(tree.len(), 1, "the folder left empty is gone");
        assert_eq!(tree.get(0).unwrap().filemode_raw(), 0o100664);
    }
}
