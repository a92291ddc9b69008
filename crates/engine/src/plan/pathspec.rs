//! Pathspecs as users write them: `'*.py'`, `'src/**/*.rs'`, `src/`, `:!vendor/`.
//!
//! git's own pathspec matching lets `*` cross `/` and does not give `**` its globstar meaning,
//! which surprises people who write `src/**/*.py` and expect `src/a.py` to match. swarm uses
//! glob semantics instead: a pattern without `/` matches a file name at any depth (like
//! `.gitignore`), a pattern with `/` is anchored at the repository root (or at the directory
//! swarm was started in), `**` spans directories, and a pattern without glob characters is a
//! file or a directory. `:!pattern`, `:^pattern` and `:(exclude)pattern` exclude. As with
//! git, a pattern also matches the file (or directory) whose name it is, glob characters and
//! all: `'p[1].txt'` selects a file named `p[1].txt`.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use super::PlanError;
use crate::repo_path::RepoPath;

#[derive(Debug)]
pub(crate) struct Pathspec {
    include: Matcher,
    exclude: Matcher,
    include_all: bool,
}

#[derive(Debug, Default)]
struct Matcher {
    globs: Option<GlobSet>,
    /// Literal files or directories (without trailing `/`).
    literals: Vec<Vec<u8>>,
}

impl Matcher {
    fn is_match(&self, path: &RepoPath) -> bool {
        let bytes = path.as_bytes();
        self.literals.iter().any(|lit| {
            lit.is_empty()
                || bytes == lit.as_slice()
                || (bytes.starts_with(lit) && bytes.get(lit.len()) == Some(&b'/'))
        }) || self
            .globs
            .as_ref()
            .is_some_and(|g| g.is_match(path.as_path()))
    }
}

impl Pathspec {
    /// `prefix` is the directory swarm runs in, relative to the repository root ("" at the
    /// root); relative patterns are taken from there.
    pub(crate) fn new(specs: &[String], prefix: &str) -> Result<Self, PlanError> {
        let mut include = (GlobSetBuilder::new(), Vec::new(), false);
        let mut exclude = (GlobSetBuilder::new(), Vec::new(), false);
        for spec in specs {
            let (target, pattern) = if let Some(rest) = spec
                .strip_prefix(":(exclude)")
                .or_else(|| spec.strip_prefix(":!"))
                .or_else(|| spec.strip_prefix(":^"))
            {
                (&mut exclude, rest)
            } else if let Some(rest) = spec.strip_prefix(":/") {
                // git's "from the top" magic.
                (&mut include, rest)
            } else {
                (&mut include, spec.as_str())
            };
            let top = spec.starts_with(":/");
            let pattern = pattern.trim_start_matches("./");
            let pattern = pattern.strip_suffix('/').unwrap_or(pattern);
            if pattern.starts_with(':') {
                return Err(PlanError::PathspecMagic(spec.clone()));
            }
            let base = if top || pattern.starts_with('/') {
                String::new()
            } else {
                prefix.trim_end_matches('/').to_string()
            };
            let pattern = pattern.trim_start_matches('/');
            let join = |p: &str| {
                if base.is_empty() {
                    p.to_string()
                } else if p.is_empty() || p == "." {
                    base.clone()
                } else {
                    format!("{base}/{p}")
                }
            };
            if pattern.contains(['*', '?', '[', '{']) {
                let full = if pattern.contains('/') {
                    join(pattern)
                } else {
                    join(&format!("**/{pattern}"))
                };
                target.0.add(build_glob(&full, spec)?);
                target.2 = true;
                // A name with glob characters in it, meant as it is.
                target.1.push(join(pattern).into_bytes());
            } else if pattern.is_empty() || pattern == "." {
                target.1.push(base.into_bytes());
            } else {
                target.1.push(join(pattern).into_bytes());
            }
        }
        let finish = |(builder, literals, has_globs): (GlobSetBuilder, Vec<Vec<u8>>, bool)| {
            let globs = if has_globs {
                Some(builder.build().map_err(|e| PlanError::Pathspec {
                    spec: specs.join(" "),
                    message: e.to_string(),
                })?)
            } else {
                None
            };
            Ok::<_, PlanError>(Matcher { globs, literals })
        };
        let include_all = specs
            .iter()
            .all(|s| s.starts_with(":!") || s.starts_with(":^") || s.starts_with(":(exclude)"));
        Ok(Self {
            include: finish(include)?,
            exclude: finish(exclude)?,
            include_all,
        })
    }

    pub(crate) fn matches(&self, path: &RepoPath) -> bool {
        (self.include_all || self.include.is_match(path)) && !self.exclude.is_match(path)
    }
}

fn build_glob(pattern: &str, spec: &str) -> Result<Glob, PlanError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| PlanError::Pathspec {
            spec: spec.to_string(),
            message: e.kind().to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(specs: &[&str], prefix: &str, path: &str) -> bool {
        let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
        Pathspec::new(&specs, prefix)
            .unwrap()
            .matches(&RepoPath::from(path))
    }

    #[test]
    fn globs_directories_and_exclusions() {
        assert!(m(&["*.py"], "", "a/b/c.py"));
        assert!(m(&["src/**/*.py"], "", "src/x.py"));
        assert!(m(&["src/**/*.py"], "", "src/a/b/x.py"));
        assert!(!m(&["src/*.py"], "", "src/a/x.py"));
        assert!(m(&["src"], "", "src/a/x.py"));
        assert!(m(&["src/"], "", "src/a/x.py"));
        assert!(!m(&["src"], "", "srcx/a.py"));
        assert!(m(&["README.md"], "", "README.md"));
        assert!(!m(&["*.py", ":!vendor"], "", "vendor/x.py"));
        assert!(m(&[":!vendor"], "", "lib/x.py"));
        assert!(m(&["*.py"], "sub", "sub/deep/x.py"));
        assert!(!m(&["*.py"], "sub", "other/x.py"));
        assert!(m(&[":/top.py"], "sub", "top.py"));
    }

    #[test]
    fn a_pattern_also_matches_the_file_it_names() {
        assert!(m(&["p[1].txt"], "", "p[1].txt"));
        assert!(m(&["q{a,b}.txt"], "", "q{a,b}.txt"));
        assert!(m(&["q{a,b}.txt"], "", "qa.txt"));
        assert!(m(&["d/what?.txt"], "", "d/what?.txt"));
        assert!(m(&["t[1]"], "", "t[1]/inside.txt"));
        assert!(!m(&["*.txt", ":!p[1].txt"], "", "p[1].txt"));
        assert!(m(&["*.j2"], "", "t/completely{{ 1 % 0 }} safe template.j2"));
    }

    #[test]
    fn invalid_glob_is_bad_input() {
        assert!(Pathspec::new(&["src/[".to_string()], "").is_err());
    }
}
