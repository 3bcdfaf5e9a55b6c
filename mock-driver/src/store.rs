//! Sparse byte storage for one physical block.
//!
//! Contents are kept as non-overlapping segments (a run of one byte value,
//! literal bytes, or a pattern kernel's bytes, computed when read); gaps
//! read as zero. A 64 GiB allocation therefore costs nothing until written,
//! and even a memset or a pattern kernel over all of it is one segment.

use crate::event_state::KernelBytes;
use crate::small_map::SmallMap;

#[derive(Debug, Clone)]
enum Content {
    Fill(u8),
    Bytes(Vec<u8>),
    /// Bytes `skip..` of what a pattern kernel writes.
    Pattern {
        kernel: KernelBytes,
        skip: u64,
    },
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
            Content::Pattern { kernel, skip } => Content::Pattern {
                kernel: *kernel,
                skip: skip + from,
            },
        };
        Segment {
            len: to - from,
            content,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Store {
    /// By start. Most blocks hold at most one segment (an allocation
    /// written or set whole), kept inline.
    segments: SmallMap<Segment>,
}

impl Store {
    /// Remove `[start, end)` from every segment, keeping the parts outside it.
    fn punch(&mut self, start: u64, end: u64) {
        if start >= end || self.segments.is_empty() {
            return;
        }
        // The segment reaching into the range from before it, then those
        // starting inside it.
        let reaching = self
            .segments
            .last_before(start)
            .filter(|(s, seg)| s.saturating_add(seg.len) > start)
            .map(|(s, _)| s);
        let mut next = reaching.or_else(|| {
            self.segments
                .starting_in(start, end)
                .next()
                .map(|(&s, _)| s)
        });
        while let Some(s) = next {
            let Some(seg) = self.segments.remove(&s) else {
                break;
            };
            let e = s.saturating_add(seg.len);
            if s < start {
                self.segments.insert(s, seg.slice(0, start - s));
            }
            if e > end {
                self.segments.insert(end, seg.slice(end - s, seg.len));
            }
            next = self
                .segments
                .starting_in(start, end)
                .next()
                .map(|(&s, _)| s);
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
        if bytes.is_empty() {
            return;
        }
        let len = bytes.len() as u64;
        self.punch(start, start.saturating_add(len));
        self.segments.insert(
            start,
            Segment {
                len,
                content: Content::Bytes(bytes.to_vec()),
            },
        );
    }

    /// A pattern kernel's bytes over `[start, start + len)`.
    pub(crate) fn write_pattern(&mut self, start: u64, len: u64, kernel: KernelBytes) {
        let end = start.saturating_add(len);
        self.punch(start, end);
        if end > start {
            self.segments.insert(
                start,
                Segment {
                    len: end - start,
                    content: Content::Pattern { kernel, skip: 0 },
                },
            );
        }
    }

    /// Where the segments reaching `start` or beyond begin: the start of a
    /// segment that covers `start`, else `start`.
    fn first_from(&self, start: u64) -> u64 {
        self.segments
            .last_before(start)
            .filter(|(s, seg)| s.saturating_add(seg.len) > start)
            .map(|(s, _)| s)
            .unwrap_or(start)
    }

    /// The contents of `[start, start + len)`, as a store of `len` bytes.
    pub(crate) fn extract(&self, start: u64, len: u64) -> Store {
        let end = start.saturating_add(len);
        let first = self.first_from(start);
        let mut part = Store::default();
        for (&s, seg) in self.segments.starting_in(first, end) {
            let from = s.max(start);
            let to = s.saturating_add(seg.len).min(end);
            if from < to {
                part.segments
                    .insert(from - start, seg.slice(from - s, to - s));
            }
        }
        part
    }

    /// Replace `[start, start + len)` with `part`, a store of `len` bytes
    /// (`extract`): a copy keeps fills and patterns as they are.
    pub(crate) fn paste(&mut self, start: u64, len: u64, part: Store) {
        self.punch(start, start.saturating_add(len));
        for (s, seg) in part.segments.into_vec() {
            self.segments.insert(start.saturating_add(s), seg);
        }
    }

    /// `len` must fit in memory; callers bound it. Each byte is written
    /// once: gaps and fills are appended as runs, not zeroed first.
    pub(crate) fn read(&self, start: u64, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        let end = start.saturating_add(len as u64);
        let first = self.first_from(start);
        for (&s, seg) in self.segments.starting_in(first, end) {
            let from = s.max(start);
            let to = s.saturating_add(seg.len).min(end);
            if from >= to {
                continue;
            }
            // The gap before this segment reads as zero.
            out.resize((from - start) as usize, 0);
            let n = (to - from) as usize;
            match &seg.content {
                Content::Fill(v) => out.resize(out.len() + n, *v),
                Content::Bytes(b) => {
                    out.extend_from_slice(&b[(from - s) as usize..(to - s) as usize])
                }
                Content::Pattern { kernel, skip } => {
                    let at = out.len();
                    out.resize(at + n, 0);
                    kernel.fill(skip + (from - s), &mut out[at..]);
                }
            }
        }
        out.resize(len, 0);
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
    fn a_pattern_is_one_segment_and_reads_as_its_bytes_when_split() {
        let k = KernelBytes::new(0x0403_0201, 4, 1);
        let mut s = Store::default();
        s.write_pattern(8, 2048, k);
        assert_eq!(s.segment_count(), 1);
        s.fill(100, 10, 0xee);
        let mut want = vec![0u8; 8];
        want.extend(k.bytes(2048));
        want[100..110].fill(0xee);
        want.extend([0; 4]);
        assert_eq!(s.read(0, 2060), want);
        assert_eq!(s.read(777, 5), want[777..782]);
    }

    #[test]
    fn a_pasted_range_reads_as_the_extracted_bytes() {
        let mut src = Store::default();
        src.fill(0, 64, 0x11);
        src.write(10, &[1, 2, 3, 4]);
        src.write_pattern(40, 30, KernelBytes::new(0x0201, 2, 1));
        let mut dst = Store::default();
        dst.fill(0, 100, 0x77);
        dst.paste(20, 70, src.extract(5, 70));
        let mut want = dst.read(0, 20);
        want.extend(src.read(5, 70));
        want.extend([0x77; 10]);
        assert_eq!(dst.read(0, 100), want);
        assert_eq!(dst.read(0, 100)[20 + 70 - 5..90], [0; 5]);
    }

    #[test]
    fn huge_fill_is_one_segment() {
        let mut s = Store::default();
        s.fill(0, 64 << 30, 0x11);
        assert_eq!(s.segment_count(), 1);
        assert_eq!(s.read((64 << 30) - 2, 4), vec![0x11, 0x11, 0, 0]);
    }

    /// Random fills, writes, patterns and pastes read back as they do on a
    /// plain byte array.
    #[test]
    fn reads_agree_with_a_byte_array() {
        const N: u64 = 300;
        for round in 0..40u64 {
            let mut s = Store::default();
            let mut model = vec![0u8; N as usize];
            for step in 0..30u64 {
                let x = crate::seed::mix64(round * 1000 + step);
                let at = x % N;
                let len = (x >> 16) % (N - at) + 1;
                let (a, l) = (at as usize, len as usize);
                match (x >> 32) % 4 {
                    0 => {
                        let v = (x >> 40) as u8 % 3;
                        s.fill(at, len, v);
                        model[a..a + l].fill(v);
                    }
                    1 => {
                        let bytes: Vec<u8> = (0..l).map(|i| (x >> 8) as u8 ^ i as u8).collect();
                        s.write(at, &bytes);
                        model[a..a + l].copy_from_slice(&bytes);
                    }
                    2 => {
                        let k = KernelBytes::new(x >> 24, 1 + (x >> 48) as u8 % 8, (x >> 56) as u8);
                        s.write_pattern(at, len, k);
                        model[a..a + l].copy_from_slice(&k.bytes(len));
                    }
                    _ => {
                        let src = (x >> 40) % (N - len + 1);
                        let part = s.extract(src, len);
                        let copied = model[src as usize..src as usize + l].to_vec();
                        s.paste(at, len, part);
                        model[a..a + l].copy_from_slice(&copied);
                    }
                }
                let from = (x >> 12) % N;
                let n = ((x >> 20) % (N - from + 40)) as usize;
                let mut want = model[from as usize..].to_vec();
                want.resize(n, 0);
                assert_eq!(s.read(from, n), want, "round {round} step {step}");
            }
        }
    }
}
