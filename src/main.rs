/// What libgit2's object cache may hold (its default is 256 MiB).
const GIT_CACHE_BYTES: isize = 32 * 1024 * 1024;

fn main() -> std::process::ExitCode {
    // A worker process's jail is swarm itself, re-executed (docs/SECURITY.md).
    if let Some(code) = swarm::worker::sandbox::jail::main_if_jail() {
        return code;
    }
    // libgit2 re-hashes every object it reads to check it, which git itself does not do
    // outside `fsck`: a tenth of a large run's time went there (docs/BENCHMARKS.md).
    git2::opts::strict_hash_verification(false);
    // libgit2 keeps up to 256 MiB of the objects it read, across all repositories; a long
    // run reads a new tree per merge, so that cache was most of swarm's memory at 10,000
    // tasks. The objects a task needs are the few of the integration tip.
    // SAFETY: set before any other thread uses libgit2.
    if let Err(e) = unsafe { git2::opts::set_cache_max_size(GIT_CACHE_BYTES) } {
        eprintln!("swarm: cannot limit libgit2's object cache: {e}");
    }
    swarm::cli::main()
}
