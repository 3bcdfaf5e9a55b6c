//! `check` on trace folders written here, record by record: the verdicts
//! of hostile or unusual folders (a name with a newline, hundreds of
//! processes, a FIFO, two programs in one folder), the races the
//! synchronisation table decides, descriptors followed through host
//! records, and the three outcomes with their exit codes.

use ipc_conformance::trace_check::model::FindingClass;
use ipc_conformance::trace_check::{check_folder, load, report::CheckReport};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One process's file, built record by record with a rising clock.
struct Proc {
    pid: u32,
    lines: Vec<Value>,
    seq: u64,
}

impl Proc {
    fn new(pid: u32, ppid: u32, exe: &str) -> Proc {
        Proc {
            pid,
            lines: vec![
                json!({"kind": "header", "pid": pid, "ppid": ppid, "exe": exe,
                "start_ns": 0, "tracer_version": "0.1.0"}),
            ],
            seq: 0,
        }
    }

    /// A header of tracer coverage 1 (host records, header at load).
    fn covered(pid: u32, ppid: u32, origin: &str, start: u64) -> Proc {
        Proc {
            pid,
            lines: vec![
                json!({"kind": "header", "pid": pid, "ppid": ppid, "exe": "prog",
                "start_ns": start, "tracer_version": "0.2.0", "coverage": 1,
                "origin": origin, "pid_ns": 4026531836u64, "proc_start": pid}),
            ],
            seq: 0,
        }
    }

    fn call(&mut self, t: u64, name: &str, result: i32, args: Value) -> &mut Proc {
        self.lines
            .push(json!({"kind": "call", "seq": self.seq, "call": name,
            "result": result, "t_ns": t, "dur_ns": 10, "tid": self.pid, "args": args}));
        self.seq = self.seq.wrapping_add(1);
        self
    }

    fn host(&mut self, t: u64, op: &str, result: i64, args: Value) -> &mut Proc {
        self.lines.push(
            json!({"kind": "host", "seq": self.seq, "op": op, "call": op,
            "result": result, "t_ns": t, "dur_ns": 10, "tid": self.pid, "args": args}),
        );
        self.seq = self.seq.wrapping_add(1);
        self
    }

    fn exit(&mut self, t: u64) -> &mut Proc {
        self.lines.push(json!({"kind": "exit", "t_ns": t}));
        self
    }

    fn file(&self) -> (String, Vec<u8>) {
        let mut text = String::new();
        for l in &self.lines {
            text.push_str(&l.to_string());
            text.push('\n');
        }
        (format!("trace-{}.jsonl", self.pid), text.into_bytes())
    }
}

fn judge(procs: &[&Proc]) -> (CheckReport, String) {
    let files: Vec<(String, Vec<u8>)> = procs.iter().map(|p| p.file()).collect();
    check_folder(load::read_files(&files), "test")
}

fn hazards(report: &CheckReport) -> Vec<String> {
    let mut k: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.class == FindingClass::Hazard && !f.after_divergence)
        .map(|f| f.kind.clone())
        .collect();
    k.sort();
    k.dedup();
    k
}

fn notes(report: &CheckReport, kind: &str) -> usize {
    report
        .findings
        .iter()
        .filter(|f| f.kind == kind && f.class == FindingClass::Note)
        .count()
}

const BUF: u64 = 0x7f00_0000_0000;
const MAPPED: u64 = 0x7e00_0000_0000;
const HANDLE: &str = "4d454d48000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001";

/// The exporter's first calls: a context, an allocation and its handle.
fn exporter(pid: u32) -> Proc {
    let mut p = Proc::new(pid, 1, "exporter");
    p.call(
        100,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    )
    .call(110, "cuCtxSetCurrent", 0, json!({"ctx": 1}))
    .call(
        120,
        "cuMemAlloc_v2",
        0,
        json!({"ptr": BUF, "size": 1 << 20}),
    )
    .call(
        130,
        "cuIpcGetMemHandle",
        0,
        json!({"ptr": BUF, "handle": HANDLE}),
    );
    p
}

/// An importer opening the exporter's handle.
fn importer(pid: u32, t: u64) -> Proc {
    let mut p = Proc::new(pid, 1, "importer");
    p.call(
        t,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 2, "device": 0}),
    )
    .call(t + 10, "cuCtxSetCurrent", 0, json!({"ctx": 2}))
    .call(
        t + 20,
        "cuIpcOpenMemHandle_v2",
        0,
        json!({"ptr": MAPPED, "handle": HANDLE, "flags": 1}),
    );
    p
}

#[test]
fn a_memset_read_by_another_process_without_a_wait_is_a_race_naming_its_rows() {
    let mut p1 = exporter(10);
    p1.call(
        140,
        "cuMemsetD32_v2",
        0,
        json!({"ptr": BUF, "value": 7, "size": 1 << 20}),
    );
    let mut p2 = importer(11, 200);
    p2.call(
        300,
        "cuMemcpyDtoH_v2",
        0,
        json!({"ptr": 0x1000, "src": MAPPED, "size": 64}),
    )
    .call(310, "cuIpcCloseMemHandle", 0, json!({"ptr": MAPPED}))
    .exit(320);
    p1.call(400, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .exit(410);
    let (report, _) = judge(&[&p1, &p2]);
    assert_eq!(
        hazards(&report),
        ["unsynchronized-read"],
        "{}",
        text(&report)
    );
    let race = report
        .findings
        .iter()
        .find(|f| f.kind == "unsynchronized-read")
        .unwrap();
    assert_eq!(race.rules, ["memset-device", "dtoh"], "{race:?}");
    assert_eq!((race.process.as_str(), race.seq), ("p2", Some(3)));
    assert!(report.sync_rules.iter().any(|r| r.id == "memset-device"));
    assert_eq!(report.exit_code, 1);
}

#[test]
fn a_write_after_another_process_s_unwaited_memset_is_a_race_too() {
    let mut p1 = exporter(10);
    p1.call(
        140,
        "cuMemsetD8_v2",
        0,
        json!({"ptr": BUF, "value": 7, "size": 1 << 20}),
    );
    let mut p2 = importer(11, 200);
    p2.call(
        300,
        "cuMemsetD8_v2",
        0,
        json!({"ptr": MAPPED, "value": 1, "size": 4096}),
    )
    .call(310, "cuIpcCloseMemHandle", 0, json!({"ptr": MAPPED}))
    .exit(320);
    p1.call(400, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .exit(410);
    let (report, _) = judge(&[&p1, &p2]);
    assert_eq!(
        hazards(&report),
        ["unsynchronized-read"],
        "{}",
        text(&report)
    );
}

#[test]
fn a_writer_that_synchronised_orders_the_read_by_the_clock_only_a_note() {
    let mut p1 = exporter(10);
    p1.call(
        140,
        "cuMemsetD8_v2",
        0,
        json!({"ptr": BUF, "value": 7, "size": 1 << 20}),
    )
    .call(150, "cuCtxSynchronize", 0, json!({}));
    let mut p2 = importer(11, 200);
    p2.call(
        300,
        "cuMemcpyDtoH_v2",
        0,
        json!({"ptr": 0x1000, "src": MAPPED, "size": 64}),
    )
    .call(310, "cuIpcCloseMemHandle", 0, json!({"ptr": MAPPED}))
    .exit(320);
    p1.call(400, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .exit(410);
    let (report, _) = judge(&[&p1, &p2]);
    assert!(hazards(&report).is_empty(), "{}", text(&report));
    assert_eq!(notes(&report, "host-ordered"), 1, "{}", text(&report));
    assert_eq!(report.verdict, "clean");
}

#[test]
fn a_recorded_pipe_message_after_the_sync_orders_the_read_without_a_note() {
    let mut p1 = Proc::covered(10, 1, "load", 50);
    p1.call(
        100,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    )
    .call(110, "cuCtxSetCurrent", 0, json!({"ctx": 1}))
    .call(
        120,
        "cuMemAlloc_v2",
        0,
        json!({"ptr": BUF, "size": 1 << 20}),
    )
    .call(
        130,
        "cuIpcGetMemHandle",
        0,
        json!({"ptr": BUF, "handle": HANDLE}),
    )
    .host(135, "fork", 11, json!({"pid": 11}))
    .call(
        140,
        "cuMemsetD8_v2",
        0,
        json!({"ptr": BUF, "value": 7, "size": 1 << 20}),
    )
    .call(150, "cuCtxSynchronize", 0, json!({}))
    .host(
        160,
        "send",
        1,
        json!({"fd": 4, "object": "pipe:1:2", "bytes": 1}),
    );
    let mut p2 = Proc::covered(11, 10, "fork", 136);
    p2.call(
        200,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 2, "device": 0}),
    )
    .call(210, "cuCtxSetCurrent", 0, json!({"ctx": 2}))
    .call(
        220,
        "cuIpcOpenMemHandle_v2",
        0,
        json!({"ptr": MAPPED, "handle": HANDLE, "flags": 1}),
    )
    .host(
        225,
        "recv",
        1,
        json!({"fd": 3, "object": "pipe:1:2", "bytes": 1}),
    )
    .call(
        300,
        "cuMemcpyDtoH_v2",
        0,
        json!({"ptr": 0x1000, "src": MAPPED, "size": 64}),
    )
    .call(310, "cuIpcCloseMemHandle", 0, json!({"ptr": MAPPED}))
    .exit(320);
    p1.host(330, "wait", 11, json!({"pid": 11, "status": 0}))
        .call(400, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .exit(410);
    let (report, _) = judge(&[&p1, &p2]);
    assert!(hazards(&report).is_empty(), "{}", text(&report));
    assert_eq!(notes(&report, "host-ordered"), 0, "{}", text(&report));
    assert_eq!(report.verdict, "clean", "{}", text(&report));
}

#[test]
fn descriptors_passed_over_a_socket_are_followed_by_number() {
    let mut p1 = Proc::covered(10, 1, "load", 50);
    p1.call(100, "cuCtxCreate_v4", 0, json!({"ctx": 1, "device": 0}))
        .call(
            110,
            "cuMemCreate",
            0,
            json!({"vmm": 7, "size": 2 << 20, "handle_type": 1, "device": 0}),
        )
        .call(
            120,
            "cuMemExportToShareableHandle",
            0,
            json!({"vmm": 7, "handle_type": 1, "fd": 5}),
        )
        .host(
            125,
            "describe",
            0,
            json!({"fd": 6, "object": "socket:100", "peer": "socket:200"}),
        )
        .host(
            130,
            "send",
            1,
            json!({"fd": 6, "object": "socket:100", "bytes": 1, "fds": [5]}),
        );
    let mut p2 = Proc::covered(11, 1, "load", 60);
    p2.call(105, "cuCtxCreate_v4", 0, json!({"ctx": 2, "device": 1}))
        .host(
            126,
            "describe",
            0,
            json!({"fd": 3, "object": "socket:200", "peer": "socket:100"}),
        )
        .host(
            127,
            "recv",
            1,
            json!({"fd": 3, "object": "socket:200", "bytes": 1, "fds": [9]}),
        )
        .call(
            140,
            "cuMemImportFromShareableHandle",
            0,
            json!({"vmm": 70, "handle_type": 1, "fd": 9}),
        )
        .call(150, "cuMemRelease", 0, json!({"vmm": 70}))
        .exit(160);
    p1.call(200, "cuMemRelease", 0, json!({"vmm": 7})).exit(210);
    let (report, replay) = judge(&[&p1, &p2]);
    assert_eq!(report.verdict, "clean", "{}", text(&report));
    assert!(
        replay.contains("p2_f") && replay.contains("= send_fd p1_f"),
        "{replay}"
    );
    assert!(replay.contains("= vmm_import p2_f"), "{replay}");
    // The second process made its context on device 1.
    assert!(replay.contains("process p2 device=1"), "{replay}");
    assert!(
        !report
            .notes
            .iter()
            .any(|n| n.contains("paired with exports in the order")),
        "{:?}",
        report.notes
    );
}

#[test]
fn an_allocation_the_simulator_answers_otherwise_is_a_divergence_not_a_clean_verdict() {
    // The driver answered a 1 PiB allocation with success: the simulator
    // refuses it, its state is no longer the driver's, and the trace is
    // not judged from there.
    let mut p1 = Proc::new(10, 1, "prog");
    p1.call(
        100,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    )
    .call(110, "cuCtxSetCurrent", 0, json!({"ctx": 1}))
    .call(
        120,
        "cuMemAlloc_v2",
        0,
        json!({"ptr": BUF, "size": 1u64 << 50}),
    )
    .call(130, "cuMemFree_v2", 0, json!({"ptr": BUF}))
    .exit(140);
    let (report, _) = judge(&[&p1]);
    assert_eq!(report.verdict, "not judged", "{}", text(&report));
    assert_eq!(report.exit_code, 4);
    assert!(
        report
            .reasons
            .iter()
            .any(|r| r.contains("diverges at p1 (pid 10) cuMemAlloc_v2 seq 2")),
        "{:?}",
        report.reasons
    );
    let diverged = report
        .findings
        .iter()
        .find(|f| f.kind == "diverged")
        .unwrap();
    assert_eq!(
        (diverged.class, diverged.seq),
        (FindingClass::Fidelity, Some(2))
    );
    assert!(
        diverged.detail.contains("the driver answered ok"),
        "{diverged:?}"
    );
}

#[test]
fn a_second_unmap_is_flagged_whatever_the_driver_answered() {
    let mut p1 = Proc::new(10, 1, "prog");
    p1.call(100, "cuCtxCreate_v4", 0, json!({"ctx": 1, "device": 0}))
        .call(
            110,
            "cuMemCreate",
            0,
            json!({"vmm": 7, "size": 2 << 20, "handle_type": 0, "device": 0}),
        )
        .call(
            120,
            "cuMemAddressReserve",
            0,
            json!({"ptr": BUF, "size": 2 << 20}),
        )
        .call(
            130,
            "cuMemMap",
            0,
            json!({"ptr": BUF, "size": 2 << 20, "offset": 0, "vmm": 7}),
        )
        .call(140, "cuMemUnmap", 0, json!({"ptr": BUF, "size": 2 << 20}))
        .call(150, "cuMemUnmap", 1, json!({"ptr": BUF, "size": 2 << 20}))
        .call(160, "cuMemRelease", 0, json!({"vmm": 7}))
        .call(
            170,
            "cuMemAddressFree",
            0,
            json!({"ptr": BUF, "size": 2 << 20}),
        )
        .exit(180);
    let (report, _) = judge(&[&p1]);
    assert_eq!(hazards(&report), ["double-unmap"], "{}", text(&report));
    assert_eq!(report.exit_code, 1);
}

#[test]
fn frees_of_memory_never_seen_allocated_are_not_judged_clean() {
    let mut p1 = Proc::new(10, 1, "prog");
    p1.call(
        100,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    )
    .call(110, "cuMemFreeAsync", 0, json!({"ptr": BUF, "stream": 0}))
    .exit(120);
    let (report, _) = judge(&[&p1]);
    assert_eq!(report.verdict, "not judged");
    assert!(
        report.reasons[0].contains("frees memory no recorded call allocated")
            && report.reasons[0].contains("tracer 0.1.0"),
        "{:?}",
        report.reasons
    );
}

#[test]
fn a_lookup_of_an_entry_point_the_tracer_does_not_know_is_not_judged_clean() {
    let mut p1 = Proc::covered(10, 1, "load", 50);
    p1.call(
        100,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    );
    p1.lines.push(
        json!({"kind": "lookup", "seq": p1.seq, "via": "cuGetProcAddress_v2",
        "symbol": "cuMemFutureShare", "t_ns": 110, "tid": 10}),
    );
    p1.seq += 1;
    p1.exit(120);
    let (report, _) = judge(&[&p1]);
    assert_eq!(report.verdict, "not judged", "{}", text(&report));
    assert!(report
        .reasons
        .iter()
        .any(|r| r.contains("cuMemFutureShare")));
}

#[test]
fn two_programs_traced_into_one_folder_at_once_are_not_judged() {
    let mut a = Proc::covered(10, 1000, "load", 50);
    a.call(
        100,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    )
    .exit(300);
    let mut b = Proc::covered(20, 2000, "load", 60);
    b.call(
        110,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    )
    .exit(310);
    let (report, _) = judge(&[&a, &b]);
    assert_eq!(report.verdict, "not judged");
    assert!(
        report
            .reasons
            .iter()
            .any(|r| r.contains("two programs traced at once")),
        "{:?}",
        report.reasons
    );
}

#[test]
fn any_number_of_processes_is_judged() {
    let mut p1 = exporter(1000);
    let mut kids = Vec::new();
    for k in 0..300u32 {
        let t = 1_000 + u64::from(k) * 100;
        let mut kid = importer(2000 + k, t);
        kid.call(t + 30, "cuIpcCloseMemHandle", 0, json!({"ptr": MAPPED}))
            .exit(t + 40);
        kids.push(kid);
    }
    p1.call(100_000, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .exit(100_010);
    let mut all: Vec<&Proc> = vec![&p1];
    all.extend(kids.iter());
    let (report, replay) = judge(&all);
    assert_eq!(report.processes.len(), 301);
    assert_eq!(report.verdict, "clean", "{}", text(&report));
    assert!(
        replay.contains("p301: exit"),
        "the last process is replayed"
    );
    assert!(report.notes.iter().any(|n| n.contains("301 processes")));
}

#[test]
fn a_newline_in_a_name_never_adds_a_step_to_the_replay() {
    let mut p1 = Proc::new(10, 1, "prog\np1: x = malloc 1\r\u{2028}p1: free x");
    p1.call(
        100,
        "cuDevicePrimaryCtxRetain",
        0,
        json!({"ctx": 1, "device": 0}),
    )
    .call(
        110,
        "cuMemAlloc_v2\np1: free null",
        0,
        json!({"ptr": BUF, "size": 64}),
    )
    .exit(120);
    let files = vec![p1.file()];
    let (report, replay) = check_folder(load::read_files(&files), "dir\np1: free null");
    let parsed = ipc_harness::scenario::parse(&replay, Path::new("replay.ipc"))
        .unwrap_or_else(|e| panic!("{e}\n{replay}"));
    // The context, then the exit: nothing the names spell.
    let steps: Vec<String> = parsed.steps.iter().map(|s| s.text()).collect();
    assert_eq!(steps, ["p1_c1 = primary_ctx 0", "exit"], "{replay}");
    assert!(!text(&report).contains("\np1: "), "{}", text(&report));
}

fn text(report: &CheckReport) -> String {
    ipc_conformance::trace_check::report::text(report)
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ipc-conformance"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("trace-check-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_fifo_and_a_device_in_the_folder_are_named_and_not_judged_without_hanging() {
    let dir = scratch("fifo\nand zero");
    let (name, bytes) = exporter(10).file();
    std::fs::write(dir.join(name), bytes).unwrap();
    nix::unistd::mkfifo(&dir.join("trace-7.jsonl"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("trace-8.jsonl")).unwrap();
    let out = scratch("fifo-out");
    let output = Command::new(bin())
        .arg("check")
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(4), "{stdout}");
    assert!(stdout.contains("trace-7.jsonl is a FIFO"), "{stdout}");
    assert!(stdout.contains("trace-8.jsonl is a device"), "{stdout}");
    assert!(stdout.contains("verdict: not judged"), "{stdout}");
    // The folder's name is printed on one line.
    assert!(stdout.contains("fifo\\nand zero"), "{stdout}");
}

#[test]
fn the_exit_codes_are_those_of_the_three_outcomes() {
    let mut clean = exporter(10);
    clean
        .call(200, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .exit(210);
    let mut hazard = exporter(10);
    hazard
        .call(200, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .call(210, "cuMemFree_v2", 1, json!({"ptr": BUF}))
        .exit(220);
    let mut unjudged = Proc::new(10, 1, "prog");
    unjudged
        .call(
            100,
            "cuDevicePrimaryCtxRetain",
            0,
            json!({"ctx": 1, "device": 0}),
        )
        .call(110, "cuMemFree_v2", 0, json!({"ptr": BUF}))
        .exit(120);
    for (name, p, code) in [
        ("clean", clean, 0),
        ("hazard", hazard, 1),
        ("unjudged", unjudged, 4),
    ] {
        let dir = scratch(name);
        let (file, bytes) = p.file();
        std::fs::write(dir.join(file), bytes).unwrap();
        let output = Command::new(bin()).arg("check").arg(&dir).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(code),
            "{name}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("check.json")).unwrap())
                .unwrap();
        assert_eq!(report["exit_code"], code, "{name}");
    }
}

/// Found by the debug build's fuzzing: each replay parses back and nothing
/// panics.
#[test]
fn odd_records_the_fuzzer_found_still_give_a_replay_that_parses() {
    let parses = |replay: &str| {
        ipc_harness::scenario::parse(replay, std::path::Path::new("replay.ipc"))
            .unwrap_or_else(|e| panic!("{e}\n{replay}"));
    };
    // A record whose seq is the largest number there is.
    let mut p = Proc::covered(10, 1, "load", 50);
    p.call(100, "cuCtxCreate_v4", 0, json!({"ctx": 1, "device": 0}));
    p.seq = u64::MAX;
    p.call(110, "cuMemAlloc_v2", 0, json!({"ptr": 4096, "size": 64}));
    let (report, replay) = judge(&[&p]);
    assert_eq!(report.verdict, "not judged", "{}", text(&report));
    parses(&replay);

    // A descriptor sent to the process itself (one socket pair in one
    // process): no send_fd to itself, and the import still finds it.
    let mut p = Proc::covered(10, 1, "load", 50);
    p.call(100, "cuCtxCreate_v4", 0, json!({"ctx": 1, "device": 0}))
        .call(
            110,
            "cuMemCreate",
            0,
            json!({"vmm": 7, "size": 2 << 20, "handle_type": 1, "device": 0}),
        )
        .call(
            120,
            "cuMemExportToShareableHandle",
            0,
            json!({"vmm": 7, "handle_type": 1, "fd": 5}),
        )
        .host(
            125,
            "describe",
            0,
            json!({"fd": 6, "object": "socket:100", "peer": "socket:200"}),
        )
        .host(
            126,
            "describe",
            0,
            json!({"fd": 3, "object": "socket:200", "peer": "socket:100"}),
        )
        .host(
            130,
            "send",
            1,
            json!({"fd": 6, "object": "socket:100", "bytes": 1, "fds": [5]}),
        )
        .host(
            131,
            "recv",
            1,
            json!({"fd": 3, "object": "socket:200", "bytes": 1, "fds": [9]}),
        )
        .call(
            140,
            "cuMemImportFromShareableHandle",
            0,
            json!({"vmm": 70, "handle_type": 1, "fd": 9}),
        )
        .exit(160);
    let (_, replay) = judge(&[&p]);
    assert!(!replay.contains("send_fd"), "{replay}");
    parses(&replay);

    // A copy from a null device pointer: nothing of it lands in memory
    // the replay holds, so no empty write.
    let mut p = Proc::covered(10, 1, "load", 50);
    p.call(100, "cuCtxCreate_v4", 0, json!({"ctx": 1, "device": 0}))
        .call(110, "cuMemAlloc_v2", 0, json!({"ptr": 4096, "size": 64}))
        .call(
            120,
            "cuMemcpyHtoD_v2",
            0,
            json!({"ptr": 0, "src": 77, "size": 16, "src_kind": "pageable"}),
        )
        .call(130, "cuMemFree_v2", 0, json!({"ptr": 4096}))
        .exit(160);
    let (_, replay) = judge(&[&p]);
    assert!(!replay.contains("*0"), "{replay}");
    parses(&replay);
}
