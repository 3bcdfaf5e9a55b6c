//! Memory pools shared between processes (the stream-ordered allocator's
//! IPC): pools with handle types, their export as a POSIX descriptor and
//! import in another process, allocations from a pool, and the export and
//! import of one allocation's pointer.
//!
//! A pool allocation is a stream-ordered allocation of the process that
//! made it (`World::alloc`); an imported pointer is a mapping of the
//! exporter's block in the importer, as an IPC open is, so both processes
//! see the same bytes and the exporter's free while an importer still maps
//! it is the free-while-mapped hazard ("The imported memory must be freed
//! from all importing processes before being freed in the exporting
//! process", `cudaMemPoolImportPointer`). The importer's free of an imported
//! pointer unmaps it only.
//!
//! Where the documentation names no error code, the simulator's choice is
//! given with its clause id; those clauses are unmeasured until a GPU run
//! says otherwise.

use crate::pool_state::{PoolHandle, PoolProc, PtrExport, SimPool};
use crate::small_map::SmallMap;
use crate::vmm_state::FdObject;
use crate::world::{Mapping, Region, SimResult, VaClass, VaPool, World};
use ipc_harness::ErrorKind::{InvalidDevice, InvalidValue, NotSupported, OutOfMemory, Unknown};
use ipc_harness::{Fd, FreeKind, HandleTypes, HazardKind, MemKind, PoolPtrExport, ProcessIndex};

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
        pp.handles.insert(h, PoolHandle { pool, imported });
        h
    }

    fn new_pool(&mut self, types: HandleTypes, default: bool) -> u64 {
        let id = self.pools.next_pool;
        self.pools.next_pool += 1;
        self.pools.pools.insert(
            id,
            SimPool {
                types,
                default,
                shared: false,
            },
        );
        id
    }

    /// A live pool handle of `p`; a destroyed or unknown one is InvalidValue.
    fn pool_handle(&mut self, p: ProcessIndex, handle: u64) -> SimResult<PoolHandle> {
        self.pp(p)
            .handles
            .get(&handle)
            .copied()
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
        self.pool_physical_device(p, device)?;
        let known = HandleTypes::POSIX_FD.0 | HandleTypes::FABRIC.0;
        if types.0 & !known != 0 {
            return Err(InvalidValue.into());
        }
        let pool = self.new_pool(types, false);
        let h = self.new_pool_handle(p, pool, false);
        // The real driver opens a descriptor for a POSIX-exportable pool and
        // holds it until the pool is destroyed: explore found later
        // descriptor numbers shifted by one on H100 / 580.159.04 (incidental;
        // pools without handle types unmeasured, given none).
        if types.contains(ipc_harness::ShareableHandleType::PosixFd) {
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
        let pool = self.new_pool(HandleTypes::NONE, true);
        let h = self.new_pool_handle(p, pool, false);
        self.pp(p).defaults.insert(physical, h);
        Ok(h)
    }

    /// `cudaMemPoolDestroy`. Allocations still live stay valid ("the
    /// resources associated with the pool will be released automatically
    /// once there are no more outstanding allocations"). Destroying a
    /// default pool is InvalidValue (simulator choice,
    /// pool.lifetime.default-pool-not-destroyable, unmeasured).
    pub(crate) fn pool_destroy(&mut self, p: ProcessIndex, handle: u64) -> SimResult<()> {
        let h = self.pool_handle(p, handle)?;
        if self.pool_of(h.pool)?.default {
            return Err(InvalidValue.into());
        }
        let pp = self.pp(p);
        pp.handles.remove(&handle);
        pp.destroyed.insert(handle);
        if let Some(fd) = pp.driver_fds.remove(&handle) {
            self.driver_fd_closes(p, fd);
        }
        Ok(())
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
        if h.imported || !types.contains(ipc_harness::ShareableHandleType::PosixFd) {
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
    /// (simulator choice, unmeasured).
    pub(crate) fn pool_import(&mut self, p: ProcessIndex, fd: Fd) -> SimResult<u64> {
        self.current_ctx(p)?;
        match self.fd_object(p, fd) {
            Some(FdObject::Pool(pool)) if self.pools.pools.contains_key(&pool) => {
                Ok(self.new_pool_handle(p, pool, true))
            }
            Some(FdObject::Pool(_)) => Err(InvalidValue.into()),
            Some(FdObject::Allocation(_)) => Err(NotSupported.into()),
            None | Some(FdObject::Foreign | FdObject::Driver) => Err(Unknown.into()),
        }
    }

    /// `cudaMemPoolSetAccess` with one descriptor: the device must exist.
    /// Access itself is not modelled: the pool's device reads and writes an
    /// imported pool's memory without it.
    pub(crate) fn pool_set_access(
        &mut self,
        p: ProcessIndex,
        handle: u64,
        device: u32,
    ) -> SimResult<()> {
        self.pool_handle(p, handle)?;
        self.pool_physical_device(p, device)
            .map_err(|_| InvalidValue.into())
            .map(|_| ())
    }

    /// `cudaMallocFromPoolAsync` + stream synchronize: a stream-ordered
    /// allocation of `p`. An imported pool does not allocate ("Imported
    /// memory pools do not support creating new allocations"): InvalidValue
    /// in both dialects on H100 / 580.159.04 (pool.import.no-allocation).
    pub(crate) fn pool_alloc(&mut self, p: ProcessIndex, handle: u64, size: u64) -> SimResult<u64> {
        let h = self.pool_handle(p, handle)?;
        if h.imported {
            return Err(InvalidValue.into());
        }
        let base = self.alloc(p, MemKind::StreamOrdered, size)?;
        let block = self.procs[p].allocs.get(&base).map(|a| a.block);
        if let Some(block) = block {
            self.pp(p).allocs.insert(base, (h.pool, block));
        }
        Ok(base)
    }

    /// `cudaFreeAsync` + stream synchronize: an imported pointer is
    /// unmapped (the exporter's allocation lives on); a pool allocation is
    /// freed as any stream-ordered allocation, with the free-while-mapped
    /// hazard while an importer maps it.
    pub(crate) fn pool_free(&mut self, p: ProcessIndex, ptr: u64) -> SimResult<()> {
        if let Some(base) = self.pp(p).imported.remove(&ptr) {
            self.unmap_import(p, base);
            return Ok(());
        }
        self.free(p, FreeKind::StreamOrdered, ptr)?;
        self.pp(p).allocs.remove(&ptr);
        Ok(())
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
        let Some((pool, block)) = self.pp(p).allocs.get(&ptr).copied() else {
            return Err(InvalidValue.into());
        };
        let a = self.procs[p]
            .allocs
            .get(&ptr)
            .filter(|a| a.block == block)
            .ok_or(InvalidValue)?;
        let (block, offset) = (a.block, a.offset);
        let sim_pool = self.pool_of(pool)?;
        if !sim_pool
            .types
            .contains(ipc_harness::ShareableHandleType::PosixFd)
            || !sim_pool.shared
        {
            return Err(InvalidValue.into());
        }
        let export = PtrExport {
            pool,
            exporter: p,
            base: ptr,
            block,
            offset,
        };
        let id = self.pools.next_export;
        self.pools.next_export += 1;
        self.pools.exports.insert(id, export);
        Ok(encode(id, pool))
    }

    /// `cudaMemPoolImportPointer`: maps the exporter's allocation into `p`.
    /// The pool must be an imported handle of the export's pool; importing
    /// through the exporter's own pool handle is InvalidValue (simulator
    /// choice, pool.import.same-process-own-pool, unmeasured). Importing an
    /// allocation its exporter freed is undefined: the hazard, and
    /// InvalidValue here (pool.lifetime.import-after-exporter-free).
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
        let Some(block) = self.blocks.get(&export.block).filter(|_| live) else {
            self.hazard(
                HazardKind::PoolImportOfFreed,
                p,
                format!(
                    "cudaMemPoolImportPointer of an allocation process {} already freed",
                    export.exporter
                ),
            );
            return Err(InvalidValue.into());
        };
        let (block_size, exporter) = (block.size, block.owner);
        let size = block.live.get(&export.offset).copied().unwrap_or(0);
        let va = VaPool {
            ctx,
            class: VaClass::Device,
        };
        let base = self.procs[p]
            .reserve_va(block_size, va)
            .ok_or(OutOfMemory)?;
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
                    exporter_tag: 0,
                    opened: Vec::new(),
                    exports: SmallMap::one(export.offset, size),
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
        self.pp(p).imported.insert(ret, base);
        Ok(ret)
    }
}
