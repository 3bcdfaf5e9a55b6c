//! What `World` holds of VMM allocations, handles, descriptors and
//! mappings. The rules that change it are `vmm.rs`; this state is a leaf so
//! that `world.rs` can hold it without importing the rules.

use crate::ids::{BlockId, CtxKey};
use crate::small_map::VecMap;
use ipc_harness::{HandleTypes, VmmAccess};
use std::collections::BTreeMap;

/// The lowest descriptor a process can get (0-2 are stdio).
const FIRST_FD: i32 = 3;

/// The VMM part of the simulated machine.
#[derive(Debug, Default)]
pub(crate) struct VmmState {
    pub phys: BTreeMap<u64, Phys>,
    pub next_phys: u64,
    /// Per process, indexed like `World::procs` (grown on first use).
    pub procs: Vec<VmmProc>,
}

#[derive(Debug)]
pub(crate) struct Phys {
    pub device: u32,
    pub size: u64,
    pub types: HandleTypes,
    pub block: BlockId,
    /// Handles + mappings + descriptors, in every process.
    pub refs: u32,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct HandleEntry {
    pub phys: u64,
    /// Imported handles carry no requested handle types (measured:
    /// `cuMemGetAllocationPropertiesFromHandle` says 0), so they do not export.
    pub imported: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum FdObject {
    /// An exported allocation.
    Allocation(u64),
    /// Something that is not CUDA's (`/dev/null`).
    Foreign,
    /// An exported memory pool (`pools.rs`), by its machine-wide id.
    Pool(u64),
    /// One the driver opened for itself (`driver_fds`): the process never
    /// got it from an op, so it cannot close, send or import it.
    Driver,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct VmmMapping {
    pub size: u64,
    pub phys: u64,
    pub offset: u64,
    pub access: VmmAccess,
    /// Physical devices `cuMemSetAccess` granted access to (bit per device).
    pub granted: u64,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID` of the mapping (`attributes.rs`).
    pub buffer_id: u64,
}

#[derive(Debug, Default)]
pub(crate) struct VmmProc {
    /// These four hold a few entries, if any: sorted Vecs, which an empty
    /// one drops for free.
    pub handles: VecMap<u64, HandleEntry>,
    /// Handles already released (a later use is a use of a dangling handle).
    pub released: VecMap<u64>,
    pub next_handle: u64,
    pub fds: VecMap<i32, FdObject>,
    /// The two descriptors each context made by `ctx_create` holds
    /// (`driver_fds`).
    pub ctx_fds: VecMap<CtxKey, [i32; 2]>,
    /// Whether the process made an interprocess event (`driver_fds`: the
    /// first one opens a descriptor the process keeps).
    pub ipc_event_fd: bool,
    /// Reserved VA: base -> size.
    pub reservations: BTreeMap<u64, u64>,
    /// The process held device memory when it made or imported its first
    /// VMM allocation handle (the check-word rule in `World::ipc_open`).
    pub first_handle_after_device_memory: Option<bool>,
    /// Mapped VA: base -> mapping.
    pub maps: BTreeMap<u64, VmmMapping>,
    /// Mappings removed so far (`OwnerVmm::unmaps`).
    pub mappings_removed: u64,
}

impl VmmProc {
    pub(crate) fn lowest_free_fd(&self) -> i32 {
        let mut fd = FIRST_FD;
        for &used in self.fds.keys().filter(|&&k| k >= FIRST_FD) {
            if used != fd {
                break;
            }
            fd += 1;
        }
        fd
    }
}
