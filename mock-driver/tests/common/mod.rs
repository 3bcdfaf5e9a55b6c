//! Shared helpers: start machines and read results through the public
//! `Backend` / `Machine` / `Driver` API only.
#![allow(dead_code)]

use ipc_harness::{
    Backend, Dialect, DriverError, DriverResult, ErrorKind, HazardKind, IpcMemHandle, Machine,
    MachineSpec, MemKind, OutArg, ProcessSpec,
};
use ipc_mock_driver::{Semantics, SimBackend, SimConfig};
use std::time::Duration;

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

pub fn proc_spec(name: &str, device: u32, visible: Option<Vec<u32>>) -> ProcessSpec {
    ProcessSpec {
        name: name.into(),
        device,
        visible_devices: visible,
        pid_namespace: Default::default(),
    }
}

pub fn spec(procs: Vec<ProcessSpec>, seed: u64, dialect: Dialect) -> MachineSpec {
    MachineSpec {
        devices: 1,
        processes: procs,
        dialect,
        seed,
        step_timeout: Duration::from_secs(5),
        topology: None,
        semantics: Vec::new(),
    }
}

/// `n` processes on device 0 of a default (2-device) simulator.
pub fn procs(n: usize) -> Vec<ProcessSpec> {
    (0..n)
        .map(|i| proc_spec(&format!("p{i}"), 0, None))
        .collect()
}

pub fn semantics(settings: &str) -> Semantics {
    let mut s = Semantics::default();
    s.apply(settings).expect("valid semantics");
    s
}

pub fn start_cfg(config: SimConfig, spec: &MachineSpec) -> Box<dyn Machine> {
    match SimBackend::new(config).start(spec) {
        Ok(m) => m,
        Err(e) => panic!("start failed: {e:?}"),
    }
}

/// Two processes ("owner" 0, "peer" 1) on device 0, runtime dialect, seed 1,
/// with `settings` applied to the default semantics.
pub fn start(settings: &str) -> Box<dyn Machine> {
    start_n(2, settings)
}

pub fn start_n(n: usize, settings: &str) -> Box<dyn Machine> {
    let config = SimConfig {
        semantics: semantics(settings),
        ..SimConfig::default()
    };
    start_cfg(config, &spec(procs(n), 1, Dialect::Runtime))
}

/// The error kind of a failed call (panics on success or a non-API error).
pub fn err<T: std::fmt::Debug>(r: DriverResult<T>) -> ErrorKind {
    match r {
        Err(DriverError::Api(e)) => e.kind().expect("known code"),
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn hazard_kinds(m: &dyn Machine) -> Vec<HazardKind> {
    m.hazards()
        .expect("the simulator has a hazard log")
        .iter()
        .map(|h| h.kind)
        .collect()
}

pub fn count(m: &dyn Machine, kind: HazardKind) -> usize {
    hazard_kinds(m).iter().filter(|&&k| k == kind).count()
}

/// Process 0 allocates `size` bytes of device memory, fills them with
/// `fill`, and exports the allocation.
pub fn export(m: &mut dyn Machine, size: u64, fill: u8) -> (ipc_harness::DevicePtr, IpcMemHandle) {
    let a = m.driver(0).alloc(MemKind::Device, size).unwrap();
    m.driver(0).memset(a, fill, size).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    (a, h)
}

pub fn open(
    m: &mut dyn Machine,
    process: usize,
    h: IpcMemHandle,
) -> DriverResult<ipc_harness::DevicePtr> {
    m.driver(process).ipc_open_mem_handle(
        h,
        ipc_harness::IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
        OutArg::Valid,
    )
}
