//! The worker pool of [`CudaBackend`](super::CudaBackend): workers started
//! and sent `Init` ahead of time, so that a machine usually starts with
//! workers whose CUDA context already exists.
//!
//! - **Keyed by what `Init` fixes**: the dialect, the device made current,
//!   and the `CUDA_VISIBLE_DEVICES` the worker sees ([`WorkerKey`]). A
//!   worker is only handed out for a process with the same key.
//! - **One machine per worker**, by default. A worker leaves the pool when
//!   it is handed out and never comes back: it serves that one machine and
//!   exits with it. The pool only starts replacements ahead of time.
//! - **Opt-in reuse** ([`CudaBackend::with_worker_reuse`](super::CudaBackend::with_worker_reuse)):
//!   a machine whose processes all still run at shutdown (none exited,
//!   crashed, timed out or broke) sends `ReleaseImported` and then `Reset`
//!   to each worker that never answered a sticky error (code 700 or
//!   more); those answering `Clean`
//!   within [`RESET_TIMEOUT`](super::RESET_TIMEOUT) come back to the pool
//!   under the key they were started with ([`WorkerPool::give_back`]), as
//!   far as the pool size allows; every other worker is shut down as
//!   usual. While reuse is on, the pool counts the workers of live
//!   machines as coming back (they are not replaced ahead of time): in a
//!   run of clean scenarios no new worker is started at all.
//! - **A plan, where the caller knows one** ([`WorkerPool::set_plan`]:
//!   the machines to come, from [`Backend::expect`](crate::Backend::expect)).
//!   The pool then starts exactly the workers those machines will need
//!   that it cannot supply otherwise, in the order they will be needed:
//!   walking the plan, a process of a machine that shares workers takes a
//!   served worker when one is idle or will come back (a machine that
//!   shares gives its workers back), and any other process a worker that
//!   never served; the first [`size`](WorkerPool::size) such processes
//!   that no idle worker covers get one started now, so that fresh
//!   workers initialise during the steps of the machines before theirs.
//!   Idle workers of a key that none of the next [`PLAN_WINDOW`] machines
//!   uses leave (each idle context slows every new one). Without a plan,
//!   the pool keeps `size` workers ready for every key a machine started
//!   with, and `size` never-used ones for keys that fresh machines used.
//! - **Never waits on a refill.** [`WorkerPool::refill`] spawns the missing
//!   workers and sends each its `Init` at once, without waiting for any
//!   answer: contexts are created while the scenario runs. The answers are
//!   read later, without blocking ([`WorkerPool::sweep`]), or, for a worker
//!   handed out before it answered, by the launch that takes it (still
//!   sooner than a fresh worker would answer).
//! - **Only healthy workers are handed out.** A pooled worker that died,
//!   answered `Init` with an error or anything else, or sent something
//!   unasked is discarded (killed and reaped); one that fails while being
//!   handed out is replaced by a fresh worker (see
//!   [`CudaMachine::launch`](super::CudaMachine::launch) for the semantics,
//!   which are those of a launch without a pool).
//! - **Nothing leaks.** Dropping the pool (with its backend) kills every
//!   idle worker, then reaps them all. Were the parent to die instead, each
//!   idle worker sees its socket close and exits.

use super::process::{retire_in_background, WorkerProxy, MIN_INIT_TIMEOUT, POOLED_NAME};
use super::protocol::Request;
use super::spawn::WorkerCommand;
use crate::errors::Dialect;
use crate::machine::WorkerFit;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::time::Instant;

/// Idle workers kept ready per key unless
/// [`CudaBackend::with_pool_size`](super::CudaBackend::with_pool_size) says
/// otherwise.
///
/// Small on purpose: every idle worker holds a context, and the driver
/// makes each new context slower by every context already on the GPU (on
/// an H100, about 10 ms more per context: 133 ms alone, 373 ms beside 24
/// others). Three per key keeps a one-GPU run fed and its contexts cheap.
pub const DEFAULT_POOL_SIZE: usize = 3;

/// How many machines of a plan the pool looks at: the next ones it starts
/// workers for, and those whose keys keep idle workers from leaving.
pub const PLAN_WINDOW: usize = 64;

/// What `Init` and the environment fix in a worker: only a worker with the
/// same key can serve a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerKey {
    pub dialect: Dialect,
    /// The device `Init` makes current (in the worker's own numbering).
    pub device: u32,
    /// The `CUDA_VISIBLE_DEVICES` the worker sees: the process's own
    /// (translated) `visible_devices`, or else the parent's, if set.
    pub visible: Option<String>,
    /// It runs with one hardware queue ([`WorkerKey::queue_env`],
    /// [`WorkerFit::one_queue`]).
    pub one_queue: bool,
}

impl WorkerKey {
    /// The variable a worker of this key is started with for its hardware
    /// queues: `CUDA_DEVICE_MAX_CONNECTIONS=1` for one queue, none for the
    /// driver's default.
    pub(crate) fn queue_env(&self) -> Option<(OsString, OsString)> {
        self.one_queue
            .then(|| ("CUDA_DEVICE_MAX_CONNECTIONS".into(), "1".into()))
    }
}

/// Counters of a backend's pool, for tests and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Workers the pool started ahead of time.
    pub spawned: u64,
    /// Pooled workers that went to a machine.
    pub handed_out: u64,
    /// Pooled workers thrown away: died, failed `Init`, or failed at hand-out.
    pub discarded: u64,
    /// Workers waiting in the pool now (initialised or still initialising).
    pub idle: usize,
    /// Workers that served a machine, answered `Reset` with `Clean` and
    /// came back to the pool (reuse mode only).
    pub returned: u64,
    /// Workers sent `Reset` that did not answer `Clean` in time (killed
    /// and reaped), or answered it with the pool full (shut down).
    pub not_returned: u64,
    /// Idle workers let go because no machine of the plan needs their key.
    pub retired: u64,
}

/// A machine of a plan, as the pool sees it: the key of each of its
/// processes that a pooled worker can serve, in process order, with what
/// each asks of its worker (`fits`: whether it ends during the scenario, so
/// its worker does not come back; whether it needs a never-used worker even
/// in a machine that shares, and keeps it), and whether it takes reused
/// workers (and gives its own back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlannedMachine {
    pub keys: Vec<WorkerKey>,
    pub fits: Vec<WorkerFit>,
    pub shared: bool,
}

impl PlannedMachine {
    /// Whether `other` starts the same workers (what ends aside).
    fn same_start(&self, other: &PlannedMachine) -> bool {
        let fresh = |m: &PlannedMachine| m.fits.iter().map(|f| f.fresh).collect::<Vec<_>>();
        self.keys == other.keys && self.shared == other.shared && fresh(self) == fresh(other)
    }

    /// What its process `n` asks of its worker.
    fn fit(&self, n: usize) -> WorkerFit {
        self.fits.get(n).copied().unwrap_or_default()
    }

    /// Whether its process `n` takes a served worker if there is one, and
    /// gives it back when the machine ends.
    fn shares(&self, n: usize) -> bool {
        self.shared && !self.fit(n).fresh
    }
}

/// One worker waiting in the pool.
struct Idle {
    proxy: WorkerProxy,
    /// When `Init` was sent, while its answer has not been read.
    init_sent: Option<Instant>,
    /// It served a machine and came back reset: only a machine that may
    /// share workers takes it, never one that needs fresh processes.
    served: bool,
}

impl Idle {
    /// Emptied contexts it keeps for the next `CreateContext`.
    fn spare_contexts(&self) -> u32 {
        self.proxy.spare_contexts
    }

    /// It served and never made a context: it can serve a process that
    /// needs [`WorkerFit::new_contexts`].
    fn contextless(&self) -> bool {
        self.served && !self.proxy.made_contexts
    }

    /// What keeping it is worth to the next machines, least first: its
    /// spare contexts, then whether it never made a context.
    fn worth(&self) -> (u32, bool) {
        (self.spare_contexts(), self.contextless())
    }
}

struct Entry {
    key: WorkerKey,
    /// Whether to keep workers ready for this key: set when a machine
    /// started with it, cleared when a pooled worker fails its `Init` (so
    /// that a key that cannot be initialised does not spawn over and over).
    wanted: bool,
    /// A machine that needs fresh processes started with this key: keep
    /// `size` workers that never served a machine ready for it too.
    fresh_wanted: bool,
    /// Oldest first.
    idle: VecDeque<Idle>,
    /// Reuse mode: workers of this key in live machines, which may come
    /// back at their machine's shutdown (refills count them as present).
    out: usize,
}

/// A pooled worker taken for a process.
pub(crate) struct Claimed {
    pub proxy: WorkerProxy,
    /// When its `Init` was sent, if its answer has not been read yet.
    pub init_sent: Option<Instant>,
}

pub(crate) struct WorkerPool {
    size: usize,
    /// Whether machines return cleanly reset workers (see the module docs).
    reuse: bool,
    entries: Vec<Entry>,
    stats: PoolStats,
    /// Machines give their running workers back when others ended by an
    /// `exit` step (`exits` of [`ShareAlso`](crate::sharing::ShareAlso)).
    share_exits: bool,
    /// The machines to come, if a caller said ([`set_plan`](Self::set_plan)).
    plan: Option<VecDeque<PlannedMachine>>,
}

impl WorkerPool {
    pub fn new(size: usize) -> WorkerPool {
        WorkerPool {
            size,
            reuse: false,
            entries: Vec::new(),
            stats: PoolStats::default(),
            share_exits: crate::sharing::ShareAlso::from_env().exits,
            plan: None,
        }
    }

    /// The machines that will start from now on, in order (see the module
    /// docs); replaces the plan before. [`refill`](Self::refill) follows it.
    pub fn set_plan(&mut self, machines: Vec<PlannedMachine>) {
        self.plan = Some(machines.into());
    }

    /// A machine started: the plan's first machine is done if it was this one.
    pub fn started(&mut self, machine: &PlannedMachine) {
        if let Some(plan) = &mut self.plan {
            if plan.front().is_some_and(|m| m.same_start(machine)) {
                plan.pop_front();
            }
        }
    }

    pub fn set_share_exits(&mut self, share: bool) {
        self.share_exits = share;
    }

    /// Whether a machine with processes that ended by `exit` still gives
    /// its running workers back.
    pub fn shares_exits(&self) -> bool {
        self.share_exits
    }

    /// Workers kept ready per key (0: no pool).
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn set_reuse(&mut self, reuse: bool) {
        self.reuse = reuse;
    }

    /// Whether machines give their workers back (reuse on, and a pool to
    /// give them to).
    pub fn reusing(&self) -> bool {
        self.reuse && self.size > 0
    }

    /// Reuse mode: a machine started with one worker per key of `keys`;
    /// they may come back when it shuts down.
    pub fn note_out(&mut self, keys: &[WorkerKey]) {
        if self.reusing() {
            for key in keys {
                self.entry(key).out += 1;
            }
        }
    }

    /// A machine noted with [`note_out`](Self::note_out) has shut down:
    /// its workers are back (through [`give_back`](Self::give_back)) or gone.
    pub fn note_in(&mut self, keys: &[WorkerKey]) {
        for key in keys {
            if let Some(e) = self.entries.iter_mut().find(|e| &e.key == key) {
                e.out = e.out.saturating_sub(1);
            }
        }
    }

    /// Takes back a worker that served a machine and answered `Reset` with
    /// `Clean` (keeping the spare contexts its proxy records), as an idle,
    /// initialised worker of `key`. When the pool already holds [`size`](Self::size) served
    /// workers for that key, one worker goes (returned, for the caller to
    /// shut down): the one worth least ([`Idle::worth`]: the fewest spare
    /// contexts, then one that made a context), the oldest among equals,
    /// this one if none is worth less; but never the last served worker
    /// that made no context, which the processes that need new contexts
    /// take.
    pub fn give_back(&mut self, key: &WorkerKey, proxy: WorkerProxy) -> Option<WorkerProxy> {
        let size = self.size;
        let entry = self.entry(key);
        let returning = Idle {
            proxy,
            init_sent: None,
            served: true,
        };
        let worth = returning.worth();
        let mut leaving = None;
        if entry.idle.iter().filter(|w| w.served).count() >= size {
            let contextless = entry.idle.iter().filter(|w| w.contextless()).count()
                + usize::from(returning.contextless());
            let last_contextless = |w: &Idle| contextless == 1 && w.contextless();
            // The first of the least worth: `min_by_key` keeps the first minimum.
            let poorest = entry
                .idle
                .iter()
                .enumerate()
                .filter(|(_, w)| w.served && !last_contextless(w))
                .min_by_key(|(_, w)| w.worth())
                .filter(|(_, w)| w.worth() < worth || last_contextless(&returning))
                .map(|(i, _)| i);
            match poorest.and_then(|i| entry.idle.remove(i)) {
                Some(w) => leaving = Some(w.proxy),
                None => {
                    self.stats.not_returned += 1;
                    return Some(returning.proxy);
                }
            }
        }
        entry.idle.push_back(returning);
        self.stats.returned += 1;
        self.stats.not_returned += u64::from(leaving.is_some());
        leaving
    }

    /// Workers that were sent `Reset` and did not answer `Clean`.
    pub fn note_not_returned(&mut self, n: usize) {
        self.stats.not_returned += n as u64;
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            idle: self.entries.iter().map(|e| e.idle.len()).sum(),
            ..self.stats
        }
    }

    fn entry(&mut self, key: &WorkerKey) -> &mut Entry {
        let i = match self.entries.iter().position(|e| &e.key == key) {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    key: key.clone(),
                    wanted: false,
                    fresh_wanted: false,
                    idle: VecDeque::new(),
                    out: 0,
                });
                self.entries.len() - 1
            }
        };
        &mut self.entries[i]
    }

    /// Reads the `Init` answers that have come (without waiting) and
    /// discards every worker that failed or died.
    pub fn sweep(&mut self) {
        let mut discarded = 0;
        for entry in &mut self.entries {
            let mut failed_init = false;
            entry.idle.retain_mut(|w| {
                let keep = match w.init_sent {
                    None => w.proxy.idle_and_alive(),
                    Some(_) => match w.proxy.poll_init() {
                        None => true,
                        Some(true) => {
                            w.init_sent = None;
                            w.proxy.idle_and_alive()
                        }
                        Some(false) => {
                            failed_init = true;
                            false
                        }
                    },
                };
                discarded += u64::from(!keep);
                keep
            });
            if failed_init {
                entry.wanted = false;
                entry.fresh_wanted = false;
            }
        }
        self.stats.discarded += discarded;
    }

    /// Takes an idle worker for `key`. With `shared`, a worker that served
    /// a machine before comes first (keeping the never-used ones for
    /// machines that need fresh processes): for a process that creates
    /// contexts (`fit`), the one with the most spare contexts, else the one
    /// with the fewest, so that spares wait for the processes that use
    /// them and a process that exits does not tear them down; for a
    /// process that needs new contexts, only one that never made a
    /// context; among equals, one that made a context (keeping the others
    /// for the processes that need new ones), then the one that came back
    /// last (its loaded kernels are warm). Without `shared`, only a
    /// never-used one is taken. Among those, one that has answered `Init`
    /// if there is one, else the one that has been initialising longest.
    pub fn claim(&mut self, key: &WorkerKey, shared: bool, fit: WorkerFit) -> Option<Claimed> {
        let entry = self.entries.iter_mut().find(|e| &e.key == key)?;
        let served = if shared {
            // Among equals, one that made a context: those that never did
            // wait for the processes that need new contexts.
            let rank = |w: &Idle| {
                let spares = i64::from(w.spare_contexts());
                let spares = if fit.creates_contexts {
                    spares
                } else {
                    -spares
                };
                (spares, !w.contextless())
            };
            // The last of the best: `max_by_key` keeps the last maximum.
            entry
                .idle
                .iter()
                .enumerate()
                .filter(|(_, w)| w.served && (w.contextless() || !fit.new_contexts))
                .max_by_key(|(_, w)| rank(w))
                .map(|(i, _)| i)
        } else {
            None
        };
        let i = served
            .or_else(|| {
                entry
                    .idle
                    .iter()
                    .position(|w| !w.served && w.init_sent.is_none())
            })
            .or_else(|| entry.idle.iter().position(|w| !w.served))?;
        let w = entry.idle.remove(i)?;
        Some(Claimed {
            proxy: w.proxy,
            init_sent: w.init_sent,
        })
    }

    /// A claimed worker went to a machine.
    pub fn note_handed_out(&mut self) {
        self.stats.handed_out += 1;
    }

    /// A worker claimed for `key` failed at hand-out (it is dropped: killed
    /// and reaped). The key is no longer refilled until a machine starts
    /// with it again.
    pub fn note_discarded(&mut self, key: &WorkerKey) {
        self.stats.discarded += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| &e.key == key) {
            e.wanted = false;
            e.fresh_wanted = false;
        }
    }

    /// A machine started with a process of `key`: keep workers ready for
    /// it; `fresh`: it needed fresh processes (keep never-used ones too).
    pub fn want(&mut self, key: &WorkerKey, fresh: bool) {
        if self.size > 0 {
            let entry = self.entry(key);
            entry.wanted = true;
            entry.fresh_wanted |= fresh;
        }
    }

    /// Starts the workers the plan needs next ([`set_plan`](Self::set_plan)),
    /// and lets idle workers of keys it does not need go; without a plan,
    /// starts workers until every wanted key has [`size`](Self::size) idle
    /// ones (in reuse mode, idle ones and ones out in live machines), and
    /// [`size`](Self::size) never-used ones where fresh machines asked.
    /// Sends each new worker its `Init` as soon as it runs; waits for no
    /// answer.
    ///
    /// `base_env` is what every worker gets; `parent_visible` the parent's
    /// `CUDA_VISIBLE_DEVICES` now (a key without `CUDA_VISIBLE_DEVICES` is
    /// not refilled while the parent has one: its workers would inherit it).
    pub fn refill(
        &mut self,
        worker: &WorkerCommand,
        base_env: &[(OsString, OsString)],
        parent_visible: Option<&str>,
    ) {
        let window: Option<Vec<PlannedMachine>> = self
            .plan
            .as_ref()
            .map(|plan| plan.iter().take(PLAN_WINDOW).cloned().collect());
        let starts = match window {
            Some(window) => {
                let window: Vec<&PlannedMachine> = window.iter().collect();
                self.retire_unplanned(&window);
                let have = |key: &WorkerKey| self.have(key);
                planned_starts(&window, &have, self.size, self.reusing())
            }
            None => self.unplanned_starts(),
        };
        let mut failed: Vec<WorkerKey> = Vec::new();
        for key in starts {
            if failed.contains(&key) || (key.visible.is_none() && parent_visible.is_some()) {
                continue;
            }
            if !self.start_one(&key, worker, base_env) {
                // Cannot start workers now: the launch will say why.
                failed.push(key);
            }
        }
    }

    /// What the pool holds for `key`: idle workers that never served, and
    /// served ones idle or out in live machines (which come back there).
    fn have(&self, key: &WorkerKey) -> (usize, usize) {
        self.entries
            .iter()
            .find(|e| &e.key == key)
            .map_or((0, 0), |e| {
                let unused = e.idle.iter().filter(|w| !w.served).count();
                let out = if self.reusing() { e.out } else { 0 };
                (unused, e.idle.len() - unused + out)
            })
    }

    /// Without a plan: the workers each wanted key lacks.
    fn unplanned_starts(&self) -> Vec<WorkerKey> {
        let mut starts = Vec::new();
        for entry in self.entries.iter().filter(|e| e.wanted) {
            // Workers out in machines come back in reuse mode: count them.
            let coming_back = if self.reuse { entry.out } else { 0 };
            let unused = entry.idle.iter().filter(|w| !w.served).count();
            // Machines that need fresh processes take only never-used workers.
            let for_fresh = if entry.fresh_wanted {
                self.size.saturating_sub(unused)
            } else {
                0
            };
            let n = self
                .size
                .saturating_sub(entry.idle.len() + coming_back)
                .max(for_fresh);
            starts.extend(std::iter::repeat_n(entry.key.clone(), n));
        }
        starts
    }

    /// Lets the idle workers of every key that no machine of `window` uses go.
    fn retire_unplanned(&mut self, window: &[&PlannedMachine]) {
        let mut leaving = Vec::new();
        for entry in &mut self.entries {
            if !window.iter().any(|m| m.keys.contains(&entry.key)) {
                leaving.extend(entry.idle.drain(..).map(|w| w.proxy));
            }
        }
        self.stats.retired += leaving.len() as u64;
        retire_in_background(leaving);
    }

    /// Starts one worker for `key` and sends its `Init`; false when none
    /// could be started.
    fn start_one(
        &mut self,
        key: &WorkerKey,
        worker: &WorkerCommand,
        base_env: &[(OsString, OsString)],
    ) -> bool {
        let mut env = base_env.to_vec();
        if let Some(v) = &key.visible {
            env.push(("CUDA_VISIBLE_DEVICES".into(), v.into()));
        }
        env.extend(key.queue_env());
        let Ok(mut proxy) =
            WorkerProxy::spawn(POOLED_NAME, key.dialect, MIN_INIT_TIMEOUT, worker, &env)
        else {
            return false;
        };
        self.stats.spawned += 1;
        let init = Request::Init {
            dialect: key.dialect,
            device: key.device,
        };
        if proxy.send(&init).is_err() {
            // Died at once: dropping it reaps it.
            self.stats.discarded += 1;
            return false;
        }
        self.entry(key).idle.push_back(Idle {
            proxy,
            init_sent: Some(Instant::now()),
            served: false,
        });
        true
    }
}

/// The workers to start now for the machines of `plan`, in the order they
/// will be needed (see the module docs): `have(key)` gives the never-used
/// workers idle for `key` and the served ones idle or coming back; at most
/// `size` processes are looked ahead for (0: none); `reusing`: machines
/// that share take served workers and give theirs back.
pub(crate) fn planned_starts(
    plan: &[&PlannedMachine],
    have: &dyn Fn(&WorkerKey) -> (usize, usize),
    size: usize,
    reusing: bool,
) -> Vec<WorkerKey> {
    // What each key has left as the walk hands workers out: never used, served.
    let mut left: Vec<(WorkerKey, usize, usize)> = Vec::new();
    let slot = |left: &mut Vec<(WorkerKey, usize, usize)>, key: &WorkerKey| match left
        .iter()
        .position(|(k, _, _)| k == key)
    {
        Some(i) => i,
        None => {
            let (unused, served) = have(key);
            left.push((key.clone(), unused, served.min(size)));
            left.len() - 1
        }
    };
    let mut starts = Vec::new();
    let mut ahead = 0;
    for machine in plan {
        if ahead >= size {
            break;
        }
        let shared = machine.shared && reusing;
        for (n, key) in machine.keys.iter().enumerate() {
            let i = slot(&mut left, key);
            if reusing && machine.shares(n) && left[i].2 > 0 {
                left[i].2 -= 1;
                continue;
            }
            if left[i].1 > 0 {
                left[i].1 -= 1;
            } else {
                starts.push(key.clone());
            }
            ahead += 1;
            if ahead >= size {
                break;
            }
        }
        // Its workers come back when it ends, as many as the pool keeps,
        // but for those of processes that end during the scenario or need
        // fresh workers.
        if shared {
            for (n, key) in machine.keys.iter().enumerate() {
                if machine.shares(n) && !machine.fit(n).ends {
                    let i = slot(&mut left, key);
                    left[i].2 = (left[i].2 + 1).min(size);
                }
            }
        }
    }
    starts
}

impl Drop for WorkerPool {
    /// Kills every idle worker first, then reaps them (so that they end
    /// together, not one after the other).
    fn drop(&mut self) {
        for entry in &mut self.entries {
            for w in &mut entry.idle {
                w.proxy.start_kill();
            }
        }
        // Dropping a proxy kills (again, harmlessly) and waits.
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(device: u32) -> WorkerKey {
        WorkerKey {
            dialect: Dialect::Driver,
            device,
            visible: None,
            one_queue: false,
        }
    }

    fn machine(devices: &[u32], shared: bool) -> PlannedMachine {
        PlannedMachine {
            keys: devices.iter().map(|&d| key(d)).collect(),
            fits: vec![WorkerFit::default(); devices.len()],
            shared,
        }
    }

    /// The devices of the workers `planned_starts` starts, with `have`
    /// per device (never used, served) and pools of `size`.
    fn starts(plan: &[PlannedMachine], have: &[(u32, usize, usize)], size: usize) -> Vec<u32> {
        let plan: Vec<&PlannedMachine> = plan.iter().collect();
        let have = |k: &WorkerKey| {
            have.iter()
                .find(|(d, _, _)| *d == k.device)
                .map_or((0, 0), |&(_, unused, served)| (unused, served))
        };
        planned_starts(&plan, &have, size, true)
            .iter()
            .map(|k| k.device)
            .collect()
    }

    #[test]
    fn fresh_machines_get_the_next_workers_in_the_order_they_need_them() {
        let plan = [
            machine(&[0, 0], false),
            machine(&[1], false),
            machine(&[0, 1], false),
        ];
        assert_eq!(starts(&plan, &[], 3), vec![0, 0, 1]);
        assert_eq!(starts(&plan, &[], 4), vec![0, 0, 1, 0]);
        // Idle never-used workers are handed out first.
        assert_eq!(starts(&plan, &[(0, 2, 0)], 3), vec![1]);
        assert_eq!(starts(&plan, &[(0, 3, 0), (1, 2, 0)], 5), Vec::<u32>::new());
        // Served workers never serve a fresh machine.
        assert_eq!(starts(&plan, &[(0, 0, 3)], 3), vec![0, 0, 1]);
        assert_eq!(starts(&plan, &[], 0), Vec::<u32>::new());
    }

    #[test]
    fn shared_machines_take_served_workers_and_give_them_back() {
        // The first shared machine needs two workers; they come back and
        // serve the next ones, so nothing more starts.
        let shared = [
            machine(&[0, 0], true),
            machine(&[0], true),
            machine(&[0, 0], true),
        ];
        assert_eq!(starts(&shared, &[], 3), vec![0, 0]);
        assert_eq!(starts(&shared, &[(0, 0, 2)], 3), Vec::<u32>::new());
        // Workers out in live machines count as served (coming back), up
        // to the pool's size.
        assert_eq!(starts(&shared, &[(0, 0, 9)], 3), Vec::<u32>::new());
        // A machine that needs more than come back takes never-used ones.
        let wide = [machine(&[0], true), machine(&[0, 0, 0], true)];
        assert_eq!(starts(&wide, &[(0, 0, 1)], 3), vec![0, 0]);
        // A process that exits does not give its worker back.
        let mut exits = machine(&[0, 0], true);
        exits.fits[1].ends = true;
        let plan = [exits, machine(&[0, 0], true)];
        assert_eq!(starts(&plan, &[(0, 0, 2)], 3), vec![0]);
    }

    #[test]
    fn a_fresh_process_of_a_shared_machine_takes_a_new_worker_and_keeps_it() {
        // The second process of the first machine needs a fresh worker:
        // one starts for it although two served ones are idle, and only
        // the first process's worker comes back for the next machine.
        let mut mixed = machine(&[0, 0], true);
        mixed.fits[1].fresh = true;
        let plan = [mixed, machine(&[0, 0], true)];
        assert_eq!(starts(&plan, &[(0, 0, 2)], 3), vec![0]);
        // Without it, nothing starts.
        let plan = [machine(&[0, 0], true), machine(&[0, 0], true)];
        assert_eq!(starts(&plan, &[(0, 0, 2)], 3), Vec::<u32>::new());
        // Two machines in a row with a fresh process each: one never-used
        // worker each, the served workers going round.
        let mut a = machine(&[0, 0], true);
        a.fits[0].fresh = true;
        let b = a.clone();
        assert_eq!(starts(&[a, b], &[(0, 0, 1)], 3), vec![0, 0]);
    }

    #[test]
    fn the_walk_looks_past_shared_machines_for_the_fresh_ones_ahead() {
        let mut plan: Vec<PlannedMachine> = (0..20).map(|_| machine(&[0, 0], true)).collect();
        plan.push(machine(&[0, 1], false));
        plan.push(machine(&[1, 1], false));
        assert_eq!(starts(&plan, &[(0, 0, 2)], 3), vec![0, 1, 1]);
        // Without reuse every machine takes never-used workers.
        let refs: Vec<&PlannedMachine> = plan.iter().collect();
        let none = |_: &WorkerKey| (0, 2);
        let devices: Vec<u32> = planned_starts(&refs, &none, 3, false)
            .iter()
            .map(|k| k.device)
            .collect();
        assert_eq!(devices, vec![0, 0, 0]);
    }
}
