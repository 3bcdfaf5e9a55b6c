//! Every clause of the catalogue must Pass on the simulator, in every
//! dialect it holds for (metadata `dialects`; the others must say
//! NotSupported, with the reason).
//!
//! `clause` is generated per file by rstest's `#[files]`, which globs at
//! compile time: a clause file added later is picked up when this test is
//! rebuilt (`touch conformance/tests/catalogue.rs`). `whole_catalogue` reads
//! the directory at run time, so it also covers files added since, and checks
//! what only the whole set can show (duplicate ids).

use ipc_conformance::catalogue::{compiled_in_dir, Catalogue, Clause};
use ipc_conformance::runner::run_clause;
use ipc_harness::scenario::ExecOptions;
use ipc_harness::{Dialect, Status};
use ipc_mock_driver::{SimBackend, SimConfig};
use rstest::rstest;
use std::path::{Path, PathBuf};

const SEED: u64 = 1;

/// The simulator with enough devices for the clause.
fn simulator_for(clause: &Clause) -> SimBackend {
    let mut config = SimConfig::default();
    if let Some(d) = clause.requirements.devices {
        config.devices = config.devices.max(d);
    }
    SimBackend::new(config)
}

fn load_clause(path: &Path) -> Clause {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    Clause::from_source(&text, path, &path.display().to_string())
}

fn check(clause: &Clause, dialect: Dialect) -> Result<(), String> {
    let r = run_clause(
        clause,
        &simulator_for(clause),
        dialect,
        SEED,
        ExecOptions::default().step_timeout,
    );
    let wanted = if clause.applies_to(dialect) {
        Status::Pass
    } else {
        Status::NotSupported
    };
    if r.status == wanted && !(wanted == Status::NotSupported && r.message.is_empty()) {
        Ok(())
    } else {
        Err(format!(
            "{} [{dialect}] is {} on the simulator: {}",
            r.id,
            r.status.name(),
            r.message
        ))
    }
}

#[rstest]
fn clause(
    #[files("clauses/**/*.ipc")] path: PathBuf,
    #[values(Dialect::Runtime, Dialect::Driver, Dialect::Hip)] dialect: Dialect,
) {
    let clause = load_clause(&path);
    if let Err(message) = check(&clause, dialect) {
        panic!("{message}");
    }
}

#[test]
fn whole_catalogue() {
    let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
    let mut failures = Vec::new();
    for clause in &cat.clauses {
        for dialect in Dialect::ALL {
            if let Err(message) = check(clause, dialect) {
                failures.push(message);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} clause runs did not pass:\n{}",
        failures.len(),
        cat.len() * Dialect::ALL.len(),
        failures.join("\n")
    );
}

/// Every clause states its tier (`# tier:`) on the line after its kind, so a
/// reader finds where an expectation came from and how far it may be built
/// on together.
#[test]
fn every_clause_states_its_tier_right_after_its_kind() {
    let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
    let mut misplaced = Vec::new();
    for clause in &cat.clauses {
        assert!(
            clause.tier.is_some(),
            "{}: {}",
            clause.id,
            clause.problem_message()
        );
        let text = std::fs::read_to_string(&clause.path).expect("the clause reads");
        let lines: Vec<&str> = text.lines().collect();
        let after_kind = lines
            .iter()
            .position(|l| l.starts_with("# kind:"))
            .and_then(|i| lines.get(i + 1));
        if !after_kind.is_some_and(|l| l.starts_with("# tier:")) {
            misplaced.push(clause.path.display().to_string());
        }
    }
    assert!(
        misplaced.is_empty(),
        "the tier does not follow the kind in:\n{}",
        misplaced.join("\n")
    );
}
