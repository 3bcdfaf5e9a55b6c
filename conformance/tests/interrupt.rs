//! Interrupted runs (SIGINT / SIGTERM) and crash-safe reports.

mod common;
use common::scratch;
use ipc_conformance::catalogue::{Catalogue, Clause};
use ipc_conformance::model::{Attempt, ClauseResult};
use ipc_conformance::report;
use ipc_conformance::runner::{self, Observer, RunConfig};
use ipc_harness::Dialect;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_ipc-conformance");

/// A clause that takes a while on the simulator: it reads `mib` MiB through
/// the importer's mapping (tens of milliseconds in a debug build).
fn slow_clause(i: usize, mib: usize) -> String {
    format!(
        "# id: slow.read.c{i:04}\n\
         # title: A large read through an imported handle\n\
         # kind: measured\n\
         # tier: incidental\n\
         devices 1\n\
         process owner device=0\n\
         process peer device=0\n\
         owner: a = malloc {mib}MiB\n\
         owner: fill a 0xab\n\
         owner: h = ipc_get a\n\
         owner: send h -> peer\n\
         peer: p = ipc_open h => ok\n\
         peer: read p 0 {mib}MiB => bytes ab*{}\n\
         peer: ipc_close p => ok\n",
        mib << 20
    )
}

fn slow_clauses(tag: &str, count: usize, mib: usize) -> PathBuf {
    let dir = scratch(tag).join("clauses");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..count {
        std::fs::write(dir.join(format!("c{i:04}.ipc")), slow_clause(i, mib)).unwrap();
    }
    dir
}

struct Interrupted {
    code: Option<i32>,
    stdout: String,
    results: Value,
}

/// Start `run` over `count` slow clauses, send `signal` once `after_lines`
/// results were printed, and collect everything. `None` when the run ended
/// before the signal could be sent (the caller retries with more clauses).
fn run_and_signal(
    tag: &str,
    count: usize,
    after_lines: usize,
    signal: Signal,
) -> Option<Interrupted> {
    let clauses = slow_clauses(tag, count, 16);
    let out = scratch(&format!("{tag}-out"));
    let mut child = Command::new(BIN)
        .args(["run", "--clauses", clauses.to_str().unwrap(), "--out"])
        .arg(&out)
        .env_remove("IPC_CONFORMANCE_CLAUSES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdout = String::new();
    let mut seen = 0;
    let mut signalled = false;
    // Read every line (a full pipe would stall the child); signal once.
    for line in lines.by_ref() {
        let line = line.unwrap();
        stdout.push_str(&line);
        stdout.push('\n');
        if line.starts_with("PASS") {
            seen += 1;
        }
        if !signalled && seen >= after_lines {
            // The child is alive: it has not printed its footer yet.
            kill(Pid::from_raw(child.id() as i32), signal).unwrap();
            signalled = true;
        }
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    let code = status.code();
    assert!(
        signalled,
        "ended before the signal: {code:?} {stdout} {stderr}"
    );
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
            .expect("results.json parses");
    if results["run"]["interrupted"] == false {
        // Every clause had already run when the signal came.
        return None;
    }
    Some(Interrupted {
        code,
        stdout,
        results,
    })
}

fn interrupted_end_to_end(signal: Signal) {
    let mut count = 40;
    for _attempt in 0..5 {
        let Some(r) = run_and_signal(signal.as_str(), count, 2, signal) else {
            count *= 4;
            continue;
        };
        assert_eq!(r.code, Some(130), "{}", r.stdout);
        assert!(
            r.stdout
                .contains(&format!("interrupted by {}", signal.as_str())),
            "{}",
            r.stdout
        );
        let v = &r.results;
        assert_eq!(v["run"]["interrupted"], true);
        let n = v["results"].as_array().unwrap().len();
        assert!(n >= 2, "{n}");
        assert!(n < count, "{n} of {count}");
        let pass: u64 = v["totals"]["Pass"].as_u64().unwrap();
        assert_eq!(pass as usize, n, "the clause in progress finished: {v}");
        return;
    }
    panic!("every run finished before the signal, up to {count} clauses");
}

#[test]
fn sigint_stops_after_the_current_clause_and_reports() {
    interrupted_end_to_end(Signal::SIGINT);
}

#[test]
fn sigterm_stops_after_the_current_clause_and_reports() {
    interrupted_end_to_end(Signal::SIGTERM);
}

/// Stops the run after `n` clauses.
struct StopAfter(usize, usize);

impl Observer for StopAfter {
    fn clause_finished(&mut self, _r: &ClauseResult, _attempts: &[Attempt]) {
        self.1 += 1;
    }
    fn stop_requested(&mut self) -> bool {
        self.1 >= self.0
    }
}

#[test]
fn the_runner_stops_when_asked_and_marks_the_run() {
    let dir = slow_clauses("runner", 5, 1);
    let cat = Catalogue::load(&dir).unwrap();
    let clauses: Vec<&Clause> = cat.clauses.iter().collect();
    let backend = ipc_conformance::backend::make(
        ipc_conformance::backend::BackendKind::Sim,
        &Default::default(),
    )
    .unwrap();
    let cfg = RunConfig {
        dialects: Dialect::ALL.to_vec(),
        ..RunConfig::default()
    };
    // Stop in the second dialect: the first is complete.
    let report = runner::run_clauses(&clauses, backend.as_ref(), &cfg, &mut StopAfter(7, 0));
    assert!(report.run.interrupted);
    assert_eq!(report.results.len(), 7);
    assert_eq!(report.totals["Pass"], 7);
    assert_eq!(report.results[6].dialect, Dialect::Driver);
    // Asked after the last clause (5 clauses x 3 dialects): nothing was left out.
    let report = runner::run_clauses(&clauses, backend.as_ref(), &cfg, &mut StopAfter(15, 0));
    assert!(!report.run.interrupted);
    assert_eq!(report.results.len(), 15);
}

fn old_report() -> Value {
    serde_json::json!({"schema_version": 1, "note": "the previous complete file"})
}

/// What `results.json` holds: the old complete file, or a complete report.
fn complete(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("truncated results.json ({e}): {} bytes", text.len()));
    v
}

#[test]
fn a_writer_that_fails_midway_leaves_complete_files() {
    let dir = slow_clauses("writer", 3, 1);
    let cat = Catalogue::load(&dir).unwrap();
    let clauses: Vec<&Clause> = cat.clauses.iter().collect();
    let backend = ipc_conformance::backend::make(
        ipc_conformance::backend::BackendKind::Sim,
        &Default::default(),
    )
    .unwrap();
    let report = runner::run_clauses(
        &clauses,
        backend.as_ref(),
        &RunConfig::default(),
        &mut runner::Silent,
    );

    // One member of the set cannot be switched (a folder is in the way of
    // junit.xml): nothing is, the old results.json and summary.md stay.
    let out = scratch("second-fails");
    std::fs::write(out.join("results.json"), old_report().to_string()).unwrap();
    std::fs::write(out.join("summary.md"), "old summary").unwrap();
    std::fs::create_dir(out.join("junit.xml")).unwrap();
    let err = report::write_run(&out, &report).unwrap_err();
    assert!(err.to_string().contains("junit.xml"), "{err}");
    assert_eq!(complete(&out.join("results.json")), old_report());
    assert_eq!(
        std::fs::read_to_string(out.join("summary.md")).unwrap(),
        "old summary"
    );
    assert_eq!(leftover_temporaries(&out), Vec::<String>::new());

    // A name planted where older versions put their temporary file is
    // neither used nor in the way.
    let out = scratch("first-fails");
    std::fs::write(out.join("results.json"), old_report().to_string()).unwrap();
    std::fs::create_dir(out.join("results.json.tmp")).unwrap();
    report::write_run(&out, &report).unwrap();
    assert_eq!(
        complete(&out.join("results.json"))["results"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

/// Temporary files (`.NAME.*.ipc-tmp`) in a report folder.
fn leftover_temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ipc-tmp"))
        .collect()
}

/// SIGKILL (no handler can run) at many moments of a run, including while
/// the reports are written: results.json is never a truncated file.
#[test]
fn a_killed_run_never_leaves_a_truncated_results_json() {
    let clauses = slow_clauses("kill", 12, 1);
    let out = scratch("kill-out");
    std::fs::write(out.join("results.json"), old_report().to_string()).unwrap();
    // How long a whole run takes here, to spread the kills over it.
    let start = Instant::now();
    let o = Command::new(BIN)
        .args(["run", "-q", "--clauses", clauses.to_str().unwrap(), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let whole = start.elapsed();
    let new = complete(&out.join("results.json"));
    assert_eq!(new["results"].as_array().unwrap().len(), 12);

    std::fs::write(out.join("results.json"), old_report().to_string()).unwrap();
    let steps = 24;
    for i in 0..=steps {
        let delay = whole.mul_f64(1.2 * i as f64 / steps as f64);
        let mut child = Command::new(BIN)
            .args(["run", "-q", "--clauses", clauses.to_str().unwrap(), "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        let v = complete(&out.join("results.json"));
        assert!(
            v == old_report() || v["results"].as_array().map(Vec::len) == Some(12),
            "after {delay:?}: {v}"
        );
    }
    // Temporary files a killed writer left are removed by the next run.
    let o = Command::new(BIN)
        .args(["run", "-q", "--clauses", clauses.to_str().unwrap(), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(leftover_temporaries(&out), Vec::<String>::new());
}
