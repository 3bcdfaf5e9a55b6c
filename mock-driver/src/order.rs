//! What `World` holds of stream-ordered happens-before: which device
//! writes each host and each stream is ordered after. The rules that change
//! it are in `streams.rs` (streams, hosts, copies) and `events.rs` (records
//! and waits); this state is a leaf so that `world.rs` can hold it.
//!
//! Every stream of a process is a *lane*: the legacy default stream of
//! process `p` is lane `p`, each stream a process creates (and its
//! per-thread default stream, on first use) takes the next lane after the
//! processes'. Device work that writes memory (a kernel, a memset, a copy)
//! takes the next write number of its lane, and a [`Clock`] says, per
//! lane, the newest write something is ordered after:
//! - a stream's clock: what work queued on it now runs after (its own
//!   earlier work, what its waits covered, and what its host had seen when
//!   the work was queued);
//! - a host's clock (`host`): the writes that process's host saw complete
//!   (a synchronization, a blocking copy, an event synchronize or query);
//! - an event's `covers` (`event_state::Core`): the clock of the stream it
//!   was recorded on, at the record.
//!
//! Hosts are ordered with one another only by edges (`World::host_edge`).
//! The simulator runs one call at a time, each after the previous one
//! returned (a scenario's steps, a roles run's schedule), so by default
//! every call is ordered after every earlier call of any process
//! (`World::host_order` adds that edge: [`HostOrder::Sequential`]); a judge
//! of a real program's trace, whose processes run at once, asks for
//! [`HostOrder::Explicit`] and adds an edge where they talk
//! (`SimMachine::host_edge`).
//!
//! A write stays in `pending` until every host's clock covers it; a read
//! that overlaps a pending write its own clock does not cover is a race
//! (`HazardKind::UnsynchronizedRead`).

use crate::clock::Clock;
use crate::ids::BlockId;
use ipc_harness::{ProcessIndex, StreamId};

/// A stream a process created (or its per-thread default stream), for the
/// hazard log's words.
#[derive(Debug, Clone)]
pub(crate) struct LaneName {
    pub process: ProcessIndex,
    pub stream: StreamId,
    /// Its place among the streams the process made (1 for the first; 0:
    /// the per-thread default stream).
    pub nth: usize,
    pub nonblocking: bool,
}

/// A device write no host has seen complete yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingWrite {
    pub lane: usize,
    /// Its number on its lane.
    pub n: u64,
    pub block: BlockId,
    pub offset: u64,
    pub len: u64,
}

impl PendingWrite {
    /// Whether it touches any of `len` bytes at `offset` of `block`.
    pub(crate) fn overlaps(&self, block: BlockId, offset: u64, len: u64) -> bool {
        self.block == block
            && self.offset < offset.saturating_add(len)
            && offset < self.offset.saturating_add(self.len)
    }
}

/// How the hosts of a machine's processes are ordered with one another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostOrder {
    /// Each call after every earlier call of any process, as the simulator
    /// runs them (the default).
    #[default]
    Sequential,
    /// Only by the edges the caller adds (`SimMachine::host_edge`): where
    /// one process tells another something (a message, a descriptor).
    Explicit,
}

#[derive(Debug, Default)]
pub(crate) struct Order {
    /// How hosts are ordered with one another.
    pub hosts: HostOrder,
    /// Per process: what its host is ordered after.
    pub host: Vec<Clock>,
    /// Per process: its legacy default stream's clock.
    pub legacy: Vec<Clock>,
    /// Per lane: the writes it made so far.
    pub writes: Vec<u64>,
    /// Lanes from the processes' count on: the streams they are.
    pub lanes: Vec<LaneName>,
    /// Writes some host has not seen complete, in issue order.
    pub pending: Vec<PendingWrite>,
    /// The process that made the last call (`World::host_order`).
    pub last_caller: Option<ProcessIndex>,
}

impl Order {
    /// Process `p`'s host clock, made on first use.
    pub(crate) fn host_mut(&mut self, p: ProcessIndex) -> &mut Clock {
        grow(&mut self.host, p)
    }

    /// Process `p`'s legacy stream clock, made on first use.
    pub(crate) fn legacy_mut(&mut self, p: ProcessIndex) -> &mut Clock {
        grow(&mut self.legacy, p)
    }

    pub(crate) fn host(&self, p: ProcessIndex) -> Clock {
        self.host.get(p).cloned().unwrap_or_default()
    }

    pub(crate) fn legacy(&self, p: ProcessIndex) -> Clock {
        self.legacy.get(p).cloned().unwrap_or_default()
    }

    /// The next write number of `lane`.
    pub(crate) fn next_write(&mut self, lane: usize) -> u64 {
        let n = grow(&mut self.writes, lane);
        *n += 1;
        *n
    }

    /// The number of `lane`'s last write (0: none yet).
    pub(crate) fn last_write(&self, lane: usize) -> u64 {
        self.writes.get(lane).copied().unwrap_or(0)
    }

    /// A lane for a new stream, after the `nprocs` legacy lanes.
    pub(crate) fn new_lane(&mut self, nprocs: usize, name: LaneName) -> usize {
        self.lanes.push(name);
        nprocs + self.lanes.len() - 1
    }

    /// Forget the pending writes every host of `live` has seen complete.
    pub(crate) fn prune(&mut self, live: impl Iterator<Item = ProcessIndex> + Clone) {
        let host = &self.host;
        self.pending.retain(|w| {
            live.clone()
                .any(|p| host.get(p).map_or(0, |h| h.get(w.lane)) < w.n)
        });
    }
}

fn grow<T: Default>(v: &mut Vec<T>, i: usize) -> &mut T {
    if v.len() <= i {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}
