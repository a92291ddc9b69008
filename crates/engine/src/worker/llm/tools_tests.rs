use super::*;

/// A workspace in a folder of the test's own temporary directory, so that what an escape
/// would reach (`../x`) is the test's too, never a path another program owns.
struct Dir {
    outer: tempfile::TempDir,
    root: PathBuf,
}

impl Dir {
    fn path(&self) -> &Path {
        &self.root
    }
}

fn ws(files: Option<&[&str]>) -> (Dir, Workspace) {
    let outer = tempfile::tempdir().unwrap();
    let dir = Dir {
        root: outer.path().join("ws"),
        outer,
    };
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("src/a.rs"),
        "fn foo() {}\nfn bar() { foo(); }\n",
    )
    .unwrap();
    let files: Option<Vec<RepoPath>> =
        files.map(|f| f.iter().map(|p| RepoPath::from(*p)).collect());
    let w = Workspace::new(dir.path(), files.as_deref()).unwrap();
    (dir, w)
}

fn text(o: Outcome) -> String {
    match o {
        Outcome::Text(t) => t,
        Outcome::Failed(why) => format!("error: {why}"),
        Outcome::Finish { .. } => panic!("finish"),
    }
}

#[test]
fn escapes_are_refused() {
    let (dir, w) = ws(None);
    std::os::unix::fs::symlink("/etc", dir.path().join("out")).unwrap();
    for path in [
        "../x",
        "/etc/passwd",
        "out/passwd",
        ".git/config",
        "src/../../x",
    ] {
        let r = text(w.call("read_file", &json!({"path": path}).to_string()));
        assert!(r.starts_with("error:"), "{path}: {r}");
        let r = text(w.call(
            "write_file",
            &json!({"path": path, "content": "x"}).to_string(),
        ));
        assert!(r.starts_with("error:"), "{path}: {r}");
    }
    assert!(!dir.outer.path().join("x").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".git/config")).unwrap(),
        "[core]\n"
    );
}

#[test]
fn scope_limits_writes_not_reads() {
    let (dir, w) = ws(Some(&["src/a.rs"]));
    std::fs::write(dir.path().join("other.rs"), "x\n").unwrap();
    assert!(text(w.call("read_file", r#"{"path":"other.rs"}"#)).contains("x"));
    let r = text(w.call("write_file", r#"{"path":"other.rs","content":"y"}"#));
    assert!(r.starts_with("error:") && r.contains("src/a.rs"), "{r}");
    let r = text(w.call("write_file", r#"{"path":"./src/a.rs","content":"y"}"#));
    assert!(!r.starts_with("error:"), "{r}");
}

#[test]
fn edit_file_is_exact_and_helps_when_it_misses() {
    let (dir, w) = ws(None);
    let r = text(w.call(
        "edit_file",
        r#"{"path":"src/a.rs","old_string":"foo","new_string":"baz"}"#,
    ));
    assert!(
        r.contains("occurs 2 times") && r.contains("lines 1, 2"),
        "{r}"
    );
    let r = text(w.call(
        "edit_file",
        r#"{"path":"src/a.rs","old_string":"fn  bar() { foo(); }","new_string":"x"}"#,
    ));
    assert!(r.contains("closest line is 2"), "{r}");
    let r = text(w.call(
        "edit_file",
        r#"{"path":"src/a.rs","old_string":"foo","new_string":"baz","replace_all":true}"#,
    ));
    assert_eq!(r, "edited src/a.rs: replaced 2 occurrence(s)");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/a.rs")).unwrap(),
        "fn baz() {}\nfn bar() { baz(); }\n"
    );
}

#[test]
fn bad_arguments_and_unknown_tools() {
    let (_dir, w) = ws(None);
    assert!(text(w.call("read_file", "{not json")).starts_with("error: the arguments"));
    assert!(text(w.call("run", "{}")).starts_with("error: there is no tool"));
    assert!(text(w.call("finish", r#"{"status":"maybe"}"#)).starts_with("error:"));
    assert_eq!(
        w.call("finish", r#"{"status":"done","summary":"ok"}"#),
        Outcome::Finish {
            status: FinishStatus::Done,
            summary: "ok".into()
        }
    );
}

#[test]
fn read_pages_and_search_respects_gitignore() {
    let (dir, w) = ws(None);
    let long: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.path().join("long.txt"), long).unwrap();
    let r = text(w.call("read_file", r#"{"path":"long.txt","offset":10,"limit":5}"#));
    assert!(
        r.contains("    10\tline 10") && r.contains("offset 15"),
        "{r}"
    );
    std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(dir.path().join("target")).unwrap();
    std::fs::write(dir.path().join("target/gen.rs"), "fn foo() {}\n").unwrap();
    let r = text(w.call("search", r#"{"pattern":"fn foo"}"#));
    assert!(r.contains("src/a.rs:1:") && !r.contains("target"), "{r}");
    let r = text(w.call("list_files", "{}"));
    assert!(
        r.contains("src/a.rs") && !r.contains("target/") && !r.contains(".git/"),
        "{r}"
    );
}
