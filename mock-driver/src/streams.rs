//! Streams other than the legacy default stream, device-to-device and peer
//! copies, and the stream-ordered happens-before every device write and
//! read goes through (its state: `order.rs`).
//!
//! The rules are those of "Stream synchronization behavior"
//! (<https://docs.nvidia.com/cuda/cuda-runtime-api/stream-sync-behavior.html>)
//! and "API synchronization behavior"
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html>),
//! kept twice: as *timing* (each stream's *tail*, when the work queued on
//! it ends; bytes land when the clock passes it) and as *order* (clocks:
//! what a read is ordered after; a read a write's clock does not reach is
//! a race, `unsynchronized-read`, naming the writer's stream):
//! - work on a stream runs after the work queued on it before;
//! - work queued on the legacy default stream (stream 0) first waits for
//!   the process's blocking streams, which then wait for it
//!   (event.stream.blocking-ordered-after-legacy,
//!   event.stream.record-on-legacy-covers-blocking-stream,
//!   event.stream.record-on-blocking-covers-legacy,
//!   event.stream.wait-on-legacy-orders-blocking-stream); blocking streams
//!   are not ordered with one another
//!   (event.stream.record-on-other-blocking-stream);
//! - a non-blocking stream (`cudaStreamNonBlocking`) is ordered with neither
//!   (event.stream.nonblocking-not-ordered-after-legacy,
//!   event.stream.record-on-nonblocking-misses-legacy);
//! - an event captures its stream's clock at the record, and a wait orders
//!   its stream only (`events.rs`);
//! - the host is ordered after a stream by a synchronization of it (or a
//!   query that says it is done; event.stream.stream-sync-orders-that-stream-only),
//!   after every stream by a device synchronization, `free` or exit, after
//!   the legacy stream (and the blocking streams it waits for) by a copy to
//!   the host (`read`, `device_read`) or from pageable memory (`write`,
//!   which synchronizes first); `fill` (cudaMemset) and a kernel are work on
//!   their stream that the host does not wait for. A read on another stream
//!   than the write, in the same process, is a race like any other
//!   (event.stream.own-kernel-read-without-sync).
//!
//! Simplification: the legacy stream waits for the blocking streams of the
//! process, not only of its current context.
//!
//! A copy takes no simulated time: it runs when its stream reaches it,
//! reading the source as it is then (an earlier `slow_fill` on the same
//! stream lands first). It reads and writes through the process's mappings
//! with the rules of `read` and `memset` (a closed or freed mapping fails),
//! and is ordered as a read of the source and a write of the destination
//! on its stream.

use crate::clock::Clock;
use crate::event_state::{KernelWrite, StreamState};
use crate::order::{LaneName, PendingWrite};
use crate::world::{Access, BlockId, CtxKey, Fail, MutantId, SimResult, World, MAX_READ};
use ipc_harness::stream_flags::NON_BLOCKING;
use ipc_harness::{DeviceOrdinal, ErrorKind, HazardKind, ProcessIndex, StreamId};

/// Where stream ids start (distinct, non-zero: 0 is the legacy stream).
const STREAM_ID_BASE: u64 = 0x5700_0000;

impl World {
    /// The context of `p`'s `stream`: `None` for the legacy default stream
    /// (the current context's); an unknown or destroyed stream is
    /// InvalidHandle. The per-thread default stream is made on first use.
    pub(crate) fn stream_ctx(
        &mut self,
        p: ProcessIndex,
        stream: StreamId,
    ) -> SimResult<Option<CtxKey>> {
        if stream == StreamId::LEGACY_DEFAULT {
            return Ok(None);
        }
        if stream == StreamId::PER_THREAD && !self.events.streams.contains_key(&(p, stream.0)) {
            self.per_thread_stream(p)?;
        }
        match self.events.streams.get(&(p, stream.0)) {
            Some(s) if !s.destroyed => Ok(Some(s.ctx)),
            _ => Err(ErrorKind::InvalidHandle.into()),
        }
    }

    /// When the work queued on `stream` so far ends (its own queue only).
    pub(crate) fn stream_tail(&self, p: ProcessIndex, stream: StreamId) -> u64 {
        if stream == StreamId::LEGACY_DEFAULT {
            return self.events.tails.get(&p).copied().unwrap_or(0);
        }
        self.events
            .streams
            .get(&(p, stream.0))
            .map_or(0, |s| s.tail)
    }

    /// Whether `s` synchronizes with the legacy default stream.
    fn blocking(&self, s: &StreamState) -> bool {
        !s.nonblocking || self.mutant(MutantId::NonBlockingOrderedWithLegacy)
    }

    /// When work queued on `stream` now starts: after the stream's own work,
    /// and after the work it is implicitly ordered with (module docs).
    pub(crate) fn stream_start(&self, p: ProcessIndex, stream: StreamId) -> SimResult<u64> {
        let clock = self.events.clock;
        if stream == StreamId::LEGACY_DEFAULT {
            if self.mutant(MutantId::LegacyIgnoresBlockingStreams) {
                return Ok(self.stream_tail(p, stream).max(clock));
            }
            let own = self.stream_tail(p, stream);
            let after = self
                .streams_of(p)
                .filter(|s| self.blocking(s))
                .fold(own, |t, s| t.max(s.tail));
            return Ok(after.max(clock));
        }
        let Some(s) = self
            .events
            .streams
            .get(&(p, stream.0))
            .filter(|s| !s.destroyed)
        else {
            return Err(ErrorKind::InvalidHandle.into());
        };
        let after = if self.blocking(s) {
            s.tail.max(self.stream_tail(p, StreamId::LEGACY_DEFAULT))
        } else {
            s.tail
        };
        Ok(after.max(clock))
    }

    pub(crate) fn set_stream_tail(&mut self, p: ProcessIndex, stream: StreamId, tail: u64) {
        if stream == StreamId::LEGACY_DEFAULT {
            self.events.tails.insert(p, tail);
        } else if let Some(s) = self.events.streams.get_mut(&(p, stream.0)) {
            s.tail = tail;
        }
    }

    /// `p`'s streams (destroyed ones included: their work still runs).
    fn streams_of(&self, p: ProcessIndex) -> impl Iterator<Item = &StreamState> {
        self.events
            .streams
            .range((p, 0)..=(p, u64::MAX))
            .map(|(_, s)| s)
    }

    pub(crate) fn stream_create(&mut self, p: ProcessIndex, flags: u32) -> SimResult<StreamId> {
        let (ctx, _) = self.current_ctx(p)?;
        if flags & !NON_BLOCKING != 0 {
            return Err(ErrorKind::InvalidValue.into());
        }
        self.events.next_stream += 1;
        let id = STREAM_ID_BASE + self.events.next_stream * 0x10;
        let nth = self
            .order
            .lanes
            .iter()
            .filter(|l| l.process == p && l.nth > 0)
            .count()
            + 1;
        self.add_stream(p, StreamId(id), ctx, flags & NON_BLOCKING != 0, nth);
        Ok(StreamId(id))
    }

    /// A new stream of `p`, with its lane (`nth`: its place among those
    /// `p` created; 0 for the per-thread default stream).
    fn add_stream(
        &mut self,
        p: ProcessIndex,
        stream: StreamId,
        ctx: CtxKey,
        nonblocking: bool,
        nth: usize,
    ) {
        let name = LaneName {
            process: p,
            stream,
            nth,
            nonblocking,
        };
        let lane = self.order.new_lane(self.procs.len(), name);
        let state = StreamState {
            ctx,
            nonblocking,
            tail: 0,
            destroyed: false,
            lane,
            clock: Clock::default(),
        };
        self.events.streams.insert((p, stream.0), state);
    }

    /// The per-thread default stream of `p`, made now: "an implicit stream
    /// local to both the thread and the CUcontext, and which does not
    /// synchronize with other streams (just like explicitly created
    /// streams). The per-thread default stream is not a non-blocking stream
    /// and will synchronize with the legacy default stream" ("Stream
    /// synchronization behavior"; event.stream.per-thread-ordered-with-legacy).
    /// Simplification: one per process (a worker is one thread), made in
    /// the context current at its first use.
    fn per_thread_stream(&mut self, p: ProcessIndex) -> SimResult<()> {
        let (ctx, _) = self.current_ctx(p)?;
        let nonblocking = self.mutant(MutantId::PerThreadNonBlocking);
        self.add_stream(p, StreamId::PER_THREAD, ctx, nonblocking, 0);
        Ok(())
    }

    /// cudaStreamDestroy: "in case the device is still doing work in the
    /// stream when cudaStreamDestroy() is called, the function will return
    /// immediately and the resources associated with stream will be released
    /// automatically once the device has completed all work in stream"
    /// (stream.destroy-with-pending-work-completes): the queued fills stay
    /// pending and land on time.
    pub(crate) fn stream_destroy(&mut self, p: ProcessIndex, stream: StreamId) -> SimResult<()> {
        // The per-thread default stream is not the program's to destroy
        // (unmeasured: taken to be refused as an unknown stream is).
        if stream == StreamId::PER_THREAD {
            return Err(ErrorKind::InvalidHandle.into());
        }
        self.stream_ctx(p, stream)?;
        match self.events.streams.get_mut(&(p, stream.0)) {
            Some(s) => {
                s.destroyed = true;
                Ok(())
            }
            None => Err(ErrorKind::InvalidHandle.into()),
        }
    }

    /// Waits for `stream`'s work (the legacy stream's: and the blocking
    /// streams', as `tail` does); the host is ordered after it.
    pub(crate) fn stream_synchronize(
        &mut self,
        p: ProcessIndex,
        stream: StreamId,
    ) -> SimResult<()> {
        self.stream_ctx(p, stream)?;
        let tail = if stream == StreamId::LEGACY_DEFAULT {
            self.events.tail(p)
        } else {
            self.stream_tail(p, stream)
        };
        self.events.clock = self.events.clock.max(tail);
        self.settle();
        self.host_waits_for(p, stream);
        Ok(())
    }

    /// `NotReady` while `stream`'s work runs; `ok` says it is complete, so
    /// the host is then ordered after it, as after a synchronize.
    pub(crate) fn stream_query(&mut self, p: ProcessIndex, stream: StreamId) -> SimResult<()> {
        self.stream_ctx(p, stream)?;
        let tail = if stream == StreamId::LEGACY_DEFAULT {
            self.events.tail(p)
        } else {
            self.stream_tail(p, stream)
        };
        if tail > self.events.clock {
            return Err(ErrorKind::NotReady.into());
        }
        self.host_waits_for(p, stream);
        Ok(())
    }

    /// `len` bytes from `src` to `dst` queued on `stream`
    /// (mem.copy.device-to-device-through-ipc-mapping).
    pub(crate) fn copy_device(
        &mut self,
        p: ProcessIndex,
        dst: u64,
        src: u64,
        len: u64,
        stream: StreamId,
    ) -> SimResult<()> {
        self.current_ctx(p)?;
        self.stream_ctx(p, stream)?;
        let start = self.stream_start(p, stream)?;
        self.queue_copy(p, dst, src, len, start, stream)?;
        self.set_stream_tail(p, stream, start);
        Ok(())
    }

    /// cudaMemcpyPeer: "serialized with respect [to] all pending and future
    /// asynchronous work in to the current device, srcDevice, and dstDevice":
    /// it starts after all of `p`'s work, on the legacy stream
    /// (multidev.copy.peer-copy-between-devices).
    pub(crate) fn copy_peer(
        &mut self,
        p: ProcessIndex,
        dst: u64,
        dst_device: DeviceOrdinal,
        src: u64,
        src_device: DeviceOrdinal,
        len: u64,
    ) -> SimResult<()> {
        self.current_ctx(p)?;
        let devices = self.device_count(p);
        if dst_device >= devices || src_device >= devices {
            return Err(ErrorKind::InvalidDevice.into());
        }
        let start = self.events.all_tail(p).max(self.events.clock);
        let all = self.all_streams_clock(p);
        self.order.legacy_mut(p).merge(&all);
        self.queue_copy(p, dst, src, len, start, StreamId::LEGACY_DEFAULT)?;
        self.set_stream_tail(p, StreamId::LEGACY_DEFAULT, start);
        Ok(())
    }

    /// A copy on `stream` that runs at `at`: now, or when the clock passes
    /// it. It reads its source as work on `stream` (a race if a write there
    /// is not ordered before it) and writes its destination as such work.
    fn queue_copy(
        &mut self,
        p: ProcessIndex,
        dst: u64,
        src: u64,
        len: u64,
        at: u64,
        stream: StreamId,
    ) -> SimResult<()> {
        if len == 0 {
            return Ok(());
        }
        if len > MAX_READ {
            return Err(Fail::Harness(format!(
                "the simulator does not materialise copies over {MAX_READ} bytes"
            )));
        }
        let (src_block, src_off) = self.resolve(p, src, len, Access::Copy)?;
        let (dst_block, dst_off) = self.resolve(p, dst, len, Access::Copy)?;
        self.vmm_check_writable(p, dst)?;
        let lane = self.begin_work(p, stream);
        self.check_race(p, stream, src_block, src_off, len);
        self.note_write(p, stream, lane, dst_block, dst_off, len);
        self.queue_write(
            Some(lane),
            at,
            (dst_block, dst_off, len),
            KernelWrite::Byte(0),
            Some((src_block, src_off)),
        );
        self.settle();
        Ok(())
    }

    // --- happens-before (`order.rs`) ---

    /// An edge between hosts: `to`'s later calls are ordered after what
    /// `from`'s host saw complete.
    pub(crate) fn host_edge(&mut self, from: ProcessIndex, to: ProcessIndex) {
        if from != to {
            let seen = self.order.host(from);
            self.order.host_mut(to).merge(&seen);
        }
    }

    /// `p` makes a call: it is ordered after the previous call of any
    /// process, which returned before this one was made.
    pub(crate) fn host_order(&mut self, p: ProcessIndex) {
        if self.order.hosts == crate::order::HostOrder::Explicit {
            return;
        }
        if let Some(q) = self.order.last_caller.replace(p) {
            self.host_edge(q, p);
        }
    }

    /// The clock of `p`'s `stream` (the legacy one's for
    /// [`StreamId::LEGACY_DEFAULT`] and for a stream `p` does not have).
    fn stream_clock_mut(&mut self, p: ProcessIndex, stream: StreamId) -> &mut Clock {
        if stream != StreamId::LEGACY_DEFAULT && self.events.streams.contains_key(&(p, stream.0)) {
            if let Some(s) = self.events.streams.get_mut(&(p, stream.0)) {
                return &mut s.clock;
            }
        }
        self.order.legacy_mut(p)
    }

    /// `p`'s `stream` is now also ordered after what `c` covers (a wait).
    pub(crate) fn stream_clock_merge(&mut self, p: ProcessIndex, stream: StreamId, c: &Clock) {
        self.stream_clock_mut(p, stream).merge(c);
    }

    /// A copy of the clock of `p`'s `stream`.
    pub(crate) fn stream_clock(&mut self, p: ProcessIndex, stream: StreamId) -> Clock {
        self.stream_clock_mut(p, stream).clone()
    }

    /// The lane of `p`'s `stream`.
    fn lane_of(&self, p: ProcessIndex, stream: StreamId) -> usize {
        self.events
            .streams
            .get(&(p, stream.0))
            .filter(|_| stream != StreamId::LEGACY_DEFAULT)
            .map_or(p, |s| s.lane)
    }

    /// Work is queued on `p`'s `stream` now: it runs after what the host
    /// saw, and after the work it is implicitly ordered with ("Stream
    /// synchronization behavior": the legacy stream first waits on all
    /// blocking streams, which then wait on it). Returns its lane; the
    /// stream's clock then holds what the work is ordered after.
    pub(crate) fn begin_work(&mut self, p: ProcessIndex, stream: StreamId) -> usize {
        let mut after = self.order.host(p);
        let lane = self.lane_of(p, stream);
        if lane == p {
            if !self.mutant(MutantId::LegacyIgnoresBlockingStreams) {
                for s in self.streams_of(p).filter(|s| self.blocking(s)) {
                    after.merge(&s.clock);
                }
            }
        } else if self
            .events
            .streams
            .get(&(p, stream.0))
            .is_some_and(|s| self.blocking(s))
        {
            after.merge(&self.order.legacy(p));
        }
        self.stream_clock_mut(p, stream).merge(&after);
        lane
    }

    /// Work on `p`'s `stream` (lane `lane`, after [`World::begin_work`])
    /// writes `len` bytes at `offset` of `block`.
    pub(crate) fn note_write(
        &mut self,
        p: ProcessIndex,
        stream: StreamId,
        lane: usize,
        block: BlockId,
        offset: u64,
        len: u64,
    ) {
        let n = self.order.next_write(lane);
        self.stream_clock_mut(p, stream).set(lane, n);
        self.order.pending.push(PendingWrite {
            lane,
            n,
            block,
            offset,
            len,
        });
    }

    /// Every stream of `p`, the legacy one included, merged.
    fn all_streams_clock(&self, p: ProcessIndex) -> Clock {
        let mut all = self.order.legacy(p);
        for s in self.streams_of(p) {
            all.merge(&s.clock);
        }
        all
    }

    /// `p`'s host waited for `stream`'s work: the legacy stream's is also
    /// that of the blocking streams it waits for (as `Events::tail`).
    pub(crate) fn host_waits_for(&mut self, p: ProcessIndex, stream: StreamId) {
        let mut done = self.stream_clock(p, stream);
        if self.lane_of(p, stream) == p {
            for s in self.streams_of(p).filter(|s| self.blocking(s)) {
                done.merge(&s.clock);
            }
        }
        self.host_saw(p, &done);
    }

    /// `p`'s host waited for the work of all its streams.
    pub(crate) fn host_waits_for_all(&mut self, p: ProcessIndex) {
        let all = self.all_streams_clock(p);
        self.host_saw(p, &all);
    }

    /// `p` ends (an exit, a crash): the other processes' later steps are
    /// ordered after the work of its streams that has ended by now, not
    /// after work still running (a kernel whose time has not passed, and
    /// what its stream queued after it): a process's end returns while its
    /// teardown waits for that work or not, and another process that reads
    /// its bytes then races with it
    /// (mem.lifetime.exit-does-not-order-running-work).
    pub(crate) fn host_sees_ended_work(&mut self, p: ProcessIndex) {
        let now = self.events.clock;
        let mut done = self.all_streams_clock(p);
        for f in self.events.pending.iter().filter(|f| f.done_at > now) {
            if let Some((lane, n)) = f.write {
                done.set(lane, done.get(lane).min(n.saturating_sub(1)));
            }
        }
        self.host_saw(p, &done);
    }

    /// `p`'s host saw the writes `done` covers complete.
    pub(crate) fn host_saw(&mut self, p: ProcessIndex, done: &Clock) {
        self.order.host_mut(p).merge(done);
        let procs = &self.procs;
        let live = (0..procs.len()).filter(|&q| !procs[q].exited);
        self.order.prune(live);
    }

    /// Work on `p`'s `stream` (after [`World::begin_work`]) reads `len`
    /// bytes at `offset` of `block`: a pending write there that the
    /// stream's clock does not cover is a race, logged with the streams of
    /// both sides.
    pub(crate) fn check_race(
        &mut self,
        p: ProcessIndex,
        stream: StreamId,
        block: BlockId,
        offset: u64,
        len: u64,
    ) {
        let clock = self.stream_clock(p, stream);
        let own_lanes_ordered = self.mutant(MutantId::OwnStreamsUnordered);
        let nprocs = self.procs.len();
        let owner = |lane: usize, order: &crate::order::Order| {
            if lane < nprocs {
                lane
            } else {
                order
                    .lanes
                    .get(lane - nprocs)
                    .map_or(usize::MAX, |l| l.process)
            }
        };
        let racing = self.order.pending.iter().find(|w| {
            w.overlaps(block, offset, len)
                && clock.get(w.lane) < w.n
                && !(own_lanes_ordered && owner(w.lane, &self.order) == p)
        });
        let Some(&w) = racing else {
            return;
        };
        let writer = owner(w.lane, &self.order);
        let writer_name = self.procs.get(writer).map_or("?", |q| q.name.as_str());
        let wrote_on = self.stream_words(w.lane);
        let reader = if stream == StreamId::LEGACY_DEFAULT {
            "this read, on the legacy default stream,".to_string()
        } else {
            format!(
                "this copy, on {},",
                self.stream_words(self.lane_of(p, stream))
            )
        };
        let detail = format!(
            "{writer_name} wrote these bytes on {wrote_on}, and {reader} is not ordered after that write (no wait on an event recorded on that stream after it, no synchronization with it)"
        );
        self.hazards
            .record(HazardKind::UnsynchronizedRead, p, detail);
    }

    /// A lane in words: `its legacy default stream`, or `stream 0x57000010
    /// (the 1st stream owner created, non-blocking)`.
    fn stream_words(&self, lane: usize) -> String {
        let nprocs = self.procs.len();
        if lane < nprocs {
            return "its legacy default stream".into();
        }
        match self.order.lanes.get(lane - nprocs) {
            Some(l) if l.nth == 0 => "its per-thread default stream".into(),
            Some(l) => {
                let who = self.procs.get(l.process).map_or("?", |q| q.name.as_str());
                let kind = if l.nonblocking {
                    "non-blocking"
                } else {
                    "blocking"
                };
                format!(
                    "stream {:#x} (the {} stream {who} created, {kind})",
                    l.stream.0,
                    ordinal(l.nth)
                )
            }
            None => format!("lane {lane}"),
        }
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, ... `11th`, `21st`.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}
