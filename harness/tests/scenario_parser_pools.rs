//! The scenario parser's memory-pool ops: canonical text, defaults, and the
//! messages for arguments of the wrong kind.

use ipc_harness::scenario::{parse, ParseError, Scenario};
use rstest::rstest;
use std::path::Path;

/// Lines every snippet below is appended to (so snippets start at line 13).
const PRELUDE: &str = "\
devices 1
process a device=0
process b device=0
a: pl = pool_create types=posix_fd
a: fd = pool_export pl
a: pfd = send_fd fd -> b
b: ipl = pool_import pfd
a: p = pool_alloc pl 2MiB
a: x = pool_export_ptr p
a: send x -> b
b: q = pool_import_ptr ipl x
a: m = malloc 2MiB
";

fn parse_str(src: &str) -> Result<Scenario, ParseError> {
    parse(src, Path::new("s.ipc"))
}

#[rstest]
#[case::create_default("a: t = pool_create", "t = pool_create types=none device=0")]
#[case::create_types(
    "a: t = pool_create device=0 types=posix_fd",
    "t = pool_create types=posix_fd device=0"
)]
#[case::default_pool("a: d = pool_default", "d = pool_default device=0")]
#[case::destroy("a: pool_destroy pl => ok", "pool_destroy pl")]
#[case::export("a: f2 = pool_export pl => InvalidValue", "f2 = pool_export pl")]
#[case::import("b: i2 = pool_import pfd", "i2 = pool_import pfd")]
#[case::set_access("b: pool_set_access ipl rw", "pool_set_access ipl rw device=0")]
#[case::alloc("a: r = pool_alloc pl 4096", "r = pool_alloc pl 4KiB")]
#[case::free("b: pool_free q", "pool_free q")]
#[case::export_ptr("a: y = pool_export_ptr p => ok", "y = pool_export_ptr p")]
#[case::import_ptr("b: q2 = pool_import_ptr ipl x => != q", "q2 = pool_import_ptr ipl x")]
fn good_pool_steps(#[case] line: &str, #[case] canonical: &str) {
    let src = format!("{PRELUDE}{line}\n");
    let s = parse_str(&src).unwrap_or_else(|e| panic!("should parse: {e}\n{src}"));
    let last = s.steps.last().expect("steps");
    assert_eq!(last.line, 13);
    assert_eq!(last.text(), canonical);
    // The canonical text parses back to the same op.
    let again = format!("{PRELUDE}{}: {canonical}\n", &line[..1]);
    let s2 = parse_str(&again).unwrap_or_else(|e| panic!("canonical should parse: {e}"));
    assert_eq!(s2.steps.last().expect("steps").op, last.op);
}

#[rstest]
#[case::import_ptr_not_held("a: q3 = pool_import_ptr pl y", "unknown name 'y'")]
#[case::export_data_not_sent(
    "b: y = pool_export_ptr q\na: z = pool_import_ptr pl y",
    "does not hold handle 'y'"
)]
#[case::pool_of_other_process("a: pool_destroy ipl", "does not hold a memory pool 'ipl'")]
#[case::pointer_is_not_a_pool(
    "a: pool_alloc m 2MiB",
    "'m' is a pointer, but 'pool_alloc' needs a memory pool"
)]
#[case::fd_is_not_export_data(
    "b: pool_import_ptr ipl pfd",
    "'pfd' is a file descriptor, but 'pool_import_ptr' needs pool pointer export data"
)]
#[case::unknown_option("a: pool_create kind=x", "kind")]
fn bad_pool_steps(#[case] lines: &str, #[case] message: &str) {
    let src = format!("{PRELUDE}{lines}\n");
    let e = parse_str(&src).expect_err("should not parse").to_string();
    assert!(e.contains(message), "{e}");
}
