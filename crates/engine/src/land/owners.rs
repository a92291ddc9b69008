//! CODEOWNERS, resolved as GitHub documents it: the first of `.github/CODEOWNERS`,
//! `CODEOWNERS` and `docs/CODEOWNERS` in the tree, one rule a line (a gitignore-style pattern,
//! then owners), and the *last* rule matching a file decides its owners; a rule with no
//! owners leaves the files it matches unowned.
//!
//! Patterns, as GitHub reads them:
//! - a leading `/`, or a `/` inside the pattern, anchors it at the root; otherwise it
//!   matches at any depth (`*.js`, `apps/`);
//! - a trailing `/` matches a folder and everything under it (`/build/logs/`);
//! - a pattern naming a folder also covers what is under it (`apps/github`), except one that
//!   ends in `/*`, which covers the folder's own files only (`docs/*` owns `docs/a.md`, not
//!   `docs/sub/b.md`);
//! - `*` stops at `/`, `**` does not; `\#` starts a pattern with `#`; `#` starts a comment.

use globset::{Glob, GlobBuilder, GlobMatcher};

/// Where GitHub looks for the file, in its order.
pub(crate) const LOCATIONS: [&str; 3] = [".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS"];

#[derive(Debug)]
struct Rule {
    matchers: Vec<GlobMatcher>,
    owners: Vec<String>,
}

/// The rules of one CODEOWNERS file.
#[derive(Debug)]
pub(crate) struct CodeOwners {
    rules: Vec<Rule>,
}

impl CodeOwners {
    /// The rules of `text`, and a warning for each line that is not one (GitHub skips them).
    pub(crate) fn parse(text: &str) -> (Self, Vec<String>) {
        let mut rules = Vec::new();
        let mut warnings = Vec::new();
        for (n, line) in text.lines().enumerate() {
            match parse_line(line) {
                Ok(Some(rule)) => rules.push(rule),
                Ok(None) => {}
                Err(why) => warnings.push(format!("CODEOWNERS line {}: {why}", n + 1)),
            }
        }
        (Self { rules }, warnings)
    }

    /// The owners of `path` (`/`-separated, from the root): those of the last rule that
    /// matches it; empty when no rule does, or the last one names nobody.
    pub(crate) fn owners(&self, path: &str) -> &[String] {
        self.rules
            .iter()
            .rev()
            .find(|r| r.matchers.iter().any(|m| m.is_match(path)))
            .map_or(&[], |r| r.owners.as_slice())
    }
}

fn parse_line(line: &str) -> Result<Option<Rule>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut words = line.split_whitespace();
    let Some(pattern) = words.next() else {
        return Ok(None);
    };
    let pattern = pattern.strip_prefix('\\').unwrap_or(pattern);
    let mut owners = Vec::new();
    for word in words {
        if word.starts_with('#') {
            break;
        }
        if !(word.starts_with('@') || word.contains('@')) {
            return Err(format!(
                "`{word}` is not an owner (@user, @org/team or an email)"
            ));
        }
        owners.push(word.to_string());
    }
    let matchers = globs(pattern)?
        .into_iter()
        .map(|g| g.compile_matcher())
        .collect();
    Ok(Some(Rule { matchers, owners }))
}

/// The globs a pattern stands for (see the module's documentation).
fn globs(pattern: &str) -> Result<Vec<Glob>, String> {
    if pattern.starts_with('!') {
        return Err(format!("`{pattern}`: negated patterns are not supported"));
    }
    let folder_only = pattern.ends_with('/');
    let trimmed = pattern.trim_end_matches('/');
    let anchored = trimmed.starts_with('/') || trimmed.contains('/');
    let trimmed = trimmed.trim_start_matches('/');
    if trimmed.is_empty() {
        return Err(format!("`{pattern}` names no file"));
    }
    let base = match anchored {
        true => trimmed.to_string(),
        false => format!("**/{trimmed}"),
    };
    let mut texts = Vec::new();
    if !folder_only {
        texts.push(base.clone());
    }
    if folder_only || trimmed.rsplit('/').next().is_none_or(|last| last != "*") {
        texts.push(format!("{base}/**"));
    }
    texts
        .iter()
        .map(|text| {
            GlobBuilder::new(text)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| format!("`{pattern}`: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners<'a>(co: &'a CodeOwners, path: &str) -> Vec<&'a str> {
        co.owners(path).iter().map(String::as_str).collect()
    }

    /// The examples of GitHub's documentation of CODEOWNERS.
    #[test]
    fn githubs_examples() {
        let (co, warnings) = CodeOwners::parse(
            "# a comment\n\
             *       @global-owner1 @global-owner2\n\
             *.js    @js-owner #This is an inline comment.\n\
             *.go docs@example.com\n\
             *.txt @octo-org/octocats\n\
             /build/logs/ @doctocat\n\
             docs/*  docs@example.com\n\
             apps/ @octocat\n\
             /docs/ @doctocat\n\
             /scripts/ @doctocat @octocat\n\
             **/logs @octocat\n\
             /apps/ @octocat\n\
             /apps/github\n\
             \\#odd @hash\n",
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            owners(&co, "README.md"),
            ["@global-owner1", "@global-owner2"]
        );
        assert_eq!(owners(&co, "src/deep/app.js"), ["@js-owner"]);
        assert_eq!(owners(&co, "main.go"), ["docs@example.com"]);
        assert_eq!(owners(&co, "a/b/notes.txt"), ["@octo-org/octocats"]);
        // `**/logs` comes after `/build/logs/`: the last match wins.
        assert_eq!(owners(&co, "build/logs/x/y.log"), ["@octocat"]);
        assert_eq!(
            owners(&co, "build/x.log"),
            ["@global-owner1", "@global-owner2"]
        );
        assert_eq!(owners(&co, "src/build/logs/y.log"), ["@octocat"], "**/logs");
        // `/docs/` (later) wins over `docs/*` for the docs folder at the root.
        assert_eq!(owners(&co, "docs/getting-started.md"), ["@doctocat"]);
        // `docs/*` has a `/`: anchored at the root, and only the folder's own files.
        assert_eq!(
            owners(&co, "lib/docs/intro.md"),
            ["@global-owner1", "@global-owner2"]
        );
        let (only, _) = CodeOwners::parse("* @all\ndocs/* @docs\n");
        assert_eq!(owners(&only, "docs/a.md"), ["@docs"]);
        assert_eq!(owners(&only, "docs/build-app/t.md"), ["@all"]);
        assert_eq!(
            owners(&co, "lib/apps/x.rs"),
            ["@octocat"],
            "apps/ at any depth"
        );
        assert_eq!(owners(&co, "scripts/a/b.sh"), ["@doctocat", "@octocat"]);
        assert!(
            owners(&co, "apps/github/x.rs").is_empty(),
            "a rule with no owners"
        );
        assert_eq!(owners(&co, "apps/other.rs"), ["@octocat"]);
        assert_eq!(owners(&co, "#odd"), ["@hash"]);
    }

    #[test]
    fn no_rule_leaves_a_file_unowned_and_bad_lines_are_named() {
        let (co, warnings) = CodeOwners::parse("/src/ @a\n!x @b\n/lib/ owner\n");
        assert!(owners(&co, "README.md").is_empty());
        assert_eq!(owners(&co, "src/a.rs"), ["@a"]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("line 2"), "{warnings:?}");
        assert!(
            warnings[1].contains("`owner` is not an owner"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_star_stops_at_a_slash() {
        let (co, _) = CodeOwners::parse("/src/*.rs @top\n/src/**/*.rs @any\n/x/*/y @mid\n");
        assert_eq!(owners(&co, "src/a/b.rs"), ["@any"]);
        let (co, _) = CodeOwners::parse("/src/**/*.rs @any\n/src/*.rs @top\n/x/*/y @mid\n");
        assert_eq!(owners(&co, "src/a.rs"), ["@top"]);
        assert_eq!(owners(&co, "src/a/b.rs"), ["@any"]);
        assert_eq!(owners(&co, "x/q/y"), ["@mid"]);
        assert_eq!(
            owners(&co, "x/q/y/z.md"),
            ["@mid"],
            "a folder covers what is under it"
        );
        assert!(owners(&co, "x/q/r/y").is_empty());
    }
}
