//! Cost of the hot IPC calls on a two-process simulated machine.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ipc_harness::{
    Backend, DevicePtr, Dialect, IpcMemHandle, Machine, MachineSpec, MemKind, OutArg, ProcessSpec,
    IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
};
use ipc_mock_driver::SimBackend;
use std::hint::black_box;
use std::time::Duration;

fn machine() -> (Box<dyn Machine>, DevicePtr, IpcMemHandle) {
    let spec = MachineSpec {
        devices: 1,
        processes: ["owner", "peer"]
            .map(|n| ProcessSpec {
                name: n.into(),
                device: 0,
                visible_devices: None,
                pid_namespace: Default::default(),
            })
            .to_vec(),
        dialect: Dialect::Runtime,
        seed: 1,
        step_timeout: Duration::from_secs(5),
        topology: None,
        semantics: Vec::new(),
    };
    let mut m = SimBackend::default().start(&spec).expect("start");
    let a = m.driver(0).alloc(MemKind::Device, 2 << 20).expect("alloc");
    let h = m
        .driver(0)
        .ipc_get_mem_handle(a, OutArg::Valid)
        .expect("get");
    (m, a, h)
}

fn sim_ops(c: &mut Criterion) {
    let (mut m, a, _h) = machine();
    c.bench_function("ipc_get", |b| {
        b.iter(|| m.driver(0).ipc_get_mem_handle(black_box(a), OutArg::Valid))
    });

    // Re-open path: the block is already mapped, only the count moves.
    let (mut m, _a, h2) = machine();
    m.driver(1)
        .ipc_open_mem_handle(h2, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)
        .expect("first open");
    c.bench_function("ipc_open_reopen", |b| {
        b.iter(|| {
            m.driver(1).ipc_open_mem_handle(
                black_box(h2),
                IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
                OutArg::Valid,
            )
        })
    });

    // Full map + unmap. VA is reused after close (va_reuse=lowest-fit), so each batch gets
    // a fresh machine to keep the address window from running out.
    c.bench_function("ipc_open_close", |b| {
        b.iter_batched(
            machine,
            |(mut m, _a, h)| {
                let p = m
                    .driver(1)
                    .ipc_open_mem_handle(h, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)
                    .expect("open");
                m.driver(1).ipc_close_mem_handle(p).expect("close");
                m
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, sim_ops);
criterion_main!(benches);
