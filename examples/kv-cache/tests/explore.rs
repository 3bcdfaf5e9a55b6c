//! proptest: the correct handoff stays clean under arbitrary schedules and
//! injected failures of the consumer's opens (it declines, and the producer
//! frees); the same exploration finds the unsynchronised read.

use ipc_example_kv_cache::{kv_roles, Variant, WRITTEN_BYTE};
use ipc_harness::roles::strategies::{fault_plans, run_options};
use ipc_harness::roles::{CallKind, Fault, RunOptions};
use ipc_harness::{ErrorKind, HazardKind};
use ipc_mock_driver::SimBackend;
use proptest::prelude::*;

fn open_faults() -> BoxedStrategy<Vec<Fault>> {
    fault_plans(
        vec![
            ("consumer".to_string(), CallKind::IpcOpenMemHandle),
            ("consumer".to_string(), CallKind::IpcOpenEventHandle),
        ],
        vec![
            ErrorKind::TooManyPeers,
            ErrorKind::InvalidHandle,
            ErrorKind::MapFailed,
        ],
        1,
        2,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_correct_handoff_survives_any_schedule_and_failed_opens(opts in run_options(open_faults())) {
        let report = kv_roles(Variant::Correct).run(&SimBackend::default(), &opts).unwrap();
        prop_assert!(report.is_clean(), "{}", report);
        prop_assert_eq!(report.outcome("producer").and_then(|o| o.value()), Some(&serde_json::json!("freed")));
        let read = report.outcome("consumer").and_then(|o| o.value()).cloned();
        let declined = !opts.faults.is_empty();
        if declined {
            prop_assert_eq!(read, Some(serde_json::json!("declined")));
        } else {
            prop_assert_eq!(read, Some(serde_json::json!(WRITTEN_BYTE)));
        }
    }

    #[test]
    fn exploring_finds_the_unsynchronised_read(seed in any::<u64>()) {
        let report = kv_roles(Variant::NoEventWait)
            .run(&SimBackend::default(), &RunOptions::seeded(seed))
            .unwrap();
        prop_assert!(!report.hazards_of(HazardKind::UnsynchronizedRead).is_empty(), "{}", report);
    }
}
