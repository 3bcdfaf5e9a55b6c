//! Properties every scenario must have on the simulator, judged from the
//! parsed scenario and its trace alone (so they hold for any scenario file,
//! generated or not):
//!
//! - robustness: running it neither panics nor breaks the harness;
//! - determinism: the same seed gives the same trace and hazard log;
//! - documented returns: every error is in the API's documented list
//!   (its public reference page) or a measured exception a catalogue clause names; in
//!   the hip dialect also an exception read from ROCm's source (or carried
//!   over from the H100 through the CUDA handle layout) that a clause names,
//!   marked unverified ([`documented_returns`], [`Source`]);
//! - conservation: a close succeeds exactly while opens of that pointer are
//!   outstanding, and one that fails is logged as a `double-close` or a
//!   `foreign-close` (a close from a process that never opened the pointer
//!   changes nothing: the opener's close and exit are judged as before); a
//!   second free of a pointer fails and is logged as a `double-free`; an
//!   exit with opens outstanding is logged as a leak (and only then); an
//!   access through a pointer after its last close, or inside memory its
//!   owner freed (through any process's pointer), fails or is logged;
//! - coherence: a read returns the last bytes written there through any
//!   process sharing the memory (a kernel's `slow_fill` included), unless
//!   the hazard log explains why not (an `unsynchronized-read`: its bytes
//!   are not judged).
//!
//! Where the dialect's simulator profile makes another choice than the
//! measured CUDA defaults (`interior_handle` in the HIP profile), the model
//! follows the backend's choice ([`Choices`]), not the dialect's name.

use ipc_harness::machine::{Hazard, HazardKind};
use ipc_harness::scenario::{self, ExecOptions, Op, Ref, Scenario};
use ipc_harness::trace::{StepOutcome, ValueSummary};
use ipc_harness::{ApiError, Backend, CallKind, Dialect, ErrorKind, MemKind, Status, Trace};
// FxHash: keys are labels and names of one trace, no untrusted input.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Which property a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    Robustness,
    Determinism,
    DocumentedReturns,
    Conservation,
    Coherence,
    /// The simulator and the real driver disagree.
    Differential,
}

impl Property {
    pub const ALL: [Property; 6] = [
        Property::Robustness,
        Property::Determinism,
        Property::DocumentedReturns,
        Property::Conservation,
        Property::Coherence,
        Property::Differential,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Property::Robustness => "robustness",
            Property::Determinism => "determinism",
            Property::DocumentedReturns => "documented-returns",
            Property::Conservation => "conservation",
            Property::Coherence => "coherence",
            Property::Differential => "differential",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken property, at a step (0-based) when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub property: Property,
    pub step: Option<usize>,
    pub message: String,
    /// What makes two violations the same finding (no names, labels or
    /// offsets): cases that repeat a known finding are counted, not shrunk.
    pub signature: String,
}

impl Violation {
    pub fn new(property: Property, step: Option<usize>, message: String, what: &str) -> Violation {
        Violation {
            property,
            step,
            message,
            signature: format!("{property}: {what}"),
        }
    }
}

/// Where a documented or accepted return code comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Listed under "Returns" on this public reference page (URL and API).
    Document(&'static str),
    /// Not in the seeds; measured on hardware by this catalogue clause (in
    /// the hip dialect: the HIP profile keeping what the clause measured on
    /// CUDA hardware, which the clause shows by running in that dialect).
    Clause(&'static str),
    /// Not in the seed's list and measured on no hardware of the dialect:
    /// the vendor's source code returns it (`line`, quoted from `file`),
    /// and `clause`, which runs in the dialect, shows the simulator's
    /// profile answering it. **Unverified**: read from source, no AMD
    /// hardware measured.
    VendorSource {
        clause: &'static str,
        file: &'static str,
        line: &'static str,
    },
    /// Not in the seed's list and not something the dialect's own source
    /// returns: the simulator's profile for the dialect keeps a behaviour
    /// measured on CUDA hardware that nothing of the dialect decides (`why`),
    /// and `clause`, which runs in the dialect, shows it. **Unverified** for
    /// the dialect.
    Inherited {
        clause: &'static str,
        why: &'static str,
    },
}

impl Source {
    /// The catalogue clause that names the code, if any.
    pub fn clause(&self) -> Option<&'static str> {
        match self {
            Source::Document(_) => None,
            Source::Clause(c) | Source::VendorSource { clause: c, .. } => Some(c),
            Source::Inherited { clause, .. } => Some(clause),
        }
    }

    /// Read from source or carried over from another vendor's hardware: no
    /// document lists it and no hardware of the dialect measured it.
    pub fn unverified(&self) -> bool {
        matches!(self, Source::VendorSource { .. } | Source::Inherited { .. })
    }
}

/// The ROCm sources the HIP exceptions quote: the commits the HIP profile
/// of the simulator follows (docs/semantics.md, "The HIP profile").
pub const ROCM_MEMORY: &str =
    "ROCm/clr hipamd/src/hip_memory.cpp at 004c4f7c81e08c6c7e5df44df4b8b30e1f3e73c5";
pub const ROCM_EVENT_IPC: &str =
    "ROCm/clr hipamd/src/hip_event_ipc.cpp at 06edbb817798d683d665be915ed5e7d12b65a04e";

/// hipIpcOpenMemHandle's page in the HIP API reference
/// says "Returns hipSuccess, hipErrorMapFailed, hipErrorInvalidHandle,
/// hipErrorTooManyPeers"; [`ROCM_MEMORY`] returns three codes it does not
/// list, each shown by a clause that runs in the hip dialect (its `# hip:`
/// line names the exception). `hipError_t` has no hipErrorTooManyPeers
/// (hipify marks cudaErrorTooManyPeers HIP_UNSUPPORTED), so no HIP code
/// resolves to it; it stays listed as the page lists it.
fn hip_open_returns() -> Vec<(ErrorKind, Source)> {
    use ErrorKind::*;
    use Source::{Document, Inherited, VendorSource};
    const HIP_OPEN: &str = "https://rocm.docs.amd.com/projects/HIP/en/latest/doxygen/html/group___memory.html (hipIpcOpenMemHandle)";
    vec![
        (MapFailed, Document(HIP_OPEN)),
        (InvalidHandle, Document(HIP_OPEN)),
        (TooManyPeers, Document(HIP_OPEN)),
        (
            InvalidValue,
            VendorSource {
                file: ROCM_MEMORY,
                clause: "mem.flags.hip-lazy-only",
                line: "if (dev_ptr == nullptr || flags != hipIpcMemLazyEnablePeerAccess) { HIP_RETURN(hipErrorInvalidValue); }",
            },
        ),
        (
            InvalidValue,
            VendorSource {
                file: ROCM_MEMORY,
                clause: "mem.handle.zeroed",
                line: "if (ihandle->psize == 0) { HIP_RETURN(hipErrorInvalidValue); }",
            },
        ),
        (
            InvalidContext,
            VendorSource {
                file: ROCM_MEMORY,
                clause: "mem.open.own-process",
                line: "if (ihandle->owners_process_id == amd::Os::getProcessId()) { HIP_RETURN(hipErrorInvalidContext); }",
            },
        ),
        (
            InvalidDevicePointer,
            VendorSource {
                file: ROCM_MEMORY,
                clause: "mem.handle.garbage",
                line: "if (!device->IpcAttach(ihandle->ipc_handle, ihandle->psize, ihandle->poffset, flags, dev_ptr)) { ... HIP_RETURN(hipErrorInvalidDevicePointer); }",
            },
        ),
        (
            InvalidDevicePointer,
            VendorSource {
                file: ROCM_MEMORY,
                clause: "mem.lifetime.exporter-exit-before-open",
                line: "if (!device->IpcAttach(ihandle->ipc_handle, ihandle->psize, ihandle->poffset, flags, dev_ptr)) { ... HIP_RETURN(hipErrorInvalidDevicePointer); }",
            },
        ),
        // ROCm's hipIpcOpenMemHandle never returns hipErrorAlreadyMapped.
        (
            AlreadyMapped,
            Inherited {
                clause: "mem.handle.damaged-copy-of-open-handle",
                why: "the simulator builds hip handles in the CUDA layout measured on the H100 (HIP's ihipIpcMemHandle_t is unmodelled), so a handle damaged in the bytes the H100 checks answers as the H100 did (mem.handle.corrupted-fields, mem.handle.damaged-offset-while-mapped, CUDA dialects only)",
            },
        ),
    ]
}

/// The error kinds `op` may return: those of its driver call
/// ([`call_returns`]). Ops without a driver call (`offset`, `send`,
/// `handle_*`) have none.
pub fn documented_returns(op: &Op, dialect: Dialect) -> Vec<(ErrorKind, Source)> {
    match op {
        // mem.context.set-destroyed measures the other allocation kinds only.
        Op::Malloc {
            kind: MemKind::StreamOrdered,
            ..
        } => Vec::new(),
        _ => op
            .call_kind()
            .map(|call| call_returns(call, dialect))
            .unwrap_or_default(),
    }
}

/// The error kinds each driver call (a row of the call table) may return,
/// with where each is documented (a public page's URL and the API it
/// documents) or measured (a clause id): one data table keyed by
/// [`CallKind`], kept here beside the explore property that reads it, since
/// its sources are clauses of the catalogue. Codes a dialect spells
/// differently share one kind (`cudaErrorDeviceUninitialized` is
/// `InvalidContext`). A kind may appear more than once, with each source
/// that names it.
pub fn call_returns(call: CallKind, dialect: Dialect) -> Vec<(ErrorKind, Source)> {
    use ErrorKind::*;
    use Source::{Clause, Document};
    const RT_OPEN: &str = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html (cudaIpcOpenMemHandle)";
    const DRV_OPEN: &str =
        "https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html (cuIpcOpenMemHandle)";
    match (call, dialect) {
        (CallKind::IpcOpenMemHandle, Dialect::Runtime) => vec![
            (MapFailed, Document(RT_OPEN)),
            (InvalidHandle, Document(RT_OPEN)),
            (InvalidContext, Document(RT_OPEN)),
            (TooManyPeers, Document(RT_OPEN)),
            (NotSupported, Document(RT_OPEN)),
            (InvalidValue, Document(RT_OPEN)),
            (AlreadyMapped, Clause("mem.handle.corrupted-fields")),
            (
                NotPermitted,
                Clause("mem.lifetime.freed-export-after-new-allocation"),
            ),
        ],
        (CallKind::IpcOpenMemHandle, Dialect::Driver) => vec![
            (InvalidContext, Document(DRV_OPEN)),
            (MapFailed, Document(DRV_OPEN)),
            (InvalidHandle, Document(DRV_OPEN)),
            (TooManyPeers, Document(DRV_OPEN)),
            (InvalidValue, Document(DRV_OPEN)),
            (AlreadyMapped, Clause("mem.handle.corrupted-fields")),
            (
                NotPermitted,
                Clause("mem.lifetime.freed-export-after-new-allocation"),
            ),
        ],
        (CallKind::IpcOpenMemHandle, Dialect::Hip) => hip_open_returns(),
        // In the hip dialect a `Clause` exception is the HIP profile keeping
        // the answer the clause measured on CUDA hardware (the clause runs in
        // the hip dialect too); like every HIP answer here, no AMD hardware
        // measured it. Where HIP differs, its own arms come first.
        (CallKind::IpcGetEventHandle, Dialect::Hip) => vec![
            (InvalidHandle, Clause("event.get.not-interprocess")),
            (
                InvalidValue,
                Source::VendorSource {
                    clause: "event.get.null-out",
                    file: ROCM_EVENT_IPC,
                    line: "if (handle == nullptr || event == nullptr) { HIP_RETURN(hipErrorInvalidValue); }",
                },
            ),
        ],
        // The exporter's exit does not refuse an open in HIP
        // (event_exporter_exit=by-dialect opens, as the driver API).
        (CallKind::IpcOpenEventHandle, Dialect::Hip) => vec![
            (MapFailed, Clause("event.handle.zeroed")),
            (InvalidContext, Clause("event.open.own-process")),
            (InvalidValue, Clause("event.open.null-out")),
        ],
        (CallKind::IpcGetMemHandle, _) => {
            const RT_GET: &str = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html (cudaIpcGetMemHandle)";
            const DRV_GET: &str =
                "https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html (cuIpcGetMemHandle)";
            const HIP_GET: &str = "https://rocm.docs.amd.com/projects/HIP/en/latest/doxygen/html/group___memory.html (hipIpcGetMemHandle)";
            let (page, listed): (&str, &[ErrorKind]) = match dialect {
                Dialect::Runtime => (RT_GET, &[OutOfMemory, MapFailed, NotSupported, InvalidValue]),
                Dialect::Driver => (DRV_GET, &[InvalidHandle, OutOfMemory, MapFailed, InvalidValue]),
                Dialect::Hip => (HIP_GET, &[InvalidHandle, OutOfMemory, MapFailed]),
            };
            listed
                .iter()
                .map(|&k| (k, Document(page)))
                .chain([
                    (InvalidValue, Clause("mem.get.freed")),
                    (InvalidValue, Clause("mem.kinds.managed")),
                ])
                .collect()
        }
        (CallKind::IpcCloseMemHandle, _) => vec![(InvalidValue, Clause("mem.close.twice"))],
        (CallKind::Free, _) => {
            vec![(InvalidValue, Clause("mem.lifetime.cudafree-of-ipc-pointer"))]
        }
        (CallKind::Read | CallKind::Write | CallKind::Memset, _) => vec![
            (InvalidValue, Clause("mem.close.use-after-close")),
            (InvalidValue, Clause("mem.suballoc.memcpy-bounded")),
        ],
        // A device-to-device or peer copy through a closed or freed mapping
        // fails as the memcpy of `read` does.
        (CallKind::CopyDevice | CallKind::CopyPeer, _) => vec![
            (InvalidValue, Clause("mem.copy.from-closed-mapping")),
            (InvalidValue, Clause("mem.close.use-after-close")),
        ],
        // A status, not a failure: the stream's work has not completed.
        (CallKind::StreamQuery, _) => vec![(
            NotReady,
            Clause("event.stream.record-on-stream-covers-its-work"),
        )],
        (CallKind::DeviceRead, _) => vec![
            (
                IllegalAddress,
                Clause("mem.lifetime.kernel-read-after-free"),
            ),
            (IllegalAddress, Clause("mem.close.kernel-read-after-close")),
        ],
        // Events: no seed documents their returns; the event clauses measured these.
        (CallKind::EventCreate, _) => vec![(
            InvalidValue,
            Clause("event.flags.interprocess-needs-disable-timing"),
        )],
        (CallKind::IpcGetEventHandle, _) => vec![
            (InvalidHandle, Clause("event.get.not-interprocess")),
            (InvalidHandle, Clause("event.get.imported-event")),
            (InvalidValue, Clause("event.get.null-out")),
        ],
        // cuEventRecord: "hEvent and hStream must be from the same context
        // otherwise CUDA_ERROR_INVALID_HANDLE is returned".
        // The other-context clause does not run in the hip dialect.
        (CallKind::EventRecord | CallKind::EventRecordOn, Dialect::Hip) => vec![
            (InvalidHandle, Clause("event.null.record")),
            (InvalidValue, Clause("event.null.record")),
        ],
        (CallKind::EventRecord | CallKind::EventRecordOn, _) => vec![
            (
                InvalidHandle,
                Clause("event.context.record-from-other-context"),
            ),
            (InvalidHandle, Clause("event.null.record")),
            (InvalidValue, Clause("event.null.record")),
        ],
        // A status, not a failure: the recorded work has not completed.
        (CallKind::EventQuery, _) => vec![
            (NotReady, Clause("event.order.sync-waits-for-exporter")),
            (InvalidHandle, Clause("event.null.query")),
            (InvalidValue, Clause("event.null.query")),
        ],
        // The NULL event: either documented error (event.null.*).
        (CallKind::EventSynchronize, _) => vec![
            (InvalidHandle, Clause("event.null.synchronize")),
            (InvalidValue, Clause("event.null.synchronize")),
        ],
        (CallKind::StreamWaitEvent | CallKind::StreamWaitEventOn, _) => vec![
            (InvalidHandle, Clause("event.null.stream-wait")),
            (InvalidValue, Clause("event.null.stream-wait")),
        ],
        (CallKind::IpcOpenEventHandle, _) => vec![
            (MapFailed, Clause("event.handle.zeroed")),
            (MapFailed, Clause("event.lifetime.open-after-exporter-exit")),
            (InvalidContext, Clause("event.open.own-process")),
            (InvalidValue, Clause("event.open.null-out")),
        ],
        // VMM: driver API calls, documented in no seed's return list; the
        // vmm clauses measured these.
        (CallKind::VmmCreate | CallKind::VmmReserve, _) => {
            vec![(InvalidValue, Clause("vmm.granularity.unaligned-size"))]
        }
        (CallKind::VmmExport, _) => vec![(InvalidValue, Clause("vmm.export.type-not-requested"))],
        (CallKind::VmmImport, _) => vec![
            (Unknown, Clause("vmm.import.bad-descriptors")),
            (InvalidValue, Clause("vmm.import.twice")),
        ],
        (CallKind::VmmMap | CallKind::VmmSetAccess | CallKind::VmmUnmap, _) => {
            vec![(InvalidValue, Clause("vmm.map.edge-cases"))]
        }
        (CallKind::VmmRelease, _) => vec![(InvalidValue, Clause("vmm.lifetime.release-while-mapped"))],
        // pidfd_open + pidfd_getfd: the kernel's errno, read as a kind
        // (pidfd_getfd(2), pid_namespaces(7)).
        (CallKind::PidfdGetfd, _) => vec![
            (InvalidValue, Clause("vmm.pidfd.bad-descriptor")),
            (NotFound, Clause("vmm.pidfd.from-new-namespace")),
        ],
        // Memory pools: the runtime pages list InvalidValue (and
        // NotSupported for allocation) without naming the case; the pool
        // clauses pin down which.
        (CallKind::PoolExport, _) => vec![(InvalidValue, Clause("pool.export.needs-handle-types"))],
        (CallKind::PoolExportPtr, _) => vec![(InvalidValue, Clause("pool.export.needs-handle-types"))],
        (CallKind::PoolImport, _) => vec![(InvalidValue, Clause("pool.import.bad-descriptors"))],
        (CallKind::PoolImportPtr, _) => vec![(
            InvalidValue,
            Document("https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html (cudaMemPoolImportPointer)"),
        )],
        (CallKind::PoolAlloc, _) => vec![
            (NotSupported, Clause("pool.import.no-allocation")),
            (InvalidValue, Clause("pool.import.no-allocation")),
        ],
        (CallKind::PoolFree, _) => vec![(
            InvalidValue,
            Document("https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html (cudaFreeAsync)"),
        )],
        (CallKind::PoolSetAccess, _) => vec![
            (InvalidValue, Document("https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY__POOLS.html (cudaMemPoolSetAccess)")),
            (InvalidDevice, Document("https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#device-accessibility-for-multi-gpu-support (Device Accessibility for Multi-GPU Support)")),
        ],
        (CallKind::EnablePeerAccess, _) => vec![
            (PeerAccessAlreadyEnabled, Clause("multidev.peer.enable")),
            (PeerAccessUnsupported, Clause("multidev.peer.enable-self")),
        ],
        (CallKind::CanAccessPeer, _) => vec![(InvalidDevice, Clause("multidev.peer.can-access"))],
        (CallKind::DestroyContext, _) => vec![(InvalidContext, Clause("mem.context.destroy-primary"))],
        (CallKind::SetCurrentContext, _) => vec![(InvalidContext, Clause("mem.context.set-destroyed"))],
        // A child forked after CUDA is initialised gets the initialisation
        // error; the parent goes on.
        (CallKind::ForkChildAlloc, _) => {
            vec![(NotInitialized, Clause("mem.fork.child-call-after-init"))]
        }
        (CallKind::AddressRange, _) => vec![(NotFound, Clause("mem.attr.address-range-of-freed"))],
        // cuPointerGetAttribute of a pointer the driver does not know (freed,
        // closed, never allocated); `pointer_attr P` without an attribute
        // answers `unregistered` instead and never takes this path.
        (CallKind::PointerInfo | CallKind::PointerAttribute, _) => vec![(InvalidValue, Clause("mem.pointer-attr.interior-pointer"))],
        (CallKind::Alloc | CallKind::Synchronize, _) => vec![
            (InvalidContext, Clause("mem.context.set-destroyed")),
            (ContextIsDestroyed, Clause("mem.context.set-destroyed")),
        ],
        _ => Vec::new(),
    }
}

/// The simulator's semantic choices the checks of a trace depend on, as the
/// backend runs the dialect (`Backend::semantic_choice`): where a dialect's
/// profile differs (the HIP profile), the model follows the profile, not a
/// dialect name. A backend without choices (real hardware) gets the
/// measured CUDA defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Choices {
    /// `interior_handle=pointer-offset`: the handle of a pointer inside an
    /// allocation carries its offset (HIP's `poffset`), and an open returns
    /// the pointer at that offset; otherwise (`allocation`, measured on the
    /// H100) it is the allocation's handle and opens at its start.
    pub interior_offset: bool,
    /// `event_exporter_crash`: whether a handle of an event whose exporter
    /// crashed is refused (the measured default: it still opens, the
    /// runtime's teardown at exit did not run).
    pub event_refused_after_crash: bool,
}

impl Choices {
    pub fn of(backend: &dyn Backend, dialect: Dialect) -> Choices {
        let crash = backend.semantic_choice(dialect, "event_exporter_crash");
        Choices {
            interior_offset: backend
                .semantic_choice(dialect, "interior_handle")
                .is_some_and(|v| v == "pointer-offset"),
            event_refused_after_crash: match crash.as_deref() {
                Some("refused") => true,
                Some("by-dialect") => dialect == Dialect::Runtime,
                _ => false,
            },
        }
    }
}

/// Run `scenario` on the simulator and check every property but the
/// differential. Returns the first run's trace (when it ran) and the
/// violations, in step order.
pub fn check_on_sim(
    scenario: &Scenario,
    sim: &dyn Backend,
    opts: &ExecOptions,
) -> (Option<Trace>, Vec<Violation>) {
    check_on_sim_with(scenario, sim, opts, true)
}

/// [`check_on_sim`], with the determinism property (a second run compared
/// with the first) checked only when `determinism` is true: `explore` checks
/// it on a sample of its cases ([`super::ExploreOptions::determinism_every`]).
pub fn check_on_sim_with(
    scenario: &Scenario,
    sim: &dyn Backend,
    opts: &ExecOptions,
    determinism: bool,
) -> (Option<Trace>, Vec<Violation>) {
    checks_on_sim(scenario, sim, opts, determinism, scenario::execute)
}

/// [`check_on_sim_with`] for a caller that needs the violations only: its
/// runs leave the step records' texts, API names and wall times out (the
/// texts were a fifth of an explore case's work).
pub fn violations_on_sim(
    scenario: &Scenario,
    sim: &dyn Backend,
    opts: &ExecOptions,
    determinism: bool,
) -> Vec<Violation> {
    let execute = scenario::execute_for_outcomes;
    checks_on_sim(scenario, sim, opts, determinism, execute).1
}

/// The checks of [`check_on_sim_with`], on runs that `execute` makes.
fn checks_on_sim(
    scenario: &Scenario,
    sim: &dyn Backend,
    opts: &ExecOptions,
    determinism: bool,
    execute: fn(&Scenario, &dyn Backend, &ExecOptions) -> scenario::Execution,
) -> (Option<Trace>, Vec<Violation>) {
    let run = || catch_unwind(AssertUnwindSafe(|| execute(scenario, sim, opts)));
    let first = match run() {
        Ok(e) => e,
        Err(panic) => {
            return (
                None,
                vec![Violation::new(
                    Property::Robustness,
                    None,
                    format!("the simulator panicked: {}", panic_text(&panic)),
                    "panic",
                )],
            )
        }
    };
    let mut out = Vec::new();
    if first.verdict.status == Status::Broken {
        out.push(Violation::new(
            Property::Robustness,
            None,
            format!("the run is Broken: {}", first.verdict.message),
            "broken run",
        ));
    }
    match determinism.then(run) {
        Some(Ok(second)) if !first.trace.same_observations(&second.trace) => {
            let step = first
                .trace
                .differences(&second.trace)
                .first()
                .map(|d| d.index);
            let message = match step {
                Some(i) => format!("two runs with seed {} differ at step {}", opts.seed, i + 1),
                None => format!("two runs with seed {} log different hazards", opts.seed),
            };
            out.push(Violation::new(
                Property::Determinism,
                step,
                message,
                "traces differ",
            ));
        }
        None | Some(Ok(_)) => {}
        Some(Err(panic)) => out.push(Violation::new(
            Property::Robustness,
            None,
            format!(
                "the simulator panicked on the second run: {}",
                panic_text(&panic)
            ),
            "panic",
        )),
    }
    let choices = Choices::of(sim, opts.dialect);
    out.extend(check_trace(scenario, &first.trace, opts.dialect, &choices));
    (Some(first.trace), out)
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Bytes written through one process, as the model knows them.
#[derive(Debug, Default)]
struct Object {
    size: u64,
    /// The process that allocated it.
    owner: usize,
    /// Freed by its owner, or written where the model cannot follow: what a
    /// read returns is no longer judged.
    unjudged: bool,
    /// Writes in order: `[start, end)` set to the byte.
    writes: Vec<(u64, u64, WriteBytes)>,
}

#[derive(Debug, Clone)]
enum WriteBytes {
    Fill(u8),
    Pattern(Vec<u8>),
}

impl Object {
    /// Record a write; false when it reaches past the object (it landed in
    /// whatever the address holds now: a neighbour, another allocation).
    fn write(&mut self, at: u64, bytes: WriteBytes, len: u64) -> bool {
        if at.saturating_add(len) > self.size {
            return false;
        }
        self.writes.push((at, at + len, bytes));
        true
    }

    /// The byte last written at `at`, if any.
    #[cfg(test)]
    fn byte(&self, at: u64) -> Option<u8> {
        self.writes
            .iter()
            .rev()
            .find(|(s, e, _)| at >= *s && at < *e)
            .map(|(s, _, w)| match w {
                WriteBytes::Fill(b) => *b,
                WriteBytes::Pattern(p) => p[(at - s) as usize],
            })
    }

    /// The first of `got`, read from `start` on, that differs from the byte
    /// last written there (reading stops at the object's end): its index,
    /// the byte read, the byte written. As [`Object::byte`] for each byte
    /// in turn, with the writes laid over the read once rather than
    /// searched for every byte (a read is up to 256 bytes).
    fn first_unlike(&self, start: u64, got: &[u8]) -> Option<(usize, u8, u8)> {
        let end = start
            .saturating_add(got.len() as u64)
            .min(self.size.max(start));
        let got = &got[..(end - start) as usize];
        // The byte last written at each offset of the read; `NONE` where
        // nothing was.
        const NONE: u16 = u16::MAX;
        let mut want = vec![NONE; got.len()];
        for (s, e, w) in &self.writes {
            let (from, to) = ((*s).max(start), (*e).min(end));
            if from >= to {
                continue;
            }
            let span = &mut want[(from - start) as usize..(to - start) as usize];
            match w {
                WriteBytes::Fill(b) => span.fill(u16::from(*b)),
                WriteBytes::Pattern(p) => {
                    let p = p.get((from - s) as usize..).unwrap_or_default();
                    for (x, b) in span.iter_mut().zip(p) {
                        *x = u16::from(*b);
                    }
                }
            }
        }
        got.iter()
            .zip(&want)
            .position(|(b, w)| *w != NONE && *w != u16::from(*b))
            .map(|k| (k, got[k], want[k] as u8))
    }
}

/// The model a trace is checked against.
#[derive(Default)]
struct Model<'a> {
    objects: Vec<Object>,
    /// Pointer label -> the object it reaches, while known.
    label_object: HashMap<&'a str, usize>,
    /// Pointer label -> its offset in that object (an open of an interior
    /// pointer's handle under `interior_handle=pointer-offset`; else 0).
    label_offset: HashMap<&'a str, u64>,
    /// Binding -> (base label, offset from it).
    binding: HashMap<&'a str, (&'a str, u64)>,
    /// Handle label -> the object it exports.
    handle_object: HashMap<&'a str, usize>,
    /// Handle label -> the offset in that object its open returns (see
    /// [`Choices::interior_offset`]).
    handle_offset: HashMap<&'a str, u64>,
    /// Handles with a damaged offset field -> the object of the original.
    damaged: HashMap<&'a str, usize>,
    /// Exporters whose memory a damaged-offset open reached: reads of their
    /// objects are no longer judged.
    scrambled: HashSet<usize>,
    /// A write went through a stale pointer: no read is judged any more.
    scrambled_all: bool,
    /// Binding of a handle -> its label.
    handle_label: HashMap<&'a str, &'a str>,
    /// (process, pointer label) -> opens outstanding.
    opens: HashMap<(usize, &'a str), u64>,
    /// Labels returned by a successful `ipc_open` (in any process).
    imported: HashSet<&'a str>,
    /// Imported labels whose last open was closed, while no later malloc or
    /// open of their process could have reused their address: an access
    /// through one must fail or be logged.
    closed: HashSet<(usize, &'a str)>,
    /// Processes whose state the model no longer follows (a context was
    /// destroyed, a sticky error, a crash).
    lost: HashSet<usize>,
    /// [`Choices::interior_offset`]: several pointers of one process may
    /// reach one allocation through one mapping.
    interior_offset: bool,
    /// (process, pointer label) freed by that process, while no later
    /// malloc, open or reservation of the process returned that address: a
    /// free of it again must fail and be logged as a `double-free`.
    freed: HashSet<(usize, &'a str)>,
    /// Objects their owner freed, while no later malloc, open or
    /// reservation of the owner could have reused their address: a
    /// successful access inside one (through any process's pointer) must be
    /// logged as an access after free.
    freed_objects: HashSet<usize>,
    /// Kernel writes (`slow_fill`, `kernel_fill`, `kernel_iota`) whose bytes may not have landed yet:
    /// (writer, object, start, end). The writer's own host-blocking calls
    /// (sync, copies, sets, free) wait for them.
    pending_kernel: Vec<(usize, usize, u64, u64)>,
    /// Processes that crashed (rather than exited).
    crashed: HashSet<usize>,
    /// Binding of an event handle -> the process that exported it.
    event_exporter: HashMap<&'a str, usize>,
}

impl<'a> Model<'a> {
    /// A write by process `q` to `[start, end)` of object `o`: where another
    /// process's kernel write there may still be pending, which one lands
    /// last is timing, so the object's bytes are no longer judged.
    fn write_races_kernel(&mut self, q: usize, o: usize, start: u64, end: u64) {
        let races = self
            .pending_kernel
            .iter()
            .any(|&(w, k, s, e)| w != q && k == o && s < end && start < e);
        if races {
            self.objects[o].unjudged = true;
        }
    }

    /// Process `p` stops running (exit, crash, its context destroyed) with
    /// kernel writes pending: whether they land before another process
    /// reads is not modelled, so their objects are no longer judged.
    fn drop_pending_kernels(&mut self, p: usize) {
        let objects: Vec<usize> = self
            .pending_kernel
            .iter()
            .filter(|k| k.0 == p)
            .map(|k| k.1)
            .collect();
        for o in objects {
            self.objects[o].unjudged = true;
        }
        self.pending_kernel.retain(|k| k.0 != p);
    }

    /// Under [`Choices::interior_offset`], another pointer process `p` has
    /// open reaches the object of `label`: opened from another interior
    /// pointer's handle, it maps the whole allocation, so `label`'s address
    /// is still mapped after `label`'s own last close.
    fn reached_by_another_open(&self, p: usize, label: &str) -> bool {
        let Some(&o) = self.label_object.get(label) else {
            return false;
        };
        self.interior_offset
            && self.opens.iter().any(|((q, l), n)| {
                *q == p && *n > 0 && *l != label && self.label_object.get(l) == Some(&o)
            })
    }

    /// The offset in its object of `off` bytes past pointer `label`.
    fn object_offset(&self, label: &str, off: u64) -> u64 {
        self.label_offset
            .get(label)
            .copied()
            .unwrap_or(0)
            .saturating_add(off)
    }

    /// A malloc, open or VMM reservation in process `p` may hand out the
    /// address of memory it closed or freed earlier (`va_reuse`,
    /// `va_rewind`): stale pointers of `p` may
    /// now reach it legitimately, so they are no longer judged.
    fn reused_va(&mut self, p: usize) {
        self.closed.retain(|(q, _)| *q != p);
        let objects = &self.objects;
        self.freed_objects.retain(|&o| objects[o].owner != p);
        for ((q, l), n) in &self.opens {
            if *q == p && *n == 0 {
                self.label_object.remove(l);
            }
        }
    }
}

/// The bytes a run-length encoded pattern (`ab*16 00*48`) stands for.
pub(crate) fn decode_pattern(pattern: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for run in pattern.split_whitespace() {
        let (b, n) = match run.split_once('*') {
            Some((b, n)) => (b, n.parse::<usize>().ok()?),
            None => (run, 1),
        };
        let b = u8::from_str_radix(b, 16).ok()?;
        out.extend(std::iter::repeat_n(b, n));
    }
    Some(out)
}

/// The kinds of the `hazards` logged at steps below `steps`, grouped by
/// step (in log order within one), and where each step's group starts:
/// step `i`'s are `kinds[starts[i]..starts[i + 1]]` (see
/// [`kinds_of_step`]). Both are empty when no hazard names such a step.
fn kinds_by_step(hazards: &[Hazard], steps: usize) -> (Vec<HazardKind>, Vec<usize>) {
    let step_of = |h: &Hazard| h.step.filter(|&s| s < steps);
    if !hazards.iter().any(|h| step_of(h).is_some()) {
        return (Vec::new(), Vec::new());
    }
    // A counting sort: how many per step, then each step's first slot.
    let mut starts = vec![0usize; steps + 1];
    for s in hazards.iter().filter_map(step_of) {
        starts[s + 1] += 1;
    }
    for i in 0..steps {
        starts[i + 1] += starts[i];
    }
    let mut next = starts.clone();
    let mut kinds = vec![HazardKind::ALL[0]; starts[steps]];
    for h in hazards {
        if let Some(s) = step_of(h) {
            kinds[next[s]] = h.kind;
            next[s] += 1;
        }
    }
    (kinds, starts)
}

/// The kinds of the hazards step `i` logged, from [`kinds_by_step`].
fn kinds_of_step<'k>(kinds: &'k [HazardKind], starts: &[usize], i: usize) -> &'k [HazardKind] {
    match starts.get(i..=i + 1) {
        Some(&[from, to]) => &kinds[from..to],
        _ => &[],
    }
}

/// Check documented returns, conservation and coherence of one trace, run
/// in `dialect` with `choices`.
pub fn check_trace(
    scenario: &Scenario,
    trace: &Trace,
    dialect: Dialect,
    choices: &Choices,
) -> Vec<Violation> {
    // The process a binding was made in (a pointer another process names
    // is that process's address): that of the last step binding the name,
    // looked for only when a close or free asks.
    let made_in = |name: &str| {
        scenario
            .steps
            .iter()
            .rev()
            .find(|s| s.bind.as_deref() == Some(name))
            .map(|s| s.process)
    };
    let n = scenario.steps.iter().filter(|s| s.bind.is_some()).count();
    let mut m = Model {
        interior_offset: choices.interior_offset,
        binding: HashMap::with_capacity_and_hasher(n, Default::default()),
        label_object: HashMap::with_capacity_and_hasher(n, Default::default()),
        ..Model::default()
    };
    let mut out = Vec::new();
    let hazards = trace.hazards.as_deref().unwrap_or_default();
    let (kinds, starts) = kinds_by_step(hazards, scenario.steps.len());
    for (i, (step, rec)) in scenario.steps.iter().zip(&trace.steps).enumerate() {
        let p = step.process;
        let keyword = || step.op.keyword();
        let here = kinds_of_step(&kinds, &starts, i);
        let own_binding = |r: &Ref| r.name().and_then(made_in) == Some(p);
        // Dialect-neutral, so both dialects' cases of one finding match.
        let code = || match &rec.outcome {
            StepOutcome::Error { code, .. } => match ApiError::from_code(dialect, *code).kind() {
                Some(k) => format!("{k:?}"),
                None => code.to_string(),
            },
            _ => String::new(),
        };
        // The texts of a violation are written only for one.
        let mut fail = |property, message: String| {
            out.push(Violation::new(
                property,
                Some(i),
                // The step's text, not the record's: a record may leave it out.
                format!("line {} '{}': {message}", step.line, step.text()),
                &format!("{} {}", keyword(), code()),
            ))
        };
        // Documented returns.
        match &rec.outcome {
            StepOutcome::Error { code, name } => {
                let kind = ApiError::from_code(dialect, *code).kind();
                let sticky = kind == Some(ErrorKind::IllegalAddress);
                let listed = kind.is_some_and(|k| {
                    documented_returns(&step.op, dialect)
                        .iter()
                        .any(|(d, _)| *d == k)
                });
                // A sticky fault makes every later call of the process fail
                // with it (measured: GPU test gpu_crashing_calls_are_reported_as_lost_processes).
                let poisoned = m.lost.contains(&p) && sticky;
                // A call on an event its exporter destroyed (or whose
                // exporter exited) is undefined: the hazard log says so, and
                // any answer is allowed.
                let undefined = here.contains(&HazardKind::EventAfterExporterDestroy);
                if !listed && !poisoned && !undefined {
                    fail(
                        Property::DocumentedReturns,
                        format!("{} returned {name} ({code}), which neither its documentation nor a clause lists", keyword()),
                    );
                }
                // The refusal event.lifetime.open-after-exporter-exit lists
                // follows the runtime's teardown at exit, which a crash
                // skips: event.lifetime.open-after-exporter-crash measures
                // the handle still opening.
                if let Op::IpcOpenEvent { handle, .. } = &step.op {
                    let exporter_crashed = m
                        .event_exporter
                        .get(handle.as_str())
                        .is_some_and(|w| m.crashed.contains(w));
                    if exporter_crashed
                        && kind == Some(ErrorKind::MapFailed)
                        && !choices.event_refused_after_crash
                        && !undefined
                        && !m.lost.contains(&p)
                    {
                        fail(
                            Property::DocumentedReturns,
                            format!("{} returned {name} ({code}) for a handle whose exporter crashed: only an exit refuses it", keyword()),
                        );
                    }
                }
                if sticky {
                    m.lost.insert(p);
                }
            }
            StepOutcome::Crash { .. } => {
                m.drop_pending_kernels(p);
                m.crashed.insert(p);
                // Measured: cudaIpcGetMemHandle(NULL, ptr) kills the process (mem.get.null-out).
                // Likewise cudaIpcGetEventHandle(NULL, e) (event.get.null-out).
                let null_out = matches!(&step.op,
                    Op::IpcGet { out, .. } | Op::IpcGetEvent { out, .. } if *out == ipc_harness::OutArg::Null)
                    && dialect == Dialect::Runtime;
                // And either dialect's get or stream wait of an interprocess
                // event from another context (event.context.get-from-other-context,
                // event.context.stream-wait-from-other-context).
                let other_context =
                    matches!(&step.op, Op::IpcGetEvent { .. } | Op::StreamWait { .. });
                let expected = null_out || other_context;
                if !expected {
                    fail(
                        Property::DocumentedReturns,
                        "the process crashed, which no clause measures for this call".into(),
                    );
                }
                m.lost.insert(p);
            }
            StepOutcome::Broken { detail } => {
                fail(Property::Robustness, format!("harness failure: {detail}"));
                m.lost.insert(p);
            }
            StepOutcome::Timeout { .. } => {
                fail(Property::Robustness, "the simulator timed out".into());
                m.lost.insert(p);
            }
            StepOutcome::Ok { .. } | StepOutcome::Skipped { .. } => {}
        }
        let ok_value = match &rec.outcome {
            StepOutcome::Ok { value } => Some(value),
            _ => None,
        };
        let lost = m.lost.contains(&p);
        fn resolve<'a>(m: &Model<'a>, r: &Ref) -> Option<(&'a str, u64)> {
            r.name().and_then(|n| m.binding.get(n).copied())
        }
        // A host-blocking call waits for the process's own kernels first.
        let waits_for_stream = matches!(
            step.op,
            Op::Sync
                | Op::Read { .. }
                | Op::DeviceRead { .. }
                | Op::Free { .. }
                | Op::Fill { .. }
                | Op::Write { .. }
        );
        if waits_for_stream && ok_value.is_some() {
            m.pending_kernel.retain(|k| k.0 != p);
        }
        let answered = matches!(
            rec.outcome,
            StepOutcome::Ok { .. } | StepOutcome::Error { .. }
        );
        match &step.op {
            Op::Malloc { size, .. } => {
                if let (Some(ValueSummary::Ptr { label }), Some(b)) = (ok_value, &step.bind) {
                    m.reused_va(p);
                    m.freed.remove(&(p, label.as_str()));
                    m.objects.push(Object {
                        size: *size,
                        owner: p,
                        ..Object::default()
                    });
                    m.label_object.insert(label.as_str(), m.objects.len() - 1);
                    m.label_offset.remove(label.as_str());
                    m.imported.remove(label.as_str());
                    m.binding.insert(b.as_str(), (label.as_str(), 0));
                }
            }
            Op::Offset { ptr, bytes } => {
                if let (Some(b), Some((l, o))) = (&step.bind, resolve(&m, ptr)) {
                    if ok_value.is_some() {
                        m.binding.insert(b.as_str(), (l, o.saturating_add(*bytes)));
                    }
                }
            }
            Op::IpcGet { ptr, .. } => {
                if let (Some(ValueSummary::Handle { label }), Some(b)) = (ok_value, &step.bind) {
                    m.handle_label.insert(b.as_str(), label.as_str());
                    if let Some((l, off)) = resolve(&m, ptr) {
                        if let Some(&o) = m.label_object.get(&l) {
                            if choices.interior_offset {
                                let at = m.object_offset(l, off);
                                // The handle carries the pointer's offset in
                                // its allocation, past whose end it names
                                // whatever the address holds: unknown.
                                if at < m.objects[o].size {
                                    m.handle_object.insert(label.as_str(), o);
                                    m.handle_offset.insert(label.as_str(), at);
                                }
                            } else {
                                m.handle_object.insert(label.as_str(), o);
                            }
                        }
                    }
                }
            }
            Op::HandleFlip { handle, offset } => {
                if let (Some(ValueSummary::Handle { label }), Some(b)) = (ok_value, &step.bind) {
                    m.handle_label.insert(b.as_str(), label.as_str());
                    let original = m
                        .handle_label
                        .get(handle.as_str())
                        .copied()
                        .unwrap_or_default();
                    let o = m.handle_object.get(&original).copied();
                    let at = m.handle_offset.get(&original).copied();
                    if let Some(o) = o {
                        if (28..31).contains(offset) {
                            // A damaged offset may still open, somewhere in
                            // the block: the model cannot place it.
                            m.damaged.insert(label.as_str(), o);
                        } else if choices.interior_offset && (56..64).contains(offset) {
                            // Bytes 56..64 carry the pointer's offset in its
                            // allocation: the flip moves it (an open past
                            // the allocation's end is refused).
                            let shift = 8 * u32::from(offset - 56);
                            let moved = at.unwrap_or(0) ^ (0xff << shift);
                            m.handle_object.entry(label.as_str()).or_insert(o);
                            m.handle_offset.entry(label.as_str()).or_insert(moved);
                        } else {
                            // Other bytes either fail to open or are ignored.
                            m.handle_object.entry(label.as_str()).or_insert(o);
                            if let Some(at) = at {
                                m.handle_offset.entry(label.as_str()).or_insert(at);
                            }
                        }
                    }
                }
            }
            Op::HandleZero | Op::HandleRandom => {
                if let (Some(ValueSummary::Handle { label }), Some(b)) = (ok_value, &step.bind) {
                    m.handle_label.insert(b.as_str(), label.as_str());
                }
            }
            // A VMM reservation may take a closed or freed range's VA too
            // (`vmm_reserve_va=shared`, and `va_rewind`: the device heap's
            // fresh end moved back to it): a stale pointer may reach the
            // VMM mapping made there.
            Op::VmmReserve { .. } => {
                if let Some(ValueSummary::Ptr { label }) = ok_value {
                    m.reused_va(p);
                    m.freed.remove(&(p, label.as_str()));
                }
            }
            Op::IpcOpen { handle, .. } => {
                if let Some(ValueSummary::Ptr { label }) = ok_value {
                    m.reused_va(p);
                    m.freed.remove(&(p, label.as_str()));
                    let hl = m
                        .handle_label
                        .get(handle.as_str())
                        .copied()
                        .unwrap_or_default();
                    if let Some(&o) = m.damaged.get(&hl) {
                        // Writes through it land where the model cannot say:
                        // anywhere in the exporter's block, neighbours included.
                        let owner = m.objects[o].owner;
                        m.scrambled.insert(owner);
                        m.lost.insert(p);
                    }
                    let object = m.handle_object.get(&hl).copied();
                    match object {
                        Some(o) => m.label_object.insert(label.as_str(), o),
                        None => m.label_object.remove(label.as_str()),
                    };
                    match m.handle_offset.get(&hl).copied() {
                        Some(at) if object.is_some() => m.label_offset.insert(label.as_str(), at),
                        _ => m.label_offset.remove(label.as_str()),
                    };
                    m.imported.insert(label.as_str());
                    *m.opens.entry((p, label.as_str())).or_insert(0) += 1;
                    if let Some(b) = &step.bind {
                        m.binding.insert(b.as_str(), (label.as_str(), 0));
                    }
                }
            }
            Op::IpcClose { ptr } => {
                let ok = ok_value.is_some();
                // A failed close reached no open of this process: the log
                // says whether it closed twice or closed what it never opened.
                let logged = here
                    .iter()
                    .any(|k| matches!(k, HazardKind::DoubleClose | HazardKind::ForeignClose));
                if !ok && answered && !lost && !logged {
                    fail(
                        Property::Conservation,
                        "the close failed and no double-close or foreign-close was logged".into(),
                    );
                }
                if !own_binding(ptr) {
                    // Another process's pointer: that mapping is not this
                    // process's to close (foreign-close), and its opener's
                    // count is untouched. A success closed a mapping of this
                    // process at the same address, which the model does not
                    // follow.
                    if ok {
                        m.lost.insert(p);
                    }
                } else if let Some((label, 0)) = resolve(&m, ptr) {
                    let key = (p, label);
                    let outstanding = m.opens.get(&key).copied().unwrap_or(0);
                    if !lost && answered {
                        if ok && outstanding == 0 {
                            fail(
                                Property::Conservation,
                                "the close succeeded with no open of this pointer outstanding"
                                    .into(),
                            );
                        } else if !ok && outstanding > 0 {
                            fail(
                                Property::Conservation,
                                format!("the close failed with {outstanding} open(s) of this pointer outstanding"),
                            );
                        }
                    }
                    if ok && outstanding > 0 {
                        if outstanding == 1 {
                            m.closed.insert((p, label));
                        }
                        m.opens.insert(key, outstanding - 1);
                    }
                }
            }
            Op::Exit => {
                let outstanding: u64 = m
                    .opens
                    .iter()
                    .filter(|((q, _), _)| *q == p)
                    .map(|(_, n)| *n)
                    .sum();
                let leaked = here.contains(&HazardKind::MappingLeakedAtExit);
                if !lost && ok_value.is_some() {
                    if outstanding > 0 && !leaked {
                        fail(
                            Property::Conservation,
                            format!("the process exited with {outstanding} open(s) outstanding and no leak was logged"),
                        );
                    } else if outstanding == 0 && leaked {
                        fail(
                            Property::Conservation,
                            "a leak was logged for a process that closed everything it opened"
                                .into(),
                        );
                    }
                }
                m.opens.retain(|(q, _), _| *q != p);
                m.drop_pending_kernels(p);
                m.lost.insert(p);
            }
            Op::Free { ptr, .. } => {
                if let (Some((l, 0)), true) = (resolve(&m, ptr), own_binding(ptr)) {
                    let key = (p, l);
                    let ok = ok_value.is_some();
                    if m.freed.contains(&key) && answered && !lost {
                        if ok {
                            fail(
                                Property::Conservation,
                                "a second free of this pointer succeeded".into(),
                            );
                        } else if !here.contains(&HazardKind::DoubleFree) {
                            fail(
                                Property::Conservation,
                                "a second free of this pointer failed and no double-free was logged"
                                    .into(),
                            );
                        }
                    }
                    if ok {
                        if let Some(&o) = m.label_object.get(&l) {
                            m.objects[o].unjudged = true;
                            m.freed_objects.insert(o);
                        }
                        m.freed.insert(key);
                    }
                }
            }
            Op::IpcGetEvent { .. } => {
                if let (Some(_), Some(b)) = (ok_value, &step.bind) {
                    m.event_exporter.insert(b.as_str(), p);
                }
            }
            Op::CtxDestroy { .. } if ok_value.is_some() => {
                // Its allocations and mappings go with it; the model
                // does not follow contexts.
                m.drop_pending_kernels(p);
                m.lost.insert(p);
            }
            // Work on a stream other than the legacy one, and copies: the
            // model follows neither the streams' order nor copied bytes, so
            // the bytes they write are not judged from here on.
            Op::SlowFill {
                ptr,
                at,
                stream: Some(_),
                ..
            } if ok_value.is_some() => {
                let at0 = at.unwrap_or(0);
                access(
                    &mut m,
                    &mut fail,
                    (p, lost, true),
                    ptr,
                    at0,
                    here,
                    |m, o, _| {
                        m.objects[o].unjudged = true;
                    },
                );
            }
            Op::Copy { dst, .. } | Op::CopyPeer { dst, .. } if ok_value.is_some() => {
                access(
                    &mut m,
                    &mut fail,
                    (p, lost, true),
                    dst,
                    0,
                    here,
                    |m, o, _| {
                        m.objects[o].unjudged = true;
                    },
                );
            }
            Op::SlowFill {
                ptr,
                at,
                resolved_len,
                ..
            }
            | Op::KernelPattern {
                ptr,
                at,
                resolved_len,
                ..
            } if ok_value.is_some() => {
                let written = match &step.op {
                    Op::KernelPattern { content, .. } => {
                        WriteBytes::Pattern(content.bytes(*resolved_len))
                    }
                    Op::SlowFill { value, .. } => WriteBytes::Fill(*value),
                    // This arm matches only the two kernels above.
                    _ => WriteBytes::Pattern(Vec::new()),
                };
                let at0 = at.unwrap_or(0);
                let mut landed = None;
                access(
                    &mut m,
                    &mut fail,
                    (p, lost, true),
                    ptr,
                    at0,
                    here,
                    |m, o, base| {
                        let start = base.saturating_add(at0);
                        let end = start.saturating_add(*resolved_len);
                        m.write_races_kernel(p, o, start, end);
                        let placed = m.objects[o].write(start, written.clone(), *resolved_len);
                        m.scrambled_all |= !placed;
                        if placed {
                            landed = Some((o, start, end));
                        }
                    },
                );
                // Its bytes are modelled as written now: a read not ordered
                // after the kernel is logged (and not judged), an ordered
                // one finds them landed.
                if let Some((o, start, end)) = landed {
                    m.pending_kernel.push((p, o, start, end));
                }
            }
            Op::Fill {
                ptr,
                value,
                at,
                resolved_len,
                ..
            } if ok_value.is_some() => {
                let at0 = at.unwrap_or(0);
                access(
                    &mut m,
                    &mut fail,
                    (p, lost, true),
                    ptr,
                    at0,
                    here,
                    |m, o, base| {
                        let start = base.saturating_add(at0);
                        m.write_races_kernel(p, o, start, start.saturating_add(*resolved_len));
                        let placed =
                            m.objects[o].write(start, WriteBytes::Fill(*value), *resolved_len);
                        m.scrambled_all |= !placed;
                    },
                );
            }
            Op::Write {
                ptr,
                offset,
                pattern,
            } if ok_value.is_some() => {
                access(
                    &mut m,
                    &mut fail,
                    (p, lost, true),
                    ptr,
                    *offset,
                    here,
                    |m, o, base| {
                        let bytes = pattern.to_bytes();
                        let n = bytes.len() as u64;
                        let start = base.saturating_add(*offset);
                        m.write_races_kernel(p, o, start, start.saturating_add(n));
                        let placed = m.objects[o].write(start, WriteBytes::Pattern(bytes), n);
                        m.scrambled_all |= !placed;
                    },
                );
            }
            Op::Read { ptr, offset, .. } | Op::DeviceRead { ptr, offset, .. } => {
                if let Some(ValueSummary::Bytes { pattern }) = ok_value {
                    let mut wrong = None;
                    access(
                        &mut m,
                        &mut fail,
                        (p, lost, false),
                        ptr,
                        *offset,
                        here,
                        |m, o, base| {
                            if m.scrambled_all
                                || !here.is_empty()
                                || m.objects[o].unjudged
                                || m.scrambled.contains(&m.objects[o].owner)
                            {
                                return; // the hazard log explains whatever was read
                            }
                            let Some(got) = decode_pattern(pattern) else {
                                return;
                            };
                            let start = base.saturating_add(*offset);
                            if let Some((k, b, want)) = m.objects[o].first_unlike(start, &got) {
                                let at = start + k as u64;
                                wrong = Some(format!(
                                    "byte {k} read {b:02x}, but {want:02x} was written last (object offset {at})"
                                ));
                            }
                        },
                    );
                    if let Some(w) = wrong {
                        if !lost {
                            fail(Property::Coherence, w);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A successful data access through `ptr` in process `p`: an access through
/// an imported pointer after its last close must have been logged; then the
/// object it reaches (and the offset of `ptr` in it) goes to `apply`.
fn access(
    m: &mut Model,
    fail: &mut impl FnMut(Property, String),
    (p, lost, write): (usize, bool, bool),
    ptr: &Ref,
    at: u64,
    here: &[HazardKind],
    apply: impl FnOnce(&mut Model, usize, u64),
) {
    let Some((label, off)) = ptr.name().and_then(|n| m.binding.get(n).copied()) else {
        return;
    };
    let off = m.object_offset(label, off);
    // The object the label reaches (nothing below changes it before
    // `apply`).
    let object = m.label_object.get(&label).copied();
    // Only an access inside the closed pointer's own allocation is judged:
    // past its end the address may be a neighbour's live open.
    let inside = object.is_some_and(|o| off.saturating_add(at) < m.objects[o].size);
    // An interior pointer's open keeps the allocation mapped: an access
    // through another pointer into it reaches live memory (HIP profile).
    let stale = m.closed.contains(&(p, label)) && !m.reached_by_another_open(p, label);
    // An access inside memory its owner freed (the address not reused
    // since) must be logged too.
    let freed = object.is_some_and(|o| m.freed_objects.contains(&o));
    if inside && (stale || freed) {
        let logged = here.iter().any(|k| {
            matches!(
                k,
                HazardKind::AccessAfterClose
                    | HazardKind::AccessAfterFree
                    | HazardKind::OutsideOwnRange
            )
        });
        if !lost && !logged {
            fail(
                Property::Conservation,
                if stale {
                    "an access through a pointer after its last close succeeded and was not logged"
                } else {
                    "an access to memory its owner freed succeeded and was not logged"
                }
                .into(),
            );
        }
    }
    // A write through a closed pointer, or one the hazard log calls an
    // access after close or free (a mapping its context's destroy released),
    // is undefined: where its bytes land (the released VA: stale_memset) is
    // no longer the object's, so reads are not judged from here on.
    let undefined = here.iter().any(|k| {
        matches!(
            k,
            HazardKind::AccessAfterClose | HazardKind::AccessAfterFree
        )
    });
    if write && (stale || undefined) {
        m.scrambled_all = true;
        return;
    }
    match object {
        Some(o) if !(write && m.objects[o].unjudged) => apply(m, o, off),
        // A write through a freed or unknown pointer lands wherever its
        // address now is (VA reuse): the model can no longer place bytes.
        _ if write => m.scrambled_all = true,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write_bytes() -> impl Strategy<Value = WriteBytes> {
        prop_oneof![
            (0u8..4).prop_map(WriteBytes::Fill),
            proptest::collection::vec(0u8..4, 0..40).prop_map(WriteBytes::Pattern),
        ]
    }

    proptest! {
        /// `first_unlike` finds the byte the byte-by-byte search of the
        /// last write finds.
        #[test]
        fn first_unlike_is_the_first_byte_unlike_the_last_write(
            size in 0u64..200,
            writes in proptest::collection::vec((0u64..220, write_bytes(), 0u64..60), 0..8),
            start in 0u64..230,
            got in proptest::collection::vec(0u8..4, 0..80),
        ) {
            let mut object = Object { size, ..Object::default() };
            for (at, bytes, len) in writes {
                // A pattern as long as the write, as every write makes it.
                let bytes = match bytes {
                    WriteBytes::Pattern(mut p) => {
                        p.resize(len as usize, 1);
                        WriteBytes::Pattern(p)
                    }
                    fill => fill,
                };
                object.write(at, bytes, len);
            }
            let mut expected = None;
            for (k, b) in got.iter().enumerate() {
                let at = start + k as u64;
                if at >= object.size {
                    break;
                }
                if let Some(want) = object.byte(at) {
                    if want != *b {
                        expected = Some((k, *b, want));
                        break;
                    }
                }
            }
            prop_assert_eq!(object.first_unlike(start, &got), expected);
        }

        /// Each step's kinds are those a filter of the whole log for the
        /// step finds, in log order.
        #[test]
        fn kinds_by_step_are_each_steps_filtered_log(
            log in proptest::collection::vec(
                (proptest::option::of(0usize..12), 0..HazardKind::ALL.len()),
                0..16,
            ),
            steps in 0usize..10,
        ) {
            let hazards: Vec<Hazard> = log
                .iter()
                .map(|&(step, k)| Hazard {
                    kind: HazardKind::ALL[k],
                    process: Default::default(),
                    step,
                    detail: String::new(),
                })
                .collect();
            let (kinds, starts) = kinds_by_step(&hazards, steps);
            for i in 0..steps + 2 {
                let filtered: Vec<HazardKind> = hazards
                    .iter()
                    .filter(|h| h.step == Some(i) && i < steps)
                    .map(|h| h.kind)
                    .collect();
                prop_assert_eq!(kinds_of_step(&kinds, &starts, i), &filtered[..], "step {}", i);
            }
        }
    }
}
