//! The values of the driver trait: what the calls of one OS process's view
//! of the GPU driver take and give back. The trait itself,
//! [`Driver`](crate::calls::Driver), is generated from the call table in
//! `calls.rs`, which imports these types (never the other way round).
//!
//! Shaped like the CUDA runtime/driver entry points the seeds describe, but
//! dialect-neutral: one call here is one API call there. Backends (the
//! simulator, the real CUDA backend through a worker process, a mockall mock)
//! implement it; validation and expectations live above it, in the executor.

use crate::errors::ApiError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A device virtual address as the process sees it. Traces never record the
/// number, only relations between pointers (see `trace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The NULL pointer (`0`): the NULL forms of the calls pass it.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The address `bytes` past this one (wrapping, as raw pointer arithmetic).
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Opaque identity of a context inside one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContextId(pub u64);

/// Device ordinal as numbered inside the calling process (after
/// `CUDA_VISIBLE_DEVICES` remapping).
pub type DeviceOrdinal = u32;

/// The size in bytes of an IPC memory or event handle (and of a pool
/// pointer's export data).
pub const IPC_HANDLE_SIZE: usize = 64;

/// `cudaIpcMemHandle_t` / `CUipcMemHandle`: 64 opaque bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcMemHandle(pub [u8; IPC_HANDLE_SIZE]);

impl IpcMemHandle {
    /// The handle of all zero bytes (`handle_zero` in scenarios): never one
    /// the driver gave out.
    pub const ZERO: IpcMemHandle = IpcMemHandle([0; IPC_HANDLE_SIZE]);

    /// The handle in `bytes`; `None` unless it is exactly 64 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Option<IpcMemHandle> {
        bytes.try_into().ok().map(IpcMemHandle)
    }
}

impl fmt::Debug for IpcMemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcMemHandle(")?;
        for b in &self.0[..16] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

impl Serialize for IpcMemHandle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for IpcMemHandle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes: Vec<u8> = Deserialize::deserialize(d)?;
        IpcMemHandle::from_slice(&bytes)
            .ok_or_else(|| serde::de::Error::invalid_length(bytes.len(), &"64 bytes"))
    }
}

/// Opaque identity of an event inside one process (`cudaEvent_t` / `CUevent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventId(pub u64);

impl EventId {
    /// The NULL `cudaEvent_t`: names no event; drivers never hand it out
    /// (event.null.*).
    pub const NULL: EventId = EventId(0);
}

/// Opaque identity of a stream inside one process (`cudaStream_t` /
/// `CUstream`). [`StreamId::LEGACY_DEFAULT`] (0) is the legacy default
/// stream, the NULL stream of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The legacy default stream (`0` / `NULL` / `cudaStreamLegacy`).
    pub const LEGACY_DEFAULT: StreamId = StreamId(0);
    /// The calling thread's per-thread default stream
    /// (`cudaStreamPerThread` / `CU_STREAM_PER_THREAD`, the handle `0x2`):
    /// a blocking stream made on first use (`stream=per_thread`).
    pub const PER_THREAD: StreamId = StreamId(2);
}

/// `cudaIpcEventHandle_t` / `CUipcEventHandle`: 64 opaque bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcEventHandle(pub [u8; IPC_HANDLE_SIZE]);

impl IpcEventHandle {
    /// The handle of all zero bytes (`event_handle_zero` in scenarios): never
    /// one the driver gave out.
    pub const ZERO: IpcEventHandle = IpcEventHandle([0; IPC_HANDLE_SIZE]);

    /// The handle in `bytes`; `None` unless it is exactly 64 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Option<IpcEventHandle> {
        bytes.try_into().ok().map(IpcEventHandle)
    }
}

impl fmt::Debug for IpcEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcEventHandle(")?;
        for b in &self.0[..24] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

impl Serialize for IpcEventHandle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for IpcEventHandle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes: Vec<u8> = Deserialize::deserialize(d)?;
        IpcEventHandle::from_slice(&bytes)
            .ok_or_else(|| serde::de::Error::invalid_length(bytes.len(), &"64 bytes"))
    }
}

/// Event creation flags: `cudaEvent*` / `CU_EVENT_*` (same numbers in both dialects).
pub mod event_flags {
    /// `cudaEventDefault` / `CU_EVENT_DEFAULT`.
    pub const DEFAULT: u32 = 0x0;
    /// `cudaEventBlockingSync` / `CU_EVENT_BLOCKING_SYNC`.
    pub const BLOCKING_SYNC: u32 = 0x1;
    /// `cudaEventDisableTiming` / `CU_EVENT_DISABLE_TIMING`.
    pub const DISABLE_TIMING: u32 = 0x2;
    /// `cudaEventInterprocess` / `CU_EVENT_INTERPROCESS`.
    pub const INTERPROCESS: u32 = 0x4;

    /// Scenario spellings, in bit order.
    pub const NAMES: [(&str, u32); 4] = [
        ("default", DEFAULT),
        ("blocking_sync", BLOCKING_SYNC),
        ("disable_timing", DISABLE_TIMING),
        ("interprocess", INTERPROCESS),
    ];
}

/// `cudaStreamCreateWithFlags` / `cuStreamCreate` flags.
pub mod stream_flags {
    /// `cudaStreamDefault` / `CU_STREAM_DEFAULT`: a blocking stream, ordered
    /// with the legacy default stream.
    pub const DEFAULT: u32 = 0x0;
    /// `cudaStreamNonBlocking` / `CU_STREAM_NON_BLOCKING`: no implicit
    /// synchronization with the legacy default stream.
    pub const NON_BLOCKING: u32 = 0x1;
}

/// The kinds of allocation the suite distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemKind {
    /// `cudaMalloc` / `cuMemAlloc`.
    Device,
    /// `cudaMallocManaged` / `cuMemAllocManaged` (global attach).
    Managed,
    /// `cudaMallocHost` / `cuMemAllocHost` (pinned host memory).
    PinnedHost,
    /// `cudaMallocAsync` / `cuMemAllocAsync` from the device's default pool,
    /// followed by a stream synchronize so the pointer is usable at once.
    StreamOrdered,
}

/// How an allocation is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreeKind {
    /// `cudaFree` / `cuMemFree`.
    Device,
    /// `cudaFreeHost` / `cuMemFreeHost`.
    Host,
    /// `cudaFreeAsync` / `cuMemFreeAsync`, then stream synchronize.
    StreamOrdered,
}

/// Whether an out-parameter is a valid pointer or NULL. Lets scenarios ask
/// what the API does with a null `devPtr` / `handle` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OutArg {
    /// A valid pointer to receive the result.
    #[default]
    Valid,
    /// NULL, to see what the API does with it (the NULL forms of the calls).
    Null,
}

/// `cudaIpcMemLazyEnablePeerAccess` / `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
pub const IPC_MEM_LAZY_ENABLE_PEER_ACCESS: u32 = 0x1;

/// Device attributes the suite asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceAttribute {
    /// `cudaDevAttrUnifiedAddressing` / `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`.
    UnifiedAddressing,
    /// `cudaDevAttrIpcEventSupport` / `CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED`.
    IpcEventSupport,
    /// `cudaDevAttrComputeCapabilityMajor` / `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
    ComputeCapabilityMajor,
    /// `cudaDevAttrComputeCapabilityMinor` / `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
    ComputeCapabilityMinor,
    /// `cudaDevAttrMemoryPoolsSupported` / `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`.
    MemoryPoolsSupported,
    /// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`.
    HandleTypePosixFdSupported,
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`.
    VirtualMemoryManagementSupported,
    // --- VMM ---
    /// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED`.
    HandleTypeFabricSupported,
}

impl DeviceAttribute {
    /// Every attribute the suite asks about.
    pub const ALL: [DeviceAttribute; 8] = [
        DeviceAttribute::UnifiedAddressing,
        DeviceAttribute::IpcEventSupport,
        DeviceAttribute::ComputeCapabilityMajor,
        DeviceAttribute::ComputeCapabilityMinor,
        DeviceAttribute::MemoryPoolsSupported,
        DeviceAttribute::HandleTypePosixFdSupported,
        DeviceAttribute::VirtualMemoryManagementSupported,
        DeviceAttribute::HandleTypeFabricSupported,
    ];

    /// The spelling used in scenario files (`attr 0 unified_addressing`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceAttribute::UnifiedAddressing => "unified_addressing",
            DeviceAttribute::IpcEventSupport => "ipc_event_support",
            DeviceAttribute::ComputeCapabilityMajor => "compute_capability_major",
            DeviceAttribute::ComputeCapabilityMinor => "compute_capability_minor",
            DeviceAttribute::MemoryPoolsSupported => "memory_pools_supported",
            DeviceAttribute::HandleTypePosixFdSupported => "handle_type_posix_fd_supported",
            DeviceAttribute::VirtualMemoryManagementSupported => {
                "virtual_memory_management_supported"
            }
            DeviceAttribute::HandleTypeFabricSupported => "handle_type_fabric_supported",
        }
    }

    /// The attribute spelled `name` in a scenario file; `None` for any other.
    pub fn from_name(name: &str) -> Option<DeviceAttribute> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }
}

// --- VMM ---

/// `CUmemGenericAllocationHandle`: a physical allocation made by
/// `cuMemCreate` or `cuMemImportFromShareableHandle`, valid in one process.
/// Traces record labels, never the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VmmHandle(pub u64);

/// A POSIX file descriptor number in one process's descriptor table.
/// Traces record labels, never the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fd(pub i32);

/// `CUmemAllocationProp::requestedHandleTypes`: a bit set of
/// `CUmemAllocationHandleType` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct HandleTypes(pub u32);

impl HandleTypes {
    /// No handle type (`CU_MEM_HANDLE_TYPE_NONE`).
    pub const NONE: HandleTypes = HandleTypes(0);
    /// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
    pub const POSIX_FD: HandleTypes = HandleTypes(0x1);
    /// `CU_MEM_HANDLE_TYPE_FABRIC`.
    pub const FABRIC: HandleTypes = HandleTypes(0x8);

    /// Whether the set holds `ty`.
    pub fn contains(self, ty: ShareableHandleType) -> bool {
        self.0 & ty.bit().0 != 0
    }

    /// Scenario spelling: `none`, `posix_fd`, `fabric`, or the bit set as
    /// an integer (`9` = both).
    pub fn name(self) -> String {
        match self {
            HandleTypes::NONE => "none".to_string(),
            HandleTypes::POSIX_FD => "posix_fd".to_string(),
            HandleTypes::FABRIC => "fabric".to_string(),
            HandleTypes(bits) => bits.to_string(),
        }
    }

    /// The set spelled `name` in a scenario file; `None` for any other.
    pub fn from_name(name: &str) -> Option<HandleTypes> {
        match name {
            "none" => Some(HandleTypes::NONE),
            "posix_fd" => Some(HandleTypes::POSIX_FD),
            "fabric" => Some(HandleTypes::FABRIC),
            n => n.parse().ok().map(HandleTypes),
        }
    }
}

/// One shareable handle type (`cuMemExportToShareableHandle`'s `handleType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareableHandleType {
    /// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: a file descriptor, passed
    /// between processes with `SCM_RIGHTS`.
    PosixFd,
    /// A 64-byte fabric handle (needs an IMEX channel on Linux).
    Fabric,
}

impl ShareableHandleType {
    /// Every shareable handle type the suite knows.
    pub const ALL: [ShareableHandleType; 2] =
        [ShareableHandleType::PosixFd, ShareableHandleType::Fabric];

    /// The type's bit in a [`HandleTypes`] set.
    pub fn bit(self) -> HandleTypes {
        match self {
            ShareableHandleType::PosixFd => HandleTypes::POSIX_FD,
            ShareableHandleType::Fabric => HandleTypes::FABRIC,
        }
    }

    /// The spelling used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            ShareableHandleType::PosixFd => "posix_fd",
            ShareableHandleType::Fabric => "fabric",
        }
    }

    /// The type spelled `name` in a scenario file; `None` for any other.
    pub fn from_name(name: &str) -> Option<ShareableHandleType> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// `cuMemGetAllocationGranularity`'s option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GranularityKind {
    /// `CU_MEM_ALLOC_GRANULARITY_MINIMUM`.
    Minimum,
    /// `CU_MEM_ALLOC_GRANULARITY_RECOMMENDED`.
    Recommended,
}

impl GranularityKind {
    /// The spelling used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            GranularityKind::Minimum => "minimum",
            GranularityKind::Recommended => "recommended",
        }
    }
}

/// `CUmemAccess_flags` for one device in `cuMemSetAccess`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmmAccess {
    /// `CU_MEM_ACCESS_FLAGS_PROT_NONE`.
    None,
    /// `CU_MEM_ACCESS_FLAGS_PROT_READ`.
    Read,
    /// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
    ReadWrite,
}

impl VmmAccess {
    /// The spelling used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            VmmAccess::None => "none",
            VmmAccess::Read => "read",
            VmmAccess::ReadWrite => "rw",
        }
    }

    /// The access spelled `name` in a scenario file; `None` for any other.
    pub fn from_name(name: &str) -> Option<VmmAccess> {
        [VmmAccess::None, VmmAccess::Read, VmmAccess::ReadWrite]
            .into_iter()
            .find(|a| a.name() == name)
    }
}

// --- memory pools ---

/// `cudaMemPool_t` / `CUmemoryPool` / `hipMemPool_t`: a memory pool made by
/// `pool_create`, `pool_import` or `pool_default`, valid in one process.
/// Traces record labels, never the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PoolId(pub u64);

/// `cudaMemPoolPtrExportData` / `CUmemPoolPtrExportData`: 64 opaque bytes
/// naming one allocation of an exported pool; "not a handle", it may travel
/// by any means.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolPtrExport(pub [u8; IPC_HANDLE_SIZE]);

impl PoolPtrExport {
    /// The export data in `bytes`; `None` unless it is exactly 64 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Option<PoolPtrExport> {
        bytes.try_into().ok().map(PoolPtrExport)
    }
}

impl fmt::Debug for PoolPtrExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PoolPtrExport(")?;
        for b in &self.0[..16] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

impl Serialize for PoolPtrExport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for PoolPtrExport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes: Vec<u8> = Deserialize::deserialize(d)?;
        PoolPtrExport::from_slice(&bytes)
            .ok_or_else(|| serde::de::Error::invalid_length(bytes.len(), &"64 bytes"))
    }
}

/// What `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)` and friends say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryType {
    /// Device memory (`cudaMemoryTypeDevice`).
    Device,
    /// Page-locked host memory (`cudaMemoryTypeHost`).
    Host,
    /// Managed memory (`cudaMemoryTypeManaged`).
    Managed,
    /// Not a pointer the driver knows (`cudaMemoryTypeUnregistered`).
    Unregistered,
}

impl MemoryType {
    /// The spelling used in traces and scenario files.
    pub fn name(self) -> &'static str {
        match self {
            MemoryType::Device => "device",
            MemoryType::Host => "host",
            MemoryType::Managed => "managed",
            MemoryType::Unregistered => "unregistered",
        }
    }
}

/// What `pointer_info` learns of a pointer: its memory type and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PointerInfo {
    /// The kind of memory the pointer lies in.
    pub memory_type: MemoryType,
    /// Device ordinal in the calling process; `None` for host/unregistered.
    pub device: Option<DeviceOrdinal>,
}

/// Why a call did not produce a driver answer at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcessLoss {
    /// The process died: a signal or an exit status.
    Crashed {
        /// The signal that killed the process, if one did.
        signal: Option<i32>,
        /// The exit status, if the process exited.
        exit_code: Option<i32>,
        /// What the backend observed, for the report.
        detail: String,
    },
    /// The call did not return within the per-step timeout; the process was killed.
    TimedOut {
        /// How long the runner waited, in milliseconds.
        after_ms: u64,
    },
}

/// The error side of every driver call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DriverError {
    /// The API returned an error code.
    Api(ApiError),
    /// The process behind this driver view is gone (real backend only).
    Lost(ProcessLoss),
    /// The harness itself failed (protocol error, bad spawn); not the driver's fault.
    Harness(String),
}

impl From<ApiError> for DriverError {
    fn from(e: ApiError) -> Self {
        DriverError::Api(e)
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Api(e) => write!(f, "{e}"),
            DriverError::Lost(ProcessLoss::Crashed {
                signal,
                exit_code,
                detail,
            }) => {
                write!(
                    f,
                    "process crashed (signal {signal:?}, exit {exit_code:?}): {detail}"
                )
            }
            DriverError::Lost(ProcessLoss::TimedOut { after_ms }) => {
                write!(f, "process timed out after {after_ms} ms")
            }
            DriverError::Harness(m) => write!(f, "harness error: {m}"),
        }
    }
}

impl std::error::Error for DriverError {}

/// The result of a driver call: a value, or why there is none.
pub type DriverResult<T> = Result<T, DriverError>;

// --- pointer attributes ---

/// The `CUpointer_attribute`s the suite asks `cuPointerGetAttribute` about,
/// one at a time (see the `CUpointer_attribute` enum of
/// <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html>).
/// Every answer travels as a `u64`: addresses, sizes, ids, booleans (0 or 1),
/// the `CUmemorytype` and the `CUmemAllocationHandleType` bitmask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointerAttribute {
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (2): a `CUmemorytype`
    /// (1 host, 2 device, 3 array, 4 unified).
    MemoryType,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID` (7): a process-wide unique id of the
    /// allocated region.
    BufferId,
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL` (9).
    DeviceOrdinal,
    /// `CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE` (10): 1 when
    /// `cudaIpcGetMemHandle` accepts the allocation.
    IsLegacyCudaIpcCapable,
    /// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR` (11).
    RangeStartAddr,
    /// `CU_POINTER_ATTRIBUTE_RANGE_SIZE` (12).
    RangeSize,
    /// `CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES` (14): a bitmask of
    /// `CUmemAllocationHandleType`.
    AllowedHandleTypes,
    /// `CU_POINTER_ATTRIBUTE_MAPPING_SIZE` (18).
    MappingSize,
    /// `CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR` (19).
    MappingBaseAddr,
}

/// What a [`PointerAttribute`]'s `u64` answer is, for naming it in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointerAttributeValue {
    /// A device address: compared with pointers.
    Address,
    /// An opaque id, only compared with other ids.
    BufferId,
    /// A number: a size, an ordinal, a boolean, an enum or a bitmask.
    Number,
}

impl PointerAttribute {
    /// Every pointer attribute the suite reads.
    pub const ALL: [PointerAttribute; 9] = [
        PointerAttribute::MemoryType,
        PointerAttribute::BufferId,
        PointerAttribute::DeviceOrdinal,
        PointerAttribute::IsLegacyCudaIpcCapable,
        PointerAttribute::RangeStartAddr,
        PointerAttribute::RangeSize,
        PointerAttribute::AllowedHandleTypes,
        PointerAttribute::MappingSize,
        PointerAttribute::MappingBaseAddr,
    ];

    /// The spelling used in scenario files (`pointer_attr p buffer_id`).
    pub fn name(self) -> &'static str {
        match self {
            PointerAttribute::MemoryType => "memory_type",
            PointerAttribute::BufferId => "buffer_id",
            PointerAttribute::DeviceOrdinal => "device_ordinal",
            PointerAttribute::IsLegacyCudaIpcCapable => "is_legacy_cuda_ipc_capable",
            PointerAttribute::RangeStartAddr => "range_start_addr",
            PointerAttribute::RangeSize => "range_size",
            PointerAttribute::AllowedHandleTypes => "allowed_handle_types",
            PointerAttribute::MappingSize => "mapping_size",
            PointerAttribute::MappingBaseAddr => "mapping_base_addr",
        }
    }

    /// The attribute spelled `name` in a scenario file; `None` for any other.
    pub fn from_name(name: &str) -> Option<PointerAttribute> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The `CUpointer_attribute` number.
    pub fn number(self) -> u32 {
        match self {
            PointerAttribute::MemoryType => 2,
            PointerAttribute::BufferId => 7,
            PointerAttribute::DeviceOrdinal => 9,
            PointerAttribute::IsLegacyCudaIpcCapable => 10,
            PointerAttribute::RangeStartAddr => 11,
            PointerAttribute::RangeSize => 12,
            PointerAttribute::AllowedHandleTypes => 14,
            PointerAttribute::MappingSize => 18,
            PointerAttribute::MappingBaseAddr => 19,
        }
    }

    /// What the answer is.
    pub fn value_kind(self) -> PointerAttributeValue {
        match self {
            PointerAttribute::RangeStartAddr | PointerAttribute::MappingBaseAddr => {
                PointerAttributeValue::Address
            }
            PointerAttribute::BufferId => PointerAttributeValue::BufferId,
            _ => PointerAttributeValue::Number,
        }
    }
}

/// `CUmemorytype` values (`CU_POINTER_ATTRIBUTE_MEMORY_TYPE`).
pub mod cu_memory_type {
    /// `CU_MEMORYTYPE_HOST`.
    pub const HOST: u64 = 1;
    /// `CU_MEMORYTYPE_DEVICE`.
    pub const DEVICE: u64 = 2;
    /// `CU_MEMORYTYPE_UNIFIED`.
    pub const UNIFIED: u64 = 4;
}
