//! The whole catalogue: parsing it, and running it on the simulator (runtime
//! dialect, and all three dialects as `run --dialect all` does; target:
//! under 20 ms of steps for the three). The three-dialect run is measured
//! in wall time and in this thread's CPU time (`catalogue_cpu`: per core,
//! steady on a machine other work shares).

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, Criterion};
use ipc_conformance::backend::{self, BackendKind, SimSettings};
use ipc_conformance::catalogue::{compiled_in_dir, Catalogue};
use ipc_conformance::runner::{self, RunConfig, Silent};
use ipc_harness::Dialect;
use std::hint::black_box;
use std::time::Duration;

/// This thread's CPU time (formatted as durations).
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

/// `run --dialect all` on the simulator: every clause in the three dialects.
fn three_dialects<M: Measurement + 'static>(c: &mut Criterion<M>, name: &str) {
    let dir = compiled_in_dir();
    let cat = Catalogue::load(&dir).expect("the clause directory loads");
    let backend =
        backend::make(BackendKind::Sim, &SimSettings::default()).expect("the simulator starts");
    let clauses: Vec<_> = cat.clauses.iter().collect();
    let cfg = RunConfig {
        dialects: Dialect::ALL.to_vec(),
        ..RunConfig::default()
    };
    c.bench_function(name, |b| {
        b.iter(|| {
            black_box(runner::run_clauses(
                &clauses,
                backend.as_ref(),
                &cfg,
                &mut Silent,
            ))
        })
    });
}

fn catalogue(c: &mut Criterion) {
    let dir = compiled_in_dir();
    let cat = Catalogue::load(&dir).expect("the clause directory loads");
    eprintln!(
        "catalogue: {} clauses ({} broken) in {}",
        cat.len(),
        cat.broken().count(),
        dir.display()
    );

    c.bench_function("catalogue/parse", |b| {
        b.iter(|| black_box(Catalogue::load(black_box(&dir)).unwrap()))
    });

    let backend =
        backend::make(BackendKind::Sim, &SimSettings::default()).expect("the simulator starts");
    let clauses: Vec<_> = cat.clauses.iter().collect();
    let cfg = RunConfig::default();
    c.bench_function("catalogue/run-sim-runtime", |b| {
        b.iter(|| {
            black_box(runner::run_clauses(
                &clauses,
                backend.as_ref(),
                &cfg,
                &mut Silent,
            ))
        })
    });
    three_dialects(c, "catalogue/run-sim-three-dialects");
}

fn catalogue_cpu(c: &mut Criterion<ThreadCpuTime>) {
    three_dialects(c, "catalogue_cpu/run-sim-three-dialects");
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = catalogue
}
criterion_group! {
    name = cpu_time;
    config = Criterion::default().sample_size(10).with_measurement(ThreadCpuTime);
    targets = catalogue_cpu
}
criterion_main!(benches, cpu_time);
