//! How many interprocess events, opened event handles and IPC mappings one
//! process may hold. Each limit is named after the clause that measures it
//! (`event.scale.*`, `mem.scale.*`; their 100,000-sized variants are in
//! conformance/scale/). None is measured yet, so none is set: until then the
//! simulator bounds these only by device memory and VA, as before.
//! When a limit is set, going past it is OutOfMemory (which error the driver
//! answers is part of the measurement).

use crate::world::{SimResult, World};
use ipc_harness::event_flags::INTERPROCESS;
use ipc_harness::{ErrorKind, ProcessIndex};

/// Live interprocess events one process may have created
/// (event.scale.open-thousand-not-destroyed); `None`: unmeasured, no limit.
pub(crate) const LIVE_IPC_EVENTS_PER_PROCESS: Option<usize> = None;

/// Event handles one process may hold open, never destroyed
/// (event.scale.open-thousand-not-destroyed); `None`: unmeasured, no limit.
pub(crate) const OPEN_EVENT_HANDLES_PER_PROCESS: Option<usize> = None;

/// IPC mappings one process may hold open
/// (mem.scale.open-thousand-allocations); `None`: unmeasured, no limit.
pub(crate) const OPEN_MAPPINGS_PER_PROCESS: Option<usize> = None;

/// Slots of one context's interprocess-event pool: the measured handles
/// count the slot down from 0x0fff in bytes 16..20. What a context's
/// 4097th live event gets is unmeasured
/// (event.scale.open-thousand-not-destroyed at 100,000): the simulator
/// numbers the pool in bytes 20..24, so every live event keeps its own bytes.
pub(crate) const EVENT_POOL_SLOTS: u32 = 0x1000;

/// The two handle words of event slot `slot`: its place in its pool,
/// counting down, and the pool's number.
pub(crate) fn event_slot_words(slot: u32) -> (u32, u32) {
    (
        EVENT_POOL_SLOTS - 1 - slot % EVENT_POOL_SLOTS,
        slot / EVENT_POOL_SLOTS,
    )
}

/// One more may be taken while `held` are: the limit is unset or not reached.
fn room_for_one_more(limit: Option<usize>, held: usize) -> bool {
    limit.is_none_or(|l| held < l)
}

fn beyond_limit(limit: Option<usize>, held: impl FnOnce() -> usize) -> SimResult<()> {
    // Counting costs a pass over the process's objects: only when a limit is set.
    if limit.is_none() || room_for_one_more(limit, held()) {
        Ok(())
    } else {
        Err(ErrorKind::OutOfMemory.into())
    }
}

impl World {
    /// Before process `p` creates one more interprocess event.
    pub(crate) fn live_ipc_events_rule(&self, p: ProcessIndex) -> SimResult<()> {
        beyond_limit(LIVE_IPC_EVENTS_PER_PROCESS, || {
            self.events
                .cores
                .values()
                .filter(|c| c.owner == p && c.flags & INTERPROCESS != 0 && !c.exporter_destroyed)
                .count()
        })
    }

    /// Before process `p` opens one more event handle.
    pub(crate) fn open_event_handles_rule(&self, p: ProcessIndex) -> SimResult<()> {
        beyond_limit(OPEN_EVENT_HANDLES_PER_PROCESS, || {
            self.events
                .local
                .iter()
                .filter(|((q, _), l)| *q == p && l.imported)
                .count()
        })
    }

    /// Before process `p` maps one more IPC handle.
    pub(crate) fn open_mappings_rule(&self, p: ProcessIndex) -> SimResult<()> {
        beyond_limit(OPEN_MAPPINGS_PER_PROCESS, || self.procs[p].imports.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_pool_keeps_the_measured_slot_words() {
        assert_eq!(event_slot_words(0), (0x0fff, 0));
        assert_eq!(event_slot_words(0x0ffe), (1, 0));
        assert_eq!(event_slot_words(0x0fff), (0, 0));
    }

    #[test]
    fn slots_past_the_first_pool_keep_distinct_words() {
        let words: std::collections::BTreeSet<(u32, u32)> =
            (0..3 * EVENT_POOL_SLOTS).map(event_slot_words).collect();
        assert_eq!(words.len(), 3 * EVENT_POOL_SLOTS as usize);
        assert_eq!(event_slot_words(EVENT_POOL_SLOTS), (0x0fff, 1));
    }

    #[test]
    fn a_set_limit_refuses_the_one_past_it() {
        assert!(room_for_one_more(None, usize::MAX));
        assert!(room_for_one_more(Some(3), 2));
        assert!(!room_for_one_more(Some(3), 3));
        assert!(beyond_limit(Some(3), || 2).is_ok());
        assert!(beyond_limit(Some(3), || 3).is_err());
        assert!(beyond_limit(None, || unreachable!("no count without a limit")).is_ok());
    }
}
