//! Real-backend runs: each role in its own OS process, with CUDA in-process.
//!
//! The parent (the test as the user ran it) re-runs its own test binary once
//! per role: `<exe> <test> --exact --nocapture --include-ignored
//! --test-threads=1`, with [`ROLE_ENV`] naming the role and [`ROLE_FD_ENV`]
//! a socket to the parent. In the child the same test builds the same
//! `RoleSet`; `run_in_processes` sees the role variable, runs only that
//! role's closure with a [`LocalCudaDriver`], reports its outcome and final
//! state, and exits the process. The parent only routes peer messages
//! (file descriptors with `SCM_RIGHTS`) and collects reports.

use super::ctx::{Message, PeerLink, RoleCtx};
use super::driver::{DirectGate, RoleDriver};
use super::model::{
    fail, ProcessState, RoleError, RoleOutcome, RunOptions, RunReport, ROLE_ENV, ROLE_FD_ENV,
};
use super::scheduler::play;
use super::set::RoleSet;
use crate::cuda::protocol::{recv_message, send_message};
use crate::cuda::{child_visible_devices, CudaBackend, LocalCudaDriver, NO_LIBCUDA, WORKER_FD};
use crate::machine::StartError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Instant;

#[derive(Debug, Serialize, Deserialize)]
enum FromChild {
    Send {
        to: usize,
        bytes: Vec<u8>,
    },
    Done {
        outcome: RoleOutcome,
        state: Box<ProcessState>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
enum FromParent {
    Deliver {
        from: usize,
        bytes: Vec<u8>,
    },
    /// That role has ended: a receive waiting only for it fails.
    Ended {
        role: usize,
    },
}

/// Exit status of a child whose role setup is wrong (no such role, no socket).
const EXIT_BAD_ROLE: i32 = 2;

/// In a role's process: plays the role named by [`ROLE_ENV`] and exits.
pub(crate) fn serve_role(set: &RoleSet, opts: &RunOptions, role: &str) -> ! {
    let names = set.names();
    let Some(index) = names.iter().position(|n| n == role) else {
        eprintln!("ipc-harness role process: no role named '{role}' in this test's RoleSet");
        std::process::exit(EXIT_BAD_ROLE);
    };
    let fd: Option<RawFd> = std::env::var(ROLE_FD_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok());
    // SAFETY: F_GETFD only inspects the descriptor table.
    let Some(fd) =
        fd.filter(|&fd| fd >= 0 && unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) } >= 0)
    else {
        eprintln!("ipc-harness role process: {ROLE_FD_ENV} is not an open descriptor");
        std::process::exit(EXIT_BAD_ROLE);
    };
    // SAFETY: the parent handed us this descriptor; nothing else uses it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let decl = &set.roles[index];
    let (outcome, state) = match LocalCudaDriver::new(set.dialect, decl.spec.device) {
        Err(e) => (
            RoleOutcome::Lost(format!("CUDA could not start in this process: {e}")),
            ProcessState::default(),
        ),
        Ok(driver) => {
            let faults = opts
                .faults
                .iter()
                .filter(|f| f.role == role)
                .cloned()
                .collect();
            let link = SocketLink {
                sock: sock.try_clone().unwrap_or_else(|e| {
                    eprintln!("ipc-harness role process: cannot duplicate the socket: {e}");
                    std::process::exit(EXIT_BAD_ROLE)
                }),
                stash: VecDeque::new(),
                ended: vec![false; names.len()],
            };
            let mut ctx = RoleCtx {
                name: role.to_string(),
                names: names.clone(),
                driver: RoleDriver::new(
                    set.dialect,
                    Box::new(DirectGate(driver)),
                    faults,
                    opts.crash_of(role),
                ),
                link: Box::new(link),
            };
            let outcome = play(&decl.body, &mut ctx);
            (outcome, std::mem::take(&mut ctx.driver.state))
        }
    };
    let status = match send_message(
        sock.as_fd(),
        &FromChild::Done {
            outcome,
            state: Box::new(state),
        },
        &[],
    ) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ipc-harness role process: cannot report to the parent: {e}");
            EXIT_BAD_ROLE
        }
    };
    // Like the end of any program: CUDA's exit handlers run, the driver
    // reclaims what this process still holds.
    std::process::exit(status)
}

struct SocketLink {
    sock: OwnedFd,
    /// Messages received while waiting for another sender.
    stash: VecDeque<(usize, Message)>,
    ended: Vec<bool>,
}

impl PeerLink for SocketLink {
    fn send(&mut self, to: usize, msg: Message) -> Result<(), RoleError> {
        let fds: Vec<BorrowedFd<'_>> = msg.fds.iter().map(|f| f.as_fd()).collect();
        send_message(
            self.sock.as_fd(),
            &FromChild::Send {
                to,
                bytes: msg.bytes.clone(),
            },
            &fds,
        )
        .map_err(|e| fail(format!("lost the parent: {e}")))
    }

    fn recv(&mut self, from: Option<usize>) -> Result<(usize, Message), RoleError> {
        loop {
            let wanted = |f: usize| from.is_none_or(|x| x == f);
            if let Some(at) = self.stash.iter().position(|(f, _)| wanted(*f)) {
                if let Some(found) = self.stash.remove(at) {
                    return Ok(found);
                }
            }
            let others_ended = match from {
                Some(f) => self.ended[f],
                None => self.ended.iter().filter(|&&e| !e).count() <= 1,
            };
            if others_ended {
                return Err(fail(
                    "the peer(s) this role waits for have ended and sent nothing more",
                ));
            }
            match recv_message::<FromParent>(self.sock.as_fd()) {
                Ok((FromParent::Deliver { from, bytes }, fds)) => {
                    self.stash.push_back((from, Message { bytes, fds }))
                }
                Ok((FromParent::Ended { role }, _)) => {
                    if let Some(e) = self.ended.get_mut(role) {
                        *e = true;
                    }
                }
                Err(e) => return Err(fail(format!("lost the parent: {e}"))),
            }
        }
    }
}

struct RoleProcess {
    child: Child,
    sock: UnixStream,
}

fn spawn_role(
    set: &RoleSet,
    index: usize,
    test: &str,
) -> std::io::Result<(RoleProcess, UnixStream)> {
    let spec = &set.roles[index].spec;
    let (parent_end, child_end) = UnixStream::pair()?;
    let child_fd = child_end.as_raw_fd();
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args([
            test,
            "--exact",
            "--nocapture",
            "--include-ignored",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, &spec.name)
        .env(ROLE_FD_ENV, WORKER_FD.to_string());
    if let Some(visible) = &spec.visible_devices {
        let parent = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let list =
            child_visible_devices(parent.as_deref(), visible).map_err(std::io::Error::other)?;
        command.env("CUDA_VISIBLE_DEVICES", list);
    }
    let parent_pid = std::process::id() as nix::libc::pid_t;
    // SAFETY: runs in the forked child before exec; only async-signal-safe
    // calls (prctl, getppid, dup2, fcntl).
    unsafe {
        command.pre_exec(move || {
            use nix::libc;
            // A role process dies with the test that runs it (as workers do).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent_pid {
                return Err(std::io::Error::other("the parent exited"));
            }
            if child_fd == WORKER_FD {
                let flags = libc::fcntl(child_fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(child_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(child_fd, WORKER_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    drop(child_end);
    let reader = parent_end.try_clone()?;
    Ok((
        RoleProcess {
            child,
            sock: parent_end,
        },
        reader,
    ))
}

/// In the test's own process: one child per role, messages routed between them.
pub(crate) fn run_parent(set: &RoleSet, opts: &RunOptions) -> Result<RunReport, StartError> {
    if !CudaBackend::libcuda_present() {
        return Err(StartError::NotSupported(NO_LIBCUDA.into()));
    }
    let test = opts
        .test_name
        .clone()
        .or_else(|| std::thread::current().name().map(str::to_string))
        .filter(|n| n != "main")
        .ok_or_else(|| {
            StartError::Harness(
                "cannot tell which test to re-run in each role's process: set RunOptions::test_name"
                    .into(),
            )
        })?;
    let names = set.names();
    let n = names.len();
    let (tx, inbox) = channel();
    let mut procs = Vec::with_capacity(n);
    for (i, name) in names.iter().enumerate() {
        let (proc, reader) = match spawn_role(set, i, &test) {
            Ok(p) => p,
            Err(e) => {
                for mut p in procs.drain(..) {
                    let p: &mut RoleProcess = &mut p;
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                }
                return Err(StartError::Harness(format!(
                    "cannot start the process of role '{name}': {e}"
                )));
            }
        };
        let tx = tx.clone();
        std::thread::spawn(move || loop {
            let got = recv_message::<FromChild>(reader.as_fd()).ok();
            let end = got.is_none();
            if tx.send((i, got)).is_err() || end {
                break;
            }
        });
        procs.push(proc);
    }
    drop(tx);

    let deadline = Instant::now() + opts.timeout;
    let mut outcomes: Vec<Option<RoleOutcome>> = vec![None; n];
    let mut states = vec![ProcessState::default(); n];
    let mut events = Vec::new();
    let ended = |i: usize, procs: &[RoleProcess], outcomes: &[Option<RoleOutcome>]| {
        for (j, p) in procs.iter().enumerate() {
            if j != i && outcomes[j].is_none() {
                let _ = send_message(p.sock.as_fd(), &FromParent::Ended { role: i }, &[]);
            }
        }
    };
    while outcomes.iter().any(Option::is_none) {
        let wait = deadline.saturating_duration_since(Instant::now());
        match inbox.recv_timeout(wait) {
            Ok((i, Some((FromChild::Send { to, bytes }, fds)))) => {
                let Some(target) = procs.get(to).filter(|_| outcomes[to].is_none()) else {
                    events.push(format!(
                        "{} -> {}: dropped (ended)",
                        names[i],
                        names[to.min(n - 1)]
                    ));
                    continue;
                };
                events.push(format!(
                    "{} -> {} ({} bytes, {} fds)",
                    names[i],
                    names[to],
                    bytes.len(),
                    fds.len()
                ));
                let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
                let msg = FromParent::Deliver { from: i, bytes };
                if let Err(e) = send_message(target.sock.as_fd(), &msg, &borrowed) {
                    events.push(format!("delivery to {} failed: {e}", names[to]));
                }
            }
            Ok((i, Some((FromChild::Done { outcome, state }, _)))) => {
                if outcomes[i].is_none() {
                    events.push(format!("{} ends: {outcome:?}", names[i]));
                    outcomes[i] = Some(outcome);
                    states[i] = *state;
                    ended(i, &procs, &outcomes);
                }
            }
            Ok((i, None)) => {
                if outcomes[i].is_none() {
                    let status = procs[i].child.wait();
                    events.push(format!(
                        "{} process ended without a report: {status:?}",
                        names[i]
                    ));
                    // A planned crash kills the role's process with SIGKILL.
                    let killed = status.as_ref().is_ok_and(|s| {
                        std::os::unix::process::ExitStatusExt::signal(s) == Some(nix::libc::SIGKILL)
                    });
                    let planned = opts.crash_of(&names[i]).filter(|_| killed);
                    outcomes[i] = Some(RoleOutcome::Lost(match planned {
                        Some(c) => format!("{} ({status:?})", c.outcome_text()),
                        None => format!("the process ended without reporting ({status:?})"),
                    }));
                    ended(i, &procs, &outcomes);
                }
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                events.push(format!("timeout after {:?}", opts.timeout));
                for (i, p) in procs.iter_mut().enumerate() {
                    if outcomes[i].is_none() {
                        let _ = p.child.kill();
                        outcomes[i] = Some(RoleOutcome::Lost(format!(
                            "killed: the run took longer than {:?}",
                            opts.timeout
                        )));
                    }
                }
            }
        }
    }
    for p in &mut procs {
        let _ = p.child.wait();
    }
    let mut report_outcomes = BTreeMap::new();
    let mut final_state = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let outcome = outcomes[i]
            .take()
            .unwrap_or_else(|| RoleOutcome::Lost("no report".into()));
        report_outcomes.insert(name.clone(), outcome);
        final_state.insert(name.clone(), std::mem::take(&mut states[i]));
    }
    Ok(RunReport {
        backend: "cuda".into(),
        seed: opts.seed,
        schedule: opts.schedule.clone(),
        faults: opts.faults.clone(),
        crashes: opts.crashes.clone(),
        outcomes: report_outcomes,
        hazards: None,
        final_state,
        roles: names,
        events,
    })
}
