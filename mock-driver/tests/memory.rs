//! Allocations, data movement and pointer queries, including the inputs a
//! fuzzing scenario might throw at them.

mod common;

use common::*;
use ipc_harness::{
    DevicePtr, Dialect, ErrorKind, FreeKind, HazardKind, MemKind, MemoryType, OutArg,
};
use ipc_mock_driver::SimConfig;
use rstest::rstest;

#[test]
fn data_flows_both_directions() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    m.driver(0).write(a.offset(100), b"from owner").unwrap();
    // Each writer synchronises before the other side reads: without it the
    // read is timing (`unsynchronized-read`, tested below).
    m.driver(0).synchronize().unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(
        m.driver(1).read(p.offset(100), 10).unwrap(),
        b"from owner".to_vec()
    );
    m.driver(1).write(p.offset(200), b"from peer").unwrap();
    m.driver(1).memset(p.offset(300), 0xcd, 3).unwrap();
    m.driver(1).synchronize().unwrap();
    assert_eq!(
        m.driver(0).read(a.offset(200), 9).unwrap(),
        b"from peer".to_vec()
    );
    assert_eq!(
        m.driver(0).device_read(a.offset(300), 4).unwrap(),
        vec![0xcd, 0xcd, 0xcd, 0]
    );
    assert!(hazard_kinds(m.as_ref()).is_empty());
}

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
fn sparse_64_gib_allocation_written_at_its_last_byte() {
    let mut m = start("");
    let size = 64 * GIB;
    let a = m.driver(0).alloc(MemKind::Device, size).unwrap();
    m.driver(0).write(a.offset(size - 1), &[0x99]).unwrap();
    assert_eq!(
        m.driver(0).read(a.offset(size - 4), 4).unwrap(),
        vec![0, 0, 0, 0x99]
    );
    m.driver(0).memset(a, 0x11, size).unwrap();
    m.driver(0).synchronize().unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(
        m.driver(1).read(p.offset(size - 2), 2).unwrap(),
        vec![0x11, 0x11]
    );
    assert_eq!(m.driver(1).address_range(p).unwrap(), (p, size));
    // Past the end is unmapped (64 GiB is a whole number of blocks).
    assert_eq!(
        err(m.driver(1).read(p.offset(size), 1)),
        ErrorKind::InvalidValue
    );
    // A second one does not fit in an 80 GB device.
    assert_eq!(
        err(m.driver(0).alloc(MemKind::Device, size)),
        ErrorKind::OutOfMemory
    );
    assert!(hazard_kinds(m.as_ref()).is_empty());
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

#[rstest]
#[case::zero(0, ErrorKind::InvalidValue)]
#[case::more_than_the_device(81 * GIB, ErrorKind::OutOfMemory)]
#[case::max(u64::MAX, ErrorKind::OutOfMemory)]
#[case::max_minus_block(u64::MAX - 2 * MIB, ErrorKind::OutOfMemory)]
fn bad_sizes(
    #[case] size: u64,
    #[case] want: ErrorKind,
    #[values(
        MemKind::Device,
        MemKind::Managed,
        MemKind::PinnedHost,
        MemKind::StreamOrdered
    )]
    kind: MemKind,
) {
    let mut m = start("");
    let host_side = matches!(kind, MemKind::Managed | MemKind::PinnedHost);
    if host_side && size == 81 * GIB {
        // Host-side kinds are bounded by address space, not device memory.
        m.driver(0).alloc(kind, size).unwrap();
    } else {
        assert_eq!(err(m.driver(0).alloc(kind, size)), want);
    }
}

#[rstest]
#[case::managed(MemKind::Managed, "ipc_managed")]
#[case::pinned_host(MemKind::PinnedHost, "ipc_pinned_host")]
#[case::pool(MemKind::StreamOrdered, "ipc_pool")]
fn refused_memory_kinds(#[case] kind: MemKind, #[case] semantic: &str) {
    let mut m = start("");
    let a = m.driver(0).alloc(kind, 4096).unwrap();
    assert_eq!(
        err(m.driver(0).ipc_get_mem_handle(a, OutArg::Valid)),
        ErrorKind::InvalidValue
    );

    let mut m = start(&format!("{semantic}=NotSupported"));
    let a = m.driver(0).alloc(kind, 4096).unwrap();
    assert_eq!(
        err(m.driver(0).ipc_get_mem_handle(a, OutArg::Valid)),
        ErrorKind::NotSupported
    );

    let mut m = start(&format!("{semantic}=allow"));
    let a = m.driver(0).alloc(kind, 4096).unwrap();
    m.driver(0).memset(a, 0x3c, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(m.driver(1).read(p, 2).unwrap(), vec![0x3c; 2]);
}

#[test]
fn handles_of_unknown_null_and_ipc_pointers_are_refused() {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    // Measured: a freed allocation no longer exports.
    let freed = m.driver(1).alloc(MemKind::Device, 2 * MIB).unwrap();
    m.driver(1).free(FreeKind::Device, freed).unwrap();
    for ptr in [
        DevicePtr::NULL,
        DevicePtr(0xdead_beef),
        DevicePtr(u64::MAX),
        p,
        freed,
    ] {
        assert_eq!(
            err(m.driver(1).ipc_get_mem_handle(ptr, OutArg::Valid)),
            ErrorKind::InvalidValue,
            "{ptr}"
        );
    }
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
fn unmapped_and_overflowing_ranges() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    for ptr in [DevicePtr::NULL, DevicePtr(0x1000), DevicePtr(u64::MAX - 1)] {
        assert_eq!(err(m.driver(0).read(ptr, 4)), ErrorKind::InvalidValue);
        assert_eq!(
            err(m.driver(0).write(ptr, &[1, 2, 3, 4])),
            ErrorKind::InvalidValue
        );
        assert_eq!(err(m.driver(0).memset(ptr, 1, 4)), ErrorKind::InvalidValue);
    }
    assert_eq!(
        err(m.driver(0).memset(a, 1, u64::MAX)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m.driver(0).memset(a.offset(2 * MIB - 1), 1, 2)),
        ErrorKind::InvalidValue
    );
    // Zero-length copies succeed without touching anything.
    assert_eq!(
        m.driver(0).read(DevicePtr(0x1000), 0).unwrap(),
        Vec::<u8>::new()
    );
    m.driver(0).memset(DevicePtr::NULL, 1, 0).unwrap();
    assert!(hazard_kinds(m.as_ref()).is_empty());
}

#[test]
fn illegal_address_is_sticky_by_default() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 64).unwrap();
    assert_eq!(
        err(m.driver(0).device_read(DevicePtr(0x1000), 4)),
        ErrorKind::IllegalAddress
    );
    assert_eq!(err(m.driver(0).read(a, 4)), ErrorKind::IllegalAddress);
    assert_eq!(err(m.driver(0).device_count()), ErrorKind::IllegalAddress);
    assert_eq!(
        err(m.driver(0).free(FreeKind::Device, a)),
        ErrorKind::IllegalAddress
    );
    // Other processes are unaffected; exiting still works.
    assert_eq!(m.driver(1).device_count().unwrap(), 2);
    m.exit(0).unwrap();
}

#[test]
fn sticky_errors_off_fails_only_the_faulting_call() {
    let mut m = start("sticky_errors=off");
    let a = m.driver(0).alloc(MemKind::Device, 64).unwrap();
    assert_eq!(
        err(m.driver(0).device_read(a, 2 * MIB + 1)),
        ErrorKind::IllegalAddress
    );
    m.driver(0).read(a, 4).unwrap();
}

#[test]
fn address_range_of_own_allocations() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    assert_eq!(m.driver(0).address_range(a).unwrap(), (a, 1000));
    assert_eq!(m.driver(0).address_range(a.offset(999)).unwrap(), (a, 1000));
    // Slack after a packed allocation belongs to no allocation.
    assert_eq!(
        err(m.driver(0).address_range(a.offset(1000))),
        ErrorKind::NotFound
    );
    assert_eq!(
        err(m.driver(0).address_range(DevicePtr::NULL)),
        ErrorKind::NotFound
    );
    let mut m = start("");
    assert_eq!(
        err(m.driver(1).address_range(a)),
        ErrorKind::NotFound,
        "foreign pointer"
    );
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

#[rstest]
#[case::runtime(Dialect::Runtime, "", None)]
#[case::driver(Dialect::Driver, "", Some(ErrorKind::InvalidValue))]
#[case::runtime_error(Dialect::Runtime, "free_null=error", Some(ErrorKind::InvalidValue))]
#[case::driver_ok(Dialect::Driver, "free_null=ok", None)]
fn free_null(#[case] dialect: Dialect, #[case] settings: &str, #[case] want: Option<ErrorKind>) {
    let config = SimConfig {
        semantics: semantics(settings),
        ..SimConfig::default()
    };
    let mut m = start_cfg(config, &spec(procs(1), 1, dialect));
    let r = m.driver(0).free(FreeKind::Device, DevicePtr::NULL);
    match want {
        None => r.unwrap(),
        Some(k) => assert_eq!(err(r), k),
    }
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
