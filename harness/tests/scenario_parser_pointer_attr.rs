//! `pointer_attr P ATTR`: canonical text, the type of each attribute's
//! value, and the errors of a bad attribute or expectation.

use ipc_harness::scenario::{parse, Op, ParseError, Scenario};
use ipc_harness::PointerAttribute;
use rstest::rstest;
use std::path::Path;

/// Four lines every snippet below is appended to (so snippets start at line 5).
const PRELUDE: &str = "\
devices 1
process a device=0
a: p = malloc 2MiB
a: id = pointer_attr p buffer_id
";

fn parse_str(src: &str) -> Result<Scenario, ParseError> {
    parse(src, Path::new("s.ipc"))
}

#[rstest]
#[case::number("a: pointer_attr p is_legacy_cuda_ipc_capable => ok, value 1")]
#[case::address("a: pointer_attr p range_start_addr => ok, == p")]
#[case::mapping("a: b = pointer_attr p mapping_base_addr => != null")]
#[case::id_eq("a: pointer_attr p buffer_id => ok, == id")]
#[case::id_ne("a: pointer_attr p buffer_id => != id")]
#[case::error("a: pointer_attr null buffer_id => InvalidValue")]
#[case::info_unchanged("a: pointer_attr p => type device")]
fn good_pointer_attr_steps(#[case] line: &str) {
    let src = format!("{PRELUDE}{line}\n");
    let s = parse_str(&src).unwrap_or_else(|e| panic!("should parse: {e}\n{src}"));
    let last = s.steps.last().expect("steps");
    assert_eq!(last.line, 5);
    // The canonical text parses back to the same op.
    let again = parse_str(&format!("{PRELUDE}a: {}\n", last.text())).unwrap();
    assert_eq!(again.steps.last().unwrap().op, last.op);
}

#[test]
fn every_attribute_parses_by_its_name() {
    for attr in PointerAttribute::ALL {
        let src = format!("{PRELUDE}a: pointer_attr p {}\n", attr.name());
        let s = parse_str(&src).unwrap_or_else(|e| panic!("{e}"));
        match &s.steps.last().unwrap().op {
            Op::PointerAttribute { attr: got, .. } => assert_eq!(*got, attr),
            op => panic!("{op:?}"),
        }
    }
}

#[rstest]
#[case::unknown("a: pointer_attr p colour", "unknown pointer attribute 'colour'")]
#[case::id_value("a: pointer_attr p buffer_id => value 3", "needs an int result")]
#[case::id_with_ptr("a: pointer_attr p buffer_id => == p", "cannot compare a buffer id")]
#[case::number_with_id("a: pointer_attr p range_size => == id", "cannot compare an int")]
#[case::address_value("a: pointer_attr p range_start_addr => value 0", "needs an int result")]
fn bad_pointer_attr_steps(#[case] line: &str, #[case] message: &str) {
    let src = format!("{PRELUDE}{line}\n");
    let e = parse_str(&src).expect_err("should not parse").to_string();
    assert!(e.contains(message), "{e}");
    assert!(e.contains(":5:"), "{e}");
}

#[test]
fn fork_child_call_parses_and_prints_its_size() {
    let s = parse_str(&format!(
        "{PRELUDE}a: fork_child_call alloc 1MiB => NotInitialized\n"
    ))
    .unwrap();
    let last = s.steps.last().unwrap();
    assert_eq!(last.op, Op::ForkChildAlloc { size: 1 << 20 });
    assert_eq!(last.text(), "fork_child_call alloc 1MiB");
    let e = parse_str(&format!("{PRELUDE}a: fork_child_call free p\n"))
        .expect_err("only alloc")
        .to_string();
    assert!(e.contains("unknown child call 'free'"), "{e}");
}
