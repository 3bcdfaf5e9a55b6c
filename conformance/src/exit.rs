//! The exit codes of `ipc-conformance`. Which one a command ends with is
//! decided by the command line ([`crate::cli`]); the commands that compare
//! (`diff`, `differential`) say so through these too. The codes are a
//! stable interface: new ones are added, none is renumbered.

/// Exit code: every clause Pass or NotSupported; `check`: the trace is
/// clean (or nothing was recorded).
pub const EXIT_OK: u8 = 0;
/// Exit code: some clause failed (Fail, Crash, Timeout, Broken), or a
/// differential run found a difference; `check`: a hazard.
pub const EXIT_FAILURES: u8 = 1;
/// Exit code: usage or I/O error (bad arguments, unreadable directories,
/// unwritable output).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the requested backend cannot run at all (no driver, no
/// device) and the user did not accept that (`--allow-unsupported`); the
/// reports are written, every clause NotSupported.
pub const EXIT_BACKEND_UNAVAILABLE: u8 = 3;
/// Exit code: `check` could not judge the trace (a call family the tracer
/// did not record, a replay the simulator does not answer as the driver
/// did, a trace cut short, memory never seen allocated); the reports say
/// why. Neither clean nor hazards.
pub const EXIT_NOT_JUDGED: u8 = 4;
/// Exit code: the tool itself panicked (a bug), as Rust programs do.
pub const EXIT_PANIC: u8 = 101;
