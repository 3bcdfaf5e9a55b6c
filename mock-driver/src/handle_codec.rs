//! Legacy memory IPC handle bytes: how the simulator encodes an export and
//! decodes the fields the driver reads. A leaf: the rules that use it are
//! `ipc.rs`, and `world.rs` for mappings whose slot was reused.
//!
//! The handle layout follows what one byte flipped at a time showed on an
//! H100 with driver 580.159.04 (reports/probe/): the driver checks only some
//! fields, and answers differently per field. Little endian:
//!
//! | bytes | field | flipped on hardware |
//! | --- | --- | --- |
//! | 0..8 | exporter host-side cookie (seeded) | ignored |
//! | 8..16 | exporter process id (pid-like) | ignored for memory; the own-process and one-context-per-exporter checks read it (mem.open.own-process-field, mem.context.second-context-process-field) |
//! | 16..24 | exported allocation size | ignored by the open; a smaller size bounds copies through the mapping (mem.handle.size-field-bounds-copies); the importer's table keeps the first open's, bounded by the mapped block, and another number is AlreadyMapped (mem.handle.damaged-copy-of-open-handle, mem.handle.larger-size-copy-then-original) |
//! | 24..28 | format word `0x200` | InvalidValue (mem.handle.corrupted-fields; not read where the context maps the block already: mem.handle.format-word-unread-when-mapped), after the one-context rule and the exporter's exit (mem.context.second-context-before-format, mem.lifetime.exporter-exit-before-format); byte 24 alone is not read for an allocation over 2 MiB of odd size (mem.handle.format-byte-odd-size), nor the word for a freed export whose VA was claimed (mem.handle.format-word-after-claim) |
//! | 28..31 | offset of the allocation in its block (24 bits) | AlreadyMapped (mem.handle.corrupted-fields); where the context maps the block, a new mapping if the range overlaps nothing opened there (mem.handle.damaged-offset-disjoint-range) |
//! | 31 | padding | ignored |
//! | 32..37 | memory type `06 00 00 00 00` | InvalidValue, read right after the context's table of opened handles: before the one-context rule, the exporter's exit and a copy's size field (mem.handle.memory-type-before-context-rules) |
//! | 37..48 | `ff`, then a serial at 40 (0; a count under `handle_stable=per-call`; a reused sub-allocation slot keeps it, mem.suballoc.reused-slot-same-handle) | ignored on a first open; a copy of an open handle with another serial maps again (mem.handle.serial-copy-maps-again) |
//! | 48..52 | export object id (on hardware the exporting process's number among the driver's clients, the same for all its exports, and 52..56 the allocation's number in that client) | InvalidHandle, also where the format word is damaged too: the object is looked up first (mem.handle.object-before-format-word); on hardware, by chance of numbering, a damaged word may name a live process, whose object is judged instead (`explore` compares up to such an open) |
//! | 52..56 | check word tied to the object id and seed | InvalidValue |
//! | 56..64 | zero (`interior_handle=pointer-offset`: the pointer's offset in its allocation, HIP's `poffset`) | ignored |
//!
//! Identity comes only from the object id, so bytes the driver ignores can be
//! anything and the handle still opens the same memory, as on hardware.

use crate::seed::hash;
use ipc_harness::{IpcMemHandle, IPC_HANDLE_SIZE};

pub(crate) const FORMAT: u32 = 0x200;
pub(crate) const MEMORY_TYPE: [u8; 5] = [6, 0, 0, 0, 0];
const OFFSET_MASK: u64 = 0x00ff_ffff;

/// The fields of a handle the driver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandleData {
    /// The exporter's process id field (bytes 8..16): the driver's own-process
    /// and one-context-per-exporter checks go by it, not by the memory.
    pub exporter_tag: u64,
    pub object: u32,
    /// Offset of the exported allocation in its block.
    pub offset: u64,
    /// The check word matches the object id.
    pub checked: bool,
    /// The size field (bytes 16..24): the size of the allocation the
    /// importer's mapping registers, which bounds copies through it.
    pub size: u64,
}

/// Bytes 56..64: the exported pointer's offset in its allocation, read only
/// under `interior_handle=pointer-offset` (HIP's `poffset`; CUDA ignores them).
pub(crate) fn interior_offset(handle: &IpcMemHandle) -> u64 {
    u64_at(&handle.0, 56)
}

/// Bytes 8..16, the exporter's process field, read whatever the rest holds.
pub(crate) fn raw_process_tag(handle: &IpcMemHandle) -> u64 {
    u64_at(&handle.0, 8)
}

/// Bytes 16..24, the size field, read whatever the rest holds.
pub(crate) fn size_field(handle: &IpcMemHandle) -> u64 {
    u64_at(&handle.0, 16)
}

pub(crate) fn check_word(seed: u64, object: u32) -> u32 {
    hash(seed ^ 0x4950_4343_4845_434b, &[u64::from(object)]) as u32
}

pub(crate) fn u32_at(b: &[u8; IPC_HANDLE_SIZE], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The little-endian 64-bit field at byte `at`.
fn u64_at(b: &[u8; IPC_HANDLE_SIZE], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The process-id field of the handles a process exports: a pid-like number
/// per process (a flipped bit never names another process by accident).
pub(crate) fn process_tag(seed: u64, p: usize) -> u64 {
    1000 + (hash(seed ^ 0x5049_4454_4147, &[p as u64]) % 4_000_000) * 8 + (p as u64 % 8)
}

pub(crate) struct Encode {
    pub exporter: u32,
    pub object: u32,
    pub offset: u64,
    pub size: u64,
    pub serial: u64,
    /// Bytes 56..64 (zero in the measured CUDA layout): the pointer's offset
    /// in its allocation under `interior_handle=pointer-offset`.
    pub interior: u64,
    /// The exporting context when it is not a primary context (0 for a
    /// primary): salts the cookie, bytes 0..8.
    pub ctx_salt: u64,
}

pub(crate) fn encode(seed: u64, e: &Encode) -> IpcMemHandle {
    let mut b = [0u8; IPC_HANDLE_SIZE];
    // The same allocation exported from a second context gives other bytes
    // (mem.get.other-context-bytes). Which bytes is not measured; the
    // simulator puts the difference in the cookie, which the driver ignores,
    // so both handles open the same memory.
    let mut cookie = hash(seed ^ 0x434f_4f4b_4945, &[u64::from(e.exporter)]);
    if e.ctx_salt != 0 {
        cookie ^= hash(
            seed ^ 0x4354_5853_414c,
            &[u64::from(e.exporter), e.ctx_salt],
        );
    }
    b[0..8].copy_from_slice(&cookie.to_le_bytes());
    b[8..16].copy_from_slice(&process_tag(seed, e.exporter as usize).to_le_bytes());
    b[16..24].copy_from_slice(&e.size.to_le_bytes());
    b[24..28].copy_from_slice(&FORMAT.to_le_bytes());
    b[28..31].copy_from_slice(&(e.offset & OFFSET_MASK).to_le_bytes()[..3]);
    b[32..37].copy_from_slice(&MEMORY_TYPE);
    b[37] = 0xff;
    b[40..48].copy_from_slice(&e.serial.to_le_bytes());
    b[48..52].copy_from_slice(&e.object.to_le_bytes());
    b[52..56].copy_from_slice(&check_word(seed, e.object).to_le_bytes());
    b[56..64].copy_from_slice(&e.interior.to_le_bytes());
    IpcMemHandle(b)
}

/// The serial a handle carries (bytes 40..48).
pub(crate) fn serial_of(handle: &IpcMemHandle) -> u64 {
    u64_at(&handle.0, 40)
}

/// Decode the fields the driver reads; `None` when the format or memory type
/// words are wrong (InvalidValue on hardware). The caller checks, in the
/// hardware's order: object id (InvalidHandle), check word (InvalidValue),
/// offset (AlreadyMapped).
pub(crate) fn decode(seed: u64, handle: &IpcMemHandle) -> Option<HandleData> {
    let b = &handle.0;
    if u32_at(b, 24) != FORMAT || b[32..37] != MEMORY_TYPE {
        return None;
    }
    Some(decode_fields(seed, handle))
}

/// The fields `decode` reads, whatever the format and memory-type words hold.
pub(crate) fn decode_fields(seed: u64, handle: &IpcMemHandle) -> HandleData {
    let b = &handle.0;
    let object = u32_at(b, 48);
    HandleData {
        exporter_tag: raw_process_tag(handle),
        object,
        offset: u64::from(u32::from_le_bytes([b[28], b[29], b[30], 0])),
        checked: u32_at(b, 52) == check_word(seed, object),
        size: size_field(handle),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_flips_hit_the_measured_fields() {
        let e = Encode {
            exporter: 1,
            object: 0xc1d0_001b,
            offset: 2048,
            size: 1000,
            serial: 0,
            interior: 0,
            ctx_salt: 0,
        };
        let bytes = encode(42, &e);
        let d = decode(42, &bytes).expect("decodes");
        assert_eq!((d.object, d.offset, d.checked), (e.object, 2048, true));
        assert!(!decode(43, &bytes).expect("format is seed-free").checked);
        for i in 0..IPC_HANDLE_SIZE {
            let mut f = bytes;
            f.0[i] ^= 0xff;
            let got = decode(42, &f);
            match i {
                24..=27 | 32..=36 => assert_eq!(got, None, "byte {i}"),
                28..=30 => assert_ne!(got.map(|d| d.offset), Some(2048), "byte {i}"),
                48..=51 => assert_ne!(got.map(|d| d.object), Some(e.object), "byte {i}"),
                52..=55 => assert_eq!(got.map(|d| d.checked), Some(false), "byte {i}"),
                // The size field: the same memory, another registered size.
                16..=23 => assert_eq!(
                    got.map(|d| (d.object, d.offset, d.checked)),
                    Some((d.object, d.offset, d.checked)),
                    "byte {i}"
                ),
                // The process field: the memory is the same, the exporter tag differs.
                8..=15 => assert_eq!(
                    got.map(|d| (d.object, d.offset, d.checked)),
                    Some((d.object, d.offset, d.checked)),
                    "byte {i}"
                ),
                _ => assert_eq!(got, Some(d), "byte {i} is ignored"),
            }
        }
    }
}
