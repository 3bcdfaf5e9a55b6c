//! The CUDA backend's process handling, without a GPU: fake workers are
//! shell scripts that speak the wire protocol through descriptor 3 (answers
//! written with `printf`, requests swallowed with `head -c`), then crash,
//! hang or exit as each test needs.
#![cfg(feature = "cuda")]

use ipc_harness::cuda::protocol::encode_frame;
use ipc_harness::cuda::{
    child_visible_devices, CudaBackend, CudaMachine, Reply, Request, Response, WireError,
    WorkerCommand, NO_LIBCUDA, SHUTDOWN_GRACE, WORKER_FD, WORKER_FD_ENV,
};
use ipc_harness::sharing::WorkerPolicy;
use ipc_harness::{
    ApiError, Backend, DevicePtr, Dialect, DriverError, Machine, MachineSpec, MemKind, ProcessLoss,
    ProcessSpec, StartError, Upcoming, WorkerSharing,
};
use std::path::Path;
use std::time::{Duration, Instant};

const STEP: Duration = Duration::from_millis(300);

fn spec_of(dialect: Dialect, processes: &[(&str, Option<Vec<u32>>)]) -> MachineSpec {
    MachineSpec {
        devices: 1,
        processes: processes
            .iter()
            .map(|(name, visible)| ProcessSpec {
                name: name.to_string(),
                device: 0,
                visible_devices: visible.clone(),
                pid_namespace: Default::default(),
            })
            .collect(),
        dialect,
        seed: 7,
        step_timeout: STEP,
        topology: None,
        semantics: Vec::new(),
    }
}

fn spec(dialect: Dialect) -> MachineSpec {
    spec_of(dialect, &[("a", None)])
}

fn init(dialect: Dialect) -> Request {
    Request::Init { dialect, device: 0 }
}

/// Shell that writes `responses` as frames to the worker socket.
fn answer(responses: &[Response]) -> String {
    let mut s = String::from("printf '");
    for r in responses {
        for b in encode_frame(r).unwrap() {
            s.push_str(&format!("\\{b:03o}"));
        }
    }
    s.push_str(&format!("' >&{WORKER_FD}"));
    s
}

/// Shell that waits until the parent has sent `requests` (all of their bytes).
fn swallow(requests: &[Request]) -> String {
    let n: usize = requests
        .iter()
        .map(|r| encode_frame(r).unwrap().len())
        .sum();
    format!("head -c {n} <&{WORKER_FD} >/dev/null")
}

/// A fake worker running `script` (core dumps off, so a SIGSEGV leaves no file).
fn fake(script: &str) -> WorkerCommand {
    WorkerCommand::new(
        "/bin/sh",
        ["-c".to_string(), format!("ulimit -c 0; {script}")],
    )
}

fn ok() -> Response {
    Ok(Reply::Unit)
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn launch(script: &str, spec: &MachineSpec) -> CudaMachine {
    match CudaMachine::launch(&fake(script), spec) {
        Ok(m) => m,
        Err(e) => panic!("launch failed: {e:?}"),
    }
}

fn crashed(e: &DriverError) -> (Option<i32>, Option<i32>, String) {
    match e {
        DriverError::Lost(ProcessLoss::Crashed {
            signal,
            exit_code,
            detail,
        }) => (*signal, *exit_code, detail.clone()),
        other => panic!("expected Lost(Crashed), got {other:?}"),
    }
}

#[test]
fn a_worker_that_crashes_during_a_call_is_lost_with_its_signal() {
    let d = Dialect::Runtime;
    let script = format!(
        "{}; {}; echo 'fault marker' >&2; kill -SEGV $$",
        answer(&[ok()]),
        swallow(&[init(d), Request::DeviceCount])
    );
    let mut m = launch(&script, &spec(d));
    let pid = m.pids()[0];
    let e = m.driver(0).device_count().unwrap_err();
    let (signal, exit_code, detail) = crashed(&e);
    assert_eq!(signal, Some(11));
    assert_eq!(exit_code, None);
    assert!(detail.contains("device_count"), "{detail}");
    assert!(
        detail.contains("fault marker"),
        "stderr tail missing: {detail}"
    );
    assert!(m.proxy(0).is_reaped());
    assert!(gone(pid), "worker {pid} left behind");
    // Every later call: the same loss, at once.
    let t = Instant::now();
    assert_eq!(m.driver(0).alloc(MemKind::Device, 16).unwrap_err(), e);
    assert_eq!(m.exit(0).unwrap_err(), e);
    assert!(t.elapsed() < Duration::from_millis(100));
}

#[test]
fn a_worker_that_died_before_the_call_is_lost_too() {
    let d = Dialect::Driver;
    let script = format!(
        "{}; {}; kill -SEGV $$",
        swallow(&[init(d)]),
        answer(&[ok()])
    );
    let mut m = launch(&script, &spec(d));
    let pid = m.pids()[0];
    // The worker may die before or after the request is written: both are Crashed.
    std::thread::sleep(Duration::from_millis(100));
    let e = m.driver(0).read(DevicePtr(0x1000), 16).unwrap_err();
    assert_eq!(crashed(&e).0, Some(11));
    assert!(gone(pid));
}

#[test]
fn a_hanging_worker_times_out_and_is_killed() {
    let script = format!("{}; exec sleep 100", answer(&[ok()]));
    let mut m = launch(&script, &spec(Dialect::Runtime));
    let pid = m.pids()[0];
    let t = Instant::now();
    let e = m.driver(0).device_count().unwrap_err();
    let took = t.elapsed();
    assert_eq!(
        e,
        DriverError::Lost(ProcessLoss::TimedOut { after_ms: 300 })
    );
    assert!(took >= STEP, "returned after {took:?}");
    assert!(took < Duration::from_secs(5), "returned after {took:?}");
    assert!(m.proxy(0).is_reaped());
    assert!(gone(pid), "worker {pid} left behind");
    let t = Instant::now();
    assert_eq!(m.driver(0).device_count().unwrap_err(), e);
    assert!(t.elapsed() < Duration::from_millis(100));
}

#[test]
fn exit_is_clean_when_the_worker_exits_zero() {
    let d = Dialect::Driver;
    let script = format!(
        "{}; {}; exit 0",
        answer(&[ok(), ok()]),
        swallow(&[init(d), Request::Exit])
    );
    let mut m = launch(&script, &spec(d));
    let pid = m.pids()[0];
    assert_eq!(m.exit(0), Ok(()));
    assert!(m.all_reaped());
    assert!(gone(pid));
    // An exited process runs nothing more.
    assert!(matches!(
        m.driver(0).device_count(),
        Err(DriverError::Harness(_))
    ));
}

#[test]
fn exit_with_a_bad_status_is_reported_as_a_crash() {
    let d = Dialect::Driver;
    let script = format!(
        "{}; {}; echo 'teardown failed' >&2; exit 7",
        answer(&[ok(), ok()]),
        swallow(&[init(d), Request::Exit])
    );
    let mut m = launch(&script, &spec(d));
    let (signal, exit_code, detail) = crashed(&m.exit(0).unwrap_err());
    assert_eq!((signal, exit_code), (None, Some(7)));
    assert!(detail.contains("teardown failed"), "{detail}");
}

#[test]
fn api_errors_come_back_in_the_process_dialect() {
    let d = Dialect::Driver;
    let answers = [ok(), Err(WireError::Api(700)), Ok(Reply::Count(2))];
    let requests = [
        init(d),
        Request::DeviceRead {
            ptr: ipc_harness::DevicePtr(1),
            len: 16,
        },
        Request::DeviceCount,
        Request::Exit,
    ];
    let script = format!(
        "{}; {}; exit 0",
        answer(&[&answers[..], &[ok()]].concat()),
        swallow(&requests)
    );
    let mut m = launch(&script, &spec(d));
    let e = m.driver(0).device_read(DevicePtr(1), 16).unwrap_err();
    assert_eq!(
        e,
        DriverError::Api(ApiError::from_code(Dialect::Driver, 700))
    );
    assert_eq!(m.driver(0).dialect(), Dialect::Driver);
    assert_eq!(m.driver(0).device_count(), Ok(2));
    assert_eq!(m.exit(0), Ok(()));
}

#[test]
fn harness_errors_and_wrong_answers_are_harness_errors() {
    let d = Dialect::Runtime;
    let answers = [
        ok(),
        Err(WireError::Harness("libcudart could not be loaded".into())),
        Ok(Reply::Count(1)),
        ok(),
    ];
    let requests = [
        init(d),
        Request::DeviceCount,
        Request::Alloc {
            kind: MemKind::Device,
            size: 16,
        },
        Request::Exit,
    ];
    let script = format!("{}; {}; exit 0", answer(&answers), swallow(&requests));
    let mut m = launch(&script, &spec(d));
    match m.driver(0).device_count() {
        Err(DriverError::Harness(msg)) => assert!(msg.contains("libcudart"), "{msg}"),
        other => panic!("{other:?}"),
    }
    match m.driver(0).alloc(MemKind::Device, 16) {
        Err(DriverError::Harness(msg)) => assert!(msg.contains("unexpected answer"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // A harness error does not lose the process.
    assert_eq!(m.exit(0), Ok(()));
}

#[test]
fn a_garbled_answer_breaks_the_worker_and_kills_it() {
    // A frame whose payload is not a Response.
    let script = format!(
        "{}; printf '\\005\\000\\000\\000hello' >&{WORKER_FD}; exec sleep 100",
        answer(&[ok()])
    );
    let mut m = launch(&script, &spec(Dialect::Driver));
    let pid = m.pids()[0];
    assert!(matches!(
        m.driver(0).device_count(),
        Err(DriverError::Harness(_))
    ));
    assert!(gone(pid));
    assert!(matches!(
        m.driver(0).device_count(),
        Err(DriverError::Harness(_))
    ));
}

#[test]
fn a_crash_during_init_is_a_harness_start_error() {
    let t = Instant::now();
    match CudaMachine::launch(&fake("kill -SEGV $$"), &spec(Dialect::Runtime)) {
        Err(StartError::Harness(msg)) => {
            assert!(msg.contains("signal Some(11)"), "{msg}");
            assert!(msg.contains("'a'"), "{msg}");
        }
        other => panic!("expected a Harness start error, got {:?}", other.err()),
    }
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_api_error_during_init_is_not_supported() {
    let script = format!("{}; exec sleep 100", answer(&[Err(WireError::Api(101))]));
    match CudaMachine::launch(&fake(&script), &spec(Dialect::Runtime)) {
        Err(StartError::NotSupported(msg)) => {
            assert!(msg.contains("cudaSetDevice(0)"), "{msg}");
            assert!(msg.contains("cudaErrorInvalidDevice"), "{msg}");
        }
        other => panic!("expected NotSupported, got {:?}", other.err()),
    }
}

#[test]
fn a_worker_program_that_does_not_exist_is_a_harness_start_error() {
    let w = WorkerCommand::new("/nonexistent/ipc-worker", Vec::<String>::new());
    match CudaMachine::launch(&w, &spec(Dialect::Driver)) {
        Err(StartError::Harness(msg)) => assert!(msg.contains("/nonexistent/ipc-worker"), "{msg}"),
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn workers_initialise_in_parallel() {
    // Each worker takes 1 s to answer init; four in series would take 4 s.
    let script = format!("sleep 1; {}; exec sleep 100", answer(&[ok()]));
    let spec = spec_of(
        Dialect::Driver,
        &[("a", None), ("b", None), ("c", None), ("d", None)],
    );
    let t = Instant::now();
    let m = launch(&script, &spec);
    let took = t.elapsed();
    assert_eq!(m.process_count(), 4);
    assert!(took < Duration::from_millis(3000), "init took {took:?}");
}

#[test]
fn shutdown_kills_workers_that_ignore_exit_and_leaves_no_zombie() {
    let script = format!("{}; exec sleep 100", answer(&[ok()]));
    let mut m = launch(
        &script,
        &spec_of(Dialect::Driver, &[("a", None), ("b", None)]),
    );
    let pids = m.pids();
    let t = Instant::now();
    m.shutdown();
    let took = t.elapsed();
    assert!(took >= SHUTDOWN_GRACE && took < SHUTDOWN_GRACE + Duration::from_secs(3));
    assert!(m.all_reaped());
    for pid in pids {
        assert!(gone(pid), "worker {pid} left behind");
    }
    // Idempotent, and quick the second time.
    let t = Instant::now();
    m.shutdown();
    assert!(t.elapsed() < Duration::from_millis(100));
}

#[test]
fn dropping_a_machine_reaps_its_workers() {
    let d = Dialect::Runtime;
    // One worker exits on Exit, one must be killed.
    let polite = format!(
        "{}; {}; exit 0",
        answer(&[ok(), ok()]),
        swallow(&[init(d), Request::Exit])
    );
    let m1 = launch(&polite, &spec(d));
    let m2 = launch(&format!("{}; exec sleep 100", answer(&[ok()])), &spec(d));
    let pids = [m1.pids()[0], m2.pids()[0]];
    let t = Instant::now();
    drop(m1);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "a polite worker took {:?}",
        t.elapsed()
    );
    drop(m2);
    for pid in pids {
        assert!(gone(pid), "worker {pid} left behind");
    }
}

#[test]
fn workers_get_the_socket_and_their_visible_devices() {
    let Ok(expected) = child_visible_devices(
        std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
        &[1, 0],
    ) else {
        eprintln!("this host's CUDA_VISIBLE_DEVICES has fewer than 2 entries: skipped");
        return;
    };
    let d = Dialect::Driver;
    let script = format!(
        "[ \"${WORKER_FD_ENV}\" = {WORKER_FD} ] || exit 9; \
         [ \"$CUDA_VISIBLE_DEVICES\" = '{expected}' ] || exit 10; \
         {}; {}; exit 0",
        answer(&[ok(), ok()]),
        swallow(&[init(d), Request::Exit])
    );
    let mut m = launch(&script, &spec_of(d, &[("a", Some(vec![1, 0]))]));
    assert_eq!(m.exit(0), Ok(()));
}

#[test]
fn the_backend_on_a_host_without_libcuda_is_not_supported() {
    let backend = CudaBackend::new(WorkerCommand::new("/nonexistent/ipc-worker", ["worker"]));
    assert_eq!(backend.name(), "cuda");
    assert!(!backend.has_hazard_log());
    let info = backend.info();
    assert_eq!(info.backend, "cuda");
    let result = backend.start(&spec(Dialect::Runtime));
    if CudaBackend::libcuda_present() {
        // A GPU host: the probe worker cannot start, which is the harness's fault.
        match result {
            Err(StartError::Harness(msg)) => assert!(msg.contains("probe"), "{msg}"),
            other => panic!("{:?}", other.err()),
        }
    } else {
        match result {
            Err(StartError::NotSupported(msg)) => {
                assert!(msg.contains("libcuda"), "{msg}");
                assert_eq!(msg, NO_LIBCUDA);
            }
            other => panic!("expected NotSupported, got {:?}", other.err()),
        }
        assert_eq!(info.gpu_name, None);
        assert_eq!(info.device_count, None);
    }
}

// --- The worker pool (`CudaBackend::launch`, the pooled path of `start`). ---

/// A scratch directory for one test's log of worker pids.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ipc-pool-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn log(&self) -> String {
        self.0.join("pids").display().to_string()
    }

    /// Every worker started so far, in order: pid and the tag it logged.
    fn started(&self) -> Vec<(u32, String)> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (pid, tag) = l.split_once(' ').unwrap_or((l, ""));
                (pid.parse().unwrap(), tag.to_string())
            })
            .collect()
    }

    fn pids(&self) -> Vec<u32> {
        self.started().into_iter().map(|(p, _)| p).collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fake worker that logs its pid (and its `CUDA_VISIBLE_DEVICES`) and,
/// as its position in the log, `$n` (1 for the first worker), then runs `body`.
fn logging(scratch: &Scratch, body: &str) -> WorkerCommand {
    let log = scratch.log();
    fake(&format!(
        "echo \"$$ ${{CUDA_VISIBLE_DEVICES:-none}}\" >> {log}; \
         n=$(grep -n \"^$$ \" {log} | cut -d: -f1); {body}"
    ))
}

/// Answers `Init` only once it has been sent (a pooled worker must not
/// answer before it is asked), then serves `Exit`.
fn polite(d: Dialect) -> String {
    format!(
        "{}; {}; {}; {}; exit 0",
        swallow(&[init(d)]),
        answer(&[ok()]),
        swallow(&[Request::Exit]),
        answer(&[ok()])
    )
}

fn launch_pooled(backend: &CudaBackend, spec: &MachineSpec) -> CudaMachine {
    match backend.launch(spec) {
        Ok(m) => m,
        Err(e) => panic!("launch failed: {e:?}"),
    }
}

/// Waits until the pool's idle workers have all answered `Init` (at most 5 s).
fn settle(scratch: &Scratch, expected_workers: usize) {
    let t = Instant::now();
    while scratch.pids().len() < expected_workers && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn a_second_start_takes_pooled_workers() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("second-start");
    let backend = CudaBackend::new(logging(&scratch, &polite(d))).with_pool_size(3);
    assert_eq!(backend.pool_size(), 3);
    let two = spec_of(d, &[("a", None), ("b", None)]);

    let mut m1 = launch_pooled(&backend, &two);
    let s = backend.pool_stats();
    assert_eq!((s.spawned, s.handed_out, s.idle), (3, 0, 3), "{s:?}");
    assert_eq!(m1.exit(0), Ok(()));
    assert_eq!(m1.exit(1), Ok(()));
    settle(&scratch, 5);
    let before = scratch.pids();
    assert_eq!(before.len(), 5, "{before:?}");

    let t = Instant::now();
    let mut m2 = launch_pooled(&backend, &two);
    let took = t.elapsed();
    // Both workers came from the pool; two replacements were started.
    let pids = m2.pids();
    for pid in &pids {
        assert!(
            before[2..].contains(pid),
            "{pid} was not pooled: {before:?}"
        );
        assert!(!m1.pids().contains(pid));
    }
    let s = backend.pool_stats();
    assert_eq!(
        (s.spawned, s.handed_out, s.discarded, s.idle),
        (5, 2, 0, 3),
        "{s:?}"
    );
    eprintln!("start with pooled workers took {took:?}");
    assert!(took < Duration::from_millis(500), "took {took:?}");
    // Pooled workers take their process's name, and serve as usual.
    assert_eq!(m2.proxy(0).name(), "a");
    assert_eq!(m2.proxy(1).name(), "b");
    assert_eq!(m2.exit(1), Ok(()));
    assert_eq!(m2.exit(0), Ok(()));
    assert!(m2.all_reaped());
    for pid in pids {
        assert!(gone(pid));
    }
}

#[test]
fn a_pooled_worker_gets_the_step_timeout_and_machine_semantics() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("semantics");
    // The first worker exits when asked; the pooled one hangs after Init.
    let script = format!(
        "{}; {}; [ \"$n\" -gt 1 ] && exec sleep 100; {}; {}; exit 0",
        swallow(&[init(d)]),
        answer(&[ok()]),
        swallow(&[Request::Exit]),
        answer(&[ok()])
    );
    let backend = CudaBackend::new(logging(&scratch, &script)).with_pool_size(1);
    let m1 = launch_pooled(&backend, &spec(d));
    drop(m1);
    settle(&scratch, 2);
    let mut m2 = launch_pooled(&backend, &spec(d));
    assert_eq!(backend.pool_stats().handed_out, 1);
    let pid = m2.pids()[0];
    assert_eq!(pid, scratch.pids()[1]);
    // Timed out after the scenario's step timeout, not the init timeout.
    let t = Instant::now();
    let e = m2.driver(0).device_count().unwrap_err();
    assert_eq!(
        e,
        DriverError::Lost(ProcessLoss::TimedOut { after_ms: 300 })
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(m2.proxy(0).is_reaped());
    assert!(gone(pid));
}

#[test]
fn start_waits_for_no_refill_and_takes_workers_still_initialising() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("no-wait");
    // The first worker answers at once, every later one after 1 s.
    let script = format!("[ \"$n\" -gt 1 ] && sleep 1; {}", polite(d));
    let backend = CudaBackend::new(logging(&scratch, &script)).with_pool_size(6);
    let t = Instant::now();
    let m1 = launch_pooled(&backend, &spec(d));
    let took = t.elapsed();
    assert!(took < Duration::from_millis(800), "start took {took:?}");
    assert_eq!(backend.pool_stats().idle, 6);
    drop(m1);
    // Taken while still initialising: waited for, not replaced.
    let mut m2 = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let s = backend.pool_stats();
    assert_eq!((s.handed_out, s.discarded, s.spawned), (2, 0, 8), "{s:?}");
    assert!(
        t.elapsed() < Duration::from_millis(1900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(m2.exit(0), Ok(()));
    assert_eq!(m2.exit(1), Ok(()));
}

fn upcoming(spec: MachineSpec, shared: bool) -> Upcoming {
    Upcoming {
        spec,
        sharing: if shared {
            WorkerSharing::Reused
        } else {
            WorkerSharing::Fresh("test".into())
        },
        fits: Vec::new(),
    }
}

#[test]
fn a_plan_starts_the_workers_of_the_machines_to_come_and_no_others() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("plan");
    let backend = CudaBackend::new(logging(&scratch, &polite(d))).with_pool_size(3);
    let two = spec_of(d, &[("a", None), ("b", None)]);
    // Told of one machine of two processes: two workers start at once,
    // before any machine does.
    backend.plan_ahead(&[upcoming(two.clone(), false)]);
    let s = backend.pool_stats();
    assert_eq!((s.spawned, s.idle), (2, 2), "{s:?}");
    settle(&scratch, 2);
    let ahead = scratch.pids();
    let t = Instant::now();
    let mut m = launch_pooled(&backend, &two);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    let mut pids = m.pids();
    pids.sort();
    let mut expected = ahead.clone();
    expected.sort();
    assert_eq!(pids, expected, "the machine took the workers started ahead");
    // Nothing more is planned: nothing more starts.
    let s = backend.pool_stats();
    assert_eq!((s.spawned, s.handed_out, s.idle), (2, 2, 0), "{s:?}");
    assert_eq!(m.exit(0), Ok(()));
    assert_eq!(m.exit(1), Ok(()));

    // Workers of a key the plan no longer needs leave; the new key's start.
    backend.plan_ahead(&[upcoming(two.clone(), false)]);
    settle(&scratch, 4);
    let idle_driver = scratch.pids()[2..].to_vec();
    backend.plan_ahead(&[upcoming(spec(Dialect::Runtime), false)]);
    let s = backend.pool_stats();
    assert_eq!((s.retired, s.spawned, s.idle), (2, 5, 1), "{s:?}");
    for pid in idle_driver {
        assert!(
            wait_gone(pid),
            "idle worker {pid} of an unplanned key still runs"
        );
    }
}

#[test]
fn a_plan_counts_the_workers_that_shared_machines_give_back() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("plan-shared");
    let worker = server(&scratch, &[on_reset(&scratch, clean()), count_one()]);
    let backend = CudaBackend::new(worker)
        .with_worker_policy(WorkerPolicy::ByScenario)
        .with_pool_size(3);
    let one = spec(d);
    let plan: Vec<Upcoming> = (0..5).map(|_| upcoming(one.clone(), true)).collect();
    // One worker serves all five machines, one after the other.
    for i in 0..plan.len() {
        backend.plan_ahead(&plan[i..]);
        let mut m = launch_shared(&backend, &one, true);
        assert_eq!(m.driver(0).device_count(), Ok(1));
        drop(m);
    }
    let s = backend.pool_stats();
    assert_eq!((s.spawned, s.returned), (1, 5), "{s:?}");
    assert_eq!(scratch.pids().len(), 1, "{:?}", scratch.pids());
    // A fresh machine ahead gets a never-used worker, past the shared ones.
    let mut mixed = vec![upcoming(one.clone(), true); 3];
    mixed.push(upcoming(one.clone(), false));
    backend.plan_ahead(&mixed);
    assert_eq!(backend.pool_stats().spawned, 2);
}

/// Whether `pid` runs (a zombie, killed but not yet reaped, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Threads that share a backend (`explore --jobs`, `run --jobs`) take each
/// other's pooled workers, so a worker must not die with the thread whose
/// launch started it (`PR_SET_PDEATHSIG` follows the spawning thread).
#[test]
fn pooled_workers_outlive_the_thread_that_started_them() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("outlive");
    let backend = CudaBackend::new(logging(&scratch, &polite(d))).with_pool_size(2);
    std::thread::scope(|s| {
        s.spawn(|| drop(launch_pooled(&backend, &spec(d))));
    });
    settle(&scratch, 3);
    let pooled = scratch.pids()[1..].to_vec();
    assert_eq!(pooled.len(), 2, "{pooled:?}");
    for pid in &pooled {
        assert!(
            alive(*pid),
            "pooled worker {pid} died with the thread that started it"
        );
    }
    let mut m2 = launch_pooled(&backend, &spec(d));
    assert!(
        pooled.contains(&m2.pids()[0]),
        "a pooled worker was not handed out"
    );
    assert_eq!(
        backend.pool_stats().discarded,
        0,
        "{:?}",
        backend.pool_stats()
    );
    assert_eq!(m2.exit(0), Ok(()));
}

#[test]
fn dead_pooled_workers_are_skipped_and_reaped() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("dead");
    let backend = CudaBackend::new(logging(&scratch, &polite(d))).with_pool_size(2);
    let m1 = launch_pooled(&backend, &spec(d));
    drop(m1);
    settle(&scratch, 3);
    let pooled = scratch.pids()[1..].to_vec();
    for pid in &pooled {
        let status = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut m2 = launch_pooled(&backend, &spec(d));
    let pid = m2.pids()[0];
    assert!(!pooled.contains(&pid), "a dead worker was handed out");
    let s = backend.pool_stats();
    assert_eq!((s.handed_out, s.discarded, s.idle), (0, 2, 2), "{s:?}");
    // Reaped, not left zombies.
    for pid in pooled {
        assert!(gone(pid), "pooled worker {pid} left behind");
    }
    assert_eq!(m2.exit(0), Ok(()));
}

#[test]
fn a_pooled_worker_that_speaks_unasked_is_discarded() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("unasked");
    // Later workers answer a request that was never sent.
    let script = format!(
        "{}; {}; [ \"$n\" -gt 1 ] && {}; {}; {}; exit 0",
        swallow(&[init(d)]),
        answer(&[ok()]),
        answer(&[ok()]),
        swallow(&[Request::Exit]),
        answer(&[ok()])
    );
    let backend = CudaBackend::new(logging(&scratch, &script)).with_pool_size(1);
    drop(launch_pooled(&backend, &spec(d)));
    settle(&scratch, 2);
    let pooled = scratch.pids()[1];
    let m2 = launch_pooled(&backend, &spec(d));
    assert_ne!(m2.pids()[0], pooled);
    assert_eq!(backend.pool_stats().discarded, 1);
    assert!(gone(pooled));
}

#[test]
fn pooled_workers_that_fail_init_are_replaced_and_not_respawned() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("fail-init");
    // Workers 1, 2 and from 5 on answer Init; 3 and 4 (the pool) fail it,
    // late enough to be handed out still initialising.
    let script = format!(
        "{}; if [ \"$n\" -eq 3 ] || [ \"$n\" -eq 4 ]; then sleep 0.3; {}; exec sleep 100; fi; {}; {}; {}; exit 0",
        swallow(&[init(d)]),
        answer(&[Err(WireError::Api(101))]),
        answer(&[ok()]),
        swallow(&[Request::Exit]),
        answer(&[ok()])
    );
    let backend = CudaBackend::new(logging(&scratch, &script)).with_pool_size(2);
    let two = spec_of(d, &[("a", None), ("b", None)]);
    drop(launch_pooled(&backend, &two));
    assert_eq!(backend.pool_stats().spawned, 2);
    // Both pooled workers are taken, fail, and are replaced by fresh ones.
    let mut m2 = launch_pooled(&backend, &two);
    let started = scratch.pids();
    // The two fresh workers serve m2; under load they may log their starts
    // in either order (this assertion was flaky when ordered).
    let mut serving = m2.pids();
    serving.sort_unstable();
    let mut fresh = started[4..6].to_vec();
    fresh.sort_unstable();
    assert_eq!(serving, fresh, "{started:?}");
    for pid in &started[2..4] {
        assert!(gone(*pid), "failed worker {pid} left behind");
    }
    let s = backend.pool_stats();
    assert_eq!((s.handed_out, s.discarded), (0, 2), "{s:?}");
    assert_eq!(m2.exit(0), Ok(()));
    assert_eq!(m2.exit(1), Ok(()));
}

#[test]
fn a_key_whose_pooled_init_fails_is_no_longer_refilled() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("unwanted");
    // Only the first worker can make its device current.
    let script = format!(
        "{}; if [ \"$n\" -gt 1 ]; then {}; else {}; fi; {}; {}; exit 0",
        swallow(&[init(d)]),
        answer(&[Err(WireError::Api(101))]),
        answer(&[ok()]),
        swallow(&[Request::Exit]),
        answer(&[ok()])
    );
    let backend = CudaBackend::new(logging(&scratch, &script)).with_pool_size(3);
    drop(launch_pooled(&backend, &spec(d)));
    settle(&scratch, 4);
    match backend.launch(&spec(d)) {
        Err(StartError::NotSupported(msg)) => assert!(msg.contains("'a'"), "{msg}"),
        other => panic!("expected NotSupported, got {:?}", other.err()),
    }
    let s = backend.pool_stats();
    // The three failures were discarded; nothing was started in their place.
    assert_eq!((s.spawned, s.discarded, s.idle), (3, 3, 0), "{s:?}");
    assert_eq!(scratch.pids().len(), 5);
}

#[test]
fn pooled_workers_match_dialect_device_and_visible_devices() {
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
        eprintln!("this host sets CUDA_VISIBLE_DEVICES: skipped");
        return;
    }
    let scratch = Scratch::new("keys");
    // Each worker checks that Init is for the dialect its env says.
    let script = format!(
        "if [ \"$CUDA_VISIBLE_DEVICES\" = 0 ]; then {}; else {}; fi; {}; {}; {}; exit 0",
        swallow(&[init(Dialect::Runtime)]),
        swallow(&[init(Dialect::Driver)]),
        answer(&[ok()]),
        swallow(&[Request::Exit]),
        answer(&[ok()])
    );
    let backend = CudaBackend::new(logging(&scratch, &script)).with_pool_size(1);
    let plain = spec_of(Dialect::Driver, &[("a", None)]);
    let visible = spec_of(Dialect::Runtime, &[("v", Some(vec![0]))]);
    drop(launch_pooled(&backend, &plain));
    settle(&scratch, 2);
    // Another key: nothing pooled for it yet.
    let mut m = launch_pooled(&backend, &visible);
    assert_eq!(backend.pool_stats().handed_out, 0);
    assert_eq!(m.exit(0), Ok(()));
    settle(&scratch, 4);
    let mut mv = launch_pooled(&backend, &visible);
    let mut mp = launch_pooled(&backend, &plain);
    assert_eq!(backend.pool_stats().handed_out, 2);
    let started = scratch.started();
    let tag = |pid: u32| started.iter().find(|(p, _)| *p == pid).unwrap().1.clone();
    assert_eq!(tag(mv.pids()[0]), "0");
    assert_eq!(tag(mp.pids()[0]), "none");
    assert_eq!(mv.exit(0), Ok(()));
    assert_eq!(mp.exit(0), Ok(()));
}

#[test]
fn dropping_the_backend_kills_and_reaps_idle_workers() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("drop");
    // The first worker exits when asked; the pooled ones ignore everything.
    let script = format!(
        "{}; {}; [ \"$n\" -gt 1 ] && exec sleep 100; {}; {}; exit 0",
        swallow(&[init(d)]),
        answer(&[ok()]),
        swallow(&[Request::Exit]),
        answer(&[ok()])
    );
    let backend = CudaBackend::new(logging(&scratch, &script)).with_pool_size(4);
    drop(launch_pooled(&backend, &spec_of(d, &[("a", None)])));
    // Some still initialising, some idle.
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    drop(backend);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let pids = scratch.pids();
    assert_eq!(pids.len(), 5, "{pids:?}");
    for pid in pids {
        assert!(gone(pid), "worker {pid} left behind");
    }
}

#[test]
fn a_pool_of_zero_starts_only_what_start_needs() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("zero");
    let backend = CudaBackend::new(logging(&scratch, &polite(d))).with_pool_size(0);
    for _ in 0..2 {
        let mut m = launch_pooled(&backend, &spec(d));
        assert_eq!(m.exit(0), Ok(()));
    }
    assert_eq!(scratch.pids().len(), 2);
    assert_eq!(backend.pool_stats(), Default::default());
    assert_eq!(
        CudaBackend::new(fake("exit 0")).pool_size(),
        ipc_harness::cuda::DEFAULT_POOL_SIZE
    );
}

// --- Worker reuse (`CudaBackend::with_worker_reuse`). ---

/// Payload length of `r` (how the serving fake worker tells requests apart).
fn payload_len(r: &Request) -> usize {
    encode_frame(r).unwrap().len() - 4
}

/// A logging fake worker that serves requests in a loop: it reads each
/// frame's length (all requests used here are shorter than 256 bytes, so
/// the first length byte is the length), swallows the payload, and runs the
/// arm whose request has that payload length, or else answers `Unit`.
/// `Exit` is answered, then the worker exits 0; the end of the stream
/// ends it too.
fn server(scratch: &Scratch, arms: &[(Request, String)]) -> WorkerCommand {
    let mut arms = arms.to_vec();
    arms.push((Request::Exit, format!("{}; exit 0", answer(&[ok()]))));
    // The first step of a reset is logged and answered Unit unless an arm
    // says otherwise.
    if !arms.iter().any(|(r, _)| *r == Request::ReleaseImported) {
        let log = scratch.0.join("released").display().to_string();
        arms.push((
            Request::ReleaseImported,
            format!("echo $$ >> {log}; {}", answer(&[ok()])),
        ));
    }
    let mut cases = String::new();
    let mut seen = Vec::new();
    for (r, action) in &arms {
        let len = payload_len(r);
        assert!(!seen.contains(&len), "two arms of length {len}");
        assert_ne!(len, payload_len(&init(Dialect::Driver)));
        assert_ne!(len, payload_len(&init(Dialect::Runtime)));
        seen.push(len);
        cases.push_str(&format!("{len}) {action} ;; "));
    }
    let body = format!(
        "while :; do \
           l=$(head -c 4 <&{WORKER_FD} | od -An -tu1 | awk '{{print $1}}'); \
           [ -z \"$l\" ] && exit 0; \
           head -c \"$l\" <&{WORKER_FD} >/dev/null; \
           case $l in {cases} *) {} ;; esac; \
         done",
        answer(&[ok()])
    );
    logging(scratch, &body)
}

impl Scratch {
    fn resets_log(&self) -> String {
        self.0.join("resets").display().to_string()
    }

    /// The pids that received `ReleaseImported`, in order (logged by the
    /// default arm of [`server`]).
    fn released(&self) -> Vec<u32> {
        std::fs::read_to_string(self.0.join("released"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    }

    /// The pids that received `Reset`, in order (logged by [`on_reset`]).
    fn resets(&self) -> Vec<u32> {
        std::fs::read_to_string(self.resets_log())
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    }
}

/// The arm for `Reset`: log the pid, then run `then`.
fn on_reset(scratch: &Scratch, then: String) -> (Request, String) {
    (
        Request::Reset,
        format!("echo $$ >> {}; {then}", scratch.resets_log()),
    )
}

fn clean() -> String {
    answer(&[Ok(Reply::Clean { spare_contexts: 0 })])
}

fn count_one() -> (Request, String) {
    (Request::DeviceCount, answer(&[Ok(Reply::Count(1))]))
}

/// Waits up to 5 s for `pid` to be reaped.
fn wait_gone(pid: u32) -> bool {
    let t = Instant::now();
    while !gone(pid) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    gone(pid)
}

fn reusing(worker: WorkerCommand, pool: usize) -> CudaBackend {
    let backend = CudaBackend::new(worker)
        .with_worker_reuse(true)
        .with_pool_size(pool);
    assert!(backend.worker_reuse());
    backend
}

#[test]
fn a_cleanly_reset_worker_serves_the_next_machine() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("reuse");
    let worker = server(&scratch, &[on_reset(&scratch, clean()), count_one()]);
    let backend = reusing(worker, 1);
    let mut m1 = launch_pooled(&backend, &spec(d));
    let pid = m1.pids()[0];
    assert_eq!(m1.driver(0).device_count(), Ok(1));
    // The worker of a live machine counts as coming back: no refill.
    assert_eq!(backend.pool_stats().spawned, 0);
    m1.shutdown();
    assert_eq!(scratch.resets(), vec![pid]);
    assert!(!gone(pid), "a clean worker was shut down");
    assert_eq!(m1.pids(), vec![pid]);
    assert!(m1.all_reaped(), "the machine no longer owns its worker");
    // The stub left behind runs nothing.
    assert!(matches!(
        m1.driver(0).device_count(),
        Err(DriverError::Harness(_))
    ));
    drop(m1);
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.not_returned, s.idle), (1, 0, 1), "{s:?}");

    let t = Instant::now();
    let mut m2 = launch_pooled(&backend, &spec_of(d, &[("b", None)]));
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(m2.pids(), vec![pid], "the reset worker was not reused");
    assert_eq!(m2.proxy(0).name(), "b");
    assert_eq!(m2.driver(0).device_count(), Ok(1));
    assert_eq!(backend.pool_stats().handed_out, 1);
    // And once more, through a reset.
    drop(m2);
    let mut m3 = launch_pooled(&backend, &spec(d));
    assert_eq!(m3.pids(), vec![pid]);
    assert_eq!(m3.exit(0), Ok(()));
    assert!(gone(pid));
    assert_eq!(
        scratch.pids(),
        vec![pid],
        "only one worker was ever started"
    );
    assert_eq!(scratch.resets(), vec![pid, pid]);
}

/// Reset comes in two steps across a machine's workers: each releases
/// what it imported from the others (`ReleaseImported`) before any frees
/// what it exported (`Reset`), since an exporter's early free is undefined
/// (pool.lifetime.exporter-frees-first). The first worker to be asked
/// answers at once, the other after 300 ms: a machine that reset each
/// worker as soon as it answered would log a reset between the releases.
#[test]
fn every_worker_releases_imports_before_any_is_reset() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("two-step-reset");
    let log = scratch.0.join("order").display().to_string();
    let first = scratch.0.join("first").display().to_string();
    let release = format!(
        "mkdir {first} 2>/dev/null || sleep 0.3; echo release >> {log}; {}",
        answer(&[ok()])
    );
    let reset = format!("echo reset >> {log}; {}", clean());
    let worker = server(
        &scratch,
        &[(Request::ReleaseImported, release), (Request::Reset, reset)],
    );
    let backend = reusing(worker, 2);
    let mut m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    m.shutdown();
    let order = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        ["release", "release", "reset", "reset"],
        "{order}"
    );
    assert_eq!(backend.pool_stats().returned, 2);
}

/// A worker that cannot release its imports is discarded without a
/// `Reset`; the machine's other workers still come back.
#[test]
fn a_worker_that_fails_to_release_imports_is_discarded_unreset() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("release-error");
    let first = scratch.0.join("first").display().to_string();
    let failing = answer(&[Err(WireError::Harness("releasing imports failed".into()))]);
    let release = format!(
        "if mkdir {first} 2>/dev/null; then {failing}; else {}; fi",
        answer(&[ok()])
    );
    let worker = server(
        &scratch,
        &[
            (Request::ReleaseImported, release),
            on_reset(&scratch, clean()),
        ],
    );
    let backend = reusing(worker, 2);
    let m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let pids = m.pids();
    drop(m);
    let reset = scratch.resets();
    assert_eq!(reset.len(), 1, "{reset:?}");
    let discarded = *pids.iter().find(|p| !reset.contains(p)).unwrap();
    assert!(wait_gone(discarded), "worker {discarded} left behind");
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.not_returned), (1, 1), "{s:?}");
}

#[test]
fn without_reuse_no_worker_is_reset_or_handed_out_twice() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("no-reuse");
    let worker = server(&scratch, &[on_reset(&scratch, clean()), count_one()]);
    let backend = CudaBackend::new(worker)
        .with_worker_reuse(false)
        .with_pool_size(1);
    assert!(!backend.worker_reuse());
    let m1 = launch_pooled(&backend, &spec(d));
    let first = m1.pids()[0];
    drop(m1);
    settle(&scratch, 2);
    let mut m2 = launch_pooled(&backend, &spec(d));
    assert_ne!(m2.pids()[0], first);
    assert_eq!(m2.driver(0).device_count(), Ok(1));
    drop(m2);
    assert!(wait_gone(first));
    assert!(scratch.resets().is_empty(), "{:?}", scratch.resets());
    assert_eq!(backend.pool_stats().returned, 0);
    // Reuse without a pool does nothing either.
    let scratch0 = Scratch::new("no-reuse-0");
    let worker = server(&scratch0, &[on_reset(&scratch0, clean())]);
    let backend = reusing(worker, 0);
    let first = launch_pooled(&backend, &spec(d)).pids()[0];
    let second = launch_pooled(&backend, &spec(d)).pids()[0];
    assert_ne!(first, second);
    assert!(scratch0.resets().is_empty());
}

#[test]
fn a_worker_that_fails_reset_is_discarded_and_reaped() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("reset-error");
    // Answers Reset with an error, then would go on serving.
    let failing = answer(&[Err(WireError::Harness("reset incomplete".into()))]);
    let backend = reusing(server(&scratch, &[on_reset(&scratch, failing)]), 1);
    let m1 = launch_pooled(&backend, &spec(d));
    let pid = m1.pids()[0];
    let t = Instant::now();
    drop(m1);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(scratch.resets(), vec![pid]);
    assert!(wait_gone(pid), "worker {pid} left behind");
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.not_returned, s.idle), (0, 1, 0), "{s:?}");
    let mut m2 = launch_pooled(&backend, &spec(d));
    assert_ne!(m2.pids()[0], pid);
    assert_eq!(m2.exit(0), Ok(()));
}

#[test]
fn a_worker_that_does_not_answer_reset_in_time_is_killed() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("reset-hang");
    let backend = reusing(
        server(&scratch, &[on_reset(&scratch, "exec sleep 100".into())]),
        2,
    );
    let m1 = launch_pooled(&backend, &spec(d));
    let pid = m1.pids()[0];
    let t = Instant::now();
    drop(m1);
    let took = t.elapsed();
    assert!(took >= ipc_harness::cuda::RESET_TIMEOUT, "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(wait_gone(pid), "worker {pid} left behind");
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.not_returned), (0, 1), "{s:?}");
}

#[test]
fn without_shared_exits_a_machine_with_an_exited_process_returns_no_worker() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("reuse-exited");
    // IPC_CONFORMANCE_SHARE_ALSO=none: the strict policy.
    let backend =
        reusing(server(&scratch, &[on_reset(&scratch, clean())]), 2).with_exits_shared(false);
    let mut m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let pids = m.pids();
    assert_eq!(m.exit(0), Ok(()));
    drop(m);
    assert!(scratch.resets().is_empty(), "{:?}", scratch.resets());
    for pid in pids {
        assert!(wait_gone(pid), "worker {pid} left behind");
    }
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.idle), (0, 0), "{s:?}");
    // Nothing is out any more: the next start refills the pool again.
    drop(launch_pooled(&backend, &spec(d)));
    assert!(backend.pool_stats().spawned >= 1);
}

#[test]
fn with_exits_shared_the_survivors_of_an_exit_come_back() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("reuse-exit-shared");
    let backend =
        reusing(server(&scratch, &[on_reset(&scratch, clean())]), 2).with_exits_shared(true);
    let mut m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let pids = m.pids();
    assert_eq!(m.exit(0), Ok(()));
    drop(m);
    assert!(
        wait_gone(pids[0]),
        "the exited worker {} left behind",
        pids[0]
    );
    assert_eq!(
        scratch.resets(),
        vec![pids[1]],
        "only the survivor is reset"
    );
    assert!(!gone(pids[1]), "the clean survivor was shut down");
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.not_returned), (1, 0), "{s:?}");
    // It serves the next machine.
    let m2 = launch_pooled(&backend, &spec(d));
    assert_eq!(m2.pids(), vec![pids[1]]);
}

#[test]
fn a_machine_with_a_crashed_or_hung_process_returns_no_worker() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("reuse-crashed");
    let backend = reusing(
        server(
            &scratch,
            &[
                on_reset(&scratch, clean()),
                (Request::DeviceCount, "kill -SEGV $$".into()),
                (Request::CurrentContext, "exec sleep 100".into()),
            ],
        ),
        2,
    );
    let two = spec_of(d, &[("a", None), ("b", None)]);
    // A crash.
    let mut m = launch_pooled(&backend, &two);
    let mut pids = m.pids();
    assert!(matches!(
        m.driver(0).device_count(),
        Err(DriverError::Lost(ProcessLoss::Crashed { .. }))
    ));
    drop(m);
    // A hang.
    let mut m = launch_pooled(&backend, &two);
    pids.extend(m.pids());
    assert!(matches!(
        m.driver(1).current_context(),
        Err(DriverError::Lost(ProcessLoss::TimedOut { .. }))
    ));
    drop(m);
    assert!(scratch.resets().is_empty(), "{:?}", scratch.resets());
    for pid in pids {
        assert!(wait_gone(pid), "worker {pid} left behind");
    }
    assert_eq!(backend.pool_stats().returned, 0);
}

#[test]
fn a_worker_that_answered_a_sticky_error_is_not_reused() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("reuse-sticky");
    let backend = reusing(
        server(
            &scratch,
            &[
                on_reset(&scratch, clean()),
                (Request::CurrentContext, answer(&[Err(WireError::Api(700))])),
            ],
        ),
        2,
    );
    let mut m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let pids = m.pids();
    assert_eq!(
        m.driver(0).current_context(),
        Err(DriverError::Api(ApiError::from_code(d, 700)))
    );
    drop(m);
    // Only the healthy worker was reset and came back.
    assert_eq!(scratch.resets(), vec![pids[1]]);
    assert!(wait_gone(pids[0]), "poisoned worker left behind");
    assert!(!gone(pids[1]));
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.idle), (1, 1), "{s:?}");
    let mut m = launch_pooled(&backend, &spec(d));
    assert_eq!(m.pids(), vec![pids[1]]);
    assert_eq!(m.exit(0), Ok(()));
}

#[test]
fn returned_workers_respect_the_pool_size() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("reuse-cap");
    let backend = reusing(server(&scratch, &[on_reset(&scratch, clean())]), 1);
    let m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let pids = m.pids();
    drop(m);
    assert_eq!(scratch.resets().len(), 2);
    let s = backend.pool_stats();
    assert_eq!(
        (s.spawned, s.returned, s.not_returned, s.idle),
        (0, 1, 1, 1),
        "{s:?}"
    );
    // The first went back; the second, with the pool full, was shut down.
    assert!(!gone(pids[0]));
    assert!(wait_gone(pids[1]), "extra worker left behind");
    let mut m = launch_pooled(&backend, &spec(d));
    assert_eq!(m.pids(), vec![pids[0]]);
    assert_eq!(m.exit(0), Ok(()));
}

#[test]
fn dropping_the_backend_reaps_returned_workers() {
    let d = Dialect::Runtime;
    let scratch = Scratch::new("reuse-drop");
    let backend = reusing(server(&scratch, &[on_reset(&scratch, clean())]), 2);
    let m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let pids = m.pids();
    drop(m);
    assert_eq!(backend.pool_stats().idle, 2);
    for pid in &pids {
        assert!(!gone(*pid));
    }
    let t = Instant::now();
    drop(backend);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    for pid in pids {
        assert!(gone(pid), "returned worker {pid} left behind");
    }
}

#[test]
fn a_machine_that_outlives_its_backend_shuts_its_workers_down() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("reuse-orphan");
    let backend = reusing(server(&scratch, &[on_reset(&scratch, clean())]), 2);
    let mut m = launch_pooled(&backend, &spec(d));
    let pid = m.pids()[0];
    drop(backend);
    m.shutdown();
    assert!(scratch.resets().is_empty());
    assert!(wait_gone(pid), "worker {pid} left behind");
}

// --- Worker policy by scenario (`CudaBackend::with_worker_policy`). ---

fn launch_shared(backend: &CudaBackend, spec: &MachineSpec, shared: bool) -> CudaMachine {
    match backend.launch_shared(spec, shared) {
        Ok(m) => m,
        Err(e) => panic!("launch failed: {e:?}"),
    }
}

#[test]
fn by_scenario_only_shareable_machines_take_or_give_back_reset_workers() {
    use ipc_harness::sharing::WorkerPolicy;
    let d = Dialect::Driver;
    let scratch = Scratch::new("by-scenario");
    let worker = server(&scratch, &[on_reset(&scratch, clean()), count_one()]);
    let backend = CudaBackend::new(worker)
        .with_worker_policy(WorkerPolicy::ByScenario)
        .with_pool_size(1);
    assert!(backend.shares_workers());
    assert_eq!(backend.worker_policy(), WorkerPolicy::ByScenario);

    let mut shared = launch_shared(&backend, &spec(d), true);
    let reused = shared.pids()[0];
    assert_eq!(shared.driver(0).device_count(), Ok(1));
    drop(shared);
    assert_eq!(scratch.resets(), vec![reused]);
    assert_eq!(backend.pool_stats().returned, 1);

    // A machine that needs fresh processes never gets the served worker,
    // and its own worker is not reset nor kept.
    let mut fresh = launch_shared(&backend, &spec(d), false);
    let fresh_pid = fresh.pids()[0];
    assert_ne!(fresh_pid, reused, "a served worker went to a fresh machine");
    assert_eq!(fresh.driver(0).device_count(), Ok(1));
    drop(fresh);
    assert!(wait_gone(fresh_pid));
    assert_eq!(
        scratch.resets(),
        vec![reused],
        "a fresh machine's worker was reset"
    );

    // The served worker still waits for the next shareable machine.
    let mut again = launch_shared(&backend, &spec(d), true);
    assert_eq!(again.pids(), vec![reused]);
    assert_eq!(again.driver(0).device_count(), Ok(1));
    drop(again);
    assert_eq!(scratch.resets(), vec![reused, reused]);
}

#[test]
fn a_fresh_policy_never_reuses_even_a_shareable_machine() {
    use ipc_harness::sharing::WorkerPolicy;
    let d = Dialect::Runtime;
    let scratch = Scratch::new("fresh-policy");
    let worker = server(&scratch, &[on_reset(&scratch, clean()), count_one()]);
    let backend = CudaBackend::new(worker)
        .with_worker_policy(WorkerPolicy::Fresh)
        .with_pool_size(1);
    assert!(!backend.shares_workers());
    let first = launch_shared(&backend, &spec(d), true);
    let pid = first.pids()[0];
    drop(first);
    let second = launch_shared(&backend, &spec(d), true);
    assert_ne!(second.pids()[0], pid);
    drop(second);
    assert!(scratch.resets().is_empty(), "a worker was reset");
}

#[test]
fn a_process_that_creates_contexts_gets_the_worker_with_spare_contexts() {
    use ipc_harness::sharing::WorkerPolicy;
    use ipc_harness::WorkerFit;
    let d = Dialect::Driver;
    let scratch = Scratch::new("fits");
    // The first worker to be reset (it writes its pid) keeps two spare
    // contexts at every reset, every other worker none.
    let marker = scratch.0.join("first");
    let spares_log = scratch.0.join("spares");
    let reset = format!(
        "if mkdir {m} 2>/dev/null; then echo $$ > {log}; fi; \
         if [ \"$(cat {log})\" = \"$$\" ]; then {two}; else {none}; fi",
        m = marker.display(),
        log = spares_log.display(),
        two = answer(&[Ok(Reply::Clean { spare_contexts: 2 })]),
        none = clean()
    );
    let worker = server(&scratch, &[on_reset(&scratch, reset), count_one()]);
    let backend = CudaBackend::new(worker)
        .with_worker_policy(WorkerPolicy::ByScenario)
        .with_pool_size(2);
    let two = spec_of(d, &[("a", None), ("b", None)]);
    let first = launch_shared(&backend, &two, true);
    let pids = first.pids();
    drop(first);
    assert_eq!(backend.pool_stats().returned, 2);
    let with_spares: u32 = std::fs::read_to_string(&spares_log)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let without = *pids.iter().find(|&&p| p != with_spares).unwrap();

    let creates = WorkerFit {
        creates_contexts: true,
        ..WorkerFit::default()
    };
    let launch = |fits: &[WorkerFit]| match backend.launch_placed(&two, true, fits) {
        Ok(m) => m,
        Err(e) => panic!("launch failed: {e:?}"),
    };
    // Whatever the order of the processes, the spares go to the one that
    // creates contexts; a process that does not gets the worker without.
    let m = launch(&[WorkerFit::default(), creates]);
    assert_eq!(m.pids(), vec![without, with_spares]);
    drop(m);
    let m = launch(&[creates, WorkerFit::default()]);
    assert_eq!(m.pids(), vec![with_spares, without]);
}

#[test]
fn a_process_that_needs_new_contexts_takes_a_worker_that_never_made_one() {
    use ipc_harness::sharing::WorkerPolicy;
    use ipc_harness::WorkerFit;
    let d = Dialect::Driver;
    let scratch = Scratch::new("new-contexts");
    let make = (
        Request::CreateContext { device: 0 },
        answer(&[Ok(Reply::Context(0x77))]),
    );
    let worker = server(&scratch, &[on_reset(&scratch, clean()), count_one(), make]);
    let backend = CudaBackend::new(worker)
        .with_worker_policy(WorkerPolicy::ByScenario)
        .with_pool_size(2);
    let two = spec_of(d, &[("a", None), ("b", None)]);
    // `b` makes a context; both workers come back.
    let mut first = launch_shared(&backend, &two, true);
    let pids = first.pids();
    first.driver(1).create_context(0).unwrap();
    drop(first);
    assert_eq!(backend.pool_stats().returned, 2);
    let (contextless, made) = (pids[0], pids[1]);

    let new_contexts = WorkerFit {
        creates_contexts: true,
        new_contexts: true,
        ..WorkerFit::default()
    };
    let launch =
        |spec: &MachineSpec, fits: &[WorkerFit]| match backend.launch_placed(spec, true, fits) {
            Ok(m) => m,
            Err(e) => panic!("launch failed: {e:?}"),
        };
    // Whatever the order, the process that needs new contexts gets the
    // worker that never made one.
    let m = launch(&two, &[new_contexts, WorkerFit::default()]);
    assert_eq!(m.pids(), vec![contextless, made]);
    drop(m);
    let m = launch(&two, &[WorkerFit::default(), new_contexts]);
    assert_eq!(m.pids(), vec![made, contextless]);
    drop(m);
    // With only the worker that made a context idle, it takes a new one.
    let one = spec_of(d, &[("a", None)]);
    let hold = launch(&one, &[new_contexts]);
    assert_eq!(hold.pids(), vec![contextless]);
    let m = launch(&one, &[new_contexts]);
    let new = m.pids()[0];
    assert!(!pids.contains(&new), "{new} after {pids:?}");
}

#[test]
fn a_fresh_process_of_a_shared_machine_takes_a_new_worker_and_keeps_it() {
    use ipc_harness::WorkerFit;
    let d = Dialect::Driver;
    let scratch = Scratch::new("fresh-process");
    let worker = server(&scratch, &[on_reset(&scratch, clean()), count_one()]);
    let backend = CudaBackend::new(worker)
        .with_worker_policy(WorkerPolicy::ByScenario)
        .with_pool_size(2);
    let two = spec_of(d, &[("a", None), ("b", None)]);
    let first = launch_shared(&backend, &two, true);
    let served = first.pids();
    drop(first);
    assert_eq!(backend.pool_stats().returned, 2);

    // `b` does what a reset cannot undo: it takes a worker that never
    // served, `a` one that did; at the end only `a`'s is reset and back.
    let fresh = WorkerFit {
        fresh: true,
        ..WorkerFit::default()
    };
    let m = match backend.launch_placed(&two, true, &[WorkerFit::default(), fresh]) {
        Ok(m) => m,
        Err(e) => panic!("launch failed: {e:?}"),
    };
    let pids = m.pids();
    assert!(served.contains(&pids[0]), "{pids:?} after {served:?}");
    assert!(!served.contains(&pids[1]), "{pids:?} after {served:?}");
    let resets_before = scratch.resets().len();
    let released_before = scratch.released().len();
    drop(m);
    assert!(wait_gone(pids[1]), "the fresh process's worker still runs");
    // Both released their imports first, the fresh one too: it may hold
    // what the shared one's reset frees.
    let released = scratch.released();
    assert_eq!(released.len(), released_before + 2, "{released:?}");
    assert!(released.contains(&pids[1]), "{released:?}");
    assert_eq!(scratch.resets().len(), resets_before + 1);
    assert_eq!(scratch.resets().last(), Some(&pids[0]));
    assert!(!gone(pids[0]), "the shared process's worker was not kept");
    assert_eq!(backend.pool_stats().idle, 2);
}

#[test]
fn a_full_pool_keeps_its_last_worker_that_never_made_a_context() {
    use ipc_harness::WorkerFit;
    let d = Dialect::Driver;
    let scratch = Scratch::new("full-pool-contextless");
    // At its reset a worker asked `device_count` keeps two spare contexts,
    // another that made a context one, the others none.
    let asked = |pid: &str| format!("{}/asked.{pid}", scratch.0.display());
    let made = |pid: &str| format!("{}/made.{pid}", scratch.0.display());
    let count = (
        Request::DeviceCount,
        format!("touch {}; {}", asked("$$"), answer(&[Ok(Reply::Count(1))])),
    );
    let reset = format!(
        "if [ -e {} ]; then {}; elif [ -e {} ]; then {}; else {}; fi",
        asked("$$"),
        answer(&[Ok(Reply::Clean { spare_contexts: 2 })]),
        made("$$"),
        answer(&[Ok(Reply::Clean { spare_contexts: 1 })]),
        clean()
    );
    let make = (
        Request::CreateContext { device: 0 },
        format!(
            "touch {}; {}",
            made("$$"),
            answer(&[Ok(Reply::Context(0x77))])
        ),
    );
    let worker = server(&scratch, &[on_reset(&scratch, reset), count, make]);
    let backend = reusing(worker, 2);
    let three = spec_of(d, &[("a", None), ("b", None), ("c", None)]);
    let mut m = launch_pooled(&backend, &three);
    let pids = m.pids();
    // `b` and `c` make contexts (`b` keeps a spare, `c` two); `a` none.
    m.driver(1).create_context(0).unwrap();
    m.driver(2).create_context(0).unwrap();
    assert_eq!(m.driver(2).device_count(), Ok(1));
    // All three come back in order; the pool has room for two. `a`, with
    // the fewest spares, would be the first to go, but it is the only one
    // that never made a context: `b` goes instead.
    drop(m);
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.not_returned, s.idle), (3, 1, 2), "{s:?}");
    let new_contexts = WorkerFit {
        creates_contexts: true,
        new_contexts: true,
        ..WorkerFit::default()
    };
    let creates = WorkerFit {
        creates_contexts: true,
        ..WorkerFit::default()
    };
    let two = spec_of(d, &[("a", None), ("b", None)]);
    let m = match backend.launch_placed(&two, true, &[creates, new_contexts]) {
        Ok(m) => m,
        Err(e) => panic!("launch failed: {e:?}"),
    };
    assert_eq!(m.pids(), vec![pids[2], pids[0]]);
}

#[test]
fn a_full_pool_keeps_the_worker_with_spare_contexts() {
    let d = Dialect::Driver;
    let scratch = Scratch::new("full-pool-spares");
    // A worker asked `device_count` keeps two spare contexts at its reset,
    // the others none.
    let asked = |pid: &str| format!("{}/asked.{pid}", scratch.0.display());
    let count = (
        Request::DeviceCount,
        format!("touch {}; {}", asked("$$"), answer(&[Ok(Reply::Count(1))])),
    );
    let reset = format!(
        "if [ -e {} ]; then {}; else {}; fi",
        asked("$$"),
        answer(&[Ok(Reply::Clean { spare_contexts: 2 })]),
        clean()
    );
    let worker = server(&scratch, &[on_reset(&scratch, reset), count]);
    let backend = reusing(worker, 1);
    let mut m = launch_pooled(&backend, &spec_of(d, &[("a", None), ("b", None)]));
    let with_spares = m.pids()[1];
    assert_eq!(m.driver(1).device_count(), Ok(1));
    // Both come back; the pool has room for one. `a` comes back first, but
    // `b`, with the spares, is the one kept.
    drop(m);
    let s = backend.pool_stats();
    assert_eq!((s.returned, s.not_returned, s.idle), (2, 1, 1), "{s:?}");
    let m = launch_pooled(&backend, &spec(d));
    assert_eq!(m.pids(), vec![with_spares]);
}

/// A fake worker that logs its pid and its `CUDA_DEVICE_MAX_CONNECTIONS`.
fn logging_queues(scratch: &Scratch, d: Dialect) -> WorkerCommand {
    let log = scratch.log();
    fake(&format!(
        "echo \"$$ ${{CUDA_DEVICE_MAX_CONNECTIONS:-default}}\" >> {log}; {}",
        polite(d)
    ))
}

#[test]
fn a_process_on_the_legacy_stream_alone_gets_a_worker_with_one_queue() {
    use ipc_harness::WorkerFit;
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_some() {
        eprintln!("this host sets CUDA_DEVICE_MAX_CONNECTIONS: skipped");
        return;
    }
    let d = Dialect::Driver;
    let scratch = Scratch::new("one-queue");
    let backend = CudaBackend::new(logging_queues(&scratch, d)).with_pool_size(0);
    let two = spec_of(d, &[("a", None), ("b", None)]);
    let one_queue = WorkerFit {
        one_queue: true,
        ..WorkerFit::default()
    };
    let m = match backend.launch_placed(&two, false, &[one_queue, WorkerFit::default()]) {
        Ok(m) => m,
        Err(e) => panic!("launch failed: {e:?}"),
    };
    let pids = m.pids();
    let queues = |pid: u32| {
        scratch
            .started()
            .into_iter()
            .find(|(p, _)| *p == pid)
            .map(|(_, tag)| tag)
    };
    assert_eq!(queues(pids[0]).as_deref(), Some("1"));
    assert_eq!(queues(pids[1]).as_deref(), Some("default"));
}

#[test]
fn only_the_by_scenario_policy_starts_workers_with_one_queue() {
    use ipc_harness::sharing::WorkerPolicy;
    use ipc_harness::WorkerFit;
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_some() {
        eprintln!("this host sets CUDA_DEVICE_MAX_CONNECTIONS: skipped");
        return;
    }
    let d = Dialect::Driver;
    let one = spec_of(d, &[("a", None)]);
    let planned = Upcoming {
        fits: vec![WorkerFit {
            one_queue: true,
            ..WorkerFit::default()
        }],
        ..upcoming(one, false)
    };
    let started_with = |name: &str, policy: WorkerPolicy, on: bool| {
        let scratch = Scratch::new(name);
        let backend = CudaBackend::new(logging_queues(&scratch, d))
            .with_worker_policy(policy)
            .with_one_queue(on)
            .with_pool_size(1);
        backend.plan_ahead(std::slice::from_ref(&planned));
        settle(&scratch, 1);
        let tags: Vec<String> = scratch.started().into_iter().map(|(_, t)| t).collect();
        tags
    };
    assert_eq!(
        started_with("queue-policy", WorkerPolicy::ByScenario, true),
        ["1"]
    );
    assert_eq!(
        started_with("queue-off", WorkerPolicy::ByScenario, false),
        ["default"]
    );
    assert_eq!(
        started_with("queue-fresh", WorkerPolicy::Fresh, true),
        ["default"]
    );
}
