//! The hip dialect: HIP's error names and codes, and the HIP profile of
//! semantic choices (ROCm/clr hipamd/src/hip_memory.cpp) the simulator runs
//! hip machines with, while the CUDA dialects keep the measured defaults.

mod common;

use common::*;
use ipc_harness::{
    Backend, Dialect, DriverError, ErrorKind, FreeKind, MachineSpec, MemKind, OutArg, Topology,
};
use ipc_mock_driver::{Profile, Semantics, SimBackend, SimConfig};

fn start_in(dialect: Dialect) -> Box<dyn ipc_harness::Machine> {
    start_cfg(SimConfig::default(), &spec(procs(2), 1, dialect))
}

#[test]
fn the_hip_profile_changes_only_the_choices_rocm_sources_decide() {
    let names: Vec<&str> = Semantics::hip_differences()
        .iter()
        .map(|(name, _, _)| *name)
        .collect();
    assert_eq!(
        names,
        [
            "open_flags",
            "garbage_handle_error",
            "dead_handle_error",
            "get_null_out",
            "event_get_null_out",
            "interior_handle"
        ]
    );
    assert_eq!(
        Profile::Measured.semantics(Dialect::Runtime),
        Semantics::default()
    );
    assert_eq!(
        Profile::Hip.semantics(Dialect::Runtime),
        Semantics::hip_profile()
    );
    assert_eq!(SimConfig::default().hip_semantics, Semantics::hip_profile());
}

#[test]
fn hip_errors_carry_hip_names_and_codes() {
    let mut m = start_in(Dialect::Hip);
    match m
        .driver(0)
        .ipc_close_mem_handle(ipc_harness::DevicePtr(0x10))
    {
        Err(DriverError::Api(e)) => {
            assert_eq!((e.dialect, e.code), (Dialect::Hip, 1));
            assert_eq!(e.name(), "hipErrorInvalidValue");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn flags_must_be_exactly_lazy_in_hip_but_not_in_cuda() {
    for (dialect, three_opens) in [(Dialect::Runtime, true), (Dialect::Hip, false)] {
        let mut m = start_in(dialect);
        let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
        let r = m.driver(1).ipc_open_mem_handle(h, 3, OutArg::Valid);
        assert_eq!(r.is_ok(), three_opens, "{dialect}");
    }
}

#[test]
fn a_null_handle_pointer_is_invalid_value_in_hip_not_a_crash() {
    let mut m = start_in(Dialect::Hip);
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    assert_eq!(
        err(m.driver(0).ipc_get_mem_handle(a, OutArg::Null)),
        ErrorKind::InvalidValue
    );
    let mut m = start_in(Dialect::Runtime);
    let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    assert!(matches!(
        m.driver(0).ipc_get_mem_handle(a, OutArg::Null),
        Err(DriverError::Lost(_))
    ));
}

#[test]
fn handles_rocr_cannot_attach_are_invalid_device_pointer() {
    let mut m = start_in(Dialect::Hip);
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let mut bad = h;
    bad.0[24] ^= 0xff;
    assert_eq!(
        err(open(m.as_mut(), 1, bad)),
        ErrorKind::InvalidDevicePointer
    );
    m.exit(0).unwrap();
    assert_eq!(err(open(m.as_mut(), 1, h)), ErrorKind::InvalidDevicePointer);
}

#[test]
fn an_interior_pointer_handle_opens_at_the_interior_address_in_hip() {
    for (dialect, want) in [(Dialect::Driver, 0x11), (Dialect::Hip, 0x22)] {
        let mut m = start_in(dialect);
        let a = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
        m.driver(0).memset(a, 0x11, 4096).unwrap();
        m.driver(0).memset(a.offset(4096), 0x22, 4096).unwrap();
        let whole = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
        let inner = m
            .driver(0)
            .ipc_get_mem_handle(a.offset(4096), OutArg::Valid)
            .unwrap();
        assert_eq!(whole == inner, dialect != Dialect::Hip, "{dialect}");
        let p = open(m.as_mut(), 1, inner).unwrap();
        assert_eq!(m.driver(1).read(p, 1).unwrap(), vec![want], "{dialect}");
        m.driver(1).ipc_close_mem_handle(p).unwrap();
    }
}

/// explore --dialect hip, seed 5, case 1782: with the allocation's own
/// handle open, the handle of a pointer 256 bytes into it re-opened the
/// allocation's pointer as a copy of the open handle. ROCm's table of opened
/// handles (FindIpcHandleMemObj) keys on `poffset` too: the interior handle
/// opens at its own offset, and each pointer is closed on its own.
#[test]
fn an_interior_handle_opens_at_its_offset_while_the_whole_allocation_is_open() {
    let mut m = start_in(Dialect::Hip);
    let a = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    m.driver(0).memset(a, 0x11, 256).unwrap();
    m.driver(0).memset(a.offset(256), 0x22, 256).unwrap();
    let whole = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let inner = m
        .driver(0)
        .ipc_get_mem_handle(a.offset(256), OutArg::Valid)
        .unwrap();
    let p = open(m.as_mut(), 1, whole).unwrap();
    let q = open(m.as_mut(), 1, inner).unwrap();
    assert_eq!(q, p.offset(256));
    assert_eq!(m.driver(1).read(q, 1).unwrap(), vec![0x22]);
    // Re-opening each handle returns its own pointer (refcount).
    assert_eq!(open(m.as_mut(), 1, inner).unwrap(), q);
    assert_eq!(open(m.as_mut(), 1, whole).unwrap(), p);
    for ptr in [q, q, p, p] {
        m.driver(1).ipc_close_mem_handle(ptr).unwrap();
    }
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(q)),
        ErrorKind::InvalidValue
    );
}

/// The backend tells the checks of a trace which choice a dialect's
/// machines run with (`Backend::semantic_choice`).
#[test]
fn the_backend_names_the_choices_of_each_dialect() {
    let sim = SimBackend::default();
    for (dialect, want) in [
        (Dialect::Runtime, "allocation"),
        (Dialect::Driver, "allocation"),
        (Dialect::Hip, "pointer-offset"),
    ] {
        assert_eq!(
            sim.semantic_choice(dialect, "interior_handle").as_deref(),
            Some(want)
        );
    }
    assert_eq!(sim.semantic_choice(Dialect::Hip, "no_such_choice"), None);
}

#[test]
fn free_of_null_succeeds_in_hip_as_in_the_cuda_runtime() {
    let mut m = start_in(Dialect::Hip);
    m.driver(0)
        .free(FreeKind::Device, ipc_harness::DevicePtr::NULL)
        .unwrap();
}

#[test]
fn too_many_peers_has_no_hip_code_and_falls_back_to_invalid_value() {
    let spec = MachineSpec {
        devices: 3,
        topology: Some(Topology {
            all_peers: true,
            peer_pairs: vec![],
            peer_budget: Some(1),
        }),
        ..spec(procs(1), 1, Dialect::Hip)
    };
    let mut m = SimBackend::default().start(&spec).unwrap();
    m.driver(0).enable_peer_access(1).unwrap();
    match m.driver(0).enable_peer_access(2) {
        Err(DriverError::Api(e)) => assert_eq!(e.name(), "hipErrorInvalidValue"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn command_line_choices_apply_to_the_hip_profile_too() {
    let mut config = SimConfig::default();
    for sem in [&mut config.semantics, &mut config.hip_semantics] {
        sem.set("open_flags", "ignored").unwrap();
    }
    let mut m = start_cfg(config, &spec(procs(2), 1, Dialect::Hip));
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    m.driver(1)
        .ipc_open_mem_handle(h, 0x80, OutArg::Valid)
        .unwrap();
}
