//! `repeat N` steps and list bindings (`e[]`): parse, print, errors, and runs
//! against `MockDriver`.

use super::*;
use crate::calls::MockDriver;
use crate::driver::{DriverError, EventId, IpcEventHandle, OutArg};
use crate::errors::{ApiError, Dialect, ErrorKind};
use crate::machine::{Hazard, ProcessIndex};
use crate::trace::{Status, StepOutcome, ValueSummary};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const EVENTS: &str = "\
devices 1
process owner device=0
process peer device=0
owner: repeat 3 e[] = event_create flags=interprocess,disable_timing
owner: repeat 3 eh[] = ipc_get_event e[]
owner: repeat 3 send eh[] -> peer
peer: repeat 3 x[] = ipc_open_event eh[] => EXPECT
";

fn parsed(src: &str) -> Scenario {
    match parse(src, Path::new("t.ipc")) {
        Ok(s) => s,
        Err(e) => panic!("test scenario does not parse: {e}"),
    }
}

fn parse_error(src: &str) -> String {
    match parse(src, Path::new("t.ipc")) {
        Ok(_) => panic!("expected a parse error for:\n{src}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn repeat_steps_parse_and_print_back_to_the_same_steps() {
    let s = parsed(&EVENTS.replace("EXPECT", "ok"));
    let repeats: Vec<Option<u32>> = s.steps.iter().map(|s| s.repeat).collect();
    assert_eq!(repeats, [Some(3); 4]);
    assert_eq!(
        s.steps[0].text(),
        "repeat 3 e[] = event_create flags=disable_timing,interprocess"
    );
    assert_eq!(s.steps[3].text(), "repeat 3 x[] = ipc_open_event eh[]");
    // Printing each step and parsing the print gives the same steps.
    let mut printed = String::from("devices 1\nprocess owner device=0\nprocess peer device=0\n");
    for step in &s.steps {
        let proc = &s.processes[step.process].name;
        printed.push_str(&format!("{proc}: {}\n", step.text()));
    }
    let again = parsed(&printed);
    let strip = |s: &Scenario| -> Vec<(Option<u32>, Option<String>, Op)> {
        s.steps
            .iter()
            .map(|s| (s.repeat, s.bind.clone(), s.op.clone()))
            .collect()
    };
    assert_eq!(strip(&again), strip(&s));
}

#[test]
fn a_binding_named_repeat_is_still_a_binding() {
    let s = parsed("devices 1\nprocess a device=0\na: repeat = malloc 1\n");
    assert_eq!(s.steps[0].repeat, None);
    assert_eq!(s.steps[0].bind.as_deref(), Some("repeat"));
}

#[test]
fn list_misuse_is_a_clear_parse_error() {
    let head = "devices 1\nprocess a device=0\n";
    let cases = [
        (
            "a: repeat 2 e = event_create\n",
            "a repeat step binds a list: expected 'e[]', found 'e'",
        ),
        (
            "a: e[] = event_create\n",
            "only a repeat step binds a list such as 'e[]'",
        ),
        (
            "a: repeat 2 e[] = event_create\na: event_record e[]\n",
            "list 'e[]' holds 2 elements: use it in a 'repeat 2' step",
        ),
        (
            "a: repeat 2 e[] = event_create\na: repeat 3 event_record e[]\n",
            "list 'e[]' holds 2 elements: use it in a 'repeat 2' step",
        ),
        (
            "a: repeat 0 e[] = event_create\n",
            "expected a repeat count from 1 to 1000000, found 0",
        ),
        (
            "a: repeat 2 e[] = event_create\na: repeat 2 f[] = event_create => == e[]\n",
            "a list ('e[]') cannot be compared",
        ),
    ];
    for (steps, message) in cases {
        let err = parse_error(&format!("{head}{steps}"));
        assert!(err.contains(message), "{steps:?}: got {err}");
    }
}

/// A machine over mock drivers, for the executor.
struct Machine2 {
    drivers: Vec<MockDriver>,
}

impl crate::machine::Machine for Machine2 {
    fn process_count(&self) -> usize {
        self.drivers.len()
    }
    fn driver(&mut self, process: ProcessIndex) -> &mut dyn crate::calls::Driver {
        &mut self.drivers[process]
    }
    fn exit(&mut self, _process: ProcessIndex) -> crate::driver::DriverResult<()> {
        Ok(())
    }
    fn begin_step(&mut self, _step: usize) {}
    fn hazards(&self) -> Option<Vec<Hazard>> {
        None
    }
    fn shutdown(&mut self) {}
}

/// An owner making distinct events and handles; a peer whose opens succeed
/// until `fail_at` (1-based), which is OutOfMemory.
fn drivers(fail_at: Option<u64>) -> (Vec<MockDriver>, Arc<AtomicU64>) {
    let mut owner = MockDriver::new();
    let made = Arc::new(AtomicU64::new(0));
    owner
        .expect_event_create()
        .times(3)
        .returning(move |_| Ok(EventId(0x100 + made.fetch_add(1, Ordering::SeqCst))));
    owner
        .expect_ipc_get_event_handle()
        .withf(|_, o| *o == OutArg::Valid)
        .times(3)
        .returning(|e, _| Ok(IpcEventHandle([e.0 as u8; 64])));
    let mut peer = MockDriver::new();
    let opens = Arc::new(AtomicU64::new(0));
    let counted = opens.clone();
    peer.expect_ipc_open_event_handle().returning(move |h, _| {
        let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
        if Some(n) == fail_at {
            return Err(DriverError::Api(ApiError::new(
                Dialect::Runtime,
                ErrorKind::OutOfMemory,
            )));
        }
        Ok(EventId(0x900 + u64::from(h.0[0])))
    });
    (vec![owner, peer], opens)
}

fn execute(src: &str, fail_at: Option<u64>) -> (Execution, u64) {
    let (drivers, opens) = drivers(fail_at);
    let mut m = Machine2 { drivers };
    let opts = ExecOptions {
        dialect: Dialect::Runtime,
        seed: 7,
        ..ExecOptions::default()
    };
    let e = super::execute_on(&parsed(src), &mut m, &opts);
    (e, opens.load(Ordering::SeqCst))
}

#[test]
fn every_iteration_runs_with_its_own_elements_and_one_record_is_kept() {
    let (e, opens) = execute(&EVENTS.replace("EXPECT", "ok"), None);
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    assert_eq!(opens, 3);
    assert_eq!(e.trace.steps.len(), 4);
    // The last iteration's value: three distinct handles were made.
    match &e.trace.steps[1].outcome {
        StepOutcome::Ok {
            value: ValueSummary::Handle { label },
        } => assert_eq!(label, "eh3"),
        other => panic!("expected a handle, got {other:?}"),
    }
}

#[test]
fn the_first_failing_iteration_stops_the_step_and_is_named() {
    let (e, opens) = execute(&EVENTS.replace("EXPECT", "ok"), Some(2));
    assert_eq!(opens, 2, "the step stops at its first failing iteration");
    assert_eq!(e.verdict.status, Status::Fail);
    assert_eq!(
        e.verdict.message,
        "t.ipc:7: step 'repeat 3 x[] = ipc_open_event eh[]' in peer: \
         iteration 2 of 3 (1 passed): expected ok, got cudaErrorMemoryAllocation (seed 7)"
    );
    assert!(matches!(
        e.trace.steps[3].outcome,
        StepOutcome::Error { .. }
    ));
}

#[test]
fn an_expectation_that_accepts_the_error_runs_every_iteration() {
    let (e, opens) = execute(&EVENTS.replace("EXPECT", "any"), Some(2));
    assert_eq!(e.verdict.status, Status::Pass, "{}", e.verdict.message);
    assert_eq!(opens, 3);
}
