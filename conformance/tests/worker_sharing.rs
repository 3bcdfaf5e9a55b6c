//! The worker sharing policy (`ipc_harness::sharing`) on the real catalogue:
//! which clauses may run on reset, reused CUDA workers, and why the others
//! get fresh processes.

use ipc_conformance::catalogue::{compiled_in_dir, Catalogue, Clause, Tier};
use ipc_harness::sharing::{
    checking, explain, fingerprint, may_share_once_checked, sharing, sharing_checked, sharing_with,
    worker_fits, CheckVerdict, CheckedClauses, ShareAlso, WorkerSharing, SHARING_CHECKED_ENV,
    WORKERS_KEY,
};

fn catalogue() -> Catalogue {
    Catalogue::load(&compiled_in_dir()).expect("the catalogue loads")
}

fn of(cat: &Catalogue, id: &str) -> WorkerSharing {
    let clause: &Clause = cat
        .clauses
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no clause {id}"));
    sharing(clause.scenario.as_ref().expect("the clause parses"))
}

fn scenario<'a>(cat: &'a Catalogue, id: &str) -> &'a ipc_harness::scenario::Scenario {
    cat.clauses
        .iter()
        .find(|c| c.id == id)
        .and_then(|c| c.scenario.as_ref())
        .unwrap_or_else(|| panic!("no clause {id}, or it does not parse"))
}

fn fresh_reason(cat: &Catalogue, id: &str) -> String {
    match of(cat, id) {
        WorkerSharing::Fresh(why) => why,
        WorkerSharing::Reused => panic!("{id} was let share workers"),
    }
}

#[test]
fn value_only_clauses_share_workers() {
    let cat = catalogue();
    for id in [
        "mem.open.basic",
        "mem.close.double-close",
        "mem.lifetime.free-while-open",
        "vmm.import.other-process",
    ] {
        assert_eq!(of(&cat, id), WorkerSharing::Reused, "{id}");
    }
}

#[test]
fn history_dependent_clauses_get_fresh_workers_with_the_reason() {
    let cat = catalogue();
    // The clause whose verdict changed on reused workers (VA placement):
    // its importer, which destroys a context, takes a fresh worker; its
    // exporter may share once a check shows the clause identical.
    let id = "mem.lifetime.destroyed-context-va-to-next-context";
    let destroyed = scenario(&cat, id);
    let fresh: Vec<bool> = worker_fits(destroyed).iter().map(|f| f.fresh).collect();
    assert_eq!(fresh, vec![false, true]);
    // (As the check's shared side runs it.)
    let shown = checking(|| explain(destroyed));
    assert!(
        shown.starts_with("reused; process 'importer' fresh (line 17: a destroyed context's VA goes to the next one"),
        "{shown}"
    );
    match sharing_checked(destroyed, ShareAlso::CONFIRMED, None) {
        WorkerSharing::Reused => {}
        other => panic!("{id}: {other}"),
    }
    // A value comparison holds a clause back until a check: with no check
    // results, the reason is the rule.
    let reopen = cat
        .clauses
        .iter()
        .find(|c| c.id == "mem.open.reopen-same-context")
        .and_then(|c| c.scenario.as_ref())
        .expect("the clause parses");
    match sharing_checked(
        reopen,
        ShareAlso::CONFIRMED,
        Some(&CheckedClauses::default()),
    ) {
        WorkerSharing::Fresh(why) => assert!(why.contains("'== p' compares values"), "{why}"),
        WorkerSharing::Reused => panic!("mem.open.reopen-same-context shares unchecked"),
    }
    // The clause the GPU's check found to differ on reused workers (there
    // a spare context served ctx_create, and the malloc after it got the
    // freed address): its process needs a new context, so it takes only
    // a worker that never made one, and it waits for a check of that.
    let id = "mem.lifetime.va-reuse-per-context";
    let placement = scenario(&cat, id);
    let fits = worker_fits(placement);
    assert!(fits.iter().all(|f| f.new_contexts && !f.fresh), "{fits:?}");
    match sharing_checked(
        placement,
        ShareAlso::CONFIRMED,
        Some(&CheckedClauses::default()),
    ) {
        WorkerSharing::Fresh(why) => assert!(why.contains("not shown identical"), "{why}"),
        WorkerSharing::Reused => panic!("{id} shares unchecked"),
    }
    // Fixed rules measured on the GPU: memory pools in an undefined
    // scenario or destroyed with an allocation outstanding (the others
    // share), and damaged handles of an exporter that made VMM allocations.
    let pool = fresh_reason(&cat, "pool.lifetime.import-after-exporter-free");
    assert!(
        pool.contains("memory pools in a scenario whose behaviour is undefined"),
        "{pool}"
    );
    let deferred = fresh_reason(&cat, "pool.lifetime.destroy-with-outstanding-allocation");
    assert!(deferred.contains("allocation outstanding"), "{deferred}");
    let round_trip = scenario(&cat, "pool.share.round-trip");
    assert_eq!(
        sharing_with(round_trip, ShareAlso::CONFIRMED),
        WorkerSharing::Reused
    );
    match sharing_with(round_trip, ShareAlso::default()) {
        WorkerSharing::Fresh(why) => {
            assert!(why.contains("memory pools on a reset worker"), "{why}")
        }
        WorkerSharing::Reused => panic!("pool.share.round-trip shares under the strict policy"),
    }
    let flip = fresh_reason(&cat, "mem.handle.check-word-with-vmm-allocation");
    assert!(flip.contains("VMM allocations"), "{flip}");
    // A spare context serves a reused worker's ctx_create: a process that
    // makes contexts where values are compared takes only a worker that
    // never made one, and the clause waits for a check as any comparison
    // does; ...
    let id = "vmm.export.descriptor-after-ctx-create";
    let spare = scenario(&cat, id);
    assert!(worker_fits(spare)
        .iter()
        .all(|f| f.new_contexts && !f.fresh));
    match sharing_checked(
        spare,
        ShareAlso::CONFIRMED,
        Some(&CheckedClauses::default()),
    ) {
        WorkerSharing::Fresh(why) => assert!(why.contains("not shown identical"), "{why}"),
        WorkerSharing::Reused => panic!("{id} shares unchecked"),
    }
    // ... one that opens a damaged handle keeps a fresh process, whatever
    // a check found.
    // Only the process that creates contexts: the others may share.
    let spare = scenario(&cat, "mem.handle.memory-type-before-context-rules");
    let shown = explain(spare);
    assert!(
        shown.contains("fresh (line")
            && shown.contains("spare context")
            && shown.contains("damaged handle"),
        "{shown}"
    );
    assert!(worker_fits(spare).iter().any(|f| !f.fresh), "{shown}");
    let base = cat
        .clauses
        .iter()
        .find(|c| c.id == "mem.suballoc.aligned-2mib")
        .and_then(|c| c.scenario.as_ref())
        .expect("the clause parses");
    match sharing_checked(base, ShareAlso::CONFIRMED, Some(&CheckedClauses::default())) {
        WorkerSharing::Fresh(why) => assert!(why.contains("'base == p'"), "{why}"),
        WorkerSharing::Reused => panic!("mem.suballoc.aligned-2mib shares unchecked"),
    }
    let peer = fresh_reason(&cat, "multidev.peer.enable");
    assert!(peer.contains("peer access outlives a reset"), "{peer}");
}

#[test]
fn interprocess_events_share_workers_unless_the_strict_policy_is_asked_for() {
    let cat = catalogue();
    let id = "event.order.stream-wait";
    let clause = cat.clauses.iter().find(|c| c.id == id).expect("the clause");
    let scenario = clause.scenario.as_ref().expect("the clause parses");
    // The default: a reset destroys the events (confirmed by --check-sharing).
    assert_eq!(
        sharing_with(scenario, ShareAlso::CONFIRMED),
        WorkerSharing::Reused
    );
    // IPC_CONFORMANCE_SHARE_ALSO=none: every rule of the policy is on.
    match sharing_with(scenario, ShareAlso::default()) {
        WorkerSharing::Fresh(why) => assert!(why.contains("interprocess event"), "{why}"),
        WorkerSharing::Reused => panic!("{id} shares workers under the strict policy"),
    }
}

#[test]
fn incidental_clauses_and_value_comparisons_share_only_once_checked() {
    let cat = catalogue();
    let checked = CheckedClauses::compiled_in();
    assert_eq!(
        CheckedClauses::in_force(),
        &checked,
        "no {SHARING_CHECKED_ENV} in the tests' environment"
    );
    let (mut reused, mut held_back) = (0, 0);
    for c in &cat.clauses {
        let Some(scenario) = c.scenario.as_ref() else {
            continue;
        };
        if let Some(v) = scenario.meta.get(WORKERS_KEY) {
            assert_eq!(v.trim(), "fresh", "{}: unknown '# workers: {v}'", c.id);
        }
        let s = sharing(scenario);
        // Without a check's result nothing but the fixed rules decides.
        let unchecked = sharing_checked(
            scenario,
            ShareAlso::CONFIRMED,
            Some(&CheckedClauses::default()),
        );
        let entry = checked
            .get(&c.id)
            .filter(|e| e.fingerprint == fingerprint(scenario));
        match (&unchecked, &s) {
            (WorkerSharing::Fresh(_), WorkerSharing::Reused) => assert_eq!(
                entry.map(|e| &e.verdict),
                Some(&CheckVerdict::Identical),
                "{} shares without a check",
                c.id
            ),
            (WorkerSharing::Reused, WorkerSharing::Fresh(why)) => {
                assert!(
                    why.starts_with("differs on reused workers"),
                    "{}: {why}",
                    c.id
                )
            }
            _ => {}
        }
        if c.tier == Some(Tier::Incidental) && entry.is_none() {
            held_back += 1;
            match &s {
                WorkerSharing::Fresh(why) => assert!(
                    may_share_once_checked(scenario) == why.contains("not shown identical"),
                    "{}: {why}",
                    c.id
                ),
                WorkerSharing::Reused => panic!("{} shares unchecked", c.id),
            }
        }
        reused += usize::from(s.is_reused());
    }
    // Most of the gate shares workers; not a hard-coded count, a floor.
    assert!(reused >= 15, "only {reused} clauses share workers");
    assert!(held_back + checked.entries().count() > 0);
}
