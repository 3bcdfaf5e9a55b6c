//! Allocations, frees, data movement and pointer queries.
//!
//! Device allocations live in physical blocks; with sub-allocation on, small
//! ones share a 2 MiB block, which is exactly what makes IPC leak neighbours.

use crate::event_state::KernelWrite;
use crate::semantics::{
    DeviceReadBuffer, FreeNull, FreeOfIpcPointer, ImportRange, StaleKernelRead, StaleMemset, Switch,
};
use crate::small_map::SmallMap;
use crate::world::{
    round_up, Access, Allocation, Block, Fail, Gone, MutantId, Region, SimResult, VaClass, VaPool,
    World, BLOCK, DEVICE_MEMORY, KIB, MAX_READ, SUBALLOC_ALIGN,
};
use ipc_harness::{
    Dialect, ErrorKind, FreeKind, HazardKind, MemKind, MemoryType, PointerInfo, ProcessIndex,
    StreamId,
};

/// The lowest offset of a packed block where `need` bytes fit between the
/// live sub-allocations (each takes its size rounded to `SUBALLOC_ALIGN`).
fn first_fit(live: &SmallMap, need: u64, block: u64) -> Option<u64> {
    let mut at = 0u64;
    for (&off, &size) in live {
        if off >= at.checked_add(need)? {
            break;
        }
        at = at.max(off.checked_add(round_up(size, SUBALLOC_ALIGN)?)?);
    }
    (at.checked_add(need)? <= block).then_some(at)
}

/// Block granularity per kind: device memory and pools come in 2 MiB
/// pages; pinned host memory in OS pages.
fn granularity(kind: MemKind) -> u64 {
    match kind {
        MemKind::PinnedHost => 4 * KIB,
        MemKind::Device | MemKind::Managed | MemKind::StreamOrdered => BLOCK,
    }
}

fn counts_against_device(kind: MemKind) -> bool {
    matches!(kind, MemKind::Device | MemKind::StreamOrdered)
}

/// Where a read's bytes come from, once its pointer passed the checks.
enum ReadTarget {
    /// Nowhere: a read of no bytes.
    Empty,
    /// The VMM mappings the range crosses.
    Pieces(Vec<crate::vmm::Piece>),
    /// One block, at an offset.
    Block(crate::ids::BlockId, u64),
}

fn too_long_to_read() -> Fail {
    Fail::Harness(format!(
        "the simulator does not materialise reads over {MAX_READ} bytes"
    ))
}

/// Whether a free call of `kind` frees memory of kind `mem`: cudaFree
/// device, managed and stream-ordered memory, cudaFreeHost pinned host
/// memory, cudaFreeAsync stream-ordered memory.
fn frees_kind(kind: FreeKind, mem: MemKind) -> bool {
    match kind {
        FreeKind::Device => matches!(
            mem,
            MemKind::Device | MemKind::Managed | MemKind::StreamOrdered
        ),
        FreeKind::Host => mem == MemKind::PinnedHost,
        FreeKind::StreamOrdered => mem == MemKind::StreamOrdered,
    }
}

/// What `World::free` does with a pointer, decided before anything
/// changes (`World::free_action`): the driver layer waits for the
/// process's work before a free the driver accepts, and not before one it
/// refuses (mem.lifetime.refused-free-does-not-wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FreeAction {
    /// NULL: ok or InvalidValue by `free_null`.
    Null,
    /// Pool memory (`World::pool_release`).
    Pool(crate::pools::PoolFree),
    /// The process's own allocation, of a kind the call frees.
    Allocation,
    /// The process's own allocation of another kind: InvalidValue.
    WrongKind,
    /// An IPC mapping freed with cudaFree (`free_of_ipc_pointer`).
    IpcMapping,
    /// Nothing the call frees starts there: InvalidValue. `within`: the
    /// pointer lies in memory the process maps (inside an allocation or
    /// mapping, or a mapping given to another call), where the refusal
    /// comes after the wait, as for an accepted free (unmeasured).
    Refused { within: bool },
}

impl FreeAction {
    /// Whether the driver waits for the process's work before this free.
    pub(crate) fn waits(self) -> bool {
        !matches!(
            self,
            FreeAction::WrongKind | FreeAction::Refused { within: false }
        )
    }
}

impl World {
    pub(crate) fn alloc(&mut self, p: ProcessIndex, kind: MemKind, size: u64) -> SimResult<u64> {
        let base = self.alloc_on(p, kind, size, None)?;
        if kind == MemKind::StreamOrdered {
            // From the device's default pool.
            self.note_pool_chunk(p, base, None);
        }
        Ok(base)
    }

    /// An allocation made from the current context, on `device` (physical)
    /// where given (a pool's resident device, `pools.rs`), else on the
    /// current context's device.
    pub(crate) fn alloc_on(
        &mut self,
        p: ProcessIndex,
        kind: MemKind,
        size: u64,
        device: Option<u32>,
    ) -> SimResult<u64> {
        if size == 0 {
            return Err(ErrorKind::InvalidValue.into());
        }
        let (ctx, current_device) = self.current_ctx(p)?;
        // A stream-ordered allocation with no pool's device is the default
        // pool's: VA of its own (`VaClass::DefaultPool`).
        let class = match (kind, device) {
            (MemKind::StreamOrdered, None) => VaClass::DefaultPool,
            _ => VaClass::of(kind),
        };
        let device = device.unwrap_or(current_device);
        let packed = kind == MemKind::Device
            && self.sem.suballocation == Switch::On
            && size < BLOCK
            && !self.mutant(MutantId::SubAllocationsNotShared);
        if packed {
            let need = round_up(size, SUBALLOC_ALIGN).ok_or(ErrorKind::OutOfMemory)?;
            let target = self.procs[p].packing.get(&(ctx, device)).copied();
            if let Some(id) = target {
                if let Some(b) = self.blocks.get_mut(&id) {
                    // The first freed slot that fits is used again
                    // (mem.suballoc.first-fit-freed-slot).
                    let slot = first_fit(&b.live, need, b.size);
                    if let (true, Some(offset)) = (b.owner_mapped, slot) {
                        // A reused slot starts a new generation. The handle's
                        // bytes do not show it: `ipc_get` gives the freed
                        // allocation's handle byte for byte
                        // (mem.suballoc.reused-slot-same-handle); only the
                        // hazard log tells the allocations apart.
                        if offset < b.cursor {
                            b.reuses += 1;
                            b.generations.insert(offset, b.reuses);
                        } else {
                            b.generations.remove(&offset);
                        }
                        b.cursor = b.cursor.max(offset + need);
                        b.live.insert(offset, size);
                        b.freed.retain(|o, _| o < offset || o >= offset + need);
                        b.freed_while_mapped
                            .retain(|o, _| o < offset || o >= offset + need);
                        let base = b.owner_base + offset;
                        let buffer_id = self.new_buffer_id();
                        let proc = &mut self.procs[p];
                        proc.revive(base, base + need);
                        let a = Allocation {
                            size,
                            kind,
                            ctx,
                            device,
                            block: id,
                            offset,
                            buffer_id,
                        };
                        self.procs[p].allocs.insert(base, a);
                        return Ok(base);
                    }
                }
            }
            let id = self.new_block(p, (ctx, device), (kind, class), BLOCK)?;
            let b = self.blocks.get_mut(&id).ok_or(ErrorKind::Unknown)?;
            b.cursor = need;
            b.live.insert(0, size);
            let base = b.owner_base;
            let buffer_id = self.new_buffer_id();
            let proc = &mut self.procs[p];
            proc.packing.insert((ctx, device), id);
            let a = Allocation {
                size,
                kind,
                ctx,
                device,
                block: id,
                offset: 0,
                buffer_id,
            };
            proc.allocs.insert(base, a);
            return Ok(base);
        }
        let block_size = round_up(size, granularity(kind)).ok_or(ErrorKind::OutOfMemory)?;
        let id = self.new_block(p, (ctx, device), (kind, class), block_size)?;
        let b = self.blocks.get_mut(&id).ok_or(ErrorKind::Unknown)?;
        b.cursor = block_size;
        b.live.insert(0, size);
        let base = b.owner_base;
        let a = Allocation {
            size,
            kind,
            ctx,
            device,
            block: id,
            offset: 0,
            buffer_id: self.new_buffer_id(),
        };
        self.procs[p].allocs.insert(base, a);
        Ok(base)
    }

    /// A fresh physical block owned by `p`, mapped at VA of `class`, made
    /// in `ctx` (current) on `device`.
    fn new_block(
        &mut self,
        p: ProcessIndex,
        (ctx, device): (crate::world::CtxKey, u32),
        (kind, class): (MemKind, VaClass),
        size: u64,
    ) -> SimResult<u64> {
        if counts_against_device(kind) {
            let used = self.device_used.get(device as usize).copied().unwrap_or(0);
            if used.checked_add(size).is_none_or(|u| u > DEVICE_MEMORY) {
                return Err(ErrorKind::OutOfMemory.into());
            }
        }
        let owner_vmm = self.owner_vmm_now(p);
        // A device allocation larger than one 2 MiB block claims the VA free
        // in the current arena, as driver memory does: a freed export there is
        // NotPermitted from then on
        // (mem.lifetime.large-malloc-claims-freed-export-va); so does pinned
        // host memory of that size, mapped into the device's VA
        // (mem.lifetime.large-host-alloc-claims-freed-export-va). A 2 MiB one does
        // not: counting it breaks 33 of the 5,324 recorded cases that agree.
        // The claim ends when the allocation is freed
        // (mem.lifetime.large-malloc-claim-ends-with-it).
        let large =
            matches!(kind, MemKind::Device | MemKind::PinnedHost) && size > crate::world::BLOCK;
        let large_claim = large.then(|| {
            self.procs[p].claim_free_va(crate::world::ClaimBy::LargeAllocation, None, None)
        });
        // A device allocation's new block also claims the VA the process's
        // VMM reservations hold: legacy memory's table counts it free (a
        // stale handle there is InvalidValue,
        // mem.lifetime.stale-handle-at-vmm-mapping-invalid-value), and a
        // block made since makes a freed export there NotPermitted
        // (mem.lifetime.stale-handle-at-vmm-mapping-claimed-by-new-block).
        if kind == MemKind::Device {
            let held = self.vmm_reservation_spans(p);
            if !held.is_empty() {
                self.procs[p].push_claim(
                    crate::world::ClaimBy::BlockBesideReservation,
                    held,
                    None,
                    None,
                );
            }
        }
        // So does a stream-ordered allocation that needs a block of the pool's
        // (mem.lifetime.stream-ordered-alloc-claims-freed-export-va).
        if kind == MemKind::StreamOrdered {
            self.procs[p].claim_free_va(crate::world::ClaimBy::StreamOrderedPool, None, None);
        }
        let pool = VaPool { ctx, class };
        let owner_base = self.procs[p]
            .reserve_va(size, pool)
            .ok_or(ErrorKind::OutOfMemory)?;
        if let Some(c) = large_claim.and_then(|i| self.procs[p].va_claims.get_mut(i)) {
            c.allocation = Some(owner_base);
        }
        if counts_against_device(kind) {
            if let Some(u) = self.device_used.get_mut(device as usize) {
                *u += size;
            }
        }
        let placed_in_held_va = self.procs[p].held_by_allocation_claim(owner_base);
        let id = self.insert_block(Block {
            kind,
            owner_base,
            placed_in_held_va,
            cursor: 0,
            owner_mapped: true,
            owner_ctx: pool.ctx,
            owner_vmm,
            ..Block::unowned(p, device, size, 0)
        });
        self.procs[p].regions.insert(
            owner_base,
            Region {
                len: size,
                block: id,
                import: None,
            },
        );
        Ok(id)
    }

    /// What `free(p, kind, ptr)` will do, decided before anything changes.
    pub(crate) fn free_action(&self, p: ProcessIndex, kind: FreeKind, ptr: u64) -> FreeAction {
        if ptr == 0 {
            return FreeAction::Null;
        }
        // Pool memory: an imported pool pointer may be freed with cudaFree
        // too ("The pointer may be freed with cudaFree or cudaFreeAsync",
        // pool.lifetime.importer-frees-with-cudafree).
        if kind != FreeKind::Host {
            if let Some(target) = self.pool_free_target(p, ptr) {
                return FreeAction::Pool(target);
            }
        }
        let proc = &self.procs[p];
        if let Some(a) = proc.allocs.get(&ptr) {
            return match frees_kind(kind, a.kind) {
                true => FreeAction::Allocation,
                false => FreeAction::WrongKind,
            };
        }
        let region = proc.region_at(ptr);
        if kind == FreeKind::Device && region.is_some_and(|(_, r)| r.import.is_some()) {
            return FreeAction::IpcMapping;
        }
        let imported_pool_ptr = self
            .pools
            .procs
            .get(p)
            .is_some_and(|pp| pp.imported.contains_key(&ptr));
        FreeAction::Refused {
            within: region.is_some() || imported_pool_ptr,
        }
    }

    pub(crate) fn free(&mut self, p: ProcessIndex, kind: FreeKind, ptr: u64) -> SimResult<()> {
        let action = self.free_action(p, kind, ptr);
        self.free_as(p, kind, ptr, action)
    }

    /// `free(p, kind, ptr)` doing `action`, which `free_action` gave for
    /// these arguments with nothing changed since but work landing.
    pub(crate) fn free_as(
        &mut self,
        p: ProcessIndex,
        kind: FreeKind,
        ptr: u64,
        action: FreeAction,
    ) -> SimResult<()> {
        if kind != FreeKind::Host && !matches!(action, FreeAction::Pool(_)) {
            self.forget_stale_pool_alloc(p, ptr);
        }
        match action {
            FreeAction::Null => {
                let ok = match self.sem.free_null {
                    FreeNull::Ok => true,
                    FreeNull::Error => false,
                    // hipFree(NULL) is hipSuccess too (ihipFree).
                    FreeNull::ByDialect => matches!(self.dialect, Dialect::Runtime | Dialect::Hip),
                };
                if ok {
                    Ok(())
                } else {
                    Err(ErrorKind::InvalidValue.into())
                }
            }
            FreeAction::Pool(target) => {
                self.pool_release(p, ptr, target);
                Ok(())
            }
            FreeAction::Allocation => {
                self.free_allocation(p, ptr, true);
                self.procs[p].freed_ptrs.insert(ptr);
                Ok(())
            }
            FreeAction::WrongKind => Err(ErrorKind::InvalidValue.into()),
            FreeAction::IpcMapping => {
                self.hazard(
                    HazardKind::FreeOfIpcPointer,
                    p,
                    format!("cudaFree({ptr:#x}) on a pointer from ipc_open"),
                );
                match self.sem.free_of_ipc_pointer {
                    FreeOfIpcPointer::Error(k) => Err(k.into()),
                    FreeOfIpcPointer::Unmaps => self.close(p, ptr),
                }
            }
            FreeAction::Refused { .. } => {
                if self.procs[p].freed_ptrs.contains(&ptr) {
                    self.hazard(
                        HazardKind::DoubleFree,
                        p,
                        format!("cudaFree({ptr:#x}): this process already freed it"),
                    );
                    if self.mutant(MutantId::DoubleFreeSucceeds) {
                        return Ok(());
                    }
                }
                Err(ErrorKind::InvalidValue.into())
            }
        }
    }

    pub(crate) fn memset(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        value: u8,
        len: u64,
    ) -> SimResult<()> {
        if len == 0 {
            return Ok(());
        }
        if self.stale_memset(p, ptr, len, value) {
            return Ok(());
        }
        // Measured (H100, 580.159.04, runtime): cudaMemset of an IPC pointer
        // while another context of the process is current is InvalidValue.
        // (Copies and kernels from another context are not measured yet.)
        let current = self.current_ctx(p).ok().map(|(c, _)| c);
        let foreign_import = self.procs[p].region_at(ptr).is_some_and(|(_, r)| {
            r.import
                .as_ref()
                .is_some_and(|m| current.is_some_and(|c| c != m.ctx))
        });
        if foreign_import {
            return Err(ErrorKind::InvalidValue.into());
        }
        if let Some(pieces) = self.vmm_pieces(p, ptr, len, Access::Copy) {
            let pieces = pieces?;
            let mut written = Vec::with_capacity(pieces.len());
            for (at, id, off, n) in pieces {
                self.vmm_check_writable(p, at)?;
                written.push((id, off, n));
            }
            // Work on the legacy stream, as below.
            let start = self.legacy_start(p);
            let lane = self.begin_work(p, StreamId::LEGACY_DEFAULT);
            for (id, off, n) in written {
                self.note_write(p, StreamId::LEGACY_DEFAULT, lane, id, off, n);
                self.land_fill(lane, start, (id, off, n), value);
            }
            return Ok(());
        }
        let (id, off) = self.resolve(p, ptr, len, Access::Copy)?;
        self.vmm_check_writable(p, ptr)?;
        if self.mutant(MutantId::ImportWritesPrivate)
            && self.blocks.get(&id).is_some_and(|b| b.owner != p)
        {
            return Ok(());
        }
        // cudaMemset is work on the legacy stream, asynchronous with the
        // host for device memory ("API synchronization behavior").
        let start = self.legacy_start(p);
        let lane = self.begin_work(p, StreamId::LEGACY_DEFAULT);
        self.note_write(p, StreamId::LEGACY_DEFAULT, lane, id, off, len);
        self.land_fill(lane, start, (id, off, len), value);
        Ok(())
    }

    /// When work queued now on `p`'s legacy stream starts: after the work
    /// queued there before (and the blocking streams it waits for).
    fn legacy_start(&self, p: ProcessIndex) -> u64 {
        self.stream_start(p, StreamId::LEGACY_DEFAULT)
            .unwrap_or(self.events.clock)
    }

    /// A memset's bytes: written now when its stream is idle, else when the
    /// stream reaches it (`start`), after the work queued before it, as a
    /// kernel's (mem.data.memset-behind-queued-work: a process that reads
    /// them unsynchronized before then sees the old bytes).
    fn land_fill(&mut self, lane: usize, start: u64, (id, off, len): (u64, u64, u64), value: u8) {
        if start <= self.events.clock {
            if let Some(b) = self.blocks.get_mut(&id) {
                b.data.fill(off, len, value);
            }
            return;
        }
        self.queue_write(
            Some(lane),
            start,
            (id, off, len),
            KernelWrite::Byte(value),
            None,
        );
    }

    pub(crate) fn write(&mut self, p: ProcessIndex, ptr: u64, bytes: &[u8]) -> SimResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if let Some(pieces) = self.vmm_pieces(p, ptr, bytes.len() as u64, Access::Copy) {
            let pieces = pieces?;
            for &(at, ..) in &pieces {
                self.vmm_check_writable(p, at)?;
            }
            // A synchronization of the legacy stream, then work on it, as
            // below.
            self.host_waits_for(p, StreamId::LEGACY_DEFAULT);
            let lane = self.begin_work(p, StreamId::LEGACY_DEFAULT);
            let mut done = 0usize;
            for (_, id, off, n) in pieces {
                let part = &bytes[done..done + n as usize];
                if let Some(b) = self.blocks.get_mut(&id) {
                    b.data.write(off, part);
                }
                self.note_write(p, StreamId::LEGACY_DEFAULT, lane, id, off, n);
                done += n as usize;
            }
            return Ok(());
        }
        let (id, off) = self.resolve(p, ptr, bytes.len() as u64, Access::Copy)?;
        self.vmm_check_writable(p, ptr)?;
        if self.mutant(MutantId::ImportWritesPrivate)
            && self.blocks.get(&id).is_some_and(|b| b.owner != p)
        {
            return Ok(());
        }
        if let Some(b) = self.blocks.get_mut(&id) {
            b.data.write(off, bytes);
        }
        // A pageable copy first synchronizes the legacy stream, then may
        // return before its own bytes land ("API synchronization behavior").
        self.host_waits_for(p, StreamId::LEGACY_DEFAULT);
        let lane = self.begin_work(p, StreamId::LEGACY_DEFAULT);
        self.note_write(
            p,
            StreamId::LEGACY_DEFAULT,
            lane,
            id,
            off,
            bytes.len() as u64,
        );
        Ok(())
    }

    pub(crate) fn read(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        len: u64,
        access: Access,
    ) -> SimResult<Vec<u8>> {
        if len > 0
            && access == Access::Kernel
            && self.sem.stale_kernel_read != StaleKernelRead::Fault
        {
            if let Some(zeros) = self.stale_kernel_read(p, ptr, len) {
                // Still a kernel and a copy to the host on the legacy
                // stream, which the host waits for.
                self.begin_work(p, StreamId::LEGACY_DEFAULT);
                self.host_waits_for(p, StreamId::LEGACY_DEFAULT);
                return Ok(zeros);
            }
        }
        let target = if len == 0 {
            ReadTarget::Empty
        } else if let Some(pieces) = self.vmm_pieces(p, ptr, len, access) {
            ReadTarget::Pieces(pieces?)
        } else {
            let (id, off) = self.resolve(p, ptr, len, access)?;
            ReadTarget::Block(id, off)
        };
        // A copy to the host waits for the work queued on the legacy stream
        // (`drain`), but only once its pointer passed the checks above: a
        // copy refused as InvalidValue returns at once. On an H200
        // (580.159.04) a refused read did not wait for a stream wait on a
        // running record, whose exporter then ended and left the stream
        // waiting for good (explore seed 3122026 case 2243). A kernel read
        // (`device_read`) has drained already: it launches, then waits.
        if access == Access::Copy {
            self.drain(p);
        }
        let (id, off) = match target {
            ReadTarget::Empty => return Ok(Vec::new()),
            ReadTarget::Pieces(pieces) => {
                if len > MAX_READ {
                    return Err(too_long_to_read());
                }
                // Work on the legacy stream the host waits for, as below.
                self.begin_work(p, StreamId::LEGACY_DEFAULT);
                let mut bytes = Vec::with_capacity(len as usize);
                for (_, id, off, n) in pieces {
                    self.check_race(p, StreamId::LEGACY_DEFAULT, id, off, n);
                    match self.blocks.get(&id) {
                        Some(b) => bytes.extend(b.data.read(off, n as usize)),
                        None => bytes.resize(bytes.len() + n as usize, 0),
                    }
                }
                self.host_waits_for(p, StreamId::LEGACY_DEFAULT);
                return Ok(bytes);
            }
            ReadTarget::Block(id, off) => (id, off),
        };
        // A copy to the host (or the copy kernel before it) is work on the
        // legacy stream; the host waits for it.
        self.begin_work(p, StreamId::LEGACY_DEFAULT);
        self.check_race(p, StreamId::LEGACY_DEFAULT, id, off, len);
        self.host_waits_for(p, StreamId::LEGACY_DEFAULT);
        if len > MAX_READ {
            return Err(too_long_to_read());
        }
        #[allow(unused_mut)]
        let mut bytes = self
            .blocks
            .get(&id)
            .map(|b| b.data.read(off, len as usize))
            .unwrap_or_default();
        #[cfg(feature = "mutants")]
        if access == Access::Kernel && self.mutant(MutantId::NondeterministicKernelRead) {
            let n = crate::mutants::RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(b) = bytes.first_mut() {
                *b ^= n | 1;
            }
        }
        Ok(bytes)
    }

    /// `device_read`: the copy kernel as the real backend runs it
    /// (harness/src/cuda/worker.rs): `cuMemAlloc` of a `len`-byte output
    /// buffer, the kernel, a copy back, `cuMemFree`. The buffer is a small
    /// allocation like any other, so it lands in the current context's packed
    /// block (the first free slot) and keeps its bytes when freed: a later
    /// `device_read` whose source overlaps the next buffer reads the previous
    /// output there (mem.suballoc.device-read-buffer). Errors and hazards are
    /// those of the read alone.
    pub(crate) fn kernel_read(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        len: u64,
    ) -> SimResult<Vec<u8>> {
        let sticky_before = self.procs[p].sticky.is_some();
        let mut bytes = match self.read(p, ptr, len, Access::Kernel) {
            Ok(bytes) => bytes,
            // The buffer is allocated before the kernel runs, and after the
            // kernel faults its `cuMemFree` fails (the context is lost): it
            // stays where it landed, released VA included, and a pointer
            // there reads as device memory (mem.lifetime.faulting-read-leaves-its-buffer).
            // After a faulting read of a freed 3 MiB allocation a 2 MiB or a
            // 4 MiB reservation takes the freed base; without the read a
            // 2 MiB one takes the span's top, carved from its end as the
            // newest fresh range is (vmm.reserve.after-faulting-read).
            Err(Fail::Api(ErrorKind::IllegalAddress))
                if len > 0
                    && !sticky_before
                    && self.sem.sticky_errors == Switch::On
                    && self.sem.device_read_buffer != DeviceReadBuffer::Off =>
            {
                let dead = self.procs[p].dead.clone();
                let _ = self.alloc(p, MemKind::Device, len);
                self.procs[p].dead = dead;
                self.procs[p].fresh.newest = None;
                return Err(ErrorKind::IllegalAddress.into());
            }
            Err(e) => return Err(e),
        };
        if len == 0 || self.sem.device_read_buffer == DeviceReadBuffer::Off {
            return Ok(bytes);
        }
        // Stale pointers stay stale for the hazard log, and freed exports stay
        // as they were (opened after a device_read they are still
        // InvalidValue: mem.suballoc.device-read-buffer): the buffer is the
        // harness's, not the program's.
        let dead = self.procs[p].dead.clone();
        let freed_exports = self.freed_exports.clone();
        let va = {
            let proc = &self.procs[p];
            (
                proc.free_va.clone(),
                proc.va_releases,
                proc.va_next,
                proc.va_side_next,
                proc.reserved.clone(),
                proc.fresh,
            )
        };
        let blocks_before = self.blocks.len();
        let Ok(out) = self.alloc(p, MemKind::Device, len) else {
            return Ok(bytes);
        };
        let Some((id, off)) = self.procs[p].allocs.get(&out).map(|a| (a.block, a.offset)) else {
            return Ok(bytes);
        };
        let fresh = self.blocks.len() > blocks_before;
        if let Some(b) = self.blocks.get_mut(&id) {
            let (from, to) = (ptr.max(out), ptr.saturating_add(len).min(out + len));
            if from < to {
                let old = b.data.read(off + (from - out), (to - from) as usize);
                let at = (from - ptr) as usize;
                bytes[at..at + old.len()].copy_from_slice(&old);
            }
            // Only a shared block keeps the output: a block of its own goes
            // with the free below, its bytes unread.
            if !fresh {
                b.data.write(off, &bytes);
            }
        }
        self.free_allocation(p, out, false);
        // A buffer that needed a block of its own leaves no trace in the
        // process's VA (free spans, release stamps, arenas): the program's
        // next block gets the VA it would have got without the read, and a
        // re-open after a close and a device_read gets the closed mapping's
        // address (`device_read_buffer`, mem.suballoc.device-read-buffer).
        if fresh {
            let proc = &mut self.procs[p];
            (
                proc.free_va,
                proc.va_releases,
                proc.va_next,
                proc.va_side_next,
                proc.reserved,
                proc.fresh,
            ) = va;
        }
        self.procs[p].dead = dead;
        self.freed_exports = freed_exports;
        Ok(bytes)
    }

    /// A kernel read wholly inside VA the process released and has not
    /// handed out again: zeros where the reading context sees that VA
    /// mapped again (`stale_kernel_read`), with the hazard the stale pointer
    /// is; `None` (the kernel faults) elsewhere.
    fn stale_kernel_read(&mut self, p: ProcessIndex, ptr: u64, len: u64) -> Option<Vec<u8>> {
        let proc = &self.procs[p];
        if proc.region_at(ptr).is_some() || len > MAX_READ {
            return None;
        }
        let end = ptr.checked_add(len)?;
        let (base, free) = proc.free_va.containing(ptr, |f| f.span)?;
        let free = *free;
        let (pool, released) = (free.pool, free.released);
        if end > base.saturating_add(free.span) {
            return None;
        }
        let (ctx, device) = self.current_ctx(p).ok()?;
        // The shared event memory, made while the VA was free (`VaClaim`), is
        // mapped over one span (`event_memory_span`): a kernel of the
        // releasing context reads zeros there
        // (mem.close.kernel-read-after-close-event-memory) and faults in the
        // others.
        let claimed = proc.va_claims.iter().any(|c| {
            c.at >= released
                && c.mapped
                    .is_some_and(|(b, l)| ptr >= b && end <= b.saturating_add(l))
        }) && pool.ctx == ctx;
        // The first context created since the release claimed the VA; once
        // it is destroyed while a later one lives, the VA is unmapped for
        // the releasing context, event memory over it or not
        // (mem.lifetime.kernel-read-after-free-claim-context-destroyed).
        let created_since = |c: &&crate::world::Context| c.born >= released && !c.primary;
        let first_since = proc
            .contexts
            .values()
            .filter(created_since)
            .min_by_key(|c| c.serial);
        let claim_lapsed = first_since.is_some_and(|c| !c.alive)
            && proc
                .contexts
                .values()
                .filter(created_since)
                .any(|c| c.alive);
        let visible = match self.sem.stale_kernel_read {
            StaleKernelRead::Fault => false,
            StaleKernelRead::Remapped if claimed => !claim_lapsed,
            StaleKernelRead::Zeros => true,
            // A context made after the release reads zeros there
            // (mem.close.kernel-read-after-close-new-context,
            // mem.lifetime.kernel-read-after-free-new-context); a context that
            // already existed faults
            // (mem.close.kernel-read-after-close-other-context) unless it
            // released the VA and `device_read`'s own scratch buffer lands on
            // it (zeros: mem.lifetime.kernel-read-after-free; a fault when a
            // packing block has room for the scratch:
            // mem.close.kernel-read-after-close-scratch-elsewhere).
            StaleKernelRead::Remapped => {
                let born = proc.contexts.get(&ctx).map_or(0, |c| c.born);
                let freed = matches!(proc.dead_at(ptr).or(proc.dead_at(base)), Some(Gone::Freed));
                // Freed managed memory faults in every context, also one
                // created after the free
                // (mem.lifetime.kernel-read-after-free-managed-faults), and
                // so does freed stream-ordered memory: its pool keeps the VA
                // (mem.lifetime.kernel-read-after-free-async-faults).
                if freed && (pool.class == VaClass::Managed || pool.class.pooled()) {
                    return None;
                }
                // Closed from another context that still lives, the VA faults
                // even in a context made after the close
                // (mem.close.kernel-read-after-close-from-other-context), as a
                // free from there does.
                let elsewhere = proc.released_elsewhere(&free);
                let other_alive = elsewhere == Some(true);
                let later = proc
                    .contexts
                    .values()
                    .any(|c| c.born >= released && !c.primary);
                // Released while the primary context was current, VA a
                // created context used: zeros for a kernel of the primary
                // after a close (mem.close.kernel-read-after-close-from-primary),
                // and after a free while that context lives
                // (mem.lifetime.kernel-read-after-free-from-primary).
                let from_primary = free.released_in.is_some_and(|c| {
                    c != pool.ctx && proc.contexts.get(&c).is_some_and(|c| c.primary)
                });
                let released_here = from_primary && free.released_in == Some(ctx);
                if !freed {
                    released_here
                        || (!other_alive
                            && (born >= released
                                || (pool.ctx == ctx && later)
                                || ((pool.ctx == ctx || free.released_in == Some(pool.ctx))
                                    && self.scratch_covers(p, ctx, device, ptr, end, len))))
                } else {
                    // A freed allocation: freed while another (created)
                    // context was current, it faults everywhere until that
                    // context is destroyed, and reads zeros everywhere after
                    // (mem.lifetime.kernel-read-after-free-other-context-current,
                    // mem.lifetime.kernel-read-after-free-other-context-destroyed);
                    // else its own context also reads zeros once a context was
                    // created after the free
                    // (mem.lifetime.kernel-read-after-free-own-context-after-create).
                    let other_gone = elsewhere == Some(false);
                    // The scratch buffer of a kernel read from another context
                    // lands on it too: an allocation of a created context,
                    // freed there and read from the primary context, reads
                    // zeros
                    // (mem.lifetime.kernel-read-after-free-from-other-context).
                    // Freed while the primary context was current, an
                    // allocation of a created context reads zeros from a
                    // context created after the free
                    // (mem.lifetime.kernel-read-after-free-created-context-from-primary).
                    // The primary that freed it reads zeros while the
                    // allocation's context lives (`released_here`); gone with
                    // a destroyed context, it faults there.
                    let own_alive = proc.contexts.get(&pool.ctx).is_some_and(|c| c.alive);
                    // Only while the context whose creation claimed the VA
                    // lives (`claim_lapsed`).
                    let claimer_alive = first_since.is_some_and(|c| c.alive);
                    other_gone
                        || (from_primary && born >= released)
                        || (released_here && own_alive)
                        || (free.released_in == Some(pool.ctx)
                            && (born >= released
                                || (pool.ctx == ctx && claimer_alive)
                                || self.scratch_covers(p, ctx, device, ptr, end, len)))
                }
            }
        };
        if !visible {
            return None;
        }
        let kind = match self.procs[p].dead_at(ptr) {
            Some(Gone::Closed) => HazardKind::AccessAfterClose,
            _ => HazardKind::AccessAfterFree,
        };
        self.hazard(
            kind,
            p,
            format!("{ptr:#x}: a kernel read released VA (zeros)"),
        );
        // Zeros, or what a memset wrote there (`stale_memset`).
        Some(self.procs[p].stale_bytes.read(ptr, len as usize))
    }

    /// A memset wholly inside VA the process released and has not handed out
    /// again: with `stale_memset=first-new-context` it succeeds, and writes
    /// bytes later kernel reads there see, when the current context is the
    /// first one made after the release; `false` (the caller goes on to
    /// InvalidValue) elsewhere, in an older context and in a second new one
    /// alike (mem.close.memset-after-close-new-context).
    fn stale_memset(&mut self, p: ProcessIndex, ptr: u64, len: u64, value: u8) -> bool {
        if self.sem.stale_memset == StaleMemset::Refused {
            return false;
        }
        let proc = &self.procs[p];
        let Some(end) = ptr.checked_add(len) else {
            return false;
        };
        if proc.region_at(ptr).is_some() {
            return false;
        }
        let Some((base, free)) = proc.free_va.containing(ptr, |f| f.span) else {
            return false;
        };
        if end > base.saturating_add(free.span) {
            return false;
        }
        // A memory pool keeps the VA of what is freed into it: a memset
        // there is InvalidValue from any context (2 x H200 and H200,
        // 580.159.04: every fill, read and write of a freed stream-ordered
        // allocation in generated cases; pool.va.freed-allocation-memset).
        if free.pool.class.pooled() {
            return false;
        }
        // Released while another context was current (a free or a close from
        // there), the VA is not given back while that context lives:
        // InvalidValue (mem.close.memset-after-close-from-other-context), as
        // kernel reads fault there (`stale_kernel_read`).
        if proc.released_elsewhere(free) == Some(true) {
            return false;
        }
        // Released by a context destroyed since (its allocations go with
        // it): InvalidValue, also from the first context made after the
        // destroy, which the VA is handed to
        // (mem.context.memset-after-context-destroy).
        let destroyed = |c: &crate::world::CtxKey| proc.contexts.get(c).is_none_or(|c| !c.alive);
        if free.released_in.as_ref().is_some_and(destroyed) {
            return false;
        }
        let released = free.released;
        let first_new = proc
            .contexts
            .iter()
            .filter(|(_, c)| c.born >= released)
            .min_by_key(|(_, c)| c.serial)
            .map(|(&k, _)| k);
        let Ok((ctx, _)) = self.current_ctx(p) else {
            return false;
        };
        if first_new != Some(ctx) {
            return false;
        }
        let kind = match self.procs[p].dead_at(ptr) {
            Some(Gone::Closed) => HazardKind::AccessAfterClose,
            _ => HazardKind::AccessAfterFree,
        };
        self.hazard(kind, p, format!("{ptr:#x}: a memset of released VA"));
        self.procs[p].stale_bytes.fill(ptr, len, value);
        true
    }

    /// The released VA the shared event memory is mapped over, as a small
    /// allocation of the current context is placed: in the packing block
    /// when it has room (no released VA then:
    /// mem.close.kernel-read-event-memory-packing-block), else in a new
    /// block where `va_reuse` puts one, the lowest released span that fits
    /// (mem.close.kernel-read-after-close-event-memory,
    /// mem.close.kernel-read-event-memory-lowest-span); `None` on fresh VA.
    pub(crate) fn event_memory_span(&self, p: ProcessIndex) -> Option<(u64, u64)> {
        let (ctx, device) = self.current_ctx(p).ok()?;
        if self.sem.suballocation == Switch::On
            && self.packing_has_room(p, ctx, device, SUBALLOC_ALIGN)
        {
            return None;
        }
        let pool = VaPool {
            ctx,
            class: crate::world::VaClass::Device,
        };
        match self.procs[p].placement(BLOCK, pool)? {
            crate::world::Placement::Reuse(_, _, at) => Some((at, BLOCK)),
            crate::world::Placement::Fresh(_) => None,
        }
    }

    /// Whether the packing block of `ctx` on `device` has a free slot of
    /// `need` bytes, the first that fits being the one `alloc` would take.
    fn packing_has_room(
        &self,
        p: ProcessIndex,
        ctx: crate::world::CtxKey,
        device: u32,
        need: u64,
    ) -> bool {
        self.procs[p]
            .packing
            .get(&(ctx, device))
            .and_then(|id| self.blocks.get(id))
            .is_some_and(|b| b.owner_mapped && first_fit(&b.live, need, b.size).is_some())
    }

    /// Whether a fresh block for a `len`-byte allocation in `ctx` (the
    /// output buffer `device_read` allocates before its kernel runs,
    /// `device_read_buffer=allocated`; `kernel_read` makes it after the
    /// read, where it is placed by the same rules) would be mapped over
    /// `[ptr, end)`: no packing block has a free slot for it (`first_fit`),
    /// and the released VA `reserve_va` would hand out for it covers the
    /// range.
    fn scratch_covers(
        &self,
        p: ProcessIndex,
        ctx: crate::world::CtxKey,
        device: u32,
        ptr: u64,
        end: u64,
        len: u64,
    ) -> bool {
        if self.sem.device_read_buffer == DeviceReadBuffer::Off {
            return false;
        }
        let packed = self.sem.suballocation == Switch::On && len < BLOCK;
        if packed {
            let Some(need) = round_up(len, SUBALLOC_ALIGN) else {
                return false;
            };
            if self.packing_has_room(p, ctx, device, need) {
                return false;
            }
        }
        let Some(size) = (if packed {
            Some(BLOCK)
        } else {
            round_up(len, BLOCK)
        }) else {
            return false;
        };
        let pool = VaPool {
            ctx,
            class: crate::world::VaClass::Device,
        };
        // The scratch block lands where `va_reuse` puts any block: the lowest
        // released span of the current arena that fits, carved from its end
        // (mem.lifetime.va-reuse-lowest-range,
        // mem.close.kernel-read-after-close-scratch-elsewhere).
        let at = match self.procs[p].placement(size, pool) {
            Some(crate::world::Placement::Reuse(_, _, b) | crate::world::Placement::Fresh(b)) => b,
            None => return false,
        };
        ptr >= at && end <= at.saturating_add(size)
    }

    pub(crate) fn address_range(&self, p: ProcessIndex, ptr: u64) -> SimResult<(u64, u64)> {
        let proc = &self.procs[p];
        if let Some((base, a)) = proc.alloc_at(ptr) {
            return Ok((base, a.size));
        }
        if let Some((base, r)) = proc.region_at(ptr) {
            if let Some(m) = &r.import {
                // While another context of the process is current, an IPC
                // pointer is not found, as memset refuses it
                // (mem.attr.address-range-import-other-context).
                if self.current_ctx(p).is_ok_and(|(c, _)| c != m.ctx) {
                    return Err(ErrorKind::NotFound.into());
                }
                if self.sem.import_range == ImportRange::Allocation {
                    if let Some((o, size)) = m.export_at(ptr - base) {
                        return Ok((base.saturating_add(o), size));
                    }
                }
                return Ok((base, r.len));
            }
        }
        if let Some((base, size, _, accessible)) = self.vmm_range(p, ptr) {
            // Before cuMemSetAccess the mapping is not found
            // (vmm.map.address-range-before-set-access).
            if self.sem.vmm_range_before_access == crate::semantics::VmmRangeBeforeAccess::NotFound
                && !accessible
            {
                return Err(ErrorKind::NotFound.into());
            }
            return Ok((base, size));
        }
        Err(ErrorKind::NotFound.into())
    }

    pub(crate) fn pointer_info(&self, p: ProcessIndex, ptr: u64) -> PointerInfo {
        let proc = &self.procs[p];
        if let Some((_, a)) = proc.alloc_at(ptr) {
            let memory_type = match a.kind {
                MemKind::Device | MemKind::StreamOrdered => MemoryType::Device,
                MemKind::Managed => MemoryType::Managed,
                MemKind::PinnedHost => MemoryType::Host,
            };
            // Pinned host memory has no device ordinal to report: the real
            // backend asks for one only for device and managed memory
            // (mem.attr.pinned-host-no-device).
            let device = match a.kind {
                MemKind::PinnedHost => None,
                _ => proc.ordinal_of(a.device),
            };
            return PointerInfo {
                memory_type,
                device,
            };
        }
        if let Some((_, r)) = proc.region_at(ptr) {
            if let Some(m) = &r.import {
                return PointerInfo {
                    memory_type: MemoryType::Device,
                    device: proc.ordinal_of(m.device),
                };
            }
        }
        if let Some((_, _, device, _)) = self.vmm_range(p, ptr) {
            return PointerInfo {
                memory_type: MemoryType::Device,
                device: proc.ordinal_of(device),
            };
        }
        PointerInfo {
            memory_type: MemoryType::Unregistered,
            device: None,
        }
    }
}
