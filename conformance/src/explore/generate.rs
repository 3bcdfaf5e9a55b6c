//! Generated scenarios: a proptest strategy for abstract programs, and their
//! lowering into scenarios that are valid by construction.
//!
//! A [`Program`] is a list of [`Action`]s whose operands are
//! `proptest::sample::Index`es into what earlier actions produced
//! (allocations, handles, opened pointers, contexts), so every program lowers
//! to a scenario the parser accepts, and proptest shrinks it by dropping and
//! simplifying actions. An action with nothing to act on yet lowers to the
//! step that would make it possible (close -> open -> ipc_get -> malloc).
//!
//! Every step is written `=> any`: generated scenarios record, the
//! properties (simulator) and the differential (real driver) judge.
//!
//! Events are generated (create with IPC or wrong flags, get, send and
//! open, record/sync/stream-wait/query, destroy), kernel writes
//! (`slow_fill`, and the multi-byte `kernel_fill` / `kernel_iota`) read by
//! another process with and without the event wait that orders them,
//! `fork_child_call` after initialisation, the mistakes user code makes (a close from a process
//! that never opened the pointer, a second close, a second free), VMM
//! allocations shared over descriptors, and programs on two devices
//! (cross-device opens, peer queries and enables) where the machine has
//! two. Adding an op
//! family: add its [`Action`] variants with
//! a weight in [`action_strategy`], the state it produces to `Lowering`,
//! and its lowering in `Lowering::lower` (to `Op` values, which the test
//! `a_lowered_scenario_is_what_parsing_its_text_gives` checks against the
//! parser); the properties see it through the scenario and its trace, and
//! the documented-returns table in
//! `properties.rs` needs its APIs' codes.

use super::just_union::{just_oneof, JustThen};
use ipc_harness::driver::{event_flags, stream_flags};
use ipc_harness::scenario::{
    BytePattern, Expect, ExpectList, Expectation, Metadata, Op, PatternItem, Ref, Scenario, Step,
    NULL_EVENT,
};
use ipc_harness::{
    FreeKind, HandleTypes, MemKind, OutArg, PointerAttribute, ProcessSpec, ShareableHandleType,
};
use proptest::prelude::*;
use proptest::sample::Index;
use std::borrow::Cow;
use std::path::PathBuf;

mod kernels;
mod pools;
mod streams;

/// Allocation sizes, weighted toward small ones that share a 2 MiB block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeClass {
    /// 1000 bytes: packed 1024 apart into a shared block.
    Small,
    /// 4 KiB: packed too.
    Page,
    /// 2 MiB: one whole block.
    Block,
    /// 3 MiB: two blocks' worth.
    Large,
    /// An odd size (1..65536).
    Odd(u32),
}

impl SizeClass {
    pub fn bytes(self) -> u64 {
        match self {
            SizeClass::Small => 1000,
            SizeClass::Page => 4096,
            SizeClass::Block => 2 << 20,
            SizeClass::Large => 3 << 20,
            SizeClass::Odd(n) => u64::from(n.max(1)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindSel {
    Device,
    Managed,
    Host,
    Async,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleDamage {
    /// `handle_flip H OFF` at a byte offset from the measured field table.
    Flip(u8),
    Zero,
    Random,
}

/// One abstract action; operands index what exists when it is lowered.
#[derive(Debug, Clone)]
pub enum Action {
    Malloc {
        proc: Index,
        kind: KindSel,
        size: SizeClass,
        fill: u8,
    },
    Free {
        alloc: Index,
        /// Free with the wrong call for the kind (`free_host` of device memory).
        wrong_call: bool,
    },
    /// `ipc_get`, of the base or an interior pointer.
    Get {
        alloc: Index,
        interior: bool,
        null_out: bool,
    },
    /// Send a handle to another process and open it there.
    SendOpen {
        handle: Index,
        to: Index,
        flags: u32,
    },
    /// Open a handle the process holds (possibly the exporter's own).
    Open {
        holding: Index,
        flags: u32,
        null_out: bool,
    },
    /// Open again a handle this process already opened.
    Reopen {
        open: Index,
    },
    Close {
        open: Index,
    },
    /// Close something that is not an open IPC pointer (an allocation, null).
    CloseOther {
        ptr: Index,
        null: bool,
    },
    Fill {
        ptr: Index,
        value: u8,
        at: u16,
        len: u16,
    },
    Write {
        ptr: Index,
        offset: u16,
        byte: u8,
        len: u8,
    },
    Read {
        ptr: Index,
        offset: u16,
        len: u16,
        kernel: bool,
    },
    /// A kernel read past the end of a small allocation into its neighbour.
    ReadNeighbour {
        ptr: Index,
    },
    /// A pointer used by a process that does not own it.
    ForeignRead {
        ptr: Index,
        by: Index,
    },
    Query {
        ptr: Index,
        range: bool,
    },
    /// `pointer_attr P ATTR`: one `cuPointerGetAttribute` query.
    PointerAttribute {
        ptr: Index,
        attr: Index,
    },
    Exit {
        proc: Index,
        exporter: bool,
    },
    /// `ctx_create 0` (a second context on the same device).
    SecondContext {
        proc: Index,
    },
    SwitchContext {
        ctx: Index,
    },
    DestroyContext {
        ctx: Index,
    },
    /// A damaged or made-up handle, then an open of it.
    BadHandle {
        holding: Index,
        damage: HandleDamage,
    },
    Sync {
        proc: Index,
    },
    // --- interprocess events ---
    /// `event_create`, usually with the flags IPC needs.
    EventCreate {
        proc: Index,
        flags: EventFlags,
    },
    /// `ipc_get_event` of an event the process made.
    EventGet {
        event: Index,
        null_out: bool,
    },
    /// Send an event handle to another process and open it there (or in
    /// the exporter itself); rarely into a NULL out pointer
    /// (event.open.null-out).
    EventSendOpen {
        handle: Index,
        to: Index,
        null_out: bool,
    },
    /// `event_record`, `event_sync`, `stream_wait` or `event_query` on a
    /// live event binding (made or imported), rarely on the NULL event
    /// instead (`event_record null`: event.null.*).
    EventUse {
        event: Index,
        how: EventUse,
        null: bool,
    },
    EventDestroy {
        event: Index,
    },
    // --- mistakes user code makes ---
    /// Free a live allocation, then free it again (`double-free`).
    FreeTwice {
        alloc: Index,
    },
    /// Close an open pointer twice in a row (`double-close` on the second,
    /// unless a re-open is still outstanding).
    CloseTwice {
        open: Index,
    },
    /// A process closes the pointer another process opened, one it never
    /// opened itself (`foreign-close`: the other mapping stays open).
    ForeignClose {
        open: Index,
        by: Index,
    },
    /// A process exports an interprocess event, sends the handle, then
    /// crashes (`ipc_get_event E out=null`: a crash in the runtime, an
    /// error elsewhere), and the receiver opens the handle.
    ExporterCrash {
        proc: Index,
        to: Index,
    },
    // --- kernel writes and the events that order them ---
    /// `slow_fill` of a live device allocation by its owner: long work on
    /// its stream, whose bytes land when it ends.
    SlowFill {
        alloc: Index,
        value: u8,
        long: bool,
    },
    /// A kernel write handed to a reader through an interprocess event: the
    /// exporter `slow_fill`s, records, the importer (optionally queries,)
    /// waits as `order` says, and reads through its mapping.
    KernelHandoff {
        pair: Index,
        value: u8,
        order: HandoffOrder,
        query: bool,
        long: bool,
    },
    // --- streams and device-to-device copies ---
    /// PyTorch's receive-then-clone on non-blocking streams: the exporter
    /// `slow_fill`s and records on a stream of its own, the importer waits
    /// as `order` says, copies from its mapping into a local buffer on its
    /// stream, synchronizes that stream and reads the copy.
    StreamHandoff {
        pair: Index,
        value: u8,
        order: StreamOrder,
        long: bool,
    },
    /// A kernel handoff over streams with or without a mistake users make
    /// (the event recorded on the wrong stream, recorded again, waited for
    /// before the record, the bytes read on another stream): see
    /// `generate/streams.rs`.
    StreamBug {
        pair: Index,
        bug: StreamBug,
    },
    /// A copy from an open mapping into a new local buffer of the importer
    /// on the legacy stream (`copy_peer` from the exporter's device when
    /// `peer` and the two are on different devices), then a read of it.
    DeviceCopy {
        open: Index,
        peer: bool,
    },
    // --- VMM allocations shared over POSIX descriptors (driver API calls
    // in both dialects) ---
    /// `can_access_peer` or `enable_peer` toward the other device (two
    /// devices only).
    Peer {
        proc: Index,
        enable: bool,
    },
    VmmCreate {
        proc: Index,
        size: VmmSize,
        /// `types=posix_fd` (else none: exporting it is refused).
        exportable: bool,
    },
    VmmExport {
        vmm: Index,
    },
    /// Pass a descriptor to another process (SCM_RIGHTS) and import it
    /// there, or import it in the process that has it.
    VmmSendImport {
        fd: Index,
        to: Index,
    },
    /// Take a descriptor from its holder with `pidfd_getfd` (UCX's way, and
    /// Isaac ROS's) and import it in the taker.
    VmmPidfdImport {
        fd: Index,
        to: Index,
    },
    /// Reserve VA, map the handle there and (usually) grant access; with
    /// `unmap`, then a write through it, `vmm_unmap` and a read through
    /// the reservation (a use after unmap: it must fail).
    VmmMap {
        vmm: Index,
        access: VmmAccess,
        unmap: bool,
    },
    /// A copy into or out of a VMM mapping.
    VmmTouch {
        va: Index,
        write: bool,
        value: u8,
    },
    /// `vmm_unmap`; with `touch_after`, then a read through the reservation
    /// (the use after unmap user code makes: it must fail).
    VmmUnmap {
        va: Index,
        touch_after: bool,
    },
    VmmRelease {
        vmm: Index,
    },
    FdClose {
        fd: Index,
    },
    // --- memory pools ---
    /// One allocation of a new pool shared from one process with another,
    /// then freed in `order` (see `generate/pools.rs`).
    PoolShare {
        pair: Index,
        value: u8,
        order: PoolFreeOrder,
        exportable: bool,
        /// The pool's device, among the machine's.
        device: Index,
        /// Each process grants its own device access to the pool's memory
        /// where that is not the pool's device.
        grant: bool,
        /// The importer frees the pointer with `free` (cudaFree), not
        /// `pool_free`.
        cuda_free: bool,
        /// The importer imports the pool, and the pointer, twice.
        twice: bool,
    },
    // --- pattern kernels and forked children (see `generate/kernels.rs`) ---
    /// `kernel_fill` / `kernel_iota` of a live device allocation by its
    /// owner: a kernel writing more than one constant byte, launched
    /// `repeat` times (1 to 4; more than 1 as a `repeat N` step).
    PatternKernel {
        alloc: Index,
        write: KernelWrite,
        repeat: u32,
    },
    /// `fork_child_call alloc 1MiB` in a live process.
    ForkChild {
        proc: Index,
    },
}

/// What a generated pattern kernel writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelWrite {
    /// `kernel_fill P (WORD)`: 1 to 8 bytes, repeated.
    Word(Vec<u8>),
    /// `kernel_iota P BASE`.
    Iota(u8),
}

/// Sizes of generated `vmm_create`s: the 2 MiB granularity, twice it, and
/// half of it (refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmmSize {
    Granule,
    TwoGranules,
    Unaligned,
}

impl VmmSize {
    fn bytes(self) -> u64 {
        match self {
            VmmSize::Granule => 2 << 20,
            VmmSize::TwoGranules => 4 << 20,
            VmmSize::Unaligned => 1 << 20,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmmAccess {
    ReadWrite,
    Read,
    /// No `vmm_set_access`: copies are refused (measured).
    NotGranted,
}

/// The flags of a generated `event_create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFlags {
    /// `interprocess,disable_timing`: what IPC needs.
    Ipc,
    /// `interprocess` without `disable_timing` (refused).
    InterprocessTiming,
    /// `default`: a process-local event.
    Default,
}

/// What a generated step does with an event. Whether `event_query` says
/// NotReady is timing on a GPU: the differential accepts either answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventUse {
    Record,
    Sync,
    StreamWait,
    Query,
}

/// When the two processes free a shared pool allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolFreeOrder {
    /// The importer frees first, as documented (pool.lifetime.importer-frees-first).
    ImporterFirst,
    /// The exporter frees while the importer holds it: free-while-mapped
    /// (pool.lifetime.exporter-frees-first).
    ExporterFirst,
    /// The exporter frees before the importer imports: pool-import-of-freed
    /// (pool.lifetime.import-after-exporter-free).
    ExporterBeforeImport,
}

/// A stream of one process: its legacy default stream, or one it creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Legacy,
    /// `stream_create flags=default`: synchronizes with the legacy stream.
    Blocking,
    /// `stream_create flags=nonblocking`.
    NonBlocking,
    /// `stream=per_thread`: the per-thread default stream, a blocking
    /// stream nobody creates or destroys.
    PerThread,
}

/// Where the writer of a [`StreamBug`] records its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOn {
    /// On the kernel's stream: right.
    KernelStream,
    /// On another stream of this kind (the legacy stream for
    /// [`StreamKind::Legacy`]): right only where the implicit order of the
    /// legacy stream puts the kernel before it.
    Other(StreamKind),
}

/// How the reader of a [`StreamBug`] waits for the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// `event_sync`.
    Sync,
    /// `event_query`: ordered only if it says the work is done.
    Query,
    /// `stream_wait` on a stream of this kind, after the record.
    Stream(StreamKind),
    /// `stream_wait` on a stream of this kind made before the writer
    /// records: it waits for nothing.
    StreamBeforeRecord(StreamKind),
    /// No wait.
    Nothing,
}

/// How the reader of a [`StreamBug`] reads the kernel's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOn {
    /// `read` of its mapping (a copy to the host, on its legacy stream).
    Host,
    /// A copy from the mapping on the stream that waited (the legacy
    /// stream when the wait was on the host), then a read of the copy.
    WaitedStream,
    /// The same copy on another new stream of this kind: not ordered by a
    /// wait on another stream.
    OtherStream(StreamKind),
}

/// One [`Action::StreamBug`]'s choices (lowered in `generate/streams.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBug {
    pub value: u8,
    pub kernel: StreamKind,
    pub record: RecordOn,
    /// A second record of the event, on a new idle non-blocking stream,
    /// after the first: it replaces what the first captured.
    pub rerecord: bool,
    pub wait: WaitFor,
    pub read: ReadOn,
    /// The writer reads its own bytes on its legacy stream right after the
    /// kernel, without a synchronization.
    pub writer_reads: bool,
    pub long: bool,
}

/// How the reader of a [`Action::KernelHandoff`] is ordered after the
/// kernel write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffOrder {
    /// Record after the kernel, `event_sync` in the reader: ordered.
    Synced,
    /// Record after the kernel, `stream_wait` in the reader: ordered.
    StreamWaited,
    /// Record before the kernel, `event_sync`: the event does not cover the
    /// write (`unsynchronized-read`).
    RecordedBefore,
    /// Record after the kernel, no wait: `unsynchronized-read`.
    NoWait,
}

/// How the copy of a [`Action::StreamHandoff`] is ordered after the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOrder {
    /// `stream_wait` on the copy's stream: ordered.
    Waited,
    /// `stream_wait` on another stream of the importer: not ordered.
    OtherStream,
    /// No wait: not ordered.
    NoWait,
}

/// Microseconds of a generated `slow_fill`: short work lands within a few
/// steps on the simulated clock, long work outlasts the program.
fn slow_micros(long: bool) -> u64 {
    if long {
        100_000
    } else {
        500
    }
}

/// A generated program: processes (2 or 3, on one or two devices) and actions.
#[derive(Debug, Clone)]
pub struct Program {
    pub processes: usize,
    /// Devices of the machine (1 or 2) and each process's device.
    pub devices: u32,
    pub placement: Vec<u32>,
    pub actions: Vec<Action>,
}

fn size_strategy() -> impl Strategy<Value = SizeClass> {
    // As prop_oneof! of the four values and the odd sizes.
    JustThen::new(
        vec![
            (6, SizeClass::Small),
            (2, SizeClass::Page),
            (3, SizeClass::Block),
            (1, SizeClass::Large),
        ],
        (1, (1u32..65536).prop_map(SizeClass::Odd)),
    )
}

fn kind_strategy() -> impl Strategy<Value = KindSel> {
    just_oneof![
        20 => KindSel::Device,
        1 => KindSel::Managed,
        1 => KindSel::Host,
        1 => KindSel::Async,
    ]
}

fn flags_strategy() -> impl Strategy<Value = u32> {
    just_oneof![12 => 1u32, 1 => 0u32, 1 => 2u32, 1 => 3u32]
}

/// Byte offsets of the handle fields (mock-driver/src/handle_codec.rs): checked and ignored ones.
const FLIP_OFFSETS: [u8; 9] = [0, 8, 16, 24, 28, 32, 40, 48, 52];

fn damage_strategy() -> impl Strategy<Value = HandleDamage> {
    prop_oneof![
        4 => proptest::sample::select(&FLIP_OFFSETS[..]).prop_map(HandleDamage::Flip),
        1 => Just(HandleDamage::Zero),
        1 => Just(HandleDamage::Random),
    ]
}

/// One action, weighted toward re-opens, closes, exporter exits, sub-allocated
/// neighbours and second contexts.
pub fn action_strategy() -> impl Strategy<Value = Action> {
    let i = any::<Index>;
    // Draws as `prop_oneof!` would, without its per-option runner forks.
    super::lean_union::lean_oneof![
        8 => (i(), kind_strategy(), size_strategy(), any::<u8>())
            .prop_map(|(proc, kind, size, fill)| Action::Malloc { proc, kind, size, fill }),
        3 => (i(), proptest::bool::weighted(0.1))
            .prop_map(|(alloc, wrong_call)| Action::Free { alloc, wrong_call }),
        6 => (i(), proptest::bool::weighted(0.15), proptest::bool::weighted(0.03))
            .prop_map(|(alloc, interior, null_out)| Action::Get { alloc, interior, null_out }),
        8 => (i(), i(), flags_strategy())
            .prop_map(|(handle, to, flags)| Action::SendOpen { handle, to, flags }),
        2 => (i(), flags_strategy(), proptest::bool::weighted(0.05))
            .prop_map(|(holding, flags, null_out)| Action::Open { holding, flags, null_out }),
        5 => i().prop_map(|open| Action::Reopen { open }),
        8 => i().prop_map(|open| Action::Close { open }),
        1 => (i(), proptest::bool::weighted(0.3))
            .prop_map(|(ptr, null)| Action::CloseOther { ptr, null }),
        4 => (i(), any::<u8>(), 0u16..2048, 1u16..2048)
            .prop_map(|(ptr, value, at, len)| Action::Fill { ptr, value, at, len }),
        4 => (i(), 0u16..2048, any::<u8>(), 1u8..64)
            .prop_map(|(ptr, offset, byte, len)| Action::Write { ptr, offset, byte, len }),
        8 => (i(), 0u16..1024, 1u16..256, proptest::bool::weighted(0.3))
            .prop_map(|(ptr, offset, len, kernel)| Action::Read { ptr, offset, len, kernel }),
        2 => i().prop_map(|ptr| Action::ReadNeighbour { ptr }),
        1 => (i(), i()).prop_map(|(ptr, by)| Action::ForeignRead { ptr, by }),
        2 => (i(), any::<bool>()).prop_map(|(ptr, range)| Action::Query { ptr, range }),
        2 => (i(), i()).prop_map(|(ptr, attr)| Action::PointerAttribute { ptr, attr }),
        4 => (i(), proptest::bool::weighted(0.8))
            .prop_map(|(proc, exporter)| Action::Exit { proc, exporter }),
        3 => i().prop_map(|proc| Action::SecondContext { proc }),
        2 => i().prop_map(|ctx| Action::SwitchContext { ctx }),
        1 => i().prop_map(|ctx| Action::DestroyContext { ctx }),
        2 => (i(), damage_strategy()).prop_map(|(holding, damage)| Action::BadHandle { holding, damage }),
        1 => i().prop_map(|proc| Action::Sync { proc }),
        2 => (i(), just_oneof![8 => EventFlags::Ipc, 1 => EventFlags::InterprocessTiming, 1 => EventFlags::Default])
            .prop_map(|(proc, flags)| Action::EventCreate { proc, flags }),
        2 => (i(), proptest::bool::weighted(0.03))
            .prop_map(|(event, null_out)| Action::EventGet { event, null_out }),
        2 => (i(), i(), proptest::bool::weighted(0.03))
            .prop_map(|(handle, to, null_out)| Action::EventSendOpen { handle, to, null_out }),
        2 => (i(), just_oneof![EventUse::Record, EventUse::Sync, EventUse::StreamWait, EventUse::Query], proptest::bool::weighted(0.04))
            .prop_map(|(event, how, null)| Action::EventUse { event, how, null }),
        1 => i().prop_map(|event| Action::EventDestroy { event }),
        1 => i().prop_map(|alloc| Action::FreeTwice { alloc }),
        1 => i().prop_map(|open| Action::CloseTwice { open }),
        1 => (i(), i()).prop_map(|(open, by)| Action::ForeignClose { open, by }),
        1 => (i(), i()).prop_map(|(proc, to)| Action::ExporterCrash { proc, to }),
        1 => (i(), any::<u8>(), any::<bool>())
            .prop_map(|(alloc, value, long)| Action::SlowFill { alloc, value, long }),
        2 => (i(), any::<u8>(), just_oneof![HandoffOrder::Synced, HandoffOrder::StreamWaited, HandoffOrder::RecordedBefore, HandoffOrder::NoWait], proptest::bool::weighted(0.5), proptest::bool::weighted(0.7))
            .prop_map(|(pair, value, order, query, long)| Action::KernelHandoff { pair, value, order, query, long }),
        1 => (i(), any::<u8>(), just_oneof![4 => StreamOrder::Waited, 1 => StreamOrder::OtherStream, 1 => StreamOrder::NoWait], proptest::bool::weighted(0.7))
            .prop_map(|(pair, value, order, long)| Action::StreamHandoff { pair, value, order, long }),
        4 => (i(), stream_bug_strategy()).prop_map(|(pair, bug)| Action::StreamBug { pair, bug }),
        1 => (i(), proptest::bool::weighted(0.5)).prop_map(|(open, peer)| Action::DeviceCopy { open, peer }),
        2 => (i(), just_oneof![6 => VmmSize::Granule, 2 => VmmSize::TwoGranules, 1 => VmmSize::Unaligned], proptest::bool::weighted(0.9))
            .prop_map(|(proc, size, exportable)| Action::VmmCreate { proc, size, exportable }),
        2 => i().prop_map(|vmm| Action::VmmExport { vmm }),
        // A descriptor travels by socket or by pidfd_getfd: the weight of
        // imports as a whole is unchanged.
        1 => (i(), i()).prop_map(|(fd, to)| Action::VmmSendImport { fd, to }),
        1 => (i(), i()).prop_map(|(fd, to)| Action::VmmPidfdImport { fd, to }),
        2 => (i(), just_oneof![6 => VmmAccess::ReadWrite, 1 => VmmAccess::Read, 1 => VmmAccess::NotGranted], proptest::bool::weighted(0.25))
            .prop_map(|(vmm, access, unmap)| Action::VmmMap { vmm, access, unmap }),
        3 => (i(), any::<bool>(), any::<u8>()).prop_map(|(va, write, value)| Action::VmmTouch { va, write, value }),
        1 => (i(), proptest::bool::weighted(0.3)).prop_map(|(va, touch_after)| Action::VmmUnmap { va, touch_after }),
        1 => i().prop_map(|vmm| Action::VmmRelease { vmm }),
        1 => i().prop_map(|fd| Action::FdClose { fd }),
        1 => (i(), any::<bool>()).prop_map(|(proc, enable)| Action::Peer { proc, enable }),
        2 => (i(), any::<u8>(), just_oneof![6 => PoolFreeOrder::ImporterFirst, 1 => PoolFreeOrder::ExporterFirst, 1 => PoolFreeOrder::ExporterBeforeImport], proptest::bool::weighted(0.9), i(), proptest::bool::weighted(0.5), proptest::bool::weighted(0.3), proptest::bool::weighted(0.15))
            .prop_map(|(pair, value, order, exportable, device, grant, cuda_free, twice)| Action::PoolShare { pair, value, order, exportable, device, grant, cuda_free, twice }),
        1 => (i(), prop_oneof![proptest::collection::vec(any::<u8>(), 1..=8).prop_map(KernelWrite::Word), any::<u8>().prop_map(KernelWrite::Iota)], prop_oneof![3 => Just(1u32), 1 => 2u32..=4])
            .prop_map(|(alloc, write, repeat)| Action::PatternKernel { alloc, write, repeat }),
        1 => i().prop_map(|proc| Action::ForkChild { proc }),
    ]
}

fn stream_kind() -> impl Strategy<Value = StreamKind> {
    just_oneof![
        3 => StreamKind::Legacy,
        3 => StreamKind::Blocking,
        3 => StreamKind::NonBlocking,
        2 => StreamKind::PerThread
    ]
}

/// Mostly right handoffs; each mistake in a fair share of them.
fn stream_bug_strategy() -> impl Strategy<Value = StreamBug> {
    let record = prop_oneof![
        2 => Just(RecordOn::KernelStream),
        1 => stream_kind().prop_map(RecordOn::Other),
    ];
    let wait = prop_oneof![
        2 => Just(WaitFor::Sync),
        1 => Just(WaitFor::Query),
        2 => stream_kind().prop_map(WaitFor::Stream),
        1 => stream_kind().prop_map(WaitFor::StreamBeforeRecord),
        1 => Just(WaitFor::Nothing),
    ];
    let read = prop_oneof![
        2 => Just(ReadOn::Host),
        2 => Just(ReadOn::WaitedStream),
        1 => stream_kind().prop_map(ReadOn::OtherStream),
    ];
    (
        any::<u8>(),
        stream_kind(),
        record,
        proptest::bool::weighted(0.3),
        wait,
        read,
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.7),
    )
        .prop_map(
            |(value, kernel, record, rerecord, wait, read, writer_reads, long)| StreamBug {
                value,
                kernel,
                record,
                rerecord,
                wait,
                read,
                writer_reads,
                long,
            },
        )
}

/// Programs of 2 or 3 processes, on up to `max_devices` devices (a quarter
/// of them on two when the machine has two), and up to `max_actions` actions.
pub fn program_strategy(max_actions: usize, max_devices: u32) -> impl Strategy<Value = Program> {
    let max = max_actions.max(1);
    let devices = if max_devices >= 2 {
        just_oneof![3 => 1u32, 1 => 2u32].boxed()
    } else {
        Just(1u32).boxed()
    };
    (
        just_oneof![3 => 2usize, 1 => 3usize],
        devices,
        proptest::collection::vec(any::<bool>(), 3),
        proptest::collection::vec(action_strategy(), 1..=max),
    )
        .prop_map(|(processes, devices, second, actions)| Program {
            processes,
            devices,
            placement: second
                .iter()
                .map(|&b| u32::from(b && devices == 2))
                .collect(),
            actions,
        })
}

const PROC_NAMES: [&str; 3] = ["p0", "p1", "p2"];

/// A name the lowering made, `{prefix}{serial}` (`m12`), held inline: the
/// records of what was made copy it freely, and only a step's op gets a
/// `String` of it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Name {
    len: u8,
    /// ASCII: a prefix of at most [`Name::MAX_PREFIX`] bytes, then digits.
    bytes: [u8; 23],
}

impl Name {
    const MAX_PREFIX: usize = 3;

    /// `{prefix}{serial}`; `prefix` is ASCII of at most 3 bytes (there is
    /// room for the 20 digits of any `usize`).
    fn new(prefix: &str, serial: usize) -> Name {
        assert!(prefix.len() <= Self::MAX_PREFIX && prefix.is_ascii());
        let mut bytes = [0u8; 23];
        let mut len = 0;
        for &b in prefix.as_bytes() {
            bytes[len] = b;
            len += 1;
        }
        let digits = serial.checked_ilog10().unwrap_or(0) as usize + 1;
        let mut n = serial;
        for k in (len..len + digits).rev() {
            bytes[k] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        Name {
            len: (len + digits) as u8,
            bytes,
        }
    }

    fn as_str(&self) -> &str {
        let bytes = &self.bytes[..usize::from(self.len)];
        debug_assert!(bytes.is_ascii());
        // SAFETY: `Name::new` writes only ASCII (an ASCII prefix and
        // digits) into the first `len` bytes.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[derive(Debug, Clone)]
struct AllocRec {
    name: Name,
    proc: usize,
    size: u64,
    kind: KindSel,
    freed: bool,
}

#[derive(Debug, Clone)]
struct OpenRec {
    name: Name,
    proc: usize,
    handle: Name,
}

#[derive(Debug, Clone)]
struct CtxRec {
    name: Name,
    proc: usize,
}

/// A pointer binding some process holds, with the bytes it is known to span.
#[derive(Debug, Clone)]
struct PtrRec {
    name: Name,
    proc: usize,
    len: u64,
}

/// A VMM handle binding (made or imported), a descriptor, a mapped VA.
#[derive(Debug, Clone)]
struct VmmRec {
    name: Name,
    proc: usize,
    size: u64,
    released: bool,
}

#[derive(Debug, Clone)]
struct FdRec {
    name: Name,
    proc: usize,
    size: u64,
    closed: bool,
}

#[derive(Debug, Clone)]
struct VaRec {
    name: Name,
    proc: usize,
    size: u64,
    mapped: bool,
}

/// An event binding: made by `event_create` or `ipc_open_event`.
#[derive(Debug, Clone)]
struct EventRec {
    name: Name,
    proc: usize,
    destroyed: bool,
}

/// One per process a program may have: an array, not a `Vec`, so that
/// starting a lowering allocates none (those past `nprocs` stay unused).
type PerProc<T> = [T; PROC_NAMES.len()];

/// What the lowered steps made so far (names only: outcomes are not known
/// when generating).
struct Lowering {
    devices: u32,
    /// Each process's device.
    placement: Vec<u32>,
    vmms: Vec<VmmRec>,
    fds: Vec<FdRec>,
    vas: Vec<VaRec>,
    events: Vec<EventRec>,
    /// Per process: event handles it holds (made or received).
    event_holdings: PerProc<Vec<Name>>,
    nprocs: usize,
    exited: PerProc<bool>,
    /// Per process: handles it may use (made or received), with the
    /// allocation they came from (`None` for made-up handles).
    holdings: PerProc<Vec<(Name, Option<usize>)>>,
    allocs: Vec<AllocRec>,
    opens: Vec<OpenRec>,
    ctxs: Vec<CtxRec>,
    /// Per process: the binding of its primary context, once named.
    primary: PerProc<Option<Name>>,
    /// Per process: it made a second context (its kernels are not
    /// generated: which context an allocation belongs to is not tracked).
    second_ctx: PerProc<bool>,
    /// Event pairs made for kernel handoffs: (writer, reader, the writer's
    /// event, the reader's imported one), as indices into `events`.
    handoff_events: Vec<(usize, usize, usize, usize)>,
    ptrs: Vec<PtrRec>,
    serial: usize,
    /// The steps so far.
    steps: Vec<Step>,
    stats: GenStats,
}

/// How often a generated program reached the states the properties are
/// about (summed over a run, explore's `Reached`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GenStats {
    /// Steps written.
    #[serde(skip)]
    pub steps: usize,
    pub opens: usize,
    pub reopens: usize,
    pub closes: usize,
    /// Exits of a process whose handles another process opened.
    pub exporter_exits: usize,
    /// Closes written after the exporter of the handle exited.
    pub closes_after_exporter_exit: usize,
    /// Small allocations made where the process already had one (neighbours).
    pub suballocated_neighbours: usize,
    pub second_contexts: usize,
    pub bad_handles: usize,
    /// `ipc_open_event` steps.
    pub event_opens: usize,
    /// `vmm_import` steps.
    pub vmm_imports: usize,
    /// `pool_import_ptr` steps.
    pub pool_imports: usize,
    /// Opens of memory another device holds.
    pub cross_device_opens: usize,
    /// Closes by a process of a pointer another process opened.
    pub foreign_closes: usize,
    /// Second closes written right after a close.
    pub double_closes: usize,
    /// Second frees written right after a free.
    pub double_frees: usize,
    /// `event_query` steps.
    pub event_queries: usize,
    /// `slow_fill` steps.
    pub slow_fills: usize,
    /// Opens of an event handle after its exporter's (runtime) crash.
    pub opens_after_exporter_crash: usize,
    /// Reads of a kernel's bytes ordered by an event wait, and not ordered.
    pub ordered_kernel_reads: usize,
    pub unordered_kernel_reads: usize,
    /// `kernel_fill` / `kernel_iota` steps.
    pub pattern_kernels: usize,
    /// `fork_child_call` steps.
    pub fork_children: usize,
    /// `repeat N` steps.
    pub repeat_steps: usize,
    /// Stream handoffs whose event was recorded on another stream than
    /// the kernel's (right or wrong, as the legacy stream's order says).
    pub records_on_other_stream: usize,
    /// Stream waits made before the event was recorded.
    pub waits_before_record: usize,
    /// Reads of a kernel's bytes on another stream than the one that
    /// waited (or, by the writer, than the kernel's).
    pub reads_on_other_stream: usize,
}

impl GenStats {
    pub fn add(&mut self, o: &GenStats) {
        self.steps += o.steps;
        self.opens += o.opens;
        self.reopens += o.reopens;
        self.closes += o.closes;
        self.exporter_exits += o.exporter_exits;
        self.closes_after_exporter_exit += o.closes_after_exporter_exit;
        self.suballocated_neighbours += o.suballocated_neighbours;
        self.second_contexts += o.second_contexts;
        self.bad_handles += o.bad_handles;
        self.event_opens += o.event_opens;
        self.vmm_imports += o.vmm_imports;
        self.pool_imports += o.pool_imports;
        self.cross_device_opens += o.cross_device_opens;
        self.foreign_closes += o.foreign_closes;
        self.double_closes += o.double_closes;
        self.double_frees += o.double_frees;
        self.event_queries += o.event_queries;
        self.slow_fills += o.slow_fills;
        self.opens_after_exporter_crash += o.opens_after_exporter_crash;
        self.ordered_kernel_reads += o.ordered_kernel_reads;
        self.unordered_kernel_reads += o.unordered_kernel_reads;
        self.pattern_kernels += o.pattern_kernels;
        self.fork_children += o.fork_children;
        self.repeat_steps += o.repeat_steps;
        self.records_on_other_stream += o.records_on_other_stream;
        self.waits_before_record += o.waits_before_record;
        self.reads_on_other_stream += o.reads_on_other_stream;
    }
}

/// A lowered program: the scenario and what it reached.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// The scenario, as parsing [`Lowered::text`] gives it.
    pub scenario: Scenario,
    pub stats: GenStats,
}

/// The path generated scenarios carry (for messages).
pub const SCENARIO_PATH: &str = "explore.ipc";

impl Lowered {
    /// The scenario file: the declarations, then one step a line, each
    /// written `=> any`.
    pub fn text(&self) -> String {
        scenario_text(&self.scenario)
    }
}

/// The text of a generated scenario: `devices`, the process declarations,
/// and each step in its canonical form with its expectation list.
pub fn scenario_text(s: &Scenario) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(64 + 40 * s.steps.len());
    let _ = writeln!(text, "devices {}", s.devices);
    for p in &s.processes {
        let _ = writeln!(text, "process {} device={}", p.name, p.device);
    }
    for step in &s.steps {
        let _ = write!(text, "{}: {}", s.processes[step.process].name, step.text());
        match &step.expect {
            Expect::List(list) => {
                let _ = writeln!(text, " => {}", list.text);
            }
            _ => text.push('\n'),
        }
    }
    text
}

/// `=> any`: every generated step records its outcome, none is judged.
fn expect_any() -> Expect {
    Expect::List(ExpectList {
        items: Cow::Borrowed(&[Expectation::Any]),
        // `Expectation::Any`'s text, borrowed (formatting it was a step's
        // worth of work per generated step); parsing a case's text checks it.
        text: Cow::Borrowed("any"),
    })
}

/// The item `i` picks among `items`, as indexing a `Vec` of them would,
/// without collecting them (`None` when there are none).
fn pick_among<I: Iterator + Clone>(items: I, i: &Index) -> Option<I::Item> {
    match items.clone().count() {
        0 => None,
        n => items.into_iter().nth(i.index(n)),
    }
}

fn name(n: &str) -> Ref {
    Ref::Name(n.to_string())
}

impl Lowering {
    fn new(nprocs: usize, devices: u32, placement: &[u32]) -> Lowering {
        let nprocs = nprocs.clamp(1, PROC_NAMES.len());
        let devices = devices.clamp(1, 2);
        let placement: Vec<u32> = (0..nprocs)
            .map(|p| placement.get(p).copied().unwrap_or(0).min(devices - 1))
            .collect();
        Lowering {
            devices,
            placement,
            vmms: Vec::new(),
            fds: Vec::new(),
            vas: Vec::new(),
            events: Vec::new(),
            event_holdings: Default::default(),
            nprocs,
            exited: Default::default(),
            holdings: Default::default(),
            allocs: Vec::new(),
            opens: Vec::new(),
            ctxs: Vec::new(),
            primary: Default::default(),
            second_ctx: Default::default(),
            handoff_events: Vec::new(),
            ptrs: Vec::new(),
            serial: 0,
            // Room for a program's worth of steps.
            steps: Vec::with_capacity(40),
            stats: GenStats::default(),
        }
    }

    fn fresh(&mut self, prefix: &'static str) -> Name {
        self.serial += 1;
        Name::new(prefix, self.serial)
    }

    fn live_procs(&self) -> Vec<usize> {
        (0..self.nprocs).filter(|&p| !self.exited[p]).collect()
    }

    /// A live process chosen by `i`, if any is left.
    fn pick_proc(&self, i: &Index) -> Option<usize> {
        pick_among((0..self.nprocs).filter(|&p| !self.exited[p]), i)
    }

    /// A live process other than `except` chosen by `i`, if any.
    fn pick_other_proc(&self, except: usize, i: &Index) -> Option<usize> {
        pick_among(
            (0..self.nprocs).filter(|&p| !self.exited[p] && p != except),
            i,
        )
    }

    /// One step of process `proc`, on the line [`scenario_text`] writes it.
    #[inline(always)]
    fn emit(&mut self, proc: usize, op: Op) {
        self.emit_step(proc, None, op, None);
    }

    /// One step of process `proc` binding its result to `bind`.
    #[inline(always)]
    fn bind(&mut self, proc: usize, bind: &str, op: Op) {
        self.emit_step(proc, Some(bind.to_string()), op, None);
    }

    #[inline(always)]
    fn emit_step(&mut self, proc: usize, bind: Option<String>, op: Op, repeat: Option<u32>) {
        // `devices`, then one line per process, then the steps.
        let line = 2 + self.nprocs + self.steps.len();
        self.steps.push(Step {
            line,
            process: proc,
            bind,
            op,
            expect: expect_any(),
            repeat,
        });
    }

    /// `send H -> TO` from `from`.
    fn send(&mut self, from: usize, handle: &str, to: usize) {
        self.emit(
            from,
            Op::Send {
                handle: handle.to_string(),
                to,
                to_name: PROC_NAMES[to].to_string(),
            },
        );
    }

    fn malloc(&mut self, proc: usize, kind: KindSel, size: SizeClass, fill: u8) -> usize {
        let bytes = size.bytes();
        let small = kind == KindSel::Device && bytes < (2 << 20);
        if small
            && self.allocs.iter().any(|a| {
                a.proc == proc && !a.freed && a.kind == KindSel::Device && a.size < 2 << 20
            })
        {
            self.stats.suballocated_neighbours += 1;
        }
        let name = self.fresh("m");
        let kind_of = match kind {
            KindSel::Device => MemKind::Device,
            KindSel::Managed => MemKind::Managed,
            KindSel::Host => MemKind::PinnedHost,
            KindSel::Async => MemKind::StreamOrdered,
        };
        self.bind(
            proc,
            &name,
            Op::Malloc {
                kind: kind_of,
                size: bytes,
            },
        );
        // Fresh memory holds whatever the previous user left: define it.
        self.emit(
            proc,
            Op::Fill {
                ptr: self::name(&name),
                value: fill,
                at: None,
                len: None,
                resolved_len: bytes,
            },
        );
        self.allocs.push(AllocRec {
            name,
            proc,
            size: bytes,
            kind,
            freed: false,
        });
        self.ptrs.push(PtrRec {
            name,
            proc,
            len: bytes,
        });
        self.allocs.len() - 1
    }

    /// An allocation of a live process (not freed), or a new one.
    fn pick_alloc(&mut self, i: &Index) -> Option<usize> {
        let live = (0..self.allocs.len())
            .filter(|&a| !self.allocs[a].freed && !self.exited[self.allocs[a].proc]);
        if let Some(a) = pick_among(live, i) {
            return Some(a);
        }
        let p = self.pick_proc(i)?;
        Some(self.malloc(p, KindSel::Device, SizeClass::Small, 0x5a))
    }

    fn get(&mut self, alloc: usize, interior: bool, null_out: bool) -> Option<Name> {
        let (proc, size) = (self.allocs[alloc].proc, self.allocs[alloc].size);
        let ptr = if interior && size > 256 {
            let x = self.fresh("x");
            let base = name(&self.allocs[alloc].name);
            self.bind(
                proc,
                &x,
                Op::Offset {
                    ptr: base,
                    bytes: 256,
                },
            );
            x
        } else {
            self.allocs[alloc].name
        };
        if null_out {
            self.emit(
                proc,
                Op::IpcGet {
                    ptr: Ref::Name(ptr.to_string()),
                    out: OutArg::Null,
                },
            );
            // The runtime's NULL out-argument kills the process (measured).
            return None;
        }
        let h = self.fresh("h");
        self.bind(
            proc,
            &h,
            Op::IpcGet {
                ptr: Ref::Name(ptr.to_string()),
                out: OutArg::Valid,
            },
        );
        self.holdings[proc].push((h, Some(alloc)));
        Some(h)
    }

    /// A handle held by a live process, or one made now.
    fn pick_holding(&mut self, i: &Index) -> Option<(usize, Name, Option<usize>)> {
        // The holdings of the live processes in process order, counted
        // first: only the one picked is copied.
        let count: usize = (0..self.nprocs)
            .filter(|&p| !self.exited[p])
            .map(|p| self.holdings[p].len())
            .sum();
        if count == 0 {
            let a = self.pick_alloc(i)?;
            let h = self.get(a, false, false)?;
            return Some((self.allocs[a].proc, h, Some(a)));
        }
        let mut k = i.index(count);
        for p in (0..self.nprocs).filter(|&p| !self.exited[p]) {
            match self.holdings[p].get(k) {
                Some(&(h, a)) => return Some((p, h, a)),
                None => k -= self.holdings[p].len(),
            }
        }
        None
    }

    fn open(&mut self, proc: usize, handle: Name, from: Option<usize>, flags: u32, null_out: bool) {
        let op = |out| Op::IpcOpen {
            handle: handle.to_string(),
            flags,
            out,
        };
        if null_out {
            self.emit(proc, op(OutArg::Null));
            return;
        }
        let name = self.fresh("o");
        self.bind(proc, &name, op(OutArg::Valid));
        self.stats.opens += 1;
        if from.is_some_and(|a| self.placement[self.allocs[a].proc] != self.placement[proc]) {
            self.stats.cross_device_opens += 1;
        }
        self.opens.push(OpenRec { name, proc, handle });
        let len = from.map_or(1000, |a| self.allocs[a].size);
        self.ptrs.push(PtrRec { name, proc, len });
    }

    fn live_open(&self, i: &Index) -> Option<usize> {
        pick_among(
            (0..self.opens.len()).filter(|&o| !self.exited[self.opens[o].proc]),
            i,
        )
    }

    /// A pointer binding of a live process.
    fn pick_ptr(&mut self, i: &Index) -> Option<PtrRec> {
        let live = self.ptrs.iter().filter(|p| !self.exited[p.proc]);
        if let Some(p) = pick_among(live, i) {
            return Some(p.clone());
        }
        let p = self.pick_proc(i)?;
        let a = self.malloc(p, KindSel::Device, SizeClass::Small, 0x3c);
        Some(PtrRec {
            name: self.allocs[a].name,
            proc: p,
            len: self.allocs[a].size,
        })
    }

    /// The exporter of a handle name, if it came from `ipc_get`.
    fn exporter_of(&self, handle: Name) -> Option<usize> {
        self.holdings.iter().flatten().find_map(|(h, a)| {
            (*h == handle)
                .then_some(*a)
                .flatten()
                .map(|a| self.allocs[a].proc)
        })
    }

    fn lower(&mut self, action: &Action) {
        match action {
            Action::Malloc {
                proc,
                kind,
                size,
                fill,
            } => {
                if let Some(p) = self.pick_proc(proc) {
                    self.malloc(p, *kind, *size, *fill);
                }
            }
            Action::Free { alloc, wrong_call } => {
                let Some(a) = self.pick_alloc(alloc) else {
                    return;
                };
                let rec = self.allocs[a].clone();
                let right = free_kind(rec.kind);
                let kind = match (wrong_call, right) {
                    (false, r) => r,
                    (true, FreeKind::Host) => FreeKind::Device,
                    (true, _) => FreeKind::Host,
                };
                self.emit(
                    rec.proc,
                    Op::Free {
                        kind,
                        ptr: Ref::Name(rec.name.to_string()),
                    },
                );
                if !wrong_call {
                    self.allocs[a].freed = true;
                }
            }
            Action::Get {
                alloc,
                interior,
                null_out,
            } => {
                if let Some(a) = self.pick_alloc(alloc) {
                    self.get(a, *interior, *null_out);
                }
            }
            Action::SendOpen { handle, to, flags } => {
                let Some((from, h, alloc)) = self.pick_holding(handle) else {
                    return;
                };
                let Some(dest) = self.pick_other_proc(from, to) else {
                    return;
                };
                self.send(from, &h, dest);
                if !self.holdings[dest].iter().any(|(x, _)| *x == h) {
                    self.holdings[dest].push((h, alloc));
                }
                self.open(dest, h, alloc, *flags, false);
            }
            Action::Open {
                holding,
                flags,
                null_out,
            } => {
                if let Some((p, h, alloc)) = self.pick_holding(holding) {
                    self.open(p, h, alloc, *flags, *null_out);
                }
            }
            Action::Reopen { open } => match self.live_open(open) {
                Some(o) => {
                    let (proc, handle) = (self.opens[o].proc, self.opens[o].handle);
                    let alloc = self.holdings[proc]
                        .iter()
                        .find(|(h, _)| *h == handle)
                        .and_then(|(_, a)| *a);
                    self.stats.reopens += 1;
                    self.open(proc, handle, alloc, 1, false);
                }
                None => self.lower(&Action::SendOpen {
                    handle: *open,
                    to: *open,
                    flags: 1,
                }),
            },
            Action::Close { open } => match self.live_open(open) {
                Some(o) => {
                    let rec = &self.opens[o];
                    if self.exporter_of(rec.handle).is_some_and(|e| self.exited[e]) {
                        self.stats.closes_after_exporter_exit += 1;
                    }
                    let (proc, ptr) = (rec.proc, Ref::Name(rec.name.to_string()));
                    self.stats.closes += 1;
                    self.emit(proc, Op::IpcClose { ptr });
                }
                None => self.lower(&Action::SendOpen {
                    handle: *open,
                    to: *open,
                    flags: 1,
                }),
            },
            Action::CloseOther { ptr, null } => {
                if *null {
                    if let Some(p) = self.pick_proc(ptr) {
                        self.emit(p, Op::IpcClose { ptr: Ref::Null });
                    }
                } else if let Some(a) = self.pick_alloc(ptr) {
                    let rec = self.allocs[a].clone();
                    self.emit(
                        rec.proc,
                        Op::IpcClose {
                            ptr: Ref::Name(rec.name.to_string()),
                        },
                    );
                }
            }
            Action::Fill {
                ptr,
                value,
                at,
                len,
            } => {
                if let Some(p) = self.pick_ptr(ptr) {
                    let (at, len) = within(p.len, u64::from(*at), u64::from(*len));
                    self.emit(
                        p.proc,
                        Op::Fill {
                            ptr: Ref::Name(p.name.to_string()),
                            value: *value,
                            at: Some(at),
                            len: Some(len),
                            resolved_len: len,
                        },
                    );
                }
            }
            Action::Write {
                ptr,
                offset,
                byte,
                len,
            } => {
                if let Some(p) = self.pick_ptr(ptr) {
                    let (off, len) = within(p.len, u64::from(*offset), u64::from(*len));
                    self.emit(
                        p.proc,
                        Op::Write {
                            ptr: Ref::Name(p.name.to_string()),
                            offset: off,
                            pattern: BytePattern {
                                items: vec![PatternItem::Run(*byte, len)],
                            },
                        },
                    );
                }
            }
            Action::Read {
                ptr,
                offset,
                len,
                kernel,
            } => {
                if let Some(p) = self.pick_ptr(ptr) {
                    let (offset, len) = within(p.len, u64::from(*offset), u64::from(*len));
                    let ptr = Ref::Name(p.name.to_string());
                    let op = if *kernel {
                        Op::DeviceRead { ptr, offset, len }
                    } else {
                        Op::Read { ptr, offset, len }
                    };
                    self.emit(p.proc, op);
                }
            }
            Action::ReadNeighbour { ptr } => {
                if let Some(p) = self.pick_ptr(ptr) {
                    let ptr = Ref::Name(p.name.to_string());
                    if p.len <= 1024 {
                        // The next 1024-byte slot of the shared block.
                        self.emit(
                            p.proc,
                            Op::DeviceRead {
                                ptr,
                                offset: 1024,
                                len: 16,
                            },
                        );
                    } else {
                        self.emit(
                            p.proc,
                            Op::Read {
                                ptr,
                                offset: p.len - 8,
                                len: 16,
                            },
                        );
                    }
                }
            }
            Action::ForeignRead { ptr, by } => {
                if let Some(p) = self.pick_ptr(ptr) {
                    if let Some(q) = self.pick_other_proc(p.proc, by) {
                        self.emit(q, read16(&p.name));
                    }
                }
            }
            Action::Query { ptr, range } => {
                if let Some(p) = self.pick_ptr(ptr) {
                    let ptr = Ref::Name(p.name.to_string());
                    let op = if *range {
                        Op::AddressRange { ptr }
                    } else {
                        Op::PointerAttr { ptr }
                    };
                    self.emit(p.proc, op);
                }
            }
            Action::PointerAttribute { ptr, attr } => {
                if let Some(p) = self.pick_ptr(ptr) {
                    let attr = PointerAttribute::ALL[attr.index(PointerAttribute::ALL.len())];
                    self.emit(
                        p.proc,
                        Op::PointerAttribute {
                            ptr: Ref::Name(p.name.to_string()),
                            attr,
                        },
                    );
                    // A buffer id is unique within the process: ask another
                    // live allocation of it too.
                    let other = self
                        .allocs
                        .iter()
                        .rev()
                        .find(|a| a.proc == p.proc && !a.freed && a.name != p.name)
                        .map(|a| a.name);
                    if let (PointerAttribute::BufferId, Some(other)) = (attr, other) {
                        self.emit(
                            p.proc,
                            Op::PointerAttribute {
                                ptr: Ref::Name(other.to_string()),
                                attr,
                            },
                        );
                    }
                }
            }
            Action::Exit { proc, exporter } => {
                let target = if *exporter {
                    // A live process whose handle a live other process opened.
                    self.opens
                        .iter()
                        .filter(|o| !self.exited[o.proc])
                        .filter_map(|o| self.exporter_of(o.handle))
                        .find(|&e| !self.exited[e])
                } else {
                    None
                };
                let Some(p) = target.or_else(|| self.pick_proc(proc)) else {
                    return;
                };
                // Keep one process alive, so the program goes on.
                if self.live_procs().len() <= 1 {
                    return;
                }
                if target.is_some() {
                    self.stats.exporter_exits += 1;
                }
                self.emit(p, Op::Exit);
                self.exited[p] = true;
            }
            Action::SecondContext { proc } => {
                if let Some(p) = self.pick_proc(proc) {
                    self.name_primary(p);
                    let c = self.fresh("c");
                    let device = self.placement[p];
                    self.bind(p, &c, Op::CtxCreate { device });
                    self.stats.second_contexts += 1;
                    self.second_ctx[p] = true;
                    self.ctxs.push(CtxRec { name: c, proc: p });
                }
            }
            Action::SwitchContext { ctx } => {
                let live: Vec<CtxRec> = self
                    .ctxs
                    .iter()
                    .filter(|c| !self.exited[c.proc])
                    .cloned()
                    .collect();
                if !live.is_empty() {
                    let c = &live[ctx.index(live.len())];
                    self.emit(
                        c.proc,
                        Op::CtxSet {
                            ctx: c.name.to_string(),
                        },
                    );
                } else {
                    self.lower(&Action::SecondContext { proc: *ctx });
                }
            }
            Action::DestroyContext { ctx } => {
                let live: Vec<CtxRec> = self
                    .ctxs
                    .iter()
                    .filter(|c| !self.exited[c.proc])
                    .cloned()
                    .collect();
                if !live.is_empty() {
                    let c = &live[ctx.index(live.len())];
                    self.emit(
                        c.proc,
                        Op::CtxDestroy {
                            ctx: c.name.to_string(),
                        },
                    );
                    // What a process does with a destroyed context made
                    // current is measured only for a few calls
                    // (mem.context.set-destroyed): not generated.
                    self.ctxs.retain(|x| x.name != c.name);
                    // Destroying a context destroys the events made in it;
                    // using one afterwards is unmeasured (the simulator says
                    // InvalidHandle) and the generator does not track which
                    // context made an event: none of the process's events
                    // is used again.
                    for e in self.events.iter_mut().filter(|e| e.proc == c.proc) {
                        e.destroyed = true;
                    }
                    // Back to the primary context, so the process goes on.
                    if let Some(pc) = self.primary[c.proc] {
                        self.emit(
                            c.proc,
                            Op::CtxSet {
                                ctx: pc.to_string(),
                            },
                        );
                    }
                }
            }
            Action::BadHandle { holding, damage } => {
                let Some(p) = self.pick_proc(holding) else {
                    return;
                };
                let name = self.fresh("h");
                let source = match damage {
                    HandleDamage::Flip(off) => match self.pick_holding(holding) {
                        Some((q, h, _)) => {
                            self.bind(
                                q,
                                &name,
                                Op::HandleFlip {
                                    handle: h.to_string(),
                                    offset: *off,
                                },
                            );
                            q
                        }
                        None => return,
                    },
                    HandleDamage::Zero => {
                        self.bind(p, &name, Op::HandleZero);
                        p
                    }
                    HandleDamage::Random => {
                        self.bind(p, &name, Op::HandleRandom);
                        p
                    }
                };
                self.holdings[source].push((name, None));
                self.stats.bad_handles += 1;
                // Opened elsewhere when possible (an importer's view).
                let dest = self
                    .live_procs()
                    .into_iter()
                    .find(|&q| q != source)
                    .unwrap_or(source);
                if dest != source {
                    self.send(source, &name, dest);
                    self.holdings[dest].push((name, None));
                }
                self.open(dest, name, None, 1, false);
            }
            Action::Sync { proc } => {
                if let Some(p) = self.pick_proc(proc) {
                    self.emit(p, Op::Sync);
                }
            }
            Action::EventCreate { proc, flags } => {
                if let Some(p) = self.pick_proc(proc) {
                    self.event_create(p, *flags);
                }
            }
            Action::EventGet { event, null_out } => {
                if let Some(e) = self.pick_event(event) {
                    self.event_get(e, *null_out);
                }
            }
            Action::EventSendOpen {
                handle,
                to,
                null_out,
            } => {
                let Some((from, h)) = self.pick_event_holding(handle) else {
                    return;
                };
                let Some(target) = self.pick_proc(to) else {
                    return;
                };
                if target != from {
                    self.send(from, &h, target);
                    self.event_holdings[target].push(h);
                }
                if *null_out {
                    self.emit(
                        target,
                        Op::IpcOpenEvent {
                            handle: h.to_string(),
                            out: OutArg::Null,
                        },
                    );
                    return;
                }
                let name = self.fresh("e");
                self.bind(
                    target,
                    &name,
                    Op::IpcOpenEvent {
                        handle: h.to_string(),
                        out: OutArg::Valid,
                    },
                );
                self.stats.event_opens += 1;
                self.events.push(EventRec {
                    name,
                    proc: target,
                    destroyed: false,
                });
            }
            Action::EventUse { event, how, null } => {
                if let Some(e) = self.pick_event(event) {
                    let rec = self.events[e].clone();
                    let event = if *null {
                        NULL_EVENT.to_string()
                    } else {
                        rec.name.to_string()
                    };
                    let op = match how {
                        EventUse::Record => Op::EventRecord {
                            event,
                            stream: None,
                        },
                        EventUse::Sync => Op::EventSync { event },
                        EventUse::StreamWait => Op::StreamWait {
                            event,
                            stream: None,
                        },
                        EventUse::Query => {
                            self.stats.event_queries += 1;
                            Op::EventQuery { event }
                        }
                    };
                    self.emit(rec.proc, op);
                }
            }
            Action::Peer { proc, enable } => {
                if self.devices < 2 {
                    return;
                }
                if let Some(p) = self.pick_proc(proc) {
                    let (d, other) = (self.placement[p], 1 - self.placement[p]);
                    if *enable {
                        self.emit(p, Op::EnablePeer { peer: other });
                    } else {
                        self.emit(
                            p,
                            Op::CanAccessPeer {
                                device: d,
                                peer: other,
                            },
                        );
                    }
                }
            }
            Action::VmmCreate {
                proc,
                size,
                exportable,
            } => {
                if let Some(p) = self.pick_proc(proc) {
                    self.vmm_create(p, *size, *exportable);
                }
            }
            Action::VmmExport { vmm } => {
                if let Some(v) = self.pick_vmm(vmm) {
                    self.vmm_export(v);
                }
            }
            Action::VmmSendImport { fd, to } => {
                let Some(f) = self.pick_fd(fd) else {
                    return;
                };
                let Some(target) = self.pick_proc(to) else {
                    return;
                };
                let rec = self.fds[f].clone();
                let fd_name = if target == rec.proc {
                    rec.name
                } else {
                    let name = self.fresh("pfd");
                    self.bind(
                        rec.proc,
                        &name,
                        Op::SendFd {
                            fd: rec.name.to_string(),
                            to: target,
                            to_name: PROC_NAMES[target].to_string(),
                        },
                    );
                    self.fds.push(FdRec {
                        name,
                        proc: target,
                        size: rec.size,
                        closed: false,
                    });
                    name
                };
                let m = self.fresh("m");
                self.bind(
                    target,
                    &m,
                    Op::VmmImport {
                        fd: fd_name.to_string(),
                    },
                );
                self.stats.vmm_imports += 1;
                self.vmms.push(VmmRec {
                    name: m,
                    proc: target,
                    size: rec.size,
                    released: false,
                });
            }
            Action::VmmPidfdImport { fd, to } => {
                let Some(f) = self.pick_fd(fd) else {
                    return;
                };
                let Some(target) = self.pick_proc(to) else {
                    return;
                };
                let rec = self.fds[f].clone();
                let name = self.fresh("gfd");
                self.bind(
                    target,
                    &name,
                    Op::PidfdGetfd {
                        owner: rec.proc,
                        owner_name: PROC_NAMES[rec.proc].to_string(),
                        fd: rec.name.to_string(),
                    },
                );
                self.fds.push(FdRec {
                    name,
                    proc: target,
                    size: rec.size,
                    closed: false,
                });
                let m = self.fresh("m");
                self.bind(
                    target,
                    &m,
                    Op::VmmImport {
                        fd: name.to_string(),
                    },
                );
                self.stats.vmm_imports += 1;
                self.vmms.push(VmmRec {
                    name: m,
                    proc: target,
                    size: rec.size,
                    released: false,
                });
            }
            Action::VmmMap { vmm, access, unmap } => {
                let Some(v) = self.pick_vmm(vmm) else {
                    return;
                };
                let rec = self.vmms[v].clone();
                let va = self.fresh("va");
                self.bind(rec.proc, &va, Op::VmmReserve { size: rec.size });
                self.emit(
                    rec.proc,
                    Op::VmmMap {
                        va: name(&va),
                        size: rec.size,
                        handle: rec.name.to_string(),
                        offset: 0,
                    },
                );
                let grant = match access {
                    VmmAccess::ReadWrite => Some(ipc_harness::VmmAccess::ReadWrite),
                    VmmAccess::Read => Some(ipc_harness::VmmAccess::Read),
                    VmmAccess::NotGranted => None,
                };
                if let Some(access) = grant {
                    self.emit(
                        rec.proc,
                        Op::VmmSetAccess {
                            va: name(&va),
                            size: rec.size,
                            access,
                            device: 0,
                        },
                    );
                }
                self.vas.push(VaRec {
                    name: va,
                    proc: rec.proc,
                    size: rec.size,
                    mapped: !*unmap,
                });
                if *unmap {
                    let ptr = || Ref::Name(va.to_string());
                    self.emit(
                        rec.proc,
                        Op::Fill {
                            ptr: ptr(),
                            value: 0x5a,
                            at: None,
                            len: Some(64),
                            resolved_len: 64,
                        },
                    );
                    self.emit(
                        rec.proc,
                        Op::VmmUnmap {
                            va: ptr(),
                            size: rec.size,
                        },
                    );
                    self.emit(
                        rec.proc,
                        Op::Read {
                            ptr: ptr(),
                            offset: 0,
                            len: 64,
                        },
                    );
                }
            }
            Action::VmmTouch { va, write, value } => {
                let live = self.vas.iter().filter(|v| v.mapped && !self.exited[v.proc]);
                let Some(&VaRec {
                    name: va_name,
                    proc,
                    ..
                }) = pick_among(live, va)
                else {
                    return;
                };
                let ptr = name(&va_name);
                if *write {
                    self.emit(
                        proc,
                        Op::Fill {
                            ptr,
                            value: *value,
                            at: None,
                            len: Some(64),
                            resolved_len: 64,
                        },
                    );
                } else {
                    self.emit(
                        proc,
                        Op::Read {
                            ptr,
                            offset: 0,
                            len: 64,
                        },
                    );
                }
            }
            Action::VmmUnmap { va, touch_after } => {
                let live = (0..self.vas.len())
                    .filter(|&v| self.vas[v].mapped && !self.exited[self.vas[v].proc]);
                let Some(v) = pick_among(live, va) else {
                    return;
                };
                let rec = self.vas[v].clone();
                self.emit(
                    rec.proc,
                    Op::VmmUnmap {
                        va: Ref::Name(rec.name.to_string()),
                        size: rec.size,
                    },
                );
                self.vas[v].mapped = false;
                if *touch_after {
                    self.emit(
                        rec.proc,
                        Op::Read {
                            ptr: Ref::Name(rec.name.to_string()),
                            offset: 0,
                            len: 64,
                        },
                    );
                }
            }
            Action::VmmRelease { vmm } => {
                if let Some(v) = self.pick_vmm(vmm) {
                    let rec = self.vmms[v].clone();
                    self.emit(
                        rec.proc,
                        Op::VmmRelease {
                            handle: rec.name.to_string(),
                        },
                    );
                    self.vmms[v].released = true;
                }
            }
            Action::FdClose { fd } => {
                if let Some(f) = self.pick_fd(fd) {
                    let rec = self.fds[f].clone();
                    self.emit(
                        rec.proc,
                        Op::FdClose {
                            fd: rec.name.to_string(),
                        },
                    );
                    self.fds[f].closed = true;
                }
            }
            Action::EventDestroy { event } => {
                if let Some(e) = self.pick_event(event) {
                    let rec = self.events[e].clone();
                    self.emit(
                        rec.proc,
                        Op::EventDestroy {
                            event: rec.name.to_string(),
                        },
                    );
                    self.events[e].destroyed = true;
                }
            }
            Action::FreeTwice { alloc } => {
                let Some(a) = self.pick_alloc(alloc) else {
                    return;
                };
                let rec = self.allocs[a].clone();
                let free = Op::Free {
                    kind: free_kind(rec.kind),
                    ptr: Ref::Name(rec.name.to_string()),
                };
                self.emit(rec.proc, free.clone());
                self.emit(rec.proc, free);
                self.allocs[a].freed = true;
                self.stats.double_frees += 1;
            }
            Action::CloseTwice { open } => match self.live_open(open) {
                Some(o) => {
                    let proc = self.opens[o].proc;
                    let close = Op::IpcClose {
                        ptr: Ref::Name(self.opens[o].name.to_string()),
                    };
                    self.emit(proc, close.clone());
                    self.emit(proc, close);
                    self.stats.closes += 1;
                    self.stats.double_closes += 1;
                }
                None => self.lower(&Action::SendOpen {
                    handle: *open,
                    to: *open,
                    flags: 1,
                }),
            },
            Action::ForeignClose { open, by } => match self.live_open(open) {
                Some(o) => {
                    let proc = self.opens[o].proc;
                    if let Some(q) = self.pick_other_proc(proc, by) {
                        self.emit(
                            q,
                            Op::IpcClose {
                                ptr: Ref::Name(self.opens[o].name.to_string()),
                            },
                        );
                        self.stats.foreign_closes += 1;
                    }
                }
                None => self.lower(&Action::SendOpen {
                    handle: *open,
                    to: *open,
                    flags: 1,
                }),
            },
            Action::ExporterCrash { proc, to } => {
                let Some(w) = self.pick_proc(proc) else {
                    return;
                };
                let Some(r) = self.pick_other_proc(w, to) else {
                    return;
                };
                let e = self.event_create(w, EventFlags::Ipc);
                let Some(h) = self.event_get(e, false) else {
                    return;
                };
                self.send(w, &h, r);
                self.event_holdings[r].push(h);
                self.event_get(e, true);
                let x = self.fresh("e");
                self.bind(
                    r,
                    &x,
                    Op::IpcOpenEvent {
                        handle: h.to_string(),
                        out: OutArg::Valid,
                    },
                );
                self.stats.event_opens += 1;
                self.stats.opens_after_exporter_crash += 1;
                self.events.push(EventRec {
                    name: x,
                    proc: r,
                    destroyed: false,
                });
            }
            Action::SlowFill { alloc, value, long } => {
                if let Some(a) = self.kernel_alloc(alloc) {
                    let rec = self.allocs[a].clone();
                    self.slow_fill(rec.proc, &rec.name, rec.size, *value, *long);
                }
            }
            Action::KernelHandoff {
                pair,
                value,
                order,
                query,
                long,
            } => self.kernel_handoff(pair, *value, *order, *query, *long),
            Action::PoolShare { .. } => self.pool_share(action),
            Action::StreamHandoff {
                pair,
                value,
                order,
                long,
            } => self.stream_handoff(pair, *value, *order, *long),
            Action::StreamBug { pair, bug } => self.stream_bug(pair, *bug),
            Action::DeviceCopy { open, peer } => self.device_copy(open, *peer),
            Action::PatternKernel {
                alloc,
                write,
                repeat,
            } => self.pattern_kernel(alloc, write, *repeat),
            Action::ForkChild { proc } => self.fork_child(proc),
        }
    }

    /// See [`Action::StreamHandoff`]. Streams belong to the current
    /// context: a reader that made a second context is left out.
    fn stream_handoff(&mut self, pair: &Index, value: u8, order: StreamOrder, long: bool) {
        let Some((o, writer, a)) = self.handoff_pair(pair) else {
            return;
        };
        let reader = self.opens[o].proc;
        if self.second_ctx[reader] {
            return;
        }
        let Some((e, x)) = self.handoff_events(writer, reader) else {
            return;
        };
        let alloc = self.allocs[a].clone();
        let s = self.fresh("s");
        self.bind(
            writer,
            &s,
            Op::StreamCreate {
                flags: stream_flags::NON_BLOCKING,
            },
        );
        let len = alloc.size.min(4096);
        self.emit(
            writer,
            Op::SlowFill {
                ptr: name(&alloc.name),
                value,
                micros: slow_micros(long),
                at: None,
                len: Some(len),
                resolved_len: len,
                stream: Some(s.to_string()),
            },
        );
        self.stats.slow_fills += 1;
        self.emit(
            writer,
            Op::EventRecord {
                event: e,
                stream: Some(s.to_string()),
            },
        );
        let t = self.fresh("s");
        self.bind(
            reader,
            &t,
            Op::StreamCreate {
                flags: stream_flags::NON_BLOCKING,
            },
        );
        let other = match order {
            StreamOrder::Waited => {
                self.emit(
                    reader,
                    Op::StreamWait {
                        event: x,
                        stream: Some(t.to_string()),
                    },
                );
                None
            }
            StreamOrder::OtherStream => {
                let u = self.fresh("s");
                self.bind(
                    reader,
                    &u,
                    Op::StreamCreate {
                        flags: stream_flags::DEFAULT,
                    },
                );
                self.emit(
                    reader,
                    Op::StreamWait {
                        event: x,
                        stream: Some(u.to_string()),
                    },
                );
                Some(u)
            }
            StreamOrder::NoWait => None,
        };
        if order == StreamOrder::Waited {
            self.stats.ordered_kernel_reads += 1;
        } else {
            self.stats.unordered_kernel_reads += 1;
        }
        let local = self.malloc(reader, KindSel::Device, SizeClass::Page, 0);
        let b = self.allocs[local].name;
        let mapping = self.opens[o].name;
        self.emit(
            reader,
            Op::Copy {
                dst: name(&b),
                src: name(&mapping),
                len: 16,
                stream: Some(t.to_string()),
            },
        );
        self.emit(
            reader,
            Op::StreamSync {
                stream: t.to_string(),
            },
        );
        self.emit(reader, read16(&b));
        self.emit(
            reader,
            Op::StreamDestroy {
                stream: t.to_string(),
            },
        );
        if let Some(u) = other {
            self.emit(
                reader,
                Op::StreamDestroy {
                    stream: u.to_string(),
                },
            );
        }
        self.emit(
            writer,
            Op::StreamSync {
                stream: s.to_string(),
            },
        );
        self.emit(
            writer,
            Op::StreamDestroy {
                stream: s.to_string(),
            },
        );
    }

    /// See [`Action::DeviceCopy`].
    fn device_copy(&mut self, open: &Index, peer: bool) {
        let live: Vec<usize> = (0..self.opens.len())
            .filter(|&o| !self.exited[self.opens[o].proc])
            .collect();
        // A peer copy prefers a mapping of the other device's memory.
        let across: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&o| {
                let rec = &self.opens[o];
                self.exporter_of(rec.handle)
                    .is_some_and(|e| self.placement[e] != self.placement[rec.proc])
            })
            .collect();
        let pool = if peer && !across.is_empty() {
            across
        } else {
            live
        };
        if pool.is_empty() {
            return;
        }
        let o = pool[open.index(pool.len())];
        let rec = self.opens[o].clone();
        let local = self.malloc(rec.proc, KindSel::Device, SizeClass::Page, 0);
        let b = self.allocs[local].name;
        let exporter_device = self.exporter_of(rec.handle).map(|e| self.placement[e]);
        let own_device = self.placement[rec.proc];
        let copy = match exporter_device {
            Some(d) if peer && d != own_device => Op::CopyPeer {
                dst: name(&b),
                dst_device: own_device,
                src: Ref::Name(rec.name.to_string()),
                src_device: d,
                len: 16,
            },
            _ => Op::Copy {
                dst: name(&b),
                src: Ref::Name(rec.name.to_string()),
                len: 16,
                stream: None,
            },
        };
        self.emit(rec.proc, copy);
        self.emit(rec.proc, read16(&b));
    }

    /// A live device allocation whose process may run a generated kernel
    /// (it made no second context).
    fn kernel_alloc(&self, i: &Index) -> Option<usize> {
        let live: Vec<usize> = (0..self.allocs.len())
            .filter(|&a| {
                let r = &self.allocs[a];
                !r.freed
                    && !self.exited[r.proc]
                    && r.kind == KindSel::Device
                    && !self.second_ctx[r.proc]
            })
            .collect();
        (!live.is_empty()).then(|| live[i.index(live.len())])
    }

    fn slow_fill(&mut self, proc: usize, ptr: &str, size: u64, value: u8, long: bool) {
        let len = size.min(4096);
        self.emit(
            proc,
            Op::SlowFill {
                ptr: name(ptr),
                value,
                micros: slow_micros(long),
                at: None,
                len: Some(len),
                resolved_len: len,
                stream: None,
            },
        );
        self.stats.slow_fills += 1;
    }

    /// An open in a live process of memory a live other process exported
    /// and may run kernels on: (open, exporter, allocation).
    fn handoff_pair(&self, i: &Index) -> Option<(usize, usize, usize)> {
        let pairs: Vec<(usize, usize, usize)> = (0..self.opens.len())
            .filter(|&o| !self.exited[self.opens[o].proc])
            .filter_map(|o| {
                let rec = &self.opens[o];
                let a = self.holdings[rec.proc]
                    .iter()
                    .find(|(h, _)| *h == rec.handle)
                    .and_then(|(_, a)| *a)?;
                let alloc = &self.allocs[a];
                let usable = !alloc.freed
                    && alloc.proc != rec.proc
                    && !self.exited[alloc.proc]
                    && alloc.kind == KindSel::Device
                    && !self.second_ctx[alloc.proc];
                usable.then_some((o, alloc.proc, a))
            })
            .collect();
        (!pairs.is_empty()).then(|| pairs[i.index(pairs.len())])
    }

    /// The writer's event and the reader's import of it, made now unless
    /// an earlier handoff between them left a live pair.
    fn handoff_events(&mut self, writer: usize, reader: usize) -> Option<(String, String)> {
        let live = self.handoff_events.iter().find(|&&(w, r, e, x)| {
            w == writer && r == reader && !self.events[e].destroyed && !self.events[x].destroyed
        });
        if let Some(&(_, _, e, x)) = live {
            return Some((
                self.events[e].name.to_string(),
                self.events[x].name.to_string(),
            ));
        }
        let e = self.event_create(writer, EventFlags::Ipc);
        let h = self.event_get(e, false)?;
        self.send(writer, &h, reader);
        self.event_holdings[reader].push(h);
        let x = self.fresh("e");
        self.bind(
            reader,
            &x,
            Op::IpcOpenEvent {
                handle: h.to_string(),
                out: OutArg::Valid,
            },
        );
        self.stats.event_opens += 1;
        self.events.push(EventRec {
            name: x,
            proc: reader,
            destroyed: false,
        });
        let xi = self.events.len() - 1;
        self.handoff_events.push((writer, reader, e, xi));
        Some((
            self.events[e].name.to_string(),
            self.events[xi].name.to_string(),
        ))
    }

    fn kernel_handoff(
        &mut self,
        pair: &Index,
        value: u8,
        order: HandoffOrder,
        query: bool,
        long: bool,
    ) {
        let Some((o, writer, a)) = self.handoff_pair(pair) else {
            // Nothing shared yet: share something.
            self.lower(&Action::SendOpen {
                handle: *pair,
                to: *pair,
                flags: 1,
            });
            return;
        };
        let reader = self.opens[o].proc;
        let Some((e, x)) = self.handoff_events(writer, reader) else {
            return;
        };
        let alloc = self.allocs[a].clone();
        let record = Op::EventRecord {
            event: e,
            stream: None,
        };
        if order == HandoffOrder::RecordedBefore {
            self.emit(writer, record.clone());
        }
        self.slow_fill(writer, &alloc.name, alloc.size, value, long);
        if order != HandoffOrder::RecordedBefore {
            self.emit(writer, record);
        }
        if query {
            self.emit(reader, Op::EventQuery { event: x.clone() });
            self.stats.event_queries += 1;
        }
        match order {
            HandoffOrder::Synced | HandoffOrder::RecordedBefore => {
                self.emit(reader, Op::EventSync { event: x });
            }
            HandoffOrder::StreamWaited => self.emit(
                reader,
                Op::StreamWait {
                    event: x,
                    stream: None,
                },
            ),
            HandoffOrder::NoWait => {}
        }
        if matches!(order, HandoffOrder::Synced | HandoffOrder::StreamWaited) {
            self.stats.ordered_kernel_reads += 1;
        } else {
            self.stats.unordered_kernel_reads += 1;
        }
        let mapping = self.opens[o].name;
        self.emit(reader, read16(&mapping));
    }

    fn vmm_create(&mut self, p: usize, size: VmmSize, exportable: bool) -> usize {
        let name = self.fresh("m");
        let types = if exportable {
            HandleTypes::POSIX_FD
        } else {
            HandleTypes::NONE
        };
        self.bind(
            p,
            &name,
            Op::VmmCreate {
                size: size.bytes(),
                types,
                device: 0,
            },
        );
        self.vmms.push(VmmRec {
            name,
            proc: p,
            size: size.bytes(),
            released: false,
        });
        self.vmms.len() - 1
    }

    /// A live VMM handle of a live process, or a new exportable one.
    fn pick_vmm(&mut self, i: &Index) -> Option<usize> {
        let live = (0..self.vmms.len())
            .filter(|&v| !self.vmms[v].released && !self.exited[self.vmms[v].proc]);
        if let Some(v) = pick_among(live, i) {
            return Some(v);
        }
        let p = self.pick_proc(i)?;
        Some(self.vmm_create(p, VmmSize::Granule, true))
    }

    fn vmm_export(&mut self, v: usize) -> usize {
        let rec = self.vmms[v].clone();
        let fd = self.fresh("fd");
        self.bind(
            rec.proc,
            &fd,
            Op::VmmExport {
                handle: rec.name.to_string(),
                ty: ShareableHandleType::PosixFd,
            },
        );
        self.fds.push(FdRec {
            name: fd,
            proc: rec.proc,
            size: rec.size,
            closed: false,
        });
        self.fds.len() - 1
    }

    /// An open descriptor of a live process, or one exported now.
    fn pick_fd(&mut self, i: &Index) -> Option<usize> {
        let live =
            (0..self.fds.len()).filter(|&f| !self.fds[f].closed && !self.exited[self.fds[f].proc]);
        if let Some(f) = pick_among(live, i) {
            return Some(f);
        }
        let v = self.pick_vmm(i)?;
        Some(self.vmm_export(v))
    }

    fn event_create(&mut self, p: usize, flags: EventFlags) -> usize {
        let name = self.fresh("e");
        let flags = match flags {
            EventFlags::Ipc => event_flags::INTERPROCESS | event_flags::DISABLE_TIMING,
            EventFlags::InterprocessTiming => event_flags::INTERPROCESS,
            EventFlags::Default => event_flags::DEFAULT,
        };
        self.bind(p, &name, Op::EventCreate { flags });
        self.events.push(EventRec {
            name,
            proc: p,
            destroyed: false,
        });
        self.events.len() - 1
    }

    /// A live event binding of a live process, or a new interprocess one.
    fn pick_event(&mut self, i: &Index) -> Option<usize> {
        let live = (0..self.events.len())
            .filter(|&e| !self.events[e].destroyed && !self.exited[self.events[e].proc]);
        if let Some(e) = pick_among(live, i) {
            return Some(e);
        }
        let p = self.pick_proc(i)?;
        Some(self.event_create(p, EventFlags::Ipc))
    }

    fn event_get(&mut self, e: usize, null_out: bool) -> Option<Name> {
        let rec = self.events[e].clone();
        if null_out {
            self.emit(
                rec.proc,
                Op::IpcGetEvent {
                    event: rec.name.to_string(),
                    out: OutArg::Null,
                },
            );
            return None;
        }
        let h = self.fresh("eh");
        self.bind(
            rec.proc,
            &h,
            Op::IpcGetEvent {
                event: rec.name.to_string(),
                out: OutArg::Valid,
            },
        );
        self.event_holdings[rec.proc].push(h);
        Some(h)
    }

    /// An event handle held by a live process, or one made now.
    fn pick_event_holding(&mut self, i: &Index) -> Option<(usize, Name)> {
        let all = (0..self.nprocs)
            .filter(|&p| !self.exited[p])
            .flat_map(|p| self.event_holdings[p].iter().map(move |&h| (p, h)));
        if let Some(held) = pick_among(all, i) {
            return Some(held);
        }
        let e = self.pick_event(i)?;
        let h = self.event_get(e, false)?;
        Some((self.events[e].proc, h))
    }

    /// Name the primary context of `p` once (before its first ctx_create),
    /// so the program can switch back to it.
    fn name_primary(&mut self, p: usize) {
        if self.primary[p].is_none() {
            let c = self.fresh("c");
            let device = self.placement[p];
            self.bind(p, &c, Op::PrimaryCtx { device });
            self.ctxs.push(CtxRec { name: c, proc: p });
            self.primary[p] = Some(c);
        }
    }

    fn finish(self) -> Lowered {
        let mut stats = self.stats;
        stats.steps = self.steps.len();
        let processes = PROC_NAMES
            .iter()
            .zip(&self.placement)
            .map(|(name, &device)| ProcessSpec {
                name: name.to_string(),
                device,
                visible_devices: None,
                pid_namespace: Default::default(),
            })
            .collect();
        Lowered {
            scenario: Scenario {
                path: PathBuf::from(SCENARIO_PATH),
                meta: Metadata::default(),
                devices: self.devices,
                topology: None,
                semantics: Vec::new(),
                processes,
                steps: self.steps,
                hazard_expectations: Vec::new(),
            },
            stats,
        }
    }
}

/// The free call of an allocation kind.
fn free_kind(kind: KindSel) -> FreeKind {
    match kind {
        KindSel::Device | KindSel::Managed => FreeKind::Device,
        KindSel::Host => FreeKind::Host,
        KindSel::Async => FreeKind::StreamOrdered,
    }
}

/// `read P 0 16`.
fn read16(ptr: &str) -> Op {
    Op::Read {
        ptr: name(ptr),
        offset: 0,
        len: 16,
    }
}

/// Clamp `[at, at + len)` into `[0, size)` (non-empty).
fn within(size: u64, at: u64, len: u64) -> (u64, u64) {
    let size = size.max(1);
    let at = at % size;
    let len = len.clamp(1, size - at);
    (at, len)
}

/// Lower `program` to a scenario, stopping once `max_steps` steps are
/// written (an action's steps are kept whole).
pub fn lower(program: &Program, max_steps: usize) -> Lowered {
    let mut l = Lowering::new(program.processes, program.devices, &program.placement);
    for a in &program.actions {
        if l.steps.len() >= max_steps {
            break;
        }
        l.lower(a);
    }
    l.finish()
}

#[cfg(test)]
mod pick_tests {
    use super::pick_among;
    use proptest::prelude::*;
    use proptest::sample::Index;

    proptest! {
        /// `pick_among` picks what indexing the collected items picked.
        #[test]
        fn picks_as_indexing_a_collected_vec(
            keep in proptest::collection::vec(any::<bool>(), 0..12),
            i in any::<Index>(),
        ) {
            let items = || (0..keep.len()).filter(|&k| keep[k]);
            let collected: Vec<usize> = items().collect();
            let want = (!collected.is_empty()).then(|| collected[i.index(collected.len())]);
            prop_assert_eq!(pick_among(items(), &i), want);
        }
    }
}

#[cfg(test)]
mod name_tests {
    use super::Name;

    /// A name is the text `format!("{prefix}{serial}")` gives, and two
    /// names are equal when their texts are.
    #[test]
    fn a_name_is_its_prefix_and_serial() {
        let serials = (0..1200).chain([9_999, 10_000, 123_456_789, usize::MAX]);
        let prefixes = ["", "m", "eh", "ppf"];
        let mut made = Vec::new();
        for serial in serials {
            for prefix in prefixes {
                let name = Name::new(prefix, serial);
                let text = format!("{prefix}{serial}");
                assert_eq!(&*name, text);
                assert_eq!(format!("{name:?}"), format!("{text:?}"));
                made.push((name, text));
            }
        }
        for (a, ta) in made.iter().step_by(7) {
            for (b, tb) in made.iter().step_by(5) {
                assert_eq!(a == b, ta == tb, "{ta} {tb}");
            }
        }
    }
}
