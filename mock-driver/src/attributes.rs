//! `cuPointerGetAttribute`, one attribute at a time.
//!
//! Every allocation, IPC mapping and VMM mapping gets a buffer id from one
//! counter when it is made, so an allocation made again at the same address
//! after a free answers a new id (mem.pointer-attr.buffer-id-new-after-realloc).
//! The other answers are read off the object the pointer falls in: an own
//! allocation, an IPC mapping (`Region::import`) or a VMM mapping.

use crate::semantics::{ExportRule, ImportRange};
use crate::world::{MutantId, SimResult, World};
use ipc_harness::{cu_memory_type, ErrorKind, MemKind, PointerAttribute, ProcessIndex};

/// What the queried pointer falls in, with the answers every attribute
/// reads.
struct Target {
    memory_type: u64,
    buffer_id: u64,
    device: Option<u32>,
    legacy_ipc_capable: bool,
    /// `RANGE_START_ADDR` / `RANGE_SIZE`: what `cuMemGetAddressRange` answers.
    range: (u64, u64),
    allowed_handle_types: u64,
    /// `MAPPING_BASE_ADDR` / `MAPPING_SIZE`: the VA the driver mapped.
    mapping: (u64, u64),
}

impl World {
    /// A fresh `CU_POINTER_ATTRIBUTE_BUFFER_ID`: never handed out before in
    /// this machine, so never equal to a freed allocation's.
    pub(crate) fn new_buffer_id(&mut self) -> u64 {
        self.last_buffer_id += 1;
        self.last_buffer_id
    }

    /// `cuPointerGetAttribute(attr, ptr)` in process `p`. A pointer the
    /// driver does not know is `InvalidValue`, as for the memory-type query
    /// the worker's `pointer_attr` makes.
    pub(crate) fn pointer_attribute(
        &self,
        p: ProcessIndex,
        ptr: u64,
        attr: PointerAttribute,
    ) -> SimResult<u64> {
        let t = self.attribute_target(p, ptr)?;
        let device = || -> SimResult<u64> {
            t.device
                .map(u64::from)
                .ok_or_else(|| ErrorKind::InvalidValue.into())
        };
        Ok(match attr {
            PointerAttribute::MemoryType => t.memory_type,
            PointerAttribute::BufferId if self.mutant(MutantId::BufferIdsShared) => 1,
            PointerAttribute::BufferId => t.buffer_id,
            PointerAttribute::DeviceOrdinal => device()?,
            PointerAttribute::IsLegacyCudaIpcCapable => u64::from(t.legacy_ipc_capable),
            PointerAttribute::RangeStartAddr => t.range.0,
            PointerAttribute::RangeSize => t.range.1,
            PointerAttribute::AllowedHandleTypes => t.allowed_handle_types,
            PointerAttribute::MappingBaseAddr => t.mapping.0,
            PointerAttribute::MappingSize => t.mapping.1,
        })
    }

    fn attribute_target(&self, p: ProcessIndex, ptr: u64) -> SimResult<Target> {
        let proc = self.procs.get(p).ok_or(ErrorKind::InvalidValue)?;
        if let Some((base, a)) = proc.alloc_at(ptr) {
            // Managed memory reads as device memory to this query (the
            // worker's `pointer_attr` needs IS_MANAGED to tell them apart).
            let memory_type = match a.kind {
                MemKind::PinnedHost => cu_memory_type::HOST,
                _ => cu_memory_type::DEVICE,
            };
            // Capable exactly when `ipc_get` would export it
            // (mem.pointer-attr.legacy-ipc-capable-malloc).
            let legacy_ipc_capable = match a.kind {
                MemKind::Device => true,
                MemKind::Managed => exports(self.sem.ipc_managed),
                MemKind::PinnedHost => exports(self.sem.ipc_pinned_host),
                MemKind::StreamOrdered => exports(self.sem.ipc_pool),
            };
            let block_base = base - a.offset;
            let block_size = self.blocks.get(&a.block).map_or(a.size, |b| b.size);
            let mapping = match a.kind {
                // A pool maps its memory in pieces of its own
                // (mem.pointer-attr.pool-mapping-chunks).
                MemKind::StreamOrdered => self.pool_mapping(p, (base, a.device), ptr),
                // Pinned host memory is mapped in 2 MiB pieces: a 1000-byte
                // allocation answers 2 MiB
                // (mem.pointer-attr.pinned-host-mapping-size).
                MemKind::PinnedHost => {
                    (block_base, block_size.next_multiple_of(crate::world::BLOCK))
                }
                _ => (block_base, block_size),
            };
            return Ok(Target {
                memory_type,
                buffer_id: a.buffer_id,
                device: proc.ordinal_of(a.device),
                legacy_ipc_capable,
                range: (base, a.size),
                allowed_handle_types: 0,
                mapping,
            });
        }
        if let Some((base, r)) = proc.region_at(ptr) {
            if let Some(m) = &r.import {
                // The opened allocation, whatever context is current (the
                // GPU answers 1000 for an opened 1000-byte allocation while
                // another context is current, where cuMemGetAddressRange
                // fails: mem.pointer-attr.range-of-opened-small-allocation).
                let opened = m
                    .export_at(ptr - base)
                    .filter(|_| self.sem.import_range == ImportRange::Allocation)
                    .map(|(o, size)| (base.saturating_add(o), size));
                let range = opened.unwrap_or((base, r.len));
                // Pool memory is its pool's device's, wherever it is mapped,
                // and an importer maps it in the pool's pieces too (the
                // size measured; where the piece begins is not).
                let pooled = self.pool_import_device(p, ptr);
                let device = pooled.unwrap_or(m.device);
                let mapping_size = if pooled.is_some() {
                    crate::pool_state::POOL_CHUNK
                } else {
                    r.len
                };
                return Ok(Target {
                    memory_type: cu_memory_type::DEVICE,
                    buffer_id: m.buffer_id,
                    device: proc.ordinal_of(device),
                    // An IPC pointer is not the process's own allocation:
                    // `ipc_get` refuses it.
                    legacy_ipc_capable: false,
                    range,
                    allowed_handle_types: 0,
                    mapping: (base, mapping_size),
                });
            }
        }
        if let Some((base, size, device, buffer_id, types)) = self.vmm_attribute_target(p, ptr) {
            return Ok(Target {
                memory_type: cu_memory_type::DEVICE,
                buffer_id,
                device: proc.ordinal_of(device),
                // A VMM mapping is no cudaMalloc allocation
                // (mem.pointer-attr.legacy-ipc-capable-vmm).
                legacy_ipc_capable: false,
                range: (base, size),
                allowed_handle_types: u64::from(types),
                mapping: (base, size),
            });
        }
        Err(ErrorKind::InvalidValue.into())
    }

    /// The VMM mapping containing `ptr`: base, size, physical device, buffer
    /// id and the requested handle types of the allocation it maps.
    fn vmm_attribute_target(&self, p: ProcessIndex, ptr: u64) -> Option<(u64, u64, u32, u64, u32)> {
        let vp = self.vmm.procs.get(p)?;
        let (&base, m) = vp.maps.range(..=ptr).next_back()?;
        if ptr >= base.saturating_add(m.size) {
            return None;
        }
        let phys = self.vmm.phys.get(&m.phys)?;
        Some((base, m.size, phys.device, m.buffer_id, phys.types.0))
    }
}

fn exports(rule: ExportRule) -> bool {
    matches!(rule, ExportRule::Allow)
}
