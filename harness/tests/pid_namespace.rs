//! `process NAME ... pidns=new` on the CUDA backend, without a GPU: a fake
//! worker (a shell script speaking the wire protocol on descriptor 3) is
//! started in a new user and PID namespace, and the harness takes one of
//! its descriptors with `pidfd_getfd` from outside.
//!
//! A host that refuses user namespaces makes the start NotSupported; the
//! tests then say so on stderr and stop, unless `IPC_REQUIRE_PIDNS=1` asks
//! for the namespaces, which makes the refusal a failure.
#![cfg(feature = "cuda")]

use ipc_harness::cuda::protocol::encode_frame;
use ipc_harness::cuda::{CudaMachine, Reply, Request, Response, WorkerCommand, WORKER_FD};
use ipc_harness::{Dialect, Machine, MachineSpec, PidNamespace, ProcessSpec, StartError};
use std::path::PathBuf;
use std::time::Duration;

fn spec(namespaces: &[PidNamespace]) -> MachineSpec {
    MachineSpec {
        devices: 1,
        processes: namespaces
            .iter()
            .enumerate()
            .map(|(i, &pid_namespace)| ProcessSpec {
                name: format!("p{i}"),
                device: 0,
                visible_devices: None,
                pid_namespace,
            })
            .collect(),
        dialect: Dialect::Driver,
        seed: 7,
        step_timeout: Duration::from_secs(5),
        topology: None,
        semantics: Vec::new(),
    }
}

fn frame_len(r: &Request) -> usize {
    encode_frame(r).unwrap().len()
}

/// Shell that waits for one request of `request`'s size and answers `ok`.
fn answer_ok_to(request: &Request) -> String {
    let ok: Response = Ok(Reply::Unit);
    let bytes: String = encode_frame(&ok)
        .unwrap()
        .iter()
        .map(|b| format!("\\{b:03o}"))
        .collect();
    format!(
        "head -c {} <&{WORKER_FD} >/dev/null; printf '{bytes}' >&{WORKER_FD}",
        frame_len(request)
    )
}

fn init() -> Request {
    Request::Init {
        dialect: Dialect::Driver,
        device: 0,
    }
}

/// Shell that answers `Init` and then `Exit`.
fn answer_init_and_exit() -> String {
    format!(
        "{}; {}",
        answer_ok_to(&init()),
        answer_ok_to(&Request::Exit)
    )
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipc-pidns-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts the machine, or `None` (with the reason on stderr) when the host
/// refuses the namespaces and the run does not require them.
fn launch(script: &str, spec: &MachineSpec) -> Option<CudaMachine> {
    let worker = WorkerCommand::new("/bin/sh", ["-c".to_string(), script.to_string()]);
    match CudaMachine::launch(&worker, spec) {
        Ok(m) => Some(m),
        Err(StartError::NotSupported(why))
            if std::env::var("IPC_REQUIRE_PIDNS").as_deref() != Ok("1") =>
        {
            eprintln!("SKIPPED: {why}");
            None
        }
        Err(e) => panic!("launch failed: {e:?}"),
    }
}

#[test]
fn a_worker_in_a_new_pid_namespace_is_pid_1_there_and_known_outside() {
    let dir = scratch("nspid");
    // Each worker records, in a file named after its pid as it sees it,
    // its pids in every namespace it is in (outermost first); the shell
    // reads its own status itself (no child process).
    let script = format!(
        "while read -r l; do case $l in NSpid*) echo \"$l\";; esac; done \
         < /proc/self/status > {dir}/nspid.$$; {}; exit 0",
        answer_init_and_exit(),
        dir = dir.display()
    );
    let Some(mut m) = launch(&script, &spec(&[PidNamespace::New, PidNamespace::Harness])) else {
        return;
    };
    // Only the worker in the new namespace is pid 1 there.
    let text = std::fs::read_to_string(dir.join("nspid.1")).unwrap();
    let nspid: Vec<u32> = text
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    // The harness knows the worker by its outer pid, not by its spawned
    // child's (which waits for it).
    let outer = m.process_pid(0).unwrap();
    assert_eq!(nspid.len(), 2, "{text}");
    assert_eq!(nspid[0], outer, "{text}");
    assert_eq!(nspid[1], 1, "{text}");
    assert_ne!(m.pids()[0], outer);
    // A worker of the harness's namespace is its own spawned child.
    assert_eq!(m.process_pid(1).unwrap(), m.pids()[1]);
    assert_eq!(m.exit(0), Ok(()));
    assert_eq!(m.exit(1), Ok(()));
    m.shutdown();
    assert!(m.all_reaped());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_harness_takes_a_descriptor_of_a_worker_in_a_new_namespace() {
    let script = format!("{}; exit 0", answer_init_and_exit());
    let Some(mut m) = launch(&script, &spec(&[PidNamespace::New])) else {
        return;
    };
    let pid = m.process_pid(0).unwrap() as nix::libc::pid_t;
    // SAFETY: system calls on integers; the descriptors are ours to close.
    unsafe {
        use nix::libc;
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, WORKER_FD, 0);
        let err = std::io::Error::last_os_error();
        libc::close(pidfd as i32);
        assert!(copy >= 0, "pidfd_getfd: {err}");
        // The worker's descriptor 3 is its end of the harness's socket.
        let mut st: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(copy as i32, &mut st), 0);
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFSOCK);
        libc::close(copy as i32);
    }
    assert_eq!(m.exit(0), Ok(()));
    m.shutdown();
    assert!(m.all_reaped());
}

#[test]
fn a_worker_in_a_new_namespace_that_dies_is_reported_with_its_status() {
    // Answers Init, then ends with status 3 on the next request.
    let script = format!(
        "{}; head -c {} <&{WORKER_FD} >/dev/null; exit 3",
        answer_ok_to(&init()),
        frame_len(&Request::DeviceCount)
    );
    let Some(mut m) = launch(&script, &spec(&[PidNamespace::New])) else {
        return;
    };
    let outer = m.process_pid(0).unwrap();
    let e = ipc_harness::Driver::device_count(m.driver(0)).unwrap_err();
    let text = e.to_string();
    // The spawned child ends as the worker did.
    assert!(text.contains("exit Some(3)"), "{text}");
    m.shutdown();
    assert!(m.all_reaped());
    assert!(!std::path::Path::new(&format!("/proc/{outer}")).exists());
}
