//! How many interprocess events, opened event handles and IPC mappings one
//! process may hold. Each limit is named after the clause that measures it
//! (`event.scale.*`, `mem.scale.*`; their large variants are in
//! conformance/scale/). A limit left `None` is not reached by any measurement:
//! the simulator bounds it only by device memory and VA.
//! Going past a set limit is OutOfMemory (cudaErrorMemoryAllocation,
//! CUDA_ERROR_OUT_OF_MEMORY), as measured for interprocess events.

use crate::world::{SimResult, World};
use ipc_harness::{ErrorKind, ProcessIndex};

/// Live interprocess events one process may have created: the 4,097th
/// create fails with cudaErrorMemoryAllocation on H100 / 580.159.04
/// (event.scale.interprocess-event-limit). Measured in a process with one
/// context; whether the limit is per context (one 4,096-slot pool each) is
/// unmeasured, the simulator counts the whole process.
pub(crate) const LIVE_IPC_EVENTS_PER_PROCESS: Option<usize> = Some(4096);

/// Event handles one process may hold open, never destroyed
/// (event.scale.open-thousand-not-destroyed): no measurement reached one;
/// `None`.
pub(crate) const OPEN_EVENT_HANDLES_PER_PROCESS: Option<usize> = None;

/// IPC mappings one process may hold open
/// (mem.scale.open-thousand-allocations): 30,000 opened and held on
/// H100 / 580.159.04 (mem.scale.open-thirty-thousand-allocations); `None`.
pub(crate) const OPEN_MAPPINGS_PER_PROCESS: Option<usize> = None;

/// Slots of one context's interprocess-event pool: the measured handles
/// count the slot down from 0x0fff in bytes 16..20, and no process gets
/// past the 4,096th (LIVE_IPC_EVENTS_PER_PROCESS).
pub(crate) const EVENT_POOL_SLOTS: u32 = 0x1000;

/// The handle word of event slot `slot`: its place in its pool, counting
/// down.
pub(crate) fn event_slot_word(slot: u32) -> u32 {
    EVENT_POOL_SLOTS - 1 - slot.min(EVENT_POOL_SLOTS - 1)
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
    /// Before a process that holds `held` live interprocess events creates
    /// one more.
    pub(crate) fn live_ipc_events_rule(held: usize) -> SimResult<()> {
        beyond_limit(LIVE_IPC_EVENTS_PER_PROCESS, || held)
    }

    /// Before process `p` opens one more event handle.
    pub(crate) fn open_event_handles_rule(&self, p: ProcessIndex) -> SimResult<()> {
        beyond_limit(OPEN_EVENT_HANDLES_PER_PROCESS, || {
            self.events.local.of(p).filter(|(_, l)| l.imported).count()
        })
    }

    /// Before process `p` maps one more IPC handle.
    pub(crate) fn open_mappings_rule(&self, p: ProcessIndex) -> SimResult<()> {
        beyond_limit(OPEN_MAPPINGS_PER_PROCESS, || self.procs[p].imports().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_down_from_the_measured_word() {
        assert_eq!(event_slot_word(0), 0x0fff);
        assert_eq!(event_slot_word(0x0ffe), 1);
        assert_eq!(event_slot_word(0x0fff), 0);
    }

    #[test]
    fn the_event_limit_fills_exactly_one_pool() {
        assert_eq!(LIVE_IPC_EVENTS_PER_PROCESS, Some(EVENT_POOL_SLOTS as usize));
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
