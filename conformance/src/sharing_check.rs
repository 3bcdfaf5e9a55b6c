//! `run --check-sharing`: the worker sharing policy checked, not assumed.
//! Every selected clause that [`ipc_harness::sharing::sharing`] lets run
//! on reset, reused workers runs twice, once on fresh worker processes and
//! once on reused ones, and the two runs are compared as `differential`
//! compares two backends (outcome of every step, status). Any difference
//! means the policy let a clause share that can see process history.

use crate::catalogue::Clause;
use crate::differential::{self, DifferentialReport};
use crate::runner::{self, Observer, RunConfig};
use ipc_harness::sharing::sharing;
use ipc_harness::Backend;

/// The clauses whose scenario may run on reused workers, in order.
pub fn shareable<'a>(clauses: &[&'a Clause]) -> Vec<&'a Clause> {
    clauses
        .iter()
        .copied()
        .filter(|c| !c.is_broken() && c.scenario.as_ref().is_some_and(|s| sharing(s).is_reused()))
        .collect()
}

/// Runs `clauses` (already [`shareable`]) on `fresh` (a backend that starts
/// fresh workers for every scenario) and on `reused` (one that reuses reset
/// workers), and compares: the report's left side (`sim` in the
/// differential's fields) is the fresh run, its right side (`real`) the
/// reused one.
pub fn check(
    clauses: &[&Clause],
    fresh: &dyn Backend,
    reused: &dyn Backend,
    cfg: &RunConfig,
    fresh_observer: &mut dyn Observer,
    reused_observer: &mut dyn Observer,
) -> DifferentialReport {
    let left = runner::run_clauses(clauses, fresh, cfg, fresh_observer);
    let right = runner::run_clauses(clauses, reused, cfg, reused_observer);
    differential::compare(left, right)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{compiled_in_dir, Catalogue};
    use crate::runner::Silent;
    use ipc_mock_driver::{SimBackend, SimConfig};

    fn sim(semantics: &[(&str, &str)]) -> SimBackend {
        let mut config = SimConfig::default();
        for (name, value) in semantics {
            config.semantics.set(name, value).expect("a known choice");
        }
        SimBackend::new(config)
    }

    #[test]
    fn only_shareable_clauses_are_checked_and_identical_runs_agree() {
        let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
        let all: Vec<&Clause> = cat.clauses.iter().collect();
        let picked = shareable(&all);
        assert!(!picked.is_empty() && picked.len() < all.len());
        assert!(picked.iter().any(|c| c.id == "mem.open.basic"));
        assert!(!picked
            .iter()
            .any(|c| c.id == "mem.lifetime.destroyed-context-va-to-next-context"));
        let cfg = RunConfig::default();
        let report = check(
            &picked,
            &sim(&[]),
            &sim(&[]),
            &cfg,
            &mut Silent,
            &mut Silent,
        );
        // A clause of another dialect only is not compared.
        assert_eq!(
            report.totals.compared + report.totals.not_compared,
            picked.len()
        );
        assert!(report.totals.compared > picked.len() / 2);
        assert_eq!(
            report.totals.differing,
            0,
            "{:?}",
            differential::difference_lines(&report)
        );
        assert_eq!(report.exit_code(), crate::exit::EXIT_OK);
    }

    #[test]
    fn a_backend_that_behaves_otherwise_is_reported() {
        let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
        let all: Vec<&Clause> = cat.clauses.iter().collect();
        let picked = shareable(&all);
        let choice = ipc_mock_driver::SimConfig::default().semantics.describe();
        // Some simulator choice changes some shareable clause's outcome:
        // find one, so the check is shown able to fail.
        let cfg = RunConfig::default();
        let differing = choice.iter().find_map(|c| {
            c.options.iter().filter(|v| **v != c.value).find_map(|v| {
                let other = sim(&[(c.name, v.as_str())]);
                let report = check(&picked, &sim(&[]), &other, &cfg, &mut Silent, &mut Silent);
                (report.totals.differing > 0).then_some(report)
            })
        });
        let report = differing.expect("no simulator choice changes a shareable clause");
        assert_eq!(report.exit_code(), crate::exit::EXIT_FAILURES);
        assert!(!differential::difference_lines(&report).is_empty());
    }
}
