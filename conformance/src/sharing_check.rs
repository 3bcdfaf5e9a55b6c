//! `run --check-sharing`: the worker sharing policy checked, not assumed,
//! and the measurement it reads.
//!
//! Every selected clause runs twice: once on fresh workers (the *fresh*
//! side, a plain `--workers fresh` run), and once under the policy with
//! the rules that only a check can lift lifted (the *shared* side: every
//! clause that [`may_share_once_checked`] runs on reset, reused workers,
//! incidental clauses and value comparisons included; the rest on fresh
//! ones, as in a policy run). The clauses that ran on reused workers are
//! compared step by step, as `differential` compares two backends; what
//! was found, clause by clause, is [`CheckedClauses`], the file the policy
//! reads (`sharing-checked.txt`): a clause identical in every dialect
//! compared shares from then on, one that differed keeps fresh processes
//! with the difference as its reason.
//!
//! The shared side is the run the policy will make once these results are
//! in force, as long as nothing differed: its time is the policy's time.
//! The fresh side is the whole selection on fresh workers, the baseline
//! whose verdicts a policy run must match.

use crate::catalogue::Clause;
use crate::differential::{self, DifferentialReport};
use crate::model::{ClauseResult, RunReport};
use crate::report::text::outcome_text;
use crate::runner::{self, Observer, RunConfig};
use ipc_harness::sharing::{
    checking, fingerprint, may_share_once_checked, CheckEntry, CheckVerdict, CheckedClauses,
};
use ipc_harness::Backend;
use std::collections::BTreeSet;

/// The clauses that share workers once a check shows them identical, in
/// order: those the check compares.
pub fn shareable<'a>(clauses: &[&'a Clause]) -> Vec<&'a Clause> {
    clauses
        .iter()
        .copied()
        .filter(|c| !c.is_broken() && c.scenario.as_ref().is_some_and(may_share_once_checked))
        .collect()
}

/// What a check found.
pub struct SharingCheck {
    /// Every clause on fresh workers.
    pub fresh: RunReport,
    /// Every clause under the policy, the rules a check lifts lifted.
    pub shared: RunReport,
    /// The [`shareable`] clauses compared: left (`sim` in the
    /// differential's fields) the fresh side, right (`real`) the shared one.
    pub diff: DifferentialReport,
    /// What was found per clause compared, for the policy to read.
    pub checked: CheckedClauses,
}

/// Runs `clauses` on `fresh` (a backend that starts fresh workers for every
/// scenario, dropped once its side has run) and on `shared` (one that
/// reuses workers as the policy says), and compares (see the module docs).
pub fn check(
    clauses: &[&Clause],
    fresh: Box<dyn Backend + '_>,
    shared: Box<dyn Backend + '_>,
    cfg: &RunConfig,
    fresh_observer: &mut dyn Observer,
    shared_observer: &mut dyn Observer,
) -> SharingCheck {
    let fresh_run = runner::run_clauses(clauses, fresh.as_ref(), cfg, fresh_observer);
    // Its idle workers would slow every context the shared side makes.
    drop(fresh);
    let shared_run =
        checking(|| runner::run_clauses(clauses, shared.as_ref(), cfg, shared_observer));
    let compared: BTreeSet<&str> = shareable(clauses).iter().map(|c| c.id.as_str()).collect();
    let only_compared = |r: &RunReport| {
        let results: Vec<ClauseResult> = r
            .results
            .iter()
            .filter(|x| compared.contains(x.id.as_str()))
            .cloned()
            .collect();
        RunReport::new(r.run.clone(), results)
    };
    let diff = differential::compare(only_compared(&fresh_run), only_compared(&shared_run));
    let checked = found(&diff, clauses);
    SharingCheck {
        fresh: fresh_run,
        shared: shared_run,
        diff,
        checked,
    }
}

/// What `diff` found per clause: `identical` when every dialect compared
/// was, `differs` with the first difference otherwise; nothing for a
/// clause with no dialect compared.
fn found(diff: &DifferentialReport, clauses: &[&Clause]) -> CheckedClauses {
    let mut checked = CheckedClauses::default();
    checked.checked_on = Some(checked_on(&diff.real));
    for clause in clauses {
        let Some(scenario) = clause.scenario.as_ref() else {
            continue;
        };
        let mut results = diff
            .compared
            .iter()
            .filter(|c| c.id == clause.id)
            .peekable();
        if results.peek().is_none() {
            continue;
        }
        let difference = results.find_map(|c| {
            let step = c.differences.first().map(|d| {
                let side = |o: &Option<_>| o.as_ref().map_or("(no such step)".into(), outcome_text);
                format!(
                    "{} L{} {}: fresh {} | reused {}",
                    c.dialect,
                    d.line,
                    d.op,
                    side(&d.left),
                    side(&d.right)
                )
            });
            step.or_else(|| {
                (c.sim_status != c.real_status).then(|| {
                    format!(
                        "{}: fresh {} | reused {}",
                        c.dialect,
                        c.sim_status.name(),
                        c.real_status.name()
                    )
                })
            })
        });
        let verdict = match difference {
            Some(what) => CheckVerdict::Differs(one_line(&what)),
            None => CheckVerdict::Identical,
        };
        checked.insert(
            &clause.id,
            CheckEntry {
                fingerprint: fingerprint(scenario),
                verdict,
            },
        );
    }
    checked
}

/// Where a run ran, as the `checked-on` line says it: the GPU and driver.
fn checked_on(run: &crate::model::RunInfo) -> String {
    match (&run.gpu_name, &run.driver_version) {
        (Some(gpu), Some(driver)) => format!("{gpu}, driver {driver}"),
        (Some(gpu), None) => gpu.clone(),
        _ => format!("backend {}", run.backend),
    }
}

/// `text` with every line break a space (the file holds one line a clause).
fn one_line(text: &str) -> String {
    text.split(['\n', '\r']).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{compiled_in_dir, Catalogue};
    use crate::runner::Silent;
    use ipc_mock_driver::{SimBackend, SimConfig};

    fn sim(semantics: &[(&str, &str)]) -> Box<dyn Backend> {
        let mut config = SimConfig::default();
        for (name, value) in semantics {
            config.semantics.set(name, value).expect("a known choice");
        }
        Box::new(SimBackend::new(config))
    }

    fn run(picked: &[&Clause], other: Box<dyn Backend>) -> SharingCheck {
        let cfg = RunConfig::default();
        check(picked, sim(&[]), other, &cfg, &mut Silent, &mut Silent)
    }

    #[test]
    fn shareable_clauses_are_compared_and_identical_ones_recorded() {
        let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
        let all: Vec<&Clause> = cat.clauses.iter().collect();
        let picked = shareable(&all);
        assert!(!picked.is_empty() && picked.len() < all.len());
        assert!(picked.iter().any(|c| c.id == "mem.open.basic"));
        // Incidental clauses and value comparisons are checked too ...
        assert!(picked
            .iter()
            .any(|c| c.id == "mem.open.reopen-same-context"));
        // ... and a clause one of whose processes needs a fresh worker
        // (the importer destroys a context; the exporter may share) ...
        assert!(picked
            .iter()
            .any(|c| c.id == "mem.lifetime.destroyed-context-va-to-next-context"));
        // ... but not one whose every process does what a reset cannot undo.
        assert!(!picked.iter().any(|c| c.id == "mem.context.destroy-primary"));
        let found = run(&all, sim(&[]));
        let report = &found.diff;
        // Both sides ran every clause; only the shareable ones are compared
        // (a clause of another dialect only is not).
        assert_eq!(found.fresh.results.len(), all.len());
        assert_eq!(found.shared.results.len(), all.len());
        assert_eq!(
            report.totals.compared + report.totals.not_compared,
            picked.len()
        );
        assert!(report.totals.compared > picked.len() / 2);
        assert_eq!(
            report.totals.differing,
            0,
            "{:?}",
            differential::difference_lines(report)
        );
        assert_eq!(report.exit_code(), crate::exit::EXIT_OK);
        // Every clause compared is recorded identical, with its fingerprint;
        // nothing else is recorded.
        let entries: Vec<(&str, &CheckEntry)> = found.checked.entries().collect();
        assert!(!entries.is_empty());
        for (id, entry) in &entries {
            let clause = picked
                .iter()
                .find(|c| c.id == *id)
                .expect("a compared clause");
            assert_eq!(entry.verdict, CheckVerdict::Identical, "{id}");
            let scenario = clause.scenario.as_ref().expect("parsed");
            assert_eq!(entry.fingerprint, fingerprint(scenario));
        }
        // Where it ran: the simulator names no driver.
        assert_eq!(found.checked.checked_on, found.shared.run.gpu_name);
        // The file it writes reads back.
        let text = found.checked.to_text();
        assert_eq!(CheckedClauses::parse(&text), Ok(found.checked.clone()));
    }

    #[test]
    fn a_backend_that_behaves_otherwise_is_reported_and_recorded() {
        let cat = Catalogue::load(&compiled_in_dir()).expect("the catalogue loads");
        let all: Vec<&Clause> = cat.clauses.iter().collect();
        let picked = shareable(&all);
        let choice = ipc_mock_driver::SimConfig::default().semantics.describe();
        // Some simulator choice changes some shareable clause's outcome:
        // find one, so the check is shown able to fail.
        let differing = choice.iter().find_map(|c| {
            c.options.iter().filter(|v| **v != c.value).find_map(|v| {
                let found = run(&picked, sim(&[(c.name, v.as_str())]));
                (found.diff.totals.differing > 0).then_some(found)
            })
        });
        let found = differing.expect("no simulator choice changes a shareable clause");
        assert!(!differential::difference_lines(&found.diff).is_empty());
        let differs: Vec<&str> = found
            .checked
            .entries()
            .filter_map(|(id, e)| match &e.verdict {
                CheckVerdict::Differs(what) => {
                    assert!(what.contains(" | reused "), "{id}: {what}");
                    Some(id)
                }
                CheckVerdict::Identical => None,
            })
            .collect();
        for c in &found.diff.compared {
            let recorded = differs.contains(&c.id.as_str());
            if !c.differences.is_empty() {
                assert!(recorded, "{} differed but is not recorded so", c.id);
            }
        }
        assert!(!differs.is_empty());
    }
}
