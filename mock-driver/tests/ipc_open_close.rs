//! Opening and closing handles: re-opens (refcount by default; new-mapping
//! and error as options), the one-context rule, flags, null out-pointers,
//! malformed and altered handles, and the returned address.

mod common;

use common::*;
use ipc_harness::{
    DevicePtr, Dialect, DriverError, ErrorKind, HazardKind, IpcMemHandle, MemKind, OutArg,
    ProcessLoss, IPC_HANDLE_SIZE,
};
use ipc_mock_driver::{Semantics, SimConfig};
use rstest::rstest;
use std::ops::Range;

#[test]
fn reopen_in_same_context_returns_same_pointer_and_counts() {
    // Documented, and measured on H100 / 580.159.04 (reports/probe/, see its
    // correction): the same pointer, one close per open.
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0xab);
    let p = open(m.as_mut(), 1, h).unwrap();
    let q = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(p, q);
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    // One open is left: the mapping still works.
    assert_eq!(m.driver(1).read(q, 16).unwrap(), vec![0xab; 16]);
    m.driver(1).ipc_close_mem_handle(q).unwrap();
    // Count reached zero: a third close is refused, access is after close.
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(q)),
        ErrorKind::InvalidValue
    );
    assert_eq!(err(m.driver(1).read(q, 16)), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterClose), 1);
}

#[test]
fn reopen_new_mapping_semantic_makes_a_new_mapping_each_time() {
    let mut m = start("reopen=new-mapping");
    let (a, h) = export(m.as_mut(), 2 * MIB, 0xab);
    let p = open(m.as_mut(), 1, h).unwrap();
    let q = open(m.as_mut(), 1, h).unwrap();
    assert_ne!(p, q, "a separate mapping");
    // Both map the same memory.
    m.driver(1).write(p, &[1, 2]).unwrap();
    assert_eq!(m.driver(1).read(q, 3).unwrap(), vec![1, 2, 0xab]);
    assert_eq!(m.driver(0).read(a, 3).unwrap(), vec![1, 2, 0xab]);
    assert_eq!(m.driver(1).address_range(q).unwrap(), (q, 2 * MIB));
    // Each closes once; closing one leaves the other working.
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    assert_eq!(m.driver(1).read(q, 1).unwrap(), vec![1]);
    assert_eq!(err(m.driver(1).read(p, 1)), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterClose), 1);
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(p)),
        ErrorKind::InvalidValue,
        "p was opened once"
    );
    m.driver(1).ipc_close_mem_handle(q).unwrap();
    // A third close is close_unopened.
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(q)),
        ErrorKind::InvalidValue
    );
    assert_eq!(err(m.driver(1).read(q, 1)), ErrorKind::InvalidValue);
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterClose), 2);

    let mut m = start("reopen=new-mapping,close_unopened=NotMapped");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    let q = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    m.driver(1).ipc_close_mem_handle(q).unwrap();
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(q)),
        ErrorKind::NotMapped
    );
}

#[test]
fn reopen_error_semantic_says_already_mapped() {
    let mut m = start("reopen=error");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(err(open(m.as_mut(), 1, h)), ErrorKind::AlreadyMapped);
    // The refused open took no count: one close ends the mapping.
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(p)),
        ErrorKind::InvalidValue
    );
    open(m.as_mut(), 1, h).unwrap();
}

#[test]
fn two_importers_get_their_own_mappings_of_the_same_memory() {
    let mut m = start_n(3, "");
    let (a, h) = export(m.as_mut(), 2 * MIB, 0x11);
    let p1 = open(m.as_mut(), 1, h).unwrap();
    let p2 = open(m.as_mut(), 2, h).unwrap();
    assert_ne!(p1, p2, "distinct processes have distinct address spaces");
    m.driver(1).write(p1, &[9, 8, 7]).unwrap();
    assert_eq!(m.driver(2).read(p2, 4).unwrap(), vec![9, 8, 7, 0x11]);
    assert_eq!(m.driver(0).read(a, 4).unwrap(), vec![9, 8, 7, 0x11]);
}

#[test]
fn second_context_on_same_device_is_refused_by_default() {
    // Measured: CUDA_ERROR_INVALID_HANDLE (400), also for a handle of the
    // same exporter that was never opened before.
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    let c2 = m.driver(1).create_context(0).unwrap();
    assert_eq!(m.driver(1).current_context().unwrap(), Some(c2));
    assert_eq!(err(open(m.as_mut(), 1, h)), ErrorKind::InvalidHandle);
    // Another allocation of the same exporter device is refused too.
    let b = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    let hb = m.driver(0).ipc_get_mem_handle(b, OutArg::Valid).unwrap();
    assert_eq!(err(open(m.as_mut(), 1, hb)), ErrorKind::InvalidHandle);
    // The first context still may open.
    m.driver(1).set_device(0).unwrap();
    let q = open(m.as_mut(), 1, hb).unwrap();
    m.driver(1).ipc_close_mem_handle(q).unwrap();
    // Once the first context's mappings are closed, the second may open.
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    m.driver(1).set_current_context(c2).unwrap();
    open(m.as_mut(), 1, h).unwrap();
}

#[test]
fn second_context_error_is_configurable() {
    let mut m = start("second_context=InvalidContext");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    open(m.as_mut(), 1, h).unwrap();
    m.driver(1).create_context(0).unwrap();
    assert_eq!(err(open(m.as_mut(), 1, h)), ErrorKind::InvalidContext);
}

#[test]
fn second_context_allowed_by_semantic_gets_a_new_mapping() {
    let mut m = start("second_context=allow");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0x22);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).create_context(0).unwrap();
    let q = open(m.as_mut(), 1, h).unwrap();
    assert_ne!(p, q);
    assert_eq!(m.driver(1).read(q, 2).unwrap(), vec![0x22; 2]);
    // Both mappings are open: each closes once.
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    m.driver(1).ipc_close_mem_handle(q).unwrap();
}

#[test]
fn context_on_another_device_may_open_when_peers_can_access() {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0x33);
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).set_device(1).unwrap();
    let q = open(m.as_mut(), 1, h).unwrap();
    assert_ne!(p, q);
    assert_eq!(m.driver(1).read(q, 1).unwrap(), vec![0x33]);
    let info = m.driver(1).pointer_info(q).unwrap();
    assert_eq!(info.device, Some(1));
}

#[test]
fn without_peer_access_a_cross_device_open_is_refused() {
    let config = SimConfig {
        peer_access: false,
        ..SimConfig::default()
    };
    let specs = vec![proc_spec("owner", 0, None), proc_spec("peer", 1, None)];
    let mut m = start_cfg(config, &spec(specs, 1, Dialect::Driver));
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    assert_eq!(
        err(open(m.as_mut(), 1, h)),
        ErrorKind::PeerAccessUnsupported
    );
    m.driver(1).set_device(0).unwrap();
    open(m.as_mut(), 1, h).unwrap();
}

#[test]
fn open_in_the_exporting_process_is_refused() {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    assert_eq!(err(open(m.as_mut(), 0, h)), ErrorKind::InvalidContext);
    let mut m = start("open_in_exporter=InvalidHandle");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    assert_eq!(err(open(m.as_mut(), 0, h)), ErrorKind::InvalidHandle);
}

#[rstest]
// Default lazy-bit, measured: 1 and 3 accepted; 0, 2, 0x80000000 refused.
#[case::lazy("", 1, None)]
#[case::lazy_and_bit_1("", 3, None)]
#[case::zero("", 0, Some(ErrorKind::InvalidValue))]
#[case::two("", 2, Some(ErrorKind::InvalidValue))]
#[case::top_bit("", 0x8000_0000, Some(ErrorKind::InvalidValue))]
// Not measured: lazy-bit ignores every bit but bit 0.
#[case::all_bits("", u32::MAX, None)]
#[case::lazy_or_zero_zero("open_flags=lazy-or-zero", 0, None)]
#[case::lazy_or_zero_lazy("open_flags=lazy-or-zero", 1, None)]
#[case::lazy_or_zero_three("open_flags=lazy-or-zero", 3, Some(ErrorKind::InvalidValue))]
#[case::lazy_only_lazy("open_flags=lazy-only", 1, None)]
#[case::lazy_only_zero("open_flags=lazy-only", 0, Some(ErrorKind::InvalidValue))]
#[case::lazy_only_three("open_flags=lazy-only", 3, Some(ErrorKind::InvalidValue))]
fn open_flags(#[case] settings: &str, #[case] flags: u32, #[case] want: Option<ErrorKind>) {
    let mut m = start(settings);
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0x2f);
    let r = m.driver(1).ipc_open_mem_handle(h, flags, OutArg::Valid);
    match want {
        None => {
            let p = r.unwrap();
            assert_eq!(m.driver(1).read(p, 1).unwrap(), vec![0x2f]);
        }
        Some(k) => assert_eq!(err(r), k),
    }
}

#[test]
fn null_out_arguments() {
    // Measured: the runtime's cudaIpcGetMemHandle writes through a NULL
    // handle pointer once the device pointer checks out: SIGSEGV.
    let mut m = start("");
    let (a, h) = export(m.as_mut(), 2 * MIB, 1);
    match m.driver(0).ipc_get_mem_handle(a, OutArg::Null) {
        Err(DriverError::Lost(ProcessLoss::Crashed { signal, .. })) => {
            assert_eq!(signal, Some(11));
        }
        other => panic!("expected a crash, got {other:?}"),
    }
    assert_eq!(
        m.driver(0).device_count(),
        Err(DriverError::Harness("process exited".into())),
        "the crashed process is gone"
    );
    assert!(m.exit(0).is_err());
    // Its handle died with it; opens take a NULL out-pointer as InvalidValue.
    assert_eq!(err(open(m.as_mut(), 1, h)), ErrorKind::InvalidHandle);
    assert_eq!(
        err(m.driver(1).ipc_open_mem_handle(h, 1, OutArg::Null)),
        ErrorKind::InvalidValue
    );
    assert!(
        hazard_kinds(m.as_ref()).is_empty(),
        "a crash records no leaks"
    );

    // The pointer is checked first: a bad pointer is InvalidValue, no crash.
    let mut m = start("");
    assert_eq!(
        err(m
            .driver(0)
            .ipc_get_mem_handle(DevicePtr(0x1000), OutArg::Null)),
        ErrorKind::InvalidValue
    );
    m.driver(0).device_count().unwrap();

    // The driver API returns InvalidValue.
    let config = SimConfig::default();
    let mut m = start_cfg(config, &spec(procs(2), 1, Dialect::Driver));
    let (a, h) = export(m.as_mut(), 2 * MIB, 1);
    assert_eq!(
        err(m.driver(0).ipc_get_mem_handle(a, OutArg::Null)),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        err(m.driver(1).ipc_open_mem_handle(h, 1, OutArg::Null)),
        ErrorKind::InvalidValue
    );

    // get_null_out=invalid-value: no crash in the runtime either.
    let mut m = start("get_null_out=invalid-value");
    let (a, _h) = export(m.as_mut(), 2 * MIB, 1);
    assert_eq!(
        err(m.driver(0).ipc_get_mem_handle(a, OutArg::Null)),
        ErrorKind::InvalidValue
    );
    m.driver(0).device_count().unwrap();
}

fn garbage() -> IpcMemHandle {
    let mut b = [0u8; 64];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    IpcMemHandle(b)
}

#[rstest]
#[case::zero_default("", IpcMemHandle::ZERO, ErrorKind::InvalidValue)]
#[case::zero_configured(
    "zero_handle_error=InvalidHandle",
    IpcMemHandle::ZERO,
    ErrorKind::InvalidHandle
)]
#[case::garbage_default("", garbage(), ErrorKind::InvalidValue)]
#[case::garbage_configured(
    "garbage_handle_error=CUDA_ERROR_MAP_FAILED",
    garbage(),
    ErrorKind::MapFailed
)]
fn malformed_handles(#[case] settings: &str, #[case] h: IpcMemHandle, #[case] want: ErrorKind) {
    let mut m = start(settings);
    assert_eq!(err(open(m.as_mut(), 1, h)), want);
}

/// What `ipc_open` does with a handle that has one byte changed, by field:
/// the table measured on H100 / driver 580.159.04 (reports/probe/; layout
/// in src/ipc.rs).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Flip {
    /// The handle still opens the same memory.
    Ignored,
    /// `garbage_handle_error` (InvalidValue by default).
    Garbage,
    /// `dead_handle_error` (InvalidHandle by default): an unknown object.
    Dead,
    /// AlreadyMapped (208), whatever the semantics.
    AlreadyMapped,
}

const FLIP_TABLE: [(&str, Range<usize>, Flip); 11] = [
    ("exporter cookie", 0..8, Flip::Ignored),
    ("exporter process index", 8..16, Flip::Ignored),
    ("allocation size", 16..24, Flip::Ignored),
    ("format word", 24..28, Flip::Garbage),
    ("offset in block", 28..31, Flip::AlreadyMapped),
    ("padding", 31..32, Flip::Ignored),
    ("memory type", 32..37, Flip::Garbage),
    ("ff and serial", 37..48, Flip::Ignored),
    ("export object id", 48..52, Flip::Dead),
    ("check word", 52..56, Flip::Garbage),
    ("zero tail", 56..64, Flip::Ignored),
];

#[test]
fn flip_table_covers_every_handle_byte_once() {
    let mut next = 0;
    for (name, bytes, _) in FLIP_TABLE {
        assert_eq!(
            bytes.start, next,
            "{name} starts where the last field ended"
        );
        assert!(bytes.end > bytes.start, "{name}");
        next = bytes.end;
    }
    assert_eq!(next, IPC_HANDLE_SIZE);
}

#[rstest]
#[case::defaults("", ErrorKind::InvalidValue, ErrorKind::InvalidHandle)]
#[case::configured(
    "garbage_handle_error=MapFailed,dead_handle_error=NotMapped",
    ErrorKind::MapFailed,
    ErrorKind::NotMapped
)]
fn one_flipped_handle_byte_by_field(
    #[case] settings: &str,
    #[case] garbage: ErrorKind,
    #[case] dead: ErrorKind,
    #[values(0x01, 0xff)] mask: u8,
) {
    for (name, bytes, flip) in FLIP_TABLE {
        for at in bytes {
            let mut m = start(settings);
            let (a, mut h) = export(m.as_mut(), 2 * MIB, 0x6d);
            h.0[at] ^= mask;
            let r = open(m.as_mut(), 1, h);
            let why = format!("byte {at} ({name}) ^ {mask:#x}");
            match flip {
                Flip::Ignored => {
                    let p = r.unwrap_or_else(|e| panic!("{why}: {e:?}"));
                    // The same memory, with the driver's own idea of its size.
                    assert_eq!(m.driver(1).read(p, 2).unwrap(), vec![0x6d; 2], "{why}");
                    m.driver(1).write(p, &[at as u8]).unwrap();
                    assert_eq!(m.driver(0).read(a, 1).unwrap(), vec![at as u8], "{why}");
                    assert_eq!(m.driver(1).address_range(p).unwrap(), (p, 2 * MIB), "{why}");
                    m.driver(1).ipc_close_mem_handle(p).unwrap();
                }
                Flip::Garbage => assert_eq!(err(r), garbage, "{why}"),
                Flip::Dead => assert_eq!(err(r), dead, "{why}"),
                Flip::AlreadyMapped => assert_eq!(err(r), ErrorKind::AlreadyMapped, "{why}"),
            }
        }
    }
}

#[test]
fn flipped_byte_errors_carry_the_measured_codes() {
    // Codes as the probe printed them (runtime dialect).
    for (at, code, name) in [
        (24, 1, "cudaErrorInvalidValue"),
        (29, 208, "cudaErrorAlreadyMapped"),
        (50, 400, "cudaErrorInvalidResourceHandle"),
        (53, 1, "cudaErrorInvalidValue"),
    ] {
        let mut m = start("");
        let (_a, mut h) = export(m.as_mut(), 2 * MIB, 1);
        h.0[at] ^= 0xff;
        match open(m.as_mut(), 1, h) {
            Err(DriverError::Api(e)) => {
                assert_eq!((e.code, e.name().as_ref()), (code, name), "byte {at}");
            }
            other => panic!("byte {at}: {other:?}"),
        }
    }
}

#[test]
fn handles_from_another_machine_seed_never_open() {
    for seed in 2..10 {
        let mut a = start("");
        let (_p, h) = export(a.as_mut(), 2 * MIB, 1);
        let mut b = start_cfg(
            SimConfig::default(),
            &spec(procs(2), seed, Dialect::Runtime),
        );
        // The other machine has exports of its own.
        let (_q, hb) = export(b.as_mut(), 2 * MIB, 2);
        let kind = err(open(b.as_mut(), 1, h));
        assert!(
            matches!(kind, ErrorKind::InvalidValue | ErrorKind::InvalidHandle),
            "seed {seed}: {kind:?}"
        );
        // An object id that machine knows, under the other seed's check word.
        let mut spliced = h;
        spliced.0[48..52].copy_from_slice(&hb.0[48..52]);
        assert_eq!(
            err(open(b.as_mut(), 1, spliced)),
            ErrorKind::InvalidValue,
            "seed {seed}"
        );
        // The machine's own handle still opens.
        let q = open(b.as_mut(), 1, hb).unwrap();
        assert_eq!(b.driver(1).read(q, 1).unwrap(), vec![2]);
    }
}

#[rstest]
#[case::normal_allocation(false)]
#[case::offset_into_mapping(true)]
fn closing_a_pointer_that_ipc_open_did_not_return(#[case] into_mapping: bool) {
    let mut m = start("");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let p = open(m.as_mut(), 1, h).unwrap();
    let target = if into_mapping {
        p.offset(16)
    } else {
        m.driver(1).alloc(MemKind::Device, 4096).unwrap()
    };
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(target)),
        ErrorKind::InvalidValue
    );
    let mut m = start("close_unopened=NotMapped");
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(DevicePtr(0x1234))),
        ErrorKind::NotMapped
    );
}

#[rstest]
#[case::default("", 0)]
#[case::allocation_base("open_address=allocation-base", 0)]
#[case::block_base("open_address=block-base", 4096)]
fn open_address_for_an_interior_handle(#[case] settings: &str, #[case] allocation_at: u64) {
    let mut m = start(settings);
    // A neighbour first, so the allocation sits 4096 bytes into its block.
    let n = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    m.driver(0).memset(n, 0x11, 4096).unwrap();
    let a = m.driver(0).alloc(MemKind::Device, 8192).unwrap();
    assert_eq!(a.0 - n.0, 4096);
    m.driver(0).write(a, &[0xa0; 8]).unwrap();
    m.driver(0).write(a.offset(4096), &[0xee; 8]).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let hi = m
        .driver(0)
        .ipc_get_mem_handle(a.offset(4096), OutArg::Valid)
        .unwrap();
    // Measured: an interior pointer's handle is the allocation's, byte for byte.
    assert_eq!(hi, h);
    let p = open(m.as_mut(), 1, hi).unwrap();
    let base = p.offset(allocation_at);
    assert_eq!(m.driver(1).read(base, 8).unwrap(), vec![0xa0; 8]);
    assert_eq!(
        m.driver(1).read(base.offset(4096), 8).unwrap(),
        vec![0xee; 8]
    );
    assert_eq!(m.driver(1).address_range(base).unwrap(), (base, 8192));
    if allocation_at > 0 {
        // The block base is the neighbour's memory: a kernel sees it.
        assert_eq!(m.driver(1).device_read(p, 1).unwrap(), vec![0x11]);
    }
    m.driver(1).ipc_close_mem_handle(p).unwrap();
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(p)),
        ErrorKind::InvalidValue
    );
}

#[test]
fn block_base_and_allocation_base_differ_for_a_packed_allocation() {
    let mut m = start("open_address=block-base");
    m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    m.driver(0).memset(b, 0x5b, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(b, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    // The block base is the neighbour's memory: outside the allocation, so
    // a memcpy is refused (memcpy_bounds=allocation) and a kernel sees it.
    assert_eq!(err(m.driver(1).read(p, 1)), ErrorKind::InvalidValue);
    assert_eq!(m.driver(1).device_read(p, 1).unwrap(), vec![0]);
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 1);
    assert_eq!(m.driver(1).read(p.offset(4096), 1).unwrap(), vec![0x5b]);

    let mut m = start("");
    m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    m.driver(0).memset(b, 0x5b, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(b, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(m.driver(1).read(p, 1).unwrap(), vec![0x5b]);
}

#[test]
fn semantics_default_is_what_start_uses() {
    assert_eq!(SimConfig::default().semantics, Semantics::default());
}
