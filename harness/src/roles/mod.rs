//! Testing your own IPC code: roles, peers, and a run on any backend.
//!
//! A test declares processes as named *roles*, each with a closure that talks
//! to the [`Driver`] and to its peers through a [`RoleCtx`]. The same
//! [`RoleSet`] then runs
//! - on any in-process [`Backend`] (the simulator): [`RoleSet::run`]. Every
//!   role runs on its own thread, but only one at a time: each driver call,
//!   send, receive and role end is a scheduling point where a seeded
//!   scheduler picks which role goes on, so a run is a pure function of
//!   its [`RunOptions`] (seed, [`Schedule`], [`Fault`]s);
//! - on drivers the test supplies, such as a mockall `MockDriver`:
//!   [`RoleSet::run_with_drivers`];
//! - on a real GPU, each role in its own OS process
//!   (`RoleSet::run_in_processes`, feature `cuda`): the test binary re-runs
//!   itself once per role (`--exact <test> ...`, the role named in
//!   [`ROLE_ENV`]); the child finds its role by name in the `RoleSet` the
//!   test builds in every process, and reaches its peers through the parent
//!   over a Unix socket (file descriptors travel with `SCM_RIGHTS`).
//!
//! After a run, a [`RunReport`] gives each role's [`RoleOutcome`], the
//! simulator's hazard log, and each process's final state
//! ([`ProcessState`]: allocations and IPC mappings still held, call counts)
//! as seen through its driver calls. See `docs/testing-your-code.md`.

mod ctx;
mod driver;
mod ledger;
mod model;
#[cfg(feature = "cuda")]
mod processes;
mod scheduler;
mod set;
#[cfg(feature = "proptest")]
pub mod strategies;
#[cfg(test)]
mod tests;

pub use ctx::{Message, RoleCtx};
pub use driver::{CallKind, RoleDriver};
pub use ledger::{CallBy, Held, Kept, Leak, Ledger, ReachedError};
pub use model::{
    fail, fail_with, Crash, Fault, Mapping, ProcessState, RoleError, RoleFailure, RoleOutcome,
    RoleResult, RunOptions, RunReport, Schedule, CRASHED_AT, ROLE_ENV, ROLE_FD_ENV, SEED_ENV,
};
pub use set::RoleSet;

use crate::calls::Driver;
use crate::machine::{Backend, ProcessSpec, StartError};

/// Running a [`RoleSet`]: on a backend's machine, on drivers the test
/// supplies, or in OS processes (`set.rs` holds the set itself).
impl RoleSet {
    /// Runs every role on `backend` (one machine, all processes in this
    /// test process), one role at a time in the order `opts.schedule` picks.
    pub fn run(&self, backend: &dyn Backend, opts: &RunOptions) -> Result<RunReport, StartError> {
        self.validate(opts)?;
        let machine = backend.start(&self.machine_spec(opts))?;
        let procs = scheduler::MachineProcs(machine);
        Ok(scheduler::run(self, opts, backend.name(), procs))
    }

    /// Runs every role against a driver `make` builds for it (by role index
    /// and spec), e.g. a mockall `MockDriver` that fails one chosen call.
    /// There is no shared machine and no hazard log.
    pub fn run_with_drivers<F>(
        &self,
        opts: &RunOptions,
        mut make: F,
    ) -> Result<RunReport, StartError>
    where
        F: FnMut(usize, &ProcessSpec) -> Box<dyn Driver + Send>,
    {
        self.validate(opts)?;
        let drivers = self
            .roles
            .iter()
            .enumerate()
            .map(|(i, r)| make(i, &r.spec))
            .collect();
        Ok(scheduler::run(
            self,
            opts,
            "drivers",
            scheduler::OwnDrivers(drivers),
        ))
    }

    /// Runs each role in its own OS process on the real GPU (see the
    /// module docs). Call it from a `#[test]` that builds this `RoleSet`
    /// the same way every time: in a role's process it plays that role and
    /// exits. `NotSupported` without libcuda. There is no hazard log; the
    /// schedule is the hardware's own.
    #[cfg(feature = "cuda")]
    pub fn run_in_processes(&self, opts: &RunOptions) -> Result<RunReport, StartError> {
        self.validate(opts)?;
        if let Ok(role) = std::env::var(ROLE_ENV) {
            processes::serve_role(self, opts, &role);
        }
        processes::run_parent(self, opts)
    }
}
