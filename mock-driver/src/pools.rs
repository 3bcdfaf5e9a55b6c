//! Memory pools shared between processes (the stream-ordered allocator's
//! IPC): pools with handle types, their export as a POSIX descriptor and
//! import in another process, allocations from a pool, the export and
//! import of one allocation's pointer, and which devices may access a
//! pool's memory.
//!
//! A pool allocation is a stream-ordered allocation of the process that
//! made it (`World::alloc_on`), placed on the pool's device whatever
//! device the allocating stream's context is on. An imported pointer is a
//! mapping of the exporter's block in the importer, as an IPC open is, so
//! both processes see the same bytes and the exporter's free while an
//! importer still maps it is the free-while-mapped hazard ("The imported
//! memory must be freed from all importing processes before being freed in
//! the exporting process", `cudaMemPoolImportPointer`). The importer frees
//! an imported pointer with `cudaFreeAsync` or `cudaFree` ("The pointer may
//! be freed with cudaFree or cudaFreeAsync"): that unmaps it only.
//!
//! Access (`cudaMemPoolSetAccess`): a pool's memory is accessible from its
//! resident device, and from another device once the pool handle the
//! memory came through grants it; each process's handle grants its own
//! ("Imported memory pools are initially only accessible from their
//! resident device. The imported memory pool does not inherit any
//! accessibility set by the exporting process", CUDA Programming Guide,
//! "Set Access in the Importing Process"). A copy or memset from a context
//! on a device without access is InvalidValue, a kernel faults.
//!
//! An IPC pool keeps the memory of allocations its creator freed ("IPC
//! pools currently do not support releasing physical blocks back to the
//! OS"): a late import of a freed allocation maps it (`pool_import_freed`).
//!
//! Where the documentation names no error code, the simulator's choice is
//! given with its clause id; those clauses are unmeasured until a GPU run
//! says otherwise.

use crate::pool_state::{
    PoolAlloc, PoolHandle, PoolImport, PoolProc, PtrExport, SimPool, POOL_CHUNK,
};
use crate::semantics::{PoolFreedPeerAccess, PoolImportFreed, PoolPtrReimport, PoolReimport};
use crate::small_map::SmallMap;
use crate::vmm_state::FdObject;
use crate::world::{Access, Allocation, Fail, Mapping, Region, SimResult, VaClass, VaPool, World};
use ipc_harness::ErrorKind::{
    Contained, IllegalAddress, InvalidDevice, InvalidValue, NotSupported, OutOfMemory, Unknown,
};
use ipc_harness::{
    Fd, FreeKind, HandleTypes, HazardKind, MemKind, PoolPtrExport, ProcessIndex,
    ShareableHandleType, VmmAccess,
};

/// The first bytes of the simulator's pointer export data.
const EXPORT_MAGIC: [u8; 8] = *b"simpool\0";
/// Where pool handle numbers start (any non-zero value would do).
const POOL_HANDLE_BASE: u64 = 0x5_0000;

fn encode(export: u64, pool: u64) -> PoolPtrExport {
    let mut bytes = [0u8; 64];
    bytes[..8].copy_from_slice(&EXPORT_MAGIC);
    bytes[8..16].copy_from_slice(&export.to_le_bytes());
    bytes[16..24].copy_from_slice(&pool.to_le_bytes());
    PoolPtrExport(bytes)
}

fn decode(data: &PoolPtrExport) -> Option<u64> {
    if data.0[..8] != EXPORT_MAGIC {
        return None;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&data.0[8..16]);
    Some(u64::from_le_bytes(id))
}

/// `cudaMemAccessFlags` as `pool_get_access` answers them.
fn access_flags(access: VmmAccess) -> u64 {
    match access {
        VmmAccess::None => 0,
        VmmAccess::Read => 1,
        VmmAccess::ReadWrite => 3,
    }
}

/// Which pool memory a free releases (`World::pool_free_target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolFree {
    /// A pointer imported from another process's pool: unmapped.
    Import,
    /// An allocation from a pool: freed.
    Allocation,
}

impl World {
    fn pp(&mut self, p: ProcessIndex) -> &mut PoolProc {
        if self.pools.procs.len() <= p {
            self.pools.procs.resize_with(p + 1, PoolProc::default);
        }
        &mut self.pools.procs[p]
    }

    fn new_pool_handle(&mut self, p: ProcessIndex, pool: u64, imported: bool) -> u64 {
        let pp = self.pp(p);
        let h = POOL_HANDLE_BASE + pp.next_handle * 0x10;
        pp.next_handle += 1;
        pp.handles.insert(
            h,
            PoolHandle {
                pool,
                imported,
                ..PoolHandle::default()
            },
        );
        h
    }

    fn new_pool(&mut self, p: ProcessIndex, device: u32, types: HandleTypes, default: bool) -> u64 {
        let id = self.pools.next_pool;
        self.pools.next_pool += 1;
        self.pools.pools.insert(
            id,
            SimPool {
                types,
                default,
                shared: false,
                device,
                owner: p,
                destroyed: false,
                retained: Vec::new(),
            },
        );
        id
    }

    /// A live pool handle of `p`; a destroyed or unknown one is InvalidValue.
    fn pool_handle(&mut self, p: ProcessIndex, handle: u64) -> SimResult<PoolHandle> {
        self.pp(p)
            .handles
            .get(&handle)
            .cloned()
            .ok_or(InvalidValue.into())
    }

    fn pool_of(&self, id: u64) -> SimResult<&SimPool> {
        self.pools.pools.get(&id).ok_or(InvalidValue.into())
    }

    fn pool_physical_device(&self, p: ProcessIndex, device: u32) -> SimResult<u32> {
        self.procs[p]
            .visible
            .get(device as usize)
            .copied()
            .ok_or(InvalidDevice.into())
    }

    /// `cudaMemPoolCreate`: pinned device memory on `device` with `types`.
    pub(crate) fn pool_create(
        &mut self,
        p: ProcessIndex,
        device: u32,
        types: HandleTypes,
    ) -> SimResult<u64> {
        self.current_ctx(p)?;
        let physical = self.pool_physical_device(p, device)?;
        let known = HandleTypes::POSIX_FD.0 | HandleTypes::FABRIC.0;
        if types.0 & !known != 0 {
            return Err(InvalidValue.into());
        }
        let pool = self.new_pool(p, physical, types, false);
        let h = self.new_pool_handle(p, pool, false);
        // The real driver opens a descriptor for a POSIX-exportable pool and
        // holds it until the pool is destroyed: explore found later
        // descriptor numbers shifted by one on H100 / 580.159.04 (incidental;
        // pools without handle types unmeasured, given none).
        if types.contains(ShareableHandleType::PosixFd) {
            if let Some(fd) = self.driver_fd_for_pool(p) {
                self.pp(p).driver_fds.insert(h, fd);
            }
        }
        Ok(h)
    }

    /// `cudaDeviceGetDefaultMemPool`: the same pool every time, with no
    /// handle types (pool.export.default-pool-not-exportable).
    pub(crate) fn pool_default(&mut self, p: ProcessIndex, device: u32) -> SimResult<u64> {
        self.current_ctx(p)?;
        let physical = self.pool_physical_device(p, device)?;
        if let Some(&h) = self.pp(p).defaults.get(&physical) {
            return Ok(h);
        }
        let pool = self.new_pool(p, physical, HandleTypes::NONE, true);
        let h = self.new_pool_handle(p, pool, false);
        self.pp(p).defaults.insert(physical, h);
        Ok(h)
    }

    /// `cudaMemPoolDestroy`. Allocations still live stay valid ("the
    /// resources associated with the pool will be released automatically
    /// once there are no more outstanding allocations"), and so do pointers
    /// imported through an imported pool. Destroying a default pool is
    /// InvalidValue (simulator choice,
    /// pool.lifetime.default-pool-not-destroyable, unmeasured).
    pub(crate) fn pool_destroy(&mut self, p: ProcessIndex, handle: u64) -> SimResult<()> {
        let h = self.pool_handle(p, handle)?;
        if self.pool_of(h.pool)?.default {
            return Err(InvalidValue.into());
        }
        let pp = self.pp(p);
        pp.handles.remove(&handle);
        pp.destroyed.insert(handle);
        let driver_fd = pp.driver_fds.remove(&handle);
        let mut held = Vec::new();
        pp.held_va.retain(|&(h, base)| {
            if h == handle {
                held.push(base);
            }
            h != handle
        });
        if let Some(fd) = driver_fd {
            self.driver_fd_closes(p, fd);
        }
        // The VA it held for what it backed goes back (explore case 249 of
        // the H100's 2026-11-27 benchmark: an import took the address of
        // an allocation of a pool destroyed before, and no allocation took
        // that of a freed pointer of a pool still imported).
        for base in held {
            self.procs[p].unhold_va(base);
        }
        if !h.imported {
            self.pool_gone(h.pool);
        }
        Ok(())
    }

    /// The creator of `pool` destroyed it or exited: the memory it kept of
    /// freed allocations goes (unless an importer still maps it).
    fn pool_gone(&mut self, pool: u64) {
        let Some(sp) = self.pools.pools.get_mut(&pool) else {
            return;
        };
        sp.destroyed = true;
        let retained = std::mem::take(&mut sp.retained);
        for block in retained {
            if let Some(b) = self.blocks.get_mut(&block) {
                b.pool_kept = false;
            }
            self.maybe_release(block);
        }
    }

    /// The process exits: the pools it created go, as if destroyed.
    pub(crate) fn pools_exit(&mut self, p: ProcessIndex) {
        let owned: Vec<u64> = self
            .pools
            .pools
            .iter()
            .filter(|(_, sp)| sp.owner == p && !sp.destroyed)
            .map(|(&id, _)| id)
            .collect();
        for pool in owned {
            self.pool_gone(pool);
        }
        if let Some(pp) = self.pools.procs.get_mut(p) {
            *pp = PoolProc::default();
        }
    }

    /// `cudaMemPoolExportToShareableHandle` as a POSIX descriptor. Only a
    /// pool created with the POSIX handle type exports ("To create an IPC
    /// capable mempool, create a mempool with a CUmemAllocationHandleType
    /// other than cudaMemHandleTypeNone"); otherwise InvalidValue
    /// (pool.export.needs-handle-types), as for an imported pool (simulator
    /// choice).
    pub(crate) fn pool_export(&mut self, p: ProcessIndex, handle: u64) -> SimResult<i32> {
        let h = self.pool_handle(p, handle)?;
        let types = self.pool_of(h.pool)?.types;
        if h.imported || !types.contains(ShareableHandleType::PosixFd) {
            return Err(InvalidValue.into());
        }
        if let Some(pool) = self.pools.pools.get_mut(&h.pool) {
            pool.shared = true;
        }
        Ok(self.new_fd_for_pool(p, h.pool))
    }

    /// `cudaMemPoolImportFromShareableHandle` of a POSIX descriptor: a
    /// descriptor of an exported pool imports it. Measured on H100 /
    /// 580.159.04, both dialects (pool.import.bad-descriptors): a closed
    /// number and `/dev/null` are Unknown, a VMM allocation's descriptor is
    /// NotSupported. A pool's descriptor whose pool is gone: InvalidValue
    /// (simulator choice, unmeasured). A pool this process already imported
    /// (and did not destroy) answers as `pool_reimport` says
    /// (pool.import.same-pool-twice).
    pub(crate) fn pool_import(&mut self, p: ProcessIndex, fd: Fd) -> SimResult<u64> {
        self.current_ctx(p)?;
        match self.fd_object(p, fd) {
            Some(FdObject::Pool(pool)) if self.pools.pools.contains_key(&pool) => {
                let again = self
                    .pp(p)
                    .handles
                    .iter()
                    .find(|(_, h)| h.imported && h.pool == pool)
                    .map(|(&handle, _)| handle);
                // A second import claims no freed export's VA: its handle
                // stays InvalidValue
                // (mem.lifetime.pool-reimport-leaves-freed-export-invalid).
                match (again, self.sem.pool_reimport) {
                    (Some(handle), PoolReimport::SamePool) => Ok(handle),
                    _ => Ok(self.new_pool_handle(p, pool, true)),
                }
            }
            Some(FdObject::Pool(_)) => Err(InvalidValue.into()),
            Some(FdObject::Allocation(_)) => Err(NotSupported.into()),
            None | Some(FdObject::Foreign | FdObject::Driver) => Err(Unknown.into()),
        }
    }

    /// `cudaMemPoolSetAccess` with one descriptor: `device` (an ordinal of
    /// this process) gets `access` to the memory that came through this
    /// pool handle, in this process only. A device that does not exist is
    /// InvalidValue; one that cannot peer with the pool's device
    /// InvalidDevice ("If the peer capability is not checked, the set access
    /// may fail with cudaErrorInvalidDevice"); taking the resident device's
    /// access away InvalidValue ("This access cannot be revoked"; the error
    /// is the simulator's choice, unmeasured).
    pub(crate) fn pool_set_access(
        &mut self,
        p: ProcessIndex,
        handle: u64,
        device: u32,
        access: VmmAccess,
    ) -> SimResult<()> {
        let h = self.pool_handle(p, handle)?;
        let physical = self
            .pool_physical_device(p, device)
            .map_err(|_| Fail::Api(InvalidValue))?;
        let resident = self.pool_of(h.pool)?.device;
        if physical == resident {
            return if access == VmmAccess::ReadWrite {
                Ok(())
            } else {
                Err(InvalidValue.into())
            };
        }
        if !self.topology.can_peer(physical, resident) {
            return Err(InvalidDevice.into());
        }
        if let Some(h) = self.pp(p).handles.get_mut(&handle) {
            h.access.insert(physical, access);
        }
        Ok(())
    }

    /// `cudaMemPoolGetAccess` for `device` (an ordinal of this process): the
    /// `cudaMemAccessFlags` this process's pool handle gives that device (0
    /// none, 1 read, 3 read-write). The resident device has read-write
    /// access ("By default, allocations are accessible from the device
    /// where the allocations are located"), imported pools included
    /// ("initially only accessible from their resident device").
    pub(crate) fn pool_get_access(
        &mut self,
        p: ProcessIndex,
        handle: u64,
        device: u32,
    ) -> SimResult<u64> {
        let h = self.pool_handle(p, handle)?;
        let physical = self
            .pool_physical_device(p, device)
            .map_err(|_| Fail::Api(InvalidValue))?;
        if physical == self.pool_of(h.pool)?.device {
            return Ok(access_flags(VmmAccess::ReadWrite));
        }
        let access = h.access.get(&physical).copied().unwrap_or(VmmAccess::None);
        Ok(access_flags(access))
    }

    /// The error an access of pool memory at `ptr` by `p` gets when its
    /// current context's device has no access to it (see the module docs):
    /// InvalidValue for a copy or memset, IllegalAddress for a kernel.
    /// `None` when `ptr` is no pool memory of `p`, or access is granted.
    pub(crate) fn pool_access_denied(
        &self,
        p: ProcessIndex,
        ptr: u64,
        access: Access,
    ) -> Option<Fail> {
        let pp = self.pools.procs.get(p)?;
        let own = pp
            .allocs
            .range(..=ptr)
            .next_back()
            .filter(|(&base, a)| ptr - base < a.size)
            .map(|(_, a)| (a.handle, a.block, false));
        let imported = || {
            pp.imported
                .range(..=ptr)
                .next_back()
                .filter(|(&at, i)| ptr - at < i.size)
                .map(|(_, i)| (i.handle, i.block, i.freed))
        };
        let (handle, block, freed) = own.or_else(imported)?;
        let (_, device) = self.current_ctx(p).ok()?;
        if self.blocks.get(&block)?.device == device {
            return None;
        }
        let granted = pp
            .handles
            .get(&handle)
            .and_then(|h| h.access.get(&device))
            .is_some_and(|&a| a != VmmAccess::None);
        if !granted {
            return Some(Fail::Api(match access {
                Access::Copy => InvalidValue,
                Access::Kernel => IllegalAddress,
            }));
        }
        // Memory its exporter freed before the import, reached over the
        // peer link: contained, sticky (pool.lifetime.import-after-exporter-free-peer).
        (freed && self.sem.pool_freed_peer_access == PoolFreedPeerAccess::Contained)
            .then_some(Fail::Api(Contained))
    }

    /// The VA class of `p`'s IPC mapping at `base`: the stream-ordered
    /// side for a pointer imported from a pool, else device VA.
    pub(crate) fn pool_import_va_class(&self, p: ProcessIndex, base: u64) -> VaClass {
        let pooled = self
            .pools
            .procs
            .get(p)
            .is_some_and(|pp| pp.imported.values().any(|i| i.base == base));
        if pooled {
            VaClass::StreamOrdered
        } else {
            VaClass::Device
        }
    }

    /// The physical device of the pool memory `p` imported at `ptr`, if
    /// `ptr` is in an imported pool pointer's allocation (`attributes.rs`).
    pub(crate) fn pool_import_device(&self, p: ProcessIndex, ptr: u64) -> Option<u32> {
        let pp = self.pools.procs.get(p)?;
        let (_, i) = pp
            .imported
            .range(..=ptr)
            .next_back()
            .filter(|(&at, i)| ptr - at < i.size)?;
        self.blocks.get(&i.block).map(|b| b.device)
    }

    /// `cudaMallocFromPoolAsync` + stream synchronize: a stream-ordered
    /// allocation of `p` on the pool's device. An imported pool does not
    /// allocate ("Imported memory pools do not support creating new
    /// allocations"): InvalidValue in both dialects on H100 / 580.159.04
    /// (pool.import.no-allocation).
    pub(crate) fn pool_alloc(&mut self, p: ProcessIndex, handle: u64, size: u64) -> SimResult<u64> {
        let h = self.pool_handle(p, handle)?;
        if h.imported {
            return Err(InvalidValue.into());
        }
        let device = self.pool_of(h.pool)?.device;
        let base = self.alloc_on(p, MemKind::StreamOrdered, size, Some(device))?;
        let block = self.procs[p].allocs.get(&base).map(|a| a.block);
        if let Some(block) = block {
            self.pp(p).allocs.insert(
                base,
                PoolAlloc {
                    handle,
                    pool: h.pool,
                    block,
                    size,
                },
            );
            self.pp(p).held_va.push((handle, base));
            self.procs[p].hold_va(base);
            self.note_pool_chunk(p, base, Some(h.pool));
        }
        Ok(base)
    }

    /// `p` allocated `base` from `pool` (`None`: the default pool of its
    /// device): the first such allocation begins the pool's mapped pieces.
    pub(crate) fn note_pool_chunk(&mut self, p: ProcessIndex, base: u64, pool: Option<u64>) {
        let Some(device) = self.procs[p].allocs.get(&base).map(|a| a.device) else {
            return;
        };
        self.pp(p)
            .chunk_anchors
            .entry((device, pool))
            .or_insert(base);
    }

    /// `CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR` / `_SIZE` of `ptr` in `p`'s
    /// pool allocation at `base` on physical `device`: the [`POOL_CHUNK`] piece holding `ptr`,
    /// counted from the pool's first allocation in `p`. On 2 x H200 a
    /// 64 MiB allocation made after a small one reported the small one's
    /// address and 32 MiB (mem.pointer-attr.pool-mapping-chunks).
    pub(crate) fn pool_mapping(
        &self,
        p: ProcessIndex,
        (base, device): (u64, u32),
        ptr: u64,
    ) -> (u64, u64) {
        let pp = self.pools.procs.get(p);
        let pool = pp.and_then(|pp| pp.allocs.get(&base)).map(|a| a.pool);
        let anchor = pp
            .and_then(|pp| pp.chunk_anchors.get(&(device, pool)).copied())
            .filter(|&a| a <= ptr)
            .unwrap_or(base);
        let piece = anchor + (ptr - anchor) / POOL_CHUNK * POOL_CHUNK;
        (piece, POOL_CHUNK)
    }

    /// `cudaFreeAsync` + stream synchronize: a free of stream-ordered
    /// memory (`World::free`), pool memory first ([`World::pool_release`]).
    pub(crate) fn pool_free(&mut self, p: ProcessIndex, ptr: u64) -> SimResult<()> {
        self.free(p, FreeKind::StreamOrdered, ptr)
    }

    /// Which pool memory a free of `ptr` releases ([`World::pool_release`]):
    /// an imported pool pointer, or a pool allocation whose memory the
    /// process still holds there.
    pub(crate) fn pool_free_target(&self, p: ProcessIndex, ptr: u64) -> Option<PoolFree> {
        let pp = self.pools.procs.get(p)?;
        if pp.imported.contains_key(&ptr) {
            return Some(PoolFree::Import);
        }
        self.live_pool_alloc(p, ptr).map(|_| PoolFree::Allocation)
    }

    /// The pool allocation at `ptr` and the process's allocation record of
    /// it, while its memory is still there: a pool record whose block the
    /// process no longer holds at `ptr` is none.
    fn live_pool_alloc(&self, p: ProcessIndex, ptr: u64) -> Option<(PoolAlloc, &Allocation)> {
        let pa = *self.pools.procs.get(p)?.allocs.get(&ptr)?;
        let a = self.procs[p]
            .allocs
            .get(&ptr)
            .filter(|a| a.block == pa.block)?;
        Some((pa, a))
    }

    /// A free of a pointer that is no pool memory forgets a pool
    /// allocation record left at it whose memory is gone.
    pub(crate) fn forget_stale_pool_alloc(&mut self, p: ProcessIndex, ptr: u64) {
        if let Some(pp) = self.pools.procs.get_mut(p) {
            pp.allocs.remove(&ptr);
        }
    }

    /// A free (`cudaFreeAsync` or `cudaFree`) of pool memory: an imported
    /// pointer is unmapped (the exporter's allocation lives on); a pool
    /// allocation is freed as any stream-ordered allocation, with the
    /// free-while-mapped hazard while an importer maps it, and its memory
    /// stays in an exported pool. `None` when `ptr` is neither.
    /// A free (`cudaFreeAsync` or `cudaFree`) of pool memory: an imported
    /// pointer is unmapped (the exporter's allocation lives on); a pool
    /// allocation is freed as any stream-ordered allocation, with the
    /// free-while-mapped hazard while an importer maps it, and its memory
    /// stays in an exported pool.
    pub(crate) fn pool_release(&mut self, p: ProcessIndex, ptr: u64, target: PoolFree) {
        match target {
            PoolFree::Import => {
                let Some(i) = self.pp(p).imported.get(&ptr).copied() else {
                    return;
                };
                self.unmap_import(p, i.base);
                self.pp(p).imported.remove(&ptr);
                self.procs[p].end_claims(|c| c.allocation == Some(i.base));
            }
            PoolFree::Allocation => {
                let Some(a) = self.pp(p).allocs.remove(&ptr) else {
                    return;
                };
                let keeps = self
                    .pools
                    .pools
                    .get(&a.pool)
                    .is_some_and(|sp| sp.shared && !sp.destroyed);
                if keeps {
                    if let Some(b) = self.blocks.get_mut(&a.block) {
                        b.pool_kept = true;
                        if let Some(sp) = self.pools.pools.get_mut(&a.pool) {
                            sp.retained.push(a.block);
                        }
                    }
                }
                self.free_allocation(p, ptr, true);
            }
        }
        // A second free of it is a double free, as of any pointer.
        self.procs[p].freed_ptrs.insert(ptr);
    }

    /// `cudaMemPoolExportPointer`: the base of a live allocation from a
    /// pool that exports (pool.export.needs-handle-types) and was already
    /// exported to a descriptor, else InvalidValue. The documents say "from
    /// an already shared memory pool"; on H100 / 580.159.04 an allocation of
    /// a never-exported pool was refused (pool.import.same-process-own-pool)
    /// while one of an exported pool was not (pool.share.round-trip).
    pub(crate) fn pool_export_ptr(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
    ) -> SimResult<PoolPtrExport> {
        let (pa, a) = self.live_pool_alloc(p, ptr).ok_or(InvalidValue)?;
        let (block, offset) = (a.block, a.offset);
        let sim_pool = self.pool_of(pa.pool)?;
        if !sim_pool.types.contains(ShareableHandleType::PosixFd) || !sim_pool.shared {
            return Err(InvalidValue.into());
        }
        let export = PtrExport {
            pool: pa.pool,
            exporter: p,
            base: ptr,
            block,
            offset,
            size: pa.size,
        };
        let id = self.pools.next_export;
        self.pools.next_export += 1;
        self.pools.exports.insert(id, export);
        Ok(encode(id, pa.pool))
    }

    /// `cudaMemPoolImportPointer`: maps the exporter's allocation into `p`.
    /// The pool must be an imported handle of the export's pool; importing
    /// through the exporter's own pool handle is InvalidValue (simulator
    /// choice, pool.import.same-process-own-pool, unmeasured). Importing an
    /// allocation its exporter freed is undefined: the hazard, then as
    /// `pool_import_freed` says (pool.lifetime.import-after-exporter-free).
    /// An allocation this process already imported answers as
    /// `pool_ptr_reimport` says (pool.import.same-pointer-twice).
    pub(crate) fn pool_import_ptr(
        &mut self,
        p: ProcessIndex,
        handle: u64,
        data: &PoolPtrExport,
    ) -> SimResult<u64> {
        let (ctx, device) = self.current_ctx(p)?;
        let h = self.pool_handle(p, handle)?;
        let export = decode(data)
            .and_then(|id| self.pools.exports.get(&id).copied())
            .ok_or(InvalidValue)?;
        if !h.imported || export.pool != h.pool {
            return Err(InvalidValue.into());
        }
        let live = self.procs[export.exporter]
            .allocs
            .get(&export.base)
            .is_some_and(|a| a.block == export.block && a.offset == export.offset);
        if !live {
            self.hazard(
                HazardKind::PoolImportOfFreed,
                p,
                format!(
                    "cudaMemPoolImportPointer of an allocation process {} already freed",
                    export.exporter
                ),
            );
            if self.sem.pool_import_freed == PoolImportFreed::Refused {
                return Err(InvalidValue.into());
            }
        }
        if self.sem.pool_ptr_reimport == PoolPtrReimport::SamePointer {
            let again = self
                .pp(p)
                .imported
                .iter()
                .find(|(_, i)| i.block == export.block && i.offset == export.offset)
                .map(|(&ptr, _)| ptr);
            if let Some(ptr) = again {
                // The second import's reference is never dropped (its free is
                // refused), so the first import's claim of a freed export's
                // VA outlives both frees
                // (mem.lifetime.pool-import-ptr-claims-freed-export-va).
                let base = self.pp(p).imported.get(&ptr).map(|i| i.base);
                self.procs[p].detach_claims(|c| {
                    c.by == crate::world::ClaimBy::PoolImport && c.allocation == base
                });
                return Ok(ptr);
            }
        }
        let Some(block) = self.blocks.get(&export.block) else {
            return Err(InvalidValue.into());
        };
        let (block_size, exporter) = (block.size, block.owner);
        // VA of the stream-ordered side, as pool allocations take: an
        // imported pointer does not reuse VA freed by a device allocation,
        // nor a device allocation or an IPC open the VA of a freed
        // imported pointer (explore cases 16, 68, 252 of the H100's
        // 2026-11-25 benchmark; incidental placement).
        let va = VaPool {
            ctx,
            class: VaClass::StreamOrdered,
        };
        // Mapping it claims the VA the process had free, as a VMM
        // allocation does: a freed export there is NotPermitted until the
        // pointer is freed (mem.lifetime.pool-import-ptr-claims-freed-export-va).
        let claim = self.procs[p].claim_free_va(crate::world::ClaimBy::PoolImport, None, None);
        let Some(base) = self.procs[p].reserve_va(block_size, va) else {
            self.procs[p].va_claims[claim].end();
            return Err(OutOfMemory.into());
        };
        self.procs[p].va_claims[claim].allocation = Some(base);
        let ret = base + export.offset;
        let buffer_id = self.new_buffer_id();
        let proc = &mut self.procs[p];
        proc.regions.insert(
            base,
            Region {
                len: block_size,
                block: export.block,
                import: Some(Box::new(Mapping {
                    ctx,
                    device,
                    exporter,
                    open_tags: std::collections::VecDeque::from([0]),
                    opened: Vec::new(),
                    exports: SmallMap::one(
                        export.offset,
                        crate::world::OpenedExport {
                            size: export.size,
                            generation: None,
                        },
                    ),
                    opens: SmallMap::one(ret, 1),
                    closed: crate::small_map::SmallMap::Empty,
                    buffer_id,
                })),
            },
        );
        proc.add_import(ctx, export.block, base);
        if let Some(b) = self.blocks.get_mut(&export.block) {
            b.importers = b.importers.saturating_add(1);
        }
        self.pp(p).held_va.push((handle, base));
        self.procs[p].hold_va(base);
        self.pp(p).imported.insert(
            ret,
            PoolImport {
                handle,
                base,
                block: export.block,
                offset: export.offset,
                size: export.size,
                freed: !live,
            },
        );
        Ok(ret)
    }
}
