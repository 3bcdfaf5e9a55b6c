//! The `ipc-conformance` command line.
//!
//! Exit codes: 0 success (every clause Pass or NotSupported), 1 failures (or
//! differences, or broken clauses in `list`), 2 usage and I/O errors, 3 the
//! requested backend cannot run at all (`run`, `differential`). Bad
//! input never panics: it is a message on stderr and exit 2.

use crate::backend::{self, BackendKind, SimSettings};
use crate::catalogue::{self, Catalogue, Clause};
use crate::differential;
use crate::expectations::{self, Expectations};
use crate::filter::Filter;
use crate::report::{self, text};
use crate::runner::{self, guarded, Console, Observer, RunConfig, RunReport};
use crate::sysinfo;
use crate::{EXIT_FAILURES, EXIT_OK, EXIT_USAGE};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::{Backend, Dialect, Status};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Print a line to stdout; a closed pipe (`| head`) is not an error worth a panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Print a line to stderr.
macro_rules! warn {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

#[derive(Debug, Parser)]
#[command(
    name = "ipc-conformance",
    version,
    about = "Conformance suite for GPU inter-process memory sharing (CUDA IPC)",
    long_about = "Conformance suite for GPU inter-process memory sharing (CUDA IPC).\n\n\
        Clauses are scenario files (*.ipc) with a stable id; they run on the \
        simulator (sim) or on real GPUs (cuda).\n\n\
        Clause directory, first match wins: --clauses DIR; $IPC_CONFORMANCE_CLAUSES; \
        the source tree's conformance/clauses/ (compiled in); clauses/ next to the \
        executable; ./clauses; ./conformance/clauses.\n\n\
        Exit codes: 0 all Pass or NotSupported; 1 failures or differences; 2 usage or I/O errors; \
        3 the requested backend cannot run at all (no driver, no device: every clause NotSupported; \
        --allow-unsupported accepts it); \
        130 run interrupted (SIGINT/SIGTERM; the reports hold what ran)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the clauses: id, kind, devices required, title; broken clauses
    /// are flagged with their problems (exit 1 when any is listed).
    List(ListArgs),
    /// Run the catalogue and write results.json, junit.xml and summary.md.
    Run(RunArgs),
    /// Parse and run scenario files (no metadata needed), printing each step.
    Scenario(ScenarioArgs),
    /// Print the simulator's semantic choices (name, default, options).
    Semantics,
    /// Run each clause on the simulator and on a real backend and compare
    /// the traces step by step.
    Differential(DifferentialArgs),
    /// Combine results.json files (e.g. sim and cuda runs) into one summary.md.
    Summary(SummaryArgs),
    /// Generate random valid scenarios and check them: properties on the
    /// simulator, and with --backend cuda the real driver against the
    /// simulator. Findings are shrunk to minimal scenario files under --out
    /// (exit 1 when there are any).
    Explore(ExploreArgs),
    /// Compare two results.json files clause by clause (status, trace,
    /// added, removed); exit 1 when anything changed.
    Diff(crate::diff::DiffArgs),
    /// Merge the results.json files of shards (`run --shard K/N`) into one
    /// results.json, junit.xml and summary.md.
    Merge(crate::shard::MergeArgs),
    /// Internal: a worker process of the real backend.
    #[cfg(feature = "cuda")]
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DialectArg {
    Runtime,
    Driver,
    /// HIP names (`hipIpc*`, `hipError*`); runs on the simulator under its
    /// HIP profile (no AMD backend: NotSupported on --backend cuda).
    Hip,
    /// Every dialect (runtime, driver, hip), reported side by side.
    All,
}

impl DialectArg {
    pub fn dialects(self) -> Vec<Dialect> {
        match self {
            DialectArg::Runtime => vec![Dialect::Runtime],
            DialectArg::Driver => vec![Dialect::Driver],
            DialectArg::Hip => vec![Dialect::Hip],
            DialectArg::All => Dialect::ALL.to_vec(),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct SelectArgs {
    /// Clause directory (see the order in --help).
    #[arg(long, value_name = "DIR")]
    pub clauses: Option<PathBuf>,
    /// Select clauses by id glob (`mem.open.*`); comma-separated or
    /// repeated; a plain prefix `mem` selects `mem.*`.
    #[arg(long, value_name = "GLOB")]
    pub filter: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Simulator semantic choices, `name=value,...` (see `semantics`).
    #[arg(long, value_name = "NAME=VALUE,...")]
    pub semantics: Vec<String>,
    /// Devices of the simulated machine.
    #[arg(long, value_name = "N")]
    pub sim_devices: Option<u32>,
}

impl SimArgs {
    fn settings(&self) -> Result<SimSettings, String> {
        Ok(SimSettings {
            devices: self.sim_devices,
            semantics: backend::parse_semantics(&self.semantics)?,
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Print JSON (one object per clause) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Report directory.
    #[arg(long, value_name = "DIR", default_value = report::DEFAULT_OUT_DIR)]
    pub out: PathBuf,
    /// Seed of every nondeterministic choice (addresses, handle bytes).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A step that takes longer is a Timeout (real backend).
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    pub step_timeout_ms: u64,
    #[command(flatten)]
    pub sim: SimArgs,
    /// No progress bar, no lines for passing clauses.
    #[arg(long, short)]
    pub quiet: bool,
    /// Run only shard K of N: the selected clauses sorted by id and dealt
    /// round-robin (recorded as run.shard; combine shards with `merge`).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<crate::shard::Shard>,
    /// Expectations file (TOML, docs/expectations.md): classify each result
    /// as Pass, ExpectedFail, UnexpectedFail, UnexpectedPass, NotSupported or
    /// Flaky; the exit code is then 0 unless something is UnexpectedFail or
    /// UnexpectedPass.
    #[arg(long, value_name = "FILE")]
    pub expectations: Option<PathBuf>,
    /// With --expectations: re-run a clause marked Flaky up to N more times
    /// when it does not pass.
    #[arg(
        long,
        value_name = "N",
        default_value_t = expectations::DEFAULT_FLAKY_RETRIES,
        requires = "expectations"
    )]
    pub flaky_retries: u32,
    /// Exit 0, not 3, when the backend cannot run at all (no driver, no
    /// device: every clause NotSupported).
    #[arg(long)]
    pub allow_unsupported: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Scenario files.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    pub step_timeout_ms: u64,
    #[command(flatten)]
    pub sim: SimArgs,
    /// Also check the exploration properties (conservation, coherence,
    /// documented returns, determinism, robustness) on the simulator and
    /// print what breaks them (replaying an `explore` finding).
    #[arg(long)]
    pub properties: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DifferentialArgs {
    /// The real backend compared with the simulator.
    #[arg(long, value_enum, default_value = "cuda")]
    pub backend: BackendKind,
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Report directory (differential.json, differential.md).
    #[arg(long, value_name = "DIR", default_value = report::DEFAULT_OUT_DIR)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    pub step_timeout_ms: u64,
    /// Simulator side settings.
    #[command(flatten)]
    pub sim: SimArgs,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Compare only shard K of N of the selected clauses (as `run --shard`).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<crate::shard::Shard>,
    /// Exit 0, not 3, when the real backend cannot run at all (no driver,
    /// no device: nothing compared).
    #[arg(long)]
    pub allow_unsupported: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ExploreArgs {
    /// `sim`: properties only; `cuda`: each case also on the real driver,
    /// compared with the simulator.
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    /// Generated cases.
    #[arg(long, default_value_t = 1000)]
    pub cases: u64,
    /// Seed of the whole exploration (case K uses a seed derived from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Steps per generated scenario, at most.
    #[arg(long, value_name = "K", default_value_t = 32)]
    pub max_steps: usize,
    /// `all` alternates the dialects case by case: runtime, driver and hip
    /// on the simulator (hip under its HIP profile, judged by HIP's own
    /// documented returns and the profile's choices); with a real backend
    /// runtime and driver only (hip has no real backend: its cases would
    /// all be NotSupported, and recorded GPU runs keep their numbering).
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
    /// Where findings (minimal scenario files), summary.json and summary.md go.
    #[arg(long, value_name = "DIR", default_value = "reports/latest/explore")]
    pub out: PathBuf,
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    pub step_timeout_ms: u64,
    /// Simulator side settings.
    #[command(flatten)]
    pub sim: SimArgs,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Start no new case after this many seconds (the summary says so).
    #[arg(long, value_name = "S")]
    pub time_limit_s: Option<u64>,
    /// Scenario runs a shrink may spend on one finding that needs the real
    /// backend (the simulator alone: 2000).
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub shrink_runs_real: usize,
    /// Cases run at once, each thread with its own backends (with
    /// `--backend cuda`, its own worker processes on the same GPUs). Above 1
    /// the run is no longer reproducible as a whole: which case of a finding
    /// gets shrunk depends on timing (each case still replays by its seed).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub jobs: usize,
    /// Number of the first case (a long run split over several calls goes
    /// on where the last one stopped: same seed, next first case).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub first_case: u64,
    /// With a real backend: append each case's scenario and real trace to
    /// FILE (JSON lines) for `--replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Judge the simulator against recorded real runs (files written by
    /// `--record`) instead of generating cases; needs no GPU. Findings are
    /// whole cases (shrinking needs the GPU) with both runs side by side.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["record", "jobs", "first_case"])]
    pub replay: Vec<PathBuf>,
    /// With --backend cuda: run scenario files (finding or case files, or
    /// any scenario) again on both backends with fresh workers; a file that
    /// still differs is shrunk against the real driver (at most
    /// --shrink-runs-real runs) into OUT/recheck-NAME, and OUT/recheck.txt
    /// says what each file did. The case, seed and dialect come from the
    /// file's header, else --seed and --dialect.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["record", "jobs", "first_case", "replay"])]
    pub recheck: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct SummaryArgs {
    /// results.json files, one column group each.
    #[arg(required = true, value_name = "RESULTS_JSON")]
    pub results: Vec<PathBuf>,
    /// Where to write the summary (default: stdout).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Whatever the real backend passes; the worker reads it itself.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub rest: Vec<String>,
}

/// A usage or I/O error: printed, exit 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl<T: std::fmt::Display> From<T> for UsageError {
    fn from(e: T) -> Self {
        UsageError(e.to_string())
    }
}

type CmdResult = Result<u8, UsageError>;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    ExitCode::from(run_cli(cli))
}

/// Run a parsed command line; returns the exit code.
pub fn run_cli(cli: Cli) -> u8 {
    let outcome = guarded(|| match cli.command {
        Command::List(a) => cmd_list(&a),
        Command::Run(a) => cmd_run(&a),
        Command::Scenario(a) => cmd_scenario(&a),
        Command::Semantics => cmd_semantics(),
        Command::Differential(a) => cmd_differential(&a),
        Command::Summary(a) => cmd_summary(&a),
        Command::Explore(a) => cmd_explore(&a),
        Command::Diff(a) => crate::diff::command(&a).map_err(UsageError),
        Command::Merge(a) => crate::shard::command(&a).map_err(UsageError),
        #[cfg(feature = "cuda")]
        Command::Worker(_) => {
            crate::interrupt::ignore_sigint_in_worker();
            Ok(backend::worker_main().clamp(0, 255) as u8)
        }
    });
    match outcome {
        Ok(Ok(code)) => code,
        Ok(Err(UsageError(msg))) => {
            warn!("ipc-conformance: error: {msg}");
            EXIT_USAGE
        }
        Err(panic) => {
            warn!("ipc-conformance: internal error: {panic}");
            EXIT_USAGE
        }
    }
}

fn load_catalogue(select: &SelectArgs) -> Result<(Catalogue, Filter), UsageError> {
    let filter = Filter::new(&select.filter)?;
    let dir = catalogue::locate(select.clauses.as_deref())?;
    let cat = Catalogue::load(&dir)?;
    Ok((cat, filter))
}

fn selected<'a>(cat: &'a Catalogue, filter: &Filter) -> Result<Vec<&'a Clause>, UsageError> {
    let clauses = cat.select(filter);
    if clauses.is_empty() {
        return Err(if cat.is_empty() {
            UsageError(format!("no clause files (*.ipc) in {}", cat.dir.display()))
        } else {
            UsageError(format!(
                "no clause matches --filter {} ({} clauses in {})",
                filter.patterns().join(","),
                cat.len(),
                cat.dir.display()
            ))
        });
    }
    Ok(clauses)
}

// ---------------------------------------------------------------------------
// list

fn cmd_list(a: &ListArgs) -> CmdResult {
    let (cat, filter) = load_catalogue(&a.select)?;
    let clauses = cat.select(&filter);
    let broken = clauses.iter().filter(|c| c.is_broken()).count();
    let known: Vec<&str> = backend::semantic_choices().iter().map(|c| c.name).collect();
    // Semantics metadata naming no simulator choice: a warning, not broken.
    let unknown_semantics = |c: &Clause| -> Vec<String> {
        c.semantics
            .iter()
            .filter(|s| !known.contains(&s.as_str()))
            .cloned()
            .collect()
    };
    if a.json {
        let items: Vec<serde_json::Value> = clauses
            .iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["broken"] = serde_json::Value::Bool(c.is_broken());
                v["unknown_semantics"] = serde_json::json!(unknown_semantics(c));
                v
            })
            .collect();
        say!(
            "{}",
            serde_json::to_string_pretty(&items).unwrap_or_else(|_| "[]".into())
        );
    } else {
        let id_w = clauses.iter().map(|c| c.id.len()).max().unwrap_or(2).max(2);
        let kind_w = clauses
            .iter()
            .filter_map(|c| c.kind.map(|k| k.as_str().len()))
            .max()
            .unwrap_or(4)
            .max(4);
        say!(
            "  {}  {}  {:>3}  TITLE",
            pad("ID", id_w),
            pad("KIND", kind_w),
            "DEV"
        );
        for c in &clauses {
            let devices = c
                .requirements
                .devices
                .map(|d| d.to_string())
                .unwrap_or_else(|| "?".into());
            let kind = c.kind.map(|k| k.as_str()).unwrap_or("?");
            let flag = if c.is_broken() { "!" } else { " " };
            say!(
                "{flag} {}  {}  {devices:>3}  {}",
                pad(&c.id, id_w),
                pad(kind, kind_w),
                c.title
            );
            if c.is_broken() {
                say!("    BROKEN {}", c.path.display());
                for p in c.problem_message().split("; ") {
                    say!("      {p}");
                }
            }
            for name in unknown_semantics(c) {
                say!("    warning: semantics '{name}' is not a simulator choice (see `ipc-conformance semantics`)");
            }
        }
        say!(
            "{} clause{}{} in {}{}",
            clauses.len(),
            if clauses.len() == 1 { "" } else { "s" },
            if broken > 0 {
                format!(", {broken} broken (!)")
            } else {
                String::new()
            },
            cat.dir.display(),
            if filter.is_all() {
                String::new()
            } else {
                format!(" matching {}", filter.patterns().join(","))
            }
        );
    }
    Ok(if broken > 0 { EXIT_FAILURES } else { EXIT_OK })
}

/// `text` padded with spaces to `width` characters. A format width (`{:<w$}`)
/// panics above 65,535; a clause id has no such bound.
fn pad(text: &str, width: usize) -> String {
    let mut s = String::with_capacity(width.max(text.len()));
    s.push_str(text);
    s.extend(std::iter::repeat_n(
        ' ',
        width.saturating_sub(text.chars().count()),
    ));
    s
}

// ---------------------------------------------------------------------------
// run

fn cmd_run(a: &RunArgs) -> CmdResult {
    let (cat, filter) = load_catalogue(&a.select)?;
    let clauses = selected(&cat, &filter)?;
    let clauses = crate::shard::apply(a.shard, clauses);
    let backend = backend::make(a.backend, &a.sim.settings()?)?;
    // A bad expectations file is a usage error, before anything runs.
    let expect = a
        .expectations
        .as_deref()
        .map(Expectations::load)
        .transpose()?;
    // Fail on an unwritable --out before running anything.
    report::ensure_dir(&a.out)?;
    let cfg = RunConfig {
        dialects: a.dialect.dialects(),
        seed: a.seed,
        step_timeout: Duration::from_millis(a.step_timeout_ms),
        filter: filter.patterns().to_vec(),
        clauses_dir: Some(cat.dir.clone()),
    };
    // SIGINT/SIGTERM: finish the clause in progress, report, exit 130.
    let signals = crate::interrupt::install()?;
    let mut console = crate::interrupt::Interruptible(expectations::Gate::new(
        expect.as_ref(),
        Console::new(a.quiet, cfg.dialects.len() > 1),
        backend.as_ref(),
        &clauses,
        &cfg,
        a.flaky_retries,
        a.quiet,
    ));
    let mut report = runner::run_clauses(&clauses, backend.as_ref(), &cfg, &mut console);
    console.0.finish(&mut report);
    report.run.shard = a.shard.map(|s| s.to_string());
    report::write_run(&a.out, &report)?;
    drop(signals);
    print_run_footer(&report, &a.out);
    if let Some(exp) = &expect {
        let ids: Vec<&str> = cat.clauses.iter().map(|c| c.id.as_str()).collect();
        for line in expectations::footer_lines(&report, exp, &ids) {
            say!("{line}");
        }
    }
    if report.run.interrupted {
        let total = clauses.len() * cfg.dialects.len();
        say!(
            "{}",
            crate::interrupt::interrupted_line(report.results.len(), total)
        );
        return Ok(crate::interrupt::EXIT_INTERRUPTED);
    }
    let unavailable = crate::availability::unavailable(
        &report.run.backend,
        report.run.device_count,
        &report.results,
    );
    if let (Some(why), false) = (unavailable, a.allow_unsupported) {
        warn!("ipc-conformance: {why} (exit 3; --allow-unsupported accepts this)");
        return Ok(crate::EXIT_BACKEND_UNAVAILABLE);
    }
    Ok(report.exit_code())
}

fn print_run_footer(report: &RunReport, out: &Path) {
    let run = &report.run;
    say!(
        "{} in {} (backend {}, dialect {}, seed {})",
        report.totals_line(),
        sysinfo::human_ms(run.duration_ms),
        run.backend,
        run.dialect,
        run.seed
    );
    let (start, steps, shutdown) = runner::time_split(&report.results);
    say!(
        "time: machine start {}, steps {}, shutdown {}",
        sysinfo::human_ms(start),
        sysinfo::human_ms(steps),
        sysinfo::human_ms(shutdown)
    );
    say!(
        "reports: {} (results.json, junit.xml, summary.md)",
        out.display()
    );
}

// ---------------------------------------------------------------------------
// scenario

fn cmd_scenario(a: &ScenarioArgs) -> CmdResult {
    let backend = backend::make(a.backend, &a.sim.settings()?)?;
    let dialects = a.dialect.dialects();
    let mut all_ok = true;
    let clock = Instant::now();
    for file in &a.files {
        let parsed = match guarded(|| scenario::parse_file(file)) {
            Ok(p) => p,
            Err(panic) => {
                warn!("{}: the scenario parser panicked: {panic}", file.display());
                all_ok = false;
                continue;
            }
        };
        let scenario = match parsed {
            Ok(s) => s,
            Err(e) => {
                warn!("{e}");
                all_ok = false;
                continue;
            }
        };
        for &dialect in &dialects {
            let ok = run_one_scenario(&scenario, file, backend.as_ref(), dialect, a);
            all_ok &= ok;
            if a.properties {
                all_ok &= check_properties(&scenario, dialect, a)?;
            }
        }
    }
    say!(
        "{} in {} (seed {})",
        if all_ok { "all passed" } else { "FAILED" },
        sysinfo::human_ms(sysinfo::millis(clock.elapsed())),
        a.seed
    );
    Ok(if all_ok { EXIT_OK } else { EXIT_FAILURES })
}

// ---------------------------------------------------------------------------
// explore

/// The dialects `explore` cases alternate between: `all` is every dialect
/// on the simulator, the CUDA ones with a real backend (hip has none).
fn explore_dialects(dialect: DialectArg, backend: BackendKind) -> Vec<Dialect> {
    match (dialect, backend) {
        (DialectArg::All, BackendKind::Sim) => Dialect::ALL.to_vec(),
        (DialectArg::All, _) => Dialect::CUDA.to_vec(),
        (d, _) => d.dialects(),
    }
}

fn cmd_explore(a: &ExploreArgs) -> CmdResult {
    use crate::explore::{self, ExploreOptions, Judge};
    if a.max_steps == 0 {
        return Err(UsageError("--max-steps must be at least 1".into()));
    }
    if a.jobs > crate::limits::MAX_EXPLORE_JOBS {
        return Err(UsageError(format!(
            "--jobs {} is above the limit of {} threads",
            a.jobs,
            crate::limits::MAX_EXPLORE_JOBS
        )));
    }
    if a.max_steps > crate::limits::MAX_EXPLORE_STEPS {
        return Err(UsageError(format!(
            "--max-steps {} is above the limit of {} steps",
            a.max_steps,
            crate::limits::MAX_EXPLORE_STEPS
        )));
    }
    if !a.replay.is_empty() {
        return cmd_explore_replay(a);
    }
    if !a.recheck.is_empty() {
        return cmd_explore_recheck(a);
    }
    if a.record.is_some() && a.backend == BackendKind::Sim {
        return Err(UsageError(
            "--record keeps real traces: it needs --backend cuda".into(),
        ));
    }
    let mut settings = a.sim.settings()?;
    let make_real = || -> Result<Option<Box<dyn Backend>>, UsageError> {
        match a.backend {
            BackendKind::Sim => Ok(None),
            kind => Ok(Some(backend::make_with_reuse(
                kind,
                &SimSettings::default(),
                true,
            )?)),
        }
    };
    let real = make_real()?;
    // The simulator plays the machine the real driver runs on.
    if let (Some(r), None) = (&real, settings.devices) {
        settings.devices = r.info().device_count.filter(|&d| d > 0);
    }
    let sim = backend::make(BackendKind::Sim, &settings)?;
    report::ensure_dir(&a.out)?;
    let opts = ExploreOptions {
        cases: a.cases,
        seed: a.seed,
        max_steps: a.max_steps,
        dialects: explore_dialects(a.dialect, a.backend),
        step_timeout: Duration::from_millis(a.step_timeout_ms),
        time_limit: a.time_limit_s.map(Duration::from_secs),
        shrink_runs_real: a.shrink_runs_real,
        first_case: a.first_case,
        record: a.record.clone(),
        record_devices: settings.devices,
        // Programs use the devices the machine has (the simulator's default
        // machine has two).
        max_devices: settings.devices.unwrap_or(2),
        stop_on_signal: true,
        ..ExploreOptions::default()
    };
    // SIGINT/SIGTERM: finish the case in progress, write the summary, exit
    // 130, as `run` does.
    let signals = crate::interrupt::install()?;
    let bar = if a.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(a.cases)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} cases ({per_sec}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let show = |done: u64, findings: usize| {
        bar.set_position(done);
        if findings > 0 {
            bar.set_message(format!("{findings} finding(s)"));
        }
    };
    let judge = Judge {
        sim: sim.as_ref(),
        real: real.as_deref(),
        step_timeout: opts.step_timeout,
    };
    let summary = if a.jobs <= 1 {
        explore::explore(&opts, &judge, Some(&a.out), &mut |d, f| show(d, f))
    } else {
        // Each further thread makes its own backends (and worker processes).
        let make = || -> Result<explore::Backends, String> {
            let real = make_real().map_err(|e| e.0)?;
            let sim = backend::make(BackendKind::Sim, &settings).map_err(|e| e.to_string())?;
            Ok((sim, real))
        };
        explore::explore_parallel(&opts, a.jobs, &judge, &make, Some(&a.out), &show)
    };
    bar.finish_and_clear();
    write_explore_summary(&summary, &a.out)?;
    drop(signals);
    if summary.stopped_early {
        say!("stopped by --time-limit-s before {} cases", a.cases);
    }
    say!("reports: {} (summary.json, summary.md)", a.out.display());
    if summary.interrupted {
        say!(
            "interrupted by {} after {} of {} cases (the summary holds them)",
            crate::interrupt::signal_name().unwrap_or("a signal"),
            summary.cases,
            a.cases
        );
        return Ok(crate::interrupt::EXIT_INTERRUPTED);
    }
    Ok(if summary.findings.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILURES
    })
}

/// Print the findings, write summary.json and summary.md, print the line.
fn write_explore_summary(summary: &crate::explore::Summary, out: &Path) -> Result<(), UsageError> {
    for f in &summary.findings {
        say!(
            "finding: {} case {} (seed {}, {}; {} more alike): {}{}",
            f.property,
            f.case.index,
            f.case.seed,
            f.case.dialect,
            f.repeats,
            f.message,
            f.file
                .as_ref()
                .map(|p| format!(" -> {}", p.display()))
                .unwrap_or_default()
        );
    }
    if let Some(e) = &summary.record_error {
        warn!("--record stopped: {e}");
    }
    let json = serde_json::to_string_pretty(summary)?;
    let markdown = summary.markdown();
    crate::safe_fs::write_set(
        out,
        &[
            ("summary.md", markdown.as_bytes()),
            ("summary.json", json.as_bytes()),
        ],
    )
    .map_err(report::ReportError::from)?;
    say!("{}", summary.line());
    Ok(())
}

/// `explore --replay FILE...`: the simulator against recorded real runs.
fn cmd_explore_replay(a: &ExploreArgs) -> CmdResult {
    use crate::explore::{record, ExploreOptions};
    let mut records = Vec::new();
    for f in &a.replay {
        records.extend(record::read(f).map_err(UsageError)?);
    }
    let settings = a.sim.settings()?;
    // The simulator plays each recorded machine (its device count), unless
    // --sim-devices says otherwise.
    let make_sim = |devices: Option<u32>| {
        let mut s = settings.clone();
        if s.devices.is_none() {
            s.devices = devices;
        }
        backend::make(BackendKind::Sim, &s)
    };
    report::ensure_dir(&a.out)?;
    let opts = ExploreOptions {
        seed: a.seed,
        step_timeout: Duration::from_millis(a.step_timeout_ms),
        ..ExploreOptions::default()
    };
    let source = a
        .replay
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let summary = record::replay(
        &opts,
        &make_sim,
        &records,
        &source,
        Some(&a.out),
        &mut |_, _| {},
    )
    .map_err(UsageError)?;
    write_explore_summary(&summary, &a.out)?;
    say!(
        "{} of {} recorded cases differ from the simulator; reports: {}",
        summary.differing_cases,
        summary.cases,
        a.out.display()
    );
    Ok(if summary.findings.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILURES
    })
}

/// `explore --backend cuda --recheck FILE...`: files run again on both
/// backends, the ones still differing shrunk against the real driver.
fn cmd_explore_recheck(a: &ExploreArgs) -> CmdResult {
    use crate::explore::{recheck, CaseId, Judge};
    if a.backend == BackendKind::Sim {
        return Err(UsageError(
            "--recheck compares with the real driver: it needs --backend cuda".into(),
        ));
    }
    // Fresh workers: what an earlier case left in a worker is not the file's.
    let real = backend::make_with_reuse(a.backend, &SimSettings::default(), false)?;
    let mut settings = a.sim.settings()?;
    if settings.devices.is_none() {
        settings.devices = real.info().device_count.filter(|&d| d > 0);
    }
    let sim = backend::make(BackendKind::Sim, &settings)?;
    report::ensure_dir(&a.out)?;
    let judge = Judge {
        sim: sim.as_ref(),
        real: Some(real.as_ref()),
        step_timeout: Duration::from_millis(a.step_timeout_ms),
    };
    let default = CaseId {
        index: 0,
        seed: a.seed,
        dialect: explore_dialects(a.dialect, a.backend)
            .first()
            .copied()
            .unwrap_or(Dialect::Runtime),
    };
    let results = recheck::recheck_files(
        &judge,
        &a.recheck,
        default,
        a.shrink_runs_real,
        &a.out,
        &mut |path, r| say!("recheck {}: {}", path.display(), r.line()),
    )
    .map_err(UsageError)?;
    let differing = results
        .iter()
        .filter(|(_, r)| matches!(r, recheck::Recheck::Differs(_)))
        .count();
    say!(
        "{differing} of {} files still differ; reports: {}",
        results.len(),
        a.out.display()
    );
    Ok(if differing == 0 {
        EXIT_OK
    } else {
        EXIT_FAILURES
    })
}

/// `scenario --properties`: the exploration properties on the simulator.
fn check_properties(
    scenario: &scenario::Scenario,
    dialect: Dialect,
    a: &ScenarioArgs,
) -> Result<bool, UsageError> {
    let sim = backend::make(BackendKind::Sim, &a.sim.settings()?)?;
    let opts = ExecOptions {
        dialect,
        seed: a.seed,
        step_timeout: Duration::from_millis(a.step_timeout_ms),
    };
    let (_, violations) = crate::explore::properties::check_on_sim(scenario, sim.as_ref(), &opts);
    for v in &violations {
        say!("property {}: {}", v.property, v.message);
    }
    if violations.is_empty() {
        say!("properties: all hold on the simulator");
    }
    Ok(violations.is_empty())
}

fn run_one_scenario(
    scenario: &scenario::Scenario,
    file: &Path,
    backend: &dyn Backend,
    dialect: Dialect,
    a: &ScenarioArgs,
) -> bool {
    let opts = ExecOptions {
        dialect,
        seed: a.seed,
        step_timeout: Duration::from_millis(a.step_timeout_ms),
    };
    say!(
        "== {} [{dialect}] on {} (seed {})",
        file.display(),
        backend.name(),
        a.seed
    );
    let (status, message) = match guarded(|| scenario::execute(scenario, backend, &opts)) {
        Ok(exec) => {
            let trace = text::trace_text(&exec.trace);
            for line in trace.lines() {
                say!("  {line}");
            }
            (exec.verdict.status, exec.verdict.message)
        }
        Err(panic) => (Status::Broken, format!("the harness panicked: {panic}")),
    };
    if message.is_empty() {
        say!("verdict: {}", status.name());
    } else {
        say!("verdict: {}: {message}", status.name());
    }
    status.is_success()
}

// ---------------------------------------------------------------------------
// semantics

/// The options of a choice, with the full list of error kinds shortened.
fn short_options(options: &[String]) -> String {
    let kinds: Vec<String> = ipc_harness::ErrorKind::all()
        .map(|k| format!("{k:?}"))
        .collect();
    if kinds.iter().all(|k| options.contains(k)) {
        let rest: Vec<&str> = options
            .iter()
            .filter(|o| !kinds.contains(o))
            .map(String::as_str)
            .chain(["any error kind (InvalidValue, InvalidHandle, ...)"])
            .collect();
        rest.join(", ")
    } else {
        options.join(", ")
    }
}

fn cmd_semantics() -> CmdResult {
    let choices = backend::semantic_choices();
    let hip: std::collections::BTreeMap<&str, String> =
        ipc_mock_driver::Semantics::hip_differences()
            .into_iter()
            .map(|(name, _, hip)| (name, hip))
            .collect();
    say!("Simulator semantic choices (set with --semantics name=value,...):\n");
    for c in &choices {
        let hip_value = hip
            .get(c.name)
            .map(|v| format!(", hip profile: {v}"))
            .unwrap_or_default();
        say!(
            "{} = {}{hip_value}    (options: {})",
            c.name,
            c.value,
            short_options(&c.options)
        );
        for line in c.description.lines() {
            say!("    {line}");
        }
        say!("");
    }
    Ok(EXIT_OK)
}

// ---------------------------------------------------------------------------
// differential

/// Shows only the progress bar (the differences are printed at the end).
struct ProgressOnly(Console);

impl Observer for ProgressOnly {
    fn begin(&mut self, total: usize) {
        self.0.begin(total)
    }
    fn clause_started(&mut self, clause: &Clause, dialect: Dialect) {
        self.0.clause_started(clause, dialect)
    }
    fn clause_finished(&mut self, _r: &runner::ClauseResult) {
        self.0.tick();
    }
    fn end(&mut self) {
        self.0.end()
    }
}

fn cmd_differential(a: &DifferentialArgs) -> CmdResult {
    let (cat, filter) = load_catalogue(&a.select)?;
    let clauses = selected(&cat, &filter)?;
    let clauses = crate::shard::apply(a.shard, clauses);
    let sim = backend::make(BackendKind::Sim, &a.sim.settings()?)?;
    let real = backend::make(a.backend, &SimSettings::default())?;
    report::ensure_dir(&a.out)?;
    let cfg = RunConfig {
        dialects: a.dialect.dialects(),
        seed: a.seed,
        step_timeout: Duration::from_millis(a.step_timeout_ms),
        filter: filter.patterns().to_vec(),
        clauses_dir: Some(cat.dir.clone()),
    };
    let several = cfg.dialects.len() > 1;
    let mut sim_report = runner::run_clauses(
        &clauses,
        sim.as_ref(),
        &cfg,
        &mut ProgressOnly(Console::new(a.quiet, several)),
    );
    let mut real_report = runner::run_clauses(
        &clauses,
        real.as_ref(),
        &cfg,
        &mut ProgressOnly(Console::new(a.quiet, several)),
    );
    sim_report.run.shard = a.shard.map(|s| s.to_string());
    real_report.run.shard = sim_report.run.shard.clone();
    let diff = differential::compare(sim_report, real_report);

    for line in differential::difference_lines(&diff) {
        say!("{line}");
    }
    for n in &diff.not_compared {
        say!(
            "not compared: {} [{}]: {}",
            n.id,
            n.dialect,
            n.reason.lines().next().unwrap_or("")
        );
    }
    let json = differential::to_json(&diff)?;
    let markdown = differential::to_markdown(&diff);
    crate::safe_fs::write_set(
        &a.out,
        &[
            ("differential.md", markdown.as_bytes()),
            ("differential.json", json.as_bytes()),
        ],
    )
    .map_err(report::ReportError::from)?;
    say!(
        "{} in {} (seed {})",
        differential::totals_line(&diff),
        sysinfo::human_ms(diff.duration_ms),
        a.seed
    );
    say!(
        "reports: {} (differential.json, differential.md)",
        a.out.display()
    );
    let unavailable = crate::availability::unavailable(
        &diff.real.backend,
        diff.real.device_count,
        &diff.real_results,
    );
    if let (Some(why), false) = (unavailable, a.allow_unsupported) {
        warn!("ipc-conformance: {why} (exit 3; --allow-unsupported accepts this)");
        return Ok(crate::EXIT_BACKEND_UNAVAILABLE);
    }
    Ok(diff.exit_code())
}

// ---------------------------------------------------------------------------
// summary

fn cmd_summary(a: &SummaryArgs) -> CmdResult {
    let mut runs = Vec::new();
    for path in &a.results {
        let run = crate::diff::load(path)?;
        runs.push(run);
    }
    let md = report::markdown::summary(&runs);
    match &a.out {
        Some(out) => {
            if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
                report::ensure_dir(parent)?;
            }
            report::write_atomic(out, md.as_bytes())?;
            say!("wrote {}", out.display());
        }
        None => {
            let _ = std::io::stdout().lock().write_all(md.as_bytes());
        }
    }
    let all_ok = runs.iter().all(|r| r.exit_code() == EXIT_OK);
    Ok(if all_ok { EXIT_OK } else { EXIT_FAILURES })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn explore_all_is_every_dialect_on_the_simulator_and_the_cuda_ones_on_a_gpu() {
        assert_eq!(
            explore_dialects(DialectArg::All, BackendKind::Sim),
            [Dialect::Runtime, Dialect::Driver, Dialect::Hip]
        );
        assert_eq!(
            explore_dialects(DialectArg::All, BackendKind::Cuda),
            [Dialect::Runtime, Dialect::Driver]
        );
        for d in [DialectArg::Runtime, DialectArg::Driver, DialectArg::Hip] {
            assert_eq!(
                explore_dialects(d, BackendKind::Sim),
                explore_dialects(d, BackendKind::Cuda)
            );
        }
    }

    #[test]
    fn defaults_match_the_documentation() {
        let cli = Cli::try_parse_from(["ipc-conformance", "run"]).unwrap();
        let Command::Run(a) = cli.command else {
            panic!("not run")
        };
        assert_eq!(a.backend, BackendKind::Sim);
        assert_eq!(a.dialect, DialectArg::Runtime);
        assert_eq!(a.seed, 1);
        assert_eq!(a.out, PathBuf::from("reports/latest"));
        assert!(!a.quiet);
    }

    #[test]
    fn repeated_and_comma_separated_options() {
        let cli = Cli::try_parse_from([
            "ipc-conformance",
            "run",
            "--filter",
            "a.*,b.*",
            "--filter",
            "c",
            "--semantics",
            "x=1,y=2",
            "--dialect",
            "all",
            "--sim-devices",
            "4",
        ])
        .unwrap();
        let Command::Run(a) = cli.command else {
            panic!("not run")
        };
        assert_eq!(a.select.filter, ["a.*,b.*", "c"]);
        assert_eq!(a.dialect.dialects(), Dialect::ALL.to_vec());
        let s = a.sim.settings().unwrap();
        assert_eq!(s.devices, Some(4));
        assert_eq!(s.semantics.len(), 2);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            vec!["ipc-conformance", "run", "--backend", "gpu"],
            vec!["ipc-conformance", "run", "--dialect", "both"],
            vec!["ipc-conformance", "run", "--seed", "-3"],
            vec!["ipc-conformance", "scenario"],
        ] {
            let err = Cli::try_parse_from(&args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn bad_filter_and_missing_dirs_exit_2() {
        let code =
            run_cli(Cli::try_parse_from(["ipc-conformance", "list", "--filter", "a.[b"]).unwrap());
        assert_eq!(code, EXIT_USAGE);
        let code = run_cli(
            Cli::try_parse_from([
                "ipc-conformance",
                "list",
                "--clauses",
                "/nonexistent/ipc-conformance/clauses",
            ])
            .unwrap(),
        );
        assert_eq!(code, EXIT_USAGE);
        let code = run_cli(
            Cli::try_parse_from(["ipc-conformance", "summary", "/nonexistent/results.json"])
                .unwrap(),
        );
        assert_eq!(code, EXIT_USAGE);
    }
}
