//! Events and interprocess event handles, over a simulated clock.
//!
//! Time is modelled, not measured, so every run is deterministic:
//! - the machine has one clock (ns); every API call advances it by
//!   [`HOST_CALL_NS`] (a round trip to a process), and host-blocking calls
//!   (synchronize, memcpy, memset, free, event synchronize) advance it to the
//!   end of the work they wait for;
//! - each stream of a process (the legacy default stream, and those of
//!   `streams.rs`) has a *tail*, when the work queued on it ends;
//!   `slow_fill` appends long work there and its bytes land only when the
//!   clock passes its end (until then every process reads the old bytes);
//! - an event records the tail of the stream it is recorded on: a query
//!   says NotReady until the clock passes it, a synchronize advances the
//!   clock to it, and a stream wait moves the waiting stream's tail to it;
//! - an event also captures what the work on that stream is ordered after
//!   (`order.rs`): only that stream's writes, and those its waits covered
//!   (event.stream.record-captures-its-stream-only). Waiting for it orders
//!   the waiting stream, or the host, after those writes.
//!
//! An IPC event is one shared *core* (its recorded point in time) reached by
//! the exporter's event and every importer's opened event, so a record in
//! either process is seen by both, as on hardware.
//!
//! An event belongs to the context current when it was made. A context
//! holds *interprocess-event state* once it created an interprocess event or
//! opened an event handle; on the H100 `ipc_get_event` and `stream_wait` of
//! an interprocess event from another context crash without it
//! (`event_other_context`), and `event_record` from another context is
//! InvalidHandle, as cuEventRecord's documentation says.

use crate::event_state::{Core, KernelWrite, Local, LocalEvents, PendingFill};
use crate::hazards::HazardLog;
use crate::seed::hash;
use crate::semantics::{
    EventExporterExit, EventIpcTiming, EventOtherContext, EventReopen, ExportRule, GetNullOut,
};
use crate::world::{Access, CtxKey, Fail, MutantId, SimResult, World};
use ipc_harness::event_flags::{BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS};
use ipc_harness::{
    Dialect, ErrorKind, EventId, HazardKind, IpcEventHandle, OutArg, ProcessIndex, StreamId,
    IPC_HANDLE_SIZE,
};

/// Simulated host time one API call takes (a worker round trip).
pub(crate) const HOST_CALL_NS: u64 = 50_000;

/// Every flag bit `event_create` knows.
const KNOWN_FLAGS: u32 = BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS;

impl World {
    /// Process `p` exits: its events go; handles of events it exported stop
    /// opening where `event_exporter_exit` says the exit releases them.
    pub(crate) fn events_exit(&mut self, p: ProcessIndex) {
        // A crash skips the runtime's teardown at exit, which is what
        // releases the event (event.lifetime.open-after-exporter-crash).
        let crashed = self.procs.get(p).is_some_and(|q| q.crashed)
            && !self.mutant(MutantId::EventRefusedAfterExporterCrash);
        let rule = if crashed {
            self.sem.event_exporter_crash
        } else {
            self.sem.event_exporter_exit
        };
        let refused = match rule {
            EventExporterExit::ByDialect => self.dialect == Dialect::Runtime,
            EventExporterExit::Opens => false,
            EventExporterExit::Refused => true,
        };
        if refused {
            for c in self.events.cores.values_mut().filter(|c| c.owner == p) {
                c.exit_released = true;
            }
        }
        self.events.drop_process(p);
    }

    /// Process `p` ends (an `exit` step or a crash, before its teardown
    /// waits for its work) with the last record of an event it exported
    /// still running: the record never completes, so every wait on the event another process opened (a
    /// stream wait made before the exit included) may never return. On an
    /// H200 (580.159.04) a read behind such a stream wait timed out after
    /// 20 s (explore seed 3122026 case 2243). Using an imported event after
    /// its exporter destroyed it is undefined (cudaIpcOpenEventHandle): each
    /// importer is logged `event-after-exporter-destroy`.
    pub(crate) fn abandoned_records(&mut self, p: ProcessIndex) {
        let clock = self.events.clock;
        let running: Vec<u64> = self
            .events
            .cores
            .iter()
            .filter(|(_, c)| {
                c.owner == p && c.handle.is_some() && c.recorded_at.is_some_and(|t| t > clock)
            })
            .map(|(k, _)| k)
            .collect();
        if running.is_empty() {
            return;
        }
        let mut importers: Vec<ProcessIndex> = self
            .events
            .local
            .all()
            .filter(|(q, l)| *q != p && l.imported && running.contains(&l.core))
            .map(|(q, _)| q)
            .collect();
        importers.sort_unstable();
        importers.dedup();
        for q in importers {
            self.hazards.record(
                HazardKind::EventAfterExporterDestroy,
                q,
                format!(
                    "process {p} ended with the record of an event this process opened still running: a wait on it may never complete"
                ),
            );
        }
    }

    /// Start of every call: host time passes and finished work lands.
    pub(crate) fn tick(&mut self) {
        self.events.clock = self.events.clock.saturating_add(HOST_CALL_NS);
        // Most calls find nothing queued: no call into `settle` then.
        if !self.events.pending.is_empty() {
            self.settle();
        }
    }

    /// A call in `p` that waits for the work queued on its legacy stream
    /// (and the blocking streams it waits for): the clock passes its end.
    /// What the host is ordered after is the caller's to say
    /// (`host_waits_for`).
    pub(crate) fn drain(&mut self, p: ProcessIndex) {
        let tail = self.events.tail(p);
        self.events.clock = self.events.clock.max(tail);
        self.settle();
    }

    /// A device-wide synchronization in `p`: wait for the work of every
    /// stream, non-blocking ones included (stream.device-sync-waits-for-all),
    /// and the host is ordered after all of it.
    pub(crate) fn drain_all(&mut self, p: ProcessIndex) {
        let tail = self.events.all_tail(p);
        self.events.clock = self.events.clock.max(tail);
        self.settle();
        self.host_waits_for_all(p);
    }

    /// `p`'s teardown waits for the work of every stream of its: the clock
    /// passes its end (its bytes land), while no host is ordered after it
    /// (`host_sees_ended_work` says what is).
    pub(crate) fn finish_all_work(&mut self, p: ProcessIndex) {
        let tail = self.events.all_tail(p);
        self.events.clock = self.events.clock.max(tail);
        self.settle();
    }

    /// Apply the pending fills the clock has passed, in completion order.
    #[inline]
    pub(crate) fn settle(&mut self) {
        let clock = self.events.clock;
        if self.events.pending.iter().any(|f| f.done_at <= clock) {
            self.settle_due(clock);
        }
    }

    /// `settle`, where some fill is due at `clock`.
    fn settle_due(&mut self, clock: u64) {
        let (mut done, left): (Vec<PendingFill>, Vec<PendingFill>) = self
            .events
            .pending
            .drain(..)
            .partition(|f| f.done_at <= clock);
        self.events.pending = left;
        done.sort_by_key(|f| f.done_at);
        for f in done {
            // A copy reads its source as it is when it runs; a block freed
            // in the meantime (either side) takes the bytes with it.
            if let Some((block, offset)) = f.source {
                let Some(part) = self
                    .blocks
                    .get(&block)
                    .map(|b| b.data.extract(offset, f.len))
                else {
                    continue;
                };
                if let Some(b) = self.blocks.get_mut(&f.block) {
                    b.data.paste(f.offset, f.len, part);
                }
                continue;
            }
            // A block freed in the meantime takes the bytes with it.
            if let Some(b) = self.blocks.get_mut(&f.block) {
                match f.content {
                    KernelWrite::Byte(value) => b.data.fill(f.offset, f.len, value),
                    KernelWrite::Pattern(pattern) => b.data.write_pattern(f.offset, f.len, pattern),
                }
            }
        }
    }

    /// Look up `p`'s event `id`; an imported event whose exporter destroyed
    /// it is the documented undefined behaviour: logged, then `rule` decides.
    fn event_core(&mut self, p: ProcessIndex, id: EventId, what: &str) -> SimResult<u64> {
        let Some(l) = self.events.local.get(p, id.0).copied() else {
            return Err(ErrorKind::InvalidHandle.into());
        };
        let destroyed = self
            .events
            .cores
            .get(&l.core)
            .is_some_and(|c| c.exporter_destroyed);
        if l.imported && destroyed {
            record_destroyed_use(&mut self.hazards, p, what);
            if let ExportRule::Refuse(k) = self.sem.event_after_exporter_destroy {
                return Err(k.into());
            }
        }
        Ok(l.core)
    }

    pub(crate) fn event_create(&mut self, p: ProcessIndex, flags: u32) -> SimResult<EventId> {
        let (ctx, _) = self.current_ctx(p)?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(self.sem.event_unknown_flags.into());
        }
        let ipc_with_timing = flags & INTERPROCESS != 0 && flags & DISABLE_TIMING == 0;
        if ipc_with_timing && self.sem.event_ipc_timing == EventIpcTiming::CreateFails {
            return Err(ErrorKind::InvalidValue.into());
        }
        // An exported event its exporter destroyed gives its slot up: the
        // new event takes the lowest slot of the context's pool no live
        // event holds (event.get.slot-reused-after-destroy).
        let core = self.events.next_core;
        let slot = if flags & INTERPROCESS != 0 {
            Self::live_ipc_events_rule(self.events.live_ipc_events(p))?;
            self.events.note_ipc_state(p, ctx);
            Some(self.events.take_slot(p, ctx, core))
        } else {
            None
        };
        self.events.next_core += 1;
        self.events.cores.insert(
            core,
            Core {
                owner: p,
                flags,
                recorded_at: None,
                covers: Default::default(),
                exporter_destroyed: false,
                exit_released: false,
                handle: None,
                ctx,
                slot,
            },
        );
        if flags & INTERPROCESS != 0 {
            self.driver_fd_for_ipc_event(p);
            self.claim_event_memory(p);
        }
        Ok(self.new_local(p, core, ctx, false))
    }

    fn new_local(&mut self, p: ProcessIndex, core: u64, ctx: CtxKey, imported: bool) -> EventId {
        self.events.next_local += 1;
        let id = LocalEvents::id_of(self.events.next_local);
        self.events.local.insert(
            p,
            id,
            Local {
                core,
                ctx,
                imported,
            },
        );
        EventId(id)
    }

    pub(crate) fn event_record(&mut self, p: ProcessIndex, id: EventId) -> SimResult<()> {
        self.event_record_on(p, id, StreamId::LEGACY_DEFAULT)
    }

    /// The event completes when the work queued on `stream` before it does
    /// (event.stream.record-on-stream-covers-its-work), and captures what
    /// that work is ordered after: the stream's clock, nothing else the
    /// process queued (event.stream.record-captures-its-stream-only). A
    /// record replaces what an earlier one captured (cuEventRecord: "will
    /// overwrite the previously captured state",
    /// event.stream.rerecord-replaces-capture).
    pub(crate) fn event_record_on(
        &mut self,
        p: ProcessIndex,
        id: EventId,
        stream: StreamId,
    ) -> SimResult<()> {
        let (ctx, _) = self.current_ctx(p)?;
        let core = self.event_core(p, id, "event_record")?;
        let stream_ctx = self.stream_ctx(p, stream)?.unwrap_or(ctx);
        // cuEventRecord: "hEvent and hStream must be from the same context
        // otherwise CUDA_ERROR_INVALID_HANDLE is returned" (the default stream
        // is the current context's; event.context.record-from-other-context).
        if self.event_ctx(p, id) != Some(stream_ctx) {
            return Err(ErrorKind::InvalidHandle.into());
        }
        let at = self.stream_start(p, stream)?;
        self.set_stream_tail(p, stream, at);
        self.begin_work(p, stream);
        let mut covers = self.stream_clock(p, stream);
        if self.mutant(MutantId::EventRecordIgnoresStream) {
            // Every write the process issued, whatever its stream.
            covers = self.order.host(p);
            covers.merge(&self.order.legacy(p));
            let streams: Vec<_> = self
                .events
                .streams
                .range((p, 0)..=(p, u64::MAX))
                .map(|(_, s)| s.clock.clone())
                .collect();
            for c in &streams {
                covers.merge(c);
            }
        }
        let early = self.mutant(MutantId::EventCompletesEarly);
        let clock = self.events.clock;
        let accumulate = self.mutant(MutantId::EventRecordAccumulates);
        if let Some(c) = self.events.cores.get_mut(&core) {
            c.recorded_at = Some(if early { clock } else { at });
            if accumulate {
                c.covers.merge(&covers);
            } else {
                c.covers = covers;
            }
        }
        Ok(())
    }

    /// A process's first interprocess event (made or opened) allocates the
    /// driver's shared event memory, which claims the VA the process had free
    /// in its current arena: a freed export there is NotPermitted from then on
    /// (mem.lifetime.freed-export-va-claimed-by-event-handle). The memory
    /// lives as long as the process: later events claim nothing (as in
    /// `driver_fds`). It is mapped where the allocator puts it
    /// (`event_memory_span`).
    fn claim_event_memory(&mut self, p: ProcessIndex) {
        // Asked first: a set finds a member more cheaply than it inserts one.
        if !self.events.shared_memory.contains_key(&p) {
            self.events.shared_memory.insert(p, ());
            let mapped = self.event_memory_span(p);
            self.procs[p].claim_free_va(crate::world::ClaimBy::EventMemory, None, mapped);
        }
    }

    /// The context `p`'s event `id` was made in.
    fn event_ctx(&self, p: ProcessIndex, id: EventId) -> Option<CtxKey> {
        self.events.local.get(p, id.0).map(|l| l.ctx)
    }

    /// `event_other_context=crash`: event `id` belongs to a context other
    /// than the current `ctx`, which holds no interprocess-event state.
    fn other_context_crashes(&self, p: ProcessIndex, id: EventId, ctx: CtxKey) -> bool {
        self.sem.event_other_context == EventOtherContext::Crash
            && self.event_ctx(p, id) != Some(ctx)
            && !self.events.ipc_state.contains_key(&(p, ctx))
    }

    /// When the event's last record completes; `None` when never recorded.
    fn recorded_at(&self, core: u64) -> Option<u64> {
        self.events.cores.get(&core).and_then(|c| c.recorded_at)
    }

    /// `NotReady` until the captured work is done; `ok` says it is, so the
    /// host is then ordered after it, as after an event synchronize.
    pub(crate) fn event_query(&mut self, p: ProcessIndex, id: EventId) -> SimResult<()> {
        let core = self.event_core(p, id, "event_query")?;
        match self.recorded_at(core) {
            Some(t) if t > self.events.clock => Err(ErrorKind::NotReady.into()),
            // Never recorded: complete, as for any event.
            _ => {
                self.host_saw_event(p, core);
                Ok(())
            }
        }
    }

    pub(crate) fn event_synchronize(&mut self, p: ProcessIndex, id: EventId) -> SimResult<()> {
        let core = self.event_core(p, id, "event_sync")?;
        if let Some(t) = self.recorded_at(core) {
            self.events.clock = self.events.clock.max(t);
            self.settle();
        }
        self.host_saw_event(p, core);
        Ok(())
    }

    pub(crate) fn stream_wait_event(&mut self, p: ProcessIndex, id: EventId) -> SimResult<()> {
        self.stream_wait_event_on(p, StreamId::LEGACY_DEFAULT, id)
    }

    /// Only `stream`'s later work waits (event.stream.wait-orders-that-stream-only).
    pub(crate) fn stream_wait_event_on(
        &mut self,
        p: ProcessIndex,
        stream: StreamId,
        id: EventId,
    ) -> SimResult<()> {
        let (ctx, _) = self.current_ctx(p)?;
        self.stream_ctx(p, stream)?;
        let core = self.event_core(p, id, "stream_wait")?;
        let interprocess = self
            .events
            .cores
            .get(&core)
            .is_some_and(|c| c.flags & INTERPROCESS != 0);
        // Unlike the handle query, the wait crashes also from a context with
        // interprocess-event state of its own
        // (event.context.stream-wait-from-context-with-ipc-event).
        if interprocess
            && self.sem.event_other_context == EventOtherContext::Crash
            && self.event_ctx(p, id) != Some(ctx)
        {
            return Err(other_context_crash("cuStreamWaitEvent"));
        }
        if self.mutant(MutantId::StreamWaitDoesNothing) {
            return Ok(());
        }
        // A wait is work on the stream: the legacy stream's waits first for
        // the blocking streams, which then wait for it.
        let start = self.stream_start(p, stream)?;
        let t = self.recorded_at(core).unwrap_or(0);
        self.set_stream_tail(p, stream, start.max(t));
        self.begin_work(p, stream);
        if let Some(covers) = self.events.cores.get(&core).map(|c| c.covers.clone()) {
            self.stream_clock_merge(p, stream, &covers);
        }
        Ok(())
    }

    /// The host of `waiter` saw the work the event captured complete (an
    /// event synchronize, a query that said so): the IPC events' purpose.
    fn host_saw_event(&mut self, waiter: ProcessIndex, core: u64) {
        if let Some(covers) = self.events.cores.get(&core).map(|c| c.covers.clone()) {
            self.host_saw(waiter, &covers);
        }
    }

    pub(crate) fn event_elapsed(
        &mut self,
        p: ProcessIndex,
        start: EventId,
        end: EventId,
    ) -> SimResult<f32> {
        let a = self.event_core(p, start, "event_elapsed")?;
        let b = self.event_core(p, end, "event_elapsed")?;
        let mut times = [0u64; 2];
        for (slot, core) in times.iter_mut().zip([a, b]) {
            let Some(c) = self.events.cores.get(&core) else {
                return Err(ErrorKind::InvalidHandle.into());
            };
            let Some(t) = c.recorded_at else {
                return Err(self.sem.elapsed_without_timing.into());
            };
            if c.flags & DISABLE_TIMING != 0 {
                return Err(self.sem.elapsed_without_timing.into());
            }
            if t > self.events.clock {
                return Err(ErrorKind::NotReady.into());
            }
            *slot = t;
        }
        Ok((times[1] as f64 - times[0] as f64) as f32 / 1e6)
    }

    pub(crate) fn event_destroy(&mut self, p: ProcessIndex, id: EventId) -> SimResult<()> {
        if !self.events.local.contains(p, id.0) {
            return Err(ErrorKind::InvalidHandle.into());
        }
        self.events.release(p, id.0);
        Ok(())
    }

    pub(crate) fn ipc_get_event_handle(
        &mut self,
        p: ProcessIndex,
        id: EventId,
        out: OutArg,
    ) -> SimResult<IpcEventHandle> {
        let (ctx, _) = self.current_ctx(p)?;
        // A NULL event is a bad argument, not an unknown event: InvalidValue
        // in both CUDA dialects on H100 / 580.159.04, as ROCm's
        // hipIpcGetEventHandle answers it (event.null.get-handle).
        if id == EventId::NULL {
            return Err(ErrorKind::InvalidValue.into());
        }
        let core_id = self.event_core(p, id, "ipc_get_event")?;
        let Some(core) = self.events.cores.get(&core_id).map(Core::view) else {
            return Err(ErrorKind::InvalidHandle.into());
        };
        // cuIpcGetEventHandle checks its out pointer before the event's
        // flags and origin: a NULL out is InvalidValue for an event made
        // without the interprocess flag
        // (event.get.null-out-before-interprocess-flag) and for an opened
        // one (event.get.imported-event-null-out); the runtime asks the
        // driver later.
        if out == OutArg::Null && self.dialect == Dialect::Driver {
            return Err(ErrorKind::InvalidValue.into());
        }
        if core.flags & INTERPROCESS == 0 && !self.mutant(MutantId::EventWithoutInterprocessFlag) {
            return Err(self.sem.event_get_not_interprocess.into());
        }
        if core.flags & DISABLE_TIMING == 0 {
            // Only reachable with `event_ipc_timing=get-fails`.
            return Err(ErrorKind::InvalidValue.into());
        }
        // An opened event is not the process's to export
        // (event.get.imported-event); this is checked before the context.
        let imported = self.events.local.get(p, id.0).is_some_and(|l| l.imported);
        if imported {
            if let ExportRule::Refuse(k) = self.sem.event_get_imported {
                return Err(k.into());
            }
        }
        if out == OutArg::Null {
            if self.dialect == Dialect::Runtime
                && self.sem.event_get_null_out == GetNullOut::CrashInRuntime
            {
                return Err(Fail::Crash {
                    signal: 11,
                    detail: "cudaIpcGetEventHandle wrote through a NULL handle pointer (SIGSEGV)"
                        .into(),
                });
            }
            return Err(ErrorKind::InvalidValue.into());
        }
        if self.other_context_crashes(p, id, ctx) {
            return Err(other_context_crash("cuIpcGetEventHandle"));
        }
        if self.sem.event_other_context == EventOtherContext::Crash
            && self.event_ctx(p, id) != Some(ctx)
        {
            // A context with interprocess-event state of its own answers with
            // its own pool's bytes for the event's slot, the bytes of that
            // context's own event in that slot
            // (event.context.get-from-context-with-ipc-event). They open the
            // event of that slot in the current context's pool, if there is
            // one (event.get.other-context-bytes-open-slot-event).
            let slot = core.slot.unwrap_or(0);
            let bytes = self.handle_bytes(core.owner, p, ctx, slot);
            let holder = self
                .events
                .slots
                .get(&(p, ctx))
                .and_then(|s| s.holder(slot));
            if let Some(id) = holder.filter(|_| core.owner == p) {
                self.events.by_handle.insert(bytes, id);
            }
            return Ok(IpcEventHandle(bytes));
        }
        if let Some(bytes) = core.handle {
            return Ok(IpcEventHandle(bytes));
        }
        // The bytes name the context's pool and the event's slot there: an
        // event made after an exported one was destroyed gets its bytes, and
        // the old handle then opens the new event
        // (event.get.slot-reused-after-destroy).
        let bytes = self.handle_bytes(core.owner, p, core.ctx, core.slot.unwrap_or(0));
        self.events.by_handle.insert(bytes, core_id);
        if let Some(c) = self.events.cores.get_mut(&core_id) {
            c.handle = Some(Box::new(bytes));
        }
        Ok(IpcEventHandle(bytes))
    }

    /// Shaped like the measured handles: a per-exporter word, a word naming
    /// the context's pool (zero for the primary context of the process's
    /// first device; which bytes differ for another context is unmeasured),
    /// a 1, and the slot counting down (H100 / 580.159.04).
    ///
    /// The primary contexts of two devices are two pools, so the first
    /// interprocess event on each device gets distinct bytes and opening
    /// each gives its own event, as simpleIPC relies on
    /// (multidev.event.first-event-per-device-distinct).
    fn handle_bytes(
        &self,
        owner: ProcessIndex,
        p: ProcessIndex,
        ctx: CtxKey,
        slot: u32,
    ) -> [u8; IPC_HANDLE_SIZE] {
        let mut bytes = [0u8; IPC_HANDLE_SIZE];
        let tag = (hash(self.seed, &[0x4556, owner as u64]) & 0xffff) as u32 | 1;
        bytes[0..4].copy_from_slice(&tag.to_le_bytes());
        let first_device = self.procs[p].visible.first().copied();
        let pool_of_first_primary = self.procs[p]
            .contexts
            .get(&ctx)
            .is_none_or(|c| c.primary && Some(c.device) == first_device);
        if !pool_of_first_primary {
            let pool = hash(self.seed, &[0x4558, p as u64, ctx]) as u32 | 1;
            bytes[4..8].copy_from_slice(&pool.to_le_bytes());
        }
        bytes[8] = 1;
        let place = crate::scale_limits::event_slot_word(slot);
        bytes[16..20].copy_from_slice(&place.to_le_bytes());
        bytes
    }

    pub(crate) fn ipc_open_event_handle(
        &mut self,
        p: ProcessIndex,
        handle: &IpcEventHandle,
        out: OutArg,
    ) -> SimResult<EventId> {
        // The out pointer is an argument, checked before the handle, like
        // cuIpcOpenMemHandle's (event.open.null-out, mem.open.null-out).
        if out == OutArg::Null {
            return Err(ErrorKind::InvalidValue.into());
        }
        let (ctx, _) = self.current_ctx(p)?;
        let Some(&core_id) = self.events.by_handle.get(&handle.0) else {
            return Err(self.sem.event_bad_handle.into());
        };
        let Some(core) = self.events.cores.get(&core_id).map(Core::view) else {
            return Err(self.sem.event_bad_handle.into());
        };
        if core.owner == p {
            return Err(self.sem.event_open_in_exporter.into());
        }
        self.cross_pidns_rule(p, core.owner)?;
        // The exporter's exit released the event: only a context that opened a
        // handle of that exporter before opens again
        // (event.lifetime.reopen-after-exporter-exit); a new context, even one
        // with an interprocess event of its own, is refused
        // (event.lifetime.reopen-after-exporter-exit-new-context,
        // event.lifetime.reopen-after-exporter-exit-context-with-ipc-event).
        // Not modelled: such a context that also maps the exporter's memory
        // opens it.
        if core.exit_released && !self.events.opened_from.contains_key(&(p, ctx, core.owner)) {
            return Err(self.sem.event_bad_handle.into());
        }
        if core.exporter_destroyed {
            record_destroyed_use(&mut self.hazards, p, "ipc_open_event");
            if let ExportRule::Refuse(k) = self.sem.event_dead_handle {
                return Err(k.into());
            }
        }
        // Opening an event does not give the context interprocess-event state
        // of its own: asking for the handle of another context's event from
        // it still kills the process (event.context.get-from-context-with-opened-event).
        self.events.opened_from.insert((p, ctx, core.owner), ());
        self.claim_event_memory(p);
        if self.sem.event_reopen == EventReopen::SameEvent {
            let existing = self
                .events
                .local
                .of(p)
                .find(|(_, l)| l.imported && l.core == core_id)
                .map(|(id, _)| EventId(id));
            if let Some(e) = existing {
                return Ok(e);
            }
        }
        self.open_event_handles_rule(p)?;
        Ok(self.new_local(p, core_id, ctx, true))
    }

    /// Long work on `p`'s default stream, then a fill of `[ptr, ptr + len)`.
    pub(crate) fn slow_fill(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        value: u8,
        len: u64,
        micros: u64,
    ) -> SimResult<()> {
        self.slow_fill_on(p, ptr, value, len, micros, StreamId::LEGACY_DEFAULT)
    }

    /// Long work on `stream`, then a fill of `[ptr, ptr + len)`.
    pub(crate) fn slow_fill_on(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        value: u8,
        len: u64,
        micros: u64,
        stream: StreamId,
    ) -> SimResult<()> {
        self.queue_kernel_write(p, ptr, len, micros, KernelWrite::Byte(value), stream)
    }

    /// A kernel on `p`'s `stream` that runs `micros`, then writes `content`
    /// to `[ptr, ptr + len)`: the bytes land when the clock passes its end.
    pub(crate) fn queue_kernel_write(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        len: u64,
        micros: u64,
        content: KernelWrite,
        stream: StreamId,
    ) -> SimResult<()> {
        self.current_ctx(p)?;
        self.stream_ctx(p, stream)?;
        let target = if len == 0 {
            None
        } else {
            Some(self.resolve(p, ptr, len, Access::Kernel)?)
        };
        let start = self.stream_start(p, stream)?;
        let done_at = start.saturating_add(micros.saturating_mul(1000));
        self.set_stream_tail(p, stream, done_at);
        let lane = self.begin_work(p, stream);
        if let Some((block, offset)) = target {
            // A kernel's write is ordered only by the stream it ran on: a
            // wait on an event recorded there after it, or a synchronization.
            let ordered = !self.mutant(MutantId::KernelWritesUnordered);
            if ordered {
                self.note_write(p, stream, lane, block, offset, len);
            }
            self.queue_write(
                ordered.then_some(lane),
                done_at,
                (block, offset, len),
                content,
                None,
            );
        }
        Ok(())
    }

    /// Bytes that land when the clock passes `done_at` (`settle`): `content`,
    /// or a copy of `source` as it is then. `lane`: the lane whose last
    /// noted write this is (`order.rs`), `None` where none was noted.
    pub(crate) fn queue_write(
        &mut self,
        lane: Option<usize>,
        done_at: u64,
        (block, offset, len): (u64, u64, u64),
        content: KernelWrite,
        source: Option<(u64, u64)>,
    ) {
        let write = lane.map(|lane| (lane, self.order.last_write(lane)));
        self.events.pending.push(PendingFill {
            done_at,
            block,
            offset,
            len,
            content,
            source,
            write,
        });
    }
}

/// What the H100 does where `event_other_context=crash` applies.
fn other_context_crash(api: &str) -> Fail {
    Fail::Crash {
        signal: 11,
        detail: format!(
            "{api} of an interprocess event from a context without interprocess-event state (SIGSEGV)"
        ),
    }
}

fn record_destroyed_use(log: &mut HazardLog, p: ProcessIndex, what: &str) {
    log.record(
        HazardKind::EventAfterExporterDestroy,
        p,
        format!("{what} on an imported event whose exporter destroyed it"),
    );
}
