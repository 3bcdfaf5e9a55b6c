//! What `World` holds of events, IPC event handles and the simulated
//! clock. The rules that change it are `events.rs`; this state is a leaf so
//! that `world.rs` can hold it without importing the rules.

use crate::dense::DenseMap;
use crate::ids::CtxKey;
use crate::small_map::VecMap;
use ipc_harness::{ProcessIndex, IPC_HANDLE_SIZE};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// One event object of the driver, shared by the exporter and importers.
#[derive(Debug, Clone)]
pub(crate) struct Core {
    pub owner: ProcessIndex,
    pub flags: u32,
    /// The point in simulated time the last record completes at.
    pub recorded_at: Option<u64>,
    /// What the last record captured: the clock of the stream it was
    /// recorded on, at the record (`order.rs`). Waiting for the event (a
    /// stream wait, a synchronize) orders the waiter after those writes.
    pub covers: crate::clock::Clock,
    /// The exporter destroyed its event (or exited) while it was exported.
    pub exporter_destroyed: bool,
    /// The exporter exited and its exit released the event
    /// (`event_exporter_exit`): only cached re-opens still succeed.
    pub exit_released: bool,
    /// The bytes its export handed out; boxed, as most events are never
    /// exported (a smaller core is cheaper to make and move).
    pub handle: Option<Box<[u8; IPC_HANDLE_SIZE]>>,
    /// The context it was made in, and (interprocess events) its slot in
    /// that context's pool of event memory (`ipc_get_event_handle`).
    pub ctx: CtxKey,
    pub slot: Option<u32>,
}

/// What the handle calls read of a core, copied out of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoreView {
    pub owner: ProcessIndex,
    pub flags: u32,
    pub exporter_destroyed: bool,
    pub exit_released: bool,
    pub handle: Option<[u8; IPC_HANDLE_SIZE]>,
    pub ctx: CtxKey,
    pub slot: Option<u32>,
}

impl Core {
    pub(crate) fn view(&self) -> CoreView {
        CoreView {
            owner: self.owner,
            flags: self.flags,
            exporter_destroyed: self.exporter_destroyed,
            exit_released: self.exit_released,
            handle: self.handle.as_deref().copied(),
            ctx: self.ctx,
            slot: self.slot,
        }
    }
}

/// A process's event: its own, or one it opened from a handle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Local {
    pub core: u64,
    pub ctx: CtxKey,
    pub imported: bool,
}

/// Work queued on a stream whose bytes land when the clock passes `done_at`.
#[derive(Debug, Clone)]
pub(crate) struct PendingFill {
    pub done_at: u64,
    pub block: u64,
    pub offset: u64,
    pub len: u64,
    /// What a kernel writes (ignored for a copy).
    pub content: KernelWrite,
    /// A device-to-device copy: the source block and offset whose bytes
    /// (as they are when the copy runs) land instead of `content`.
    pub source: Option<(u64, u64)>,
    /// Its write's lane and number there (`order.rs`), where it noted one.
    pub write: Option<(usize, u64)>,
}

/// One stream a process created.
/// (The rules are `streams.rs`.)
#[derive(Debug, Clone)]
pub(crate) struct StreamState {
    /// The context current when it was created.
    pub ctx: CtxKey,
    /// Created with `cudaStreamNonBlocking` / `CU_STREAM_NON_BLOCKING`.
    pub nonblocking: bool,
    /// When the work queued on it ends.
    pub tail: u64,
    /// Destroyed by the program: refused as an argument, while its queued
    /// work still runs and a device synchronization still waits for it.
    pub destroyed: bool,
    /// Its lane (`order.rs`): the writes of work queued on it.
    pub lane: usize,
    /// What work queued on it now is ordered after (`order.rs`).
    pub clock: crate::clock::Clock,
}

/// What the pattern kernel writes: byte `i` is byte `i % width` of
/// `pattern` (little-endian) plus `step * (i / width)`, modulo 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KernelBytes {
    pattern: u64,
    width: u8,
    step: u8,
}

impl KernelBytes {
    pub(crate) fn new(pattern: u64, width: u8, step: u8) -> Self {
        KernelBytes {
            pattern,
            width,
            step,
        }
    }

    /// Whether the real kernel accepts the arguments: a word of 1 to 8 bytes.
    pub(crate) fn is_valid(&self) -> bool {
        (1..=8).contains(&self.width)
    }

    /// The first `len` bytes the kernel writes.
    #[cfg(test)]
    pub(crate) fn bytes(&self, len: u64) -> Vec<u8> {
        let mut out = vec![0; len as usize];
        self.fill(0, &mut out);
        out
    }

    /// Bytes `first..` of what the kernel writes, into `dst`.
    pub(crate) fn fill(&self, first: u64, dst: &mut [u8]) {
        let width = u64::from(self.width.max(1));
        // The rounds count modulo 256, so the bytes repeat every 256 words
        // (every word when the step is 0): one period is computed, then
        // copied over the rest in doubling runs.
        let period = if self.step == 0 { width } else { 256 * width };
        let once = dst.len().min(period as usize);
        for (j, d) in dst[..once].iter_mut().enumerate() {
            let i = first + j as u64;
            let word_byte = (self.pattern >> (8 * (i % width))) as u8;
            let rounds = (i / width) as u8;
            *d = word_byte.wrapping_add(self.step.wrapping_mul(rounds));
        }
        let mut done = once;
        while done < dst.len() {
            let n = done.min(dst.len() - done);
            dst.copy_within(..n, done);
            done += n;
        }
    }
}

/// What a queued kernel writes over its range.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KernelWrite {
    /// `slow_fill`: one byte everywhere.
    Byte(u8),
    /// `kernel_pattern`: a computed pattern.
    Pattern(KernelBytes),
}

#[derive(Debug, Default)]
pub(crate) struct Events {
    pub clock: u64,
    /// Per process: when the work queued on its default stream ends.
    /// (This and the three sets below hold a few entries, if any: sorted
    /// Vecs, which an empty one drops for free.)
    pub tails: VecMap<ProcessIndex, u64>,
    /// In queueing order; applied in order of completion.
    pub pending: Vec<PendingFill>,
    /// By id (`next_core` counts them).
    pub cores: crate::dense::DenseMap<Core>,
    pub local: LocalEvents,
    /// Handle bytes -> core (looked up by the bytes only).
    pub by_handle: crate::index::IdMap<[u8; IPC_HANDLE_SIZE], u64>,
    /// Contexts holding interprocess-event state: they created an
    /// interprocess event or opened an event handle.
    pub ipc_state: VecMap<(ProcessIndex, CtxKey)>,
    /// Processes that made or opened an interprocess event
    /// (`claim_event_memory`).
    pub shared_memory: VecMap<ProcessIndex>,
    /// `(importer, context, exporter)`: the importer opened a handle of the
    /// exporter in that context.
    pub opened_from: VecMap<(ProcessIndex, CtxKey, ProcessIndex)>,
    /// The slots live interprocess events hold, per `(owner, context)` pool:
    /// kept with `cores` (a core holds its slot until its exporter destroys
    /// it), so a create finds the lowest free slot and the process's count
    /// without a pass over every event (event.scale.interprocess-event-limit).
    pub slots: BTreeMap<(ProcessIndex, CtxKey), SlotPool>,
    /// Per process (by index): how many slots its pools hold, kept in step
    /// with `slots` by `take_slot` and `free_slot`.
    live_ipc: Vec<usize>,
    pub next_core: u64,
    pub next_local: u64,
    /// Per process: the streams it created (`streams.rs`).
    pub streams: BTreeMap<(ProcessIndex, u64), StreamState>,
    pub next_stream: u64,
}

/// Where local event ids start (they only need to be distinct and non-zero).
pub(crate) const EVENT_ID_BASE: u64 = 0x5e00_0000;

/// Every process's events by (process, id), as a map of that key would hold
/// them. An id is `EVENT_ID_BASE + serial * 0x10` for a serial that counts
/// up over the machine, so the events are stored by serial: a lookup is an
/// index, and one process's events come in increasing id.
#[derive(Debug, Default)]
pub(crate) struct LocalEvents {
    by_serial: DenseMap<(ProcessIndex, Local)>,
}

impl LocalEvents {
    /// The id of the event with serial `serial`.
    pub(crate) fn id_of(serial: u64) -> u64 {
        EVENT_ID_BASE + serial * 0x10
    }

    /// The serial of id `id`; `None` for a number no event ever had.
    fn serial(id: u64) -> Option<u64> {
        let d = id.checked_sub(EVENT_ID_BASE)?;
        (d % 0x10 == 0).then_some(d / 0x10)
    }

    pub(crate) fn get(&self, p: ProcessIndex, id: u64) -> Option<&Local> {
        self.by_serial
            .get(&Self::serial(id)?)
            .filter(|(q, _)| *q == p)
            .map(|(_, l)| l)
    }

    pub(crate) fn contains(&self, p: ProcessIndex, id: u64) -> bool {
        self.get(p, id).is_some()
    }

    /// Event `id` of `p`, whose id is new.
    #[inline]
    pub(crate) fn insert(&mut self, p: ProcessIndex, id: u64, l: Local) {
        let serial = Self::serial(id).expect("an event id made by `id_of`");
        self.by_serial.insert(serial, (p, l));
    }

    pub(crate) fn remove(&mut self, p: ProcessIndex, id: u64) -> Option<Local> {
        self.get(p, id)?;
        self.by_serial.remove(&Self::serial(id)?).map(|(_, l)| l)
    }

    /// Every process's events, (process, event).
    pub(crate) fn all(&self) -> impl Iterator<Item = (ProcessIndex, &Local)> {
        self.by_serial.iter().map(|(_, (q, l))| (*q, l))
    }

    /// `p`'s events, (id, event) in increasing id.
    pub(crate) fn of(&self, p: ProcessIndex) -> impl Iterator<Item = (u64, &Local)> {
        self.by_serial
            .iter()
            .filter(move |(_, (q, _))| *q == p)
            .map(|(serial, (_, l))| (Self::id_of(serial), l))
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.by_serial.is_empty()
    }

    /// Every (process, id), as a map keyed by them orders them.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<(ProcessIndex, u64)> {
        let mut k: Vec<(ProcessIndex, u64)> = self
            .by_serial
            .iter()
            .map(|(serial, (p, _))| (*p, Self::id_of(serial)))
            .collect();
        k.sort_unstable();
        k
    }
}

/// The slots of one context's interprocess-event pool that live events
/// hold. A new event always takes the lowest free slot.
#[derive(Debug, Default)]
pub(crate) struct SlotPool {
    /// Slot (index) -> the core holding it; `next` long.
    held: Vec<Option<u64>>,
    /// How many slots are held.
    count: usize,
    /// Slots below `next` no live event holds, as a min-heap: the lowest
    /// is at hand, and giving a slot up (every event of a process, at its
    /// exit) is a push, not a tree insert.
    free: BinaryHeap<Reverse<u32>>,
    /// Every slot from here up is free.
    next: u32,
}

impl SlotPool {
    /// The lowest slot no live event holds.
    #[cfg(test)]
    pub(crate) fn lowest_free(&self) -> u32 {
        self.free.peek().map_or(self.next, |r| r.0)
    }

    /// The core holding `slot`, if any.
    pub(crate) fn holder(&self, slot: u32) -> Option<u64> {
        self.held.get(slot as usize).copied().flatten()
    }

    /// How many slots live events hold.
    pub(crate) fn held(&self) -> usize {
        self.count
    }

    /// `core` takes the lowest free slot; returns it.
    fn take_lowest(&mut self, core: u64) -> u32 {
        let slot = match self.free.pop() {
            Some(Reverse(s)) => s,
            None => {
                let s = self.next;
                self.next = s.saturating_add(1);
                // `held` is `next` long: the new slot goes at its end.
                if self.held.len() < self.next as usize {
                    self.held.push(None);
                }
                s
            }
        };
        if self.held[slot as usize].replace(core).is_none() {
            self.count += 1;
        }
        slot
    }

    /// `core`, holding `slot`, is gone: the slot is free again. False if
    /// `core` did not hold it.
    fn give_up(&mut self, slot: u32, core: u64) -> bool {
        if self.holder(slot) != Some(core) {
            return false;
        }
        self.held[slot as usize] = None;
        self.count -= 1;
        self.free.push(Reverse(slot));
        true
    }
}

impl Events {
    /// How many live interprocess events `p` holds over all its contexts.
    pub(crate) fn live_ipc_events(&self, p: ProcessIndex) -> usize {
        let live = self.live_ipc.get(p).copied().unwrap_or(0);
        debug_assert_eq!(
            live,
            self.slots
                .range((p, 0)..=(p, CtxKey::MAX))
                .map(|(_, s)| s.held())
                .sum::<usize>()
        );
        live
    }

    /// Context `ctx` of `p` holds interprocess-event state (`ipc_state`).
    pub(crate) fn note_ipc_state(&mut self, p: ProcessIndex, ctx: CtxKey) {
        // Asked first: a set finds a member more cheaply than it inserts one.
        if !self.ipc_state.contains_key(&(p, ctx)) {
            self.ipc_state.insert((p, ctx), ());
        }
    }

    /// Core `core`, made by `p` in `ctx`, takes the lowest free slot of that
    /// context's pool; returns the slot.
    pub(crate) fn take_slot(&mut self, p: ProcessIndex, ctx: CtxKey, core: u64) -> u32 {
        // The pool is there after the context's first event: looked up
        // before the tree's insert path is taken.
        let slot = match self.slots.get_mut(&(p, ctx)) {
            Some(pool) => pool.take_lowest(core),
            None => self.slots.entry((p, ctx)).or_default().take_lowest(core),
        };
        if self.live_ipc.len() <= p {
            self.live_ipc.resize(p + 1, 0);
        }
        self.live_ipc[p] += 1;
        slot
    }

    /// Core `id` (made by `owner` in `ctx`) gives up its slot, if it holds one.
    fn free_slot(&mut self, id: u64) {
        let Some(c) = self.cores.get(&id) else {
            return;
        };
        let (key, slot) = ((c.owner, c.ctx), c.slot);
        if let (Some(slot), Some(pool)) = (slot, self.slots.get_mut(&key)) {
            if pool.give_up(slot, id) {
                self.live_ipc[key.0] -= 1;
            }
        }
    }

    /// When work queued now on `p`'s legacy default stream could start: after
    /// its own work and that of `p`'s blocking streams (stream.legacy-waits-for-blocking).
    pub(crate) fn tail(&self, p: ProcessIndex) -> u64 {
        let own = self.tails.get(&p).copied().unwrap_or(0);
        if self.streams.is_empty() {
            return own;
        }
        self.streams_of(p)
            .filter(|s| !s.nonblocking)
            .fold(own, |t, s| t.max(s.tail))
    }

    /// When all of `p`'s work on every stream ends.
    pub(crate) fn all_tail(&self, p: ProcessIndex) -> u64 {
        let own = self.tails.get(&p).copied().unwrap_or(0);
        if self.streams.is_empty() {
            return own;
        }
        self.streams_of(p).fold(own, |t, s| t.max(s.tail))
    }

    fn streams_of(&self, p: ProcessIndex) -> impl Iterator<Item = &StreamState> {
        self.streams.range((p, 0)..=(p, u64::MAX)).map(|(_, s)| s)
    }

    /// The process exits (or tears down): its events go; exported ones it
    /// owned count as destroyed by the exporter.
    pub(crate) fn drop_process(&mut self, p: ProcessIndex) {
        let ids: Vec<u64> = self.local.of(p).map(|(id, _)| id).collect();
        for id in ids {
            self.release(p, id);
        }
        self.tails.remove(&p);
        self.streams.retain(|&(q, _), _| q != p);
    }

    /// A context was destroyed: so were the events made in it, and its
    /// interprocess-event memory: a later open of the handle of an event it
    /// exported is refused as after the exporter's exit
    /// (event.lifetime.open-after-context-destroy).
    pub(crate) fn drop_context(&mut self, p: ProcessIndex, ctx: CtxKey) {
        let ids: Vec<(u64, u64, bool)> = self
            .local
            .of(p)
            .filter(|(_, l)| l.ctx == ctx)
            .map(|(id, l)| (id, l.core, l.imported))
            .collect();
        for &(id, core, imported) in &ids {
            self.release(p, id);
            if let Some(c) = self.cores.get_mut(&core).filter(|_| !imported) {
                c.exit_released = true;
            }
        }
        self.streams.retain(|&(q, _), s| q != p || s.ctx != ctx);
        self.ipc_state.remove(&(p, ctx));
    }

    pub(crate) fn release(&mut self, p: ProcessIndex, id: u64) {
        let Some(l) = self.local.remove(p, id) else {
            return;
        };
        if l.imported {
            return;
        }
        self.free_slot(l.core);
        if let Some(core) = self.cores.get_mut(&l.core) {
            if core.handle.is_some() {
                // Importers (and later opens) still reach the core.
                core.exporter_destroyed = true;
            } else {
                self.cores.remove(&l.core);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random takes and give-ups hand out the slots a plain vector of
    /// holders would: always the lowest one no core holds.
    #[test]
    fn slot_pool_takes_the_lowest_free_slot_as_a_vector_would() {
        for round in 0..20u64 {
            let mut pool = SlotPool::default();
            let mut model: Vec<Option<u64>> = Vec::new();
            for step in 0..400u64 {
                let x = crate::seed::mix64(round * 10_000 + step);
                let held: Vec<usize> = (0..model.len()).filter(|&i| model[i].is_some()).collect();
                if x % 3 != 0 || held.is_empty() {
                    let want = model
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or(model.len());
                    assert_eq!(pool.lowest_free() as usize, want);
                    let core = 1000 + step;
                    assert_eq!(pool.take_lowest(core) as usize, want);
                    if want == model.len() {
                        model.push(None);
                    }
                    model[want] = Some(core);
                } else {
                    let slot = held[(x >> 8) as usize % held.len()];
                    let core = model[slot].expect("held");
                    assert!(!pool.give_up(slot as u32, core + 1), "not its holder");
                    assert!(pool.give_up(slot as u32, core));
                    assert!(!pool.give_up(slot as u32, core), "given up already");
                    model[slot] = None;
                }
                assert_eq!(pool.held(), model.iter().flatten().count());
                for (i, h) in model.iter().enumerate() {
                    assert_eq!(pool.holder(i as u32), *h);
                }
            }
        }
    }
}
