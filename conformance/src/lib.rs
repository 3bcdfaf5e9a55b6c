//! The conformance catalogue and runner.
//!
//! A conformance *clause* is a scenario file (`*.ipc`, see
//! `docs/scenario-language.md`) with metadata: a stable hierarchical id
//! (`area.topic.case`), a title and a kind. This crate
//!
//! - loads and validates the catalogue of clauses ([`catalogue`]; the
//!   catalogue is compiled in),
//! - selects clauses by id globs ([`Filter`]),
//! - runs them on a backend, never letting a panic escape ([`runner`]),
//! - keeps what a run produced in one model ([`model`], `results.json`),
//! - classifies results against an expectations file ([`expectations`]),
//! - writes `results.json`, `junit.xml` and `summary.md` ([`report`]),
//!   compares runs (`diff`) and merges shards ([`shard`]),
//! - generates scenarios and judges the simulator ([`explore`]),
//! - and drives all of it from the `ipc-conformance` command line ([`cli`]).
//!
//! The result vocabulary is [`ipc_harness::Status`]: Pass, Fail,
//! NotSupported, Crash, Timeout, Broken.
//!
//! # API boundary
//!
//! The stable surface is the `ipc-conformance` command line (with the
//! `EXIT_*` codes), the clause ids, the `results.json` schema
//! (`docs/results-schema.md`) and the expectations file format. The public
//! modules serve the binary, this crate's tests, benches and examples, with
//! no promise beyond that; the rest (`diff`, `filter`, `limits`,
//! `portability`, `trace_cmd`, the differential comparison, panic capture,
//! exit codes and host facts) is crate-private. ARCHITECTURE.md's "API
//! boundary" says the same for every crate.

pub mod allocator;
pub mod availability;
pub mod backend;
pub mod catalogue;
pub mod cli;
pub mod compressed;
pub(crate) mod diff;
mod differential;
mod exit;
pub mod expectations;
pub mod explore;
pub(crate) mod filter;
mod guard;
pub mod interrupt;
pub mod jobs;
pub(crate) mod limits;
pub mod model;
pub(crate) mod portability;
pub mod report;
pub mod runner;
pub mod safe_fs;
pub mod shard;
mod sharing_check;
mod sysinfo;
pub mod trace_check;
pub(crate) mod trace_cmd;

pub use catalogue::{Catalogue, Clause, ClauseKind};
pub use exit::{EXIT_BACKEND_UNAVAILABLE, EXIT_FAILURES, EXIT_NOT_JUDGED, EXIT_OK, EXIT_USAGE};
pub use filter::Filter;
pub use model::{ClauseResult, RunInfo, RunReport, TOOL_VERSION};
