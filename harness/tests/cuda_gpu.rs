//! The CUDA backend against a real GPU. These tests are `#[ignore]`d with the
//! reason, so a machine without a GPU lists them as skipped; on a GPU host run
//! them with `cargo nextest run --profile gpu --run-ignored all` (one at a
//! time: the `gpu` test group) or `cargo test -- --include-ignored`
//! (serialised by serial_test). Run on a host without libcuda they fail with
//! NotSupported and the reason, never pass silently.
//!
//! The workers are this test binary itself: started with
//! `IPC_HARNESS_WORKER_FD` set, it runs only the test `worker_entry`, which
//! hands the process to `worker_main`.
#![cfg(feature = "cuda")]

use ipc_harness::cuda::{worker_main, CudaBackend, WorkerCommand, WORKER_FD_ENV};
use ipc_harness::{
    Backend, ContextId, DeviceAttribute, DevicePtr, Dialect, DriverError, ErrorKind, FreeKind,
    IpcMemHandle, MachineSpec, MemKind, MemoryType, OutArg, ProcessLoss, ProcessSpec, StartError,
    IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
};
use std::time::{Duration, Instant};

/// The worker program when the backend starts this binary as a worker
/// (`IPC_HARNESS_WORKER_FD` set). Run as a plain test it checks the other
/// side of that rule: a process the backend did not start refuses to serve.
#[test]
fn worker_entry() {
    if std::env::var_os(WORKER_FD_ENV).is_some() {
        std::process::exit(worker_main());
    }
    assert_ne!(
        worker_main(),
        0,
        "without the worker descriptor, worker_main must refuse to serve"
    );
}

fn test_worker() -> WorkerCommand {
    WorkerCommand::new(
        std::env::current_exe().unwrap(),
        [
            "worker_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ],
    )
}

/// Panics with NotSupported and the reason on a host without a usable GPU.
fn gpu_host() -> bool {
    if !CudaBackend::libcuda_present() {
        panic!("NotSupported: libcuda.so not found on this host (run GPU tests on a GPU machine)");
    }
    true
}

fn spec(dialect: Dialect, names: &[&str]) -> MachineSpec {
    MachineSpec {
        devices: 1,
        processes: names
            .iter()
            .map(|n| ProcessSpec {
                name: n.to_string(),
                device: 0,
                visible_devices: None,
                pid_namespace: Default::default(),
            })
            .collect(),
        dialect,
        seed: 1,
        step_timeout: Duration::from_secs(30),
        topology: None,
        semantics: Vec::new(),
    }
}

fn kind(r: &Result<impl std::fmt::Debug, DriverError>) -> Option<ErrorKind> {
    match r {
        Err(DriverError::Api(e)) => e.kind(),
        _ => None,
    }
}

/// Prints every step, so a run on a GPU host is a readable transcript.
macro_rules! step {
    ($d:expr, $proc:expr, $what:expr, $call:expr) => {{
        let r = $call;
        let mut shown = format!("{:?}", r);
        if shown.len() > 160 {
            shown.truncate(160);
            shown.push_str("…");
        }
        eprintln!("[{}] {:8} {:40} => {}", $d, $proc, $what, shown);
        r
    }};
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_backend_info_on_a_gpu_host() {
    if !gpu_host() {
        return;
    }
    let backend = CudaBackend::new(test_worker());
    let info = backend.info();
    eprintln!("{info:#?}");
    assert_eq!(info.backend, "cuda");
    assert!(info.device_count.unwrap_or(0) >= 1, "{info:?}");
    assert!(info.gpu_name.is_some());
    assert!(info.compute_capability.is_some());
    assert!(info.cuda_driver_version.is_some());
    for n in [1usize, 4] {
        let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut sp = spec(Dialect::Runtime, &names);
        sp.processes[0].visible_devices = Some(vec![0]);
        let t = Instant::now();
        let mut m = backend.start(&sp).unwrap();
        eprintln!("{n} worker(s) started in {:?}", t.elapsed());
        assert_eq!(m.driver(0).device_count(), Ok(1));
        let t = Instant::now();
        m.shutdown();
        eprintln!("{n} worker(s) shut down in {:?}", t.elapsed());
    }
    let mut too_many = spec(Dialect::Driver, &["a"]);
    too_many.devices = 99;
    match backend.start(&too_many) {
        Err(StartError::NotSupported(m)) => {
            assert!(
                m.starts_with("scenario needs 99 devices, machine has"),
                "{m}"
            )
        }
        other => panic!("{:?}", other.err()),
    }
}

fn legacy_ipc_round_trip(d: Dialect) {
    let backend = CudaBackend::new(test_worker());
    let t = Instant::now();
    let mut m = backend
        .start(&spec(d, &["owner", "peer"]))
        .unwrap_or_else(|e| panic!("start failed: {e:?}"));
    eprintln!("[{d}] two workers started in {:?}", t.elapsed());
    const OWNER: usize = 0;
    const PEER: usize = 1;
    const MIB2: u64 = 2 << 20;

    let o = m.driver(OWNER);
    assert_eq!(o.dialect(), d);
    assert!(step!(d, "owner", "device_count", o.device_count()).unwrap() >= 1);
    for a in DeviceAttribute::ALL {
        let r = step!(
            d,
            "owner",
            format!("attr {}", a.name()),
            o.device_attribute(0, a)
        );
        assert!(r.is_ok(), "{a:?}: {r:?}");
    }
    assert_eq!(
        o.device_attribute(0, DeviceAttribute::UnifiedAddressing),
        Ok(1)
    );

    let a = step!(d, "owner", "malloc 2MiB", o.alloc(MemKind::Device, MIB2)).unwrap();
    step!(d, "owner", "fill a 0xab", o.memset(a, 0xab, MIB2)).unwrap();
    step!(d, "owner", "write a 0 01020304", o.write(a, &[1, 2, 3, 4])).unwrap();
    assert_eq!(
        step!(d, "owner", "read a 0 6", o.read(a, 6)).unwrap(),
        vec![1, 2, 3, 4, 0xab, 0xab]
    );
    assert_eq!(
        step!(
            d,
            "owner",
            "device_read a 2 4",
            o.device_read(a.offset(2), 4)
        )
        .unwrap(),
        vec![3, 4, 0xab, 0xab]
    );
    assert_eq!(
        step!(
            d,
            "owner",
            "address_range a+4096",
            o.address_range(a.offset(4096))
        )
        .unwrap(),
        (a, MIB2)
    );
    let info = step!(d, "owner", "pointer_attr a", o.pointer_info(a)).unwrap();
    assert_eq!(
        (info.memory_type, info.device),
        (MemoryType::Device, Some(0))
    );
    let h = step!(
        d,
        "owner",
        "ipc_get a",
        o.ipc_get_mem_handle(a, OutArg::Valid)
    )
    .unwrap();
    assert_ne!(h, IpcMemHandle::ZERO);
    let h2 = step!(
        d,
        "owner",
        "ipc_get a again",
        o.ipc_get_mem_handle(a, OutArg::Valid)
    )
    .unwrap();
    eprintln!("[{d}] handles equal: {}", h == h2);
    let own = step!(
        d,
        "owner",
        "ipc_open own handle",
        o.ipc_open_mem_handle(h, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)
    );
    assert!(own.is_err());

    let p = m.driver(PEER);
    let q = step!(
        d,
        "peer",
        "ipc_open h",
        p.ipc_open_mem_handle(h, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)
    )
    .unwrap();
    assert_eq!(
        step!(d, "peer", "read q 0 6", p.read(q, 6)).unwrap(),
        vec![1, 2, 3, 4, 0xab, 0xab]
    );
    assert_eq!(
        step!(d, "peer", "device_read q 0 6", p.device_read(q, 6)).unwrap(),
        vec![1, 2, 3, 4, 0xab, 0xab]
    );
    let big = step!(d, "peer", "device_read q 0 2MiB", p.device_read(q, MIB2)).unwrap();
    assert_eq!(big.len() as u64, MIB2);
    assert!(big[4..].iter().all(|&b| b == 0xab));
    let info = step!(d, "peer", "pointer_attr q", p.pointer_info(q)).unwrap();
    assert_eq!(
        (info.memory_type, info.device),
        (MemoryType::Device, Some(0))
    );
    assert_eq!(
        step!(d, "peer", "address_range q", p.address_range(q)).unwrap(),
        (q, MIB2)
    );
    let q2 = step!(
        d,
        "peer",
        "ipc_open h again",
        p.ipc_open_mem_handle(h, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)
    );
    if let Ok(q2) = q2 {
        eprintln!("[{d}] re-open gives the same pointer: {}", q2 == q);
        step!(d, "peer", "ipc_close q2", p.ipc_close_mem_handle(q2)).unwrap();
    }
    let zero = step!(
        d,
        "peer",
        "ipc_open handle_zero",
        p.ipc_open_mem_handle(IpcMemHandle::ZERO, 1, OutArg::Valid)
    );
    assert_eq!(kind(&zero), Some(ErrorKind::InvalidValue));
    let null_open = step!(
        d,
        "peer",
        "ipc_open h out=null",
        p.ipc_open_mem_handle(h, 1, OutArg::Null)
    );
    assert!(null_open.is_err());
    step!(d, "peer", "write q 8 ff", p.write(q.offset(8), &[0xff])).unwrap();
    step!(d, "peer", "ipc_close q", p.ipc_close_mem_handle(q)).unwrap();
    let again = step!(d, "peer", "ipc_close q again", p.ipc_close_mem_handle(q));
    assert!(again.is_err());

    let o = m.driver(OWNER);
    assert_eq!(
        step!(d, "owner", "read a 8 1", o.read(a.offset(8), 1)).unwrap(),
        vec![0xff]
    );
    step!(d, "owner", "free a", o.free(FreeKind::Device, a)).unwrap();
    assert_eq!(step!(d, "peer", "exit", m.exit(PEER)), Ok(()));
    assert_eq!(step!(d, "owner", "exit", m.exit(OWNER)), Ok(()));
    m.shutdown();
}

fn memory_kinds_and_contexts(d: Dialect) {
    let backend = CudaBackend::new(test_worker());
    let mut m = backend.start(&spec(d, &["solo"])).unwrap();
    let s = m.driver(0);

    let host = step!(
        d,
        "solo",
        "malloc_host 4096",
        s.alloc(MemKind::PinnedHost, 4096)
    )
    .unwrap();
    let info = step!(d, "solo", "pointer_attr host", s.pointer_info(host)).unwrap();
    assert_eq!(info.memory_type, MemoryType::Host);
    step!(d, "solo", "fill host 0x5a", s.memset(host, 0x5a, 4096)).unwrap();
    assert_eq!(
        step!(d, "solo", "device_read host 0 4", s.device_read(host, 4)).unwrap(),
        vec![0x5a; 4]
    );
    let managed = step!(
        d,
        "solo",
        "malloc_managed 1MiB",
        s.alloc(MemKind::Managed, 1 << 20)
    )
    .unwrap();
    let info = step!(d, "solo", "pointer_attr managed", s.pointer_info(managed)).unwrap();
    assert_eq!(
        (info.memory_type, info.device),
        (MemoryType::Managed, Some(0))
    );
    let pool = step!(
        d,
        "solo",
        "malloc_async 1MiB",
        s.alloc(MemKind::StreamOrdered, 1 << 20)
    )
    .unwrap();
    let info = step!(d, "solo", "pointer_attr pool", s.pointer_info(pool)).unwrap();
    assert_eq!(info.memory_type, MemoryType::Device);
    for (what, ptr) in [("managed", managed), ("host", host), ("pool", pool)] {
        let r = step!(
            d,
            "solo",
            format!("ipc_get {what}"),
            s.ipc_get_mem_handle(ptr, OutArg::Valid)
        );
        assert!(r.is_err());
    }
    let stack = 0x1000u64;
    let info = step!(
        d,
        "solo",
        "pointer_attr 0x1000",
        s.pointer_info(DevicePtr(stack))
    )
    .unwrap();
    assert_eq!(
        (info.memory_type, info.device),
        (MemoryType::Unregistered, None)
    );
    step!(
        d,
        "solo",
        "free_async pool",
        s.free(FreeKind::StreamOrdered, pool)
    )
    .unwrap();
    step!(d, "solo", "free managed", s.free(FreeKind::Device, managed)).unwrap();
    step!(d, "solo", "free_host host", s.free(FreeKind::Host, host)).unwrap();
    let twice = step!(
        d,
        "solo",
        "free_host host again",
        s.free(FreeKind::Host, host)
    );
    assert!(twice.is_err());

    let c0 = step!(d, "solo", "ctx_current", s.current_context())
        .unwrap()
        .unwrap();
    let p0 = step!(d, "solo", "primary_ctx 0", s.primary_context(0)).unwrap();
    assert_eq!(c0, p0);
    let c1 = step!(d, "solo", "ctx_create 0", s.create_context(0)).unwrap();
    assert_ne!(c1, c0);
    assert_eq!(
        step!(d, "solo", "ctx_current", s.current_context()).unwrap(),
        Some(c1)
    );
    let b = step!(
        d,
        "solo",
        "malloc 4096 in c1",
        s.alloc(MemKind::Device, 4096)
    )
    .unwrap();
    step!(d, "solo", "fill b 0x11", s.memset(b, 0x11, 4096)).unwrap();
    assert_eq!(
        step!(d, "solo", "device_read b 0 3", s.device_read(b, 3)).unwrap(),
        vec![0x11; 3]
    );
    step!(d, "solo", "free b", s.free(FreeKind::Device, b)).unwrap();
    step!(d, "solo", "ctx_set c0", s.set_current_context(c0)).unwrap();
    step!(d, "solo", "ctx_destroy c1", s.destroy_context(c1)).unwrap();
    step!(d, "solo", "set_device 0", s.set_device(0)).unwrap();
    assert_eq!(s.current_context(), Ok(Some(c0)));

    // A kernel fault: the error comes back, the process survives (its context does not).
    let fault = step!(
        d,
        "solo",
        "device_read 0x10 0 16",
        s.device_read(DevicePtr(0x10), 16)
    );
    assert!(matches!(fault, Err(DriverError::Api(_))), "{fault:?}");
    let after = step!(
        d,
        "solo",
        "malloc after fault",
        s.alloc(MemKind::Device, 16)
    );
    eprintln!("[{d}] after a kernel fault: {after:?}");
    let exit = step!(d, "solo", "exit", m.exit(0));
    eprintln!("[{d}] exit after a fault: {exit:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_legacy_ipc_round_trip_runtime() {
    if gpu_host() {
        legacy_ipc_round_trip(Dialect::Runtime);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_legacy_ipc_round_trip_driver() {
    if gpu_host() {
        legacy_ipc_round_trip(Dialect::Driver);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_memory_kinds_and_contexts_runtime() {
    if gpu_host() {
        memory_kinds_and_contexts(Dialect::Runtime);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_memory_kinds_and_contexts_driver() {
    if gpu_host() {
        memory_kinds_and_contexts(Dialect::Driver);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_an_exporter_exit_is_seen_by_the_importer() {
    if !gpu_host() {
        return;
    }
    for d in Dialect::CUDA {
        let backend = CudaBackend::new(test_worker());
        let mut m = backend.start(&spec(d, &["owner", "peer"])).unwrap();
        let o = m.driver(0);
        let a = o.alloc(MemKind::Device, 1 << 20).unwrap();
        o.memset(a, 0xa1, 1 << 20).unwrap();
        let h = o.ipc_get_mem_handle(a, OutArg::Valid).unwrap();
        let p = m.driver(1);
        let q = p.ipc_open_mem_handle(h, 1, OutArg::Valid).unwrap();
        assert_eq!(step!(d, "owner", "exit", m.exit(0)), Ok(()));
        let p = m.driver(1);
        let r = step!(d, "peer", "read q after exporter exit", p.read(q, 4));
        eprintln!("[{d}] {r:?}");
        let r = step!(
            d,
            "peer",
            "ipc_open h after exporter exit",
            p.ipc_open_mem_handle(h, 1, OutArg::Valid)
        );
        eprintln!("[{d}] {r:?}");
        step!(d, "peer", "ipc_close q", p.ipc_close_mem_handle(q)).unwrap();
        assert_eq!(m.exit(1), Ok(()));
    }
}

/// Calls that crash the calling process on this driver are observations:
/// the process is lost, its machine and the other processes are not.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_crashing_calls_are_reported_as_lost_processes() {
    if !gpu_host() {
        return;
    }
    for d in Dialect::CUDA {
        let backend = CudaBackend::new(test_worker());
        let mut m = backend.start(&spec(d, &["victim", "bystander"])).unwrap();
        let v = m.driver(0);
        let a = v.alloc(MemKind::Device, 4096).unwrap();
        let r = step!(
            d,
            "victim",
            "ipc_get a out=null",
            v.ipc_get_mem_handle(a, OutArg::Null)
        );
        match &r {
            Err(DriverError::Api(_)) => {}
            Err(DriverError::Lost(ProcessLoss::Crashed { signal, .. })) => {
                assert_eq!(*signal, Some(11));
                // The same loss for every later call, and for exit.
                assert_eq!(v.device_count().unwrap_err(), r.clone().unwrap_err());
                assert_eq!(m.exit(0).unwrap_err(), r.clone().unwrap_err());
            }
            other => panic!("{other:?}"),
        }
        let b = m.driver(1);
        let c1 = b.create_context(0).unwrap();
        b.destroy_context(c1).unwrap();
        let r = step!(
            d,
            "bystander",
            "ctx_set (destroyed)",
            b.set_current_context(c1)
        );
        eprintln!("[{d}] making a destroyed context current: {r:?}");
        let r = step!(d, "bystander", "set_device 0 after", b.set_device(0));
        eprintln!("[{d}] then set_device: {r:?}");
        m.shutdown();
        let mut m = backend.start(&spec(d, &["third"])).unwrap();
        let t = m.driver(0);
        let r = step!(
            d,
            "third",
            "ctx_destroy 0x10",
            t.destroy_context(ContextId(0x10))
        );
        assert!(r.is_err());
        m.shutdown();
    }
}
