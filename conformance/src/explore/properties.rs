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
//!   owner freed (through any process's pointer), or through a VMM
//!   reservation after its `vmm_unmap` (cuMemUnmap: "the address range is
//!   converted to an address reservation"), fails or is logged;
//! - attributes: `cuPointerGetAttribute` on an allocation's own pointer
//!   answers as its page says: `MEMORY_TYPE` device memory for a device
//!   allocation, host for pinned host memory; `BUFFER_ID` "a buffer ID which
//!   is guaranteed to be unique within the process": one per live
//!   allocation, the same for every pointer into it;
//! - ordering: a read (a copy to the host, a device-to-device copy's
//!   source) is logged as `unsynchronized-read` exactly when the order the
//!   CUDA documents give device work ([`super::ordering`]: streams, the
//!   legacy stream's implicit synchronization, event records and waits,
//!   host synchronizations) does not put every write of its bytes before
//!   it;
//! - coherence: a read those documents order after every write of its
//!   bytes returns the last bytes written there, through any process
//!   sharing the memory (kernels on any stream and copies included),
//!   whatever the simulator's own hazard log says; only a read of
//!   unordered bytes, or one the log calls undefined for another reason
//!   (an access after close or free), is not judged.
//!
//! Where the dialect's simulator profile makes another choice than the
//! measured CUDA defaults (`interior_handle` in the HIP profile), the model
//! follows the backend's choice ([`Choices`]), not the dialect's name.

use super::ordering::{Clock, Order, Stamp};
use ipc_harness::machine::{Hazard, HazardKind};
use ipc_harness::scenario::{self, ExecOptions, Op, Ref, Scenario};
use ipc_harness::trace::{StepOutcome, ValueSummary};
use ipc_harness::{
    ApiError, Backend, CallKind, Dialect, ErrorKind, MemKind, PointerAttribute, Status, Trace,
};
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
    /// Pointer attributes answer as their documentation says.
    Attributes,
    /// A read is logged as racy exactly when the documents order no
    /// synchronization between it and a write of its bytes.
    Ordering,
    Coherence,
    /// The simulator and the real driver disagree.
    Differential,
    /// The real backend's harness failed at a step (a Broken step, the
    /// process lost): not a difference of the simulator's; the steps from
    /// there on are not compared, and the case wants a run once the
    /// harness is fixed.
    Harness,
}

impl Property {
    pub const ALL: [Property; 9] = [
        Property::Robustness,
        Property::Determinism,
        Property::DocumentedReturns,
        Property::Conservation,
        Property::Attributes,
        Property::Ordering,
        Property::Coherence,
        Property::Differential,
        Property::Harness,
    ];

    /// Whether it is found by running the case on the real backend too
    /// (its finding file says `--backend cuda` and shows both runs).
    pub fn needs_real(self) -> bool {
        matches!(self, Property::Differential | Property::Harness)
    }

    pub fn name(self) -> &'static str {
        match self {
            Property::Robustness => "robustness",
            Property::Determinism => "determinism",
            Property::DocumentedReturns => "documented-returns",
            Property::Conservation => "conservation",
            Property::Attributes => "attributes",
            Property::Ordering => "ordering",
            Property::Coherence => "coherence",
            Property::Differential => "differential",
            Property::Harness => "harness",
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
    // Pool memory its exporter freed, reached over the peer link.
    const FREED_PEER: &str = "pool.lifetime.import-after-exporter-free-peer";
    const RT_OPEN: &str = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html (cudaIpcOpenMemHandle)";
    const DRV_OPEN: &str =
        "https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html (cuIpcOpenMemHandle)";
    // HIP has no code for a contained fault; the clause runs in the CUDA
    // dialects only.
    let freed_peer = (dialect != Dialect::Hip).then_some((Contained, Clause(FREED_PEER)));
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
        (CallKind::Read | CallKind::Write | CallKind::Memset, _) => [
            (InvalidValue, Clause("mem.close.use-after-close")),
            (InvalidValue, Clause("mem.suballoc.memcpy-bounded")),
        ]
        .into_iter()
        .chain(freed_peer)
        .collect(),
        // A device-to-device or peer copy through a closed or freed mapping
        // fails as the memcpy of `read` does.
        (CallKind::CopyDevice | CallKind::CopyPeer, _) => [
            (InvalidValue, Clause("mem.copy.from-closed-mapping")),
            (InvalidValue, Clause("mem.close.use-after-close")),
        ]
        .into_iter()
        .chain(freed_peer)
        .collect(),
        // A status, not a failure: the stream's work has not completed.
        (CallKind::StreamQuery, _) => vec![(
            NotReady,
            Clause("event.stream.record-on-stream-covers-its-work"),
        )],
        (CallKind::DeviceRead, _) => [
            (
                IllegalAddress,
                Clause("mem.lifetime.kernel-read-after-free"),
            ),
            (IllegalAddress, Clause("mem.close.kernel-read-after-close")),
        ]
        .into_iter()
        .chain(freed_peer)
        .collect(),
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
        (CallKind::EnablePeerAccess, Dialect::Runtime) => vec![
            (PeerAccessAlreadyEnabled, Clause("multidev.peer.enable")),
            (PeerAccessUnsupported, Clause("multidev.peer.enable-self")),
            (
                IncompatibleDriverContext,
                Clause("multidev.peer.enable-from-created-context"),
            ),
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
    /// What allocated it.
    kind: Option<MemKind>,
    /// The process that allocated it.
    owner: usize,
    /// Freed by its owner, or written where the model cannot follow, or by
    /// writes the documents leave unordered: what a read returns is no
    /// longer judged.
    unjudged: bool,
    /// Freed by its owner, written by a process whose order the model
    /// does not follow, or by a kernel (or work queued after it) that its
    /// process's end may have left running: whether a read of it is racy
    /// is no longer judged.
    unordered: bool,
    /// Freed by its owner: a write through a pointer to it lands wherever
    /// that address is now.
    freed: bool,
    /// Writes in order: `[start, end)` set to the bytes, by the device
    /// write `Stamp` (`None`: made where the model follows no order).
    writes: Vec<(u64, u64, WriteBytes, Option<Stamp>)>,
}

#[derive(Debug, Clone)]
enum WriteBytes {
    Fill(u8),
    Pattern(Vec<u8>),
    /// What a copy brought: a byte, or [`UNKNOWN`] where the source's
    /// bytes were not known.
    Copied(Vec<u16>),
}

/// A byte the model does not know.
const UNKNOWN: u16 = u16::MAX;

/// A byte that timing decides: written by writes unordered with one
/// another, or copied by a read that raced with a write of its source.
const TIMING: u16 = u16::MAX - 1;

impl Object {
    /// Record a write; false when it reaches past the object (it landed in
    /// whatever the address holds now: a neighbour, another allocation).
    fn write(&mut self, at: u64, bytes: WriteBytes, len: u64, stamp: Option<Stamp>) -> bool {
        if at.saturating_add(len) > self.size {
            return false;
        }
        self.writes.push((at, at + len, bytes, stamp));
        true
    }

    /// Whether what a read of `len` bytes at `start`, ordered after
    /// `clock`, returns is timing: a write of them is not ordered before
    /// it, or they are [`TIMING`] bytes.
    fn timing(&self, start: u64, len: u64, clock: &Clock) -> bool {
        self.unordered_write(start, start.saturating_add(len), clock)
            .is_some()
            || self.known_bytes(start, len).contains(&TIMING)
    }

    /// The writes of `[start, end)` that `clock` is not ordered after.
    fn unordered_write(&self, start: u64, end: u64, clock: &Clock) -> Option<Stamp> {
        self.writes
            .iter()
            .filter(|(s, e, _, _)| *s < end && start < *e)
            .filter_map(|w| w.3)
            .find(|&st| !clock.covers(st))
    }

    /// The bytes last written at `[start, start + len)`, [`UNKNOWN`] where
    /// nothing was (or past the object's end), [`TIMING`] where timing
    /// decides.
    fn known_bytes(&self, start: u64, len: u64) -> Vec<u16> {
        let end = start.saturating_add(len).min(self.size.max(start));
        let mut want = vec![UNKNOWN; len as usize];
        for (s, e, w) in self.writes.iter().map(|(s, e, w, _)| (s, e, w)) {
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
                WriteBytes::Copied(c) => {
                    let c = c.get((from - s) as usize..).unwrap_or_default();
                    for (x, b) in span.iter_mut().zip(c) {
                        *x = *b;
                    }
                }
            }
        }
        want
    }

    /// The byte last written at `at`, if any.
    #[cfg(test)]
    fn byte(&self, at: u64) -> Option<u8> {
        self.writes
            .iter()
            .rev()
            .find(|(s, e, _, _)| at >= *s && at < *e)
            .and_then(|(s, _, w, _)| match w {
                WriteBytes::Fill(b) => Some(*b),
                WriteBytes::Pattern(p) => Some(p[(at - s) as usize]),
                WriteBytes::Copied(c) => u8::try_from(c[(at - s) as usize]).ok(),
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
        let want = self.known_bytes(start, got.len() as u64);
        got.iter()
            .zip(&want)
            .position(|(b, w)| *w <= 0xff && *w != u16::from(*b))
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
    /// Kernel writes (`slow_fill`, `kernel_fill`, `kernel_iota`) and the
    /// object they write: their bytes may not have landed until a host
    /// saw them complete.
    kernels: Vec<(usize, usize, Stamp)>,
    /// Processes that crashed (rather than exited).
    crashed: HashSet<usize>,
    /// Binding of an event handle -> the process that exported it.
    event_exporter: HashMap<&'a str, usize>,
    /// The documents' order of device work so far.
    order: Order,
    /// (process, event binding) -> the event (`Order`'s number): made by
    /// `event_create`, or the exporter's event an `ipc_open_event` opened.
    events: HashMap<(usize, &'a str), usize>,
    /// Event handle label -> the event its bytes open (the last
    /// `ipc_get_event` that gave those bytes).
    handle_event: HashMap<&'a str, usize>,
    /// Processes that made or switched to another context: the bytes an
    /// `ipc_get_event` gives there may name another context's event
    /// (event.context.get-from-context-with-ipc-event), so the model does
    /// not say which event they open.
    contexts: HashSet<usize>,
    /// Processes that used an event the model does not know: their reads
    /// and writes are not judged for ordering.
    order_lost: HashSet<usize>,
    /// (process, object) -> the label of the `BUFFER_ID` its owner's
    /// pointers answered, while the object lives; and back.
    buffer_ids: HashMap<(usize, usize), &'a str>,
    buffer_objects: HashMap<(usize, &'a str), usize>,
    /// Pool export data label -> the pool allocation it exports.
    pool_exports: HashMap<&'a str, usize>,
    /// (process, VA binding) a `vmm_unmap` of the whole mapping there
    /// succeeded for, until a `vmm_map` maps it again (or its reservation
    /// is freed): an access through it must fail or be logged.
    unmapped: HashSet<(usize, &'a str)>,
    /// Device-to-device copies: (source object, start, end, the copy's
    /// stamp, where it wrote). A write of the source that is not ordered
    /// after the copy races with its read: the destination's bytes are then
    /// not judged, and timing.
    copies: Vec<(usize, u64, u64, Stamp, Option<CopyTarget>)>,
}

/// Where a device-to-device copy wrote: the destination object and the
/// copy's place among that object's writes.
type CopyTarget = (usize, usize);

impl<'a> Model<'a> {
    /// A device write by process `q` (stamp `stamp`, ordered after
    /// `after`) of `bytes` at `[start, start + len)` of object `o`. Where an
    /// earlier write there is not ordered before it, which lands last is
    /// timing; where a copy read the bytes and is not ordered before it,
    /// what the copy took is timing: those bytes are no longer judged, and
    /// are [`TIMING`] bytes. Returns where in the object's writes it went;
    /// `None` when it reaches past the object.
    #[allow(clippy::too_many_arguments)]
    fn device_write(
        &mut self,
        q: usize,
        o: usize,
        start: u64,
        len: u64,
        bytes: WriteBytes,
        stamp: Stamp,
        after: &Clock,
    ) -> Option<usize> {
        let end = start.saturating_add(len);
        // The spans an earlier write not ordered before this one shares.
        let races: Vec<(u64, u64)> = self.objects[o]
            .writes
            .iter()
            .filter(|w| w.0 < end && start < w.1)
            .filter(|w| w.3.is_some_and(|st| !after.covers(st)))
            .map(|w| (w.0.max(start), w.1.min(end)))
            .collect();
        if !races.is_empty() {
            self.objects[o].unjudged = true;
        }
        let raced: Vec<(usize, usize)> = self
            .copies
            .iter()
            .filter(|c| c.0 == o && c.1 < end && start < c.2 && !after.covers(c.3))
            .filter_map(|c| c.4)
            .collect();
        for (dst, at) in raced {
            let object = &mut self.objects[dst];
            object.unjudged = true;
            if let Some(w) = object.writes.get_mut(at) {
                w.2 = WriteBytes::Copied(vec![TIMING; (w.1 - w.0) as usize]);
            }
        }
        if self.lost.contains(&q) || self.order_lost.contains(&q) {
            self.objects[o].unordered = true;
        }
        let object = &mut self.objects[o];
        if !object.write(start, bytes, len, Some(stamp)) {
            return None;
        }
        let at = object.writes.len() - 1;
        for (from, to) in races {
            let timing = WriteBytes::Copied(vec![TIMING; (to - from) as usize]);
            object.write(from, timing, to - from, None);
        }
        Some(at)
    }

    /// Process `p` stops running (exit, crash, its context destroyed) with
    /// kernel writes the hosts have not seen complete: whether they land
    /// before another process reads, and whether the end orders them
    /// before that read (not for a kernel still running: the simulator's
    /// clock says which), is not modelled, so their objects are no longer
    /// judged for coherence or ordering.
    fn drop_pending_kernels(&mut self, p: usize) {
        let order = &self.order;
        let running: Vec<Stamp> = self
            .kernels
            .iter()
            .filter(|k| k.0 == p && !order.host_covers(k.2))
            .map(|k| k.2)
            .collect();
        // The kernel's object, and whatever its stream wrote after it.
        let after_running = |st: Stamp| {
            running.iter().any(|k| st.lane == k.lane && st.n >= k.n) && !order.host_covers(st)
        };
        for object in &mut self.objects {
            // Ending the process may stop the work before its bytes land (a
            // crash mid-`slow_fill` left the old bytes on the GPU): which
            // bytes a later read finds is timing.
            let mut pending = false;
            for w in object
                .writes
                .iter_mut()
                .filter(|w| w.3.is_some_and(after_running))
            {
                w.2 = WriteBytes::Copied(vec![TIMING; (w.1 - w.0) as usize]);
                pending = true;
            }
            if pending {
                object.unjudged = true;
                object.unordered = true;
            }
        }
        self.kernels.retain(|k| k.0 != p);
    }

    /// Process `p` freed pointer `label`: its own allocation is freed (no
    /// longer judged; an access to it must be logged), an imported pointer
    /// no longer reaches the exporter's.
    fn free_pointer(&mut self, p: usize, label: &str) {
        let Some(&o) = self.label_object.get(label) else {
            return;
        };
        if self.objects[o].owner != p {
            self.label_object.remove(label);
            return;
        }
        let object = &mut self.objects[o];
        object.unjudged = true;
        object.unordered = true;
        object.freed = true;
        self.freed_objects.insert(o);
        // Its buffer id is no longer compared.
        if let Some(id) = self.buffer_ids.remove(&(p, o)) {
            self.buffer_objects.remove(&(p, id));
        }
    }

    /// The event `name` of process `p` stands for, if the model knows it.
    fn event(&self, p: usize, name: &str) -> Option<usize> {
        self.events.get(&(p, name)).copied()
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
    model_trace(scenario, trace, dialect, choices, None)
}

/// Per step of `trace`, whether it is a read whose bytes the documents
/// leave to timing: a write of them is not ordered before it (another
/// process's or stream's work, work an exited process left running), or
/// the bytes it reaches were written by writes unordered with one another,
/// or by a copy whose own read of its source raced with a write. Which
/// bytes such a read returns is timing on a real GPU: the differential
/// compares their length only (`explore::case_differences`).
pub fn timing_reads(
    scenario: &Scenario,
    trace: &Trace,
    dialect: Dialect,
    choices: &Choices,
) -> Vec<bool> {
    let mut timing = vec![false; trace.steps.len()];
    model_trace(scenario, trace, dialect, choices, Some(&mut timing));
    timing
}

/// [`check_trace`], noting in `timing` (when given) the steps
/// [`timing_reads`] describes.
fn model_trace(
    scenario: &Scenario,
    trace: &Trace,
    dialect: Dialect,
    choices: &Choices,
    mut timing: Option<&mut Vec<bool>>,
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
        order: Order::new(scenario.processes.len()),
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
                let sticky = kind.is_some_and(is_sticky);
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
                // The other processes are ordered after its ended work.
                m.order.host_waits_for_all(p);
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
        let answered = matches!(
            rec.outcome,
            StepOutcome::Ok { .. } | StepOutcome::Error { .. }
        );
        let ok = ok_value.is_some();
        // The order of device work: streams, events, host synchronizations
        // (the reads and writes themselves are judged below, per op).
        match &step.op {
            Op::Sync if ok => m.order.host_waits_for_all(p),
            // cudaFree synchronizes first when it accepts the pointer; a
            // free it refuses returns at once
            // (mem.lifetime.refused-free-does-not-wait).
            Op::Free { .. } if ok => m.order.host_waits_for_all(p),
            Op::StreamCreate { flags } if ok => {
                if let Some(b) = &step.bind {
                    let nonblocking = flags & ipc_harness::stream_flags::NON_BLOCKING != 0;
                    m.order.create_stream(p, b, nonblocking);
                }
            }
            Op::StreamSync { stream } | Op::StreamQuery { stream } if ok => {
                m.order.host_waits_for(p, Some(stream))
            }
            Op::EventCreate { .. } if ok => {
                if let Some(b) = &step.bind {
                    let e = m.order.new_event();
                    m.events.insert((p, b.as_str()), e);
                }
            }
            Op::EventRecord { event, stream } if ok => match m.event(p, event) {
                Some(e) => m.order.record(p, stream.as_deref(), e),
                None => _ = m.order_lost.insert(p),
            },
            Op::StreamWait { event, stream } if ok => match m.event(p, event) {
                Some(e) => m.order.wait(p, stream.as_deref(), e),
                None => _ = m.order_lost.insert(p),
            },
            Op::EventSync { event } | Op::EventQuery { event } if ok => match m.event(p, event) {
                Some(e) => m.order.host_waits_for_event(e),
                None => _ = m.order_lost.insert(p),
            },
            Op::IpcGetEvent { event, .. } => {
                if let (Some(ValueSummary::Handle { label }), Some(b)) = (ok_value, &step.bind) {
                    m.handle_label.insert(b.as_str(), label.as_str());
                    match m.event(p, event).filter(|_| !m.contexts.contains(&p)) {
                        Some(e) => m.handle_event.insert(label.as_str(), e),
                        None => m.handle_event.remove(label.as_str()),
                    };
                }
            }
            Op::IpcOpenEvent { handle, .. } if ok => {
                let label = m.handle_label.get(handle.as_str()).copied();
                let e = label.and_then(|l| m.handle_event.get(l)).copied();
                if let (Some(b), Some(e)) = (&step.bind, e) {
                    m.events.insert((p, b.as_str()), e);
                }
            }
            Op::CtxCreate { .. }
            | Op::CtxSet { .. }
            | Op::PrimaryCtx { .. }
            | Op::SetDevice { .. }
                if ok =>
            {
                m.contexts.insert(p);
            }
            Op::VmmUnmap {
                va: Ref::Name(n), ..
            } if ok => {
                m.unmapped.insert((p, n.as_str()));
            }
            Op::VmmMap {
                va: Ref::Name(n), ..
            }
            | Op::VmmAddressFree {
                va: Ref::Name(n), ..
            } if ok => {
                m.unmapped.remove(&(p, n.as_str()));
            }
            _ => {}
        }
        // A data access through a reservation whose mapping was unmapped.
        let through_unmapped = data_pointers(&step.op)
            .into_iter()
            .flatten()
            .any(|r| matches!(r, Ref::Name(n) if m.unmapped.contains(&(p, n.as_str()))));
        let access_logged = here.iter().any(|k| {
            matches!(
                k,
                HazardKind::AccessAfterClose
                    | HazardKind::AccessAfterFree
                    | HazardKind::OutsideOwnRange
            )
        });
        if through_unmapped && ok && !access_logged && !lost {
            fail(
                Property::Conservation,
                "an access through a VMM reservation after its vmm_unmap succeeded and was not logged"
                    .into(),
            );
        }
        match &step.op {
            Op::Malloc { size, kind } => {
                if let (Some(ValueSummary::Ptr { label }), Some(b)) = (ok_value, &step.bind) {
                    m.reused_va(p);
                    m.freed.remove(&(p, label.as_str()));
                    m.objects.push(Object {
                        size: *size,
                        owner: p,
                        kind: Some(*kind),
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
                // A kernel still running at the exit: whether it ended
                // before another process reads is timing, not judged.
                m.drop_pending_kernels(p);
                if ok_value.is_some() {
                    // The other processes' later steps are ordered after
                    // the process's device work that has ended.
                    m.order.host_waits_for_all(p);
                }
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
                        m.free_pointer(p, l);
                        m.freed.insert(key);
                    }
                }
            }
            Op::IpcGetEvent { .. } => {
                if let (Some(_), Some(b)) = (ok_value, &step.bind) {
                    m.event_exporter.insert(b.as_str(), p);
                }
            }
            // Memory pools: an allocation is an object; its export data
            // names it, and a pointer imported from the data reaches it
            // (cudaMemPoolImportPointer), so coherence judges reads through
            // the import.
            Op::PoolAlloc { size, .. } => {
                if let (Some(ValueSummary::Ptr { label }), Some(b)) = (ok_value, &step.bind) {
                    m.reused_va(p);
                    m.freed.remove(&(p, label.as_str()));
                    m.objects.push(Object {
                        size: *size,
                        owner: p,
                        kind: Some(MemKind::StreamOrdered),
                        ..Object::default()
                    });
                    m.label_object.insert(label.as_str(), m.objects.len() - 1);
                    m.label_offset.remove(label.as_str());
                    m.imported.remove(label.as_str());
                    m.binding.insert(b.as_str(), (label.as_str(), 0));
                }
            }
            Op::PoolExportPtr { ptr } => {
                if let (Some(ValueSummary::Handle { label }), Some(b)) = (ok_value, &step.bind) {
                    m.handle_label.insert(b.as_str(), label.as_str());
                    let object = resolve(&m, ptr)
                        .filter(|&(_, off)| off == 0)
                        .and_then(|(l, _)| m.label_object.get(l).copied());
                    match object {
                        Some(o) => m.pool_exports.insert(label.as_str(), o),
                        None => m.pool_exports.remove(label.as_str()),
                    };
                }
            }
            Op::PoolImportPtr { data, .. } => {
                if let (Some(ValueSummary::Ptr { label }), Some(b)) = (ok_value, &step.bind) {
                    m.reused_va(p);
                    m.freed.remove(&(p, label.as_str()));
                    let object = m
                        .handle_label
                        .get(data.as_str())
                        .and_then(|l| m.pool_exports.get(l))
                        .copied();
                    match object {
                        Some(o) => m.label_object.insert(label.as_str(), o),
                        None => m.label_object.remove(label.as_str()),
                    };
                    m.label_offset.remove(label.as_str());
                    m.binding.insert(b.as_str(), (label.as_str(), 0));
                }
            }
            Op::PoolFree { ptr } if ok_value.is_some() => {
                if let (Some((l, 0)), true) = (resolve(&m, ptr), own_binding(ptr)) {
                    m.free_pointer(p, l);
                }
            }
            Op::PointerAttribute { ptr, attr } if ok_value.is_some() && !lost => {
                // Judged on an allocation's own pointers only (a mapping's
                // answers are measured by mem.pointer-attr.* clauses).
                let object = resolve(&m, ptr)
                    .filter(|_| own_binding(ptr) && !m.scrambled_all)
                    .and_then(|(l, _)| {
                        let o = *m.label_object.get(l)?;
                        let own = !m.imported.contains(l)
                            && m.objects[o].owner == p
                            && !m.objects[o].freed;
                        own.then_some(o)
                    });
                if let Some(o) = object {
                    if let Some(message) = judge_attribute(&mut m, p, o, *attr, ok_value) {
                        fail(Property::Attributes, message);
                    }
                }
            }
            Op::CtxDestroy { .. } if ok_value.is_some() => {
                // Its allocations and mappings go with it; the model
                // does not follow contexts. Its streams' work counts as
                // done (the simulator's choice), but whether the bytes
                // landed is not followed.
                m.drop_pending_kernels(p);
                m.order.host_waits_for_all(p);
                m.lost.insert(p);
            }
            Op::SlowFill { .. } | Op::KernelPattern { .. } | Op::Fill { .. } | Op::Write { .. }
                if ok_value.is_some() =>
            {
                if let Some(w) = DeviceWrite::of(&step.op) {
                    if matches!(step.op, Op::Write { .. }) {
                        // A copy from pageable memory synchronizes the
                        // legacy stream first.
                        m.order.host_waits_for(p, None);
                    }
                    if let Some((stamp, after)) = m.order.write(p, w.stream) {
                        let mut landed = None;
                        access(
                            &mut m,
                            &mut fail,
                            (p, lost, true),
                            w.ptr,
                            w.at,
                            here,
                            |m, o, base| {
                                let start = base.saturating_add(w.at);
                                let placed = m
                                    .device_write(p, o, start, w.len, w.bytes, stamp, &after)
                                    .is_some();
                                m.scrambled_all |= !placed;
                                if placed {
                                    landed = Some(o);
                                }
                            },
                        );
                        // A kernel's bytes are modelled as written now: a
                        // read not ordered after it is not judged, an
                        // ordered one finds them landed.
                        if let (Some(o), true) = (landed, w.kernel) {
                            m.kernels.push((p, o, stamp));
                        }
                    }
                }
            }
            Op::Read {
                ptr, offset, len, ..
            }
            | Op::DeviceRead {
                ptr, offset, len, ..
            } if *len > 0 => {
                if let Some(ValueSummary::Bytes { pattern }) = ok_value {
                    // A copy to the host: work on the legacy stream, which
                    // the host then waits for.
                    let clock = m.order.read(p, None).unwrap_or_default();
                    let mut verdicts = Vec::new();
                    let want_timing = timing.is_some();
                    let mut read_timing = false;
                    access(
                        &mut m,
                        &mut fail,
                        (p, lost, false),
                        ptr,
                        *offset,
                        here,
                        |m, o, base| {
                            let Some(got) = decode_pattern(pattern) else {
                                return;
                            };
                            let start = base.saturating_add(*offset);
                            let read = Read {
                                reader: p,
                                object: o,
                                start,
                                len: got.len() as u64,
                                clock: &clock,
                            };
                            verdicts = judge_read(m, &read, Some(&got), here).0;
                            if want_timing {
                                read_timing = m.objects[o].timing(start, got.len() as u64, &clock);
                            }
                        },
                    );
                    if let Some(t) = timing.as_deref_mut().and_then(|t| t.get_mut(i)) {
                        *t = read_timing;
                    }
                    if !lost {
                        for (property, message) in verdicts {
                            fail(property, message);
                        }
                    }
                    m.order.host_waits_for(p, None);
                }
            }
            Op::Copy { dst, src, len, .. } | Op::CopyPeer { dst, src, len, .. }
                if ok_value.is_some() && *len > 0 =>
            {
                let stream = match &step.op {
                    Op::Copy { stream, .. } => stream.as_deref(),
                    // cudaMemcpyPeer: on the legacy stream, after all of
                    // the process's work.
                    _ => {
                        m.order.serialize_all(p);
                        None
                    }
                };
                if let Some((stamp, after)) = m.order.write(p, stream) {
                    // The source, read as work on the copy's stream.
                    let mut copied = None;
                    let mut source = None;
                    let mut verdicts = Vec::new();
                    access(
                        &mut m,
                        &mut fail,
                        (p, lost, false),
                        src,
                        0,
                        here,
                        |m, o, base| {
                            let read = Read {
                                reader: p,
                                object: o,
                                start: base,
                                len: *len,
                                clock: &after,
                            };
                            let (v, known) = judge_read(m, &read, None, here);
                            verdicts = v;
                            source = Some((o, base));
                            if known {
                                copied = Some(m.objects[o].known_bytes(base, *len));
                            } else if m.objects[o].timing(base, *len, &after) {
                                // What a racing read takes is timing.
                                copied = Some(vec![TIMING; *len as usize]);
                            }
                        },
                    );
                    if !lost {
                        for (property, message) in verdicts {
                            fail(property, message);
                        }
                    }
                    let copied = copied.unwrap_or_else(|| vec![UNKNOWN; *len as usize]);
                    let mut target = None;
                    access(
                        &mut m,
                        &mut fail,
                        (p, lost, true),
                        dst,
                        0,
                        here,
                        |m, o, base| {
                            let bytes = WriteBytes::Copied(copied);
                            let placed = m.device_write(p, o, base, *len, bytes, stamp, &after);
                            m.scrambled_all |= placed.is_none();
                            target = placed.map(|at| (o, at));
                        },
                    );
                    if let Some((o, base)) = source {
                        m.copies
                            .push((o, base, base.saturating_add(*len), stamp, target));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A read of `len` bytes at `start` of `object` by work of `reader` that
/// is ordered after `clock`.
struct Read<'c> {
    reader: usize,
    object: usize,
    start: u64,
    len: u64,
    clock: &'c Clock,
}

/// Judge a read that succeeded: ordering (whether the simulator logged it
/// as unsynchronized exactly when the documents leave a write of its bytes
/// unordered before it) and, with the bytes `got`, coherence. Returns the
/// violations and whether the bytes it read are known (ordered, followed).
fn judge_read(
    m: &Model,
    r: &Read,
    got: Option<&[u8]>,
    here: &[HazardKind],
) -> (Vec<(Property, String)>, bool) {
    let object = &m.objects[r.object];
    let end = r.start.saturating_add(r.len);
    // The read is undefined for another reason: conservation judges it.
    let undefined = here.iter().any(|k| {
        matches!(
            k,
            HazardKind::AccessAfterClose
                | HazardKind::AccessAfterFree
                | HazardKind::OutsideOwnRange
        )
    });
    let followed = !m.scrambled_all
        && !m.scrambled.contains(&object.owner)
        && !undefined
        && !object.unordered
        && !m.order_lost.contains(&r.reader);
    let unordered = object.unordered_write(r.start, end, r.clock);
    let logged = here.contains(&HazardKind::UnsynchronizedRead);
    let mut out = Vec::new();
    if followed && end <= object.size {
        match (unordered, logged) {
            (Some(w), false) => out.push((
                Property::Ordering,
                format!(
                    "nothing orders this read after write {} of lane {} to these bytes (no wait on an event recorded after it on its stream, no synchronization with it), and no unsynchronized-read was logged",
                    w.n, w.lane
                ),
            )),
            (None, true) => out.push((
                Property::Ordering,
                "an unsynchronized-read was logged, but the documents order this read after every write of these bytes".into(),
            )),
            _ => {}
        }
    }
    let known = followed && unordered.is_none() && !object.unjudged;
    if let (true, Some(got)) = (known, got) {
        if let Some((k, b, want)) = object.first_unlike(r.start, got) {
            let at = r.start + k as u64;
            out.push((
                Property::Coherence,
                format!("byte {k} read {b:02x}, but {want:02x} was written last (object offset {at}), and the read is ordered after that write"),
            ));
        }
    }
    (out, known)
}

/// What `cuPointerGetAttribute(attr)` of a pointer into live object `o`,
/// asked by its owner `p`, answered (`value`), against its page
/// (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html>,
/// cuPointerGetAttribute): a broken promise in words.
fn judge_attribute<'a>(
    m: &mut Model<'a>,
    p: usize,
    o: usize,
    attr: PointerAttribute,
    value: Option<&'a ValueSummary>,
) -> Option<String> {
    match (attr, value?) {
        (PointerAttribute::MemoryType, ValueSummary::Int { value }) => {
            // CUmemorytype: 1 host, 2 device.
            let want = match m.objects[o].kind? {
                MemKind::Device | MemKind::StreamOrdered => 2,
                MemKind::PinnedHost => 1,
                // Managed memory: which type it reads as is measured
                // (mem.pointer-attr.*), not documented.
                _ => return None,
            };
            (*value != want).then(|| {
                format!("MEMORY_TYPE answered {value}, but the allocation is of type {want} (CUmemorytype)")
            })
        }
        (PointerAttribute::BufferId, ValueSummary::Handle { label }) => {
            let id = label.as_str();
            if let Some(&before) = m.buffer_ids.get(&(p, o)) {
                if before != id {
                    return Some(format!(
                        "BUFFER_ID answered {id}, but {before} for the same allocation before"
                    ));
                }
            }
            if let Some(&other) = m.buffer_objects.get(&(p, id)) {
                if other != o {
                    return Some(format!(
                        "BUFFER_ID answered {id}, the id of another live allocation of the process (unique within the process, its page says)"
                    ));
                }
            }
            m.buffer_ids.insert((p, o), id);
            m.buffer_objects.insert((p, id), o);
            None
        }
        _ => None,
    }
}

/// A write a step makes on the device: through `ptr` + `at`, `len`
/// bytes, on `stream` (`None`: the legacy stream).
struct DeviceWrite<'s> {
    ptr: &'s Ref,
    at: u64,
    len: u64,
    bytes: WriteBytes,
    stream: Option<&'s str>,
    /// A kernel (`slow_fill`, `kernel_fill`, `kernel_iota`), rather than a
    /// memset or a copy from the host.
    kernel: bool,
}

impl<'s> DeviceWrite<'s> {
    /// The write `op` makes; `None` for another op, or a memset or copy of
    /// no bytes (no work is queued then).
    fn of(op: &'s Op) -> Option<DeviceWrite<'s>> {
        let w = match op {
            Op::SlowFill {
                ptr,
                value,
                at,
                resolved_len,
                stream,
                ..
            } => DeviceWrite {
                ptr,
                at: at.unwrap_or(0),
                len: *resolved_len,
                bytes: WriteBytes::Fill(*value),
                stream: stream.as_deref(),
                kernel: true,
            },
            Op::KernelPattern {
                ptr,
                content,
                at,
                resolved_len,
                ..
            } => DeviceWrite {
                ptr,
                at: at.unwrap_or(0),
                len: *resolved_len,
                bytes: WriteBytes::Pattern(content.bytes(*resolved_len)),
                stream: None,
                kernel: true,
            },
            // cudaMemset: work on the legacy stream.
            Op::Fill {
                ptr,
                value,
                at,
                resolved_len,
                ..
            } if *resolved_len > 0 => DeviceWrite {
                ptr,
                at: at.unwrap_or(0),
                len: *resolved_len,
                bytes: WriteBytes::Fill(*value),
                stream: None,
                kernel: false,
            },
            Op::Write {
                ptr,
                offset,
                pattern,
            } if !pattern.is_empty() => {
                let bytes = pattern.to_bytes();
                DeviceWrite {
                    ptr,
                    at: *offset,
                    len: bytes.len() as u64,
                    bytes: WriteBytes::Pattern(bytes),
                    stream: None,
                    kernel: false,
                }
            }
            _ => return None,
        };
        Some(w)
    }
}

/// The pointers an op reads or writes memory through.
fn data_pointers(op: &Op) -> [Option<&Ref>; 2] {
    match op {
        Op::Fill { ptr, .. }
        | Op::Write { ptr, .. }
        | Op::Read { ptr, .. }
        | Op::DeviceRead { ptr, .. }
        | Op::SlowFill { ptr, .. }
        | Op::KernelPattern { ptr, .. } => [Some(ptr), None],
        Op::Copy { dst, src, .. } | Op::CopyPeer { dst, src, .. } => [Some(dst), Some(src)],
        _ => [None, None],
    }
}

/// The errors that leave a process failing every later call with them: a
/// fault (mem.close.kernel-read-after-close) and a contained fault
/// (pool.lifetime.import-after-exporter-free-peer).
fn is_sticky(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::IllegalAddress | ErrorKind::Contained)
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
        Some(o) if !(write && m.objects[o].freed) => apply(m, o, off),
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
            proptest::collection::vec(prop_oneof![(0u16..4), Just(UNKNOWN)], 0..40)
                .prop_map(WriteBytes::Copied),
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
                    WriteBytes::Copied(mut c) => {
                        c.resize(len as usize, 1);
                        WriteBytes::Copied(c)
                    }
                    fill => fill,
                };
                object.write(at, bytes, len, None);
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

#[cfg(test)]
mod judged_reads {
    use super::*;
    use ipc_harness::scenario::{execute, parse, ExecOptions};
    use ipc_mock_driver::SimBackend;

    /// The properties `text`, run on the simulator, breaks once `edit`
    /// changed its trace.
    fn broken(text: &str, edit: impl FnOnce(&mut Trace)) -> Vec<Property> {
        let scenario = parse(text, std::path::Path::new("t.ipc")).expect("parses");
        let opts = ExecOptions::default();
        let mut trace = execute(&scenario, &SimBackend::default(), &opts).trace;
        edit(&mut trace);
        check_trace(&scenario, &trace, opts.dialect, &Choices::default())
            .iter()
            .map(|v| v.property)
            .collect()
    }

    /// The last step read `pattern` instead.
    fn last_read(pattern: &str) -> impl FnOnce(&mut Trace) + '_ {
        move |t| {
            if let Some(last) = t.steps.last_mut() {
                last.outcome = StepOutcome::Ok {
                    value: ValueSummary::Bytes {
                        pattern: pattern.into(),
                    },
                };
            }
        }
    }

    const POOL: &str = "devices 1\nprocess a device=0\nprocess b device=0\n\
        a: pl = pool_create types=posix_fd\na: f = pool_export pl\na: g = send_fd f -> b\n\
        b: ipl = pool_import g\na: x = pool_alloc pl 2MiB\na: fill x 0x5c len=2MiB\na: sync\n\
        a: d = pool_export_ptr x\na: send d -> b\nb: y = pool_import_ptr ipl d\nb: read y 0 4\n";

    /// A pointer imported from a pool's export data reaches the exporter's
    /// allocation: a read through it after the exporter's synchronized fill
    /// must return the fill's bytes.
    #[test]
    fn a_read_through_a_pool_import_is_judged_by_the_exporters_bytes() {
        assert_eq!(broken(POOL, |_| {}), []);
        assert_eq!(broken(POOL, last_read("5c*3 00")), [Property::Coherence]);
    }

    /// A kernel still running when its process crashed may never write:
    /// the importer's later read of its bytes is timing (compared by length
    /// only), while the same read after the exporter synchronised is not.
    #[test]
    fn bytes_of_work_a_crashed_process_left_running_are_timing() {
        let case = |wait: &str| {
            format!(
                "devices 1\nprocess a device=0\nprocess b device=0\n\
                 a: m = malloc 1000\na: fill m 0x5a\na: sync\na: h = ipc_get m\n\
                 a: send h -> b\nb: o = ipc_open h flags=lazy\n\
                 a: slow_fill m 0xb6 us=100000 len=1000\n{wait}\
                 a: e = event_create flags=interprocess,disable_timing\n\
                 a: ipc_get_event e out=null\nb: device_read o 0 16\n"
            )
        };
        let timing_of_last_read = |text: &str| {
            let scenario = parse(text, std::path::Path::new("t.ipc")).expect("parses");
            let opts = ExecOptions::default();
            let trace = execute(&scenario, &SimBackend::default(), &opts).trace;
            assert!(
                trace
                    .steps
                    .iter()
                    .any(|s| matches!(s.outcome, StepOutcome::Crash { .. })),
                "the NULL out pointer kills the runtime's process"
            );
            *timing_reads(&scenario, &trace, opts.dialect, &Choices::default())
                .last()
                .unwrap()
        };
        assert!(timing_of_last_read(&case("")));
        assert!(!timing_of_last_read(&case("a: sync\n")));
    }

    const HANDOFF: &str = "devices 1\nprocess a device=0\nprocess b device=0\n\
        a: m = malloc 2MiB\na: fill m 0x00\na: sync\na: h = ipc_get m\n\
        a: e = event_create flags=interprocess,disable_timing\na: eh = ipc_get_event e\n\
        a: send h -> b\na: send eh -> b\nb: p = ipc_open h\nb: x = ipc_open_event eh\n\
        a: s = stream_create flags=nonblocking\na: r = stream_create flags=nonblocking\n\
        a: slow_fill m 0x3c us=300000 len=2MiB stream=s\n";

    /// A read the documents order after a kernel must return its bytes and
    /// not be logged, whatever the log says; one they leave unordered (the
    /// event recorded on another stream) must be logged, and its bytes are
    /// not judged.
    #[test]
    fn reads_are_judged_by_the_documents_order() {
        let ordered =
            format!("{HANDOFF}a: event_record e stream=s\nb: event_sync x\nb: read p 0 4\n");
        assert_eq!(broken(&ordered, |_| {}), []);
        assert_eq!(broken(&ordered, last_read("00*4")), [Property::Coherence]);
        let wrong_stream =
            format!("{HANDOFF}a: event_record e stream=r\nb: event_sync x\nb: read p 0 4\n");
        assert_eq!(broken(&wrong_stream, |_| {}), []);
        assert_eq!(broken(&wrong_stream, last_read("3c*4")), []);
        let unlogged = |t: &mut Trace| t.hazards = Some(Vec::new());
        assert_eq!(broken(&wrong_stream, unlogged), [Property::Ordering]);
        let logged = |t: &mut Trace| {
            let step = t.steps.len() - 1;
            t.hazards = Some(vec![Hazard {
                kind: HazardKind::UnsynchronizedRead,
                process: 1,
                step: Some(step),
                detail: String::new(),
            }]);
        };
        assert_eq!(broken(&ordered, logged), [Property::Ordering]);
    }
}
