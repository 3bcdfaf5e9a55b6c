//! Trace labels name live values. A driver that reuses the address of a
//! destroyed context, released VMM handle or destroyed event for the next
//! object (the real driver's heap does; the simulator never does) gives
//! that object a fresh label, while pointers, memory handles and
//! descriptors keep their labels when their values come back.
//!
//! Each case is a scenario run on `Heap`, a fake whose opaque objects come
//! from a per-process heap that hands the last freed address out first and
//! whose allocations reuse a freed base. `== X` / `!= X` in the scenarios
//! check the raw values (so each case shows that the value really was
//! reused); the table gives the label each bound name must get. A query
//! (`ctx_current`) returning a destroyed context's value still names that
//! context.

use ipc_harness::scenario::{execute_on, parse, ExecOptions, Execution};
use ipc_harness::trace::{StepOutcome, ValueSummary};
use ipc_harness::{
    ApiError, ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, Dialect, Driver, DriverError,
    DriverResult, ErrorKind, EventId, Fd, FreeKind, GranularityKind, HandleTypes, Hazard,
    IpcEventHandle, IpcMemHandle, Machine, MemKind, MemoryType, OutArg, PointerInfo, ProcessIndex,
    ShareableHandleType, Status, StreamId, VmmAccess, VmmHandle,
};
/// What this fake answers to the VMM and descriptor calls it does not model.
fn vmm_not_modelled() -> DriverError {
    DriverError::Harness("this backend does not implement the VMM calls".to_string())
}

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// The primary context's value (never destroyed: `ctx_destroy` refuses it).
const PRIMARY: u64 = 0x5000_0000;

/// One process of the fake driver.
struct Heap {
    dialect: Dialect,
    /// Driver heap objects: the next new address and the freed ones (last
    /// freed, first reused).
    next_object: u64,
    freed_objects: Vec<u64>,
    contexts: BTreeSet<u64>,
    current: Option<u64>,
    events: BTreeSet<u64>,
    vmm: BTreeSet<u64>,
    /// Device memory: base → size; a freed base is reused by the next malloc.
    mem: HashMap<u64, u64>,
    next_base: u64,
    freed_bases: Vec<u64>,
    /// Descriptors: the lowest free number from 3 (POSIX).
    fds: BTreeSet<i32>,
}

impl Heap {
    fn new(dialect: Dialect) -> Heap {
        Heap {
            dialect,
            next_object: PRIMARY + 0x100,
            freed_objects: Vec::new(),
            contexts: BTreeSet::from([PRIMARY]),
            current: Some(PRIMARY),
            events: BTreeSet::new(),
            vmm: BTreeSet::new(),
            mem: HashMap::new(),
            next_base: 0x7f00_0000_0000,
            freed_bases: Vec::new(),
            fds: BTreeSet::new(),
        }
    }

    fn err(&self, kind: ErrorKind) -> DriverError {
        DriverError::Api(ApiError::new(self.dialect, kind))
    }

    fn object(&mut self) -> u64 {
        self.freed_objects.pop().unwrap_or_else(|| {
            self.next_object += 0x100;
            self.next_object
        })
    }

    fn release(set: &mut BTreeSet<u64>, freed: &mut Vec<u64>, v: u64) -> bool {
        let live = set.remove(&v);
        if live {
            freed.push(v);
        }
        live
    }

    fn fd(&mut self) -> Fd {
        let n = (3..).find(|n| !self.fds.contains(n)).unwrap_or(3);
        self.fds.insert(n);
        Fd(n)
    }

    fn unsupported<T>(&self) -> DriverResult<T> {
        Err(self.err(ErrorKind::NotSupported))
    }
}

impl Driver for Heap {
    fn dialect(&self) -> Dialect {
        self.dialect
    }
    fn device_count(&mut self) -> DriverResult<u32> {
        Ok(1)
    }
    fn device_attribute(&mut self, _: DeviceOrdinal, _: DeviceAttribute) -> DriverResult<i64> {
        Ok(1)
    }
    fn set_device(&mut self, _: DeviceOrdinal) -> DriverResult<()> {
        Ok(())
    }
    fn primary_context(&mut self, _: DeviceOrdinal) -> DriverResult<ContextId> {
        Ok(ContextId(PRIMARY))
    }
    fn create_context(&mut self, _: DeviceOrdinal) -> DriverResult<ContextId> {
        let c = self.object();
        self.contexts.insert(c);
        self.current = Some(c);
        Ok(ContextId(c))
    }
    /// Any value is accepted, a destroyed context's included (as the H100
    /// does: mem.context.set-destroyed).
    fn set_current_context(&mut self, c: ContextId) -> DriverResult<()> {
        self.current = Some(c.0);
        Ok(())
    }
    fn current_context(&mut self) -> DriverResult<Option<ContextId>> {
        Ok(self.current.map(ContextId))
    }
    fn destroy_context(&mut self, c: ContextId) -> DriverResult<()> {
        if c.0 == PRIMARY || !Heap::release(&mut self.contexts, &mut self.freed_objects, c.0) {
            return Err(self.err(ErrorKind::InvalidContext));
        }
        if self.current == Some(c.0) {
            self.current = None;
        }
        Ok(())
    }
    fn alloc(&mut self, _: MemKind, size: u64) -> DriverResult<DevicePtr> {
        let base = self.freed_bases.pop().unwrap_or_else(|| {
            self.next_base += 0x1_0000_0000;
            self.next_base
        });
        self.mem.insert(base, size);
        Ok(DevicePtr(base))
    }
    fn free(&mut self, _: FreeKind, p: DevicePtr) -> DriverResult<()> {
        match self.mem.remove(&p.0) {
            Some(_) => {
                self.freed_bases.push(p.0);
                Ok(())
            }
            None => Err(self.err(ErrorKind::InvalidValue)),
        }
    }
    fn synchronize(&mut self) -> DriverResult<()> {
        Ok(())
    }
    fn memset(&mut self, _: DevicePtr, _: u8, _: u64) -> DriverResult<()> {
        Ok(())
    }
    fn write(&mut self, _: DevicePtr, _: &[u8]) -> DriverResult<()> {
        Ok(())
    }
    fn read(&mut self, _: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        Ok(vec![0; len as usize])
    }
    fn device_read(&mut self, p: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        self.read(p, len)
    }
    fn address_range(&mut self, p: DevicePtr) -> DriverResult<(DevicePtr, u64)> {
        match self.mem.get(&p.0) {
            Some(size) => Ok((p, *size)),
            None => Err(self.err(ErrorKind::NotFound)),
        }
    }
    fn pointer_info(&mut self, _: DevicePtr) -> DriverResult<PointerInfo> {
        Ok(PointerInfo {
            memory_type: MemoryType::Device,
            device: Some(0),
        })
    }
    /// A handle's bytes are its allocation's base: the same allocation
    /// exported again gives identical bytes.
    fn ipc_get_mem_handle(&mut self, p: DevicePtr, _: OutArg) -> DriverResult<IpcMemHandle> {
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(&p.0.to_le_bytes());
        Ok(IpcMemHandle(h))
    }
    /// Opens map the exporter's block at its own base (one address space).
    fn ipc_open_mem_handle(
        &mut self,
        h: IpcMemHandle,
        _: u32,
        _: OutArg,
    ) -> DriverResult<DevicePtr> {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h.0[..8]);
        Ok(DevicePtr(u64::from_le_bytes(b)))
    }
    fn ipc_close_mem_handle(&mut self, _: DevicePtr) -> DriverResult<()> {
        Ok(())
    }
    fn event_create(&mut self, _: u32) -> DriverResult<EventId> {
        let e = self.object();
        self.events.insert(e);
        Ok(EventId(e))
    }
    fn event_record(&mut self, _: EventId) -> DriverResult<()> {
        Ok(())
    }
    fn event_query(&mut self, _: EventId) -> DriverResult<()> {
        Ok(())
    }
    fn event_synchronize(&mut self, _: EventId) -> DriverResult<()> {
        Ok(())
    }
    fn stream_wait_event(&mut self, _: EventId) -> DriverResult<()> {
        Ok(())
    }
    fn event_elapsed(&mut self, _: EventId, _: EventId) -> DriverResult<f32> {
        Ok(0.0)
    }
    fn event_destroy(&mut self, e: EventId) -> DriverResult<()> {
        if Heap::release(&mut self.events, &mut self.freed_objects, e.0) {
            Ok(())
        } else {
            Err(self.err(ErrorKind::InvalidHandle))
        }
    }
    fn ipc_get_event_handle(&mut self, _: EventId, _: OutArg) -> DriverResult<IpcEventHandle> {
        self.unsupported()
    }
    fn ipc_open_event_handle(&mut self, _: IpcEventHandle, _: OutArg) -> DriverResult<EventId> {
        self.unsupported()
    }
    fn slow_fill(&mut self, _: DevicePtr, _: u8, _: u64, _: u64) -> DriverResult<()> {
        self.unsupported()
    }
    fn kernel_pattern(&mut self, _: DevicePtr, _: u64, _: u64, _: u8, _: u8) -> DriverResult<()> {
        self.unsupported()
    }
    // --- memory pools: not modelled by this fake ---
    fn pool_create(
        &mut self,
        _: DeviceOrdinal,
        _: HandleTypes,
    ) -> DriverResult<ipc_harness::PoolId> {
        self.unsupported()
    }
    fn pool_default(&mut self, _: DeviceOrdinal) -> DriverResult<ipc_harness::PoolId> {
        self.unsupported()
    }
    fn pool_destroy(&mut self, _: ipc_harness::PoolId) -> DriverResult<()> {
        self.unsupported()
    }
    fn pool_export(&mut self, _: ipc_harness::PoolId) -> DriverResult<Fd> {
        self.unsupported()
    }
    fn pool_import(&mut self, _: Fd) -> DriverResult<ipc_harness::PoolId> {
        self.unsupported()
    }
    fn pool_set_access(
        &mut self,
        _: ipc_harness::PoolId,
        _: DeviceOrdinal,
        _: VmmAccess,
    ) -> DriverResult<()> {
        self.unsupported()
    }
    fn pool_get_access(&mut self, _: ipc_harness::PoolId, _: DeviceOrdinal) -> DriverResult<u64> {
        self.unsupported()
    }
    fn pool_alloc(&mut self, _: ipc_harness::PoolId, _: u64) -> DriverResult<DevicePtr> {
        self.unsupported()
    }
    fn pool_free(&mut self, _: DevicePtr) -> DriverResult<()> {
        self.unsupported()
    }
    fn pool_export_ptr(&mut self, _: DevicePtr) -> DriverResult<ipc_harness::PoolPtrExport> {
        self.unsupported()
    }
    fn pool_import_ptr(
        &mut self,
        _: ipc_harness::PoolId,
        _: ipc_harness::PoolPtrExport,
    ) -> DriverResult<DevicePtr> {
        self.unsupported()
    }
    fn pointer_attribute(
        &mut self,
        _: DevicePtr,
        _: ipc_harness::PointerAttribute,
    ) -> DriverResult<u64> {
        self.unsupported()
    }
    fn fork_child_alloc(&mut self, _: u64) -> DriverResult<()> {
        self.unsupported()
    }
    // --- streams and copies: not modelled by this fake ---
    fn stream_create(&mut self, _: u32) -> DriverResult<StreamId> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_destroy(&mut self, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_synchronize(&mut self, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_query(&mut self, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn event_record_on(&mut self, _: EventId, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn stream_wait_event_on(&mut self, _: StreamId, _: EventId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn slow_fill_on(
        &mut self,
        _: DevicePtr,
        _: u8,
        _: u64,
        _: u64,
        _: StreamId,
    ) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn copy_device(&mut self, _: DevicePtr, _: DevicePtr, _: u64, _: StreamId) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn copy_peer(
        &mut self,
        _: DevicePtr,
        _: DeviceOrdinal,
        _: DevicePtr,
        _: DeviceOrdinal,
        _: u64,
    ) -> DriverResult<()> {
        Err(self.err(ErrorKind::NotSupported))
    }
    fn pidfd_getfd(&mut self, _: u32, _: Fd) -> DriverResult<Fd> {
        self.unsupported()
    }
    fn can_access_peer(&mut self, _: DeviceOrdinal, _: DeviceOrdinal) -> DriverResult<i64> {
        Ok(0)
    }
    fn enable_peer_access(&mut self, _: DeviceOrdinal) -> DriverResult<()> {
        self.unsupported()
    }
    fn vmm_create(&mut self, _: DeviceOrdinal, _: u64, _: HandleTypes) -> DriverResult<VmmHandle> {
        let m = self.object();
        self.vmm.insert(m);
        Ok(VmmHandle(m))
    }
    fn vmm_export(&mut self, _: VmmHandle, _: ShareableHandleType) -> DriverResult<Fd> {
        Ok(self.fd())
    }
    /// Every import is a new handle object (as `cuMemImportFromShareableHandle`
    /// after the process released its earlier one).
    fn vmm_import(&mut self, _: Fd) -> DriverResult<VmmHandle> {
        self.vmm_create(0, 0, HandleTypes(0))
    }
    fn vmm_release(&mut self, m: VmmHandle) -> DriverResult<()> {
        if Heap::release(&mut self.vmm, &mut self.freed_objects, m.0) {
            Ok(())
        } else {
            Err(self.err(ErrorKind::InvalidValue))
        }
    }
    fn fd_close(&mut self, f: Fd) -> DriverResult<()> {
        if self.fds.remove(&f.0) {
            Ok(())
        } else {
            Err(self.err(ErrorKind::InvalidValue))
        }
    }
    // --- VMM and descriptors: not modelled by this fake ---
    fn vmm_granularity(
        &mut self,
        _: DeviceOrdinal,
        _: HandleTypes,
        _: GranularityKind,
    ) -> DriverResult<u64> {
        Err(vmm_not_modelled())
    }
    fn vmm_reserve(&mut self, _: u64) -> DriverResult<DevicePtr> {
        Err(vmm_not_modelled())
    }
    fn vmm_map(&mut self, _: DevicePtr, _: u64, _: u64, _: VmmHandle) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn vmm_set_access(
        &mut self,
        _: DevicePtr,
        _: u64,
        _: DeviceOrdinal,
        _: VmmAccess,
    ) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn vmm_unmap(&mut self, _: DevicePtr, _: u64) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn vmm_address_free(&mut self, _: DevicePtr, _: u64) -> DriverResult<()> {
        Err(vmm_not_modelled())
    }
    fn fd_open_null_device(&mut self) -> DriverResult<Fd> {
        Err(vmm_not_modelled())
    }
}

struct HeapMachine {
    drivers: Vec<Heap>,
}

impl Machine for HeapMachine {
    fn process_count(&self) -> usize {
        self.drivers.len()
    }
    fn driver(&mut self, process: ProcessIndex) -> &mut dyn Driver {
        &mut self.drivers[process]
    }
    fn exit(&mut self, _: ProcessIndex) -> DriverResult<()> {
        Ok(())
    }
    fn hazards(&self) -> Option<Vec<Hazard>> {
        None
    }
    fn transfer_fd(&mut self, _: ProcessIndex, _: Fd, to: ProcessIndex) -> DriverResult<Fd> {
        Ok(self.drivers[to].fd())
    }
}

/// A scenario and the label each bound name must get.
struct Case {
    name: &'static str,
    scenario: &'static str,
    labels: &'static [(&'static str, &'static str)],
}

const CASES: &[Case] = &[
    Case {
        // reports/h100-80gb-hbm3_driver-580.159.04/explore/findings/
        // differential-case92.ipc, with `== c9` on its last step: the H100
        // gave c10 the destroyed c9's value and the trace read p0.c2; the
        // simulator (new id) reads p0.c3, and so must the relabelled H100.
        name: "case92: a new context reuses a destroyed one's value",
        scenario: "\
devices 1
process p0 device=0
process p1 device=0
p0: m1 = malloc 1000 => any
p0: fill m1 0x5a => any
p0: h2 = ipc_get m1 => any
p1: exit => any
p0: read m1 258 106 => any
p0: c8 = primary_ctx 0 => any
p0: c9 = ctx_create 0 => any
p0: ctx_destroy c9 => any
p0: ctx_set c8 => any
p0: fill m1 0x33 at=169 len=831 => any
p0: fill m1 0xc2 at=57 len=943 => any
p0: c10 = ctx_create 0 => == c9
",
        labels: &[("c8", "p0.c1"), ("c9", "p0.c2"), ("c10", "p0.c3")],
    },
    Case {
        name: "a live context keeps its label; a refused destroy retires nothing",
        scenario: "\
devices 1
process a device=0
a: c = ctx_create 0
a: cur = ctx_current => == c
a: p = primary_ctx 0
a: ctx_destroy p => InvalidContext
a: p2 = primary_ctx 0 => == p
a: ctx_destroy c
a: d = ctx_create 0 => == c
a: cur2 = ctx_current => == d
",
        labels: &[
            ("c", "a.c1"),
            ("cur", "a.c1"),
            ("p", "a.c2"),
            ("p2", "a.c2"),
            ("d", "a.c3"),
            ("cur2", "a.c3"),
        ],
    },
    Case {
        // mem.context.set-destroyed, then a new context at the same address.
        name: "ctx_current still names a destroyed context until a new one takes its value",
        scenario: "\
devices 1
process a device=0
a: c = ctx_create 0
a: ctx_destroy c
a: ctx_set c
a: cur = ctx_current => == c
a: d = ctx_create 0 => == c
a: cur2 = ctx_current => == d
a: ctx_destroy d
a: ctx_set d
a: cur3 = ctx_current => == d
",
        labels: &[
            ("c", "a.c1"),
            ("cur", "a.c1"),
            ("d", "a.c2"),
            ("cur2", "a.c2"),
            ("cur3", "a.c2"),
        ],
    },
    Case {
        name: "another process's destroy retires nothing here",
        scenario: "\
devices 1
process a device=0
process b device=0
a: c = ctx_create 0
b: d = ctx_create 0 => == c
a: ctx_destroy c
b: d2 = ctx_current => == d
a: c2 = ctx_create 0 => == c
",
        labels: &[("c", "a.c1"), ("d", "b.c1"), ("d2", "b.c1"), ("c2", "a.c2")],
    },
    Case {
        // conformance/clauses/vmm/lifetime/exporter-exit.ipc, in short: the
        // H100 gave m3 the released m2's value (differential of 2026-11-23).
        name: "an import after vmm_release reuses the released handle's value",
        scenario: "\
devices 1
process owner device=0
process peer device=0
owner: m = vmm_create 2MiB types=posix_fd
owner: fd = vmm_export m posix_fd
owner: pfd = send_fd fd -> peer
peer: m2 = vmm_import pfd
owner: exit
peer: vmm_release m2
peer: m3 = vmm_import pfd => == m2
",
        labels: &[
            ("m", "owner.m1"),
            ("fd", "owner.f1"),
            ("pfd", "peer.f1"),
            ("m2", "peer.m1"),
            ("m3", "peer.m2"),
        ],
    },
    Case {
        name: "a released VMM handle's value reused by vmm_create",
        scenario: "\
devices 1
process a device=0
a: m = vmm_create 2MiB types=posix_fd
a: m1 = vmm_create 2MiB => != m
a: vmm_release m
a: m2 = vmm_create 2MiB => == m
",
        labels: &[("m", "a.m1"), ("m1", "a.m2"), ("m2", "a.m3")],
    },
    Case {
        name: "a destroyed event's value reused by event_create",
        scenario: "\
devices 1
process a device=0
a: e = event_create
a: event_destroy e
a: e2 = event_create => == e
a: event_destroy e2
a: e3 = event_create
",
        labels: &[("e", "a.e1"), ("e2", "a.e2"), ("e3", "a.e3")],
    },
    Case {
        name: "pointers, memory handles and descriptors keep their labels",
        scenario: "\
devices 1
process owner device=0
process peer device=0
owner: a = malloc 1MiB
owner: h = ipc_get a
owner: free a
owner: b = malloc 1MiB => == a
owner: h2 = ipc_get b => == h
owner: send h2 -> peer
peer: o = ipc_open h2
peer: ipc_close o
peer: o2 = ipc_open h2 => == o
owner: m = vmm_create 2MiB types=posix_fd
owner: fd = vmm_export m posix_fd
owner: fd_close fd
owner: fd2 = vmm_export m posix_fd => == fd
",
        labels: &[
            ("a", "owner.p1"),
            ("b", "owner.p1"),
            ("h", "h1"),
            ("h2", "h1"),
            ("o", "peer.p1"),
            ("o2", "peer.p1"),
            ("fd", "owner.f1"),
            ("fd2", "owner.f1"),
        ],
    },
];

fn run(case: &Case) -> Execution {
    let sc = parse(case.scenario, Path::new("labels.ipc"))
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let dialect = Dialect::Driver;
    let mut m = HeapMachine {
        drivers: sc.processes.iter().map(|_| Heap::new(dialect)).collect(),
    };
    execute_on(
        &sc,
        &mut m,
        &ExecOptions {
            dialect,
            ..ExecOptions::default()
        },
    )
}

fn label(v: &ValueSummary) -> Option<&str> {
    match v {
        ValueSummary::Ptr { label }
        | ValueSummary::Context { label }
        | ValueSummary::Handle { label }
        | ValueSummary::VmmHandle { label }
        | ValueSummary::Fd { label }
        | ValueSummary::Event { label }
        | ValueSummary::Pool { label }
        | ValueSummary::Stream { label } => Some(label),
        _ => None,
    }
}

#[test]
fn labels_of_destroyed_driver_objects_are_retired_and_pointers_are_not() {
    let mut wrong = Vec::new();
    for case in CASES {
        let e = run(case);
        if e.verdict.status != Status::Pass {
            wrong.push(format!("{}: {}", case.name, e.verdict.message));
        }
        for (bind, want) in case.labels {
            let prefix = format!("{bind} = ");
            let got = e
                .trace
                .steps
                .iter()
                .find(|s| s.op.starts_with(&prefix))
                .and_then(|s| match &s.outcome {
                    StepOutcome::Ok { value } => label(value),
                    _ => None,
                });
            if got != Some(*want) {
                wrong.push(format!("{}: {bind} is {got:?}, not {want}", case.name));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
