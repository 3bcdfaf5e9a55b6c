//! The memory-pool model: pools and their handle types, pool descriptors,
//! pointer export and import, and the documented free order.

mod common;

use common::*;
use ipc_harness::{
    DevicePtr, ErrorKind, FreeKind, HandleTypes, HazardKind, Machine, MemKind, PoolId,
    PoolPtrExport,
};

const SIZE: u64 = 2 * MIB;

/// `owner` (0) makes an exportable pool, sends its descriptor to `peer`
/// (1), which imports it. Returns (owner pool, peer pool).
fn share_pool(m: &mut dyn Machine) -> (PoolId, PoolId) {
    let pool = m.driver(0).pool_create(0, HandleTypes::POSIX_FD).unwrap();
    let fd = m.driver(0).pool_export(pool).unwrap();
    let peer_fd = m.transfer_fd(0, fd, 1).unwrap();
    let imported = m.driver(1).pool_import(peer_fd).unwrap();
    (pool, imported)
}

/// `owner` allocates from `pool`, fills it with `byte` and exports the pointer.
fn exported_allocation(m: &mut dyn Machine, pool: PoolId, byte: u8) -> (DevicePtr, PoolPtrExport) {
    let a = m.driver(0).pool_alloc(pool, SIZE).unwrap();
    m.driver(0).memset(a, byte, SIZE).unwrap();
    m.driver(0).synchronize().unwrap();
    let x = m.driver(0).pool_export_ptr(a).unwrap();
    (a, x)
}

#[test]
fn an_imported_pointer_shares_the_exporters_bytes_both_ways() {
    let mut m = start_n(2, "");
    let (pool, imported) = share_pool(m.as_mut());
    let (a, x) = exported_allocation(m.as_mut(), pool, 0xa5);
    let q = m.driver(1).pool_import_ptr(imported, x).unwrap();
    assert_eq!(m.driver(1).read(q, 4).unwrap(), vec![0xa5; 4]);
    m.driver(1).write(q, &[1, 2, 3]).unwrap();
    m.driver(1).synchronize().unwrap();
    assert_eq!(m.driver(0).read(a, 3).unwrap(), vec![1, 2, 3]);
    m.driver(1).pool_free(q).unwrap();
    m.driver(0).pool_free(a).unwrap();
    m.driver(0).pool_destroy(pool).unwrap();
    assert!(hazard_kinds(m.as_ref()).is_empty(), "{:?}", m.hazards());
}

#[test]
fn the_importers_free_unmaps_only() {
    let mut m = start_n(2, "");
    let (pool, imported) = share_pool(m.as_mut());
    let (a, x) = exported_allocation(m.as_mut(), pool, 0x11);
    let q = m.driver(1).pool_import_ptr(imported, x).unwrap();
    m.driver(1).pool_free(q).unwrap();
    // The exporter's allocation lives on, and the importer's pointer is gone.
    assert_eq!(m.driver(0).read(a, 2).unwrap(), vec![0x11; 2]);
    assert!(m.driver(1).read(q, 1).is_err());
    m.driver(0).pool_free(a).unwrap();
    // Only the importer's stale read is undefined; the frees are in order.
    assert_eq!(
        hazard_kinds(m.as_ref()),
        vec![HazardKind::AccessAfterClose],
        "{:?}",
        m.hazards()
    );
}

#[test]
fn the_exporter_freeing_first_is_free_while_mapped() {
    let mut m = start_n(2, "");
    let (pool, imported) = share_pool(m.as_mut());
    let (a, x) = exported_allocation(m.as_mut(), pool, 0x22);
    let q = m.driver(1).pool_import_ptr(imported, x).unwrap();
    m.driver(0).pool_free(a).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::FreeWhileMapped), 1);
    m.driver(1).pool_free(q).unwrap();
}

#[test]
fn importing_a_freed_allocation_is_a_hazard_and_maps_what_the_pool_kept() {
    // pool.lifetime.import-after-exporter-free: the GPU maps it, with the
    // exporter's bytes (pool_import_freed=maps).
    let mut m = start_n(2, "");
    let (pool, imported) = share_pool(m.as_mut());
    let (a, x) = exported_allocation(m.as_mut(), pool, 0x33);
    m.driver(0).pool_free(a).unwrap();
    let q = m.driver(1).pool_import_ptr(imported, x).unwrap();
    assert_eq!(m.driver(1).read(q, 4).unwrap(), vec![0x33; 4]);
    m.driver(1).pool_free(q).unwrap();
    // The pool's destruction gives the kept memory back.
    m.driver(0).pool_destroy(pool).unwrap();
    let kinds = hazard_kinds(m.as_ref());
    assert_eq!(kinds[0], HazardKind::PoolImportOfFreed, "{kinds:?}");

    let mut m = start_n(2, "pool_import_freed=refused");
    let (pool, imported) = share_pool(m.as_mut());
    let (a, x) = exported_allocation(m.as_mut(), pool, 0x33);
    m.driver(0).pool_free(a).unwrap();
    assert_eq!(
        err(m.driver(1).pool_import_ptr(imported, x)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        hazard_kinds(m.as_ref()),
        vec![HazardKind::PoolImportOfFreed]
    );
}

#[test]
fn pools_without_a_posix_handle_type_do_not_export() {
    let mut m = start_n(2, "");
    let plain = m.driver(0).pool_create(0, HandleTypes::NONE).unwrap();
    assert_eq!(err(m.driver(0).pool_export(plain)), ErrorKind::InvalidValue);
    let a = m.driver(0).pool_alloc(plain, SIZE).unwrap();
    assert_eq!(err(m.driver(0).pool_export_ptr(a)), ErrorKind::InvalidValue);
    let default = m.driver(0).pool_default(0).unwrap();
    assert_eq!(m.driver(0).pool_default(0).unwrap(), default);
    assert_eq!(
        err(m.driver(0).pool_export(default)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m.driver(0).pool_destroy(default)),
        ErrorKind::InvalidValue
    );
    // A plain allocation is no pool allocation.
    let b = m.driver(0).alloc(MemKind::Device, SIZE).unwrap();
    assert_eq!(err(m.driver(0).pool_export_ptr(b)), ErrorKind::InvalidValue);
    m.driver(0).free(FreeKind::Device, b).unwrap();
    assert_eq!(
        err(m.driver(0).pool_create(0, HandleTypes(0x40))),
        ErrorKind::InvalidValue
    );
}

#[test]
fn imported_pools_do_not_allocate_export_or_serve_another_pools_pointer() {
    let mut m = start_n(2, "");
    let (pool, imported) = share_pool(m.as_mut());
    // pool.import.no-allocation: InvalidValue, as measured.
    assert_eq!(
        err(m.driver(1).pool_alloc(imported, SIZE)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m.driver(1).pool_export(imported)),
        ErrorKind::InvalidValue
    );
    // The exporter's own pool handle does not import its pointer.
    let (a, x) = exported_allocation(m.as_mut(), pool, 0x44);
    assert_eq!(
        err(m.driver(0).pool_import_ptr(pool, x)),
        ErrorKind::InvalidValue
    );
    // Nor does the importer's handle of another pool.
    let other = m.driver(0).pool_create(0, HandleTypes::POSIX_FD).unwrap();
    let fd = m.driver(0).pool_export(other).unwrap();
    let peer_fd = m.transfer_fd(0, fd, 1).unwrap();
    let other_imported = m.driver(1).pool_import(peer_fd).unwrap();
    assert_eq!(
        err(m.driver(1).pool_import_ptr(other_imported, x)),
        ErrorKind::InvalidValue
    );
    // Damaged export data is refused.
    let mut bad = x;
    bad.0[0] ^= 0xff;
    assert_eq!(
        err(m.driver(1).pool_import_ptr(imported, bad)),
        ErrorKind::InvalidValue
    );
    m.driver(0).pool_free(a).unwrap();
}

#[test]
fn only_a_pool_descriptor_imports_a_pool() {
    // pool.import.bad-descriptors: the codes measured on the GPU.
    let mut m = start_n(2, "");
    let null = m.driver(1).fd_open_null_device().unwrap();
    assert_eq!(err(m.driver(1).pool_import(null)), ErrorKind::Unknown);
    let pool = m.driver(0).pool_create(0, HandleTypes::POSIX_FD).unwrap();
    let fd = m.driver(0).pool_export(pool).unwrap();
    m.driver(0).fd_close(fd).unwrap();
    assert_eq!(err(m.driver(0).pool_import(fd)), ErrorKind::Unknown);
    // A destroyed pool's handle is refused; its allocations stay valid.
    let a = m.driver(0).pool_alloc(pool, SIZE).unwrap();
    m.driver(0).pool_destroy(pool).unwrap();
    assert_eq!(err(m.driver(0).pool_destroy(pool)), ErrorKind::InvalidValue);
    m.driver(0).write(a, &[9]).unwrap();
    m.driver(0).pool_free(a).unwrap();
}

#[test]
fn a_pointer_exports_only_from_a_pool_already_exported() {
    // pool.import.same-process-own-pool: refused before the pool's export,
    // accepted after it (pool.share.round-trip).
    let mut m = start_n(2, "");
    let pool = m.driver(0).pool_create(0, HandleTypes::POSIX_FD).unwrap();
    let a = m.driver(0).pool_alloc(pool, SIZE).unwrap();
    assert_eq!(err(m.driver(0).pool_export_ptr(a)), ErrorKind::InvalidValue);
    m.driver(0).pool_export(pool).unwrap();
    assert!(m.driver(0).pool_export_ptr(a).is_ok());
    m.driver(0).pool_free(a).unwrap();
}

#[test]
fn a_posix_exportable_pool_holds_a_descriptor_until_destroyed() {
    // The real driver's descriptor for the pool shifts later numbers
    // (explore findings, H100 / 580.159.04).
    let mut m = start_n(1, "");
    let pool = m.driver(0).pool_create(0, HandleTypes::POSIX_FD).unwrap();
    let while_pool_lives = m.driver(0).fd_open_null_device().unwrap();
    m.driver(0).pool_destroy(pool).unwrap();
    let after_destroy = m.driver(0).fd_open_null_device().unwrap();
    assert!(
        after_destroy.0 < while_pool_lives.0,
        "{after_destroy:?} reuses the pool's descriptor, below {while_pool_lives:?}"
    );
}
