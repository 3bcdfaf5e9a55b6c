//! The scenario parser's event ops: canonical text and option defaults
//! (malformed event lines are files in `parse-errors/`).

use ipc_harness::scenario::{parse, Op, ParseError, Scenario};
use rstest::rstest;
use std::path::Path;

/// Eight lines every snippet below is appended to (so snippets start at line 9).
const PRELUDE: &str = "\
devices 1
process a device=0
process b device=0
a: p = malloc 2MiB
a: e = event_create flags=interprocess,disable_timing
a: eh = ipc_get_event e
a: send eh -> b
b: x = ipc_open_event eh
";

fn parse_str(src: &str) -> Result<Scenario, ParseError> {
    parse(src, Path::new("s.ipc"))
}

#[rstest]
#[case::create_default("a: t = event_create", "t = event_create flags=default")]
#[case::create_named(
    "a: t = event_create flags=disable_timing,interprocess,blocking_sync",
    "t = event_create flags=blocking_sync,disable_timing,interprocess"
)]
#[case::create_number(
    "a: t = event_create flags=0x104 => InvalidValue",
    "t = event_create flags=interprocess,0x100"
)]
#[case::record("a: event_record e", "event_record e")]
#[case::query("b: event_query x => NotReady", "event_query x")]
#[case::query_dialect_name("b: event_query x => cudaErrorNotReady", "event_query x")]
#[case::sync("b: event_sync x => ok", "event_sync x")]
#[case::wait("b: stream_wait x", "stream_wait x")]
#[case::elapsed("a: event_elapsed e e => InvalidHandle", "event_elapsed e e")]
#[case::destroy("b: event_destroy x", "event_destroy x")]
#[case::get_again("a: eh2 = ipc_get_event e => == eh", "eh2 = ipc_get_event e")]
#[case::get_null(
    "a: ipc_get_event e out=null => runtime: crash",
    "ipc_get_event e out=null"
)]
#[case::open_again("b: y = ipc_open_event eh => != x", "y = ipc_open_event eh")]
#[case::open_null_out(
    "b: ipc_open_event eh out=null => InvalidValue",
    "ipc_open_event eh out=null"
)]
#[case::record_null(
    "a: event_record null => InvalidHandle | InvalidValue",
    "event_record null"
)]
#[case::query_null("b: event_query null => error", "event_query null")]
#[case::sync_null("b: event_sync null => error", "event_sync null")]
#[case::wait_null("b: stream_wait null => error", "stream_wait null")]
#[case::destroy_null("b: event_destroy null => error", "event_destroy null")]
#[case::elapsed_null("a: event_elapsed null e => error", "event_elapsed null e")]
#[case::get_null_event("a: ipc_get_event null => error", "ipc_get_event null")]
#[case::zero("b: z = event_handle_zero => != eh", "z = event_handle_zero")]
#[case::random("b: r = event_handle_random", "r = event_handle_random")]
#[case::slow_fill("a: slow_fill p 5a us=300000", "slow_fill p 0x5a us=300000")]
#[case::slow_fill_opts(
    "a: slow_fill p 0x01 len=16 us=1 at=4",
    "slow_fill p 0x01 us=1 at=4 len=16"
)]
fn good_event_steps(#[case] line: &str, #[case] canonical: &str) {
    let src = format!("{PRELUDE}{line}\n");
    let s = parse_str(&src).unwrap_or_else(|e| panic!("should parse: {e}\n{src}"));
    let last = s.steps.last().expect("steps");
    assert_eq!(last.line, 9);
    assert_eq!(last.text(), canonical);
}

#[test]
fn slow_fill_length_defaults_to_the_malloc_size_and_flags_are_bits() {
    let s = parse_str(&format!("{PRELUDE}a: slow_fill p 01 us=5 at=1MiB\n")).unwrap();
    match &s.steps.last().unwrap().op {
        Op::SlowFill {
            micros,
            resolved_len,
            ..
        } => assert_eq!((*micros, *resolved_len), (5, 1 << 20)),
        op => panic!("{op:?}"),
    }
    match &s.steps[1].op {
        Op::EventCreate { flags } => assert_eq!(*flags, 0x6),
        op => panic!("{op:?}"),
    }
}
