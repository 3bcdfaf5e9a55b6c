//! The one table that maps driver error codes to names, per dialect.
//!
//! Every backend reports the numeric code its API returned; names are only
//! ever derived here, so traces from the simulator and from real drivers use
//! identical spellings. The simulator thinks in dialect-neutral [`ErrorKind`]s
//! and converts through this table too.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// Which API family a process speaks. Decides which entry points the real
/// backend calls and which names errors carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// CUDA runtime API (`cudaIpcOpenMemHandle`, `cudaError*`).
    #[default]
    Runtime,
    /// CUDA driver API (`cuIpcOpenMemHandle`, `CUDA_ERROR_*`).
    Driver,
    /// HIP runtime API (`hipIpcOpenMemHandle`, `hipError*`). No AMD backend
    /// exists here: it runs on the simulator, under its HIP profile.
    Hip,
}

impl Dialect {
    /// Every dialect, in the order reports list them.
    pub const ALL: [Dialect; 3] = [Dialect::Runtime, Dialect::Driver, Dialect::Hip];
    /// The dialects real NVIDIA hardware speaks.
    pub const CUDA: [Dialect; 2] = [Dialect::Runtime, Dialect::Driver];

    /// The dialect's name in scenario files, reports and `--dialect`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Runtime => "runtime",
            Dialect::Driver => "driver",
            Dialect::Hip => "hip",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "runtime" | "cuda-runtime" => Ok(Dialect::Runtime),
            "driver" | "cuda-driver" => Ok(Dialect::Driver),
            "hip" => Ok(Dialect::Hip),
            other => Err(format!(
                "unknown dialect '{other}' (expected runtime, driver or hip)"
            )),
        }
    }
}

/// Dialect-neutral meaning of an error. Scenario files may name an error by
/// its kind (`InvalidValue`) or by a dialect's own name; both resolve here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorKind {
    /// `cudaErrorInvalidValue` / `CUDA_ERROR_INVALID_VALUE`, code 1.
    InvalidValue,
    /// `cudaErrorMemoryAllocation` / `CUDA_ERROR_OUT_OF_MEMORY`, code 2.
    OutOfMemory,
    /// `cudaErrorInitializationError` / `CUDA_ERROR_NOT_INITIALIZED`, code 3.
    NotInitialized,
    /// `cudaErrorCudartUnloading` / `CUDA_ERROR_DEINITIALIZED`, code 4.
    Deinitialized,
    /// `cudaErrorInvalidHostPointer`, code 16 (runtime only).
    InvalidHostPointer,
    /// `cudaErrorInvalidDevicePointer`, code 17 (runtime only).
    InvalidDevicePointer,
    /// `cudaErrorInvalidMemcpyDirection`, code 21 (runtime only).
    InvalidMemcpyDirection,
    /// `cudaErrorInsufficientDriver`, code 35 (runtime only).
    InsufficientDriver,
    /// `cudaErrorIncompatibleDriverContext`, code 49 (runtime only): the
    /// current context is one the runtime call cannot use (a context made by
    /// `cuCtxCreate` where the call expects a primary context).
    IncompatibleDriverContext,
    /// `cudaErrorNoDevice` / `CUDA_ERROR_NO_DEVICE`, code 100.
    NoDevice,
    /// `cudaErrorInvalidDevice` / `CUDA_ERROR_INVALID_DEVICE`, code 101.
    InvalidDevice,
    /// `cudaErrorDeviceUninitialized` / `CUDA_ERROR_INVALID_CONTEXT`, code 201.
    InvalidContext,
    /// `CUDA_ERROR_CONTEXT_ALREADY_CURRENT`, code 202 (driver API only).
    ContextAlreadyCurrent,
    /// `cudaErrorMapBufferObjectFailed` / `CUDA_ERROR_MAP_FAILED`, code 205.
    MapFailed,
    /// `cudaErrorUnmapBufferObjectFailed` / `CUDA_ERROR_UNMAP_FAILED`, code 206.
    UnmapFailed,
    /// `cudaErrorAlreadyMapped` / `CUDA_ERROR_ALREADY_MAPPED`, code 208.
    AlreadyMapped,
    /// `cudaErrorNotMapped` / `CUDA_ERROR_NOT_MAPPED`, code 211.
    NotMapped,
    /// `cudaErrorDeviceAlreadyInUse` / `CUDA_ERROR_CONTEXT_ALREADY_IN_USE`, code 216.
    ContextAlreadyInUse,
    /// `cudaErrorPeerAccessUnsupported` / `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`, code 217.
    PeerAccessUnsupported,
    /// `cudaErrorContained` / `CUDA_ERROR_CONTAINED`, code 226: a device
    /// exception the GPU contained, "certain types of invalid accesses of
    /// peer GPU memory over nvlink" among them; sticky like a launch failure.
    Contained,
    /// `cudaErrorOperatingSystem` / `CUDA_ERROR_OPERATING_SYSTEM`, code 304.
    OperatingSystem,
    /// `cudaErrorInvalidResourceHandle` / `CUDA_ERROR_INVALID_HANDLE`, code 400.
    InvalidHandle,
    /// `cudaErrorIllegalState` / `CUDA_ERROR_ILLEGAL_STATE`, code 401.
    IllegalState,
    /// `cudaErrorSymbolNotFound` / `CUDA_ERROR_NOT_FOUND`, code 500.
    NotFound,
    /// `cudaErrorNotReady` / `CUDA_ERROR_NOT_READY`, code 600.
    NotReady,
    /// `cudaErrorIllegalAddress` / `CUDA_ERROR_ILLEGAL_ADDRESS`, code 700.
    IllegalAddress,
    /// `cudaErrorPeerAccessAlreadyEnabled` / `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`, code 704.
    PeerAccessAlreadyEnabled,
    /// `cudaErrorPeerAccessNotEnabled` / `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`, code 705.
    PeerAccessNotEnabled,
    /// `cudaErrorSetOnActiveProcess` / `CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE`, code 708.
    PrimaryContextActive,
    /// `cudaErrorContextIsDestroyed` / `CUDA_ERROR_CONTEXT_IS_DESTROYED`, code 709.
    ContextIsDestroyed,
    /// `cudaErrorTooManyPeers` / `CUDA_ERROR_TOO_MANY_PEERS`, code 711.
    TooManyPeers,
    /// `cudaErrorLaunchFailure` / `CUDA_ERROR_LAUNCH_FAILED`, code 719.
    LaunchFailed,
    /// `cudaErrorNotPermitted` / `CUDA_ERROR_NOT_PERMITTED`, code 800.
    NotPermitted,
    /// `cudaErrorNotSupported` / `CUDA_ERROR_NOT_SUPPORTED`, code 801.
    NotSupported,
    /// `cudaErrorUnknown` / `CUDA_ERROR_UNKNOWN`, code 999.
    Unknown,
}

struct Row {
    kind: ErrorKind,
    runtime: Option<(i32, &'static str)>,
    driver: Option<(i32, &'static str)>,
}

const fn row(
    kind: ErrorKind,
    runtime: Option<(i32, &'static str)>,
    driver: Option<(i32, &'static str)>,
) -> Row {
    Row {
        kind,
        runtime,
        driver,
    }
}

/// `hipError_t` names and codes (ROCm `hip/hip_runtime_api.h`; `hipError*`
/// numbers follow CUDA's where both exist). Kinds HIP has no enumerator for
/// (`hipErrorTooManyPeers` is named in the hipIpcOpenMemHandle docs, but
/// hipify marks `cudaErrorTooManyPeers` HIP_UNSUPPORTED) fall back like any
/// kind a dialect lacks. Older aliases (`hipErrorInvalidResourceHandle`,
/// `hipErrorMapBufferObjectFailed`, `hipErrorMemoryAllocation`) are accepted
/// as names in scenarios too, see [`HIP_ALIASES`].
const HIP: &[(ErrorKind, i32, &str)] = &[
    (InvalidValue, 1, "hipErrorInvalidValue"),
    (OutOfMemory, 2, "hipErrorOutOfMemory"),
    (NotInitialized, 3, "hipErrorNotInitialized"),
    (Deinitialized, 4, "hipErrorDeinitialized"),
    (InvalidDevicePointer, 17, "hipErrorInvalidDevicePointer"),
    (InvalidMemcpyDirection, 21, "hipErrorInvalidMemcpyDirection"),
    (InsufficientDriver, 35, "hipErrorInsufficientDriver"),
    (NoDevice, 100, "hipErrorNoDevice"),
    (InvalidDevice, 101, "hipErrorInvalidDevice"),
    (InvalidContext, 201, "hipErrorInvalidContext"),
    (ContextAlreadyCurrent, 202, "hipErrorContextAlreadyCurrent"),
    (MapFailed, 205, "hipErrorMapFailed"),
    (UnmapFailed, 206, "hipErrorUnmapFailed"),
    (AlreadyMapped, 208, "hipErrorAlreadyMapped"),
    (NotMapped, 211, "hipErrorNotMapped"),
    (ContextAlreadyInUse, 216, "hipErrorContextAlreadyInUse"),
    (PeerAccessUnsupported, 217, "hipErrorPeerAccessUnsupported"),
    (OperatingSystem, 304, "hipErrorOperatingSystem"),
    (InvalidHandle, 400, "hipErrorInvalidHandle"),
    (NotFound, 500, "hipErrorNotFound"),
    (NotReady, 600, "hipErrorNotReady"),
    (IllegalAddress, 700, "hipErrorIllegalAddress"),
    (
        PeerAccessAlreadyEnabled,
        704,
        "hipErrorPeerAccessAlreadyEnabled",
    ),
    (PeerAccessNotEnabled, 705, "hipErrorPeerAccessNotEnabled"),
    (PrimaryContextActive, 708, "hipErrorSetOnActiveProcess"),
    (ContextIsDestroyed, 709, "hipErrorContextIsDestroyed"),
    (LaunchFailed, 719, "hipErrorLaunchFailure"),
    (NotSupported, 801, "hipErrorNotSupported"),
    (Unknown, 999, "hipErrorUnknown"),
];

/// Deprecated `hipError_t` spellings with the same numbers as the names above.
pub const HIP_ALIASES: &[(&str, ErrorKind)] = &[
    ("hipErrorInvalidResourceHandle", InvalidHandle),
    ("hipErrorMapBufferObjectFailed", MapFailed),
    ("hipErrorMemoryAllocation", OutOfMemory),
    ("hipErrorInitializationError", NotInitialized),
];

fn hip_column(kind: ErrorKind) -> Option<(i32, &'static str)> {
    HIP.iter()
        .find(|(k, _, _)| *k == kind)
        .map(|&(_, c, n)| (c, n))
}

use ErrorKind::*;

/// Codes from `driver_types.h` (cudaError) and `cuda.h` (CUresult), CUDA 12/13.
const TABLE: &[Row] = &[
    row(
        InvalidValue,
        Some((1, "cudaErrorInvalidValue")),
        Some((1, "CUDA_ERROR_INVALID_VALUE")),
    ),
    row(
        OutOfMemory,
        Some((2, "cudaErrorMemoryAllocation")),
        Some((2, "CUDA_ERROR_OUT_OF_MEMORY")),
    ),
    row(
        NotInitialized,
        Some((3, "cudaErrorInitializationError")),
        Some((3, "CUDA_ERROR_NOT_INITIALIZED")),
    ),
    row(
        Deinitialized,
        Some((4, "cudaErrorCudartUnloading")),
        Some((4, "CUDA_ERROR_DEINITIALIZED")),
    ),
    row(
        InvalidHostPointer,
        Some((16, "cudaErrorInvalidHostPointer")),
        None,
    ),
    row(
        InvalidDevicePointer,
        Some((17, "cudaErrorInvalidDevicePointer")),
        None,
    ),
    row(
        InvalidMemcpyDirection,
        Some((21, "cudaErrorInvalidMemcpyDirection")),
        None,
    ),
    row(
        InsufficientDriver,
        Some((35, "cudaErrorInsufficientDriver")),
        None,
    ),
    row(
        IncompatibleDriverContext,
        Some((49, "cudaErrorIncompatibleDriverContext")),
        None,
    ),
    row(
        NoDevice,
        Some((100, "cudaErrorNoDevice")),
        Some((100, "CUDA_ERROR_NO_DEVICE")),
    ),
    row(
        InvalidDevice,
        Some((101, "cudaErrorInvalidDevice")),
        Some((101, "CUDA_ERROR_INVALID_DEVICE")),
    ),
    row(
        InvalidContext,
        Some((201, "cudaErrorDeviceUninitialized")),
        Some((201, "CUDA_ERROR_INVALID_CONTEXT")),
    ),
    row(
        ContextAlreadyCurrent,
        None,
        Some((202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT")),
    ),
    row(
        MapFailed,
        Some((205, "cudaErrorMapBufferObjectFailed")),
        Some((205, "CUDA_ERROR_MAP_FAILED")),
    ),
    row(
        UnmapFailed,
        Some((206, "cudaErrorUnmapBufferObjectFailed")),
        Some((206, "CUDA_ERROR_UNMAP_FAILED")),
    ),
    row(
        AlreadyMapped,
        Some((208, "cudaErrorAlreadyMapped")),
        Some((208, "CUDA_ERROR_ALREADY_MAPPED")),
    ),
    row(
        NotMapped,
        Some((211, "cudaErrorNotMapped")),
        Some((211, "CUDA_ERROR_NOT_MAPPED")),
    ),
    row(
        ContextAlreadyInUse,
        Some((216, "cudaErrorDeviceAlreadyInUse")),
        Some((216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE")),
    ),
    row(
        PeerAccessUnsupported,
        Some((217, "cudaErrorPeerAccessUnsupported")),
        Some((217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED")),
    ),
    row(
        Contained,
        Some((226, "cudaErrorContained")),
        Some((226, "CUDA_ERROR_CONTAINED")),
    ),
    row(
        OperatingSystem,
        Some((304, "cudaErrorOperatingSystem")),
        Some((304, "CUDA_ERROR_OPERATING_SYSTEM")),
    ),
    row(
        InvalidHandle,
        Some((400, "cudaErrorInvalidResourceHandle")),
        Some((400, "CUDA_ERROR_INVALID_HANDLE")),
    ),
    row(
        IllegalState,
        Some((401, "cudaErrorIllegalState")),
        Some((401, "CUDA_ERROR_ILLEGAL_STATE")),
    ),
    row(
        NotFound,
        Some((500, "cudaErrorSymbolNotFound")),
        Some((500, "CUDA_ERROR_NOT_FOUND")),
    ),
    row(
        NotReady,
        Some((600, "cudaErrorNotReady")),
        Some((600, "CUDA_ERROR_NOT_READY")),
    ),
    row(
        IllegalAddress,
        Some((700, "cudaErrorIllegalAddress")),
        Some((700, "CUDA_ERROR_ILLEGAL_ADDRESS")),
    ),
    row(
        PeerAccessAlreadyEnabled,
        Some((704, "cudaErrorPeerAccessAlreadyEnabled")),
        Some((704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED")),
    ),
    row(
        PeerAccessNotEnabled,
        Some((705, "cudaErrorPeerAccessNotEnabled")),
        Some((705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED")),
    ),
    row(
        PrimaryContextActive,
        Some((708, "cudaErrorSetOnActiveProcess")),
        Some((708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE")),
    ),
    row(
        ContextIsDestroyed,
        Some((709, "cudaErrorContextIsDestroyed")),
        Some((709, "CUDA_ERROR_CONTEXT_IS_DESTROYED")),
    ),
    row(
        TooManyPeers,
        Some((711, "cudaErrorTooManyPeers")),
        Some((711, "CUDA_ERROR_TOO_MANY_PEERS")),
    ),
    row(
        LaunchFailed,
        Some((719, "cudaErrorLaunchFailure")),
        Some((719, "CUDA_ERROR_LAUNCH_FAILED")),
    ),
    row(
        NotPermitted,
        Some((800, "cudaErrorNotPermitted")),
        Some((800, "CUDA_ERROR_NOT_PERMITTED")),
    ),
    row(
        NotSupported,
        Some((801, "cudaErrorNotSupported")),
        Some((801, "CUDA_ERROR_NOT_SUPPORTED")),
    ),
    row(
        Unknown,
        Some((999, "cudaErrorUnknown")),
        Some((999, "CUDA_ERROR_UNKNOWN")),
    ),
];

fn column(row: &Row, dialect: Dialect) -> Option<(i32, &'static str)> {
    match dialect {
        Dialect::Runtime => row.runtime,
        Dialect::Driver => row.driver,
        Dialect::Hip => hip_column(row.kind),
    }
}

impl ErrorKind {
    /// The code this kind has in `dialect`, if that dialect has one.
    pub fn code(self, dialect: Dialect) -> Option<i32> {
        TABLE
            .iter()
            .find(|r| r.kind == self)
            .and_then(|r| column(r, dialect))
            .map(|(c, _)| c)
    }

    /// Resolve a name written in a scenario: a kind (`InvalidValue`) or any
    /// dialect's spelling (`cudaErrorInvalidValue`, `CUDA_ERROR_INVALID_VALUE`).
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        TABLE
            .iter()
            .find_map(|r| {
                let matches = format!("{:?}", r.kind) == name
                    || r.runtime.is_some_and(|(_, n)| n == name)
                    || r.driver.is_some_and(|(_, n)| n == name)
                    || hip_column(r.kind).is_some_and(|(_, n)| n == name);
                matches.then_some(r.kind)
            })
            .or_else(|| {
                HIP_ALIASES
                    .iter()
                    .find(|(alias, _)| *alias == name)
                    .map(|&(_, k)| k)
            })
    }

    /// Every kind the table knows, in table order.
    pub fn all() -> impl Iterator<Item = ErrorKind> {
        TABLE.iter().map(|r| r.kind)
    }
}

/// An error exactly as a driver API returned it: the dialect and its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ApiError {
    /// The API family that returned the code.
    pub dialect: Dialect,
    /// The numeric code exactly as the API returned it.
    pub code: i32,
}

impl ApiError {
    /// The error a dialect uses for `kind`. A kind the dialect lacks maps to
    /// its nearest general code (`InvalidValue`), never to a made-up number.
    pub fn new(dialect: Dialect, kind: ErrorKind) -> ApiError {
        let code = kind
            .code(dialect)
            .or_else(|| InvalidValue.code(dialect))
            .unwrap_or(1);
        ApiError { dialect, code }
    }

    /// The error a dialect returned as `code`, known to the table or not.
    pub fn from_code(dialect: Dialect, code: i32) -> ApiError {
        ApiError { dialect, code }
    }

    /// `None` for a code this table does not know.
    pub fn kind(&self) -> Option<ErrorKind> {
        TABLE
            .iter()
            .find(|r| column(r, self.dialect).is_some_and(|(c, _)| c == self.code))
            .map(|r| r.kind)
    }

    /// The dialect's own name for the code (`cudaErrorInvalidValue`), or
    /// `cudaError(N)`-style for a code the table does not know.
    pub fn name(&self) -> Cow<'static, str> {
        TABLE
            .iter()
            .find_map(|r| column(r, self.dialect).filter(|(c, _)| *c == self.code))
            .map(|(_, n)| Cow::Borrowed(n))
            .unwrap_or_else(|| match self.dialect {
                Dialect::Runtime => Cow::Owned(format!("cudaError({})", self.code)),
                Dialect::Driver => Cow::Owned(format!("CUresult({})", self.code)),
                Dialect::Hip => Cow::Owned(format!("hipError_t({})", self.code)),
            })
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_code_in_some_dialect_and_round_trips() {
        for kind in ErrorKind::all() {
            let mut seen = false;
            for d in Dialect::ALL {
                if let Some(code) = kind.code(d) {
                    seen = true;
                    let e = ApiError::from_code(d, code);
                    assert_eq!(e.kind(), Some(kind), "{kind:?} in {d}");
                    assert_eq!(ErrorKind::from_name(&e.name()), Some(kind));
                }
            }
            assert!(seen, "{kind:?} has no code");
            assert_eq!(ErrorKind::from_name(&format!("{kind:?}")), Some(kind));
        }
    }

    #[test]
    fn codes_are_unique_per_dialect() {
        for d in Dialect::ALL {
            let mut codes: Vec<i32> = TABLE
                .iter()
                .filter_map(|r| column(r, d))
                .map(|c| c.0)
                .collect();
            let n = codes.len();
            codes.sort();
            codes.dedup();
            assert_eq!(codes.len(), n, "duplicate code in {d}");
        }
    }

    #[test]
    fn unknown_codes_get_a_dialect_spelling() {
        assert_eq!(
            ApiError::from_code(Dialect::Runtime, 4242).name(),
            "cudaError(4242)"
        );
        assert_eq!(
            ApiError::from_code(Dialect::Driver, 4242).name(),
            "CUresult(4242)"
        );
        assert_eq!(ApiError::from_code(Dialect::Driver, 4242).kind(), None);
    }

    #[test]
    fn hip_names_carry_hip_spellings_and_cuda_numbers() {
        let e = ApiError::new(Dialect::Hip, InvalidHandle);
        assert_eq!((e.code, e.name().as_ref()), (400, "hipErrorInvalidHandle"));
        assert_eq!(
            ErrorKind::from_name("hipErrorInvalidResourceHandle"),
            Some(InvalidHandle)
        );
        assert_eq!(ErrorKind::from_name("hipErrorMapFailed"), Some(MapFailed));
        // Named in the docs, absent from hipError_t: the nearest general code.
        assert_eq!(TooManyPeers.code(Dialect::Hip), None);
        assert_eq!(
            ApiError::new(Dialect::Hip, TooManyPeers).kind(),
            Some(InvalidValue)
        );
        assert_eq!(
            ApiError::from_code(Dialect::Hip, 4242).name(),
            "hipError_t(4242)"
        );
    }

    #[test]
    fn runtime_only_kinds_fall_back_in_the_driver_dialect() {
        let e = ApiError::new(Dialect::Driver, InvalidDevicePointer);
        assert_eq!(e.kind(), Some(InvalidValue));
    }
}
