//! Starting machines, devices as each process sees them, and contexts.

mod common;

use common::*;
use ipc_harness::{Backend, DeviceAttribute, Dialect, ErrorKind, MemKind, OutArg, StartError};
use ipc_mock_driver::{Semantics, SimBackend, SimConfig};
use rstest::rstest;

fn start_err(spec: &ipc_harness::MachineSpec) -> String {
    match SimBackend::default().start(spec) {
        Err(StartError::NotSupported(why)) => why,
        Err(e) => panic!("expected NotSupported, got {e:?}"),
        Ok(_) => panic!("expected NotSupported, got a machine"),
    }
}

#[test]
fn specs_the_simulator_cannot_run_are_not_supported() {
    let mut s = spec(procs(1), 1, Dialect::Runtime);
    s.devices = 3;
    assert!(start_err(&s).contains("3 device"));
    let s = spec(vec![proc_spec("a", 0, Some(vec![2]))], 1, Dialect::Runtime);
    assert!(start_err(&s).contains("device 2"));
    let s = spec(vec![proc_spec("a", 1, Some(vec![0]))], 1, Dialect::Runtime);
    assert!(start_err(&s).contains("starts on device 1"));
    let s = spec(vec![proc_spec("a", 2, None)], 1, Dialect::Runtime);
    start_err(&s);
    let s = spec(
        vec![proc_spec("a", 0, Some(vec![1, 1]))],
        1,
        Dialect::Runtime,
    );
    assert!(start_err(&s).contains("twice"));
}

#[test]
fn a_machine_has_one_driver_per_process() {
    let m = start_n(3, "");
    assert_eq!(m.process_count(), 3);
    let m = SimBackend::default()
        .start(&spec(vec![], 1, Dialect::Runtime))
        .unwrap();
    assert_eq!(m.process_count(), 0);
}

#[test]
fn visible_devices_remap_ordinals() {
    let config = SimConfig {
        devices: 3,
        ..SimConfig::default()
    };
    let specs = vec![
        proc_spec("owner", 0, Some(vec![2])),
        proc_spec("peer", 1, Some(vec![0, 2])),
    ];
    let mut m = start_cfg(config, &spec(specs, 1, Dialect::Driver));
    assert_eq!(m.driver(0).device_count().unwrap(), 1);
    assert_eq!(m.driver(1).device_count().unwrap(), 2);
    assert_eq!(err(m.driver(0).set_device(1)), ErrorKind::InvalidDevice);
    let (a, h) = export(m.as_mut(), 2 * MIB, 0x42);
    assert_eq!(m.driver(0).pointer_info(a).unwrap().device, Some(0));
    // The peer's device 1 is physical device 2: the same device as the owner's.
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(m.driver(1).pointer_info(p).unwrap().device, Some(1));
    assert_eq!(m.driver(1).read(p, 1).unwrap(), vec![0x42]);
}

#[rstest]
#[case(DeviceAttribute::UnifiedAddressing, 1)]
#[case(DeviceAttribute::IpcEventSupport, 1)]
#[case(DeviceAttribute::ComputeCapabilityMajor, 9)]
#[case(DeviceAttribute::ComputeCapabilityMinor, 0)]
#[case(DeviceAttribute::MemoryPoolsSupported, 1)]
#[case(DeviceAttribute::HandleTypePosixFdSupported, 1)]
#[case(DeviceAttribute::VirtualMemoryManagementSupported, 1)]
fn device_attributes(#[case] attr: DeviceAttribute, #[case] want: i64) {
    let mut m = start("");
    assert_eq!(m.driver(0).device_attribute(1, attr).unwrap(), want);
    assert_eq!(
        err(m.driver(0).device_attribute(2, attr)),
        ErrorKind::InvalidDevice
    );
}

#[test]
fn the_start_device_primary_context_is_current() {
    let mut m = start("");
    let cur = m.driver(0).current_context().unwrap().unwrap();
    assert_eq!(m.driver(0).primary_context(0).unwrap(), cur);
    // Retaining another device's primary context does not make it current.
    let p1 = m.driver(0).primary_context(1).unwrap();
    assert_ne!(p1, cur);
    assert_eq!(m.driver(0).current_context().unwrap(), Some(cur));
    m.driver(0).set_device(1).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), Some(p1));
    assert_eq!(err(m.driver(0).set_device(2)), ErrorKind::InvalidDevice);
    assert_eq!(
        err(m.driver(0).primary_context(7)),
        ErrorKind::InvalidDevice
    );
    assert_eq!(err(m.driver(0).create_context(7)), ErrorKind::InvalidDevice);
}

#[test]
fn created_contexts_are_distinct_and_switchable() {
    let mut m = start("");
    let primary = m.driver(0).current_context().unwrap().unwrap();
    let c1 = m.driver(0).create_context(0).unwrap();
    let c2 = m.driver(0).create_context(0).unwrap();
    assert!(c1 != primary && c2 != primary && c1 != c2);
    assert_eq!(m.driver(0).current_context().unwrap(), Some(c2));
    m.driver(0).set_current_context(c1).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), Some(c1));
    // Context ids are per process: another process does not know c1.
    assert_eq!(
        err(m.driver(1).set_current_context(c1)),
        ErrorKind::InvalidContext
    );
    // The stack is [primary, c1, c1]: each creation pushed, and the set
    // replaced c2 on top. The null context pops the top.
    let null = ipc_harness::ContextId(0);
    m.driver(0).set_current_context(null).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), Some(c1));
    m.driver(0).set_current_context(null).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), Some(primary));
    m.driver(0).set_current_context(null).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), None);
    assert_eq!(
        err(m.driver(0).alloc(MemKind::Device, 8)),
        ErrorKind::InvalidContext
    );
    // Popping an empty stack does nothing.
    m.driver(0).set_current_context(null).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), None);
    m.driver(0).set_device(0).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), Some(primary));
}

#[test]
fn allocations_in_different_contexts_do_not_share_blocks() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 64).unwrap();
    m.driver(0).create_context(0).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 64).unwrap();
    assert!(b.0.abs_diff(a.0) >= 2 * MIB);
}

#[test]
fn destroying_a_primary_context() {
    let mut m = start("");
    let primary = m.driver(0).current_context().unwrap().unwrap();
    assert_eq!(
        err(m.driver(0).destroy_context(primary)),
        ErrorKind::InvalidContext
    );

    let mut s = Semantics::default();
    s.set("destroy_primary", "resets").unwrap();
    let config = SimConfig {
        semantics: s,
        ..SimConfig::default()
    };
    let mut m = start_cfg(config, &spec(procs(2), 1, Dialect::Driver));
    let primary = m.driver(0).current_context().unwrap().unwrap();
    let a = m.driver(0).alloc(MemKind::Device, 64).unwrap();
    m.driver(0).destroy_context(primary).unwrap();
    assert_eq!(m.driver(0).current_context().unwrap(), None);
    assert!(m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).is_err());
    let fresh = m.driver(0).primary_context(0).unwrap();
    assert_ne!(fresh, primary);
}
