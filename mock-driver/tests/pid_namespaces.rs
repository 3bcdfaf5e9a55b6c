//! PID namespaces (`pidns=new`) and `pidfd_getfd` in the simulator.

mod common;

use common::*;
use ipc_harness::{
    event_flags, Dialect, ErrorKind, Fd, HandleTypes, Machine, MemKind, OutArg, PidNamespace,
    ProcessSpec, ShareableHandleType,
};
use ipc_mock_driver::SimConfig;

const H: PidNamespace = PidNamespace::Harness;
const NEW: PidNamespace = PidNamespace::New;

/// Processes "owner" (0) and "peer" (1) in the given namespaces.
fn start_in(owner: PidNamespace, peer: PidNamespace, settings: &str) -> Box<dyn Machine> {
    let procs = [("owner", owner), ("peer", peer)]
        .into_iter()
        .map(|(name, pid_namespace)| ProcessSpec {
            pid_namespace,
            ..proc_spec(name, 0, None)
        })
        .collect();
    let config = SimConfig {
        semantics: semantics(settings),
        ..SimConfig::default()
    };
    start_cfg(config, &spec(procs, 1, Dialect::Driver))
}

/// The owner's exported VMM descriptor.
fn vmm_fd(m: &mut dyn Machine) -> Fd {
    let d = m.driver(0);
    let h = d.vmm_create(0, 2 << 20, HandleTypes::POSIX_FD).unwrap();
    d.vmm_export(h, ShareableHandleType::PosixFd).unwrap()
}

#[test]
fn within_one_namespace_the_peer_takes_and_imports_the_owners_export() {
    let mut m = start_in(H, H, "");
    let f = vmm_fd(m.as_mut());
    let pid = m.process_pid(0).unwrap();
    assert_ne!(pid, m.process_pid(1).unwrap());
    let g = m.driver(1).pidfd_getfd(pid, f).unwrap();
    m.driver(1).vmm_import(g).unwrap();
    // The copy is the peer's own: closing it leaves the owner's.
    m.driver(1).fd_close(g).unwrap();
    m.driver(0).fd_close(f).unwrap();
}

#[test]
fn from_inside_a_new_namespace_the_harness_pid_names_nothing() {
    let mut m = start_in(H, NEW, "");
    let f = vmm_fd(m.as_mut());
    let pid = m.process_pid(0).unwrap();
    assert_eq!(err(m.driver(1).pidfd_getfd(pid, f)), ErrorKind::NotFound);
    // Its own namespace names it as pid 1: its own descriptor, not the owner's.
    assert_eq!(err(m.driver(1).pidfd_getfd(1, f)), ErrorKind::InvalidValue);
}

#[test]
fn the_harness_namespace_sees_a_process_in_a_new_one() {
    let mut m = start_in(NEW, H, "");
    let f = vmm_fd(m.as_mut());
    let pid = m.process_pid(0).unwrap();
    let g = m.driver(1).pidfd_getfd(pid, f).unwrap();
    m.driver(1).vmm_import(g).unwrap();
}

#[test]
fn a_number_the_owner_does_not_hold_and_an_exited_owner_are_refused() {
    let mut m = start_in(H, H, "");
    let f = vmm_fd(m.as_mut());
    let pid = m.process_pid(0).unwrap();
    assert_eq!(
        err(m.driver(1).pidfd_getfd(pid, Fd(f.0 + 100))),
        ErrorKind::InvalidValue
    );
    m.exit(0).unwrap();
    assert_eq!(err(m.driver(1).pidfd_getfd(pid, f)), ErrorKind::NotFound);
}

#[test]
fn legacy_handles_across_namespaces_follow_cross_pidns_ipc() {
    for (setting, expected) in [
        ("", None),
        ("cross_pidns_ipc=MapFailed", Some(ErrorKind::MapFailed)),
    ] {
        let mut m = start_in(H, NEW, setting);
        let a = m.driver(0).alloc(MemKind::Device, 2 << 20).unwrap();
        let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
        let e = m
            .driver(0)
            .event_create(event_flags::INTERPROCESS | event_flags::DISABLE_TIMING)
            .unwrap();
        let eh = m.driver(0).ipc_get_event_handle(e, OutArg::Valid).unwrap();
        let opened = m.driver(1).ipc_open_mem_handle(h, 1, OutArg::Valid);
        let event = m.driver(1).ipc_open_event_handle(eh, OutArg::Valid);
        match expected {
            None => {
                opened.unwrap();
                event.unwrap();
            }
            Some(kind) => {
                assert_eq!(err(opened), kind);
                assert_eq!(err(event), kind);
            }
        }
        // Within one namespace the setting changes nothing.
        let mut m = start_in(H, H, setting);
        let a = m.driver(0).alloc(MemKind::Device, 2 << 20).unwrap();
        let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
        m.driver(1)
            .ipc_open_mem_handle(h, 1, OutArg::Valid)
            .unwrap();
    }
}
