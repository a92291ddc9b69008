//! Paths written with `~/` in settings, and back: one reading of the home directory.

use std::path::{Path, PathBuf};

use crate::env_vars;

/// The home directory (`$HOME`).
pub(crate) fn home_dir() -> Option<PathBuf> {
    std::env::var_os(env_vars::HOME).map(PathBuf::from)
}

/// `~/rest` under the home directory; any other path as it is.
pub(crate) fn expand(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), home_dir()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(path),
    }
}

/// `path` as `~/rest` when it is under the home directory, as settings write it.
pub fn tilde(path: &Path) -> String {
    match home_dir()
        .as_deref()
        .and_then(|h| path.strip_prefix(h).ok())
    {
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}
