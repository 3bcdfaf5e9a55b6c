//! Devices and contexts: ordinal remapping, primary contexts (created on
//! first use, one per device), extra contexts, and the thread's context
//! stack, whose top is the current context: `cuCtxCreate` pushes,
//! `cuCtxSetCurrent` and `cudaSetDevice` replace the top (`NULL` pops it),
//! `cuCtxDestroy` of the current context pops it, so the context current
//! before is current again (vmm.create.without-current-context).

use crate::seed::hash;
use crate::semantics::{DestroyPrimary, SetDestroyedContext};
use crate::world::{Context, CtxKey, SimResult, World, RETIRED_ARENA};
use ipc_harness::{DeviceAttribute, ErrorKind, ProcessIndex};

impl World {
    /// Physical device behind the process's own ordinal `d`.
    pub(crate) fn physical(&self, p: ProcessIndex, d: u32) -> SimResult<u32> {
        self.procs[p]
            .visible
            .get(d as usize)
            .copied()
            .ok_or(ErrorKind::InvalidDevice.into())
    }

    pub(crate) fn device_count(&self, p: ProcessIndex) -> u32 {
        self.procs[p].visible.len() as u32
    }

    pub(crate) fn device_attribute(
        &self,
        p: ProcessIndex,
        d: u32,
        attr: DeviceAttribute,
    ) -> SimResult<i64> {
        self.physical(p, d)?;
        // An H100-like device with every IPC-relevant feature present.
        Ok(match attr {
            DeviceAttribute::UnifiedAddressing => 1,
            DeviceAttribute::IpcEventSupport => 1,
            DeviceAttribute::ComputeCapabilityMajor => 9,
            DeviceAttribute::ComputeCapabilityMinor => 0,
            DeviceAttribute::MemoryPoolsSupported => 1,
            DeviceAttribute::HandleTypePosixFdSupported => 1,
            DeviceAttribute::VirtualMemoryManagementSupported => 1,
            // Measured 1 on the H100 (although cuMemCreate of a fabric
            // allocation is refused there: `vmm_fabric`).
            DeviceAttribute::HandleTypeFabricSupported => 1,
        })
    }

    /// A fresh context id: opaque, non-zero, unique in the process, and a
    /// pure function of the seed and the process's creation order.
    fn new_context(&mut self, p: ProcessIndex, device: u32, primary: bool) -> CtxKey {
        let seed = self.seed;
        let proc = &mut self.procs[p];
        loop {
            proc.ctx_serial = proc.ctx_serial.wrapping_add(1);
            let id = hash(seed, &[0xC7, p as u64, proc.ctx_serial]) | 1;
            if !proc.contexts.contains_key(&id) {
                proc.contexts.insert(
                    id,
                    Context {
                        device,
                        primary,
                        alive: true,
                        born: proc.va_releases,
                        serial: proc.ctx_serial,
                        claimed_arena: None,
                        claim: None,
                        arena: 0,
                    },
                );
                return id;
            }
        }
    }

    /// The primary context of a physical device, created on first use.
    pub(crate) fn ensure_primary(&mut self, p: ProcessIndex, device: u32) -> CtxKey {
        let proc = &self.procs[p];
        if let Some(&c) = proc.primary.get(&u64::from(device)) {
            if proc.contexts.get(&c).is_some_and(|x| x.alive) {
                return c;
            }
        }
        let c = self.new_context(p, device, true);
        self.procs[p].primary.insert(u64::from(device), c);
        c
    }

    pub(crate) fn set_device(&mut self, p: ProcessIndex, d: u32) -> SimResult<()> {
        let phys = self.physical(p, d)?;
        let c = self.ensure_primary(p, phys);
        self.procs[p].current = Some(c);
        Ok(())
    }

    pub(crate) fn primary_context(&mut self, p: ProcessIndex, d: u32) -> SimResult<CtxKey> {
        let phys = self.physical(p, d)?;
        Ok(self.ensure_primary(p, phys))
    }

    pub(crate) fn create_context(&mut self, p: ProcessIndex, d: u32) -> SimResult<CtxKey> {
        let phys = self.physical(p, d)?;
        let c = self.new_context(p, phys, false);
        self.driver_fd_for_context(p, c);
        let proc = &mut self.procs[p];
        proc.ctx_below.extend(proc.current);
        proc.current = Some(c);
        // `va_reuse=top-down`: VA reserved before this call is never handed
        // out again (mem.lifetime.va-reuse-after-ctx-create).
        proc.arena_seq = proc.arena_seq.wrapping_add(1);
        let claim = proc.va_claims.len();
        if let Some(x) = proc.contexts.get_mut(&c) {
            x.claimed_arena = Some(proc.arena);
            x.arena = proc.arena_seq;
            x.claim = Some(claim);
        }
        // The new context claims the free VA of the arena it closes
        // (`reclaimed_export_error`).
        proc.claim_free_va(crate::world::ClaimBy::Context, None, None);
        proc.arena = proc.arena_seq;
        // VA a destroyed context released goes to the next context made, not
        // to the primary context made current instead
        // (mem.lifetime.destroyed-context-va-to-next-context).
        for f in proc.free_va.values_mut() {
            if f.arena == RETIRED_ARENA {
                f.arena = proc.arena;
                f.pool.ctx = c;
            }
        }
        Ok(c)
    }

    /// `cuCtxSetCurrent`: replaces the top of the context stack; the null
    /// context pops it.
    pub(crate) fn set_current_context(&mut self, p: ProcessIndex, ctx: CtxKey) -> SimResult<()> {
        let proc = &mut self.procs[p];
        if ctx == 0 {
            proc.current = proc.ctx_below.pop();
            return Ok(());
        }
        match proc.contexts.get(&ctx) {
            Some(c) if c.alive => {}
            // Current, but dead: later calls find no usable context.
            Some(_) if self.sem.set_destroyed_context == SetDestroyedContext::Accepted => {}
            _ => return Err(ErrorKind::InvalidContext.into()),
        }
        proc.current = Some(ctx);
        Ok(())
    }

    /// The current context, destroyed or not (measured: a destroyed context
    /// made current is what cuCtxGetCurrent returns).
    pub(crate) fn current_context(&self, p: ProcessIndex) -> Option<CtxKey> {
        let proc = &self.procs[p];
        proc.current.filter(|c| proc.contexts.contains_key(c))
    }

    /// `cuCtxDestroy`: the context's allocations are freed and its IPC
    /// mappings closed; its id stays known so later use says InvalidContext.
    pub(crate) fn destroy_context(&mut self, p: ProcessIndex, ctx: CtxKey) -> SimResult<()> {
        let Some(c) = self.procs[p].contexts.get(&ctx).filter(|c| c.alive) else {
            return Err(ErrorKind::InvalidContext.into());
        };
        let (primary, device) = (c.primary, c.device);
        if primary && self.sem.destroy_primary == DestroyPrimary::Error {
            return Err(ErrorKind::InvalidContext.into());
        }
        // A sticky error stops the call only after that check: destroying the
        // primary context after a fault is cudaErrorDeviceUninitialized, not
        // 700 (mem.context.destroy-primary-after-fault); it never stops
        // destroying a created context, and the process stays poisoned
        // (mem.context.destroy-created-after-fault).
        if let (Some(kind), true) = (self.procs[p].sticky, primary) {
            return Err(kind.into());
        }
        self.release_context(p, ctx, true);
        self.driver_fd_of_context_closes(p, ctx);
        let proc = &mut self.procs[p];
        // `va_reuse=top-down`: VA the destroyed context released is not handed
        // out again, and when it was the newest context made, the arena
        // current before its creation is current again: VA reserved before it
        // and released after it is handed out again
        // (mem.context.va-after-ctx-destroy,
        // mem.context.va-after-ctx-destroy-earlier-arena).
        for f in proc.free_va.values_mut() {
            if f.pool.ctx == ctx {
                f.arena = RETIRED_ARENA;
            }
        }
        // The shared event memory made while the context's arena was current
        // goes with the context, and so does its claim: a freed export's VA
        // there is InvalidValue again
        // (mem.lifetime.event-memory-claim-ends-with-its-context).
        if let Some(own) = proc.contexts.get(&ctx).map(|c| c.arena) {
            proc.end_claims(|c| c.by == crate::world::ClaimBy::EventMemory && c.arena == own);
        }
        let arenas = proc
            .contexts
            .get(&ctx)
            .and_then(|c| c.claimed_arena.map(|b| (c.arena, b, c.claim)));
        if let Some((own, before, claim)) = arenas {
            if proc.arena == own {
                proc.arena = before;
                // The arena is open again, so its creation's claim ends: a
                // freed export's VA there is simply free, InvalidValue
                // (mem.lifetime.freed-export-va-claim-ends-with-its-context).
                if let Some(c) = claim.and_then(|i| proc.va_claims.get_mut(i)) {
                    c.end();
                }
            }
        }
        if let Some(c) = proc.contexts.get_mut(&ctx) {
            c.alive = false;
        }
        if primary {
            proc.primary.remove(&u64::from(device));
        }
        if proc.current == Some(ctx) {
            proc.current = proc.ctx_below.pop();
        }
        Ok(())
    }
}
