//! Splitting a run's merged tasks into groups, one pull request each (`--by`).
//!
//! A group is a set of *task merges*, never a part of one: each group's branch repeats the
//! run's `--no-ff` merge of each of its tasks. Two merges that touch the same path always
//! share a group (else neither branch could equal the run's result on that path), and so do
//! two merges whose paths share a key (the same owners, the same folder). With `--by
//! files:N`, the groups so joined are then packed in path order, at most N files a group
//! (a single task of more files makes a group of its own).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;

use git2::Oid;

use super::owners::CodeOwners;
use crate::ids::TaskId;
use crate::repo_path::RepoPath;

/// How a run is split into groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// The repository's CODEOWNERS: one group per set of owners.
    CodeOwners,
    /// The first N folders of each path.
    Dir(usize),
    /// At most N files a group.
    Files(usize),
}

impl FromStr for By {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let count = |n: &str| match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("`{s}`: N must be a whole number above 0")),
        };
        match s.split_once(':') {
            None if s == "codeowners" => Ok(By::CodeOwners),
            Some(("dir", n)) => Ok(By::Dir(count(n)?)),
            Some(("files", n)) => Ok(By::Files(count(n)?)),
            _ => Err(format!("`{s}` is none of codeowners, dir:N, files:N")),
        }
    }
}

impl fmt::Display for By {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            By::CodeOwners => f.write_str("codeowners"),
            By::Dir(n) => write!(f, "dir:{n}"),
            By::Files(n) => write!(f, "files:{n}"),
        }
    }
}

/// One merge of the run: its task, the merge commit, the paths it changed.
#[derive(Debug, Clone)]
pub(crate) struct Merge {
    pub task: TaskId,
    pub commit: Oid,
    pub paths: Vec<RepoPath>,
}

/// A group before it has a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    /// `NN-slug`: the group's number (in path order) and a readable slug.
    pub name: String,
    /// What the group is, in words (`@org/web, @ann`, `src/api/`, `files 1 of 3`).
    pub label: String,
    pub owners: Vec<String>,
    /// Indices into the merges, in the run's order.
    pub merges: Vec<usize>,
    pub files: Vec<RepoPath>,
}

/// The key a path is grouped by (`None` for `--by files:N`), with its owners.
fn key(path: &RepoPath, by: By, owners: Option<&CodeOwners>) -> (Option<String>, Vec<String>) {
    match (by, owners) {
        (By::CodeOwners, Some(co)) => {
            let owners = co.owners(&path.display()).to_vec();
            (Some(owners.join(" ")), owners)
        }
        (By::Dir(n), _) => {
            let text = path.display();
            let mut folders: Vec<&str> = text.split('/').collect();
            folders.pop();
            folders.truncate(n);
            (Some(folders.join("/")), Vec::new())
        }
        _ => (None, Vec::new()),
    }
}

struct Joined {
    parent: Vec<usize>,
}

impl Joined {
    fn find(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        self.parent[a.max(b)] = a.min(b);
    }
}

/// A component: the merges it holds, their files, keys and owners.
#[derive(Default)]
struct Component {
    merges: Vec<usize>,
    files: BTreeSet<RepoPath>,
    keys: BTreeSet<String>,
    owners: BTreeSet<String>,
}

/// The groups of `merges` by `by` (`owners`: the CODEOWNERS rules, for `By::CodeOwners`).
pub(crate) fn group(merges: &[Merge], by: By, owners: Option<&CodeOwners>) -> Vec<Planned> {
    let mut joined = Joined {
        parent: (0..merges.len()).collect(),
    };
    let mut first_of_path: HashMap<&RepoPath, usize> = HashMap::new();
    let mut first_of_key: HashMap<String, usize> = HashMap::new();
    let mut keyed = Vec::with_capacity(merges.len());
    for (i, merge) in merges.iter().enumerate() {
        let mut keys = Vec::new();
        for path in &merge.paths {
            let first = *first_of_path.entry(path).or_insert(i);
            joined.join(i, first);
            let (k, owners) = key(path, by, owners);
            if let Some(k) = k {
                let first = *first_of_key.entry(k.clone()).or_insert(i);
                joined.join(i, first);
                keys.push((k, owners));
            }
        }
        keyed.push(keys);
    }
    let mut components: HashMap<usize, Component> = HashMap::new();
    for (i, merge) in merges.iter().enumerate() {
        let c = components.entry(joined.find(i)).or_default();
        c.merges.push(i);
        c.files.extend(merge.paths.iter().cloned());
        for (k, owners) in &keyed[i] {
            c.keys.insert(k.clone());
            c.owners.extend(owners.iter().cloned());
        }
    }
    let mut components: Vec<Component> = components.into_values().collect();
    components.sort_by(|a, b| a.files.first().cmp(&b.files.first()));
    if let By::Files(n) = by {
        components = pack(components, n);
    }
    let count = components.len();
    let width = count.to_string().len().max(2);
    components
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let (slug, label) = describe(&c, by, i, count);
            Planned {
                name: format!("{:0width$}-{}", i + 1, slug_of(&slug)),
                label,
                owners: c.owners.into_iter().collect(),
                merges: c.merges,
                files: c.files.into_iter().collect(),
            }
        })
        .collect()
}

/// Components packed in order into groups of at most `n` files (one larger component stays
/// whole).
fn pack(components: Vec<Component>, n: usize) -> Vec<Component> {
    let mut packed: Vec<Component> = Vec::new();
    for c in components {
        match packed.last_mut() {
            Some(last) if last.files.len() + c.files.len() <= n => {
                last.merges.extend(c.merges);
                last.merges.sort_unstable();
                last.files.extend(c.files);
            }
            _ => packed.push(c),
        }
    }
    packed
}

/// A group's slug (before it is made safe for a branch name) and its label.
fn describe(c: &Component, by: By, i: usize, count: usize) -> (String, String) {
    match by {
        By::CodeOwners if c.owners.is_empty() => ("unowned".into(), "unowned files".into()),
        By::CodeOwners => {
            let owners: Vec<&str> = c.owners.iter().map(String::as_str).collect();
            (owners.join("+"), owners.join(", "))
        }
        By::Dir(_) => {
            let keys: Vec<&str> = c.keys.iter().map(String::as_str).collect();
            let label = keys
                .iter()
                .map(|k| match k.is_empty() {
                    true => "files at the root".to_string(),
                    false => format!("{k}/"),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let slug = match keys.as_slice() {
                [""] => "root".to_string(),
                _ => keys.join("+"),
            };
            (slug, label)
        }
        By::Files(_) => ("files".into(), format!("files, part {} of {count}", i + 1)),
    }
}

/// `text` as a part of a branch name: letters, digits, `-`, `_` and single dots, at most 40
/// characters.
fn slug_of(text: &str) -> String {
    let mut slug = String::new();
    for c in text.chars() {
        let c = match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' => c,
            '.' if !slug.ends_with(['.', '-']) => '.',
            _ => '-',
        };
        if !(c == '-' && slug.ends_with('-')) && slug.len() < 40 {
            slug.push(c);
        }
    }
    let slug = slug.trim_matches(['-', '.']).replace(".lock", "-lock");
    match slug.is_empty() {
        true => "group".into(),
        false => slug,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merge(task: &str, paths: &[&str]) -> Merge {
        Merge {
            task: task.parse().unwrap(),
            commit: Oid::ZERO_SHA1,
            paths: paths
                .iter()
                .map(|p| RepoPath::from_bytes(p.as_bytes()))
                .collect(),
        }
    }

    fn shape(groups: &[Planned]) -> Vec<(String, Vec<usize>)> {
        groups
            .iter()
            .map(|g| (g.name.clone(), g.merges.clone()))
            .collect()
    }

    #[test]
    fn by_folder_and_a_task_across_two_folders_joins_them() {
        let merges = [
            merge("a", &["src/api/a.rs"]),
            merge("b", &["src/ui/b.rs"]),
            merge("c", &["README.md"]),
            merge("d", &["docs/x.md", "src/ui/c.rs"]),
            merge("e", &["src/api/e.rs"]),
        ];
        let groups = group(&merges, By::Dir(2), None);
        assert_eq!(
            shape(&groups),
            [
                ("01-root".into(), vec![2]),
                ("02-docs-src-ui".into(), vec![1, 3]),
                ("03-src-api".into(), vec![0, 4]),
            ]
        );
        assert_eq!(groups[1].label, "docs/, src/ui/");
        assert_eq!(groups[0].label, "files at the root");
    }

    #[test]
    fn by_owners_last_rule_wins_and_unowned_files_are_a_group() {
        let (co, _) = CodeOwners::parse("*.rs @rust\n/web/ @org/web\n/web/*.rs @ann\n");
        let merges = [
            merge("a", &["web/a.rs"]),
            merge("b", &["lib.rs"]),
            merge("c", &["web/b.js"]),
            merge("d", &["notes.txt"]),
        ];
        let groups = group(&merges, By::CodeOwners, Some(&co));
        let owners: Vec<_> = groups
            .iter()
            .map(|g| (g.owners.clone(), g.merges.clone()))
            .collect();
        assert_eq!(
            owners,
            [
                (vec!["@rust".to_string()], vec![1]),
                (vec![], vec![3]),
                (vec!["@ann".to_string()], vec![0]),
                (vec!["@org/web".to_string()], vec![2]),
            ]
        );
        assert_eq!(groups[1].name, "02-unowned");
        assert_eq!(groups[3].name, "04-org-web");
    }

    #[test]
    fn by_files_packs_in_path_order_and_keeps_shared_paths_together() {
        let merges = [
            merge("a", &["a.txt"]),
            merge("b", &["b.txt"]),
            merge("c", &["c.txt"]),
            merge("a2", &["a.txt"]),
            merge("d", &["d.txt", "e.txt", "f.txt"]),
        ];
        let groups = group(&merges, By::Files(2), None);
        assert_eq!(
            shape(&groups),
            [
                ("01-files".into(), vec![0, 1, 3]),
                ("02-files".into(), vec![2]),
                ("03-files".into(), vec![4]),
            ]
        );
        assert_eq!(groups[2].label, "files, part 3 of 3");
    }

    #[test]
    fn parsing_by_and_slugs() {
        assert_eq!("dir:2".parse::<By>(), Ok(By::Dir(2)));
        assert_eq!("files:10".parse::<By>(), Ok(By::Files(10)));
        assert!("dir:0".parse::<By>().is_err());
        assert!("owners".parse::<By>().is_err());
        assert_eq!(slug_of("@org/web+..x y.lock"), "org-web-x-y-lock");
        assert_eq!(slug_of("ünï"), "n");
        assert_eq!(slug_of("@"), "group");
    }
}
