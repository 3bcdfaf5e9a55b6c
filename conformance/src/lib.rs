//! The conformance catalogue and runner.
//!
//! A conformance *clause* is a scenario file (`*.ipc`, see
//! `docs/scenario-language.md`) with metadata: a stable hierarchical id
//! (`area.topic.case`), a title and a kind. This crate
//!
//! - loads and validates the catalogue of clauses ([`catalogue`]; the
//!   catalogue is compiled in),
//! - selects clauses by id globs ([`filter`]),
//! - runs them on a backend, never letting a panic escape ([`runner`]),
//! - keeps what a run produced in one model ([`model`], `results.json`),
//! - classifies results against an expectations file ([`expectations`]),
//! - writes `results.json`, `junit.xml` and `summary.md` ([`report`]),
//!   compares runs ([`diff`]) and merges shards ([`shard`]),
//! - generates scenarios and judges the simulator ([`explore`]),
//! - and drives all of it from the `ipc-conformance` command line ([`cli`]).
//!
//! The result vocabulary is [`ipc_harness::Status`]: Pass, Fail,
//! NotSupported, Crash, Timeout, Broken.
//!
//! # API boundary
//!
//! The public modules are what the command line is built from, and what a
//! program embedding the suite uses; the `ipc-conformance` command line and
//! the `results.json` schema (`docs/results-schema.md`) are the stable
//! surface. The differential comparison, panic capture, exit codes (see
//! the `EXIT_*` constants) and host facts are internal.

pub mod availability;
pub mod backend;
pub mod catalogue;
pub mod cli;
pub mod compressed;
pub mod diff;
mod differential;
mod exit;
pub mod expectations;
pub mod explore;
pub mod filter;
mod guard;
pub mod interrupt;
pub mod jobs;
pub mod limits;
pub mod model;
pub mod portability;
pub mod report;
pub mod runner;
pub mod safe_fs;
pub mod shard;
mod sharing_check;
mod sysinfo;
pub mod trace_check;
pub mod trace_cmd;

pub use catalogue::{Catalogue, Clause, ClauseKind};
pub use exit::{EXIT_BACKEND_UNAVAILABLE, EXIT_FAILURES, EXIT_OK, EXIT_USAGE};
pub use filter::Filter;
pub use model::{ClauseResult, RunInfo, RunReport, TOOL_VERSION};
