//! Legacy memory IPC: opening (mapping an exporter's block into a fresh VA
//! range), re-opens and closing. The handle bytes themselves (their layout,
//! and which fields the driver reads) are `handle_codec.rs`.

use crate::handle_codec::{
    decode, decode_fields, encode, interior_offset, process_tag, raw_process_tag, serial_of,
    size_field, u32_at, Encode, HandleData, FORMAT, MEMORY_TYPE,
};
use crate::seed::hash;
use crate::semantics::{
    ExportRule, FreedExport, GetNullOut, HandleStability, InteriorHandle, OpenAddress, OpenFlags,
    Reopen, StaleHandle,
};
use crate::small_map::SmallMap;
use crate::world::{
    BlockId, ClaimBy, CtxKey, Fail, Mapping, MutantId, OpenedExport, Region, SimResult, World,
    BLOCK,
};
use ipc_harness::{
    ErrorKind, HazardKind, IpcMemHandle, MemKind, OutArg, ProcessIndex,
    IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
};

/// How `ipc_open` treats a handle that differs from one the importing
/// context has open (`World::known_variant`).
enum Variant {
    /// Not such a copy: opened as it is.
    None,
    /// Opens the original instead.
    Original(IpcMemHandle),
    /// Maps the memory again, although the context maps it already.
    NewMapping,
    /// A copy of an open handle with another size field: AlreadyMapped,
    /// once the memory-type word has been read.
    OtherSize,
}

/// A freed export as the rules both freed-export paths apply first see it
/// (`World::freed_export_first_rules`).
#[derive(Clone, Copy)]
struct FreedAt {
    /// The exporter.
    owner: ProcessIndex,
    /// `OwnerVmm::unmaps` of the freed block.
    vmm_unmaps: Option<u64>,
    /// `Process::va_releases` after the exporter released the block's VA.
    released: Option<u64>,
    /// The freed allocation's address (plus the handle's offset field).
    addr: u64,
    /// Nobody maps the block any more: a context's or a pool's claim opens
    /// new memory.
    fresh_where_claimed: bool,
}

impl World {
    pub(crate) fn ipc_get(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        out: OutArg,
    ) -> SimResult<IpcMemHandle> {
        if ptr == 0 {
            return Err(ErrorKind::InvalidValue.into());
        }
        // Only the process's own allocations export; an IPC pointer is not one.
        let Some((alloc_base, a)) = self.procs[p].alloc_at(ptr) else {
            return Err(ErrorKind::InvalidValue.into());
        };
        let interior = match self.sem.interior_handle {
            InteriorHandle::Allocation => 0,
            InteriorHandle::PointerOffset => ptr - alloc_base,
        };
        let rule = match a.kind {
            MemKind::Device => ExportRule::Allow,
            MemKind::Managed => self.sem.ipc_managed,
            MemKind::PinnedHost => self.sem.ipc_pinned_host,
            MemKind::StreamOrdered => self.sem.ipc_pool,
        };
        if let ExportRule::Refuse(k) = rule {
            return Err(k.into());
        }
        if out == OutArg::Null {
            // The pointer and its kind are checked first: stream-ordered
            // memory with a NULL out is InvalidValue
            // (mem.get.null-out-stream-ordered); then the runtime writes
            // through NULL (mem.get.null-out).
            if self.dialect == ipc_harness::Dialect::Runtime
                && self.sem.get_null_out == GetNullOut::CrashInRuntime
            {
                return Err(Fail::Crash {
                    signal: 11,
                    detail: "cudaIpcGetMemHandle wrote through a NULL handle pointer (SIGSEGV)"
                        .into(),
                });
            }
            return Err(ErrorKind::InvalidValue.into());
        }
        let (block_id, offset, size) = (a.block, a.offset, a.size);
        let serial = match self.sem.handle_stable {
            // A reused slot's allocation gets the freed one's bytes
            // (mem.suballoc.reused-slot-same-handle).
            HandleStability::SameBytes => 0,
            HandleStability::PerCall => {
                self.handle_serial = self.handle_serial.wrapping_add(1);
                self.handle_serial
            }
        };
        let ctx_salt = match self.current_ctx(p) {
            Ok((c, d)) if self.procs[p].primary.get(&u64::from(d)) != Some(&c) => c,
            _ => 0,
        };
        let object = self.export_object(block_id);
        if let Some(b) = self.blocks.get_mut(&block_id) {
            b.exports.insert(offset, size);
            let generation = b.generations.get(&offset).copied().unwrap_or(0);
            b.export_generations.insert(offset, generation);
        }
        Ok(encode(
            self.seed,
            &Encode {
                exporter: p as u32,
                object,
                offset,
                size,
                serial,
                interior,
                ctx_salt,
            },
        ))
    }

    /// The generation of the slot at `offset` that an open of its handle
    /// reaches: the one last exported (`Block::export_generations`). Where
    /// first-fit reuse placed a new allocation there that was not exported
    /// since, the handle is the freed one's and reading through it is the
    /// access-after-free hazard (`opened_slot_reused`).
    fn slot_generation(&self, block: BlockId, offset: u64) -> u64 {
        self.blocks
            .get(&block)
            .and_then(|b| b.export_generations.get(&offset).copied())
            .unwrap_or(0)
    }

    /// The export object id of a block, made on its first export.
    fn export_object(&mut self, block: BlockId) -> u32 {
        if let Some(id) = self.blocks.get(&block).and_then(|b| b.export_id) {
            return id;
        }
        let mut salt = block;
        let id = loop {
            let id = hash(self.seed ^ 0x4f42_4a45_4354, &[salt]) as u32;
            if id != 0 && !self.export_ids.contains_key(&id) {
                break id;
            }
            salt = salt.wrapping_add(1 << 32);
        };
        self.export_ids.insert(id, block);
        if let Some(b) = self.blocks.get_mut(&block) {
            b.export_id = Some(id);
        }
        id
    }

    /// Whether `ipc_open` accepts `flags` (`open_flags`).
    pub(crate) fn open_flags_ok(&self, flags: u32) -> bool {
        match self.sem.open_flags {
            OpenFlags::LazyBit => flags & IPC_MEM_LAZY_ENABLE_PEER_ACCESS != 0,
            OpenFlags::LazyOrZero => flags == 0 || flags == IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            OpenFlags::LazyOnly => flags == IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            OpenFlags::Ignored => true,
        }
    }

    /// `cuIpcOpenMemHandle`: the driver's checks in the order the hardware
    /// showed them, each a named rule below that answers or lets the open go
    /// on; a handle that passes them all maps its block anew (`map_new`).
    pub(crate) fn ipc_open(
        &mut self,
        p: ProcessIndex,
        handle: &IpcMemHandle,
        flags: u32,
        out: OutArg,
    ) -> SimResult<u64> {
        self.open_arguments_rule(handle, flags, out)?;
        let tag = raw_process_tag(handle);
        self.own_process_rule(p, tag)?;
        let variant = self.known_variant(p, handle);
        let fresh_mapping = match &variant {
            Variant::Original(same) => {
                return self.open_copy_of_open_handle(p, handle, same, flags, out)
            }
            Variant::NewMapping => true,
            Variant::None | Variant::OtherSize => false,
        };
        // A copy of an open handle that another context of this process
        // opened (re-opening the mapping of the handle it copies) meets the
        // one-context rule before its memory-type word is read; a copy
        // never opened does not (mem.context.second-context-before-memory-type-of-opened-copy,
        // mem.handle.memory-type-before-context-rules).
        if let Ok(here) = self.current_ctx(p) {
            let copy_open_elsewhere = self.procs[p]
                .opened_copies
                .iter()
                .any(|(c, h)| *c != here.0 && h == handle);
            if copy_open_elsewhere {
                self.one_context_per_device_rule(p, here, tag, None)?;
            }
        }
        self.memory_type_rule(handle, &variant)?;
        self.undecoded_handle_rule(p, handle, tag)?;
        // A copy of an open handle with another serial is decoded afresh:
        // its format word is read even where the context maps the block
        // (2 x H200, explore seed 30112026 case 127).
        let h = match variant {
            Variant::NewMapping => decode(self.seed, handle)
                .ok_or_else(|| Fail::from(self.sem.garbage_handle_error))?,
            _ => self.format_word_rule(p, handle)?,
        };
        let (ctx, device) = self.current_ctx(p)?;
        self.one_context_before_check_word_rule(p, (ctx, device), &h)?;
        if let Some(ret) = self.reopen_stale(p, ctx, handle, h.object) {
            return Ok(ret);
        }
        if let Some(&freed) = self.freed_exports.get(&h.object) {
            return self.open_freed_export(p, (ctx, device), handle, &h, freed, flags);
        }
        // An object the driver does not know: never made, or its exporter exited.
        let Some(&block_id) = self.export_ids.get(&h.object) else {
            return Err(self.sem.dead_handle_error.into());
        };
        self.damaged_check_word_rule(block_id, &h)?;
        let Some(block) = self.blocks.get(&block_id) else {
            return Err(self.sem.dead_handle_error.into());
        };
        let block_device = block.device;
        self.cross_pidns_rule(p, block.owner)?;
        let export_size = self.damaged_offset_rule(p, block_id, &h)?;
        if device != block_device {
            self.cross_device_open(p, ctx, device, block_device, flags)?;
        }
        let ret_offset = self.returned_offset(handle, &h, export_size)?;
        self.dead_copy_after_exit_rule(p, ctx, block_id, handle)?;
        if self.sem.reopen != Reopen::NewMapping && !fresh_mapping {
            let export = (h.offset, h.size.min(export_size));
            if let Some(ret) =
                self.reopen_mapped_block(p, ctx, handle, block_id, export, ret_offset)?
            {
                return Ok(ret);
            }
        }
        self.open_mappings_rule(p)?;
        if let Some(answer) =
            self.freed_while_mapped_rule(p, (ctx, device), handle, &h, block_id, flags)
        {
            return answer;
        }
        self.new_mapping_after_exit_rule(p, ctx, block_id)?;
        self.one_context_per_device_rule(p, (ctx, device), h.exporter_tag, Some(block_device))?;
        // A copy past a smaller size field is InvalidValue
        // (mem.handle.size-field-bounds-copies); a larger one is unmeasured:
        // not widened.
        let export = (h.offset, h.size.min(export_size));
        self.map_new(p, (ctx, device), handle, &h, block_id, export, ret_offset)
    }

    /// The arguments come first: a NULL out pointer and flags the driver
    /// does not take are InvalidValue (mem.open.null-out, mem.flags.zero,
    /// mem.flags.other-bits), an all-zero handle `zero_handle_error`
    /// (mem.handle.zeroed).
    fn open_arguments_rule(&self, handle: &IpcMemHandle, flags: u32, out: OutArg) -> SimResult<()> {
        if out == OutArg::Null || !self.open_flags_ok(flags) {
            return Err(ErrorKind::InvalidValue.into());
        }
        if *handle == IpcMemHandle::ZERO {
            return Err(self.sem.zero_handle_error.into());
        }
        Ok(())
    }

    /// The own-process check comes first and reads the handle's process
    /// field only, before the format and memory-type words and before the
    /// context's table of opened handles: the exporter opening its own
    /// handle gets `open_in_exporter` (mem.open.own-process,
    /// mem.open.own-process-field, mem.open.own-process-before-format,
    /// mem.open.own-process-before-open-table).
    fn own_process_rule(&self, p: ProcessIndex, tag: u64) -> SimResult<()> {
        if tag == process_tag(self.seed, p) && !self.mutant(MutantId::ExporterOpensOwnHandle) {
            self.current_ctx(p)?;
            return Err(self.sem.open_in_exporter.into());
        }
        Ok(())
    }

    /// A copy of a handle the context's table has open opens the original
    /// (`known_variant`, mem.handle.copy-of-open-handle-table). Where the
    /// table's entry was opened with another process field, the
    /// one-context rule, which reads this handle's field, comes first: from
    /// a second context, where a copy with a damaged process field is open,
    /// the original handle is refused; from the first context it re-opens
    /// the copy's mapping (mem.context.second-context-process-field).
    fn open_copy_of_open_handle(
        &mut self,
        p: ProcessIndex,
        handle: &IpcMemHandle,
        original: &IpcMemHandle,
        flags: u32,
        out: OutArg,
    ) -> SimResult<u64> {
        if original.0[8..16] == handle.0[8..16] {
            let ret = self.ipc_open(p, original, flags, out)?;
            if let Ok((ctx, _)) = self.current_ctx(p) {
                self.procs[p].opened_copies.push((ctx, *handle));
            }
            return Ok(ret);
        }
        if let Ok(here) = self.current_ctx(p) {
            self.one_context_per_device_rule(p, here, raw_process_tag(handle), None)?;
        }
        let ptr = self.ipc_open(p, original, flags, out)?;
        // This open counts with the copy's process field, not the
        // original's (`Mapping::open_tags`).
        let newest = self.procs[p]
            .regions
            .last_at_or_before_mut(ptr)
            .and_then(|(_, r)| r.import.as_mut()?.open_tags.back_mut());
        if let Some(tag) = newest {
            *tag = raw_process_tag(handle);
        }
        Ok(ptr)
    }

    /// The memory-type word (bytes 32..37) is read right after the table: a
    /// damaged one is InvalidValue even from a second context, after the
    /// exporter exited, or where the table found a copy with another size
    /// field; that copy is AlreadyMapped once the word has been read
    /// (mem.handle.memory-type-before-context-rules,
    /// mem.handle.damaged-copy-of-open-handle).
    fn memory_type_rule(&self, handle: &IpcMemHandle, variant: &Variant) -> SimResult<()> {
        if handle.0[32..37] != MEMORY_TYPE {
            return Err(self.sem.garbage_handle_error.into());
        }
        if matches!(variant, Variant::OtherSize) {
            return Err(ErrorKind::AlreadyMapped.into());
        }
        Ok(())
    }

    /// A handle whose format word or object does not decode: the
    /// one-context-per-exporter rule, which reads the process field, comes
    /// before the format word (mem.context.second-context-before-format),
    /// and so does the exporter's exit: `dead_handle_error`
    /// (mem.lifetime.exporter-exit-before-format), except where the word is
    /// not read at all, the object and check word naming a block this
    /// context maps (mem.lifetime.format-word-unread-when-mapped-after-exit).
    fn undecoded_handle_rule(
        &self,
        p: ProcessIndex,
        handle: &IpcMemHandle,
        tag: u64,
    ) -> SimResult<()> {
        if decode(self.seed, handle).is_some() {
            return Ok(());
        }
        if let Ok(here) = self.current_ctx(p) {
            self.one_context_per_device_rule(p, here, tag, None)?;
        }
        // The exporter is known by the process field, or where that is
        // damaged too, by the export the object word names
        // (mem.lifetime.exporter-exit-before-format-and-process-field).
        let object = decode_fields(self.seed, handle).object;
        let exported_by_exited = self
            .export_ids
            .get(&object)
            .and_then(|b| self.blocks.get(b))
            .is_some_and(|b| self.procs[b.owner].exited);
        let exited = exported_by_exited
            || (0..self.procs.len())
                .any(|q| self.procs[q].exited && process_tag(self.seed, q) == tag);
        if exited && self.format_word_unread(p, handle).is_none() {
            return Err(self.sem.dead_handle_error.into());
        }
        Ok(())
    }

    /// A damaged format word is `garbage_handle_error` (InvalidValue,
    /// mem.handle.corrupted-fields) unless `format_word_unread` says the
    /// driver does not read it; returns the handle's fields. The object id
    /// is looked up first: one no export has is `dead_handle_error`, as with
    /// the format word intact (mem.handle.object-before-format-word).
    fn format_word_rule(&self, p: ProcessIndex, handle: &IpcMemHandle) -> SimResult<HandleData> {
        decode(self.seed, handle)
            .or_else(|| self.format_word_unread(p, handle))
            .ok_or_else(|| {
                let object = decode_fields(self.seed, handle).object;
                let known = self.export_ids.contains_key(&object)
                    || self.freed_exports.contains_key(&object);
                if known {
                    self.sem.garbage_handle_error.into()
                } else {
                    self.sem.dead_handle_error.into()
                }
            })
    }

    /// The fields of a handle whose damaged format word the driver does not
    /// read: where the object and check word name a block this context maps
    /// already (mem.handle.format-word-unread-when-mapped); for an export
    /// freed since whose VA driver memory claimed, or where the exporter has
    /// an allocation it did not export now, whose refusal comes first
    /// (mem.handle.format-word-after-claim, mem.handle.format-word-after-reuse;
    /// where the exporter exported another allocation there the word is
    /// read); and byte 24 alone for an
    /// allocation of blocks of its own whose size is not a multiple of the
    /// 2 MiB block: 2 MiB + 1 and 3 MiB open with it flipped, whole blocks
    /// and allocations within one block do not
    /// (mem.handle.format-byte-odd-size).
    fn format_word_unread(&self, p: ProcessIndex, handle: &IpcMemHandle) -> Option<HandleData> {
        let h = decode_fields(self.seed, handle);
        if let Some(f) = self.freed_exports.get(&h.object).filter(|_| h.checked) {
            let addr = f.base.saturating_add(h.offset);
            let claimed = self.freed_va_claimed(f.owner, addr, f.released);
            // An allocation of the exporter at the address now that is not
            // exported: its refusal (`open_stale`) comes first too
            // (mem.handle.format-word-after-reuse).
            let owner = &self.procs[f.owner];
            let exported_there = owner.allocs.get(&addr).is_some_and(|a| {
                self.blocks
                    .get(&a.block)
                    .is_some_and(|b| b.exports.contains_key(&a.offset))
            });
            let reused = !exported_there
                && (owner.alloc_at(addr).is_some() || owner.region_at(addr).is_some());
            if claimed || reused {
                return Some(h);
            }
        }
        let block = *self.export_ids.get(&h.object)?;
        // Freed while an importer still maps it, likewise: driver memory
        // that claimed its VA since is refused first
        // (mem.handle.format-word-after-claim-while-mapped).
        if let Some(b) = self.blocks.get(&block).filter(|_| h.checked) {
            if !b.owner_mapped && !self.procs[b.owner].exited {
                let addr = b.owner_base.saturating_add(h.offset);
                if self.freed_va_claimed(b.owner, addr, b.owner_released) {
                    return Some(h);
                }
            }
        }
        let odd_size = self.blocks.get(&block).is_some_and(|b| {
            b.exports
                .get(&h.offset)
                .is_some_and(|&size| size > BLOCK && size % BLOCK != 0)
        });
        if h.checked && odd_size && u32_at(&handle.0, 24) >> 8 == FORMAT >> 8 {
            return Some(h);
        }
        let (ctx, _) = self.current_ctx(p).ok()?;
        (h.checked && self.maps_block(p, ctx, block)).then_some(h)
    }

    /// The one-context-per-exporter rule comes before the object and check
    /// words too: a damaged check word from a second context is
    /// InvalidHandle, not InvalidValue
    /// (mem.context.second-context-before-check-word).
    fn one_context_before_check_word_rule(
        &self,
        p: ProcessIndex,
        here: (CtxKey, u32),
        h: &HandleData,
    ) -> SimResult<()> {
        let block_device = self
            .export_ids
            .get(&h.object)
            .and_then(|b| self.blocks.get(b))
            .map(|b| b.device);
        self.one_context_per_device_rule(p, here, h.exporter_tag, block_device)
    }

    /// "Handles from each device in a given process may only be opened by
    /// one context per device per other process": under
    /// `second_context=refuse`, a handle whose exporter (by its process
    /// field, and of `block_device` where known) another context of `p` on
    /// the same device maps is refused (mem.context.second-context-same-device,
    /// mem.context.second-context-process-field).
    fn one_context_per_device_rule(
        &self,
        p: ProcessIndex,
        (ctx, device): (CtxKey, u32),
        exporter_tag: u64,
        block_device: Option<u32>,
    ) -> SimResult<()> {
        if let ExportRule::Refuse(kind) = self.second_context_rule() {
            if self.second_context_clash(p, ctx, device, exporter_tag, block_device) {
                return Err(kind.into());
            }
        }
        Ok(())
    }

    /// The block was freed and nobody maps it: what the exporter has at its
    /// address decides (`stale_handle`,
    /// mem.lifetime.stale-handle-opens-new-export). A damaged check word is
    /// refused first, and driver memory made while that VA was free claims
    /// it whatever the exporter placed there since, an exported allocation
    /// or a VMM reservation: `reclaimed_export_error`
    /// (mem.lifetime.freed-export-claimed-then-reused,
    /// mem.lifetime.freed-export-claimed-before-reservation). Before both,
    /// a VMM unmap since an export made beside a VMM mapping makes it
    /// InvalidValue (mem.lifetime.freed-export-after-vmm-unmap).
    fn open_freed_export(
        &mut self,
        p: ProcessIndex,
        here: (CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
        freed: crate::world::FreedExport,
        flags: u32,
    ) -> SimResult<u64> {
        let addr = freed.base.saturating_add(h.offset);
        if !h.checked {
            // Judged as for the freed export's own block, where the exporter
            // holds a block at the address now
            // (mem.handle.check-word-at-reused-address): a block made there
            // while the exporter held one VMM allocation does not make the
            // copy NotPermitted when that allocation came after the freed
            // export (mem.handle.check-word-vmm-after-freed-export). The
            // rule always refuses a damaged check word.
            let block_now = self.procs[freed.owner].alloc_at(addr);
            return Err(match block_now {
                Some(_) => self.damaged_check_word_error(freed.owner, freed.owner_vmm.handles),
                None => self.sem.garbage_handle_error,
            }
            .into());
        }
        let at = FreedAt {
            owner: freed.owner,
            vmm_unmaps: freed.owner_vmm.unmaps,
            released: freed.released,
            addr,
            fresh_where_claimed: true,
        };
        if let Some(answer) = self.freed_export_first_rules(p, here, handle, h, at, flags) {
            return answer;
        }
        if freed
            .released
            .is_some_and(|r| self.claimed_since_release(freed.owner, addr, r))
        {
            return Err(self.sem.reclaimed_export_error.into());
        }
        // Once a created context that claimed the VA, or that was current
        // when the export was freed, is destroyed, the freed export is
        // InvalidValue, also after a block of the exporter's takes the
        // address (mem.lifetime.freed-export-claim-ended-then-block,
        // mem.lifetime.freed-export-freed-in-destroyed-context-then-block).
        let owner = &self.procs[freed.owner];
        let claim_ended = freed.released.is_some_and(|r| {
            owner
                .va_claims
                .iter()
                .any(|c| c.by == ClaimBy::Context && c.at >= r && c.held_until_ended(addr))
        }) || freed
            .freed_in_other
            .is_some_and(|c| owner.contexts.get(&c).is_some_and(|x| !x.alive));
        if claim_ended && self.exported_alloc_at(freed.owner, addr).is_none() {
            return Err(ErrorKind::InvalidValue.into());
        }
        self.open_stale(p, here, handle, h, freed.owner, addr, flags)
    }

    /// The rules both freed-export paths (`open_freed_export`,
    /// `freed_while_mapped_rule`) apply first, in this order: the
    /// exporter's own copy (`open_own_freed_export`), then a VMM unmap
    /// since the block was made beside a VMM mapping, which makes the
    /// export InvalidValue whatever holds its address
    /// (mem.lifetime.freed-export-after-vmm-unmap). `None`: neither decides.
    fn freed_export_first_rules(
        &mut self,
        p: ProcessIndex,
        here: (CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
        freed: FreedAt,
        flags: u32,
    ) -> Option<SimResult<u64>> {
        if p == freed.owner && self.sem.stale_handle == StaleHandle::ByAddress {
            if let Some(answer) = self.open_own_freed_export(p, here, handle, h, freed, flags) {
                return Some(answer);
            }
        }
        self.vmm_unmapped_since(freed.owner, freed.vmm_unmaps)
            .then(|| Err(ErrorKind::InvalidValue.into()))
    }

    /// The exporter itself opens a copy of its freed export (the
    /// own-process check passed by a damaged process field): it reaches
    /// what it holds at the freed address now, and a claim of that VA does
    /// not refuse it as it refuses an importer
    /// (mem.lifetime.exporter-own-copy-reaches-what-is-at-the-address).
    /// - An exported device allocation there opens, claimed or not
    ///   (mem.lifetime.exporter-own-copy-opens-new-export-at-claimed-va).
    /// - A VMM mapping there opens, a new mapping of its physical memory.
    /// - A device allocation never exported, or pinned host memory, opens
    ///   where no driver memory claimed the VA first; where some did,
    ///   InvalidValue (measured for a device allocation).
    /// - Nothing there: InvalidValue, unless a created context, a
    ///   stream-ordered pool or a VMM allocation made the first claim of the
    ///   VA since; then it opens new memory of the handle's size that reads
    ///   zeros: after a VMM allocation's or a pool's claim always, after a
    ///   context's where nobody maps the block any more
    ///   (`fresh_where_claimed`).
    ///
    /// `None`: something else is there (an IPC mapping), or nothing and the
    /// block still mapped by an importer after a context's claim:
    /// unmeasured; the importer's rules decide.
    fn open_own_freed_export(
        &mut self,
        p: ProcessIndex,
        here: (CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
        own: FreedAt,
        flags: u32,
    ) -> Option<SimResult<u64>> {
        let FreedAt {
            released,
            addr,
            fresh_where_claimed,
            ..
        } = own;
        // The first claim decides here too: after the process's interprocess
        // event memory claimed the VA first, even a new exported allocation
        // at the address is InvalidValue
        // (mem.lifetime.exporter-own-copy-refused-after-event-claim).
        let first = released.and_then(|r| self.first_claim_since_release(p, addr, r));
        if let Some((block_id, offset, size)) = self.exported_alloc_at(p, addr) {
            if first == Some(ClaimBy::EventMemory) {
                return Some(Err(ErrorKind::InvalidValue.into()));
            }
            return Some(self.map_stale(p, here, handle, h, block_id, (offset, size), flags));
        }
        let claimed_by = |by: fn(ClaimBy) -> bool| {
            released.is_some_and(|r| self.claimed_since_release_by(p, addr, r, by))
        };
        // Only a VMM allocation made since the free, which claimed the VA:
        // one made before it and mapped there later is InvalidValue
        // (mem.lifetime.exporter-own-copy-vmm-mapping-made-before-free).
        if let Some((block_id, offset)) = self.vmm_block_at(p, addr) {
            if !claimed_by(|by| by == ClaimBy::Vmm) {
                return Some(Err(ErrorKind::InvalidValue.into()));
            }
            return Some(self.map_stale(p, here, handle, h, block_id, (offset, h.size), flags));
        }
        let allocation = self.procs[p]
            .alloc_at(addr)
            .filter(|(_, a)| matches!(a.kind, MemKind::Device | MemKind::PinnedHost))
            .map(|(_, a)| (a.block, a.offset, a.size));
        if let Some((block_id, offset, _)) = allocation {
            if claimed_by(|_| true) {
                return Some(Err(ErrorKind::InvalidValue.into()));
            }
            // Of the handle's size, as for a VMM mapping: 1000 bytes of a
            // 2 MiB pinned host allocation.
            return Some(self.map_stale(p, here, handle, h, block_id, (offset, h.size), flags));
        }
        if self.procs[p].holds_within(addr, h.size) {
            return None;
        }
        // The first claim decides: a VMM allocation's claim opens fresh
        // memory as a context's does, unless the event memory claimed the VA
        // before it (mem.lifetime.exporter-own-copy-new-memory-after-vmm-claim).
        // A VMM allocation's or a pool's claim does so also while an importer
        // still maps the freed block, the pool's also once its allocation
        // is freed and the pool destroyed
        // (mem.lifetime.freed-while-mapped-exporter-own-copy-after-vmm-claim,
        // mem.lifetime.freed-while-mapped-exporter-own-copy-after-pool-claim);
        // a context's is unmeasured there.
        match first {
            Some(ClaimBy::Vmm | ClaimBy::StreamOrderedPool) => {
                return Some(self.map_fresh_memory(p, here, handle, h));
            }
            Some(ClaimBy::Context) => {
                return fresh_where_claimed.then(|| self.map_fresh_memory(p, here, handle, h));
            }
            _ => {}
        }
        Some(Err(ErrorKind::InvalidValue.into()))
    }

    /// A new mapping of new device memory of the handle's size, which reads
    /// zeros and which nothing else maps (`open_own_freed_export`).
    fn map_fresh_memory(
        &mut self,
        p: ProcessIndex,
        (ctx, device): (CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
    ) -> SimResult<u64> {
        let size = h.size.max(1).div_ceil(BLOCK).saturating_mul(BLOCK);
        self.charge_device(device, size)?;
        let block_id = self.insert_block(crate::world::Block::unowned(p, device, size, 0));
        self.map_new(p, (ctx, device), handle, h, block_id, (0, h.size), 0)
    }

    /// A damaged check word: after the exporter exited the copy is dead,
    /// InvalidHandle, as any copy the context's table does not find
    /// (mem.lifetime.damaged-handle-after-exporter-exit). Else it is
    /// NotPermitted where the exporter held one VMM allocation handle (made
    /// or imported) when the block was made and holds any still
    /// (mem.handle.check-word-with-vmm-allocation). Inferred, the mechanism
    /// unknown: InvalidValue where the VMM allocation came after the block,
    /// where the exporter held two handles then, its own export imported
    /// again (mem.handle.check-word-with-two-vmm-handles), or where it holds
    /// a VA reservation.
    fn damaged_check_word_rule(&self, block_id: BlockId, h: &HandleData) -> SimResult<()> {
        if h.checked {
            return Ok(());
        }
        match self.blocks.get(&block_id) {
            Some(b) => Err(self
                .damaged_check_word_error(b.owner, b.owner_vmm.handles)
                .into()),
            None => Err(self.sem.garbage_handle_error.into()),
        }
    }

    /// `damaged_check_word_rule` for memory `owner` made while it held
    /// `vmm_handles_then` VMM allocation handles.
    fn damaged_check_word_error(&self, owner: ProcessIndex, vmm_handles_then: usize) -> ErrorKind {
        if self.procs[owner].exited {
            return ErrorKind::InvalidHandle;
        }
        if vmm_handles_then == 1 && self.vmm_handles_held(owner) > 0 {
            return self.sem.reclaimed_export_error;
        }
        self.sem.garbage_handle_error
    }

    /// The size of the export the handle's offset names. An offset no export
    /// names: the H100 (580.159.04) refuses it with AlreadyMapped for a
    /// 2 MiB allocation (mem.handle.corrupted-fields) but opens it for a
    /// 1000-byte one at the start of a shared block
    /// (mem.handle.flipped-offset-small-allocation). Inferred from those
    /// two: accepted while the largest export still fits after it. An
    /// importer that holds a device allocation of its own opens it anyway
    /// (mem.handle.flipped-offset-importer-with-memory; one of 2 MiB at most,
    /// mem.handle.flipped-offset-importer-with-large-allocation), or pinned host
    /// memory (mem.handle.flipped-offset-importer-with-pinned-host); so does one that
    /// holds a VA reservation
    /// (mem.handle.flipped-offset-importer-with-reservation). A VMM
    /// allocation alone, or an IPC mapping opened and closed, is still
    /// AlreadyMapped. Only an offset inside the block was measured opening:
    /// one past its end would return a pointer outside the mapping (which no
    /// close could find).
    fn damaged_offset_rule(
        &self,
        p: ProcessIndex,
        block_id: BlockId,
        h: &HandleData,
    ) -> SimResult<u64> {
        let Some(block) = self.blocks.get(&block_id) else {
            return Err(self.sem.dead_handle_error.into());
        };
        if let Some(&size) = block.exports.get(&h.offset) {
            return Ok(size);
        }
        if self.mutant(MutantId::PanicOnDamagedOffset) {
            panic!("mutant: no export at offset {:#x}", h.offset);
        }
        let largest = block.exports.values().copied().max().unwrap_or(block.size);
        let ctx = self.current_ctx(p).ok().map(|(c, _)| c);
        // A device allocation of blocks of its own (over 2 MiB) does not
        // count (mem.handle.flipped-offset-importer-with-large-allocation).
        let own_memory = self.procs[p].allocs.values().any(|a| {
            let counts = match a.kind {
                MemKind::Device => a.size <= BLOCK,
                MemKind::PinnedHost => true,
                _ => false,
            };
            counts && Some(a.ctx) == ctx
        }) || self.vmm_reserves_any(p);
        if h.offset.saturating_add(largest) > block.size && (!own_memory || h.offset >= block.size)
        {
            return Err(ErrorKind::AlreadyMapped.into());
        }
        Ok(largest)
    }

    /// Where in the mapping the open returns: the allocation's offset in its
    /// block (`open_address`), plus the pointer's offset in the allocation
    /// under `interior_handle=pointer-offset`, which must fall inside the
    /// export (InvalidValue).
    fn returned_offset(
        &self,
        handle: &IpcMemHandle,
        h: &HandleData,
        export_size: u64,
    ) -> SimResult<u64> {
        let ret_offset = match self.sem.open_address {
            OpenAddress::AllocationBase => h.offset,
            OpenAddress::BlockBase => 0,
        };
        let interior = match self.sem.interior_handle {
            InteriorHandle::Allocation => 0,
            InteriorHandle::PointerOffset => interior_offset(handle),
        };
        if interior >= export_size {
            return Err(ErrorKind::InvalidValue.into());
        }
        Ok(ret_offset + interior)
    }

    /// After the exporter exited, a copy the context's table did not find
    /// (bytes 40..56 differ from every handle it opened on the block) is
    /// dead too: InvalidHandle where the context maps the block, else
    /// `dead_handle_error` (mem.lifetime.damaged-handle-after-exporter-exit).
    fn dead_copy_after_exit_rule(
        &self,
        p: ProcessIndex,
        ctx: CtxKey,
        block_id: BlockId,
        handle: &IpcMemHandle,
    ) -> SimResult<()> {
        let exporter_exited = self
            .blocks
            .get(&block_id)
            .is_some_and(|b| self.procs[b.owner].exited);
        if !exporter_exited {
            return Ok(());
        }
        let same_ids = self.procs[p].opened_like(ctx, handle).any(|(_, r, m)| {
            r.block == block_id && m.opened.iter().any(|o| o.0[40..56] == handle.0[40..56])
        });
        if same_ids {
            return Ok(());
        }
        if self.maps_block(p, ctx, block_id) {
            return Err(ErrorKind::InvalidHandle.into());
        }
        Err(self.sem.dead_handle_error.into())
    }

    /// Already mapped in this context: the documented refcount, on the
    /// mapping these very bytes (the cookie aside) opened if there is one; a
    /// copy with another serial maps again (`known_variant`). `None` where no
    /// mapping is shared and the open goes on to a new one; `export` is the
    /// allocation the handle names (offset in block, size).
    fn reopen_mapped_block(
        &mut self,
        p: ProcessIndex,
        ctx: CtxKey,
        handle: &IpcMemHandle,
        block_id: BlockId,
        export: (u64, u64),
        ret_offset: u64,
    ) -> SimResult<Option<u64>> {
        let Some(base) = self.shared_mapping(p, ctx, handle, block_id, export) else {
            return Ok(None);
        };
        if self.sem.reopen == Reopen::Error {
            return Err(ErrorKind::AlreadyMapped.into());
        }
        self.damaged_offset_while_mapped_rule(p, ctx, handle, block_id, base, export.0)?;
        let generation = self.slot_generation(block_id, export.0);
        let ret = base + ret_offset;
        self.procs[p].opened_ptrs.insert(ret, ());
        if let Some(m) = self.procs[p]
            .regions
            .get_mut(&base)
            .and_then(|r| r.import.as_mut())
        {
            let n = m.opens.get_or_insert(ret, 0);
            *n = n.saturating_add(1);
            m.open_tags.push_back(raw_process_tag(handle));
            m.exports.insert(
                export.0,
                OpenedExport {
                    size: export.1,
                    generation: Some(generation),
                },
            );
            m.closed.remove(&export.0);
            if !m.opened.contains(handle) {
                m.opened.push(*handle);
                self.procs[p].note_opened(ctx, handle, base);
            }
        }
        Ok(Some(ret))
    }

    /// The base of the mapping of `block_id` in context `ctx` that this
    /// handle re-opens, if any. A mapping a stale handle made is its own
    /// (`open_stale`). Only a mapping opened with this serial (bytes 40..48)
    /// is shared: a handle whose offset and serial both differ from every
    /// one this context opened maps the block again, at a new address
    /// (mem.handle.damaged-offset-other-serial); under
    /// `handle_stable=per-call` every ipc_get writes a new serial, which
    /// names nothing. A handle whose offset names no export, and whose range
    /// (offset, size field) overlaps nothing this context opened on the
    /// block, maps the block again (mem.handle.damaged-offset-disjoint-range).
    fn shared_mapping(
        &self,
        p: ProcessIndex,
        ctx: CtxKey,
        handle: &IpcMemHandle,
        block_id: BlockId,
        (offset, size): (u64, u64),
    ) -> Option<u64> {
        let proc = &self.procs[p];
        let bases = proc.mappings_of(ctx, block_id);
        // A context that does not map the block has no mapping to share.
        if bases.is_empty() {
            return None;
        }
        let mappings = || bases.iter().copied();
        let serials = self.sem.handle_stable == HandleStability::SameBytes;
        let serial = serial_of(handle);
        let first = mappings().filter(|b| !self.stale_mapping(p, *b)).find(|b| {
            proc.regions
                .get(b)
                .and_then(|r| r.import.as_ref())
                .is_none_or(|m| !serials || m.opened.iter().any(|o| serial_of(o) == serial))
        });
        let own = mappings().find(|b| {
            proc.regions
                .get(b)
                .and_then(|r| r.import.as_ref())
                .is_some_and(|m| m.opened.iter().any(|o| o.0[8..] == handle.0[8..]))
        });
        let end = offset.saturating_add(size);
        let disjoint = !self.offset_exported(block_id, offset)
            && !self.opened_exactly(p, ctx, handle, block_id)
            && mappings()
                .filter_map(|b| proc.regions.get(&b)?.import.as_ref())
                .all(|m| {
                    m.exports
                        .iter()
                        .all(|(&o, e)| o.saturating_add(e.size) <= offset || end <= o)
                });
        own.or(first).filter(|_| !disjoint)
    }

    /// A handle whose offset names no export of a block this context already
    /// maps, its range overlapping one opened there, is AlreadyMapped
    /// (mem.handle.damaged-offset-while-mapped; with no mapping it opens:
    /// mem.handle.flipped-offset-small-allocation). And the other way round
    /// (measured once, on the 2 x H200): a mapping a damaged offset made is
    /// not shared with a handle of another offset.
    fn damaged_offset_while_mapped_rule(
        &self,
        p: ProcessIndex,
        ctx: CtxKey,
        handle: &IpcMemHandle,
        block_id: BlockId,
        base: u64,
        offset: u64,
    ) -> SimResult<()> {
        if self.opened_exactly(p, ctx, handle, block_id) {
            return Ok(());
        }
        if !self.offset_exported(block_id, offset) {
            return Err(ErrorKind::AlreadyMapped.into());
        }
        let exported = |o: &u64| self.offset_exported(block_id, *o);
        let made_up = self.procs[p]
            .regions
            .get(&base)
            .and_then(|r| r.import.as_ref())
            .is_some_and(|m| m.exports.keys().any(|o| *o != offset && !exported(o)));
        if made_up {
            return Err(ErrorKind::AlreadyMapped.into());
        }
        Ok(())
    }

    /// Whether an export of `block_id` starts at `offset`.
    fn offset_exported(&self, block_id: BlockId, offset: u64) -> bool {
        self.blocks
            .get(&block_id)
            .is_some_and(|b| b.exports.contains_key(&offset))
    }

    /// Whether context `ctx` of `p` opened these very bytes on `block_id`.
    fn opened_exactly(
        &self,
        p: ProcessIndex,
        ctx: CtxKey,
        handle: &IpcMemHandle,
        block_id: BlockId,
    ) -> bool {
        self.procs[p]
            .opened_like(ctx, handle)
            .any(|(_, r, m)| r.block == block_id && m.opened.contains(handle))
    }

    /// Whether context `ctx` of `p` maps `block_id`.
    fn maps_block(&self, p: ProcessIndex, ctx: CtxKey, block_id: BlockId) -> bool {
        !self.procs[p].mappings_of(ctx, block_id).is_empty()
    }

    /// The exporter freed the block while another process maps it
    /// (`freed_export=refused`): only a new mapping is refused, InvalidValue
    /// (mem.lifetime.free-while-open); where the exporter's new allocation
    /// at the address is exported the handle opens it, as a stale handle
    /// does (mem.lifetime.freed-while-mapped-new-export);
    /// `reclaimed_export_error` where the exporter has something else in the
    /// freed range now or driver memory claimed the freed allocation's VA
    /// since, as for a stale handle
    /// (mem.lifetime.freed-while-mapped-va-claimed,
    /// mem.lifetime.freed-while-mapped-address-reused,
    /// mem.lifetime.freed-while-mapped-claimed-then-reused). A copy whose
    /// serial (bytes 40..48) is not the freed allocation's is looked up by
    /// address, as a stale handle of a block nobody maps: it opens the
    /// exported allocation there now
    /// (mem.lifetime.freed-while-mapped-serial-copy). The exporter itself,
    /// through a copy whose process field is damaged, from a context other
    /// than the block's, maps the block it freed anew, claimed VA or not
    /// (mem.lifetime.freed-while-mapped-exporter-other-context), where it
    /// had no other context on that device when it freed the block; from
    /// the block's own context, or after such a free, it is refused as for
    /// anyone. `None`: the rule
    /// does not apply.
    fn freed_while_mapped_rule(
        &mut self,
        p: ProcessIndex,
        (ctx, device): (CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
        block_id: BlockId,
        flags: u32,
    ) -> Option<SimResult<u64>> {
        let block = self.blocks.get(&block_id)?;
        let exporter = block.owner;
        let freed_by_exporter = !block.owner_mapped && !self.procs[exporter].exited;
        // Only where the exporter had no such other context when it freed
        // the block: one that existed then makes the copy InvalidValue from
        // any context, one made later too
        // (mem.lifetime.freed-while-mapped-exporter-context-made-before).
        let own_other_context =
            p == exporter && ctx != block.owner_ctx && !block.owner_other_ctx_at_unmap;
        if !freed_by_exporter || self.sem.freed_export != FreedExport::Refused || own_other_context
        {
            return None;
        }
        let addr = block.owner_base.saturating_add(h.offset);
        let released = block.owner_released;
        // `ipc_get` writes serial 0 under `handle_stable=same-bytes`.
        if serial_of(handle) != 0 {
            // An exported block of the exporter's over the address opens at
            // the handle's offset, though no exported allocation starts
            // there (mem.lifetime.freed-while-mapped-serial-copy-exported-block).
            if self.sem.stale_handle == StaleHandle::ByAddress {
                if let Some((block_id, offset)) = self.exported_block_at(exporter, addr) {
                    let at = (offset, h.size);
                    return Some(self.map_stale(p, (ctx, device), handle, h, block_id, at, flags));
                }
            }
            // Driver memory that claimed the freed VA since refuses it, as it
            // refuses the handle itself, also once the VA's arena is retired
            // (mem.lifetime.freed-while-mapped-serial-copy-claimed).
            if released.is_some_and(|r| self.claimed_since_release(exporter, addr, r)) {
                return Some(Err(self.sem.reclaimed_export_error.into()));
            }
            return Some(self.open_stale(p, (ctx, device), handle, h, exporter, addr, flags));
        }
        let at = FreedAt {
            owner: exporter,
            vmm_unmaps: block.owner_vmm.unmaps,
            released,
            addr,
            fresh_where_claimed: false,
        };
        if let Some(answer) = self.freed_export_first_rules(p, (ctx, device), handle, h, at, flags)
        {
            return Some(answer);
        }
        let owner = &self.procs[exporter];
        // The exporter's new allocation at the address is exported: the
        // handle opens it, as a stale handle does
        // (mem.lifetime.freed-while-mapped-new-export).
        if self.sem.stale_handle == StaleHandle::ByAddress
            && self.exported_alloc_at(exporter, addr).is_some()
        {
            return Some(self.open_stale(p, (ctx, device), handle, h, exporter, addr, flags));
        }
        // Anything of the exporter's within the freed allocation's range,
        // not only at its start: a small allocation's new block carved from
        // a freed 3 MiB allocation's VA (mem.lifetime.freed-export-range-reused).
        let taken = owner.holds_within(addr, h.size);
        if taken || self.freed_va_claimed(exporter, addr, released) {
            return Some(Err(self.sem.reclaimed_export_error.into()));
        }
        Some(Err(ErrorKind::InvalidValue.into()))
    }

    /// After the exporter exited, only a context that still maps the block
    /// opens it again; a new mapping is refused as for a dead handle, even
    /// while another importer keeps the memory alive
    /// (mem.lifetime.new-importer-after-exporter-exit,
    /// mem.lifetime.reopen-after-exporter-exit).
    fn new_mapping_after_exit_rule(
        &self,
        p: ProcessIndex,
        ctx: CtxKey,
        block_id: BlockId,
    ) -> SimResult<()> {
        let exporter_exited = self
            .blocks
            .get(&block_id)
            .is_some_and(|b| self.procs[b.owner].exited);
        if exporter_exited && !self.maps_block(p, ctx, block_id) {
            return Err(self.sem.dead_handle_error.into());
        }
        Ok(())
    }

    /// A new mapping of block `block_id` in process `p`, opened with
    /// `handle` for the allocation `export` (offset in block, size); returns
    /// the pointer at `ret_offset` in it.
    #[allow(clippy::too_many_arguments)]
    fn map_new(
        &mut self,
        p: ProcessIndex,
        (ctx, device): (crate::world::CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
        block_id: BlockId,
        export: (u64, u64),
        ret_offset: u64,
    ) -> SimResult<u64> {
        let Some(block) = self.blocks.get(&block_id) else {
            return Err(self.sem.dead_handle_error.into());
        };
        let (block_size, exporter) = (block.size, block.owner);
        let generation = self.slot_generation(block_id, export.0);
        let pool = crate::world::VaPool {
            ctx,
            class: crate::world::VaClass::Device,
        };
        let base = self.procs[p]
            .reserve_va(block_size, pool)
            .ok_or(ErrorKind::OutOfMemory)?;
        self.procs[p].note_fresh_import(base);
        let ret = base + ret_offset;
        let buffer_id = self.new_buffer_id();
        let proc = &mut self.procs[p];
        proc.regions.insert(
            base,
            Region {
                len: block_size,
                block: block_id,
                import: Some(Box::new(Mapping {
                    ctx,
                    device,
                    exporter,
                    open_tags: std::collections::VecDeque::from([h.exporter_tag]),
                    opened: vec![*handle],
                    exports: SmallMap::one(
                        export.0,
                        OpenedExport {
                            size: export.1,
                            generation: Some(generation),
                        },
                    ),
                    opens: SmallMap::one(ret, 1),
                    closed: SmallMap::Empty,
                    buffer_id,
                })),
            },
        );
        proc.add_import(ctx, block_id, base);
        proc.note_opened(ctx, handle, base);
        proc.opened_ptrs.insert(ret, ());
        if let Some(b) = self.blocks.get_mut(&block_id) {
            b.importers = b.importers.saturating_add(1);
        }
        Ok(ret)
    }

    /// `ipc_open` of a handle whose block its exporter freed and nobody maps
    /// any more, by `stale_handle`: the handle reaches what the exporter has
    /// at the freed allocation's address `addr` now
    /// (mem.lifetime.stale-handle-opens-new-export). An exported device
    /// allocation there opens, also where `addr` (a damaged offset field)
    /// falls inside it (mem.lifetime.stale-handle-interior-address), in a
    /// mapping of its own that the new allocation's own handle does not
    /// share; free VA is InvalidValue, and so is VA a VMM reservation holds
    /// now, mapped or not; an allocation not exported (yet),
    /// pinned host memory, or VA that was free in the current arena when a
    /// `ctx_create` came (released before it) is `reclaimed_export_error`
    /// (mem.lifetime.freed-export-after-new-allocation). VA freed into an
    /// arena an earlier `ctx_create` already closed stays InvalidValue through
    /// later ones (mem.lifetime.freed-export-va-retired-by-ctx-create).
    #[allow(clippy::too_many_arguments)]
    fn open_stale(
        &mut self,
        p: ProcessIndex,
        (ctx, device): (crate::world::CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
        owner: ProcessIndex,
        addr: u64,
        flags: u32,
    ) -> SimResult<u64> {
        let target = self.exported_alloc_at(owner, addr);
        let proc = &self.procs[owner];
        if let (StaleHandle::ByAddress, Some((block_id, offset, size))) =
            (self.sem.stale_handle, target)
        {
            return self.map_stale(p, (ctx, device), handle, h, block_id, (offset, size), flags);
        }
        // A block placed while a large or VMM allocation's claim held the
        // VA does not take the address: once that claim ended the handle is
        // InvalidValue, as for free VA
        // (mem.lifetime.block-in-claimed-va-does-not-take-freed-export).
        let passed_over = proc
            .alloc_at(addr)
            .and_then(|(_, a)| self.blocks.get(&a.block))
            .is_some_and(|b| b.placed_in_held_va);
        let taken = !passed_over && proc.holds_within(addr, h.size);
        let free = passed_over || self.free_va_claimed(owner, addr) == Some(false);
        // VA a VMM reservation took since counts as free: legacy memory's
        // table does not know it (InvalidValue, as `stale_handle` says for
        // free VA), also with VMM memory mapped there, with or without access
        // (mem.lifetime.stale-handle-at-vmm-mapping-invalid-value).
        let vmm = self.vmm_reserved_at(owner, addr);
        if (free || vmm) && !taken {
            return Err(ErrorKind::InvalidValue.into());
        }
        Err(self.sem.reclaimed_export_error.into())
    }

    /// The block `owner` maps over `addr` where one of its allocations is
    /// exported: (block, offset of `addr` in it).
    fn exported_block_at(&self, owner: ProcessIndex, addr: u64) -> Option<(BlockId, u64)> {
        let (base, r) = self.procs[owner].region_at(addr)?;
        if r.import.is_some() {
            return None;
        }
        let b = self.blocks.get(&r.block)?;
        let exported = b.kind == MemKind::Device && !b.exports.is_empty();
        exported.then_some((r.block, addr - base))
    }

    /// The exported device allocation of `owner` that `addr` falls in:
    /// (block, offset in it, size).
    fn exported_alloc_at(&self, owner: ProcessIndex, addr: u64) -> Option<(BlockId, u64, u64)> {
        let (_, a) = self.procs[owner].alloc_at(addr)?;
        let exported = a.kind == MemKind::Device
            && self
                .blocks
                .get(&a.block)
                .is_some_and(|b| b.exports.contains_key(&a.offset));
        exported.then_some((a.block, a.offset, a.size))
    }

    /// Whether driver memory `owner` made after release stamp `released`
    /// claimed `addr` while it was free, and still lives.
    fn claimed_since_release(&self, owner: ProcessIndex, addr: u64, released: u64) -> bool {
        self.claimed_since_release_by(owner, addr, released, |_| true)
    }

    /// [`World::claimed_since_release`] by driver memory of the kinds `by`
    /// accepts.
    fn claimed_since_release_by(
        &self,
        owner: ProcessIndex,
        addr: u64,
        released: u64,
        by: fn(ClaimBy) -> bool,
    ) -> bool {
        self.live_claims_of(owner, addr, released).any(|c| by(c.by))
    }

    /// The claims of `addr` that driver memory `owner` made after release
    /// stamp `released` and that still live, oldest first.
    fn live_claims_of(
        &self,
        owner: ProcessIndex,
        addr: u64,
        released: u64,
    ) -> impl Iterator<Item = &crate::world::VaClaim> + '_ {
        // A claim whose memory is gone was ended (`Process::end_claims`):
        // it holds nothing.
        self.procs[owner]
            .va_claims
            .iter()
            .filter(move |c| c.at >= released && c.holds(addr))
    }

    /// What made the first live claim of `addr` since release stamp
    /// `released` (`World::claimed_since_release`).
    fn first_claim_since_release(
        &self,
        owner: ProcessIndex,
        addr: u64,
        released: u64,
    ) -> Option<ClaimBy> {
        self.live_claims_of(owner, addr, released)
            .next()
            .map(|c| c.by)
    }

    /// Whether driver memory claimed the VA at `addr` of an export `owner`
    /// freed (`released`: the free's stamp, where the free released it):
    /// a claim made since that still lives, or one of the free span it
    /// lies in now (`reclaimed_export_error`).
    fn freed_va_claimed(&self, owner: ProcessIndex, addr: u64, released: Option<u64>) -> bool {
        released.is_some_and(|r| self.claimed_since_release(owner, addr, r))
            || self.free_va_claimed(owner, addr) == Some(true)
    }

    /// Whether `addr` lies in VA `owner` released: `Some(true)` when driver
    /// memory made since claims it (a `ctx_create` closing its arena, a live
    /// VMM allocation, the process's first interprocess event:
    /// `reclaimed_export_error`), `Some(false)` when it is simply free.
    fn free_va_claimed(&self, owner: ProcessIndex, addr: u64) -> Option<bool> {
        let proc = &self.procs[owner];
        let (&b, f) = proc.free_va.range(..=addr).next_back()?;
        if addr >= b.saturating_add(f.span) {
            return None;
        }
        // Released while another context was current: never claimed
        // (`Process::claim_free_va`,
        // mem.lifetime.freed-from-other-context-not-claimed).
        if proc.released_elsewhere(f).is_some() {
            return Some(false);
        }
        Some(proc.va_claims.iter().any(|c| c.claims_free_va(addr, f)))
    }

    /// A new mapping of `block_id` for a stale handle (`open_stale`).
    #[allow(clippy::too_many_arguments)]
    fn map_stale(
        &mut self,
        p: ProcessIndex,
        (ctx, device): (crate::world::CtxKey, u32),
        handle: &IpcMemHandle,
        h: &HandleData,
        block_id: BlockId,
        (offset, size): (u64, u64),
        flags: u32,
    ) -> SimResult<u64> {
        let Some(block) = self.blocks.get(&block_id) else {
            return Err(self.sem.dead_handle_error.into());
        };
        let block_device = block.device;
        if device != block_device {
            self.cross_device_open(p, ctx, device, block_device, flags)?;
        }
        self.map_new(
            p,
            (ctx, device),
            handle,
            h,
            block_id,
            (offset, size),
            offset,
        )
    }

    /// The mapping at `base` was made by a stale handle: none of the handles
    /// that opened it carries its block's export object id.
    pub(crate) fn stale_mapping(&self, p: ProcessIndex, base: u64) -> bool {
        let Some(r) = self.procs[p].regions.get(&base) else {
            return false;
        };
        let id = self.blocks.get(&r.block).and_then(|b| b.export_id);
        r.import.as_ref().is_some_and(|m| {
            !m.opened.is_empty()
                && m.opened
                    .iter()
                    .all(|o| id.is_none_or(|id| u32_at(&o.0, 48) != id))
        })
    }

    /// Re-open (refcount) the mapping these bytes (the cookie aside) made in
    /// `ctx` as a stale handle of export object `object`.
    fn reopen_stale(
        &mut self,
        p: ProcessIndex,
        ctx: crate::world::CtxKey,
        handle: &IpcMemHandle,
        object: u32,
    ) -> Option<u64> {
        if self.sem.reopen != Reopen::Refcount {
            return None;
        }
        let base = self.procs[p]
            .opened_like(ctx, handle)
            .find(|(_, r, m)| {
                m.opened.iter().any(|o| o.0[8..] == handle.0[8..])
                    && self
                        .blocks
                        .get(&r.block)
                        .is_some_and(|b| b.export_id != Some(object))
            })
            .map(|(b, _, _)| b)?;
        let m = self.procs[p]
            .regions
            .get_mut(&base)
            .and_then(|r| r.import.as_mut())?;
        let offset = m.exports.keys().next().copied()?;
        let ret = base + offset;
        let n = m.opens.get_or_insert(ret, 0);
        *n = n.saturating_add(1);
        m.open_tags.push_back(raw_process_tag(handle));
        m.closed.remove(&offset);
        self.procs[p].opened_ptrs.insert(ret, ());
        Some(ret)
    }

    fn second_context_rule(&self) -> ExportRule {
        if self.mutant(MutantId::SecondContextAllowed) {
            ExportRule::Allow
        } else {
            self.sem.second_context
        }
    }

    /// Another context of `p` on `device` maps memory of the exporter the
    /// handle's process field names
    /// (mem.context.second-context-process-field), of `block_device` when the
    /// handle could be decoded (mem.context.second-context-same-device).
    fn second_context_clash(
        &self,
        p: ProcessIndex,
        ctx: crate::world::CtxKey,
        device: u32,
        tag: u64,
        block_device: Option<u32>,
    ) -> bool {
        let proc = &self.procs[p];
        let others = proc
            .contexts
            .iter()
            .filter(|&(&c, x)| c != ctx && x.device == device);
        others.into_iter().any(|(&c, _)| {
            proc.regions.values().any(|r| {
                r.import
                    .as_ref()
                    .is_some_and(|m| m.ctx == c && m.open_tags.contains(&tag))
                    && block_device
                        .is_none_or(|d| self.blocks.get(&r.block).is_some_and(|x| x.device == d))
            })
        })
    }

    /// A copy of a handle this context already has open, judged against the
    /// handle it opened (mem.handle.copy-of-open-handle-table). The context's
    /// table of opened handles is looked up by the offset (bytes 28..31) and
    /// bytes 40..56 (serial, object id, check word); the other bytes are not
    /// compared: a copy that differs only in the cookie, the process field,
    /// the format or the memory-type word re-opens the mapping, even after the
    /// exporter exited (mem.lifetime.reopen-after-exporter-exit). A different
    /// size field is AlreadyMapped (mem.handle.damaged-copy-of-open-handle),
    /// once the memory-type word has been read
    /// (mem.handle.memory-type-before-context-rules). A copy that differs from
    /// an opened handle only in the serial (bytes 40..48; object id and check
    /// word equal) maps the memory again (mem.handle.serial-copy-maps-again);
    /// after the exporter exited such a copy is dead, as any the table does
    /// not find (mem.lifetime.damaged-handle-after-exporter-exit).
    fn known_variant(&self, p: ProcessIndex, handle: &IpcMemHandle) -> Variant {
        if self.sem.reopen != Reopen::Refcount {
            return Variant::None;
        }
        let Ok((ctx, _)) = self.current_ctx(p) else {
            return Variant::None;
        };
        let proc = &self.procs[p];
        // No mapping of this context was opened with a handle of this
        // export object: the handle copies none (the common first open).
        if !proc.opened_object(ctx, handle) {
            debug_assert!(proc.opened_like(ctx, handle).next().is_none());
            return Variant::None;
        }
        let b = &handle.0;
        // Under `interior_handle=pointer-offset` the pointer's offset (bytes
        // 56..64) is part of the table's key: ROCm's FindIpcHandleMemObj
        // compares the ROCr handle and `poffset`, so another interior
        // pointer's handle is not a copy of an open one (it opens at its own
        // offset).
        let interior = self.sem.interior_handle == InteriorHandle::PointerOffset;
        let original = proc.opened_like(ctx, handle).find_map(|(_, r, m)| {
            m.opened
                .iter()
                .find(|o| {
                    o.0[28..31] == b[28..31]
                        && o.0[40..56] == b[40..56]
                        && (!interior || o.0[56..64] == b[56..64])
                })
                .map(|&o| (o, r.len))
        });
        let Some((original, mapped)) = original else {
            // A copy whose serial (bytes 40..48, otherwise ignored) differs
            // maps the memory again, at a new address
            // (mem.handle.serial-copy-maps-again). Under
            // `handle_stable=per-call` every ipc_get writes a new serial, so a
            // serial names no slot and is ignored.
            let serials = self.sem.handle_stable == HandleStability::SameBytes;
            let reserial = serials
                && proc.opened_like(ctx, handle).any(|(_, _, m)| {
                    m.opened.iter().any(|o| {
                        o.0[28..31] == b[28..31]
                            && o.0[48..56] == b[48..56]
                            && o.0[40..48] != b[40..48]
                    })
                });
            return if reserial {
                Variant::NewMapping
            } else {
                Variant::None
            };
        };
        // The table holds the first open's size field, bounded by the
        // mapped block: a handle whose size field is another number is
        // AlreadyMapped, the very handle that opened it included when its
        // field was past the block; one whose field is that number opens
        // the mapping again (mem.handle.larger-size-copy-then-original).
        let registered = size_field(&original).min(mapped);
        if size_field(handle) != registered {
            return Variant::OtherSize;
        }
        if original == *handle || size_field(&original) != registered {
            return Variant::None;
        }
        Variant::Original(original)
    }

    /// `ipc_close`: one open fewer; the mapping goes with the last one.
    pub(crate) fn close(&mut self, p: ProcessIndex, ptr: u64) -> SimResult<()> {
        let mutant_close = self.mutant(MutantId::CloseDoesNotDecrement);
        let unopened = if self.mutant(MutantId::UndocumentedCloseError) {
            ErrorKind::NotMapped
        } else {
            self.sem.close_unopened
        };
        // The IPC mapping containing `ptr` (`Process::region_at`), where
        // `ptr` is open.
        let open_here = self.procs[p]
            .regions
            .last_at_or_before_mut(ptr)
            .filter(|(base, r)| ptr - base < r.len)
            .and_then(|(base, r)| Some((base, r.import.as_mut()?)))
            .filter(|(_, m)| m.opens.contains_key(&ptr));
        let Some((base, m)) = open_here else {
            self.close_unopened(p, ptr);
            return Err(unopened.into());
        };
        let only_open = m.opens.len() == 1;
        let Some(n) = m.opens.get_mut(&ptr) else {
            return Err(unopened.into());
        };
        if !mutant_close {
            *n -= 1;
            m.open_tags.pop_front();
        }
        if *n == 0 && only_open {
            // The mapping's last open: it goes, with what it remembers of
            // its opens.
            self.unmap_import(p, base);
            return Ok(());
        }
        if *n == 0 {
            m.opens.remove(&ptr);
            // The pointer's allocation stays reachable through a neighbour's
            // open; remember that its own opens are gone (access-after-close).
            if let Some((o, _)) = m.export_at(ptr - base) {
                if !m
                    .opens
                    .keys()
                    .any(|&q| m.export_at(q - base).is_some_and(|(x, _)| x == o))
                {
                    m.closed.insert(o, ());
                }
            }
        }
        if m.opens.is_empty() {
            self.unmap_import(p, base);
        }
        Ok(())
    }

    /// `ipc_close` of `ptr` with no open of it outstanding in `p`: a
    /// `double-close` if `p` opened it before, else a `foreign-close`. The
    /// close reaches nothing: another process's mapping at the same address
    /// is that process's alone (mem.close.foreign-pointer).
    fn close_unopened(&mut self, p: ProcessIndex, ptr: u64) {
        if self.procs[p].opened_ptrs.contains_key(&ptr) {
            self.hazard(
                HazardKind::DoubleClose,
                p,
                format!("cudaIpcCloseMemHandle({ptr:#x}): every open of it in this process is closed already"),
            );
        } else {
            self.hazard(
                HazardKind::ForeignClose,
                p,
                format!("cudaIpcCloseMemHandle({ptr:#x}): this process never opened that pointer"),
            );
        }
        if self.mutant(MutantId::ForeignCloseClosesOtherMapping) {
            let holder = (0..self.procs.len()).find(|&q| {
                q != p
                    && self.procs[q].region_at(ptr).is_some_and(|(_, r)| {
                        r.import
                            .as_ref()
                            .is_some_and(|m| m.opens.contains_key(&ptr))
                    })
            });
            if let Some(q) = holder {
                let _ = self.close(q, ptr);
            }
        }
    }
}
