//! The buffer pool on the simulator: the correct pool passes under many
//! schedules, and each deliberate mistake is caught by the harness (hazard
//! log, final state or call counts). Replay a failure with the seed it prints
//! (`IPC_HARNESS_SEED=<n>`).

mod common;

use common::{assert_pool_correct, consumers, BUFFERS, CONSUMERS};
use ipc_example_buffer_pool::{pool_roles, Variant, BUFFER_SIZE};
use ipc_harness::roles::{CallKind, Fault, RunOptions, RunReport};
use ipc_harness::{Dialect, ErrorKind, HazardKind};
use ipc_mock_driver::SimBackend;

fn run_sim(variant: Variant, opts: &RunOptions) -> RunReport {
    pool_roles(variant, CONSUMERS, BUFFERS)
        .run(&SimBackend::default(), opts)
        .unwrap_or_else(|e| panic!("the simulator refused the machine: {e:?}"))
}

#[test]
fn the_correct_pool_is_clean_under_many_schedules_in_both_dialects() {
    for dialect in [Dialect::Runtime, Dialect::Driver] {
        for seed in 0..16 {
            let report = pool_roles(Variant::Correct, CONSUMERS, BUFFERS)
                .dialect(dialect)
                .run(&SimBackend::default(), &RunOptions::seeded(seed))
                .unwrap();
            assert_pool_correct(&report);
        }
    }
}

#[test]
fn a_run_replays_exactly_from_its_seed() {
    let a = run_sim(Variant::FreeOnFirstRelease, &RunOptions::seeded(5));
    let b = run_sim(Variant::FreeOnFirstRelease, &RunOptions::seeded(5));
    assert_eq!(a, b);
    let other = (6..40).map(|s| run_sim(Variant::Correct, &RunOptions::seeded(s)).events);
    let first = run_sim(Variant::Correct, &RunOptions::seeded(5)).events;
    assert!(
        other.into_iter().any(|e| e != first),
        "different seeds explore different interleavings"
    );
}

#[test]
fn opening_without_the_cache_is_caught_as_leaked_mappings_and_extra_opens() {
    let report = run_sim(Variant::NoCache, &RunOptions::seeded(1));
    let leaks = report.hazards_of(HazardKind::MappingLeakedAtExit);
    assert_eq!(
        leaks.len(),
        CONSUMERS * BUFFERS as usize,
        "one leaked mapping per buffer per consumer:\n{report}"
    );
    for c in consumers() {
        let s = report.state(&c).unwrap();
        assert_eq!(s.calls_of(CallKind::IpcOpenMemHandle), 2 * BUFFERS as usize);
        assert_eq!(s.mappings.len(), BUFFERS as usize, "{report}");
        assert!(s.mappings.values().all(|m| m.open_count == 1));
    }
}

#[test]
fn closing_from_the_wrong_process_is_caught() {
    let report = run_sim(Variant::CloseFromOwner, &RunOptions::seeded(2));
    let owner = report.state("owner").unwrap();
    assert_eq!(
        owner.calls_of(CallKind::IpcCloseMemHandle),
        CONSUMERS * BUFFERS as usize
    );
    // The owner's closes fail (nothing of its own is mapped there); the
    // consumers' mappings stay open and leak at exit.
    assert_eq!(
        report.hazards_of(HazardKind::MappingLeakedAtExit).len(),
        CONSUMERS * BUFFERS as usize,
        "{report}"
    );
}

#[test]
fn freeing_while_a_consumer_holds_the_mapping_is_caught_by_some_schedule() {
    // Whether the early free hits a consumer still holding the buffer
    // depends on the interleaving: explore schedules until one does.
    let caught = (0..64).find_map(|seed| {
        let report = run_sim(Variant::FreeOnFirstRelease, &RunOptions::seeded(seed));
        let hit = !report.hazards_of(HazardKind::FreeWhileMapped).is_empty() || !report.all_ok();
        hit.then_some(report)
    });
    let report = caught.expect("no schedule in 64 showed the early free");
    assert!(!report.is_clean());
    // The correct pool is clean on every one of those schedules.
    for seed in 0..64 {
        assert_pool_correct(&run_sim(Variant::Correct, &RunOptions::seeded(seed)));
    }
}

#[test]
fn sharing_a_sub_allocated_buffer_exposes_its_neighbours() {
    let report = run_sim(Variant::SubAllocated, &RunOptions::seeded(3));
    // The protocol itself works: every consumer read its own pattern.
    assert!(report.all_ok(), "{report}");
    for c in consumers() {
        let reach = report.state(&c).unwrap().widest_mapping();
        assert_eq!(
            reach,
            BUFFER_SIZE * u64::from(BUFFERS),
            "{c} reaches the whole slab, every other buffer included"
        );
    }
}

#[test]
fn every_broken_variant_is_caught_and_only_those() {
    for variant in Variant::ALL {
        let caught = (0..64).any(|seed| {
            let r = run_sim(variant, &RunOptions::seeded(seed));
            !r.is_clean()
                || consumers()
                    .iter()
                    .any(|c| r.state(c).unwrap().widest_mapping() > BUFFER_SIZE)
        });
        assert_eq!(caught, variant != Variant::Correct, "{variant:?}");
    }
}

#[test]
fn too_many_peers_on_the_third_open_is_handled() {
    let opts = RunOptions::seeded(4).with_fault(Fault {
        role: "consumer-0".into(),
        call: CallKind::IpcOpenMemHandle,
        nth: 3,
        error: ErrorKind::TooManyPeers,
    });
    let report = run_sim(Variant::Correct, &opts);
    report.assert_clean();
    let value = report
        .outcome("consumer-0")
        .and_then(|o| o.value())
        .unwrap();
    assert_eq!(value["refused"], 1, "{report}");
    assert_eq!(
        report.outcome("owner").and_then(|o| o.value()),
        Some(&serde_json::json!({ "freed": BUFFERS }))
    );
}

/// What `widest_mapping` cannot see: small allocations the driver packed
/// into one block. A kernel reading past its buffer reaches the neighbour,
/// and the simulator logs it.
#[test]
fn a_kernel_read_past_a_small_shared_buffer_is_logged_as_outside_own_range() {
    use ipc_harness::roles::{fail, Message, RoleSet};
    use ipc_harness::{FreeKind, MemKind, OutArg, IPC_MEM_LAZY_ENABLE_PEER_ACCESS};
    let roles = RoleSet::new()
        .role("owner", 0, |ctx| {
            let d = ctx.driver();
            let small = d.alloc(MemKind::Device, 4096)?;
            let neighbour = d.alloc(MemKind::Device, 4096)?;
            let h = d.ipc_get_mem_handle(small, OutArg::Valid)?;
            ctx.send("consumer", Message::handle(h))?;
            ctx.recv_from("consumer")?;
            ctx.driver().free(FreeKind::Device, small)?;
            ctx.driver().free(FreeKind::Device, neighbour)?;
            Ok(serde_json::Value::Null)
        })
        .role("consumer", 0, |ctx| {
            let h = ctx
                .recv_from("owner")?
                .as_handle()
                .ok_or(fail("not a handle"))?;
            let d = ctx.driver();
            let p = d.ipc_open_mem_handle(h, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)?;
            let read = d.device_read(p, 8192).is_ok();
            d.ipc_close_mem_handle(p)?;
            ctx.send("owner", Message::bytes(*b"done"))?;
            Ok(serde_json::json!({ "read": read }))
        });
    let report = roles
        .run(&SimBackend::default(), &RunOptions::seeded(8))
        .unwrap();
    assert!(report.all_ok(), "{report}");
    assert_eq!(report.state("consumer").unwrap().widest_mapping(), 4096);
    let outside = report.hazards_of(HazardKind::OutsideOwnRange);
    assert_eq!(outside.len(), 1, "{report}");
    assert_eq!(report.roles[outside[0].process], "consumer");
}
