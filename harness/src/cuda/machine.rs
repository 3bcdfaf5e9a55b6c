//! The machine of the CUDA backend: one worker process per scenario
//! process, started (from the pool where it has some) and shut down
//! together.

use super::pool::{PlannedMachine, WorkerKey, WorkerPool};
use super::process::{
    reap_with_grace, retire_in_background, unexpected, WorkerProxy, MIN_INIT_TIMEOUT,
    RESET_TIMEOUT, SHUTDOWN_GRACE,
};
use super::protocol::{Reply, Request};
use super::spawn::WorkerCommand;
use crate::calls::Driver;
use crate::driver::{DriverError, DriverResult, Fd};
use crate::errors::Dialect;
use crate::machine::{
    Hazard, Machine, MachineSpec, PidNamespace, ProcessIndex, ProcessSpec, StartError, WorkerFit,
};
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::process::Child;
use std::sync::{Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

/// A running set of worker processes, one per [`crate::ProcessSpec`].
///
/// Dropping it shuts it down (see [`Machine::shutdown`]): no worker outlives
/// it and none is left a zombie.
pub struct CudaMachine {
    procs: Vec<WorkerProxy>,
    /// The pool key of each process's worker, in process order.
    keys: Vec<WorkerKey>,
    /// Reuse mode: whether each process's worker may go back to the pool
    /// at shutdown (not where its [`WorkerFit::fresh`] says it did what a
    /// reset cannot undo).
    returnable: Vec<bool>,
    /// Shut down without waiting: exiting workers are reaped by a background
    /// thread, so their CUDA teardown overlaps the next scenario.
    reap_in_background: bool,
    /// Reuse mode: the pool that cleanly reset workers go back to at
    /// shutdown (taken by the first shutdown).
    reuse: Option<Weak<Mutex<WorkerPool>>>,
}

impl CudaMachine {
    /// Starts one worker per process of `spec` and initialises them all at
    /// once (dialect, current device), without checking for CUDA first and
    /// without a pool: [`CudaBackend::start`](super::CudaBackend) checks,
    /// then does the same through its pool ([`CudaBackend::launch`](super::CudaBackend::launch)).
    /// Public so that tests can drive fake workers through the real code path.
    ///
    /// Each worker gets `CUDA_VISIBLE_DEVICES` when its process names
    /// `visible_devices` (translated through the parent's own
    /// `CUDA_VISIBLE_DEVICES`, if set), and the parent's environment
    /// otherwise. The `Init` handshakes run in parallel and may take
    /// `max(spec.step_timeout, MIN_INIT_TIMEOUT)` in all.
    ///
    /// An API error during `Init` (the device cannot be made current) is
    /// `NotSupported`; a worker that cannot be started, dies, hangs or
    /// answers nonsense is a `Harness` error. Workers already started are
    /// shut down on failure.
    pub fn launch(worker: &WorkerCommand, spec: &MachineSpec) -> Result<CudaMachine, StartError> {
        Self::launch_with(worker, spec, None, false, &[])
    }

    /// [`launch`](Self::launch), taking initialised workers from `pool`
    /// where it has some for a process, then refilling the pool (see
    /// `pool.rs`). Without a pool (or with an empty one) it is
    /// exactly `launch`. `shared`: the machine may take workers that served
    /// earlier machines (and its own may go back); otherwise it takes only
    /// workers that never served one.
    pub(crate) fn launch_with(
        worker: &WorkerCommand,
        spec: &MachineSpec,
        mut pool: Option<&mut WorkerPool>,
        shared: bool,
        fits: &[WorkerFit],
    ) -> Result<CudaMachine, StartError> {
        let base_env = super::spawn::worker_env();
        let parent_visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let plans = spec
            .processes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                plan(
                    p,
                    one_queue_at(fits, i),
                    spec.dialect,
                    &base_env,
                    parent_visible.as_deref(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(pool) = pool.as_deref_mut() {
            pool.sweep();
        }
        let result = crate::profile::timed("launch: start workers", || {
            Self::start_workers(worker, spec, &plans, pool.as_deref_mut(), shared, fits)
        });
        if let Some(pool) = pool {
            if let Ok(machine) = &result {
                pool.started(&planned(spec, &plans, fits, shared));
                for (key, _) in &plans {
                    pool.want(key, !shared);
                }
                // Counted before the refill: these workers may come back.
                if shared {
                    pool.note_out(&machine.returnable_keys());
                }
            }
            crate::profile::timed("launch: pool refill", || {
                pool.refill(worker, &base_env, parent_visible.as_deref())
            });
        }
        result
    }

    fn start_workers(
        worker: &WorkerCommand,
        spec: &MachineSpec,
        plans: &[(WorkerKey, Vec<(OsString, OsString)>)],
        mut pool: Option<&mut WorkerPool>,
        shared: bool,
        fits: &[WorkerFit],
    ) -> Result<CudaMachine, StartError> {
        /// Where a worker's `Init` stands.
        enum Init {
            /// Pooled, answered already.
            Answered,
            /// Pooled, sent at this time, answer not read yet.
            Pooled(Instant),
            /// Fresh, not sent yet.
            ToSend,
            /// Fresh, sent: the answer is due by this time.
            Due(Instant),
        }
        let init_timeout = spec.step_timeout.max(MIN_INIT_TIMEOUT);
        let mut machine = CudaMachine {
            reap_in_background: pool.is_some(),
            procs: Vec::with_capacity(spec.processes.len()),
            keys: plans.iter().map(|(key, _)| key.clone()).collect(),
            returnable: (0..spec.processes.len())
                .map(|i| !fits.get(i).is_some_and(|f| f.fresh))
                .collect(),
            reuse: None,
        };
        let mut init = Vec::with_capacity(spec.processes.len());
        for (i, (p, (key, env))) in spec.processes.iter().zip(plans).enumerate() {
            // Pooled workers run in the harness's PID namespace.
            let poolable = p.pid_namespace == PidNamespace::Harness;
            let fit = fits.get(i).copied().unwrap_or_default();
            match pool
                .as_deref_mut()
                .filter(|_| poolable)
                .and_then(|pool| pool.claim(key, shared && !fit.fresh, fit))
            {
                Some(claimed) => {
                    machine.procs.push(claimed.proxy);
                    init.push(claimed.init_sent.map_or(Init::Answered, Init::Pooled));
                }
                None => {
                    machine.procs.push(spawn_worker(worker, spec, p, env)?);
                    init.push(Init::ToSend);
                }
            }
        }
        // All fresh workers create their contexts at the same time.
        for ((proxy, p), state) in machine.procs.iter_mut().zip(&spec.processes).zip(&mut init) {
            if matches!(state, Init::ToSend) {
                send_init(proxy, spec, p)?;
            }
        }
        let deadline = Instant::now() + init_timeout;
        for state in &mut init {
            if matches!(state, Init::ToSend) {
                *state = Init::Due(deadline);
            }
        }
        // Pooled workers: wait for those still initialising (they started
        // before any fresh one could); replace any that fails.
        for (i, (p, (_, env))) in spec.processes.iter().zip(plans).enumerate() {
            let proxy = &mut machine.procs[i];
            let ok = match init[i] {
                Init::Answered => true,
                Init::Pooled(sent) => {
                    let left = (sent + init_timeout).saturating_duration_since(Instant::now());
                    crate::profile::timed("launch: wait for pooled init", || {
                        matches!(proxy.await_reply("init", left), Ok(Reply::Unit))
                    })
                }
                Init::ToSend | Init::Due(_) => continue,
            };
            if ok && proxy.idle_and_alive() {
                proxy.assign(&p.name, spec.step_timeout);
                if let Some(pool) = pool.as_deref_mut() {
                    pool.note_handed_out();
                }
                continue;
            }
            if let Some(pool) = pool.as_deref_mut() {
                pool.note_discarded(&plans[i].0);
            }
            // The failed worker is dropped here: killed and reaped.
            machine.procs[i] = spawn_worker(worker, spec, p, env)?;
            send_init(&mut machine.procs[i], spec, p)?;
            init[i] = Init::Due(Instant::now() + init_timeout);
        }
        for ((proxy, p), state) in machine.procs.iter_mut().zip(&spec.processes).zip(&init) {
            let Init::Due(due) = *state else {
                continue;
            };
            let left = due.saturating_duration_since(Instant::now());
            let reply = crate::profile::timed("launch: wait for fresh init", || {
                proxy.await_reply("init", left)
            });
            match reply {
                Ok(Reply::Unit) => {}
                Ok(other) => {
                    return Err(StartError::Harness(format!(
                        "process '{}': unexpected answer to init: {other:?}",
                        p.name
                    )))
                }
                Err(e) => return Err(init_error(p.device, spec.dialect, &p.name, e)),
            }
        }
        Ok(machine)
    }

    /// The worker process ids, in process order.
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.pid()).collect()
    }

    /// The proxy of one process (its [`Driver`] plus process details).
    pub fn proxy(&mut self, process: ProcessIndex) -> &mut WorkerProxy {
        &mut self.procs[process]
    }

    /// Whether every worker has been waited for (a worker given back to
    /// the pool counts: this machine no longer owns it).
    pub fn all_reaped(&self) -> bool {
        self.procs.iter().all(|p| p.is_reaped())
    }

    /// Reuse mode: at shutdown, give cleanly reset workers back to `pool`
    /// (which counted them out with `note_out` when this machine started).
    pub(crate) fn give_workers_back_to(&mut self, pool: Weak<Mutex<WorkerPool>>) {
        self.reuse = Some(pool);
    }

    /// The keys of the workers that may go back to the pool at shutdown.
    fn returnable_keys(&self) -> Vec<WorkerKey> {
        self.keys
            .iter()
            .zip(&self.returnable)
            .filter(|(_, &back)| back)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Reuse mode, first step of a shutdown: when every process still runs,
    /// sends `ReleaseImported` to each worker that never answered a sticky
    /// error, all at once (a fresh process's too), then `Reset` to the
    /// returnable ones that answered it; gives
    /// those answering `Clean` within [`RESET_TIMEOUT`] back to the pool
    /// (their proxies here become exited stubs), kills the others that were
    /// sent either. Workers the pool has no room for are
    /// asked to exit and reaped in the background. Whatever stays here is
    /// shut down by the rest of `shutdown` as usual.
    fn return_workers(&mut self, pool: Weak<Mutex<WorkerPool>>) {
        // Where the pool shares exits (`exits` of ShareAlso, on unless
        // IPC_CONFORMANCE_SHARE_ALSO leaves it out), a process that ended by
        // its `exit` step does not stop the others coming back.
        let exits = pool
            .upgrade()
            .is_some_and(|p| p.lock().unwrap_or_else(|e| e.into_inner()).shares_exits());
        let eligible = pool.strong_count() > 0
            && self
                .procs
                .iter()
                .all(|p| p.is_running() || (exits && p.has_exited()));
        let mut clean = Vec::new();
        let mut failed = 0;
        if eligible {
            let deadline = Instant::now() + RESET_TIMEOUT;
            // Two steps: every worker releases what it imported before any
            // frees what it exported (an exporter's early free is undefined:
            // pool.lifetime.exporter-frees-first).
            // A fresh process's worker (not returnable) releases its imports
            // too: it may hold what a reset worker is about to free.
            let mut released = Vec::new();
            for (i, p) in self.procs.iter_mut().enumerate() {
                if !p.poisoned && p.is_running() && p.send(&Request::ReleaseImported).is_ok() {
                    released.push(i);
                }
            }
            let mut sent = Vec::new();
            for i in released {
                let p = &mut self.procs[i];
                let ok = p.await_released(deadline) && p.idle_and_alive();
                // A worker that did what a reset cannot undo is not reset:
                // the rest of the shutdown ends it.
                if !self.returnable[i] {
                    continue;
                }
                if ok {
                    sent.push(i);
                } else {
                    p.start_kill();
                    failed += 1;
                }
            }
            sent.retain(|&i| self.procs[i].send(&Request::Reset).is_ok());
            for i in sent {
                let p = &mut self.procs[i];
                match p.await_clean(deadline).filter(|_| p.idle_and_alive()) {
                    Some(spare_contexts) => {
                        p.spare_contexts = spare_contexts;
                        clean.push(i);
                    }
                    None => {
                        // Its state after a failed reset is unknown: discard it.
                        p.start_kill();
                        failed += 1;
                    }
                }
            }
        }
        let mut back: Vec<(WorkerKey, WorkerProxy)> = Vec::new();
        for i in clean {
            match self.procs[i].detach() {
                Some(w) => back.push((self.keys[i].clone(), w)),
                None => self.procs[i].start_kill(),
            }
        }
        let mut extra = Vec::new();
        match pool.upgrade() {
            Some(pool) => {
                let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
                pool.note_in(&self.returnable_keys());
                pool.note_not_returned(failed);
                for (key, w) in back {
                    if let Some(w) = pool.give_back(&key, w) {
                        extra.push(w);
                    }
                }
            }
            None => extra.extend(back.into_iter().map(|(_, w)| w)),
        }
        retire_in_background(extra);
    }
}

/// The pool key and the added environment of the worker for process `p`:
/// `CUDA_VISIBLE_DEVICES` when it names `visible_devices` (translated
/// through the parent's own `CUDA_VISIBLE_DEVICES`, if set), and one
/// hardware queue when `one_queue` ([`WorkerFit::one_queue`]).
fn plan(
    p: &ProcessSpec,
    one_queue: bool,
    dialect: Dialect,
    base_env: &[(OsString, OsString)],
    parent_visible: Option<&str>,
) -> Result<(WorkerKey, Vec<(OsString, OsString)>), StartError> {
    let key = worker_key(p, one_queue, dialect, parent_visible)?;
    let mut env = base_env.to_vec();
    if let (Some(_), Some(value)) = (&p.visible_devices, &key.visible) {
        env.push(("CUDA_VISIBLE_DEVICES".into(), value.into()));
    }
    env.extend(key.queue_env());
    Ok((key, env))
}

/// Whether process `i` gets a worker with one hardware queue: its fit
/// says so ([`WorkerFit::one_queue`]); no fit, no.
fn one_queue_at(fits: &[WorkerFit], i: usize) -> bool {
    fits.get(i).is_some_and(|f| f.one_queue)
}

/// The pool key of the worker for process `p` (see [`plan`]).
pub(crate) fn worker_key(
    p: &ProcessSpec,
    one_queue: bool,
    dialect: Dialect,
    parent_visible: Option<&str>,
) -> Result<WorkerKey, StartError> {
    let visible = match &p.visible_devices {
        Some(visible) => Some(
            super::spawn::child_visible_devices(parent_visible, visible)
                .map_err(|e| StartError::NotSupported(format!("process '{}': {e}", p.name)))?,
        ),
        None => parent_visible.map(str::to_string),
    };
    Ok(WorkerKey {
        dialect,
        device: p.device,
        visible,
        one_queue,
    })
}

/// A machine of `spec` as a pool's plan names it: the keys of the
/// processes a pooled worker can serve (`plans`, in process order), what
/// each asks of its worker (`fits`, one per process or none: it ends, it
/// needs a fresh one), and whether it shares workers.
fn planned(
    spec: &MachineSpec,
    plans: &[(WorkerKey, Vec<(OsString, OsString)>)],
    fits: &[WorkerFit],
    shared: bool,
) -> PlannedMachine {
    let poolable = spec
        .processes
        .iter()
        .zip(plans)
        .enumerate()
        .filter(|(_, (p, _))| p.pid_namespace == PidNamespace::Harness);
    let (keys, fits) = poolable
        .map(|(i, (_, (key, _)))| (key.clone(), fits.get(i).copied().unwrap_or_default()))
        .unzip();
    PlannedMachine { keys, fits, shared }
}

/// A machine of `spec` as a pool's plan names it (see [`planned`]), or
/// `None` when it cannot start here (a process's devices cannot be made
/// visible).
pub(crate) fn planned_machine(
    spec: &MachineSpec,
    fits: &[WorkerFit],
    shared: bool,
    parent_visible: Option<&str>,
) -> Option<PlannedMachine> {
    let plans = spec
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            worker_key(p, one_queue_at(fits, i), spec.dialect, parent_visible)
                .map(|k| (k, Vec::new()))
        })
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(planned(spec, &plans, fits, shared))
}

fn spawn_worker(
    worker: &WorkerCommand,
    spec: &MachineSpec,
    p: &ProcessSpec,
    env: &[(OsString, OsString)],
) -> Result<WorkerProxy, StartError> {
    let spawned = WorkerProxy::spawn_in(
        &p.name,
        spec.dialect,
        spec.step_timeout,
        worker,
        env,
        p.pid_namespace,
    );
    spawned.map_err(|e| {
        let why = format!(
            "cannot start the worker for process '{}' ({}): {e}",
            p.name,
            worker.program.display()
        );
        // A host without user namespaces cannot run `pidns=new` here.
        if e.kind() == std::io::ErrorKind::Unsupported {
            StartError::NotSupported(why)
        } else {
            StartError::Harness(why)
        }
    })
}

fn send_init(
    proxy: &mut WorkerProxy,
    spec: &MachineSpec,
    p: &ProcessSpec,
) -> Result<(), StartError> {
    proxy
        .send(&Request::Init {
            dialect: spec.dialect,
            device: p.device,
        })
        .map_err(|e| init_error(p.device, spec.dialect, &p.name, e))
}

fn init_error(device: u32, dialect: Dialect, name: &str, e: DriverError) -> StartError {
    let call = match dialect {
        Dialect::Runtime => format!("cudaSetDevice({device})"),
        Dialect::Driver => format!("making device {device}'s primary context current"),
        Dialect::Hip => format!("hipSetDevice({device})"),
    };
    match e {
        DriverError::Api(api) => {
            StartError::NotSupported(format!("process '{name}': {call} failed with {api}"))
        }
        DriverError::Lost(loss) => StartError::Harness(format!(
            "the worker for process '{name}' was lost during init: {}",
            DriverError::Lost(loss)
        )),
        DriverError::Harness(m) => StartError::Harness(m),
    }
}

impl Machine for CudaMachine {
    fn process_count(&self) -> usize {
        self.procs.len()
    }

    fn driver(&mut self, process: ProcessIndex) -> &mut dyn Driver {
        &mut self.procs[process]
    }

    fn exit(&mut self, process: ProcessIndex) -> DriverResult<()> {
        match self.procs.get_mut(process) {
            Some(p) => p.exit(),
            None => Err(DriverError::Harness(format!(
                "no process {process} (the machine has {})",
                self.procs.len()
            ))),
        }
    }

    fn hazards(&self) -> Option<Vec<Hazard>> {
        None
    }

    /// The descriptor really travels: worker `from` sends it to the parent
    /// with `SCM_RIGHTS`, the parent sends it on to worker `to`, which
    /// answers with its own number; the parent's copy is closed.
    fn transfer_fd(&mut self, from: ProcessIndex, fd: Fd, to: ProcessIndex) -> DriverResult<Fd> {
        let n = self.procs.len();
        if from >= n || to >= n {
            return Err(DriverError::Harness(format!(
                "no process {} (the machine has {n})",
                from.max(to)
            )));
        }
        let sender = &mut self.procs[from];
        sender.send(&Request::SendFd { fd: fd.0 })?;
        let timeout = sender.timeout;
        let (_, mut fds) = sender.await_reply_with_fds("send_fd", timeout)?;
        let Some(file) = fds.pop() else {
            return Err(DriverError::Harness(
                "the sending worker answered without a descriptor".into(),
            ));
        };
        let receiver = &mut self.procs[to];
        receiver.send_with_fds(&Request::ReceiveFd, &[file.as_fd()])?;
        drop(file);
        match receiver.await_reply("receive_fd", timeout)? {
            Reply::Fd(n) => Ok(Fd(n)),
            r => Err(unexpected("receive_fd", r)),
        }
    }

    /// The worker's pid in the harness's PID namespace (for a worker in a
    /// new namespace, not the pid it has there).
    fn process_pid(&self, process: ProcessIndex) -> DriverResult<u32> {
        match self.procs.get(process) {
            Some(p) => Ok(p.process_pid()),
            None => Err(DriverError::Harness(format!(
                "no process {process} (the machine has {})",
                self.procs.len()
            ))),
        }
    }

    /// Asks every running worker to exit, waits up to [`SHUTDOWN_GRACE`],
    /// then kills and reaps the rest. Idempotent. In reuse mode, first
    /// gives cleanly reset workers back to the pool (see
    /// [`CudaBackend::with_worker_reuse`](super::CudaBackend::with_worker_reuse)).
    fn shutdown(&mut self) {
        crate::profile::timed("shutdown", || self.shutdown_timed())
    }
}

impl CudaMachine {
    /// [`Machine::shutdown`], timed as a whole by the caller.
    fn shutdown_timed(&mut self) {
        if let Some(pool) = self.reuse.take() {
            crate::profile::timed("shutdown: reset and return", || self.return_workers(pool));
        }
        for p in &mut self.procs {
            p.request_exit();
        }
        if self.reap_in_background {
            let children: Vec<Child> = self
                .procs
                .iter_mut()
                .filter_map(|p| p.release_child())
                .collect();
            if !children.is_empty() {
                thread::spawn(move || reap_with_grace(children));
            }
            return;
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        loop {
            let mut all = true;
            for p in &mut self.procs {
                all &= p.try_reap();
            }
            if all || Instant::now() >= deadline {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        for p in &mut self.procs {
            p.kill_and_reap();
            p.mark_exited();
        }
    }
}

impl Drop for CudaMachine {
    fn drop(&mut self) {
        self.shutdown();
    }
}
