//! Running clauses on a backend.
//!
//! Every clause runs inside [`guarded`]: a panic anywhere below (parser,
//! executor, backend) becomes a [`Status::Broken`] result carrying the panic
//! message and location, and the run goes on with the next clause.
//!
//! Re-runs happen here too: a result that did not pass runs again as often
//! as [`RunConfig::retries`] says (an expectations file's `Flaky` entries),
//! and the observer is told every attempt. Observers only watch; they never
//! run a clause.

use crate::catalogue::{Clause, ClauseKind, Tier};
use crate::model::{Attempt, ClauseResult, RunInfo, RunReport, DEFAULT_GATED_TIERS, TOOL_VERSION};
use crate::sysinfo;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::{Backend, BackendInfo, Dialect, Status};
use std::fmt;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub use crate::guard::guarded;

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
    /// How many more times a result that did not pass runs.
    pub retries: RetryPolicy,
    /// `--tiers`: the tiers whose results can fail the run (recorded as
    /// `run.gated_tiers`; every clause runs whatever its tier).
    pub gated_tiers: Vec<Tier>,
}

/// How many more times a result that did not pass (Fail, Crash, Timeout)
/// runs, asked of each such result; re-running stops at the first attempt
/// whose status differs from the first's. The default re-runs nothing.
#[derive(Clone, Default)]
pub struct RetryPolicy(Option<Arc<RetriesFor>>);

/// The number of re-runs allowed for a result.
type RetriesFor = dyn Fn(&ClauseResult) -> u32 + Send + Sync;

impl RetryPolicy {
    /// Re-run a result up to `retries(result)` more times.
    pub fn new(retries: impl Fn(&ClauseResult) -> u32 + Send + Sync + 'static) -> RetryPolicy {
        RetryPolicy(Some(Arc::new(retries)))
    }

    /// The re-runs allowed for `result`.
    pub fn retries_for(&self, result: &ClauseResult) -> u32 {
        self.0.as_ref().map_or(0, |f| f(result))
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "RetryPolicy(per result)"
        } else {
            "RetryPolicy(none)"
        })
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            dialects: vec![Dialect::Runtime],
            seed: 1,
            step_timeout: ExecOptions::default().step_timeout,
            filter: Vec::new(),
            clauses_dir: None,
            retries: RetryPolicy::default(),
            gated_tiers: DEFAULT_GATED_TIERS.to_vec(),
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

/// Receives results as they come (progress display). An observer watches
/// the run; it never runs a clause itself.
pub trait Observer {
    fn begin(&mut self, _total: usize) {}
    fn clause_started(&mut self, _clause: &Clause, _dialect: Dialect) {}
    /// A clause finished: `result` is its first attempt, `attempts` every
    /// attempt, the first included (more than one only when re-run).
    fn clause_finished(&mut self, _result: &ClauseResult, _attempts: &[Attempt]) {}
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
        tier: clause.tier,
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
    let models = guarded(|| backend.has_hazard_log()).unwrap_or(false);
    if let Some(reason) = not_applicable(clause, models, dialect) {
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
/// for, or a measurement from elsewhere on a backend that is no model of the
/// driver. A backend with a hazard log models the driver (the simulator, or
/// a user's backend around it, whatever it calls itself); real hardware
/// keeps none.
fn not_applicable(clause: &Clause, models: bool, dialect: Dialect) -> Option<String> {
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
    if clause.kind == Some(ClauseKind::MeasuredElsewhere) && !models {
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

/// Re-run a result that did not pass, up to `retries` times, stopping at
/// the first attempt whose status differs from the first's. Returns every
/// attempt, the first included. Pass, NotSupported and Broken are not
/// re-run.
pub fn attempts_with_retries(
    first: &ClauseResult,
    retries: u32,
    mut rerun: impl FnMut() -> ClauseResult,
) -> Vec<Attempt> {
    let mut attempts = vec![Attempt::of(first)];
    if !matches!(first.status, Status::Fail | Status::Crash | Status::Timeout) {
        return attempts;
    }
    for _ in 0..retries {
        let again = rerun();
        let differs = again.status != first.status;
        attempts.push(Attempt::of(&again));
        if differs {
            break;
        }
    }
    attempts
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
    let ahead = Ahead::new(clauses, backend, cfg);
    'dialects: for &dialect in &cfg.dialects {
        let opts = cfg.exec_options(dialect);
        for clause in clauses {
            if observer.stop_requested() {
                interrupted = true;
                break 'dialects;
            }
            ahead.announce(backend, results.len());
            observer.clause_started(clause, dialect);
            let r = run_clause(clause, backend, dialect, opts.seed, opts.step_timeout);
            let attempts = attempts_with_retries(&r, cfg.retries.retries_for(&r), || {
                run_clause(clause, backend, dialect, opts.seed, opts.step_timeout)
            });
            observer.clause_finished(&r, &attempts);
            results.push(r);
        }
    }
    observer.end();
    report_of(backend, info, cfg, started, clock, interrupted, results)
}

/// The machines a serial run will start, told to a backend that prepares
/// for them ([`Backend::expect`]) before each clause.
struct Ahead {
    /// The run's item (clause × dialect, in run order) of each machine.
    items: Vec<usize>,
    machines: Vec<ipc_harness::Upcoming>,
}

impl Ahead {
    fn new(clauses: &[&Clause], backend: &dyn Backend, cfg: &RunConfig) -> Ahead {
        let mut ahead = Ahead {
            items: Vec::new(),
            machines: Vec::new(),
        };
        if !guarded(|| backend.prepares_ahead()).unwrap_or(false) {
            return ahead;
        }
        let models = guarded(|| backend.has_hazard_log()).unwrap_or(false);
        let runs = cfg
            .dialects
            .iter()
            .flat_map(|&d| clauses.iter().map(move |&c| (d, c)));
        for (item, (dialect, clause)) in runs.enumerate() {
            let Some(scenario) = clause.scenario.as_ref().filter(|_| !clause.is_broken()) else {
                continue;
            };
            if not_applicable(clause, models, dialect).is_none() {
                ahead.items.push(item);
                let opts = cfg.exec_options(dialect);
                ahead.machines.push(scenario::upcoming(scenario, &opts));
            }
        }
        ahead
    }

    /// Tells `backend` the machines from item `item` on.
    fn announce(&self, backend: &dyn Backend, item: usize) {
        if self.machines.is_empty() {
            return;
        }
        let from = self.items.partition_point(|&i| i < item);
        let _ = guarded(|| backend.expect(&self.machines[from..]));
    }
}

/// [`run_clauses`] with `jobs` clauses at once (see [`crate::jobs`]): on
/// the CUDA backend each on devices of its own, its workers seeing only
/// them. Results are in the order of a serial run; the observer is told
/// each one as it finishes.
pub fn run_clauses_jobs(
    clauses: &[&Clause],
    backend: &(dyn Backend + Sync),
    cfg: &RunConfig,
    observer: &mut dyn Observer,
    jobs: crate::jobs::Jobs,
) -> RunReport {
    use crate::jobs::{self, Placement};
    let started = SystemTime::now();
    let clock = Instant::now();
    let info = guarded(|| backend.info()).unwrap_or_else(|panic| BackendInfo {
        backend: backend.name().to_string(),
        gpu_name: Some(format!("(info panicked: {panic})")),
        ..BackendInfo::default()
    });
    // Only the CUDA backend's workers can be confined to devices.
    let host = info
        .device_count
        .filter(|&d| d > 0 && backend.name() == "cuda");
    let threads = jobs.threads();
    if threads <= 1 {
        return run_clauses(clauses, backend, cfg, observer);
    }
    let items: Vec<(Dialect, &Clause)> = cfg
        .dialects
        .iter()
        .flat_map(|&d| clauses.iter().map(move |&c| (d, c)))
        .collect();
    let needs: Vec<jobs::DeviceNeed> = items
        .iter()
        .map(|(_, c)| host.map_or(jobs::DeviceNeed::Nothing, |h| jobs::device_need(c, h)))
        .collect();
    observer.begin(items.len());
    let run = |i: usize, placement: &Placement| {
        let (dialect, clause) = items[i];
        let opts = cfg.exec_options(dialect);
        let confined;
        let on: &dyn Backend = match placement {
            Placement::Devices(devices) => {
                confined = jobs::on_devices(backend, devices);
                &confined
            }
            Placement::Anywhere | Placement::Whole => backend,
        };
        let r = run_clause(clause, on, dialect, opts.seed, opts.step_timeout);
        let attempts = attempts_with_retries(&r, cfg.retries.retries_for(&r), || {
            run_clause(clause, on, dialect, opts.seed, opts.step_timeout)
        });
        (r, attempts)
    };
    let mut interrupted = observer.stop_requested();
    let finished = if interrupted {
        Vec::new()
    } else {
        jobs::run_scheduled(&needs, host, threads, &run, &mut |i, (r, attempts)| {
            let (dialect, clause) = items[i];
            observer.clause_started(clause, dialect);
            observer.clause_finished(r, attempts);
            if observer.stop_requested() {
                interrupted = true;
            }
            !interrupted
        })
    };
    // As a serial run would stop: the results before the first not run.
    let results: Vec<ClauseResult> = finished
        .into_iter()
        .map_while(|r| r.map(|(r, _)| r))
        .collect();
    interrupted |= results.len() < items.len();
    observer.end();
    report_of(backend, info, cfg, started, clock, interrupted, results)
}

fn report_of(
    backend: &dyn Backend,
    info: BackendInfo,
    cfg: &RunConfig,
    started: SystemTime,
    clock: Instant,
    interrupted: bool,
    results: Vec<ClauseResult>,
) -> RunReport {
    let run = RunInfo {
        tool_version: TOOL_VERSION.to_string(),
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
        workers: info.workers,
        shard: None,
        merged: None,
        expectations: None,
        gated_tiers: Some(cfg.gated_tiers.clone()),
    };
    RunReport::new(run, results)
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

/// `lines` (a result's console lines) with `  (incidental: not gated)`
/// after the first line when the result would fail the gate (did not pass,
/// or passed against an expectation) but its tier is outside `gated`: it is
/// reported, but cannot fail the run.
pub fn mark_ungated(mut lines: String, r: &ClauseResult, gated: Option<&[Tier]>) -> String {
    if !crate::model::classification_of(r).fails_gate() || crate::model::gates(r, gated) {
        return lines;
    }
    let first_end = lines.find('\n').unwrap_or(lines.len());
    lines.insert_str(
        first_end,
        &format!("  ({}: not gated)", crate::model::tier_name(r.tier)),
    );
    lines
}

/// `text` with its leading status label (`PASS`, `FAIL`, ...) in ANSI
/// colour: green for Pass, yellow for NotSupported, red otherwise.
pub fn paint_status(text: &str) -> String {
    let label_end = text.find(' ').unwrap_or(text.len());
    let (label, rest) = text.split_at(label_end);
    let code = match label {
        "PASS" => "32",
        "NOTSUP" => "33",
        "FAIL" | "CRASH" | "TIMEOUT" | "BROKEN" => "31",
        _ => return text.to_string(),
    };
    format!("\x1b[{code}m{label}\x1b[0m{rest}")
}

/// Progress bar on stderr (only on a terminal, never with `quiet`) and one
/// line per result (stdout, or above the bar). `quiet` also drops the lines
/// of Pass and NotSupported results.
pub struct Console {
    bar: ProgressBar,
    quiet: bool,
    show_dialect: bool,
    color: bool,
    gated_tiers: Option<Vec<Tier>>,
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
            color: false,
            gated_tiers: None,
        }
    }

    /// Mark the lines of results outside `tiers` that did not pass as not
    /// gated ([`mark_ungated`]).
    pub fn with_gated_tiers(mut self, tiers: &[Tier]) -> Console {
        self.gated_tiers = Some(tiers.to_vec());
        self
    }

    /// The gated tiers given to [`Console::with_gated_tiers`].
    pub fn gated_tiers(&self) -> Option<&[Tier]> {
        self.gated_tiers.as_deref()
    }

    /// Colour the status label of each result line (`--color`).
    pub fn with_color(mut self, color: bool) -> Console {
        self.color = color;
        self
    }

    /// Print a result's lines ([`result_lines`]), its status label coloured
    /// when colour is on.
    pub fn print_result(&self, text: &str) {
        if self.color {
            self.print(&paint_status(text));
        } else {
            self.print(text);
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

    fn clause_finished(&mut self, r: &ClauseResult, _attempts: &[Attempt]) {
        self.bar.inc(1);
        if self.quiet && r.status.is_success() {
            return;
        }
        let lines = mark_ungated(result_lines(r, self.show_dialect), r, self.gated_tiers());
        self.print_result(&lines);
    }

    fn end(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{totals, totals_line};
    use ipc_harness::Trace;
    use ipc_harness::{Machine, MachineSpec, StartError};

    pub(crate) fn result(id: &str, status: Status) -> ClauseResult {
        ClauseResult {
            id: id.into(),
            title: format!("title of {id}"),
            kind: Some(ClauseKind::Specified),
            tier: Some(Tier::Contract),
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
    }

    #[test]
    fn paint_status_colours_only_the_label() {
        assert_eq!(
            paint_status("PASS    a.b (0.3 ms)"),
            "\x1b[32mPASS\x1b[0m    a.b (0.3 ms)"
        );
        assert_eq!(
            paint_status("FAIL    a.b (1 ms)\n        why"),
            "\x1b[31mFAIL\x1b[0m    a.b (1 ms)\n        why"
        );
        assert_eq!(paint_status("NOTSUP  a.b"), "\x1b[33mNOTSUP\x1b[0m  a.b");
        assert_eq!(paint_status("reports: x"), "reports: x");
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
