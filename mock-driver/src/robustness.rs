//! Randomised walks over the whole driver surface (each call as a
//! [`Call`], made through the call table) with every semantic choice
//! randomised too: nothing may panic, and once every process is gone every
//! physical block must have been released (the accounting that decides when
//! memory dies is what the lifetime clauses rely on).

use crate::machine::SimMachine;
use crate::seed::mix64;
use crate::{Semantics, SimBackend, SimConfig};
use ipc_harness::calls::Returned;
use ipc_harness::{
    Call, ContextId, DevicePtr, Dialect, EventId, FreeKind, IpcEventHandle, IpcMemHandle, Machine,
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
                pid_namespace: Default::default(),
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
                let size = rng.pick(&SIZES);
                if let Ok(Returned::Ptr(a)) = (Call::Alloc { kind, size }).call_on(drv) {
                    ptrs.push(a);
                    owned.push((p, a));
                }
            }
            2 => {
                let kind = rng.pick(&[FreeKind::Device, FreeKind::Host, FreeKind::StreamOrdered]);
                let _ = Call::Free { kind, ptr }.call_on(drv);
            }
            3 => {
                let value = rng.below(256) as u8;
                let len = rng.pick(&LENS);
                let _ = Call::Memset { ptr, value, len }.call_on(drv);
            }
            4 => {
                let bytes = vec![rng.below(256) as u8; 7];
                let _ = Call::Write { ptr, bytes }.call_on(drv);
            }
            5 => {
                let len = rng.pick(&LENS);
                let _ = Call::Read { ptr, len }.call_on(drv);
            }
            6 => {
                let len = rng.pick(&LENS);
                let _ = Call::DeviceRead { ptr, len }.call_on(drv);
            }
            7 => {
                let _ = Call::AddressRange { ptr }.call_on(&mut *drv);
                let _ = Call::PointerInfo { ptr }.call_on(drv);
            }
            8 | 9 => {
                let out = if rng.below(8) == 0 {
                    OutArg::Null
                } else {
                    OutArg::Valid
                };
                if let Ok(Returned::IpcMemHandle(h)) =
                    (Call::IpcGetMemHandle { ptr, out }).call_on(drv)
                {
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
                let open = Call::IpcOpenMemHandle {
                    handle: h,
                    flags,
                    out: OutArg::Valid,
                };
                if let Ok(Returned::Ptr(q)) = open.call_on(drv) {
                    ptrs.push(q);
                    opened.push((p, q));
                }
            }
            12 => {
                let _ = Call::IpcCloseMemHandle { ptr }.call_on(drv);
            }
            13 => {
                if let Ok(Returned::Context(c)) = (Call::CreateContext { device: d }).call_on(drv) {
                    ctxs.push(c);
                }
            }
            14 => {
                let ctx = rng.pick(&ctxs);
                let _ = Call::SetCurrentContext { ctx }.call_on(&mut *drv);
                let _ = Call::CurrentContext.call_on(drv);
            }
            15 => {
                let ctx = rng.pick(&ctxs);
                let _ = Call::DestroyContext { ctx }.call_on(drv);
            }
            16 => {
                let _ = Call::SetDevice { device: d }.call_on(&mut *drv);
                if let Ok(Returned::Context(c)) =
                    (Call::PrimaryContext { device: d }).call_on(&mut *drv)
                {
                    ctxs.push(c);
                }
                let _ = Call::DeviceCount.call_on(drv);
            }
            17 => {
                let peer = rng.below(4) as u32;
                let _ = Call::CanAccessPeer { device: d, peer }.call_on(&mut *drv);
                let _ = Call::EnablePeerAccess { peer: d }.call_on(drv);
            }
            20 => {
                let flags = rng.pick(&[0u32, 2, 4, 6, 7, 8, u32::MAX]);
                if let Ok(Returned::Event(e)) = (Call::EventCreate { flags }).call_on(&mut *drv) {
                    events.push(e);
                    let out = if rng.below(8) == 0 {
                        OutArg::Null
                    } else {
                        OutArg::Valid
                    };
                    let get = Call::IpcGetEventHandle { event: e, out };
                    if let Ok(Returned::IpcEventHandle(h)) = get.call_on(drv) {
                        event_handles.push(h);
                    }
                }
            }
            21 => {
                let mut h = rng.pick(&event_handles);
                if rng.below(6) == 0 {
                    h.0[rng.below(64) as usize] ^= 1 << rng.below(8);
                }
                let out = if rng.below(8) == 0 {
                    OutArg::Null
                } else {
                    OutArg::Valid
                };
                if let Ok(Returned::Event(e)) =
                    (Call::IpcOpenEventHandle { handle: h, out }).call_on(drv)
                {
                    events.push(e);
                }
            }
            22 => {
                let event = rng.pick(&events);
                let call = match rng.below(6) {
                    0 => Call::EventRecord { event },
                    1 => Call::EventQuery { event },
                    2 => Call::EventSynchronize { event },
                    3 => Call::StreamWaitEvent { event },
                    4 => Call::EventElapsed {
                        start: event,
                        end: rng.pick(&events),
                    },
                    _ => Call::EventDestroy { event },
                };
                let _ = call.call_on(drv);
            }
            23 => {
                let micros = rng.pick(&[0u64, 1, 300_000, u64::MAX]);
                let value = rng.below(256) as u8;
                let len = rng.pick(&LENS);
                let fill = Call::SlowFill {
                    ptr,
                    value,
                    len,
                    micros,
                };
                let _ = fill.call_on(drv);
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
    m.tear_down();
    let w = m.world();
    assert!(
        w.blocks.is_empty(),
        "seed {seed}: blocks left {:?}",
        w.blocks.keys().collect::<Vec<_>>()
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
