//! Exploration throughput on the simulator: generated cases per second
//! (drawing the program, lowering it to text, parsing, two runs for
//! determinism, and the property checks). Target: 10,000 cases of 32 steps
//! per second per core in release mode.
//!
//! - `cases_of_up_to_32_steps_on_sim`: `explore` itself, 200 cases per
//!   iteration, as the CLI draws them (`--max-steps 32`: up to 32 steps,
//!   about 23 on average; printed before the benchmarks run);
//! - `full_cases_of_32_steps_on_sim`: only cases whose program fills all 32 steps
//!   (32 to 35: an action's steps are kept whole), each drawn, lowered and
//!   judged as `explore` does (without its summary bookkeeping).
//!
//! - `mix_DIALECTS`: `explore` in each dialect mix (`runtime`, `driver`,
//!   `hip`, `all`: cases alternate between the dialects), 200 cases of up
//!   to 32 steps per iteration. Target: 20,000 cases/s per core in every mix.
//!
//! Each is measured twice: in wall time (group `explore`) and in this
//! thread's CPU time (group `explore_cpu`: "per core", and steady on a
//! machine other work shares).

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ipc_conformance::explore::{self, generate, CaseId, ExploreOptions, Judge};
use ipc_harness::Dialect;
use ipc_mock_driver::SimBackend;
use std::time::Duration;

const BATCH: u64 = 200;
const MAX_STEPS: usize = 32;

// As the `ipc-conformance` binary does (src/main.rs).
#[global_allocator]
static GLOBAL: ipc_conformance::allocator::Allocator = ipc_conformance::allocator::Allocator;

/// This thread's CPU time, in nanoseconds (formatted as durations).
struct ThreadCpuTime;

fn thread_cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu_now().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WallTime.formatter()
    }
}

fn judge(backend: &SimBackend) -> Judge<'_> {
    Judge {
        sim: backend,
        real: None,
        step_timeout: Duration::from_secs(5),
    }
}

/// Case ids (seed 7, runtime dialect) whose programs fill `MAX_STEPS` steps.
fn full_cases(n: usize) -> Vec<CaseId> {
    (0..)
        .map(|index| CaseId {
            index,
            seed: explore::case_seed(7, index),
            dialect: Dialect::Runtime,
        })
        .filter(|&id| {
            let tree = explore::case_tree_on(id, MAX_STEPS, 2);
            generate::lower(&tree.current(), MAX_STEPS).stats.steps >= MAX_STEPS
        })
        .take(n)
        .collect()
}

fn explore_benches<M: Measurement>(c: &mut Criterion<M>, group: &str) {
    let backend = SimBackend::default();
    let judge = judge(&backend);
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(BATCH));

    let mut seed = 0u64;
    group.bench_function("cases_of_up_to_32_steps_on_sim", |b| {
        b.iter(|| {
            seed += 1;
            let opts = ExploreOptions {
                cases: BATCH,
                seed,
                max_steps: MAX_STEPS,
                ..ExploreOptions::default()
            };
            let s = explore::explore(&opts, &judge, None, &mut |_, _| {});
            assert!(s.findings.is_empty());
            s.steps
        })
    });

    for (mix, dialects) in [
        ("runtime", vec![Dialect::Runtime]),
        ("driver", vec![Dialect::Driver]),
        ("hip", vec![Dialect::Hip]),
        ("all", Dialect::ALL.to_vec()),
    ] {
        let mut seed = 0u64;
        group.bench_function(format!("mix_{mix}"), |b| {
            b.iter(|| {
                seed += 1;
                let opts = ExploreOptions {
                    cases: BATCH,
                    seed,
                    max_steps: MAX_STEPS,
                    dialects: dialects.clone(),
                    ..ExploreOptions::default()
                };
                let s = explore::explore(&opts, &judge, None, &mut |_, _| {});
                assert!(s.findings.is_empty());
                s.steps
            })
        });
    }

    let ids = full_cases(4000);
    let mut next = 0usize;
    group.bench_function("full_cases_of_32_steps_on_sim", |b| {
        b.iter(|| {
            let mut steps = 0;
            for _ in 0..BATCH {
                let id = ids[next % ids.len()];
                next += 1;
                // As `explore` does: the tree (kept for shrinking) is dropped
                // with the case.
                let tree = explore::case_tree_on(id, MAX_STEPS, 2);
                let lowered = generate::lower(&tree.current(), MAX_STEPS);
                let eval = judge.evaluate_scenario(&lowered.scenario, id);
                assert!(eval.violations.is_empty());
                steps += eval.steps;
            }
            steps
        })
    });
    group.finish();
}

/// How many steps the cases of each benchmark have, on average.
fn print_steps_per_case() {
    let backend = SimBackend::default();
    let opts = ExploreOptions {
        cases: 2000,
        seed: 1,
        max_steps: MAX_STEPS,
        ..ExploreOptions::default()
    };
    let s = explore::explore(&opts, &judge(&backend), None, &mut |_, _| {});
    let full: usize = full_cases(2000)
        .into_iter()
        .map(|id| {
            let tree = explore::case_tree_on(id, MAX_STEPS, 2);
            generate::lower(&tree.current(), MAX_STEPS).stats.steps
        })
        .sum();
    println!(
        "steps per case: cases_of_up_to_32_steps_on_sim {:.1}, full_cases_of_32_steps_on_sim {:.1}",
        s.steps as f64 / s.cases as f64,
        full as f64 / 2000.0
    );
}

fn wall(c: &mut Criterion) {
    print_steps_per_case();
    explore_benches(c, "explore");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    explore_benches(c, "explore_cpu");
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);
