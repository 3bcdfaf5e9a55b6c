//! The simulated events: flags, IPC handles, cross-process ordering over the
//! simulated clock, and the exporter destroying an event an importer holds.

mod common;

use common::*;
use ipc_harness::event_flags::{BLOCKING_SYNC, DEFAULT, DISABLE_TIMING, INTERPROCESS};
use ipc_harness::{
    DriverError, ErrorKind, EventId, HazardKind, IpcEventHandle, Machine, MemKind, OutArg,
};
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

#[rstest]
#[case(DEFAULT, None)]
#[case(BLOCKING_SYNC | DISABLE_TIMING, None)]
#[case(IPC, None)]
#[case(IPC | BLOCKING_SYNC, None)]
#[case(INTERPROCESS, Some(ErrorKind::InvalidValue))]
#[case(INTERPROCESS | BLOCKING_SYNC, Some(ErrorKind::InvalidValue))]
#[case(0x8, Some(ErrorKind::InvalidValue))]
#[case(0x8000_0000, Some(ErrorKind::InvalidValue))]
fn creation_flags_follow_the_measured_table(#[case] flags: u32, #[case] want: Option<ErrorKind>) {
    let mut m = start("");
    let r = m.driver(0).event_create(flags);
    match want {
        None => assert!(r.is_ok(), "flags {flags:#x}: {r:?}"),
        Some(k) => assert_eq!(err(r), k, "flags {flags:#x}"),
    }
}

#[test]
fn get_fails_semantic_moves_the_timing_refusal_to_the_handle() {
    let mut m = start("event_ipc_timing=get-fails");
    let e = m.driver(0).event_create(INTERPROCESS).unwrap();
    assert_eq!(
        err(m.driver(0).ipc_get_event_handle(e, OutArg::Valid)),
        ErrorKind::InvalidValue
    );
}

#[test]
fn only_interprocess_events_have_handles_and_their_bytes_are_stable() {
    let mut m = start("");
    let plain = m.driver(0).event_create(DISABLE_TIMING).unwrap();
    assert_eq!(
        err(m.driver(0).ipc_get_event_handle(plain, OutArg::Valid)),
        ErrorKind::InvalidHandle
    );
    let a = m.driver(0).event_create(IPC).unwrap();
    let b = m.driver(0).event_create(IPC).unwrap();
    let ha = m.driver(0).ipc_get_event_handle(a, OutArg::Valid).unwrap();
    assert_eq!(
        m.driver(0).ipc_get_event_handle(a, OutArg::Valid).unwrap(),
        ha
    );
    assert_ne!(
        m.driver(0).ipc_get_event_handle(b, OutArg::Valid).unwrap(),
        ha
    );
    assert_ne!(ha, IpcEventHandle::ZERO);
}

#[test]
fn null_out_crashes_the_runtime_process_and_is_invalid_value_in_the_driver() {
    let mut m = start("");
    let e = m.driver(0).event_create(IPC).unwrap();
    assert!(matches!(
        m.driver(0).ipc_get_event_handle(e, OutArg::Null),
        Err(DriverError::Lost(_))
    ));
    let config = ipc_mock_driver::SimConfig::default();
    let mut d = start_cfg(config, &spec(procs(1), 1, ipc_harness::Dialect::Driver));
    let e = d.driver(0).event_create(IPC).unwrap();
    assert_eq!(
        err(d.driver(0).ipc_get_event_handle(e, OutArg::Null)),
        ErrorKind::InvalidValue
    );
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
fn a_stream_wait_orders_the_importers_kernel_after_the_exporters_work() {
    let mut m = start("");
    let s = share(m.as_mut());
    m.driver(0)
        .slow_fill(s.buf, 0x5a, 2 * MIB, LONG_US)
        .unwrap();
    m.driver(0).event_record(s.event).unwrap();
    m.driver(1).stream_wait_event(s.peer_event).unwrap();
    assert_eq!(
        m.driver(1).device_read(s.peer_buf, 4).unwrap(),
        vec![0x5a; 4]
    );
}

#[test]
fn without_the_wait_the_importers_kernel_sees_old_bytes() {
    let mut m = start("");
    let s = share(m.as_mut());
    m.driver(0)
        .slow_fill(s.buf, 0x5a, 2 * MIB, LONG_US)
        .unwrap();
    m.driver(0).event_record(s.event).unwrap();
    assert_eq!(m.driver(1).device_read(s.peer_buf, 4).unwrap(), vec![0; 4]);
    // The exporter's own memcpy waits for its stream.
    assert_eq!(m.driver(0).read(s.buf, 4).unwrap(), vec![0x5a; 4]);
}

#[test]
fn a_record_in_the_importer_is_seen_by_the_exporter() {
    let mut m = start("");
    let s = share(m.as_mut());
    m.driver(1)
        .slow_fill(s.peer_buf, 0x6b, 16, LONG_US)
        .unwrap();
    m.driver(1).event_record(s.peer_event).unwrap();
    assert_eq!(err(m.driver(0).event_query(s.event)), ErrorKind::NotReady);
    m.driver(0).event_synchronize(s.event).unwrap();
    assert_eq!(m.driver(0).read(s.buf, 16).unwrap(), vec![0x6b; 16]);
}

#[test]
fn an_unrecorded_event_is_complete() {
    let mut m = start("");
    let s = share(m.as_mut());
    m.driver(0).event_query(s.event).unwrap();
    m.driver(1).event_query(s.peer_event).unwrap();
    m.driver(1).event_synchronize(s.peer_event).unwrap();
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

#[test]
fn after_destroy_semantic_can_refuse_the_imports_calls() {
    let mut m = start("event_after_exporter_destroy=InvalidHandle");
    let s = share(m.as_mut());
    m.driver(0).event_destroy(s.event).unwrap();
    assert_eq!(
        err(m.driver(1).event_query(s.peer_event)),
        ErrorKind::InvalidHandle
    );
    m.driver(1).event_destroy(s.peer_event).unwrap();
}

#[rstest]
#[case::runtime_by_default(ipc_harness::Dialect::Runtime, "", Some(ErrorKind::MapFailed))]
#[case::driver_by_default(ipc_harness::Dialect::Driver, "", None)]
#[case::opens(ipc_harness::Dialect::Runtime, "event_exporter_exit=opens", None)]
#[case::dead_handle_error(
    ipc_harness::Dialect::Driver,
    "event_dead_handle=InvalidValue",
    Some(ErrorKind::InvalidValue)
)]
fn a_handle_opened_after_the_exporter_exited(
    #[case] dialect: ipc_harness::Dialect,
    #[case] settings: &str,
    #[case] want: Option<ErrorKind>,
) {
    let config = ipc_mock_driver::SimConfig {
        semantics: semantics(settings),
        ..ipc_mock_driver::SimConfig::default()
    };
    let mut m = start_cfg(config, &spec(procs(2), 1, dialect));
    let e = m.driver(0).event_create(IPC).unwrap();
    let h = m.driver(0).ipc_get_event_handle(e, OutArg::Valid).unwrap();
    m.exit(0).unwrap();
    let r = m.driver(1).ipc_open_event_handle(h, OutArg::Valid);
    // A refused open never reached the destroyed event: no hazard then.
    let refused_before_the_event = want == Some(ErrorKind::MapFailed);
    match want {
        None => assert!(r.is_ok(), "{r:?}"),
        Some(k) => assert_eq!(err(r), k),
    }
    assert_eq!(
        hazard_kinds(m.as_ref()).contains(&HazardKind::EventAfterExporterDestroy),
        !refused_before_the_event
    );
}

#[test]
fn a_destroyed_context_takes_its_events_with_it() {
    let mut m = start("");
    let ctx = m.driver(0).create_context(0).unwrap();
    let e = m.driver(0).event_create(DEFAULT).unwrap();
    m.driver(0).destroy_context(ctx).unwrap();
    let primary = m.driver(0).primary_context(0).unwrap();
    m.driver(0).set_current_context(primary).unwrap();
    assert_eq!(err(m.driver(0).event_query(e)), ErrorKind::InvalidHandle);
}

#[test]
fn a_fill_into_memory_freed_before_it_lands_is_dropped() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    m.driver(0).slow_fill(a, 7, 16, LONG_US).unwrap();
    // cudaFree waits for the stream, so the fill lands first; nothing panics.
    m.driver(0).free(ipc_harness::FreeKind::Device, a).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    m.driver(0).synchronize().unwrap();
    assert_eq!(m.driver(0).read(b, 1).unwrap().len(), 1);
}

#[test]
fn opening_an_event_handle_into_a_null_out_pointer_is_invalid_value_and_opens_nothing() {
    // event.open.null-out: the out pointer is checked before the handle.
    let mut m = start("");
    let e = m.driver(0).event_create(IPC).unwrap();
    let h = m.driver(0).ipc_get_event_handle(e, OutArg::Valid).unwrap();
    assert_eq!(
        err(m.driver(1).ipc_open_event_handle(h, OutArg::Null)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m
            .driver(1)
            .ipc_open_event_handle(IpcEventHandle::ZERO, OutArg::Null)),
        ErrorKind::InvalidValue
    );
    // Nothing was opened: the first real open is the event, and works.
    let opened = m.driver(1).ipc_open_event_handle(h, OutArg::Valid).unwrap();
    m.driver(1).event_query(opened).unwrap();
}

#[test]
fn the_null_event_is_an_invalid_handle_to_every_event_call() {
    // event.null.*: a NULL event names no event.
    let mut m = start("");
    let real = m.driver(0).event_create(IPC).unwrap();
    let d = m.driver(0);
    assert_eq!(err(d.event_record(EventId::NULL)), ErrorKind::InvalidHandle);
    assert_eq!(err(d.event_query(EventId::NULL)), ErrorKind::InvalidHandle);
    assert_eq!(
        err(d.event_synchronize(EventId::NULL)),
        ErrorKind::InvalidHandle
    );
    assert_eq!(
        err(d.stream_wait_event(EventId::NULL)),
        ErrorKind::InvalidHandle
    );
    assert_eq!(
        err(d.event_elapsed(EventId::NULL, real)),
        ErrorKind::InvalidHandle
    );
    assert_eq!(
        err(d.event_elapsed(real, EventId::NULL)),
        ErrorKind::InvalidHandle
    );
    assert_eq!(
        err(d.ipc_get_event_handle(EventId::NULL, OutArg::Valid)),
        ErrorKind::InvalidHandle
    );
    assert_eq!(
        err(d.event_destroy(EventId::NULL)),
        ErrorKind::InvalidHandle
    );
    // The real event is untouched.
    d.event_record(real).unwrap();
    d.event_synchronize(real).unwrap();
}
