//! `kernel_pattern`: a kernel on the default stream writing a computed,
//! multi-byte pattern (a repeated word, a counting sequence). Its bytes are
//! queued device work like `slow_fill`'s: they land when the stream reaches
//! them, and the happens-before checker sees them as a kernel write, which
//! reaches another process only through an event wait or the writer's sync
//! (`event.order.kernel-pattern-after-wait`).

use crate::event_state::{KernelBytes, KernelWrite};
use crate::world::{SimResult, World};
use ipc_harness::{ErrorKind, ProcessIndex};

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
        self.queue_kernel_write(
            p,
            ptr,
            len,
            0,
            KernelWrite::Pattern(content),
            ipc_harness::StreamId::LEGACY_DEFAULT,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::event_state::KernelBytes;

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
    fn long_runs_are_byte_i_of_the_pattern_word_plus_the_step_per_round() {
        for (pattern, width, step) in [
            (0xa5, 1, 0),
            (0x0807_0605_0403_0201, 8, 3),
            (0x0f0e0d, 3, 255),
        ] {
            let k = KernelBytes::new(pattern, width, step);
            let len = 3 * 256 * u64::from(width) + 5;
            let want: Vec<u8> = (0..len)
                .map(|i| {
                    let word_byte = (pattern >> (8 * (i % u64::from(width)))) as u8;
                    word_byte.wrapping_add(step.wrapping_mul((i / u64::from(width)) as u8))
                })
                .collect();
            assert_eq!(k.bytes(len), want);
        }
    }

    #[test]
    fn widths_outside_one_to_eight_are_invalid() {
        assert!(!KernelBytes::new(1, 0, 0).is_valid());
        assert!(!KernelBytes::new(1, 9, 0).is_valid());
        assert!(KernelBytes::new(1, 8, 0).is_valid());
    }
}
