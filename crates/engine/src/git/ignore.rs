//! Which untracked paths of an overlay worktree git would ignore, read as git reads them:
//! each folder's `.gitignore` as the view shows it (the worker's own, from its upper
//! layer — ruff's `.ruff_cache/.gitignore` holding `*` — else the base checkout's, unless the
//! worker deleted it), the deepest one that says something deciding; then the repository's
//! `.git/info/exclude` and `core.excludesFile`. libgit2 cannot be asked: it sees the base
//! checkout's files, not the view, which is mounted only in the worker's jail.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use git2::Repository;
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::repo_path::RepoPath;
use swarm_sandbox::overlay;

/// The largest ignore file read (a generated one is a few kilobytes).
const IGNORE_FILE_CAP: u64 = 1024 * 1024;

/// The ignore rules of one view.
pub(crate) struct ViewIgnore {
    upper: PathBuf,
    base: PathBuf,
    /// `info/exclude` and `core.excludesFile`, rooted at the worktree.
    excludes: Gitignore,
    /// Each folder's `.gitignore` (relative folder → its rules), read once.
    dirs: RefCell<HashMap<Vec<u8>, Option<Gitignore>>>,
}

impl ViewIgnore {
    /// The rules of the view whose upper layer is `upper`, over the base checkout `base`.
    pub(crate) fn new(base: &Repository, upper: &Path) -> Self {
        let workdir = base.workdir().unwrap_or(Path::new("/")).to_path_buf();
        let mut excludes = GitignoreBuilder::new("/");
        let config = base.config().ok();
        let excludes_file = config
            .as_ref()
            .and_then(|c| c.get_path("core.excludesFile").ok())
            .or_else(default_excludes_file);
        // Later lines win: info/exclude over core.excludesFile, as in git.
        for file in excludes_file
            .into_iter()
            .chain([base.commondir().join("info/exclude")])
        {
            if let Some(text) = read_capped(&file) {
                add_lines(&mut excludes, &text);
            }
        }
        Self {
            upper: upper.to_path_buf(),
            base: workdir,
            excludes: excludes.build().unwrap_or_else(|_| Gitignore::empty()),
            dirs: RefCell::new(HashMap::new()),
        }
    }

    /// Would git ignore the untracked `path` (a folder if `is_dir`)?
    pub(crate) fn ignored(&self, path: &RepoPath, is_dir: bool) -> bool {
        let full = Path::new("/").join(path.as_path());
        let mut dir: &[u8] = path.as_bytes();
        // From the file's own folder up to the root: the deepest rule that matches decides.
        loop {
            dir = match dir.iter().rposition(|b| *b == b'/') {
                Some(i) => &dir[..i],
                None if dir.is_empty() => break,
                None => &[],
            };
            match self
                .rules_of(dir)
                .as_ref()
                .map(|g| g.matched(&full, is_dir))
            {
                Some(Match::Ignore(_)) => return true,
                Some(Match::Whitelist(_)) => return false,
                _ => {}
            }
            if dir.is_empty() {
                break;
            }
        }
        self.excludes.matched(&full, is_dir).is_ignore()
    }

    /// The `.gitignore` of folder `dir` (relative; empty: the root) as the view shows it.
    fn rules_of(&self, dir: &[u8]) -> std::cell::Ref<'_, Option<Gitignore>> {
        if !self.dirs.borrow().contains_key(dir) {
            let rules = self.read_rules(dir);
            self.dirs.borrow_mut().insert(dir.to_vec(), rules);
        }
        std::cell::Ref::map(self.dirs.borrow(), |d| &d[dir])
    }

    fn read_rules(&self, dir: &[u8]) -> Option<Gitignore> {
        let rel = Path::new(std::ffi::OsStr::from_bytes(dir));
        let in_upper = self.upper.join(rel);
        let file = in_upper.join(".gitignore");
        let text = match std::fs::symlink_metadata(&file) {
            Ok(m) if overlay::is_whiteout(&m) => return None,
            Ok(_) => read_capped(&file)?,
            // A folder the worker made anew hides the base's.
            Err(_) if overlay::is_opaque(&in_upper) => return None,
            Err(_) => read_capped(&self.base.join(rel).join(".gitignore"))?,
        };
        let mut rules = GitignoreBuilder::new(Path::new("/").join(rel));
        add_lines(&mut rules, &text);
        rules.build().ok()
    }
}

/// A view's ignore rules, read on first use: only an untracked path is asked about, and most
/// tasks leave none.
pub(crate) struct LazyIgnore<'a> {
    base: &'a Repository,
    upper: &'a Path,
    rules: std::cell::OnceCell<ViewIgnore>,
}

impl<'a> LazyIgnore<'a> {
    pub(crate) fn new(base: &'a Repository, upper: &'a Path) -> Self {
        Self {
            base,
            upper,
            rules: std::cell::OnceCell::new(),
        }
    }

    /// Would git ignore the untracked `path` (a folder if `is_dir`)?
    pub(crate) fn ignored(&self, path: &RepoPath, is_dir: bool) -> bool {
        self.rules
            .get_or_init(|| ViewIgnore::new(self.base, self.upper))
            .ignored(path, is_dir)
    }
}

fn add_lines(rules: &mut GitignoreBuilder, text: &str) {
    for line in text.lines() {
        // A line git would not understand either is left out, not the whole file.
        let _ = rules.add_line(None, line);
    }
}

/// A regular file's text (not through a link), at most [`IGNORE_FILE_CAP`] bytes of it.
fn read_capped(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut text = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(IGNORE_FILE_CAP)
        .read_to_end(&mut text)
        .ok()?;
    Some(String::from_utf8_lossy(&text).into_owned())
}

/// git's default `core.excludesFile`: `$XDG_CONFIG_HOME/git/ignore`, else
/// `~/.config/git/ignore`.
fn default_excludes_file() -> Option<PathBuf> {
    match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(xdg) => Some(PathBuf::from(xdg).join("git/ignore")),
        None => crate::settings::home::home_dir().map(|h| h.join(".config/git/ignore")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(
        base_files: &[(&str, &str)],
        upper_files: &[(&str, &str)],
    ) -> (tempfile::TempDir, ViewIgnore) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        let repo = Repository::init(&base).unwrap();
        for (root, files) in [
            (&base, base_files),
            (&dir.path().join("upper"), upper_files),
        ] {
            std::fs::create_dir_all(root).unwrap();
            for (path, text) in files {
                let at = root.join(path);
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::fs::write(at, text).unwrap();
            }
        }
        let rules = ViewIgnore::new(&repo, &dir.path().join("upper"));
        (dir, rules)
    }

    #[test]
    fn a_nested_gitignore_the_worker_wrote_counts() {
        let (_dir, rules) = view(
            &[(".gitignore", "*.log\n")],
            &[
                (".ruff_cache/.gitignore", "*\n"),
                (".ruff_cache/CACHEDIR.TAG", "x"),
            ],
        );
        let p = |s: &str| RepoPath::from(s);
        assert!(!rules.ignored(&p(".ruff_cache"), true));
        assert!(rules.ignored(&p(".ruff_cache/.gitignore"), false));
        assert!(rules.ignored(&p(".ruff_cache/CACHEDIR.TAG"), false));
        assert!(rules.ignored(&p(".ruff_cache/0.17.6"), true));
        assert!(rules.ignored(&p("build/out.log"), false));
        assert!(!rules.ignored(&p("src/new.py"), false));
    }

    #[test]
    fn deeper_rules_and_negations_win_and_info_exclude_comes_last() {
        let (dir, _) = view(&[], &[]);
        let base = dir.path().join("base");
        std::fs::write(base.join(".gitignore"), "*.tmp\n").unwrap();
        std::fs::create_dir_all(base.join("keep")).unwrap();
        std::fs::write(base.join("keep/.gitignore"), "!*.tmp\n").unwrap();
        std::fs::write(base.join(".git/info/exclude"), "secret.txt\n").unwrap();
        let repo = Repository::open(&base).unwrap();
        let rules = ViewIgnore::new(&repo, &dir.path().join("upper"));
        let p = |s: &str| RepoPath::from(s);
        assert!(rules.ignored(&p("a.tmp"), false));
        assert!(!rules.ignored(&p("keep/a.tmp"), false));
        assert!(rules.ignored(&p("deep/secret.txt"), false));
        assert!(!rules.ignored(&p("deep/public.txt"), false));
    }
}
