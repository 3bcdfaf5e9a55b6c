//! Tiers and profiles of the semantic choices.
//!
//! Every choice gets a [`Tier`] saying what its default value rests on: the
//! documents (`contract`), widely used software that depends on it although
//! the documents are silent (`relied-on`), or only what the measured driver
//! happens to do (`incidental`). A [`Profile`] is a whole set of choices:
//! `measured` (the defaults), `documented` (every choice the documents do
//! not promise set unlike the measured hardware) and `hip` (ROCm's sources).

use crate::backend::{SimBackend, SimConfig};
use crate::semantics::Semantics;
use crate::semantics::{
    DestroyPrimary, DriverFds, EventExporterExit, EventIpcTiming, EventOtherContext, EventReopen,
    ExportRule, ExporterCrashMemory, ExporterExit, FreeOfIpcPointer, FreeWhileMapped, FreedExport,
    GetNullOut, HandleStability, ImportRange, InteriorHandle, LazyPeerAccess, MemcpyBounds,
    OpenAddress, OpenFlags, PoolFreedPeerAccess, PoolImportFreed, PoolPtrReimport, PoolReimport,
    SetDestroyedContext, StaleHandle, StaleKernelRead, StaleMemset, StaleVmmHandle, Switch,
    UnmapQueuedWork, VaReuse, VaRewind, VmmCreateContext, VmmRangeBeforeAccess, VmmReserveVa,
};
use ipc_harness::{Dialect, ErrorKind};
use std::fmt;
use std::str::FromStr;

pub use ipc_harness::Tier;

/// A named set of semantic choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    /// The measured hardware: the defaults (the hip dialect runs with the
    /// HIP choices, [`Semantics::hip_profile`]).
    Measured,
    /// Every behaviour the documents do not promise chosen unlike the
    /// measured hardware ([`Semantics::documented`]), in every dialect.
    Documented,
    /// HIP as ROCm's sources implement it ([`Semantics::hip_profile`]), in
    /// every dialect.
    Hip,
}

impl Profile {
    pub const ALL: [Profile; 3] = [Profile::Measured, Profile::Documented, Profile::Hip];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Measured => "measured",
            Profile::Documented => "documented",
            Profile::Hip => "hip",
        }
    }

    /// One line for listings.
    pub fn summary(self) -> &'static str {
        match self {
            Profile::Measured => {
                "the measured hardware (the default; the hip dialect keeps ROCm's choices)"
            }
            Profile::Documented => {
                "only what the documents promise: every other choice set unlike the measured hardware"
            }
            Profile::Hip => "HIP as ROCm's sources implement it, in every dialect",
        }
    }

    /// The choices a machine of `dialect` runs with under this profile.
    pub fn semantics(self, dialect: Dialect) -> Semantics {
        self.config().semantics_for(dialect).clone()
    }

    /// The simulator's default machine with this profile's choices.
    pub fn config(self) -> SimConfig {
        let mut config = SimConfig::default();
        self.apply(&mut config);
        config
    }

    /// Set this profile's choices in `config`, leaving its machine (devices,
    /// peers) alone.
    pub fn apply(self, config: &mut SimConfig) {
        let (cuda, hip) = match self {
            Profile::Measured => (Semantics::default(), Semantics::hip_profile()),
            Profile::Documented => (Semantics::documented(), Semantics::documented()),
            Profile::Hip => (Semantics::hip_profile(), Semantics::hip_profile()),
        };
        config.semantics = cuda;
        config.hip_semantics = hip;
    }

    /// `(choice, value)` for every choice of the CUDA dialects this profile
    /// sets unlike `measured`.
    pub fn settings(self) -> Vec<(&'static str, String)> {
        let measured = Semantics::default();
        let mine = self.semantics(Dialect::Runtime);
        measured
            .describe()
            .into_iter()
            .zip(mine.describe())
            .filter(|(m, p)| m.value != p.value)
            .map(|(_, p)| (p.name, p.value))
            .collect()
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Profile, String> {
        Profile::ALL
            .into_iter()
            .find(|p| p.as_str() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown profile '{}' (valid: {})",
                    s.trim(),
                    Profile::ALL.map(Profile::as_str).join(", ")
                )
            })
    }
}

impl SimConfig {
    /// The default machine under `profile`.
    pub fn with_profile(profile: Profile) -> SimConfig {
        profile.config()
    }
}

impl SimBackend {
    /// The simulator under `profile` (for the roles API:
    /// `roles.run(&SimBackend::with_profile(Profile::Documented), &opts)`).
    pub fn with_profile(profile: Profile) -> SimBackend {
        SimBackend::new(profile.config())
    }
}

/// The tier of a choice's default value and what it rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChoiceTier {
    pub name: &'static str,
    pub tier: Tier,
    /// The document, or the software that depends on it, or what was measured.
    pub rests_on: &'static str,
}

const fn t(name: &'static str, tier: Tier, rests_on: &'static str) -> ChoiceTier {
    ChoiceTier {
        name,
        tier,
        rests_on,
    }
}

use Tier::{Contract, Incidental, ReliedOn};

/// Measured on the H100 and the 2 x H200; the documents are silent or say
/// the behaviour is undefined.
const MEASURED: &str = "measured only";

/// Every choice, in the order of [`Semantics::describe`].
pub const CHOICE_TIERS: &[ChoiceTier] = &[
    t("suballocation", Incidental, "the Programming Guide says cudaMalloc memory *may* be sub-allocated: allowed, not promised"),
    t("free_of_ipc_pointer", Incidental, "the documents say IPC memory must be freed with cudaIpcCloseMemHandle; a cudaFree of it is undefined"),
    t("free_while_mapped", Incidental, "documented as undefined behaviour"),
    t("memcpy_bounds", Incidental, MEASURED),
    t("sticky_errors", Contract, "cudaErrorIllegalAddress: the process is left in an inconsistent state and later CUDA calls return the same error"),
    t("import_range", Incidental, MEASURED),
    t("ipc_managed", Contract, "Programming Guide: the IPC API is not supported for cudaMallocManaged allocations (InvalidValue is among cudaIpcGetMemHandle's documented returns)"),
    t("ipc_pinned_host", Incidental, MEASURED),
    t("ipc_pool", Incidental, MEASURED),
    t("handle_stable", ReliedOn, "PyTorch torch/multiprocessing/reductions.py keys its cache of received CUDA storages by the handle bytes"),
    t("open_flags", Incidental, "the documents say flags must be cudaIpcMemLazyEnablePeerAccess; that other bits are ignored is measured only"),
    t("zero_handle_error", Incidental, MEASURED),
    t("garbage_handle_error", Incidental, MEASURED),
    t("open_in_exporter", Incidental, MEASURED),
    t("dead_handle_error", Incidental, MEASURED),
    t("reclaimed_export_error", Incidental, MEASURED),
    t("stale_handle", Incidental, MEASURED),
    t("freed_export", Incidental, MEASURED),
    t("va_reuse", Incidental, "the documents make no promise about addresses; the VA allocator's reuse order is measured only"),
    t("va_rewind", Incidental, MEASURED),
    t("device_read_buffer", Contract, "the suite's own copy kernel (docs/scenario-language.md, harness/src/cuda): not a driver behaviour"),
    t("exporter_exit", Incidental, MEASURED),
    t("exporter_crash_memory", Incidental, "measured both ways on one H200: which answer a run gets is timing"),
    t("reopen", Contract, "cudaIpcOpenMemHandle: a re-open in the same context increments the reference count and returns the existing pointer"),
    t("second_context", Contract, "cudaIpcOpenMemHandle: handles from one device may be opened by one context per device per other process (InvalidResourceHandle is among its documented returns)"),
    t("open_address", ReliedOn, "PyTorch torch/csrc/StorageSharing.cpp opens a storage's handle and uses the pointer as the exported allocation's base"),
    t("close_unopened", Incidental, MEASURED),
    t("get_null_out", Incidental, MEASURED),
    t("free_null", Contract, "cudaFree: if devPtr is 0, no operation is performed (the driver API's answer is measured)"),
    t("destroy_primary", Incidental, MEASURED),
    t("stale_kernel_read", Incidental, MEASURED),
    t("stale_memset", Incidental, MEASURED),
    t("set_destroyed_context", Incidental, MEASURED),
    t("event_unknown_flags", Contract, "cudaEventCreateWithFlags: InvalidValue is its documented answer to bad arguments"),
    t("event_ipc_timing", Incidental, "cudaIpcGetEventHandle requires interprocess and disable-timing; that creation already refuses is measured only"),
    t("event_get_not_interprocess", Incidental, MEASURED),
    t("event_get_null_out", Incidental, MEASURED),
    t("event_open_in_exporter", Incidental, MEASURED),
    t("event_bad_handle", Incidental, MEASURED),
    t("event_reopen", Incidental, MEASURED),
    t("event_after_exporter_destroy", Incidental, "documented as undefined behaviour"),
    t("event_dead_handle", Incidental, "documented as undefined behaviour"),
    t("event_exporter_exit", Incidental, MEASURED),
    t("event_exporter_crash", Incidental, MEASURED),
    t("event_get_imported", Incidental, MEASURED),
    t("event_other_context", Incidental, "cuStreamWaitEvent allows an event of another context; the crash is measured only"),
    t("elapsed_without_timing", Contract, "cudaEventElapsedTime: an event without timing, or not recorded, is cudaErrorInvalidResourceHandle"),
    t("vmm_fabric", Incidental, MEASURED),
    t("vmm_range_before_access", Incidental, MEASURED),
    t("vmm_access_before_set", Incidental, MEASURED),
    t("vmm_stale_handle", Incidental, "a released allocation handle dangles: undefined"),
    t("vmm_reserve_va", Incidental, MEASURED),
    t("driver_fds", Incidental, MEASURED),
    t("vmm_import_bad_fd", Incidental, MEASURED),
    t("interior_handle", Incidental, MEASURED),
    t("lazy_peer_access", Incidental, "the documents say a lazy open acts as if peer access were enabled; the hardware does not"),
    t("hidden_exporter_device", Contract, "cudaIpcOpenMemHandle can open handles to devices that may not be visible in the process calling the API"),
    t("enable_peer_self", Incidental, MEASURED),
    t("cross_pidns_ipc", Incidental, "no CUDA page names PID namespaces; UCX-Py's deployment guide asks only for a shared IPC namespace (https://ucx-py.readthedocs.io/en/latest/deployment.html); not measured yet"),
    t("vmm_create_context", ReliedOn, "NVIDIA cuda-samples Samples/3_CUDA_Features/memMapIPCDrv/memMapIpc.cpp destroys its contexts, then calls cuMemCreate (traced on 2 x H200: success)"),
    t("unmap_queued_work", Incidental, "cuMemUnmap's page is silent on work still queued on the range; the outcome is a race on the GPU (vmm.fault.unmap-with-work-queued)"),
    t("pool_import_freed", Incidental, "documented as undefined behaviour"),
    t("pool_freed_peer_access", Incidental, "documented as undefined behaviour; cudaErrorContained names invalid peer accesses over NVLink as a cause"),
    t("pool_reimport", Incidental, "the documents are silent; cuda.core imports each pool once (cuda_core/cuda/core/_memory/_ipc.pyx, its registry of imported pools); not measured yet"),
    t("pool_ptr_reimport", Incidental, "the documents are silent; cuda.core documents the driver's answer and works around it (cuda_core/cuda/core/_cpp/resource_handles.cpp, IPC Pointer Cache); not measured yet"),
];

/// The tier of one choice by name (`None` for an unknown name).
pub fn choice_tier(name: &str) -> Option<&'static ChoiceTier> {
    CHOICE_TIERS.iter().find(|c| c.name == name)
}

impl Semantics {
    /// The `documented` profile: a choice whose default the documents
    /// promise keeps it; every other one takes a value unlike the measured
    /// hardware (an error the call documents where the default's error is
    /// undocumented for the case, the documents' own reading where they
    /// have one, else the other option).
    pub fn documented() -> Semantics {
        Semantics {
            suballocation: Switch::Off,
            free_of_ipc_pointer: FreeOfIpcPointer::Unmaps,
            free_while_mapped: FreeWhileMapped::Zeroed,
            memcpy_bounds: MemcpyBounds::Block,
            import_range: ImportRange::Block,
            ipc_pinned_host: ExportRule::Refuse(ErrorKind::NotSupported),
            ipc_pool: ExportRule::Refuse(ErrorKind::NotSupported),
            handle_stable: HandleStability::PerCall,
            open_flags: OpenFlags::LazyOnly,
            zero_handle_error: ErrorKind::InvalidHandle,
            garbage_handle_error: ErrorKind::MapFailed,
            open_in_exporter: ErrorKind::InvalidHandle,
            dead_handle_error: ErrorKind::MapFailed,
            reclaimed_export_error: ErrorKind::InvalidValue,
            stale_handle: StaleHandle::Refused,
            freed_export: FreedExport::Opens,
            va_reuse: VaReuse::Never,
            va_rewind: VaRewind::Never,
            exporter_exit: ExporterExit::MappingsRevoked,
            exporter_crash_memory: ExporterCrashMemory::Zeroed,
            open_address: OpenAddress::BlockBase,
            close_unopened: ErrorKind::MapFailed,
            get_null_out: GetNullOut::InvalidValue,
            destroy_primary: DestroyPrimary::Resets,
            stale_kernel_read: StaleKernelRead::Fault,
            stale_memset: StaleMemset::Refused,
            set_destroyed_context: SetDestroyedContext::Refused,
            event_ipc_timing: EventIpcTiming::GetFails,
            event_get_not_interprocess: ErrorKind::InvalidValue,
            event_get_null_out: GetNullOut::InvalidValue,
            event_open_in_exporter: ErrorKind::InvalidValue,
            event_bad_handle: ErrorKind::InvalidValue,
            event_reopen: EventReopen::SameEvent,
            event_after_exporter_destroy: ExportRule::Refuse(ErrorKind::InvalidHandle),
            event_dead_handle: ExportRule::Refuse(ErrorKind::MapFailed),
            event_exporter_exit: EventExporterExit::Refused,
            event_exporter_crash: EventExporterExit::Refused,
            event_get_imported: ExportRule::Allow,
            event_other_context: EventOtherContext::Allow,
            vmm_fabric: ExportRule::Refuse(ErrorKind::NotSupported),
            vmm_access_before_set: ErrorKind::NotPermitted,
            vmm_stale_handle: StaleVmmHandle::InvalidValue,
            vmm_reserve_va: VmmReserveVa::OwnPool,
            vmm_range_before_access: VmmRangeBeforeAccess::Found,
            driver_fds: DriverFds::None,
            vmm_import_bad_fd: ErrorKind::InvalidValue,
            interior_handle: InteriorHandle::PointerOffset,
            lazy_peer_access: LazyPeerAccess::Enables,
            enable_peer_self: ErrorKind::InvalidDevice,
            cross_pidns_ipc: ExportRule::Refuse(ErrorKind::NotSupported),
            vmm_create_context: VmmCreateContext::Required,
            unmap_queued_work: UnmapQueuedWork::Faults,
            pool_import_freed: PoolImportFreed::Refused,
            pool_freed_peer_access: PoolFreedPeerAccess::Maps,
            pool_reimport: PoolReimport::NewPool,
            pool_ptr_reimport: PoolPtrReimport::NewMapping,
            ..Semantics::default()
        }
    }
}
