//! A weighted union of boxed strategies that picks its option as
//! `proptest::strategy::Union` does and shrinks the same way, at a fraction
//! of the cost.
//!
//! proptest's union forks the runner for every option before the one drawn
//! (a whole `TestRunner`, whose RNG is seeded from 16 draws of the runner's)
//! so that shrinking can move to such an option later. Here the draw takes
//! one `u64` from the runner's RNG for all of them (only when an option is
//! passed over), and an option passed over is drawn only when shrinking
//! moves to it, from a runner whose RNG is seeded from that `u64` and the
//! option's position: each still draws from an RNG of its own, which is all
//! shrinking needs. The explore generator draws about 20 actions a case
//! through such a union, and proptest's forks were a third of a case's
//! instructions. What a seed draws differs from proptest's union (the
//! option picked is the same; what it and later draws hold is not).
//!
//! The shrinking steps mirror proptest 1.x's `UnionValueTree`
//! (MIT/Apache-2.0); `tests` checks that both pick and shrink alike.

use proptest::num::sample_uniform_incl;
use proptest::prelude::Rng;
use proptest::strategy::{BoxedStrategy, NewTree, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
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
    options: Arc<[(u32, BoxedStrategy<T>)]>,
    weights: Weights,
}

impl<T> Clone for LeanUnion<T> {
    fn clone(&self) -> Self {
        LeanUnion {
            options: Arc::clone(&self.options),
            weights: self.weights.clone(),
        }
    }
}

impl<T> fmt::Debug for LeanUnion<T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("LeanUnion")
            .field("options", &self.options.len())
            .field("total_weight", &self.weights.total())
            .finish()
    }
}

impl<T: fmt::Debug> LeanUnion<T> {
    /// Options with their weights (none zero, at least one, as for `Union`).
    pub fn new_weighted(options: Vec<(u32, BoxedStrategy<T>)>) -> Self {
        LeanUnion {
            weights: Weights::new(options.iter().map(|&(w, _)| w)),
            options: options.into(),
        }
    }
}

/// A union's weights, summed up to and including each option (rising: no
/// weight is 0), so a draw finds its option by binary search; with a
/// small total, each value a draw can take is mapped to its option once.
#[derive(Debug, Clone)]
pub(super) struct Weights {
    cumulative: Arc<[u64]>,
    /// `option[v]`: the option a draw of `v` picks, when the total is at
    /// most [`Weights::TABLE_MAX`] and the options fit a `u8` (else empty).
    option: Arc<[u8]>,
}

impl Weights {
    /// The largest total weight whose draws are tabulated.
    const TABLE_MAX: u64 = 4096;

    /// Panics, as `Union` does, without an option or on a weight of 0.
    pub(super) fn new(weights: impl Iterator<Item = u32>) -> Weights {
        let cumulative: Arc<[u64]> = weights
            .scan(0u64, |sum, w| {
                assert!(w > 0, "a union option has a weight of 0");
                *sum += u64::from(w);
                Some(*sum)
            })
            .collect();
        assert!(!cumulative.is_empty(), "a union needs an option");
        let total = cumulative[cumulative.len() - 1];
        let option = if total <= Self::TABLE_MAX && cumulative.len() <= 256 {
            (0..total)
                .map(|v| Self::search(&cumulative, v) as u8)
                .collect()
        } else {
            Arc::from([])
        };
        Weights { cumulative, option }
    }

    fn total(&self) -> u64 {
        self.cumulative[self.cumulative.len() - 1]
    }

    /// The number of cumulative weights at or below `drawn`.
    fn search(cumulative: &[u64], drawn: u64) -> usize {
        cumulative.partition_point(|&v| v <= drawn)
    }

    /// The option a draw of `drawn` (below the total) picks.
    fn option_of(&self, drawn: u64) -> usize {
        match self.option.get(drawn as usize) {
            Some(&o) => usize::from(o),
            None => Self::search(&self.cumulative, drawn),
        }
    }

    /// The option `Union` draws: a uniform draw in [0, total) and the
    /// number of cumulative weights at or below it.
    pub(super) fn draw(&self, runner: &mut TestRunner) -> usize {
        let drawn = sample_uniform_incl(runner, 0u64, self.total() - 1);
        self.option_of(drawn)
    }
}

/// Which option a union's tree uses, moved as proptest's `Union` moves it
/// when shrinking: back to an option before (never below the floor), and
/// forward again once, which makes that option the floor.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pick {
    pub(super) now: usize,
    floor: usize,
    before_back: Option<usize>,
}

impl Pick {
    pub(super) fn new(now: usize) -> Pick {
        Pick {
            now,
            floor: 0,
            before_back: None,
        }
    }

    /// To the nearest option before that `usable` accepts, unless at the
    /// floor. As in `Union`, the move is recorded (and can be undone) even
    /// when no option was usable.
    pub(super) fn back_to(&mut self, mut usable: impl FnMut(usize) -> bool) -> bool {
        if self.now == self.floor {
            return false;
        }
        self.before_back = Some(self.now);
        match (self.floor..self.now).rev().find(|&i| usable(i)) {
            Some(i) => {
                self.now = i;
                true
            }
            None => false,
        }
    }

    /// The option in use simplified itself: the last move is its own, so
    /// there is nothing to undo here.
    pub(super) fn forget_back(&mut self) {
        self.before_back = None;
    }

    /// Undoes the last [`Pick::back_to`], if not undone yet; that option
    /// becomes the floor.
    pub(super) fn undo_back(&mut self) -> bool {
        match self.before_back.take() {
            Some(now) => {
                self.now = now;
                self.floor = now;
                true
            }
            None => false,
        }
    }
}

/// One option's tree: drawn, deferred (drawn when shrinking reaches it), or
/// failed to draw.
enum Slot<T> {
    Drawn(Box<dyn ValueTree<Value = T>>),
    Deferred,
    Failed,
}

/// The tree of a [`LeanUnion`] draw: `pick` is the option in use.
pub struct LeanUnionTree<T> {
    options: Arc<[(u32, BoxedStrategy<T>)]>,
    /// The option drawn with the runner, and its tree.
    first: usize,
    first_tree: Box<dyn ValueTree<Value = T>>,
    /// One per option before `first`, made when shrinking first moves
    /// past it (most trees never shrink: no vector to make and drop).
    passed: Vec<Slot<T>>,
    /// What the RNG of a deferred option is seeded from.
    fork_seed: u64,
    /// The drawing runner's config, for the runner of a deferred option.
    config: Option<Arc<Config>>,
    pick: Pick,
}

impl<T> fmt::Debug for LeanUnionTree<T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("LeanUnionTree")
            .field("pick", &self.pick)
            .finish()
    }
}

/// One step of splitmix64.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The RNG of option `at` of a draw whose fork seed is `fork_seed`.
fn fork_rng(fork_seed: u64, at: usize) -> TestRng {
    let mut state = fork_seed ^ (at as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut seed = [0u8; 16];
    for chunk in seed.chunks_mut(8) {
        chunk.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::XorShift, &seed)
}

/// `config`, shared: the draws of one runner (every action of a case, and
/// the cases of a run) hold one copy rather than a copy each.
fn shared_config(config: &Config) -> Arc<Config> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<Arc<Config>>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some(c) if **c == *config => Arc::clone(c),
        _ => Arc::clone(last.insert(Arc::new(config.clone()))),
    })
}

thread_local! {
    /// The config of every runner drawing on this thread, while a
    /// [`sharing_config`] scope is open.
    static SCOPED: std::cell::RefCell<Option<Arc<Config>>> = const { std::cell::RefCell::new(None) };
}

/// `draw(runner)`, with the unions it draws sharing one copy of `runner`'s
/// config without comparing it to each drawing runner's. The promise: every
/// runner that draws inside has `runner`'s config, as proptest's forks of
/// it and the runners of deferred options do (a strategy that makes a
/// runner of another config must not draw a union inside).
pub fn sharing_config<R>(runner: &mut TestRunner, draw: impl FnOnce(&mut TestRunner) -> R) -> R {
    /// Puts the scope that was open back, also when `draw` panics.
    struct Restore(Option<Arc<Config>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            SCOPED.with_borrow_mut(|s| *s = outer);
        }
    }
    let config = shared_config(runner.config());
    let _restore = Restore(SCOPED.with_borrow_mut(|s| s.replace(config)));
    draw(runner)
}

/// The config a union drawn with `runner` keeps for its deferred options:
/// the open [`sharing_config`] scope's, else [`shared_config`].
fn config_of(runner: &TestRunner) -> Arc<Config> {
    SCOPED.with_borrow(|scoped| match scoped {
        Some(c) => {
            debug_assert!(
                **c == *runner.config(),
                "a runner of another config drew in a sharing_config scope"
            );
            Arc::clone(c)
        }
        None => shared_config(runner.config()),
    })
}

impl<T: fmt::Debug> Strategy for LeanUnion<T> {
    type Tree = LeanUnionTree<T>;
    type Value = T;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        let pick = self.weights.draw(runner);
        // The options passed over share one draw, taken before the pick's own.
        let fork_seed = if pick > 0 { runner.rng().next_u64() } else { 0 };
        let first_tree = self.options[pick].1.new_tree(runner)?;
        let config = (pick > 0).then(|| config_of(runner));
        Ok(LeanUnionTree {
            options: Arc::clone(&self.options),
            first: pick,
            first_tree,
            passed: Vec::new(),
            fork_seed,
            config,
            pick: Pick::new(pick),
        })
    }
}

impl<T: fmt::Debug> LeanUnionTree<T> {
    fn drawn(&self, at: usize) -> &dyn ValueTree<Value = T> {
        if at == self.first {
            return self.first_tree.as_ref();
        }
        match self.passed.get(at) {
            Some(Slot::Drawn(t)) => t.as_ref(),
            _ => panic!("the option in use ({at}) must be drawn"),
        }
    }

    fn drawn_mut(&mut self, at: usize) -> &mut dyn ValueTree<Value = T> {
        if at == self.first {
            return self.first_tree.as_mut();
        }
        match self.passed.get_mut(at) {
            Some(Slot::Drawn(t)) => t.as_mut(),
            _ => panic!("the option in use ({at}) must be drawn"),
        }
    }

    /// Draw a deferred option (one before `first`: shrinking only moves
    /// down) from its own RNG; whether it is drawn.
    fn draw(&mut self, at: usize) -> bool {
        if self.passed.is_empty() {
            self.passed.resize_with(self.first, || Slot::Deferred);
        }
        if let Slot::Deferred = self.passed[at] {
            self.passed[at] = Slot::Failed;
            let config = self
                .config
                .as_deref()
                .cloned()
                .unwrap_or_else(Config::default);
            let mut runner = TestRunner::new_with_rng(config, fork_rng(self.fork_seed, at));
            if let Ok(t) = self.options[at].1.new_tree(&mut runner) {
                self.passed[at] = Slot::Drawn(t);
            }
        }
        matches!(self.passed[at], Slot::Drawn(_))
    }
}

impl<T: fmt::Debug> ValueTree for LeanUnionTree<T> {
    type Value = T;

    fn current(&self) -> T {
        self.drawn(self.pick.now).current()
    }

    fn simplify(&mut self) -> bool {
        let now = self.pick.now;
        if self.drawn_mut(now).simplify() {
            self.pick.forget_back();
            return true;
        }
        // `Pick` is a copy: the search draws trees of `self`.
        let mut pick = self.pick;
        let moved = pick.back_to(|at| self.draw(at));
        self.pick = pick;
        moved
    }

    fn complicate(&mut self) -> bool {
        let now = self.pick.now;
        self.pick.undo_back() || self.drawn_mut(now).complicate()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn runner(seed: u8) -> TestRunner {
        TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::XorShift, &[seed; 16]),
        )
    }

    /// A strategy whose value is `(k, n)` with `n` shrinking from `from` to
    /// 0 one step at a time, whatever the RNG: both unions' trees then hold
    /// the same values, so their walks can be compared.
    #[derive(Debug, Clone)]
    struct Countdown(u8, u8);

    struct CountdownTree {
        k: u8,
        n: u8,
        prev: Option<u8>,
    }

    impl ValueTree for CountdownTree {
        type Value = (u8, u8);
        fn current(&self) -> (u8, u8) {
            (self.k, self.n)
        }
        fn simplify(&mut self) -> bool {
            if self.n == 0 {
                return false;
            }
            self.prev = Some(self.n);
            self.n -= 1;
            true
        }
        fn complicate(&mut self) -> bool {
            match self.prev.take() {
                Some(n) => {
                    self.n = n;
                    true
                }
                None => false,
            }
        }
    }

    impl Strategy for Countdown {
        type Tree = CountdownTree;
        type Value = (u8, u8);
        fn new_tree(&self, _: &mut TestRunner) -> NewTree<Self> {
            Ok(CountdownTree {
                k: self.0,
                n: self.1,
                prev: None,
            })
        }
    }

    fn weight(k: u8) -> u32 {
        u32::from(k % 4) + 1
    }

    fn countdowns() -> Vec<(u32, BoxedStrategy<(u8, u8)>)> {
        (0..14u8)
            .map(|k| (weight(k), Countdown(k, k % 3).boxed()))
            .collect()
    }

    fn drawn_options() -> Vec<(u32, BoxedStrategy<(u8, u16)>)> {
        (0..14u8)
            .map(|k| (weight(k), (Just(k), 0u16..1000).boxed()))
            .collect()
    }

    /// Values and a shrinking walk of `tree`, `rounds` moves long:
    /// simplify, with a complicate every fifth move, recording every value
    /// (the union tests of `just_union.rs` walk with it too).
    pub(crate) fn walk_rounds<V: fmt::Debug>(
        tree: &mut dyn ValueTree<Value = V>,
        rounds: usize,
    ) -> Vec<String> {
        let mut seen = vec![format!("{:?}", tree.current())];
        for round in 0..rounds {
            let moved = if round % 5 == 4 {
                tree.complicate()
            } else {
                tree.simplify()
            };
            seen.push(format!("{moved} {:?}", tree.current()));
        }
        seen
    }

    fn walk<V: fmt::Debug>(tree: &mut dyn ValueTree<Value = V>) -> Vec<String> {
        walk_rounds(tree, 40)
    }

    #[test]
    fn picks_and_shrinks_as_proptests_union() {
        let lean = LeanUnion::new_weighted(countdowns());
        let reference = proptest::strategy::Union::new_weighted(countdowns());
        let mut picks = std::collections::BTreeSet::new();
        for seed in 0..=255u8 {
            let mut lean_tree = lean.new_tree(&mut runner(seed)).unwrap();
            let mut reference_tree = reference.new_tree(&mut runner(seed)).unwrap();
            picks.insert(lean_tree.current().0);
            assert_eq!(
                walk(&mut lean_tree),
                walk(&mut reference_tree),
                "seed {seed}"
            );
        }
        // The seeds reached most options, so deferred ones were drawn.
        assert!(picks.len() >= 10, "{picks:?}");
    }

    #[test]
    fn a_draw_takes_one_u64_for_the_options_it_passes_over() {
        let lean = LeanUnion::new_weighted(drawn_options());
        let total: u64 = (0..14u8).map(|k| u64::from(weight(k))).sum();
        for seed in 0..=255u8 {
            let mut a = runner(seed);
            let tree = lean.new_tree(&mut a).unwrap();
            // By hand: the pick, one u64 if an option was passed over, then
            // the picked option's own draw.
            let mut b = runner(seed);
            let drawn = sample_uniform_incl(&mut b, 0u64, total - 1);
            let mut sum = 0;
            let pick = (0..14u8)
                .take_while(|&k| {
                    sum += u64::from(weight(k));
                    sum <= drawn
                })
                .count();
            if pick > 0 {
                b.rng().next_u64();
            }
            let value = (0u16..1000).new_tree(&mut b).unwrap().current();
            assert_eq!(tree.current(), (pick as u8, value), "seed {seed}");
            assert_eq!(a.rng().next_u64(), b.rng().next_u64(), "seed {seed}");
        }
    }

    #[test]
    fn options_passed_over_draw_from_rngs_of_their_own() {
        let lean = LeanUnion::new_weighted(drawn_options());
        let mut reached = std::collections::BTreeMap::<u8, Vec<u16>>::new();
        for seed in 0..=255u8 {
            let mut tree = lean.new_tree(&mut runner(seed)).unwrap();
            let again = walk(&mut lean.new_tree(&mut runner(seed)).unwrap());
            // The same seed walks the same way.
            assert_eq!(walk(&mut tree), again, "seed {seed}");
            // The value each option passed over is drawn with.
            let mut tree = lean.new_tree(&mut runner(seed)).unwrap();
            let mut at = tree.current().0;
            while tree.simplify() {
                let (k, v) = tree.current();
                if k != at {
                    reached.entry(k).or_default().push(v);
                    at = k;
                }
            }
        }
        // Shrinking moved to options passed over, whose draws differ
        // from seed to seed and from option to option.
        assert!(reached.len() >= 10, "{:?}", reached.keys());
        for (k, values) in &reached {
            let distinct: std::collections::BTreeSet<_> = values.iter().collect();
            assert!(
                values.len() < 4 || distinct.len() * 2 > values.len(),
                "option {k}: {values:?}"
            );
        }
    }

    #[test]
    fn a_vector_of_lean_unions_shrinks_as_one_of_unions() {
        // Whatever the RNG gives each element, its option and shrinking
        // follow proptest's union; the vector's own shrinking is proptest's.
        let lean = proptest::collection::vec(LeanUnion::new_weighted(countdowns()), 1..30);
        for seed in 0..64u8 {
            let mut lean_tree = lean.new_tree(&mut runner(seed)).unwrap();
            let walked = walk(&mut lean_tree);
            assert_eq!(walked, walk(&mut lean.new_tree(&mut runner(seed)).unwrap()));
            // Simplified all the way: one element, of the first option, at 0.
            let mut tree = lean.new_tree(&mut runner(seed)).unwrap();
            while tree.simplify() {}
            assert_eq!(tree.current(), vec![(0, 0)], "seed {seed}");
        }
    }

    /// A tabulated draw picks the option the binary search picks, for
    /// every value, with and without a table.
    #[test]
    fn tabulated_draws_pick_as_the_search() {
        let mut rng = TestRng::from_seed(RngAlgorithm::XorShift, &[7; 16]);
        for case in 0..300 {
            let n = 1 + (rng.next_u32() % 40) as usize;
            let big = case % 10 == 0;
            let weights: Vec<u32> = (0..n)
                .map(|_| 1 + rng.next_u32() % if big { 400 } else { 12 })
                .collect();
            let w = Weights::new(weights.iter().copied());
            let total: u64 = weights.iter().map(|&x| u64::from(x)).sum();
            assert_eq!(w.option.is_empty(), total > Weights::TABLE_MAX);
            for drawn in 0..total {
                assert_eq!(
                    w.option_of(drawn),
                    w.cumulative.partition_point(|&v| v <= drawn),
                    "{weights:?} {drawn}"
                );
            }
        }
    }

    /// Trees drawn in a `sharing_config` scope keep its config (one copy
    /// for all) and walk as trees drawn outside; the scope closes after.
    #[test]
    fn a_sharing_config_scope_draws_and_shrinks_alike() {
        let lean = proptest::collection::vec(LeanUnion::new_weighted(drawn_options()), 1..20);
        let other = Config {
            max_default_size_range: 7,
            ..Config::default()
        };
        for config in [Config::default(), other] {
            for seed in 0..64u8 {
                let with = |config: &Config| {
                    TestRunner::new_with_rng(
                        config.clone(),
                        TestRng::from_seed(RngAlgorithm::XorShift, &[seed; 16]),
                    )
                };
                let mut outside = lean.new_tree(&mut with(&config)).unwrap();
                let mut inside = sharing_config(&mut with(&config), |r| lean.new_tree(r)).unwrap();
                let scoped = sharing_config(&mut with(&config), |r| {
                    (
                        config_of(r),
                        LeanUnion::new_weighted(drawn_options())
                            .new_tree(r)
                            .unwrap(),
                    )
                });
                if let Some(kept) = &scoped.1.config {
                    assert!(Arc::ptr_eq(kept, &scoped.0), "seed {seed}");
                }
                assert_eq!(*scoped.0, config);
                assert_eq!(walk(&mut inside), walk(&mut outside), "seed {seed}");
            }
            SCOPED.with_borrow(|s| assert!(s.is_none(), "the scope closed"));
        }
    }

    /// Equal configs share one copy; another config gets its own, equal
    /// to it.
    #[test]
    fn configs_are_shared_while_equal() {
        let a = shared_config(&Config::default());
        let b = shared_config(&Config::default());
        assert!(Arc::ptr_eq(&a, &b));
        let other = Config {
            cases: 7,
            ..Config::default()
        };
        let c = shared_config(&other);
        assert_eq!(*c, other);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*shared_config(&Config::default()), Config::default());
    }
}
