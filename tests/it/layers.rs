//! The walls between swarm's crates (docs/ARCHITECTURE.md), read from `cargo metadata`: the
//! command line over the engine over the sandbox, and only the command line with a terminal.

use std::collections::BTreeMap;

/// Each workspace crate's normal (not dev, not build) dependencies, by package name.
fn dependencies() -> BTreeMap<String, Vec<String>> {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn the_crates_are_layers_and_only_the_command_line_has_a_terminal() {
    let deps = dependencies();
    let names: Vec<&str> = deps.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["swarm", "swarm-engine", "swarm-mcp", "swarm-sandbox"]
    );
    let has = |krate: &str, dep: &str| deps[krate].iter().any(|d| d == dep);
    // Downward only: the front ends (the command line, the MCP server) use the engine's
    // API, never the sandbox beneath it.
    assert!(has("swarm", "swarm-engine"));
    assert!(has("swarm", "swarm-mcp"));
    assert!(has("swarm-mcp", "swarm-engine"));
    for front in ["swarm", "swarm-mcp"] {
        assert!(!has(front, "swarm-sandbox"), "{front}");
    }
    assert!(has("swarm-engine", "swarm-sandbox"));
    for lower in ["swarm-engine", "swarm-sandbox"] {
        assert!(!has(lower, "swarm-mcp"), "{lower}");
    }
    assert!(!has("swarm-sandbox", "swarm-engine"));
    // "The engine never renders" is a compile error: it has nothing to render with.
    for terminal in [
        "clap",
        "clap_complete",
        "clap_mangen",
        "indicatif",
        "console",
    ] {
        assert!(has("swarm", terminal), "{terminal}");
        for lower in ["swarm-engine", "swarm-mcp", "swarm-sandbox"] {
            assert!(!has(lower, terminal), "{lower} depends on {terminal}");
        }
    }
    // The confinement knows nothing of git, models or HTTP clients.
    for engine_only in ["git2", "reqwest", "hyper"] {
        assert!(!has("swarm-sandbox", engine_only), "{engine_only}");
    }
}

/// Every source file of the product is at most 600 lines before its tests (functions are
/// held to 80 by clippy's `too_many_lines`, set in Cargo.toml and clippy.toml).
#[test]
fn no_source_file_is_over_600_lines_outside_its_tests() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    let mut seen = 0;
    let mut dirs = vec![
        root.join("src"),
        root.join("crates/engine/src"),
        root.join("crates/mcp/src"),
        root.join("crates/sandbox/src"),
    ];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            seen += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            let lines = text
                .lines()
                .take_while(|l| !l.starts_with("#[cfg(test)]"))
                .count();
            if lines > 600 {
                long.push(format!("{}: {lines}", path.display()));
            }
        }
    }
    assert!(seen > 100, "only {seen} files: are the paths right?");
    assert!(long.is_empty(), "over 600 lines:\n{}", long.join("\n"));
}

/// The engine's modules, read from their sources: no loop between sibling modules at any
/// level (`orchestrator::task` ↔ `orchestrator::watch`, `git` ↔ `worker`), and nothing below
/// `app` uses `app` (the use cases sit on top of the domain, never the other way).
#[test]
fn the_engines_modules_have_no_loops_and_nothing_below_app_uses_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/engine/src");
    let refs = crate::module_graph::Crate::read(&src).references();
    let mut problems = Vec::new();
    for r in &refs {
        if r.to.first().map(String::as_str) == Some("app")
            && r.from.first().map(String::as_str) != Some("app")
            && !r.from.is_empty()
        {
            let line = format!("below app, uses app: {}", r.seen);
            if !problems.contains(&line) {
                problems.push(line);
            }
        }
    }
    for (parent, edges) in crate::module_graph::sibling_edges(&refs) {
        for cycle in crate::module_graph::cycles(&edges) {
            let mut steps = Vec::new();
            for (i, a) in cycle.iter().enumerate() {
                let b = &cycle[(i + 1) % cycle.len()];
                steps.push(format!(
                    "    {a} -> {b} ({})",
                    edges[&(a.clone(), b.clone())]
                ));
            }
            problems.push(format!(
                "a loop in {}:\n{}",
                ["crate".to_string()]
                    .iter()
                    .chain(&parent)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("::"),
                steps.join("\n")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The MCP server talks to the engine in types, not in the command line's text: no string
/// in its code is a flag (`"--jobs"`, `format!("--{name}={value}")`).
#[test]
fn the_mcp_server_spells_no_command_line_flag() {
    use syn::visit::Visit;
    struct Flags(Vec<String>);
    impl<'ast> Visit<'ast> for Flags {
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            // Its unit tests may name what they check against.
            if m.ident != "tests" {
                syn::visit::visit_item_mod(self, m);
            }
        }
        fn visit_lit_str(&mut self, lit: &'ast syn::LitStr) {
            if lit.value().starts_with("--") {
                self.0.push(lit.value());
            }
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            // format!("--{name}") and the like: the literal is the macro's first token.
            let tokens = mac.tokens.to_string();
            if tokens.trim_start().starts_with("\"--") {
                self.0.push(tokens);
            }
        }
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/mcp/src");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut flags = Flags(Vec::new());
        flags.visit_file(&syn::parse_file(&text).unwrap());
        found.extend(
            flags
                .0
                .into_iter()
                .map(|f| format!("{}: {f}", path.display())),
        );
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
