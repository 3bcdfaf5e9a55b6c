//! The `ipc-conformance` binary; see [`ipc_conformance::cli`].

fn main() -> std::process::ExitCode {
    ipc_conformance::cli::main()
}
