//! Bounds on sizes that come from input (files, arguments, environment).
//! Each is far above what the catalogue, the committed reports and real
//! runs use, and each error names the limit and the input that broke it.
//! The scenario language's own bounds (devices, processes, reads) are in
//! [`ipc_harness::scenario::limits`].

/// Largest clause file (`*.ipc` in the catalogue); clauses are a few
/// kilobytes.
pub const MAX_CLAUSE_FILE_BYTES: u64 = 1 << 20;

/// Most bytes of `results.json` one command reads, all its files together
/// and once inflated (`diff`, `merge`, `summary`; a single report read by
/// any other command). The whole catalogue in all three dialects on the
/// simulator, traces included, is about 4.3 MB. Reading, comparing and
/// writing cost about 15 ms per MB (`merge`, the dearest: it writes three
/// reports); at this size every command stays under 1 s and 1 GiB
/// (docs/reliability.md).
pub const MAX_RESULTS_BYTES: u64 = 32 << 20;

/// Largest expectations file (hand-written TOML; a few kilobytes, and an
/// entry for every clause, dialect and GPU of a CI fleet is a few thousand
/// entries). Its clause patterns are compiled into automata, dearest for
/// wildcard patterns: about 0.4 s for a file of this size full of them
/// (docs/reliability.md).
pub const MAX_EXPECTATIONS_FILE_BYTES: u64 = 512 << 10;

/// Largest `--record` file once decompressed, for `explore --replay` (2,000
/// real cases take about 7 MB; this is tens of thousands of GPU hours' worth
/// of cases, and bounds a gzip bomb).
pub const MAX_RECORDING_BYTES: u64 = 256 << 20;

/// Most shards a run may be split into (`--shard K/N`, `run.shard` in a
/// results.json): there are a few hundred clauses, so more shards than this
/// would be empty.
pub const MAX_SHARDS: u32 = 1024;

/// Most steps of a generated case (`explore --max-steps`); cases are 32
/// steps by default and shrinking costs grow with the square of the length.
pub const MAX_EXPLORE_STEPS: usize = 1024;

/// Most idle workers the real backend keeps per key
/// (`IPC_CONFORMANCE_WORKER_POOL`); each holds a GPU context, and a clause
/// uses at most a handful at once.
pub const MAX_WORKER_POOL: usize = 64;

/// Most threads `explore --jobs` runs (each with its own backends and, on a
/// real backend, its own worker processes).
pub const MAX_EXPLORE_JOBS: usize = 256;

/// Largest trace file `check` reads (`trace-<pid>.jsonl`): a recorded call
/// is about 150-250 bytes, so this is millions of calls from one process.
pub const MAX_TRACE_FILE_BYTES: u64 = 1 << 30;

/// Longest line of a trace file; a longer line is unreadable (a call record
/// is a few hundred bytes, a kernel's parameters a few kilobytes).
pub const MAX_TRACE_LINE_BYTES: usize = 1 << 20;

/// Most recorded calls `check` judges in one folder (a folder with more is
/// not judged, and says so): within its promise of 10 s and 1 GiB for
/// 1,000,000 calls on a 2-core machine (docs/reliability.md).
pub const MAX_TRACE_CALLS: usize = 1_000_000;

/// Most trace files `check` reads from one folder: Linux's largest
/// `pid_max`, so one file per process of any run fits.
pub const MAX_TRACE_FILES: usize = 1 << 22;
