//! Workers end when they should: a parent killed with SIGKILL (a CI
//! timeout) while a worker hangs leaves no worker behind under PID 1, and a
//! stop (SIGINT) does not wait a hung worker's whole step timeout.
#![cfg(feature = "cuda")]

use ipc_harness::cuda::{WorkerCommand, WorkerProxy};
use ipc_harness::Dialect;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PARENT_ENV: &str = "IPC_TEST_WORKER_PARENT";

/// Alive and not a zombie (a container's PID 1 may never reap it).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
        }
        Err(_) => false,
    }
}

/// In the parent role: start a worker that hangs, print its pid, wait.
fn parent_role(pid_file: &Path) {
    let hang = WorkerCommand::new("/bin/sh", ["-c", "exec sleep 600"]);
    let proxy = WorkerProxy::spawn(
        "hung",
        Dialect::Runtime,
        Duration::from_secs(600),
        &hang,
        &[],
    )
    .expect("the fake worker starts");
    std::fs::write(pid_file, proxy.pid().to_string()).unwrap();
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn a_worker_dies_when_its_parent_is_killed() {
    if let Some(file) = std::env::var_os(PARENT_ENV) {
        parent_role(Path::new(&file));
        return;
    }
    let pid_file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("worker-parent-death-{}", std::process::id()));
    let _ = std::fs::remove_file(&pid_file);
    let mut parent = Command::new(std::env::current_exe().unwrap())
        .args([
            "a_worker_dies_when_its_parent_is_killed",
            "--exact",
            "--nocapture",
        ])
        .env(PARENT_ENV, &pid_file)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let worker: u32 = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file) {
            if let Ok(pid) = text.trim().parse() {
                break pid;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no worker started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(alive(worker));
    parent.kill().unwrap();
    parent.wait().unwrap();
    let killed = Instant::now();
    while alive(worker) {
        if killed.elapsed() > Duration::from_secs(5) {
            let _ = Command::new("kill")
                .args(["-9", &worker.to_string()])
                .status();
            panic!("worker {worker} outlived its parent");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(&pid_file);
}

/// A stop (SIGINT in `run`) cuts a wait on a hung worker to the stop grace,
/// not the step timeout, and the step is a Timeout.
#[test]
fn a_stop_ends_a_wait_on_a_hung_worker_within_the_grace() {
    use ipc_harness::{DriverError, ProcessLoss};
    if std::env::var_os(PARENT_ENV).is_some() {
        return;
    }
    let hang = WorkerCommand::new("/bin/sh", ["-c", "exec sleep 600"]);
    let mut proxy = WorkerProxy::spawn(
        "hung",
        Dialect::Runtime,
        Duration::from_secs(60),
        &hang,
        &[],
    )
    .unwrap();
    let stopper = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        ipc_harness::cuda::request_stop();
    });
    let start = Instant::now();
    let r = ipc_harness::Driver::device_count(&mut proxy);
    let waited = start.elapsed();
    stopper.join().unwrap();
    ipc_harness::cuda::clear_stop();
    assert!(
        matches!(r, Err(DriverError::Lost(ProcessLoss::TimedOut { .. }))),
        "{r:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "waited {waited:?} with a stop asked"
    );
    assert!(waited >= ipc_harness::cuda::STOP_GRACE, "{waited:?}");
}
