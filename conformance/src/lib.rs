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

pub mod backend;
pub mod catalogue;
pub mod cli;
pub mod diff;
pub mod differential;
pub mod exit;
pub mod expectations;
pub mod explore;
pub mod filter;
pub mod guard;
pub mod interrupt;
pub mod model;
pub mod report;
pub mod runner;
pub mod shard;
pub mod sysinfo;

pub use catalogue::{Catalogue, Clause, ClauseKind};
pub use exit::{EXIT_FAILURES, EXIT_OK, EXIT_USAGE};
pub use filter::Filter;
pub use model::{ClauseResult, RunInfo, RunReport, TOOL_VERSION};
