//! The handoff on a real GPU: each role in its own OS process (this test
//! binary re-runs itself once per role). `#[ignore]`d with the reason, so a
//! machine without a GPU lists them as skipped; on a GPU host:
//! `cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored`.
//! Without libcuda they fail with NotSupported and the reason, never pass.
//! There is no hazard log on hardware: leaks, ignored errors and failures
//! with their error kinds still show.
#![cfg(feature = "cuda")]

use ipc_example_kv_cache::{kv_roles, Variant, PRODUCER_LOST, WRITTEN_BYTE};
use ipc_harness::roles::{CallKind, RoleOutcome, RunOptions, RunReport};
use ipc_harness::{Dialect, ErrorKind};

fn run_gpu(variant: Variant, dialect: Dialect) -> RunReport {
    let report = kv_roles(variant)
        .dialect(dialect)
        .run_in_processes(&RunOptions::from_env(1))
        .unwrap_or_else(|e| panic!("cannot run on the GPU: {e:?}"));
    println!("{variant:?} {dialect:?}: {report}");
    report
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored)"]
fn gpu_the_correct_handoff_is_clean_runtime_dialect() {
    let report = run_gpu(Variant::Correct, Dialect::Runtime);
    report.assert_clean();
    assert_eq!(
        report.outcome("consumer").and_then(|o| o.value()),
        Some(&serde_json::json!(WRITTEN_BYTE)),
        "{report}"
    );
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored)"]
fn gpu_the_correct_handoff_is_clean_driver_dialect() {
    run_gpu(Variant::Correct, Dialect::Driver).assert_clean();
}

// One `RoleSet` per test: a role's process re-runs its test and plays its
// role in the first `run_in_processes` it reaches.
#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored)"]
fn gpu_the_leak_shows() {
    let leak = run_gpu(Variant::Leak, Dialect::Runtime);
    assert!(
        leak.problems()
            .iter()
            .any(|p| p.contains("leak in producer: allocation")),
        "{leak}"
    );
}

fn assert_one_ignored_close_error(variant: Variant) {
    let report = run_gpu(variant, Dialect::Runtime);
    let ignored = report.state("consumer").unwrap().unexpected_errors();
    assert_eq!(ignored.len(), 1, "{report}");
    assert_eq!(ignored[0].call, CallKind::IpcCloseMemHandle);
    assert_eq!(ignored[0].kind, Some(ErrorKind::InvalidValue), "{report}");
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored)"]
fn gpu_the_double_close_error_shows() {
    assert_one_ignored_close_error(Variant::DoubleClose);
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored)"]
fn gpu_the_ignored_error_shows() {
    assert_one_ignored_close_error(Variant::IgnoredError);
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored)"]
fn gpu_the_second_context_open_fails_with_a_kind() {
    let report = run_gpu(Variant::OpenFromSecondContext, Dialect::Runtime);
    let failure = report
        .outcome("consumer")
        .and_then(|o| o.failure())
        .cloned();
    assert_eq!(
        failure.and_then(|f| f.call),
        Some(CallKind::IpcOpenMemHandle),
        "{report}"
    );
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-kv-cache --test gpu -- --include-ignored)"]
fn gpu_a_producer_killed_after_export_is_a_lost_producer_to_the_consumer() {
    // The producer's process raises SIGKILL before its kernel launch.
    let report = kv_roles(Variant::Correct)
        .run_in_processes(&RunOptions::from_env(1).with_crash("producer", CallKind::SlowFill, 1))
        .unwrap_or_else(|e| panic!("cannot run on the GPU: {e:?}"));
    println!("{report}");
    assert!(report.crashed_as_planned("producer"), "{report}");
    assert_eq!(
        report.outcome("consumer").and_then(RoleOutcome::value),
        Some(&serde_json::json!(PRODUCER_LOST)),
        "{report}"
    );
    let consumer = report.state("consumer").unwrap();
    assert!(consumer.leaks().is_empty(), "{report}");
}
