//! `Clock`: happens-before as the simulator tracks it, per lane (a stream
//! of a process, `order.rs`) the newest of its write numbers that something
//! is ordered after (a host, a stream, an event's `covers`).
//!
//! It replaces a `BTreeMap<usize, u64>` read as `get(w).unwrap_or(0)`
//! and merged with `entry(w).or_insert(0)` then `max`: a lane it does
//! not name and a lane at 0 mean the same (none of its writes covered),
//! so a vector indexed by lane answers alike. Lanes are few and numbered
//! from 0 (the processes' legacy streams first); a record clones its
//! stream's clock, and cloning a few words is cheaper than cloning a tree.

/// Lanes kept in place: the first processes' legacy streams, which make
/// most writes; a clock of them is copied without an allocation (a record
/// clones one).
const INLINE: usize = 4;

#[derive(Debug, Clone, Default)]
pub(crate) struct Clock {
    /// By lane below `INLINE`: its newest write covered (0: none).
    first: [u64; INLINE],
    /// The same for lanes `INLINE` and up, from `INLINE`.
    rest: Vec<u64>,
}

impl Clock {
    /// The newest write of `lane` covered (0: none).
    pub(crate) fn get(&self, lane: usize) -> u64 {
        match lane.checked_sub(INLINE) {
            None => self.first[lane],
            Some(i) => self.rest.get(i).copied().unwrap_or(0),
        }
    }

    /// Covers `lane`'s writes up to `upto`, and no later ones.
    pub(crate) fn set(&mut self, lane: usize, upto: u64) {
        match lane.checked_sub(INLINE) {
            None => self.first[lane] = upto,
            Some(i) => {
                if self.rest.len() <= i {
                    self.rest.resize(i + 1, 0);
                }
                self.rest[i] = upto;
            }
        }
    }

    /// Also covers what `from` covers.
    pub(crate) fn merge(&mut self, from: &Clock) {
        for (mine, &theirs) in self.first.iter_mut().zip(&from.first) {
            *mine = (*mine).max(theirs);
        }
        if self.rest.len() < from.rest.len() {
            self.rest.resize(from.rest.len(), 0);
        }
        for (mine, &theirs) in self.rest.iter_mut().zip(&from.rest) {
            *mine = (*mine).max(theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;
    use std::collections::BTreeMap;

    /// The map it replaces, used as the simulator used it.
    fn merge_map(into: &mut BTreeMap<usize, u64>, from: &BTreeMap<usize, u64>) {
        for (&writer, &upto) in from {
            let seen = into.entry(writer).or_insert(0);
            *seen = (*seen).max(upto);
        }
    }

    /// Random sets and merges between a few clocks leave every clock
    /// answering as the map it replaces does.
    #[test]
    fn answers_as_the_map_it_replaces() {
        for round in 0..40u64 {
            let mut clocks = vec![Clock::default(); 4];
            let mut maps = vec![BTreeMap::<usize, u64>::new(); 4];
            for step in 0..80u64 {
                let x = crate::seed::mix64(round * 1000 + step);
                let (a, b) = ((x % 4) as usize, ((x >> 4) % 4) as usize);
                let writer = ((x >> 8) % 6) as usize;
                match (x >> 16) % 3 {
                    0 => {
                        let upto = (x >> 24) % 50;
                        clocks[a].set(writer, upto);
                        maps[a].insert(writer, upto);
                    }
                    1 => {
                        let from = clocks[b].clone();
                        clocks[a].merge(&from);
                        let from = maps[b].clone();
                        merge_map(&mut maps[a], &from);
                    }
                    _ => {
                        clocks[a] = clocks[b].clone();
                        maps[a] = maps[b].clone();
                    }
                }
                for (clock, map) in clocks.iter().zip(&maps) {
                    for w in 0..8 {
                        assert_eq!(clock.get(w), map.get(&w).copied().unwrap_or(0));
                    }
                }
            }
        }
    }
}
