//! The scenario keyword and API names that the driver-call table gives
//! each call (`calls.rs`), as the parser and the ops see them.

use ipc_harness::errors::Dialect;
use ipc_harness::scenario::{parse, Op, Step};
use ipc_harness::CallKind;
use std::path::Path;

const PRELUDE: &str = "\
devices 2
process a device=0
process b device=1
a: p = malloc 2MiB
a: e = event_create
a: s = stream_create
";

fn ops_of(snippet: &str) -> Vec<Op> {
    let source = format!("{PRELUDE}{snippet}\n");
    let scenario = parse(&source, Path::new("s.ipc")).expect("the snippet parses");
    scenario.steps.iter().map(|s: &Step| s.op.clone()).collect()
}

#[test]
fn every_table_keyword_is_an_op_the_parser_knows() {
    for kind in CallKind::ALL {
        let source = format!("{PRELUDE}a: {}\n", kind.keyword());
        if let Err(e) = parse(&source, Path::new("s.ipc")) {
            assert!(
                !e.to_string().contains("unknown op"),
                "{kind:?}'s keyword '{}' is not parsed: {e}",
                kind.keyword()
            );
        }
    }
}

#[test]
fn a_keyword_finds_the_first_row_that_owns_it() {
    for kind in CallKind::ALL {
        let found = CallKind::from_keyword(kind.keyword()).expect("a table keyword");
        assert_eq!(found.keyword(), kind.keyword());
        assert!(
            CallKind::ALL.iter().position(|k| *k == found)
                <= CallKind::ALL.iter().position(|k| k == kind)
        );
    }
    assert_eq!(
        CallKind::from_keyword("ipc_open"),
        Some(CallKind::IpcOpenMemHandle)
    );
    assert_eq!(
        CallKind::from_keyword("event_record"),
        Some(CallKind::EventRecord)
    );
    assert_eq!(CallKind::from_keyword("send"), None);
}

#[test]
fn an_op_takes_its_keyword_and_api_from_its_call() {
    let ops = ops_of(
        "a: h = ipc_get p\na: event_record e stream=s\na: send h -> b\na: q = malloc_managed 4KiB",
    );
    let last = &ops[ops.len() - 4..];
    assert_eq!(last[0].call_kind(), Some(CallKind::IpcGetMemHandle));
    assert_eq!(last[0].keyword(), "ipc_get");
    assert_eq!(last[0].api(Dialect::Driver), Some("cuIpcGetMemHandle"));
    assert_eq!(last[1].call_kind(), Some(CallKind::EventRecordOn));
    assert_eq!(last[1].keyword(), "event_record");
    assert_eq!(last[1].api(Dialect::Hip), Some("hipEventRecord"));
    assert_eq!(last[2].call_kind(), None);
    assert_eq!(last[2].api(Dialect::Runtime), None);
    assert_eq!(last[3].call_kind(), Some(CallKind::Alloc));
    assert_eq!(last[3].keyword(), "malloc_managed");
    assert_eq!(last[3].api(Dialect::Runtime), Some("cudaMallocManaged"));
}
