//! Exploration throughput on the simulator: generated cases of up to 32
//! steps per second (generation, lowering to text, parsing, two runs for
//! determinism, and the property checks). Target: 10,000 cases/s per core
//! in release mode.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ipc_conformance::explore::{self, ExploreOptions, Judge};
use ipc_mock_driver::SimBackend;
use std::time::Duration;

const BATCH: u64 = 200;

// As the `ipc-conformance` binary does (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn explore_throughput(c: &mut Criterion) {
    let backend = SimBackend::default();
    let judge = Judge {
        sim: &backend,
        real: None,
        step_timeout: Duration::from_secs(5),
    };
    let mut group = c.benchmark_group("explore");
    group.throughput(Throughput::Elements(BATCH));
    let mut seed = 0u64;
    group.bench_function("cases_of_32_steps_on_sim", |b| {
        b.iter(|| {
            seed += 1;
            let opts = ExploreOptions {
                cases: BATCH,
                seed,
                max_steps: 32,
                ..ExploreOptions::default()
            };
            let s = explore::explore(&opts, &judge, None, &mut |_, _| {});
            assert!(s.findings.is_empty());
            s.steps
        })
    });
    group.finish();
}

criterion_group!(benches, explore_throughput);
criterion_main!(benches);
