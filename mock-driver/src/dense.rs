//! `DenseMap`: a map from ids a counter hands out (blocks, event cores) to
//! their objects, stored by index. It answers as the `BTreeMap` it replaces
//! would, iteration in increasing id included, so every rule that walks the
//! objects sees them in the same order; a lookup is an index instead of a
//! tree search, and an object stays where it was put (a tree moves its
//! neighbours on every insert and remove).

/// Ids are indexes: an id must come from a counter (a small number), never
/// from a hash or an address. Objects are kept in chunks of `CHUNK` that
/// never grow once made, so no insert copies the objects already stored;
/// except the first, which starts small and grows as a `Vec` does: most
/// machines hold a few objects, and a chunk made at its full size is a
/// large allocation, which costs several small ones.
#[derive(Debug, Clone)]
pub(crate) struct DenseMap<V> {
    chunks: Vec<Vec<Option<V>>>,
    len: usize,
}

impl<V> Default for DenseMap<V> {
    fn default() -> Self {
        DenseMap {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

/// Objects per chunk.
const CHUNK: usize = 64;

/// How far past the highest id so far an id may go: the counters behind
/// these maps count up by one.
const MAX_GAP: usize = 1 << 16;

impl<V> DenseMap<V> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// (chunk, place in it) of `id`.
    #[inline]
    fn place(id: u64) -> Option<(usize, usize)> {
        let i = usize::try_from(id).ok()?;
        Some((i / CHUNK, i % CHUNK))
    }

    #[inline]
    pub(crate) fn get(&self, id: &u64) -> Option<&V> {
        let (c, o) = Self::place(*id)?;
        self.chunks.get(c)?.get(o)?.as_ref()
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u64) -> Option<&mut V> {
        let (c, o) = Self::place(*id)?;
        self.chunks.get_mut(c)?.get_mut(o)?.as_mut()
    }

    #[cfg(test)]
    pub(crate) fn contains_key(&self, id: &u64) -> bool {
        self.get(id).is_some()
    }

    #[inline]
    pub(crate) fn insert(&mut self, id: u64, value: V) -> Option<V> {
        let (c, o) = Self::place(id).expect("a dense id fits in usize");
        assert!(
            c * CHUNK < self.chunks.len() * CHUNK + MAX_GAP,
            "dense id {id} is far past the ids so far (not from a counter)"
        );
        while self.chunks.len() <= c {
            let cap = if self.chunks.is_empty() { 0 } else { CHUNK };
            self.chunks.push(Vec::with_capacity(cap));
        }
        let chunk = &mut self.chunks[c];
        if o == chunk.len() {
            chunk.push(Some(value));
            self.len += 1;
            return None;
        }
        if o > chunk.len() {
            chunk.resize_with(o + 1, || None);
        }
        let old = chunk[o].replace(value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    #[inline]
    pub(crate) fn remove(&mut self, id: &u64) -> Option<V> {
        let (c, o) = Self::place(*id)?;
        let old = self.chunks.get_mut(c)?.get_mut(o)?.take();
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (id, object) in increasing id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk
                .iter()
                .enumerate()
                .filter_map(move |(o, v)| v.as_ref().map(|v| ((c * CHUNK + o) as u64, v)))
        })
    }

    #[cfg(test)]
    pub(crate) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter().map(|(id, _)| id)
    }

    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.chunks
            .iter_mut()
            .flat_map(|chunk| chunk.iter_mut().filter_map(Option::as_mut))
    }
}

#[cfg(test)]
mod tests {
    use super::DenseMap;
    use std::collections::BTreeMap;

    /// The same inserts and removes leave a `DenseMap` and a `BTreeMap`
    /// answering alike, iteration order included.
    #[test]
    fn answers_as_a_btree_map() {
        let mut d = DenseMap::new();
        let mut b = BTreeMap::new();
        for step in 0..2000u64 {
            let x = crate::seed::mix64(step);
            let id = (x >> 33) % 300;
            if x & 1 == 0 {
                assert_eq!(d.insert(id, step), b.insert(id, step));
            } else {
                assert_eq!(d.remove(&id), b.remove(&id));
            }
            assert_eq!(d.len(), b.len());
            assert_eq!(d.get(&id), b.get(&id));
            assert_eq!(d.contains_key(&(id + 1)), b.contains_key(&(id + 1)));
        }
        let dv: Vec<(u64, u64)> = d.iter().map(|(k, v)| (k, *v)).collect();
        let bv: Vec<(u64, u64)> = b.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(dv, bv);
        assert!(d.keys().eq(b.keys().copied()));
        assert!(d.values().eq(b.values()));
        assert_eq!(d.is_empty(), b.is_empty());
        assert_eq!(d.get(&u64::MAX), None);
    }
}
