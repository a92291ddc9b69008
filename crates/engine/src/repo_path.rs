//! Repository-relative paths as git stores them: bytes, not necessarily UTF-8.
//!
//! Git file names are byte strings. swarm keeps them as bytes end to end (environment
//! variables, tree edits, reports) so a Latin-1 file name is edited like any other. In JSON a
//! path is a string when it is valid UTF-8 (virtually always) and an array of bytes otherwise,
//! so nothing is lost.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoPath(Vec<u8>);

impl RepoPath {
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn as_os_str(&self) -> &OsStr {
        OsStr::from_bytes(&self.0)
    }

    pub fn as_path(&self) -> &Path {
        Path::new(self.as_os_str())
    }

    /// Is this path inside the folder `folder` (`a/b` is inside `a`; `a` and `ab` are not)?
    pub(crate) fn is_inside(&self, folder: &[u8]) -> bool {
        self.0
            .strip_prefix(folder)
            .is_some_and(|rest| rest.first() == Some(&b'/'))
    }

    /// Is this a path git could store in a tree: relative, with no empty, `.`, `..` or `.git`
    /// component and no NUL byte? `Err` says what is wrong. Paths from outside (plan files,
    /// settings) are checked with this before swarm uses them.
    pub fn check(&self) -> Result<(), String> {
        let shown = self.display();
        if self.0.is_empty() {
            return Err("an empty path".into());
        }
        if self.0.contains(&0) {
            return Err(format!("'{shown}' contains a NUL byte"));
        }
        if self.0.starts_with(b"/") {
            return Err(format!(
                "'{shown}' is absolute; paths are relative to the repository root"
            ));
        }
        for part in self.0.split(|&b| b == b'/') {
            match part {
                b"" => return Err(format!("'{shown}' has an empty component")),
                b"." | b".." => {
                    return Err(format!(
                        "'{shown}' uses '{}'",
                        String::from_utf8_lossy(part)
                    ));
                }
                p if p.eq_ignore_ascii_case(b".git") => {
                    return Err(format!("'{shown}' is inside .git"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The path for display: lossy where the name is not UTF-8.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

/// `bytes` (a path as git stores it) as a path.
pub(crate) fn bytes_as_path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

impl fmt::Debug for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.display())
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// Sets of paths can be asked about bytes as git gives them, without a copy (the order of
/// `RepoPath` is its bytes').
impl std::borrow::Borrow<[u8]> for RepoPath {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for RepoPath {
    fn from(s: &str) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

impl Serialize for RepoPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(s) => serializer.serialize_str(s),
            Err(_) => self.0.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for RepoPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            Bytes(Vec<u8>),
        }
        Ok(match Repr::deserialize(deserializer)? {
            Repr::Text(s) => Self(s.into_bytes()),
            Repr::Bytes(b) => Self(b),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_from_outside_are_checked() {
        for good in ["a.txt", "src/a b.py", ".gitignore", "x/.github/y"] {
            assert!(RepoPath::from(good).check().is_ok(), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../b",
            "./a",
            "a//b",
            "a/",
            ".git/config",
            "x/.GIT/y",
        ] {
            assert!(RepoPath::from(bad).check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn non_utf8_round_trips_through_json() {
        let p = RepoPath::from_bytes(b"caf\xe9.txt".to_vec());
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, "[99,97,102,233,46,116,120,116]");
        assert_eq!(serde_json::from_str::<RepoPath>(&json).unwrap(), p);
        let q = RepoPath::from("src/a b.py");
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"src/a b.py\"");
    }
}
