fn main() -> std::process::ExitCode {
    // A worker process's jail is swarm itself, re-executed (docs/SECURITY.md).
    if let Some(code) = swarm::worker::sandbox::jail::main_if_jail() {
        return code;
    }
    // libgit2 re-hashes every object it reads to check it, which git itself does not do
    // outside `fsck`: a tenth of a large run's time went there (docs/BENCHMARKS.md).
    git2::opts::strict_hash_verification(false);
    swarm::cli::main()
}
