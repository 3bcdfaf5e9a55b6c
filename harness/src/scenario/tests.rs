//! Executor tests against `MockDriver` (mockall). They live here rather than
//! in `tests/` because `MockDriver` only exists under `cfg(test)` (or the
//! `mock` feature) of this crate.

use super::*;
use crate::calls::MockDriver;
use crate::driver::{
    ContextId, DevicePtr, DriverError, DriverResult, FreeKind, IpcMemHandle, MemKind, MemoryType,
    OutArg, PointerInfo, ProcessLoss,
};
use crate::errors::{ApiError, Dialect, ErrorKind};
use crate::machine::{BackendInfo, Hazard, HazardKind, MachineSpec, ProcessIndex, StartError};
use crate::trace::{Status, StepOutcome, ValueSummary};
use mockall::Sequence;
use rstest::rstest;
use std::cell::RefCell;
use std::rc::Rc;

/// A machine over a vector of mock drivers; records what the executor asked of it.
#[derive(Default)]
struct MockMachine {
    drivers: Vec<MockDriver>,
    hazards: Option<Vec<Hazard>>,
    log: Rc<RefCell<Vec<String>>>,
    exit_error: Option<DriverError>,
}

impl MockMachine {
    fn new(drivers: Vec<MockDriver>) -> MockMachine {
        MockMachine {
            drivers,
            ..MockMachine::default()
        }
    }
}

impl Machine for MockMachine {
    fn process_count(&self) -> usize {
        self.drivers.len()
    }
    fn driver(&mut self, process: ProcessIndex) -> &mut dyn crate::calls::Driver {
        &mut self.drivers[process]
    }
    fn exit(&mut self, process: ProcessIndex) -> DriverResult<()> {
        self.log.borrow_mut().push(format!("exit {process}"));
        match &self.exit_error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
    fn begin_step(&mut self, step: usize) {
        self.log.borrow_mut().push(format!("step {step}"));
    }
    fn hazards(&self) -> Option<Vec<Hazard>> {
        self.hazards.clone()
    }
    fn shutdown(&mut self) {
        self.log.borrow_mut().push("shutdown".to_string());
    }
}

fn scenario(src: &str) -> Scenario {
    match parse(src, Path::new("t.ipc")) {
        Ok(s) => s,
        Err(e) => panic!("test scenario does not parse: {e}"),
    }
}

fn opts(dialect: Dialect) -> ExecOptions {
    ExecOptions {
        dialect,
        seed: 7,
        ..ExecOptions::default()
    }
}

fn run(src: &str, drivers: Vec<MockDriver>, dialect: Dialect) -> Execution {
    let mut m = MockMachine::new(drivers);
    execute_on(&scenario(src), &mut m, &opts(dialect))
}

fn api(dialect: Dialect, kind: ErrorKind) -> DriverError {
    DriverError::Api(ApiError::new(dialect, kind))
}

fn outcome(e: &Execution, i: usize) -> &StepOutcome {
    &e.trace.steps[i].outcome
}

fn passed(e: &Execution, i: usize) -> bool {
    e.trace.steps[i].check.as_ref().is_some_and(|c| c.passed)
}

fn ptr_label(e: &Execution, i: usize) -> String {
    match outcome(e, i) {
        StepOutcome::Ok {
            value: ValueSummary::Ptr { label },
        } => label.clone(),
        other => panic!("step {i}: expected a pointer, got {other:?}"),
    }
}

const HANDLE: IpcMemHandle = IpcMemHandle([0x5a; 64]);

/// owner allocates, exports and sends; peer opens twice.
const OPEN_TWICE: &str = "\
devices 1
process owner device=0
process peer device=0
owner: a = malloc 2MiB
owner: h = ipc_get a
owner: send h -> peer
peer: p = ipc_open h
peer: q = ipc_open h => EXPECT
peer: read q 0 4 => any
";

fn owner_exports() -> MockDriver {
    let mut owner = MockDriver::new();
    owner
        .expect_alloc()
        .withf(|k, s| *k == MemKind::Device && *s == 2 << 20)
        .times(1)
        .returning(|_, _| Ok(DevicePtr(0x7f00_0000_0000)));
    owner
        .expect_ipc_get_mem_handle()
        .withf(|p, o| *p == DevicePtr(0x7f00_0000_0000) && *o == OutArg::Valid)
        .times(1)
        .returning(|_, _| Ok(HANDLE));
    owner
}

/// A peer whose first ipc_open succeeds and whose second returns `second`.
fn peer_opening(second: DriverResult<DevicePtr>, reads: usize) -> MockDriver {
    let mut peer = MockDriver::new();
    let mut seq = Sequence::new();
    peer.expect_ipc_open_mem_handle()
        .withf(|h, f, o| *h == HANDLE && *f == 1 && *o == OutArg::Valid)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(DevicePtr(0x9000_0000)));
    peer.expect_ipc_open_mem_handle()
        .times(1)
        .in_sequence(&mut seq)
        .returning(move |_, _, _| second.clone());
    peer.expect_read()
        .times(reads)
        .returning(|_, n| Ok(vec![0xab; n as usize]));
    peer
}

#[rstest]
#[case::runtime_by_dialect_name(
    Dialect::Runtime,
    "cudaErrorMapBufferObjectFailed",
    ErrorKind::MapFailed,
    "cudaErrorMapBufferObjectFailed",
    205
)]
#[case::runtime_by_kind(
    Dialect::Runtime,
    "MapFailed",
    ErrorKind::MapFailed,
    "cudaErrorMapBufferObjectFailed",
    205
)]
#[case::driver_by_runtime_name(
    Dialect::Driver,
    "cudaErrorMapBufferObjectFailed",
    ErrorKind::MapFailed,
    "CUDA_ERROR_MAP_FAILED",
    205
)]
#[case::runtime_too_many_peers(
    Dialect::Runtime,
    "CUDA_ERROR_TOO_MANY_PEERS",
    ErrorKind::TooManyPeers,
    "cudaErrorTooManyPeers",
    711
)]
#[case::driver_too_many_peers(
    Dialect::Driver,
    "cudaErrorTooManyPeers",
    ErrorKind::TooManyPeers,
    "CUDA_ERROR_TOO_MANY_PEERS",
    711
)]
fn injected_open_errors_are_recorded_with_dialect_names(
    #[case] dialect: Dialect,
    #[case] written: &str,
    #[case] kind: ErrorKind,
    #[case] name: &str,
    #[case] code: i32,
) {
    let src = OPEN_TWICE.replace("EXPECT", written);
    let e = run(
        &src,
        vec![owner_exports(), peer_opening(Err(api(dialect, kind)), 0)],
        dialect,
    );
    assert_eq!(
        outcome(&e, 4),
        &StepOutcome::Error {
            code,
            name: name.to_string()
        }
    );
    assert!(passed(&e, 4));
    // `q` was never bound: the read is skipped and the scenario fails there.
    assert!(
        matches!(outcome(&e, 5), StepOutcome::Skipped { reason } if reason.contains("'q' was never bound"))
    );
    assert!(!passed(&e, 5));
    assert_eq!(e.verdict.status, Status::Fail);
    assert!(
        e.verdict
            .message
            .starts_with("t.ipc:9: step 'read q 0 4' in peer: skipped: 'q' was never bound"),
        "{}",
        e.verdict.message
    );
    assert!(e.verdict.message.ends_with("(seed 7)"));
}

#[test]
fn unexpected_error_fails_with_the_first_failure_message() {
    let src = OPEN_TWICE.replace("EXPECT", "ok");
    let e = run(
        &src,
        vec![
            owner_exports(),
            peer_opening(Err(api(Dialect::Runtime, ErrorKind::TooManyPeers)), 0),
        ],
        Dialect::Runtime,
    );
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.verdict.message,
        "t.ipc:8: step 'q = ipc_open h flags=lazy' in peer: expected ok, got cudaErrorTooManyPeers (seed 7)"
    );
    let check = e.trace.steps[4]
        .check
        .clone()
        .unwrap_or_else(|| panic!("no check"));
    assert_eq!(check.expected, "ok");
    assert_eq!(check.message, "expected ok, got cudaErrorTooManyPeers");
}

#[test]
fn unexpected_success_names_the_label() {
    let src = OPEN_TWICE.replace("EXPECT", "cudaErrorInvalidValue");
    let e = run(
        &src,
        vec![owner_exports(), peer_opening(Ok(DevicePtr(0x9100_0000)), 1)],
        Dialect::Runtime,
    );
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.trace.steps[4].check.as_ref().map(|c| c.message.as_str()),
        Some("expected cudaErrorInvalidValue, got ok (peer.p2)")
    );
}

#[test]
fn reopening_to_the_same_address_gets_the_same_label() {
    let src = OPEN_TWICE.replace("EXPECT", "ok, == p");
    let e = run(
        &src,
        vec![owner_exports(), peer_opening(Ok(DevicePtr(0x9000_0000)), 1)],
        Dialect::Runtime,
    );
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    assert_eq!(ptr_label(&e, 0), "owner.p1");
    assert_eq!(ptr_label(&e, 3), "peer.p1");
    assert_eq!(ptr_label(&e, 4), "peer.p1");
    assert_eq!(
        outcome(&e, 1),
        &StepOutcome::Ok {
            value: ValueSummary::Handle { label: "h1".into() }
        }
    );
    assert_eq!(
        outcome(&e, 5),
        &StepOutcome::Ok {
            value: ValueSummary::Bytes {
                pattern: "ab*4".into()
            }
        }
    );
    // Traces never carry raw addresses.
    let json = serde_json::to_string(&e.trace).unwrap_or_default();
    for raw in [
        "9000",
        "7f00",
        &0x9000_0000u64.to_string(),
        &0x7f00_0000_0000u64.to_string(),
    ] {
        assert!(!json.contains(raw), "{raw} in {json}");
    }
}

#[test]
fn a_different_address_gets_a_new_label_and_fails_equality() {
    let src = OPEN_TWICE.replace("EXPECT", "ok, == p");
    let e = run(
        &src,
        vec![owner_exports(), peer_opening(Ok(DevicePtr(0x9100_0000)), 1)],
        Dialect::Runtime,
    );
    assert_eq!(ptr_label(&e, 4), "peer.p2");
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.trace.steps[4].check.as_ref().map(|c| c.message.as_str()),
        Some("expected == p (peer.p1), got ok (peer.p2)")
    );
    let src = OPEN_TWICE.replace("EXPECT", "!= p");
    let e = run(
        &src,
        vec![owner_exports(), peer_opening(Ok(DevicePtr(0x9100_0000)), 1)],
        Dialect::Runtime,
    );
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
}

#[test]
fn null_pointers_contexts_and_handles_are_labelled() {
    let src = "\
devices 1
process a device=0
a: c = ctx_current
a: d = primary_ctx 0
a: e = ctx_create 0 => != d
a: c2 = ctx_current => == e
a: z = handle_zero
a: z2 = handle_zero => == z
a: f = handle_flip z 3 => != z
a: n = offset null 0 => == null
a: ctx_set c
";
    let mut d = MockDriver::new();
    let mut seq = Sequence::new();
    d.expect_current_context()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(None));
    d.expect_primary_context().returning(|_| Ok(ContextId(11)));
    d.expect_create_context().returning(|_| Ok(ContextId(12)));
    d.expect_current_context()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(Some(ContextId(12))));
    let e = run(src, vec![d], Dialect::Runtime);
    let labels: Vec<String> = e
        .trace
        .steps
        .iter()
        .map(|s| match &s.outcome {
            StepOutcome::Ok { value } => match value {
                ValueSummary::Context { label }
                | ValueSummary::Handle { label }
                | ValueSummary::Ptr { label } => label.clone(),
                other => format!("{other:?}"),
            },
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        labels[..8],
        ["null", "a.c1", "a.c2", "a.c2", "h1", "h1", "h2", "null"]
    );
    // ctx_set of a null context cannot be expressed: skipped, and a failure.
    assert!(matches!(outcome(&e, 8), StepOutcome::Skipped { reason } if reason.contains("null")));
    assert_eq!(e.verdict.status, Status::Fail);
    assert!(
        e.verdict.message.starts_with("t.ipc:11:"),
        "{}",
        e.verdict.message
    );
}

#[test]
fn ctx_set_null_passes_the_null_context() {
    let src = "\
devices 1
process a device=0
a: ctx_set null
a: c = ctx_current => == null
";
    let mut d = MockDriver::new();
    d.expect_set_current_context()
        .withf(|c| *c == ContextId(0))
        .times(1)
        .returning(|_| Ok(()));
    d.expect_current_context().returning(|| Ok(None));
    let e = run(src, vec![d], Dialect::Driver);
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    assert_eq!(e.trace.steps[0].op, "ctx_set null");
}

#[test]
fn bytes_are_run_length_encoded_and_compared() {
    let src = "\
devices 1
process a device=0
a: p = malloc 64
a: read p 0 64 => bytes ab*16 00*48
a: device_read p 0 64 => bytes ab*16 00*47 01
";
    let mut d = MockDriver::new();
    d.expect_alloc().returning(|_, _| Ok(DevicePtr(0x1000)));
    let data = {
        let mut v = vec![0xab; 16];
        v.extend([0u8; 48]);
        v
    };
    let d1 = data.clone();
    d.expect_read()
        .withf(|p, n| *p == DevicePtr(0x1000) && *n == 64)
        .returning(move |_, _| Ok(d1.clone()));
    d.expect_device_read()
        .returning(move |_, _| Ok(data.clone()));
    let e = run(src, vec![d], Dialect::Runtime);
    assert_eq!(
        outcome(&e, 1),
        &StepOutcome::Ok {
            value: ValueSummary::Bytes {
                pattern: "ab*16 00*48".into()
            }
        }
    );
    assert!(passed(&e, 1));
    assert!(!passed(&e, 2));
    assert_eq!(
        e.trace.steps[2].check.as_ref().map(|c| c.message.as_str()),
        Some("expected bytes ab*16 00*47 01, got ok (bytes ab*16 00*48)")
    );
}

#[test]
fn data_ops_call_the_driver_with_resolved_arguments() {
    let src = "\
devices 1
process a device=0
a: p = malloc_managed 4KiB
a: fill p 0xab
a: fill p 0xcd at=16
a: fill p 0xef at=8 len=2
a: q = offset p 32
a: write q 4 01 02*3
a: free p
a: h = malloc_host 16
a: free_host h
a: s = malloc_async 1MiB
a: free_async s
";
    let mut d = MockDriver::new();
    let mut seq = Sequence::new();
    d.expect_alloc()
        .withf(|k, s| *k == MemKind::Managed && *s == 4096)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(DevicePtr(0x1000)));
    d.expect_memset()
        .withf(|p, v, n| *p == DevicePtr(0x1000) && *v == 0xab && *n == 4096)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(()));
    d.expect_memset()
        .withf(|p, v, n| *p == DevicePtr(0x1010) && *v == 0xcd && *n == 4096 - 16)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(()));
    d.expect_memset()
        .withf(|p, v, n| *p == DevicePtr(0x1008) && *v == 0xef && *n == 2)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _| Ok(()));
    d.expect_write()
        .withf(|p, b| *p == DevicePtr(0x1024) && b == [1, 2, 2, 2])
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(()));
    d.expect_free()
        .withf(|k, p| *k == FreeKind::Device && *p == DevicePtr(0x1000))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(()));
    d.expect_alloc()
        .withf(|k, s| *k == MemKind::PinnedHost && *s == 16)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(DevicePtr(0x2000)));
    d.expect_free()
        .withf(|k, p| *k == FreeKind::Host && *p == DevicePtr(0x2000))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(()));
    d.expect_alloc()
        .withf(|k, s| *k == MemKind::StreamOrdered && *s == 1 << 20)
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(DevicePtr(0x3000)));
    d.expect_free()
        .withf(|k, p| *k == FreeKind::StreamOrdered && *p == DevicePtr(0x3000))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(()));
    let e = run(src, vec![d], Dialect::Driver);
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    assert_eq!(ptr_label(&e, 4), "a.p2");
    assert_eq!(e.trace.steps[3].op, "fill p 0xef at=8 len=2");
}

#[test]
fn queries_and_their_expectations() {
    let src = "\
devices 2
process a device=1
a: n = device_count => value 2
a: attr 0 compute_capability_major => value 9
a: set_device 1
a: p = malloc 2MiB
a: r = address_range p => ok, base == p, size 2MiB, == p
a: pointer_attr p => type device, device 1
a: pointer_attr null => type unregistered
a: address_range p => size 1MiB
";
    let mut d = MockDriver::new();
    d.expect_device_count().returning(|| Ok(2));
    d.expect_device_attribute()
        .withf(|dev, a| *dev == 0 && *a == crate::driver::DeviceAttribute::ComputeCapabilityMajor)
        .returning(|_, _| Ok(9));
    d.expect_set_device()
        .withf(|dev| *dev == 1)
        .returning(|_| Ok(()));
    d.expect_alloc().returning(|_, _| Ok(DevicePtr(0x4000)));
    d.expect_address_range()
        .returning(|_| Ok((DevicePtr(0x4000), 2 << 20)));
    d.expect_pointer_info().returning(|p| {
        Ok(if p == DevicePtr::NULL {
            PointerInfo {
                memory_type: MemoryType::Unregistered,
                device: None,
            }
        } else {
            PointerInfo {
                memory_type: MemoryType::Device,
                device: Some(1),
            }
        })
    });
    let e = run(src, vec![d], Dialect::Runtime);
    assert!((0..7).all(|i| passed(&e, i)), "{:#?}", e.trace.steps);
    assert_eq!(
        outcome(&e, 4),
        &StepOutcome::Ok {
            value: ValueSummary::Range {
                base: "a.p1".into(),
                size: 2 << 20
            }
        }
    );
    assert_eq!(
        outcome(&e, 5),
        &StepOutcome::Ok {
            value: ValueSummary::PointerInfo {
                memory_type: "device".into(),
                device: Some(1)
            }
        }
    );
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.verdict.message,
        "t.ipc:10: step 'address_range p' in a: expected size 1MiB, got ok (base a.p1, size 2097152) (seed 7)"
    );
}

const CRASHY: &str = "\
devices 1
process owner device=0
process peer device=0
owner: a = malloc 1MiB
owner: h = ipc_get a
owner: send h -> peer
peer: p = ipc_open h => EXPECT
peer: read p 0 4
peer: handle_zero
owner: free a
";

fn crash_run(loss: DriverError, expect: &str) -> Execution {
    let mut owner = owner_exports_1mib();
    owner.expect_free().times(1).returning(|_, _| Ok(()));
    let mut peer = MockDriver::new();
    peer.expect_ipc_open_mem_handle()
        .times(1)
        .returning(move |_, _, _| Err(loss.clone()));
    run(
        &CRASHY.replace("EXPECT", expect),
        vec![owner, peer],
        Dialect::Runtime,
    )
}

fn owner_exports_1mib() -> MockDriver {
    let mut owner = MockDriver::new();
    owner.expect_alloc().returning(|_, _| Ok(DevicePtr(0x7000)));
    owner
        .expect_ipc_get_mem_handle()
        .returning(|_, _| Ok(HANDLE));
    owner
}

#[test]
fn a_crash_skips_the_process_and_gives_a_crash_verdict() {
    let loss = DriverError::Lost(ProcessLoss::Crashed {
        signal: Some(11),
        exit_code: None,
        detail: "SIGSEGV".into(),
    });
    let e = crash_run(loss, "ok");
    assert!(matches!(outcome(&e, 3), StepOutcome::Crash { detail } if detail.contains("SIGSEGV")));
    assert!(
        matches!(outcome(&e, 4), StepOutcome::Skipped { reason } if reason == "process 'peer' crashed at line 7")
    );
    assert!(matches!(outcome(&e, 5), StepOutcome::Skipped { .. }));
    // Other processes keep running.
    assert_eq!(
        outcome(&e, 6),
        &StepOutcome::Ok {
            value: ValueSummary::Unit
        }
    );
    assert_eq!(e.verdict.status, Status::Crash);
    let m = &e.verdict.message;
    assert!(
        m.starts_with("t.ipc:7: step 'p = ipc_open h flags=lazy' in peer: process crashed"),
        "{m}"
    );
    assert!(m.contains("SIGSEGV") && m.ends_with("(seed 7)"), "{m}");
}

#[test]
fn a_crash_with_any_is_still_a_crash() {
    let loss = DriverError::Lost(ProcessLoss::Crashed {
        signal: None,
        exit_code: Some(3),
        detail: "exit".into(),
    });
    let e = crash_run(loss, "any");
    assert!(passed(&e, 3));
    assert_eq!(e.verdict.status, Status::Crash);
}

#[test]
fn a_timeout_gives_a_timeout_verdict() {
    let e = crash_run(
        DriverError::Lost(ProcessLoss::TimedOut { after_ms: 20000 }),
        "ok",
    );
    assert_eq!(outcome(&e, 3), &StepOutcome::Timeout { after_ms: 20000 });
    assert!(
        matches!(outcome(&e, 4), StepOutcome::Skipped { reason } if reason.contains("timed out"))
    );
    assert_eq!(e.verdict.status, Status::Timeout);
    assert!(
        e.verdict.message.contains("timed out after 20000 ms"),
        "{}",
        e.verdict.message
    );
    assert!(e.verdict.message.contains("in peer") && e.verdict.message.contains("(seed 7)"));
}

#[test]
fn a_harness_error_is_broken() {
    let e = crash_run(DriverError::Harness("protocol desync".into()), "ok");
    assert_eq!(
        outcome(&e, 3),
        &StepOutcome::Broken {
            detail: "protocol desync".into()
        }
    );
    assert_eq!(e.verdict.status, Status::Broken);
    assert!(e.verdict.message.contains("protocol desync"));
}

#[test]
fn an_earlier_failed_expectation_wins_over_a_later_crash() {
    let src = "\
devices 1
process a device=0
a: device_count => value 3
a: p = malloc 1
";
    let mut d = MockDriver::new();
    d.expect_device_count().returning(|| Ok(1));
    d.expect_alloc().returning(|_, _| {
        Err(DriverError::Lost(ProcessLoss::Crashed {
            signal: Some(9),
            exit_code: None,
            detail: "killed".into(),
        }))
    });
    let e = run(src, vec![d], Dialect::Runtime);
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.verdict.message,
        "t.ipc:3: step 'device_count' in a: expected value 3, got ok (value 1) (seed 7)"
    );
    assert!(matches!(outcome(&e, 1), StepOutcome::Crash { .. }));
}

#[rstest]
#[case::runtime_ok(Dialect::Runtime, Ok(()), true)]
#[case::runtime_error(Dialect::Runtime, Err(ErrorKind::InvalidValue), false)]
#[case::driver_error(Dialect::Driver, Err(ErrorKind::InvalidValue), true)]
#[case::driver_ok(Dialect::Driver, Ok(()), false)]
#[case::hip_takes_the_runtime_arm(Dialect::Hip, Ok(()), true)]
#[case::hip_error(Dialect::Hip, Err(ErrorKind::InvalidValue), false)]
fn dialect_arms_select_by_the_run_dialect(
    #[case] dialect: Dialect,
    #[case] close: Result<(), ErrorKind>,
    #[case] pass: bool,
) {
    let src = "\
devices 1
process a device=0
a: p = malloc 1
a: ipc_close p => runtime: ok; driver: CUDA_ERROR_INVALID_VALUE
a: ipc_close p => driver: error
";
    let mut d = MockDriver::new();
    d.expect_alloc().returning(|_, _| Ok(DevicePtr(0x10)));
    d.expect_ipc_close_mem_handle()
        .returning(move |_| close.map_err(|k| api(dialect, k)));
    let e = run(src, vec![d], dialect);
    assert_eq!(passed(&e, 1), pass, "{:?}", e.trace.steps[1]);
    let check = e.trace.steps[1]
        .check
        .clone()
        .unwrap_or_else(|| panic!("no check"));
    let expected = match dialect {
        Dialect::Runtime | Dialect::Hip => "ok",
        Dialect::Driver => "CUDA_ERROR_INVALID_VALUE",
    };
    assert_eq!(check.expected, expected);
    // A missing arm means `any` (hip takes the runtime arm, missing here too).
    if dialect != Dialect::Driver {
        assert!(passed(&e, 2));
        assert_eq!(
            e.trace.steps[2].check.as_ref().map(|c| c.expected.as_str()),
            Some("any")
        );
    }
}

#[test]
fn unknown_codes_match_only_generic_errors() {
    let src = "\
devices 1
process a device=0
a: p = malloc 1
a: free p => error
a: free p => InvalidValue
";
    let mut d = MockDriver::new();
    d.expect_alloc().returning(|_, _| Ok(DevicePtr(0x10)));
    d.expect_free().returning(|_, _| {
        Err(DriverError::Api(ApiError::from_code(
            Dialect::Runtime,
            4242,
        )))
    });
    let e = run(src, vec![d], Dialect::Runtime);
    assert_eq!(
        outcome(&e, 1),
        &StepOutcome::Error {
            code: 4242,
            name: "cudaError(4242)".into()
        }
    );
    assert!(passed(&e, 1));
    assert!(!passed(&e, 2));
}

fn hazard(kind: HazardKind, step: usize) -> Hazard {
    Hazard {
        kind,
        process: 0,
        step: Some(step),
        detail: String::new(),
    }
}

#[rstest]
#[case::logged(Some(vec![hazard(HazardKind::FreeWhileMapped, 0)]), "expect hazard free-while-mapped", Status::Pass, "")]
#[case::not_logged(Some(vec![hazard(HazardKind::AccessAfterClose, 0)]), "expect hazard free-while-mapped", Status::Fail, "t.ipc:4: expected hazard free-while-mapped, got hazards: access-after-close in a at line 3 (seed 7)")]
#[case::empty_log(Some(vec![]), "expect no-hazards", Status::Pass, "")]
#[case::non_empty_log(Some(vec![hazard(HazardKind::MappingLeakedAtExit, 0)]), "expect no-hazards", Status::Fail, "t.ipc:4: expected no-hazards, got hazards: mapping-leaked-at-exit in a at line 3 (seed 7)")]
#[case::hazard_with_empty_log(Some(vec![]), "expect hazard access-after-free", Status::Fail, "t.ipc:4: expected hazard access-after-free, got an empty hazard log (seed 7)")]
#[case::no_log(None, "expect hazard free-while-mapped", Status::Pass, "")]
#[case::no_log_no_hazards(None, "expect no-hazards", Status::Pass, "")]
fn hazard_expectations(
    #[case] log: Option<Vec<Hazard>>,
    #[case] line: &str,
    #[case] status: Status,
    #[case] message: &str,
) {
    let src = format!("devices 1\nprocess a device=0\na: device_count\n{line}\n");
    let mut d = MockDriver::new();
    d.expect_device_count().returning(|| Ok(1));
    let mut m = MockMachine::new(vec![d]);
    m.hazards = log.clone();
    let e = execute_on(&scenario(&src), &mut m, &opts(Dialect::Runtime));
    assert_eq!(e.verdict.status, status, "{}", e.verdict.message);
    assert_eq!(e.verdict.message, message);
    assert_eq!(e.trace.hazards, log);
    assert_eq!(e.trace.hazard_checks.len(), 1);
    let c = &e.trace.hazard_checks[0];
    assert_eq!(c.expected, line.trim_start_matches("expect "));
    if log.is_none() {
        assert!(c.passed);
        assert_eq!(c.message, "unchecked: backend has no hazard log");
    }
}

#[test]
fn begin_step_and_exit_reach_the_machine() {
    let src = "\
devices 1
process a device=0
process b device=0
a: h = handle_random
a: send h -> b
a: exit
b: exit
";
    let mut m = MockMachine::new(vec![MockDriver::new(), MockDriver::new()]);
    let log = m.log.clone();
    let e = execute_on(&scenario(src), &mut m, &opts(Dialect::Runtime));
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    assert_eq!(
        *log.borrow(),
        ["step 0", "step 1", "step 2", "exit 0", "step 3", "exit 1"]
    );
}

#[test]
fn exit_errors_are_outcomes() {
    let src = "devices 1\nprocess a device=0\na: exit\n";
    let mut m = MockMachine::new(vec![MockDriver::new()]);
    m.exit_error = Some(DriverError::Lost(ProcessLoss::Crashed {
        signal: Some(6),
        exit_code: None,
        detail: "abort at exit".into(),
    }));
    let e = execute_on(&scenario(src), &mut m, &opts(Dialect::Runtime));
    assert_eq!(e.verdict.status, Status::Crash);
}

#[test]
fn random_handles_are_deterministic_and_reach_the_driver() {
    assert_eq!(random_handle(7, 3), random_handle(7, 3));
    assert_ne!(random_handle(7, 3), random_handle(8, 3));
    assert_ne!(random_handle(7, 3), random_handle(7, 4));
    assert_ne!(random_handle(0, 0), IpcMemHandle::ZERO);
    let src = "\
devices 1
process a device=0
a: h = handle_random
a: g = handle_flip h 63
a: ipc_open g flags=0 => InvalidValue
a: ipc_open h out=null => InvalidValue
";
    let mut d = MockDriver::new();
    let mut flipped = random_handle(7, 0);
    flipped.0[63] ^= 0xff;
    d.expect_ipc_open_mem_handle()
        .withf(move |h, f, o| *h == flipped && *f == 0 && *o == OutArg::Valid)
        .times(1)
        .returning(|_, _, _| Err(api(Dialect::Runtime, ErrorKind::InvalidValue)));
    d.expect_ipc_open_mem_handle()
        .withf(|h, f, o| *h == random_handle(7, 0) && *f == 1 && *o == OutArg::Null)
        .times(1)
        .returning(|_, _, _| Err(api(Dialect::Runtime, ErrorKind::InvalidValue)));
    let e = run(src, vec![d], Dialect::Runtime);
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
}

#[test]
fn a_machine_with_too_few_processes_is_broken() {
    let src = "devices 1\nprocess a device=0\nprocess b device=0\na: device_count\n";
    let e = run(src, vec![MockDriver::new()], Dialect::Runtime);
    assert_eq!(e.verdict.status, Status::Broken);
    assert!(e.trace.steps.is_empty());
}

/// A backend that hands out one prepared machine (or a start error).
struct OneShot {
    machine: RefCell<Option<Result<MockMachine, StartError>>>,
    spec: RefCell<Option<MachineSpec>>,
}

impl Backend for OneShot {
    fn name(&self) -> &str {
        "mock"
    }
    fn info(&self) -> BackendInfo {
        BackendInfo::default()
    }
    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        *self.spec.borrow_mut() = Some(spec.clone());
        match self.machine.borrow_mut().take() {
            Some(Ok(m)) => Ok(Box::new(m)),
            Some(Err(e)) => Err(e),
            None => Err(StartError::Harness("started twice".into())),
        }
    }
    fn has_hazard_log(&self) -> bool {
        false
    }
}

#[test]
fn execute_starts_runs_and_shuts_down() {
    let src = "devices 2\nprocess a device=1 visible=1,0\na: device_count => value 2\n";
    let mut d = MockDriver::new();
    d.expect_device_count().returning(|| Ok(2));
    let m = MockMachine::new(vec![d]);
    let log = m.log.clone();
    let backend = OneShot {
        machine: RefCell::new(Some(Ok(m))),
        spec: RefCell::new(None),
    };
    let o = ExecOptions {
        dialect: Dialect::Driver,
        seed: 99,
        step_timeout: std::time::Duration::from_secs(3),
    };
    let e = execute(&scenario(src), &backend, &o);
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    assert_eq!(log.borrow().last().map(String::as_str), Some("shutdown"));
    let spec = backend
        .spec
        .borrow()
        .clone()
        .unwrap_or_else(|| panic!("not started"));
    assert_eq!(spec.devices, 2);
    assert_eq!(spec.dialect, Dialect::Driver);
    assert_eq!(spec.seed, 99);
    assert_eq!(spec.step_timeout, std::time::Duration::from_secs(3));
    assert_eq!(spec.processes[0].visible_devices, Some(vec![1, 0]));
}

#[rstest]
#[case::not_supported(StartError::NotSupported("needs 2 GPUs, found 1".into()), Status::NotSupported)]
#[case::harness(StartError::Harness("spawn failed".into()), Status::Broken)]
fn execute_reports_start_errors(#[case] err: StartError, #[case] status: Status) {
    let src = "devices 2\nprocess a device=0\na: device_count\n";
    let backend = OneShot {
        machine: RefCell::new(Some(Err(err))),
        spec: RefCell::new(None),
    };
    let e = execute(&scenario(src), &backend, &ExecOptions::default());
    assert_eq!(e.verdict.status, status);
    assert!(e.trace.steps.is_empty());
    match status {
        Status::NotSupported => assert_eq!(e.verdict.message, "needs 2 GPUs, found 1"),
        _ => assert!(e.verdict.message.contains("spawn failed")),
    }
}

#[test]
fn event_ops_call_the_driver_and_label_events_and_event_handles() {
    use crate::driver::{EventId, IpcEventHandle};
    let src = "\
devices 1
process a device=0
process b device=0
a: e = event_create flags=interprocess,disable_timing
a: eh = ipc_get_event e
a: send eh -> b
b: x = ipc_open_event eh
a: event_record e
b: event_query x => NotReady
b: event_elapsed x x => InvalidHandle
b: stream_wait x
b: z = event_handle_zero => != eh
";
    let h = IpcEventHandle([0xc9; 64]);
    let mut a = MockDriver::new();
    a.expect_dialect().return_const(Dialect::Runtime);
    a.expect_event_create()
        .withf(|&f| f == 0x6)
        .returning(|_| Ok(EventId(0x10)));
    a.expect_ipc_get_event_handle()
        .withf(|&e, &o| e == EventId(0x10) && o == OutArg::Valid)
        .returning(move |_, _| Ok(h));
    a.expect_event_record()
        .withf(|&e| e == EventId(0x10))
        .returning(|_| Ok(()));
    let mut b = MockDriver::new();
    b.expect_dialect().return_const(Dialect::Runtime);
    b.expect_ipc_open_event_handle()
        .withf(move |&x, &out| x == h && out == OutArg::Valid)
        .returning(|_, _| Ok(EventId(0x20)));
    b.expect_event_query()
        .returning(|_| Err(ApiError::new(Dialect::Runtime, ErrorKind::NotReady).into()));
    b.expect_event_elapsed()
        .returning(|_, _| Err(ApiError::new(Dialect::Runtime, ErrorKind::InvalidHandle).into()));
    b.expect_stream_wait_event()
        .withf(|&e| e == EventId(0x20))
        .returning(|_| Ok(()));
    let e = run(src, vec![a, b], Dialect::Runtime);
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    let values: Vec<Option<ValueSummary>> = e
        .trace
        .steps
        .iter()
        .map(|s| match &s.outcome {
            StepOutcome::Ok { value } => Some(value.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        values[0],
        Some(ValueSummary::Event {
            label: "a.e1".into()
        })
    );
    assert_eq!(
        values[1],
        Some(ValueSummary::Handle {
            label: "eh1".into()
        })
    );
    assert_eq!(
        values[3],
        Some(ValueSummary::Event {
            label: "b.e1".into()
        })
    );
    assert_eq!(
        values[8],
        Some(ValueSummary::Handle {
            label: "eh2".into()
        })
    );
}

/// A step with a name that was never bound (its binding step failed) is
/// skipped as such, whichever of its names it is, and calls nothing (the
/// mock driver expects one call, the failed malloc).
#[test]
fn unbound_names_skip_as_never_bound_wherever_they_are() {
    let src = "\
devices 1
process a device=0
a: p = offset null 16
a: q = malloc 4KiB => any
a: copy p q 16 => any
a: copy q p 16 => any
";
    let mut d = MockDriver::new();
    d.expect_alloc()
        .times(1)
        .returning(|_, _| Err(api(Dialect::Runtime, ErrorKind::OutOfMemory)));
    let e = run(src, vec![d], Dialect::Runtime);
    let reason = |i| match outcome(&e, i) {
        StepOutcome::Skipped { reason } => reason.clone(),
        other => panic!("step {i}: expected a skip, got {other:?}"),
    };
    let never = "'q' was never bound (the step at line 4 did not succeed)";
    assert_eq!(reason(2), never);
    assert_eq!(reason(3), never);
}
