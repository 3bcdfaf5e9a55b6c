//! What `World` holds of memory pools, their pointer exports and each
//! process's pool handles. The rules that change it are `pools.rs`; this
//! state is a leaf so that `world.rs` can hold it without importing the
//! rules.

use crate::ids::BlockId;
use ipc_harness::{HandleTypes, ProcessIndex, VmmAccess};
use std::collections::{BTreeMap, BTreeSet};

/// The memory-pool part of the simulated machine.
#[derive(Debug, Default)]
pub(crate) struct PoolState {
    /// Every pool made, by machine-wide id. A pool outlives its handles: an
    /// exported descriptor or an imported handle still names it.
    pub pools: BTreeMap<u64, SimPool>,
    pub next_pool: u64,
    /// Pointer exports by machine-wide id (in the export data's bytes).
    pub exports: BTreeMap<u64, PtrExport>,
    pub next_export: u64,
    /// Per process, indexed like `World::procs` (grown on first use).
    pub procs: Vec<PoolProc>,
}

#[derive(Debug)]
pub(crate) struct SimPool {
    pub types: HandleTypes,
    /// The device's default pool (`cudaDeviceGetDefaultMemPool`).
    pub default: bool,
    /// Exported to a shareable handle at least once (`pool_export`).
    pub shared: bool,
    /// The physical device its memory lives on (its resident device).
    pub device: u32,
    /// The process that created it.
    pub owner: ProcessIndex,
    /// Its creator destroyed it (`cudaMemPoolDestroy`).
    pub destroyed: bool,
    /// Blocks of allocations its creator freed that the pool keeps (an
    /// IPC pool does not give memory back to the OS: `Block::pool_kept`)
    /// until the pool is destroyed or its creator exits.
    pub retained: Vec<BlockId>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct PtrExport {
    pub pool: u64,
    pub exporter: ProcessIndex,
    /// The exported allocation's base in the exporter.
    pub base: u64,
    pub block: BlockId,
    /// Offset of the allocation in its block.
    pub offset: u64,
    /// The allocation's size.
    pub size: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct PoolHandle {
    pub pool: u64,
    /// Made by `pool_import` (not by `pool_create` or `pool_default`).
    pub imported: bool,
    /// `cudaMemPoolSetAccess` through this handle: physical device ->
    /// access. The resident device is not in it: it always has read-write
    /// access.
    pub access: BTreeMap<u32, VmmAccess>,
}

/// An allocation from a pool, in the process that made it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolAlloc {
    /// The pool handle it was allocated through.
    pub handle: u64,
    pub pool: u64,
    /// The block it lives in: it tells a live pool allocation from a later
    /// allocation at the same address after a free by another op.
    pub block: BlockId,
    pub size: u64,
}

/// A pointer imported from a pool (`cudaMemPoolImportPointer`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolImport {
    /// The imported pool handle it came through.
    pub handle: u64,
    /// The base of its mapping.
    pub base: u64,
    /// The exporter's allocation: its block and offset in it.
    pub block: BlockId,
    pub offset: u64,
    pub size: u64,
    /// Imported after its exporter freed it (`pool_import_freed=maps`).
    pub freed: bool,
}

#[derive(Debug, Default)]
pub(crate) struct PoolProc {
    pub handles: BTreeMap<u64, PoolHandle>,
    pub next_handle: u64,
    /// Default pool handle per physical device.
    pub defaults: BTreeMap<u32, u64>,
    /// The descriptor the driver opened for a POSIX-exportable pool this
    /// process created, by pool handle (`driver_fds`).
    pub driver_fds: BTreeMap<u64, i32>,
    /// This process's allocations from pools, by base.
    pub allocs: BTreeMap<u64, PoolAlloc>,
    /// Imported pointers, by pointer.
    pub imported: BTreeMap<u64, PoolImport>,
    /// Pool handles destroyed (a later use is InvalidValue).
    pub destroyed: BTreeSet<u64>,
    /// VA each pool handle holds for its allocations and imported
    /// pointers, freed or not: (handle, base). The pool's destruction lets
    /// it go (`Process::unhold_va`).
    pub held_va: Vec<(u64, u64)>,
    /// Where the first piece of memory each pool mapped for this process
    /// begins, by (physical device, pool; `None` for the device's default
    /// pool): the pool maps its memory in [`POOL_CHUNK`] pieces from there
    /// (mem.pointer-attr.pool-mapping-chunks).
    pub chunk_anchors: BTreeMap<(u32, Option<u64>), u64>,
}

/// The size of the pieces a memory pool maps (`CU_POINTER_ATTRIBUTE_MAPPING_SIZE`
/// of any pool memory on 2 x H200, 580.159.04, whatever the allocation's
/// size: mem.pointer-attr.pool-mapping-chunks).
pub(crate) const POOL_CHUNK: u64 = 32 << 20;
