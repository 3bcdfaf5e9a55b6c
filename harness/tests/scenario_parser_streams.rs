//! The scenario parser's stream and copy ops: canonical text (printed
//! text parses back to the same op), and the mistakes it refuses.

use ipc_harness::scenario::{parse, Op, ParseError, Scenario};
use rstest::rstest;
use std::path::Path;

/// Eight lines every snippet below is appended to (so snippets start at line 9).
const PRELUDE: &str = "\
devices 2
process a device=0
process b device=1
a: p = malloc 2MiB
a: q = malloc 2MiB
a: e = event_create flags=interprocess,disable_timing
a: s = stream_create flags=nonblocking
b: t = stream_create
";

fn parse_str(src: &str) -> Result<Scenario, ParseError> {
    parse(src, Path::new("s.ipc"))
}

#[rstest]
#[case::create_default("a: u = stream_create", "u = stream_create flags=default")]
#[case::create_nonblocking(
    "a: u = stream_create flags=nonblocking",
    "u = stream_create flags=nonblocking"
)]
#[case::destroy("a: stream_destroy s", "stream_destroy s")]
#[case::sync("a: stream_sync s", "stream_sync s")]
#[case::query("a: stream_query s => NotReady", "stream_query s")]
#[case::record_on("a: event_record e stream=s", "event_record e stream=s")]
#[case::record_default("a: event_record e", "event_record e")]
#[case::wait_on("a: stream_wait e stream=s", "stream_wait e stream=s")]
#[case::slow_fill_on(
    "a: slow_fill p 0x01 stream=s us=7 len=16",
    "slow_fill p 0x01 us=7 len=16 stream=s"
)]
#[case::copy("a: copy q p 4096", "copy q p 4KiB")]
#[case::copy_on("a: copy q p 2MiB stream=s", "copy q p 2MiB stream=s")]
#[case::copy_null("a: copy null p 16 => error", "copy null p 16")]
#[case::copy_peer("a: copy_peer q 1 p 0 64KiB", "copy_peer q 1 p 0 64KiB")]
fn good_stream_steps(#[case] line: &str, #[case] canonical: &str) {
    let src = format!("{PRELUDE}{line}\n");
    let s = parse_str(&src).unwrap_or_else(|e| panic!("should parse: {e}\n{src}"));
    let last = s.steps.last().expect("steps");
    assert_eq!(last.line, 9);
    assert_eq!(last.text(), canonical);
    // The canonical text parses back to the same op.
    let process = line.split_once(": ").map_or("a", |(process, _)| process);
    let again = format!("{PRELUDE}{process}: {canonical}\n");
    let back = parse_str(&again).unwrap_or_else(|e| panic!("canonical should parse: {e}\n{again}"));
    assert_eq!(back.steps.last().expect("steps").op, last.op);
}

#[rstest]
#[case::unknown_stream("a: stream_sync nope", "unknown name 'nope'")]
#[case::not_a_stream(
    "a: stream_sync e",
    "'e' is an event, but 'stream_sync' needs a stream"
)]
#[case::other_process("a: stream_sync t", "stream 't' belongs to process 'b'")]
#[case::bad_flags("a: u = stream_create flags=blocking", "expected stream flags")]
#[case::copy_without_length("a: copy q p", "a length in bytes")]
#[case::record_on_other_process("a: event_record e stream=t", "belongs to process 'b'")]
#[case::unknown_option("a: copy q p 16 on=s", "unknown option 'on' for 'copy'")]
fn bad_stream_steps(#[case] line: &str, #[case] message: &str) {
    let src = format!("{PRELUDE}{line}\n");
    let err = parse_str(&src).expect_err("should not parse").to_string();
    assert!(err.contains(message), "{err}");
    assert!(err.contains(":9:"), "the error names line 9: {err}");
}

#[test]
fn a_destroyed_stream_is_refused_afterwards() {
    let src = format!("{PRELUDE}a: stream_destroy s\na: stream_sync s\n");
    let err = parse_str(&src).expect_err("should not parse").to_string();
    assert!(err.contains("stream 's' was destroyed at line 9"), "{err}");
}

#[test]
fn stream_create_flags_are_bits_and_bind_a_stream() {
    let s = parse_str(PRELUDE).unwrap();
    match &s.steps[3].op {
        Op::StreamCreate { flags } => assert_eq!(*flags, 1),
        op => panic!("{op:?}"),
    }
    match &s.steps[4].op {
        Op::StreamCreate { flags } => assert_eq!(*flags, 0),
        op => panic!("{op:?}"),
    }
    let copy = parse_str(&format!("{PRELUDE}a: copy q p 16 stream=s\n")).unwrap();
    assert_eq!(copy.steps.last().unwrap().op.uses(), vec!["q", "p", "s"]);
}
