use super::*;

/// A repository with one commit, in a temporary directory.
fn repo() -> (tempfile::TempDir, Repository, Oid) {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repository::init(dir.path().join("repo")).unwrap();
    std::fs::write(dir.path().join("repo/a.txt"), "a\n").unwrap();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new("a.txt")).unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("t", "t@example.com").unwrap();
    let commit = repo
        .commit(Some("HEAD"), &sig, &sig, "one", &tree, &[])
        .unwrap();
    drop(tree);
    (dir, repo, commit)
}

fn locked(repo: &Repository, name: &str) -> bool {
    matches!(
        repo.find_worktree(name).unwrap().is_locked().unwrap(),
        git2::WorktreeLockStatus::Locked(_)
    )
}

#[test]
fn a_lease_dropped_on_an_error_path_gives_its_worktree_back() {
    let (dir, repo, commit) = repo();
    let run: RunId = "20261124-000000-abcd".parse().unwrap();
    let pool = Arc::new(WorktreePool::new(
        repo.path(),
        &run,
        Vec::new(),
        &dir.path().join("repo"),
    ));
    let branch = run.task_branch(&"a-txt".parse().unwrap());
    let name = {
        let fails = || -> anyhow::Result<String> {
            let lease = pool.acquire(&branch, commit)?;
            assert!(lease.fresh);
            assert!(locked(&repo, &lease.name));
            anyhow::ensure!(lease.name.is_empty(), "{}", lease.name);
            Ok(String::new())
        };
        fails().unwrap_err().to_string()
    };
    // Idle in the pool, still locked: no `git worktree prune/remove` takes it meanwhile.
    assert!(locked(&repo, &name), "an idle worktree was unlocked");
    let again = pool.acquire(&branch, commit).unwrap();
    assert_eq!(again.name, name);
    assert!(!again.fresh, "the worktree was not reused");
    again.release().unwrap();
    assert_eq!(pool.remove_all(), 1);
    assert!(repo.worktrees().unwrap().is_empty());
}
