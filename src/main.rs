fn main() -> std::process::ExitCode {
    // A worker process's jail is swarm itself, re-executed (docs/SECURITY.md).
    if let Some(code) = swarm::worker::sandbox::jail::main_if_jail() {
        return code;
    }
    swarm::cli::main()
}
