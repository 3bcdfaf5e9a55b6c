//! The VMM model: physical allocations and their references, per-process
//! descriptor tables, descriptor passing, reservations, mappings and access.

mod common;

use common::*;
use ipc_harness::{
    DevicePtr, DriverError, ErrorKind, Fd, GranularityKind, HandleTypes, Machine, ProcessLoss,
    ShareableHandleType, VmmAccess, VmmHandle,
};

const SIZE: u64 = 2 * MIB;

/// Process `p` maps `h` at a fresh reservation with read-write access.
fn map_rw(m: &mut dyn Machine, p: usize, h: VmmHandle) -> DevicePtr {
    let d = m.driver(p);
    let va = d.vmm_reserve(SIZE).unwrap();
    d.vmm_map(va, SIZE, 0, h).unwrap();
    d.vmm_set_access(va, SIZE, 0, VmmAccess::ReadWrite).unwrap();
    va
}

/// `owner` (0) creates, fills with `byte` and exports; `peer` (1) imports
/// through a passed descriptor. Returns (owner handle, owner va, owner fd, peer handle).
fn share(m: &mut dyn Machine, byte: u8) -> (VmmHandle, DevicePtr, Fd, VmmHandle) {
    let h = m
        .driver(0)
        .vmm_create(0, SIZE, HandleTypes::POSIX_FD)
        .unwrap();
    let va = map_rw(m, 0, h);
    m.driver(0).memset(va, byte, SIZE).unwrap();
    let fd = m
        .driver(0)
        .vmm_export(h, ShareableHandleType::PosixFd)
        .unwrap();
    let pfd = m.transfer_fd(0, fd, 1).unwrap();
    let ph = m.driver(1).vmm_import(pfd).unwrap();
    (h, va, fd, ph)
}

#[test]
fn granularity_is_2_mib_for_every_kind_and_type() {
    let mut m = start("");
    for kind in [GranularityKind::Minimum, GranularityKind::Recommended] {
        for types in [
            HandleTypes::NONE,
            HandleTypes::POSIX_FD,
            HandleTypes::FABRIC,
        ] {
            assert_eq!(m.driver(0).vmm_granularity(0, types, kind).unwrap(), SIZE);
        }
    }
}

#[test]
fn sizes_off_the_granularity_are_refused() {
    let mut m = start("");
    let d = m.driver(0);
    for size in [0, MIB, SIZE + 1] {
        assert_eq!(
            err(d.vmm_create(0, size, HandleTypes::POSIX_FD)),
            ErrorKind::InvalidValue
        );
        assert_eq!(err(d.vmm_reserve(size)), ErrorKind::InvalidValue);
    }
    let h = d.vmm_create(0, 2 * SIZE, HandleTypes::POSIX_FD).unwrap();
    d.vmm_release(h).unwrap();
}

#[test]
fn descriptors_are_the_lowest_free_numbers_from_3() {
    let mut m = start("");
    let d = m.driver(0);
    let h = d.vmm_create(0, SIZE, HandleTypes::POSIX_FD).unwrap();
    let a = d.vmm_export(h, ShareableHandleType::PosixFd).unwrap();
    let b = d.vmm_export(h, ShareableHandleType::PosixFd).unwrap();
    let c = d.fd_open_null_device().unwrap();
    assert_eq!((a, b, c), (Fd(3), Fd(4), Fd(5)));
    d.fd_close(b).unwrap();
    assert_eq!(d.fd_open_null_device().unwrap(), Fd(4));
    assert_eq!(err(d.fd_close(Fd(99))), ErrorKind::InvalidValue);
}

#[test]
fn a_passed_descriptor_is_the_receivers_own_and_outlives_the_senders_close() {
    let mut m = start("");
    let h = m
        .driver(0)
        .vmm_create(0, SIZE, HandleTypes::POSIX_FD)
        .unwrap();
    let va = map_rw(m.as_mut(), 0, h);
    m.driver(0).memset(va, 0x5e, SIZE).unwrap();
    m.driver(1).fd_open_null_device().unwrap();
    let fd = m
        .driver(0)
        .vmm_export(h, ShareableHandleType::PosixFd)
        .unwrap();
    let pfd = m.transfer_fd(0, fd, 1).unwrap();
    // The peer's table already holds 3, so it gets 4.
    assert_eq!((fd, pfd), (Fd(3), Fd(4)));
    m.driver(0).fd_close(fd).unwrap();
    let ph = m.driver(1).vmm_import(pfd).unwrap();
    let pva = map_rw(m.as_mut(), 1, ph);
    assert_eq!(m.driver(1).read(pva, 4).unwrap(), vec![0x5e; 4]);
    // Writes are shared both ways.
    m.driver(1).write(pva.offset(8), b"vmm").unwrap();
    assert_eq!(m.driver(0).read(va.offset(8), 3).unwrap(), b"vmm".to_vec());
    // Passing a descriptor the sender does not hold is EBADF.
    assert_eq!(err(m.transfer_fd(0, fd, 1)), ErrorKind::InvalidValue);
}

#[test]
fn every_import_is_a_new_handle_that_cannot_be_exported() {
    let mut m = start("");
    let (h, _, fd, ph) = share(m.as_mut(), 1);
    let own = m.driver(0).vmm_import(fd).unwrap();
    assert_ne!(own, h);
    let pfd = m.transfer_fd(0, fd, 1).unwrap();
    let ph2 = m.driver(1).vmm_import(pfd).unwrap();
    assert_ne!(ph, ph2);
    assert_eq!(
        err(m.driver(1).vmm_export(ph, ShareableHandleType::PosixFd)),
        ErrorKind::InvalidValue
    );
}

#[test]
fn export_needs_the_requested_type_and_fabric_is_not_permitted() {
    let mut m = start("");
    let d = m.driver(0);
    let none = d.vmm_create(0, SIZE, HandleTypes::NONE).unwrap();
    assert_eq!(
        err(d.vmm_export(none, ShareableHandleType::PosixFd)),
        ErrorKind::InvalidValue
    );
    let posix = d.vmm_create(0, SIZE, HandleTypes::POSIX_FD).unwrap();
    assert_eq!(
        err(d.vmm_export(posix, ShareableHandleType::Fabric)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(d.vmm_create(0, SIZE, HandleTypes::FABRIC)),
        ErrorKind::NotPermitted
    );
    let mut allowed = start("vmm_fabric=allow");
    assert!(allowed
        .driver(0)
        .vmm_create(0, SIZE, HandleTypes::FABRIC)
        .is_ok());
}

#[test]
fn memory_lives_until_the_last_reference_in_any_process_goes() {
    let mut m = start("");
    let (h, va, fd, ph) = share(m.as_mut(), 0xa5);
    let pva = map_rw(m.as_mut(), 1, ph);
    m.driver(0).vmm_unmap(va, SIZE).unwrap();
    m.driver(0).vmm_release(h).unwrap();
    m.driver(0).fd_close(fd).unwrap();
    m.driver(1).vmm_release(ph).unwrap();
    // Only the peer's mapping holds it now.
    assert_eq!(m.driver(1).read(pva, 4).unwrap(), vec![0xa5; 4]);
    m.driver(0).fd_close(fd).unwrap_err();
    m.driver(1).vmm_unmap(pva, SIZE).unwrap();
    assert_eq!(err(m.driver(1).read(pva, 4)), ErrorKind::InvalidValue);
}

#[test]
fn the_exporter_exiting_leaves_the_importers_mapping() {
    let mut m = start("");
    let (_, _, _, ph) = share(m.as_mut(), 0x42);
    let pva = map_rw(m.as_mut(), 1, ph);
    m.exit(0).unwrap();
    assert_eq!(m.driver(1).read(pva, 2).unwrap(), vec![0x42; 2]);
}

#[test]
fn access_is_refused_until_set_and_a_kernel_faults() {
    let mut m = start("");
    let d = m.driver(0);
    let h = d.vmm_create(0, SIZE, HandleTypes::POSIX_FD).unwrap();
    let va = d.vmm_reserve(SIZE).unwrap();
    d.vmm_map(va, SIZE, 0, h).unwrap();
    assert_eq!(err(d.read(va, 4)), ErrorKind::InvalidValue);
    assert_eq!(err(d.memset(va, 1, 4)), ErrorKind::InvalidValue);
    // Copies are refused without poisoning the process.
    d.synchronize().unwrap();
    d.vmm_set_access(va, SIZE, 0, VmmAccess::ReadWrite).unwrap();
    d.memset(va, 7, 4).unwrap();
    assert_eq!(d.read(va, 4).unwrap(), vec![7; 4]);
    d.vmm_set_access(va, SIZE, 0, VmmAccess::None).unwrap();
    assert_eq!(err(d.device_read(va, 4)), ErrorKind::IllegalAddress);
    assert_eq!(err(d.synchronize()), ErrorKind::IllegalAddress);
}

#[test]
fn mapping_rules() {
    let mut m = start("");
    let d = m.driver(0);
    let h = d.vmm_create(0, SIZE, HandleTypes::POSIX_FD).unwrap();
    let va = d.vmm_reserve(2 * SIZE).unwrap();
    assert_eq!(err(d.vmm_map(va, 2 * SIZE, 0, h)), ErrorKind::NotSupported);
    assert_eq!(err(d.vmm_map(va, SIZE, SIZE, h)), ErrorKind::NotSupported);
    // Outside any reservation.
    assert_eq!(
        err(d.vmm_map(va.offset(64 * SIZE), SIZE, 0, h)),
        ErrorKind::InvalidValue
    );
    d.vmm_map(va, SIZE, 0, h).unwrap();
    assert_eq!(err(d.vmm_map(va, SIZE, 0, h)), ErrorKind::InvalidValue);
    assert_eq!(
        err(d.vmm_set_access(va, 2 * SIZE, 0, VmmAccess::ReadWrite)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(d.vmm_address_free(va, 2 * SIZE)),
        ErrorKind::InvalidValue
    );
    // vmm.map.address-range-before-set-access: not found until access is set.
    assert_eq!(err(d.address_range(va.offset(16))), ErrorKind::NotFound);
    d.vmm_set_access(va, SIZE, 0, VmmAccess::ReadWrite).unwrap();
    assert_eq!(d.address_range(va.offset(16)).unwrap(), (va, SIZE));
    d.vmm_unmap(va, SIZE).unwrap();
    // vmm.map.unmap-twice: nothing is mapped there any more; success.
    d.vmm_unmap(va, SIZE).unwrap();
    // Outside any reservation it is still refused.
    assert_eq!(
        err(d.vmm_unmap(va.offset(64 * SIZE), SIZE)),
        ErrorKind::InvalidValue
    );
    d.vmm_address_free(va, 2 * SIZE).unwrap();
    d.vmm_release(h).unwrap();
    assert_eq!(err(d.vmm_release(h)), ErrorKind::InvalidValue);
}

#[test]
fn a_released_handle_crashes_the_exporter_or_is_refused() {
    let mut m = start("");
    let h = m
        .driver(0)
        .vmm_create(0, SIZE, HandleTypes::POSIX_FD)
        .unwrap();
    m.driver(0).vmm_release(h).unwrap();
    match m.driver(0).vmm_export(h, ShareableHandleType::PosixFd) {
        Err(DriverError::Lost(ProcessLoss::Crashed { signal, .. })) => assert_eq!(signal, Some(11)),
        other => panic!("expected a crash, got {other:?}"),
    }
    let mut m = start("vmm_stale_handle=invalid-value");
    let h = m
        .driver(0)
        .vmm_create(0, SIZE, HandleTypes::POSIX_FD)
        .unwrap();
    m.driver(0).vmm_release(h).unwrap();
    assert_eq!(
        err(m.driver(0).vmm_export(h, ShareableHandleType::PosixFd)),
        ErrorKind::InvalidValue
    );
}

#[test]
fn bad_descriptors_do_not_import() {
    let mut m = start("");
    let d = m.driver(0);
    let null = d.fd_open_null_device().unwrap();
    for fd in [null, Fd(-1), Fd(999_999), Fd(3 + 1)] {
        assert_eq!(err(d.vmm_import(fd)), ErrorKind::Unknown);
    }
    let mut other = start("vmm_import_bad_fd=OperatingSystem");
    assert_eq!(
        err(other.driver(0).vmm_import(Fd(-1))),
        ErrorKind::OperatingSystem
    );
}

#[test]
fn device_memory_is_accounted_and_given_back() {
    let mut m = start("");
    let d = m.driver(0);
    // 40 GiB twice fits 80 GiB; a third does not until one is released.
    let a = d.vmm_create(0, 40 * GIB, HandleTypes::NONE).unwrap();
    let b = d.vmm_create(0, 40 * GIB, HandleTypes::NONE).unwrap();
    assert_eq!(
        err(d.vmm_create(0, SIZE, HandleTypes::NONE)),
        ErrorKind::OutOfMemory
    );
    d.vmm_release(a).unwrap();
    d.vmm_create(0, SIZE, HandleTypes::NONE).unwrap();
    d.vmm_release(b).unwrap();
}

#[test]
fn a_read_only_mapping_reads_and_refuses_writes() {
    let mut m = start("");
    let d = m.driver(0);
    let h = d.vmm_create(0, SIZE, HandleTypes::POSIX_FD).unwrap();
    let va = d.vmm_reserve(SIZE).unwrap();
    d.vmm_map(va, SIZE, 0, h).unwrap();
    d.vmm_set_access(va, SIZE, 0, VmmAccess::ReadWrite).unwrap();
    d.memset(va, 9, 4).unwrap();
    d.vmm_set_access(va, SIZE, 0, VmmAccess::Read).unwrap();
    assert_eq!(d.read(va, 4).unwrap(), vec![9; 4]);
    assert_eq!(err(d.write(va, &[1])), ErrorKind::InvalidValue);
    assert_eq!(err(d.memset(va, 1, 1)), ErrorKind::InvalidValue);
    assert_eq!(d.read(va, 1).unwrap(), vec![9]);
}
