//! The tracer's hook list held against the driver's symbols: every symbol
//! the measured driver exports (`tracer/symbols/libcuda-580.159.04.txt`,
//! `nm -D` of its libcuda.so.1) is either wrapped (`ipc_tracer::TRACED`)
//! or listed in `tracer/symbols/not-traced.txt` under a one-line reason,
//! never both; so a new variant of an entry point (`_v3`, `_ptsz`) cannot
//! slip by unnoticed when the list is refreshed from a newer driver.
//!
//! Also here: the tracer writes the record format
//! (`ipc_harness::trace_record`) with the format's own constants and field
//! names.

use std::collections::BTreeSet;
use std::path::Path;

fn symbols() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols/libcuda-580.159.04.txt");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// `(name, reason)` for every name of not-traced.txt, in file order.
fn listed() -> Vec<(String, String)> {
    let mut reason = None::<String>;
    let mut out = Vec::new();
    for (i, line) in ipc_tracer::NOT_TRACED.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("##") {
            continue;
        }
        if let Some(r) = line.strip_prefix("# ") {
            assert!(r.len() > 20, "line {}: a reason says why: {line}", i + 1);
            reason = Some(r.to_string());
            continue;
        }
        let reason = reason
            .clone()
            .unwrap_or_else(|| panic!("line {}: {line} has no reason above it", i + 1));
        out.push((line.to_string(), reason));
    }
    out
}

/// The entry points the tracer replaces besides the traced calls.
const LOOKUPS: [&str; 2] = ["cuGetProcAddress", "cuGetProcAddress_v2"];

#[test]
fn every_driver_symbol_is_traced_or_listed_with_a_reason() {
    let traced: BTreeSet<&str> = ipc_tracer::TRACED.iter().copied().chain(LOOKUPS).collect();
    let listed = listed();
    let listed_names: BTreeSet<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(listed.len(), listed_names.len(), "a name is listed twice");
    assert_eq!(
        traced.len(),
        ipc_tracer::TRACED.len() + LOOKUPS.len(),
        "a name is traced twice"
    );
    let symbols = symbols();
    let neither: Vec<&String> = symbols
        .iter()
        .filter(|s| !traced.contains(s.as_str()) && !listed_names.contains(s.as_str()))
        .collect();
    assert!(
        neither.is_empty(),
        "driver symbols neither traced nor listed in not-traced.txt: {neither:?}"
    );
    let both: Vec<&&str> = traced.intersection(&listed_names).collect();
    assert!(both.is_empty(), "traced and listed as not traced: {both:?}");
    let all: BTreeSet<&str> = symbols.iter().map(String::as_str).collect();
    let unknown: Vec<&&str> = traced
        .iter()
        .chain(listed_names.iter())
        .filter(|n| !all.contains(**n))
        .collect();
    assert!(
        unknown.is_empty(),
        "names the measured driver does not export: {unknown:?}"
    );
}

#[test]
fn the_families_the_issue_names_are_traced() {
    for name in [
        "cuMemPoolCreate",
        "cuMemPoolDestroy",
        "cuMemPoolExportToShareableHandle",
        "cuMemPoolImportFromShareableHandle",
        "cuMemPoolExportPointer",
        "cuMemPoolImportPointer",
        "cuMemPoolSetAccess",
        "cuMemPoolGetAccess",
        "cuMemPoolSetAttribute",
        "cuMemPoolGetAttribute",
        "cuMemPoolTrimTo",
        "cuMemAllocFromPoolAsync",
        "cuMemAllocFromPoolAsync_ptsz",
        "cuDeviceGetDefaultMemPool",
        "cuDeviceGetMemPool",
        "cuDeviceSetMemPool",
        "cuCtxSynchronize_v2",
        "cuPointerGetAttribute",
        "cuPointerGetAttributes",
        "cuMemGetAddressRange_v2",
        "cuMemcpyPeer",
        "cuMemcpyPeerAsync_ptsz",
        "cuMemsetD16_v2",
        "cuMemsetD2D32Async_ptsz",
        "cuMemcpy2DAsync_v2_ptsz",
        "cuStreamCreate",
        "cuStreamDestroy_v2",
        "cuStreamWaitValue32_v2",
        "cuMemRetainAllocationHandle",
        "cuMemGetAllocationPropertiesFromHandle",
        "cuLaunchCooperativeKernel",
        "cuLaunchHostFunc",
    ] {
        assert!(ipc_tracer::TRACED.contains(&name), "{name} is not traced");
    }
}

#[test]
fn the_tracer_writes_the_format_s_constants() {
    use ipc_harness::trace_record as format;
    assert_eq!(
        ipc_tracer::writer::DIR_ENV.to_str().unwrap(),
        format::DIR_ENV
    );
    assert_eq!(ipc_tracer::writer::COVERAGE, format::COVERAGE);
    const { assert!(format::COVERAGE >= 1) };
    assert_eq!(
        ipc_tracer::writer::SYMBOLS,
        "libcuda-580.159.04",
        "the symbol list named in the header is the one this test reads"
    );
}

/// Every key a wrapper writes, taken from the sources (`a.n("ptr", ..)`,
/// `line.u64("pid", ..)`, the key arrays of the 2D/3D copies).
fn keys_written(source: &str, methods: &[&str]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for method in methods {
        let pattern = format!("{method}(");
        for (at, _) in source.match_indices(&pattern) {
            let before = source[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = source[at + pattern.len()..].trim_start();
            let rest = rest.strip_prefix("&mut a,").map_or(rest, str::trim_start);
            if let Some(rest) = rest.strip_prefix('"') {
                let key: String = rest.chars().take_while(|c| *c != '"').collect();
                keys.insert(key);
            }
        }
    }
    keys
}

fn field_names(value: serde_json::Value) -> BTreeSet<String> {
    value.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn every_key_the_wrappers_write_is_a_field_of_the_format() {
    use ipc_harness::trace_record::{CallArgs, HostArgs};
    let all_call_args = CallArgs {
        ptr: Some(1),
        src: Some(1),
        size: Some(1),
        offset: Some(1),
        value: Some(1),
        flags: Some(1),
        device: Some(1),
        ctx: Some(1),
        event: Some(1),
        stream: Some(1),
        vmm: Some(1),
        handle: Some(String::new()),
        handle_type: Some(1),
        fd: Some(1),
        fd_identity: Some(String::new()),
        access: Some(vec![]),
        pointer_args: Some(vec![]),
        pool: Some(1),
        src_ctx: Some(1),
        dst_kind: Some(String::new()),
        src_kind: Some(String::new()),
        src_size: Some(1),
        pitch: Some(1),
        src_pitch: Some(1),
        width: Some(1),
        height: Some(1),
        depth: Some(1),
        base: Some(1),
        priority: Some(1),
        location_type: Some(1),
        attrs: Some(vec![]),
        count: Some(1),
        objects: Some(vec![]),
        external: Some(1),
        bound_vmm: Some(1),
        src_offset: Some(1),
        device_uuid: Some(String::new()),
    };
    let call_fields = field_names(serde_json::to_value(all_call_args).unwrap());
    let calls = include_str!("../src/calls.rs");
    let mut written = keys_written(
        calls,
        &[
            "n",
            "i",
            "text",
            "hex",
            "list",
            "pairs",
            "out",
            "out_handle",
            "handle64",
            "kind",
        ],
    );
    // The 2D/3D copies name their keys in arrays.
    for key in [
        "ptr",
        "size",
        "pitch",
        "dst_kind",
        "src",
        "src_size",
        "src_pitch",
        "src_kind",
    ] {
        assert!(calls.contains(&format!("\"{key}\"")));
        written.insert(key.to_string());
    }
    let unknown: Vec<&String> = written.difference(&call_fields).collect();
    assert!(
        unknown.is_empty(),
        "call keys outside CallArgs: {unknown:?}"
    );
    assert!(written.len() > 30, "{written:?}");

    let all_host_args = HostArgs {
        fd: Some(1),
        object: Some(String::new()),
        peer: Some(String::new()),
        sock_type: Some(String::new()),
        local: Some(String::new()),
        peer_path: Some(String::new()),
        path: Some(String::new()),
        bytes: Some(1),
        fds: Some(vec![]),
        pid: Some(1),
        status: Some(1),
        new_fd: Some(1),
        target_fd: Some(1),
        env_traced: Some(true),
        setid: Some(true),
    };
    let host_fields = field_names(serde_json::to_value(all_host_args).unwrap());
    let host = [
        include_str!("../src/host.rs"),
        include_str!("../src/fds.rs"),
    ]
    .concat();
    let mut written = keys_written(
        &host,
        &[
            "u64",
            "i64",
            "str",
            "bytes_str",
            "bool",
            "i64_list",
            "write",
        ],
    );
    // The line's own fields, outside `args`.
    for own in ["op", "call", "result", "t_ns", "dur_ns", "errno"] {
        written.remove(own);
    }
    let unknown: Vec<&String> = written.difference(&host_fields).collect();
    assert!(
        unknown.is_empty(),
        "host keys outside HostArgs: {unknown:?}"
    );
    assert!(written.len() > 10, "{written:?}");
}

#[test]
fn lines_built_on_the_stack_parse_as_the_format() {
    use ipc_harness::trace_record::TraceLine;
    use ipc_tracer::json::Line;
    let mut line = Line::new("host");
    line.u64("seq", 3);
    line.str("op", "send");
    line.str("call", "sendmsg");
    line.i64("result", 1);
    line.u64("t_ns", 5);
    line.u64("dur_ns", 1);
    line.u64("tid", 7);
    line.open("args");
    line.i64("fd", 4);
    line.bytes_str("path", b"/tmp/a \"b\"\n\x01\xff", 100);
    line.i64_list("fds", [21, 22]);
    line.close();
    let text = line.finish().to_vec();
    let parsed: TraceLine = serde_json::from_slice(&text).unwrap();
    let TraceLine::Host(host) = parsed else {
        panic!("{}", String::from_utf8_lossy(&text))
    };
    assert_eq!(
        host.args.path.as_deref(),
        Some("/tmp/a \"b\"\n\u{1}\u{fffd}")
    );
    assert_eq!(host.args.fds, Some(vec![21, 22]));
    assert_eq!(host.result, Some(1));

    // A line longer than the stack buffer moves to the heap, whole.
    let mut line = Line::new("call");
    line.u64("seq", 0);
    line.str("call", "cuLaunchKernel");
    line.i64("result", 0);
    line.u64("t_ns", 1);
    line.u64("dur_ns", 1);
    line.u64("tid", 1);
    line.open("args");
    line.u64_list("pointer_args", (0..1024).map(|i| u64::MAX - i));
    line.close();
    let text = line.finish().to_vec();
    assert!(text.len() > ipc_tracer::json::INLINE);
    let TraceLine::Call(call) = serde_json::from_slice(&text).unwrap() else {
        panic!()
    };
    assert_eq!(call.args.pointer_args.unwrap().len(), 1024);
}
