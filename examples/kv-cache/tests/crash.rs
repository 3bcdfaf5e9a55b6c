//! The consumer's recovery when the producer's process crashes
//! (`RunOptions::with_crash`), at each of the producer's calls: the
//! consumer never hangs, releases what it opened, and says the producer
//! was lost; a crash after the consumer's acknowledgement changes nothing
//! for it.

use ipc_example_kv_cache::{kv_roles, Variant, PRODUCER_LOST, WRITTEN_BYTE};
use ipc_harness::roles::{CallKind, RoleOutcome, RunOptions, RunReport};
use ipc_harness::Dialect;
use ipc_mock_driver::SimBackend;

const SEEDS: u64 = 16;

/// The producer's calls in order, and whether the consumer has
/// acknowledged the block by then.
const PRODUCER_CALLS: [(CallKind, bool); 8] = [
    (CallKind::Alloc, false),
    (CallKind::EventCreate, false),
    (CallKind::IpcGetMemHandle, false),
    (CallKind::IpcGetEventHandle, false),
    (CallKind::SlowFill, false),
    (CallKind::EventRecord, false),
    (CallKind::EventDestroy, true),
    (CallKind::Free, true),
];

fn run_with_crash(dialect: Dialect, seed: u64, at: CallKind) -> RunReport {
    kv_roles(Variant::Correct)
        .dialect(dialect)
        .run(
            &SimBackend::default(),
            &RunOptions::seeded(seed).with_crash("producer", at, 1),
        )
        .expect("the machine starts")
}

#[test]
fn the_consumer_recovers_from_a_producer_crash_at_every_call() {
    for dialect in [Dialect::Runtime, Dialect::Driver] {
        for (at, acknowledged) in PRODUCER_CALLS {
            for seed in 0..SEEDS {
                let report = run_with_crash(dialect, seed, at);
                assert_eq!(
                    report.outcome("producer"),
                    Some(&RoleOutcome::Lost(format!(
                        "crashed at {at:?} number 1 (planned)"
                    ))),
                    "{report}"
                );
                let want = if acknowledged {
                    serde_json::json!(WRITTEN_BYTE)
                } else {
                    serde_json::json!(PRODUCER_LOST)
                };
                assert_eq!(
                    report.outcome("consumer").and_then(RoleOutcome::value),
                    Some(&want),
                    "crash at {at:?}: {report}"
                );
                let consumer = report.state("consumer").expect("the consumer's state");
                assert!(consumer.leaks().is_empty(), "crash at {at:?}: {report}");
                // What the consumer cannot avoid, not knowing the producer
                // died: an open its death makes the driver refuse (handled
                // by declining), or the event handle opened after the death
                // (the exporter's event went with its process: undefined,
                // logged as event-after-exporter-destroy).
                for problem in report.problems() {
                    assert!(
                        problem.starts_with("undeclared driver error in consumer: IpcOpen")
                            || problem
                                .starts_with("hazard event-after-exporter-destroy in consumer"),
                        "crash at {at:?}: {problem}\n{report}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_crash_after_export_is_seen_by_the_consumer_as_a_lost_producer() {
    // The producer exported and sent both handles, then died before its
    // kernel: some schedules open the block before the death, some after.
    let mut opened_before = 0;
    for seed in 0..SEEDS {
        let report = run_with_crash(Dialect::Runtime, seed, CallKind::SlowFill);
        let consumer = report.state("consumer").expect("the consumer's state");
        if consumer.calls_of(CallKind::IpcCloseMemHandle) == 1 {
            opened_before += 1;
            assert_eq!(consumer.calls_of(CallKind::EventDestroy), 1, "{report}");
        }
        assert!(
            !report
                .events
                .iter()
                .any(|e| e.contains("deadlock") || e.contains("timeout")),
            "{report}"
        );
    }
    assert!(opened_before > 0, "no schedule opened before the crash");
}
