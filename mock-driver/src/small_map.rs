//! `SmallMap`: an ordered map of offsets (or pointers) to values, for the
//! tables of one block or one IPC mapping (its live allocations, its
//! exports, its open pointers) and a store's segments. Nearly all of them
//! hold one entry, kept
//! inline (no tree node to make, search and free); a second entry moves
//! them into a `BTreeMap`. It answers as the `BTreeMap` it replaces would,
//! iteration in increasing key included.

use std::collections::btree_map;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub(crate) enum SmallMap<V = u64> {
    #[default]
    Empty,
    One(u64, V),
    /// Two entries or more (fewer after removals).
    Many(BTreeMap<u64, V>),
}

impl<V> SmallMap<V> {
    /// The map of one entry.
    pub(crate) fn one(key: u64, value: V) -> Self {
        SmallMap::One(key, value)
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            SmallMap::Empty => 0,
            SmallMap::One(..) => 1,
            SmallMap::Many(m) => m.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn get(&self, key: &u64) -> Option<&V> {
        match self {
            SmallMap::Empty => None,
            SmallMap::One(k, v) => (k == key).then_some(v),
            SmallMap::Many(m) => m.get(key),
        }
    }

    pub(crate) fn get_mut(&mut self, key: &u64) -> Option<&mut V> {
        match self {
            SmallMap::Empty => None,
            SmallMap::One(k, v) => (k == key).then_some(v),
            SmallMap::Many(m) => m.get_mut(key),
        }
    }

    pub(crate) fn contains_key(&self, key: &u64) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`; the value it had, if any.
    pub(crate) fn insert(&mut self, key: u64, value: V) -> Option<V> {
        match self {
            SmallMap::Empty => {
                *self = SmallMap::One(key, value);
                None
            }
            SmallMap::One(k, v) if *k == key => Some(std::mem::replace(v, value)),
            SmallMap::One(..) => {
                let SmallMap::One(k, v) = std::mem::take(self) else {
                    unreachable!("matched one entry")
                };
                *self = SmallMap::Many(BTreeMap::from([(k, v), (key, value)]));
                None
            }
            SmallMap::Many(m) => m.insert(key, value),
        }
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<V> {
        match self {
            SmallMap::One(k, _) if k == key => match std::mem::take(self) {
                SmallMap::One(_, v) => Some(v),
                _ => unreachable!("matched one entry"),
            },
            SmallMap::Empty | SmallMap::One(..) => None,
            SmallMap::Many(m) => m.remove(key),
        }
    }

    /// The value of `key`, set to `default` first if it has none (as
    /// `entry(key).or_insert(default)`).
    pub(crate) fn get_or_insert(&mut self, key: u64, default: V) -> &mut V {
        if !self.contains_key(&key) {
            self.insert(key, default);
        }
        self.get_mut(&key).expect("the key was just inserted")
    }

    /// The entry with the greatest key not above `at`.
    pub(crate) fn last_at_or_before(&self, at: u64) -> Option<(u64, &V)> {
        match self {
            SmallMap::Empty => None,
            SmallMap::One(k, v) => (*k <= at).then_some((*k, v)),
            SmallMap::Many(m) => m.range(..=at).next_back().map(|(&k, v)| (k, v)),
        }
    }

    /// The entry with the greatest key below `at`.
    pub(crate) fn last_before(&self, at: u64) -> Option<(u64, &V)> {
        at.checked_sub(1).and_then(|at| self.last_at_or_before(at))
    }

    /// The entries, in increasing key.
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        match self {
            SmallMap::Empty => Iter::One(None),
            SmallMap::One(k, v) => Iter::One(Some((k, v))),
            SmallMap::Many(m) => Iter::Many(m.range(..)),
        }
    }

    /// The entries whose keys are in `[from, to)`, in increasing key.
    pub(crate) fn starting_in(&self, from: u64, to: u64) -> Iter<'_, V> {
        match self {
            SmallMap::Empty => Iter::One(None),
            SmallMap::One(k, v) => Iter::One((from..to).contains(k).then_some((k, v))),
            SmallMap::Many(m) => Iter::Many(m.range(from.min(to)..to)),
        }
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &u64> {
        self.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Keeps the entries for which `keep` says true (as `BTreeMap::retain`).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64, &mut V) -> bool) {
        match self {
            SmallMap::Empty => {}
            SmallMap::One(k, v) => {
                if !keep(*k, v) {
                    *self = SmallMap::Empty;
                }
            }
            SmallMap::Many(m) => m.retain(|&k, v| keep(k, v)),
        }
    }

    /// The values, in increasing key, to change in place.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        let (one, many) = match self {
            SmallMap::Empty => (None, None),
            SmallMap::One(_, v) => (Some(v), None),
            SmallMap::Many(m) => (None, Some(m.values_mut())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// Every entry, by value, in increasing key.
    pub(crate) fn into_vec(self) -> Vec<(u64, V)> {
        match self {
            SmallMap::Empty => Vec::new(),
            SmallMap::One(k, v) => vec![(k, v)],
            SmallMap::Many(m) => m.into_iter().collect(),
        }
    }
}

/// The entries of a `SmallMap` (or of a range of its keys), in increasing
/// key.
pub(crate) enum Iter<'a, V> {
    One(Option<(&'a u64, &'a V)>),
    Many(btree_map::Range<'a, u64, V>),
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a u64, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::One(one) => one.take(),
            Iter::Many(it) => it.next(),
        }
    }
}

impl<'a, V> IntoIterator for &'a SmallMap<V> {
    type Item = (&'a u64, &'a V);
    type IntoIter = Iter<'a, V>;

    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

/// An ordered map of a few entries kept as a sorted `Vec`, for a process's
/// small tables keyed by pairs (its packing blocks, its peer access): an
/// empty one holds no allocation and costs nothing to drop, where a
/// `BTreeMap` walks its (empty) tree. It answers as the `BTreeMap` it
/// replaces would, iteration in increasing key included; an insert or
/// remove moves the entries after it, so it suits tables of a few entries.
#[derive(Debug, Clone)]
pub(crate) struct VecMap<K, V = ()> {
    /// Increasing key, no key twice.
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    fn find(&self, key: &K) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.cmp(key))
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; the value it had, if any.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// Keeps the entries for which `keep` says true (as `BTreeMap::retain`).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// The keys, in increasing order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values, in increasing key.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random inserts, removes and updates leave it answering every
    /// question as a `BTreeMap` does.
    #[test]
    fn answers_as_a_btree_map_does() {
        for round in 0..50u64 {
            let mut small = SmallMap::default();
            let mut tree: BTreeMap<u64, u64> = BTreeMap::new();
            for step in 0..60u64 {
                let x = crate::seed::mix64(round * 1000 + step);
                // Few keys, so entries are found, replaced and removed.
                let key = (x >> 8) % 6 * 16;
                match x % 5 {
                    0 | 1 => assert_eq!(small.insert(key, x >> 32), tree.insert(key, x >> 32)),
                    2 => assert_eq!(small.remove(&key), tree.remove(&key)),
                    3 => {
                        *small.get_or_insert(key, 7) += 1;
                        *tree.entry(key).or_insert(7) += 1;
                    }
                    4 if x & 0x200 != 0 => {
                        let cut = (x >> 40) % 6 * 16;
                        small.retain(|k, v| k < cut || *v % 3 == 0);
                        tree.retain(|&k, v| k < cut || *v % 3 == 0);
                    }
                    4 if x & 0x100 != 0 => {
                        for (a, b) in small.values_mut().zip(tree.values_mut()) {
                            *a = a.wrapping_mul(3);
                            *b = b.wrapping_mul(3);
                        }
                        assert_eq!(small.values_mut().count(), tree.len());
                    }
                    _ => {
                        if let (Some(a), Some(b)) = (small.get_mut(&key), tree.get_mut(&key)) {
                            *a ^= 5;
                            *b ^= 5;
                        }
                    }
                }
                assert_eq!(small.len(), tree.len());
                assert_eq!(small.is_empty(), tree.is_empty());
                let all: Vec<(u64, u64)> = small.iter().map(|(&k, &v)| (k, v)).collect();
                let want: Vec<(u64, u64)> = tree.iter().map(|(&k, &v)| (k, v)).collect();
                assert_eq!(all, want, "round {round} step {step}");
                assert!(small.keys().eq(tree.keys()));
                assert!(small.values().eq(tree.values()));
                assert_eq!(small.clone().into_vec(), want);
                for probe in 0..100 {
                    assert_eq!(small.get(&probe), tree.get(&probe));
                    assert_eq!(small.contains_key(&probe), tree.contains_key(&probe));
                    assert_eq!(
                        small.last_at_or_before(probe),
                        tree.range(..=probe).next_back().map(|(&k, v)| (k, v))
                    );
                    assert_eq!(
                        small.last_before(probe),
                        tree.range(..probe).next_back().map(|(&k, v)| (k, v))
                    );
                    let (from, to) = (probe, probe + x % 40);
                    assert!(small.starting_in(from, to).eq(tree.range(from..to)));
                }
            }
        }
    }

    /// Random inserts, removes (by `retain`) and clears leave a `VecMap`
    /// answering as a `BTreeMap` does.
    #[test]
    fn vec_map_answers_as_a_btree_map_does() {
        for round in 0..50u64 {
            let mut small: VecMap<(u64, u32), u64> = VecMap::default();
            let mut tree: BTreeMap<(u64, u32), u64> = BTreeMap::new();
            for step in 0..80u64 {
                let x = crate::seed::mix64(round * 1000 + step);
                let key = ((x >> 8) % 4, ((x >> 16) % 3) as u32);
                match x % 7 {
                    0..=2 => assert_eq!(small.insert(key, x >> 32), tree.insert(key, x >> 32)),
                    3 => {
                        let cut = (x >> 40) % 4;
                        small.retain(|k, v| k.0 != cut || *v % 2 == 0);
                        tree.retain(|k, v| k.0 != cut || *v % 2 == 0);
                    }
                    4 if x & 0x300 == 0 => {
                        small.clear();
                        tree.clear();
                    }
                    5 => assert_eq!(small.remove(&key), tree.remove(&key)),
                    _ => {}
                }
                assert_eq!(small.len(), tree.len());
                assert!(small.keys().eq(tree.keys()), "round {round} step {step}");
                assert!(small.values().eq(tree.values()));
                for a in 0..5 {
                    for b in 0..4 {
                        assert_eq!(small.get(&(a, b)), tree.get(&(a, b)));
                        assert_eq!(small.contains_key(&(a, b)), tree.contains_key(&(a, b)));
                    }
                }
            }
        }
    }
}
