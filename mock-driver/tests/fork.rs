//! `fork_child_alloc`: the forked child's allocation fails; the parent goes on.

mod common;

use common::*;
use ipc_harness::{Dialect, ErrorKind, MemKind};
use ipc_mock_driver::SimConfig;

#[test]
fn a_child_forked_after_init_cannot_allocate_and_the_parent_goes_on() {
    for dialect in [Dialect::Runtime, Dialect::Driver] {
        let mut m = start_cfg(SimConfig::default(), &spec(procs(1), 1, dialect));
        let d = m.driver(0);
        let a = d.alloc(MemKind::Device, 2 << 20).unwrap();
        d.memset(a, 0x3c, 16).unwrap();
        assert_eq!(err(d.fork_child_alloc(1 << 20)), ErrorKind::NotInitialized);
        assert_eq!(d.read(a, 4).unwrap(), vec![0x3c; 4]);
        d.alloc(MemKind::Device, 1 << 20).unwrap();
    }
}
