//! Virtual memory management (`cuMemCreate` and friends) and POSIX
//! shareable handles: physical allocations with requested handle types,
//! per-process handle and descriptor tables, VA reservations, mappings and
//! access rights.
//!
//! A physical allocation lives in a [`Block`] like any device memory; it is
//! referenced by every allocation handle (created or imported), every
//! mapping and every descriptor exported from it, in any process, and is
//! freed when the last reference goes (`cuMemRelease`: "the memory will be
//! freed when all outstanding mappings to it are unmapped"). Descriptor
//! numbers follow POSIX (the lowest free number, from 3); traces label
//! them, so the numbers themselves never reach a report.

use crate::semantics::{DriverFds, ExportRule, StaleVmmHandle, VmmCreateContext, VmmReserveVa};
use crate::vmm_state::{FdObject, HandleEntry, Phys, VmmMapping, VmmProc};
use crate::world::{
    containing, Access, Block, BlockId, Fail, MutantId, OwnerVmm, SimResult, VaClass, VaPool,
    World, BLOCK,
};
use ipc_harness::ErrorKind::{
    IllegalAddress, InvalidDevice, InvalidValue, NotSupported, OutOfMemory,
};
use ipc_harness::{
    Fd, GranularityKind, HandleTypes, MemKind, ProcessIndex, ShareableHandleType, VmmAccess,
};

/// The VA pool of reservations (`vmm_reserve_va`): under `shared` they
/// share released VA with device allocations and IPC mappings
/// (`VaClass::device_heap`), under `own-pool` they have VA of their own. A
/// reservation belongs to no context.
fn vmm_va_pool(rule: VmmReserveVa) -> VaPool {
    VaPool {
        ctx: u64::MAX,
        class: match rule {
            VmmReserveVa::Shared => VaClass::Vmm,
            VmmReserveVa::OwnPool => VaClass::VmmOwn,
        },
    }
}

/// `cuMemGetAllocationGranularity`, minimum and recommended alike, for every
/// handle type (measured: H100, driver 580.159.04).
pub(crate) const VMM_GRANULARITY: u64 = BLOCK;
/// Where allocation handle numbers start (any non-zero value would do).
const HANDLE_BASE: u64 = 0x1_0000;

/// One mapping's part of an access that runs across adjacent mappings
/// (`World::vmm_pieces`): its address, block, offset in the block, length.
pub(crate) type Piece = (u64, BlockId, u64, u64);

fn aligned(x: u64) -> bool {
    x != 0 && x % VMM_GRANULARITY == 0
}

impl World {
    fn vp(&mut self, p: ProcessIndex) -> &mut VmmProc {
        if self.vmm.procs.len() <= p {
            self.vmm.procs.resize_with(p + 1, VmmProc::default);
        }
        &mut self.vmm.procs[p]
    }

    fn add_ref(&mut self, phys: u64) {
        if let Some(ph) = self.vmm.phys.get_mut(&phys) {
            ph.refs += 1;
        }
    }

    /// Drop one reference; the last one frees the memory.
    fn drop_ref(&mut self, phys: u64) {
        let Some(ph) = self.vmm.phys.get_mut(&phys) else {
            return;
        };
        ph.refs = ph.refs.saturating_sub(1);
        if ph.refs > 0 {
            return;
        }
        let (device, size, block) = (ph.device, ph.size, ph.block);
        self.vmm.phys.remove(&phys);
        // An IPC mapping of the memory (the exporter's own copy of a freed
        // export, `World::open_own_freed_export`) keeps it: its close
        // releases the block (`World::maybe_release`).
        if let Some(b) = self.blocks.get_mut(&block) {
            if b.importers > 1 {
                b.importers -= 1;
                return;
            }
        }
        self.blocks.remove(&block);
        if let Some(used) = self.device_used.get_mut(device as usize) {
            *used = used.saturating_sub(size);
        }
    }

    /// A handle of `p` in use: live, released (per `vmm_stale_handle`), or unknown.
    fn live_handle(&mut self, p: ProcessIndex, handle: u64, call: &str) -> SimResult<HandleEntry> {
        let stale = self.sem.vmm_stale_handle;
        let vp = self.vp(p);
        if let Some(h) = vp.handles.get(&handle) {
            return Ok(*h);
        }
        if vp.released.contains_key(&handle) && stale == StaleVmmHandle::Crash {
            return Err(Fail::Crash {
                signal: 11,
                detail: format!("{call} dereferenced a released allocation handle (SIGSEGV)"),
            });
        }
        Err(InvalidValue.into())
    }

    fn physical_device(&self, p: ProcessIndex, device: u32) -> SimResult<u32> {
        self.procs[p]
            .visible
            .get(device as usize)
            .copied()
            .ok_or(Fail::Api(InvalidDevice))
    }

    pub(crate) fn vmm_granularity(
        &mut self,
        _p: ProcessIndex,
        _device: u32,
        _types: HandleTypes,
        _kind: GranularityKind,
    ) -> SimResult<u64> {
        // Measured: the same 2 MiB for both kinds and every handle type, and
        // even for a device ordinal that does not exist.
        Ok(VMM_GRANULARITY)
    }

    pub(crate) fn vmm_create(
        &mut self,
        p: ProcessIndex,
        device: u32,
        size: u64,
        types: HandleTypes,
    ) -> SimResult<u64> {
        // It names its device itself: with no context current it succeeds
        // (vmm.create.without-current-context).
        if self.sem.vmm_create_context == VmmCreateContext::Required {
            self.current_ctx(p)?;
        }
        let physical = self.physical_device(p, device)?;
        let known = HandleTypes::POSIX_FD.0 | HandleTypes::FABRIC.0;
        if types.0 & !known != 0 || !aligned(size) {
            return Err(InvalidValue.into());
        }
        if types.contains(ShareableHandleType::Fabric) {
            if let ExportRule::Refuse(kind) = self.sem.vmm_fabric {
                return Err(kind.into());
            }
        }
        self.charge_device(physical, size)?;
        // Pinned while any VMM reference lives; `drop_ref` removes it.
        let block = self.insert_block(Block::unowned(p, physical, size, 1));
        let phys = self.vmm.next_phys;
        self.vmm.next_phys += 1;
        self.vmm.phys.insert(
            phys,
            Phys {
                device: physical,
                size,
                types,
                block,
                refs: 1,
            },
        );
        // Until its handle is released, the allocation claims the VA the
        // process had free in its current arena: a freed export there is
        // NotPermitted, and InvalidValue again after the release, even while
        // an exported descriptor keeps the memory
        // (mem.lifetime.freed-export-va-claimed-by-vmm-create).
        let handle = self.new_handle(p, phys, false);
        self.procs[p].claim_free_va(crate::world::ClaimBy::Vmm, Some((phys, handle)), None);
        Ok(handle)
    }

    /// `p` holds a VA reservation.
    pub(crate) fn vmm_reserves_any(&self, p: ProcessIndex) -> bool {
        self.vmm
            .procs
            .get(p)
            .is_some_and(|vp| !vp.reservations.is_empty())
    }

    /// The VMM allocation handles a device allocation `p` makes now counts
    /// for the check-word rule (`OwnerVmm::handles`,
    /// mem.handle.check-word-with-vmm-allocation): none while physical
    /// memory is mapped into one of its reservations (an unmapped
    /// reservation does not matter: mem.handle.check-word-vmm-mapped), nor
    /// where it held device memory or an IPC mapping when it made its first
    /// VMM handle (mem.handle.check-word-vmm-after-device-memory).
    pub(crate) fn vmm_handles_for_check_word(&self, p: ProcessIndex) -> usize {
        let Some(vp) = self.vmm.procs.get(p) else {
            return 0;
        };
        // Mapped memory counts once access to it was set: mapped only, the
        // handle is still NotPermitted (mem.handle.check-word-vmm-mapped-without-access).
        let accessible = vp.maps.values().any(|m| m.granted != 0);
        if accessible || vp.first_handle_after_device_memory == Some(true) {
            return 0;
        }
        vp.handles.len()
    }

    /// VMM allocation handles `p` holds, made or imported, not released.
    pub(crate) fn vmm_handles_held(&self, p: ProcessIndex) -> usize {
        self.vmm.procs.get(p).map_or(0, |vp| vp.handles.len())
    }

    fn new_handle(&mut self, p: ProcessIndex, phys: u64, imported: bool) -> u64 {
        if self.vp(p).first_handle_after_device_memory.is_none() {
            // An IPC mapping open then counts as device memory held
            // (mem.handle.check-word-vmm-after-ipc-mapping).
            let proc = &self.procs[p];
            let holds_device_memory = proc.allocs.values().any(|a| a.kind == MemKind::Device)
                || proc.regions.values().any(|r| r.import.is_some());
            self.vp(p).first_handle_after_device_memory = Some(holds_device_memory);
        }
        let vp = self.vp(p);
        let h = HANDLE_BASE + vp.next_handle * 0x10;
        vp.next_handle += 1;
        vp.handles.insert(h, HandleEntry { phys, imported });
        h
    }

    fn new_fd(&mut self, p: ProcessIndex, obj: FdObject) -> i32 {
        if let FdObject::Allocation(phys) = obj {
            self.add_ref(phys);
        }
        let vp = self.vp(p);
        let fd = vp.lowest_free_fd();
        vp.fds.insert(fd, obj);
        fd
    }

    pub(crate) fn vmm_export(
        &mut self,
        p: ProcessIndex,
        handle: u64,
        ty: ShareableHandleType,
    ) -> SimResult<i32> {
        let h = self.live_handle(p, handle, "cuMemExportToShareableHandle")?;
        let types = match self.vmm.phys.get(&h.phys) {
            Some(ph) if !h.imported => ph.types,
            _ => HandleTypes::NONE,
        };
        if !types.contains(ty) {
            return Err(InvalidValue.into());
        }
        if ty == ShareableHandleType::Fabric {
            return Err(Fail::Harness(
                "fabric handles are not carried by the harness (only POSIX descriptors)".into(),
            ));
        }
        Ok(self.new_fd(p, FdObject::Allocation(h.phys)))
    }

    pub(crate) fn vmm_import(&mut self, p: ProcessIndex, fd: Fd) -> SimResult<u64> {
        self.current_ctx(p)?;
        let bad = self.sem.vmm_import_bad_fd;
        match self.vp(p).fds.get(&fd.0).copied() {
            Some(FdObject::Allocation(phys)) if self.vmm.phys.contains_key(&phys) => {
                self.add_ref(phys);
                // An imported allocation claims free VA as a created one does
                // (mem.lifetime.freed-export-va-claimed-by-vmm-import).
                let handle = self.new_handle(p, phys, true);
                self.procs[p].claim_free_va(crate::world::ClaimBy::Vmm, Some((phys, handle)), None);
                Ok(handle)
            }
            _ => Err(bad.into()),
        }
    }

    pub(crate) fn vmm_reserve(&mut self, p: ProcessIndex, size: u64) -> SimResult<u64> {
        if !aligned(size) {
            return Err(InvalidValue.into());
        }
        let pool = vmm_va_pool(self.sem.vmm_reserve_va);
        let va = self.procs[p]
            .reserve_va(size, pool)
            .ok_or(Fail::Api(OutOfMemory))?;
        self.vp(p).reservations.insert(va, size);
        Ok(va)
    }

    pub(crate) fn vmm_map(
        &mut self,
        p: ProcessIndex,
        va: u64,
        size: u64,
        offset: u64,
        handle: u64,
    ) -> SimResult<()> {
        let h = self.live_handle(p, handle, "cuMemMap")?;
        let Some(end) = va.checked_add(size) else {
            return Err(InvalidValue.into());
        };
        if !aligned(size) || va % VMM_GRANULARITY != 0 || offset % VMM_GRANULARITY != 0 {
            return Err(InvalidValue.into());
        }
        let vp = self.vp(p);
        let reserved = containing(&vp.reservations, va, |s| *s)
            .is_some_and(|(base, s)| end <= base.saturating_add(*s));
        let overlaps = vp
            .maps
            .range(..end)
            .next_back()
            .is_some_and(|(&b, m)| b.saturating_add(m.size) > va);
        if !reserved || overlaps {
            return Err(InvalidValue.into());
        }
        let phys_size = self.vmm.phys.get(&h.phys).map_or(0, |ph| ph.size);
        // Measured: a range past the allocation's end is NotSupported.
        if offset.saturating_add(size) > phys_size {
            return Err(NotSupported.into());
        }
        self.add_ref(h.phys);
        let buffer_id = self.new_buffer_id();
        self.vp(p).maps.insert(
            va,
            VmmMapping {
                size,
                phys: h.phys,
                offset,
                access: VmmAccess::None,
                granted: 0,
                buffer_id,
            },
        );
        Ok(())
    }

    /// The mappings exactly covering `[va, va + size)`, or None when a gap
    /// (or a partial mapping at either end) is left.
    fn covering(&mut self, p: ProcessIndex, va: u64, size: u64) -> Option<Vec<u64>> {
        let end = va.checked_add(size)?;
        if size == 0 {
            return None;
        }
        let vp = self.vp(p);
        let mut at = va;
        let mut bases = Vec::new();
        for (&b, m) in vp.maps.range(va..end) {
            if b != at {
                return None;
            }
            at = b.saturating_add(m.size);
            bases.push(b);
        }
        (at == end).then_some(bases)
    }

    pub(crate) fn vmm_set_access(
        &mut self,
        p: ProcessIndex,
        va: u64,
        size: u64,
        device: u32,
        access: VmmAccess,
    ) -> SimResult<()> {
        let physical = self.physical_device(p, device)?;
        let Some(bases) = self.covering(p, va, size) else {
            return Err(InvalidValue.into());
        };
        let vp = self.vp(p);
        for b in bases {
            if let Some(m) = vp.maps.get_mut(&b) {
                m.access = access;
                let bit = 1u64.checked_shl(physical).unwrap_or(0);
                if access == VmmAccess::None {
                    m.granted &= !bit;
                } else {
                    m.granted |= bit;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn vmm_unmap(&mut self, p: ProcessIndex, va: u64, size: u64) -> SimResult<()> {
        let Some(bases) = self.covering(p, va, size) else {
            // Measured (vmm.map.unmap-twice): a range of a reservation
            // with nothing mapped in it any more is unmapped again with
            // success.
            return if self.reserved_and_unmapped(p, va, size) {
                Ok(())
            } else {
                Err(InvalidValue.into())
            };
        };
        if self.mutant(MutantId::VmmUnmapKeepsMapping) {
            return Ok(());
        }
        for b in bases {
            if let Some(m) = self.vp(p).maps.remove(&b) {
                self.vp(p).mappings_removed += 1;
                self.drop_ref(m.phys);
            }
        }
        Ok(())
    }

    /// `p`'s VMM state now, for a block it makes (`Block::owner_vmm`).
    pub(crate) fn owner_vmm_now(&self, p: ProcessIndex) -> OwnerVmm {
        OwnerVmm {
            handles: self.vmm_handles_for_check_word(p),
            unmaps: self.mappings_removed_if_mapped(p),
        }
    }

    /// `VmmProc::mappings_removed` of `p` where it holds a VMM mapping now.
    fn mappings_removed_if_mapped(&self, p: ProcessIndex) -> Option<u64> {
        let vp = self.vmm.procs.get(p)?;
        (!vp.maps.is_empty()).then_some(vp.mappings_removed)
    }

    /// A freed export whose block came while its owner held a VMM mapping
    /// (`OwnerVmm::unmaps`) is InvalidValue once the owner unmapped a
    /// VMM mapping since, whatever holds its address now
    /// (mem.lifetime.freed-export-after-vmm-unmap).
    pub(crate) fn vmm_unmapped_since(&self, owner: ProcessIndex, at_alloc: Option<u64>) -> bool {
        at_alloc.is_some_and(|n| {
            self.vmm
                .procs
                .get(owner)
                .is_some_and(|vp| vp.mappings_removed > n)
        })
    }

    /// Whether `[va, va + size)` lies inside one of `p`'s reservations
    /// and no mapping overlaps it.
    fn reserved_and_unmapped(&mut self, p: ProcessIndex, va: u64, size: u64) -> bool {
        let Some(end) = va.checked_add(size).filter(|_| size > 0) else {
            return false;
        };
        let vp = self.vp(p);
        let inside = vp
            .reservations
            .range(..=va)
            .next_back()
            .is_some_and(|(&base, &len)| base.saturating_add(len) >= end);
        let overlaps = vp
            .maps
            .range(..end)
            .next_back()
            .is_some_and(|(&b, m)| b.saturating_add(m.size) > va);
        inside && !overlaps
    }

    pub(crate) fn vmm_address_free(
        &mut self,
        p: ProcessIndex,
        va: u64,
        size: u64,
    ) -> SimResult<()> {
        let vp = self.vp(p);
        if vp.reservations.get(&va) != Some(&size) {
            return Err(InvalidValue.into());
        }
        // Measured: freeing a reservation that still has mappings is refused.
        let end = va.saturating_add(size);
        if vp.maps.range(va..end).next().is_some() {
            return Err(InvalidValue.into());
        }
        vp.reservations.remove(&va);
        let pool = vmm_va_pool(self.sem.vmm_reserve_va);
        self.procs[p].release_va(va, size, pool);
        Ok(())
    }

    pub(crate) fn vmm_release(&mut self, p: ProcessIndex, handle: u64) -> SimResult<()> {
        let vp = self.vp(p);
        let Some(h) = vp.handles.remove(&handle) else {
            // Measured: a second release is InvalidValue, not a crash.
            return Err(InvalidValue.into());
        };
        vp.released.insert(handle, ());
        // The allocation's claim ends with its handle, and so does its
        // hold on the VA it took: claims made meanwhile passed that VA over
        // (mem.lifetime.vmm-claim-holds-va-until-release).
        self.procs[p].end_claims(|c| c.vmm == Some((h.phys, handle)));
        self.drop_ref(h.phys);
        Ok(())
    }

    pub(crate) fn fd_close(&mut self, p: ProcessIndex, fd: Fd) -> SimResult<()> {
        match self.vp(p).fds.remove(&fd.0) {
            Some(FdObject::Allocation(phys)) => {
                self.drop_ref(phys);
                Ok(())
            }
            Some(FdObject::Foreign | FdObject::Pool(_)) => Ok(()),
            // Not one the process got from an op: the harness refuses it.
            Some(FdObject::Driver) => {
                self.vp(p).fds.insert(fd.0, FdObject::Driver);
                Err(InvalidValue.into())
            }
            // EBADF.
            None => Err(InvalidValue.into()),
        }
    }

    /// `cuCtxCreate` made `ctx`: it opens two descriptors the context holds
    /// until `cuCtxDestroy` (`driver_fds`;
    /// mem.context.create-takes-two-descriptors).
    pub(crate) fn driver_fd_for_context(&mut self, p: ProcessIndex, ctx: crate::world::CtxKey) {
        if self.sem.driver_fds != DriverFds::None {
            let first = self.new_fd(p, FdObject::Driver);
            let second = self.new_fd(p, FdObject::Driver);
            self.vp(p).ctx_fds.insert(ctx, [first, second]);
        }
    }

    /// `cuCtxDestroy` of `ctx`: its descriptors close.
    pub(crate) fn driver_fd_of_context_closes(
        &mut self,
        p: ProcessIndex,
        ctx: crate::world::CtxKey,
    ) {
        let vp = self.vp(p);
        for fd in vp.ctx_fds.remove(&ctx).into_iter().flatten() {
            vp.fds.remove(&fd);
        }
    }

    /// A POSIX-exportable pool was created: it opens a descriptor the pool
    /// holds until it is destroyed (`driver_fds`, `pools.rs`).
    pub(crate) fn driver_fd_for_pool(&mut self, p: ProcessIndex) -> Option<i32> {
        (self.sem.driver_fds != DriverFds::None).then(|| self.new_fd(p, FdObject::Driver))
    }

    /// The driver closes its descriptor `fd` of `p`.
    pub(crate) fn driver_fd_closes(&mut self, p: ProcessIndex, fd: i32) {
        self.vp(p).fds.remove(&fd);
    }

    /// An interprocess event was made: the process's first opens a
    /// descriptor it keeps (`driver_fds`).
    pub(crate) fn driver_fd_for_ipc_event(&mut self, p: ProcessIndex) {
        if self.sem.driver_fds == DriverFds::ContextsAndIpcEvents && !self.vp(p).ipc_event_fd {
            self.vp(p).ipc_event_fd = true;
            self.new_fd(p, FdObject::Driver);
        }
    }

    pub(crate) fn fd_open_null_device(&mut self, p: ProcessIndex) -> SimResult<i32> {
        Ok(self.new_fd(p, FdObject::Foreign))
    }

    /// A new descriptor of `p` for the exported memory pool `pool` (`pools.rs`).
    pub(crate) fn new_fd_for_pool(&mut self, p: ProcessIndex, pool: u64) -> i32 {
        self.new_fd(p, FdObject::Pool(pool))
    }

    /// What descriptor `fd` of `p` names; `None` for a closed or never
    /// opened number.
    pub(crate) fn fd_object(&mut self, p: ProcessIndex, fd: Fd) -> Option<FdObject> {
        self.vp(p).fds.get(&fd.0).copied()
    }

    /// `SCM_RIGHTS`: `to` gets its own descriptor for `from`'s open file.
    pub(crate) fn transfer_fd(
        &mut self,
        from: ProcessIndex,
        fd: Fd,
        to: ProcessIndex,
    ) -> SimResult<i32> {
        if self.procs.get(to).is_none_or(|t| t.exited) {
            return Err(Fail::Harness("the receiving process is not running".into()));
        }
        let obj = match self.vp(from).fds.get(&fd.0).copied() {
            // The harness sends only descriptors the process got from an op.
            None | Some(FdObject::Driver) => return Err(InvalidValue.into()),
            Some(obj) => obj,
        };
        Ok(self.new_fd(to, obj))
    }

    /// `pidfd_getfd`: `to` gets its own descriptor for whatever `owner`'s
    /// number `fd` is (one the driver opened for itself too: the kernel does
    /// not ask whose it is, and in `to` it is just a file); `None` when
    /// `owner` has no such number (`EBADF`). The op opens the pidfd first
    /// (`pidfd_open`), which takes the lowest free number, and closes it
    /// after: the copy gets the next free number
    /// (vmm.pidfd.copy-numbered-after-the-pidfd).
    pub(crate) fn copy_fd(&mut self, owner: ProcessIndex, fd: Fd, to: ProcessIndex) -> Option<i32> {
        let obj = match self.vp(owner).fds.get(&fd.0).copied()? {
            FdObject::Driver => FdObject::Foreign,
            obj => obj,
        };
        let pidfd = self.new_fd(to, FdObject::Foreign);
        let copy = self.new_fd(to, obj);
        self.vp(to).fds.remove(&pidfd);
        Some(copy)
    }

    /// Where an access to `[ptr, ptr + len)` lands when `ptr` is in a VMM
    /// mapping of `p`; None when it is not (the caller goes on as usual).
    pub(crate) fn vmm_resolve(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        len: u64,
        access: Access,
    ) -> Option<SimResult<(BlockId, u64)>> {
        let before = self.sem.vmm_access_before_set;
        let vp = self.vmm.procs.get(p)?;
        let (base, m) = containing(&vp.maps, ptr, |m| m.size)?;
        let m = *m;
        let fault = match access {
            Access::Copy => InvalidValue,
            Access::Kernel => IllegalAddress,
        };
        let inside = ptr
            .checked_add(len)
            .is_some_and(|end| end <= base.saturating_add(m.size));
        if !inside {
            return Some(Err(fault.into()));
        }
        // Access is granted per device: a copy or kernel from a context on a
        // device the mapping was not opened to is refused like one before any
        // cuMemSetAccess, InvalidValue
        // (multidev.vmm.copy-from-device-without-access).
        let device = self.current_ctx(p).ok().map(|(_, d)| d);
        let granted_here = device.is_none_or(|d| m.granted & 1u64.checked_shl(d).unwrap_or(0) != 0);
        if m.access == VmmAccess::None || !granted_here {
            let kind = match access {
                Access::Copy => before,
                Access::Kernel => IllegalAddress,
            };
            return Some(Err(kind.into()));
        }
        let block = self.vmm.phys.get(&m.phys)?.block;
        Some(Ok((block, m.offset + (ptr - base))))
    }

    /// Where an access to `[ptr, ptr + len)` lands when it starts in a VMM
    /// mapping of `p` and runs on past its end into the mappings that
    /// follow it in the same VA without a gap (adjacent mappings of one
    /// reservation, as PyTorch's expandable segments make them): one piece
    /// per mapping, `(address, block, offset in block, length)`, each
    /// checked as [`World::vmm_resolve`] checks one. `None` when `ptr` is
    /// in no VMM mapping, or the access stays inside its mapping (the
    /// caller resolves it as usual). A gap, or a mapping without access,
    /// anywhere in the range faults the whole access.
    pub(crate) fn vmm_pieces(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        len: u64,
        access: Access,
    ) -> Option<SimResult<Vec<Piece>>> {
        let vp = self.vmm.procs.get(p)?;
        let (base, m) = containing(&vp.maps, ptr, |m| m.size)?;
        let end = ptr.checked_add(len)?;
        if end <= base.saturating_add(m.size) {
            return None;
        }
        let mut pieces = Vec::new();
        let mut at = ptr;
        while at < end {
            let here = self
                .vmm
                .procs
                .get(p)
                .and_then(|vp| containing(&vp.maps, at, |m| m.size))
                .map(|(b, m)| (b, m.size));
            let Some((b, size)) = here else {
                let fault = match access {
                    Access::Copy => InvalidValue,
                    Access::Kernel => IllegalAddress,
                };
                return Some(Err(fault.into()));
            };
            let n = end.min(b.saturating_add(size)) - at;
            match self.vmm_resolve(p, at, n, access)? {
                Ok((block, offset)) => pieces.push((at, block, offset, n)),
                Err(e) => return Some(Err(e)),
            }
            at += n;
        }
        Some(Ok(pieces))
    }

    /// A copy or memset into a VMM mapping needs read-write access (measured:
    /// `cuMemcpyHtoD` into a read-only mapping is InvalidValue). Called after
    /// `resolve`, so only the access mode is left to check.
    pub(crate) fn vmm_check_writable(&self, p: ProcessIndex, ptr: u64) -> SimResult<()> {
        let read_only = self
            .vmm
            .procs
            .get(p)
            .and_then(|vp| containing(&vp.maps, ptr, |m| m.size))
            .is_some_and(|(_, m)| m.access == VmmAccess::Read);
        if read_only {
            Err(InvalidValue.into())
        } else {
            Ok(())
        }
    }

    /// The VA `p`'s VMM reservations hold, `(base, len)`.
    pub(crate) fn vmm_reservation_spans(&self, p: ProcessIndex) -> Vec<(u64, u64)> {
        self.vmm
            .procs
            .get(p)
            .map(|vp| vp.reservations.iter().map(|(&b, &len)| (b, len)).collect())
            .unwrap_or_default()
    }

    /// Whether `addr` lies in a VA reservation of `p`.
    pub(crate) fn vmm_reserved_at(&self, p: ProcessIndex, addr: u64) -> bool {
        self.vmm
            .procs
            .get(p)
            .is_some_and(|vp| containing(&vp.reservations, addr, |s| *s).is_some())
    }

    /// The physical memory the VMM mapping of `p` shows at `addr`: its block
    /// and the offset in it.
    pub(crate) fn vmm_block_at(&self, p: ProcessIndex, addr: u64) -> Option<(BlockId, u64)> {
        let vp = self.vmm.procs.get(p)?;
        let (base, m) = containing(&vp.maps, addr, |m| m.size)?;
        let block = self.vmm.phys.get(&m.phys)?.block;
        Some((block, m.offset.saturating_add(addr - base)))
    }

    /// The VMM mapping of `p` containing `ptr`: its base, size, physical
    /// device, and whether any `cuMemSetAccess` has made it accessible.
    pub(crate) fn vmm_range(&self, p: ProcessIndex, ptr: u64) -> Option<(u64, u64, u32, bool)> {
        let vp = self.vmm.procs.get(p)?;
        let (base, m) = containing(&vp.maps, ptr, |m| m.size)?;
        let device = self.vmm.phys.get(&m.phys)?.device;
        Some((base, m.size, device, m.access != VmmAccess::None))
    }

    /// The process exits: its handles, mappings and descriptors go.
    pub(crate) fn vmm_exit(&mut self, p: ProcessIndex) {
        let Some(vp) = self.vmm.procs.get_mut(p) else {
            return;
        };
        let mut refs: Vec<u64> = Vec::new();
        refs.extend(vp.handles.values().map(|h| h.phys));
        refs.extend(vp.maps.values().map(|m| m.phys));
        refs.extend(vp.fds.values().filter_map(|f| match f {
            FdObject::Allocation(phys) => Some(*phys),
            FdObject::Foreign | FdObject::Driver | FdObject::Pool(_) => None,
        }));
        *vp = VmmProc::default();
        for phys in refs {
            self.drop_ref(phys);
        }
    }

    /// Physical VMM allocations alive (for tests).
    #[cfg(test)]
    pub(crate) fn vmm_live_allocations(&self) -> usize {
        self.vmm.phys.len()
    }
}
