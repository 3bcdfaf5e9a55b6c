//! The same pool tests on a real GPU: each role in its own OS process (this
//! test binary re-runs itself once per role). `#[ignore]`d with the reason,
//! so a machine without a GPU lists them as skipped; on a GPU host:
//! `cargo test -p ipc-example-buffer-pool --test gpu -- --include-ignored`.
//! Without libcuda they fail with NotSupported and the reason, never pass.
#![cfg(feature = "cuda")]

mod common;

use common::{assert_pool_correct, consumers, BUFFERS, CONSUMERS};
use ipc_example_buffer_pool::{pool_roles, Variant, BUFFER_SIZE};
use ipc_harness::roles::{CallKind, RunOptions, RunReport};
use ipc_harness::Dialect;

fn run_gpu(variant: Variant, dialect: Dialect) -> RunReport {
    let report = pool_roles(variant, CONSUMERS, BUFFERS)
        .dialect(dialect)
        .run_in_processes(&RunOptions::from_env(1))
        .unwrap_or_else(|e| panic!("cannot run on the GPU: {e:?}"));
    // Kept in the log (with --nocapture): what the hardware run left.
    println!("{variant:?} {dialect:?}: {report}");
    println!(
        "final state: {}",
        serde_json::to_string(&report.final_state).unwrap_or_default()
    );
    report
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-buffer-pool --test gpu -- --include-ignored)"]
fn gpu_the_correct_pool_is_clean_runtime_dialect() {
    assert_pool_correct(&run_gpu(Variant::Correct, Dialect::Runtime));
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-buffer-pool --test gpu -- --include-ignored)"]
fn gpu_the_correct_pool_is_clean_driver_dialect() {
    assert_pool_correct(&run_gpu(Variant::Correct, Dialect::Driver));
}

/// No hazard log on hardware, but the final state still shows the mistake.
#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-buffer-pool --test gpu -- --include-ignored)"]
fn gpu_opening_without_the_cache_leaves_mappings_open() {
    let report = run_gpu(Variant::NoCache, Dialect::Runtime);
    assert!(report.all_ok(), "{report}");
    for c in consumers() {
        let s = report.state(&c).unwrap();
        assert_eq!(s.calls_of(CallKind::IpcOpenMemHandle), 2 * BUFFERS as usize);
        assert_eq!(s.mappings.len(), BUFFERS as usize, "{report}");
    }
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-buffer-pool --test gpu -- --include-ignored)"]
fn gpu_sharing_a_sub_allocated_buffer_exposes_its_neighbours() {
    let report = run_gpu(Variant::SubAllocated, Dialect::Runtime);
    assert!(report.all_ok(), "{report}");
    for c in consumers() {
        assert_eq!(
            report.state(&c).unwrap().widest_mapping(),
            BUFFER_SIZE * u64::from(BUFFERS),
            "{report}"
        );
    }
}

#[test]
#[ignore = "needs a GPU (cargo test -p ipc-example-buffer-pool --test gpu -- --include-ignored)"]
fn gpu_closing_from_the_wrong_process_leaves_the_consumers_mappings_open() {
    let report = run_gpu(Variant::CloseFromOwner, Dialect::Runtime);
    assert!(report.all_ok(), "{report}");
    let owner = report.state("owner").unwrap();
    assert_eq!(
        owner.calls_of(CallKind::IpcCloseMemHandle),
        CONSUMERS * BUFFERS as usize
    );
    for c in consumers() {
        assert_eq!(
            report.state(&c).unwrap().mappings.len(),
            BUFFERS as usize,
            "{report}"
        );
    }
}
