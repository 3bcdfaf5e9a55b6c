//! Hash indexes the simulator keeps beside its ordered state, for rules
//! that look things up by an exact key. An index is never iterated as a
//! whole, so its (hash) order never reaches an answer; what it lists under
//! one key is in increasing order, as the ordered set it stands for would
//! give it.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A multiply-rotate hash for small integer keys (ids, addresses): a few
/// instructions a word, where the standard SipHash costs a hundred. The
/// keys are the simulator's own numbers, not input an adversary picks.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl IdHasher {
    #[inline]
    fn add(&mut self, x: u64) {
        self.0 = self.0.wrapping_add(x).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            self.add(u64::from_le_bytes(word));
        }
        for &b in words.remainder() {
            self.add(u64::from(b));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The multiply leaves the high bits best mixed; the table takes low
        // bits for the bucket.
        self.0.rotate_left(26)
    }
}

/// A hash map looked up by key only.
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A hash set asked for membership only.
pub(crate) type IdSet<T> = HashSet<T, BuildHasherDefault<IdHasher>>;

/// The set of `(key, value)` pairs an ordered `BTreeSet<(K, u64)>` would
/// hold, for the question "which values under `key`", answered in
/// increasing value.
#[derive(Debug, Clone)]
pub(crate) struct MultiIndex<K> {
    map: IdMap<K, Values>,
}

/// The values under one key: most keys have one, kept without a Vec.
#[derive(Debug, Clone)]
enum Values {
    One(u64),
    /// Two or more, increasing.
    Many(Vec<u64>),
}

impl<K> Default for MultiIndex<K> {
    fn default() -> Self {
        MultiIndex {
            map: IdMap::default(),
        }
    }
}

impl<K: Hash + Eq + Copy> MultiIndex<K> {
    /// Adds `(key, value)`; false if it was there already.
    pub(crate) fn insert(&mut self, key: K, value: u64) -> bool {
        let values = match self.map.entry(key) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Values::One(value));
                return true;
            }
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        };
        match values {
            Values::One(v) if *v == value => false,
            Values::One(v) => {
                let v = *v;
                *values = Values::Many(if v < value {
                    vec![v, value]
                } else {
                    vec![value, v]
                });
                true
            }
            Values::Many(vs) => match vs.binary_search(&value) {
                Ok(_) => false,
                Err(i) => {
                    vs.insert(i, value);
                    true
                }
            },
        }
    }

    /// Removes `(key, value)`; false if it was not there.
    pub(crate) fn remove(&mut self, key: K, value: u64) -> bool {
        // One hash lookup: a key's last value goes through its entry.
        let std::collections::hash_map::Entry::Occupied(mut entry) = self.map.entry(key) else {
            return false;
        };
        let values = entry.get_mut();
        match values {
            Values::One(v) if *v == value => {
                entry.remove();
                true
            }
            Values::One(_) => false,
            Values::Many(vs) => {
                let Ok(i) = vs.binary_search(&value) else {
                    return false;
                };
                vs.remove(i);
                if let [last] = vs[..] {
                    *values = Values::One(last);
                }
                true
            }
        }
    }

    /// The values under `key`, in increasing order.
    pub(crate) fn get(&self, key: &K) -> &[u64] {
        match self.map.get(key) {
            None => &[],
            Some(Values::One(v)) => std::slice::from_ref(v),
            Some(Values::Many(vs)) => vs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MultiIndex;
    use std::collections::BTreeSet;

    /// The same inserts and removes leave a `MultiIndex` answering as a
    /// range of the ordered set would.
    #[test]
    fn answers_as_an_ordered_set() {
        let mut index = MultiIndex::default();
        let mut set = BTreeSet::new();
        for step in 0..3000u64 {
            let x = crate::seed::mix64(step);
            let key = ((x >> 40) % 5, (x >> 50) % 3);
            let value = (x >> 20) % 40;
            if x & 3 != 0 {
                assert_eq!(index.insert(key, value), set.insert((key, value)));
            } else {
                assert_eq!(index.remove(key, value), set.remove(&(key, value)));
            }
            for a in 0..5 {
                for b in 0..3 {
                    let want: Vec<u64> = set
                        .range(((a, b), 0)..=((a, b), u64::MAX))
                        .map(|&(_, v)| v)
                        .collect();
                    assert_eq!(index.get(&(a, b)), want.as_slice());
                }
            }
        }
    }
}
