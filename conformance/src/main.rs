//! The `ipc-conformance` binary; see [`ipc_conformance::cli`].

// The simulator allocates and frees many small objects per step (traces,
// labels, scenario text); with glibc's allocator a third of `explore`'s time
// went to malloc and free (perf). `allocator` says why not `MiMalloc`.
#[global_allocator]
static GLOBAL: ipc_conformance::allocator::Allocator = ipc_conformance::allocator::Allocator;

fn main() -> std::process::ExitCode {
    ipc_conformance::cli::main()
}
