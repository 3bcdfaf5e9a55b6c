//! Randomised walks over the whole driver surface with every semantic choice
//! randomised too: nothing may panic, and once every process is gone every
//! physical block must have been released (the accounting that decides when
//! memory dies is what the lifetime clauses rely on).

use crate::machine::SimMachine;
use crate::seed::mix64;
use crate::{Semantics, SimBackend, SimConfig};
use ipc_harness::{
    ContextId, DevicePtr, Dialect, EventId, FreeKind, IpcEventHandle, IpcMemHandle, Machine,
    MachineSpec, MemKind, OutArg, ProcessSpec,
};
use std::time::Duration;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = mix64(self.0);
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

fn random_semantics(rng: &mut Rng) -> Semantics {
    let mut s = Semantics::default();
    // Mostly non-sticky, so a fault early in a walk does not end it.
    if rng.below(4) != 0 {
        s.sticky_errors = crate::semantics::Switch::Off;
    }
    for choice in Semantics::default().describe() {
        if choice.name != "sticky_errors" && rng.below(2) == 0 {
            let v = rng.pick(
                &choice
                    .options
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            s.set(choice.name, v).expect("listed option");
        }
    }
    s
}

const SIZES: [u64; 10] = [
    0,
    1,
    100,
    512,
    4096,
    1 << 20,
    2 << 20,
    3 << 20,
    64 << 30,
    u64::MAX,
];
const LENS: [u64; 7] = [0, 1, 16, 4096, 2 << 20, 1 << 40, u64::MAX];

fn walk(seed: u64) {
    let mut rng = Rng(seed);
    // Fields SimConfig gains later take their defaults here.
    #[allow(clippy::needless_update)]
    let config = SimConfig {
        devices: 1 + rng.below(3) as u32,
        peer_access: rng.below(2) == 0,
        peer_budget: [None, Some(1), Some(8)][rng.below(3) as usize],
        semantics: random_semantics(&mut rng),
        hip_semantics: random_semantics(&mut rng),
        ..SimConfig::default()
    };
    let n = 1 + rng.below(4) as usize;
    let spec = MachineSpec {
        devices: 1,
        processes: (0..n)
            .map(|i| ProcessSpec {
                name: format!("p{i}"),
                device: 0,
                visible_devices: None,
            })
            .collect(),
        dialect: Dialect::ALL[rng.below(3) as usize],
        seed,
        step_timeout: Duration::from_secs(1),
        topology: None,
        semantics: Vec::new(),
    };
    let backend = SimBackend::new(config);
    let world = backend.world(&spec).expect("valid spec");
    let mut m = SimMachine::new(world);
    let mut ptrs: Vec<DevicePtr> = vec![DevicePtr::NULL, DevicePtr(u64::MAX)];
    let mut handles: Vec<IpcMemHandle> = vec![IpcMemHandle::ZERO];
    let mut ctxs: Vec<ContextId> = vec![ContextId(0), ContextId(12345)];
    let mut opened: Vec<(usize, DevicePtr)> = Vec::new();
    let mut owned: Vec<(usize, DevicePtr)> = Vec::new();
    let mut events: Vec<EventId> = vec![EventId(0), EventId(u64::MAX)];
    let mut event_handles: Vec<IpcEventHandle> = vec![IpcEventHandle::ZERO];
    for step in 0..300 {
        m.begin_step(step);
        let op = rng.below(24);
        let mut p = rng.below(n as u64 + 1) as usize; // sometimes out of range
        let ptr = {
            let base = rng.pick(&ptrs);
            let off = rng.pick(&[0u64, 0, 1, 511, 4096, 2 << 20, u64::MAX]);
            base.offset(off)
        };
        let mut ptr = ptr;
        if op == 12 && !opened.is_empty() && rng.below(4) != 0 {
            (p, ptr) = rng.pick(&opened);
        }
        if matches!(op, 2 | 8 | 9) && !owned.is_empty() && rng.below(4) != 0 {
            (p, ptr) = rng.pick(&owned);
        }
        let d = rng.below(4) as u32;
        let drv = m.driver(p);
        match op {
            0 | 1 => {
                let kind = rng.pick(&[
                    MemKind::Device,
                    MemKind::Device,
                    MemKind::Managed,
                    MemKind::PinnedHost,
                    MemKind::StreamOrdered,
                ]);
                if let Ok(a) = drv.alloc(kind, rng.pick(&SIZES)) {
                    ptrs.push(a);
                    owned.push((p, a));
                }
            }
            2 => {
                let kind = rng.pick(&[FreeKind::Device, FreeKind::Host, FreeKind::StreamOrdered]);
                let _ = drv.free(kind, ptr);
            }
            3 => {
                let _ = drv.memset(ptr, rng.below(256) as u8, rng.pick(&LENS));
            }
            4 => {
                let _ = drv.write(ptr, &[rng.below(256) as u8; 7]);
            }
            5 => {
                let _ = drv.read(ptr, rng.pick(&LENS));
            }
            6 => {
                let _ = drv.device_read(ptr, rng.pick(&LENS));
            }
            7 => {
                let _ = drv.address_range(ptr);
                let _ = drv.pointer_info(ptr);
            }
            8 | 9 => {
                let out = if rng.below(8) == 0 {
                    OutArg::Null
                } else {
                    OutArg::Valid
                };
                if let Ok(h) = drv.ipc_get_mem_handle(ptr, out) {
                    handles.push(h);
                }
            }
            10 | 11 | 18 => {
                let mut h = rng.pick(&handles);
                if rng.below(6) == 0 {
                    let at = rng.below(64) as usize;
                    h.0[at] ^= 1 << rng.below(8);
                }
                let flags = rng.pick(&[0u32, 1, 1, 1, 2, u32::MAX]);
                if let Ok(q) = drv.ipc_open_mem_handle(h, flags, OutArg::Valid) {
                    ptrs.push(q);
                    opened.push((p, q));
                }
            }
            12 => {
                let _ = drv.ipc_close_mem_handle(ptr);
            }
            13 => {
                if let Ok(c) = drv.create_context(d) {
                    ctxs.push(c);
                }
            }
            14 => {
                let _ = drv.set_current_context(rng.pick(&ctxs));
                let _ = drv.current_context();
            }
            15 => {
                let _ = drv.destroy_context(rng.pick(&ctxs));
            }
            16 => {
                let _ = drv.set_device(d);
                if let Ok(c) = drv.primary_context(d) {
                    ctxs.push(c);
                }
                let _ = drv.device_count();
            }
            17 => {
                let _ = drv.can_access_peer(d, rng.below(4) as u32);
                let _ = drv.enable_peer_access(d);
            }
            20 => {
                let flags = rng.pick(&[0u32, 2, 4, 6, 7, 8, u32::MAX]);
                if let Ok(e) = drv.event_create(flags) {
                    events.push(e);
                    let out = if rng.below(8) == 0 {
                        OutArg::Null
                    } else {
                        OutArg::Valid
                    };
                    if let Ok(h) = drv.ipc_get_event_handle(e, out) {
                        event_handles.push(h);
                    }
                }
            }
            21 => {
                let mut h = rng.pick(&event_handles);
                if rng.below(6) == 0 {
                    h.0[rng.below(64) as usize] ^= 1 << rng.below(8);
                }
                if let Ok(e) = drv.ipc_open_event_handle(h) {
                    events.push(e);
                }
            }
            22 => {
                let e = rng.pick(&events);
                let _ = match rng.below(6) {
                    0 => drv.event_record(e),
                    1 => drv.event_query(e),
                    2 => drv.event_synchronize(e),
                    3 => drv.stream_wait_event(e),
                    4 => drv.event_elapsed(e, rng.pick(&events)).map(|_| ()),
                    _ => drv.event_destroy(e),
                };
            }
            23 => {
                let us = rng.pick(&[0u64, 1, 300_000, u64::MAX]);
                let _ = drv.slow_fill(ptr, rng.below(256) as u8, rng.pick(&LENS), us);
            }
            _ => {
                if rng.below(4) == 0 {
                    let _ = m.exit(p);
                }
            }
        }
    }
    let hazards = m.hazards().expect("log");
    assert!(hazards.iter().all(|h| h.process < n && h.step.is_some()));
    m.shutdown();
    let w = m.world();
    assert!(
        w.blocks.is_empty(),
        "seed {seed}: blocks left {:?}",
        w.blocks.keys()
    );
    assert!(
        w.events.local.is_empty(),
        "seed {seed}: events left {:?}",
        w.events.local.keys()
    );
    assert!(
        w.device_used.iter().all(|&u| u == 0),
        "seed {seed}: {:?}",
        w.device_used
    );
}

#[test]
fn random_walks_never_panic_and_release_everything() {
    for seed in 0..1000 {
        walk(seed);
    }
}
