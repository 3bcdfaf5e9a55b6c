//! A weighted union of boxed strategies that draws exactly what
//! `proptest::strategy::Union` draws from the same runner, and shrinks the
//! same way, at a fraction of the cost.
//!
//! proptest's union keeps, for every option before the one drawn, a whole
//! forked `TestRunner` (its config cloned, two maps, an `Arc`) in a vector
//! sized one short, so every draw also regrows it. Here an option passed over
//! keeps only its forked RNG (`TestRunner::new_rng`, which advances the
//! runner's RNG exactly as the fork does), and the runner is built from it
//! only when shrinking moves to that option. The explore generator draws
//! about 20 actions a case through such a union, and these forks were a
//! third of a case's instructions.
//!
//! The draw and the shrinking steps mirror proptest 1.x's `Union::new_tree`
//! and `UnionValueTree` (MIT/Apache-2.0); `tests` checks that both give the
//! same values and the same shrinking sequence.

use proptest::num::sample_uniform_incl;
use proptest::strategy::{BoxedStrategy, NewTree, Strategy, ValueTree};
use proptest::test_runner::{Config, TestRng, TestRunner};
use std::fmt;
use std::sync::Arc;

/// `lean_oneof![w => strategy, ...]`: as `prop_oneof!` with more than ten
/// weighted options (which builds a `Union` of boxed strategies).
macro_rules! lean_oneof {
    ($($weight:expr => $item:expr),+ $(,)?) => {
        $crate::explore::lean_union::LeanUnion::new_weighted(vec![
            $(($weight, proptest::strategy::Strategy::boxed($item))),+
        ])
    };
}
pub(crate) use lean_oneof;

/// The weighted options.
pub struct LeanUnion<T> {
    options: Vec<(u32, Arc<BoxedStrategy<T>>)>,
    total_weight: u64,
}

impl<T> Clone for LeanUnion<T> {
    fn clone(&self) -> Self {
        LeanUnion {
            options: self.options.clone(),
            total_weight: self.total_weight,
        }
    }
}

impl<T> fmt::Debug for LeanUnion<T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("LeanUnion")
            .field("options", &self.options.len())
            .field("total_weight", &self.total_weight)
            .finish()
    }
}

impl<T: fmt::Debug> LeanUnion<T> {
    /// Options with their weights (none zero, at least one, as for `Union`).
    pub fn new_weighted(options: Vec<(u32, BoxedStrategy<T>)>) -> Self {
        assert!(!options.is_empty(), "a union needs an option");
        assert!(
            options.iter().all(|&(w, _)| w > 0),
            "a union option has a weight of 0"
        );
        let total_weight = options.iter().map(|&(w, _)| u64::from(w)).sum();
        LeanUnion {
            options: options.into_iter().map(|(w, s)| (w, Arc::new(s))).collect(),
            total_weight,
        }
    }
}

/// One option's tree: drawn, deferred (its forked RNG), or failed to draw.
// Slots are built in place in a vector sized for them: boxing the RNG would
// cost an allocation for every option passed over.
#[allow(clippy::large_enum_variant)]
enum Slot<T> {
    Drawn(Box<dyn ValueTree<Value = T>>),
    Deferred(TestRng),
    Failed,
}

/// The tree of a [`LeanUnion`] draw: `pick` is the option in use.
pub struct LeanUnionTree<T> {
    strategies: Vec<Arc<BoxedStrategy<T>>>,
    slots: Vec<Slot<T>>,
    /// The drawing runner's config, for the runner of a deferred option.
    config: Option<Arc<Config>>,
    pick: usize,
    min_pick: usize,
    prev_pick: Option<usize>,
}

impl<T> fmt::Debug for LeanUnionTree<T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("LeanUnionTree")
            .field("pick", &self.pick)
            .field("min_pick", &self.min_pick)
            .field("prev_pick", &self.prev_pick)
            .finish()
    }
}

impl<T: fmt::Debug> Strategy for LeanUnion<T> {
    type Tree = LeanUnionTree<T>;
    type Value = T;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        // As `Union`: a uniform draw in [0, total) and the number of
        // cumulative weights at or below it.
        let drawn = sample_uniform_incl(runner, 0u64, self.total_weight - 1);
        let pick = self
            .options
            .iter()
            .scan(0u64, |sum, &(w, _)| {
                *sum += u64::from(w);
                Some(*sum)
            })
            .filter(|&v| v <= drawn)
            .count();
        let mut slots = Vec::with_capacity(pick + 1);
        // Each option passed over forks the runner's RNG, as `Union` does.
        for _ in 0..pick {
            slots.push(Slot::Deferred(runner.new_rng()));
        }
        slots.push(Slot::Drawn(self.options[pick].1.new_tree(runner)?));
        let config = (pick > 0).then(|| Arc::new(runner.config().clone()));
        Ok(LeanUnionTree {
            strategies: self.options[..=pick]
                .iter()
                .map(|(_, s)| Arc::clone(s))
                .collect(),
            slots,
            config,
            pick,
            min_pick: 0,
            prev_pick: None,
        })
    }
}

impl<T: fmt::Debug> LeanUnionTree<T> {
    fn drawn(&self, at: usize) -> &dyn ValueTree<Value = T> {
        match &self.slots[at] {
            Slot::Drawn(t) => t.as_ref(),
            _ => panic!("the option in use ({at}) must be drawn"),
        }
    }

    fn drawn_mut(&mut self, at: usize) -> &mut dyn ValueTree<Value = T> {
        match &mut self.slots[at] {
            Slot::Drawn(t) => t.as_mut(),
            _ => panic!("the option in use ({at}) must be drawn"),
        }
    }

    /// Draw a deferred option from its forked RNG; whether it is drawn.
    fn draw(&mut self, at: usize) -> bool {
        if let Slot::Deferred(_) = self.slots[at] {
            let Slot::Deferred(rng) = std::mem::replace(&mut self.slots[at], Slot::Failed) else {
                unreachable!("matched above")
            };
            let config = self
                .config
                .as_deref()
                .cloned()
                .unwrap_or_else(Config::default);
            let mut runner = TestRunner::new_with_rng(config, rng);
            if let Ok(t) = self.strategies[at].new_tree(&mut runner) {
                self.slots[at] = Slot::Drawn(t);
            }
        }
        matches!(self.slots[at], Slot::Drawn(_))
    }
}

impl<T: fmt::Debug> ValueTree for LeanUnionTree<T> {
    type Value = T;

    fn current(&self) -> T {
        self.drawn(self.pick).current()
    }

    fn simplify(&mut self) -> bool {
        let pick = self.pick;
        if self.drawn_mut(pick).simplify() {
            self.prev_pick = None;
            return true;
        }
        if self.pick == self.min_pick {
            return false;
        }
        self.prev_pick = Some(self.pick);
        let mut next = self.pick;
        while next > self.min_pick {
            next -= 1;
            if self.draw(next) {
                self.pick = next;
                return true;
            }
        }
        false
    }

    fn complicate(&mut self) -> bool {
        if let Some(pick) = self.prev_pick {
            self.pick = pick;
            self.min_pick = pick;
            self.prev_pick = None;
            true
        } else {
            let pick = self.pick;
            self.drawn_mut(pick).complicate()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngAlgorithm;

    fn runner(seed: u8) -> TestRunner {
        TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::XorShift, &[seed; 16]),
        )
    }

    fn options() -> Vec<(u32, BoxedStrategy<(u8, u16)>)> {
        (0..14u8)
            .map(|k| {
                let w = u32::from(k % 4) + 1;
                (w, (Just(k), 0u16..1000).boxed())
            })
            .collect()
    }

    /// Values and a shrinking walk of `tree`: simplify while it can, then
    /// complicate once and simplify again, recording every value.
    fn walk<V: fmt::Debug>(tree: &mut dyn ValueTree<Value = V>) -> Vec<String> {
        let mut seen = vec![format!("{:?}", tree.current())];
        for round in 0..40 {
            let moved = if round % 5 == 4 {
                tree.complicate()
            } else {
                tree.simplify()
            };
            seen.push(format!("{moved} {:?}", tree.current()));
        }
        seen
    }

    #[test]
    fn draws_and_shrinks_as_proptests_union() {
        let lean = LeanUnion::new_weighted(options());
        let reference = proptest::strategy::Union::new_weighted(options());
        let mut differing_picks = std::collections::BTreeSet::new();
        for seed in 0..=255u8 {
            let (mut a, mut b) = (runner(seed), runner(seed));
            let mut lean_tree = lean.new_tree(&mut a).unwrap();
            let mut reference_tree = reference.new_tree(&mut b).unwrap();
            differing_picks.insert(lean_tree.current().0);
            assert_eq!(
                walk(&mut lean_tree),
                walk(&mut reference_tree),
                "seed {seed}"
            );
            // Both runners are left in the same state.
            assert_eq!(a.rng().next_u64(), b.rng().next_u64(), "seed {seed}");
        }
        // The seeds reached most options, so deferred ones were drawn.
        assert!(differing_picks.len() >= 10, "{differing_picks:?}");
    }

    #[test]
    fn a_vector_of_lean_unions_draws_as_one_of_unions() {
        let lean = proptest::collection::vec(LeanUnion::new_weighted(options()), 1..30);
        let reference =
            proptest::collection::vec(proptest::strategy::Union::new_weighted(options()), 1..30);
        for seed in 0..64u8 {
            let mut lean_tree = lean.new_tree(&mut runner(seed)).unwrap();
            let mut reference_tree = reference.new_tree(&mut runner(seed)).unwrap();
            assert_eq!(
                walk(&mut lean_tree),
                walk(&mut reference_tree),
                "seed {seed}"
            );
        }
    }
}
