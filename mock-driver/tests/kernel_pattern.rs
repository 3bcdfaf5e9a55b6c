//! The simulated pattern kernel (`kernel_pattern`): its bytes, a word width
//! the kernel cannot take, and its ordering as device work. The scenario
//! forms are under `tests/scenarios/events/` and the catalogue's
//! `mem.kernel.pattern-through-mapping` / `event.order.kernel-pattern-after-wait`.

mod common;

use common::*;
use ipc_harness::{ErrorKind, HazardKind, MemKind, OutArg};

#[test]
fn the_kernel_writes_its_word_and_the_step_per_word() {
    let mut m = start("");
    let buf = m.driver(0).alloc(MemKind::Device, MIB).unwrap();
    m.driver(0)
        .kernel_pattern(buf, 10, 0x0403_0201, 4, 0)
        .unwrap();
    m.driver(0)
        .kernel_pattern(buf.offset(16), 6, 0x0100, 2, 2)
        .unwrap();
    m.driver(0).synchronize().unwrap();
    assert_eq!(
        m.driver(0).read(buf, 22).unwrap(),
        [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5]
    );
}

#[test]
fn a_word_wider_than_eight_bytes_or_empty_is_refused_and_writes_nothing() {
    let mut m = start("");
    let buf = m.driver(0).alloc(MemKind::Device, MIB).unwrap();
    m.driver(0).memset(buf, 0x77, 16).unwrap();
    for width in [0, 9] {
        assert_eq!(
            err(m.driver(0).kernel_pattern(buf, 16, u64::MAX, width, 0)),
            ErrorKind::InvalidValue,
            "width {width}"
        );
    }
    m.driver(0).synchronize().unwrap();
    assert_eq!(m.driver(0).read(buf, 16).unwrap(), [0x77; 16]);
}

#[test]
fn another_processs_read_before_any_sync_is_unsynchronized() {
    let mut m = start("");
    let buf = m.driver(0).alloc(MemKind::Device, 2 * MIB).unwrap();
    m.driver(0).memset(buf, 0, 2 * MIB).unwrap();
    m.driver(0).synchronize().unwrap();
    let h = m.driver(0).ipc_get_mem_handle(buf, OutArg::Valid).unwrap();
    let peer = m
        .driver(1)
        .ipc_open_mem_handle(h, 1, OutArg::Valid)
        .unwrap();
    m.driver(0).kernel_pattern(buf, 64, 0x10, 1, 1).unwrap();
    assert!(hazard_kinds(m.as_ref()).is_empty());
    let _ = m.driver(1).read(peer, 64).unwrap();
    assert_eq!(hazard_kinds(m.as_ref()), [HazardKind::UnsynchronizedRead]);
    m.driver(0).synchronize().unwrap();
    let expected: Vec<u8> = (0x10..0x50).collect();
    assert_eq!(m.driver(1).read(peer, 64).unwrap(), expected);
}
