//! The role runner itself, on mock drivers (no simulator here: it depends
//! on this crate). The buffer-pool example tests it on the simulator.

use super::*;
use crate::calls::MockDriver;
use crate::driver::{DevicePtr, MemKind};
use crate::errors::ErrorKind;
use std::io::{Read, Write};

fn mocks() -> impl FnMut(usize, &ProcessSpec) -> Box<dyn Driver + Send> {
    |_, _| Box::new(MockDriver::new()) as Box<dyn Driver + Send>
}

fn run(set: &RoleSet, opts: &RunOptions) -> RunReport {
    set.run_with_drivers(opts, mocks()).unwrap()
}

#[test]
fn roles_that_all_wait_to_receive_get_a_deadlock_error_not_a_hang() {
    let set = RoleSet::new()
        .role("a", 0, |ctx| {
            Ok(serde_json::json!(ctx.recv_from("b")?.bytes))
        })
        .role("b", 0, |ctx| {
            Ok(serde_json::json!(ctx.recv_from("a")?.bytes))
        });
    let report = run(&set, &RunOptions::seeded(1));
    for role in ["a", "b"] {
        match report.outcome(role) {
            Some(RoleOutcome::Failed(m)) => assert!(m.message.contains("deadlock"), "{m}"),
            other => panic!("{role}: {other:?}"),
        }
    }
}

#[test]
fn a_panicking_role_is_an_outcome_and_its_waiting_peer_is_told() {
    let set = RoleSet::new()
        .role("a", 0, |_| panic!("boom"))
        .role("b", 0, |ctx| {
            Ok(serde_json::json!(ctx.recv_from("a")?.bytes))
        });
    let report = run(&set, &RunOptions::seeded(2));
    assert_eq!(
        report.outcome("a"),
        Some(&RoleOutcome::Panicked("boom".into()))
    );
    match report.outcome("b") {
        Some(RoleOutcome::Failed(m)) => assert!(m.message.contains("ended"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_declarations_are_harness_errors() {
    let twice = RoleSet::new()
        .role("a", 0, |_| Ok(serde_json::Value::Null))
        .role("a", 0, |_| Ok(serde_json::Value::Null));
    assert!(matches!(
        twice.run_with_drivers(&RunOptions::seeded(0), mocks()),
        Err(StartError::Harness(m)) if m.contains("twice")
    ));
    assert!(matches!(
        RoleSet::new().run_with_drivers(&RunOptions::seeded(0), mocks()),
        Err(StartError::Harness(_))
    ));
    let one = RoleSet::new().role("a", 0, |ctx| {
        ctx.send("nobody", Message::bytes(*b"x"))?;
        Ok(serde_json::Value::Null)
    });
    let fault = Fault {
        role: "ghost".into(),
        call: CallKind::Alloc,
        nth: 1,
        error: ErrorKind::OutOfMemory,
    };
    assert!(matches!(
        one.run_with_drivers(&RunOptions::seeded(0).with_fault(fault), mocks()),
        Err(StartError::Harness(m)) if m.contains("ghost")
    ));
    match run(&one, &RunOptions::seeded(0)).outcome("a") {
        Some(RoleOutcome::Failed(m)) => assert!(m.message.contains("unknown role 'nobody'"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn file_descriptors_travel_between_roles() {
    let set = RoleSet::new()
        .role("a", 0, |ctx| {
            let (r, mut w) = std::os::unix::net::UnixStream::pair()?;
            w.write_all(b"through the fd")?;
            ctx.send(
                "b",
                Message {
                    bytes: b"hi".to_vec(),
                    fds: vec![r.into()],
                },
            )?;
            Ok(serde_json::Value::Null)
        })
        .role("b", 0, |ctx| {
            let m = ctx.recv_from("a")?;
            let fd = m.fds.into_iter().next().ok_or(fail("no fd"))?;
            let mut s = std::os::unix::net::UnixStream::from(fd);
            let mut buf = [0u8; 14];
            s.read_exact(&mut buf)?;
            Ok(serde_json::json!(String::from_utf8_lossy(&buf)))
        });
    let report = run(&set, &RunOptions::seeded(3));
    assert_eq!(
        report.outcome("b").and_then(RoleOutcome::value),
        Some(&serde_json::json!("through the fd")),
        "{report}"
    );
}

#[test]
fn a_fault_fails_exactly_the_nth_call_without_reaching_the_driver() {
    let set = RoleSet::new().role("a", 0, |ctx| {
        let results: Vec<bool> = (0..3)
            .map(|_| ctx.driver().alloc(MemKind::Device, 4096).is_ok())
            .collect();
        Ok(serde_json::json!(results))
    });
    let opts = RunOptions::seeded(4).with_fault(Fault {
        role: "a".into(),
        call: CallKind::Alloc,
        nth: 2,
        error: ErrorKind::OutOfMemory,
    });
    let report = set
        .run_with_drivers(&opts, |_, _| {
            let mut m = MockDriver::new();
            // Two calls reach the driver; the faulted one does not.
            let mut next = 0x1000u64;
            m.expect_alloc().times(2).returning(move |_, _| {
                next += 0x1000;
                Ok(DevicePtr(next))
            });
            Box::new(m)
        })
        .unwrap();
    assert_eq!(
        report.outcome("a").and_then(RoleOutcome::value),
        Some(&serde_json::json!([true, false, true]))
    );
    let state = report.state("a").unwrap();
    assert_eq!(state.calls_of(CallKind::Alloc), 3);
    assert_eq!(state.allocations.len(), 2);
}

#[test]
fn an_explicit_schedule_decides_the_order_and_replays() {
    let set = RoleSet::new()
        .role("a", 0, |ctx| {
            ctx.send("c", Message::bytes(*b"a"))?;
            Ok(serde_json::Value::Null)
        })
        .role("b", 0, |ctx| {
            ctx.send("c", Message::bytes(*b"b"))?;
            Ok(serde_json::Value::Null)
        })
        .role("c", 0, |ctx| {
            let first = ctx.recv()?.0;
            let second = ctx.recv()?.0;
            Ok(serde_json::json!([first, second]))
        });
    let order = |choices: Vec<u32>| {
        let opts = RunOptions::seeded(0).with_schedule(Schedule::Choices(choices));
        run(&set, &opts)
            .outcome("c")
            .and_then(RoleOutcome::value)
            .cloned()
    };
    // Earliest-declared first: a sends before b.
    assert_eq!(order(vec![]), Some(serde_json::json!(["a", "b"])));
    // Second ready role first: b sends before a.
    assert_eq!(order(vec![1]), Some(serde_json::json!(["b", "a"])));
    assert_eq!(order(vec![1]), order(vec![1]));
}

#[test]
fn a_planned_crash_stops_the_role_before_the_call_and_its_peer_is_told() {
    let set = RoleSet::new()
        .role("a", 0, |ctx| {
            ctx.send("b", Message::bytes(*b"first"))?;
            ctx.driver().alloc(MemKind::Device, 4096)?;
            ctx.send("b", Message::bytes(*b"after the alloc"))?;
            Ok(serde_json::Value::Null)
        })
        .role("b", 0, |ctx| {
            let first = ctx.recv_from("a")?.bytes;
            let second = ctx.recv_from("a").map(|m| m.bytes);
            Ok(serde_json::json!([first, second.is_err()]))
        });
    let opts = RunOptions::seeded(3).with_crash("a", CallKind::Alloc, 1);
    let report = run(&set, &opts);
    assert_eq!(
        report.outcome("a"),
        Some(&RoleOutcome::Lost(
            "crashed at Alloc number 1 (planned)".into()
        ))
    );
    assert!(report.crashed_as_planned("a"));
    // The call never ran; what the role sent before its death arrives.
    assert_eq!(
        report.state("a").map(|s| s.calls_of(CallKind::Alloc)),
        Some(0)
    );
    assert_eq!(
        report.outcome("b").and_then(RoleOutcome::value),
        Some(&serde_json::json!([b"first".to_vec(), true]))
    );
    // The crash is the test's own: the run is clean.
    assert!(report.is_clean(), "{report}");
}

#[test]
fn a_crash_the_run_did_not_reach_leaves_the_role_alone() {
    let set = RoleSet::new().role("a", 0, |ctx| {
        ctx.driver().alloc(MemKind::Device, 4096)?;
        Ok(serde_json::json!("done"))
    });
    let opts = RunOptions::seeded(4).with_crash("a", CallKind::Alloc, 2);
    let report = set
        .run_with_drivers(&opts, |_, _| {
            let mut m = MockDriver::new();
            m.expect_alloc()
                .times(1)
                .returning(|_, _| Ok(DevicePtr(0x1000)));
            Box::new(m)
        })
        .unwrap();
    assert_eq!(
        report.outcome("a").and_then(RoleOutcome::value),
        Some(&serde_json::json!("done"))
    );
}

#[test]
fn bad_crash_plans_are_harness_errors() {
    let set = || RoleSet::new().role("a", 0, |_| Ok(serde_json::Value::Null));
    let cases = [
        (
            RunOptions::seeded(0).with_crash("nobody", CallKind::Alloc, 1),
            "not declared",
        ),
        (
            RunOptions::seeded(0).with_crash("a", CallKind::Alloc, 0),
            "count from 1",
        ),
        (
            RunOptions::seeded(0)
                .with_crash("a", CallKind::Alloc, 1)
                .with_crash("a", CallKind::Free, 1),
            "two crashes",
        ),
    ];
    for (opts, words) in cases {
        match set().run_with_drivers(&opts, mocks()) {
            Err(StartError::Harness(m)) => assert!(m.contains(words), "{m}"),
            other => panic!("{words}: {:?}", other.map(|r| r.outcomes)),
        }
    }
}

/// A role that returns the driver error it got (`?`) failed: that is one
/// problem, not also an undeclared driver error. An error it swallowed
/// and then failed for another reason still counts.
#[test]
fn an_error_a_role_returns_is_reported_once() {
    let set = RoleSet::new()
        .role("returns", 0, |ctx| {
            ctx.driver().ipc_close_mem_handle(DevicePtr(0x1000))?;
            Ok(serde_json::Value::Null)
        })
        .role("swallows", 0, |ctx| {
            let _ = ctx.driver().ipc_close_mem_handle(DevicePtr(0x1000));
            Err(fail("gave up"))
        });
    let report = set
        .run_with_drivers(&RunOptions::seeded(5), |_, _| {
            let mut m = MockDriver::new();
            m.expect_dialect()
                .return_const(crate::errors::Dialect::Runtime);
            m.expect_ipc_close_mem_handle().returning(|_| {
                Err(crate::errors::ApiError::new(
                    crate::errors::Dialect::Runtime,
                    ErrorKind::InvalidValue,
                )
                .into())
            });
            Box::new(m)
        })
        .unwrap();
    let problems = report.problems();
    let about = |role: &str| -> Vec<&String> {
        problems
            .iter()
            .filter(|p| p.contains(&format!(" {role}")))
            .collect()
    };
    assert_eq!(about("returns").len(), 1, "{problems:#?}");
    assert!(
        about("returns")[0]
            .starts_with("role returns failed: IpcCloseMemHandle failed with InvalidValue"),
        "{problems:#?}"
    );
    assert_eq!(about("swallows").len(), 2, "{problems:#?}");
    assert!(
        about("swallows")
            .iter()
            .any(|p| p.starts_with("undeclared driver error in swallows")),
        "{problems:#?}"
    );
}
