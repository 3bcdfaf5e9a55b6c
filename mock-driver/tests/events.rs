//! The simulated events: flags, IPC handles, cross-process ordering over the
//! simulated clock, and the exporter destroying an event an importer holds.
//! The tests here assert what a scenario cannot: event handle bytes flipped
//! at an offset, whether two opens give the same event, elapsed
//! milliseconds, and the exact hazard log at a point mid-run. The rest is
//! scenario files under `tests/scenarios/events/`.

mod common;

use common::*;
use ipc_harness::event_flags::{DEFAULT, DISABLE_TIMING, INTERPROCESS};
use ipc_harness::{ErrorKind, EventId, HazardKind, IpcEventHandle, Machine, MemKind, OutArg};
use rstest::rstest;

const IPC: u32 = INTERPROCESS | DISABLE_TIMING;
/// Long enough that nothing but a wait reaches its end.
const LONG_US: u64 = 300_000;

/// Owner's 2 MiB buffer (zeroed), its IPC event, and both opened in the peer.
struct Shared {
    buf: ipc_harness::DevicePtr,
    peer_buf: ipc_harness::DevicePtr,
    event: EventId,
    peer_event: EventId,
}

fn share(m: &mut dyn Machine) -> Shared {
    let buf = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    m.driver(0).memset(buf, 0, 2 * MIB).unwrap();
    // The zeros are certain to be seen elsewhere only once they landed
    // (`unsynchronized-read`).
    m.driver(0).synchronize().unwrap();
    let h = m.driver(0).ipc_get_mem_handle(buf, OutArg::Valid).unwrap();
    let event = m.driver(0).event_create(IPC).unwrap();
    let eh = m
        .driver(0)
        .ipc_get_event_handle(event, OutArg::Valid)
        .unwrap();
    let peer_buf = m
        .driver(1)
        .ipc_open_mem_handle(h, 1, OutArg::Valid)
        .unwrap();
    let peer_event = m
        .driver(1)
        .ipc_open_event_handle(eh, OutArg::Valid)
        .unwrap();
    Shared {
        buf,
        peer_buf,
        event,
        peer_event,
    }
}

#[test]
fn opening_is_refused_in_the_exporter_and_for_unknown_bytes() {
    let mut m = start("");
    let e = m.driver(0).event_create(IPC).unwrap();
    let h = m.driver(0).ipc_get_event_handle(e, OutArg::Valid).unwrap();
    assert_eq!(
        err(m.driver(0).ipc_open_event_handle(h, OutArg::Valid)),
        ErrorKind::InvalidContext
    );
    assert_eq!(
        err(m
            .driver(1)
            .ipc_open_event_handle(IpcEventHandle::ZERO, OutArg::Valid)),
        ErrorKind::MapFailed
    );
    let mut flipped = h;
    flipped.0[17] ^= 0xff;
    assert_eq!(
        err(m.driver(1).ipc_open_event_handle(flipped, OutArg::Valid)),
        ErrorKind::MapFailed
    );
}

#[rstest]
#[case("", false)]
#[case("event_reopen=same-event", true)]
fn reopening_a_handle(#[case] settings: &str, #[case] same: bool) {
    let mut m = start(settings);
    let e = m.driver(0).event_create(IPC).unwrap();
    let h = m.driver(0).ipc_get_event_handle(e, OutArg::Valid).unwrap();
    let x = m.driver(1).ipc_open_event_handle(h, OutArg::Valid).unwrap();
    let y = m.driver(1).ipc_open_event_handle(h, OutArg::Valid).unwrap();
    assert_eq!(x == y, same);
}

#[test]
fn importer_waits_for_the_exporters_long_work() {
    let mut m = start("");
    let s = share(m.as_mut());
    m.driver(0)
        .slow_fill(s.buf, 0x5a, 2 * MIB, LONG_US)
        .unwrap();
    m.driver(0).event_record(s.event).unwrap();
    assert_eq!(err(m.driver(0).event_query(s.event)), ErrorKind::NotReady);
    assert_eq!(
        err(m.driver(1).event_query(s.peer_event)),
        ErrorKind::NotReady
    );
    // Without a wait, the work has not landed, and the read is not ordered
    // after the kernel (event.order.kernel-write-without-wait).
    assert_eq!(m.driver(1).read(s.peer_buf, 4).unwrap(), vec![0; 4]);
    assert_eq!(
        hazard_kinds(m.as_ref()),
        vec![HazardKind::UnsynchronizedRead]
    );
    m.driver(1).event_synchronize(s.peer_event).unwrap();
    m.driver(1).event_query(s.peer_event).unwrap();
    // After the wait, the read is ordered: no new hazard.
    assert_eq!(m.driver(1).read(s.peer_buf, 4).unwrap(), vec![0x5a; 4]);
    assert_eq!(
        hazard_kinds(m.as_ref()),
        vec![HazardKind::UnsynchronizedRead]
    );
}

#[test]
fn elapsed_time_needs_two_completed_timing_events() {
    let mut m = start("");
    let s = share(m.as_mut());
    let t1 = m.driver(0).event_create(DEFAULT).unwrap();
    let t2 = m.driver(0).event_create(DEFAULT).unwrap();
    assert_eq!(
        err(m.driver(0).event_elapsed(t1, t2)),
        ErrorKind::InvalidHandle,
        "never recorded"
    );
    m.driver(0).event_record(t1).unwrap();
    m.driver(0).slow_fill(s.buf, 1, 16, LONG_US).unwrap();
    m.driver(0).event_record(t2).unwrap();
    assert_eq!(err(m.driver(0).event_elapsed(t1, t2)), ErrorKind::NotReady);
    m.driver(0).synchronize().unwrap();
    let ms = m.driver(0).event_elapsed(t1, t2).unwrap();
    assert!((300.0..301.0).contains(&ms), "{ms} ms");
    m.driver(0).event_record(s.event).unwrap();
    assert_eq!(
        err(m.driver(0).event_elapsed(t1, s.event)),
        ErrorKind::InvalidHandle
    );
    assert_eq!(
        err(m.driver(1).event_elapsed(s.peer_event, s.peer_event)),
        ErrorKind::InvalidHandle
    );
}

#[test]
fn using_an_import_after_the_exporter_destroyed_it_works_and_is_a_hazard() {
    let mut m = start("");
    let s = share(m.as_mut());
    m.driver(0).event_destroy(s.event).unwrap();
    assert!(hazard_kinds(m.as_ref()).is_empty());
    m.driver(1).event_query(s.peer_event).unwrap();
    m.driver(1).event_record(s.peer_event).unwrap();
    m.driver(1).event_destroy(s.peer_event).unwrap();
    assert!(hazard_kinds(m.as_ref()).contains(&HazardKind::EventAfterExporterDestroy));
    assert_eq!(
        err(m.driver(1).event_query(s.peer_event)),
        ErrorKind::InvalidHandle,
        "the importer's own event is gone"
    );
}
