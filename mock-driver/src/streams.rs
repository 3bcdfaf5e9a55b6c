//! Streams other than the legacy default stream, and device-to-device and
//! peer copies, over the simulated clock of `events.rs`.
//!
//! Each stream has its own *tail* (when the work queued on it ends). The
//! ordering rules are those of "Stream synchronization behavior"
//! (<https://docs.nvidia.com/cuda/cuda-runtime-api/stream-sync-behavior.html>):
//! - work queued on the legacy default stream (stream 0) starts after the
//!   work of the process's blocking streams, and work queued on a blocking
//!   stream starts after the legacy default stream's work
//!   (stream.legacy-waits-for-blocking, stream.blocking-waits-for-legacy);
//! - a non-blocking stream (`cudaStreamNonBlocking`) is ordered after
//!   neither (stream.nonblocking-not-ordered-after-default);
//! - a device synchronization waits for every stream; a stream
//!   synchronization for that stream only.
//!
//! Simplification: the legacy stream waits for the blocking streams of the
//! process, not only of its current context.
//!
//! A copy takes no simulated time: it runs when its stream reaches it,
//! reading the source as it is then (an earlier `slow_fill` on the same
//! stream lands first). It reads and writes through the process's mappings
//! with the rules of `read` and `memset` (a closed or freed mapping fails),
//! and the hazard log sees it as a read of the source and a write of the
//! destination.

use crate::clock::Clock;
use crate::event_state::{KernelWrite, PendingFill, StreamState};
use crate::world::{Access, CtxKey, Fail, SimResult, World, MAX_READ};
use ipc_harness::stream_flags::NON_BLOCKING;
use ipc_harness::{DeviceOrdinal, ErrorKind, ProcessIndex, StreamId};

/// Where stream ids start (distinct, non-zero: 0 is the legacy stream).
const STREAM_ID_BASE: u64 = 0x5700_0000;

impl World {
    /// The context of `p`'s `stream`: `None` for the legacy default stream
    /// (the current context's); an unknown or destroyed stream is
    /// InvalidHandle.
    pub(crate) fn stream_ctx(
        &self,
        p: ProcessIndex,
        stream: StreamId,
    ) -> SimResult<Option<CtxKey>> {
        if stream == StreamId::LEGACY_DEFAULT {
            return Ok(None);
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

    /// When work queued on `stream` now starts: after the stream's own work,
    /// and after the work it is implicitly ordered with (module docs).
    pub(crate) fn stream_start(&self, p: ProcessIndex, stream: StreamId) -> SimResult<u64> {
        let clock = self.events.clock;
        if stream == StreamId::LEGACY_DEFAULT {
            return Ok(self.events.tail(p).max(clock));
        }
        let Some(s) = self
            .events
            .streams
            .get(&(p, stream.0))
            .filter(|s| !s.destroyed)
        else {
            return Err(ErrorKind::InvalidHandle.into());
        };
        let after = if s.nonblocking {
            s.tail
        } else {
            s.tail.max(self.stream_tail(p, StreamId::LEGACY_DEFAULT))
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

    pub(crate) fn stream_create(&mut self, p: ProcessIndex, flags: u32) -> SimResult<StreamId> {
        let (ctx, _) = self.current_ctx(p)?;
        if flags & !NON_BLOCKING != 0 {
            return Err(ErrorKind::InvalidValue.into());
        }
        self.events.next_stream += 1;
        let id = STREAM_ID_BASE + self.events.next_stream * 0x10;
        self.events.streams.insert(
            (p, id),
            StreamState {
                ctx,
                nonblocking: flags & NON_BLOCKING != 0,
                tail: 0,
                destroyed: false,
                seen: Default::default(),
            },
        );
        Ok(StreamId(id))
    }

    /// cudaStreamDestroy: "in case the device is still doing work in the
    /// stream when cudaStreamDestroy() is called, the function will return
    /// immediately and the resources associated with stream will be released
    /// automatically once the device has completed all work in stream"
    /// (stream.destroy-with-pending-work-completes): the queued fills stay
    /// pending and land on time.
    pub(crate) fn stream_destroy(&mut self, p: ProcessIndex, stream: StreamId) -> SimResult<()> {
        self.stream_ctx(p, stream)?;
        match self.events.streams.get_mut(&(p, stream.0)) {
            Some(s) => {
                s.destroyed = true;
                Ok(())
            }
            None => Err(ErrorKind::InvalidHandle.into()),
        }
    }

    /// Waits for `stream`'s work. What `p` wrote is visible to every process
    /// once none of its streams has work left.
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
        if let Some(seen) = self
            .events
            .streams
            .get(&(p, stream.0))
            .map(|s| s.seen.clone())
        {
            self.procs[p].seen.merge(&seen);
        }
        if self.events.all_tail(p) <= self.events.clock {
            self.synced(p);
        }
        Ok(())
    }

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
        let seen = self.stream_seen(p, stream);
        self.queue_copy(p, dst, src, len, start, &seen)?;
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
        self.merge_stream_seen(p, true);
        let seen = self.procs[p].seen.clone();
        self.queue_copy(p, dst, src, len, start, &seen)?;
        self.set_stream_tail(p, StreamId::LEGACY_DEFAULT, start);
        Ok(())
    }

    /// What work queued on `stream` is ordered after: the host's
    /// happens-before and the stream's own waits.
    pub(crate) fn stream_seen(&self, p: ProcessIndex, stream: StreamId) -> Clock {
        let mut seen = self.procs[p].seen.clone();
        if let Some(s) = self.events.streams.get(&(p, stream.0)) {
            seen.merge(&s.seen);
        }
        seen
    }

    /// A wait of `stream` on an event covering `covers`: the legacy stream's
    /// waits order the host's later calls (they run on it); another
    /// stream's order that stream only (event.stream.wait-orders-that-stream-only).
    pub(crate) fn stream_waited(&mut self, p: ProcessIndex, stream: StreamId, covers: &Clock) {
        let target = match self.events.streams.get_mut(&(p, stream.0)) {
            Some(s) => &mut s.seen,
            None => match self.procs.get_mut(p) {
                Some(proc) => &mut proc.seen,
                None => return,
            },
        };
        target.merge(covers);
    }

    /// The host waited for `p`'s streams (every one, or the blocking ones
    /// the legacy stream waits for): what they were ordered after is
    /// ordered before the host's later calls.
    pub(crate) fn merge_stream_seen(&mut self, p: ProcessIndex, all: bool) {
        if self.events.streams.is_empty() {
            return;
        }
        let Some(proc) = self.procs.get_mut(p) else {
            return;
        };
        let streams = self
            .events
            .streams
            .range((p, 0)..=(p, u64::MAX))
            .filter(|(_, s)| all || !s.nonblocking);
        for (_, s) in streams {
            proc.seen.merge(&s.seen);
        }
    }

    /// A copy that runs at `at`: now, or when the clock passes it. `seen`
    /// is what it is ordered after (for the hazard log).
    fn queue_copy(
        &mut self,
        p: ProcessIndex,
        dst: u64,
        src: u64,
        len: u64,
        at: u64,
        seen: &Clock,
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
        // Judged with the stream's happens-before in place of the host's.
        let host_seen = std::mem::replace(&mut self.procs[p].seen, seen.clone());
        self.check_unsynced_read(p, src_block, src_off, len);
        self.procs[p].seen = host_seen;
        let proc = &mut self.procs[p];
        proc.writes += 1;
        proc.unsynced.push((proc.writes, dst_block, dst_off, len));
        self.events.pending.push(PendingFill {
            done_at: at,
            block: dst_block,
            offset: dst_off,
            len,
            content: KernelWrite::Byte(0),
            source: Some((src_block, src_off)),
        });
        self.settle();
        Ok(())
    }
}
