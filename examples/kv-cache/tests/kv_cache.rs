//! The handoff on the simulator: the correct variant is clean in both CUDA
//! dialects under many seeds; every broken variant fails `assert_clean`
//! with a message that names its mistake, in every seed.

use ipc_example_kv_cache::{kv_roles, Variant, WRITTEN_BYTE};
use ipc_harness::roles::{CallKind, RunOptions, RunReport};
use ipc_harness::{Dialect, ErrorKind};
use ipc_mock_driver::SimBackend;

const SEEDS: u64 = 32;

fn run(variant: Variant, dialect: Dialect, seed: u64) -> RunReport {
    kv_roles(variant)
        .dialect(dialect)
        .run(&SimBackend::default(), &RunOptions::seeded(seed))
        .expect("the machine starts")
}

/// What `assert_clean` would panic with (its first lines), or `None` if
/// the run is clean.
fn assert_clean_message(report: &RunReport) -> Option<String> {
    let problems = report.problems();
    (!problems.is_empty()).then(|| problems.join("\n"))
}

#[test]
fn the_correct_handoff_is_clean_and_reads_the_kernels_bytes() {
    for dialect in [Dialect::Runtime, Dialect::Driver] {
        for seed in 0..SEEDS {
            let report = run(Variant::Correct, dialect, seed);
            report.assert_clean();
            assert_eq!(
                report.outcome("consumer").and_then(|o| o.value()),
                Some(&serde_json::json!(WRITTEN_BYTE)),
                "{report}"
            );
            assert_eq!(
                report.outcome("producer").and_then(|o| o.value()),
                Some(&serde_json::json!("freed"))
            );
        }
    }
}

/// Each broken variant, and the words its `assert_clean` message must hold
/// (any one of them, where the schedule decides which way it goes wrong).
fn expected_words(variant: Variant) -> &'static [&'static str] {
    match variant {
        Variant::Correct => &[],
        Variant::FreeBeforeConsumerClose => &[
            "hazard free-while-mapped",
            "undeclared driver error in consumer: IpcOpenMemHandle",
        ],
        Variant::NoEventWait => &["hazard unsynchronized-read"],
        Variant::DoubleClose => &["hazard double-close"],
        Variant::Leak => &["leak in producer: allocation"],
        Variant::IgnoredError => {
            &["undeclared driver error in consumer: IpcCloseMemHandle returned InvalidValue"]
        }
        Variant::OpenFromSecondContext => &["role consumer failed: IpcOpenMemHandle failed with"],
        // The race, naming the kernel's stream.
        Variant::RecordOnWrongStream => {
            &["hazard unsynchronized-read in consumer: producer wrote these bytes on stream 0x"]
        }
    }
}

/// The early free is a race: in a schedule where the consumer is done
/// before the producer frees, nothing goes wrong (and nothing can be seen).
fn racy(variant: Variant) -> bool {
    variant == Variant::FreeBeforeConsumerClose
}

#[test]
fn every_broken_variant_fails_assert_clean_naming_its_mistake() {
    for variant in Variant::ALL.into_iter().filter(|v| *v != Variant::Correct) {
        for dialect in [Dialect::Runtime, Dialect::Driver] {
            let mut caught = 0;
            for seed in 0..SEEDS {
                let report = run(variant, dialect, seed);
                let Some(message) = assert_clean_message(&report) else {
                    assert!(racy(variant), "{variant:?} passed assert_clean:\n{report}");
                    continue;
                };
                caught += 1;
                assert!(
                    expected_words(variant).iter().any(|w| message.contains(w)),
                    "{variant:?} [{dialect:?}, seed {seed}]: the message does not name the mistake:\n{message}"
                );
            }
            // Racy or not, most schedules expose it.
            assert!(
                caught * 4 >= SEEDS * 3,
                "{variant:?} [{dialect:?}]: caught in {caught} of {SEEDS} seeds"
            );
        }
    }
}

#[test]
fn the_double_close_is_also_an_ignored_error_and_the_leak_names_the_event() {
    let report = run(Variant::DoubleClose, Dialect::Runtime, 1);
    let consumer = report.state("consumer").unwrap();
    let ignored = consumer.unexpected_errors();
    assert_eq!(ignored.len(), 1, "{report}");
    assert_eq!(ignored[0].call, CallKind::IpcCloseMemHandle);
    assert_eq!(ignored[0].kind, Some(ErrorKind::InvalidValue));

    let report = run(Variant::Leak, Dialect::Runtime, 1);
    let leaks: Vec<String> = report
        .state("producer")
        .unwrap()
        .leaks()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(leaks.len(), 2, "{leaks:?}");
    assert!(leaks[0].starts_with("allocation"), "{leaks:?}");
    assert!(leaks[1].starts_with("event"), "{leaks:?}");
}

/// The event recorded on the wrong stream: `assert_clean` names the race,
/// the process and the stream the kernel ran on, and the consumer read
/// the old bytes, not the kernel's.
#[test]
fn a_record_on_the_wrong_stream_is_reported_with_the_stream_named() {
    for dialect in [Dialect::Runtime, Dialect::Driver] {
        let report = run(Variant::RecordOnWrongStream, dialect, 2);
        let problems = report.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0],
            "hazard unsynchronized-read in consumer: producer wrote these bytes on stream \
             0x57000010 (the 1st stream producer created, non-blocking), and this read, on \
             the legacy default stream, is not ordered after that write (no wait on an event \
             recorded on that stream after it, no synchronization with it)"
        );
        assert_ne!(
            report.outcome("consumer").and_then(|o| o.value()),
            Some(&serde_json::json!(WRITTEN_BYTE)),
            "{report}"
        );
    }
}

#[test]
fn a_failure_carries_the_call_and_the_dialect_neutral_kind() {
    for dialect in [Dialect::Runtime, Dialect::Driver] {
        let report = run(Variant::OpenFromSecondContext, dialect, 3);
        let failure = report
            .outcome("consumer")
            .and_then(|o| o.failure())
            .unwrap_or_else(|| panic!("the consumer did not fail:\n{report}"));
        assert_eq!(failure.call, Some(CallKind::IpcOpenMemHandle), "{report}");
        assert!(failure.kind.is_some(), "{report}");
        assert_eq!(report.failed_with("consumer"), failure.kind);
    }
}

#[test]
fn the_event_list_says_who_called_and_what_it_returned() {
    let report = run(Variant::DoubleClose, Dialect::Runtime, 5);
    let harness_range = report
        .events
        .iter()
        .find(|e| e.contains("AddressRange"))
        .unwrap_or_else(|| panic!("no address-range call:\n{report}"));
    assert!(harness_range.contains("(harness) -> ok"), "{harness_range}");
    assert!(
        report
            .events
            .iter()
            .any(|e| e.contains("consumer IpcCloseMemHandle -> cudaErrorInvalidValue")),
        "{report}"
    );
}

#[test]
fn a_declared_error_and_a_declared_keep_are_clean() {
    use ipc_harness::roles::{Kept, RoleSet};
    use ipc_harness::{FreeKind, MemKind};
    let roles = RoleSet::new().role("p", 0, |ctx| {
        let a = ctx.driver().alloc(MemKind::Device, 2 << 20)?;
        let kept = ctx.driver().alloc(MemKind::Device, 2 << 20)?;
        ctx.driver().free(FreeKind::Device, a)?;
        ctx.expect_error(ErrorKind::InvalidValue);
        let second = ctx.driver().free(FreeKind::Device, a);
        ctx.keep(Kept::Allocation(kept.0));
        Ok(serde_json::json!(second.is_err()))
    });
    let report = roles
        .run(&SimBackend::default(), &RunOptions::seeded(1))
        .unwrap();
    // The double free is still a hazard: declaring the error does not make
    // the call right.
    let problems = report.problems();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("hazard double-free"), "{problems:?}");
}
