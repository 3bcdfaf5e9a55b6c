//! Lifetimes: frees, closes and exits in every order, and the hazards the
//! documented undefined behaviour leaves in the log. The tests here assert
//! what a scenario cannot: how many hazards of a kind were logged, at which
//! step and by which process, that the log holds no other kind, a hazard's
//! detail, harness errors and shutdown. The rest is scenario files under
//! `tests/scenarios/lifetimes/`.

mod common;

use common::*;
use ipc_harness::{DriverError, ErrorKind, FreeKind, HazardKind, MemKind, OutArg};
use rstest::rstest;

#[test]
fn free_before_open_opens_while_the_exporter_lives_semantic() {
    let mut m = start_n(3, "freed_export=opens-while-exporter-lives");
    let (a, h) = export(m.as_mut(), 2 * MIB, 0x5c);
    m.driver(0).free(FreeKind::Device, a).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(m.driver(1).read(p, 4).unwrap(), vec![0x5c; 4]);
    assert_eq!(m.driver(1).address_range(p).unwrap(), (p, 2 * MIB));
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    // No mapping holds it now, but the exporter lives: it still opens.
    let q = open(m.as_mut(), 2, h).unwrap();
    assert_eq!(m.driver(2).read(q, 1).unwrap(), vec![0x5c]);
    m.driver(2).ipc_close_mem_handle(q).unwrap();
    // Once the exporter exits, the handle is dead.
    m.exit(0).unwrap();
    assert_eq!(err(open(m.as_mut(), 1, h)), ErrorKind::InvalidHandle);
    // The reads reached memory freed by an API call: logged, one per reader.
    let kinds = hazard_kinds(m.as_ref());
    assert_eq!(
        kinds,
        vec![HazardKind::AccessAfterFree; 2],
        "{:?}",
        m.hazards()
    );
}

#[test]
fn free_while_open_keeps_the_data_for_the_importer_and_logs_a_hazard() {
    let mut m = start_n(3, "");
    let (a, h) = export(m.as_mut(), 2 * MIB, 0x5a);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.begin_step(4);
    m.driver(0).free(FreeKind::Device, a).unwrap();
    let hz = m.hazards().unwrap();
    assert_eq!(hz.len(), 1);
    assert_eq!(
        (hz[0].kind, hz[0].process, hz[0].step),
        (HazardKind::FreeWhileMapped, 0, Some(4))
    );
    // The importer still reads the old bytes, which is itself flagged.
    assert_eq!(m.driver(1).read(p, 4).unwrap(), vec![0x5a; 4]);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 1);
    // The exporter's own pointer is gone.
    assert_eq!(err(m.driver(0).read(a, 4)), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 2);
    // A new importer is refused, as for any handle freed before its open.
    assert_eq!(err(open(m.as_mut(), 2, h)), ErrorKind::InvalidValue);
    // Closing the last mapping releases the memory quietly.
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::FreeWhileMapped), 1);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 2);
    assert_eq!(err(open(m.as_mut(), 2, h)), ErrorKind::InvalidValue);
}

#[test]
fn free_while_open_then_a_new_importer_with_the_opens_semantic() {
    let mut m = start_n(3, "freed_export=opens-while-exporter-lives");
    let (a, h) = export(m.as_mut(), 2 * MIB, 0x5a);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(0).free(FreeKind::Device, a).unwrap();
    // The new importer opens; what it reads is flagged as after the free.
    let q = open(m.as_mut(), 2, h).unwrap();
    assert_eq!(m.driver(2).read(q, 4).unwrap(), vec![0x5a; 4]);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 1);
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    m.driver(2).ipc_close_mem_handle(q).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::FreeWhileMapped), 1);
}

#[test]
fn freeing_a_neighbour_of_a_mapped_allocation_is_also_flagged() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(0).free(FreeKind::Device, b).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::FreeWhileMapped), 1);
    // The exported allocation itself is still live: no access-after-free.
    m.driver(1).read(p, 16).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 0);
    // The exporter's stale pointer to b is named as such.
    assert_eq!(err(m.driver(0).read(b, 1)), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 1);
}

#[test]
fn double_close_is_refused_and_access_after_close_is_flagged() {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(p)),
        ErrorKind::InvalidValue
    );
    assert_eq!(err(m.driver(1).memset(p, 0, 1)), ErrorKind::InvalidValue);
    assert_eq!(err(m.driver(1).write(p, &[1])), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterClose), 2);
    // A kernel touching it reads zeros (measured: mem.close.kernel-read-after-close).
    assert_eq!(m.driver(1).device_read(p, 1).unwrap(), vec![0]);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterClose), 3);
}

#[rstest]
#[case::lowest_fit("", true)]
#[case::never("va_reuse=never", false)]
fn reopen_after_last_close_maps_again(#[case] settings: &str, #[case] same_address: bool) {
    // Measured (va_reuse=lowest-fit): the closed mapping's address comes back.
    let mut m = start(settings);
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0x44);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    assert_eq!(err(m.driver(1).read(p, 1)), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterClose), 1);
    let q = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(q == p, same_address);
    assert_eq!(m.driver(1).read(q, 1).unwrap(), vec![0x44]);
    // The old pointer is live again only where its address was reused.
    assert_eq!(m.driver(1).read(p, 1).is_ok(), same_address);
    let stale = if same_address { 1 } else { 2 };
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterClose), stale);
}

#[test]
fn cuda_free_on_an_ipc_pointer() {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(
        err(m.driver(1).free(FreeKind::Device, p)),
        ErrorKind::InvalidValue
    );
    assert_eq!(count(m.as_ref(), HazardKind::FreeOfIpcPointer), 1);
    // Still mapped.
    m.driver(1).read(p, 1).unwrap();
    m.driver(1).ipc_close_mem_handle(p).unwrap();

    let mut m = start("free_of_ipc_pointer=unmaps");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).free(FreeKind::Device, p).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::FreeOfIpcPointer), 1);
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(p)),
        ErrorKind::InvalidValue
    );
}

#[rstest]
#[case::refcount("", 1)]
#[case::new_mapping("reopen=new-mapping", 2)]
fn importer_exit_with_open_mappings_leaks_them(#[case] settings: &str, #[case] mappings: usize) {
    let mut m = start(settings);
    let (a, h) = export(m.as_mut(), 2 * MIB, 1);
    open(m.as_mut(), 1, h).unwrap();
    open(m.as_mut(), 1, h).unwrap();
    m.begin_step(9);
    m.exit(1).unwrap();
    // One hazard per mapping still open.
    let hz = m.hazards().unwrap();
    assert_eq!(hz.len(), mappings);
    for x in &hz {
        assert_eq!(
            (x.kind, x.process, x.step),
            (HazardKind::MappingLeakedAtExit, 1, Some(9))
        );
    }
    if mappings == 1 {
        assert!(hz[0].detail.contains("2 open(s)"), "{}", hz[0].detail);
    }
    // The exporter can free without a free-while-mapped hazard now.
    m.driver(0).free(FreeKind::Device, a).unwrap();
    assert_eq!(hz.len(), m.hazards().unwrap().len());
}

#[test]
fn shutdown_does_not_record_leaks() {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    open(m.as_mut(), 1, h).unwrap();
    m.shutdown();
    assert!(hazard_kinds(m.as_ref()).is_empty());
}

#[test]
fn calls_on_an_exited_process_are_harness_errors() {
    let mut m = start("");
    m.exit(1).unwrap();
    assert_eq!(
        m.driver(1).device_count(),
        Err(DriverError::Harness("process exited".into()))
    );
    assert!(matches!(m.exit(1), Err(DriverError::Harness(_))));
    assert!(matches!(m.exit(99), Err(DriverError::Harness(_))));
    assert!(matches!(
        m.driver(99).device_count(),
        Err(DriverError::Harness(_))
    ));
    // The other process is unaffected.
    assert_eq!(m.driver(0).device_count().unwrap(), 2);
}

#[test]
fn destroying_a_context_frees_its_memory_and_closes_its_mappings() {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let primary = m.driver(1).current_context().unwrap();
    let c = m.driver(1).create_context(0).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    let own = m.driver(1).alloc(MemKind::Device, 64).unwrap();
    m.driver(1).destroy_context(c).unwrap();
    // Popped from the context stack: the context current before its
    // creation is current again (vmm.create.without-current-context).
    assert_eq!(m.driver(1).current_context().unwrap(), primary);
    m.driver(1)
        .set_current_context(ipc_harness::ContextId(0))
        .unwrap();
    assert_eq!(m.driver(1).current_context().unwrap(), None);
    assert_eq!(
        err(m.driver(1).alloc(MemKind::Device, 64)),
        ErrorKind::InvalidContext
    );
    assert_eq!(err(m.driver(1).address_range(own)), ErrorKind::NotFound);
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(p)),
        ErrorKind::InvalidValue
    );
    // Measured: setting it current is accepted (mem.context.set-destroyed);
    // it still cannot be used.
    m.driver(1).set_current_context(c).unwrap();
    assert_eq!(
        err(m.driver(1).alloc(MemKind::Device, 64)),
        ErrorKind::InvalidContext
    );
    assert_eq!(
        err(m.driver(1).destroy_context(c)),
        ErrorKind::InvalidContext
    );
    // The primary context may now open it (the other context is gone).
    m.driver(1).set_device(0).unwrap();
    open(m.as_mut(), 1, h).unwrap();
    // The close after the destroy closed nothing: the destroy had.
    assert_eq!(hazard_kinds(m.as_ref()), vec![HazardKind::DoubleClose]);
}

#[test]
fn exporter_destroying_its_context_while_mapped_is_a_free_while_mapped() {
    let mut m = start("");
    let c = m.driver(0).create_context(0).unwrap();
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0x31);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(0).destroy_context(c).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::FreeWhileMapped), 1);
    assert_eq!(m.driver(1).read(p, 1).unwrap(), vec![0x31]);
}

#[test]
fn double_free_and_wrong_free_kinds() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 64).unwrap();
    let host = m.driver(0).alloc(MemKind::PinnedHost, 64).unwrap();
    let pool = m.driver(0).alloc(MemKind::StreamOrdered, 64).unwrap();
    let managed = m.driver(0).alloc(MemKind::Managed, 64).unwrap();
    assert_eq!(
        err(m.driver(0).free(FreeKind::Host, a)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m.driver(0).free(FreeKind::StreamOrdered, a)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m.driver(0).free(FreeKind::Device, host)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m.driver(0).free(FreeKind::Device, a.offset(8))),
        ErrorKind::InvalidValue
    );
    m.driver(0).free(FreeKind::Device, a).unwrap();
    assert_eq!(
        err(m.driver(0).free(FreeKind::Device, a)),
        ErrorKind::InvalidValue
    );
    m.driver(0).free(FreeKind::Host, host).unwrap();
    m.driver(0).free(FreeKind::StreamOrdered, pool).unwrap();
    m.driver(0).free(FreeKind::Device, managed).unwrap();
    // Wrong kinds and interior pointers are errors; only the second free of
    // `a` is a double free (mem.lifetime.double-free).
    assert_eq!(hazard_kinds(m.as_ref()), vec![HazardKind::DoubleFree]);
}
