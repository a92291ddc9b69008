fn main() -> std::process::ExitCode {
    swarm::cli::main()
}
