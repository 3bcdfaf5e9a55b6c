//! The runner over a mocked driver (mockall): errors injected at a chosen call
//! come out as the clause results a real driver would give, named in the
//! run's dialect, and the report carries them.

use ipc_conformance::catalogue::Clause;
use ipc_conformance::runner::run_clause;
use ipc_harness::{
    ApiError, Backend, BackendInfo, Dialect, Driver, DriverError, ErrorKind, Hazard, IpcMemHandle,
    Machine, MachineSpec, MockDriver, StartError, Status,
};
use ipc_harness::{DevicePtr, DriverResult};
use rstest::rstest;
use std::cell::RefCell;
use std::path::Path;
use std::time::Duration;

const CLAUSE: &str = "\
# id: test.open.injected
# title: An importer opens a handle
# kind: specified
# tier: contract
devices 1
process owner device=0
process peer device=0
owner: a = malloc 2MiB
owner: h = ipc_get a
owner: send h -> peer
peer: p = ipc_open h => ok
peer: ipc_close p
";

/// A machine of two mocked processes.
struct Mocked {
    drivers: Vec<MockDriver>,
}

impl Machine for Mocked {
    fn process_count(&self) -> usize {
        self.drivers.len()
    }
    fn driver(&mut self, process: usize) -> &mut dyn Driver {
        &mut self.drivers[process]
    }
    fn exit(&mut self, _: usize) -> DriverResult<()> {
        Ok(())
    }
    fn hazards(&self) -> Option<Vec<Hazard>> {
        None
    }
}

/// Hands out one prepared machine.
struct OneShot(RefCell<Option<Mocked>>);

impl Backend for OneShot {
    fn name(&self) -> &str {
        "mock"
    }
    fn info(&self) -> BackendInfo {
        BackendInfo {
            backend: "mock".into(),
            ..BackendInfo::default()
        }
    }
    fn start(&self, _: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        self.0
            .borrow_mut()
            .take()
            .map(|m| Box::new(m) as Box<dyn Machine>)
            .ok_or_else(|| StartError::Harness("started twice".into()))
    }
    fn has_hazard_log(&self) -> bool {
        false
    }
}

/// Exporter succeeds; the importer's open answers `open`.
fn machine(dialect: Dialect, open: DriverResult<DevicePtr>) -> Mocked {
    let mut owner = MockDriver::new();
    owner.expect_dialect().return_const(dialect);
    owner
        .expect_alloc()
        .returning(|_, _| Ok(DevicePtr(0x7f00_0000_0000)));
    owner
        .expect_ipc_get_mem_handle()
        .returning(|_, _| Ok(IpcMemHandle([7; 64])));
    let mut peer = MockDriver::new();
    peer.expect_dialect().return_const(dialect);
    peer.expect_ipc_open_mem_handle()
        .times(1)
        .return_once(move |h, flags, _| {
            assert_eq!(
                h,
                IpcMemHandle([7; 64]),
                "the handle's bytes travel unchanged"
            );
            assert_eq!(flags, 1, "flags default to cudaIpcMemLazyEnablePeerAccess");
            open
        });
    peer.expect_ipc_close_mem_handle().returning(|_| Ok(()));
    Mocked {
        drivers: vec![owner, peer],
    }
}

fn clause() -> Clause {
    Clause::from_source(CLAUSE, Path::new("injected.ipc"), "injected")
}

#[rstest]
#[case::too_many_peers(Dialect::Runtime, ErrorKind::TooManyPeers, "cudaErrorTooManyPeers")]
#[case::map_failed(
    Dialect::Runtime,
    ErrorKind::MapFailed,
    "cudaErrorMapBufferObjectFailed"
)]
#[case::too_many_peers_driver(
    Dialect::Driver,
    ErrorKind::TooManyPeers,
    "CUDA_ERROR_TOO_MANY_PEERS"
)]
#[case::map_failed_driver(Dialect::Driver, ErrorKind::MapFailed, "CUDA_ERROR_MAP_FAILED")]
fn an_injected_open_error_fails_the_clause_with_its_name(
    #[case] dialect: Dialect,
    #[case] kind: ErrorKind,
    #[case] name: &str,
) {
    let err = DriverError::Api(ApiError::new(dialect, kind));
    let backend = OneShot(RefCell::new(Some(machine(dialect, Err(err)))));
    let r = run_clause(&clause(), &backend, dialect, 9, Duration::from_secs(1));
    assert_eq!(r.status, Status::Fail, "{}", r.message);
    assert!(r.message.contains(name), "{}", r.message);
    assert!(r.message.contains("seed 9"), "{}", r.message);
    let trace = r.trace.expect("a trace");
    let close = trace.steps.last().expect("steps");
    assert!(
        matches!(
            close.outcome,
            ipc_harness::trace::StepOutcome::Skipped { .. }
        ),
        "the close of an unbound pointer is skipped: {:?}",
        close.outcome
    );
}

#[test]
fn the_same_clause_passes_when_the_mock_opens() {
    let backend = OneShot(RefCell::new(Some(machine(
        Dialect::Runtime,
        Ok(DevicePtr(0x7e00_0000_0000)),
    ))));
    let r = run_clause(
        &clause(),
        &backend,
        Dialect::Runtime,
        9,
        Duration::from_secs(1),
    );
    assert_eq!(r.status, Status::Pass, "{}", r.message);
}
