//! The conformance catalogue and runner.
//!
//! A conformance *clause* is a scenario file (`*.ipc`, see
//! `docs/scenario-language.md`) with metadata: a stable hierarchical id
//! (`area.topic.case`), a title and a kind. This crate
//!
//! - loads and validates the catalogue of clauses ([`catalogue`]),
//! - selects clauses by id globs ([`filter`]),
//! - runs them on a backend, never letting a panic escape ([`runner`]),
//! - compares the simulator against a real backend ([`differential`]),
//! - writes `results.json`, `junit.xml` and `summary.md` ([`report`]),
//! - and drives all of it from the `ipc-conformance` command line ([`cli`]).
//!
//! The result vocabulary is [`ipc_harness::Status`]: Pass, Fail,
//! NotSupported, Crash, Timeout, Broken.

pub mod availability;
pub mod backend;
pub mod catalogue;
pub mod cli;
pub mod diff;
pub mod differential;
pub mod expectations;
pub mod explore;
pub mod filter;
pub mod interrupt;
pub mod limits;
pub mod report;
pub mod runner;
pub mod safe_fs;
pub mod shard;
pub mod sysinfo;

pub use catalogue::{Catalogue, Clause, ClauseKind};
pub use filter::Filter;
pub use runner::{ClauseResult, RunInfo, RunReport};

/// The version of this tool, recorded in every report.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Exit code: every clause Pass or NotSupported.
pub const EXIT_OK: u8 = 0;
/// Exit code: some clause failed (Fail, Crash, Timeout, Broken), or a
/// differential run found a difference.
pub const EXIT_FAILURES: u8 = 1;
/// Exit code: usage or I/O error (bad arguments, unreadable directories,
/// unwritable output).
pub const EXIT_USAGE: u8 = 2;
/// Exit code 3: the requested backend cannot run at all (no driver, no
/// device) and the user did not accept that (`--allow-unsupported`).
pub use availability::EXIT_BACKEND_UNAVAILABLE;
