//! `ipc-conformance trace` and `check` on real programs: small C programs
//! (and a Python one) built here with `cc`, run against a stand-in libcuda
//! (tracer/tests/fake/libcuda.c) first on the library path. The correct
//! programs must trace clean and each broken variant must be flagged with
//! the hazard that names its bug.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ipc-conformance"))
}

/// The tracer library the binary carries, as its build left it (for the
/// tests that pass `--tracer` or `$IPC_TRACER_LIB`).
fn built_tracer() -> PathBuf {
    let build = bin().parent().unwrap().join("build");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&build)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("out/libipc_tracer.so"))
        .filter(|p| p.is_file())
        .collect();
    found.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    found.pop().expect("conformance/build.rs built the tracer")
}

/// A scratch directory with the fake libcuda and the test programs, or
/// `None` (printed as SKIPPED) when there is no C compiler.
fn workdir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if Command::new("cc").arg("--version").output().is_err() {
            eprintln!("SKIPPED: no C compiler (cc) to build the traced test programs");
            return None;
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("trace-programs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = root().join("tracer/tests");
        let cc = |args: &[&str]| {
            let out = Command::new("cc")
                .args(args)
                .current_dir(&dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cc {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let fake = src.join("fake/libcuda.c");
        cc(&[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            "libcuda.so.1",
            fake.to_str().unwrap(),
        ]);
        std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
        let pair = src.join("programs/ipc_pair.c");
        cc(&["-o", "ipc_pair", pair.to_str().unwrap(), "-L.", "-lcuda"]);
        let pa = src.join("programs/procaddress.c");
        cc(&["-o", "procaddress", pa.to_str().unwrap(), "-ldl"]);
        for program in [
            "closefrom",
            "planted",
            "exec_env",
            "fdpass",
            "pidfd_syscall",
        ] {
            let source = src.join(format!("programs/{program}.c"));
            cc(&[
                "-o",
                program,
                source.to_str().unwrap(),
                "-L.",
                "-lcuda",
                "-lpthread",
            ]);
        }
        Some(dir)
    })
    .clone()
}

fn trace(dir: &Path, name: &str, cmd: &[&str]) -> (Output, PathBuf) {
    let out = dir.join(name);
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(bin())
        .arg("trace")
        .arg("--out")
        .arg(&out)
        .arg("--")
        .args(cmd)
        .current_dir(dir)
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .unwrap();
    (output, out)
}

fn check(traces: &Path) -> (i32, serde_json::Value) {
    let output = Command::new(bin())
        .arg("check")
        .arg(traces)
        .output()
        .unwrap();
    let code = output.status.code().unwrap_or(-1);
    let report = std::fs::read_to_string(traces.join("check.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (code, report)
}

fn hazard_kinds(report: &serde_json::Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["class"] == "hazard" && f["after_divergence"] != true)
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// `ipc_pair VARIANT` traced into a folder of the calling test's own
/// (`test`): tests run at once, and two traces in one folder are two
/// programs.
fn traced_and_checked(test: &str, variant: &str) -> Option<(i32, serde_json::Value)> {
    let dir = workdir()?;
    let (output, traces) = trace(&dir, &format!("{test}-{variant}"), &["./ipc_pair", variant]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    Some(check(&traces))
}

#[test]
fn the_correct_program_traces_clean_and_replays_on_the_simulator() {
    let Some((code, report)) = traced_and_checked("clean", "ok") else {
        return;
    };
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["verdict"], "clean");
    assert_eq!(report["processes"].as_array().unwrap().len(), 2);
    for run in report["simulator"].as_array().unwrap() {
        assert_eq!(
            run["status"], "Pass",
            "the replay answers as the driver did: {run}"
        );
    }
    let dir = workdir().unwrap();
    let replay = std::fs::read_to_string(dir.join("clean-ok/replay.ipc")).unwrap();
    for step in [
        "= ipc_get p1_a",
        "send p1_h",
        "= ipc_open p1_h",
        "ipc_close p2_q",
        "stream_wait",
    ] {
        assert!(replay.contains(step), "replay lacks '{step}':\n{replay}");
    }
}

#[test]
fn each_broken_variant_is_flagged_with_the_hazard_that_names_its_bug() {
    for (variant, hazard) in [
        ("free-before-close", "free-while-mapped"),
        ("no-wait", "unsynchronized-read"),
        ("double-close", "double-close"),
        ("leak", "mapping-leaked-at-exit"),
    ] {
        let Some((code, report)) = traced_and_checked("broken", variant) else {
            return;
        };
        assert_eq!(code, 1, "{variant}: {report:#}");
        assert!(
            hazard_kinds(&report).contains(&hazard.to_string()),
            "{variant} should be flagged {hazard}: {report:#}"
        );
    }
}

/// The choices the reliance section names, over every differing step.
fn relied_on_choices(report: &serde_json::Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = report["reliance"]["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["choices"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["choice"].as_str().unwrap().to_string(),
                c["tier"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn the_correct_programs_rely_only_on_contract_behaviour() {
    for variant in ["ok", "vmm"] {
        let Some((_, report)) = traced_and_checked("reliance", variant) else {
            return;
        };
        let reliance = &report["reliance"];
        assert_eq!(reliance["relies_on"], "contract", "{variant}: {reliance:#}");
        assert!(
            reliance["steps"].as_array().unwrap().is_empty(),
            "{variant}: {reliance:#}"
        );
    }
}

#[test]
fn reopening_a_handle_after_free_and_reallocation_relies_on_va_reuse() {
    let Some((code, report)) = traced_and_checked("reuse", "reuse") else {
        return;
    };
    let reliance = &report["reliance"];
    assert_eq!(reliance["relies_on"], "incidental", "{reliance:#}");
    assert!(
        relied_on_choices(&report).contains(&("va_reuse".into(), "incidental".into())),
        "{reliance:#}"
    );
    // The re-open itself is named, with the traced call behind it.
    let reopen = reliance["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["call"] == "cuIpcOpenMemHandle_v2" && s["profile"] == "documented")
        .unwrap_or_else(|| panic!("no differing re-open: {reliance:#}"));
    assert!(reopen["seq"].is_u64(), "{reopen}");
    assert!(reopen["op"].as_str().unwrap().contains("ipc_open p1_h"));
    // Reliance is reported, not judged: the exit code follows the hazards
    // (the simulator flags the open of a freed block's handle).
    let hazards = hazard_kinds(&report);
    assert_eq!(code, if hazards.is_empty() { 0 } else { 1 }, "{report:#}");
    let dir = workdir().unwrap();
    let text = std::fs::read_to_string(dir.join("reuse-reuse/check.txt")).unwrap();
    assert!(
        text.contains("relies on incidental behaviour") && text.contains("va_reuse=never"),
        "{text}"
    );
}

#[test]
fn a_failing_open_carried_on_past_is_an_ignored_error() {
    let Some((_, report)) = traced_and_checked("ignored", "ignored-error") else {
        return;
    };
    let ignored: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["class"] == "ignored-error")
        .collect();
    assert!(!ignored.is_empty(), "{report:#}");
    assert!(ignored[0]["detail"]
        .as_str()
        .unwrap()
        .contains("cuIpcOpenMemHandle"));
}

#[test]
fn vmm_sharing_over_a_descriptor_traces_clean() {
    let Some((code, report)) = traced_and_checked("vmm-clean", "vmm") else {
        return;
    };
    assert_eq!(code, 0, "{report:#}");
    let dir = workdir().unwrap();
    let replay = std::fs::read_to_string(dir.join("vmm-clean-vmm/replay.ipc")).unwrap();
    assert!(replay.contains("= send_fd p1_f"), "{replay}");
    assert!(replay.contains("= vmm_import p2_f"), "{replay}");
    for run in report["simulator"].as_array().unwrap() {
        assert_eq!(run["status"], "Pass", "{run}");
    }
}

#[test]
fn vmm_broken_variants_are_flagged_and_an_early_release_is_not() {
    for (variant, hazards) in [
        // cuMemRelease: the allocation is freed only once every mapping is
        // unmapped and every handle released, so an exporter releasing while
        // the importer maps is defined.
        ("vmm-free-before-release", &[][..]),
        ("vmm-double-close", &["double-release", "double-unmap"][..]),
        ("vmm-leak", &["vmm-leaked-at-exit"][..]),
    ] {
        let Some((code, report)) = traced_and_checked("vmm-broken", variant) else {
            return;
        };
        let mut kinds = hazard_kinds(&report);
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds, hazards, "{variant}: {report:#}");
        assert_eq!(code, i32::from(!hazards.is_empty()), "{variant}");
    }
}

#[test]
fn calls_through_dlsym_and_cu_get_proc_address_are_recorded() {
    let Some(dir) = workdir() else { return };
    let (output, traces) = trace(&dir, "traces-procaddress", &["./procaddress"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // The one trace file (beside it, trace's program-end.json).
    let file = std::fs::read_dir(&traces)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("trace-"))
        .expect("a trace file")
        .path();
    let text = std::fs::read_to_string(file).unwrap();
    let calls: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "call")
        .map(|v| v["call"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        calls,
        ["cuMemAlloc_v2", "cuIpcGetMemHandle", "cuMemFree_v2"]
    );
}

#[test]
fn tracing_a_program_without_cuda_records_nothing_and_exits_0() {
    let Some(dir) = workdir() else { return };
    for cmd in [&["true"][..], &["sh", "-c", "echo hello"][..]] {
        let (output, traces) = trace(&dir, "nothing", cmd);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("nothing was recorded"), "{stdout}");
        let checked = Command::new(bin())
            .arg("check")
            .arg(&traces)
            .output()
            .unwrap();
        assert_eq!(checked.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&checked.stdout).contains("nothing was recorded"));
    }
}

#[test]
fn a_program_that_crashes_leaves_a_readable_trace() {
    let Some(dir) = workdir() else { return };
    let (output, traces) = trace(&dir, "crash", &["./ipc_pair", "crash"]);
    // SIGSEGV: 128 + 11.
    assert_eq!(output.status.code(), Some(139), "{output:?}");
    // Killed before its end: what it recorded is read, but the trace is cut
    // short, so it is not judged.
    let (code, report) = check(&traces);
    assert_eq!(code, 4, "{report:#}");
    assert!(
        report["reasons"]
            .to_string()
            .contains("killed by signal 11"),
        "{report:#}"
    );
    let exporter = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["end"] == "no exit record")
        .expect("the crashed process has no exit record");
    assert!(exporter["unreadable_lines"].as_array().unwrap().is_empty());
    assert!(exporter["calls"].as_u64().unwrap() >= 6, "{exporter}");
}

#[test]
fn a_tracer_that_cannot_write_says_so_once_and_the_program_goes_on() {
    let Some(dir) = workdir() else { return };
    let output = Command::new(dir.join("ipc_pair"))
        .arg("ok")
        .current_dir(&dir)
        .env("LD_LIBRARY_PATH", &dir)
        .env("LD_PRELOAD", built_tracer())
        .env("IPC_TRACE_DIR", dir.join("no/such/dir"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Once, as the tracer loads; the forked child inherits the silence.
    assert_eq!(
        stderr.matches("cannot open the trace directory").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn the_python_ctypes_program_and_its_broken_variants() {
    let Some(dir) = workdir() else { return };
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no python3 for the ctypes program");
        return;
    }
    let script = root().join("tracer/validation/ipc_ctypes.py");
    for (variant, hazard) in [
        ("ok", None),
        ("free-before-close", Some("free-while-mapped")),
        ("no-wait", Some("unsynchronized-read")),
        ("double-close", Some("double-close")),
        ("leak", Some("mapping-leaked-at-exit")),
    ] {
        let (output, traces) = trace(
            &dir,
            &format!("py-{variant}"),
            &["python3", script.to_str().unwrap(), variant],
        );
        assert_eq!(output.status.code(), Some(0), "{variant}: {output:?}");
        let (code, report) = check(&traces);
        match hazard {
            None => assert_eq!(code, 0, "{variant}: {report:#}"),
            Some(h) => {
                assert_eq!(code, 1, "{variant}: {report:#}");
                assert!(
                    hazard_kinds(&report).contains(&h.to_string()),
                    "{variant}: {report:#}"
                );
            }
        }
    }
}

#[test]
fn check_of_a_missing_directory_is_a_usage_error() {
    let output = Command::new(bin())
        .args(["check", "/no/such/trace/dir"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read"));
}

/// The trace folders under `dir`, at any depth: those with an
/// `expected.txt`.
fn trace_folders(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        if d.join("expected.txt").is_file() {
            out.push(d.clone());
        }
        trace_folders(&d, out);
    }
}

/// `check`'s verdict on `run` as `expected.txt` writes it: the exit code,
/// the verdict and the hazard kinds (those counted).
fn verdict_of(run: &Path) -> String {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("committed-{}", std::process::id()))
        .join(run.strip_prefix(root()).unwrap());
    let output = Command::new(bin())
        .arg("check")
        .arg(run)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("check.json")).unwrap()).unwrap();
    let mut kinds = hazard_kinds(&report);
    kinds.sort();
    kinds.dedup();
    let mut hazards = String::from("hazards");
    for k in kinds {
        hazards.push(' ');
        hazards.push_str(&k);
    }
    format!(
        "exit {}\nverdict {}\n{hazards}\n",
        output.status.code().unwrap_or(-1),
        report["verdict"].as_str().unwrap_or("?"),
    )
}

/// Every committed trace under reports/traces/ (GPU runs of
/// tracer/validation/run.sh, NVIDIA's cuda-samples, the stand-in runs)
/// keeps its verdict: check's exit code, verdict and hazard kinds as
/// `expected.txt` records them. A folder whose expected verdict waits for
/// a simulator change holds `pending.txt`: the verdict it gets until then
/// (the same three lines) and why; the test fails once the expected
/// verdict comes, so that the pending file is removed.
#[test]
fn committed_traces_keep_their_verdicts() {
    let mut runs = Vec::new();
    trace_folders(&root().join("reports/traces"), &mut runs);
    assert!(runs.len() >= 69, "only {} committed traces", runs.len());
    let mut failures = Vec::new();
    for run in &runs {
        let expected = std::fs::read_to_string(run.join("expected.txt")).unwrap();
        let got = verdict_of(run);
        match std::fs::read_to_string(run.join("pending.txt")) {
            Ok(pending) => {
                let until: String = pending.lines().take(3).map(|l| format!("{l}\n")).collect();
                if got == expected {
                    failures.push(format!(
                        "{}: the expected verdict came; remove pending.txt",
                        run.display()
                    ));
                } else if got != until {
                    failures.push(format!(
                        "{}: pending verdict changed:\n{got}instead of\n{until}",
                        run.display()
                    ));
                }
            }
            Err(_) if got != expected => {
                failures.push(format!("{}:\n{got}instead of\n{expected}", run.display()))
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every line of every trace file in `dir`, parsed.
/// The host records of operation `op` among a trace's `lines`.
fn host_records<'a>(lines: &'a [serde_json::Value], op: &str) -> Vec<&'a serde_json::Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == "host" && l["op"] == op)
        .collect()
}

/// The first record of driver call `call` among a trace's `lines`.
fn first_call<'a>(lines: &'a [serde_json::Value], call: &str) -> &'a serde_json::Value {
    lines
        .iter()
        .find(|l| l["call"] == call)
        .unwrap_or_else(|| panic!("no {call} recorded"))
}

fn lines(dir: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for file in std::fs::read_dir(dir).unwrap().flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        if !name.starts_with("trace-") || !file.file_type().unwrap().is_file() {
            continue;
        }
        for line in std::fs::read_to_string(file.path()).unwrap().lines() {
            out.push(serde_json::from_str(line).unwrap());
        }
    }
    out
}

/// Issue 32, item 1: the tracer keeps its descriptor when the program
/// closes every descriptor it did not open, never writes into the file the
/// program opens next, and goes on recording.
#[test]
fn closing_every_descriptor_neither_redirects_nor_stops_the_trace() {
    let Some(dir) = workdir() else { return };
    for how in ["closefrom", "close_range", "loop"] {
        let own = dir.join(format!("own-{how}.txt"));
        let (output, traces) = trace(
            &dir,
            &format!("t-closefrom-{how}"),
            &["./closefrom", own.to_str().unwrap(), how],
        );
        assert_eq!(output.status.code(), Some(0), "{how}: {output:?}");
        assert_eq!(std::fs::read_to_string(&own).unwrap(), "mine\n", "{how}");
        let lines = lines(&traces);
        let calls: Vec<&str> = lines
            .iter()
            .filter(|l| l["kind"] == "call")
            .map(|l| l["call"].as_str().unwrap())
            .collect();
        assert_eq!(
            calls,
            [
                "cuInit",
                "cuDevicePrimaryCtxRetain",
                "cuCtxSetCurrent",
                "cuCtxSynchronize"
            ],
            "{how}"
        );
        assert!(lines.iter().any(|l| l["kind"] == "exit"), "{how}");
    }
}

/// Issue 32, item 2: a symlink planted where a traced process's file goes
/// is never followed; `trace` refuses an --out others can write.
#[test]
fn a_planted_symlink_is_not_followed_and_a_shared_out_is_refused() {
    let Some(dir) = workdir() else { return };
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "untouched\n").unwrap();
    let (output, traces) = trace(&dir, "t-planted", &["./planted", victim.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    // The parent's own file holds its records; the link stayed a link.
    assert!(lines(&traces).iter().any(|l| l["kind"] == "header"));

    use std::os::unix::fs::PermissionsExt;
    let shared = dir.join("shared-out");
    let _ = std::fs::remove_dir_all(&shared);
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = Command::new(bin())
        .args(["trace", "--out"])
        .arg(&shared)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("can be written by others"), "{stderr}");
    assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 0);
}

/// Issue 32, item 5: every process the tracer loads into writes its header
/// at once; `trace` names the processes it saw start where the tracer did
/// not load, and refuses a --tracer that is no library.
#[test]
fn trace_knows_where_the_tracer_loaded_and_where_it_did_not() {
    let Some(dir) = workdir() else { return };
    let (output, traces) = trace(&dir, "loaded-true", &["true"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let headers: Vec<serde_json::Value> = lines(&traces)
        .into_iter()
        .filter(|l| l["kind"] == "header")
        .collect();
    assert_eq!(headers.len(), 1, "{headers:?}");
    assert_eq!(headers[0]["origin"], "load");
    assert!(headers[0]["coverage"].as_u64().unwrap() >= 1);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("the tracer loaded in 1 process"),
        "{stdout}"
    );

    for how in ["exec", "spawn"] {
        let (output, _) = trace(&dir, &format!("env-{how}"), &["./exec_env", how]);
        assert_eq!(output.status.code(), Some(0), "{how}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("not traced: pid")
                && stderr.contains("/bin/true")
                && stderr.contains("no longer preloads the tracer"),
            "{how}: {stderr}"
        );
    }

    let not_a_library = dir.join("not-a-library.so");
    std::fs::write(&not_a_library, "#!/bin/sh\n").unwrap();
    let output = Command::new(bin())
        .args(["trace", "--out"])
        .arg(dir.join("never"))
        .arg("--tracer")
        .arg(&not_a_library)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a shared library"));
}

/// A tracer named by a path with a space and a colon still loads
/// (`LD_PRELOAD` splits on both; `trace` preloads a private copy).
#[test]
fn a_tracer_path_with_a_space_and_a_colon_still_loads() {
    let Some(dir) = workdir() else { return };
    let odd = dir.join("odd name:dir");
    std::fs::create_dir_all(&odd).unwrap();
    let lib = odd.join("libipc_tracer.so");
    std::fs::copy(built_tracer(), &lib).unwrap();
    let out = dir.join("odd-path");
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(bin())
        .args(["trace", "--out"])
        .arg(&out)
        .env("IPC_TRACER_LIB", &lib)
        .args(["--", "./ipc_pair", "ok"])
        .current_dir(&dir)
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("from 2 processes"));
}

/// Issue 32, item 7: a second `trace` into a folder another `trace` is
/// writing into is refused, so that no trace holds two programs.
#[test]
fn a_second_trace_into_a_busy_folder_is_refused() {
    let Some(dir) = workdir() else { return };
    let out = dir.join("busy");
    let _ = std::fs::remove_dir_all(&out);
    let mut first = Command::new(bin())
        .args(["trace", "--out"])
        .arg(&out)
        .args(["--", "sleep", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::fs::read_dir(&out).map_or(true, |mut d| d.next().is_none()) {
        assert!(
            started.elapsed().as_secs() < 30,
            "the first trace never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = Command::new(bin())
        .args(["trace", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    // SAFETY: signalling the trace process this test started.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let _ = first.wait();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("another trace is writing"), "{stderr}");
}

/// Issue 32, item 9: a signal that ends `trace` reaches the traced program
/// too, and `trace` waits for it.
#[test]
fn killing_trace_stops_the_traced_program() {
    let Some(dir) = workdir() else { return };
    let out = dir.join("killed");
    let _ = std::fs::remove_dir_all(&out);
    let mut child = Command::new(bin())
        .args(["trace", "--out"])
        .arg(&out)
        .args(["--", "sleep", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The header names the traced process as soon as it starts.
    let started = std::time::Instant::now();
    let pid = loop {
        let found = std::fs::read_dir(&out).ok().and_then(|entries| {
            entries
                .flatten()
                .find_map(|e| ipc_harness::trace_record::parse_file_name(e.file_name().to_str()?))
        });
        if let Some((pid, _)) = found {
            break pid;
        }
        assert!(started.elapsed().as_secs() < 30, "sleep never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // SAFETY: signalling the trace process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the traced sleep (pid {pid}) outlived trace"
    );
    // A program killed before its end leaves a trace cut short: not judged.
    let check = Command::new(bin()).arg("check").arg(&out).output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(4), "{text}");
    assert!(text.contains("killed by signal 15"), "{text}");
}

/// Issue 30, item 2: the host operations that pass descriptors and order
/// processes, as memMapIPCDrv does them: a descriptor sent with SCM_RIGHTS
/// over a datagram socket to a path, a semaphore in shared memory, a wait.
#[test]
fn descriptor_passing_and_host_synchronisation_are_recorded() {
    let Some(dir) = workdir() else { return };
    let (output, traces) = trace(&dir, "t-fdpass", &["./fdpass"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = lines(&traces);
    let host = |op: &str| host_records(&lines, op);
    let export = first_call(&lines, "cuMemExportToShareableHandle");
    let sent = host("send")
        .into_iter()
        .find(|l| l["call"] == "sendmsg")
        .unwrap();
    assert_eq!(sent["args"]["fds"][0], export["args"]["fd"], "{sent}");
    let received = host("recv")
        .into_iter()
        .find(|l| l["call"] == "recvmsg")
        .unwrap();
    let import = first_call(&lines, "cuMemImportFromShareableHandle");
    assert_eq!(received["args"]["fds"][0], import["args"]["fd"]);
    // The send names the receiver's bound path, made absolute.
    let bound = host("describe")
        .into_iter()
        .find(|l| l["args"]["local"].is_string())
        .unwrap();
    assert_eq!(sent["args"]["path"], bound["args"]["local"]);
    assert!(sent["args"]["path"].as_str().unwrap().starts_with('/'));
    // Two semaphores in one shared mapping: posts and waits name them alike
    // in both processes.
    let posts: Vec<&str> = host("sem_post")
        .iter()
        .map(|l| l["args"]["object"].as_str().unwrap())
        .collect();
    let waits: Vec<&str> = host("sem_wait")
        .iter()
        .map(|l| l["args"]["object"].as_str().unwrap())
        .collect();
    assert_eq!(posts.len(), 2, "{posts:?}");
    let (mut p, mut w) = (posts.clone(), waits.clone());
    p.sort();
    w.sort();
    assert_eq!(p, w);
    assert_ne!(posts[0], posts[1]);
    let fork = &host("fork")[0];
    let wait = &host("wait")[0];
    assert_eq!(fork["args"]["pid"], wait["args"]["pid"]);
}

/// Issue 30, item 2: a descriptor taken with `syscall(SYS_pidfd_getfd)`
/// (PyTorch's expandable segments; glibc before 2.36 has no wrapper) is
/// recorded as the wrapper's is, and `check` follows it from the export to
/// the import.
#[test]
fn descriptors_taken_through_raw_pidfd_syscalls_are_followed() {
    let Some(dir) = workdir() else { return };
    let (output, traces) = trace(&dir, "t-pidfd-syscall", &["./pidfd_syscall"]);
    if output.status.code() == Some(77) {
        eprintln!("skipped: this kernel or sandbox refuses pidfd_getfd");
        return;
    }
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = lines(&traces);
    let host = |op: &str| host_records(&lines, op);
    let export = first_call(&lines, "cuMemExportToShareableHandle");
    let opened = host("pidfd_open");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0]["call"], "syscall(pidfd_open)");
    let taken = host("pidfd_getfd");
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0]["call"], "syscall(pidfd_getfd)");
    assert_eq!(
        taken[0]["args"]["target_fd"], export["args"]["fd"],
        "{taken:?}"
    );
    assert_eq!(taken[0]["args"]["pid"], opened[0]["args"]["pid"]);
    let import = first_call(&lines, "cuMemImportFromShareableHandle");
    assert_eq!(import["args"]["fd"], taken[0]["args"]["new_fd"]);
    let (code, report) = check(&traces);
    let text = report.to_string();
    assert!(
        !text.contains("whose way from an export the trace does not show"),
        "{text}"
    );
    assert_eq!(code, 0, "{text}");
}
