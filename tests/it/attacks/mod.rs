//! The attacks of docs/SECURITY.md, performed: hostile arguments, plan files, shard records,
//! workers, models and repositories. Each test attacks swarm the way an attacker would and
//! checks, with the git CLI and the filesystem as oracles, that nothing outside the task's
//! worktree changed.
//!
//! Every target an attack aims at is inside the test's temporary directory (a `victim`
//! directory, the test's HOME, the test repository), so a regression cannot damage the
//! machine running the tests.

mod agent_keys;
mod cleanup;
mod confinement;
mod data_loss;
mod doors;
mod gateway;
mod integrity;
mod jail_host;
mod limits;
mod model;
mod worktrees;
