//! proptest strategies for exploring a protocol under many interleavings
//! and failures (feature `proptest`).
//!
//! ```ignore
//! proptest! {
//!     #[test]
//!     fn pool_survives(opts in run_options(
//!         fault_plans(vec![("consumer".into(), CallKind::IpcOpenMemHandle)],
//!                     vec![ErrorKind::TooManyPeers], 3, 1))) {
//!         let report = pool_roles().run(&SimBackend::default(), &opts).unwrap();
//!         prop_assert!(report.hazards_of(HazardKind::FreeWhileMapped).is_empty(), "{report}");
//!     }
//! }
//! ```

use super::{CallKind, Fault, RunOptions, Schedule};
use crate::errors::ErrorKind;
use proptest::prelude::*;

/// Any schedule: seeded, or an explicit list of choices (shrinks toward
/// "earliest-declared ready role first").
pub fn schedules() -> BoxedStrategy<Schedule> {
    prop_oneof![
        any::<u64>().prop_map(Schedule::Seeded),
        choice_schedules(64),
    ]
    .boxed()
}

/// Explicit choices for the first `max_points` scheduling points.
pub fn choice_schedules(max_points: usize) -> BoxedStrategy<Schedule> {
    prop::collection::vec(any::<u32>(), 0..=max_points)
        .prop_map(Schedule::Choices)
        .boxed()
}

/// Up to `max_faults` faults, each at one of `points` (role, call kind), on
/// its 1st..=`max_nth` call, failing with one of `errors`. Empty `points` or
/// `errors` give no faults.
pub fn fault_plans(
    points: Vec<(String, CallKind)>,
    errors: Vec<ErrorKind>,
    max_nth: usize,
    max_faults: usize,
) -> BoxedStrategy<Vec<Fault>> {
    if points.is_empty() || errors.is_empty() || max_nth == 0 {
        return Just(Vec::new()).boxed();
    }
    let one = (
        prop::sample::select(points),
        1..=max_nth,
        prop::sample::select(errors),
    )
        .prop_map(|((role, call), nth, error)| Fault {
            role,
            call,
            nth,
            error,
        });
    prop::collection::vec(one, 0..=max_faults).boxed()
}

/// Run options: any machine seed, any schedule, faults from `faults`.
pub fn run_options(faults: BoxedStrategy<Vec<Fault>>) -> BoxedStrategy<RunOptions> {
    (any::<u64>(), schedules(), faults)
        .prop_map(|(seed, schedule, faults)| {
            RunOptions::seeded(seed)
                .with_schedule(schedule)
                .with_faults(faults)
        })
        .boxed()
}
