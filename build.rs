//! Sets `SWARM_VERSION`: the package version and, when built from a git checkout, the commit
//! (`0.1.0 (1a2b3c4d5e 2026-11-24)`), as cargo, uv and jj say theirs.

use std::process::Command;

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let full = match git(&["log", "-1", "--format=%h %cs", "--abbrev=10"]) {
        Some(commit) => format!("{version} ({commit})"),
        None => version.to_string(),
    };
    println!("cargo:rustc-env=SWARM_VERSION={full}");
    // Built again when the checkout moves to another commit (paths that exist only: cargo
    // runs a build script every time for one that does not).
    let mut watched = vec!["build.rs".to_string()];
    if let (Some(dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) {
        watched.push(format!("{dir}/HEAD"));
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(format!("{common}/{head}"));
        }
        watched.push(format!("{common}/packed-refs"));
    }
    for path in watched {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
