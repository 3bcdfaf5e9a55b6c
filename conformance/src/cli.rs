//! The `ipc-conformance` command line.
//!
//! Exit codes: 0 success (every clause Pass or NotSupported), 1 failures (or
//! differences, or broken clauses in `list`), 2 usage and I/O errors, 3 the
//! requested backend cannot run at all (`run`, `differential`), 4 a trace
//! `check` could not judge. Bad input never panics: it is a message on stderr and exit 2.

use crate::backend::{self, BackendKind, SimSettings};
use crate::catalogue::{self, Catalogue, Clause, Tier};
use crate::differential;
use crate::exit::{EXIT_FAILURES, EXIT_OK, EXIT_PANIC, EXIT_USAGE};
use crate::expectations::{self, Expectations};
use crate::filter::Filter;
use crate::guard::guarded;
use crate::model::{self, RunReport, TierList};
use crate::report::{self, text};
use crate::runner::{self, Console, Observer, RunConfig};
use crate::sysinfo;
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

/// The environment variables the tool reads, for `--help`.
const ENVIRONMENT_HELP: &str = "\
Environment:
  IPC_CONFORMANCE_CLAUSES      clause directory when --clauses is not given
  IPC_CONFORMANCE_WORKER_POOL  CUDA workers started ahead of the clauses that need them (default 3; 0: none)
  IPC_CONFORMANCE_SPARE_CONTEXTS  emptied contexts a reused CUDA worker keeps per device (default 2; 0: none)
  IPC_CONFORMANCE_REUSE_WORKERS  1: reset CUDA workers serve every scenario; 0: none (--workers wins)
  IPC_CONFORMANCE_ONE_QUEUE    0: run's CUDA workers keep the driver's default hardware queues (by
                               default a one-stream process gets one: CUDA_DEVICE_MAX_CONNECTIONS=1)
  IPC_CONFORMANCE_SHARE_ALSO   sharing rules off: interprocess-events,exits,pools (the default), or none
  IPC_CONFORMANCE_SHARING_CHECKED  the sharing-checked.txt of a run --check-sharing the policy reads
                               instead of the compiled-in one, or none
  IPC_CONFORMANCE_PROFILE      1: print where the run spent its time (harness side) at the end
  IPC_GIT_REVISION             revision recorded in results.json (default: the build's, else git)
  CUDA_VISIBLE_DEVICES         the GPUs the real backend may use (each worker sees its own subset)
  CUDA_DEVICE_MAX_CONNECTIONS  set: every CUDA worker inherits it (no one-queue workers)
  CUDA_HOME, CUDA_PATH         where the real backend looks for the CUDA libraries
  NO_COLOR                     set: no colour (as --color never)
  RUST_BACKTRACE               1: print the backtrace of a panic (exit 101)";

#[derive(Debug, Parser)]
#[command(
    name = "ipc-conformance",
    version,
    about = "Conformance suite for GPU inter-process memory sharing (CUDA IPC)",
    long_about = "Conformance suite for GPU inter-process memory sharing (CUDA IPC).\n\n\
        Clauses are scenario files (*.ipc) with a stable id; they run on the \
        simulator (sim) or on real GPUs (cuda).\n\n\
        Clauses, first match wins: --clauses DIR; $IPC_CONFORMANCE_CLAUSES; \
        the catalogue compiled into this binary.\n\n\
        Exit codes: 0 all Pass or NotSupported; 1 failures or differences; 2 usage or I/O errors; \
        3 the requested backend cannot run at all (no driver, no device: every clause NotSupported; \
        --allow-unsupported accepts it); \
        4 `check` could not judge the trace (it says why); \
        101 internal error (a bug: please report it); \
        130 run interrupted (SIGINT/SIGTERM; the reports hold what ran).",
    after_long_help = ENVIRONMENT_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Less output: no progress bar, no lines for passing clauses.
    #[arg(long, short, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More output: where the catalogue came from, the backend, and the
    /// run's settings before it starts.
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Colour the status of each result: auto (on a terminal, unless
    /// NO_COLOR is set), always, never.
    #[arg(
        long,
        value_enum,
        global = true,
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub color: ColorChoice,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to colour output written to a stream that `is_terminal` or not.
    pub fn enabled(self, is_terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        }
    }
}

#[derive(Debug, Subcommand)]
// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
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
    /// Generate random valid scenarios and check them (`generate`, the
    /// default), judge the simulator against recorded real runs (`replay`),
    /// or run finding files again on both backends (`recheck`). Findings
    /// are shrunk to minimal scenario files under --out (exit 1 when there
    /// are any).
    Explore(ExploreArgs),
    /// Compare two results.json files clause by clause (status, trace,
    /// added, removed); exit 1 when anything changed.
    Diff(crate::diff::DiffArgs),
    /// Merge the results.json files of shards (`run --shard K/N`) into one
    /// results.json, junit.xml and summary.md.
    Merge(crate::shard::MergeArgs),
    /// Run scenario files under every simulator profile (measured,
    /// documented, hip) and report, step by step, where outcomes differ and
    /// which semantic choice (and tier) is behind it; exit 1 when any does.
    Portability(PortabilityArgs),
    /// Run a program with the IPC tracer preloaded (every process it starts
    /// too): per-process records of its driver calls under --out.
    Trace(crate::trace_cmd::TraceArgs),
    /// Judge a traced program's IPC by replaying it on the simulator: exit 0
    /// clean, 1 hazards, 4 not judged (with the reasons); writes a replayable
    /// scenario.
    Check(crate::trace_check::CheckArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    /// on stdout.
    Completions(CompletionsArgs),
    /// Internal: a worker process of the real backend.
    #[cfg(feature = "cuda")]
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DialectArg {
    /// CUDA runtime names (`cudaIpc*`, `cudaError*`).
    Runtime,
    /// CUDA driver names (`cuIpc*`, `CUDA_ERROR_*`).
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

/// Where the scenarios run: `--backend` (the simulator by default) and
/// `--dialect`.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// sim: the simulator (no GPU needed); cuda: real GPUs.
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    /// The API names a scenario runs under: runtime, driver, hip, or all
    /// (each clause once per dialect; `explore` alternates them case by
    /// case, and with a real backend uses runtime and driver only).
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
}

/// How each scenario runs: its seed and step timeout.
#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// Seed of every nondeterministic choice (addresses, handle bytes; for
    /// `explore`, the cases drawn); a failure's reproduce line names it.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A step that takes longer is a Timeout (real backend).
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    pub step_timeout_ms: u64,
}

impl ExecArgs {
    fn step_timeout(&self) -> Duration {
        Duration::from_millis(self.step_timeout_ms)
    }
}

/// `portability FILE...`.
#[derive(Debug, Clone, Args)]
pub struct PortabilityArgs {
    /// Scenario files (clause files are scenarios too).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// API dialect(s) to run each file in (all: runtime, driver and hip).
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Devices of the simulated machine.
    #[arg(long, value_name = "N")]
    pub sim_devices: Option<u32>,
}

/// Run the command: exit 0 when every file's outcomes agree under every
/// profile, 1 when some differ; a file that does not parse is an error.
#[derive(Debug, Clone, Args)]
pub struct SelectArgs {
    /// Clause directory instead of the catalogue compiled in.
    #[arg(long, value_name = "DIR", env = catalogue::CLAUSES_ENV)]
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
    /// Simulator profile: measured (default), documented or hip (see
    /// `semantics`); --semantics choices apply on top of it.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
}

impl SimArgs {
    fn settings(&self) -> Result<SimSettings, String> {
        Ok(SimSettings {
            devices: self.sim_devices,
            semantics: backend::parse_semantics(&self.semantics)?,
            profile: self
                .profile
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: String| format!("--profile: {e}"))?,
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
    /// Show whether each clause may run on reset, reused CUDA workers or
    /// needs fresh processes, and why (the `--workers policy` decision).
    #[arg(long)]
    pub workers: bool,
}

/// The worker sharing of a clause, as `list --workers` shows it: `-` for
/// a clause whose scenario did not parse.
fn clause_sharing(c: &Clause) -> String {
    c.scenario
        .as_ref()
        .map_or_else(|| "-".to_string(), ipc_harness::sharing::explain)
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Report directory.
    #[arg(long, value_name = "DIR", default_value = report::DEFAULT_OUT_DIR)]
    pub out: PathBuf,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub sim: SimArgs,
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
    #[command(flatten)]
    pub tiers: TiersArg,
    #[command(flatten)]
    pub workers: WorkersArg,
    /// Check the worker sharing policy instead of a plain run: every
    /// selected clause runs on fresh workers (reports in --out/fresh) and
    /// under the policy with incidental clauses and value comparisons let
    /// share (--out/shared); the clauses that ran on reused workers are
    /// compared step by step (sharing-check.json, sharing-check.md; exit 1
    /// on a difference in a gated tier), and what was found per clause is
    /// written as sharing-checked.txt, the file the policy reads
    /// (IPC_CONFORMANCE_SHARING_CHECKED, docs/performance.md).
    #[arg(long, conflicts_with_all = ["expectations", "workers", "jobs"])]
    pub check_sharing: bool,
    /// Clauses run at once: a number, or `auto` (one at a time, which is
    /// fastest: the driver starts processes and makes contexts one at a
    /// time across devices, docs/performance.md). On the CUDA backend each
    /// clause gets as many devices as it needs, none another running clause
    /// holds, and its workers see only those (`CUDA_VISIBLE_DEVICES`); on
    /// the simulator clauses run on N threads. Results and reports are in
    /// the order of a serial run.
    #[arg(long, value_name = "N|auto", default_value = "1")]
    pub jobs: crate::jobs::Jobs,
}

/// `--workers`: which scenarios run on reset, reused CUDA workers.
#[derive(Debug, Clone, Args)]
pub struct WorkersArg {
    /// Real backend: `policy` (the default) reuses reset workers for the
    /// scenarios whose assertions cannot see process history (see `list
    /// --workers`) and starts fresh processes for the rest; `fresh` starts
    /// fresh processes for every scenario; `reused` reuses for every one.
    #[arg(long, value_name = "POLICY")]
    pub workers: Option<ipc_harness::sharing::WorkerPolicy>,
}

/// `--tiers`: which tiers' results decide the exit code.
#[derive(Debug, Clone, Args)]
pub struct TiersArg {
    /// The tiers whose results can fail the command: `all`, or a comma list
    /// of contract, relied-on, incidental. Clauses of every tier still run
    /// and are reported; a failure outside these is marked "not gated".
    #[arg(long, value_name = "LIST", default_value = "contract,relied-on")]
    pub tiers: TierList,
}

#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Scenario files.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
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
    /// The API names a scenario runs under (all: each clause once per
    /// dialect).
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Report directory (differential.json, differential.md).
    #[arg(long, value_name = "DIR", default_value = report::DEFAULT_OUT_DIR)]
    pub out: PathBuf,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Simulator side settings.
    #[command(flatten)]
    pub sim: SimArgs,
    /// Compare only shard K of N of the selected clauses (as `run --shard`).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<crate::shard::Shard>,
    /// Exit 0, not 3, when the real backend cannot run at all (no driver,
    /// no device: nothing compared).
    #[arg(long)]
    pub allow_unsupported: bool,
    #[command(flatten)]
    pub tiers: TiersArg,
}

/// `explore`: a mode, or the `generate` options directly (the default mode).
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ExploreArgs {
    #[command(subcommand)]
    pub mode: Option<ExploreMode>,
    #[command(flatten)]
    pub generate: ExploreGenerateArgs,
    /// Old spelling of `explore replay FILE...`.
    #[arg(long, value_name = "FILE", hide = true, conflicts_with_all = ["record", "jobs", "first_case"])]
    pub replay: Vec<PathBuf>,
    /// Old spelling of `explore recheck FILE...`.
    #[arg(long, value_name = "FILE", hide = true, conflicts_with_all = ["record", "jobs", "first_case", "replay"])]
    pub recheck: Vec<PathBuf>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ExploreMode {
    /// Generate random valid scenarios and check them: properties on the
    /// simulator, and with --backend cuda the real driver against the
    /// simulator (the default mode).
    Generate(ExploreGenerateArgs),
    /// Judge the simulator against recorded real runs (files written by
    /// `generate --record`) instead of generating cases; needs no GPU.
    /// Findings are whole cases (shrinking needs the GPU) with both runs
    /// side by side.
    Replay(ExploreReplayArgs),
    /// With --backend cuda: run scenario files (finding or case files, or
    /// any scenario) again on both backends with fresh workers; a file that
    /// still differs is shrunk against the real driver (at most
    /// --shrink-runs-real runs) into OUT/recheck-NAME, and OUT/recheck.txt
    /// says what each file did. The case, seed and dialect come from the
    /// file's header, else --seed and --dialect.
    Recheck(ExploreRecheckArgs),
}

/// What every `explore` mode takes.
#[derive(Debug, Clone, Args)]
pub struct ExploreCommonArgs {
    /// sim: properties only; cuda: each case also on the real driver,
    /// compared with the simulator.
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    /// `all` alternates the dialects case by case: runtime, driver and hip
    /// on the simulator (hip under its HIP profile, judged by HIP's own
    /// documented returns and the profile's choices); with a real backend
    /// runtime and driver only (hip has no real backend: its cases would
    /// all be NotSupported, and recorded GPU runs keep their numbering).
    #[arg(long, value_enum, default_value = "runtime")]
    pub dialect: DialectArg,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Where findings (minimal scenario files), summary.json and summary.md go.
    #[arg(long, value_name = "DIR", default_value = "reports/latest/explore")]
    pub out: PathBuf,
    /// Simulator side settings.
    #[command(flatten)]
    pub sim: SimArgs,
    /// Scenario runs a shrink may spend on one finding that needs the real
    /// backend (the simulator alone: 2000).
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub shrink_runs_real: usize,
    #[command(flatten)]
    pub workers: WorkersArg,
}

/// `explore generate`.
#[derive(Debug, Clone, Args)]
pub struct ExploreGenerateArgs {
    #[command(flatten)]
    pub common: ExploreCommonArgs,
    /// Cases to generate, numbered from --first-case on (a count, not the
    /// number of the last case).
    #[arg(long, default_value_t = 1000)]
    pub cases: u64,
    /// Steps per generated scenario, at most.
    #[arg(long, value_name = "K", default_value_t = 32)]
    pub max_steps: usize,
    /// Start no new case after this many seconds (the summary says so).
    #[arg(long, value_name = "S")]
    pub time_limit_s: Option<u64>,
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
    /// FILE (JSON lines; gzipped case by case when FILE ends in `.gz`) for
    /// `explore replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
}

/// `explore replay FILE...`.
#[derive(Debug, Clone, Args)]
pub struct ExploreReplayArgs {
    /// Recorded runs (`generate --record` files, `.jsonl` or `.jsonl.gz`).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub common: ExploreCommonArgs,
}

/// `explore recheck FILE...`.
#[derive(Debug, Clone, Args)]
pub struct ExploreRecheckArgs {
    /// Scenario files (finding or case files, or any scenario).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub common: ExploreCommonArgs,
}

/// `completions SHELL`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
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

fn stdout_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    ExitCode::from(run_cli(cli))
}

/// Run a parsed command line; returns the exit code.
pub fn run_cli(cli: Cli) -> u8 {
    let g = &cli.global;
    // Workers inherit IPC_CONFORMANCE_PROFILE; only the harness prints.
    let prints_profile = !is_worker(&cli.command);
    let outcome = guarded(|| match cli.command {
        Command::List(a) => cmd_list(&a, g),
        Command::Run(a) => cmd_run(&a, g),
        Command::Scenario(a) => cmd_scenario(&a),
        Command::Semantics => cmd_semantics(),
        Command::Differential(a) => cmd_differential(&a, g),
        Command::Summary(a) => cmd_summary(&a),
        Command::Explore(a) => cmd_explore(&a, g),
        Command::Completions(a) => cmd_completions(&a),
        Command::Diff(a) => crate::diff::command(&a).map_err(UsageError),
        Command::Merge(a) => crate::shard::command(&a)
            .map(|report| exit_code(&report))
            .map_err(UsageError),
        Command::Portability(a) => {
            crate::portability::command(&crate::portability::PortabilityRun {
                files: &a.files,
                dialects: a.dialect.dialects(),
                seed: a.exec.seed,
                step_timeout: a.exec.step_timeout(),
                sim_devices: a.sim_devices,
                quiet: g.quiet,
            })
            .map_err(UsageError)
        }
        Command::Trace(a) => crate::trace_cmd::command(&a).map_err(UsageError),
        Command::Check(a) => crate::trace_check::command(&a).map_err(UsageError),
        #[cfg(feature = "cuda")]
        Command::Worker(_) => {
            crate::interrupt::ignore_sigint_in_worker();
            Ok(backend::worker_main().clamp(0, 255) as u8)
        }
    });
    if prints_profile {
        if let Some(profile) = ipc_harness::profile::report() {
            warn!("{}", profile.trim_end());
        }
    }
    match outcome {
        Ok(Ok(code)) => code,
        Ok(Err(UsageError(msg))) => {
            warn!("ipc-conformance: error: {msg}");
            EXIT_USAGE
        }
        Err(panic) => {
            warn!("ipc-conformance: internal error (a bug): {panic}");
            EXIT_PANIC
        }
    }
}

fn is_worker(command: &Command) -> bool {
    #[cfg(feature = "cuda")]
    if matches!(command, Command::Worker(_)) {
        return true;
    }
    let _ = command;
    false
}

fn load_catalogue(select: &SelectArgs, g: &GlobalArgs) -> Result<(Catalogue, Filter), UsageError> {
    let filter = Filter::new(&select.filter)?;
    let source = catalogue::locate(select.clauses.as_deref())?;
    let cat = source.load()?;
    if g.verbose > 0 {
        let from = match source {
            catalogue::ClauseSource::Dir(_) => "directory",
            catalogue::ClauseSource::Embedded => "compiled into this binary",
        };
        warn!(
            "catalogue: {} clauses in {} ({from})",
            cat.len(),
            cat.dir.display()
        );
    }
    Ok((cat, filter))
}

/// `completions SHELL`: the completion script on stdout.
fn cmd_completions(a: &CompletionsArgs) -> CmdResult {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "ipc-conformance", &mut out);
    let _ = std::io::stdout().lock().write_all(&out);
    Ok(EXIT_OK)
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

fn cmd_list(a: &ListArgs, g: &GlobalArgs) -> CmdResult {
    let (cat, filter) = load_catalogue(&a.select, g)?;
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
                if a.workers {
                    v["workers"] = serde_json::json!(clause_sharing(c));
                }
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
        let tier_w = Tier::ALL
            .map(|t| t.as_str().len())
            .into_iter()
            .max()
            .unwrap_or(4);
        say!(
            "  {}  {}  {}  {:>3}  TITLE",
            pad("ID", id_w),
            pad("KIND", kind_w),
            pad("TIER", tier_w),
            "DEV"
        );
        for c in &clauses {
            let devices = c
                .requirements
                .devices
                .map(|d| d.to_string())
                .unwrap_or_else(|| "?".into());
            let kind = c.kind.map(|k| k.as_str()).unwrap_or("?");
            let tier = c.tier.map(|t| t.as_str()).unwrap_or("?");
            let flag = if c.is_broken() { "!" } else { " " };
            say!(
                "{flag} {}  {}  {}  {devices:>3}  {}",
                pad(&c.id, id_w),
                pad(kind, kind_w),
                pad(tier, tier_w),
                c.title
            );
            if a.workers {
                say!("    workers: {}", clause_sharing(c));
            }
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
        let per_tier: Vec<String> = Tier::ALL
            .iter()
            .map(|t| {
                let n = clauses.iter().filter(|c| c.tier == Some(*t)).count();
                format!("{n} {t}")
            })
            .collect();
        say!(
            "{} clause{} ({}){} in {}{}",
            clauses.len(),
            if clauses.len() == 1 { "" } else { "s" },
            per_tier.join(", "),
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

fn cmd_run(a: &RunArgs, g: &GlobalArgs) -> CmdResult {
    let (cat, filter) = load_catalogue(&a.select, g)?;
    let clauses = selected(&cat, &filter)?;
    let clauses = crate::shard::apply(a.shard, clauses);
    if a.check_sharing {
        return check_sharing(a, g, &cat, &filter, &clauses);
    }
    let backend = backend::make_for_run(a.target.backend, &a.sim.settings()?, a.workers.workers)?;
    // A bad expectations file is a usage error, before anything runs.
    let expect = a
        .expectations
        .as_deref()
        .map(Expectations::load)
        .transpose()?;
    // Fail on an unwritable --out before running anything.
    report::ensure_dir(&a.out)?;
    let cfg = RunConfig {
        dialects: a.target.dialect.dialects(),
        seed: a.exec.seed,
        step_timeout: a.exec.step_timeout(),
        filter: filter.patterns().to_vec(),
        clauses_dir: Some(cat.dir.clone()),
        retries: runner::RetryPolicy::default(),
        gated_tiers: a.tiers.tiers.0.clone(),
    };
    if g.verbose > 0 {
        warn!(
            "run: {} clauses x {} dialect(s) on {}, seed {}, step timeout {} ms, reports to {}",
            clauses.len(),
            cfg.dialects.len(),
            backend.name(),
            cfg.seed,
            a.exec.step_timeout_ms,
            a.out.display()
        );
    }
    // SIGINT/SIGTERM: finish the clause in progress, report, exit 130.
    let signals = crate::interrupt::install()?;
    let mut console = crate::interrupt::Interruptible(expectations::Gate::new(
        expect.as_ref(),
        Console::new(g.quiet, cfg.dialects.len() > 1)
            .with_color(g.color.enabled(stdout_is_terminal()))
            .with_gated_tiers(&cfg.gated_tiers),
        backend.as_ref(),
        &cfg,
        a.flaky_retries,
        g.quiet,
    ));
    let cfg = RunConfig {
        retries: console.0.retry_policy(),
        ..cfg
    };
    let devices = backend.info().device_count;
    if let Some(note) = crate::jobs::auto_note(a.jobs, backend.name(), devices) {
        warn!("{note}");
    }
    let mut report =
        runner::run_clauses_jobs(&clauses, backend.as_ref(), &cfg, &mut console, a.jobs);
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
    Ok(exit_code(&report))
}

/// `run --check-sharing` (see `sharing_check.rs`).
fn check_sharing(
    a: &RunArgs,
    g: &GlobalArgs,
    cat: &Catalogue,
    filter: &crate::filter::Filter,
    clauses: &[&Clause],
) -> CmdResult {
    use ipc_harness::sharing::WorkerPolicy;
    let settings = a.sim.settings()?;
    let fresh = backend::make_with_workers(a.target.backend, &settings, Some(WorkerPolicy::Fresh))?;
    let shared =
        backend::make_for_run(a.target.backend, &settings, Some(WorkerPolicy::ByScenario))?;
    report::ensure_dir(&a.out)?;
    let picked = crate::sharing_check::shareable(clauses);
    let cfg = RunConfig {
        dialects: a.target.dialect.dialects(),
        seed: a.exec.seed,
        step_timeout: a.exec.step_timeout(),
        filter: filter.patterns().to_vec(),
        clauses_dir: Some(cat.dir.clone()),
        retries: runner::RetryPolicy::default(),
        gated_tiers: a.tiers.tiers.0.clone(),
    };
    say!(
        "sharing check: {} clauses, each on fresh workers, then under the policy with the {} that \
         may share once checked on reused workers; those are compared",
        clauses.len(),
        picked.len()
    );
    let several = cfg.dialects.len() > 1;
    // SIGINT/SIGTERM: finish the clause in progress, compare and report
    // what ran.
    let signals = crate::interrupt::install()?;
    let found = crate::sharing_check::check(
        clauses,
        fresh,
        shared,
        &cfg,
        &mut crate::interrupt::Interruptible(ProgressOnly(Console::new(g.quiet, several))),
        &mut crate::interrupt::Interruptible(ProgressOnly(Console::new(g.quiet, several))),
    );
    drop(signals);
    let diff = &found.diff;
    for line in differential::difference_lines(diff) {
        say!("{line}");
    }
    let json = differential::to_json(diff)?;
    let markdown = differential::to_markdown(diff);
    let checked = found.checked.to_text();
    crate::safe_fs::write_set(
        &a.out,
        &[
            ("sharing-check.md", markdown.as_bytes()),
            ("sharing-check.json", json.as_bytes()),
            ("sharing-checked.txt", checked.as_bytes()),
        ],
    )
    .map_err(report::ReportError::from)?;
    report::write_run(&a.out.join("fresh"), &found.fresh)?;
    report::write_run(&a.out.join("shared"), &found.shared)?;
    say!(
        "sharing check: {} (fresh workers {} / shared {})",
        differential::totals_line(diff),
        sysinfo::human_ms(found.fresh.run.duration_ms),
        sysinfo::human_ms(found.shared.run.duration_ms)
    );
    let differing = found
        .checked
        .entries()
        .filter(|(_, e)| e.verdict != ipc_harness::sharing::CheckVerdict::Identical)
        .count();
    say!(
        "sharing check: {} clauses identical on fresh and reused workers, {differing} differ \
         (they keep fresh processes)",
        found.checked.entries().count() - differing
    );
    say!(
        "reports: {} (sharing-check.json, sharing-check.md; sharing-checked.txt, which the policy \
         reads through IPC_CONFORMANCE_SHARING_CHECKED or as harness/src/scenario/sharing_checked.txt; \
         fresh/ and shared/: both runs)",
        a.out.display()
    );
    if found.fresh.run.interrupted || found.shared.run.interrupted {
        say!("sharing check: interrupted; only the clauses that ran on both sides were compared");
        return Ok(crate::interrupt::EXIT_INTERRUPTED);
    }
    Ok(diff.exit_code())
}

/// The exit code of a finished run: the gate's verdict on the results of
/// the gated tiers (`run.gated_tiers`; every result in a file without
/// tiers). With expectations (the report is classified) nothing gated is
/// UnexpectedFail or UnexpectedPass; without, every gated result is Pass or
/// NotSupported. 0 when it passed, 1 otherwise.
pub fn exit_code(report: &RunReport) -> u8 {
    if report.gate_passed() {
        EXIT_OK
    } else {
        EXIT_FAILURES
    }
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
    let (start, steps, shutdown) = model::time_split(&report.results);
    say!(
        "time: machine start {}, steps {}, shutdown {}",
        sysinfo::human_ms(start),
        sysinfo::human_ms(steps),
        sysinfo::human_ms(shutdown)
    );
    for line in crate::report::text::tier_lines(report) {
        say!("{line}");
    }
    say!(
        "reports: {} (results.json, junit.xml, summary.md)",
        out.display()
    );
}

// ---------------------------------------------------------------------------
// scenario

fn cmd_scenario(a: &ScenarioArgs) -> CmdResult {
    let backend = backend::make(a.target.backend, &a.sim.settings()?)?;
    let dialects = a.target.dialect.dialects();
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
        a.exec.seed
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

fn cmd_explore(a: &ExploreArgs, g: &GlobalArgs) -> CmdResult {
    match &a.mode {
        Some(ExploreMode::Generate(gen)) => cmd_explore_generate(gen, g),
        Some(ExploreMode::Replay(r)) => cmd_explore_replay(&r.files, &r.common),
        Some(ExploreMode::Recheck(r)) => cmd_explore_recheck(&r.files, &r.common),
        // The old spellings: `explore --replay FILE`, `explore --recheck FILE`.
        None if !a.replay.is_empty() => cmd_explore_replay(&a.replay, &a.generate.common),
        None if !a.recheck.is_empty() => cmd_explore_recheck(&a.recheck, &a.generate.common),
        None => cmd_explore_generate(&a.generate, g),
    }
}

/// `explore generate` (and `explore` with no mode).
fn cmd_explore_generate(a: &ExploreGenerateArgs, g: &GlobalArgs) -> CmdResult {
    use crate::explore::{self, ExploreOptions, Judge};
    if a.max_steps == 0 {
        return Err(UsageError("--max-steps must be at least 1".into()));
    }
    let c = &a.common;
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
    if a.record.is_some() && c.backend == BackendKind::Sim {
        return Err(UsageError(
            "--record keeps real traces: it needs --backend cuda".into(),
        ));
    }
    let mut settings = c.sim.settings()?;
    // One real backend for every exploring thread: one pool of workers,
    // which cases on one GPU take and give back in turn (a pool per thread
    // would start `--jobs` times as many CUDA processes, whose context
    // creation the driver serialises).
    let real: Option<std::sync::Arc<dyn Backend + Send + Sync>> = match c.backend {
        BackendKind::Sim => None,
        kind => Some(std::sync::Arc::from(backend::make_shared(
            kind,
            &SimSettings::default(),
            c.workers.workers,
        )?)),
    };
    // The simulator plays the machine the real driver runs on.
    if let (Some(r), None) = (&real, settings.devices) {
        settings.devices = r.info().device_count.filter(|&d| d > 0);
    }
    let sim = backend::make(BackendKind::Sim, &settings)?;
    report::ensure_dir(&c.out)?;
    let opts = ExploreOptions {
        cases: a.cases,
        seed: c.exec.seed,
        max_steps: a.max_steps,
        dialects: explore_dialects(c.dialect, c.backend),
        step_timeout: c.exec.step_timeout(),
        time_limit: a.time_limit_s.map(Duration::from_secs),
        shrink_runs_real: c.shrink_runs_real,
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
    let bar = if g.quiet {
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
        real: real.as_deref().map(|r| r as &dyn Backend),
        step_timeout: opts.step_timeout,
    };
    let summary = if a.jobs <= 1 {
        explore::explore(&opts, &judge, Some(&c.out), &mut |d, f| show(d, f))
    } else {
        // Each further thread makes its own simulator and shares the real backend.
        let make = || -> Result<explore::Backends, String> {
            let real = real
                .as_ref()
                .map(|r| Box::new(std::sync::Arc::clone(r)) as Box<dyn Backend>);
            let sim = backend::make(BackendKind::Sim, &settings).map_err(|e| e.to_string())?;
            Ok((sim, real))
        };
        explore::explore_parallel(&opts, a.jobs, &judge, &make, Some(&c.out), &show)
    };
    bar.finish_and_clear();
    write_explore_summary(&summary, &c.out)?;
    drop(signals);
    if summary.stopped_early {
        say!("stopped by --time-limit-s before {} cases", a.cases);
    }
    say!("reports: {} (summary.json, summary.md)", c.out.display());
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

/// `explore replay FILE...`: the simulator against recorded real runs.
fn cmd_explore_replay(files: &[PathBuf], a: &ExploreCommonArgs) -> CmdResult {
    use crate::explore::{record, ExploreOptions};
    let mut records = Vec::new();
    for f in files {
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
        seed: a.exec.seed,
        step_timeout: a.exec.step_timeout(),
        ..ExploreOptions::default()
    };
    let source = files
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
    if summary.differing_cases > 0 {
        say!("{}", summary.per_tier_line());
        say!("{}", summary.placements_line());
    }
    Ok(if summary.findings.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILURES
    })
}

/// `explore recheck --backend cuda FILE...`: files run again on both
/// backends, the ones still differing shrunk against the real driver.
fn cmd_explore_recheck(files: &[PathBuf], a: &ExploreCommonArgs) -> CmdResult {
    use crate::explore::{recheck, CaseId, Judge};
    if a.backend == BackendKind::Sim {
        return Err(UsageError(
            "--recheck compares with the real driver: it needs --backend cuda".into(),
        ));
    }
    // Every file read and parsed before a driver is touched: a missing one
    // is an error (exit 2), never a file that "agrees".
    let inputs = recheck::read_inputs(files).map_err(UsageError)?;
    // Fresh workers: what an earlier case left in a worker is not the file's.
    let real = backend::make_with_workers(
        a.backend,
        &SimSettings::default(),
        Some(
            a.workers
                .workers
                .unwrap_or(ipc_harness::sharing::WorkerPolicy::Fresh),
        ),
    )?;
    let mut settings = a.sim.settings()?;
    if settings.devices.is_none() {
        settings.devices = real.info().device_count.filter(|&d| d > 0);
    }
    let sim = backend::make(BackendKind::Sim, &settings)?;
    report::ensure_dir(&a.out)?;
    let judge = Judge {
        sim: sim.as_ref(),
        real: Some(real.as_ref()),
        step_timeout: a.exec.step_timeout(),
    };
    let default = CaseId {
        index: 0,
        seed: a.exec.seed,
        dialect: explore_dialects(a.dialect, a.backend)
            .first()
            .copied()
            .unwrap_or(Dialect::Runtime),
    };
    let results = recheck::recheck_files(
        &judge,
        &inputs,
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
        seed: a.exec.seed,
        step_timeout: a.exec.step_timeout(),
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
        seed: a.exec.seed,
        step_timeout: a.exec.step_timeout(),
    };
    say!(
        "== {} [{dialect}] on {} (seed {})",
        file.display(),
        backend.name(),
        a.exec.seed
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
        say!("    tier {}", crate::portability::tier_text(c.name));
        say!("");
    }
    say!("{}", crate::portability::profiles_text());
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
    fn clause_finished(&mut self, _r: &model::ClauseResult, _attempts: &[model::Attempt]) {
        self.0.tick();
    }
    fn end(&mut self) {
        self.0.end()
    }
}

fn cmd_differential(a: &DifferentialArgs, g: &GlobalArgs) -> CmdResult {
    let (cat, filter) = load_catalogue(&a.select, g)?;
    let clauses = selected(&cat, &filter)?;
    let clauses = crate::shard::apply(a.shard, clauses);
    let sim = backend::make(BackendKind::Sim, &a.sim.settings()?)?;
    let real = backend::make(a.backend, &SimSettings::default())?;
    report::ensure_dir(&a.out)?;
    let cfg = RunConfig {
        dialects: a.dialect.dialects(),
        seed: a.exec.seed,
        step_timeout: a.exec.step_timeout(),
        filter: filter.patterns().to_vec(),
        clauses_dir: Some(cat.dir.clone()),
        retries: runner::RetryPolicy::default(),
        gated_tiers: a.tiers.tiers.0.clone(),
    };
    let several = cfg.dialects.len() > 1;
    let mut sim_report = runner::run_clauses(
        &clauses,
        sim.as_ref(),
        &cfg,
        &mut ProgressOnly(Console::new(g.quiet, several)),
    );
    let mut real_report = runner::run_clauses(
        &clauses,
        real.as_ref(),
        &cfg,
        &mut ProgressOnly(Console::new(g.quiet, several)),
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
        a.exec.seed
    );
    say!("{}", differential::per_tier_line(&diff));
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
    let runs = crate::diff::load_all(&a.results)?;
    let md = report::markdown::summary(&runs);
    match &a.out {
        Some(out) => {
            report::write_file(out, md.as_bytes())?;
            say!("wrote {}", out.display());
        }
        None => {
            let _ = std::io::stdout().lock().write_all(md.as_bytes());
        }
    }
    let all_ok = runs.iter().all(|r| exit_code(r) == EXIT_OK);
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
        assert_eq!(a.target.backend, BackendKind::Sim);
        assert_eq!(a.target.dialect, DialectArg::Runtime);
        assert_eq!(a.exec.seed, 1);
        assert_eq!(a.exec.step_timeout_ms, 20_000);
        assert_eq!(a.out, PathBuf::from("reports/latest"));
        assert!(!cli.global.quiet);
        assert_eq!(cli.global.verbose, 0);
        assert_eq!(cli.global.color, ColorChoice::Auto);
    }

    #[test]
    fn quiet_verbose_and_color_are_global() {
        let cli =
            Cli::try_parse_from(["ipc-conformance", "run", "-q", "--color", "never"]).unwrap();
        assert!(cli.global.quiet);
        assert_eq!(cli.global.color, ColorChoice::Never);
        let cli = Cli::try_parse_from(["ipc-conformance", "-vv", "list"]).unwrap();
        assert_eq!(cli.global.verbose, 2);
        assert!(Cli::try_parse_from(["ipc-conformance", "run", "-q", "-v"]).is_err());
        assert!(ColorChoice::Always.enabled(false));
        assert!(!ColorChoice::Never.enabled(true));
        assert!(!ColorChoice::Auto.enabled(false));
    }

    #[test]
    fn explore_modes_are_subcommands_and_the_old_flags_still_parse() {
        let mode = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            let Command::Explore(a) = cli.command else {
                panic!("not explore")
            };
            a
        };
        let a = mode(&["ipc-conformance", "explore", "--cases", "5"]);
        assert!(a.mode.is_none());
        assert_eq!(a.generate.cases, 5);
        let a = mode(&[
            "ipc-conformance",
            "explore",
            "generate",
            "--cases",
            "7",
            "--seed",
            "3",
        ]);
        let Some(ExploreMode::Generate(g)) = a.mode else {
            panic!("not generate")
        };
        assert_eq!((g.cases, g.common.exec.seed), (7, 3));
        let a = mode(&[
            "ipc-conformance",
            "explore",
            "replay",
            "r.jsonl",
            "--out",
            "o",
        ]);
        let Some(ExploreMode::Replay(r)) = a.mode else {
            panic!("not replay")
        };
        assert_eq!(r.files, [PathBuf::from("r.jsonl")]);
        assert_eq!(r.common.out, PathBuf::from("o"));
        let a = mode(&[
            "ipc-conformance",
            "explore",
            "recheck",
            "--backend",
            "cuda",
            "f.ipc",
        ]);
        assert!(matches!(a.mode, Some(ExploreMode::Recheck(_))));
        // The old spellings.
        let a = mode(&["ipc-conformance", "explore", "--replay", "r.jsonl"]);
        assert_eq!(a.replay, [PathBuf::from("r.jsonl")]);
        let a = mode(&[
            "ipc-conformance",
            "explore",
            "--backend",
            "cuda",
            "--recheck",
            "f",
        ]);
        assert_eq!(a.recheck, [PathBuf::from("f")]);
        for bad in [
            vec!["ipc-conformance", "explore", "--replay", "r", "--jobs", "2"],
            vec!["ipc-conformance", "explore", "replay"],
            vec!["ipc-conformance", "explore", "replay", "r", "--cases", "3"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_flag_and_subcommand_has_help() {
        use clap::CommandFactory;
        fn check(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && !arg.is_hide_set() && arg.get_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                if !sub.is_hide_set() && sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(format!("{path} {}", sub.get_name()));
                }
                check(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        check(&Cli::command(), "ipc-conformance", &mut missing);
        assert!(missing.is_empty(), "no help: {missing:?}");
    }

    #[test]
    fn the_environment_variables_are_in_the_help() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for var in [
            "IPC_CONFORMANCE_CLAUSES",
            "IPC_CONFORMANCE_WORKER_POOL",
            "IPC_CONFORMANCE_SPARE_CONTEXTS",
            "IPC_CONFORMANCE_REUSE_WORKERS",
            "IPC_GIT_REVISION",
            "CUDA_VISIBLE_DEVICES",
            "NO_COLOR",
        ] {
            assert!(help.contains(var), "{var} missing from --help");
        }
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
        assert_eq!(a.target.dialect.dialects(), Dialect::ALL.to_vec());
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
    fn exit_code_policy() {
        use crate::expectations::{Classification, ExpectationRecord};
        use crate::model::fixtures;
        use Status::*;
        let code = |ss: &[Status]| {
            let rs = ss
                .iter()
                .map(|&s| fixtures::result("a.b", s, Dialect::Runtime, "sim"))
                .collect();
            exit_code(&fixtures::run("sim", "runtime", rs))
        };
        assert_eq!(code(&[]), 0);
        assert_eq!(code(&[Pass, NotSupported, Pass]), 0);
        for bad in [Fail, Crash, Timeout, Broken] {
            assert_eq!(code(&[Pass, bad, NotSupported]), 1, "{bad:?}");
        }
        // Classified, the gate decides: an expected failure exits 0, and a
        // Broken result fails whatever its record says.
        let classified = |status: Status, classification: Classification| {
            let mut r = fixtures::result("a.b", status, Dialect::Runtime, "sim");
            r.expectation = Some(ExpectationRecord {
                classification,
                entry: Some(1),
                line: Some(1),
                expected: None,
                error: None,
                reason: Some("known".into()),
                link: None,
                detail: String::new(),
                attempts: Vec::new(),
            });
            exit_code(&fixtures::run("sim", "runtime", vec![r]))
        };
        assert_eq!(classified(Fail, Classification::ExpectedFail), 0);
        assert_eq!(classified(Pass, Classification::UnexpectedPass), 1);
        assert_eq!(classified(Broken, Classification::ExpectedFail), 1);
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
