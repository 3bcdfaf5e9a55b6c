//! Stopping a run cleanly on SIGINT or SIGTERM.
//!
//! While `ipc-conformance run` runs clauses, [`install`] replaces the
//! handlers of SIGINT and SIGTERM with one that only sets a flag (an atomic
//! store: async-signal-safe). The runner asks [`Interruptible`] before each
//! clause; once the flag is set it starts no further clause, so the clause
//! in progress finishes and is reported, the reports are written with
//! `"interrupted": true`, and the command exits [`EXIT_INTERRUPTED`] (130).
//!
//! The handlers are installed with `SA_RESETHAND`: a second SIGINT (Ctrl-C
//! twice) or SIGTERM meets the default action and ends the process at once.
//! The reports are written atomically (`report::write_atomic`), so even then
//! `results.json` is either the previous complete file or the new one.
//! `SA_RESTART` keeps system calls of the clause in progress from failing
//! with EINTR.
//!
//! A step of the real backend in progress when the signal comes waits at
//! most `ipc_harness::cuda::STOP_GRACE` (2 s) more for its worker, not the
//! whole step timeout; a worker that has not answered by then is killed and
//! the step is a Timeout.
//!
//! Workers of the real backend (`ipc-conformance worker`) ignore SIGINT
//! ([`ignore_sigint_in_worker`]): a Ctrl-C at a terminal reaches the whole
//! foreground process group, and the clause in progress must be able to
//! finish. They still end when the runner closes their socket or kills them.

use crate::catalogue::Clause;
use crate::model::{Attempt, ClauseResult};
use crate::runner::Observer;
use ipc_harness::Dialect;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Exit code of an interrupted run (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: nix::libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    REQUESTED.store(true, Ordering::SeqCst);
    // A real backend's step in progress waits at most its stop grace more,
    // not the whole step timeout (an atomic store as well).
    #[cfg(feature = "cuda")]
    ipc_harness::cuda::request_stop();
}

/// Whether a stop was requested since [`install`] (or [`reset`]).
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// The signal that requested the stop: `SIGINT`, `SIGTERM`, or `None`.
pub fn signal_name() -> Option<&'static str> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        n => Some(
            Signal::try_from(n)
                .map(Signal::as_str)
                .unwrap_or("a signal"),
        ),
    }
}

/// Request a stop as a signal would (tests, embedding programs).
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Forget a request.
pub fn reset() {
    REQUESTED.store(false, Ordering::SeqCst);
    SIGNAL.store(0, Ordering::SeqCst);
    #[cfg(feature = "cuda")]
    ipc_harness::cuda::clear_stop();
}

/// The installed handlers; dropping it restores the previous ones.
pub struct Handlers {
    previous: Vec<(Signal, SigAction)>,
}

/// The signals that stop a run.
pub const SIGNALS: [Signal; 2] = [Signal::SIGINT, Signal::SIGTERM];

/// Clear any earlier request and catch SIGINT and SIGTERM until the
/// returned guard is dropped.
pub fn install() -> Result<Handlers, String> {
    reset();
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESETHAND | SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    let mut handlers = Handlers {
        previous: Vec::new(),
    };
    for sig in SIGNALS {
        // SAFETY: the handler only performs atomic stores, which are
        // async-signal-safe; the previous action is restored on drop.
        let previous = unsafe { signal::sigaction(sig, &action) }
            .map_err(|e| format!("cannot install a handler for {sig}: {e}"))?;
        handlers.previous.push((sig, previous));
    }
    Ok(handlers)
}

impl Drop for Handlers {
    fn drop(&mut self) {
        for (sig, previous) in self.previous.drain(..).rev() {
            // SAFETY: reinstates the action that was in force before install.
            let _ = unsafe { signal::sigaction(sig, &previous) };
        }
    }
}

/// In a worker process: ignore SIGINT (see the module documentation).
pub fn ignore_sigint_in_worker() {
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    // SAFETY: SIG_IGN installs no code.
    let _ = unsafe { signal::sigaction(Signal::SIGINT, &ignore) };
}

/// An observer that also tells the runner to stop once a stop was requested.
pub struct Interruptible<O>(pub O);

impl<O: Observer> Observer for Interruptible<O> {
    fn begin(&mut self, total: usize) {
        self.0.begin(total)
    }
    fn clause_started(&mut self, clause: &Clause, dialect: Dialect) {
        self.0.clause_started(clause, dialect)
    }
    fn clause_finished(&mut self, result: &ClauseResult, attempts: &[Attempt]) {
        self.0.clause_finished(result, attempts)
    }
    fn end(&mut self) {
        self.0.end()
    }
    fn stop_requested(&mut self) -> bool {
        requested() || self.0.stop_requested()
    }
}

/// The line printed after an interrupted run.
pub fn interrupted_line(done: usize, total: usize) -> String {
    format!(
        "interrupted by {}: {done} of {total} results ran; the reports hold those (\"interrupted\": true)",
        signal_name().unwrap_or("a stop request")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serial_test::serial;

    #[test]
    #[serial(signals)]
    fn a_signal_sets_the_flag_and_the_handlers_are_restored() {
        {
            let _h = install().unwrap();
            assert!(!requested());
            signal::raise(Signal::SIGTERM).unwrap();
            assert!(requested());
            assert_eq!(signal_name(), Some("SIGTERM"));
            assert!(interrupted_line(3, 10).contains("interrupted by SIGTERM: 3 of 10"));
        }
        // Restored to what it was (the test harness's default).
        let current = unsafe {
            signal::sigaction(
                Signal::SIGTERM,
                &SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty()),
            )
        }
        .unwrap();
        assert!(matches!(current.handler(), SigHandler::SigDfl));
        reset();
        assert!(!requested());
    }
}
