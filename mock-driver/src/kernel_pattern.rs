//! `kernel_pattern`: a kernel on the default stream writing a computed,
//! multi-byte pattern (a repeated word, a counting sequence). Its bytes are
//! queued device work like `slow_fill`'s: they land when the stream reaches
//! them, and the happens-before checker sees them as a kernel write, which
//! reaches another process only through an event wait or the writer's sync
//! (`event.order.kernel-pattern-after-wait`).

use crate::event_state::KernelWrite;
use crate::world::{SimResult, World};
use ipc_harness::{ErrorKind, ProcessIndex};

/// What the pattern kernel writes: byte `i` is byte `i % width` of
/// `pattern` (little-endian) plus `step * (i / width)`, modulo 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KernelBytes {
    pattern: u64,
    width: u8,
    step: u8,
}

impl KernelBytes {
    pub(crate) fn new(pattern: u64, width: u8, step: u8) -> Self {
        KernelBytes {
            pattern,
            width,
            step,
        }
    }

    /// Whether the real kernel accepts the arguments: a word of 1 to 8 bytes.
    fn is_valid(&self) -> bool {
        (1..=8).contains(&self.width)
    }

    /// The first `len` bytes the kernel writes.
    pub(crate) fn bytes(&self, len: u64) -> Vec<u8> {
        let width = u64::from(self.width.max(1));
        (0..len)
            .map(|i| {
                let word_byte = (self.pattern >> (8 * (i % width))) as u8;
                let rounds = (i / width) as u8;
                word_byte.wrapping_add(self.step.wrapping_mul(rounds))
            })
            .collect()
    }
}

impl World {
    /// Queue the pattern kernel on `p`'s stream (no long work before it).
    /// A word width outside 1 to 8 is refused like a launch with a bad
    /// argument: `InvalidValue`, nothing queued.
    pub(crate) fn kernel_pattern(
        &mut self,
        p: ProcessIndex,
        ptr: u64,
        len: u64,
        content: KernelBytes,
    ) -> SimResult<()> {
        if !content.is_valid() {
            return Err(ErrorKind::InvalidValue.into());
        }
        self.queue_kernel_write(p, ptr, len, 0, KernelWrite::Pattern(content))
    }
}

#[cfg(test)]
mod tests {
    use super::KernelBytes;

    #[test]
    fn a_word_repeats_in_little_endian_order() {
        let k = KernelBytes::new(0x0403_0201, 4, 0);
        assert_eq!(k.bytes(10), [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]);
    }

    #[test]
    fn a_counting_sequence_wraps_at_256() {
        let k = KernelBytes::new(0xfe, 1, 1);
        assert_eq!(k.bytes(4), [0xfe, 0xff, 0x00, 0x01]);
    }

    #[test]
    fn a_stepped_word_adds_the_step_once_per_word() {
        let k = KernelBytes::new(0x0100, 2, 2);
        assert_eq!(k.bytes(6), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn widths_outside_one_to_eight_are_invalid() {
        assert!(!KernelBytes::new(1, 0, 0).is_valid());
        assert!(!KernelBytes::new(1, 9, 0).is_valid());
        assert!(KernelBytes::new(1, 8, 0).is_valid());
    }
}
