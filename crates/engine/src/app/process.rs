//! What swarm's process does before anything else: become a worker's jail when it was
//! re-executed as one, else set libgit2's and the allocator's process-wide options.

/// What libgit2's object cache may hold (its default is 256 MiB).
const GIT_CACHE_BYTES: isize = 4 * 1024 * 1024;
/// The largest tree libgit2 may keep in that cache (its default is 4 KiB): a folder of 1,000
/// entries is a 32 KiB tree, which each task and each merge read again.
const GIT_CACHE_TREE_BYTES: usize = 256 * 1024;

/// What the process is, once [`start_process`] has looked.
pub enum ProcessStart {
    /// It was a jail, or the trash's emptier, and has finished as one: exit with this.
    Done(std::process::ExitCode),
    /// It is swarm, for the front end to go on; what could not be set, for it to say.
    Go { warnings: Vec<String> },
}

/// Called first, before swarm starts any thread.
pub fn start_process() -> ProcessStart {
    // Before anything allocates, in a jail as in swarm: a jail host forks a task's init
    // from its own heap.
    no_fast_bins();
    // A worker process's jail is swarm itself, re-executed (docs/SECURITY.md).
    if let Some(code) = swarm_sandbox::jail::main_if_jail() {
        return ProcessStart::Done(code);
    }
    // The process a run started to empty the trash after it (`state::empty_trash_later`).
    if let Some(common_dir) = std::env::var_os(crate::env_vars::SWARM_EMPTY_TRASH) {
        let _ = crate::state::empty_trash(std::path::Path::new(&common_dir));
        return ProcessStart::Done(std::process::ExitCode::SUCCESS);
    }
    let mut warnings = Vec::new();
    // libgit2 re-hashes every object it reads to check it, which git itself does not do
    // outside `fsck`: a tenth of a large run's time went there (docs/BENCHMARKS-HISTORY.md).
    git2::opts::strict_hash_verification(false);
    // libgit2 keeps up to 256 MiB of the objects it read, across all repositories; a long
    // run reads a new tree per merge, so that cache was most of swarm's memory at 10,000
    // tasks. The objects a task needs are the few of the integration tip.
    // SAFETY: set before any other thread uses libgit2.
    if let Err(e) = unsafe { git2::opts::set_cache_max_size(GIT_CACHE_BYTES) } {
        warnings.push(format!("cannot limit libgit2's object cache: {e}"));
    }
    // SAFETY: as above.
    if let Err(e) =
        unsafe { git2::opts::set_cache_object_limit(git2::ObjectType::Tree, GIT_CACHE_TREE_BYTES) }
    {
        warnings.push(format!("cannot set libgit2's cache limit for trees: {e}"));
    }
    limit_malloc_arenas();
    ProcessStart::Go { warnings }
}

/// glibc keeps small freed chunks in "fast bins", uncoalesced, and sweeps them all
/// (`malloc_consolidate`) whenever a larger block is asked for or freed. A commit and a merge
/// allocate hundreds of small entries a tree (libgit2's tree builders, the tree diff) between
/// the tree's serialized buffers of several KiB, so the sweeps ran all the time: malloc was
/// an eighth of the runtime's threads' samples. Without fast bins, small chunks still go to
/// the per-thread cache first and the rest are coalesced as they are freed: the one-file form
/// took 1–7 % less wall time (by the mean, three interleaved sets: docs/BENCHMARKS-HISTORY.md,
/// "No fast bins"). Unless GLIBC_TUNABLES sets it otherwise.
fn no_fast_bins() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.mxfast")) {
        // SAFETY: mallopt only sets an allocator parameter; called before other threads.
        unsafe { libc::mallopt(libc::M_MXFAST, 0) };
    }
}

/// Cores per malloc arena. At two cores, one arena: swarm's threads mostly wait on workers,
/// git and the disk, and malloc was ~7 % of their samples, so they seldom contend for it.
/// On a machine with many cores running as many workers, a single arena's lock could become
/// the bottleneck, so one more arena for each eight cores.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const CORES_PER_ARENA: usize = 8;

/// glibc gives each thread that allocates under contention an arena of its own, up to eight
/// per core, and keeps what they freed: the blocking threads that commit and reset
/// worktrees, and the base checkout's, left swarm's peak memory at nearly twice what it uses.
/// Two arenas halved that at 27,000 files; one more than that again at 100,000 files and
/// 10,000 tasks (113 MB -> 86 MB at the peak, the same time: docs/BENCHMARKS-HISTORY.md), where the
/// second arena kept ~30 MB of what the base checkout and planning had freed. One arena per
/// [`CORES_PER_ARENA`] cores (one up to eight), unless MALLOC_ARENA_MAX says.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = cores.div_ceil(CORES_PER_ARENA);
        let arenas = libc::c_int::try_from(arenas).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets an allocator parameter; called before other threads.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    }
}
