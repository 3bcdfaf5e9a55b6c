//! `cuPointerGetAttribute`: buffer ids, ranges and the legacy-IPC flag of
//! allocations, IPC mappings and VMM mappings.

mod common;

use common::*;
use ipc_harness::{
    DevicePtr, ErrorKind, HandleTypes, MemKind, OutArg, PointerAttribute as A, VmmAccess,
};

#[test]
fn an_allocation_at_a_freed_address_has_a_new_buffer_id() {
    let mut m = start_n(1, "");
    let d = m.driver(0);
    let a = d.alloc(MemKind::Device, 2 << 20).unwrap();
    let first = d.pointer_attribute(a, A::BufferId).unwrap();
    d.free(ipc_harness::FreeKind::Device, a).unwrap();
    let b = d.alloc(MemKind::Device, 2 << 20).unwrap();
    // The measured default hands the freed VA out again: that is the case
    // the id exists for (mem.pointer-attr.buffer-id-new-after-realloc).
    assert_eq!(b, a);
    let second = d.pointer_attribute(b, A::BufferId).unwrap();
    assert_ne!(first, second);
}

#[test]
fn an_interior_pointer_answers_for_its_allocation() {
    let mut m = start_n(1, "");
    let d = m.driver(0);
    let a = d.alloc(MemKind::Device, 1000).unwrap();
    let inner = a.offset(512);
    assert_eq!(
        d.pointer_attribute(inner, A::BufferId).unwrap(),
        d.pointer_attribute(a, A::BufferId).unwrap()
    );
    assert_eq!(d.pointer_attribute(inner, A::RangeStartAddr).unwrap(), a.0);
    // The requested size, as cuMemGetAddressRange says.
    assert_eq!(d.pointer_attribute(inner, A::RangeSize).unwrap(), 1000);
    assert_eq!(d.pointer_attribute(inner, A::MemoryType).unwrap(), 2);
    assert_eq!(d.pointer_attribute(inner, A::DeviceOrdinal).unwrap(), 0);
    assert_eq!(
        d.pointer_attribute(inner, A::IsLegacyCudaIpcCapable)
            .unwrap(),
        1
    );
    assert_eq!(
        d.pointer_attribute(inner, A::AllowedHandleTypes).unwrap(),
        0
    );
}

#[test]
fn two_live_allocations_have_different_buffer_ids() {
    let mut m = start_n(1, "");
    let d = m.driver(0);
    let a = d.alloc(MemKind::Device, 1000).unwrap();
    let b = d.alloc(MemKind::Device, 1000).unwrap();
    assert_ne!(
        d.pointer_attribute(a, A::BufferId).unwrap(),
        d.pointer_attribute(b, A::BufferId).unwrap()
    );
}

#[test]
fn pinned_host_memory_is_host_memory_and_not_legacy_ipc_capable() {
    let mut m = start_n(1, "");
    let d = m.driver(0);
    let h = d.alloc(MemKind::PinnedHost, 4096).unwrap();
    assert_eq!(d.pointer_attribute(h, A::MemoryType).unwrap(), 1);
    assert_eq!(
        d.pointer_attribute(h, A::IsLegacyCudaIpcCapable).unwrap(),
        0
    );
    // Exactly when ipc_get refuses it.
    assert!(d.ipc_get_mem_handle(h, OutArg::Valid).is_err());
}

#[test]
fn an_unknown_pointer_is_invalid_value() {
    let mut m = start_n(1, "");
    let d = m.driver(0);
    for attr in A::ALL {
        assert_eq!(
            err(d.pointer_attribute(DevicePtr::NULL, attr)),
            ErrorKind::InvalidValue
        );
    }
    let a = d.alloc(MemKind::Device, 2 << 20).unwrap();
    d.free(ipc_harness::FreeKind::Device, a).unwrap();
    assert_eq!(
        err(d.pointer_attribute(a, A::BufferId)),
        ErrorKind::InvalidValue
    );
}

#[test]
fn an_ipc_mapping_is_device_memory_with_its_own_id() {
    let mut m = start("");
    let (a, h) = export(&mut *m, 2 << 20, 0x11);
    let p = open(&mut *m, 1, h).unwrap();
    let d = m.driver(1);
    assert_eq!(d.pointer_attribute(p, A::MemoryType).unwrap(), 2);
    assert_eq!(
        d.pointer_attribute(p, A::IsLegacyCudaIpcCapable).unwrap(),
        0
    );
    assert_eq!(d.pointer_attribute(p, A::RangeStartAddr).unwrap(), p.0);
    assert_eq!(d.pointer_attribute(p, A::RangeSize).unwrap(), 2 << 20);
    let imported = d.pointer_attribute(p, A::BufferId).unwrap();
    let own = m.driver(0).pointer_attribute(a, A::BufferId).unwrap();
    assert_ne!(imported, own);
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    assert_eq!(
        err(m.driver(1).pointer_attribute(p, A::BufferId)),
        ErrorKind::InvalidValue
    );
}

#[test]
fn a_vmm_mapping_reports_its_mapping_and_requested_handle_types() {
    let mut m = start_n(1, "");
    let d = m.driver(0);
    let size = 2 << 20;
    let handle = d.vmm_create(0, size, HandleTypes::POSIX_FD).unwrap();
    let va = d.vmm_reserve(size).unwrap();
    d.vmm_map(va, size, 0, handle).unwrap();
    d.vmm_set_access(va, size, 0, VmmAccess::ReadWrite).unwrap();
    let inner = va.offset(64 << 10);
    assert_eq!(
        d.pointer_attribute(inner, A::MappingBaseAddr).unwrap(),
        va.0
    );
    assert_eq!(d.pointer_attribute(inner, A::MappingSize).unwrap(), size);
    assert_eq!(d.pointer_attribute(inner, A::RangeStartAddr).unwrap(), va.0);
    assert_eq!(
        d.pointer_attribute(inner, A::IsLegacyCudaIpcCapable)
            .unwrap(),
        0
    );
    assert_eq!(
        d.pointer_attribute(inner, A::AllowedHandleTypes).unwrap(),
        u64::from(HandleTypes::POSIX_FD.0)
    );
    let first = d.pointer_attribute(va, A::BufferId).unwrap();
    d.vmm_unmap(va, size).unwrap();
    assert_eq!(
        err(d.pointer_attribute(va, A::BufferId)),
        ErrorKind::InvalidValue
    );
    d.vmm_map(va, size, 0, handle).unwrap();
    assert_ne!(d.pointer_attribute(va, A::BufferId).unwrap(), first);
}
