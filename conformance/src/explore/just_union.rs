//! A weighted choice among fixed values that draws and shrinks exactly as
//! `prop_oneof![w => Just(v), ...]`, without its trees' weight.
//!
//! proptest's union keeps, for every option before the one drawn, a lazy
//! tree holding a whole forked `TestRunner` (drawn only if shrinking moves
//! there), so a choice among a few values is a tree of a kilobyte or more,
//! copied into its box and dropped with every action. An option that is a
//! `Just` draws nothing from its runner: here the fork's RNG is still
//! taken from the runner (`TestRunner::new_rng`, what the fork takes), so
//! the runner is left as proptest's union leaves it, and the tree is the
//! values and three positions. Shrinking moves to earlier options as
//! proptest 1.x's `TupleUnionValueTree` does (MIT/Apache-2.0); `tests`
//! checks that both draw, leave the runner and shrink alike.

use proptest::num::sample_uniform_incl;
use proptest::strategy::{NewTree, Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use std::fmt;
use std::sync::Arc;

/// `just_oneof![w => value, ...]` (or `just_oneof![value, ...]`, each of
/// weight 1): as `prop_oneof!` of the `Just` values.
macro_rules! just_oneof {
    ($($weight:expr => $value:expr),+ $(,)?) => {
        $crate::explore::just_union::JustUnion::new(vec![$(($weight, $value)),+])
    };
    ($($value:expr),+ $(,)?) => {
        $crate::explore::just_union::JustUnion::new(vec![$((1, $value)),+])
    };
}
pub(crate) use just_oneof;

/// The weighted values.
#[derive(Clone)]
pub struct JustUnion<T> {
    values: Arc<[T]>,
    /// The weights summed up to and including each value (rising: no
    /// weight is 0).
    cumulative: Arc<[u64]>,
}

impl<T> fmt::Debug for JustUnion<T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("JustUnion")
            .field("values", &self.values.len())
            .finish()
    }
}

impl<T> JustUnion<T> {
    /// Values with their weights (none zero, at least one, as for `Union`).
    pub fn new(weighted: Vec<(u32, T)>) -> Self {
        assert!(!weighted.is_empty(), "a union needs an option");
        assert!(
            weighted.iter().all(|&(w, _)| w > 0),
            "a union option has a weight of 0"
        );
        let cumulative = weighted
            .iter()
            .scan(0u64, |sum, &(w, _)| {
                *sum += u64::from(w);
                Some(*sum)
            })
            .collect();
        JustUnion {
            values: weighted.into_iter().map(|(_, v)| v).collect(),
            cumulative,
        }
    }
}

/// The tree of a [`JustUnion`] draw: `pick` is the value in use.
pub struct JustUnionTree<T> {
    values: Arc<[T]>,
    pick: usize,
    min_pick: usize,
    prev_pick: Option<usize>,
}

impl<T> fmt::Debug for JustUnionTree<T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("JustUnionTree")
            .field("pick", &self.pick)
            .field("min_pick", &self.min_pick)
            .field("prev_pick", &self.prev_pick)
            .finish()
    }
}

impl<T: Clone + fmt::Debug> Strategy for JustUnion<T> {
    type Tree = JustUnionTree<T>;
    type Value = T;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        // As `Union`: a uniform draw in [0, total) and the number of
        // cumulative weights at or below it.
        let total = self.cumulative[self.cumulative.len() - 1];
        let drawn = sample_uniform_incl(runner, 0u64, total - 1);
        let pick = self.cumulative.partition_point(|&v| v <= drawn);
        // proptest forks the runner for each option passed over; a fork
        // takes its RNG from the runner's, and a `Just` draws nothing.
        for _ in 0..pick {
            runner.new_rng();
        }
        Ok(JustUnionTree {
            values: Arc::clone(&self.values),
            pick,
            min_pick: 0,
            prev_pick: None,
        })
    }
}

impl<T: Clone + fmt::Debug> ValueTree for JustUnionTree<T> {
    type Value = T;

    fn current(&self) -> T {
        self.values[self.pick].clone()
    }

    /// A `Just` does not simplify: move to the option before, if any.
    fn simplify(&mut self) -> bool {
        if self.pick == self.min_pick {
            return false;
        }
        self.prev_pick = Some(self.pick);
        self.pick -= 1;
        true
    }

    fn complicate(&mut self) -> bool {
        match self.prev_pick.take() {
            Some(pick) => {
                self.pick = pick;
                self.min_pick = pick;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng};

    fn runner(seed: u8) -> TestRunner {
        TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::XorShift, &[seed; 16]),
        )
    }

    /// Values and a shrinking walk of `tree`: simplify while it can, with
    /// a complicate every fifth move, recording every value.
    fn walk<V: fmt::Debug>(tree: &mut dyn ValueTree<Value = V>) -> Vec<String> {
        let mut seen = vec![format!("{:?}", tree.current())];
        for round in 0..12 {
            let moved = if round % 5 == 4 {
                tree.complicate()
            } else {
                tree.simplify()
            };
            seen.push(format!("{moved} {:?}", tree.current()));
        }
        seen
    }

    /// Draw with both from runners of one seed: the same walk, and the
    /// runners left alike (their next draws are equal).
    fn same_as_prop_oneof<T: Clone + fmt::Debug + PartialEq>(
        ours: &JustUnion<T>,
        reference: &BoxedStrategy<T>,
    ) -> std::collections::BTreeSet<String> {
        let mut values = std::collections::BTreeSet::new();
        for seed in 0..=255u8 {
            let (mut a, mut b) = (runner(seed), runner(seed));
            let mut ours_tree = ours.new_tree(&mut a).unwrap();
            let mut reference_tree = reference.new_tree(&mut b).unwrap();
            values.insert(format!("{:?}", ours_tree.current()));
            assert_eq!(
                walk(&mut ours_tree),
                walk(&mut reference_tree),
                "seed {seed}"
            );
            assert_eq!(a.rng().next_u64(), b.rng().next_u64(), "seed {seed}");
        }
        values
    }

    #[test]
    fn draws_and_shrinks_as_prop_oneof_of_justs() {
        let weighted = just_oneof![20 => 'a', 1 => 'b', 1 => 'c', 1 => 'd'];
        let reference =
            prop_oneof![20 => Just('a'), 1 => Just('b'), 1 => Just('c'), 1 => Just('d')];
        assert_eq!(
            same_as_prop_oneof(&weighted, &reference.boxed()).len(),
            4,
            "every value drawn"
        );
        let even = just_oneof![1u8, 2, 3, 4];
        let reference = prop_oneof![Just(1u8), Just(2), Just(3), Just(4)];
        assert_eq!(same_as_prop_oneof(&even, &reference.boxed()).len(), 4);
        let two = just_oneof![3 => 2usize, 1 => 3];
        let reference = prop_oneof![3 => Just(2usize), 1 => Just(3usize)];
        assert_eq!(same_as_prop_oneof(&two, &reference.boxed()).len(), 2);
    }

    /// Inside a tuple, later draws see the runner as proptest's union left it.
    #[test]
    fn later_draws_in_a_tuple_are_unchanged() {
        let ours = (
            just_oneof![6 => 0u8, 1 => 1, 1 => 2],
            any::<u32>(),
            0u16..900,
        );
        let reference = (
            prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
            any::<u32>(),
            0u16..900,
        );
        for seed in 0..=255u8 {
            let a = ours.new_tree(&mut runner(seed)).unwrap().current();
            let b = reference.new_tree(&mut runner(seed)).unwrap().current();
            assert_eq!(a, b, "seed {seed}");
        }
    }
}
