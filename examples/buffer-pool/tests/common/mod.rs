//! Assertions shared by the simulator and GPU tests: the same checks, on
//! whichever backend produced the report.

use ipc_example_buffer_pool::BUFFER_SIZE;
use ipc_harness::roles::{CallKind, RunReport};

pub const CONSUMERS: usize = 2;
pub const BUFFERS: u32 = 3;

pub fn consumers() -> Vec<String> {
    (0..CONSUMERS).map(|i| format!("consumer-{i}")).collect()
}

/// What a correct pool must leave behind, on any backend.
pub fn assert_pool_correct(report: &RunReport) {
    report.assert_clean();
    let owner = report.state("owner").expect("owner state");
    assert_eq!(
        report.outcome("owner").and_then(|o| o.value()),
        Some(&serde_json::json!({ "freed": BUFFERS })),
        "the owner frees every buffer:\n{report}"
    );
    assert!(owner.allocations.is_empty(), "owner leaks:\n{report}");
    for c in consumers() {
        let s = report.state(&c).expect("consumer state");
        assert_eq!(
            s.calls_of(CallKind::IpcOpenMemHandle),
            BUFFERS as usize,
            "{c} opens each handle once (the cache serves the second request):\n{report}"
        );
        assert!(s.mappings.is_empty(), "{c} closes every mapping:\n{report}");
        assert!(
            s.widest_mapping() <= BUFFER_SIZE,
            "{c} can reach {} bytes through one mapping, more than its buffer:\n{report}",
            s.widest_mapping()
        );
    }
}
