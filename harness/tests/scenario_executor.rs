//! The executor through the public API, on a tiny hand-written fake driver.
//! (The mockall-based executor tests live in `src/scenario/tests.rs`, where
//! `MockDriver` exists.)

use ipc_harness::scenario::{execute, execute_on, parse, ExecOptions, Execution};
use ipc_harness::trace::{StepOutcome, ValueSummary};
use ipc_harness::{
    ApiError, Backend, BackendInfo, ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, Dialect,
    Driver, DriverError, DriverResult, ErrorKind, EventId, Fd, FreeKind, GranularityKind,
    HandleTypes, Hazard, IpcEventHandle, IpcMemHandle, Machine, MachineSpec, MemKind, MemoryType,
    OutArg, PointerInfo, ProcessIndex, ShareableHandleType, StartError, Status, StreamId,
    VmmAccess, VmmHandle,
};
/// What this fake answers to the VMM and descriptor calls it does not model.
fn vmm_not_modelled() -> DriverError {
    DriverError::Harness("this backend does not implement the VMM calls".to_string())
}

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

/// Shared "GPU": allocations by base address; handles name allocations.
#[derive(Default)]
struct World {
    next: u64,
    mem: HashMap<u64, Vec<u8>>,
}

struct Fake {
    dialect: Dialect,
    world: Rc<RefCell<World>>,
}

impl Fake {
    fn err(&self, kind: ErrorKind) -> DriverError {
        DriverError::Api(ApiError::new(self.dialect, kind))
    }

    fn with<T>(&self, p: DevicePtr, len: u64, f: impl FnOnce(&mut [u8]) -> T) -> DriverResult<T> {
        let mut w = self.world.borrow_mut();
        for (base, bytes) in w.mem.iter_mut() {
            let end = base + bytes.len() as u64;
            if p.0 >= *base && p.0 + len <= end {
                let off = (p.0 - base) as usize;
                return Ok(f(&mut bytes[off..off + len as usize]));
            }
        }
        Err(self.err(ErrorKind::InvalidValue))
    }
}

impl Driver for Fake {
    fn dialect(&self) -> Dialect {
        self.dialect
    }
    fn device_count(&mut self) -> DriverResult<u32> {
        Ok(1)
    }
    fn device_attribute(&mut self, _: DeviceOrdinal, _: DeviceAttribute) -> DriverResult<i64> {
        Ok(1)
    }
    fn set_device(&mut self, d: DeviceOrdinal) -> DriverResult<()> {
        if d == 0 {
            Ok(())
        } else {
            Err(self.err(ErrorKind::InvalidDevice))
        }
    }
    fn primary_context(&mut self, _: DeviceOrdinal) -> DriverResult<ContextId> {
        Ok(ContextId(1))
    }
    fn create_context(&mut self, _: DeviceOrdinal) -> DriverResult<ContextId> {
        Ok(ContextId(2))
    }
    fn set_current_context(&mut self, _: ContextId) -> DriverResult<()> {
        Ok(())
    }
    fn current_context(&mut self) -> DriverResult<Option<ContextId>> {
        Ok(Some(ContextId(1)))
    }
    fn destroy_context(&mut self, _: ContextId) -> DriverResult<()> {
        Ok(())
    }
    fn alloc(&mut self, _: MemKind, size: u64) -> DriverResult<DevicePtr> {
        let mut w = self.world.borrow_mut();
        w.next += 0x10_0000_0000;
        let base = 0x7f00_0000_0000 + w.next;
        w.mem.insert(base, vec![0; size as usize]);
        Ok(DevicePtr(base))
    }
    fn free(&mut self, _: FreeKind, ptr: DevicePtr) -> DriverResult<()> {
        match self.world.borrow_mut().mem.remove(&ptr.0) {
            Some(_) => Ok(()),
            None => Err(self.err(ErrorKind::InvalidValue)),
        }
    }
    fn memset(&mut self, ptr: DevicePtr, value: u8, len: u64) -> DriverResult<()> {
        self.with(ptr, len, |b| b.fill(value))
    }
    fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> DriverResult<()> {
        self.with(ptr, bytes.len() as u64, |b| b.copy_from_slice(bytes))
    }
    fn read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        self.with(ptr, len, |b| b.to_vec())
    }
    fn device_read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        self.read(ptr, len)
    }
    fn address_range(&mut self, ptr: DevicePtr) -> DriverResult<(DevicePtr, u64)> {
        let w = self.world.borrow();
        w.mem
            .iter()
            .find(|(b, m)| ptr.0 >= **b && ptr.0 < **b + m.len() as u64)
            .map(|(b, m)| (DevicePtr(*b), m.len() as u64))
            .ok_or_else(|| self.err(ErrorKind::NotFound))
    }
    fn pointer_info(&mut self, ptr: DevicePtr) -> DriverResult<PointerInfo> {
        Ok(match self.address_range(ptr) {
            Ok(_) => PointerInfo {
                memory_type: MemoryType::Device,
                device: Some(0),
            },
            Err(_) => PointerInfo {
                memory_type: MemoryType::Unregistered,
                device: None,
            },
        })
    }
    fn ipc_get_mem_handle(&mut self, ptr: DevicePtr, out: OutArg) -> DriverResult<IpcMemHandle> {
        if out == OutArg::Null || !self.world.borrow().mem.contains_key(&ptr.0) {
            return Err(self.err(ErrorKind::InvalidValue));
        }
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(&ptr.0.to_le_bytes());
        h[8] = 1;
        Ok(IpcMemHandle(h))
    }
    fn ipc_open_mem_handle(
        &mut self,
        handle: IpcMemHandle,
        _: u32,
        _: OutArg,
    ) -> DriverResult<DevicePtr> {
        let mut b = [0u8; 8];
        b.copy_from_slice(&handle.0[..8]);
        let base = u64::from_le_bytes(b);
        if handle.0[8] == 1 && self.world.borrow().mem.contains_key(&base) {
            Ok(DevicePtr(base))
        } else {
            Err(self.err(ErrorKind::InvalidValue))
        }
    }
    fn ipc_close_mem_handle(&mut self, _: DevicePtr) -> DriverResult<()> {
        Ok(())
    }

    // One device: it is nobody's peer, and no other device exists.
    fn can_access_peer(&mut self, d: DeviceOrdinal, p: DeviceOrdinal) -> DriverResult<i64> {
        if d == 0 && p == 0 {
            Ok(0)
        } else {
            Err(self.err(ErrorKind::InvalidDevice))
        }
    }
    fn enable_peer_access(&mut self, _: DeviceOrdinal) -> DriverResult<()> {
        Err(self.err(ErrorKind::InvalidDevice))
    }

    fn synchronize(&mut self) -> DriverResult<()> {
        Ok(())
    }
    // This fake models memory only: every event call is NotSupported.
    fn event_create(&mut self, _: u32) -> DriverResult<EventId> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn event_record(&mut self, _: EventId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn event_query(&mut self, _: EventId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn event_synchronize(&mut self, _: EventId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_wait_event(&mut self, _: EventId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn event_elapsed(&mut self, _: EventId, _: EventId) -> DriverResult<f32> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn event_destroy(&mut self, _: EventId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn ipc_get_event_handle(&mut self, _: EventId, _: OutArg) -> DriverResult<IpcEventHandle> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn ipc_open_event_handle(&mut self, _: IpcEventHandle, _: OutArg) -> DriverResult<EventId> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn slow_fill(&mut self, _: DevicePtr, _: u8, _: u64, _: u64) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn kernel_pattern(&mut self, _: DevicePtr, _: u64, _: u64, _: u8, _: u8) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    // --- memory pools: not modelled by this fake ---
    fn pool_create(
        &mut self,
        _: DeviceOrdinal,
        _: HandleTypes,
    ) -> DriverResult<ipc_harness::PoolId> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_default(&mut self, _: DeviceOrdinal) -> DriverResult<ipc_harness::PoolId> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_destroy(&mut self, _: ipc_harness::PoolId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_export(&mut self, _: ipc_harness::PoolId) -> DriverResult<Fd> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_import(&mut self, _: Fd) -> DriverResult<ipc_harness::PoolId> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_set_access(
        &mut self,
        _: ipc_harness::PoolId,
        _: DeviceOrdinal,
        _: VmmAccess,
    ) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_get_access(&mut self, _: ipc_harness::PoolId, _: DeviceOrdinal) -> DriverResult<u64> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_alloc(&mut self, _: ipc_harness::PoolId, _: u64) -> DriverResult<DevicePtr> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_free(&mut self, _: DevicePtr) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_export_ptr(&mut self, _: DevicePtr) -> DriverResult<ipc_harness::PoolPtrExport> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pool_import_ptr(
        &mut self,
        _: ipc_harness::PoolId,
        _: ipc_harness::PoolPtrExport,
    ) -> DriverResult<DevicePtr> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pointer_attribute(
        &mut self,
        _: DevicePtr,
        _: ipc_harness::PointerAttribute,
    ) -> DriverResult<u64> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn fork_child_alloc(&mut self, _: u64) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    // --- streams and copies: not modelled by this fake ---
    fn stream_create(&mut self, _: u32) -> DriverResult<StreamId> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_destroy(&mut self, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_synchronize(&mut self, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_query(&mut self, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn event_record_on(&mut self, _: EventId, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_wait_event_on(&mut self, _: StreamId, _: EventId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn slow_fill_on(
        &mut self,
        _: DevicePtr,
        _: u8,
        _: u64,
        _: u64,
        _: StreamId,
    ) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn copy_device(&mut self, _: DevicePtr, _: DevicePtr, _: u64, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn copy_peer(
        &mut self,
        _: DevicePtr,
        _: DeviceOrdinal,
        _: DevicePtr,
        _: DeviceOrdinal,
        _: u64,
    ) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pidfd_getfd(&mut self, _: u32, _: Fd) -> DriverResult<Fd> {
        Err(self.err(ErrorKind::NotSupported))
    }
    // --- VMM and descriptors: not modelled by this fake ---
    fn vmm_granularity(
        &mut self,
        _: DeviceOrdinal,
        _: HandleTypes,
        _: GranularityKind,
    ) -> DriverResult<u64> {
        Err(vmm_not_modelled())
    }
    fn vmm_create(&mut self, _: DeviceOrdinal, _: u64, _: HandleTypes) -> DriverResult<VmmHandle> {
        Err(vmm_not_modelled())
    }
    fn vmm_export(&mut self, _: VmmHandle, _: ShareableHandleType) -> DriverResult<Fd> {
        Err(vmm_not_modelled())
    }
    fn vmm_import(&mut self, _: Fd) -> DriverResult<VmmHandle> {
        Err(vmm_not_modelled())
    }
    fn vmm_reserve(&mut self, _: u64) -> DriverResult<DevicePtr> {
        Err(vmm_not_modelled())
    }
    fn vmm_map(&mut self, _: DevicePtr, _: u64, _: u64, _: VmmHandle) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn vmm_set_access(
        &mut self,
        _: DevicePtr,
        _: u64,
        _: DeviceOrdinal,
        _: VmmAccess,
    ) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn vmm_unmap(&mut self, _: DevicePtr, _: u64) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn vmm_address_free(&mut self, _: DevicePtr, _: u64) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn vmm_release(&mut self, _: VmmHandle) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn fd_close(&mut self, _: Fd) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn fd_open_null_device(&mut self) -> DriverResult<Fd> {
        Err(vmm_not_modelled())
    }
}

struct FakeMachine {
    drivers: Vec<Fake>,
}

impl Machine for FakeMachine {
    fn process_count(&self) -> usize {
        self.drivers.len()
    }
    fn driver(&mut self, process: ProcessIndex) -> &mut dyn Driver {
        &mut self.drivers[process]
    }
    fn exit(&mut self, _: ProcessIndex) -> DriverResult<()> {
        Ok(())
    }
    fn hazards(&self) -> Option<Vec<Hazard>> {
        None
    }
}

struct FakeBackend;

impl Backend for FakeBackend {
    fn name(&self) -> &str {
        "fake"
    }
    fn info(&self) -> BackendInfo {
        BackendInfo::default()
    }
    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        if spec.devices > 1 {
            return Err(StartError::NotSupported(format!(
                "needs {} devices, the fake has 1",
                spec.devices
            )));
        }
        let world = Rc::new(RefCell::new(World::default()));
        Ok(Box::new(FakeMachine {
            drivers: spec
                .processes
                .iter()
                .map(|_| Fake {
                    dialect: spec.dialect,
                    world: world.clone(),
                })
                .collect(),
        }))
    }
    fn has_hazard_log(&self) -> bool {
        false
    }
}

const EXAMPLE: &str = "\
# id: mem.open.refcount
devices 1
process owner device=0
process peer  device=0

owner: a = malloc 2MiB
owner: fill a 0xab
owner: h = ipc_get a
owner: send h -> peer
peer:  p = ipc_open h                  => ok
peer:  q = ipc_open h                  => ok, == p
peer:  ipc_close p
peer:  read q 0 16                     => bytes ab*16
peer:  address_range q                 => base == a, size 2MiB
peer:  z = handle_zero                 => != h
peer:  ipc_open z                      => cudaErrorInvalidValue
peer:  ipc_close q                     => ok
peer:  set_device 1                    => runtime: cudaErrorInvalidDevice; driver: error
expect no-hazards
";

fn run(src: &str, dialect: Dialect, seed: u64) -> Execution {
    let s = parse(src, Path::new("example.ipc")).unwrap_or_else(|e| panic!("{e}"));
    execute(
        &s,
        &FakeBackend,
        &ExecOptions {
            dialect,
            seed,
            ..ExecOptions::default()
        },
    )
}

#[test]
fn the_docs_example_passes_in_both_dialects() {
    for dialect in Dialect::ALL {
        let e = run(EXAMPLE, dialect, 1);
        assert_eq!(
            e.verdict.status,
            Status::Pass,
            "{dialect}: {}",
            e.verdict.message
        );
        assert_eq!(e.trace.steps.len(), 13);
        assert!(e
            .trace
            .steps
            .iter()
            .all(|s| s.check.as_ref().is_some_and(|c| c.passed)));
        assert_eq!(e.trace.hazards, None);
        assert_eq!(e.trace.hazard_checks.len(), 1);
        assert_eq!(
            e.trace.hazard_checks[0].message,
            "unchecked: backend has no hazard log"
        );
        let name = match &e.trace.steps[10].outcome {
            StepOutcome::Error { name, .. } => name.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            name,
            match dialect {
                Dialect::Runtime => "cudaErrorInvalidValue",
                Dialect::Driver => "CUDA_ERROR_INVALID_VALUE",
                Dialect::Hip => "hipErrorInvalidValue",
            }
        );
    }
}

#[test]
fn traces_are_deterministic_serialisable_and_free_of_addresses() {
    let a = run(EXAMPLE, Dialect::Runtime, 5);
    let b = run(EXAMPLE, Dialect::Runtime, 5);
    assert_eq!(a.trace.observations(), b.trace.observations());
    assert_ne!(a.trace.timing, Default::default(), "timings are recorded");
    assert!(a
        .trace
        .differences(&run(EXAMPLE, Dialect::Driver, 5).trace)
        .is_empty());
    let json = serde_json::to_string(&a.trace).unwrap_or_else(|e| panic!("{e}"));
    // No raw address (hex or decimal) anywhere: the longest number is 2MiB's size.
    assert!(!json.contains("7f"), "{json}");
    let longest_number = json
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(longest_number <= 7, "{json}");
    let back: ipc_harness::Trace = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, a.trace);
    assert_eq!(
        a.trace.steps[4].outcome,
        StepOutcome::Ok {
            value: ValueSummary::Ptr {
                label: "peer.p1".into()
            }
        }
    );
    assert_eq!(a.trace.steps[4].op, "p = ipc_open h flags=lazy");
}

#[test]
fn a_wrong_expectation_fails_with_file_line_and_seed() {
    let src = EXAMPLE.replace("=> bytes ab*16", "=> bytes cd*16");
    let e = run(&src, Dialect::Driver, 42);
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.verdict.message,
        "example.ipc:13: step 'read q 0 16' in peer: expected bytes cd*16, got ok (bytes ab*16) (seed 42)"
    );
}

#[test]
fn not_supported_and_execute_on() {
    let src = "devices 2\nprocess a device=1\na: device_count\n";
    let e = run(src, Dialect::Runtime, 0);
    assert_eq!(e.verdict.status, Status::NotSupported);
    assert_eq!(e.verdict.message, "needs 2 devices, the fake has 1");

    let s = parse(
        "devices 1\nprocess a device=0\na: n = device_count => value 1\n",
        Path::new("x"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut m = FakeMachine {
        drivers: vec![Fake {
            dialect: Dialect::Runtime,
            world: Rc::default(),
        }],
    };
    let e = execute_on(&s, &mut m, &ExecOptions::default());
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
}

#[test]
fn either_of_two_errors_passes_with_either_and_the_trace_names_the_one_that_came() {
    // `ipc_open z` of a zeroed handle fails with InvalidValue on the fake.
    let either = EXAMPLE.replace(
        "ipc_open z                      => cudaErrorInvalidValue",
        "ipc_open z => InvalidHandle | InvalidValue",
    );
    for dialect in Dialect::ALL {
        let e = run(&either, dialect, 3);
        assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
        let step = &e.trace.steps[10];
        assert!(
            matches!(&step.outcome, StepOutcome::Error { name, .. } if name.contains("InvalidValue") || name.contains("INVALID_VALUE")),
            "{:?}",
            step.outcome
        );
        let check = step.check.as_ref().map(|c| c.expected.as_str());
        assert_eq!(check, Some("InvalidHandle | InvalidValue"));
    }
    let neither = EXAMPLE.replace(
        "ipc_open z                      => cudaErrorInvalidValue",
        "ipc_open z => InvalidHandle | ok",
    );
    let e = run(&neither, Dialect::Runtime, 3);
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.verdict.message,
        "example.ipc:16: step 'ipc_open z flags=lazy' in peer: expected InvalidHandle | ok, got cudaErrorInvalidValue (seed 3)"
    );
}
