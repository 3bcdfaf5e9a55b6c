//! The simulated machine's state: processes, their contexts and address
//! spaces, and the physical blocks that allocations and IPC mappings share.
//!
//! Everything is in ordered maps so that iteration, and therefore every
//! answer and every hazard, is deterministic. The operations live in the
//! domain modules (`contexts`, `memory`, `ipc`); this module holds the types
//! and the plumbing they share (address lookup, access checks, release).

use crate::addr_map::AddrMap;
use crate::hazards::HazardLog;
use crate::seed::hash;
use crate::semantics::{
    ExporterCrashMemory, ExporterExit, MemcpyBounds, Semantics, VaReuse, VaRewind,
};
use crate::small_map::{SmallMap, VecMap};
use crate::store::Store;
use ipc_harness::{Dialect, HazardKind, MemKind, ProcessIndex};
use std::collections::BTreeMap;

pub(crate) const KIB: u64 = 1 << 10;
pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const GIB: u64 = 1 << 30;
pub(crate) const TIB: u64 = 1 << 40;

/// Granularity of device blocks (and of the sub-allocator's shared blocks).
pub(crate) const BLOCK: u64 = 2 * MIB;
/// Alignment of packed sub-allocations.
pub(crate) const SUBALLOC_ALIGN: u64 = 512;
/// Physical memory per device (H100 80 GB), so absurd sizes fail as OutOfMemory.
pub(crate) const DEVICE_MEMORY: u64 = 80 * GIB;
/// Where process address spaces start; each process gets its own window.
const VA_ROOT: u64 = 0x7f00_0000_0000;
/// One process's window; the seed shifts its base by whole GiB inside the
/// first half, so at least 512 GiB stay usable.
const VA_WINDOW: u64 = TIB;
/// Unmapped gap after every reservation, so running off the end of a block
/// always lands on unmapped VA instead of a neighbouring block.
const VA_GUARD: u64 = BLOCK;
/// Largest single read the simulator materialises on the host.
pub(crate) const MAX_READ: u64 = 256 * MIB;

pub(crate) use crate::ids::{BlockId, CtxKey};

/// The arena of released VA a `ctx_destroy` retired: never current.
pub(crate) const RETIRED_ARENA: u64 = u64::MAX;

/// The arena of a claim that ended (its context's destruction reopened the
/// arena it claimed): no VA is of it.
pub(crate) const ENDED_CLAIM: u64 = u64::MAX - 1;

/// Who may get released VA back. `ctx` is the context the VA was used in (a
/// stale kernel read sees zeros only there); under `va_reuse=top-down` reuse
/// goes by arena and class, under `lowest-fit` by context and class. Managed
/// memory never reuses a device mapping's VA, nor does stream-ordered memory
/// (mem.kinds.stream-ordered-own-va).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VaPool {
    pub ctx: CtxKey,
    pub class: VaClass,
}

/// Kinds of memory whose VA comes from separate pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VaClass {
    /// Device and pinned host allocations and IPC mappings.
    Device,
    Managed,
    /// Memory pools: allocations from a pool the program created, and
    /// pointers imported from another process's pool.
    StreamOrdered,
    /// `cudaMallocAsync`'s default pool. It keeps the VA of what is freed
    /// into it: only its own allocations reuse that VA, a created pool's
    /// allocation or an imported pool pointer gets other VA
    /// (pool.va.default-pool-keeps-freed-va).
    DefaultPool,
    /// VMM reservations: they share released VA with `Device`
    /// (`VaClass::device_heap`).
    Vmm,
    /// VMM reservations under `vmm_reserve_va=own-pool`: VA of their own.
    VmmOwn,
}

impl VaClass {
    /// Device, pinned host, IPC and VMM VA come from one heap, whose fresh
    /// end a release can rewind (`FreeVa::frontier`); managed and
    /// stream-ordered memory from VA of their own.
    pub(crate) fn device_heap(self) -> bool {
        matches!(self, VaClass::Device | VaClass::Vmm)
    }

    /// VA of a memory pool, the default one or another: it is the device's,
    /// not a context's, and the pool keeps it after a free.
    pub(crate) fn pooled(self) -> bool {
        matches!(self, VaClass::StreamOrdered | VaClass::DefaultPool)
    }

    /// Whether a reservation of this class may take VA released by one of
    /// class `released`. Device, pinned host and IPC VA and VMM
    /// reservations reuse each other's released ranges: one heap, where a
    /// `vmm_reserve` takes a closed mapping's address
    /// (vmm.reserve.closed-mapping-va,
    /// vmm.map.reserve-reuses-closed-mapping-va). The default pool also
    /// takes VA other pools released (a destroyed pool's, a freed imported
    /// pointer's); they never take the VA it keeps
    /// (pool.va.default-pool-keeps-freed-va).
    pub(crate) fn reuses(self, released: VaClass) -> bool {
        self == released
            || (self.device_heap() && released.device_heap())
            || (self == VaClass::DefaultPool && released == VaClass::StreamOrdered)
    }

    pub(crate) fn of(kind: MemKind) -> VaClass {
        match kind {
            MemKind::Managed => VaClass::Managed,
            MemKind::StreamOrdered => VaClass::StreamOrdered,
            MemKind::Device | MemKind::PinnedHost => VaClass::Device,
        }
    }
}

/// A process's fresh reservations of the device heap (`va_rewind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FreshVa {
    /// The base of the newest fresh reservation while its release may
    /// still rewind the next fresh address (cleared by a rewind: once).
    pub rewinds: Option<u64>,
    /// The base of the newest fresh reservation.
    pub newest: Option<u64>,
    /// The arena of the newest fresh reservation, and how many were made
    /// in it.
    pub arena: u64,
    pub in_arena: u64,
    /// Whether the newest fresh reservation is an IPC mapping
    /// (`Process::note_fresh_import`): released, its range is not carved
    /// for a smaller request (mem.lifetime.va-closed-newest-mapping-not-carved).
    pub newest_import: bool,
}

/// Where `Process::reserve_va` puts a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Released VA: (the free span's base, its length, the base handed out).
    Reuse(u64, u64, u64),
    /// Fresh VA at this base.
    Fresh(u64),
}

/// A released VA span (`Process::free_va`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FreeVa {
    /// Its length.
    pub span: u64,
    /// The context and class it was used in.
    pub pool: VaPool,
    /// The arena it was reserved in (`va_reuse=top-down`).
    pub arena: u64,
    /// `Process::va_releases` after its release (`stale_kernel_read`).
    pub released: u64,
    /// The newest fresh range, released with nothing reserved fresh since:
    /// the next fresh reservation, of any size, starts at its base.
    pub frontier: bool,
    /// The context current when it was released.
    pub released_in: Option<CtxKey>,
}

/// Why a call produced no result: an API error, or a harness-level refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fail {
    Api(ipc_harness::ErrorKind),
    Harness(String),
    /// The real driver kills the process here (measured); the simulated
    /// process dies with this signal.
    Crash {
        signal: i32,
        detail: String,
    },
}

impl From<ipc_harness::ErrorKind> for Fail {
    fn from(k: ipc_harness::ErrorKind) -> Self {
        Fail::Api(k)
    }
}

pub(crate) type SimResult<T> = Result<T, Fail>;

#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// Physical device.
    pub device: u32,
    pub primary: bool,
    pub alive: bool,
    /// `Process::va_releases` when the context was made: VA released later
    /// than that is released under it (`stale_kernel_read`).
    pub born: u64,
    /// `Process::ctx_serial` at creation: the order contexts were made in
    /// (`stale_memset`).
    pub serial: u64,
    /// The arena that was current when `ctx_create` made this context and
    /// started a new one (`None` for primary contexts): free VA of that
    /// arena is what the creation claims (`reclaimed_export_error`).
    pub claimed_arena: Option<u64>,
    /// The arena its creation started (0 for primary contexts).
    pub arena: u64,
    /// Where in `Process::va_claims` its creation's claim is.
    pub claim: Option<usize>,
}

#[derive(Debug, Clone)]
pub(crate) struct Allocation {
    pub size: u64,
    pub kind: MemKind,
    pub ctx: CtxKey,
    /// Physical device.
    pub device: u32,
    pub block: BlockId,
    /// Offset of the allocation inside its block.
    pub offset: u64,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID` (`attributes.rs`).
    pub buffer_id: u64,
}

/// An importer's mapping of an exporter's block.
#[derive(Debug, Clone)]
pub(crate) struct Mapping {
    pub ctx: CtxKey,
    /// Physical device of the importing context.
    pub device: u32,
    pub exporter: ProcessIndex,
    /// The handle process fields (bytes 8..16) of its live opens, oldest
    /// first: the one-context-per-exporter rule refuses another context a
    /// handle whose field is among them, and a close takes the oldest
    /// (on 2 x H200 and an H100: explore seed 30112026 case 3584, seed 5001
    /// case 1127).
    pub open_tags: std::collections::VecDeque<u64>,
    /// The handle bytes opened into this mapping (a damaged copy of one is
    /// judged against it).
    pub opened: Vec<ipc_harness::IpcMemHandle>,
    /// Allocations opened through this mapping, by offset in block.
    /// Several when handles of neighbouring sub-allocations share one block.
    pub exports: SmallMap<OpenedExport>,
    /// Pointers `ipc_open` returned into this mapping, with their open counts.
    pub opens: SmallMap,
    /// Offsets (in block) of opened allocations whose last open pointer was
    /// closed while the mapping lives on for a neighbour: access is still
    /// possible, and is the access-after-close hazard.
    pub closed: SmallMap<()>,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID` of the mapping (`attributes.rs`).
    pub buffer_id: u64,
}

impl Mapping {
    /// The opened allocation containing `offset` (in block), if any.
    pub(crate) fn export_at(&self, offset: u64) -> Option<(u64, u64)> {
        self.exports
            .last_at_or_before(offset)
            .map(|(o, e)| (o, e.size))
            .filter(|&(o, size)| offset - o < size)
    }
}

/// An allocation opened through a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenedExport {
    pub size: u64,
    /// The generation of the slot that the last open of it reached
    /// (`World::slot_generation`); `None` for a pool pointer's import.
    pub generation: Option<u64>,
}

/// A mapped VA range in a process: its own block, or an IPC mapping.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub len: u64,
    pub block: BlockId,
    /// Boxed: regions sit in a tree whose inserts and removes move them.
    pub import: Option<Box<Mapping>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    Freed,
    Closed,
}

/// VA that was valid once; remembered so stale pointers are named as such.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeadRange {
    pub end: u64,
    pub why: Gone,
}

#[derive(Debug)]
pub(crate) struct Process {
    pub name: String,
    /// Own ordinal -> physical device (`CUDA_VISIBLE_DEVICES`).
    pub visible: Vec<u32>,
    pub exited: bool,
    /// The sticky error that poisoned the process, if one did: every later
    /// call not spared reports it (mem.context.sticky-error-spared-calls).
    pub sticky: Option<ipc_harness::ErrorKind>,
    /// Device work faulted on a range unmapped under it and the process has
    /// not been told yet: the next call that waits for the device or
    /// launches work reports it and makes it sticky
    /// (vmm.fault.unmap-with-work-queued).
    pub unseen_fault: Option<ipc_harness::ErrorKind>,
    /// This process's driver calls so far.
    pub calls: u64,
    /// The device range `[start, end)` the process's call number `.0`
    /// queued work on (a fill or a kernel), for `cuMemUnmap` right after it
    /// (vmm.fault.unmap-with-work-queued).
    pub queued_work: Option<(u64, u64, u64)>,
    /// Most processes have one context, and one device: these are kept
    /// inline (`SmallMap`) until a second comes.
    pub contexts: SmallMap<Context>,
    /// Physical device -> its primary context.
    pub primary: SmallMap<CtxKey>,
    /// The top of the thread's context stack: the current context.
    pub current: Option<CtxKey>,
    /// The rest of the stack, oldest first: `cuCtxCreate` pushes,
    /// `cuCtxSetCurrent` replaces the top (`NULL` pops it), `cuCtxDestroy`
    /// of the current context pops it (`contexts.rs`).
    pub ctx_below: Vec<CtxKey>,
    pub ctx_serial: u64,
    /// Bytes a memset wrote into released VA (`stale_memset`), by address;
    /// kernels reading that VA see them (`stale_kernel_read`).
    pub stale_bytes: crate::store::Store,
    pub va_next: u64,
    /// Where the device heap ends and managed and stream-ordered VA start.
    pub va_side: u64,
    pub va_side_next: u64,
    pub va_end: u64,
    /// VA a memory pool holds past the free of what it backed: base ->
    /// the release `release_va` deferred, once it came (`pools.rs`).
    pub va_held: std::collections::BTreeMap<u64, Option<(u64, VaPool)>>,
    /// Live allocations by base address.
    pub allocs: AddrMap<Allocation>,
    /// Mapped VA by base address.
    pub regions: AddrMap<Region>,
    /// The IPC mappings (the regions with an import) by (importing context,
    /// block): their bases. One context may map one block several times
    /// (`reopen=new-mapping`). The rules of `ipc_open` ask which mappings a
    /// context has of a block; kept in step with `regions` by `add_import`
    /// and `remove_import`.
    pub imports_by_block: crate::index::MultiIndex<(CtxKey, BlockId)>,
    /// IPC mappings by the handles opened into them: (importing context,
    /// the handle's export object word) -> mapping bases. Every rule of
    /// `ipc_open` that looks for a mapping this context opened with a copy
    /// of a handle compares that word, so it looks up here instead of
    /// scanning every mapping (mem.scale.open-thousand-allocations).
    pub opened_by_object: crate::index::MultiIndex<(CtxKey, u32)>,
    pub dead: AddrMap<DeadRange>,
    /// Released VA spans (base -> `FreeVa`) that `va_reuse` hands out
    /// again.
    pub free_va: AddrMap<FreeVa>,
    /// How many times this process released VA (stamps `free_va` spans and
    /// contexts' `born`).
    pub va_releases: u64,
    /// How released VA is reused (`va_reuse`).
    pub va_reuse: VaReuse,
    /// Whether releasing the newest fresh range rewinds (`va_rewind`).
    pub va_rewind: VaRewind,
    /// The VA arena reservations come from now (`va_reuse=top-down`: every
    /// `ctx_create` starts a new one).
    pub arena: u64,
    /// The last arena id handed out.
    pub arena_seq: u64,
    /// Reserved VA base -> the arena it came from. Bases come upwards and
    /// go in the order they came or the reverse: an `AddrMap` takes both
    /// without hashing or growing a table.
    pub reserved: AddrMap<(u64, VaClass)>,
    /// Its fresh reservations of the device heap (`va_rewind`).
    pub fresh: FreshVa,
    /// (context, physical device) -> the shared block small allocations go to.
    pub packing: VecMap<(CtxKey, u32), BlockId>,
    /// Pointers `ipc_open` returned in this process (`double-close` versus
    /// `foreign-close`); asked for membership only. They come upwards, as
    /// the VA they are in does: an `AddrMap` takes them at its back.
    pub opened_ptrs: AddrMap<()>,
    /// Allocation bases this process freed and has not been given again
    /// (`double-free`); asked for membership only.
    pub freed_ptrs: crate::index::IdSet<u64>,
    /// Copies of open handles this process opened, as they were, with the
    /// context that opened them (`ipc.rs`, `open_copy_of_open_handle`).
    pub opened_copies: Vec<(CtxKey, ipc_harness::IpcMemHandle)>,
    /// The process crashed rather than exited: the runtime's teardown at exit
    /// did not run (`event_exporter_crash`).
    pub crashed: bool,
    /// Contexts and driver-internal memory made since VA was released, which
    /// claim the free VA of the arena current then for stale handles
    /// (`reclaimed_export_error`).
    pub va_claims: Vec<VaClaim>,
    /// Peer access a context has enabled: (context, peer's physical device).
    pub peer_enabled: VecMap<(CtxKey, u32)>,
    /// Peer connections this process holds, as (lower, higher) physical
    /// device pairs; released when the process exits.
    pub peer_links: VecMap<(u32, u32)>,
    /// The PID namespace it runs in (`namespaces.rs`).
    pub pid_namespace: ipc_harness::PidNamespace,
}

/// Driver-internal memory that claims the free VA of an arena
/// (`Process::va_claims`).
#[derive(Debug, Clone)]
pub(crate) struct VaClaim {
    /// `Process::va_releases` when it was made: VA released up to then.
    pub at: u64,
    /// The arena that was current.
    pub arena: u64,
    /// The VMM allocation (physical id, this process's handle) whose life
    /// the claim lasts (`vmm_release` ends it); `None`: another kind's rule.
    pub vmm: Option<(u64, u64)>,
    /// The spans of that arena that were free then, `(base, len)`: a freed
    /// export's address among them stays claimed after something else is
    /// placed there (`World::claimed_since_release`).
    pub spans: Vec<(u64, u64)>,
    /// The released span the memory is mapped over, if any: a kernel of
    /// the releasing context reads it (the shared event memory,
    /// `World::event_memory_span`); a large malloc's claim maps nothing.
    pub mapped: Option<(u64, u64)>,
    /// The base of the allocation or mapping whose life the claim lasts,
    /// for a large allocation's (`World::new_block`) and a pool pointer
    /// import's (`World::pool_import_ptr`); `None`: another kind's rule.
    pub allocation: Option<u64>,
    /// Free spans it did not claim because a large allocation's claim held
    /// them: they stay unclaimed by it after that allocation is freed.
    pub passed_over: Vec<(u64, u64)>,
    /// The spans it held until it ended (`VaClaim::end`): a created
    /// context's ended claim leaves a freed export there InvalidValue
    /// whatever is placed there later (`World::open_stale`).
    pub ended_spans: Vec<(u64, u64)>,
    /// What made it: the exporter's own copy of a freed export opens new
    /// memory where a context, a stream-ordered pool or a VMM allocation
    /// claimed the VA first, not where the other kinds did
    /// (`World::open_own_freed_export`).
    pub by: ClaimBy,
}

impl VaClaim {
    /// The memory behind the claim is gone: it holds nothing from now on,
    /// by span or by arena.
    pub(crate) fn end(&mut self) {
        self.arena = ENDED_CLAIM;
        self.ended_spans = std::mem::take(&mut self.spans);
        self.allocation = None;
    }

    /// Whether the claim took the VA at `addr`.
    pub(crate) fn holds(&self, addr: u64) -> bool {
        spans_contain(&self.spans, addr)
    }

    /// Whether the claim held the VA at `addr` and has ended.
    pub(crate) fn held_until_ended(&self, addr: u64) -> bool {
        spans_contain(&self.ended_spans, addr)
    }

    /// Whether the claim counts for `addr` in released span `f`, judged by
    /// arena (`World::free_va_claimed`): a new block beside VMM reservations
    /// claims only the VA they hold, never free VA (`World::new_block`); a
    /// VMM allocation only the span it took; no claim the VA it passed over
    /// (`Process::claim_free_va`).
    pub(crate) fn claims_free_va(&self, addr: u64, f: &FreeVa) -> bool {
        self.at >= f.released
            && self.arena == f.arena
            && self.by != ClaimBy::BlockBesideReservation
            && (self.by != ClaimBy::Vmm || self.holds(addr))
            && !spans_contain(&self.passed_over, addr)
    }
}

/// Whether one of `spans` (`(base, len)`) contains `addr`.
fn spans_contain(spans: &[(u64, u64)], addr: u64) -> bool {
    spans
        .iter()
        .any(|&(b, len)| addr >= b && addr < b.saturating_add(len))
}

/// The driver memory behind a [`VaClaim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimBy {
    /// `ctx_create`.
    Context,
    /// A device or pinned host allocation larger than one block.
    LargeAllocation,
    /// A stream-ordered allocation that needed a block of the pool's.
    StreamOrderedPool,
    /// The process's shared interprocess event memory.
    EventMemory,
    /// A VMM allocation handle.
    Vmm,
    /// A pointer imported from another process's pool, for as long as it
    /// is mapped (for the process's life once imported twice).
    PoolImport,
    /// A device allocation's new block, made while VMM reservations hold
    /// VA: it claims that VA (`World::new_block`).
    BlockBesideReservation,
}

/// An exported block nobody maps any more (`World::freed_exports`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FreedExport {
    pub owner: ProcessIndex,
    /// Where the owner mapped the block.
    pub base: u64,
    /// `Process::va_releases` after the owner released that VA (`None`:
    /// not released by a free, e.g. kept while a neighbour lived).
    pub released: Option<u64>,
    /// The owner's context current at the free, when it is a created
    /// context other than the block's own (`World::open_freed_export`).
    pub freed_in_other: Option<CtxKey>,
    /// `Block::owner_vmm` of the freed block: a freed export is judged by
    /// what its owner held when the block was made.
    pub owner_vmm: OwnerVmm,
}

/// The owner's VMM state when a block was made, which rules on its handle
/// read after the block is gone too (`Block::owner_vmm`,
/// `FreedExport::owner_vmm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OwnerVmm {
    /// VMM allocation handles the owner held, as the check-word rule counts
    /// them (`World::vmm_handles_for_check_word`).
    pub handles: usize,
    /// `VmmProc::mappings_removed` of the owner, where it held a VMM
    /// mapping then (`World::vmm_unmapped_since`).
    pub unmaps: Option<u64>,
}

/// Physical memory: what exporters allocate and importers map.
#[derive(Debug)]
pub(crate) struct Block {
    pub owner: ProcessIndex,
    pub device: u32,
    pub kind: MemKind,
    pub size: u64,
    /// Where the owner maps it.
    pub owner_base: u64,
    pub data: Store,
    /// Live allocations in the block: offset -> size.
    pub live: SmallMap,
    /// Next free offset for packed sub-allocations.
    pub cursor: u64,
    /// Live importer mappings.
    pub importers: u32,
    /// The owner still maps the block (some allocation in it is live).
    pub owner_mapped: bool,
    /// Existing importer mappings fault (exporter exited, `mappings-revoked`).
    pub revoked: bool,
    /// Allocation offsets the owner freed while importers mapped them.
    pub freed_while_mapped: SmallMap<()>,
    /// Allocation offsets the owner freed by an API call (whether mapped or
    /// not): an importer that opens one later, while a live neighbour keeps
    /// the block, reaches freed memory.
    pub freed: SmallMap<()>,
    /// Exported allocations: offset in block -> size (filled by `ipc_get`).
    pub exports: SmallMap,
    /// The driver object id handles of this block carry, once exported.
    pub export_id: Option<u32>,
    /// Offset -> generation of an allocation placed in a slot an earlier
    /// one used (internal: the handle's bytes stay the same,
    /// mem.suballoc.reused-slot-same-handle). A mapping opened in an older
    /// generation reaches another allocation's memory.
    pub generations: SmallMap<u64>,
    /// Offset -> the slot's generation when `ipc_get` last exported it: a
    /// handle an importer opens names that generation, since the bytes of
    /// a later one are only the same once that one is exported too.
    pub export_generations: SmallMap<u64>,
    /// Allocations placed in reused slots so far.
    pub reuses: u64,
    /// `Process::va_releases` after the owner released the block's VA.
    pub owner_released: Option<u64>,
    /// The owner's context the block was allocated in.
    pub owner_ctx: CtxKey,
    /// The owner's VMM state when the block was made.
    pub owner_vmm: OwnerVmm,
    /// An exported memory pool keeps the block after its allocation was
    /// freed, until the pool goes (`pools.rs`).
    pub pool_kept: bool,
    /// When the owner stopped mapping the block, it had a live context on
    /// the block's device other than the block's own
    /// (mem.lifetime.freed-while-mapped-exporter-context-made-before).
    pub owner_other_ctx_at_unmap: bool,
    /// The owner's current context when it stopped mapping the block.
    pub owner_unmapped_in: Option<CtxKey>,
    /// Placed in VA a large or VMM allocation's claim held: it does not
    /// take a freed export's address (`World::open_stale`,
    /// mem.lifetime.block-in-claimed-va-does-not-take-freed-export).
    pub placed_in_held_va: bool,
}

impl Block {
    /// Device memory no allocation of its owner holds (`owner_base` 0, not
    /// mapped by the owner): what a mapping of it reaches and nothing else.
    /// `importers` pins it (a VMM allocation's references hold one). An
    /// allocation's block starts from it too (`World::new_block`).
    pub(crate) fn unowned(owner: ProcessIndex, device: u32, size: u64, importers: u32) -> Self {
        Block {
            owner,
            device,
            kind: MemKind::Device,
            size,
            owner_base: 0,
            data: Store::default(),
            live: SmallMap::default(),
            cursor: size,
            importers,
            owner_mapped: false,
            revoked: false,
            freed_while_mapped: SmallMap::Empty,
            freed: SmallMap::Empty,
            exports: SmallMap::default(),
            export_id: None,
            generations: SmallMap::Empty,
            export_generations: SmallMap::Empty,
            reuses: 0,
            owner_released: None,
            owner_ctx: 0,
            owner_vmm: OwnerVmm::default(),
            pool_kept: false,
            owner_other_ctx_at_unmap: false,
            owner_unmapped_in: None,
            placed_in_held_va: false,
        }
    }
}

pub(crate) struct World {
    pub seed: u64,
    pub dialect: Dialect,
    /// Which device pairs can peer, and the per-device peer budget.
    pub topology: ipc_harness::Topology,
    pub sem: Semantics,
    pub procs: Vec<Process>,
    /// By id (`next_block` counts them).
    pub blocks: crate::dense::DenseMap<Block>,
    pub next_block: BlockId,
    /// Bytes of device memory in use, per physical device.
    pub device_used: Vec<u64>,
    pub handle_serial: u64,
    /// Export object ids (bytes 48..52 of a handle) -> block (looked up by
    /// id only).
    pub export_ids: crate::index::IdMap<u32, BlockId>,
    /// Export ids of blocks their (living) exporter freed and that nobody
    /// maps any more: the owner and where it mapped the block (a handle then
    /// reaches what the owner has at that address: `stale_handle`).
    pub freed_exports: BTreeMap<u32, FreedExport>,
    pub hazards: HazardLog,
    /// VMM allocations, handles, descriptors and mappings (`vmm.rs`).
    pub vmm: crate::vmm_state::VmmState,
    /// Events, IPC event handles and the simulated clock (`events`).
    pub events: crate::event_state::Events,
    /// Stream-ordered happens-before (`order.rs`).
    pub order: crate::order::Order,
    /// Memory pools, their exports and imported pointers (`pools.rs`).
    pub pools: crate::pool_state::PoolState,
    /// The last `CU_POINTER_ATTRIBUTE_BUFFER_ID` handed out (`attributes.rs`).
    pub last_buffer_id: u64,
    #[cfg(feature = "mutants")]
    pub mutant: Option<crate::mutants::Mutant>,
}

impl World {
    /// Whether the deliberate bug `m` is switched on (never without the
    /// `mutants` feature).
    #[allow(unused_variables)]
    pub(crate) fn mutant(&self, m: MutantId) -> bool {
        #[cfg(feature = "mutants")]
        {
            self.mutant == Some(m)
        }
        #[cfg(not(feature = "mutants"))]
        {
            false
        }
    }
}

#[cfg(feature = "mutants")]
pub(crate) use crate::mutants::Mutant as MutantId;
/// Without the feature no mutant exists; the hooks compile to `false`.
#[cfg(not(feature = "mutants"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)]
pub(crate) enum MutantId {
    CloseDoesNotDecrement,
    SecondContextAllowed,
    SubAllocationsNotShared,
    ExporterOpensOwnHandle,
    ImportWritesPrivate,
    NondeterministicKernelRead,
    UndocumentedCloseError,
    PanicOnDamagedOffset,
    LeakNotLogged,
    EventWithoutInterprocessFlag,
    ForeignCloseClosesOtherMapping,
    DoubleFreeSucceeds,
    KernelWritesUnordered,
    EventRefusedAfterExporterCrash,
    EventRecordIgnoresStream,
    StreamWaitDoesNothing,
    EventCompletesEarly,
    EventRecordAccumulates,
    LegacyIgnoresBlockingStreams,
    NonBlockingOrderedWithLegacy,
    OwnStreamsUnordered,
    VmmUnmapKeepsMapping,
    PerThreadNonBlocking,
    BufferIdsShared,
}

/// What kind of access a data operation is; they fail differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// memcpy / memset: validated by the driver, errors are InvalidValue.
    Copy,
    /// A kernel: sees whatever is mapped, faults with IllegalAddress.
    Kernel,
}

pub(crate) fn round_up(x: u64, to: u64) -> Option<u64> {
    x.checked_add(to - 1).map(|v| v / to * to)
}

/// Find the entry of `map` whose `[key, key + len)` contains `addr`.
pub(crate) fn containing<T>(
    map: &BTreeMap<u64, T>,
    addr: u64,
    len: impl Fn(&T) -> u64,
) -> Option<(u64, &T)> {
    // A map of one entry (a mapping's one export, a block's one segment)
    // answers without a range search, and so does an entry starting at
    // `addr` (most pointers are a base): a lookup is half a range search.
    let last = if map.len() == 1 {
        map.first_key_value().filter(|(&base, _)| base <= addr)
    } else if let Some(v) = map.get(&addr) {
        Some((&addr, v))
    } else {
        map.range(..=addr).next_back()
    };
    last.filter(|(&base, v)| addr - base < len(v))
        .map(|(&b, v)| (b, v))
}

impl Process {
    /// Released pointers in `[from, to)` reach live memory again (the VA was
    /// handed out anew): they are no longer stale.
    pub(crate) fn revive(&mut self, from: u64, to: u64) {
        let stale: Vec<u64> = self.dead.range(from..to).map(|(&d, _)| d).collect();
        for d in stale {
            self.dead.remove(&d);
        }
    }

    /// Whether the context that released `f`, when it is not the one the
    /// VA was reserved in, is still alive: `Some(alive)`; `None` when the
    /// VA was released in its own context.
    pub(crate) fn released_elsewhere(&self, f: &FreeVa) -> Option<bool> {
        let c = f.released_in.filter(|&c| c != f.pool.ctx)?;
        Some(self.contexts.get(&c).is_some_and(|c| c.alive))
    }

    pub(crate) fn new(name: String, visible: Vec<u32>, seed: u64, index: usize) -> Process {
        let jitter = hash(seed, &[0x5641, index as u64]) % (VA_WINDOW / GIB / 2);
        let base = VA_ROOT
            .saturating_add((index as u64).saturating_mul(VA_WINDOW))
            .saturating_add(jitter * GIB);
        Process {
            name,
            visible,
            exited: false,
            sticky: None,
            unseen_fault: None,
            calls: 0,
            queued_work: None,
            contexts: SmallMap::Empty,
            primary: SmallMap::Empty,
            current: None,
            ctx_below: Vec::new(),
            ctx_serial: 0,
            stale_bytes: crate::store::Store::default(),
            va_next: base,
            va_side: base.saturating_add(VA_WINDOW / 4),
            va_side_next: base.saturating_add(VA_WINDOW / 4),
            va_end: base.saturating_add(VA_WINDOW - VA_WINDOW / 2),
            va_held: std::collections::BTreeMap::new(),
            allocs: AddrMap::new(),
            regions: AddrMap::new(),
            imports_by_block: Default::default(),
            opened_by_object: Default::default(),
            dead: AddrMap::new(),
            free_va: AddrMap::new(),
            va_releases: 0,
            va_reuse: VaReuse::TopDown,
            va_rewind: VaRewind::Newest,
            arena: 0,
            arena_seq: 0,
            reserved: AddrMap::new(),
            fresh: FreshVa::default(),
            packing: VecMap::default(),
            opened_ptrs: AddrMap::new(),
            freed_ptrs: Default::default(),
            opened_copies: Vec::new(),
            crashed: false,
            va_claims: Vec::new(),
            peer_enabled: VecMap::default(),
            peer_links: VecMap::default(),
            pid_namespace: ipc_harness::PidNamespace::Harness,
        }
    }

    /// Reserve VA for `len` bytes: released VA if `va_reuse` finds some,
    /// else fresh VA followed by an unmapped guard gap.
    pub(crate) fn reserve_va(&mut self, len: u64, pool: VaPool) -> Option<u64> {
        let need = round_up(len, BLOCK)?;
        let arena = self.arena;
        let base = match self.placement(len, pool)? {
            Placement::Reuse(b, have, base) => {
                let free = self.free_va.remove(&b)?;
                if have > need {
                    let rest = FreeVa {
                        span: have - need,
                        ..free
                    };
                    if base == b {
                        self.free_va.insert(b + need, rest);
                    } else {
                        self.free_va.insert(b, rest);
                    }
                }
                // Stale pointers into the span now reach the new mapping.
                self.revive(base, base + need);
                base
            }
            Placement::Fresh(base) if !pool.class.device_heap() => {
                let next = base.checked_add(need)?.checked_add(VA_GUARD)?;
                if next > self.va_end {
                    return None;
                }
                if base != self.va_side_next {
                    self.free_va.remove(&base);
                    self.revive(base, next);
                }
                self.va_side_next = next;
                base
            }
            Placement::Fresh(base) => {
                let next = base.checked_add(need)?.checked_add(VA_GUARD)?;
                if next > self.va_side {
                    return None;
                }
                if let Some(b) = self.frontier() {
                    self.free_va.remove(&b);
                    self.revive(base, next);
                }
                // A range no longer at the fresh end is an ordinary
                // released range (a frontier of an arena that is not
                // current, retired or left behind).
                for f in self.free_va.values_mut() {
                    f.frontier = false;
                }
                self.va_next = next;
                self.fresh.newest = Some(base);
                self.fresh.newest_import = false;
                self.fresh.rewinds = Some(base);
                if self.fresh.arena != arena {
                    self.fresh.arena = arena;
                    self.fresh.in_arena = 0;
                }
                self.fresh.in_arena += 1;
                base
            }
        };
        self.reserved.insert(base, (arena, pool.class));
        Some(base)
    }

    /// Where `reserve_va(len, pool)` would put `len` bytes now.
    pub(crate) fn placement(&self, len: u64, pool: VaPool) -> Option<Placement> {
        if let Some((b, have, base)) = self.reusable_va(len, pool) {
            return Some(Placement::Reuse(b, have, base));
        }
        if !pool.class.device_heap() {
            return Some(Placement::Fresh(
                self.side_top_released(pool).unwrap_or(self.va_side_next),
            ));
        }
        let frontier = self.frontier();
        Some(Placement::Fresh(frontier.unwrap_or(self.va_next)))
    }

    /// A pool's released span at the top of the side VA, which a request
    /// too large for it extends from its base, as the device heap's
    /// frontier does (pool.va.released-top-range-grows).
    fn side_top_released(&self, pool: VaPool) -> Option<u64> {
        if self.va_reuse != VaReuse::TopDown || !pool.class.pooled() {
            return None;
        }
        self.free_va
            .iter()
            .find(|(&b, f)| {
                pool.class.reuses(f.pool.class)
                    && b.checked_add(f.span).and_then(|e| e.checked_add(VA_GUARD))
                        == Some(self.va_side_next)
            })
            .map(|(&b, _)| b)
    }

    /// Whether the released span `f` at `b` holds the newest fresh
    /// reservation.
    fn holds_newest(&self, b: u64, f: &FreeVa) -> bool {
        self.fresh.newest.is_some_and(|a| a >= b && a < b + f.span)
    }

    /// Whether the frontier span of the current arena has room for `need`
    /// bytes. A closed IPC mapping there that would have to be carved does
    /// not draw the request away from an older released range that fits
    /// (mem.lifetime.va-closed-mapping-frontier-yields); with none, the
    /// request still starts at its base.
    fn frontier_holds(&self, need: u64) -> bool {
        self.free_va.iter().any(|(&b, f)| {
            f.frontier && f.arena == self.arena && f.span >= need && !self.whole_only(b, f, need)
        })
    }

    /// A closed IPC mapping that is still the newest fresh range is handed
    /// out whole or not at all: a smaller request gets other VA
    /// (mem.lifetime.va-closed-newest-mapping-not-carved).
    fn whole_only(&self, b: u64, f: &FreeVa, need: u64) -> bool {
        self.fresh.newest_import && self.holds_newest(b, f) && f.span > need
    }

    /// The IPC mapping just reserved at `base` is the newest fresh
    /// reservation, if `reserve_va` put it on fresh VA.
    pub(crate) fn note_fresh_import(&mut self, base: u64) {
        if self.fresh.newest == Some(base) {
            self.fresh.newest_import = true;
        }
    }

    /// The base of the frontier span, while it is of the current arena.
    fn frontier(&self) -> Option<u64> {
        self.free_va
            .iter()
            .find(|(_, f)| f.frontier && f.arena == self.arena)
            .map(|(&b, _)| b)
    }

    /// The released VA `reserve_va(len, pool)` would hand out now, if any:
    /// (the free span's base, its length, the base handed out).
    pub(crate) fn reusable_va(&self, len: u64, pool: VaPool) -> Option<(u64, u64, u64)> {
        let need = round_up(len, BLOCK)?;
        let arena = self.arena;
        match self.va_reuse {
            VaReuse::Never => None,
            // The first model: the lowest span of the same context, from
            // its start.
            VaReuse::LowestFit => self
                .free_va
                .iter()
                .find(|(_, f)| f.span >= need && f.pool == pool)
                .map(|(&b, f)| (b, f.span, b)),
            // The lowest span of the current arena and class that fits, carved
            // from its end, not the highest: a 2 MiB open after a 3 MiB free
            // gets a new address, the next 2 MiB block the closed one's, the
            // next open the freed base (mem.lifetime.va-reuse-lowest-range,
            // mem.lifetime.va-reuse-top-down).
            VaReuse::TopDown => self
                .free_va
                .iter()
                .find(|(&b, f)| {
                    let shared = pool.class.reuses(f.pool.class);
                    // A pool's VA is the device's, not its context's: a
                    // range a live context's pool released goes to a pool
                    // allocation or import of a context created since
                    // (pool.va.released-range-after-ctx-create).
                    let same_arena = f.arena == arena
                        || (pool.class.pooled()
                            && f.pool.class.pooled()
                            && self.contexts.get(&f.pool.ctx).is_some_and(|c| c.alive));
                    f.span >= need
                        && shared
                        && same_arena
                        && !f.frontier
                        && !self.whole_only(b, f, need)
                })
                .map(|(&b, f)| {
                    // A block after a closed 4 MiB import takes its base
                    // (mem.lifetime.va-reuse-released-range-base); a freed
                    // first range of an arena is carved from its end
                    // (`va_rewind`, mem.lifetime.va-rewind-newest-range).
                    let at = if self.holds_newest(b, f) {
                        b + f.span - need
                    } else {
                        b
                    };
                    (b, f.span, at)
                })
                // Rather than carve a larger range, a request that the
                // frontier (the newest fresh range, released) holds goes
                // there (mem.lifetime.va-frontier-before-larger-released-range).
                .filter(|&(_, span, _)| span == need || !self.frontier_holds(need)),
        }
    }

    pub(crate) fn alloc_at(&self, addr: u64) -> Option<(u64, &Allocation)> {
        self.allocs.containing(addr, |a| a.size)
    }

    pub(crate) fn region_at(&self, addr: u64) -> Option<(u64, &Region)> {
        self.regions.containing(addr, |r| r.len)
    }

    /// Whether an allocation or mapping of this process lies at `addr` or
    /// starts within the `len` bytes from it: a freed export's range that
    /// something took since, at its start or further in
    /// (mem.lifetime.freed-export-range-reused).
    pub(crate) fn holds_within(&self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len.max(1));
        self.alloc_at(addr).is_some()
            || self.region_at(addr).is_some()
            || self.allocs.range(addr..end).next().is_some()
            || self.regions.range(addr..end).next().is_some()
    }

    /// Handle `h` was opened into the mapping at `base` of context `ctx`.
    pub(crate) fn note_opened(&mut self, ctx: CtxKey, h: &ipc_harness::IpcMemHandle, base: u64) {
        self.opened_by_object
            .insert((ctx, crate::handle_codec::u32_at(&h.0, 48)), base);
    }

    /// The IPC mappings: (importing context, block, mapping base), in that
    /// order.
    pub(crate) fn imports(&self) -> Vec<(CtxKey, BlockId, u64)> {
        let mut all: Vec<(CtxKey, BlockId, u64)> = self
            .regions
            .iter()
            .filter_map(|(&base, r)| r.import.as_ref().map(|m| (m.ctx, r.block, base)))
            .collect();
        all.sort_unstable();
        all
    }

    /// Context `ctx` maps `block` at `base` now (its region is in place).
    pub(crate) fn add_import(&mut self, ctx: CtxKey, block: BlockId, base: u64) {
        self.imports_by_block.insert((ctx, block), base);
        self.check_imports_index(ctx, block);
    }

    /// Context `ctx` no longer maps `block` at `base` (its region is gone).
    pub(crate) fn remove_import(&mut self, ctx: CtxKey, block: BlockId, base: u64) {
        self.imports_by_block.remove((ctx, block), base);
        self.check_imports_index(ctx, block);
    }

    /// The bases context `ctx` maps `block` at, in increasing order.
    pub(crate) fn mappings_of(&self, ctx: CtxKey, block: BlockId) -> &[u64] {
        self.imports_by_block.get(&(ctx, block))
    }

    /// Debug builds: the index agrees with the regions for (`ctx`, `block`).
    fn check_imports_index(&self, ctx: CtxKey, block: BlockId) {
        debug_assert!(self
            .regions
            .iter()
            .filter(|(_, r)| r.block == block && r.import.as_ref().is_some_and(|m| m.ctx == ctx))
            .map(|(&b, _)| b)
            .eq(self.mappings_of(ctx, block).iter().copied()));
    }

    /// Whether a mapping of context `ctx` was opened with a handle of `h`'s
    /// export object (bytes 48..52): `opened_like` finds none without it.
    pub(crate) fn opened_object(&self, ctx: CtxKey, h: &ipc_harness::IpcMemHandle) -> bool {
        let object = crate::handle_codec::u32_at(&h.0, 48);
        !self.opened_by_object.get(&(ctx, object)).is_empty()
    }

    /// The IPC mappings of context `ctx`, by base, that a handle with `h`'s
    /// export object word (bytes 48..52) was opened into: every mapping
    /// where an opened handle matches `h` on bytes that include those.
    pub(crate) fn opened_like<'a>(
        &'a self,
        ctx: CtxKey,
        h: &ipc_harness::IpcMemHandle,
    ) -> impl Iterator<Item = (u64, &'a Region, &'a Mapping)> + 'a {
        let object = crate::handle_codec::u32_at(&h.0, 48);
        self.opened_by_object
            .get(&(ctx, object))
            .iter()
            .filter_map(move |&base| {
                let r = self.regions.get(&base)?;
                Some((base, r, r.import.as_deref()?))
            })
    }

    pub(crate) fn dead_at(&self, addr: u64) -> Option<Gone> {
        self.dead
            .last_at_or_before(addr)
            .filter(|(_, d)| addr < d.end)
            .map(|(_, d)| d.why)
    }

    /// Own ordinal of a physical device, if this process can see it.
    pub(crate) fn ordinal_of(&self, physical: u32) -> Option<u32> {
        self.visible
            .iter()
            .position(|&d| d == physical)
            .map(|i| i as u32)
    }

    /// Driver memory made now (a context, the shared event memory, a VMM
    /// allocation `vmm` while its handle lives) claims the VA free in the
    /// current arena (`reclaimed_export_error`).
    /// Returns the claim's index in `va_claims`.
    pub(crate) fn claim_free_va(
        &mut self,
        by: ClaimBy,
        vmm: Option<(u64, u64)>,
        mapped: Option<(u64, u64)>,
    ) -> usize {
        let arena = self.arena;
        // VA released while another context was current is not claimed: freed
        // from a created context later destroyed, then a VMM import, the
        // export is InvalidValue
        // (mem.lifetime.freed-from-other-context-not-claimed).
        // VA a large allocation still claims is not free to claim again:
        // when it is freed, no later claim holds the VA
        // (mem.lifetime.large-malloc-claim-ends-with-it).
        let (held, spans): (Vec<_>, Vec<_>) = self
            .free_va
            .iter()
            .filter(|(_, f)| f.arena == arena)
            .filter(|(_, f)| self.released_elsewhere(f).is_none())
            .map(|(&b, f)| (b, f.span))
            .partition(|&(b, _)| self.held_by_allocation_claim(b));
        // A VMM allocation claims only the lowest free span
        // (mem.lifetime.vmm-import-claims-lowest-free-span).
        let spans = if by == ClaimBy::Vmm {
            spans.into_iter().take(1).collect()
        } else {
            spans
        };
        let claim = self.push_claim(by, spans, vmm, mapped);
        self.va_claims[claim].passed_over = held;
        claim
    }

    /// End the claims `which` selects: the memory behind them is gone
    /// ([`VaClaim::end`]).
    pub(crate) fn end_claims(&mut self, which: impl Fn(&VaClaim) -> bool) {
        for c in self.va_claims.iter_mut().filter(|c| which(c)) {
            c.end();
        }
    }

    /// The claims `which` picks no longer end with their allocation: they
    /// last as long as the process.
    pub(crate) fn detach_claims(&mut self, which: impl Fn(&VaClaim) -> bool) {
        for c in self.va_claims.iter_mut().filter(|c| which(c)) {
            c.allocation = None;
        }
    }

    /// Whether a live large allocation's or VMM allocation's claim holds
    /// the VA at `addr` (a VMM claim ends at `vmm_release`).
    pub(crate) fn held_by_allocation_claim(&self, addr: u64) -> bool {
        self.va_claims
            .iter()
            .any(|c| (c.allocation.is_some() || c.by == ClaimBy::Vmm) && c.holds(addr))
    }

    /// Record driver memory made now claiming `spans` of VA; returns the
    /// claim's index in `va_claims`.
    pub(crate) fn push_claim(
        &mut self,
        by: ClaimBy,
        spans: Vec<(u64, u64)>,
        vmm: Option<(u64, u64)>,
        mapped: Option<(u64, u64)>,
    ) -> usize {
        self.va_claims.push(VaClaim {
            at: self.va_releases,
            arena: self.arena,
            vmm,
            spans,
            mapped,
            allocation: None,
            passed_over: Vec::new(),
            ended_spans: Vec::new(),
            by,
        });
        self.va_claims.len() - 1
    }

    /// A memory pool holds the VA at `base`: its release waits for
    /// [`Process::unhold_va`].
    pub(crate) fn hold_va(&mut self, base: u64) {
        self.va_held.insert(base, None);
    }

    /// The pool lets go of the VA at `base`: a release that waited happens.
    pub(crate) fn unhold_va(&mut self, base: u64) {
        if let Some(Some((len, pool))) = self.va_held.remove(&base) {
            self.release_va(base, len, pool);
        }
    }

    /// Give back VA that `reserve_va` handed out for `len` bytes at `base`.
    pub(crate) fn release_va(&mut self, base: u64, len: u64, pool: VaPool) {
        // Held by a memory pool: released when the pool lets go (`unhold_va`).
        if let Some(held) = self.va_held.get_mut(&base) {
            *held = Some((len, pool));
            return;
        }
        // VA goes back to the class it was reserved for (a stream-ordered
        // allocation's to the default pool or to a created pool's).
        let (arena, class) = self
            .reserved
            .remove(&base)
            .unwrap_or((self.arena, pool.class));
        let pool = VaPool { class, ..pool };
        let Some(mut span) = round_up(len, BLOCK) else {
            return;
        };
        self.va_releases += 1;
        let released = self.va_releases;
        self.stale_bytes.fill(base, span, 0);
        // `va_rewind=newest`: the newest fresh range of the device heap,
        // not the first of its arena.
        let newest = self.fresh.rewinds == Some(base)
            && pool.class.device_heap()
            && self.fresh.in_arena > 1
            && self.fresh.arena == arena;
        let mut base = base;
        if self.va_reuse == VaReuse::TopDown {
            // Adjacent released spans of one pool merge again (a span carved
            // from a released one and released goes back whole). The merged
            // span carries this, the latest, release stamp: a context counts
            // as made after the release only if made after all of it.
            let same = |f: &FreeVa| f.pool == pool && f.arena == arena && !f.frontier;
            let after = base + span;
            // The spans starting at `after` and the last one before `base`,
            // found by one walk back from `after`.
            let mut near = self.free_va.range(..=after).rev();
            let mut next = near.next();
            let at_after = next
                .filter(|(&b, _)| b == after)
                .map(|(_, f)| *f)
                .filter(same);
            if next.is_some_and(|(&b, _)| b == after) {
                next = near.next();
            }
            let before = next
                .into_iter()
                .chain(near)
                .find(|(&b, _)| b < base)
                .filter(|(&b, f)| b + f.span == base && same(f))
                .map(|(&b, f)| (b, f.span));
            if let Some(f) = at_after {
                self.free_va.remove(&after);
                span += f.span;
            }
            if let Some((b, s)) = before {
                self.free_va.remove(&b);
                base = b;
                span += s;
            }
        }
        let frontier =
            newest && self.va_reuse == VaReuse::TopDown && self.va_rewind == VaRewind::Newest;
        if frontier {
            self.fresh.rewinds = None;
        }
        self.free_va.insert(
            base,
            FreeVa {
                span,
                pool,
                arena,
                released,
                frontier,
                released_in: self.current,
            },
        );
    }

    pub(crate) fn mark_dead(&mut self, base: u64, len: u64, why: Gone) {
        self.dead.insert(
            base,
            DeadRange {
                end: base.saturating_add(len),
                why,
            },
        );
    }
}

impl World {
    pub(crate) fn hazard(&mut self, kind: HazardKind, process: ProcessIndex, detail: String) {
        self.hazards.record(kind, process, detail);
    }

    /// The current context of `p`, or `InvalidContext`.
    pub(crate) fn current_ctx(&self, p: ProcessIndex) -> SimResult<(CtxKey, u32)> {
        use ipc_harness::ErrorKind::{ContextIsDestroyed, InvalidContext};
        let proc = &self.procs[p];
        let Some(c) = proc.current else {
            return Err(InvalidContext.into());
        };
        match proc.contexts.get(&c) {
            Some(x) if x.alive => Ok((c, x.device)),
            // A destroyed context made current again (mem.context.set-destroyed,
            // measured: the runtime says 201, the driver 709).
            Some(_) if self.dialect == Dialect::Driver => Err(ContextIsDestroyed.into()),
            _ => Err(InvalidContext.into()),
        }
    }

    /// Charge `size` bytes to physical `device`'s memory: OutOfMemory
    /// past `DEVICE_MEMORY`. `maybe_release` gives them back with the block.
    pub(crate) fn charge_device(&mut self, device: u32, size: u64) -> SimResult<()> {
        let used = self.device_used.get(device as usize).copied().unwrap_or(0);
        if used.checked_add(size).is_none_or(|u| u > DEVICE_MEMORY) {
            return Err(ipc_harness::ErrorKind::OutOfMemory.into());
        }
        if let Some(u) = self.device_used.get_mut(device as usize) {
            *u += size;
        }
        Ok(())
    }

    /// Keep `block` under a new id. Ids are taken increment-then-use: the
    /// other order gave a VMM allocation the id of the last device block,
    /// and its memory (found by explore's coherence property).
    pub(crate) fn insert_block(&mut self, block: Block) -> BlockId {
        self.next_block += 1;
        self.blocks.insert(self.next_block, block);
        self.next_block
    }

    /// Drop a block once nobody maps it any more.
    pub(crate) fn maybe_release(&mut self, id: BlockId) {
        let Some(b) = self.blocks.get(&id) else {
            return;
        };
        let exporter_alive = !self.procs[b.owner].exited;
        let kept_for_export = b.export_id.is_some()
            && exporter_alive
            && self.sem.freed_export == crate::semantics::FreedExport::Opens;
        if b.owner_mapped || b.importers > 0 || kept_for_export || b.pool_kept {
            return;
        }
        if let Some(id) = b.export_id {
            self.export_ids.remove(&id);
            if exporter_alive {
                self.freed_exports.insert(
                    id,
                    FreedExport {
                        owner: b.owner,
                        base: b.owner_base,
                        released: b.owner_released,
                        freed_in_other: b.owner_unmapped_in.filter(|&c| {
                            c != b.owner_ctx
                                && self.procs[b.owner]
                                    .contexts
                                    .get(&c)
                                    .is_some_and(|x| !x.primary)
                        }),
                        owner_vmm: b.owner_vmm,
                    },
                );
            }
        }
        if matches!(b.kind, MemKind::Device | MemKind::StreamOrdered) {
            if let Some(used) = self.device_used.get_mut(b.device as usize) {
                *used = used.saturating_sub(b.size);
            }
        }
        self.blocks.remove(&id);
    }

    /// Check an access of `[ptr, ptr + len)` by process `p` and say where its
    /// bytes live: (block, offset in block). Records the hazards it sees.
    /// `len` is non-zero.
    pub(crate) fn resolve(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        len: u64,
        access: Access,
    ) -> SimResult<(BlockId, u64)> {
        use ipc_harness::ErrorKind::{IllegalAddress, InvalidValue};
        let fault = match access {
            Access::Copy => InvalidValue,
            Access::Kernel => IllegalAddress,
        };
        if let Some(r) = self.vmm_resolve(p, ptr, len, access) {
            return r;
        }
        // Pool memory from a device without access (`pools.rs`).
        if let Some(denied) = self.pool_access_denied(p, ptr, access) {
            return Err(denied);
        }
        let Some(end) = ptr.checked_add(len) else {
            return Err(fault.into());
        };
        let proc = &self.procs[p];
        let stable = self.sem.handle_stable == crate::semantics::HandleStability::SameBytes;
        let found = proc.region_at(ptr).map(|(base, r)| {
            let import = r.import.as_ref().map(|m| {
                let export = m.export_at(ptr - base);
                let closed = export.is_some_and(|(o, _)| m.closed.contains_key(&o));
                let reused = export.is_some_and(|(o, _)| {
                    self.blocks
                        .get(&r.block)
                        .is_some_and(|b| opened_slot_reused(stable, m, b, o))
                });
                (export, m.exporter, closed, reused)
            });
            (base, r.len, r.block, import)
        });
        let Some((base, region_len, block_id, import)) = found else {
            match self.procs[p].dead_at(ptr) {
                Some(Gone::Closed) => self.hazard(
                    HazardKind::AccessAfterClose,
                    p,
                    format!("{ptr:#x}: IPC mapping already closed"),
                ),
                Some(Gone::Freed) => self.hazard(
                    HazardKind::AccessAfterFree,
                    p,
                    format!("{ptr:#x}: allocation already freed"),
                ),
                None => {}
            }
            return Err(fault.into());
        };
        if end > base.saturating_add(region_len) {
            return Err(fault.into());
        }
        // A handle of freed memory opened the exporter's new allocation at
        // its address (`stale_handle`): the handle's own memory is gone.
        if import.is_some() && self.stale_mapping(p, base) {
            self.hazard(
                HazardKind::AccessAfterFree,
                p,
                format!("{ptr:#x}: mapping a handle of freed memory opened (it reaches the exporter's new allocation)"),
            );
        }
        if let Some((_, _, true, _)) = import {
            self.hazard(
                HazardKind::AccessAfterClose,
                p,
                format!("{ptr:#x}: IPC pointer already closed (a neighbour keeps the mapping)"),
            );
            // Measured (H100, 580.159.04): memcpy refuses it; the mapping
            // itself lives on for the neighbour, so a kernel still reads it.
            if access == Access::Copy {
                return Err(fault.into());
            }
        }
        let Some(block) = self.blocks.get(&block_id) else {
            return Err(fault.into());
        };
        let mut hazards: Vec<(HazardKind, String)> = Vec::new();
        // The accessing allocation's own range, if the pointer is in one.
        let own: Option<(u64, u64)> = match import {
            Some((export, exporter, _, reused)) => {
                if block.revoked {
                    self.hazard(
                        HazardKind::AccessAfterFree,
                        p,
                        format!("{ptr:#x}: exporter exited, mapping revoked"),
                    );
                    return Err(fault.into());
                }
                let freed = reused
                    || export.is_some_and(|(o, _)| {
                        block.freed_while_mapped.contains_key(&o) || block.freed.contains_key(&o)
                    });
                if reused {
                    hazards.push((
                        HazardKind::AccessAfterFree,
                        format!(
                            "{ptr:#x}: exporter process {exporter} freed the handle's allocation and its slot holds another one now"
                        ),
                    ));
                } else if freed {
                    hazards.push((
                        HazardKind::AccessAfterFree,
                        format!(
                            "{ptr:#x}: exporter process {exporter} freed this memory while mapped"
                        ),
                    ));
                }
                export.map(|(o, size)| {
                    let s = base.saturating_add(o);
                    (s, s.saturating_add(size))
                })
            }
            None => self.procs[p]
                .alloc_at(ptr)
                .map(|(b, a)| (b, b.saturating_add(a.size))),
        };
        if own.is_none() && self.procs[p].dead_at(ptr) == Some(Gone::Freed) {
            // The owner's pointer after its free, in a block a live
            // neighbouring allocation still keeps mapped.
            self.hazard(
                HazardKind::AccessAfterFree,
                p,
                format!("{ptr:#x}: allocation already freed"),
            );
            if access == Access::Copy {
                return Err(InvalidValue.into());
            }
        }
        let inside_own = own.is_some_and(|(s, e)| ptr >= s && end <= e);
        if !inside_own {
            if access == Access::Copy && self.sem.memcpy_bounds == MemcpyBounds::Allocation {
                return Err(InvalidValue.into());
            }
            hazards.push((
                HazardKind::OutsideOwnRange,
                format!(
                    "[{ptr:#x}, {end:#x}) reaches past its allocation {}",
                    match own {
                        Some((s, e)) => format!("[{s:#x}, {e:#x})"),
                        None => "(none)".into(),
                    }
                ),
            ));
        }
        for (k, d) in hazards {
            self.hazard(k, p, d);
        }
        Ok((block_id, ptr - base))
    }

    /// Remove an importer's mapping at `base` entirely (last close, context
    /// destroyed, process exit).
    pub(crate) fn unmap_import(&mut self, p: ProcessIndex, base: u64) {
        // A pointer imported from a pool has VA of the stream-ordered side.
        let class = self.pool_import_va_class(p, base);
        let proc = &mut self.procs[p];
        let Some(region) = proc.regions.remove(&base) else {
            return;
        };
        let pool = VaPool {
            ctx: region.import.as_ref().map_or(0, |m| m.ctx),
            class,
        };
        if let Some(m) = &region.import {
            proc.remove_import(m.ctx, region.block, base);
            for h in &m.opened {
                let object = crate::handle_codec::u32_at(&h.0, 48);
                proc.opened_by_object.remove((m.ctx, object), base);
            }
        }
        proc.mark_dead(base, region.len, Gone::Closed);
        proc.release_va(base, region.len, pool);
        if let Some(b) = self.blocks.get_mut(&region.block) {
            b.importers = b.importers.saturating_sub(1);
        }
        self.maybe_release(region.block);
    }

    /// Free the allocation at `base` of process `p`. `explicit` is an API
    /// call (free or context destroy) rather than process teardown; only
    /// explicit frees are the documented undefined behaviour.
    pub(crate) fn free_allocation(&mut self, p: ProcessIndex, base: u64, explicit: bool) {
        let proc = &mut self.procs[p];
        let Some(a) = proc.allocs.remove(&base) else {
            return;
        };
        proc.mark_dead(base, a.size, Gone::Freed);
        let zero = self.sem.free_while_mapped == crate::semantics::FreeWhileMapped::Zeroed;
        let Some(block) = self.blocks.get_mut(&a.block) else {
            return;
        };
        block.live.remove(&a.offset);
        if explicit {
            block.freed.insert(a.offset, ());
        }
        let mut hazard = None;
        if block.importers > 0 && explicit {
            hazard = Some(format!(
                "process {p} freed {base:#x} ({} bytes) while {} importer mapping(s) hold its block",
                a.size, block.importers
            ));
            block.freed_while_mapped.insert(a.offset, ());
            if zero {
                block.data.fill(a.offset, a.size, 0);
            }
        }
        let unmap_owner = block.live.is_empty() && block.owner_mapped;
        let owner_base = block.owner_base;
        if unmap_owner {
            block.owner_mapped = false;
            let (device, own_ctx) = (block.device, block.owner_ctx);
            block.owner_other_ctx_at_unmap = self.procs[p]
                .contexts
                .iter()
                .any(|(&k, c)| c.alive && c.device == device && k != own_ctx);
            block.owner_unmapped_in = self.procs[p].current;
        }
        if let Some(d) = hazard {
            self.hazard(HazardKind::FreeWhileMapped, p, d);
        }
        if unmap_owner {
            let proc = &mut self.procs[p];
            if let Some(r) = proc.regions.remove(&owner_base) {
                let pool = VaPool {
                    ctx: a.ctx,
                    class: VaClass::of(a.kind),
                };
                proc.release_va(owner_base, r.len, pool);
            }
            proc.packing.retain(|_, b| *b != a.block);
            // A large allocation's claim ends with it: a freed export's VA
            // it claimed is simply free again
            // (mem.lifetime.large-malloc-claim-ends-with-it).
            proc.end_claims(|c| c.allocation == Some(owner_base));
            let released = proc.va_releases;
            if let Some(b) = self.blocks.get_mut(&a.block) {
                b.owner_released = Some(released);
            }
            self.maybe_release(a.block);
        }
    }

    /// Tear down every allocation and mapping of context `ctx` in `p`. A
    /// created context's stream-ordered allocations come from the device's
    /// pool and outlive it: a later `cudaFreeAsync` of one succeeds
    /// (mem.context.stream-ordered-alloc-outlives-created-context).
    pub(crate) fn release_context(&mut self, p: ProcessIndex, ctx: CtxKey, explicit: bool) {
        let proc = &self.procs[p];
        let primary = proc.contexts.get(&ctx).is_some_and(|c| c.primary);
        let allocs: Vec<u64> = proc
            .allocs
            .iter()
            .filter(|(_, a)| a.ctx == ctx)
            .filter(|(_, a)| primary || a.kind != MemKind::StreamOrdered)
            .map(|(&b, _)| b)
            .collect();
        let maps: Vec<u64> = proc
            .imports()
            .into_iter()
            .filter(|(c, _, _)| *c == ctx)
            .map(|(_, _, b)| b)
            .collect();
        for base in allocs {
            self.free_allocation(p, base, explicit);
        }
        for base in maps {
            self.unmap_import(p, base);
        }
        self.procs[p].packing.retain(|(c, _), _| *c != ctx);
        // Its streams go with it; the work queued on them is done.
        self.host_waits_for_all(p);
        self.events.drop_context(p, ctx);
    }

    /// `p` dies mid-call: its records never complete, the others see its
    /// ended work, and it exits without the teardown's leak log.
    pub(crate) fn crash_process(&mut self, p: ProcessIndex) {
        self.procs[p].crashed = true;
        self.abandoned_records(p);
        self.host_sees_ended_work(p);
        // Holding a VMM allocation handle, under
        // `exporter_crash_memory=zeroed` the other processes' mappings of
        // its cudaMalloc memory read zeros
        // (mem.lifetime.import-after-exporter-crash-with-vmm-varies); VMM
        // memory they map keeps its bytes (vmm.lifetime.import-after-exporter-crash).
        if self.sem.exporter_crash_memory == ExporterCrashMemory::Zeroed
            && self.vmm_handles_held(p) > 0
        {
            for b in self.blocks.values_mut() {
                let legacy_export = b.kind == MemKind::Device && b.export_id.is_some();
                if b.owner == p && b.importers > 0 && legacy_export {
                    b.data.fill(0, b.size, 0);
                }
            }
        }
        self.exit_process(p, false);
    }

    /// The process exits: the OS and driver reclaim everything it held.
    pub(crate) fn exit_process(&mut self, p: ProcessIndex, record_leaks: bool) {
        if self.procs[p].exited {
            return;
        }
        // What the other processes are ordered after is the caller's to
        // say first (`host_sees_ended_work`).
        self.vmm_exit(p);
        if record_leaks && !self.mutant(MutantId::LeakNotLogged) {
            let leaks: Vec<(u64, usize, u64)> = self.procs[p]
                .regions
                .iter()
                .filter_map(|(&b, r)| {
                    r.import.as_ref().map(|m| {
                        (
                            b,
                            m.exporter,
                            m.opens.values().copied().fold(0u64, u64::saturating_add),
                        )
                    })
                })
                .collect();
            for (base, exporter, count) in leaks {
                self.hazard(
                    HazardKind::MappingLeakedAtExit,
                    p,
                    format!(
                        "mapping at {base:#x} of process {exporter}'s memory still open ({count} open(s)) at exit"
                    ),
                );
            }
        }
        self.events_exit(p);
        let imports: Vec<u64> = self.procs[p]
            .imports()
            .into_iter()
            .map(|(_, _, b)| b)
            .collect();
        for base in imports {
            self.unmap_import(p, base);
        }
        let allocs: Vec<u64> = self.procs[p].allocs.keys().copied().collect();
        for base in allocs {
            self.free_allocation(p, base, false);
        }
        let revoke = self.sem.exporter_exit == ExporterExit::MappingsRevoked;
        for b in self.blocks.values_mut().filter(|b| b.owner == p) {
            // The export object outlives its exporter while a mapping holds
            // the block: a holder may open it again (measured, H100 / 580).
            if b.importers == 0 {
                if let Some(id) = b.export_id.take() {
                    self.export_ids.remove(&id);
                }
            }
            b.owner_mapped = false;
            if revoke {
                b.revoked = true;
            }
        }
        let owned: Vec<BlockId> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.owner == p)
            .map(|(id, _)| id)
            .collect();
        self.freed_exports.retain(|_, f| f.owner != p);
        // Exited before releasing, so blocks kept for their export go too.
        self.procs[p].exited = true;
        // The pools it created go, with the memory they kept (`pools.rs`).
        self.pools_exit(p);
        for id in owned {
            self.maybe_release(id);
        }
        let proc = &mut self.procs[p];
        for c in proc.contexts.values_mut() {
            c.alive = false;
        }
        proc.current = None;
        proc.ctx_below.clear();
        proc.packing.clear();
        proc.peer_enabled.clear();
        proc.peer_links.clear();
        proc.exited = true;
    }
}

/// Whether the allocation a mapping opened at block offset `o` is gone: it
/// was last opened in an older generation of the slot than the allocation
/// there now, which first-fit reuse placed after the opened one was freed.
/// An access through it reaches another allocation's memory: the
/// access-after-free hazard.
pub(crate) fn opened_slot_reused(stable: bool, m: &Mapping, block: &Block, o: u64) -> bool {
    if !stable {
        return false;
    }
    let now = block.generations.get(&o).copied().unwrap_or(0);
    m.exports
        .get(&o)
        .and_then(|e| e.generation)
        .is_some_and(|opened| opened != now)
}
