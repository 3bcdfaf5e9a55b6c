//! `SmallMap`: an ordered map of offsets (or pointers) to sizes or counts,
//! for the tables of one block or one IPC mapping: its live allocations,
//! its exports, its open pointers. Nearly all of them hold one entry, kept
//! inline (no tree node to make, search and free); a second entry moves
//! them into a `BTreeMap`. It answers as the `BTreeMap` it replaces would,
//! iteration in increasing key included.

use std::collections::btree_map;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub(crate) enum SmallMap {
    #[default]
    Empty,
    One(u64, u64),
    /// Two entries or more (fewer after removals).
    Many(BTreeMap<u64, u64>),
}

impl SmallMap {
    /// The map of one entry.
    pub(crate) fn one(key: u64, value: u64) -> Self {
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

    pub(crate) fn get(&self, key: &u64) -> Option<&u64> {
        match self {
            SmallMap::Empty => None,
            SmallMap::One(k, v) => (k == key).then_some(v),
            SmallMap::Many(m) => m.get(key),
        }
    }

    pub(crate) fn get_mut(&mut self, key: &u64) -> Option<&mut u64> {
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
    pub(crate) fn insert(&mut self, key: u64, value: u64) -> Option<u64> {
        match self {
            SmallMap::Empty => {
                *self = SmallMap::One(key, value);
                None
            }
            SmallMap::One(k, v) if *k == key => Some(std::mem::replace(v, value)),
            SmallMap::One(k, v) => {
                *self = SmallMap::Many(BTreeMap::from([(*k, *v), (key, value)]));
                None
            }
            SmallMap::Many(m) => m.insert(key, value),
        }
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<u64> {
        match self {
            SmallMap::One(k, v) if k == key => {
                let v = *v;
                *self = SmallMap::Empty;
                Some(v)
            }
            SmallMap::Empty | SmallMap::One(..) => None,
            SmallMap::Many(m) => m.remove(key),
        }
    }

    /// The value of `key`, set to `default` first if it has none (as
    /// `entry(key).or_insert(default)`).
    pub(crate) fn get_or_insert(&mut self, key: u64, default: u64) -> &mut u64 {
        if !self.contains_key(&key) {
            self.insert(key, default);
        }
        self.get_mut(&key).expect("the key was just inserted")
    }

    /// The entry with the greatest key not above `at`.
    pub(crate) fn last_at_or_before(&self, at: u64) -> Option<(u64, u64)> {
        match self {
            SmallMap::Empty => None,
            SmallMap::One(k, v) => (*k <= at).then_some((*k, *v)),
            SmallMap::Many(m) => m.range(..=at).next_back().map(|(&k, &v)| (k, v)),
        }
    }

    /// The entries, in increasing key.
    pub(crate) fn iter(&self) -> Iter<'_> {
        match self {
            SmallMap::Empty => Iter::One(None),
            SmallMap::One(k, v) => Iter::One(Some((k, v))),
            SmallMap::Many(m) => Iter::Many(m.iter()),
        }
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &u64> {
        self.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &u64> {
        self.iter().map(|(_, v)| v)
    }
}

/// The entries of a `SmallMap`, in increasing key.
pub(crate) enum Iter<'a> {
    One(Option<(&'a u64, &'a u64)>),
    Many(btree_map::Iter<'a, u64, u64>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a u64, &'a u64);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::One(one) => one.take(),
            Iter::Many(it) => it.next(),
        }
    }
}

impl<'a> IntoIterator for &'a SmallMap {
    type Item = (&'a u64, &'a u64);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
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
                for probe in 0..100 {
                    assert_eq!(small.get(&probe), tree.get(&probe));
                    assert_eq!(small.contains_key(&probe), tree.contains_key(&probe));
                    assert_eq!(
                        small.last_at_or_before(probe),
                        tree.range(..=probe).next_back().map(|(&k, &v)| (k, v))
                    );
                }
            }
        }
    }
}
