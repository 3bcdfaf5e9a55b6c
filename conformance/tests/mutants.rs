//! The properties have teeth: every deliberately wrong simulator
//! (`ipc_mock_driver::Mutant`) is rejected by the catalogue or by the
//! exploration properties. Prints the kill table (`--nocapture`).

use ipc_conformance::catalogue::{compiled_in_dir, Catalogue};
use ipc_conformance::explore::{self, ExploreOptions, Judge};
use ipc_conformance::runner::run_clause;
use ipc_harness::scenario::ExecOptions;
use ipc_harness::{Dialect, Status};
use ipc_mock_driver::{Mutant, SimBackend, SimConfig};
use std::time::Duration;

fn sim(mutant: Option<Mutant>) -> SimBackend {
    SimBackend::new(SimConfig {
        mutant,
        ..SimConfig::default()
    })
}

/// Clauses that fail on the mutant (both dialects).
fn catalogue_kills(mutant: Mutant) -> Vec<String> {
    let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
    let backend = sim(Some(mutant));
    let mut failed = Vec::new();
    for clause in cat.select(&ipc_conformance::Filter::new(&[] as &[String]).expect("no filter")) {
        for dialect in Dialect::ALL {
            let r = run_clause(
                clause,
                &backend,
                dialect,
                1,
                ExecOptions::default().step_timeout,
            );
            if r.status != Status::Pass && r.status != Status::NotSupported {
                failed.push(format!("{} [{dialect}]", r.id));
            }
        }
    }
    failed
}

/// Properties broken by `cases` explored cases of seed 3 (both CUDA
/// dialects) on the mutant.
fn properties_kill(mutant: Mutant, cases: u64) -> Vec<String> {
    let backend = sim(Some(mutant));
    let judge = Judge {
        sim: &backend,
        real: None,
        step_timeout: Duration::from_secs(5),
    };
    let opts = ExploreOptions {
        cases,
        seed: 3,
        dialects: Dialect::CUDA.to_vec(),
        shrink_runs: 0,
        // Every case checks determinism, so a nondeterministic mutant is
        // caught however few cases the sample would have picked.
        determinism_every: 1,
        ..ExploreOptions::default()
    };
    let summary = explore::explore(&opts, &judge, None, &mut |_, _| {});
    let mut props: Vec<String> = summary
        .findings
        .iter()
        .map(|f| f.property.clone())
        .collect();
    props.sort();
    props.dedup();
    props
}

#[test]
fn the_real_simulator_survives_catalogue_and_properties() {
    let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
    assert!(!cat.is_empty());
    let backend = sim(None);
    let judge = Judge {
        sim: &backend,
        real: None,
        step_timeout: Duration::from_secs(5),
    };
    let opts = ExploreOptions {
        cases: 300,
        seed: 3,
        dialects: Dialect::CUDA.to_vec(),
        ..ExploreOptions::default()
    };
    let s = explore::explore(&opts, &judge, None, &mut |_, _| {});
    assert!(s.findings.is_empty(), "{:#?}", s.findings);
}

#[test]
fn every_mutant_is_killed() {
    let mut lines = Vec::new();
    let mut survivors = Vec::new();
    for mutant in Mutant::ALL {
        let clauses = catalogue_kills(mutant);
        let props = properties_kill(mutant, 300);
        if clauses.is_empty() && props.is_empty() {
            survivors.push(mutant);
        }
        lines.push(format!(
            "{mutant:?}: {} clause run(s) fail{}; properties broken: {}",
            clauses.len(),
            clauses
                .first()
                .map(|c| format!(" (e.g. {c})"))
                .unwrap_or_default(),
            if props.is_empty() {
                "none".to_string()
            } else {
                props.join(", ")
            }
        ));
    }
    let killed = Mutant::ALL.len() - survivors.len();
    eprintln!(
        "mutants killed: {killed}/{} ({}%)\n  {}",
        Mutant::ALL.len(),
        killed * 100 / Mutant::ALL.len(),
        lines.join("\n  ")
    );
    assert!(survivors.is_empty(), "surviving mutants: {survivors:?}");
}

/// The mutants of the hazards user code causes are rejected by the
/// exploration's properties on their own, not only by the clauses that
/// measure them.
#[test]
fn the_hazard_mutants_break_exploration_properties() {
    let expected = [
        (Mutant::ForeignCloseClosesOtherMapping, "conservation"),
        (Mutant::DoubleFreeSucceeds, "conservation"),
        (Mutant::KernelWritesUnordered, "ordering"),
        (Mutant::EventRefusedAfterExporterCrash, "documented-returns"),
        // A read through a reservation after its unmap succeeds.
        (Mutant::VmmUnmapKeepsMapping, "conservation"),
        // Two live allocations of a process answer one buffer id.
        (Mutant::BufferIdsShared, "attributes"),
    ];
    for (mutant, property) in expected {
        let broken = properties_kill(mutant, 300);
        assert!(
            broken.iter().any(|p| p == property),
            "{mutant:?}: expected {property} broken, got {broken:?}"
        );
    }
}

/// Each wrong simulator of a stream-ordering rule is rejected by the
/// exploration's properties alone (600 generated cases of seed 3, both
/// CUDA dialects), and by the property named: `ordering` where its hazard
/// log misses a race or logs one the documents rule out, `coherence` where
/// a read the documents order after a kernel misses its bytes.
#[test]
fn the_stream_mutants_break_exploration_properties() {
    let expected = [
        // The record captures every write of the process: a record on the
        // wrong stream logs no race.
        (Mutant::EventRecordIgnoresStream, "ordering"),
        // The waiting stream's copy runs before the kernel's bytes land,
        // and is logged as a race.
        (Mutant::StreamWaitDoesNothing, "coherence"),
        (Mutant::StreamWaitDoesNothing, "ordering"),
        // The synchronize returns before the bytes land.
        (Mutant::EventCompletesEarly, "coherence"),
        // The second record keeps the first's capture: no race logged.
        (Mutant::EventRecordAccumulates, "ordering"),
        // A record (or read) on the legacy stream no longer waits for a
        // blocking stream's kernel.
        (Mutant::LegacyIgnoresBlockingStreams, "ordering"),
        // A non-blocking stream waits for the legacy stream: no race logged.
        (Mutant::NonBlockingOrderedWithLegacy, "ordering"),
        // A read on another stream of the writer is not logged.
        (Mutant::OwnStreamsUnordered, "ordering"),
        // The per-thread stream no longer waits for the legacy stream: a
        // record on it misses a legacy kernel.
        (Mutant::PerThreadNonBlocking, "ordering"),
    ];
    for (mutant, property) in expected {
        let broken = properties_kill(mutant, 600);
        assert!(
            broken.iter().any(|p| p == property),
            "{mutant:?}: expected {property} broken, got {broken:?}"
        );
    }
}

/// `explore` checks determinism on one case in `determinism_every`, chosen
/// from the case seed: about an eighth by default, every case at 1.
#[test]
fn determinism_is_checked_on_a_seeded_sample_of_cases() {
    let opts = ExploreOptions::default();
    let checked = (0..8000)
        .filter(|&index| {
            opts.checks_determinism(explore::CaseId {
                index,
                seed: explore::case_seed(opts.seed, index),
                dialect: Dialect::Runtime,
            })
        })
        .count();
    assert!((800..1200).contains(&checked), "{checked} of 8000 checked");
    let every = ExploreOptions {
        determinism_every: 1,
        ..ExploreOptions::default()
    };
    assert!(
        (0..100).all(|index| every.checks_determinism(explore::CaseId {
            index,
            seed: explore::case_seed(every.seed, index),
            dialect: Dialect::Runtime,
        }))
    );
}

/// A simulator that is not deterministic is caught by the sampled check as
/// well as by the check on every case, and not when no case is checked.
#[test]
fn a_nondeterministic_simulator_is_caught_by_the_sample() {
    let backend = sim(Some(Mutant::NondeterministicKernelRead));
    let judge = Judge {
        sim: &backend,
        real: None,
        step_timeout: Duration::from_secs(5),
    };
    let found = |determinism_every: u64| {
        let opts = ExploreOptions {
            cases: 300,
            seed: 3,
            dialects: Dialect::CUDA.to_vec(),
            shrink_runs: 0,
            determinism_every,
            ..ExploreOptions::default()
        };
        explore::explore(&opts, &judge, None, &mut |_, _| {})
            .findings
            .iter()
            .any(|f| f.property == "determinism")
    };
    assert!(found(1));
    assert!(found(explore::DETERMINISM_EVERY));
    // None of these case seeds is 0 or u64::MAX: no case runs twice.
    assert!(!found(u64::MAX));
}
