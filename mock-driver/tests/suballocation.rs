//! Sub-allocation: what IPC shares is the whole underlying block, so small
//! neighbouring allocations leak to importers; 2 MiB ones do not. The tests
//! here assert what a scenario cannot: address arithmetic between pointers
//! (distances, an address below an imported pointer), handle bytes by
//! position, read lengths of unknown bytes, and hazard counts and steps. The
//! rest is scenario files under `tests/scenarios/suballocation/`.

mod common;

use common::*;
use ipc_harness::{
    DevicePtr, ErrorKind, FreeKind, HazardKind, IpcMemHandle, Machine, MemKind, OutArg,
};

#[test]
fn small_allocations_share_a_block_and_importers_see_the_neighbour() {
    let mut m = start("");
    m.begin_step(3);
    let a = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    assert_eq!(b.0 - a.0, 4096, "packed back to back");
    m.driver(0).memset(a, 0xaa, 4096).unwrap();
    m.driver(0).memset(b, 0xbb, 4096).unwrap();
    m.driver(0).synchronize().unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert!(hazard_kinds(m.as_ref()).is_empty());

    m.begin_step(7);
    let seen = m.driver(1).device_read(p, 8192).unwrap();
    assert_eq!(&seen[..4096], &[0xaa; 4096][..]);
    assert_eq!(&seen[4096..], &[0xbb; 4096][..], "the neighbour leaks");
    let hz = m.hazards().unwrap();
    assert_eq!(hz.len(), 1);
    assert_eq!(hz[0].kind, HazardKind::OutsideOwnRange);
    assert_eq!(hz[0].process, 1);
    assert_eq!(hz[0].step, Some(7));

    // A memcpy into the neighbour is refused (memcpy_bounds=allocation,
    // measured): the neighbour is untouched.
    assert_eq!(
        err(m.driver(1).write(p.offset(4096), &[1, 2])),
        ErrorKind::InvalidValue
    );
    assert_eq!(m.driver(0).read(b, 2).unwrap(), vec![0xbb; 2]);
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 1);
}

#[test]
fn block_bounds_let_a_memcpy_write_into_the_neighbour() {
    let mut m = start("memcpy_bounds=block");
    let a = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).write(p.offset(4096), &[1, 2]).unwrap();
    assert_eq!(m.driver(0).read(b, 2).unwrap(), vec![1, 2]);
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 1);
}

#[test]
fn probe_layout_of_four_1000_byte_allocations() {
    // The probe's experiment (reports/probe/h100-580.159.04-probe.txt).
    let mut m = start("");
    let s: Vec<DevicePtr> = (0..4)
        .map(|_| m.driver(0).alloc(MemKind::Device, 1000).unwrap())
        .collect();
    for (i, &x) in s.iter().enumerate() {
        assert_eq!(x.0 - s[0].0, 1024 * i as u64, "1024-byte stride");
        m.driver(0).memset(x, 0xb1 + i as u8, 1000).unwrap();
    }
    let h2 = m.driver(0).ipc_get_mem_handle(s[2], OutArg::Valid).unwrap();
    let h3 = m.driver(0).ipc_get_mem_handle(s[3], OutArg::Valid).unwrap();
    let differ: Vec<usize> = (0..64).filter(|&i| h2.0[i] != h3.0[i]).collect();
    assert_eq!(differ, vec![29], "only the offset field differs");
    assert_eq!(&h2.0[16..24], &1000u64.to_le_bytes(), "the size");

    let q2 = open(m.as_mut(), 1, h2).unwrap();
    assert_eq!(m.driver(1).address_range(q2).unwrap(), (q2, 1000));
    assert_eq!(m.driver(1).read(q2, 1000).unwrap(), vec![0xb3; 1000]);
    assert_eq!(err(m.driver(1).read(q2, 4096)), ErrorKind::InvalidValue);
    let gap = |fill: u8| [vec![fill; 1000], vec![0; 24]].concat();
    assert_eq!(
        m.driver(1).device_read(q2, 2048).unwrap(),
        [gap(0xb3), gap(0xb4)].concat()
    );
    assert_eq!(
        m.driver(1)
            .device_read(DevicePtr(q2.0 - 2048), 2048)
            .unwrap(),
        [gap(0xb1), gap(0xb2)].concat()
    );
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 2);
    // Measured: the neighbour's handle opens into the same mapping.
    let q3 = open(m.as_mut(), 1, h3).unwrap();
    assert_eq!(q3.0 - q2.0, 1024);
    assert_eq!(m.driver(1).address_range(q3).unwrap(), (q3, 1000));
    assert_eq!(m.driver(1).read(q3, 1000).unwrap(), vec![0xb4; 1000]);
    // Each pointer closes once; the mapping goes with the last.
    m.driver(1).ipc_close_mem_handle(q2).unwrap();
    assert_eq!(m.driver(1).read(q3, 1).unwrap(), vec![0xb4]);
    assert_eq!(
        err(m.driver(1).ipc_close_mem_handle(q2)),
        ErrorKind::InvalidValue
    );
    m.driver(1).ipc_close_mem_handle(q3).unwrap();
    assert_eq!(err(m.driver(1).read(q3, 1)), ErrorKind::InvalidValue);
}

/// Process 0 exports a 1000-byte allocation, frees it while a neighbour
/// keeps the block, and allocates again into its slot: the machine, the
/// freed allocation's handle and the new allocation.
fn exported_slot_reused() -> (Box<dyn Machine>, IpcMemHandle, DevicePtr) {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    m.driver(0).free(FreeKind::Device, a).unwrap();
    let c = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
    assert_eq!(c, a, "first fit reuses the slot");
    (m, h, c)
}

#[test]
fn a_handle_of_a_freed_allocation_whose_slot_was_reused_reads_with_a_hazard() {
    // First-fit reuse puts a new allocation in the freed slot; the old handle
    // still opens the block (a neighbour keeps it), and reads the new
    // allocation's memory: access after free (found by the property tests).
    let (mut m, h, _) = exported_slot_reused();
    let p = open(m.as_mut(), 1, h).unwrap();
    let before = count(m.as_ref(), HazardKind::AccessAfterFree);
    m.driver(1).read(p, 1).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), before + 1);
}

#[test]
fn a_reused_slot_exports_the_freed_allocations_bytes_and_opens_cleanly() {
    // mem.suballoc.reused-slot-same-handle: the new allocation's handle is
    // the freed one's, byte for byte; once it is exported, an open of those
    // bytes reaches the new allocation with no hazard.
    let (mut m, h, c) = exported_slot_reused();
    let hc = m.driver(0).ipc_get_mem_handle(c, OutArg::Valid).unwrap();
    assert_eq!(hc, h, "the same bytes");
    let p = open(m.as_mut(), 1, hc).unwrap();
    m.driver(1).read(p, 1).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::AccessAfterFree), 0);
}

#[test]
fn a_full_block_starts_a_new_one() {
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, MIB).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, MIB).unwrap();
    let c = m.driver(0).alloc(MemKind::Device, 512).unwrap();
    assert_eq!(b.0 - a.0, MIB);
    assert!(c.0 >= a.0 + 2 * MIB, "the first block is full");
}

#[test]
fn memcpy_bounds_semantics_for_a_read_past_the_allocation() {
    // Default (measured): a memcpy past the allocation's end is InvalidValue,
    // for the importer and for the exporter alike.
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(err(m.driver(1).read(p, 8192)), ErrorKind::InvalidValue);
    assert_eq!(
        err(m.driver(1).read(p.offset(4095), 2)),
        ErrorKind::InvalidValue
    );
    assert_eq!(err(m.driver(0).read(a, 4097)), ErrorKind::InvalidValue);
    assert_eq!(m.driver(1).read(p, 4096).unwrap().len(), 4096);
    assert!(hazard_kinds(m.as_ref()).is_empty());
    // Kernels are not bounded by the allocation, only by what is mapped.
    assert_eq!(m.driver(1).device_read(p, 8192).unwrap().len(), 8192);
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 1);

    let mut m = start("memcpy_bounds=block");
    let a = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(m.driver(1).read(p, 8192).unwrap().len(), 8192);
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 1);
    assert_eq!(m.driver(0).read(a, 4097).unwrap().len(), 4097);
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 2);
}

#[test]
fn sizes_round_up_to_whole_blocks() {
    // The 1 MiB of slack after a 3 MiB allocation is mapped, in the owner
    // and in the importer, but belongs to no allocation.
    let mut m = start("");
    let a = m.driver(0).alloc(MemKind::Device, 3 * MIB).unwrap();
    assert_eq!(
        err(m.driver(0).write(a.offset(4 * MIB - 1), &[7])),
        ErrorKind::InvalidValue,
        "memcpy_bounds=allocation"
    );
    assert_eq!(
        m.driver(0).device_read(a.offset(4 * MIB - 1), 1).unwrap(),
        vec![0]
    );
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(
        m.driver(1).device_read(p.offset(4 * MIB - 1), 1).unwrap(),
        vec![0]
    );
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 2);
    assert_eq!(
        err(m.driver(1).device_read(p.offset(4 * MIB), 1)),
        ErrorKind::IllegalAddress
    );

    let mut m = start("memcpy_bounds=block");
    let a = m.driver(0).alloc(MemKind::Device, 3 * MIB).unwrap();
    m.driver(0).write(a.offset(4 * MIB - 1), &[7]).unwrap();
    assert_eq!(count(m.as_ref(), HazardKind::OutsideOwnRange), 1);
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(
        m.driver(1).device_read(p.offset(4 * MIB - 1), 1).unwrap(),
        vec![7]
    );
    assert_eq!(
        err(m.driver(1).read(p.offset(4 * MIB), 1)),
        ErrorKind::InvalidValue
    );
}

#[test]
fn suballocation_off_gives_every_allocation_its_own_block() {
    let mut m = start("suballocation=off");
    let a = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    let b = m.driver(0).alloc(MemKind::Device, 4096).unwrap();
    assert!(b.0 - a.0 >= 2 * MIB);
    m.driver(0).memset(b, 0xbb, 4096).unwrap();
    let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    let seen = m.driver(1).device_read(p, 8192).unwrap();
    assert_eq!(
        seen,
        vec![0; 8192],
        "the block tail is the allocation's own slack"
    );
}

#[test]
fn import_range_semantics() {
    for (settings, whole_block) in [("", false), ("import_range=block", true)] {
        let mut m = start(settings);
        m.driver(0).alloc(MemKind::Device, 4096).unwrap();
        let b = m.driver(0).alloc(MemKind::Device, 1000).unwrap();
        let h = m.driver(0).ipc_get_mem_handle(b, OutArg::Valid).unwrap();
        let p = open(m.as_mut(), 1, h).unwrap();
        let got = m.driver(1).address_range(p.offset(10)).unwrap();
        if whole_block {
            assert_eq!(got, (DevicePtr(p.0 - 4096), 2 * MIB));
        } else {
            assert_eq!(got, (p, 1000));
        }
        // Exporter view is always the allocation.
        assert_eq!(m.driver(0).address_range(b.offset(999)).unwrap(), (b, 1000));
    }
}
