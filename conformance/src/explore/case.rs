//! One generated case: its identity ([`CaseId`]), what the exploration is
//! asked to do ([`ExploreOptions`]), how a case is judged ([`Judge`]), and
//! what a failing case becomes ([`Finding`], its file header); with the
//! exploration's [`Summary`]. The exploration (`explore/mod.rs`), shrinking,
//! recording and rechecking all build on these; this file imports none of
//! them.

use super::generate::{self, GenStats, Program};
use super::properties::{self, Property, Violation};
use ipc_harness::scenario::{self, sharing, ExecOptions, Scenario};
use ipc_harness::trace::{StepOutcome, StepRecord, ValueSummary};
use ipc_harness::{ApiError, Backend, CallKind, Dialect, ErrorKind, HazardKind, Status, Trace};
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `explore` runs.
#[derive(Debug, Clone)]
pub struct ExploreOptions {
    pub cases: u64,
    pub seed: u64,
    /// Steps per generated scenario, at most.
    pub max_steps: usize,
    /// Cases alternate between these dialects.
    pub dialects: Vec<Dialect>,
    pub step_timeout: Duration,
    /// Scenario runs a shrink may spend on one finding (simulator only).
    pub shrink_runs: usize,
    /// Scenario runs a shrink may spend when each needs the real backend.
    pub shrink_runs_real: usize,
    /// Start no new case after this long.
    pub time_limit: Option<Duration>,
    /// The first case's number: a long run split over several calls goes on
    /// where the last one stopped (`--first-case`).
    pub first_case: u64,
    /// Append each case's scenario and real trace here (JSON lines), so the
    /// simulator can be judged against them later without the GPU.
    pub record: Option<PathBuf>,
    /// The real machine's device count, kept with each recorded case.
    pub record_devices: Option<u32>,
    /// Devices generated programs may use (the machine's; 2 at most).
    pub max_devices: u32,
    /// Start no new case once SIGINT or SIGTERM asked to stop
    /// ([`crate::interrupt`]; the command line sets it, library callers
    /// need not).
    pub stop_on_signal: bool,
    /// Check the determinism property (a second run of the case, compared
    /// with the first) on one case in this many, chosen from the case seed
    /// (1: every case). A finding's shrinking always checks it.
    pub determinism_every: u64,
}

/// `explore` runs a case twice to check determinism on one case in this many
/// by default: the second run is a fifth of a case's cost, and a simulator
/// that is not deterministic is so on many programs.
pub const DETERMINISM_EVERY: u64 = 8;

impl ExploreOptions {
    /// Whether case `id` checks the determinism property: one case in
    /// [`Self::determinism_every`], chosen from its seed.
    pub fn checks_determinism(&self, id: CaseId) -> bool {
        self.determinism_every <= 1 || id.seed % self.determinism_every == 0
    }
}

impl Default for ExploreOptions {
    fn default() -> Self {
        ExploreOptions {
            cases: 1000,
            seed: 1,
            max_steps: 32,
            dialects: vec![Dialect::Runtime],
            step_timeout: Duration::from_secs(20),
            shrink_runs: 2000,
            shrink_runs_real: 40,
            time_limit: None,
            first_case: 0,
            record: None,
            record_devices: None,
            max_devices: 2,
            stop_on_signal: false,
            determinism_every: DETERMINISM_EVERY,
        }
    }
}

/// One case: its number, the seed of its program and run, its dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CaseId {
    pub index: u64,
    pub seed: u64,
    pub dialect: Dialect,
}

/// A property broken by a case, with the minimal scenario that breaks it.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub case: CaseId,
    pub property: String,
    pub message: String,
    /// Steps of the generated scenario, and of the shrunk one.
    pub original_steps: usize,
    pub steps: usize,
    /// The minimal scenario file (with a header saying how to replay it).
    pub scenario: String,
    /// Where it was written, if an output directory was given.
    pub file: Option<PathBuf>,
    /// What makes another case the same finding.
    pub signature: String,
    /// Later cases that broke the property the same way (not shrunk again).
    pub repeats: u64,
}

/// The outcome of an exploration.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub backend: String,
    pub seed: u64,
    pub cases: u64,
    pub steps: u64,
    pub seconds: f64,
    /// Cases on the real backend that were NotSupported (nothing compared).
    pub not_compared: u64,
    /// Steps compared between the simulator and the real backend.
    pub compared_steps: u64,
    /// Cases with at least one differing step (a finding or a repeat)
    /// before any step the real backend's harness failed at.
    pub differing_cases: u64,
    /// Cases whose real run lost a process to a harness error (a Broken
    /// step): compared up to that step only, not counted as differing
    /// from there on; they want a run once the harness is fixed.
    pub harness_lost_cases: u64,
    /// Cases that differed on reused workers and agreed when run again on
    /// fresh ones (an earlier case's leftovers; not findings).
    pub worker_history_cases: u64,
    /// Cases whose real run took the outcome of a race that the
    /// simulator's default did not pick (a fill faulting after
    /// `vmm_unmap` of its range: [`race_fault_step`]): compared up to it.
    pub race_fault_cases: u64,
    /// Cases whose real run hung in a call the documents leave undefined
    /// (a wait on an imported event whose exporter ended:
    /// [`undefined_hang_step`]): compared up to it.
    pub undefined_hang_cases: u64,
    /// Cases whose real run placed a small allocation on new VA where the
    /// simulator reused a closed mapping's VA, after an imported event's
    /// memory may have taken it ([`event_memory_placement_step`]): compared
    /// up to it.
    pub placement_varies_cases: u64,
    /// Cases whose real run read zeros from memory whose exporter crashed
    /// holding a VMM allocation, where the simulator kept the bytes
    /// ([`crashed_exporter_zeros_step`]): compared up to it.
    pub crashed_exporter_zeros_cases: u64,
    /// Cases whose real run answered an open of a handle with a damaged
    /// process word other than InvalidHandle: the word named a live
    /// process by the machine's numbering ([`damaged_process_word_step`]):
    /// compared up to it.
    pub process_word_cases: u64,
    /// The number of the first case run.
    pub first_case: u64,
    pub findings: Vec<Finding>,
    pub reached: Reached,
    /// The time limit stopped the run before `--cases` cases.
    pub stopped_early: bool,
    /// SIGINT or SIGTERM stopped the run after the case in progress.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// `--replay`: each case that differs, with its first differing step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<DifferingCase>,
    /// `--replay`: each case whose real run lost a process to a harness
    /// error, with the step it was lost at (`tier`: `harness`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub harness_lost: Vec<DifferingCase>,
    /// `--replay`: differing cases per tier of their first differing step
    /// ([`DifferingCase::tier`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub differing_per_tier: BTreeMap<String, u64>,
    /// `--replay`: of the differing cases, those whose first differing
    /// step differs only in where a value landed
    /// ([`DifferingCase::placement`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub differing_placements: u64,
    /// Writing the `--record` file failed (the run went on without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_error: Option<String>,
}

/// A recorded case the simulator does not answer as the real driver did.
#[derive(Debug, Clone, Serialize)]
pub struct DifferingCase {
    pub index: u64,
    pub dialect: Dialect,
    /// The first differing step: line, op, both outcomes.
    pub first: String,
    /// The tier of the semantic choices that step depends on (`contract`,
    /// `relied-on`, `incidental`; the least firm when several), or
    /// `unattributed` when no switchable choice changes it.
    pub tier: String,
    /// That step differs only in which pointer, range base, descriptor or
    /// interprocess event handle came back (`record::placement_only`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub placement: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a differing step is attributed to when no semantic choice is
/// behind it.
pub const UNATTRIBUTED: &str = "unattributed";

/// The `tier` of a case lost to a harness error ([`Summary::harness_lost`]).
pub const HARNESS: &str = "harness";

/// How often the generated scenarios reached the states the properties are
/// about: the generator's own counts, summed over the cases (`summary.json`
/// leaves out the step count, which it reports on its own).
pub type Reached = GenStats;

impl Summary {
    pub fn cases_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.cases as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Count a compared case whose real run followed an outcome the
    /// simulator admits but does not pick ([`other_outcome_step`]).
    pub fn count_other_outcomes(&mut self, sim: &Trace, real: &Trace) {
        self.race_fault_cases += u64::from(race_fault_step(sim, real).is_some());
        self.undefined_hang_cases += u64::from(undefined_hang_step(sim, real).is_some());
        self.placement_varies_cases += u64::from(event_memory_placement_step(sim, real).is_some());
        self.crashed_exporter_zeros_cases +=
            u64::from(crashed_exporter_zeros_step(sim, real).is_some());
        self.process_word_cases += u64::from(damaged_process_word_step(sim, real).is_some());
    }

    /// One line: cases, steps, throughput, findings.
    pub fn line(&self) -> String {
        format!(
            "{} cases, {} steps in {:.2} s ({:.1} cases/s, {:.0} steps/s) on {}: {} finding{}",
            self.cases,
            self.steps,
            self.seconds,
            self.cases_per_second(),
            if self.seconds > 0.0 {
                self.steps as f64 / self.seconds
            } else {
                0.0
            },
            self.backend,
            self.findings.len(),
            if self.findings.len() == 1 { "" } else { "s" }
        ) + &match self.worker_history_cases {
            0 => String::new(),
            n => format!(
                " ({n} case{} differed on reused workers only and agreed on fresh ones)",
                if n == 1 { "" } else { "s" }
            ),
        } + &match self.race_fault_cases {
            0 => String::new(),
            n => format!(
                "; {n} case{} took a race's other outcome on the real backend (compared up to it)",
                if n == 1 { "" } else { "s" }
            ),
        } + &match self.undefined_hang_cases {
            0 => String::new(),
            n => format!(
                "; {n} case{} hung on the real backend in a call the documents leave undefined (compared up to it)",
                if n == 1 { "" } else { "s" }
            ),
        } + &match self.placement_varies_cases {
            0 => String::new(),
            n => format!(
                "; {n} case{} placed an allocation where the real backend answers both ways (compared up to it)",
                if n == 1 { "" } else { "s" }
            ),
        } + &match self.crashed_exporter_zeros_cases {
            0 => String::new(),
            n => format!(
                "; {n} case{} read zeros from a crashed exporter's memory, which the real backend answers both ways (compared up to it)",
                if n == 1 { "" } else { "s" }
            ),
        } + &match self.process_word_cases {
            0 => String::new(),
            n => format!(
                "; {n} case{} opened a handle whose damaged process word named a live process by the machine's numbering, which the real backend answers both ways (compared up to it)",
                if n == 1 { "" } else { "s" }
            ),
        } + &match self.harness_lost_cases {
            0 => String::new(),
            n => format!(
                "; {n} case{} lost to a harness error of the real backend",
                if n == 1 { "" } else { "s" }
            ),
        }
    }

    /// `differing cases per tier: incidental 14, unattributed 1`, in tier
    /// order, unattributed last.
    pub fn per_tier_line(&self) -> String {
        let order = ipc_harness::Tier::ALL
            .map(|t| t.as_str())
            .into_iter()
            .chain([UNATTRIBUTED]);
        let parts: Vec<String> = order
            .filter_map(|t| self.differing_per_tier.get(t).map(|n| format!("{t} {n}")))
            .collect();
        format!(
            "differing cases per tier of the first differing step: {}",
            if parts.is_empty() {
                "none".to_string()
            } else {
                parts.join(", ")
            }
        )
    }

    /// `2 of 4 differing cases differ only in where a value landed
    /// (placements)`: the cases a driver's accidents of placement explain.
    pub fn placements_line(&self) -> String {
        format!(
            "{} of {} differing case{} differ only in where a value landed (placements)",
            self.differing_placements,
            self.differing_cases,
            if self.differing_cases == 1 { "" } else { "s" }
        )
    }

    /// `summary.md`.
    pub fn markdown(&self) -> String {
        use std::fmt::Write;
        let mut s = String::from("# explore\n\n");
        let _ = writeln!(s, "{}\n", self.line());
        if self.interrupted {
            let _ = writeln!(
                s,
                "Interrupted (SIGINT or SIGTERM): the cases above are those that ran.\n"
            );
        }
        let _ = writeln!(
            s,
            "Seed {} · first case {} · steps compared with the real backend: {} · cases not compared: {} · cases that differed: {} · cases lost to a harness error: {}\n",
            self.seed,
            self.first_case,
            self.compared_steps,
            self.not_compared,
            self.differing_cases,
            self.harness_lost_cases
        );
        if self.harness_lost_cases > 0 {
            let _ = writeln!(
                s,
                "A case lost to a harness error is the tool's failure, not the simulator's: its steps from the lost one on are not compared, and it wants a run once the harness is fixed (findings of property `harness`).\n"
            );
        }
        if !self.differing_per_tier.is_empty() {
            let _ = writeln!(s, "{}\n", self.per_tier_line());
            let _ = writeln!(s, "{}\n", self.placements_line());
        }
        let r = &self.reached;
        let _ = writeln!(s, "| reached | count |\n| --- | ---: |");
        for (k, v) in [
            ("opens", r.opens),
            ("re-opens", r.reopens),
            ("closes", r.closes),
            ("exporter exits (with an open importer)", r.exporter_exits),
            (
                "closes after the exporter exited",
                r.closes_after_exporter_exit,
            ),
            ("sub-allocated neighbours", r.suballocated_neighbours),
            ("second contexts", r.second_contexts),
            ("damaged or made-up handles", r.bad_handles),
            ("interprocess event opens", r.event_opens),
            ("VMM imports of a descriptor", r.vmm_imports),
            ("Pool pointer imports", r.pool_imports),
            ("opens of another device's memory", r.cross_device_opens),
        ] {
            let _ = writeln!(s, "| {k} | {v} |");
        }
        let _ = writeln!(s, "\n## Findings\n");
        if self.findings.is_empty() {
            s.push_str("None.\n");
        }
        for f in &self.findings {
            let _ = writeln!(
                s,
                "- **{}** case {} (seed {}, {}), {} more case(s) alike: {} — {} of {} steps{}",
                f.property,
                f.case.index,
                f.case.seed,
                f.case.dialect,
                f.repeats,
                f.message,
                f.steps,
                f.original_steps,
                f.file
                    .as_ref()
                    .map(|p| format!(", `{}`", p.display()))
                    .unwrap_or_default()
            );
        }
        s
    }
}

/// splitmix64: the seed of case `index` of a run seeded with `seed`.
pub fn case_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed
        .wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A proptest runner whose draws depend only on `seed`.
pub fn runner_for(seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&case_seed(seed, i as u64).to_le_bytes());
    }
    // XorShift, not ChaCha: proptest forks the runner's RNG for every option a
    // union passes over and seeds each fork from it, which with ChaCha was
    // about 20 of a case's 130 us. A seed gives other programs than under
    // ChaCha; persisted cases are kept as text. The runner only draws trees:
    // no failure is ever persisted from it (a persistence hook would be cloned
    // with every fork of the runner, and proptest forks one for each option a
    // union passes over).
    // Built once per thread: `Config::default()` clones proptest's default,
    // persistence hook and all, only for the hook to be dropped.
    thread_local! {
        static CONFIG: Config = Config {
            failure_persistence: None,
            // The RNG's algorithm: the unions' draws rely on the config
            // naming it (`just_union::skip_forks`).
            rng_algorithm: RngAlgorithm::XorShift,
            ..Config::default()
        };
    }
    TestRunner::new_with_rng(
        CONFIG.with(Config::clone),
        TestRng::from_seed(RngAlgorithm::XorShift, &bytes[..16]),
    )
}

/// The program of case `id`, with its shrinkable tree.
pub fn case_tree(id: CaseId, max_steps: usize) -> Box<dyn ValueTree<Value = Program>> {
    case_tree_on(id, max_steps, 2)
}

/// [`case_tree`] for a machine of `max_devices` devices (1: no program
/// needs a second one).
pub fn case_tree_on(
    id: CaseId,
    max_steps: usize,
    max_devices: u32,
) -> Box<dyn ValueTree<Value = Program>> {
    let mut runner = runner_for(id.seed);
    // The strategy is built once per thread and shape (it holds no state
    // between draws: each tree depends only on the runner's seed).
    /// The strategy and the (max steps, devices) it was built for.
    type Cached = Option<((usize, u32), BoxedStrategy<Program>)>;
    thread_local! {
        static STRATEGY: std::cell::RefCell<Cached> = const { std::cell::RefCell::new(None) };
    }
    let strategy = STRATEGY.with_borrow_mut(|cached| match cached {
        Some((shape, s)) if *shape == (max_steps, max_devices) => s.clone(),
        _ => {
            let s = generate::program_strategy(max_steps, max_devices).boxed();
            *cached = Some(((max_steps, max_devices), s.clone()));
            s
        }
    });
    // The strategy has no filters, so drawing a tree cannot be rejected.
    // Its runners are this one and proptest's forks of it: one config.
    match super::lean_union::sharing_config(&mut runner, |r| strategy.new_tree(r)) {
        Ok(t) => Box::new(t),
        Err(_) => Box::new(proptest::strategy::Just(Program {
            processes: 2,
            devices: 1,
            placement: vec![0, 0],
            actions: Vec::new(),
        })),
    }
}

/// Everything one evaluation of a scenario needs.
pub struct Judge<'a> {
    pub sim: &'a dyn Backend,
    pub real: Option<&'a dyn Backend>,
    pub step_timeout: Duration,
}

/// What one evaluation saw.
pub struct Evaluation {
    pub violations: Vec<Violation>,
    pub steps: usize,
    pub compared_steps: usize,
    /// The real backend could not run it (NotSupported).
    pub not_compared: bool,
    /// It differed on reused workers and agreed on fresh ones: what
    /// differed was an earlier case's leftovers, not this case.
    pub worker_history: bool,
    /// Both traces, for the side-by-side comment of a finding file (with
    /// a real backend only).
    pub sim_trace: Option<Trace>,
    pub real_trace: Option<Trace>,
}

impl Judge<'_> {
    /// Parse `text` and check it: properties on the simulator, and with a
    /// real backend the differential.
    pub fn evaluate(&self, text: &str, id: CaseId) -> Evaluation {
        self.evaluate_with(text, id, true)
    }

    /// [`Self::evaluate`], checking the determinism property only when
    /// `determinism` is true.
    pub fn evaluate_with(&self, text: &str, id: CaseId, determinism: bool) -> Evaluation {
        let scenario = match scenario::parse(text, Path::new("explore.ipc")) {
            Ok(s) => s,
            Err(e) => {
                return Evaluation {
                    violations: vec![Violation::new(
                        Property::Robustness,
                        None,
                        format!("the generator wrote an invalid scenario: {e}"),
                        "invalid scenario",
                    )],
                    steps: 0,
                    compared_steps: 0,
                    not_compared: false,
                    worker_history: false,
                    sim_trace: None,
                    real_trace: None,
                }
            }
        };
        self.evaluate_scenario_with(&scenario, id, determinism)
    }

    pub fn evaluate_scenario(&self, scenario: &Scenario, id: CaseId) -> Evaluation {
        self.evaluate_scenario_with(scenario, id, true)
    }

    /// [`Self::evaluate_scenario`], checking the determinism property only
    /// when `determinism` is true.
    pub fn evaluate_scenario_with(
        &self,
        scenario: &Scenario,
        id: CaseId,
        determinism: bool,
    ) -> Evaluation {
        self.evaluate_scenario_knowing(scenario, id, determinism, &|_| false)
    }

    /// [`Self::evaluate_scenario_with`] in a run that already has findings:
    /// a case that differs on reused workers only in ways `known` says are
    /// alike a finding (one judged on fresh workers) is not run again on
    /// fresh ones. It counts with that finding, which it would almost
    /// always join anyway, and saves the rerun (half a second or more on a
    /// GPU).
    pub fn evaluate_scenario_knowing(
        &self,
        scenario: &Scenario,
        id: CaseId,
        determinism: bool,
        known: &dyn Fn(&Violation) -> bool,
    ) -> Evaluation {
        let opts = ExecOptions {
            dialect: id.dialect,
            seed: id.seed,
            step_timeout: self.step_timeout,
        };
        // The simulator's trace serves only the differential and its
        // finding file: without a real backend no trace is kept.
        let (trace, mut violations) =
            ipc_harness::profile::timed("explore: simulator checks", || match self.real {
                Some(_) => properties::check_on_sim_with(scenario, self.sim, &opts, determinism),
                None => (
                    None,
                    properties::violations_on_sim(scenario, self.sim, &opts, determinism),
                ),
            });
        let mut eval = Evaluation {
            violations: Vec::new(),
            steps: scenario.steps.len(),
            compared_steps: 0,
            not_compared: false,
            worker_history: false,
            sim_trace: None,
            real_trace: None,
        };
        if let (Some(real), Some(sim_trace)) = (self.real, &trace) {
            let mut e = ipc_harness::profile::timed("explore: real run", || {
                scenario::execute(scenario, real, &opts)
            });
            // Reused workers keep driver state a reset cannot undo (the
            // shared memory of interprocess events, where the next
            // allocation lands), and a generated case compares every
            // value: a case that differs there is judged on fresh workers,
            // as the simulator models a fresh process.
            let judged =
                |real: &Trace| case_differences(scenario, self.sim, id.dialect, sim_trace, real);
            let mut diffs = judged(&e.trace);
            if real.shares_workers()
                && sharing::sharing(scenario).is_reused()
                && e.verdict.status != Status::NotSupported
                && !diffs.is_empty()
                && !diffs.iter().all(known)
            {
                e = ipc_harness::profile::timed("explore: fresh-worker rerun", || {
                    scenario::execute_fresh(scenario, real, &opts)
                });
                diffs = judged(&e.trace);
                eval.worker_history = diffs.is_empty();
            }
            match e.verdict.status {
                Status::NotSupported => eval.not_compared = true,
                // A generated case may have no steps at all: nothing to compare.
                _ if e.trace.steps.is_empty() && !scenario.steps.is_empty() => {
                    violations.push(Violation::new(
                        Property::Differential,
                        None,
                        format!(
                            "the real backend did not run it: {:?} {}",
                            e.verdict.status, e.verdict.message
                        ),
                        &format!("not run: {:?}", e.verdict.status),
                    ))
                }
                _ => {
                    eval.compared_steps = e.trace.steps.len();
                    violations.extend(diffs);
                }
            }
            eval.real_trace = Some(e.trace);
        }
        eval.sim_trace = trace;
        eval.violations = violations;
        eval
    }
}

/// The differential of a case on the simulator `sim` (which ran `scenario`
/// into `sim_trace`) against the real run `real`: [`differences`], where
/// the bytes of a read that the documents leave to timing are compared by
/// length only ([`timing_steps`]).
pub fn case_differences(
    scenario: &Scenario,
    sim: &dyn Backend,
    dialect: Dialect,
    sim_trace: &Trace,
    real: &Trace,
) -> Vec<Violation> {
    let timing = timing_steps(scenario, sim, dialect, sim_trace, real);
    differences(sim_trace, real, &|i| {
        timing.get(i).copied().unwrap_or(false)
    })
}

/// Per step of `sim_trace`, whether it read bytes the documents leave to
/// timing ([`properties::timing_reads`]: a write of them is not ordered
/// before the read, or they came from a racing copy, from writes unordered
/// with one another, or from work an exited process left running). Worked
/// out only where the traces differ (empty otherwise): a case's model is
/// run once more.
pub fn timing_steps(
    scenario: &Scenario,
    sim: &dyn Backend,
    dialect: Dialect,
    sim_trace: &Trace,
    real: &Trace,
) -> Vec<bool> {
    if sim_trace.differences(real).is_empty() {
        return Vec::new();
    }
    let choices = properties::Choices::of(sim, dialect);
    properties::timing_reads(scenario, sim_trace, dialect, &choices)
}

/// The differential: every step whose observation differs (simulator left,
/// real right), up to the first step at which the real backend's harness
/// failed (a Broken step: that process is lost, and what follows is not
/// the driver's answer), which is one [`Property::Harness`] violation.
/// `timing(i)`: step `i` read bytes whose value is timing, compared by
/// length only.
pub fn differences(sim: &Trace, real: &Trace, timing: &dyn Fn(usize) -> bool) -> Vec<Violation> {
    let show = |o: &Option<StepOutcome>| match o {
        Some(o) => crate::report::text::outcome_text(o),
        None => "(no step)".to_string(),
    };
    // Outcomes without labels or bytes: ok, an error code, crash...
    let class = |o: &Option<StepOutcome>| match o {
        Some(StepOutcome::Ok { .. }) => "ok".to_string(),
        Some(StepOutcome::Error { code, .. }) => format!("error {code}"),
        Some(StepOutcome::Crash { .. }) => "crash".into(),
        Some(StepOutcome::Timeout { .. }) => "timeout".into(),
        Some(StepOutcome::Broken { .. }) => "broken".into(),
        Some(StepOutcome::Skipped { .. }) => "skipped".into(),
        None => "none".into(),
    };
    // Bytes another process wrote without synchronising are timing on the
    // real driver (the simulator logs the read as `unsynchronized-read`):
    // such a read must succeed on both sides with as many bytes, but which
    // bytes it saw is not judged.
    let racing = |i: usize| {
        timing(i)
            || sim.hazards.as_ref().is_some_and(|hs| {
                hs.iter()
                    .any(|h| h.step == Some(i) && h.kind == HazardKind::UnsynchronizedRead)
            })
    };
    let same_length_bytes = |a: &Option<StepOutcome>, b: &Option<StepOutcome>| match (a, b) {
        (
            Some(StepOutcome::Ok {
                value: ValueSummary::Bytes { pattern: x },
            }),
            Some(StepOutcome::Ok {
                value: ValueSummary::Bytes { pattern: y },
            }),
        ) => {
            let len = |p: &str| properties::decode_pattern(p).map(|b| b.len());
            len(x) == len(y)
        }
        _ => false,
    };
    // Whether an event's work is still pending is timing too: an
    // `event_query` may answer ok on one side and NotReady on the other.
    let not_ready =
        |o: &Option<StepOutcome>| o.as_ref().is_some_and(|o| is_error(o, ErrorKind::NotReady));
    let ok = |o: &Option<StepOutcome>| matches!(o, Some(StepOutcome::Ok { .. }));
    let pending_either_way = |d: &ipc_harness::trace::StepDifference| {
        OpText::of(&d.op).keyword == CallKind::EventQuery.keyword()
            && (ok(&d.left) || not_ready(&d.left))
            && (ok(&d.right) || not_ready(&d.right))
    };
    // The first step the real backend's harness failed at.
    let lost = real.steps.iter().find_map(|s| match &s.outcome {
        StepOutcome::Broken { detail } => Some((s, detail)),
        _ => None,
    });
    let lost_at = lost.map_or(usize::MAX, |(s, _)| s.index);
    let differing = sim.differences(real);
    // Where the real run took an outcome the simulator admits but does not
    // pick: what follows is that outcome's, not the default's.
    let cut = match differing.is_empty() {
        true => usize::MAX,
        false => other_outcome_step(sim, real).unwrap_or(usize::MAX),
    };
    let mut out: Vec<Violation> = differing
        .into_iter()
        .filter(|d| d.index < lost_at.min(cut))
        .filter(|d| !(racing(d.index) && same_length_bytes(&d.left, &d.right)))
        .filter(|d| !pending_either_way(d))
        .map(|d| {
            let keyword = OpText::of(&d.op).keyword;
            Violation::new(
                Property::Differential,
                Some(d.index),
                format!(
                    "line {} '{}': simulator {}, real driver {}",
                    d.line,
                    d.op,
                    show(&d.left),
                    show(&d.right)
                ),
                &format!(
                    "{keyword}: simulator {}, real {}",
                    class(&d.left),
                    class(&d.right)
                ),
            )
        })
        .collect();
    if let Some((step, detail)) = lost {
        out.push(Violation::new(
            Property::Harness,
            Some(step.index),
            format!(
                "line {} '{}': the real backend's harness failed: {detail}; the steps from here on are not compared",
                step.line, step.op
            ),
            &harness_reason(detail),
        ));
    }
    out
}

/// The step at which the real run took the outcome of a race that the
/// simulator's default did not pick: the first LaunchFailed the real driver
/// reported to a process after that process unmapped a range with work
/// still queued on it (hazard `unmap-with-work-queued`,
/// vmm.fault.unmap-with-work-queued), where the simulator answered
/// otherwise. The work faulted; when the process heard of it is timing too,
/// so the steps from there on are not compared. A wait on an interprocess
/// event recorded after the fault may never return instead: a Timeout there
/// is the same outcome (vmm.fault.unmap-with-work-queued). `None` when the
/// real run took the simulator's outcome (or there was no such race).
pub fn race_fault_step(sim: &Trace, real: &Trace) -> Option<usize> {
    let faulted = |o: &StepOutcome| {
        is_error(o, ErrorKind::LaunchFailed) || matches!(o, StepOutcome::Timeout { .. })
    };
    sim.hazards
        .as_ref()?
        .iter()
        .filter(|h| h.kind == HazardKind::UnmapWithWorkQueued)
        .filter_map(|h| {
            let at = h.step?;
            // A trace holds every step, at its index.
            let process = &sim.steps.get(at)?.process;
            real.steps
                .iter()
                .skip(at + 1)
                .find(|s| &s.process == process && faulted(&s.outcome))
                .filter(|s| !sim.steps.get(s.index).is_some_and(|m| faulted(&m.outcome)))
                .map(|s| s.index)
        })
        .min()
}

/// The first step from which the real run followed an outcome the
/// simulator admits but does not pick ([`race_fault_step`],
/// [`undefined_hang_step`], [`event_memory_placement_step`]): the
/// differential compares up to it.
pub fn other_outcome_step(sim: &Trace, real: &Trace) -> Option<usize> {
    race_fault_step(sim, real)
        .into_iter()
        .chain(undefined_hang_step(sim, real))
        .chain(event_memory_placement_step(sim, real))
        .chain(crashed_exporter_zeros_step(sim, real))
        .chain(damaged_process_word_step(sim, real))
        .min()
}

/// The first step at which a process opened a handle whose bytes 48..52
/// were damaged, the simulator answered InvalidHandle and the real driver
/// otherwise. On the GPU those bytes number the exporting process among the
/// driver's clients, numbers the machine hands out in turn to every process
/// it starts; a damaged word names no process (InvalidHandle) or, by the
/// chance of that numbering, a live one, whose object of the handle's
/// number is then judged instead: InvalidValue, or that process's memory
/// (mem.handle.corrupted-fields). The same generated cases answered both
/// ways on fresh workers (one H200, driver 580.159.04: seed 18122026 case
/// 819, seed 22122026 case 1352). Which number is whose is placement, so
/// the steps from there on are not compared.
pub fn damaged_process_word_step(sim: &Trace, real: &Trace) -> Option<usize> {
    let flip = scenario::ast::Op::HandleFlip {
        handle: String::new(),
        offset: 0,
    };
    let (flip_kw, open_kw) = (flip.keyword(), CallKind::IpcOpenMemHandle.keyword());
    // A handle made by flipping one byte of the process word.
    let process_word_flipped = |name: &str, before: usize| {
        sim.steps[..before].iter().any(|t| {
            let o = OpText::of(&t.op);
            o.keyword == flip_kw
                && o.binds == Some(name)
                && matches!(t.outcome, StepOutcome::Ok { .. })
                && o.second_arg
                    .and_then(|b| b.parse::<usize>().ok())
                    .is_some_and(|b| (48..52).contains(&b))
        })
    };
    sim.steps.iter().zip(&real.steps).find_map(|(s, r)| {
        let o = OpText::of(&s.op);
        (o.keyword == open_kw
            && is_error(&s.outcome, ErrorKind::InvalidHandle)
            && !is_error(&r.outcome, ErrorKind::InvalidHandle)
            && o.first_arg
                .is_some_and(|h| process_word_flipped(h, s.index)))
        .then_some(s.index)
    })
}

/// The first step at which a process read zeros where the simulator read
/// other bytes, after another process crashed (in both runs) holding a VMM
/// allocation it had not released, having exported memory this process
/// had opened. On the GPU the importer's mapping then reads the exported
/// bytes or zeros, run to run
/// (mem.lifetime.import-after-exporter-crash-with-vmm-varies); the
/// simulator keeps the bytes (mem.lifetime.import-survives-exporter-crash),
/// so the steps from there on are not compared.
pub fn crashed_exporter_zeros_step(sim: &Trace, real: &Trace) -> Option<usize> {
    let bytes = |o: &StepOutcome| match ok_value(o) {
        Some(ValueSummary::Bytes { pattern }) => Some(pattern.clone()),
        _ => None,
    };
    let zeros = |pattern: &str| {
        properties::decode_pattern(pattern).is_some_and(|b| b.iter().all(|&x| x == 0))
    };
    let ok = |t: &StepRecord| matches!(t.outcome, StepOutcome::Ok { .. });
    let (create_kw, release_kw) = (
        CallKind::VmmCreate.keyword(),
        CallKind::VmmRelease.keyword(),
    );
    let (get_kw, open_kw) = (
        CallKind::IpcGetMemHandle.keyword(),
        CallKind::IpcOpenMemHandle.keyword(),
    );
    // Which process made each name (generated cases bind each name once).
    let binder = |name: &str, before: usize| {
        sim.steps[..before]
            .iter()
            .filter(|t| ok(t))
            .find(|t| OpText::of(&t.op).binds == Some(name))
    };
    // Processes that crashed in both runs holding a VMM allocation: the
    // step of the crash, and the process.
    let crashes: Vec<(usize, &str)> = sim
        .steps
        .iter()
        .zip(&real.steps)
        .filter(|(s, r)| {
            matches!(s.outcome, StepOutcome::Crash { .. })
                && matches!(r.outcome, StepOutcome::Crash { .. })
        })
        .map(|(s, _)| (s.index, s.process.as_str()))
        .filter(|&(at, process)| {
            let mine = |t: &&StepRecord| t.process == process && ok(t);
            let made: Vec<&str> = sim.steps[..at]
                .iter()
                .filter(mine)
                .map(|t| OpText::of(&t.op))
                .filter(|o| o.keyword == create_kw)
                .filter_map(|o| o.binds)
                .collect();
            made.iter().any(|v| {
                !sim.steps[..at].iter().filter(mine).any(|t| {
                    let o = OpText::of(&t.op);
                    o.keyword == release_kw && o.first_arg == Some(*v)
                })
            })
        })
        .collect();
    if crashes.is_empty() {
        return None;
    }
    sim.steps.iter().zip(&real.steps).find_map(|(s, r)| {
        let (a, b) = (bytes(&s.outcome)?, bytes(&r.outcome)?);
        if a == b || !zeros(&b) {
            return None;
        }
        let at = s.index;
        let opened_from_crashed = |&(crash_at, exporter): &(usize, &str)| {
            crash_at < at
                && exporter != s.process
                && sim.steps[..at].iter().any(|t| {
                    let o = OpText::of(&t.op);
                    t.process == s.process
                        && ok(t)
                        && o.keyword == open_kw
                        && o.first_arg
                            .and_then(|h| binder(h, t.index))
                            .is_some_and(|g| {
                                g.process == exporter && OpText::of(&g.op).keyword == get_kw
                            })
                })
        };
        crashes.iter().any(opened_from_crashed).then_some(at)
    })
}

/// The first step at which the two runs placed something differently,
/// when it is an allocation the simulator placed on VA its process had
/// released (a mapping closed, an allocation freed), and the real driver
/// on other VA, with the process having opened an imported event since.
/// The event's shared memory is mapped into the process then, and on the
/// GPU it takes that VA or not: the same generated cases answered
/// both ways on fresh workers (2 x H200 and one H200, driver 580.159.04:
/// seed 30112026 cases 32, 208, 1408, 2607, 2625; seed 2122026 cases 693,
/// 916). Which is timing, so the steps from there on are not compared.
pub fn event_memory_placement_step(sim: &Trace, real: &Trace) -> Option<usize> {
    let ptr = |o: &StepOutcome| match ok_value(o) {
        Some(ValueSummary::Ptr { label }) => Some(label.clone()),
        _ => None,
    };
    let (at, (s, placed)) =
        sim.steps
            .iter()
            .zip(&real.steps)
            .enumerate()
            .find_map(|(at, (s, r))| match (ptr(&s.outcome), ptr(&r.outcome)) {
                (Some(a), Some(b)) if a != b => Some((at, (s, a))),
                _ => None,
            })?;
    let (malloc, free) = (CallKind::Alloc.keyword(), CallKind::Free.keyword());
    let (open, close) = (
        CallKind::IpcOpenMemHandle.keyword(),
        CallKind::IpcCloseMemHandle.keyword(),
    );
    if OpText::of(&s.op).keyword != malloc {
        return None;
    }
    let mine =
        |t: &&StepRecord| t.process == s.process && matches!(t.outcome, StepOutcome::Ok { .. });
    let before = &sim.steps[..at];
    // What held the VA the simulator reused: a mapping, then closed, or an
    // allocation, then freed.
    let held: Vec<&str> = before
        .iter()
        .filter(mine)
        .filter(|t| ptr(&t.outcome).as_ref() == Some(&placed))
        .map(|t| OpText::of(&t.op))
        .filter(|o| o.keyword == open || o.keyword == malloc)
        .filter_map(|o| o.binds)
        .collect();
    let released = |t: &StepRecord| {
        let o = OpText::of(&t.op);
        (o.keyword == close || o.keyword == free) && o.first_arg.is_some_and(|v| held.contains(&v))
    };
    let (close_at, _) = before
        .iter()
        .enumerate()
        .rev()
        .find(|(_, t)| mine(t) && released(t))?;
    before[close_at + 1..]
        .iter()
        .filter(mine)
        .any(|t| OpText::of(&t.op).keyword == CallKind::IpcOpenEventHandle.keyword())
        .then_some(at)
}

/// A step's op as a trace writes it (`x = malloc 4KiB`, `ipc_close o`):
/// the name it binds, its keyword and its first argument.
struct OpText<'a> {
    binds: Option<&'a str>,
    keyword: &'a str,
    first_arg: Option<&'a str>,
    second_arg: Option<&'a str>,
}

impl<'a> OpText<'a> {
    fn of(op: &'a str) -> OpText<'a> {
        let (binds, call) = match op.split_once(" = ") {
            Some((name, call)) => (Some(name.trim()), call),
            None => (None, op),
        };
        let mut words = call.split_whitespace();
        OpText {
            binds,
            keyword: words.next().unwrap_or(""),
            first_arg: words.next(),
            second_arg: words.next(),
        }
    }
}

/// What a step that succeeded returned; `None` for any other outcome.
fn ok_value(o: &StepOutcome) -> Option<&ValueSummary> {
    match o {
        StepOutcome::Ok { value } => Some(value),
        _ => None,
    }
}

/// Whether `o` is an error of `kind`, in whichever dialect its code is.
fn is_error(o: &StepOutcome, kind: ErrorKind) -> bool {
    match o {
        StepOutcome::Error { code, .. } => Dialect::ALL
            .iter()
            .any(|&d| ApiError::from_code(d, *code).kind() == Some(kind)),
        _ => false,
    }
}

/// The step at which the real run hung (a Timeout), at or after a step
/// where the simulator logged `event-after-exporter-destroy`: a call on an
/// imported event whose exporter destroyed it or ended, or the end of an
/// exporter whose event's record was still running while another process
/// had it open. Undefined behaviour, and on the GPU the record may never
/// complete when its process ended with the recorded work still running
/// (an `event_sync` waited 20 s after the exporter crashed during a
/// `slow_fill`; a read behind a stream wait made before the exporter's
/// exit did too). The simulator completes the work; the steps from there
/// on are not compared.
pub fn undefined_hang_step(sim: &Trace, real: &Trace) -> Option<usize> {
    let hazards = sim.hazards.as_ref()?;
    let first = hazards
        .iter()
        .filter(|h| h.kind == HazardKind::EventAfterExporterDestroy)
        .filter_map(|h| h.step)
        .min()?;
    real.steps
        .iter()
        .find(|s| s.index >= first && matches!(s.outcome, StepOutcome::Timeout { .. }))
        .map(|s| s.index)
}

/// What makes two harness failures alike: the reason of a Broken step's
/// detail (`process 'p1' could not run copy_device: stream 0x2 is not a
/// live stream of this worker`: what follows the first `: `), its numbers
/// and quoted names left out.
fn harness_reason(detail: &str) -> String {
    let reason = detail.split_once(": ").map_or(detail, |(_, r)| r);
    let mut out = String::new();
    let mut quoted = false;
    for w in reason.split_whitespace() {
        if w.starts_with('\'') {
            quoted = !w.ends_with('\'') || w.len() == 1;
            out.push_str(" NAME");
            continue;
        }
        if quoted {
            quoted = !w.ends_with('\'');
            continue;
        }
        let numeric = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        let is_number = !numeric.is_empty()
            && (numeric.bytes().all(|b| b.is_ascii_digit())
                || numeric
                    .strip_prefix("0x")
                    .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())));
        out.push(' ');
        out.push_str(if is_number { "N" } else { w });
    }
    out.trim_start().to_string()
}

/// The steps of both runs side by side, as comment lines for the end of a
/// finding file: what the real driver answered at every step, not only at
/// the differing one (`!=` marks a difference).
pub fn side_by_side(sim: &Trace, real: &Trace) -> String {
    use crate::report::text::outcome_text;
    let mut s =
        String::from("\n# Both runs of the steps above (simulator | real driver; != differs):\n");
    let n = sim.steps.len().max(real.steps.len());
    for i in 0..n {
        let (a, b) = (sim.steps.get(i), real.steps.get(i));
        let step = a
            .or(b)
            .map(|st| (st.line, st.process.clone(), st.op.clone()));
        let Some((line, process, op)) = step else {
            continue;
        };
        let sa = a
            .map(|x| outcome_text(&x.outcome))
            .unwrap_or_else(|| "(no step)".into());
        let sb = b
            .map(|x| outcome_text(&x.outcome))
            .unwrap_or_else(|| "(no step)".into());
        // Marked by the differential's own test (two crashes with one
        // signal are alike, whatever pid their text names).
        let same = match (a, b) {
            (Some(x), Some(y)) => x.outcome.same_observation(&y.outcome),
            _ => false,
        };
        let mark = if same { "  " } else { "!=" };
        s.push_str(&format!(
            "# {mark} L{line} {process}: {op} -> {sa} | {sb}\n"
        ));
    }
    s
}

/// Lines [`finding_header`] writes (four comments and a blank line).
pub const HEADER_LINES: usize = 5;

/// The header of a finding file: what broke and how to replay it.
pub fn finding_header(id: CaseId, property: Property, message: &str, real: Option<&str>) -> String {
    // A property finding shows itself with --properties; a differential one
    // by running on the real backend.
    let backend = match real {
        Some(b) => format!(" --backend {b}"),
        None => " --properties".to_string(),
    };
    format!(
        "# Found by `ipc-conformance explore`: property {property}.\n\
         # {message}\n\
         # case {} (seed {}), dialect {}.\n\
         # replay: ipc-conformance scenario FILE --seed {} --dialect {}{backend}\n\n",
        id.index,
        id.seed,
        id.dialect,
        id.seed,
        id.dialect,
        message = message.replace('\n', " ")
    )
}
