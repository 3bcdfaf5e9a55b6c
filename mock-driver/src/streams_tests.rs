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
