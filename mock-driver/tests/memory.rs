//! Allocations, data movement and pointer queries: what a scenario cannot
//! write. The rest is scenario files under `tests/scenarios/memory/`. These
//! stay Rust because they assert hazard counts and the step and process a
//! hazard names (`expect hazard` says only "at least one"), a harness
//! error rather than a driver's, handle bytes by position, a pointer's
//! missing device, or the numeric codes and names of each dialect.

mod common;

use common::*;
use ipc_harness::{
    DevicePtr, Dialect, ErrorKind, FreeKind, HazardKind, MemKind, MemoryType, OutArg,
};
use ipc_mock_driver::SimConfig;

/// A read in another process of bytes the writer has not synchronised since
/// is logged; the writer's own read, or a wait, orders it.
#[test]
fn a_read_racing_another_process_s_copy_is_logged_until_the_writer_synchronises() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    m.begin_step(1);
    m.driver(0).memset(a, 0x22, 64).unwrap();
    m.driver(1).read(p.offset(64), 8).unwrap(); // other bytes: no race
    assert!(hazard_kinds(m.as_ref()).is_empty());
    m.begin_step(2);
    assert_eq!(m.driver(1).read(p, 8).unwrap(), vec![0x22; 8]);
    let hz = m.hazards().unwrap();
    assert_eq!(hz.len(), 1);
    assert_eq!(
        (hz[0].kind, hz[0].process, hz[0].step),
        (HazardKind::UnsynchronizedRead, 1, Some(2))
    );
    // The writer's own blocking read waits for its stream.
    m.driver(0).read(a, 1).unwrap();
    m.begin_step(3);
    m.driver(1).read(p, 8).unwrap();
    assert_eq!(m.hazards().unwrap().len(), 1);
    // A pageable write waits for earlier work, then races itself.
    m.driver(0).memset(a, 0x33, 8).unwrap();
    m.driver(0).write(a.offset(32), b"x").unwrap();
    m.begin_step(4);
    m.driver(1).read(p, 8).unwrap();
    assert_eq!(m.hazards().unwrap().len(), 1, "the memset is done");
    m.driver(1).read(p.offset(32), 1).unwrap();
    assert_eq!(m.hazards().unwrap().len(), 2, "the write is not");
}

#[test]
fn huge_reads_are_refused_by_the_harness_not_by_a_crash() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 4 * GIB).unwrap();
    assert!(matches!(
        m.driver(0).read(a, 4 * GIB),
        Err(ipc_harness::DriverError::Harness(_))
    ));
}

#[test]
fn handle_bytes_are_stable_per_pointer() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    let h1 = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let h2 = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    assert_eq!(h1, h2);

    let mut m = start("handle_stable=per-call");
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    let h1 = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let h2 = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    assert_ne!(h1, h2);
    // Both name the same memory: the second open is a re-open.
    let p1 = open(m.as_mut(), 1, h1).unwrap();
    let p2 = open(m.as_mut(), 1, h2).unwrap();
    assert_eq!(p1, p2);
    m.driver(1).ipc_close_mem_handle(p1).unwrap();
    m.driver(1).ipc_close_mem_handle(p2).unwrap();
    // The serial sits in bytes 40..48, which the driver ignores.
    let differ: Vec<usize> = (0..64).filter(|&i| h1.0[i] != h2.0[i]).collect();
    assert!(differ.iter().all(|i| (40..48).contains(i)), "{differ:?}");
}

#[test]
fn pointer_info_by_kind() {
    let mut m = start("");
    let kinds = [
        (MemKind::Device, MemoryType::Device),
        (MemKind::StreamOrdered, MemoryType::Device),
        (MemKind::Managed, MemoryType::Managed),
        (MemKind::PinnedHost, MemoryType::Host),
    ];
    m.driver(0).set_device(1).unwrap();
    for (kind, want) in kinds {
        let a = m.driver(0).alloc(kind, 4096).unwrap();
        let info = m.driver(0).pointer_info(a.offset(10)).unwrap();
        // Host memory reports no device (2 x H200 explore case 1).
        let device = (kind != MemKind::PinnedHost).then_some(1);
        assert_eq!((info.memory_type, info.device), (want, device), "{kind:?}");
    }
    let info = m.driver(0).pointer_info(DevicePtr(0x42)).unwrap();
    assert_eq!(
        (info.memory_type, info.device),
        (MemoryType::Unregistered, None)
    );
    // An IPC pointer is device memory on the importer's device.
    m.driver(0).set_device(0).unwrap();
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    let info = m.driver(1).pointer_info(p).unwrap();
    assert_eq!(
        (info.memory_type, info.device),
        (MemoryType::Device, Some(0))
    );
}

#[test]
fn errors_carry_the_dialects_codes() {
    for (dialect, code, name) in [
        (Dialect::Runtime, 201, "cudaErrorDeviceUninitialized"),
        (Dialect::Driver, 201, "CUDA_ERROR_INVALID_CONTEXT"),
    ] {
        let mut m = start_cfg(SimConfig::default(), &spec(procs(2), 1, dialect));
        let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
        match open(m.as_mut(), 0, h) {
            Err(ipc_harness::DriverError::Api(e)) => {
                assert_eq!(
                    (e.dialect, e.code, e.name().as_ref()),
                    (dialect, code, name)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(m.driver(1).dialect(), dialect);
    }
}

#[test]
fn exporter_access_after_free() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    m.driver(0).free(FreeKind::Device, a).unwrap();
    assert_eq!(err(m.driver(0).read(a, 1)), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 1);
    // Measured (mem.lifetime.kernel-read-after-free): a kernel reads zeros.
    assert_eq!(m.driver(0).device_read(a, 1).unwrap(), vec![0]);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 2);
}
