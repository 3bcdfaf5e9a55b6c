//! The real CUDA backend (feature `cuda`).
//!
//! # Process model
//!
//! Every process of a scenario is a real OS process, a *worker*, so that
//! CUDA sees what it sees in production: separate address spaces, separate
//! contexts, IPC handles that really cross a process boundary.
//!
//! ```text
//!  harness process (never initialises CUDA)
//!  ├── CudaBackend ── probe worker (once: versions, device count, GPU name)
//!  └── CudaMachine
//!       ├── WorkerProxy "owner" ══ socket pair ══ worker process (cuda / cudart)
//!       └── WorkerProxy "peer"  ══ socket pair ══ worker process (cuda / cudart)
//! ```
//!
//! - **The parent never initialises CUDA.** It only `dlopen`s `libcuda` to
//!   see whether it exists ([`CudaBackend::libcuda_present`]); everything
//!   else — the probe included — runs in workers. Workers are started with
//!   `std::process::Command` (fork + exec), so no child ever inherits CUDA
//!   state, and nothing forks after CUDA is initialised.
//! - **A worker is the harness's own binary** run with a subcommand
//!   ([`WorkerCommand`], e.g. `ipc-conformance worker`), which calls
//!   [`worker_main`]. Its end of a Unix socket pair is descriptor
//!   [`WORKER_FD`] (3), named in the environment variable [`WORKER_FD_ENV`].
//!   A process with `visible_devices` gets `CUDA_VISIBLE_DEVICES`; otherwise
//!   the worker inherits the parent's environment.
//! - **One call, one message.** Each [`Driver`](crate::Driver) method of a
//!   [`WorkerProxy`] is one [`Request`]; the worker makes the API call(s) in
//!   the process's dialect on its main thread and answers with a
//!   [`Response`]: the value, or the raw error code the API returned
//!   ([`ApiError::from_code`](crate::ApiError::from_code) with the process's
//!   dialect), or a harness error. The wire format is length-prefixed JSON
//!   ([`protocol`]); the same channel can carry file descriptors
//!   (`SCM_RIGHTS`), for the VMM handles to come.
//! - **Start-up is parallel.** [`CudaMachine::launch`] spawns all workers,
//!   then sends every `Init` (dialect, device to make current) before
//!   waiting for any answer: context creation, hundreds of milliseconds per
//!   process, overlaps.
//! - **Start-up overlaps with the scenarios.** [`CudaBackend`] keeps a pool
//!   of workers started and sent `Init` ahead of time, keyed by what `Init`
//!   fixes (dialect, device made current, `CUDA_VISIBLE_DEVICES`), up to
//!   [`CudaBackend::with_pool_size`] idle ones per key seen in a started
//!   machine ([`DEFAULT_POOL_SIZE`]; 0 turns it off). `start` takes
//!   initialised workers where the pool has some (waiting, if need be, for
//!   one still initialising: it started before a fresh one could), starts
//!   fresh ones for the rest, then starts replacements without waiting for
//!   their answers. Isolation is kept: a worker serves exactly one machine
//!   and exits with it (unless reuse is on, below); a pooled worker that died, failed `Init` or sent
//!   anything unasked is discarded, and one that fails at hand-out is
//!   replaced by a fresh one. Dropping the backend kills and reaps the idle
//!   workers.
//! - **Reuse is opt-in** ([`CudaBackend::with_worker_reuse`]): a machine
//!   whose processes all still run at shutdown sends
//!   [`Request::ReleaseImported`] and then [`Request::Reset`] to its workers
//!   (except any that answered a sticky error, code [`STICKY_ERROR_MIN`] or
//!   above): every worker releases what it imported from the others before
//!   any frees what it exported; then each releases everything its requests
//!   created (IPC mappings, allocations, created contexts), makes its
//!   `Init` device current again, synchronizes and answers [`Reply::Clean`]
//!   only if all of that succeeded. Clean workers go back to the pool under
//!   their key; every other one is killed and reaped. Starting workers
//!   costs the driver serialised context creation and teardown (most of a
//!   catalogue run's time), which reuse avoids; the price is isolation:
//!   driver state that no call can observe may survive a reset (e.g. the
//!   bookkeeping of handles opened from other processes, one mapping per
//!   device per exporting process), so a scenario may see traces of an
//!   earlier one. Without reuse, each worker serves exactly one machine.
//! - **Crashes and hangs are observations.** Every call waits at most the
//!   scenario's `step_timeout`. A worker that dies is reaped and the call
//!   returns `Lost(Crashed { signal, exit_code, detail })` (the detail ends
//!   with its stderr); one that does not answer in time is killed with
//!   `SIGKILL`, reaped, and the call returns `Lost(TimedOut)`. Every later
//!   call to that process returns the same error at once.
//! - **Exit is real.** [`Machine::exit`](crate::Machine::exit) sends `Exit`;
//!   the worker answers, calls nothing more and exits with status 0, and the
//!   OS and the driver reclaim what it held. `shutdown` (and dropping the
//!   machine) asks every remaining worker to exit, kills those still running
//!   after [`SHUTDOWN_GRACE`], and reaps all of them: no worker outlives its
//!   machine, none is left a zombie.
//!
//! # Requirements and `NotSupported`
//!
//! [`CudaBackend::start`](crate::Backend::start) answers
//! [`StartError::NotSupported`](crate::StartError::NotSupported) when
//! `libcuda` cannot be loaded, when no device is visible, when the scenario
//! needs more devices than the host has, when the runtime dialect is asked
//! for and `libcudart` cannot be loaded, or when a worker's device cannot
//! be made current. It answers `Harness` (a Broken result) when a worker
//! cannot be started, dies or hangs during start-up.
//!
//! See [`worker`] for the exact API calls behind each request.

mod backend;
mod ffi;
mod local;
mod machine;
mod pidns;
mod pool;
mod process;
pub mod protocol;
mod spawn;
mod stop;
pub mod worker;

pub use backend::{
    check_requirements, kernel_driver_version, one_queue_allowed, parse_nvidia_version,
    version_string, CudaBackend, ProbeOutcome, CUDA_BACKEND_DIALECTS, NO_LIBCUDA, ONE_QUEUE_ENV,
    PROBE_TIMEOUT,
};
pub use local::LocalCudaDriver;
pub use machine::CudaMachine;
pub use pool::{PoolStats, DEFAULT_POOL_SIZE};
pub use process::{
    WorkerProxy, MIN_INIT_TIMEOUT, RESET_TIMEOUT, SHUTDOWN_GRACE, STICKY_ERROR_MIN, WORKER_FD,
};
pub use protocol::{ProbeReport, Reply, Request, Response, WireError};
pub use spawn::{child_visible_devices, WorkerCommand};
pub use stop::{clear_stop, request_stop, stop_requested, STOP_GRACE};
pub use worker::{worker_main, EXIT_BAD_SETUP, EXIT_PROTOCOL, WORKER_FD_ENV};
