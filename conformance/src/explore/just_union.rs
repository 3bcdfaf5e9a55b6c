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

use super::lean_union::{Pick, Weights};
use proptest::prelude::Rng;
use proptest::strategy::{NewTree, Strategy, ValueTree};
use proptest::test_runner::{RngAlgorithm, TestRunner};
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
    weights: Weights,
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
        JustUnion {
            weights: Weights::new(weighted.iter().map(|&(w, _)| w)),
            values: weighted.into_iter().map(|(_, v)| v).collect(),
        }
    }
}

/// Draw an option as proptest's union does, leaving `runner` as it leaves
/// it when every option passed over is a `Just`.
fn draw_pick(weights: &Weights, runner: &mut TestRunner) -> usize {
    let pick = weights.draw(runner);
    // proptest forks the runner for each option passed over; a fork
    // takes its RNG from the runner's, and a `Just` draws nothing.
    skip_forks(runner, pick);
    pick
}

/// Leave `runner`'s RNG as `forks` calls of `runner.new_rng()` leave it.
/// A XorShift fork's seed is 16 bytes, each drawn as one `u32` of the
/// runner's RNG, and filling 64 bytes per fork draws the same `u32`s,
/// without building the forks' RNGs. The runner's config names its RNG's
/// algorithm (as for runners proptest makes and [`super::runner_for`]'s);
/// another algorithm forks as proptest does.
pub(crate) fn skip_forks(runner: &mut TestRunner, forks: usize) {
    if runner.config().rng_algorithm == RngAlgorithm::XorShift {
        let mut seeds = [0u8; 64 * 4];
        let mut left = forks * 64;
        while left > 0 {
            let n = left.min(seeds.len());
            runner.rng().fill_bytes(&mut seeds[..n]);
            left -= n;
        }
    } else {
        for _ in 0..forks {
            runner.new_rng();
        }
    }
}

/// The tree of a [`JustUnion`] draw: `pick.now` is the value in use.
#[derive(Debug)]
pub struct JustUnionTree<T> {
    values: Arc<[T]>,
    pick: Pick,
}

impl<T: Clone + fmt::Debug> Strategy for JustUnion<T> {
    type Tree = JustUnionTree<T>;
    type Value = T;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        let pick = draw_pick(&self.weights, runner);
        Ok(JustUnionTree {
            values: Arc::clone(&self.values),
            pick: Pick::new(pick),
        })
    }
}

impl<T: Clone + fmt::Debug> ValueTree for JustUnionTree<T> {
    type Value = T;

    fn current(&self) -> T {
        self.values[self.pick.now].clone()
    }

    /// A `Just` does not simplify: move to the option before, if any.
    fn simplify(&mut self) -> bool {
        self.pick.back_to(|_| true)
    }

    fn complicate(&mut self) -> bool {
        self.pick.undo_back()
    }
}

/// `prop_oneof![w => Just(v), ..., w => last]`: fixed values, then one
/// strategy as the last option. Every option passed over is a value, so
/// the draw is a [`JustUnion`]'s, and only `last` ever has a tree.
#[derive(Clone)]
pub struct JustThen<T, S> {
    values: Arc<[T]>,
    /// As [`JustUnion`]'s, `last`'s weight included.
    weights: Weights,
    last: S,
}

impl<T, S> fmt::Debug for JustThen<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("JustThen")
            .field("values", &self.values.len())
            .finish()
    }
}

impl<T, S> JustThen<T, S> {
    /// Values with their weights, then `last` with its weight (none zero).
    pub fn new(weighted: Vec<(u32, T)>, (weight, last): (u32, S)) -> Self {
        let weights = weighted.iter().map(|&(w, _)| w).chain([weight]);
        JustThen {
            weights: Weights::new(weights),
            values: weighted.into_iter().map(|(_, v)| v).collect(),
            last,
        }
    }
}

/// The tree of a [`JustThen`] draw: `pick.now` is the option in use,
/// `last` the last option's tree when the draw picked it.
pub struct JustThenTree<T, L> {
    values: Arc<[T]>,
    last: Option<L>,
    pick: Pick,
}

impl<T, L> fmt::Debug for JustThenTree<T, L> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("JustThenTree")
            .field("pick", &self.pick)
            .finish()
    }
}

impl<T: Clone + fmt::Debug, S: Strategy<Value = T>> Strategy for JustThen<T, S> {
    type Tree = JustThenTree<T, S::Tree>;
    type Value = T;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        let pick = draw_pick(&self.weights, runner);
        let last = if pick == self.values.len() {
            Some(self.last.new_tree(runner)?)
        } else {
            None
        };
        Ok(JustThenTree {
            values: Arc::clone(&self.values),
            last,
            pick: Pick::new(pick),
        })
    }
}

impl<T: Clone + fmt::Debug, L: ValueTree<Value = T>> JustThenTree<T, L> {
    /// The last option's tree, when it is the one in use.
    fn in_use(&mut self) -> Option<&mut L> {
        match &mut self.last {
            Some(t) if self.pick.now == self.values.len() => Some(t),
            _ => None,
        }
    }
}

impl<T: Clone + fmt::Debug, L: ValueTree<Value = T>> ValueTree for JustThenTree<T, L> {
    type Value = T;

    fn current(&self) -> T {
        match &self.last {
            Some(t) if self.pick.now == self.values.len() => t.current(),
            _ => self.values[self.pick.now].clone(),
        }
    }

    /// The option in use simplifies if it can (a value cannot); else move
    /// to the option before, if any.
    fn simplify(&mut self) -> bool {
        if self.in_use().is_some_and(|t| t.simplify()) {
            self.pick.forget_back();
            return true;
        }
        self.pick.back_to(|_| true)
    }

    fn complicate(&mut self) -> bool {
        self.pick.undo_back() || self.in_use().is_some_and(|t| t.complicate())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng};

    /// A XorShift runner whose config says so, as explore's are: forks
    /// passed over take [`skip_forks`]'s fast path.
    fn runner(seed: u8) -> TestRunner {
        TestRunner::new_with_rng(
            Config {
                rng_algorithm: RngAlgorithm::XorShift,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::XorShift, &[seed; 16]),
        )
    }

    /// Skipping forks leaves the runner as proptest's forks leave it, on
    /// either path.
    #[test]
    fn skipping_forks_leaves_the_runner_as_forking_does() {
        for (algorithm, len) in [(RngAlgorithm::XorShift, 16), (RngAlgorithm::ChaCha, 32)] {
            for seed in 0..=63u8 {
                for forks in 0..11 {
                    let make = || {
                        TestRunner::new_with_rng(
                            Config {
                                rng_algorithm: algorithm,
                                ..Config::default()
                            },
                            TestRng::from_seed(algorithm, &[seed; 32][..len]),
                        )
                    };
                    let (mut a, mut b) = (make(), make());
                    skip_forks(&mut a, forks);
                    for _ in 0..forks {
                        b.new_rng();
                    }
                    let next = |r: &mut TestRunner| [r.rng().next_u64(), r.rng().next_u64()];
                    assert_eq!(next(&mut a), next(&mut b), "{algorithm:?} {seed} {forks}");
                }
            }
        }
    }

    fn walk<V: fmt::Debug>(tree: &mut dyn ValueTree<Value = V>) -> Vec<String> {
        crate::explore::lean_union::tests::walk_rounds(tree, 12)
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

    #[test]
    fn values_then_a_strategy_draw_and_shrink_as_prop_oneof() {
        let ours = JustThen::new(
            vec![(6, 1u32), (2, 2), (3, 3), (1, 4)],
            (1, (100u32..65536).prop_map(|n| n * 2)),
        );
        let reference = prop_oneof![
            6 => Just(1u32),
            2 => Just(2u32),
            3 => Just(3u32),
            1 => Just(4u32),
            1 => (100u32..65536).prop_map(|n| n * 2),
        ];
        let mut last = 0;
        for seed in 0..=255u8 {
            let (mut a, mut b) = (runner(seed), runner(seed));
            let mut ours_tree = ours.new_tree(&mut a).unwrap();
            let mut reference_tree = reference.new_tree(&mut b).unwrap();
            last += usize::from(ours_tree.current() >= 200);
            assert_eq!(
                walk(&mut ours_tree),
                walk(&mut reference_tree),
                "seed {seed}"
            );
            assert_eq!(a.rng().next_u64(), b.rng().next_u64(), "seed {seed}");
        }
        assert!(last > 0, "the last option drawn");
    }
}
