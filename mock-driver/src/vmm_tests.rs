//! Whole-machine tests of the VMM rules (`vmm.rs`): reference counting of
//! physical allocations across processes. They live above the backend that
//! builds the machine, so that `vmm.rs` imports nothing that imports it.

use crate::backend::SimBackend;
use crate::machine::SimMachine;
use crate::vmm::VMM_GRANULARITY;
use ipc_harness::{
    Dialect, HandleTypes, Machine, MachineSpec, ProcessSpec, ShareableHandleType, VmmAccess,
};
use std::time::Duration;

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
        dialect: Dialect::Driver,
        seed: 3,
        step_timeout: Duration::from_secs(1),
        topology: None,
        semantics: Vec::new(),
    };
    SimMachine::new(SimBackend::default().world(&spec).expect("valid spec"))
}

/// Every reference kind keeps the memory, and the last one frees it
/// (with its device memory) whichever process drops it.
#[test]
fn the_last_reference_frees_the_physical_allocation() {
    let mut m = machine();
    let size = VMM_GRANULARITY;
    let h = m
        .driver(0)
        .vmm_create(0, size, HandleTypes::POSIX_FD)
        .unwrap();
    let fd = m
        .driver(0)
        .vmm_export(h, ShareableHandleType::PosixFd)
        .unwrap();
    let pfd = m.transfer_fd(0, fd, 1).unwrap();
    let ph = m.driver(1).vmm_import(pfd).unwrap();
    let va = m.driver(1).vmm_reserve(size).unwrap();
    m.driver(1).vmm_map(va, size, 0, ph).unwrap();
    m.driver(1)
        .vmm_set_access(va, size, 0, VmmAccess::ReadWrite)
        .unwrap();
    m.driver(0).vmm_release(h).unwrap();
    m.driver(0).fd_close(fd).unwrap();
    m.driver(1).fd_close(pfd).unwrap();
    m.driver(1).vmm_release(ph).unwrap();
    assert_eq!(m.world().vmm_live_allocations(), 1);
    assert_eq!(m.world().device_used[0], size);
    m.driver(1).vmm_unmap(va, size).unwrap();
    assert_eq!(m.world().vmm_live_allocations(), 0);
    assert_eq!(m.world().device_used[0], 0);
    assert!(m.world().blocks.is_empty());
}

#[test]
fn exit_drops_every_reference_the_process_held() {
    let mut m = machine();
    let size = VMM_GRANULARITY;
    let h = m
        .driver(0)
        .vmm_create(0, size, HandleTypes::POSIX_FD)
        .unwrap();
    let fd = m
        .driver(0)
        .vmm_export(h, ShareableHandleType::PosixFd)
        .unwrap();
    m.driver(0).vmm_import(fd).unwrap();
    let va = m.driver(0).vmm_reserve(size).unwrap();
    m.driver(0).vmm_map(va, size, 0, h).unwrap();
    m.exit(0).unwrap();
    assert_eq!(m.world().vmm_live_allocations(), 0);
    assert_eq!(m.world().device_used[0], 0);
}

/// A large malloc's claim on a freed export's VA ends with its free
/// (mem.lifetime.large-malloc-claim-ends-with-it) also while the exporter
/// holds a VMM reservation, whose own claim the malloc's new block makes
/// too (mem.lifetime.stale-handle-at-vmm-mapping-claimed-by-new-block).
#[test]
fn a_large_malloc_claim_ends_with_it_beside_a_reservation() {
    use ipc_harness::{ErrorKind, FreeKind, MemKind, OutArg, IPC_MEM_LAZY_ENABLE_PEER_ACCESS};
    let mut m = machine();
    let lazy = IPC_MEM_LAZY_ENABLE_PEER_ACCESS;
    m.driver(0).vmm_reserve(VMM_GRANULARITY).unwrap();
    let a = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    m.driver(0).free(FreeKind::Device, a).unwrap();
    let big = m.driver(0).alloc(MemKind::Device, 3 << 20).unwrap();
    let claimed = m.driver(1).ipc_open_mem_handle(h, lazy, OutArg::Valid);
    let kind = |r: ipc_harness::DriverResult<ipc_harness::DevicePtr>| match r {
        Err(ipc_harness::DriverError::Api(a)) => a.kind(),
        _ => None,
    };
    assert_eq!(kind(claimed), Some(ErrorKind::NotPermitted));
    m.driver(0).free(FreeKind::Device, big).unwrap();
    let freed = m.driver(1).ipc_open_mem_handle(h, lazy, OutArg::Valid);
    assert_eq!(kind(freed), Some(ErrorKind::InvalidValue));
}
