//! How many files swarm's process may hold open (`RLIMIT_NOFILE`), and what its workers get.
//!
//! A worker slot holds about four descriptors in swarm's process (its output pipe, its jail
//! host's socket, its log; a committing task beside it a few more), and the doors of all
//! slots may hold half the soft limit (`door/limit.rs`). Many systems start a process
//! with a soft limit of 1,024 and a far higher hard one: at `-j 500` a run under 1,024 failed
//! task after task with "Too many open files". So before a run swarm checks that its limit
//! covers `--jobs` ([`ensure`]): it raises its soft limit to the hard one when it has to, and
//! refuses a run the hard limit cannot cover. Its workers get the soft limit back as swarm
//! found it ([`restore_in_child`]): a program using `select(2)` breaks on descriptors past
//! 1,024, where under its usual limit it gets an error.

use std::sync::OnceLock;

/// Descriptors a worker slot is counted at in swarm's process: twice what one holds.
pub const PER_JOB: u64 = 8;

/// Descriptors swarm holds whatever `--jobs` is: its runtime, the repository, the run's
/// files, the gateway's listeners.
pub const BASE: u64 = 64;

/// The soft limit swarm found, when it raised its own.
static FOUND: OnceLock<u64> = OnceLock::new();

/// `--jobs` needs more descriptors than the hard limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall {
    /// The soft limit `jobs` needs.
    pub needed: u64,
    /// The most swarm may raise its soft limit to.
    pub allowed: u64,
    /// The most jobs that limit covers.
    pub max_jobs: u64,
}

/// The soft limit that `jobs` slots need: their own descriptors, doubled for the doors'
/// share.
pub fn needed(jobs: usize) -> u64 {
    2 * (BASE + PER_JOB * jobs as u64)
}

/// Makes sure this process may hold what `jobs` worker slots need, raising its soft limit up
/// to the hard one (no further than the kernel's `fs.nr_open`) if it must.
pub fn ensure(jobs: usize) -> Result<(), Shortfall> {
    let (soft, hard) = current();
    let needed = needed(jobs);
    if soft >= needed {
        return Ok(());
    }
    // What `allowed` covers: the inverse of [`needed`].
    let short = |allowed: u64| Shortfall {
        needed,
        allowed,
        max_jobs: (allowed / 2).saturating_sub(BASE) / PER_JOB,
    };
    let allowed = hard.min(kernel_max());
    if allowed < needed {
        return Err(short(allowed.max(soft)));
    }
    set(allowed, hard).map_err(|_| short(soft))?;
    FOUND.get_or_init(|| soft);
    Ok(())
}

/// Gives a process started by `command` the soft limit swarm found, if swarm raised its own.
pub fn restore_in_child(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let Some(&soft) = FOUND.get() else { return };
    let hard = current().1;
    // SAFETY: `setrlimit` is a system call, safe between `fork` and `exec`; the closure
    // allocates nothing and touches no lock.
    unsafe {
        command.pre_exec(move || set(soft, hard));
    }
}

/// This process's soft and hard limits.
pub fn current() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is valid for the call.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => (limit.rlim_cur, limit.rlim_max),
        _ => (1024, 1024),
    }
}

fn set(soft: u64, hard: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: `limit` is valid for the call.
    match unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The kernel's ceiling on any process's descriptors (`fs.nr_open`; an unlimited hard limit
/// cannot be reached).
fn kernel_max() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_and_the_doors_share_are_counted() {
        assert_eq!(needed(1), 2 * (64 + 8));
        // The default -j 4 fits a soft limit of 1,024 without raising it.
        assert!(needed(4) <= 1024);
        assert!(needed(500) > 1024);
    }
}
