//! Whole-machine tests of the stream and copy rules (`streams.rs`): the
//! implicit order of the legacy stream, a stream's own order, copies
//! through IPC mappings and what the hazard log makes of them.

use crate::backend::SimBackend;
use crate::machine::SimMachine;
use ipc_harness::event_flags::{DISABLE_TIMING, INTERPROCESS};
use ipc_harness::stream_flags::{DEFAULT, NON_BLOCKING};
use ipc_harness::{
    Dialect, ErrorKind, HazardKind, Machine, MachineSpec, MemKind, OutArg, ProcessSpec, StreamId,
};
use std::time::Duration;

const OWNER: usize = 0;
const PEER: usize = 1;
const MIB2: u64 = 2 << 20;
/// A kernel still running after many calls (each advances the clock 50 us).
const LONG_US: u64 = 300_000;

fn machine() -> SimMachine {
    let spec = MachineSpec {
        devices: 1,
        processes: ["owner", "peer"]
            .map(|n| ProcessSpec {
                name: n.into(),
                device: 0,
                visible_devices: None,
                pid_namespace: Default::default(),
            })
            .to_vec(),
        dialect: Dialect::Runtime,
        seed: 5,
        step_timeout: Duration::from_secs(1),
        topology: None,
        semantics: Vec::new(),
    };
    SimMachine::new(SimBackend::default().world(&spec).expect("valid spec"))
}

fn kind(e: ipc_harness::DriverError) -> Option<ErrorKind> {
    match e {
        ipc_harness::DriverError::Api(a) => a.kind(),
        _ => None,
    }
}

/// Two zeroed allocations of `p`, the host synchronized.
fn two_buffers(m: &mut SimMachine, p: usize) -> (ipc_harness::DevicePtr, ipc_harness::DevicePtr) {
    let d = m.driver(p);
    let a = d.alloc(MemKind::Device, MIB2).unwrap();
    let b = d.alloc(MemKind::Device, MIB2).unwrap();
    d.memset(a, 0, MIB2).unwrap();
    d.memset(b, 0, MIB2).unwrap();
    d.synchronize().unwrap();
    (a, b)
}

/// What the owner shares with the peer: its zeroed buffer `a` and
/// interprocess event `e`, which the peer opened as `p` and `x`.
struct Shared {
    a: ipc_harness::DevicePtr,
    e: ipc_harness::EventId,
    p: ipc_harness::DevicePtr,
    x: ipc_harness::EventId,
}

fn share(m: &mut SimMachine) -> Shared {
    let (a, _) = two_buffers(m, OWNER);
    let owner = m.driver(OWNER);
    let h = owner.ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let e = owner.event_create(INTERPROCESS | DISABLE_TIMING).unwrap();
    let eh = owner.ipc_get_event_handle(e, OutArg::Valid).unwrap();
    let peer = m.driver(PEER);
    let p = peer.ipc_open_mem_handle(h, 1, OutArg::Valid).unwrap();
    let x = peer.ipc_open_event_handle(eh, OutArg::Valid).unwrap();
    Shared { a, e, p, x }
}

/// stream.blocking-waits-for-legacy, stream.nonblocking-not-ordered-after-default.
#[test]
fn only_blocking_streams_wait_for_the_legacy_stream() {
    for (flags, expected) in [(DEFAULT, 0x6a), (NON_BLOCKING, 0x00)] {
        let mut m = machine();
        let (a, b) = two_buffers(&mut m, OWNER);
        let d = m.driver(OWNER);
        let s = d.stream_create(flags).unwrap();
        d.slow_fill(a, 0x6a, MIB2, LONG_US).unwrap();
        d.copy_device(b, a, 16, s).unwrap();
        d.stream_synchronize(s).unwrap();
        assert_eq!(d.read(b, 16).unwrap(), vec![expected; 16], "flags {flags}");
    }
}

/// The legacy stream's later work waits for a blocking stream's kernel
/// (stream.legacy-waits-for-blocking), not for a non-blocking one's.
#[test]
fn the_legacy_stream_waits_for_blocking_streams_only() {
    for (flags, ready) in [(DEFAULT, false), (NON_BLOCKING, true)] {
        let mut m = machine();
        let (a, _) = two_buffers(&mut m, OWNER);
        let d = m.driver(OWNER);
        let s = d.stream_create(flags).unwrap();
        d.slow_fill_on(a, 0x01, MIB2, LONG_US, s).unwrap();
        let e = d.event_create(DISABLE_TIMING).unwrap();
        d.event_record(e).unwrap();
        assert_eq!(d.event_query(e).is_ok(), ready, "flags {flags}");
        // A device synchronization waits for every stream.
        d.synchronize().unwrap();
        assert_eq!(d.stream_query(s).map_err(kind), Ok(()));
    }
}

#[test]
fn a_stream_query_says_not_ready_until_its_work_is_done() {
    let mut m = machine();
    let (a, _) = two_buffers(&mut m, OWNER);
    let d = m.driver(OWNER);
    let s = d.stream_create(NON_BLOCKING).unwrap();
    assert_eq!(d.stream_query(s).map_err(kind), Ok(()));
    d.slow_fill_on(a, 0x02, MIB2, LONG_US, s).unwrap();
    assert_eq!(
        d.stream_query(s).map_err(kind),
        Err(Some(ErrorKind::NotReady))
    );
    d.stream_synchronize(s).unwrap();
    assert_eq!(d.stream_query(s).map_err(kind), Ok(()));
    assert_eq!(d.read(a, 4).unwrap(), vec![0x02; 4]);
}

/// stream.destroy-with-pending-work-completes.
#[test]
fn destroying_a_stream_lets_its_queued_work_land() {
    let mut m = machine();
    let (a, _) = two_buffers(&mut m, OWNER);
    let d = m.driver(OWNER);
    let s = d.stream_create(NON_BLOCKING).unwrap();
    d.slow_fill_on(a, 0x44, MIB2, LONG_US, s).unwrap();
    d.stream_destroy(s).unwrap();
    assert_eq!(
        d.stream_query(s).map_err(kind),
        Err(Some(ErrorKind::InvalidHandle))
    );
    d.synchronize().unwrap();
    assert_eq!(d.read(a, 4).unwrap(), vec![0x44; 4]);
}

#[test]
fn bad_streams_and_flags_are_refused() {
    let mut m = machine();
    let (a, b) = two_buffers(&mut m, OWNER);
    let d = m.driver(OWNER);
    assert_eq!(
        d.stream_create(0x8).map_err(kind),
        Err(Some(ErrorKind::InvalidValue))
    );
    let unknown = StreamId(0x1234);
    assert_eq!(
        d.copy_device(b, a, 16, unknown).map_err(kind),
        Err(Some(ErrorKind::InvalidHandle))
    );
    assert_eq!(
        d.stream_destroy(StreamId::LEGACY_DEFAULT).map_err(kind),
        Err(Some(ErrorKind::InvalidHandle))
    );
    // Another process's stream is not this one's.
    let s = d.stream_create(DEFAULT).unwrap();
    assert_eq!(
        m.driver(PEER).stream_synchronize(s).map_err(kind),
        Err(Some(ErrorKind::InvalidHandle))
    );
    assert_eq!(
        m.driver(OWNER).copy_peer(b, 64, a, 0, 16).map_err(kind),
        Err(Some(ErrorKind::InvalidDevice))
    );
}

/// The importer's copy from the mapping: ordered after the exporter's kernel
/// on the waiting stream (no hazard, the kernel's bytes); on another stream
/// not ordered (the old bytes, an unsynchronized read logged)
/// (event.stream.wait-orders-that-stream-only).
#[test]
fn a_stream_wait_orders_copies_on_that_stream_only() {
    for wait_on_copy_stream in [true, false] {
        let mut m = machine();
        let (a, _) = two_buffers(&mut m, OWNER);
        let owner = m.driver(OWNER);
        let h = owner.ipc_get_mem_handle(a, OutArg::Valid).unwrap();
        let e = owner.event_create(INTERPROCESS | DISABLE_TIMING).unwrap();
        let eh = owner.ipc_get_event_handle(e, OutArg::Valid).unwrap();
        let peer = m.driver(PEER);
        let p = peer.ipc_open_mem_handle(h, 1, OutArg::Valid).unwrap();
        let x = peer
            .ipc_open_event_handle(eh, ipc_harness::OutArg::Valid)
            .unwrap();
        let b = peer.alloc(MemKind::Device, MIB2).unwrap();
        let waiting = peer.stream_create(NON_BLOCKING).unwrap();
        let other = peer.stream_create(NON_BLOCKING).unwrap();
        let owner = m.driver(OWNER);
        owner.slow_fill(a, 0x7e, MIB2, LONG_US).unwrap();
        owner.event_record(e).unwrap();
        let peer = m.driver(PEER);
        peer.stream_wait_event_on(waiting, x).unwrap();
        let copy_on = if wait_on_copy_stream { waiting } else { other };
        peer.copy_device(b, p, 16, copy_on).unwrap();
        peer.synchronize().unwrap();
        let expected = if wait_on_copy_stream { 0x7e } else { 0x00 };
        assert_eq!(peer.read(b, 16).unwrap(), vec![expected; 16]);
        let unordered = m
            .hazards()
            .unwrap()
            .iter()
            .any(|h| h.kind == HazardKind::UnsynchronizedRead);
        assert_eq!(unordered, !wait_on_copy_stream);
    }
}

/// A copy reads its source when its stream reaches it: after a kernel
/// queued before it on the same stream.
#[test]
fn a_copy_reads_its_source_after_earlier_work_on_its_stream() {
    let mut m = machine();
    let (a, b) = two_buffers(&mut m, OWNER);
    let d = m.driver(OWNER);
    let s = d.stream_create(NON_BLOCKING).unwrap();
    d.slow_fill_on(a, 0x33, 16, LONG_US, s).unwrap();
    d.copy_device(b, a, 32, s).unwrap();
    d.stream_synchronize(s).unwrap();
    let mut expected = vec![0x33; 16];
    expected.extend([0; 16]);
    assert_eq!(d.read(b, 32).unwrap(), expected);
}

/// A stream of the owner for [`record_handoff`].
#[derive(Debug, Clone, Copy)]
enum Pick {
    Legacy,
    /// A new stream with these flags.
    New(u32),
    PerThread,
    /// The kernel's (for the record).
    Kernel,
}

/// The owner's kernel on `kernel_on`, its event recorded on `record_on`,
/// the peer's `event_sync` and read through its mapping: the bytes read
/// and the hazards logged.
fn record_handoff(kernel_on: Pick, record_on: Pick) -> (Vec<u8>, Vec<ipc_harness::Hazard>) {
    let mut m = machine();
    let Shared { a, e, p, x } = share(&mut m);
    let owner = m.driver(OWNER);
    let mut pick = |s: Pick| match s {
        Pick::Legacy | Pick::Kernel => StreamId::LEGACY_DEFAULT,
        Pick::New(flags) => owner.stream_create(flags).unwrap(),
        Pick::PerThread => StreamId::PER_THREAD,
    };
    let k = pick(kernel_on);
    let r = match record_on {
        Pick::Kernel => k,
        other => pick(other),
    };
    let owner = m.driver(OWNER);
    owner.slow_fill_on(a, 0x5d, MIB2, LONG_US, k).unwrap();
    owner.event_record_on(e, r).unwrap();
    let peer = m.driver(PEER);
    peer.event_synchronize(x).unwrap();
    let bytes = peer.read(p, 16).unwrap();
    (bytes, m.hazards().unwrap())
}

fn races(hazards: &[ipc_harness::Hazard]) -> Vec<&ipc_harness::Hazard> {
    hazards
        .iter()
        .filter(|h| h.kind == HazardKind::UnsynchronizedRead)
        .collect()
}

/// An event captures the work of the stream it is recorded on, nothing
/// else its process queued (event.stream.record-captures-its-stream-only):
/// recorded on another non-blocking stream it does not cover the kernel,
/// and the hazard names the kernel's stream and the process.
#[test]
fn a_record_captures_its_stream_only() {
    let (bytes, hazards) = record_handoff(Pick::New(NON_BLOCKING), Pick::Kernel);
    assert_eq!(bytes, vec![0x5d; 16]);
    assert!(races(&hazards).is_empty(), "{hazards:?}");

    let (bytes, hazards) = record_handoff(Pick::New(NON_BLOCKING), Pick::New(NON_BLOCKING));
    assert_eq!(bytes, vec![0; 16], "the event completed before the kernel");
    let race = races(&hazards);
    assert_eq!(race.len(), 1, "{hazards:?}");
    assert_eq!(race[0].process, PEER);
    assert_eq!(
        race[0].detail,
        "owner wrote these bytes on stream 0x57000010 (the 1st stream owner created, \
         non-blocking), and this read, on the legacy default stream, is not ordered after \
         that write (no wait on an event recorded on that stream after it, no \
         synchronization with it)"
    );
}

/// The legacy stream waits for the blocking streams and they for it, so a
/// record on either covers a kernel on the other
/// (event.stream.record-on-legacy-covers-blocking-streams,
/// event.stream.record-on-blocking-covers-legacy); a non-blocking stream
/// is ordered with neither (event.stream.record-on-nonblocking-misses-legacy).
#[test]
fn the_legacy_stream_orders_blocking_streams_only() {
    for (kernel_on, record_on, ordered) in [
        (Pick::New(DEFAULT), Pick::Legacy, true),
        (Pick::Legacy, Pick::New(DEFAULT), true),
        (Pick::New(NON_BLOCKING), Pick::Legacy, false),
        (Pick::Legacy, Pick::New(NON_BLOCKING), false),
        (Pick::New(DEFAULT), Pick::New(DEFAULT), false),
    ] {
        let (bytes, hazards) = record_handoff(kernel_on, record_on);
        let case = format!("kernel on {kernel_on:?}, record on {record_on:?}");
        assert_eq!(races(&hazards).is_empty(), ordered, "{case}: {hazards:?}");
        if ordered {
            assert_eq!(bytes, vec![0x5d; 16], "{case}");
        }
    }
}

/// A second record replaces what the first captured (cuEventRecord: "will
/// overwrite the previously captured state";
/// event.stream.rerecord-replaces-capture).
#[test]
fn a_second_record_replaces_what_the_first_captured() {
    let mut m = machine();
    let (a, _) = two_buffers(&mut m, OWNER);
    let d = m.driver(OWNER);
    let s = d.stream_create(NON_BLOCKING).unwrap();
    let t = d.stream_create(NON_BLOCKING).unwrap();
    let e = d.event_create(DISABLE_TIMING).unwrap();
    d.slow_fill_on(a, 0x21, MIB2, LONG_US, s).unwrap();
    d.event_record_on(e, s).unwrap();
    d.event_record_on(e, t).unwrap();
    d.event_synchronize(e).unwrap();
    assert_eq!(d.read(a, 4).unwrap(), vec![0; 4]);
    assert_eq!(races(&m.hazards().unwrap()).len(), 1);
}

/// A wait takes the event as it is at the call: made before the record, it
/// orders nothing (event.stream.wait-before-record).
#[test]
fn a_wait_made_before_the_record_orders_nothing() {
    for wait_first in [false, true] {
        let mut m = machine();
        let (a, b) = two_buffers(&mut m, OWNER);
        let d = m.driver(OWNER);
        let s = d.stream_create(NON_BLOCKING).unwrap();
        let t = d.stream_create(NON_BLOCKING).unwrap();
        let e = d.event_create(DISABLE_TIMING).unwrap();
        d.slow_fill_on(a, 0x31, MIB2, LONG_US, s).unwrap();
        if wait_first {
            d.stream_wait_event_on(t, e).unwrap();
            d.event_record_on(e, s).unwrap();
        } else {
            d.event_record_on(e, s).unwrap();
            d.stream_wait_event_on(t, e).unwrap();
        }
        d.copy_device(b, a, 16, t).unwrap();
        d.stream_synchronize(t).unwrap();
        let expected = if wait_first { 0x00 } else { 0x31 };
        assert_eq!(d.read(b, 16).unwrap(), vec![expected; 16]);
        let race = races(&m.hazards().unwrap()).len();
        assert_eq!(race, usize::from(wait_first), "wait first: {wait_first}");
    }
}

/// A wait on the legacy stream is an action on it: the blocking streams'
/// later work waits for it too (event.stream.wait-on-legacy-orders-blocking-streams),
/// a non-blocking stream's does not.
#[test]
fn a_wait_on_the_legacy_stream_orders_later_work_on_blocking_streams() {
    for (flags, ordered) in [(DEFAULT, true), (NON_BLOCKING, false)] {
        let mut m = machine();
        let Shared { a, e, p, x } = share(&mut m);
        let (b, _) = two_buffers(&mut m, PEER);
        let t = m.driver(PEER).stream_create(flags).unwrap();
        let owner = m.driver(OWNER);
        owner.slow_fill(a, 0x41, MIB2, LONG_US).unwrap();
        owner.event_record(e).unwrap();
        let peer = m.driver(PEER);
        peer.stream_wait_event(x).unwrap();
        peer.copy_device(b, p, 16, t).unwrap();
        peer.stream_synchronize(t).unwrap();
        assert_eq!(
            races(&m.hazards().unwrap()).is_empty(),
            ordered,
            "flags {flags}"
        );
        if ordered {
            assert_eq!(m.driver(PEER).read(b, 16).unwrap(), vec![0x41; 16]);
        }
    }
}

/// A process's own kernel on a non-blocking stream is not ordered before
/// its read on the legacy stream: a race until it synchronizes that stream
/// (event.stream.own-kernel-read-on-legacy); a stream synchronize orders
/// that stream only (event.stream.stream-sync-orders-that-stream-only).
#[test]
fn a_read_on_another_stream_of_the_writer_is_a_race_until_synchronized() {
    for sync in [None, Some(true), Some(false)] {
        let mut m = machine();
        let (a, _) = two_buffers(&mut m, OWNER);
        let d = m.driver(OWNER);
        let s = d.stream_create(NON_BLOCKING).unwrap();
        let other = d.stream_create(NON_BLOCKING).unwrap();
        d.slow_fill_on(a, 0x51, MIB2, LONG_US, s).unwrap();
        match sync {
            Some(true) => d.stream_synchronize(s).unwrap(),
            Some(false) => d.stream_synchronize(other).unwrap(),
            None => {}
        }
        d.read(a, 4).unwrap();
        let hazards = m.hazards().unwrap();
        let race = races(&hazards);
        assert_eq!(race.is_empty(), sync == Some(true), "{sync:?}: {hazards:?}");
        if let Some(h) = race.first() {
            assert_eq!(h.process, OWNER);
            assert!(h.detail.starts_with("owner wrote these bytes on stream 0x57000010 (the 1st stream owner created, non-blocking)"), "{}", h.detail);
        }
    }
}

/// A query that says the event is complete orders the host after what it
/// captured, as a synchronize does; one that says NotReady does not.
#[test]
fn a_query_that_says_complete_orders_the_host() {
    for micros in [100, LONG_US] {
        let mut m = machine();
        let Shared { a, e, p, x } = share(&mut m);
        let owner = m.driver(OWNER);
        owner.slow_fill(a, 0x61, MIB2, micros).unwrap();
        owner.event_record(e).unwrap();
        let peer = m.driver(PEER);
        let complete = peer.event_query(x).is_ok();
        assert_eq!(complete, micros == 100);
        let bytes = peer.read(p, 4).unwrap();
        assert_eq!(races(&m.hazards().unwrap()).is_empty(), complete);
        if complete {
            assert_eq!(bytes, vec![0x61; 4]);
        }
    }
}

/// With explicit host order (a judge of a real program's trace), a host's
/// synchronization orders only its own later calls and those of a process
/// it has an edge to; by default every later call is ordered after it.
#[test]
fn hosts_are_ordered_by_their_edges_when_asked() {
    for (explicit, edge, race) in [
        (false, false, false),
        (true, false, true),
        (true, true, false),
    ] {
        let m = machine();
        if explicit {
            m.set_host_order(crate::HostOrder::Explicit);
        }
        let mut m = m;
        let (a, _) = two_buffers(&mut m, OWNER);
        let owner = m.driver(OWNER);
        let h = owner.ipc_get_mem_handle(a, OutArg::Valid).unwrap();
        let p = m
            .driver(PEER)
            .ipc_open_mem_handle(h, 1, OutArg::Valid)
            .unwrap();
        m.driver(OWNER).slow_fill(a, 0x71, MIB2, 100).unwrap();
        m.driver(OWNER).synchronize().unwrap();
        if edge {
            m.host_edge(OWNER, PEER);
        }
        m.driver(PEER).read(p, 4).unwrap();
        let logged = !races(&m.hazards().unwrap()).is_empty();
        assert_eq!(logged, race, "explicit {explicit}, edge {edge}");
    }
}

/// The per-thread default stream is a blocking stream made on first use:
/// ordered with the legacy stream both ways, not with another blocking
/// stream (event.stream.per-thread-ordered-with-legacy,
/// event.stream.per-thread-not-ordered-with-blocking); it cannot be
/// destroyed, and a race on it names it.
#[test]
fn the_per_thread_stream_is_ordered_with_the_legacy_stream_only() {
    let per_thread = StreamId::PER_THREAD;
    for (kernel_on, record_on, ordered) in [
        (Pick::Legacy, Pick::PerThread, true),
        (Pick::PerThread, Pick::Legacy, true),
        (Pick::New(DEFAULT), Pick::PerThread, false),
        (Pick::PerThread, Pick::New(DEFAULT), false),
    ] {
        let (bytes, hazards) = record_handoff(kernel_on, record_on);
        let case = format!("kernel on {kernel_on:?}, record on {record_on:?}");
        let race = races(&hazards);
        assert_eq!(race.is_empty(), ordered, "{case}: {hazards:?}");
        if ordered {
            assert_eq!(bytes, vec![0x5d; 16], "{case}");
        } else if matches!(kernel_on, Pick::PerThread) {
            assert!(
                race[0]
                    .detail
                    .starts_with("owner wrote these bytes on its per-thread default stream"),
                "{}",
                race[0].detail
            );
        }
    }
    let mut m = machine();
    let (a, _) = two_buffers(&mut m, OWNER);
    let d = m.driver(OWNER);
    d.slow_fill_on(a, 0x82, MIB2, LONG_US, per_thread).unwrap();
    d.read(a, 4).unwrap();
    assert_eq!(
        d.stream_destroy(per_thread).map_err(kind),
        Err(Some(ErrorKind::InvalidHandle))
    );
    d.stream_synchronize(per_thread).unwrap();
    assert_eq!(d.read(a, 4).unwrap(), vec![0x82; 4]);
    assert!(
        races(&m.hazards().unwrap()).is_empty(),
        "the legacy read waits for it"
    );
}

/// A read the driver refuses for its pointer returns at once: it does not
/// wait for the legacy stream, so a record behind a running kernel that
/// the stream waits on is still pending after it (explore seed 3122026
/// case 2243, one H200). A read that passes its checks waits.
#[test]
fn a_refused_read_does_not_wait_for_its_stream() {
    let mut m = machine();
    let s = share(&mut m);
    let owner = m.driver(OWNER);
    owner
        .slow_fill_on(s.a, 0x5d, MIB2, LONG_US, StreamId::LEGACY_DEFAULT)
        .unwrap();
    owner.event_record(s.e).unwrap();
    let peer = m.driver(PEER);
    let b = peer.alloc(MemKind::Device, 4096).unwrap();
    peer.stream_wait_event(s.x).unwrap();
    peer.ipc_close_mem_handle(s.p).unwrap();
    assert_eq!(
        peer.read(s.p, 16).map_err(kind),
        Err(Some(ErrorKind::InvalidValue))
    );
    assert_eq!(
        peer.event_query(s.x).map_err(kind),
        Err(Some(ErrorKind::NotReady))
    );
    peer.read(b, 16).unwrap();
    assert_eq!(peer.event_query(s.x).map_err(kind), Ok(()));
}
