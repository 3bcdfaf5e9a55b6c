//! The whole catalogue: parsing it, and running it on the simulator
//! (runtime dialect).

use criterion::{criterion_group, criterion_main, Criterion};
use ipc_conformance::backend::{self, BackendKind, SimSettings};
use ipc_conformance::catalogue::{compiled_in_dir, Catalogue};
use ipc_conformance::runner::{self, RunConfig, Silent};
use std::hint::black_box;

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
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = catalogue
}
criterion_main!(benches);
