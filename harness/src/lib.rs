//! `ipc-harness`: the driver trait (one process's view of the GPU driver),
//! the multi-process machine model, the scenario language and its executor,
//! and (feature `cuda`) the real CUDA backend with its worker processes.
//!
//! Dependencies point one way: `ipc-mock-driver` and `ipc-conformance`
//! depend on this crate; it depends on neither.

// Every public item is documented (issue 17); clippy's `-D warnings` in CI
// makes a missing doc comment an error.
#![warn(missing_docs)]

pub mod calls;
pub mod driver;
pub mod errors;
pub mod hooks;
pub mod machine;
pub mod roles;
pub mod scenario;
/// Whether a scenario may run on reused workers: [`scenario::sharing`].
pub use scenario::sharing;
pub mod tier;
pub mod trace;
pub mod trace_record;

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod profile;

#[cfg(any(test, feature = "mock"))]
pub use calls::MockDriver;
pub use calls::{Call, CallKind, Driver};
pub use driver::*;
pub use errors::{ApiError, Dialect, ErrorKind};
pub use machine::*;
pub use tier::Tier;
pub use trace::{Status, Trace, Verdict};
