//! A user's own backend around the simulator (docs/testing-your-code.md,
//! "Your own backend"): a hook changes the driver calls it overrides and
//! nothing else, whatever the backend calls itself.

use ipc_conformance::catalogue::{Catalogue, ClauseKind};
use ipc_conformance::runner::run_clause;
use ipc_harness::hooks::{DriverHook, HookedBackend};
use ipc_harness::roles::{fail, Message, RoleSet, RunOptions};
use ipc_harness::{
    event_flags, ApiError, CallKind, DevicePtr, Dialect, Driver, DriverResult, ErrorKind,
    IpcMemHandle, MemKind, OutArg, Status,
};
use ipc_mock_driver::SimBackend;
use std::path::Path;
use std::time::Duration;

/// The guide's worked example: every second `ipc_open` of a process fails
/// with TooManyPeers, as on a machine whose peer connections run out.
#[derive(Default)]
struct FlakyOpens {
    opens: u32,
}

impl DriverHook for FlakyOpens {
    fn ipc_open_mem_handle(
        &mut self,
        inner: &mut dyn Driver,
        handle: IpcMemHandle,
        flags: u32,
        out: OutArg,
    ) -> DriverResult<DevicePtr> {
        self.opens += 1;
        if self.opens % 2 == 0 {
            return Err(ApiError::new(inner.dialect(), ErrorKind::TooManyPeers).into());
        }
        inner.ipc_open_mem_handle(handle, flags, out)
    }
}

/// Changes nothing.
struct PassThrough;
impl DriverHook for PassThrough {}

fn flaky() -> impl ipc_harness::Backend {
    HookedBackend::new("flaky-sim", SimBackend::default(), |_, _| {
        FlakyOpens::default()
    })
}

fn pass_through() -> impl ipc_harness::Backend {
    HookedBackend::new("mine", SimBackend::default(), |_, _| PassThrough)
}

/// An owner shares one allocation; the consumer opens it twice, closing
/// in between.
fn open_twice() -> RoleSet {
    RoleSet::new()
        .role("owner", 0, |ctx| {
            let ptr = ctx.driver().alloc(MemKind::Device, 2 << 20)?;
            let h = ctx.driver().ipc_get_mem_handle(ptr, OutArg::Valid)?;
            ctx.send("consumer", Message::handle(h))?;
            ctx.recv_from("consumer")?;
            ctx.driver().free(ipc_harness::FreeKind::Device, ptr)?;
            Ok(serde_json::Value::Null)
        })
        .role("consumer", 0, |ctx| {
            let h = ctx
                .recv_from("owner")?
                .as_handle()
                .ok_or(fail("not a handle"))?;
            let first = ctx.driver().ipc_open_mem_handle(h, 1, OutArg::Valid)?;
            ctx.driver().ipc_close_mem_handle(first)?;
            let second = ctx.driver().ipc_open_mem_handle(h, 1, OutArg::Valid);
            ctx.send("owner", Message::bytes(*b"done"))?;
            let second = second?;
            ctx.driver().ipc_close_mem_handle(second)?;
            Ok(serde_json::Value::Null)
        })
}

#[test]
fn a_hook_changes_only_the_calls_it_overrides() {
    let report = open_twice().run(&flaky(), &RunOptions::seeded(1)).unwrap();
    assert_eq!(report.backend, "flaky-sim");
    assert_eq!(
        report.failed_with("consumer"),
        Some(ErrorKind::TooManyPeers),
        "{report}"
    );
    // Everything else is the simulator's: its hazard log, the owner's run.
    assert_eq!(report.hazards, Some(Vec::new()), "{report}");
    assert!(
        report.outcome("owner").is_some_and(|o| o.is_ok()),
        "{report}"
    );
    let plain = open_twice()
        .run(&SimBackend::default(), &RunOptions::seeded(1))
        .unwrap();
    plain.assert_clean();
}

/// The exporter of an interprocess event crashes after sending its
/// handle; the importer then opens it. On the simulator a crash is no exit
/// (the runtime's teardown does not run, so the handle still opens:
/// event.lifetime.open-after-exporter-crash); a wrapper that let
/// `Machine::crash` fall back to its default would turn it into an exit.
#[test]
fn a_crash_stays_a_crash_through_the_hook() {
    let roles = || {
        RoleSet::new()
            .role("exporter", 0, |ctx| {
                let flags = event_flags::INTERPROCESS | event_flags::DISABLE_TIMING;
                let e = ctx.driver().event_create(flags)?;
                let h = ctx.driver().ipc_get_event_handle(e, OutArg::Valid)?;
                ctx.send("importer", Message::event_handle(h))?;
                ctx.recv_from("importer")?;
                ctx.driver().synchronize()?;
                Ok(serde_json::Value::Null)
            })
            .role("importer", 0, |ctx| {
                let h = ctx
                    .recv_from("exporter")?
                    .as_event_handle()
                    .ok_or(fail("not an event handle"))?;
                ctx.send("exporter", Message::bytes(*b"go"))?;
                // Wait until the exporter is gone.
                let _ = ctx.recv_from("exporter");
                let opened = ctx.driver().ipc_open_event_handle(h, OutArg::Valid);
                Ok(serde_json::json!(opened.is_ok()))
            })
    };
    let opts = RunOptions::seeded(3).with_crash("exporter", CallKind::Synchronize, 1);
    let plain = roles().run(&SimBackend::default(), &opts).unwrap();
    let hooked = roles().run(&pass_through(), &opts).unwrap();
    assert!(plain.crashed_as_planned("exporter"), "{plain}");
    assert_eq!(
        plain.outcome("importer").and_then(|o| o.value()),
        Some(&serde_json::json!(true)),
        "{plain}"
    );
    assert_eq!(plain.outcomes, hooked.outcomes, "{hooked}");
    assert_eq!(plain.hazards, hooked.hazards, "{hooked}");
}

/// Every clause of the catalogue, in every dialect, answers on a
/// pass-through backend exactly as on the simulator: descriptors travel
/// (`send_fd`, `pidfd_getfd`), hazards name their steps, semantic choices
/// read through, and the clauses measured elsewhere run on it although it
/// is not called `sim`.
#[test]
fn a_pass_through_backend_runs_the_catalogue_as_the_simulator() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clauses");
    let catalogue = Catalogue::load(&dir).expect("the catalogue");
    let (sim, mine) = (SimBackend::default(), pass_through());
    let timeout = Duration::from_secs(20);
    let mut elsewhere = 0;
    let mut differing = Vec::new();
    for clause in &catalogue.clauses {
        for dialect in Dialect::ALL {
            let a = run_clause(clause, &sim, dialect, 1, timeout);
            let b = run_clause(clause, &mine, dialect, 1, timeout);
            if (a.status, &a.message) != (b.status, &b.message) {
                differing.push(format!(
                    "{} [{dialect}]: sim {:?} {} | mine {:?} {}",
                    clause.id, a.status, a.message, b.status, b.message
                ));
            }
            if clause.kind == Some(ClauseKind::MeasuredElsewhere) && b.status == Status::Pass {
                elsewhere += 1;
            }
        }
    }
    assert!(differing.is_empty(), "{differing:#?}");
    assert!(
        elsewhere >= 3,
        "{elsewhere} measured-elsewhere clause runs passed"
    );
}
