//! Merge drivers as git runs them: which command merges a file both sides changed, read from
//! the `merge` attribute of the merged tree and the driver definitions of git config
//! (`merge.<name>.driver`), and the command line git would run, placeholders filled in.
//!
//! Where a definition may come from is the security boundary: only the system's, the user's
//! (`~/.gitconfig`, `$XDG_CONFIG_HOME/git/config`) and the repository's own `.git/config`
//! count. A tracked file is never read for one, and a definition that the repository's config
//! pulls in with `include.path` (which may name a tracked file) is refused rather than run.
//! The attributes come from the integration tip's tree (its `.gitattributes` files), never
//! from the user's checkout: see [`AttributeSource`].

use std::collections::HashMap;

use git2::{AttrCheckFlags, AttrValue, ConfigLevel, Index, Repository, Tree};

use crate::repo_path::RepoPath;

/// The drivers a merge may run: those git config defines, and a structured merge tool for the
/// languages it knows (`--merge-with mergiraf`).
#[derive(Debug, Default)]
pub(crate) struct Drivers {
    defined: HashMap<String, Definition>,
    /// `merge.default`: the driver of a path with no `merge` attribute.
    default: Option<String>,
    structured: Option<Structured>,
}

#[derive(Debug)]
enum Definition {
    /// The command line, with git's placeholders.
    Command(String),
    /// Defined where swarm does not take a command from: why.
    Refused(String),
}

/// A structured merge tool as a driver for the files it knows (`--merge-with`).
#[derive(Debug, Clone)]
pub(crate) struct Structured {
    /// Its name, as the report gives it.
    pub name: String,
    /// Its command line, with git's placeholders (the program quoted).
    pub command: String,
    /// The file names it merges (matched against a path's last component).
    pub names: globset::GlobSet,
}

impl Structured {
    /// mergiraf at `program`: the files it knows, from `mergiraf languages --gitattributes`
    /// (`*.py merge=mergiraf` per line), and the command git's documentation gives for it.
    pub(crate) fn mergiraf(program: &std::path::Path) -> Result<Self, String> {
        let out = std::process::Command::new(program)
            .args(["languages", "--gitattributes"])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        if !out.status.success() {
            return Err(format!(
                "`{} languages --gitattributes` failed ({}): is it mergiraf 0.20 or later?",
                program.display(),
                out.status
            ));
        }
        let mut names = globset::GlobSetBuilder::new();
        let mut count = 0;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(pattern) = line.split_whitespace().next() else {
                continue;
            };
            if let Ok(glob) = globset::Glob::new(pattern) {
                names.add(glob);
                count += 1;
            }
        }
        if count == 0 {
            return Err(format!(
                "`{} languages --gitattributes` named no files",
                program.display()
            ));
        }
        Ok(Self {
            name: "mergiraf".into(),
            command: format!(
                "{} merge --git %O %A %B -s %S -x %X -y %Y -p %P -l %L",
                quote(&program.to_string_lossy())
            ),
            names: names.build().map_err(|e| e.to_string())?,
        })
    }
}

/// Which command merges a file, by the attribute and the definitions.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Choice<'a> {
    /// git's own (text, union, binary), which libgit2 applies in the merge itself.
    BuiltIn,
    /// A command the configuration defines.
    Command { name: &'a str, command: &'a str },
    /// A driver named by the attribute and defined where swarm takes no command from.
    Refused { name: &'a str, why: &'a str },
}

/// The built-in drivers: a name among them that no config defines is git's own.
const BUILT_IN: [&str; 3] = ["text", "union", "binary"];

impl Drivers {
    /// The drivers defined in `repo`'s config (see the module's documentation), and
    /// `structured` for the files it knows.
    pub(crate) fn read(repo: &Repository, structured: Option<Structured>) -> anyhow::Result<Self> {
        let config = repo.config()?.snapshot()?;
        let mut defined: HashMap<String, (i32, Definition)> = HashMap::new();
        let mut entries = config.entries(Some(r"^merge\..*\.driver$"))?;
        while let Some(entry) = entries.next() {
            let entry = entry?;
            let Some(name) = entry
                .name()
                .ok()
                .and_then(|n| n.strip_prefix("merge."))
                .and_then(|n| n.strip_suffix(".driver"))
            else {
                continue;
            };
            let definition = match trusted(entry.level(), entry.include_depth()) {
                Ok(()) => match entry.value() {
                    Ok(command) if command.trim().is_empty() => {
                        Definition::Refused("its command is empty".into())
                    }
                    Ok(command) => Definition::Command(command.to_owned()),
                    Err(_) => Definition::Refused("its command is not UTF-8".into()),
                },
                Err(why) => Definition::Refused(why.into()),
            };
            let rank = entry.level() as i32;
            // The most specific level wins, as in git (the repository's over the user's).
            match defined.get(name) {
                Some((had, _)) if *had > rank => {}
                _ => {
                    defined.insert(name.to_owned(), (rank, definition));
                }
            }
        }
        let default = match config.get_entry("merge.default") {
            Ok(e) if trusted(e.level(), e.include_depth()).is_ok() => {
                e.value().map(str::to_owned).ok()
            }
            _ => None,
        };
        Ok(Self {
            defined: defined.into_iter().map(|(k, (_, d))| (k, d)).collect(),
            default,
            structured,
        })
    }

    /// Does any driver run as a command (else libgit2's merge is all there is)?
    pub(crate) fn any(&self) -> bool {
        !self.defined.is_empty() || self.structured.is_some()
    }

    /// What merges `path`, whose `merge` attribute is `attr`, as git decides: a name that
    /// config defines is that command; `text`, `union`, `binary`, an unset attribute and a
    /// name defined nowhere are git's own merge.
    pub(crate) fn choice<'a>(&'a self, attr: &'a MergeAttr) -> Choice<'a> {
        let name = match attr {
            MergeAttr::Named(name) => name.as_str(),
            MergeAttr::Unspecified => match &self.default {
                Some(name) => name.as_str(),
                None => return Choice::BuiltIn,
            },
            MergeAttr::Text | MergeAttr::Binary => return Choice::BuiltIn,
        };
        match self.defined.get(name) {
            Some(Definition::Command(command)) => Choice::Command { name, command },
            Some(Definition::Refused(why)) => Choice::Refused { name, why },
            None => Choice::BuiltIn,
        }
    }

    /// The structured merge tool for `path` after git's merge conflicted there, where the
    /// attribute leaves the merge to git's text merge.
    pub(crate) fn structured_for(&self, attr: &MergeAttr, path: &RepoPath) -> Option<&Structured> {
        let structured = self.structured.as_ref()?;
        let textual = match attr {
            MergeAttr::Unspecified | MergeAttr::Text => true,
            MergeAttr::Named(name) => {
                name == "text"
                    || !self.defined.contains_key(name.as_str())
                        && !BUILT_IN.contains(&name.as_str())
            }
            MergeAttr::Binary => false,
        };
        let file_name = path.as_path().file_name()?;
        (textual && structured.names.is_match(file_name)).then_some(structured)
    }
}

/// May a driver definition at `level`, read through `include_depth` includes, be run?
fn trusted(level: ConfigLevel, include_depth: u32) -> Result<(), &'static str> {
    match level {
        ConfigLevel::ProgramData | ConfigLevel::System | ConfigLevel::XDG | ConfigLevel::Global => {
            Ok(())
        }
        ConfigLevel::Local if include_depth == 0 => Ok(()),
        ConfigLevel::Local => Err(
            "it is defined in a file the repository's config includes, which may be one the \
             repository tracks; define it in .git/config or your ~/.gitconfig",
        ),
        ConfigLevel::Worktree | ConfigLevel::App | ConfigLevel::Highest => {
            Err("it is defined where swarm does not read a merge driver from")
        }
    }
}

/// A path's `merge` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MergeAttr {
    /// `merge` (set): git's text merge.
    Text,
    /// `-merge`: binary (ours kept, a conflict).
    Binary,
    Unspecified,
    Named(String),
}

/// The attributes of the tree being merged into: an in-memory index holding that tree's
/// `.gitattributes` files on the way to the merged paths, set as the repository's index. The
/// repository is opened bare, so libgit2 reads attributes from that index (and
/// `$GIT_DIR/info/attributes`, `core.attributesFile`, the system's), never from a checkout;
/// its own merge picks its built-in drivers from the same place.
pub(crate) struct AttributeSource;

impl AttributeSource {
    /// Sets `repo`'s index to the `.gitattributes` files of `tree` in the folders of `paths`
    /// and above.
    pub(crate) fn set(
        repo: &Repository,
        tree: &Tree<'_>,
        paths: impl Iterator<Item = RepoPath>,
    ) -> anyhow::Result<()> {
        let mut folders: std::collections::BTreeSet<Vec<u8>> = Default::default();
        for path in paths {
            let bytes = path.as_bytes();
            folders.insert(Vec::new());
            for (i, b) in bytes.iter().enumerate() {
                if *b == b'/' {
                    folders.insert(bytes[..=i].to_vec());
                }
            }
        }
        let mut index = Index::new()?;
        for folder in folders {
            let mut name = folder;
            name.extend_from_slice(b".gitattributes");
            let path = RepoPath::from_bytes(name);
            if let Some((id, mode)) = crate::git::entry_at(tree, &path)?
                && mode != 0o120000
            {
                index.add(&crate::git::index_entry(&path, id, mode))?;
            }
        }
        repo.set_index(&mut index)?;
        Ok(())
    }

    /// `path`'s `merge` attribute and its conflict marker size (`conflict-marker-size`, 7 if
    /// unset), read from the source [`Self::set`] gave.
    pub(crate) fn merge_of(repo: &Repository, path: &RepoPath) -> anyhow::Result<(MergeAttr, u32)> {
        let flags = AttrCheckFlags::INDEX_ONLY;
        let raw = repo.get_attr_bytes(path.as_path(), "merge", flags)?;
        let attr = match AttrValue::from_bytes(raw) {
            AttrValue::True => MergeAttr::Text,
            AttrValue::False => MergeAttr::Binary,
            AttrValue::Unspecified => MergeAttr::Unspecified,
            AttrValue::Bytes(b) => MergeAttr::Named(String::from_utf8_lossy(b).into_owned()),
            AttrValue::String(s) => MergeAttr::Named(s.to_owned()),
        };
        let size = repo
            .get_attr_bytes(path.as_path(), "conflict-marker-size", flags)?
            .and_then(|b| std::str::from_utf8(b).ok()?.trim().parse().ok())
            .filter(|n| (1..=1024).contains(n))
            .unwrap_or(7);
        Ok((attr, size))
    }
}

/// The names of a driver's files in its directory: the ancestor's (`%O`), ours (`%A`, where
/// the result is left) and theirs (`%B`), relative as git gives them.
pub(crate) const FILES: [&str; 3] = [".merge_file_O", ".merge_file_A", ".merge_file_B"];

/// The labels of the three sides (`%S`, `%X`, `%Y`), as the conflict markers of
/// `--on-conflict repair` name them.
pub(crate) const LABELS: [&str; 3] = ["base", "already merged", "this task"];

/// `command` with git's placeholders filled in: `%O`, `%A`, `%B` the files' names, `%L` the
/// marker size, `%P` the path, `%S`, `%X`, `%Y` the labels (those four single-quoted, as git
/// does: a path is anyone's text), `%%` a percent sign; any other `%` stays.
pub(crate) fn command_line(command: &str, path: &RepoPath, marker_size: u32) -> String {
    let mut out = String::with_capacity(command.len() + 64);
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('O') => out.push_str(FILES[0]),
            Some('A') => out.push_str(FILES[1]),
            Some('B') => out.push_str(FILES[2]),
            Some('L') => out.push_str(&marker_size.to_string()),
            Some('P') => out.push_str(&quote(&path.display())),
            Some('S') => out.push_str(&quote(LABELS[0])),
            Some('X') => out.push_str(&quote(LABELS[1])),
            Some('Y') => out.push_str(&quote(LABELS[2])),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `text` in single quotes for `sh`: a quote inside closes, adds an escaped one and reopens.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_as_git_fills_them_and_a_path_cannot_break_out() {
        let path = RepoPath::from("dir/it's $(touch x).py");
        let line = command_line("drv %O %A %B %L %P %S %X %Y %% %Q %", &path, 9);
        assert_eq!(
            line,
            "drv .merge_file_O .merge_file_A .merge_file_B 9 'dir/it'\\''s $(touch x).py' \
             'base' 'already merged' 'this task' % %Q %"
        );
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("printf %s {}", quote("it's $(x) `y` \\ \"z\"")),
            ])
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"it's $(x) `y` \\ \"z\"");
    }

    #[test]
    fn drivers_come_from_the_repositorys_own_config_never_through_an_include() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join("r.git")).unwrap();
        let included = dir.path().join("shared.gitconfig");
        std::fs::write(&included, "[merge \"shared\"]\n\tdriver = cat %B\n").unwrap();
        let mut config = repo
            .config()
            .unwrap()
            .open_level(ConfigLevel::Local)
            .unwrap();
        config
            .set_str("merge.own.driver", "sort -u %A %B -o %A")
            .unwrap();
        config.set_str("merge.blank.driver", " ").unwrap();
        config
            .set_str("include.path", included.to_str().unwrap())
            .unwrap();
        let drivers = Drivers::read(&repo, None).unwrap();
        let named = |n: &str| MergeAttr::Named(n.into());
        assert!(matches!(
            drivers.choice(&named("own")),
            Choice::Command { .. }
        ));
        for refused in ["shared", "blank"] {
            assert!(
                matches!(drivers.choice(&named(refused)), Choice::Refused { .. }),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_name_no_config_defines_is_gits_own_merge() {
        let mut drivers = Drivers::default();
        drivers
            .defined
            .insert("mine".into(), Definition::Command("cat %B".into()));
        drivers
            .defined
            .insert("theirs".into(), Definition::Refused("why".into()));
        let named = |n: &str| MergeAttr::Named(n.into());
        assert_eq!(
            drivers.choice(&named("mine")),
            Choice::Command {
                name: "mine",
                command: "cat %B"
            }
        );
        assert!(matches!(
            drivers.choice(&named("theirs")),
            Choice::Refused { .. }
        ));
        assert_eq!(drivers.choice(&named("union")), Choice::BuiltIn);
        assert_eq!(drivers.choice(&named("nowhere")), Choice::BuiltIn);
        assert_eq!(drivers.choice(&MergeAttr::Unspecified), Choice::BuiltIn);
        drivers.default = Some("mine".into());
        assert!(matches!(
            drivers.choice(&MergeAttr::Unspecified),
            Choice::Command { .. }
        ));
        assert_eq!(drivers.choice(&MergeAttr::Binary), Choice::BuiltIn);
    }
}
