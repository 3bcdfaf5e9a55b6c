//! proptest: the correct pool under arbitrary schedules and injected
//! failures of the consumers' opens stays clean: no hazard, every buffer
//! freed, every mapping closed. A failing case prints its seed and
//! schedule; proptest shrinks a `Choices` schedule toward the simplest one.

use ipc_example_buffer_pool::{pool_roles, Variant};
use ipc_harness::roles::strategies::{fault_plans, run_options};
use ipc_harness::roles::CallKind;
use ipc_harness::{ErrorKind, HazardKind};
use ipc_mock_driver::SimBackend;
use proptest::prelude::*;

const BUFFERS: u32 = 3;

fn open_faults() -> BoxedStrategy<Vec<ipc_harness::roles::Fault>> {
    fault_plans(
        ["consumer-0", "consumer-1"]
            .map(|c| (c.to_string(), CallKind::IpcOpenMemHandle))
            .to_vec(),
        vec![
            ErrorKind::TooManyPeers,
            ErrorKind::InvalidHandle,
            ErrorKind::OutOfMemory,
        ],
        BUFFERS as usize,
        2,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_correct_pool_survives_any_schedule_and_failed_opens(opts in run_options(open_faults())) {
        let report = pool_roles(Variant::Correct, 2, BUFFERS).run(&SimBackend::default(), &opts).unwrap();
        prop_assert!(report.is_clean(), "{}", report);
        prop_assert_eq!(report.outcome("owner").and_then(|o| o.value()), Some(&serde_json::json!({ "freed": BUFFERS })));
        for c in ["consumer-0", "consumer-1"] {
            prop_assert!(report.state(c).unwrap().mappings.is_empty(), "{}", report);
        }
    }

    /// The same exploration finds the early free in the broken pool.
    #[test]
    fn exploring_finds_the_early_free(seeds in prop::collection::vec(any::<u64>(), 32)) {
        let found = seeds.iter().any(|&s| {
            let r = pool_roles(Variant::FreeOnFirstRelease, 2, BUFFERS)
                .run(&SimBackend::default(), &ipc_harness::roles::RunOptions::seeded(s))
                .unwrap();
            !r.hazards_of(HazardKind::FreeWhileMapped).is_empty() || !r.all_ok()
        });
        prop_assert!(found);
    }
}
