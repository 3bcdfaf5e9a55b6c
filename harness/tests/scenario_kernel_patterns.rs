//! The pattern kernels (`kernel_fill`, `kernel_iota`) and the byte
//! pattern's group and counting forms: canonical text, the call each op
//! makes, and what a pattern matches (malformed lines are files in
//! `parse-errors/`).

use ipc_harness::scenario::{
    parse, Expect, Expectation, KernelContent, Op, ParseError, PatternItem, Scenario,
};
use rstest::rstest;
use std::path::Path;

/// Four lines every snippet below is appended to.
const PRELUDE: &str = "\
devices 1
process a device=0
process b device=0
a: p = malloc 256
";

fn parse_str(src: &str) -> Result<Scenario, ParseError> {
    parse(src, Path::new("s.ipc"))
}

fn last_step(line: &str) -> Scenario {
    let src = format!("{PRELUDE}{line}\n");
    parse_str(&src).unwrap_or_else(|e| panic!("should parse: {e}\n{src}"))
}

#[rstest]
#[case::word("a: kernel_fill p (01 02 03 04)", "kernel_fill p (01 02 03 04)")]
#[case::one_byte_word("a: kernel_fill p 5a len=16", "kernel_fill p (5a) len=16")]
#[case::eight_bytes(
    "a: kernel_fill p (0x01 02 03 04 05 06 07 08) at=8 len=64",
    "kernel_fill p (01 02 03 04 05 06 07 08) at=8 len=64"
)]
#[case::iota("a: kernel_iota p 10", "kernel_iota p 0x10")]
#[case::iota_opts("a: kernel_iota p 0xf0 len=32 at=4", "kernel_iota p 0xf0 at=4 len=32")]
#[case::read_group("a: read p 0 16 => bytes (01 02 03 04)*4", "read p 0 16")]
fn kernel_steps_print_canonically_and_reparse(#[case] line: &str, #[case] canonical: &str) {
    let s = last_step(line);
    let step = s.steps.last().expect("steps");
    assert_eq!(step.text(), canonical);
    let again = last_step(&format!("a: {canonical}"));
    assert_eq!(again.steps.last().expect("steps").op, step.op);
}

#[test]
fn kernel_fill_packs_the_word_little_endian_and_defaults_to_the_rest() {
    let s = last_step("a: kernel_fill p (01 02 03 04) at=16");
    match &s.steps.last().unwrap().op {
        Op::KernelPattern {
            content,
            resolved_len,
            ..
        } => {
            assert_eq!(*content, KernelContent::Word(vec![1, 2, 3, 4]));
            assert_eq!(content.call_args(), (0x0403_0201, 4, 0));
            assert_eq!(*resolved_len, 240);
            assert_eq!(content.bytes(6), [1, 2, 3, 4, 1, 2]);
        }
        op => panic!("{op:?}"),
    }
}

#[test]
fn kernel_iota_counts_up_from_its_base_and_wraps() {
    let s = last_step("a: kernel_iota p fe len=4");
    match &s.steps.last().unwrap().op {
        Op::KernelPattern { content, .. } => {
            assert_eq!(content.call_args(), (0xfe, 1, 1));
            assert_eq!(content.bytes(4), [0xfe, 0xff, 0x00, 0x01]);
        }
        op => panic!("{op:?}"),
    }
}

fn bytes_expectation(pattern: &str) -> ipc_harness::scenario::BytePattern {
    let s = last_step(&format!("a: read p 0 16 => bytes {pattern}"));
    let step = s.steps.last().unwrap();
    let Expect::List(list) = &step.expect else {
        panic!("{:?}", step.expect)
    };
    match &list.items[..] {
        [Expectation::Bytes(p)] => p.clone(),
        other => panic!("{other:?}"),
    }
}

#[rstest]
#[case::group("(01 02 03 04)*4", "(01 02 03 04)*4")]
#[case::group_once("(01 02) 00*14", "(01 02) 00*14")]
#[case::iota("iota(10)*16", "iota(10)*16")]
#[case::mixed("ab*4 iota(0xfe)*4 (01 02)*4", "ab*4 iota(fe)*4 (01 02)*4")]
fn byte_patterns_print_as_written(#[case] written: &str, #[case] printed: &str) {
    let p = bytes_expectation(written);
    assert_eq!(p.to_string(), printed);
    assert_eq!(p.len(), 16);
    assert_eq!(bytes_expectation(printed), p);
}

#[test]
fn a_group_matches_its_repetition_and_nothing_else() {
    let p = bytes_expectation("(01 02 03 04)*4");
    let good: Vec<u8> = [1, 2, 3, 4].repeat(4);
    assert!(p.matches(&good));
    assert_eq!(p.to_bytes(), good);
    let mut bad = good.clone();
    bad[13] = 0;
    assert!(!p.matches(&bad));
    assert!(!p.matches(&good[..15]));
    assert_eq!(
        p.items,
        [PatternItem::Group(vec![1, 2, 3, 4], 4)],
        "a group stays one item"
    );
}

#[test]
fn iota_matches_a_wrapping_count() {
    let p = bytes_expectation("iota(f8)*16");
    let good: Vec<u8> = (0..16u8).map(|i| 0xf8u8.wrapping_add(i)).collect();
    assert!(p.matches(&good));
    assert_eq!(p.to_bytes(), good);
    let mut bad = good.clone();
    bad[8] = 0x01;
    assert!(!p.matches(&bad));
}

#[test]
fn iota_and_a_kernel_fill_agree_with_the_kernels_bytes() {
    let word = KernelContent::Word(vec![0xde, 0xad]);
    assert!(bytes_expectation("(de ad)*8").matches(&word.bytes(16)));
    let iota = KernelContent::Iota(0x10);
    assert!(bytes_expectation("iota(10)*16").matches(&iota.bytes(16)));
}

/// A word's bytes are the word repeated and cut at `len`, for every word
/// length and for lengths shorter than, equal to and past the word.
#[test]
fn a_words_bytes_repeat_the_word_to_any_length() {
    for n in 1..=8u8 {
        let word: Vec<u8> = (1..=n).collect();
        let content = KernelContent::Word(word.clone());
        for len in [0u64, 1, 3, 7, 8, 9, 16, 63, 64, 65, 1000, 2047] {
            let want: Vec<u8> = word.iter().copied().cycle().take(len as usize).collect();
            assert_eq!(content.bytes(len), want, "word of {n}, len {len}");
        }
    }
}
