//! Sparse byte storage for one physical block.
//!
//! Contents are kept as non-overlapping segments (a run of one byte value, or
//! literal bytes); gaps read as zero. A 64 GiB allocation therefore costs
//! nothing until written, and even a memset of all of it is one segment.

use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Content {
    Fill(u8),
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Segment {
    len: u64,
    content: Content,
}

impl Segment {
    /// The part `[from, to)` of this segment, offsets relative to its start.
    fn slice(&self, from: u64, to: u64) -> Segment {
        let content = match &self.content {
            Content::Fill(v) => Content::Fill(*v),
            Content::Bytes(b) => Content::Bytes(b[from as usize..to as usize].to_vec()),
        };
        Segment {
            len: to - from,
            content,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Store {
    segments: BTreeMap<u64, Segment>,
}

impl Store {
    /// Remove `[start, end)` from every segment, keeping the parts outside it.
    fn punch(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut hit: Vec<u64> = Vec::new();
        if let Some((&s, seg)) = self.segments.range(..start).next_back() {
            if s.saturating_add(seg.len) > start {
                hit.push(s);
            }
        }
        hit.extend(self.segments.range(start..end).map(|(&s, _)| s));
        for s in hit {
            let Some(seg) = self.segments.remove(&s) else {
                continue;
            };
            let e = s.saturating_add(seg.len);
            if s < start {
                self.segments.insert(s, seg.slice(0, start - s));
            }
            if e > end {
                self.segments.insert(end, seg.slice(end - s, seg.len));
            }
        }
    }

    pub(crate) fn fill(&mut self, start: u64, len: u64, value: u8) {
        let end = start.saturating_add(len);
        self.punch(start, end);
        if value != 0 && end > start {
            self.segments.insert(
                start,
                Segment {
                    len: end - start,
                    content: Content::Fill(value),
                },
            );
        }
    }

    pub(crate) fn write(&mut self, start: u64, bytes: &[u8]) {
        self.write_vec(start, bytes.to_vec());
    }

    /// `write`, keeping `bytes` as the segment's content.
    pub(crate) fn write_vec(&mut self, start: u64, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let len = bytes.len() as u64;
        self.punch(start, start.saturating_add(len));
        self.segments.insert(
            start,
            Segment {
                len,
                content: Content::Bytes(bytes),
            },
        );
    }

    /// `len` must fit in memory; callers bound it.
    pub(crate) fn read(&self, start: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let end = start.saturating_add(len as u64);
        let first = self
            .segments
            .range(..start)
            .next_back()
            .filter(|(&s, seg)| s.saturating_add(seg.len) > start)
            .map(|(&s, _)| s)
            .unwrap_or(start);
        for (&s, seg) in self.segments.range(first..end) {
            let from = s.max(start);
            let to = s.saturating_add(seg.len).min(end);
            if from >= to {
                continue;
            }
            let dst = &mut out[(from - start) as usize..(to - start) as usize];
            match &seg.content {
                Content::Fill(v) => dst.fill(*v),
                Content::Bytes(b) => {
                    dst.copy_from_slice(&b[(from - s) as usize..(to - s) as usize])
                }
            }
        }
        out
    }

    /// Number of segments held (tests check sparseness with it).
    #[cfg(test)]
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_read_zero_and_overwrites_split_segments() {
        let mut s = Store::default();
        assert_eq!(s.read(10, 4), vec![0; 4]);
        s.fill(0, 16, 0xaa);
        s.write(4, &[1, 2, 3]);
        s.fill(6, 4, 0xbb);
        let got = s.read(0, 16);
        let mut want = vec![0xaa; 16];
        want[4] = 1;
        want[5] = 2;
        want[6..10].fill(0xbb);
        assert_eq!(got, want);
        s.fill(2, 10, 0);
        let mut want = vec![0xaa; 16];
        want[2..12].fill(0);
        assert_eq!(s.read(0, 16), want);
    }

    #[test]
    fn huge_fill_is_one_segment() {
        let mut s = Store::default();
        s.fill(0, 64 << 30, 0x11);
        assert_eq!(s.segment_count(), 1);
        assert_eq!(s.read((64 << 30) - 2, 4), vec![0x11, 0x11, 0, 0]);
    }
}
