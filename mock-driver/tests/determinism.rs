//! Same seed, same run; different seed, different addresses and handle bytes.

mod common;

use common::*;
use ipc_harness::{ContextId, DevicePtr, Dialect, IpcMemHandle, MemKind, OutArg};
use ipc_mock_driver::SimConfig;

#[derive(Debug, PartialEq)]
struct Observed {
    ptrs: Vec<DevicePtr>,
    handles: Vec<IpcMemHandle>,
    contexts: Vec<ContextId>,
}

fn run(seed: u64) -> Observed {
    let mut m = start_cfg(SimConfig::default(), &spec(procs(3), seed, Dialect::Driver));
    let mut ptrs = Vec::new();
    let mut handles = Vec::new();
    let mut contexts = Vec::new();
    for size in [100, 4096, 2 * MIB, 5 * MIB] {
        let a = m.driver(0).alloc(MemKind::Device, size).unwrap();
        ptrs.push(a);
        handles.push(m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap());
    }
    for &h in &handles {
        ptrs.push(open(m.as_mut(), 1, h).unwrap());
        ptrs.push(open(m.as_mut(), 2, h).unwrap());
    }
    ptrs.push(m.driver(2).alloc(MemKind::PinnedHost, 10).unwrap());
    for p in 0..3 {
        contexts.push(m.driver(p).current_context().unwrap().unwrap());
        contexts.push(m.driver(p).create_context(1).unwrap());
    }
    Observed {
        ptrs,
        handles,
        contexts,
    }
}

#[test]
fn same_seed_same_addresses_handles_and_contexts() {
    assert_eq!(run(42), run(42));
}

#[test]
fn different_seeds_differ_everywhere() {
    let (a, b) = (run(42), run(43));
    for (x, y) in a.ptrs.iter().zip(&b.ptrs) {
        assert_ne!(x, y);
    }
    for (x, y) in a.handles.iter().zip(&b.handles) {
        assert_ne!(x, y);
    }
    for (x, y) in a.contexts.iter().zip(&b.contexts) {
        assert_ne!(x, y);
    }
}

#[test]
fn processes_have_disjoint_address_spaces() {
    let o = run(7);
    // ptrs: 4 exporter allocations, then (importer 1, importer 2) pairs.
    let mut all = o.ptrs.clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), o.ptrs.len(), "no address is handed out twice");
    let mut m = start_cfg(SimConfig::default(), &spec(procs(2), 7, Dialect::Runtime));
    let a = m.driver(0).alloc(MemKind::Device, 64).unwrap();
    // A foreign pointer is meaningless in another process.
    assert!(m.driver(1).read(a, 1).is_err());
}
