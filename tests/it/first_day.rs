//! A newcomer's first hour: the README's examples run as written, against a small Python and
//! JavaScript fixture, with stand-ins for the codemods that behave as the real ones do where
//! it matters to swarm — ruff writes its cache with a nested `.gitignore` (`*`) and exits 1
//! when findings are left, prettier refuses a file it cannot parse and exits 2, pyupgrade
//! exits 1 whenever it rewrites a file.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Run, TestRepo, hermetic};

/// The stand-ins, as executables in a folder put first on PATH.
const RUFF: &str = r#"#!/bin/sh
# ruff check --fix [--force-exclude] FILE: splits `import os, sys`; caches as ruff does, in
# the current folder.
[ "$1" = check ] && [ "$2" = --fix ] || { echo "stand-in ruff: unexpected $*" >&2; exit 2; }
for f in "$@"; do :; done
mkdir -p .ruff_cache/0.17.6
printf '*\n' > .ruff_cache/.gitignore
printf 'Signature: 8a477f597d28d172789f06886806bc55\n' > .ruff_cache/CACHEDIR.TAG
echo cache > ".ruff_cache/0.17.6/$$"
sed -i 's/^import os, sys$/import os\nimport sys/' "$f"
if grep -q unfixable "$f"; then echo "$f:1:1: E999 unfixable"; echo "Found 1 error."; exit 1; fi
"#;

const PRETTIER: &str = r#"#!/bin/sh
# prettier --write FILES…: removes spaces before `;`, refuses files it cannot parse.
[ "$1" = --write ] || exit 2
shift
status=0
for f in "$@"; do
  if grep -q 'SYNTAX ERROR' "$f"; then
    echo "[error] $f: SyntaxError: Unexpected token (1:1)"; status=2
  else
    sed -i 's/ *;/;/' "$f"
  fi
done
exit $status
"#;

const PYUPGRADE: &str = r#"#!/bin/sh
# pyupgrade FILE: rewrites `class A(object)` and exits 1 when it rewrote the file.
f=$(printf '%s\n' "$@" | grep -v '^--' | head -1)
if grep -q '(object)' "$f"; then sed -i 's/(object)//' "$f"; echo "Rewriting $f"; exit 1; fi
"#;

fn stand_ins(dir: &Path) -> PathBuf {
    let bin = dir.join("stand-ins");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, script) in [
        ("ruff", RUFF),
        ("prettier", PRETTIER),
        ("pyupgrade", PYUPGRADE),
    ] {
        let path = bin.join(name);
        std::fs::write(&path, script).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    bin
}

fn fixture() -> TestRepo {
    TestRepo::with_files(&[
        (
            "src/app.py",
            "import os, sys\n\ndef foo():\n    return os.sep\n",
        ),
        ("src/util.py", "from app import foo\n\nprint(foo())\n"),
        ("src/lint.py", "import os, sys\n# unfixable\n"),
        ("src/clean.py", "x = 1\n"),
        ("web/a.js", "let a = 1 ;\n"),
        ("web/b.ts", "let b: number = 2 ;\n"),
        ("web/broken.js", "SYNTAX ERROR (\n"),
        ("legacy.py", "class A(object):\n    pass\n"),
    ])
}

/// The `swarm refactor` commands of the README's "Using swarm" block, continuation lines
/// joined, that need neither a model, nor an agent, nor a command left out (`'…'`).
fn readme_examples() -> Vec<String> {
    let readme = include_str!("../../README.md");
    let block = readme
        .split("## Using swarm")
        .nth(1)
        .and_then(|r| r.split("```sh\n").nth(1))
        .and_then(|r| r.split("```").next())
        .expect("the README's Using swarm block");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim_end();
        if current.is_empty() && !line.starts_with("swarm refactor") {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
        .into_iter()
        .filter(|c| !c.contains("--agent") && !c.contains("--model") && !c.contains('…'))
        .collect()
}

/// Runs `command` in `repo` with `sh -c`, the stand-ins and swarm first on PATH.
fn run_as_written(repo: &TestRepo, command: &str) -> Run {
    let bin = stand_ins(repo.root());
    let swarm_dir = Path::new(env!("CARGO_BIN_EXE_swarm")).parent().unwrap();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        swarm_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    hermetic(&mut cmd, &repo.home);
    Run::from(
        cmd.args(["-c", command])
            .current_dir(&repo.path)
            .env("PATH", path)
            .output()
            .unwrap(),
    )
}

#[test]
fn the_readmes_examples_run_as_written() {
    let examples = readme_examples();
    let find = |instruction: &str| {
        examples
            .iter()
            .find(|c| c.contains(instruction))
            .unwrap_or_else(|| panic!("no README example '{instruction}' in {examples:?}"))
            .clone()
    };

    // sed: every Python file under src/ that mentions foo.
    let repo = fixture();
    let run = run_as_written(&repo, &find("'rename foo to bar' 'src/**/*.py'"));
    run.assert_code(0);
    assert_eq!(
        repo.read("src/util.py"),
        "from app import bar\n\nprint(bar())\n"
    );
    assert!(repo.read("src/app.py").contains("def bar():"));
    assert_eq!(repo.git(&["status", "--porcelain"]), "");

    // ruff: into a new branch; exit 1 with findings left is success here; its cache, ignored
    // by its own nested .gitignore, is not committed.
    let repo = fixture();
    let main = repo.git(&["rev-parse", "main"]);
    let run = run_as_written(&repo, &find("'ruff autofix'"));
    run.assert_code(0);
    assert_eq!(
        repo.git(&["rev-parse", "main"]),
        main,
        "the current branch stays"
    );
    assert_eq!(
        repo.git(&["show", "lint-fixes:src/app.py"])
            .lines()
            .take(2)
            .collect::<Vec<_>>(),
        ["import os", "import sys"]
    );
    assert_eq!(
        repo.git(&["show", "lint-fixes:src/lint.py"]),
        "import os\nimport sys\n# unfixable"
    );
    let tree = repo.git(&["ls-tree", "-r", "--name-only", "lint-fixes"]);
    assert!(!tree.contains("ruff_cache"), "{tree}");

    // prettier over a list of files: the file it cannot parse fails alone, the rest merge.
    let repo = fixture();
    let run = run_as_written(&repo, &find("'prettier'"));
    run.assert_code(1);
    assert_eq!(repo.read("web/a.js"), "let a = 1;\n");
    assert_eq!(repo.read("web/b.ts"), "let b: number = 2;\n");
    assert_eq!(repo.read("web/broken.js"), "SYNTAX ERROR (\n");
    let report = repo.report(&run);
    let broken = crate::common::task_of(&report, "web/broken.js");
    assert_eq!(broken["status"], "failed", "{broken}");
}

/// pyupgrade exits 1 when it rewrites a file: without `--ok-exit-codes` the task fails and
/// the hint says what to pass; with it, the change merges. A status not listed still fails.
#[test]
fn codemods_that_exit_1_on_success_are_named_and_can_be_let_through() {
    let repo = fixture();
    let upgrade = r#"pyupgrade --py311-plus "$SWARM_FILE""#;
    let run = run_as_written(
        &repo,
        &format!("swarm refactor up legacy.py -y --exec '{upgrade}'"),
    );
    run.assert_code(1);
    let report = repo.report(&run);
    let task = &report["tasks"][0];
    assert_eq!(task["status"], "failed");
    let hint = task["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("--ok-exit-codes 0,1"), "{task}");
    assert!(run.stderr.contains("--ok-exit-codes 0,1"), "{}", run.stderr);
    assert_eq!(repo.read("legacy.py"), "class A(object):\n    pass\n");

    let run = run_as_written(
        &repo,
        &format!("swarm refactor up legacy.py -y --ok-exit-codes 0,1 --exec '{upgrade}'"),
    );
    run.assert_code(0);
    assert_eq!(repo.read("legacy.py"), "class A:\n    pass\n");

    repo.write("legacy.py", "class B(object):\n    pass\n");
    repo.commit_all("again");
    let run = run_as_written(
        &repo,
        "swarm refactor up legacy.py -y --ok-exit-codes 0,1 --exec 'sed -i s/B/C/ legacy.py; exit 2'",
    );
    run.assert_code(1);
    assert_eq!(repo.read("legacy.py"), "class B(object):\n    pass\n");

    let run = repo.swarm(&[
        "refactor",
        "up",
        ".",
        "-y",
        "--ok-exit-codes",
        "0,256",
        "--exec",
        "true",
    ]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("256 is not an exit status"),
        "{}",
        run.stderr
    );
}
