//! `AddrMap`: an ordered map of addresses to values, for a process's
//! address-keyed tables (its regions, allocations, dead and free VA). It
//! answers as the `BTreeMap` it replaces would, iteration in increasing key
//! included.
//!
//! The entries sit in one `VecDeque`, sorted by key, and are found by
//! binary search: a search is a few comparisons where a tree walks its
//! nodes. The simulator hands VA out upwards and programs release it in
//! the order they took it or the reverse, so nearly every insert is at the
//! back and nearly every remove at either end, which a `VecDeque` does
//! without moving the other entries (mem.scale.open-thousand-allocations:
//! 1,000 mappings made, then closed first to last). An insert or remove
//! in the middle moves the entries on its shorter side.
//!
//! A search remembers where it landed (`hint`): programs walk their
//! allocations in order (write, export, read or close each in turn), so
//! the next search in a large map usually lands there or one further, and
//! checking those two places first answers it without a binary search.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

#[derive(Debug, Clone)]
pub(crate) struct AddrMap<V> {
    /// Increasing key, no key twice.
    entries: VecDeque<(u64, V)>,
    /// Where the last binary search landed (a rank): only a guess, checked
    /// before it is used.
    hint: Cell<usize>,
}

impl<V> Default for AddrMap<V> {
    fn default() -> Self {
        AddrMap {
            entries: VecDeque::new(),
            hint: Cell::new(0),
        }
    }
}

/// Below this many entries a binary search is a few steps: the hint is
/// neither checked nor kept.
const HINTED: usize = 16;

/// How many of the sorted `entries` have keys below `key`; `hint` is where
/// the last search in them landed, and is set to where this one does.
#[inline]
fn rank_in<V>(entries: &[(u64, V)], key: u64, hint: &Cell<usize>) -> usize {
    // Most inserts go after the greatest key, and most lookups of a freshly
    // made entry ask for it: checking the back first answers those without
    // a search. Removes in the order the entries came ask for the front.
    let n = entries.len();
    let (Some((first, _)), Some((last, _))) = (entries.first(), entries.last()) else {
        return 0;
    };
    if *last < key {
        return n;
    }
    if key <= *first {
        return 0;
    }
    if n < HINTED {
        return entries.partition_point(|&(k, _)| k < key);
    }
    // The rank is `i` when the key is above entry `i - 1`'s and not above
    // entry `i`'s: the hint and the place after it are tried first.
    let h = hint.get();
    for i in [h, h + 1] {
        if (1..n).contains(&i) && entries[i - 1].0 < key && key <= entries[i].0 {
            hint.set(i);
            return i;
        }
    }
    let i = entries.partition_point(|&(k, _)| k < key);
    hint.set(i);
    i
}

impl<V> AddrMap<V> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries have keys below `key`: where `key` is, or would go.
    #[inline(always)]
    fn rank(&self, key: u64) -> usize {
        // The entries are one slice unless they wrap around the deque's
        // buffer (removes at the front, then inserts at the back): a slice
        // is indexed without the wrap arithmetic.
        match self.entries.as_slices() {
            (all, []) => rank_in(all, key, &self.hint),
            _ => self.entries.partition_point(|&(k, _)| k < key),
        }
    }

    /// The index of `key`'s entry, if it has one.
    #[inline]
    fn index_of(&self, key: u64) -> Option<usize> {
        let i = self.rank(key);
        (self.entries.get(i)?.0 == key).then_some(i)
    }

    pub(crate) fn get(&self, key: &u64) -> Option<&V> {
        let i = self.index_of(*key)?;
        Some(&self.entries[i].1)
    }

    pub(crate) fn get_mut(&mut self, key: &u64) -> Option<&mut V> {
        let i = self.index_of(*key)?;
        Some(&mut self.entries[i].1)
    }

    pub(crate) fn contains_key(&self, key: &u64) -> bool {
        self.index_of(*key).is_some()
    }

    /// Sets `key` to `value`; the value it had, if any.
    pub(crate) fn insert(&mut self, key: u64, value: V) -> Option<V> {
        let i = self.rank(key);
        match self.entries.get_mut(i) {
            Some((k, v)) if *k == key => return Some(std::mem::replace(v, value)),
            _ => {}
        }
        // The ends take an entry without `VecDeque::insert`'s general
        // (wrapping) move.
        if i == self.entries.len() {
            self.entries.push_back((key, value));
        } else if i == 0 {
            self.entries.push_front((key, value));
        } else {
            self.entries.insert(i, (key, value));
        }
        None
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<V> {
        let i = self.index_of(*key)?;
        let entry = if i + 1 == self.entries.len() {
            self.entries.pop_back()
        } else if i == 0 {
            self.entries.pop_front()
        } else {
            self.entries.remove(i)
        };
        entry.map(|(_, v)| v)
    }

    /// How many entries have keys not above `at`.
    #[inline]
    fn rank_after(&self, at: u64) -> usize {
        at.checked_add(1)
            .map_or(self.entries.len(), |next| self.rank(next))
    }

    /// The entry with the greatest key not above `at`.
    pub(crate) fn last_at_or_before(&self, at: u64) -> Option<(u64, &V)> {
        let i = self.rank_after(at);
        let (k, v) = self.entries.get(i.checked_sub(1)?)?;
        Some((*k, v))
    }

    /// As `last_at_or_before`, the value mutable.
    pub(crate) fn last_at_or_before_mut(&mut self, at: u64) -> Option<(u64, &mut V)> {
        let i = self.rank_after(at);
        let (k, v) = self.entries.get_mut(i.checked_sub(1)?)?;
        Some((*k, v))
    }

    /// The entry whose `[key, key + len(value))` contains `addr`.
    pub(crate) fn containing(&self, addr: u64, len: impl Fn(&V) -> u64) -> Option<(u64, &V)> {
        self.last_at_or_before(addr)
            .filter(|&(base, v)| addr - base < len(v))
    }

    /// The indexes `[from, to)` of the entries whose keys are in `range`.
    fn span(&self, range: impl RangeBounds<u64>) -> (usize, usize) {
        let from = match range.start_bound() {
            Bound::Included(&s) => self.rank(s),
            Bound::Excluded(&s) => self.rank_after(s),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(&e) => self.rank_after(e),
            Bound::Excluded(&e) => self.rank(e),
            Bound::Unbounded => self.len(),
        };
        // A range that ends before it starts holds nothing (`BTreeMap`
        // panics on one; no caller makes one).
        (from, to.max(from))
    }

    /// The entries whose keys are in `range`, in increasing key.
    pub(crate) fn range(
        &self,
        range: impl RangeBounds<u64>,
    ) -> impl DoubleEndedIterator<Item = (&u64, &V)> {
        let (from, to) = self.span(range);
        self.entries.range(from..to).map(|(k, v)| (k, v))
    }

    /// The entries, in increasing key.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (&u64, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub(crate) fn keys(&self) -> impl DoubleEndedIterator<Item = &u64> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl DoubleEndedIterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub(crate) fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> {
        self.entries.iter_mut().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::AddrMap;
    use std::collections::BTreeMap;

    /// Maps large enough for the hint, walked in order (each key, then a
    /// place inside its span), backwards and at random while entries come
    /// and go at both ends and in the middle: every answer is the
    /// `BTreeMap`'s.
    #[test]
    fn hinted_searches_answer_as_a_btree_map_does() {
        for round in 0..12u64 {
            let mut addr: AddrMap<u64> = AddrMap::new();
            let mut tree: BTreeMap<u64, u64> = BTreeMap::new();
            let count = 20 + crate::seed::mix64(round) % 200;
            for i in 0..count {
                let key = (1 << 30) + i * 0x40;
                assert_eq!(addr.insert(key, i), tree.insert(key, i));
            }
            for step in 0..400u64 {
                let x = crate::seed::mix64(round * 10_000 + step);
                let keys: Vec<u64> = tree.keys().copied().collect();
                let probes: Vec<u64> = match step % 4 {
                    0 => keys.iter().flat_map(|&k| [k, k + 0x10]).collect(),
                    1 => keys.iter().rev().flat_map(|&k| [k + 0x3f, k]).collect(),
                    2 => (0..64)
                        .map(|j| (1 << 30) - 1 + crate::seed::mix64(x + j) % (count * 0x40 + 2))
                        .collect(),
                    _ => keys.iter().map(|&k| k - 1).collect(),
                };
                for probe in probes {
                    assert_eq!(
                        addr.get(&probe),
                        tree.get(&probe),
                        "round {round} step {step}"
                    );
                    let last = tree.range(..=probe).next_back().map(|(&k, v)| (k, v));
                    assert_eq!(addr.last_at_or_before(probe), last);
                    assert_eq!(
                        addr.containing(probe, |_| 0x20),
                        last.filter(|(k, _)| probe - k < 0x20)
                    );
                    assert!(addr
                        .range(probe..probe + 0x100)
                        .eq(tree.range(probe..probe + 0x100)));
                }
                if keys.is_empty() {
                    break;
                }
                let pick = match x % 5 {
                    0 => keys[0],
                    1 => keys[keys.len() - 1],
                    _ => keys[(x >> 8) as usize % keys.len()],
                };
                if x % 3 == 0 {
                    assert_eq!(addr.remove(&pick), tree.remove(&pick));
                } else {
                    // A key between two others, or past the end.
                    let key = pick + 0x20 + (x >> 20) % 2 * 0x20;
                    assert_eq!(addr.insert(key, step), tree.insert(key, step));
                }
                assert!(addr.iter().eq(tree.iter()));
            }
        }
    }

    /// Random inserts, removes and updates, at the back, the front and in
    /// the middle, leave it answering every question as a `BTreeMap` does.
    #[test]
    fn answers_as_a_btree_map_does() {
        for round in 0..60u64 {
            let mut addr: AddrMap<u64> = AddrMap::new();
            let mut tree: BTreeMap<u64, u64> = BTreeMap::new();
            // Keys near the ends of the u64 range in some rounds, so the
            // bounds' overflow is exercised.
            let offset = match round % 3 {
                0 => 0,
                1 => u64::MAX - 200,
                _ => 1 << 40,
            };
            for step in 0..120u64 {
                let x = crate::seed::mix64(round * 1000 + step);
                let key = offset + (x >> 8) % 24 * 8;
                match x % 7 {
                    0 | 1 => assert_eq!(addr.insert(key, x >> 32), tree.insert(key, x >> 32)),
                    // Ascending keys, as fresh VA comes.
                    2 => {
                        let next = tree
                            .keys()
                            .next_back()
                            .map_or(offset, |k| k.saturating_add(8));
                        assert_eq!(addr.insert(next, step), tree.insert(next, step));
                    }
                    3 => assert_eq!(addr.remove(&key), tree.remove(&key)),
                    4 => {
                        let first = tree.keys().next().copied().unwrap_or(key);
                        assert_eq!(addr.remove(&first), tree.remove(&first));
                    }
                    5 => {
                        if let (Some(a), Some(b)) = (addr.get_mut(&key), tree.get_mut(&key)) {
                            *a ^= 5;
                            *b ^= 5;
                        }
                    }
                    _ => {
                        for (a, b) in addr.values_mut().zip(tree.values_mut()) {
                            *a += 1;
                            *b += 1;
                        }
                    }
                }
                assert_eq!(addr.len(), tree.len());
                assert_eq!(addr.is_empty(), tree.is_empty());
                assert!(addr.iter().eq(tree.iter()), "round {round} step {step}");
                assert!(addr.iter().rev().eq(tree.iter().rev()));
                assert!(addr.keys().eq(tree.keys()));
                assert!(addr.values().eq(tree.values()));
                for probe in (0..210).map(|i| offset.saturating_add(i)) {
                    assert_eq!(addr.get(&probe), tree.get(&probe));
                    assert_eq!(addr.contains_key(&probe), tree.contains_key(&probe));
                    let last = tree.range(..=probe).next_back().map(|(&k, v)| (k, v));
                    assert_eq!(addr.last_at_or_before(probe), last);
                    assert_eq!(
                        addr.last_at_or_before_mut(probe).map(|(k, v)| (k, *v)),
                        last.map(|(k, v)| (k, *v))
                    );
                    assert_eq!(
                        addr.containing(probe, |_| 5),
                        last.filter(|(k, _)| probe - k < 5)
                    );
                    let to = probe.saturating_add(x % 40);
                    assert!(addr.range(probe..to).eq(tree.range(probe..to)));
                    assert!(addr.range(..=probe).rev().eq(tree.range(..=probe).rev()));
                    assert!(addr.range(probe..).eq(tree.range(probe..)));
                    assert!(addr.range(..probe).eq(tree.range(..probe)));
                    assert!(addr.range(probe..=to).eq(tree.range(probe..=to)));
                }
            }
        }
    }
}
