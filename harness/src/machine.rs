//! The multi-process model: a machine with devices, running N processes, each
//! with its own driver view. The simulator runs them all in one host process;
//! the real backend runs one worker OS process each.

use crate::calls::Driver;
use crate::driver::{DriverError, DriverResult, Fd};
use crate::errors::Dialect;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Index of a process in its machine (order of declaration in a scenario).
pub type ProcessIndex = usize;

/// One process of a machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// Its name in scenarios, traces and messages.
    pub name: String,
    /// The device made current when the process starts (in the process's own
    /// numbering, i.e. after `visible_devices` remapping).
    pub device: u32,
    /// `CUDA_VISIBLE_DEVICES` for this process; `None` means all devices.
    pub visible_devices: Option<Vec<u32>>,
    /// The PID namespace it runs in (`pidns=new`).
    #[serde(default)]
    pub pid_namespace: PidNamespace,
}

impl ProcessSpec {
    /// Whether it runs in a PID namespace of its own (`pidns=new`).
    pub fn in_new_pid_namespace(&self) -> bool {
        self.pid_namespace == PidNamespace::New
    }
}

/// Where a process's pid lives (`process NAME ... pidns=new`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PidNamespace {
    /// The harness's own PID namespace.
    #[default]
    Harness,
    /// A new user and PID namespace of its own, as a container has: its pid
    /// there is 1, and it sees no process outside.
    New,
}

/// A simulated machine's device links, as a scenario's `topology` line asks
/// for them: which device pairs can peer, and how many peer connections one
/// device may hold (the documented limit that gives TooManyPeers on large
/// PCIe machines). Real backends cannot choose their topology and refuse a
/// spec that carries one (NotSupported).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Every pair of distinct devices can peer (`peers=all`); otherwise only
    /// the pairs in `peer_pairs` can (`peers=none`, `peers=0:1,2:3`).
    pub all_peers: bool,
    /// Device pairs that can peer when `all_peers` is false, each written
    /// lower device first.
    #[serde(default)]
    pub peer_pairs: Vec<(u32, u32)>,
    /// Most peer connections (distinct peer devices) one device may have
    /// enabled at once, across all processes; `None` means unlimited.
    pub peer_budget: Option<u32>,
}

impl Topology {
    /// Whether two distinct devices can peer.
    pub fn can_peer(&self, a: u32, b: u32) -> bool {
        a != b && (self.all_peers || self.peer_pairs.contains(&(a.min(b), a.max(b))))
    }

    /// The `topology` line that declares it (canonical form).
    pub fn describe(&self) -> String {
        let pairs: Vec<String> = self
            .peer_pairs
            .iter()
            .map(|(a, b)| format!("{a}:{b}"))
            .collect();
        let peers = match (self.all_peers, pairs.is_empty()) {
            (true, _) => "all".to_string(),
            (false, true) => "none".to_string(),
            (false, false) => pairs.join(","),
        };
        match self.peer_budget {
            Some(n) => format!("topology peers={peers} peer_budget={n}"),
            None => format!("topology peers={peers}"),
        }
    }
}

/// What a backend starts: devices, processes and how they run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineSpec {
    /// Devices the machine must have.
    pub devices: u32,
    /// Its processes, in index order.
    pub processes: Vec<ProcessSpec>,
    /// The API dialect every process speaks.
    pub dialect: Dialect,
    /// Seeds every nondeterministic choice of the simulator (addresses,
    /// handle bytes, random handles in scenarios).
    pub seed: u64,
    /// Real backend: a call that takes longer is a Timeout and the worker is killed.
    pub step_timeout: Duration,
    /// A simulated topology the scenario asks for (`topology ...`); `None`
    /// takes the backend's own (the simulator's default is all-peer, unlimited).
    #[serde(default)]
    pub topology: Option<Topology>,
    /// Simulator semantic choices the scenario asks for (`semantics
    /// name=value,...`), as `(name, value)` in file order, applied on top of
    /// the simulator's own; empty takes the backend's. The harness does not
    /// know the names: the simulator checks them when it starts the machine,
    /// and real backends refuse a spec that carries any (NotSupported).
    #[serde(default)]
    pub semantics: Vec<(String, String)>,
}

impl MachineSpec {
    /// The `semantics` line that declares the spec's semantic choices
    /// (canonical form); `None` when it carries none.
    pub fn semantics_line(&self) -> Option<String> {
        if self.semantics.is_empty() {
            return None;
        }
        let settings: Vec<String> = self
            .semantics
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        Some(format!("semantics {}", settings.join(",")))
    }
}

/// Undefined behaviour the simulator saw (the real backend has no hazard log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HazardKind {
    /// The exporter freed memory while an importer still had it mapped
    /// ("Calling cudaFree on an exported memory region before calling
    /// cudaIpcCloseMemHandle in the importing context will result in undefined behavior").
    FreeWhileMapped,
    /// Access through an IPC pointer after its last close.
    AccessAfterClose,
    /// Access to memory after it was freed (exporter side, or via an importer's
    /// mapping of a freed region).
    AccessAfterFree,
    /// A read or write that reaches bytes outside the accessing allocation's own
    /// range (e.g. a neighbouring sub-allocation in the same block).
    OutsideOwnRange,
    /// An IPC pointer freed with cudaFree instead of cudaIpcCloseMemHandle.
    FreeOfIpcPointer,
    /// A process exited with IPC mappings still open.
    MappingLeakedAtExit,
    /// An imported event used after its exporter destroyed it ("Performing
    /// operations on the imported event after the exported event has been
    /// freed with cudaEventDestroy will result in undefined behavior").
    EventAfterExporterDestroy,
    /// A copy or kernel read bytes that a write (a copy, a memset, a kernel
    /// such as `slow_fill`), by any process, is not ordered before: no
    /// synchronization with the writer's stream, no wait on an event
    /// recorded on that stream after the write, no implicit order of the
    /// legacy default stream ("Stream synchronization behavior"). Those
    /// calls return before the device has the bytes ("the DMA to final
    /// destination may not have completed", API synchronization behavior;
    /// a kernel launch is asynchronous), so the reader sees old or new
    /// bytes. The detail names the writer, its stream and the read's.
    UnsynchronizedRead,
    /// `cudaIpcCloseMemHandle` of a pointer this process opened, with no
    /// open of it outstanding (closed as often as opened already).
    DoubleClose,
    /// `cudaIpcCloseMemHandle` of a pointer this process never opened (its
    /// own allocation, NULL, or another process's mapping address): the
    /// close reaches nothing, and the mapping it meant stays open.
    ForeignClose,
    /// `cudaFree` of a pointer this process already freed ("if
    /// cudaFree(devPtr) has already been called before, an error is
    /// returned").
    DoubleFree,
    /// `cudaMemPoolImportPointer` of an allocation its exporter already
    /// freed ("The imported memory must be freed from all importing
    /// processes before being freed in the exporting process").
    PoolImportOfFreed,
    /// `cuMemUnmap` of a range right after this process queued device work
    /// on it (a fill, a copy, a kernel), with nothing between that waits
    /// for the work. The documents do not say the unmap waits for it: on
    /// the GPU the work either completes first or faults, and the fault is
    /// reported later as LaunchFailed, sticky (vmm.fault.unmap-with-work-queued).
    UnmapWithWorkQueued,
}

impl HazardKind {
    /// Every hazard kind.
    pub const ALL: [HazardKind; 13] = [
        HazardKind::FreeWhileMapped,
        HazardKind::AccessAfterClose,
        HazardKind::AccessAfterFree,
        HazardKind::OutsideOwnRange,
        HazardKind::FreeOfIpcPointer,
        HazardKind::MappingLeakedAtExit,
        HazardKind::EventAfterExporterDestroy,
        HazardKind::UnsynchronizedRead,
        HazardKind::DoubleClose,
        HazardKind::ForeignClose,
        HazardKind::DoubleFree,
        HazardKind::PoolImportOfFreed,
        HazardKind::UnmapWithWorkQueued,
    ];

    /// Spelling in scenario files (`expect hazard free-while-mapped`).
    pub fn name(self) -> &'static str {
        match self {
            HazardKind::FreeWhileMapped => "free-while-mapped",
            HazardKind::AccessAfterClose => "access-after-close",
            HazardKind::AccessAfterFree => "access-after-free",
            HazardKind::OutsideOwnRange => "outside-own-range",
            HazardKind::FreeOfIpcPointer => "free-of-ipc-pointer",
            HazardKind::MappingLeakedAtExit => "mapping-leaked-at-exit",
            HazardKind::EventAfterExporterDestroy => "event-after-exporter-destroy",
            HazardKind::UnsynchronizedRead => "unsynchronized-read",
            HazardKind::DoubleClose => "double-close",
            HazardKind::ForeignClose => "foreign-close",
            HazardKind::DoubleFree => "double-free",
            HazardKind::PoolImportOfFreed => "pool-import-of-freed",
            HazardKind::UnmapWithWorkQueued => "unmap-with-work-queued",
        }
    }

    /// The kind spelled `name` in scenario files, if there is one.
    pub fn from_name(name: &str) -> Option<HazardKind> {
        Self::ALL.into_iter().find(|h| h.name() == name)
    }
}

/// One entry of the simulator's hazard log: undefined behaviour a process
/// caused, which real hardware may not report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hazard {
    /// What kind of undefined behaviour.
    pub kind: HazardKind,
    /// The process that caused it.
    pub process: ProcessIndex,
    /// The scenario step that caused it (set through `Machine::begin_step`).
    pub step: Option<usize>,
    /// What happened, in words.
    pub detail: String,
}

/// Identity of what ran a scenario, for reports (`results.json` run info).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// `sim` or `cuda`.
    pub backend: String,
    /// The GPU's name (the simulator names what it imitates).
    pub gpu_name: Option<String>,
    /// The GPU's compute capability, `major.minor`.
    pub compute_capability: Option<String>,
    /// The kernel driver's version (real backend).
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports (real backend).
    pub cuda_driver_version: Option<String>,
    /// The CUDA runtime's version (real backend).
    pub cuda_runtime_version: Option<String>,
    /// Devices visible to the backend.
    pub device_count: Option<u32>,
    /// Simulator only: the semantic choices in force, by name.
    pub semantics: BTreeMap<String, String>,
    /// Real backend: how scenarios got their worker processes, e.g.
    /// `policy; one hardware queue for processes on the legacy stream
    /// alone`. Two runs whose workers differ can differ for that reason
    /// alone, so `diff` shows it beside the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<String>,
}

/// Why a scenario cannot run on a backend at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartError {
    /// A requirement is absent (no libcuda, too few devices, ...): NotSupported.
    NotSupported(String),
    /// The harness failed to start the machine: Broken.
    Harness(String),
}

/// Something that can start machines.
pub trait Backend {
    /// `sim` or `cuda`.
    fn name(&self) -> &str;
    /// What this backend runs on, for reports.
    fn info(&self) -> BackendInfo;
    /// Starts a machine of `spec`, or says why it cannot run here.
    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError>;
    /// Whether `Machine::hazards` returns a log on this backend.
    fn has_hazard_log(&self) -> bool;
    /// The dialects this backend's machines speak; `start` refuses a spec
    /// in any other as NotSupported. Every dialect unless a backend says
    /// otherwise (the simulator speaks all three).
    fn dialects(&self) -> &[Dialect] {
        &Dialect::ALL
    }
    /// The value of the semantic choice `name` that machines of `dialect`
    /// run with, spelled as `--semantics` takes it (the simulator's profile
    /// of that dialect); `None` for a backend without choices (real
    /// hardware) or an unknown name. Checks of a trace that depend on a
    /// choice read it here instead of assuming a dialect's default.
    fn semantic_choice(&self, _dialect: Dialect, _name: &str) -> Option<String> {
        None
    }
    /// Whether [`start_shared`](Self::start_shared) looks at the scenario's
    /// [`WorkerSharing`] (a backend that
    /// reuses worker processes by scenario); when not, the executor does
    /// not work it out and calls [`start`](Self::start).
    fn shares_workers(&self) -> bool {
        false
    }
    /// [`start`](Self::start) for a scenario whose processes may run on
    /// reused workers as `sharing` says (see [`crate::sharing`]); `fits`
    /// (one per process, or empty) says which reused worker suits each.
    fn start_shared(
        &self,
        spec: &MachineSpec,
        _sharing: &WorkerSharing,
        _fits: &[WorkerFit],
    ) -> Result<Box<dyn Machine>, StartError> {
        self.start(spec)
    }
    /// The machines that will be started from now on, in order (the first
    /// is the next [`start`](Self::start) or
    /// [`start_shared`](Self::start_shared)), as far as the caller knows
    /// them; each call replaces what the last one said. A backend that
    /// starts worker processes ahead of time prepares for them. Nothing
    /// else changes: a machine that comes otherwise starts as usual.
    fn expect(&self, _upcoming: &[Upcoming]) {}
    /// Whether [`expect`](Self::expect) does anything here (callers may
    /// skip working out the machines to come when it does not).
    fn prepares_ahead(&self) -> bool {
        false
    }
}

/// A machine a backend will be asked to start ([`Backend::expect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upcoming {
    /// What will be started.
    pub spec: MachineSpec,
    /// The sharing of its scenario ([`crate::sharing::sharing`]).
    pub sharing: WorkerSharing,
    /// What each process will ask of its worker, in process order
    /// ([`crate::sharing::worker_fits`]).
    pub fits: Vec<WorkerFit>,
}

/// A backend several owners share (the threads of `explore --jobs` share
/// one real backend, and so one pool of workers): every call goes to it.
impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn info(&self) -> BackendInfo {
        (**self).info()
    }
    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        (**self).start(spec)
    }
    fn has_hazard_log(&self) -> bool {
        (**self).has_hazard_log()
    }
    fn dialects(&self) -> &[Dialect] {
        (**self).dialects()
    }
    fn semantic_choice(&self, dialect: Dialect, name: &str) -> Option<String> {
        (**self).semantic_choice(dialect, name)
    }
    fn shares_workers(&self) -> bool {
        (**self).shares_workers()
    }
    fn start_shared(
        &self,
        spec: &MachineSpec,
        sharing: &WorkerSharing,
        fits: &[WorkerFit],
    ) -> Result<Box<dyn Machine>, StartError> {
        (**self).start_shared(spec, sharing, fits)
    }
    fn expect(&self, upcoming: &[Upcoming]) {
        (**self).expect(upcoming)
    }
    fn prepares_ahead(&self) -> bool {
        (**self).prepares_ahead()
    }
}

/// A running set of processes.
///
/// A machine that wraps another passes every method on, the defaulted ones
/// too (`crash`, `begin_step`, `shutdown`, `transfer_fd`, `process_pid`):
/// their defaults behave unlike most backends. [`crate::hooks::HookedBackend`]
/// does, and changes only the driver calls a hook overrides.
pub trait Machine {
    /// How many processes it has.
    fn process_count(&self) -> usize;
    /// The driver as process `process` sees it.
    fn driver(&mut self, process: ProcessIndex) -> &mut dyn Driver;
    /// The process exits normally; the OS and driver reclaim its resources.
    fn exit(&mut self, process: ProcessIndex) -> DriverResult<()>;
    /// The process dies as by `SIGKILL`: no exit handlers run (the
    /// runtime's teardown at exit among them); the OS and driver reclaim
    /// what it held. A backend without a crash model ends it as an exit.
    fn crash(&mut self, process: ProcessIndex) -> DriverResult<()> {
        self.exit(process)
    }
    /// Tells the machine which scenario step runs next, so hazards can name it.
    fn begin_step(&mut self, _step: usize) {}
    /// The hazard log so far; `None` where the backend has none.
    fn hazards(&self) -> Option<Vec<Hazard>>;
    /// Ends every process still running (end of scenario).
    fn shutdown(&mut self) {}

    // --- VMM ---
    /// Passes descriptor `fd` of process `from` to process `to`, as a
    /// `sendmsg`/`recvmsg` with `SCM_RIGHTS` would: `to` gets its own
    /// descriptor (returned) for the same open file; `from` keeps `fd`.
    fn transfer_fd(&mut self, _from: ProcessIndex, _fd: Fd, _to: ProcessIndex) -> DriverResult<Fd> {
        Err(DriverError::Harness(
            "this backend cannot pass file descriptors".to_string(),
        ))
    }

    /// The pid of process `process` as the harness sees it (in the
    /// harness's PID namespace): what a launcher that collected its
    /// processes' pids hands to `pidfd_open`.
    fn process_pid(&self, _process: ProcessIndex) -> DriverResult<u32> {
        Err(DriverError::Harness(
            "this backend does not know its processes' pids".to_string(),
        ))
    }
}

/// Whether a scenario's processes may run on reset, reused workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerSharing {
    /// Its expectations cannot depend on what a worker did before.
    Reused,
    /// It needs fresh worker processes, for this reason.
    Fresh(String),
}

/// What a scenario will ask of one of its processes that matters to which
/// reused worker serves it ([`Backend::start_shared`]). It never changes
/// what the process does, only how long it takes: a worker keeps the
/// contexts earlier scenarios created as spares, a new context costs
/// hundreds of milliseconds on some GPUs, and a worker that exits tears
/// its spares down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerFit {
    /// The process creates contexts (`ctx_create`): a worker with spare
    /// contexts suits it; any other process is better served by one
    /// without, leaving the spares to those that use them.
    pub creates_contexts: bool,
    /// Its `ctx_create` must make a new context, as it would in a fresh
    /// process, because the scenario observes what a new context takes (a
    /// spare context takes no descriptor and starts no VA arena): a served
    /// worker suits it only if it never made a context, else it takes one
    /// that never served.
    pub new_contexts: bool,
    /// The process uses no stream but the legacy default one (no
    /// `stream_create`, no `stream=` argument): the driver's hardware work
    /// queues (eight by default) let a context's streams overlap, and with
    /// one stream there is nothing to overlap, so one queue serves it as
    /// well. A worker with one queue (`CUDA_DEVICE_MAX_CONNECTIONS=1`)
    /// makes its contexts in half the time (H200: a primary context 63
    /// against 120 ms, `cuCtxCreate` 57 against 125 ms, `cuCtxDestroy` 28
    /// against 70 ms) and takes the same descriptors. Not where the
    /// scenario opens a damaged handle, whose error depends on the
    /// exporter's driver objects, hardware queues among them.
    pub one_queue: bool,
    /// A step ends the process (`exit`, or a step expected to kill it):
    /// its worker will not serve another scenario.
    pub ends: bool,
    /// The process does what a reset cannot undo (it destroys a context,
    /// enables peer access, destroys a memory pool with an allocation
    /// outstanding, ...: the rules of
    /// [`crate::sharing`] that hold for one process): in a scenario whose
    /// other processes share workers, it still takes a worker that never
    /// served one, and its worker serves no other scenario. Only the
    /// `--workers policy` decision reads it.
    pub fresh: bool,
}

impl WorkerSharing {
    /// Whether reused workers may serve it.
    pub fn is_reused(&self) -> bool {
        matches!(self, WorkerSharing::Reused)
    }
}

impl std::fmt::Display for WorkerSharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerSharing::Reused => f.write_str("reused"),
            WorkerSharing::Fresh(why) => write!(f, "fresh ({why})"),
        }
    }
}
