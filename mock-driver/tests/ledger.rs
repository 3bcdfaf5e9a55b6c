//! The roles ledger on the simulator: every resource a role can leave
//! behind (streams, pools it created or imported, pool allocations,
//! pointers imported from a pool, events, events opened from a handle) is
//! a leak when left and nothing when released the way its clause says.

use ipc_harness::roles::{fail, Kept, Message, RoleCtx, RoleSet, RunOptions, RunReport};
use ipc_harness::{
    event_flags, DevicePtr, Driver, FreeKind, HandleTypes, OutArg, PoolId, StreamId,
};
use ipc_mock_driver::SimBackend;

type Body = fn(&mut RoleCtx) -> ipc_harness::roles::RoleResult;

fn run(body: Body) -> RunReport {
    RoleSet::new()
        .role("worker", 0, body)
        .run(&SimBackend::default(), &RunOptions::seeded(11))
        .unwrap()
}

/// The leak lines of the run (empty when clean).
fn leaks(report: &RunReport) -> Vec<String> {
    report
        .problems()
        .into_iter()
        .filter(|p| p.starts_with("leak in worker"))
        .collect()
}

fn null() -> ipc_harness::roles::RoleResult {
    Ok(serde_json::Value::Null)
}

/// A pool of the role's own, exported and imported again in the same
/// process (roles cannot pass the simulator's descriptors between them),
/// with one allocation and its pointer imported through the imported pool.
fn shared_pool(d: &mut dyn Driver) -> (PoolId, PoolId, DevicePtr, DevicePtr) {
    let pool = d.pool_create(0, HandleTypes::POSIX_FD).unwrap();
    let fd = d.pool_export(pool).unwrap();
    let imported = d.pool_import(fd).unwrap();
    d.fd_close(fd).unwrap();
    let a = d.pool_alloc(pool, 2 << 20).unwrap();
    let x = d.pool_export_ptr(a).unwrap();
    let q = d.pool_import_ptr(imported, x).unwrap();
    (pool, imported, a, q)
}

#[test]
fn a_stream_never_destroyed_is_a_leak() {
    let left = run(|ctx| {
        ctx.driver().stream_create(0)?;
        null()
    });
    let l = leaks(&left);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(
        l[0].contains("stream") && l[0].contains("never destroyed"),
        "{l:?}"
    );
    run(|ctx| {
        let s = ctx.driver().stream_create(0)?;
        ctx.driver().stream_destroy(s)?;
        null()
    })
    .assert_clean();
    let kept = run(|ctx| {
        let s: StreamId = ctx.driver().stream_create(0)?;
        ctx.keep(Kept::Stream(s.0));
        null()
    });
    kept.assert_clean();
}

#[test]
fn every_pool_resource_left_is_a_leak_of_its_own() {
    // pool.import.destroy-imported-pool, pool.lifetime.* say how each goes.
    let left = run(|ctx| {
        shared_pool(ctx.driver());
        null()
    });
    let l = leaks(&left);
    let count = |what: &str| l.iter().filter(|x| x.contains(what)).count();
    assert_eq!(l.len(), 4, "{l:#?}");
    assert_eq!(
        count("imported from a descriptor never destroyed"),
        1,
        "{l:#?}"
    );
    assert_eq!(count("memory pool"), 2, "{l:#?}");
    assert_eq!(count("pool allocation 0x"), 1, "{l:#?}");
    assert_eq!(count("imported from a pool never freed"), 1, "{l:#?}");
}

#[test]
fn pool_resources_released_as_their_clauses_say_leave_nothing() {
    // The imported pointer freed with cudaFree
    // (pool.lifetime.importer-frees-with-cudafree), the allocation with
    // cudaFreeAsync, the imported pool and the pool destroyed.
    run(|ctx| {
        let d = ctx.driver();
        let (pool, imported, a, q) = shared_pool(d);
        d.free(FreeKind::Device, q)?;
        d.pool_free(a)?;
        d.pool_destroy(imported)?;
        d.pool_destroy(pool)?;
        null()
    })
    .assert_clean();
    // The allocation freed with cudaFree
    // (pool.lifetime.cudafree-of-pool-allocation), after the pool's
    // destruction (pool.lifetime.destroy-with-outstanding-allocation).
    run(|ctx| {
        let d = ctx.driver();
        let pool = d.pool_create(0, HandleTypes::NONE)?;
        let a = d.pool_alloc(pool, 2 << 20)?;
        d.pool_destroy(pool)?;
        d.free(FreeKind::Device, a)?;
        null()
    })
    .assert_clean();
    // A default pool is not the role's to destroy.
    run(|ctx| {
        ctx.driver().pool_default(0)?;
        null()
    })
    .assert_clean();
}

#[test]
fn an_event_never_destroyed_is_a_leak() {
    let left = run(|ctx| {
        let flags = event_flags::INTERPROCESS | event_flags::DISABLE_TIMING;
        ctx.driver().event_create(flags)?;
        null()
    });
    let l = leaks(&left);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(
        l[0].contains("event") && l[0].contains("never destroyed"),
        "{l:?}"
    );
    run(|ctx| {
        let d = ctx.driver();
        let e = d.event_create(event_flags::DISABLE_TIMING)?;
        d.event_destroy(e)?;
        null()
    })
    .assert_clean();
}

/// An exporter shares an interprocess event; the importer opens it and,
/// when `destroy`, destroys what it opened.
fn opened_event(destroy: bool) -> RunReport {
    let exporter = |ctx: &mut RoleCtx| {
        let flags = event_flags::INTERPROCESS | event_flags::DISABLE_TIMING;
        let e = ctx.driver().event_create(flags)?;
        let h = ctx.driver().ipc_get_event_handle(e, OutArg::Valid)?;
        ctx.send("importer", Message::event_handle(h))?;
        ctx.recv_from("importer")?;
        ctx.driver().event_destroy(e)?;
        null()
    };
    let importer = move |ctx: &mut RoleCtx| {
        let h = ctx
            .recv_from("exporter")?
            .as_event_handle()
            .ok_or(fail("not an event handle"))?;
        let e = ctx.driver().ipc_open_event_handle(h, OutArg::Valid)?;
        if destroy {
            ctx.driver().event_destroy(e)?;
        }
        ctx.send("exporter", Message::bytes(*b"done"))?;
        null()
    };
    RoleSet::new()
        .role("exporter", 0, exporter)
        .role("importer", 0, importer)
        .run(&SimBackend::default(), &RunOptions::seeded(12))
        .unwrap()
}

#[test]
fn an_event_opened_from_a_handle_never_destroyed_is_a_leak() {
    let left = opened_event(false);
    let problems = left.problems();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("leak in importer: event")
            && problems[0].ends_with("opened from an IPC handle never destroyed"),
        "{problems:#?}"
    );
    opened_event(true).assert_clean();
}
