//! Bounds on what a scenario file may ask for. A scenario is input: a file
//! of a few bytes must not make the parser, the simulator or a backend
//! take gigabytes or minutes. Each bound is far above anything a clause or
//! a generated case uses, and its error names the limit.

/// Most devices a scenario may declare (`devices N`). The largest single
/// hosts have 16 GPUs and an NVLink domain 72; the simulator keeps state
/// per device and per device pair.
pub const MAX_DEVICES: u32 = 256;

/// Most processes a scenario may declare. Each is an OS process with its own
/// GPU context on a real backend; clauses use at most a handful.
pub const MAX_PROCESSES: usize = 256;

/// Longest single `read` or `device_read` (the bytes are held in memory;
/// clauses read at most a few kilobytes).
pub const MAX_READ_BYTES: u64 = 256 << 20;

/// Most bytes all bound reads of a scenario may keep (`r = read ...` keeps
/// its bytes for later comparisons until the run ends).
pub const MAX_BOUND_READ_BYTES: u64 = 1 << 30;

/// Largest scenario file read by [`super::parse_file`] (clauses are a few
/// kilobytes; generated cases with both runs side by side under 100 KiB).
/// Parsing takes about 35 bytes of memory and 0.1 µs per byte of
/// short steps: at this size, under 1 s and 1 GiB (docs/reliability.md).
/// What bounds a scenario's run is its steps (`repeat` runs one up to
/// 1,000,000 times), not its size.
pub const MAX_SCENARIO_FILE_BYTES: u64 = 4 << 20;
