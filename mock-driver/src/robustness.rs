//! Randomised walks over the whole driver surface with every semantic choice
//! randomised too: nothing may panic, and once every process is gone every
//! physical block must have been released (the accounting that decides when
//! memory dies is what the lifetime clauses rely on).

use crate::machine::SimMachine;
use crate::seed::mix64;
use crate::{Semantics, SimBackend, SimConfig};
use ipc_harness::{
    ContextId, DevicePtr, Dialect, FreeKind, IpcMemHandle, Machine, MachineSpec, MemKind, OutArg,
    ProcessSpec,
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
    let config = SimConfig {
        devices: 1 + rng.below(3) as u32,
        peer_access: rng.below(2) == 0,
        semantics: random_semantics(&mut rng),
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
        dialect: if rng.below(2) == 0 {
            Dialect::Runtime
        } else {
            Dialect::Driver
        },
        seed,
        step_timeout: Duration::from_secs(1),
    };
    let backend = SimBackend::new(config);
    let world = backend.world(&spec).expect("valid spec");
    let mut m = SimMachine::new(world);
    let mut ptrs: Vec<DevicePtr> = vec![DevicePtr::NULL, DevicePtr(u64::MAX)];
    let mut handles: Vec<IpcMemHandle> = vec![IpcMemHandle::ZERO];
    let mut ctxs: Vec<ContextId> = vec![ContextId(0), ContextId(12345)];
    let mut opened: Vec<(usize, DevicePtr)> = Vec::new();
    let mut owned: Vec<(usize, DevicePtr)> = Vec::new();
    for step in 0..300 {
        m.begin_step(step);
        let op = rng.below(20);
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
