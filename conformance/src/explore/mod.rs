//! `ipc-conformance explore`: generated scenarios, checked on the simulator
//! against the [`properties`] and, with a real backend, against the real
//! driver (any difference in outcomes or pointer relations is a finding).
//!
//! A case is a [`generate::Program`] drawn from a proptest strategy with a
//! seed derived from `--seed` and the case number, lowered to a scenario
//! whose text, the one a finding file holds, parses back to it. A
//! failing case is shrunk ([`shrink`]) to a minimal scenario that still
//! breaks the same property, and written under `--out` with its seed.

mod case;
pub mod generate;
pub mod just_union;
pub mod lean_union;
mod ordering;
pub mod properties;
pub mod recheck;
pub mod record;
pub mod shrink;

pub use case::{
    case_seed, case_tree, case_tree_on, differences, finding_header, runner_for, side_by_side,
    CaseId, DifferingCase, Evaluation, ExploreOptions, Finding, Judge, Reached, Summary,
    DETERMINISM_EVERY, HEADER_LINES,
};
use generate::GenStats;
use ipc_harness::{Backend, Dialect};
use properties::{Property, Violation};
use proptest::strategy::ValueTree;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Run the exploration. `progress` is told after each case (cases done,
/// findings so far).
pub fn explore(
    opts: &ExploreOptions,
    judge: &Judge<'_>,
    out: Option<&Path>,
    progress: &mut dyn FnMut(u64, usize),
) -> Summary {
    let started = Instant::now();
    let shared = Mutex::new(Shared::new(opts, judge));
    for index in opts.first_case..opts.first_case.saturating_add(opts.cases) {
        if opts.time_limit.is_some_and(|t| started.elapsed() >= t) {
            lock(&shared).summary.stopped_early = true;
            break;
        }
        if opts.stop_on_signal && crate::interrupt::requested() {
            lock(&shared).summary.interrupted = true;
            break;
        }
        run_case(opts, judge, index, &shared, out);
        let findings = lock(&shared).summary.findings.len();
        progress(index + 1 - opts.first_case, findings);
    }
    finish(shared, started)
}

/// The backends of one exploring thread: the simulator and, for a
/// differential run, the real one.
pub type Backends = (Box<dyn Backend>, Option<Box<dyn Backend>>);

/// [`explore`] with `jobs` threads: this one with `first`, each other one
/// with its own backends from `make`
/// (a real backend's workers are processes, so cases on one GPU overlap).
/// Cases are taken in order from a shared counter; which case of a
/// signature is shrunk, and so the summary, can depend on timing when
/// `jobs > 1` (each case's own run still depends only on its seed).
pub fn explore_parallel(
    opts: &ExploreOptions,
    jobs: usize,
    first: &Judge<'_>,
    make: &(dyn Fn() -> Result<Backends, String> + Sync),
    out: Option<&Path>,
    progress: &(dyn Fn(u64, usize) + Sync),
) -> Summary {
    let started = Instant::now();
    let shared = Mutex::new(Shared::new(opts, first));
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let errors = Mutex::new(Vec::new());
    let work = |judge: &Judge<'_>| loop {
        if opts.time_limit.is_some_and(|t| started.elapsed() >= t) {
            lock(&shared).summary.stopped_early = true;
            break;
        }
        if opts.stop_on_signal && crate::interrupt::requested() {
            lock(&shared).summary.interrupted = true;
            break;
        }
        let index = opts.first_case + next.fetch_add(1, Ordering::SeqCst);
        if index >= opts.first_case.saturating_add(opts.cases) {
            break;
        }
        run_case(opts, judge, index, &shared, out);
        let findings = lock(&shared).summary.findings.len();
        progress(done.fetch_add(1, Ordering::SeqCst) + 1, findings);
    };
    std::thread::scope(|scope| {
        for _ in 1..jobs.max(1) {
            scope.spawn(|| match make() {
                Ok((sim, real)) => work(&Judge {
                    sim: sim.as_ref(),
                    real: real.as_deref(),
                    step_timeout: opts.step_timeout,
                }),
                Err(e) => lock(&errors).push(e),
            });
        }
        work(first);
    });
    if let Some(e) = lock(&errors).first() {
        eprintln!("warning: an exploring thread could not start its backends: {e}");
    }
    finish(shared, started)
}

/// What the cases of one exploration share.
struct Shared {
    summary: Summary,
    reached: GenStats,
    recorder: Option<record::Recorder>,
}

impl Shared {
    fn new(opts: &ExploreOptions, judge: &Judge<'_>) -> Shared {
        Shared {
            summary: Summary {
                backend: match judge.real {
                    Some(r) => format!("sim + {}", r.name()),
                    None => judge.sim.name().to_string(),
                },
                seed: opts.seed,
                first_case: opts.first_case,
                ..Summary::default()
            },
            reached: GenStats::default(),
            recorder: opts
                .record
                .as_deref()
                .map(|p| record::Recorder::new(p, opts.record_devices)),
        }
    }
}

/// A poisoned lock only means another case panicked; its data is still
/// counts and findings.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn finish(shared: Mutex<Shared>, started: Instant) -> Summary {
    let shared = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut summary = shared.summary;
    if let Some(e) = shared.recorder.and_then(|r| r.error) {
        summary.record_error = Some(e);
    }
    summary.findings.sort_by_key(|f| f.case.index);
    summary.seconds = started.elapsed().as_secs_f64();
    summary.reached = shared.reached;
    summary
}

/// Case `index`: generate, evaluate, and shrink a violation no earlier
/// finding explains (the first such; a case whose violations are all known
/// repeats the first it matches).
fn run_case(
    opts: &ExploreOptions,
    judge: &Judge<'_>,
    index: u64,
    shared: &Mutex<Shared>,
    out: Option<&Path>,
) {
    // Cases alternate between the dialects asked for (runtime if none).
    let dialects: &[Dialect] = if opts.dialects.is_empty() {
        &[Dialect::Runtime]
    } else {
        &opts.dialects
    };
    let id = CaseId {
        index,
        seed: case_seed(opts.seed, index),
        dialect: dialects[(index % dialects.len() as u64) as usize],
    };
    let mut tree = case_tree_on(id, opts.max_steps, opts.max_devices);
    let lowered = generate::lower(&tree.current(), opts.max_steps);
    // What runs is what a finding's file holds: its text parses to it.
    debug_assert_eq!(
        ipc_harness::scenario::parse(&lowered.text(), &lowered.scenario.path).as_ref(),
        Ok(&lowered.scenario)
    );
    // A recording is judged again by `explore replay` against a simulator
    // of fresh processes: a case recorded from reused workers may differ by
    // their history alone (a spare context served a `ctx_create`, so no new
    // VA arena began). So while recording, every case that differs is run
    // again on fresh workers, alike a finding or not.
    let recording = lock(shared).recorder.is_some();
    let known = |v: &Violation| {
        !recording
            && lock(shared)
                .summary
                .findings
                .iter()
                .any(|f| f.signature == v.signature)
    };
    let eval =
        judge.evaluate_scenario_knowing(&lowered.scenario, id, opts.checks_determinism(id), &known);
    let claimed = {
        let mut s = lock(shared);
        if let Some(r) = s.recorder.as_mut() {
            r.record(id, &lowered.text(), &eval);
        }
        s.reached.add(&lowered.stats);
        let summary = &mut s.summary;
        summary.cases += 1;
        let has = |p: Property| eval.violations.iter().any(|v| v.property == p);
        summary.differing_cases += u64::from(has(Property::Differential));
        summary.harness_lost_cases += u64::from(has(Property::Harness));
        summary.steps += eval.steps as u64;
        summary.compared_steps += eval.compared_steps as u64;
        summary.not_compared += u64::from(eval.not_compared);
        summary.worker_history_cases += u64::from(eval.worker_history);
        if let (Some(sim), Some(real)) = (&eval.sim_trace, &eval.real_trace) {
            summary.count_other_outcomes(sim, real);
        }
        let new = eval
            .violations
            .iter()
            .find(|v| !summary.findings.iter().any(|f| f.signature == v.signature))
            .cloned();
        match &new {
            None => {
                if let Some(known) = summary.findings.iter_mut().find(|f| {
                    eval.violations
                        .first()
                        .is_some_and(|v| v.signature == f.signature)
                }) {
                    known.repeats += 1;
                }
            }
            // Claimed before shrinking, so other threads count repeats.
            Some(v) => summary.findings.push(Finding {
                case: id,
                property: v.property.name().to_string(),
                message: v.message.clone(),
                original_steps: eval.steps,
                steps: eval.steps,
                scenario: lowered.text(),
                file: None,
                signature: v.signature.clone(),
                repeats: 0,
            }),
        }
        new
    };
    let Some(first) = claimed else { return };
    let budget = if judge.real.is_some() && first.property.needs_real() {
        opts.shrink_runs_real
    } else {
        opts.shrink_runs
    };
    let mut finding = shrink::minimise(judge, id, tree.as_mut(), opts.max_steps, &first, budget);
    finding.original_steps = eval.steps;
    if let Some(dir) = out {
        let name = format!("{}-case{}.ipc", finding.property, id.index);
        let path = dir.join(name);
        if std::fs::create_dir_all(dir).is_ok()
            && crate::safe_fs::write_atomic(&path, finding.scenario.as_bytes()).is_ok()
        {
            finding.file = Some(path);
        }
    }
    let mut s = lock(shared);
    if let Some(slot) = s
        .summary
        .findings
        .iter_mut()
        .find(|f| f.signature == first.signature)
    {
        finding.repeats = slot.repeats;
        *slot = finding;
    }
}
