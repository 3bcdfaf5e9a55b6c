//! Property-based tests: random, valid-by-construction multi-process programs
//! run against the simulator through the public `Backend` / `Machine` /
//! `Driver` API only.
//!
//! A program is 2-3 processes on a 2-device `SimBackend` (plus one idle
//! "spare" process used only at the very end) and 8-40 operations. Operations
//! name their operands by `proptest::sample::Index` into what earlier
//! operations produced (allocations, handles, opened pointers, contexts), so
//! every program is runnable and shrinks well; an operation with nothing to
//! act on yet falls back to the step that would make it possible (close ->
//! reopen -> open -> ipc_get -> alloc). The interpreter keeps a small
//! model next to the machine:
//!
//! - a shadow of every allocation's bytes (a log of successful writes and
//!   memsets, attributed by address to the newest pointer that covers them);
//! - a ledger of open counts per (process, pointer returned by `ipc_open`);
//! - per process: exited, poisoned (saw a sticky 700), current context.
//!
//! Properties (one `proptest!` test each, see the bottom of the file):
//! 1. robustness: nothing panics;
//! 2. determinism: same program and seed, same outcomes and hazard log;
//! 3. documented returns of `ipc_open` / `ipc_close` / `ipc_get`;
//! 4. coherence of bytes shared through IPC;
//! 5. conservation of open counts, and a machine that is not wedged;
//! 6. hazard completeness: a successful access to memory freed by an API call
//!    is logged (the strict variant, which also covers the two gaps the
//!    `finding_` tests reproduce, once ignored, now pass).
//!
//! Case counts are modest so the file runs in a few seconds in debug mode;
//! set `PROPTEST_CASES` for long runs.

mod common;

use common::{proc_spec, GIB, MIB};
use ipc_harness::{
    Backend, ContextId, DevicePtr, Dialect, DriverError, DriverResult, ErrorKind, FreeKind, Hazard,
    HazardKind, IpcMemHandle, Machine, MachineSpec, MemKind, OutArg, ProcessLoss,
    IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
};
use ipc_mock_driver::{SimBackend, SimConfig};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

const KIB: u64 = 1 << 10;
const SIZES: [u64; 5] = [1000, 4 * KIB, 64 * KIB, 2 * MIB, 3 * MIB];
/// Largest read or write the programs make (memset may cover a whole allocation).
const MAX_XFER: u64 = 64 * KIB;
/// Length assumed for a pointer opened from a handle of unknown provenance.
const UNKNOWN_LEN: u64 = 3 * MIB;
/// The simulated device's memory (H100 80 GB): after every process exited,
/// a fresh process must be able to allocate all of it again.
const DEVICE_MEMORY: u64 = 80 * GIB;
const CASES: u32 = 256;

// ---------------------------------------------------------------------------
// Programs
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Program {
    seed: u64,
    dialect: Dialect,
    procs: Vec<ProcSetup>,
    ops: Vec<Op>,
}

#[derive(Debug, Clone)]
struct ProcSetup {
    device: u32,
    visible: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Copy)]
enum Len {
    Fixed(u64),
    /// The whole pointer's length (capped at `MAX_XFER` for read / write).
    Whole,
}

#[derive(Debug, Clone, Copy)]
enum Off {
    Start,
    /// `64 * k` bytes in: a small window, so reads meet earlier writes.
    Near(u8),
    /// Anywhere that leaves room for the length, when there is room.
    Inside(Index),
    /// `len` bytes before the end, moved this many bytes further (past the end).
    End(u64),
}

/// A data access: through which known pointer, where, how much.
#[derive(Debug, Clone, Copy)]
struct At {
    /// Through a pointer from `ipc_open` (when there is one).
    import: bool,
    ptr: Index,
    off: Off,
    len: Len,
}

#[derive(Debug, Clone, Copy)]
enum FreeSel {
    /// The free that matches the allocation's kind.
    Matching,
    /// `cudaFree` whatever the kind.
    Device,
    /// `cudaFree` of a pointer from `ipc_open`.
    ImportPtr,
    Null,
}

#[derive(Debug, Clone, Copy)]
enum Corruption {
    Flip { at: usize, xor: u8 },
    Zero,
    Random(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        p: Index,
        kind: MemKind,
        size: u64,
    },
    Free {
        a: Index,
        how: FreeSel,
    },
    Memset {
        at: At,
        value: u8,
    },
    Write {
        at: At,
        seed: u8,
    },
    Read {
        at: At,
    },
    DeviceRead {
        at: At,
    },
    /// `ipc_get` of a known own pointer (live or freed).
    Get {
        a: Index,
        interior: bool,
        null_out: bool,
    },
    /// Hand a handle to another process (or, rarely, back to its exporter)
    /// and open it there.
    Open {
        h: Index,
        who: Index,
        in_exporter: bool,
        flags: u32,
        null_out: bool,
    },
    /// Open again, in the same process, a handle that opened before.
    Reopen {
        which: Index,
    },
    Close {
        ptr: Index,
        twice: bool,
    },
    CreateContext {
        p: Index,
        device: u32,
    },
    SetContext {
        p: Index,
        ctx: Index,
        null: bool,
    },
    DestroyContext {
        p: Index,
        ctx: Index,
    },
    SetDevice {
        p: Index,
        device: u32,
    },
    Exit {
        p: Index,
    },
    Corrupt {
        h: Index,
        how: Corruption,
    },
}

fn len_strategy() -> impl Strategy<Value = Len> {
    prop_oneof![
        2 => Just(Len::Fixed(1)),
        3 => Just(Len::Fixed(16)),
        2 => Just(Len::Fixed(256)),
        2 => Just(Len::Fixed(1000)),
        2 => Just(Len::Fixed(4096)),
        2 => Just(Len::Whole),
    ]
}

fn off_strategy() -> impl Strategy<Value = Off> {
    prop_oneof![
        3 => Just(Off::Start),
        5 => (0u8..8).prop_map(Off::Near),
        1 => any::<Index>().prop_map(Off::Inside),
        2 => prop::sample::select(vec![0u64, 0, 1, 24, 4096, 2 * MIB]).prop_map(Off::End),
    ]
}

fn at_strategy() -> impl Strategy<Value = At> {
    (
        prop::bool::weighted(0.6),
        any::<Index>(),
        off_strategy(),
        len_strategy(),
    )
        .prop_map(|(import, ptr, off, len)| At {
            import,
            ptr,
            off,
            len,
        })
}

fn kind_strategy() -> impl Strategy<Value = MemKind> {
    prop_oneof![
        12 => Just(MemKind::Device),
        1 => Just(MemKind::Managed),
        1 => Just(MemKind::PinnedHost),
        1 => Just(MemKind::StreamOrdered),
    ]
}

fn flags_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![1 => Just(0u32), 12 => Just(1u32), 1 => Just(2u32), 2 => Just(3u32)]
}

fn corruption_strategy() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        6 => (0usize..64, 1u8..=255).prop_map(|(at, xor)| Corruption::Flip { at, xor }),
        // The bytes the catalogue measured as checked, more often.
        3 => (prop::sample::select(vec![24usize, 28, 29, 30, 32, 48, 52]), 1u8..=255)
            .prop_map(|(at, xor)| Corruption::Flip { at, xor }),
        1 => Just(Corruption::Zero),
        1 => any::<u64>().prop_map(Corruption::Random),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let dev = prop_oneof![Just(0u32), Just(1u32)];
    prop_oneof![
        10 => (any::<Index>(), kind_strategy(), prop::sample::select(SIZES.to_vec()))
            .prop_map(|(p, kind, size)| Op::Alloc { p, kind, size }),
        2 => (any::<Index>(), prop_oneof![
                8 => Just(FreeSel::Matching),
                1 => Just(FreeSel::Device),
                2 => Just(FreeSel::ImportPtr),
                1 => Just(FreeSel::Null),
            ]).prop_map(|(a, how)| Op::Free { a, how }),
        5 => (at_strategy(), prop::bool::weighted(0.4), any::<u8>()).prop_map(|(at, whole, value)| {
            // Whole-allocation fills make later reads meet known bytes.
            let at = if whole { At { off: Off::Start, len: Len::Whole, ..at } } else { at };
            Op::Memset { at, value }
        }),
        5 => (at_strategy(), any::<u8>()).prop_map(|(at, seed)| Op::Write { at, seed }),
        7 => at_strategy().prop_map(|at| Op::Read { at }),
        1 => at_strategy().prop_map(|at| Op::DeviceRead { at }),
        10 => (any::<Index>(), prop::bool::weighted(0.2), prop::bool::weighted(0.03))
            .prop_map(|(a, interior, null_out)| Op::Get { a, interior, null_out }),
        12 => (
                any::<Index>(),
                any::<Index>(),
                prop::bool::weighted(0.06),
                flags_strategy(),
                prop::bool::weighted(0.04),
            )
            .prop_map(|(h, who, in_exporter, flags, null_out)| Op::Open {
                h,
                who,
                in_exporter,
                flags,
                null_out,
            }),
        3 => any::<Index>().prop_map(|which| Op::Reopen { which }),
        5 => (any::<Index>(), prop::bool::weighted(0.25))
            .prop_map(|(ptr, twice)| Op::Close { ptr, twice }),
        1 => (any::<Index>(), dev.clone()).prop_map(|(p, device)| Op::CreateContext { p, device }),
        1 => (any::<Index>(), any::<Index>(), prop::bool::weighted(0.15))
            .prop_map(|(p, ctx, null)| Op::SetContext { p, ctx, null }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(p, ctx)| Op::DestroyContext { p, ctx }),
        1 => (any::<Index>(), dev).prop_map(|(p, device)| Op::SetDevice { p, device }),
        1 => any::<Index>().prop_map(|p| Op::Exit { p }),
        2 => (any::<Index>(), corruption_strategy()).prop_map(|(h, how)| Op::Corrupt { h, how }),
    ]
}

fn proc_strategy() -> impl Strategy<Value = ProcSetup> {
    prop_oneof![
        6 => (0u32..2).prop_map(|device| ProcSetup { device, visible: None }),
        1 => (0u32..2).prop_map(|device| ProcSetup { device, visible: Some(vec![1, 0]) }),
        1 => Just(ProcSetup { device: 0, visible: Some(vec![1]) }),
    ]
}

fn program_strategy() -> impl Strategy<Value = Program> {
    (
        any::<u64>(),
        prop_oneof![Just(Dialect::Runtime), Just(Dialect::Driver)],
        prop::collection::vec(proc_strategy(), 2..=3),
        prop::collection::vec(op_strategy(), 8..=40),
    )
        .prop_map(|(seed, dialect, procs, ops)| Program {
            seed,
            dialect,
            procs,
            ops,
        })
}

// ---------------------------------------------------------------------------
// Documented returns
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Get,
    Open,
    Close,
}

/// The error kinds the vendor documents for a call, per dialect.
fn documented(api: Api, dialect: Dialect) -> &'static [ErrorKind] {
    use ErrorKind::*;
    match (api, dialect) {
        // cuda-runtime-cudaIpcOpenMemHandle.txt (DeviceUninitialized is 201).
        (Api::Open, Dialect::Runtime) => &[
            MapFailed,
            InvalidHandle,
            InvalidContext,
            TooManyPeers,
            NotSupported,
            InvalidValue,
        ],
        // cuda-driver-cuIpcOpenMemHandle_v2.txt.
        (Api::Open, Dialect::Driver) => &[
            InvalidContext,
            MapFailed,
            InvalidHandle,
            TooManyPeers,
            InvalidValue,
        ],
        // cudaIpcGetMemHandle's reference page (https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html).
        (Api::Get, Dialect::Runtime) => &[OutOfMemory, MapFailed, NotSupported, InvalidValue],
        // cuIpcGetMemHandle's reference page (https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html).
        (Api::Get, Dialect::Driver) => &[InvalidHandle, OutOfMemory, MapFailed, InvalidValue],
        // hip-hipIpcOpenMemHandle.txt lists MapFailed, InvalidHandle and
        // TooManyPeers; ROCm/clr hip_memory.cpp also returns InvalidValue
        // (flags, zero size), InvalidContext (own process) and
        // InvalidDevicePointer (attach failed).
        (Api::Open, Dialect::Hip) => &[
            MapFailed,
            InvalidHandle,
            TooManyPeers,
            InvalidValue,
            InvalidContext,
            InvalidDevicePointer,
        ],
        // ROCm/clr hip_memory.cpp hipIpcGetMemHandle.
        (Api::Get, Dialect::Hip) => &[InvalidValue, InvalidDevicePointer],
        // Nothing is listed for close in the seeds: only what was measured.
        (Api::Close, _) => &[InvalidValue],
    }
}

/// What the interpreter knew just before a call, to judge its error.
#[derive(Debug, Clone, Copy, Default)]
struct Before {
    exited: bool,
    poisoned: bool,
    /// `ipc_open`: the handle's offset bytes (28..31) differ from the handle
    /// `ipc_get` returned (clause mem.handle.corrupted-fields), or the process
    /// opened such a handle before (mem.handle.damaged-offset-while-mapped).
    offset_damaged: bool,
    /// `ipc_get` with a NULL out-argument.
    null_out: bool,
}

/// `None` when the result is documented or a measured exception.
fn undocumented<T: Debug>(
    api: Api,
    dialect: Dialect,
    b: Before,
    r: &DriverResult<T>,
) -> Option<String> {
    let e = match r {
        Ok(_) => return None,
        Err(e) => e,
    };
    match e {
        DriverError::Api(a) => {
            if a.dialect != dialect {
                return Some(format!(
                    "{api:?} answered in the {} dialect: {a}",
                    a.dialect
                ));
            }
            let kind = a.kind();
            if kind.is_some_and(|k| documented(api, dialect).contains(&k)) {
                return None;
            }
            // Measured: a damaged offset field (mem.handle.corrupted-fields).
            if api == Api::Open && kind == Some(ErrorKind::AlreadyMapped) && b.offset_damaged {
                return None;
            }
            // Measured: a freed export after the exporter allocated again
            // (mem.lifetime.freed-export-after-new-allocation).
            if api == Api::Open && kind == Some(ErrorKind::NotPermitted) {
                return None;
            }
            // Measured: a sticky kernel fault poisons every later call.
            if kind == Some(ErrorKind::IllegalAddress) && b.poisoned {
                return None;
            }
            // Measured: with a destroyed context made current, the driver API
            // answers 709 (mem.context.set-destroyed; IPC calls there are
            // the simulator's extrapolation, unverified).
            if kind == Some(ErrorKind::ContextIsDestroyed) {
                return None;
            }
            Some(format!("{api:?} returned undocumented {a}"))
        }
        // The simulator's answer for a call on an exited process.
        DriverError::Harness(_) if b.exited => None,
        // Measured: cudaIpcGetMemHandle(NULL, ptr) dies with SIGSEGV.
        DriverError::Lost(ProcessLoss::Crashed {
            signal: Some(11), ..
        }) if api == Api::Get && b.null_out && dialect == Dialect::Runtime => None,
        other => Some(format!("{api:?} failed unexpectedly: {other:?}")),
    }
}

// ---------------------------------------------------------------------------
// The interpreter and its model
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Content {
    Fill(u8, u64),
    Bytes(Vec<u8>),
    /// Bytes the model lost track of.
    Unknown(u64),
}

impl Content {
    fn len(&self) -> u64 {
        match self {
            Content::Fill(_, n) | Content::Unknown(n) => *n,
            Content::Bytes(b) => b.len() as u64,
        }
    }
}

struct AllocRec {
    p: usize,
    size: u64,
    kind: MemKind,
    ctx: Option<ContextId>,
    /// Freed by an API call (free, context destroy); not by process exit.
    freed: bool,
    /// Successful writes and memsets, oldest first: (offset, content).
    log: Vec<(u64, Content)>,
    /// A write reached it at a step that logged a hazard.
    tainted: bool,
}

/// A pointer some process was given: an allocation's base or an `ipc_open` result.
struct Entry {
    p: usize,
    ptr: DevicePtr,
    len: u64,
    /// The allocation it shows, when known.
    target: Option<usize>,
    import: bool,
    /// `ipc_open` returned it after the allocation was freed.
    opened_after_free: bool,
}

struct HandleRec {
    bytes: IpcMemHandle,
    exporter: Option<usize>,
    /// The allocation, for handles exactly as `ipc_get` returned them.
    alloc: Option<usize>,
    /// The handle `ipc_get` returned that this one was derived from.
    origin: Option<IpcMemHandle>,
}

impl HandleRec {
    /// The offset field (mem.handle.corrupted-fields) or the size field
    /// (mem.handle.damaged-copy-of-open-handle) differs from the original:
    /// both are measured AlreadyMapped cases.
    fn offset_damaged(&self) -> bool {
        match self.origin {
            Some(o) => o.0[28..31] != self.bytes.0[28..31] || o.0[16..24] != self.bytes.0[16..24],
            None => true,
        }
    }
}

#[derive(Default)]
struct ProcState {
    exited: bool,
    poisoned: bool,
    /// An open of a handle with a damaged offset succeeded here: the mapping
    /// it made is not shared with other offsets (mem.handle.damaged-offset-while-mapped).
    damaged_offset_open: bool,
    current: Option<ContextId>,
    contexts: Vec<ContextId>,
}

#[derive(Debug, Clone, Copy)]
struct Opened {
    count: u64,
    ctx: Option<ContextId>,
}

/// Everything one run observed.
#[derive(Debug, Default)]
struct Outcome {
    /// Every call and its result, as Debug strings.
    log: Vec<String>,
    hazards: Vec<Hazard>,
    /// Property 3.
    undocumented: Vec<String>,
    /// Property 4.
    incoherent: Vec<String>,
    /// Property 5.
    unconserved: Vec<String>,
    /// Property 6.
    unlogged: Vec<String>,
    /// Property 6, the cases of the two known findings.
    unlogged_known: Vec<String>,
    stats: Stats,
}

#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    opens_ok: usize,
    reopens_ok: usize,
    closes_ok: usize,
    checked_reads: usize,
    checked_import_reads: usize,
    excused_reads: usize,
    already_mapped: usize,
    sticky: usize,
    hazards: usize,
    final_closes: usize,
    model_resets: usize,
    /// Reads that compared at least one known byte.
    meaningful_reads: usize,
    ops: usize,
    skipped: usize,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.opens_ok += o.opens_ok;
        self.reopens_ok += o.reopens_ok;
        self.closes_ok += o.closes_ok;
        self.checked_reads += o.checked_reads;
        self.checked_import_reads += o.checked_import_reads;
        self.excused_reads += o.excused_reads;
        self.already_mapped += o.already_mapped;
        self.sticky += o.sticky;
        self.hazards += o.hazards;
        self.final_closes += o.final_closes;
        self.model_resets += o.model_resets;
        self.meaningful_reads += o.meaningful_reads;
        self.ops += o.ops;
        self.skipped += o.skipped;
    }
}

struct Interp {
    m: Box<dyn Machine>,
    dialect: Dialect,
    n: usize,
    step: usize,
    procs: Vec<ProcState>,
    allocs: Vec<AllocRec>,
    entries: Vec<Entry>,
    handles: Vec<HandleRec>,
    /// Successful opens: (process, handle).
    opens: Vec<(usize, usize)>,
    ledger: BTreeMap<(usize, u64), Opened>,
    out: Outcome,
}

fn start(prog: &Program) -> Box<dyn Machine> {
    let mut processes: Vec<_> = prog
        .procs
        .iter()
        .enumerate()
        .map(|(i, s)| proc_spec(&format!("p{i}"), s.device, s.visible.clone()))
        .collect();
    processes.push(proc_spec("spare", 0, None));
    let spec = MachineSpec {
        devices: 2,
        processes,
        dialect: prog.dialect,
        seed: prog.seed,
        step_timeout: Duration::from_secs(5),
        topology: None,
        semantics: Vec::new(),
    };
    match SimBackend::new(SimConfig::default()).start(&spec) {
        Ok(m) => m,
        Err(e) => panic!("start failed: {e:?}"),
    }
}

/// A short, stable summary of bytes (reads can be 64 KiB).
fn digest(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{} bytes, fnv {h:016x}", bytes.len())
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn free_kind_for(kind: MemKind) -> FreeKind {
    match kind {
        MemKind::Device | MemKind::Managed => FreeKind::Device,
        MemKind::PinnedHost => FreeKind::Host,
        MemKind::StreamOrdered => FreeKind::StreamOrdered,
    }
}

fn is_kind<T>(r: &DriverResult<T>, kind: ErrorKind) -> bool {
    matches!(r, Err(DriverError::Api(e)) if e.kind() == Some(kind))
}

impl Interp {
    fn new(prog: &Program) -> Interp {
        let n = prog.procs.len();
        let mut it = Interp {
            m: start(prog),
            dialect: prog.dialect,
            n,
            step: 0,
            procs: (0..n).map(|_| ProcState::default()).collect(),
            allocs: Vec::new(),
            entries: Vec::new(),
            handles: Vec::new(),
            opens: Vec::new(),
            ledger: BTreeMap::new(),
            out: Outcome::default(),
        };
        for p in 0..n {
            it.observe_context(p);
        }
        it
    }

    fn before(&self, p: usize) -> Before {
        Before {
            exited: self.procs[p].exited,
            poisoned: self.procs[p].poisoned,
            ..Before::default()
        }
    }

    /// Log a call's result and keep the process flags in step with it.
    fn record<T: Debug>(&mut self, p: usize, what: String, r: &DriverResult<T>) {
        self.out
            .log
            .push(format!("#{} p{p} {what} -> {r:?}", self.step));
        match r {
            Err(DriverError::Api(e)) if e.kind() == Some(ErrorKind::IllegalAddress) => {
                if !self.procs[p].poisoned {
                    self.out.stats.sticky += 1;
                }
                self.procs[p].poisoned = true;
            }
            Err(DriverError::Lost(_)) => self.gone(p),
            _ => {}
        }
    }

    fn judge<T: Debug>(&mut self, api: Api, p: usize, b: Before, what: &str, r: &DriverResult<T>) {
        if let Some(why) = undocumented(api, self.dialect, b, r) {
            self.out
                .undocumented
                .push(format!("step {} p{p} {what}: {why}", self.step));
        }
    }

    /// The process is gone: its mappings went with it.
    fn gone(&mut self, p: usize) {
        self.procs[p].exited = true;
        for ((q, _), o) in self.ledger.iter_mut() {
            if *q == p {
                o.count = 0;
            }
        }
    }

    fn observe_context(&mut self, p: usize) {
        let r = self.m.driver(p).current_context();
        self.record(p, "current_context()".into(), &r);
        self.procs[p].current = r.ok().flatten();
        if let Some(c) = self.procs[p].current {
            if !self.procs[p].contexts.contains(&c) {
                self.procs[p].contexts.push(c);
            }
        }
    }

    fn step_hazards(&self) -> Vec<Hazard> {
        self.m
            .hazards()
            .unwrap_or_default()
            .into_iter()
            .filter(|h| h.step == Some(self.step))
            .collect()
    }

    /// The newest pointer of `p` whose range holds `[addr, addr + len)`.
    fn lookup(&self, p: usize, addr: u64, len: u64) -> Option<usize> {
        let end = addr.checked_add(len)?;
        self.entries
            .iter()
            .rposition(|e| e.p == p && e.ptr.0 <= addr && end <= e.ptr.0.saturating_add(e.len))
    }

    fn own_entries(&self) -> Vec<usize> {
        (0..self.entries.len())
            .filter(|&i| !self.entries[i].import)
            .collect()
    }

    fn import_entries(&self) -> Vec<usize> {
        (0..self.entries.len())
            .filter(|&i| self.entries[i].import)
            .collect()
    }

    fn open_count(&self, p: usize, ptr: DevicePtr) -> u64 {
        self.ledger.get(&(p, ptr.0)).map_or(0, |o| o.count)
    }

    /// Resolve an access: (process, address, length, entry).
    fn place(&self, at: At, cap: bool) -> Option<(usize, u64, u64, usize)> {
        let imports = self.import_entries();
        let i = if at.import && !imports.is_empty() {
            *at.ptr.get(&imports)
        } else if self.entries.is_empty() {
            return None;
        } else {
            at.ptr.index(self.entries.len())
        };
        let e = &self.entries[i];
        let mut n = match at.len {
            Len::Fixed(n) => n,
            Len::Whole => e.len,
        };
        if cap {
            n = n.min(MAX_XFER);
        }
        let off = match at.off {
            Off::Start => 0,
            Off::Near(k) => 64 * u64::from(k),
            Off::Inside(x) => x.index(usize::try_from(e.len.saturating_sub(n) + 1).ok()?) as u64,
            Off::End(over) => e.len.saturating_sub(n) + over,
        };
        Some((e.p, e.ptr.0.checked_add(off)?, n, i))
    }

    /// A successful write or memset of `[addr, addr + n)` by `p`.
    fn wrote(&mut self, p: usize, addr: u64, content: Content, hazard: bool) {
        let n = content.len();
        match self.lookup(p, addr, n) {
            // A logged write is undefined: through a handle of freed memory
            // it lands in whatever the exporter has there now
            // (`stale_handle=by-address`), so it falls to the reset below.
            Some(i) if self.entries[i].target.is_some() && !hazard => {
                let e = &self.entries[i];
                let off = addr - e.ptr.0;
                let a = &mut self.allocs[e.target.unwrap_or_default()];
                a.log.push((off, content));
                a.tainted |= hazard;
            }
            _ => {
                // Bytes went somewhere the model cannot name: forget everything.
                self.out.stats.model_resets += 1;
                for a in &mut self.allocs {
                    let size = a.size;
                    a.log.push((0, Content::Unknown(size)));
                }
            }
        }
    }

    fn expected(a: &AllocRec, off: u64, n: u64) -> Vec<Option<u8>> {
        let mut want = vec![None; n as usize];
        for (o, c) in &a.log {
            let s = (*o).max(off);
            let e = o.saturating_add(c.len()).min(off + n);
            for x in s..e {
                want[(x - off) as usize] = match c {
                    Content::Fill(v, _) => Some(*v),
                    Content::Bytes(b) => Some(b[(x - o) as usize]),
                    Content::Unknown(_) => None,
                };
            }
        }
        want
    }

    /// Property 4: a successful read of live shared memory shows the last
    /// bytes written there.
    fn check_read(&mut self, p: usize, addr: u64, n: u64, got: &[u8], what: &str) {
        let Some(i) = self.lookup(p, addr, n) else {
            return;
        };
        let e = &self.entries[i];
        let Some(k) = e.target else {
            return;
        };
        let a = &self.allocs[k];
        if a.freed || a.tainted || self.procs[a.p].exited {
            return;
        }
        let import = e.import;
        let off = addr - e.ptr.0;
        let want = Self::expected(a, off, n);
        let bad = if got.len() as u64 != n {
            Some(format!("returned {} bytes, asked for {n}", got.len()))
        } else {
            want.iter()
                .zip(got)
                .position(|(w, g)| w.is_some_and(|w| w != *g))
                .map(|j| {
                    format!(
                        "byte {} of allocation {k} (exporter p{}): want {:#04x}, got {:#04x}",
                        off + j as u64,
                        a.p,
                        want[j].unwrap_or_default(),
                        got[j]
                    )
                })
        };
        match bad {
            None => {
                if want.iter().any(Option::is_some) {
                    self.out.stats.meaningful_reads += 1;
                }
                self.out.stats.checked_reads += 1;
                if import {
                    self.out.stats.checked_import_reads += 1;
                }
            }
            Some(_) if !self.step_hazards().is_empty() => self.out.stats.excused_reads += 1,
            Some(why) => self
                .out
                .incoherent
                .push(format!("step {} p{p} {what}: {why}", self.step)),
        }
    }

    /// Property 6: an access that succeeded through a pointer whose
    /// allocation was freed (by an API call), or through an IPC pointer after
    /// its last close, is in the hazard log. The two cases the simulator is
    /// known to miss go to `unlogged_known` (see the `finding_` tests).
    fn check_logged(&mut self, p: usize, addr: u64, n: u64, what: &str) {
        let Some(i) = self.lookup(p, addr, n) else {
            return;
        };
        let e = &self.entries[i];
        let freed = e.target.is_some_and(|k| self.allocs[k].freed);
        let closed = e.import && self.open_count(p, e.ptr) == 0;
        if !(freed || closed) || !self.step_hazards().is_empty() {
            return;
        }
        let (why, known) = if freed {
            let who = if e.import {
                "the exporter"
            } else {
                "the process"
            };
            (format!("{who} freed the allocation"), e.opened_after_free)
        } else {
            ("the pointer's last ipc_close already happened".into(), true)
        };
        let line = format!(
            "step {} p{p} {what} succeeded through {} although {why}, and no hazard was logged",
            self.step, e.ptr
        );
        if known {
            self.out.unlogged_known.push(line);
        } else {
            self.out.unlogged.push(line);
        }
    }

    fn run(&mut self, ops: &[Op]) {
        for (step, op) in ops.iter().enumerate() {
            self.step = step;
            self.m.begin_step(step);
            let before = self.out.log.len();
            self.exec(op);
            if self.out.log.len() == before {
                self.out
                    .log
                    .push(format!("#{step} skipped (nothing to act on)"));
                self.out.stats.skipped += 1;
            }
        }
    }

    fn exec(&mut self, op: &Op) {
        let n = self.n;
        match *op {
            Op::Alloc { p, kind, size } => {
                let p = p.index(n);
                let r = self.m.driver(p).alloc(kind, size);
                self.record(p, format!("alloc({kind:?}, {size})"), &r);
                if let Ok(ptr) = r {
                    let ctx = self.procs[p].current;
                    self.allocs.push(AllocRec {
                        p,
                        size,
                        kind,
                        ctx,
                        freed: false,
                        log: Vec::new(),
                        tainted: false,
                    });
                    self.entries.push(Entry {
                        p,
                        ptr,
                        len: size,
                        target: Some(self.allocs.len() - 1),
                        import: false,
                        opened_after_free: false,
                    });
                }
            }
            Op::Free { a, how } => self.free(a, how),
            Op::Memset { at, value } => {
                let Some((p, addr, len, _)) = self.place(at, false) else {
                    return self.alloc_for(at.ptr);
                };
                let r = self.m.driver(p).memset(DevicePtr(addr), value, len);
                let what = format!("memset({addr:#x}, {value:#04x}, {len})");
                self.record(p, what.clone(), &r);
                if r.is_ok() {
                    self.check_logged(p, addr, len, &what);
                    let hz = !self.step_hazards().is_empty();
                    self.wrote(p, addr, Content::Fill(value, len), hz);
                }
            }
            Op::Write { at, seed } => {
                let Some((p, addr, len, _)) = self.place(at, true) else {
                    return self.alloc_for(at.ptr);
                };
                let bytes: Vec<u8> = (0..len)
                    .map(|i| seed.wrapping_add((splitmix(i) >> 56) as u8))
                    .collect();
                let r = self.m.driver(p).write(DevicePtr(addr), &bytes);
                let what = format!("write({addr:#x}, {})", digest(&bytes));
                self.record(p, what.clone(), &r);
                if r.is_ok() {
                    self.check_logged(p, addr, len, &what);
                    let hz = !self.step_hazards().is_empty();
                    self.wrote(p, addr, Content::Bytes(bytes), hz);
                }
            }
            Op::Read { at } | Op::DeviceRead { at } => {
                let kernel = matches!(op, Op::DeviceRead { .. });
                let Some((p, addr, len, _)) = self.place(at, true) else {
                    return self.alloc_for(at.ptr);
                };
                let d = self.m.driver(p);
                let r = if kernel {
                    d.device_read(DevicePtr(addr), len)
                } else {
                    d.read(DevicePtr(addr), len)
                };
                let name = if kernel { "device_read" } else { "read" };
                let what = format!("{name}({addr:#x}, {len})");
                let shown = r.as_ref().map(|b| digest(b)).map_err(Clone::clone);
                self.record(p, what.clone(), &shown);
                if let Ok(bytes) = r {
                    self.check_logged(p, addr, len, &what);
                    self.check_read(p, addr, len, &bytes, &what);
                }
            }
            Op::Get {
                a,
                interior,
                null_out,
            } => self.get(a, interior, null_out),
            Op::Open {
                h,
                who,
                in_exporter,
                flags,
                null_out,
            } => {
                if self.handles.is_empty() {
                    return self.get(h, false, false);
                }
                let hi = h.index(self.handles.len());
                let q = match self.handles[hi].exporter {
                    Some(x) if in_exporter => x,
                    Some(x) => {
                        let others: Vec<usize> = (0..n).filter(|&i| i != x).collect();
                        others[who.index(others.len())]
                    }
                    None => who.index(n),
                };
                let out = if null_out {
                    OutArg::Null
                } else {
                    OutArg::Valid
                };
                self.open(q, hi, flags, out, false);
            }
            Op::Reopen { which } => {
                if self.opens.is_empty() {
                    return self.exec(&Op::Open {
                        h: which,
                        who: which,
                        in_exporter: false,
                        flags: IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
                        null_out: false,
                    });
                }
                let (q, hi) = *which.get(&self.opens);
                self.open(q, hi, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid, true);
            }
            Op::Close { ptr, twice } => {
                let imports = self.import_entries();
                if imports.is_empty() {
                    return self.exec(&Op::Reopen { which: ptr });
                }
                let e = &self.entries[imports[ptr.index(imports.len())]];
                let (p, ptr) = (e.p, e.ptr);
                for _ in 0..(1 + usize::from(twice)) {
                    let _ = self.close(p, ptr, false);
                }
            }
            Op::CreateContext { p, device } => {
                let p = p.index(n);
                let r = self.m.driver(p).create_context(device);
                self.record(p, format!("create_context({device})"), &r);
                if let Ok(c) = r {
                    self.procs[p].contexts.push(c);
                    self.procs[p].current = Some(c);
                }
            }
            Op::SetContext { p, ctx, null } => {
                let p = p.index(n);
                let c = if null {
                    ContextId(0)
                } else if self.procs[p].contexts.is_empty() {
                    return;
                } else {
                    *ctx.get(&self.procs[p].contexts)
                };
                let r = self.m.driver(p).set_current_context(c);
                self.record(p, format!("set_current_context({c:?})"), &r);
                if r.is_ok() {
                    self.procs[p].current = (!null).then_some(c);
                }
            }
            Op::DestroyContext { p, ctx } => {
                let p = p.index(n);
                if self.procs[p].contexts.is_empty() {
                    return;
                }
                let c = *ctx.get(&self.procs[p].contexts);
                let r = self.m.driver(p).destroy_context(c);
                self.record(p, format!("destroy_context({c:?})"), &r);
                if r.is_ok() {
                    if self.procs[p].current == Some(c) {
                        self.procs[p].current = None;
                    }
                    for ((q, _), o) in self.ledger.iter_mut() {
                        if *q == p && o.ctx == Some(c) {
                            o.count = 0;
                        }
                    }
                    for a in &mut self.allocs {
                        if a.p == p && a.ctx == Some(c) {
                            a.freed = true;
                        }
                    }
                }
            }
            Op::SetDevice { p, device } => {
                let p = p.index(n);
                let r = self.m.driver(p).set_device(device);
                self.record(p, format!("set_device({device})"), &r);
                if r.is_ok() {
                    self.observe_context(p);
                }
            }
            Op::Exit { p } => {
                let p = p.index(n);
                let r = self.m.exit(p);
                self.record(p, "exit".into(), &r);
                if r.is_ok() {
                    self.gone(p);
                }
            }
            Op::Corrupt { h, how } => {
                let rec = match how {
                    Corruption::Flip { at, xor } => {
                        if self.handles.is_empty() {
                            return self.get(h, false, false);
                        }
                        let src = h.get(&self.handles);
                        let mut bytes = src.bytes;
                        bytes.0[at] ^= xor;
                        HandleRec {
                            bytes,
                            exporter: src.exporter,
                            alloc: None,
                            origin: src.origin,
                        }
                    }
                    Corruption::Zero => HandleRec {
                        bytes: IpcMemHandle::ZERO,
                        exporter: None,
                        alloc: None,
                        origin: None,
                    },
                    Corruption::Random(s) => {
                        let mut bytes = [0u8; 64];
                        for (i, c) in bytes.chunks_mut(8).enumerate() {
                            c.copy_from_slice(&splitmix(s ^ i as u64).to_le_bytes());
                        }
                        HandleRec {
                            bytes: IpcMemHandle(bytes),
                            exporter: None,
                            alloc: None,
                            origin: None,
                        }
                    }
                };
                self.out
                    .log
                    .push(format!("#{} corrupt {how:?} -> {:?}", self.step, rec.bytes));
                self.handles.push(rec);
            }
        }
    }

    /// What an op that needs something to act on does when nothing exists
    /// yet: a device allocation (so every op makes progress).
    fn alloc_for(&mut self, x: Index) {
        self.exec(&Op::Alloc {
            p: x,
            kind: MemKind::Device,
            size: *x.get(&SIZES),
        });
    }

    fn free(&mut self, a: Index, how: FreeSel) {
        let (p, ptr, kind) = match how {
            FreeSel::Null => (a.index(self.n), DevicePtr::NULL, FreeKind::Device),
            FreeSel::ImportPtr => {
                let imports = self.import_entries();
                if imports.is_empty() {
                    return self.alloc_for(a);
                }
                let e = &self.entries[imports[a.index(imports.len())]];
                (e.p, e.ptr, FreeKind::Device)
            }
            FreeSel::Matching | FreeSel::Device => {
                let own = self.own_entries();
                if own.is_empty() {
                    return self.alloc_for(a);
                }
                let e = &self.entries[own[a.index(own.len())]];
                let kind = match (how, e.target) {
                    (FreeSel::Matching, Some(k)) => free_kind_for(self.allocs[k].kind),
                    _ => FreeKind::Device,
                };
                (e.p, e.ptr, kind)
            }
        };
        let r = self.m.driver(p).free(kind, ptr);
        self.record(p, format!("free({kind:?}, {ptr})"), &r);
        if r.is_err() || ptr == DevicePtr::NULL {
            return;
        }
        match self.lookup(p, ptr.0, 1).map(|i| &self.entries[i]) {
            Some(e) if !e.import && e.ptr == ptr => {
                if let Some(k) = e.target {
                    self.allocs[k].freed = true;
                }
            }
            // `free_of_ipc_pointer=unmaps` closes; not the default.
            Some(e) if e.import => {
                if let Some(o) = self.ledger.get_mut(&(p, ptr.0)) {
                    o.count = o.count.saturating_sub(1);
                }
            }
            _ => self.out.incoherent.push(format!(
                "step {} p{p}: free({ptr}) succeeded on no pointer the model knows",
                self.step
            )),
        }
    }

    fn get(&mut self, a: Index, interior: bool, null_out: bool) {
        let own = self.own_entries();
        if own.is_empty() {
            return self.alloc_for(a);
        }
        let e = &self.entries[own[a.index(own.len())]];
        let p = e.p;
        let addr = e.ptr.0 + if interior { e.len / 2 } else { 0 };
        let out = if null_out {
            OutArg::Null
        } else {
            OutArg::Valid
        };
        let b = Before {
            null_out,
            ..self.before(p)
        };
        let r = self.m.driver(p).ipc_get_mem_handle(DevicePtr(addr), out);
        let what = format!("ipc_get({addr:#x}, {out:?})");
        self.judge(Api::Get, p, b, &what, &r);
        // All 64 bytes (the handle's Debug shows 16), for the determinism check.
        let shown = r
            .as_ref()
            .map(|h| h.0.iter().map(|b| format!("{b:02x}")).collect::<String>());
        self.record(p, what, &shown.map_err(Clone::clone));
        let Ok(h) = r else {
            return;
        };
        let alloc = self.lookup(p, addr, 1).and_then(|i| self.entries[i].target);
        // "If a region of memory is freed ... and a subsequent cudaMalloc
        // returns memory with the same device address, cudaIpcGetMemHandle
        // will return a unique handle for the new memory."
        if let Some(other) = self
            .handles
            .iter()
            .find(|x| x.bytes == h && x.alloc.is_some() && x.alloc != alloc)
        {
            self.out.undocumented.push(format!(
                "step {} p{p} {addr:#x}: ipc_get returned the handle of allocation {:?} for allocation {alloc:?}",
                self.step, other.alloc
            ));
        }
        self.handles.push(HandleRec {
            bytes: h,
            exporter: Some(p),
            alloc,
            origin: Some(h),
        });
    }

    fn open(&mut self, q: usize, hi: usize, flags: u32, out: OutArg, reopen: bool) {
        let h = &self.handles[hi];
        let (bytes, known) = (h.bytes, h.alloc);
        let damaged = h.offset_damaged();
        let b = Before {
            offset_damaged: damaged || self.procs[q].damaged_offset_open,
            ..self.before(q)
        };
        let r = self.m.driver(q).ipc_open_mem_handle(bytes, flags, out);
        let what = format!("ipc_open(handle {hi} {bytes:?}, flags {flags}, {out:?})");
        self.judge(Api::Open, q, b, &what, &r);
        if is_kind(&r, ErrorKind::AlreadyMapped) {
            self.out.stats.already_mapped += 1;
        }
        self.record(q, what, &r);
        let Ok(ptr) = r else {
            return;
        };
        if damaged {
            self.procs[q].damaged_offset_open = true;
        }
        self.out.stats.opens_ok += 1;
        if reopen {
            self.out.stats.reopens_ok += 1;
        }
        let current = self.procs[q].current;
        let prev = self.ledger.get(&(q, ptr.0)).copied();
        let live = prev.filter(|o| o.count > 0);
        if let Some(o) = live {
            if o.ctx != current {
                self.out.unconserved.push(format!(
                    "step {} p{q}: ipc_open in context {current:?} returned {ptr}, open in context {:?}",
                    self.step, o.ctx
                ));
            }
        }
        let target = match known {
            Some(k) => Some(k),
            // A handle of unknown provenance that re-opened a live pointer
            // shows what that pointer shows.
            None if live.is_some() => self
                .entries
                .iter()
                .rev()
                .find(|e| e.p == q && e.import && e.ptr == ptr)
                .and_then(|e| e.target),
            None => None,
        };
        let o = self.ledger.entry((q, ptr.0)).or_insert(Opened {
            count: 0,
            ctx: current,
        });
        if o.count == 0 {
            o.ctx = current;
        }
        o.count += 1;
        self.entries.push(Entry {
            p: q,
            ptr,
            len: target.map_or(UNKNOWN_LEN, |k| self.allocs[k].size),
            target,
            import: true,
            opened_after_free: target.is_some_and(|k| self.allocs[k].freed),
        });
        self.opens.push((q, hi));
    }

    /// One `ipc_close`; `fin` marks the closes of the final accounting.
    fn close(&mut self, p: usize, ptr: DevicePtr, fin: bool) -> DriverResult<()> {
        let b = self.before(p);
        let count = self.open_count(p, ptr);
        let r = self.m.driver(p).ipc_close_mem_handle(ptr);
        let what = format!("ipc_close({ptr})");
        self.judge(Api::Close, p, b, &what, &r);
        self.record(p, what, &r);
        let phase = if fin { "final accounting" } else { "program" };
        match &r {
            Ok(()) if count == 0 => self.out.unconserved.push(format!(
                "step {} ({phase}) p{p}: ipc_close({ptr}) succeeded with no open outstanding",
                self.step
            )),
            Ok(()) => {
                self.out.stats.closes_ok += 1;
                if let Some(o) = self.ledger.get_mut(&(p, ptr.0)) {
                    o.count -= 1;
                }
            }
            Err(e) if count > 0 && !b.exited && !b.poisoned => self.out.unconserved.push(format!(
                "step {} ({phase}) p{p}: ipc_close({ptr}) with {count} open(s) outstanding failed: {e}",
                self.step
            )),
            Err(_) => {}
        }
        r
    }

    /// Property 5's final accounting: every live process closes each pointer
    /// exactly as often as it is open, then every process exits, and the idle
    /// spare process must find the machine whole.
    fn finish(&mut self) {
        self.step = usize::MAX / 2;
        self.m.begin_step(self.step);
        let keys: Vec<(usize, u64)> = self.ledger.keys().copied().collect();
        let usable = |s: &ProcState| !s.exited && !s.poisoned;
        // Pointers with no open outstanding: a close must fail.
        for &(p, ptr) in &keys {
            if usable(&self.procs[p]) && self.ledger[&(p, ptr)].count == 0 {
                let r = self.close(p, DevicePtr(ptr), true);
                self.final_must_fail(p, ptr, &r);
            }
        }
        for &(p, ptr) in &keys {
            if !usable(&self.procs[p]) {
                continue;
            }
            let count = self.ledger[&(p, ptr)].count;
            for _ in 0..count {
                if self.close(p, DevicePtr(ptr), true).is_ok() {
                    self.out.stats.final_closes += 1;
                }
            }
            if count > 0 {
                let r = self.close(p, DevicePtr(ptr), true);
                self.final_must_fail(p, ptr, &r);
            }
        }
        for p in 0..self.n {
            if !self.procs[p].exited {
                let r = self.m.exit(p);
                self.record(p, "exit".into(), &r);
                if let Err(e) = r {
                    self.out
                        .unconserved
                        .push(format!("p{p}: exit of a running process failed: {e}"));
                }
                self.gone(p);
            }
        }
        // Nothing may be left allocated on either device: the spare process
        // allocates each device's whole memory.
        let spare = self.n;
        for device in [0u32, 1] {
            let d = self.m.driver(spare);
            let r = d.set_device(device).and_then(|()| {
                let a = d.alloc(MemKind::Device, DEVICE_MEMORY)?;
                d.memset(a, 0x5a, 64)?;
                let back = d.read(a, 64)?;
                d.free(FreeKind::Device, a)?;
                Ok(back)
            });
            let shown = r.as_ref().map(|b| digest(b)).map_err(Clone::clone);
            self.record(spare, format!("spare: whole device {device}"), &shown);
            match r {
                Ok(b) if b == [0x5a; 64] => {}
                other => self.out.unconserved.push(format!(
                    "after every process exited, a fresh process could not use all of device {device}: {other:?}"
                )),
            }
        }
        let r = self.m.exit(spare);
        self.record(spare, "exit".into(), &r);
        self.out.hazards = self.m.hazards().unwrap_or_default();
        self.out.stats.hazards = self.out.hazards.len();
    }

    fn final_must_fail(&mut self, p: usize, ptr: u64, r: &DriverResult<()>) {
        if !is_kind(r, ErrorKind::InvalidValue) {
            self.out.unconserved.push(format!(
                "final accounting p{p}: a close of {ptr:#x} past its open count gave {r:?}, not InvalidValue"
            ));
        }
    }
}

fn run(prog: &Program) -> Outcome {
    let mut it = Interp::new(prog);
    it.out.stats.ops = prog.ops.len();
    it.run(&prog.ops);
    it.finish();
    it.out
}

fn config() -> ProptestConfig {
    // An explicit `cases` would override PROPTEST_CASES, so read it here.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    // A fixed seed, so CI judges the same programs every run (a failure
    // there is a change, not the dice); PROPTEST_RNG_SEED=N picks another,
    // and long runs should (proptest prints the seed it used on failure).
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        ProptestConfig::default().rng_seed
    } else {
        proptest::test_runner::RngSeed::Fixed(20_261_123)
    };
    ProptestConfig {
        cases,
        max_shrink_iters: 4096,
        // Failures are reported with their minimal program; no files are written.
        failure_persistence: None,
        rng_seed,
        ..ProptestConfig::default()
    }
}

fn fail_list(what: &str, list: &[String], o: &Outcome) -> Result<(), TestCaseError> {
    if list.is_empty() {
        return Ok(());
    }
    let mut msg = format!("{what}:\n");
    for l in list {
        msg.push_str(&format!("  {l}\n"));
    }
    msg.push_str("calls:\n");
    for l in &o.log {
        msg.push_str(&format!("  {l}\n"));
    }
    msg.push_str("hazards:\n");
    for h in &o.hazards {
        msg.push_str(&format!("  {h:?}\n"));
    }
    Err(TestCaseError::fail(msg))
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// 1. Robustness: no op sequence panics, in the simulator or when the
    /// machine is torn down.
    #[test]
    fn prop1_no_program_panics(prog in program_strategy()) {
        let _ = run(&prog);
    }

    /// 2. Determinism: same program, same seed: same results, same hazards.
    #[test]
    fn prop2_same_seed_same_run(prog in program_strategy()) {
        let a = run(&prog);
        let b = run(&prog);
        prop_assert_eq!(&a.log, &b.log);
        let ha: Vec<String> = a.hazards.iter().map(|h| format!("{h:?}")).collect();
        let hb: Vec<String> = b.hazards.iter().map(|h| format!("{h:?}")).collect();
        prop_assert_eq!(ha, hb);
    }

    /// 3. Every error ipc_open / ipc_close / ipc_get returns is documented
    /// for the dialect, or a measured exception the catalogue names.
    #[test]
    fn prop3_ipc_errors_are_documented(prog in program_strategy()) {
        let o = run(&prog);
        fail_list("undocumented IPC results", &o.undocumented, &o)?;
    }

    /// 4. Coherence: a successful read of live memory shared through IPC
    /// returns the last bytes any process wrote there.
    #[test]
    fn prop4_shared_memory_is_coherent(prog in program_strategy()) {
        let o = run(&prog);
        fail_list("incoherent reads", &o.incoherent, &o)?;
    }

    /// 5. Conservation: opens minus successful closes is exactly how many
    /// further closes succeed; afterwards the machine is not wedged.
    #[test]
    fn prop5_open_counts_are_conserved(prog in program_strategy()) {
        let o = run(&prog);
        fail_list("open/close accounting", &o.unconserved, &o)?;
    }
}

proptest! {
    #![proptest_config(config())]

    /// 6. Hazard completeness: a successful access through a pointer to
    /// memory freed by an API call is logged (the two known gaps excepted,
    /// see `prop6_strict_...`).
    #[test]
    fn prop6_access_to_freed_memory_is_logged(prog in program_strategy()) {
        let o = run(&prog);
        fail_list("unlogged undefined behaviour", &o.unlogged, &o)?;
    }

    /// 6, strict: also an IPC pointer opened after its allocation was freed,
    /// and an IPC pointer used after its last close while its mapping lives.
    #[test]

    fn prop6_strict_every_undefined_access_is_logged(prog in program_strategy()) {
        let o = run(&prog);
        let all: Vec<String> = o.unlogged.iter().chain(&o.unlogged_known).cloned().collect();
        fail_list("unlogged undefined behaviour", &all, &o)?;
    }
}

/// The generator reaches the states the properties are about, often.
#[test]
fn generator_reaches_interesting_states() {
    let mut runner = TestRunner::deterministic();
    let strategy = program_strategy();
    let mut total = Stats::default();
    let programs = 200;
    for _ in 0..programs {
        let prog = strategy.new_tree(&mut runner).expect("a program").current();
        total.add(&run(&prog).stats);
    }
    eprintln!("{programs} programs: {total:?}");
    assert!(total.opens_ok > programs / 2, "{total:?}");
    assert!(total.reopens_ok > 10, "{total:?}");
    assert!(total.closes_ok > programs / 4, "{total:?}");
    assert!(total.checked_import_reads > programs / 4, "{total:?}");
    assert!(total.meaningful_reads > programs / 4, "{total:?}");
    assert!(total.final_closes > programs / 4, "{total:?}");
    assert!(total.already_mapped > 0, "{total:?}");
    assert!(total.sticky > 0, "{total:?}");
    assert!(total.hazards > programs / 4, "{total:?}");
}

// ---------------------------------------------------------------------------
// Findings: minimal reproductions of what property 6 found. Each asserts what
// the hazard log should say (both gaps are fixed in the simulator).
// ---------------------------------------------------------------------------

/// Two packed 1000-byte allocations share one 2 MiB block. The exporter
/// exports the first, frees it, and only then does the importer open the
/// handle: the open succeeds (the live neighbour keeps the block mapped, so
/// `freed_export=refused` does not apply), and the importer reads and writes
/// the freed allocation with nothing in the hazard log. The same access to
/// memory freed *after* the open is logged as access-after-free.
#[test]

fn finding_access_to_suballocation_freed_before_open_is_not_logged() {
    let mut m = common::start("");
    let a = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    let _neighbour = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    m.driver(0).free(FreeKind::Device, a).unwrap();
    let p = common::open(m.as_mut(), 1, h).expect("the open succeeds (block still mapped)");
    m.begin_step(1);
    assert!(m.driver(1).read(p, 16).is_ok());
    assert!(m.driver(1).memset(p, 0xee, 16).is_ok());
    assert!(
        common::hazard_kinds(m.as_ref()).contains(&HazardKind::AccessAfterFree),
        "no hazard for reading and writing freed memory: {:?}",
        m.hazards()
    );
}

/// The importer opens handles of two packed neighbours (one mapping of their
/// block, two pointers), closes the second pointer once (its last close), and
/// goes on using it: the access succeeds because the first pointer keeps the
/// mapping, and nothing is logged. `HazardKind::AccessAfterClose` is
/// documented as "access through an IPC pointer after its last close"; the
/// simulator records it only once the whole mapping is gone.
#[test]

fn finding_access_after_last_close_while_mapping_lives_is_not_logged() {
    let mut m = common::start("");
    let a = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    let ha = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let hb = m.driver(0).ipc_get_mem_handle(b, OutArg::Valid).unwrap();
    let _pa = common::open(m.as_mut(), 1, ha).unwrap();
    let pb = common::open(m.as_mut(), 1, hb).unwrap();
    m.driver(1).ipc_close_mem_handle(pb).unwrap();
    m.begin_step(1);
    // Measured (mem.close.use-after-last-close-shared-block): copies are
    // refused; a kernel still reaches the bytes through the live mapping.
    assert!(m.driver(1).read(pb, 16).is_err());
    assert!(m.driver(1).memset(pb, 0xee, 16).is_err());
    assert!(m.driver(1).device_read(pb, 16).is_ok());
    assert!(
        common::hazard_kinds(m.as_ref()).contains(&HazardKind::AccessAfterClose),
        "no hazard for using a closed IPC pointer: {:?}",
        m.hazards()
    );
}
