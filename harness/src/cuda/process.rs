//! The parent's side of one worker process: its RPC proxy, and the
//! [`Driver`] every request channel is.

use super::protocol::{
    recv_frame, send_message, ProtocolError, Reply, Request, Response, WireError, WireValue,
};
use super::spawn::WorkerCommand;
use super::worker::WORKER_FD_ENV;
use crate::calls::Driver;
use crate::driver::PointerAttribute;
use crate::driver::{
    ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, DriverError, DriverResult, EventId, Fd,
    FreeKind, GranularityKind, HandleTypes, IpcEventHandle, IpcMemHandle, MemKind, OutArg,
    PointerInfo, PoolId, PoolPtrExport, ProcessLoss, ShareableHandleType, StreamId, VmmAccess,
    VmmHandle,
};
use crate::errors::{ApiError, Dialect};
use crate::machine::PidNamespace;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The descriptor number the worker's socket has in the worker.
///
/// Fixed and below 10 so that even a shell script can use it (`>&3`): the
/// fake workers of the tests are shell scripts.
pub const WORKER_FD: RawFd = 3;

/// How long a worker has to answer `Init` at least (context creation takes
/// hundreds of milliseconds, more on a cold driver), whatever the step timeout.
pub const MIN_INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long `shutdown` waits for workers to exit before killing them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Reuse mode: how long a machine's shutdown waits for its workers'
/// answers to `Reset` (sent to all at once); a worker that has not
/// answered `Clean` by then is killed.
pub const RESET_TIMEOUT: Duration = Duration::from_secs(2);

/// Error codes from this one up (700: illegal address, 719: launch
/// failure, ...) may leave a context unusable: a worker that answered one
/// is never reused.
pub const STICKY_ERROR_MIN: i32 = 700;

/// The process name of a worker while it waits in the pool (it takes its
/// scenario process's name when handed out).
pub(crate) const POOLED_NAME: &str = "(pooled worker)";

/// How long to wait for a worker whose socket closed to be gone, before
/// killing it.
const REAP_GRACE: Duration = Duration::from_secs(5);

/// How much of a worker's stderr is kept for crash reports.
const STDERR_TAIL: usize = 8 << 10;

type Frame = Result<(Vec<u8>, Vec<OwnedFd>), ProtocolError>;

/// Where a proxy's worker stands.
#[derive(Debug, Clone)]
enum State {
    Running,
    /// The process died or hung; every later call returns this.
    Lost(ProcessLoss),
    /// The stream to the worker is unusable (protocol error); the worker was killed.
    Broken(String),
    /// `exit` succeeded.
    Exited,
}

/// The last bytes a worker wrote to stderr.
#[derive(Clone, Default)]
struct StderrTail {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Arc<Mutex<Option<Receiver<()>>>>,
}

impl StderrTail {
    fn collect(mut stderr: impl Read + Send + 'static) -> std::io::Result<StderrTail> {
        let tail = StderrTail::default();
        let (tx, rx) = mpsc::channel();
        *tail.done.lock().unwrap_or_else(|e| e.into_inner()) = Some(rx);
        let buf = tail.buf.clone();
        thread::Builder::new()
            .name("ipc-worker-stderr".into())
            .spawn(move || {
                let mut chunk = [0u8; 4096];
                loop {
                    match stderr.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                            b.extend_from_slice(&chunk[..n]);
                            if b.len() > STDERR_TAIL {
                                let cut = b.len() - STDERR_TAIL;
                                b.drain(..cut);
                            }
                        }
                    }
                }
                let _ = tx.send(());
            })?;
        Ok(tail)
    }

    /// Forgets what was written so far (a reused worker's crash report
    /// shows only what it wrote for its current machine).
    fn clear(&self) {
        self.buf.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The tail as text, after giving the reader a moment to reach the end.
    fn text(&self) -> String {
        if let Some(rx) = self.done.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = rx.recv_timeout(Duration::from_millis(500));
        }
        let b = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&b);
        let text = text.trim();
        // Keep the end: that is where the panic message or the fault is.
        let max = 1500;
        match text.char_indices().rev().nth(max) {
            Some((i, _)) => format!("…{}", &text[i..]),
            None => text.to_string(),
        }
    }
}

/// One worker process seen from the parent: implements [`Driver`] by
/// sending each call to the worker and waiting for its answer.
///
/// Every call waits at most the machine's step timeout. A worker that does
/// not answer in time is killed (`SIGKILL`) and reaped, and the call returns
/// `Lost(TimedOut)`; a worker that dies (end of stream, broken pipe) is reaped
/// and the call returns `Lost(Crashed)` with its signal or exit status and
/// the end of its stderr. After either, every call returns the same error
/// at once.
pub struct WorkerProxy {
    name: String,
    dialect: Dialect,
    pub(super) timeout: Duration,
    pid: u32,
    /// See [`WorkerProxy::process_pid`].
    process_pid: u32,
    /// `None` once reaped.
    child: Option<Child>,
    sock: UnixStream,
    replies: Receiver<Frame>,
    stderr: StderrTail,
    state: State,
    /// Some call was answered with a sticky error (see [`STICKY_ERROR_MIN`]):
    /// the worker is never reused.
    pub(super) poisoned: bool,
    /// Spare contexts the worker said it keeps in its last `Clean` answer,
    /// less the `CreateContext` requests sent since (0 for a worker that
    /// never served): the pool places an idle worker by it, and the
    /// profile counts the creates a spare serves apart from the others.
    pub(super) spare_contexts: u32,
    /// A `CreateContext` request was ever sent to the worker, a spare's or
    /// not: it holds, or once held, a context it created, whose
    /// descriptors and VA a new context of a fresh process would not meet
    /// (the pool keeps such workers from a process that needs
    /// [`WorkerFit::new_contexts`](crate::WorkerFit::new_contexts)).
    pub(super) made_contexts: bool,
}

impl WorkerProxy {
    /// Starts `worker` with its end of a fresh socket pair as descriptor
    /// [`WORKER_FD`] (named in [`WORKER_FD_ENV`]), `env` added to the
    /// inherited environment, stdin and stdout on `/dev/null`, stderr kept.
    pub fn spawn(
        name: &str,
        dialect: Dialect,
        timeout: Duration,
        worker: &WorkerCommand,
        env: &[(OsString, OsString)],
    ) -> std::io::Result<WorkerProxy> {
        Self::spawn_in(name, dialect, timeout, worker, env, PidNamespace::Harness)
    }

    /// [`WorkerProxy::spawn`] in the PID namespace `namespace` (see
    /// `cuda/pidns.rs`). A host that refuses a new namespace gives an error
    /// of kind `Unsupported`.
    pub fn spawn_in(
        name: &str,
        dialect: Dialect,
        timeout: Duration,
        worker: &WorkerCommand,
        env: &[(OsString, OsString)],
        namespace: PidNamespace,
    ) -> std::io::Result<WorkerProxy> {
        crate::profile::timed("spawn worker", || -> std::io::Result<WorkerProxy> {
            let ns_spawn = match namespace {
                PidNamespace::Harness => None,
                PidNamespace::New => Some(super::pidns::NamespaceSpawn::new()?),
            };
            let ns_child = ns_spawn.as_ref().map(|n| n.child());
            // Both ends are close-on-exec: no other child inherits either.
            let (parent_end, child_end) = UnixStream::pair()?;
            let child_fd = child_end.as_raw_fd();
            let mut command = Command::new(&worker.program);
            command
                .args(&worker.args)
                .env(WORKER_FD_ENV, WORKER_FD.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            for (k, v) in env {
                command.env(k, v);
            }
            let parent_pid = std::process::id() as nix::libc::pid_t;
            // SAFETY: the closure runs in the forked child before exec and only
            // makes async-signal-safe calls (prctl, getppid, dup2, fcntl; in a
            // new namespace unshare, open, write, fork, waitpid, see pidns.rs).
            unsafe {
                command.pre_exec(move || {
                    use nix::libc;
                    // A worker dies with its parent (a CI timeout's kill -9, a
                    // second Ctrl-C): it must not keep its GPU context under
                    // PID 1. The signal follows the thread that spawns, so
                    // every worker is spawned by one thread that lives as long
                    // as the harness (`spawn_outliving_threads`). A parent
                    // already gone before prctl is caught by getppid.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if libc::getppid() != parent_pid {
                        return Err(std::io::Error::other("the parent exited"));
                    }
                    if child_fd == WORKER_FD {
                        let flags = libc::fcntl(child_fd, libc::F_GETFD);
                        if flags < 0
                            || libc::fcntl(child_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0
                        {
                            return Err(std::io::Error::last_os_error());
                        }
                    } else if libc::dup2(child_fd, WORKER_FD) < 0 {
                        // dup2 leaves the new descriptor without FD_CLOEXEC.
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(ns) = &ns_child {
                        ns.enter()?;
                    }
                    Ok(())
                });
            }
            let spawned = spawn_outliving_threads(command);
            // The worker's own pid: in a new namespace, the grandchild's.
            let (mut child, process_pid) = match ns_spawn {
                None => (spawned?, None),
                Some(ns) => match (spawned, ns.worker_pid()) {
                    (Ok(child), Ok(pid)) => (child, Some(pid)),
                    (Ok(mut child), Err(e)) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(e);
                    }
                    // A refusal explains the spawn's failure better than its errno.
                    (Err(_), Err(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                        return Err(e)
                    }
                    (Err(e), _) => return Err(e),
                },
            };
            // The parent's copy of the child's end must go, or the worker's death
            // would never read as end of stream.
            drop(child_end);
            let helpers = (|| {
                let stderr = match child.stderr.take() {
                    Some(s) => StderrTail::collect(s)?,
                    None => StderrTail::default(),
                };
                let reader_sock = parent_end.try_clone()?;
                let (tx, replies) = mpsc::channel::<Frame>();
                thread::Builder::new()
                    .name("ipc-worker-reader".into())
                    .spawn(move || loop {
                        let frame = recv_frame(reader_sock.as_fd());
                        let end = frame.is_err();
                        if tx.send(frame).is_err() || end {
                            break;
                        }
                    })?;
                Ok::<_, std::io::Error>((stderr, replies))
            })();
            let (stderr, replies) = match helpers {
                Ok(h) => h,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e);
                }
            };
            Ok(WorkerProxy {
                name: name.to_string(),
                dialect,
                timeout,
                pid: child.id(),
                process_pid: process_pid.unwrap_or(child.id()),
                child: Some(child),
                sock: parent_end,
                replies,
                stderr,
                state: State::Running,
                poisoned: false,
                spare_contexts: 0,
                made_contexts: false,
            })
        })
    }

    /// The worker's process id (it stays reported after the worker is reaped).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The pid of the process that runs the worker code, in the harness's
    /// PID namespace: [`pid`](Self::pid), except for a worker in a new PID
    /// namespace, whose spawned child waits for it (`cuda/pidns.rs`).
    pub fn process_pid(&self) -> u32 {
        self.process_pid
    }

    /// Whether the worker process has been waited for (no zombie left).
    pub fn is_reaped(&self) -> bool {
        self.child.is_none()
    }

    /// The process name from the machine spec.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn stopped_error(&self) -> Option<DriverError> {
        match &self.state {
            State::Running => None,
            State::Lost(loss) => Some(DriverError::Lost(loss.clone())),
            State::Broken(m) => Some(DriverError::Harness(m.clone())),
            State::Exited => Some(DriverError::Harness(format!(
                "process '{}' has exited",
                self.name
            ))),
        }
    }

    /// Sends one request (the answer is awaited separately, so that several
    /// workers can work on their requests at once).
    pub(crate) fn send(&mut self, request: &Request) -> DriverResult<()> {
        self.send_with_fds(request, &[])
    }

    /// [`WorkerProxy::send`] with descriptors attached (`SCM_RIGHTS`).
    pub(super) fn send_with_fds(
        &mut self,
        request: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> DriverResult<()> {
        if let Some(e) = self.stopped_error() {
            return Err(e);
        }
        match send_message(self.sock.as_fd(), request, fds) {
            Ok(()) => Ok(()),
            // EPIPE / ECONNRESET: the worker is gone.
            Err(ProtocolError::Io(_)) => Err(self.died(request.name())),
            Err(e) => Err(DriverError::Harness(format!(
                "cannot send {} to process '{}': {e}",
                request.name(),
                self.name
            ))),
        }
    }

    /// Waits up to `timeout` for the answer to the request sent last.
    pub(crate) fn await_reply(&mut self, what: &str, timeout: Duration) -> DriverResult<Reply> {
        self.await_reply_with_fds(what, timeout)
            .map(|(reply, _)| reply)
    }

    /// [`WorkerProxy::await_reply`], with the descriptors the answer carried.
    pub(super) fn await_reply_with_fds(
        &mut self,
        what: &str,
        timeout: Duration,
    ) -> DriverResult<(Reply, Vec<OwnedFd>)> {
        if let Some(e) = self.stopped_error() {
            return Err(e);
        }
        // Wait in short slices so that a stop (SIGINT) cuts the wait to
        // STOP_GRACE instead of the whole step timeout.
        let started = Instant::now();
        let deadline = started + timeout;
        let mut stop_deadline: Option<Instant> = None;
        let received = loop {
            let now = Instant::now();
            if super::stop::stop_requested() {
                stop_deadline.get_or_insert(now + super::stop::STOP_GRACE);
            }
            let until = stop_deadline.map_or(deadline, |s| s.min(deadline));
            if now >= until {
                break Err(RecvTimeoutError::Timeout);
            }
            match self
                .replies
                .recv_timeout((until - now).min(Duration::from_millis(100)))
            {
                Err(RecvTimeoutError::Timeout) => continue,
                other => break other,
            }
        };
        match received {
            Ok(Ok((payload, fds))) => match serde_json::from_slice::<Response>(&payload) {
                Ok(Ok(reply)) => Ok((reply, fds)),
                Ok(Err(WireError::Api(code))) => {
                    self.poisoned |= code >= STICKY_ERROR_MIN;
                    Err(DriverError::Api(ApiError::from_code(self.dialect, code)))
                }
                Ok(Err(WireError::Harness(m))) => Err(DriverError::Harness(format!(
                    "process '{}' could not run {what}: {m}",
                    self.name
                ))),
                Err(e) => Err(self.broken(format!("unreadable answer to {what}: {e}"))),
            },
            Ok(Err(ProtocolError::Eof)) | Err(RecvTimeoutError::Disconnected) => {
                Err(self.died(what))
            }
            // A stream that ends mid-frame is a worker that died mid-answer.
            Ok(Err(ProtocolError::Truncated(_))) | Ok(Err(ProtocolError::Io(_))) => {
                Err(self.died(what))
            }
            Ok(Err(e)) => Err(self.broken(format!("bad frame in answer to {what}: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                self.kill_and_reap();
                let waited = started.elapsed().min(timeout);
                let loss = ProcessLoss::TimedOut {
                    after_ms: waited.as_millis().min(u64::MAX as u128) as u64,
                };
                self.state = State::Lost(loss.clone());
                Err(DriverError::Lost(loss))
            }
        }
    }

    /// One call: send, then wait up to the step timeout.
    fn call(&mut self, request: Request) -> DriverResult<Reply> {
        let mut phase = request.name();
        if matches!(request, Request::CreateContext { .. }) {
            self.made_contexts = true;
            if self.spare_contexts > 0 {
                self.spare_contexts -= 1;
                phase = "create_context (a spare)";
            }
        }
        crate::profile::timed(phase, || {
            self.send(&request)?;
            self.await_reply(request.name(), self.timeout)
        })
    }

    /// The worker's stream ended: reap it and record how it ended.
    fn died(&mut self, what: &str) -> DriverError {
        let status = self.reap_within(REAP_GRACE);
        let mut detail = format!(
            "worker for process '{}' (pid {}) ended during {what}",
            self.name, self.pid
        );
        let (signal, exit_code) = match status {
            Some(s) => (s.signal(), s.code()),
            None => {
                detail.push_str(" (its status could not be read)");
                (None, None)
            }
        };
        let tail = self.stderr.text();
        if !tail.is_empty() {
            detail.push_str("; stderr: ");
            detail.push_str(&tail);
        }
        let loss = ProcessLoss::Crashed {
            signal,
            exit_code,
            detail,
        };
        self.state = State::Lost(loss.clone());
        DriverError::Lost(loss)
    }

    /// The stream is unusable: kill the worker, remember why.
    fn broken(&mut self, message: String) -> DriverError {
        self.kill_and_reap();
        let message = format!("process '{}': {message}", self.name);
        self.state = State::Broken(message.clone());
        DriverError::Harness(message)
    }

    /// Waits for the worker to exit for up to `grace`, then kills it; always reaps.
    fn reap_within(&mut self, grace: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + grace;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    let _ = child.kill();
                    let status = child.wait().ok();
                    self.child = None;
                    return status;
                }
                Err(_) => {
                    self.child = None;
                    return None;
                }
            }
        }
    }

    /// `SIGKILL` without waiting (the proxy's drop reaps it).
    pub(crate) fn start_kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
        }
    }

    /// Gives a pooled worker its scenario process's name and step timeout.
    pub(crate) fn assign(&mut self, name: &str, timeout: Duration) {
        self.name = name.to_string();
        self.timeout = timeout;
    }

    /// The answer to an `Init` sent earlier, without waiting: `None` while
    /// none has come, `Some(true)` for success, `Some(false)` for anything
    /// else (an error, another answer, a garbled frame, the end of the stream).
    pub(crate) fn poll_init(&mut self) -> Option<bool> {
        if !matches!(self.state, State::Running) || self.child.is_none() {
            return Some(false);
        }
        match self.replies.try_recv() {
            Err(TryRecvError::Empty) => None,
            Ok(Ok((payload, _fds))) => Some(matches!(
                serde_json::from_slice::<Response>(&payload),
                Ok(Ok(Reply::Unit))
            )),
            Ok(Err(_)) | Err(TryRecvError::Disconnected) => Some(false),
        }
    }

    /// Whether an initialised worker waiting for requests still runs and
    /// has sent nothing unasked (a worker that exited is reaped here).
    pub(crate) fn idle_and_alive(&mut self) -> bool {
        if !matches!(self.state, State::Running) {
            return false;
        }
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => {}
            Ok(Some(_)) => {
                self.child = None;
                return false;
            }
            Err(_) => return false,
        }
        matches!(self.replies.try_recv(), Err(TryRecvError::Empty))
    }

    /// Whether the worker still runs as far as the proxy knows: not exited,
    /// lost or broken, and not reaped.
    /// Whether its `exit` succeeded (it ended as the scenario asked).
    pub(super) fn has_exited(&self) -> bool {
        matches!(self.state, State::Exited)
    }

    pub(super) fn is_running(&self) -> bool {
        matches!(self.state, State::Running) && self.child.is_some()
    }

    /// Reuse mode: the spare contexts the worker keeps if the answer to
    /// the `Reset` sent last is `Clean`, waiting until `deadline` at most;
    /// `None` for any other answer or none. Changes nothing on failure: the
    /// caller discards the worker.
    pub(super) fn await_clean(&mut self, deadline: Instant) -> Option<u32> {
        match self.await_control(deadline)? {
            Reply::Clean { spare_contexts } => Some(spare_contexts),
            _ => None,
        }
    }

    /// Reuse mode: whether the answer to the `ReleaseImported` sent last is
    /// `Unit`, waiting until `deadline` at most.
    pub(super) fn await_released(&mut self, deadline: Instant) -> bool {
        matches!(self.await_control(deadline), Some(Reply::Unit))
    }

    /// The successful answer to the control request sent last, waiting
    /// until `deadline` at most; `None` for an error, a broken stream or
    /// no answer in time.
    fn await_control(&mut self, deadline: Instant) -> Option<Reply> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.replies.recv_timeout(left) {
            Ok(Ok((payload, _fds))) => match serde_json::from_slice::<Response>(&payload) {
                Ok(Ok(reply)) => Some(reply),
                _ => None,
            },
            _ => None,
        }
    }

    /// Reuse mode: moves the worker (process, socket, reader) into a new
    /// proxy named as a pooled worker, leaving this one an exited stub with
    /// the same pid. `None` (nothing moved) if the stub cannot be made.
    pub(super) fn detach(&mut self) -> Option<WorkerProxy> {
        if !self.is_running() {
            return None;
        }
        let (stub_sock, _) = UnixStream::pair().ok()?;
        let (_, stub_replies) = mpsc::channel::<Frame>();
        let child = self.child.take();
        let sock = std::mem::replace(&mut self.sock, stub_sock);
        let replies = std::mem::replace(&mut self.replies, stub_replies);
        let stderr = std::mem::take(&mut self.stderr);
        stderr.clear();
        self.state = State::Exited;
        Some(WorkerProxy {
            name: POOLED_NAME.to_string(),
            dialect: self.dialect,
            timeout: self.timeout,
            pid: self.pid,
            process_pid: self.process_pid,
            child,
            sock,
            replies,
            stderr,
            state: State::Running,
            poisoned: false,
            spare_contexts: self.spare_contexts,
            made_contexts: self.made_contexts,
        })
    }

    /// `SIGKILL`, then wait.
    pub(super) fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }

    /// The process exits normally: `Exit`, its answer, then its exit status
    /// (all within the step timeout). Status 0 is `Ok`; anything else is
    /// `Lost(Crashed)`, a hang `Lost(TimedOut)`.
    pub fn exit(&mut self) -> DriverResult<()> {
        self.call(Request::Exit)?;
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            let Some(child) = self.child.as_mut() else {
                break None;
            };
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    break Some(status);
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
                Ok(None) => {
                    self.kill_and_reap();
                    let loss = ProcessLoss::TimedOut {
                        after_ms: self.timeout.as_millis().min(u64::MAX as u128) as u64,
                    };
                    self.state = State::Lost(loss.clone());
                    return Err(DriverError::Lost(loss));
                }
                Err(e) => {
                    self.child = None;
                    return Err(DriverError::Harness(format!(
                        "cannot wait for process '{}': {e}",
                        self.name
                    )));
                }
            }
        };
        match status {
            Some(s) if s.success() => {
                self.state = State::Exited;
                Ok(())
            }
            other => {
                let tail = self.stderr.text();
                let mut detail = format!(
                    "worker for process '{}' (pid {}) did not exit cleanly after exit",
                    self.name, self.pid
                );
                if !tail.is_empty() {
                    detail.push_str("; stderr: ");
                    detail.push_str(&tail);
                }
                let loss = ProcessLoss::Crashed {
                    signal: other.and_then(|s| s.signal()),
                    exit_code: other.and_then(|s| s.code()),
                    detail,
                };
                self.state = State::Lost(loss.clone());
                Err(DriverError::Lost(loss))
            }
        }
    }

    /// Takes the worker's process for reaping elsewhere (in the
    /// background), leaving this proxy exited.
    pub(super) fn release_child(&mut self) -> Option<Child> {
        self.mark_exited();
        self.child.take()
    }

    /// A proxy whose worker was killed or handed off is no longer running.
    pub(super) fn mark_exited(&mut self) {
        if matches!(self.state, State::Running) {
            self.state = State::Exited;
        }
    }

    /// First half of a shutdown: ask a running worker to exit.
    pub(super) fn request_exit(&mut self) {
        if matches!(self.state, State::Running) && self.child.is_some() {
            let _ = send_message(self.sock.as_fd(), &Request::Exit, &[]);
        }
    }

    /// Second half: reaped already, or reaped now if it has exited.
    pub(super) fn try_reap(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            None => true,
            Some(Ok(Some(_))) | Some(Err(_)) => {
                self.child = None;
                true
            }
            Some(Ok(None)) => false,
        }
    }
}

impl Drop for WorkerProxy {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

pub(super) fn unexpected(what: &str, reply: Reply) -> DriverError {
    DriverError::Harness(format!("unexpected answer to {what}: {reply:?}"))
}

/// Asks running workers to exit and reaps them all in the background
/// (see [`reap_with_grace`]).
pub(super) fn retire_in_background(mut workers: Vec<WorkerProxy>) {
    let mut children = Vec::new();
    for w in &mut workers {
        w.request_exit();
        children.extend(w.release_child());
    }
    if !children.is_empty() {
        thread::spawn(move || reap_with_grace(children));
    }
}

/// Wait up to [`SHUTDOWN_GRACE`] for workers told to exit, then kill and reap
/// the rest: none outlives it as a zombie.
pub(super) fn reap_with_grace(mut children: Vec<Child>) {
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while !children.is_empty() && Instant::now() < deadline {
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        thread::sleep(Duration::from_millis(5));
    }
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Something that answers worker requests: a worker over its socket
/// ([`WorkerProxy`]) or the request handler in this very process
/// ([`super::LocalCudaDriver`]). Every such thing is a [`Driver`] through
/// the one mapping below, so the two cannot drift apart.
pub(crate) trait RequestChannel {
    fn channel_dialect(&self) -> Dialect;
    /// One request, its reply or the error it became.
    fn request(&mut self, request: Request) -> DriverResult<Reply>;
}

impl RequestChannel for WorkerProxy {
    fn channel_dialect(&self) -> Dialect {
        self.dialect
    }

    fn request(&mut self, request: Request) -> DriverResult<Reply> {
        self.call(request)
    }
}

macro_rules! define_request_channel_driver {
    ($(
        $(#[$doc:meta])*
        $method:ident $Variant:ident $(( $( $(#[$attr:meta])* $arg:ident : $($ty:ident)? $(&[$elem:ident] as $owned:ty)? ),* ))? -> $ret:ty => $keyword:ident $api:tt;
    )*) => {
        /// Every call is one request; its reply must be the variant of the
        /// call's return type.
        impl<T: RequestChannel> Driver for T {
            fn dialect(&self) -> Dialect {
                self.channel_dialect()
            }
            $(
                fn $method(&mut self $($(, $arg: $($ty)? $(&[$elem])?)*)?) -> DriverResult<$ret> {
                    let request = Request::$Variant $({
                        $( $arg: $crate::driver_call_to_owned!($arg $(, $owned)?) ),*
                    })?;
                    <$ret as WireValue>::from_reply(self.request(request)?)
                        .map_err(|reply| unexpected(stringify!($method), reply))
                }
            )*
        }
    };
}

crate::for_each_driver_call!(define_request_channel_driver);

/// Spawns `command` from a thread that lives as long as this process.
///
/// `PR_SET_PDEATHSIG`, set in every worker, fires when the *thread* that
/// spawned it ends, not the process. Threads that share a backend
/// (`explore --jobs`, `run --jobs`) hand out each other's pooled workers, so
/// a worker spawned by a thread that had finished its share would be killed
/// while another thread still used it. Spawning from one thread that never
/// ends ties every worker to the harness process instead. Where that thread
/// cannot be started, the calling thread spawns.
fn spawn_outliving_threads(mut command: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<Option<mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, incoming) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("ipc-worker-spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .ok()
            .map(|_| jobs)
    });
    let Some(spawner) = spawner else {
        return command.spawn();
    };
    let (reply, spawned) = mpsc::channel();
    match spawner.send((command, reply)) {
        Ok(()) => spawned
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the worker spawner thread ended"))),
        Err(mpsc::SendError((mut command, _))) => command.spawn(),
    }
}
