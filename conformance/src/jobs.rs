//! `run --jobs N`: clauses run at once, on the CUDA backend each on devices
//! of its own.
//!
//! - **Device needs** ([`device_need`]): a clause needs as many devices as
//!   its scenario uses (`devices N`, every process's `device=` and
//!   `visible=`). It gets that many devices no other running clause holds
//!   (the lowest free ones, [`DeviceSet`]) and its workers see only them:
//!   each process's `CUDA_VISIBLE_DEVICES` lists the physical devices it got
//!   (its own `visible=` mapped through them), so the scenario's device 0 is
//!   the first of them ([`on_devices`]). Since every scenario refers to
//!   devices by their index among those it sees, it runs the same steps as
//!   in a serial run.
//! - Two kinds of clause are not confined: one that counts devices
//!   (`device_count`) in a process that sees every device takes all of them
//!   ([`DeviceNeed::Whole`]: the count it asserts is the host's), and one
//!   that needs more devices than the host has, or cannot run at all,
//!   holds none ([`DeviceNeed::Nothing`]: it is NotSupported or Broken
//!   before starting a process, as in a serial run).
//! - **Order**: clauses are taken in catalogue order (a clause waits until
//!   its devices are free; later ones do not overtake it), results come
//!   back in catalogue order ([`run_scheduled`]); only the console prints
//!   them as they finish.
//! - On the simulator there is nothing to confine: `--jobs N` runs clauses
//!   on N threads, its results identical to a serial run.
//! - **`--jobs auto` runs serially** ([`Jobs::threads`]), and says why
//!   ([`auto_note`]): on the CUDA backend the time of a run goes to
//!   starting and ending worker processes and making contexts, and the
//!   driver does that one process at a time across all the devices of a
//!   host (`tools/gpu-probes/two_devices.sh`: two fresh processes on two
//!   devices take as long as the same two one after the other), while
//!   every clause run beside another needs workers of its own (confined
//!   to its devices), so two devices at once start twice the processes for
//!   no gain. A serial run shares workers and starts the rest ahead of
//!   time instead. `--jobs N` still runs N clauses at once.

use crate::catalogue::Clause;
use ipc_harness::scenario::ast::Op;
use ipc_harness::{Backend, BackendInfo, Dialect, Machine, MachineSpec, StartError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Most clauses `run --jobs` runs at once.
pub const MAX_RUN_JOBS: usize = 64;

/// `--jobs`: how many clauses run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jobs {
    /// One at a time (the default).
    #[default]
    Serial,
    /// This many at once (at least 2).
    Count(usize),
    /// As many as make the run faster (`--jobs auto`): one, whatever the
    /// host (see the [module docs](self) and [`auto_note`]).
    Auto,
}

impl Jobs {
    /// The number of clauses run at once.
    pub fn threads(self) -> usize {
        match self {
            Jobs::Serial | Jobs::Auto => 1,
            Jobs::Count(n) => n,
        }
    }
}

/// Why `--jobs auto` runs one clause at a time on a GPU host.
pub const AUTO_SERIAL_REASON: &str = "--jobs auto runs one clause at a time: the driver starts \
     and ends processes and makes contexts one at a time across all devices \
     (tools/gpu-probes/two_devices.sh), so clauses on several devices at once are no faster; \
     --jobs N runs N at once anyway (docs/performance.md)";

/// What `run` says about `--jobs` on `backend` with `devices` devices:
/// [`AUTO_SERIAL_REASON`] where `auto` could have used several devices.
pub fn auto_note(jobs: Jobs, backend: &str, devices: Option<u32>) -> Option<&'static str> {
    (jobs == Jobs::Auto && backend == "cuda" && devices.is_some_and(|d| d > 1))
        .then_some(AUTO_SERIAL_REASON)
}

impl std::str::FromStr for Jobs {
    type Err = String;
    fn from_str(s: &str) -> Result<Jobs, String> {
        match s.trim() {
            "auto" => Ok(Jobs::Auto),
            n => match n.parse::<usize>() {
                Ok(0) => Err("--jobs must be at least 1 (or 'auto')".into()),
                Ok(1) => Ok(Jobs::Serial),
                Ok(n) if n > MAX_RUN_JOBS => Err(format!(
                    "--jobs {n} is above the limit of {MAX_RUN_JOBS} clauses at once"
                )),
                Ok(n) => Ok(Jobs::Count(n)),
                Err(_) => Err(format!(
                    "bad --jobs '{n}': expected a number of clauses at once, or 'auto'"
                )),
            },
        }
    }
}

/// The devices a clause holds while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceNeed {
    /// None: it starts no process here (unparsed, or more devices than the
    /// host has).
    Nothing,
    /// This many, its processes confined to them.
    Devices(u32),
    /// Every device of the host, its processes not confined (it counts the
    /// devices a process sees).
    Whole,
}

impl DeviceNeed {
    /// How many of `host` devices it holds.
    pub fn count(self, host: u32) -> u32 {
        match self {
            DeviceNeed::Nothing => 0,
            DeviceNeed::Devices(k) => k,
            DeviceNeed::Whole => host,
        }
    }
}

/// What `clause` holds on a host of `host` devices (see the module docs).
pub fn device_need(clause: &Clause, host: u32) -> DeviceNeed {
    let Some(scenario) = clause.scenario.as_ref().filter(|_| !clause.is_broken()) else {
        return DeviceNeed::Nothing;
    };
    let mut k = scenario.devices;
    for p in &scenario.processes {
        k = k.max(p.device + 1);
        if let Some(v) = &p.visible_devices {
            k = k.max(v.iter().map(|d| d + 1).max().unwrap_or(0));
        }
    }
    if k > host {
        return DeviceNeed::Nothing;
    }
    let counts_every_device = scenario.steps.iter().any(|s| {
        matches!(s.op, Op::DeviceCount)
            && scenario
                .processes
                .get(s.process)
                .is_some_and(|p| p.visible_devices.is_none())
    });
    if counts_every_device {
        DeviceNeed::Whole
    } else {
        DeviceNeed::Devices(k.max(1))
    }
}

/// The host's devices, each free or held by a running clause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSet {
    held: Vec<bool>,
}

impl DeviceSet {
    /// `n` free devices.
    pub fn new(n: u32) -> DeviceSet {
        DeviceSet {
            held: vec![false; n as usize],
        }
    }

    /// Takes the `k` lowest-numbered free devices, if there are `k` free.
    pub fn take(&mut self, k: u32) -> Option<Vec<u32>> {
        let free: Vec<u32> = (0..self.held.len() as u32)
            .filter(|&d| !self.held[d as usize])
            .take(k as usize)
            .collect();
        if free.len() < k as usize {
            return None;
        }
        for &d in &free {
            self.held[d as usize] = true;
        }
        Some(free)
    }

    /// Frees devices taken with [`take`](Self::take).
    pub fn give_back(&mut self, devices: &[u32]) {
        for &d in devices {
            if let Some(h) = self.held.get_mut(d as usize) {
                *h = false;
            }
        }
    }
}

/// What an item got to run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// No devices: runs as it would serially (the simulator, or a clause
    /// that starts no process).
    Anywhere,
    /// These physical devices, its processes confined to them.
    Devices(Vec<u32>),
    /// Every device, its processes not confined.
    Whole,
}

/// Runs `needs.len()` items on `jobs` threads, item `i` with what its need
/// got on a host of `host` devices (`None`: no devices to share, every item
/// runs [`Placement::Anywhere`]). Items start in order; one waits until its
/// devices are free. `done` is told each finished item on this thread, in
/// the order they finish, and returns whether to go on (false: no new item
/// starts, those running finish). Returns each item's result in item order,
/// `None` for those never started.
pub fn run_scheduled<R: Send>(
    needs: &[DeviceNeed],
    host: Option<u32>,
    jobs: usize,
    run: &(dyn Fn(usize, &Placement) -> R + Sync),
    done: &mut dyn FnMut(usize, &R) -> bool,
) -> Vec<Option<R>> {
    struct State {
        next: usize,
        devices: DeviceSet,
    }
    let state = Mutex::new(State {
        next: 0,
        devices: DeviceSet::new(host.unwrap_or(0)),
    });
    let freed = Condvar::new();
    let stop = AtomicBool::new(false);
    let lock = || state.lock().unwrap_or_else(|p| p.into_inner());
    let (send, receive) = mpsc::channel::<(usize, R)>();
    let mut results: Vec<Option<R>> = (0..needs.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, needs.len().max(1)) {
            let send = send.clone();
            let (state_ref, freed, stop) = (&lock, &freed, &stop);
            scope.spawn(move || loop {
                // Take the next item and, once they are free, its devices.
                let (i, placement, held) = {
                    let mut s = state_ref();
                    if stop.load(Ordering::SeqCst) || s.next >= needs.len() {
                        return;
                    }
                    let i = s.next;
                    s.next += 1;
                    let (placement, held) = match (host, needs[i]) {
                        (None, _) | (_, DeviceNeed::Nothing) => (Placement::Anywhere, Vec::new()),
                        (Some(h), need) => loop {
                            if let Some(got) = s.devices.take(need.count(h)) {
                                let placement = match need {
                                    DeviceNeed::Whole => Placement::Whole,
                                    _ => Placement::Devices(got.clone()),
                                };
                                break (placement, got);
                            }
                            s = freed.wait(s).unwrap_or_else(|p| p.into_inner());
                        },
                    };
                    (i, placement, held)
                };
                let r = run(i, &placement);
                state_ref().devices.give_back(&held);
                freed.notify_all();
                if send.send((i, r)).is_err() {
                    return;
                }
            });
        }
        drop(send);
        loop {
            match receive.recv_timeout(Duration::from_millis(100)) {
                Ok((i, r)) => {
                    if !done(i, &r) {
                        stop.store(true, Ordering::SeqCst);
                    }
                    results[i] = Some(r);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    });
    results
}

/// `spec` confined to `devices` (physical indices, the scenario's device
/// `i` being `devices[i]`): every process sees the devices its own
/// `visible=` lists, mapped through `devices`, or all of `devices`.
pub fn confine(spec: &MachineSpec, devices: &[u32]) -> MachineSpec {
    let mut spec = spec.clone();
    for p in &mut spec.processes {
        p.visible_devices = Some(match &p.visible_devices {
            None => devices.to_vec(),
            Some(own) => own
                .iter()
                .map(|&d| devices.get(d as usize).copied().unwrap_or(d))
                .collect(),
        });
    }
    spec
}

/// `backend` with every machine's processes confined to `devices` ([`confine`]).
pub fn on_devices<'a>(backend: &'a dyn Backend, devices: &[u32]) -> OnDevices<'a> {
    OnDevices {
        inner: backend,
        devices: devices.to_vec(),
    }
}

/// A backend whose machines see only some devices (see [`on_devices`]).
pub struct OnDevices<'a> {
    inner: &'a dyn Backend,
    devices: Vec<u32>,
}

impl Backend for OnDevices<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn info(&self) -> BackendInfo {
        self.inner.info()
    }
    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        self.inner.start(&confine(spec, &self.devices))
    }
    fn has_hazard_log(&self) -> bool {
        self.inner.has_hazard_log()
    }
    fn dialects(&self) -> &[Dialect] {
        self.inner.dialects()
    }
    fn semantic_choice(&self, dialect: Dialect, name: &str) -> Option<String> {
        self.inner.semantic_choice(dialect, name)
    }
    fn shares_workers(&self) -> bool {
        self.inner.shares_workers()
    }
    fn start_shared(
        &self,
        spec: &MachineSpec,
        sharing: &ipc_harness::sharing::WorkerSharing,
        fits: &[ipc_harness::WorkerFit],
    ) -> Result<Box<dyn Machine>, StartError> {
        self.inner
            .start_shared(&confine(spec, &self.devices), sharing, fits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_harness::ProcessSpec;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn jobs_parse_numbers_and_auto() {
        assert_eq!("1".parse(), Ok(Jobs::Serial));
        assert_eq!("4".parse(), Ok(Jobs::Count(4)));
        assert_eq!(" auto ".parse(), Ok(Jobs::Auto));
        for bad in ["0", "-1", "two", "65"] {
            let e = bad.parse::<Jobs>().unwrap_err();
            assert!(e.contains("--jobs"), "{bad}: {e}");
        }
        assert_eq!(Jobs::Auto.threads(), 1);
        assert_eq!(Jobs::Serial.threads(), 1);
        assert_eq!(Jobs::Count(3).threads(), 3);
    }

    #[test]
    fn auto_says_why_it_runs_serially_where_devices_could_share_the_run() {
        assert_eq!(
            auto_note(Jobs::Auto, "cuda", Some(2)),
            Some(AUTO_SERIAL_REASON)
        );
        assert!(AUTO_SERIAL_REASON.contains("two_devices.sh"));
        for (jobs, backend, devices) in [
            (Jobs::Auto, "cuda", Some(1)),
            (Jobs::Auto, "cuda", None),
            (Jobs::Auto, "sim", Some(4)),
            (Jobs::Count(2), "cuda", Some(2)),
            (Jobs::Serial, "cuda", Some(2)),
        ] {
            assert_eq!(
                auto_note(jobs, backend, devices),
                None,
                "{jobs:?} {backend}"
            );
        }
    }

    #[test]
    fn devices_are_taken_lowest_first_and_only_when_enough_are_free() {
        let mut set = DeviceSet::new(4);
        assert_eq!(set.take(1), Some(vec![0]));
        assert_eq!(set.take(2), Some(vec![1, 2]));
        assert_eq!(set.take(2), None, "only device 3 is free");
        set.give_back(&[1, 2]);
        assert_eq!(set.take(2), Some(vec![1, 2]));
        assert_eq!(set.take(1), Some(vec![3]));
        assert_eq!(set.take(0), Some(vec![]));
        set.give_back(&[0, 9]);
        assert_eq!(set.take(1), Some(vec![0]));
    }

    /// A well-formed clause of `body` (a scenario without its header).
    fn clause(body: &str) -> Clause {
        let text = format!(
            "# id: mem.x.y\n# title: t\n# kind: specified\n# tier: contract\n\
             # source: https://example.com/doc\n# quote: q\n\n{body}"
        );
        let c = Clause::from_source(&text, std::path::Path::new("mem/x/y.ipc"), "mem.x.y");
        assert!(!c.is_broken(), "{:?}", c.problems);
        c
    }

    #[test]
    fn a_clause_needs_the_devices_its_processes_use() {
        let one = clause("devices 1\nprocess a device=0\na: malloc 4 => ok\n");
        assert_eq!(device_need(&one, 2), DeviceNeed::Devices(1));
        let two = clause("devices 2\nprocess a device=0\nprocess b device=1\na: malloc 4 => ok\n");
        assert_eq!(device_need(&two, 2), DeviceNeed::Devices(2));
        assert_eq!(device_need(&two, 1), DeviceNeed::Nothing);
        let visible = clause("devices 2\nprocess a device=0 visible=1\na: malloc 4 => ok\n");
        assert_eq!(device_need(&visible, 4), DeviceNeed::Devices(2));
        let counts = clause("devices 1\nprocess a device=0\na: device_count => ok\n");
        assert_eq!(device_need(&counts, 4), DeviceNeed::Whole);
        let counts_own =
            clause("devices 1\nprocess a device=0 visible=0\na: device_count => value 1\n");
        assert_eq!(device_need(&counts_own, 4), DeviceNeed::Devices(1));
        let broken = Clause::from_source("devices 1\n", std::path::Path::new("a.ipc"), "a");
        assert!(broken.is_broken());
        assert_eq!(device_need(&broken, 4), DeviceNeed::Nothing);
    }

    #[test]
    fn confining_maps_the_scenarios_devices_onto_the_ones_given() {
        let spec = MachineSpec {
            devices: 2,
            processes: vec![
                ProcessSpec {
                    name: "a".into(),
                    device: 1,
                    visible_devices: None,
                    pid_namespace: Default::default(),
                },
                ProcessSpec {
                    name: "b".into(),
                    device: 0,
                    visible_devices: Some(vec![1]),
                    pid_namespace: Default::default(),
                },
            ],
            dialect: Dialect::Driver,
            seed: 1,
            step_timeout: Duration::from_secs(1),
            topology: None,
            semantics: Vec::new(),
        };
        let c = confine(&spec, &[2, 5]);
        assert_eq!(c.processes[0].visible_devices, Some(vec![2, 5]));
        assert_eq!(
            c.processes[0].device, 1,
            "still in the process's own numbering"
        );
        assert_eq!(c.processes[1].visible_devices, Some(vec![5]));
        assert_eq!(c.devices, 2);
    }

    /// Runs `needs` on `host` devices with `jobs` threads, checking that no
    /// device is held by two items at once; returns each item's placement.
    fn schedule(needs: &[DeviceNeed], host: u32, jobs: usize) -> (Vec<Placement>, usize) {
        let holders: Vec<AtomicUsize> = (0..host).map(|_| AtomicUsize::new(0)).collect();
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let run = |i: usize, p: &Placement| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let held: Vec<u32> = match p {
                Placement::Anywhere => Vec::new(),
                Placement::Devices(d) => d.clone(),
                Placement::Whole => (0..host).collect(),
            };
            for &d in &held {
                let before = holders[d as usize].fetch_add(1, Ordering::SeqCst);
                assert_eq!(before, 0, "item {i}: device {d} already held");
            }
            std::thread::sleep(Duration::from_millis(5));
            for &d in &held {
                holders[d as usize].fetch_sub(1, Ordering::SeqCst);
            }
            running.fetch_sub(1, Ordering::SeqCst);
            p.clone()
        };
        let mut finished = Vec::new();
        let out = run_scheduled(needs, Some(host), jobs, &run, &mut |i, _| {
            finished.push(i);
            true
        });
        finished.sort();
        assert_eq!(finished, (0..needs.len()).collect::<Vec<_>>());
        let placements = out
            .into_iter()
            .map(|p| p.expect("every item ran"))
            .collect();
        (placements, most.load(Ordering::SeqCst))
    }

    #[test]
    fn each_item_gets_as_many_devices_as_it_needs_and_none_is_shared() {
        use DeviceNeed::*;
        let needs = [
            Devices(1),
            Devices(2),
            Devices(1),
            Whole,
            Nothing,
            Devices(1),
            Devices(1),
            Devices(2),
        ];
        let (placements, most) = schedule(&needs, 2, 4);
        for (need, p) in needs.iter().zip(&placements) {
            match (need, p) {
                (Devices(k), Placement::Devices(d)) => {
                    assert_eq!(d.len(), *k as usize);
                    assert!(d.iter().all(|&x| x < 2));
                }
                (Whole, Placement::Whole) | (Nothing, Placement::Anywhere) => {}
                other => panic!("need and placement disagree: {other:?}"),
            }
        }
        assert!(most >= 2, "one-device items ran side by side");
    }

    #[test]
    fn one_device_items_on_eight_devices_run_eight_at_a_time() {
        let needs = vec![DeviceNeed::Devices(1); 32];
        let (placements, most) = schedule(&needs, 8, 8);
        assert!(most > 1 && most <= 8, "{most} at once");
        assert!(placements
            .iter()
            .all(|p| matches!(p, Placement::Devices(d) if d.len() == 1)));
    }

    #[test]
    fn no_item_starts_once_done_says_stop() {
        let needs = vec![DeviceNeed::Nothing; 50];
        let run = |i: usize, _: &Placement| {
            std::thread::sleep(Duration::from_millis(10));
            i
        };
        let mut seen = 0;
        let out = run_scheduled(&needs, None, 2, &run, &mut |_, _| {
            seen += 1;
            seen < 3
        });
        let ran = out.iter().filter(|r| r.is_some()).count();
        assert!((3..10).contains(&ran), "{ran} ran after stopping at 3");
        assert_eq!(out.iter().flatten().count(), ran);
    }
}
