//! Running clauses on a backend.
//!
//! Every clause runs inside [`guarded`]: a panic anywhere below (parser,
//! executor, backend) becomes a [`Status::Broken`] result carrying the panic
//! message and location, and the run goes on with the next clause.

use crate::catalogue::{Clause, ClauseKind};
use crate::sysinfo;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::{Backend, BackendInfo, Dialect, Status, Trace};
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Once;
use std::time::{Duration, Instant, SystemTime};

/// Version of the `results.json` schema (`docs/results-schema.md`).
pub const SCHEMA_VERSION: u32 = 1;

/// The outcome of one clause in one dialect on one backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClauseResult {
    pub id: String,
    pub title: String,
    pub kind: Option<ClauseKind>,
    /// The clause file.
    pub path: String,
    pub status: Status,
    /// Why it is not Pass (empty for Pass). Failures name the seed.
    pub message: String,
    pub duration_ms: f64,
    pub dialect: Dialect,
    pub backend: String,
    pub seed: u64,
    /// `None` when the clause never ran (broken clause, panic).
    pub trace: Option<Trace>,
    /// How the result stands against `--expectations` (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectation: Option<crate::expectations::ExpectationRecord>,
}

/// Facts about a run (`results.json` → `run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub tool_version: String,
    /// `sim` or `cuda`.
    pub backend: String,
    /// `runtime`, `driver`, or `all` when both ran.
    pub dialect: String,
    pub seed: u64,
    pub step_timeout_ms: u64,
    pub git_revision: Option<String>,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub duration_ms: f64,
    pub host: Option<String>,
    /// `--filter` patterns; empty when every clause was selected.
    pub filter: Vec<String>,
    pub clauses_dir: Option<String>,
    /// True when the run stopped before every selected clause ran.
    pub interrupted: bool,
    pub gpu_name: Option<String>,
    pub compute_capability: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub cuda_runtime_version: Option<String>,
    pub device_count: Option<u32>,
    /// Simulator semantic choices in force (empty on real hardware).
    pub semantics: BTreeMap<String, String>,
    /// `K/N` when this run is one shard (`run --shard`).
    #[serde(default)]
    pub shard: Option<String>,
    /// Set by `merge`: the merged inputs and their shards.
    #[serde(default)]
    pub merged: Option<crate::shard::MergeInfo>,
    /// The `--expectations` file (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectations: Option<crate::expectations::ExpectationsRun>,
}

/// One `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub run: RunInfo,
    /// Count per status name; every status is present (zero included).
    pub totals: BTreeMap<String, usize>,
    /// Count per classification name when results were classified against
    /// `--expectations` (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classification_totals: Option<BTreeMap<String, usize>>,
    pub results: Vec<ClauseResult>,
}

impl RunReport {
    pub fn new(run: RunInfo, results: Vec<ClauseResult>) -> RunReport {
        RunReport {
            schema_version: SCHEMA_VERSION,
            totals: totals(&results),
            classification_totals: crate::expectations::classification_totals(&results),
            run,
            results,
        }
    }

    /// [`exit_code`] of the results; with expectations, the gate's
    /// ([`crate::expectations::gate_exit_code`]).
    pub fn exit_code(&self) -> u8 {
        if self.classification_totals.is_some() {
            return crate::expectations::gate_exit_code(&self.results);
        }
        exit_code(&self.results)
    }

    /// `12 clauses: 10 Pass, 2 NotSupported`.
    pub fn totals_line(&self) -> String {
        totals_line(&self.results)
    }
}

/// Count per status name, every status present.
pub fn totals(results: &[ClauseResult]) -> BTreeMap<String, usize> {
    let mut t: BTreeMap<String, usize> = ALL_STATUSES
        .iter()
        .map(|s| (s.name().to_string(), 0))
        .collect();
    for r in results {
        *t.entry(r.status.name().to_string()).or_default() += 1;
    }
    t
}

/// Milliseconds spent starting machines (processes and contexts), running
/// steps, and shutting machines down, over all results.
pub fn time_split(results: &[ClauseResult]) -> (f64, f64, f64) {
    results
        .iter()
        .filter_map(|r| r.trace.as_ref())
        .fold((0.0, 0.0, 0.0), |(a, b, c), t| {
            let ms = |us: u64| us as f64 / 1000.0;
            (
                a + ms(t.timing.start_us),
                b + ms(t.timing.steps_us),
                c + ms(t.timing.shutdown_us),
            )
        })
}

pub fn totals_line(results: &[ClauseResult]) -> String {
    let t = totals(results);
    let parts: Vec<String> = ALL_STATUSES
        .iter()
        .filter_map(|s| {
            let n = t[s.name()];
            (n > 0).then(|| format!("{n} {}", s.name()))
        })
        .collect();
    let noun = if results.len() == 1 {
        "result"
    } else {
        "results"
    };
    if parts.is_empty() {
        format!("0 {noun}")
    } else {
        format!("{} {noun}: {}", results.len(), parts.join(", "))
    }
}

/// Every status, in report order.
pub const ALL_STATUSES: [Status; 6] = [
    Status::Pass,
    Status::Fail,
    Status::NotSupported,
    Status::Crash,
    Status::Timeout,
    Status::Broken,
];

/// The exit-code policy: 0 when every result is Pass or NotSupported, 1
/// otherwise.
pub fn exit_code(results: &[ClauseResult]) -> u8 {
    if results.iter().all(|r| r.status.is_success()) {
        crate::EXIT_OK
    } else {
        crate::EXIT_FAILURES
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Each selected clause runs once per dialect, in this order.
    pub dialects: Vec<Dialect>,
    pub seed: u64,
    pub step_timeout: Duration,
    /// For the report only (selection happens before).
    pub filter: Vec<String>,
    pub clauses_dir: Option<PathBuf>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            dialects: vec![Dialect::Runtime],
            seed: 1,
            step_timeout: ExecOptions::default().step_timeout,
            filter: Vec::new(),
            clauses_dir: None,
        }
    }
}

impl RunConfig {
    pub fn dialect_label(&self) -> String {
        match self.dialects.as_slice() {
            [one] => one.as_str().to_string(),
            many if many.len() == Dialect::ALL.len() => "all".to_string(),
            many => many
                .iter()
                .map(|d| d.as_str())
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    fn exec_options(&self, dialect: Dialect) -> ExecOptions {
        ExecOptions {
            dialect,
            seed: self.seed,
            step_timeout: self.step_timeout,
        }
    }
}

/// Receives results as they come (progress display).
pub trait Observer {
    fn begin(&mut self, _total: usize) {}
    fn clause_started(&mut self, _clause: &Clause, _dialect: Dialect) {}
    fn clause_finished(&mut self, _result: &ClauseResult) {}
    fn end(&mut self) {}
    /// Asked before each clause; `true` stops the run there (interrupted).
    fn stop_requested(&mut self) -> bool {
        false
    }
}

/// Shows nothing.
pub struct Silent;
impl Observer for Silent {}

/// Run one clause in one dialect. Never panics.
pub fn run_clause(
    clause: &Clause,
    backend: &dyn Backend,
    dialect: Dialect,
    seed: u64,
    step_timeout: Duration,
) -> ClauseResult {
    let opts = ExecOptions {
        dialect,
        seed,
        step_timeout,
    };
    let backend_name = guarded(|| backend.name().to_string()).unwrap_or_else(|_| "?".into());
    let mut result = ClauseResult {
        id: clause.id.clone(),
        title: clause.title.clone(),
        kind: clause.kind,
        path: clause.path.display().to_string(),
        status: Status::Broken,
        message: String::new(),
        duration_ms: 0.0,
        dialect,
        backend: backend_name,
        seed,
        trace: None,
        expectation: None,
    };
    let scenario = match (&clause.scenario, clause.is_broken()) {
        (Some(s), false) => s,
        _ => {
            result.message = with_seed(clause.problem_message(), seed);
            return result;
        }
    };
    if let Some(reason) = not_applicable(clause, &result.backend, dialect) {
        result.status = Status::NotSupported;
        result.message = reason;
        return result;
    }
    let start = Instant::now();
    let outcome = guarded(|| scenario::execute(scenario, backend, &opts));
    result.duration_ms = sysinfo::millis(start.elapsed());
    match outcome {
        Ok(execution) => {
            result.status = execution.verdict.status;
            result.message = execution.verdict.message;
            result.trace = Some(execution.trace);
        }
        Err(panic) => {
            result.status = Status::Broken;
            result.message = format!("the harness panicked: {panic}");
        }
    }
    if !matches!(result.status, Status::Pass | Status::NotSupported) {
        result.message = with_seed(std::mem::take(&mut result.message), seed);
    }
    result
}

/// Why a well-formed clause does not run here: a dialect it does not hold
/// for, or a measurement from elsewhere on a backend other than the simulator.
fn not_applicable(clause: &Clause, backend: &str, dialect: Dialect) -> Option<String> {
    if !clause.applies_to(dialect) {
        let held: Vec<&str> = clause.dialects.iter().map(|d| d.as_str()).collect();
        let mut m = format!(
            "the clause holds for the {} dialect(s), not {dialect}",
            held.join(", ")
        );
        if let Some(note) = clause.hip.as_deref().filter(|_| dialect == Dialect::Hip) {
            m.push_str(": ");
            m.push_str(note);
        }
        return Some(m);
    }
    if clause.kind == Some(ClauseKind::MeasuredElsewhere) && backend != "sim" {
        return Some(format!(
            "measured elsewhere ({}); this machine cannot show it, the simulator models it",
            clause.source.as_deref().unwrap_or("no source")
        ));
    }
    None
}

fn with_seed(message: String, seed: u64) -> String {
    if message.contains("seed") {
        message
    } else if message.is_empty() {
        format!("(seed {seed})")
    } else {
        format!("{message} (seed {seed})")
    }
}

/// Run `clauses` once per configured dialect and build the report.
pub fn run_clauses(
    clauses: &[&Clause],
    backend: &dyn Backend,
    cfg: &RunConfig,
    observer: &mut dyn Observer,
) -> RunReport {
    let started = SystemTime::now();
    let clock = Instant::now();
    let info = guarded(|| backend.info()).unwrap_or_else(|panic| BackendInfo {
        backend: backend.name().to_string(),
        gpu_name: Some(format!("(info panicked: {panic})")),
        ..BackendInfo::default()
    });
    observer.begin(clauses.len() * cfg.dialects.len());
    let mut results = Vec::with_capacity(clauses.len() * cfg.dialects.len());
    let mut interrupted = false;
    'dialects: for &dialect in &cfg.dialects {
        let opts = cfg.exec_options(dialect);
        for clause in clauses {
            if observer.stop_requested() {
                interrupted = true;
                break 'dialects;
            }
            observer.clause_started(clause, dialect);
            let r = run_clause(clause, backend, dialect, opts.seed, opts.step_timeout);
            observer.clause_finished(&r);
            results.push(r);
        }
    }
    observer.end();
    let run = RunInfo {
        tool_version: crate::TOOL_VERSION.to_string(),
        backend: if info.backend.is_empty() {
            backend.name().to_string()
        } else {
            info.backend.clone()
        },
        dialect: cfg.dialect_label(),
        seed: cfg.seed,
        step_timeout_ms: cfg.step_timeout.as_millis() as u64,
        git_revision: sysinfo::git_revision(),
        started_at: sysinfo::rfc3339_utc(started),
        duration_ms: sysinfo::millis(clock.elapsed()),
        host: sysinfo::hostname(),
        filter: cfg.filter.clone(),
        clauses_dir: cfg.clauses_dir.as_ref().map(|p| p.display().to_string()),
        interrupted,
        gpu_name: info.gpu_name,
        compute_capability: info.compute_capability,
        driver_version: info.driver_version,
        cuda_driver_version: info.cuda_driver_version,
        cuda_runtime_version: info.cuda_runtime_version,
        device_count: info.device_count,
        semantics: info.semantics,
        shard: None,
        merged: None,
        expectations: None,
    };
    RunReport::new(run, results)
}

// ---------------------------------------------------------------------------
// Panics

thread_local! {
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Chains a panic hook that, on threads inside [`guarded`], records the
/// message and location instead of printing them (printing still happens
/// when `RUST_BACKTRACE` is set). Other threads see the previous hook.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let capturing = CAPTURING.try_with(Cell::get).unwrap_or(false);
            if capturing {
                let msg = payload_message(info.payload());
                let msg = match info.location() {
                    Some(loc) => format!("{msg} (at {}:{})", loc.file(), loc.line()),
                    None => msg,
                };
                let _ = LAST_PANIC.try_with(|l| *l.borrow_mut() = Some(msg));
                if std::env::var_os("RUST_BACKTRACE").is_some() {
                    previous(info);
                }
            } else {
                previous(info);
            }
        }));
    });
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// Run `f`; a panic becomes `Err(message with location)`.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let was = CAPTURING.with(|c| c.replace(true));
    LAST_PANIC.with(|l| l.borrow_mut().take());
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CAPTURING.with(|c| c.set(was));
    result.map_err(|payload| {
        LAST_PANIC
            .with(|l| l.borrow_mut().take())
            .unwrap_or_else(|| payload_message(payload.as_ref()))
    })
}

// ---------------------------------------------------------------------------
// Console output

/// `PASS`, `FAIL`, `NOTSUP`, `CRASH`, `TIMEOUT`, `BROKEN`.
pub fn status_label(status: Status) -> &'static str {
    match status {
        Status::Pass => "PASS",
        Status::Fail => "FAIL",
        Status::NotSupported => "NOTSUP",
        Status::Crash => "CRASH",
        Status::Timeout => "TIMEOUT",
        Status::Broken => "BROKEN",
    }
}

/// The line printed for a result: `PASS    mem.open.refcount (0.1 ms)`,
/// followed for anything but Pass by the indented message, and for a failure
/// by a command that reproduces it.
pub fn result_lines(r: &ClauseResult, show_dialect: bool) -> String {
    let dialect = if show_dialect {
        format!(" [{}]", r.dialect)
    } else {
        String::new()
    };
    let mut out = format!(
        "{:<7} {}{dialect} ({})",
        status_label(r.status),
        r.id,
        sysinfo::human_ms(r.duration_ms)
    );
    if r.status != Status::Pass && !r.message.is_empty() {
        for line in r.message.lines() {
            out.push_str("\n        ");
            out.push_str(line);
        }
    }
    if !r.status.is_success() {
        out.push_str(&format!(
            "\n        reproduce: ipc-conformance run --backend {} --dialect {} --seed {} --filter '{}'",
            r.backend, r.dialect, r.seed, r.id
        ));
    }
    out
}

/// Progress bar on stderr (only on a terminal, never with `quiet`) and one
/// line per result (stdout, or above the bar). `quiet` also drops the lines
/// of Pass and NotSupported results.
pub struct Console {
    bar: ProgressBar,
    quiet: bool,
    show_dialect: bool,
}

impl Console {
    pub fn new(quiet: bool, show_dialect: bool) -> Console {
        let visible = !quiet && std::io::stderr().is_terminal();
        let bar = if visible {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Console {
            bar,
            quiet,
            show_dialect,
        }
    }

    /// Advance the bar without printing a line.
    pub fn tick(&mut self) {
        self.bar.inc(1);
    }

    /// Print lines on stdout, or above the bar when it is shown.
    pub fn print(&self, text: &str) {
        if self.bar.is_hidden() {
            use std::io::Write;
            // A closed pipe (`| head`) must not panic.
            let _ = writeln!(std::io::stdout().lock(), "{text}");
        } else {
            self.bar.println(text);
        }
    }
}

impl Observer for Console {
    fn begin(&mut self, total: usize) {
        self.bar.set_length(total as u64);
    }

    fn clause_started(&mut self, clause: &Clause, dialect: Dialect) {
        if self.show_dialect {
            self.bar.set_message(format!("{} [{dialect}]", clause.id));
        } else {
            self.bar.set_message(clause.id.clone());
        }
    }

    fn clause_finished(&mut self, r: &ClauseResult) {
        self.bar.inc(1);
        if self.quiet && r.status.is_success() {
            return;
        }
        self.print(&result_lines(r, self.show_dialect));
    }

    fn end(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_harness::{Machine, MachineSpec, StartError};

    pub(crate) fn result(id: &str, status: Status) -> ClauseResult {
        ClauseResult {
            id: id.into(),
            title: format!("title of {id}"),
            kind: Some(ClauseKind::Specified),
            path: format!("clauses/{id}.ipc"),
            status,
            message: if status == Status::Pass {
                String::new()
            } else {
                format!("{id}: something (seed 7)")
            },
            duration_ms: 0.3,
            dialect: Dialect::Runtime,
            backend: "sim".into(),
            seed: 7,
            trace: Some(Trace::default()),
            expectation: None,
        }
    }

    #[test]
    fn exit_code_policy() {
        use Status::*;
        let code = |ss: &[Status]| {
            let rs: Vec<_> = ss.iter().map(|&s| result("a.b", s)).collect();
            exit_code(&rs)
        };
        assert_eq!(code(&[]), 0);
        assert_eq!(code(&[Pass, NotSupported, Pass]), 0);
        for bad in [Fail, Crash, Timeout, Broken] {
            assert_eq!(code(&[Pass, bad, NotSupported]), 1, "{bad:?}");
        }
    }

    #[test]
    fn totals_count_every_status() {
        let rs = vec![
            result("a.b", Status::Pass),
            result("a.c", Status::Pass),
            result("a.d", Status::Broken),
        ];
        let t = totals(&rs);
        assert_eq!(t.len(), 6);
        assert_eq!(t["Pass"], 2);
        assert_eq!(t["Broken"], 1);
        assert_eq!(t["Fail"], 0);
        assert_eq!(totals_line(&rs), "3 results: 2 Pass, 1 Broken");
    }

    #[test]
    fn guarded_turns_panics_into_messages() {
        assert_eq!(guarded(|| 3), Ok(3));
        let err = guarded(|| -> u32 { panic!("boom {}", 42) }).unwrap_err();
        assert!(err.contains("boom 42"), "{err}");
        assert!(err.contains("runner.rs"), "{err}");
        let err = guarded(|| std::panic::panic_any(5u8)).unwrap_err();
        assert!(err.contains("non-string"), "{err}");
        // Nested guards keep working.
        let outer = guarded(|| guarded(|| panic!("inner")).unwrap_err());
        assert!(outer.unwrap().contains("inner"));
    }

    struct PanickingBackend;
    impl Backend for PanickingBackend {
        fn name(&self) -> &str {
            "panicky"
        }
        fn info(&self) -> BackendInfo {
            panic!("info exploded")
        }
        fn start(&self, _spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
            panic!("start exploded")
        }
        fn has_hazard_log(&self) -> bool {
            false
        }
    }

    fn broken_clause(id: &str) -> Clause {
        Clause {
            id: id.into(),
            title: "t".into(),
            kind: None,
            tier: None,
            relied_on_by: None,
            source: None,
            quote: None,
            doc: None,
            hardware: None,
            semantics: vec![],
            dialects: vec![],
            hip: None,
            requirements: Default::default(),
            path: "x.ipc".into(),
            problems: vec!["missing metadata 'kind' (specified, measured or undefined)".into()],
            scenario: None,
        }
    }

    #[test]
    fn broken_clauses_are_reported_not_run() {
        let c = broken_clause("a.b");
        let r = run_clause(
            &c,
            &PanickingBackend,
            Dialect::Driver,
            9,
            Duration::from_secs(1),
        );
        assert_eq!(r.status, Status::Broken);
        assert!(r.message.contains("missing metadata 'kind'"));
        assert!(r.message.contains("seed 9"));
        assert_eq!(r.dialect, Dialect::Driver);
        assert_eq!(r.backend, "panicky");
        assert!(r.trace.is_none());
    }

    #[test]
    fn a_backend_whose_start_panics_gives_broken_not_a_panic() {
        let text = "# id: a.b\n# title: t\n# kind: specified\n# tier: contract\n\
                    devices 1\nprocess a device=0\na: device_count => any\n";
        let c = Clause::from_source(text, std::path::Path::new("a.ipc"), "a.ipc");
        assert!(!c.is_broken(), "{:?}", c.problems);
        let r = run_clause(
            &c,
            &PanickingBackend,
            Dialect::Runtime,
            3,
            Duration::from_secs(1),
        );
        assert_eq!(r.status, Status::Broken);
        assert!(
            r.message.contains("the harness panicked: start exploded"),
            "{}",
            r.message
        );
        assert!(r.message.contains("(seed 3)"), "{}", r.message);
        // And the next clause still runs.
        let r2 = run_clause(
            &c,
            &PanickingBackend,
            Dialect::Driver,
            3,
            Duration::from_secs(1),
        );
        assert_eq!(r2.status, Status::Broken);
    }

    #[test]
    fn a_panicking_backend_info_does_not_escape() {
        let c = broken_clause("a.b");
        let cfg = RunConfig {
            dialects: Dialect::ALL.to_vec(),
            ..RunConfig::default()
        };
        let report = run_clauses(&[&c], &PanickingBackend, &cfg, &mut Silent);
        assert_eq!(report.results.len(), Dialect::ALL.len());
        assert_eq!(report.run.dialect, "all");
        assert_eq!(report.run.backend, "panicky");
        assert!(report
            .run
            .gpu_name
            .as_deref()
            .unwrap()
            .contains("info exploded"));
        assert_eq!(report.totals["Broken"], Dialect::ALL.len());
        assert_eq!(report.exit_code(), 1);
    }

    #[test]
    fn result_lines_show_message_and_reproduction() {
        let pass = result_lines(&result("mem.open.refcount", Status::Pass), false);
        assert_eq!(pass, "PASS    mem.open.refcount (0.3 ms)");
        let fail = result_lines(&result("mem.open.refcount", Status::Fail), true);
        assert!(fail.starts_with("FAIL    mem.open.refcount [runtime] (0.3 ms)\n"));
        assert!(fail.contains("seed 7"));
        assert!(fail.contains("--seed 7 --filter 'mem.open.refcount'"));
        let ns = result_lines(&result("a.b", Status::NotSupported), false);
        assert!(!ns.contains("reproduce"));
    }
}
