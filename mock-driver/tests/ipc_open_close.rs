//! Opening handles with damaged bytes, field by field, and handles of another
//! machine: what a scenario cannot write (a byte xor other than 0xff, the
//! numeric codes, handles carried between machines). The rest of opening and
//! closing is scenario files under `tests/scenarios/open/`.

mod common;

use common::*;
use ipc_harness::{Dialect, DriverError, ErrorKind, IPC_HANDLE_SIZE};
use ipc_mock_driver::SimConfig;
use rstest::rstest;
use std::ops::Range;

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
