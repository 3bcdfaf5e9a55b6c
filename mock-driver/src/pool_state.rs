//! What `World` holds of memory pools, their pointer exports and each
//! process's pool handles. The rules that change it are `pools.rs`; this
//! state is a leaf so that `world.rs` can hold it without importing the
//! rules.

use crate::ids::BlockId;
use ipc_harness::{HandleTypes, ProcessIndex};
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
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolHandle {
    pub pool: u64,
    /// Made by `pool_import` (not by `pool_create` or `pool_default`).
    pub imported: bool,
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
    /// This process's allocations from pools: base -> (pool id, block).
    /// The block tells a live pool allocation from a later allocation at
    /// the same address after a free by another op (`free_async`).
    pub allocs: BTreeMap<u64, (u64, BlockId)>,
    /// Imported pointers: pointer -> base of its mapping.
    pub imported: BTreeMap<u64, u64>,
    /// Pool handles destroyed (a later use is InvalidValue).
    pub destroyed: BTreeSet<u64>,
}
