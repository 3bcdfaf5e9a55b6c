//! The step model of a parsed scenario.

use crate::calls::CallKind;
use crate::driver::{
    DeviceAttribute, FreeKind, GranularityKind, HandleTypes, MemKind, MemoryType, OutArg,
    ShareableHandleType, VmmAccess,
};
use crate::driver::{PointerAttribute, PointerAttributeValue};
use crate::errors::{Dialect, ErrorKind};
use crate::machine::HazardKind;
use std::borrow::Cow;
use std::fmt;

/// Index of a process in `Scenario::processes` (declaration order).
pub type ProcIndex = usize;

/// One `PROC: [NAME =] OP ARGS... [=> EXPECTATION...]` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// 1-based line in the file.
    pub line: usize,
    /// The process that runs the step.
    pub process: ProcIndex,
    /// The name the result is bound to when the call succeeds.
    pub bind: Option<String>,
    pub op: Op,
    pub expect: Expect,
    /// `repeat N`: the step runs `N` times; a list name (`e[]`) names the
    /// current iteration's element (docs/scenario-language.md).
    pub repeat: Option<u32>,
}

impl Step {
    /// Canonical text of the step without process and expectations:
    /// `p = ipc_open h flags=lazy`.
    pub fn text(&self) -> String {
        use fmt::Write;
        // Room for most steps, so the text is written without regrowing.
        let mut s = String::with_capacity(48);
        if let Some(n) = self.repeat {
            let _ = write!(s, "repeat {n} ");
        }
        let _ = match &self.bind {
            Some(b) => write!(s, "{b} = {}", self.op),
            None => write!(s, "{}", self.op),
        };
        s
    }
}

/// A pointer argument: a binding or the NULL device pointer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ref {
    Null,
    Name(String),
}

impl Ref {
    pub fn name(&self) -> Option<&str> {
        match self {
            Ref::Null => None,
            Ref::Name(n) => Some(n),
        }
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ref::Null => f.write_str("null"),
            Ref::Name(n) => f.write_str(n),
        }
    }
}

/// A byte pattern as written: runs of `(byte, count)`, `ab*16 00*48`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BytePattern {
    pub runs: Vec<(u8, u64)>,
}

impl BytePattern {
    /// Total number of bytes.
    pub fn len(&self) -> u64 {
        self.runs.iter().fold(0u64, |a, r| a.saturating_add(r.1))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes themselves.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for &(b, n) in &self.runs {
            out.extend(std::iter::repeat_n(b, n as usize));
        }
        out
    }

    /// Whether `bytes` are exactly the pattern (without expanding it).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        let mut i = 0usize;
        for &(b, n) in &self.runs {
            let n = n as usize;
            if bytes.len() - i < n || bytes[i..i + n].iter().any(|&x| x != b) {
                return false;
            }
            i += n;
        }
        i == bytes.len()
    }
}

impl fmt::Display for BytePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(b, n)) in self.runs.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if n == 1 {
                write!(f, "{b:02x}")?;
            } else {
                write!(f, "{b:02x}*{n}")?;
            }
        }
        Ok(())
    }
}

/// An operation and its arguments (see the op table in the language docs).
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    DeviceCount,
    Attr {
        device: u32,
        attr: DeviceAttribute,
    },
    /// `can_access_peer D P`: cudaDeviceCanAccessPeer / cuDeviceCanAccessPeer.
    CanAccessPeer {
        device: u32,
        peer: u32,
    },
    /// `enable_peer P`: cudaDeviceEnablePeerAccess / cuCtxEnablePeerAccess.
    EnablePeer {
        peer: u32,
    },
    SetDevice {
        device: u32,
    },
    PrimaryCtx {
        device: u32,
    },
    CtxCreate {
        device: u32,
    },
    CtxSet {
        ctx: String,
    },
    CtxCurrent,
    CtxDestroy {
        ctx: String,
    },
    Malloc {
        kind: MemKind,
        size: u64,
    },
    Free {
        kind: FreeKind,
        ptr: Ref,
    },
    Offset {
        ptr: Ref,
        bytes: u64,
    },
    Fill {
        ptr: Ref,
        value: u8,
        /// `at=` as written.
        at: Option<u64>,
        /// `len=` as written.
        len: Option<u64>,
        /// The length actually filled: `len=`, or the `malloc*` size minus `at`.
        resolved_len: u64,
    },
    Write {
        ptr: Ref,
        offset: u64,
        pattern: BytePattern,
    },
    Read {
        ptr: Ref,
        offset: u64,
        len: u64,
    },
    DeviceRead {
        ptr: Ref,
        offset: u64,
        len: u64,
    },
    AddressRange {
        ptr: Ref,
    },
    PointerAttr {
        ptr: Ref,
    },
    /// `pointer_attr P ATTR`: one `cuPointerGetAttribute` query.
    PointerAttribute {
        ptr: Ref,
        attr: PointerAttribute,
    },
    /// `fork_child_call alloc N`: fork; the child allocates `size` bytes.
    ForkChildAlloc {
        size: u64,
    },
    IpcGet {
        ptr: Ref,
        out: OutArg,
    },
    IpcOpen {
        handle: String,
        flags: u32,
        out: OutArg,
    },
    /// `sync`: cudaDeviceSynchronize / cuCtxSynchronize.
    Sync,
    IpcClose {
        ptr: Ref,
    },
    HandleZero,
    HandleRandom,
    HandleFlip {
        handle: String,
        offset: u8,
    },
    Send {
        handle: String,
        to: ProcIndex,
        /// The receiving process's name (for the canonical text).
        to_name: String,
    },
    Exit,
    // --- VMM ---
    /// `vmm_granularity D minimum|recommended [types=T]`.
    VmmGranularity {
        device: u32,
        kind: GranularityKind,
        types: HandleTypes,
    },
    /// `vmm_create SIZE [types=T] [device=D]`.
    VmmCreate {
        size: u64,
        types: HandleTypes,
        device: u32,
    },
    /// `vmm_export M posix_fd|fabric`.
    VmmExport {
        handle: String,
        ty: ShareableHandleType,
    },
    /// `vmm_import FD`.
    VmmImport {
        fd: String,
    },
    /// `vmm_reserve SIZE`.
    VmmReserve {
        size: u64,
    },
    /// `vmm_map VA SIZE M [offset=N]`.
    VmmMap {
        va: Ref,
        size: u64,
        handle: String,
        offset: u64,
    },
    /// `vmm_set_access VA SIZE none|read|rw [device=D]`.
    VmmSetAccess {
        va: Ref,
        size: u64,
        access: VmmAccess,
        device: u32,
    },
    /// `vmm_unmap VA SIZE`.
    VmmUnmap {
        va: Ref,
        size: u64,
    },
    /// `vmm_address_free VA SIZE`.
    VmmAddressFree {
        va: Ref,
        size: u64,
    },
    /// `vmm_release M`.
    VmmRelease {
        handle: String,
    },
    /// `fd_close FD`.
    FdClose {
        fd: String,
    },
    /// `fd_null_device`: open `/dev/null`.
    FdNullDevice,
    /// `fd_number N`: a descriptor number taken as is (no call).
    FdNumber {
        number: i32,
    },
    /// `send_fd FD -> PROC`: the result is `PROC`'s descriptor.
    SendFd {
        fd: String,
        to: ProcIndex,
        to_name: String,
    },
    // --- events ---
    /// `event_create [flags=...]`.
    EventCreate {
        flags: u32,
    },
    /// `event_record E [stream=S]`: on `S`, else the legacy default stream.
    EventRecord {
        event: String,
        stream: Option<String>,
    },
    EventQuery {
        event: String,
    },
    EventSync {
        event: String,
    },
    /// `stream_wait E [stream=S]`: `S` (else the legacy default stream) waits.
    StreamWait {
        event: String,
        stream: Option<String>,
    },
    EventElapsed {
        start: String,
        end: String,
    },
    EventDestroy {
        event: String,
    },
    IpcGetEvent {
        event: String,
        out: OutArg,
    },
    IpcOpenEvent {
        handle: String,
        out: OutArg,
    },
    EventHandleZero,
    EventHandleRandom,
    /// `slow_fill P BYTE us=N [at=OFF] [len=N]`: long work, then a fill.
    SlowFill {
        ptr: Ref,
        value: u8,
        micros: u64,
        at: Option<u64>,
        len: Option<u64>,
        /// As for `fill`: `len=`, or the `malloc*` size minus `at`.
        resolved_len: u64,
        /// `stream=`: launched on that stream, else on the legacy default stream.
        stream: Option<String>,
    },
    // --- memory pools ---
    /// `pool_create [types=T] [device=D]`.
    PoolCreate {
        types: HandleTypes,
        device: u32,
    },
    /// `pool_default [device=D]`: the device's default pool.
    PoolDefault {
        device: u32,
    },
    /// `pool_destroy PL`.
    PoolDestroy {
        pool: String,
    },
    /// `pool_export PL`: a POSIX descriptor.
    PoolExport {
        pool: String,
    },
    /// `pool_import FD`.
    PoolImport {
        fd: String,
    },
    /// `pool_set_access PL none|read|rw [device=D]`.
    PoolSetAccess {
        pool: String,
        access: VmmAccess,
        device: u32,
    },
    /// `pool_alloc PL SIZE`.
    PoolAlloc {
        pool: String,
        size: u64,
    },
    /// `pool_free P`.
    PoolFree {
        ptr: Ref,
    },
    /// `pool_export_ptr P`: the allocation's 64-byte export data.
    PoolExportPtr {
        ptr: Ref,
    },
    /// `pool_import_ptr PL X`.
    PoolImportPtr {
        pool: String,
        data: String,
    },
    // --- streams and copies ---
    /// `stream_create [flags=default|nonblocking]`.
    StreamCreate {
        flags: u32,
    },
    /// `stream_destroy S`.
    StreamDestroy {
        stream: String,
    },
    /// `stream_sync S`.
    StreamSync {
        stream: String,
    },
    /// `stream_query S`.
    StreamQuery {
        stream: String,
    },
    /// `copy DST SRC LEN [stream=S]`: device to device.
    Copy {
        dst: Ref,
        src: Ref,
        len: u64,
        stream: Option<String>,
    },
    /// `copy_peer DST DST_DEVICE SRC SRC_DEVICE LEN`.
    CopyPeer {
        dst: Ref,
        dst_device: u32,
        src: Ref,
        src_device: u32,
        len: u64,
    },
}

/// `flags=` of `stream_create` as written canonically.
pub fn fmt_stream_flags(flags: u32) -> String {
    use crate::driver::stream_flags::{DEFAULT, NON_BLOCKING};
    match flags {
        DEFAULT => "default".to_string(),
        NON_BLOCKING => "nonblocking".to_string(),
        other => format!("{other:#x}"),
    }
}

/// `flags=` of `event_create` as written canonically: `default`, or the
/// names of the set bits joined by `,`, with unknown bits as one hex number.
pub fn fmt_event_flags(flags: u32) -> String {
    use crate::driver::event_flags::NAMES;
    if flags == 0 {
        return "default".to_string();
    }
    let mut parts: Vec<String> = NAMES
        .iter()
        .filter(|(_, bit)| *bit != 0 && flags & bit != 0)
        .map(|(n, _)| n.to_string())
        .collect();
    let known = NAMES.iter().fold(0, |a, (_, b)| a | b);
    if flags & !known != 0 {
        parts.push(format!("{:#x}", flags & !known));
    }
    parts.join(",")
}

/// The type of the value an op produces (and of a binding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    Unit,
    Ptr,
    Context,
    Handle,
    Int,
    Bytes,
    Range,
    PointerInfo,
    // --- VMM ---
    VmmHandle,
    Fd,
    Event,
    EventHandle,
    // --- memory pools ---
    Pool,
    PoolExport,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`: an opaque id, labelled like handles.
    BufferId,
    Stream,
}

impl ValueType {
    /// For messages: "a pointer", "a context", ...
    pub fn describe(self) -> &'static str {
        match self {
            ValueType::Unit => "nothing",
            ValueType::Ptr => "a pointer",
            ValueType::Context => "a context",
            ValueType::Handle => "a handle",
            ValueType::Int => "an int",
            ValueType::Bytes => "bytes",
            ValueType::Range => "a range",
            ValueType::PointerInfo => "pointer info",
            ValueType::VmmHandle => "a VMM allocation handle",
            ValueType::Fd => "a file descriptor",
            ValueType::Event => "an event",
            ValueType::EventHandle => "an event handle",
            ValueType::Pool => "a memory pool",
            ValueType::PoolExport => "pool pointer export data",
            ValueType::BufferId => "a buffer id",
            ValueType::Stream => "a stream",
        }
    }
}

impl Op {
    /// The driver call this op makes, from the table in `calls.rs` (the
    /// row that owns its keyword and API names); `None` for ops that are
    /// not a driver call (`send`, `exit`, `offset`, handle forgeries, ...).
    pub fn call_kind(&self) -> Option<CallKind> {
        Some(match self {
            Op::DeviceCount => CallKind::DeviceCount,
            Op::Attr { .. } => CallKind::DeviceAttribute,
            Op::CanAccessPeer { .. } => CallKind::CanAccessPeer,
            Op::EnablePeer { .. } => CallKind::EnablePeerAccess,
            Op::SetDevice { .. } => CallKind::SetDevice,
            Op::PrimaryCtx { .. } => CallKind::PrimaryContext,
            Op::CtxCreate { .. } => CallKind::CreateContext,
            Op::CtxSet { .. } => CallKind::SetCurrentContext,
            Op::CtxCurrent => CallKind::CurrentContext,
            Op::CtxDestroy { .. } => CallKind::DestroyContext,
            Op::Malloc { .. } => CallKind::Alloc,
            Op::Free { .. } => CallKind::Free,
            Op::Fill { .. } => CallKind::Memset,
            Op::Write { .. } => CallKind::Write,
            Op::Read { .. } => CallKind::Read,
            Op::DeviceRead { .. } => CallKind::DeviceRead,
            Op::AddressRange { .. } => CallKind::AddressRange,
            Op::PointerAttr { .. } => CallKind::PointerInfo,
            Op::PointerAttribute { .. } => CallKind::PointerAttribute,
            Op::ForkChildAlloc { .. } => CallKind::ForkChildAlloc,
            Op::IpcGet { .. } => CallKind::IpcGetMemHandle,
            Op::IpcOpen { .. } => CallKind::IpcOpenMemHandle,
            Op::IpcClose { .. } => CallKind::IpcCloseMemHandle,
            Op::Sync => CallKind::Synchronize,
            Op::VmmGranularity { .. } => CallKind::VmmGranularity,
            Op::VmmCreate { .. } => CallKind::VmmCreate,
            Op::VmmExport { .. } => CallKind::VmmExport,
            Op::VmmImport { .. } => CallKind::VmmImport,
            Op::VmmReserve { .. } => CallKind::VmmReserve,
            Op::VmmMap { .. } => CallKind::VmmMap,
            Op::VmmSetAccess { .. } => CallKind::VmmSetAccess,
            Op::VmmUnmap { .. } => CallKind::VmmUnmap,
            Op::VmmAddressFree { .. } => CallKind::VmmAddressFree,
            Op::VmmRelease { .. } => CallKind::VmmRelease,
            Op::FdClose { .. } => CallKind::FdClose,
            Op::FdNullDevice => CallKind::FdOpenNullDevice,
            Op::EventCreate { .. } => CallKind::EventCreate,
            Op::EventRecord { stream: None, .. } => CallKind::EventRecord,
            Op::EventRecord {
                stream: Some(_), ..
            } => CallKind::EventRecordOn,
            Op::EventQuery { .. } => CallKind::EventQuery,
            Op::EventSync { .. } => CallKind::EventSynchronize,
            Op::StreamWait { stream: None, .. } => CallKind::StreamWaitEvent,
            Op::StreamWait {
                stream: Some(_), ..
            } => CallKind::StreamWaitEventOn,
            Op::EventElapsed { .. } => CallKind::EventElapsed,
            Op::EventDestroy { .. } => CallKind::EventDestroy,
            Op::IpcGetEvent { .. } => CallKind::IpcGetEventHandle,
            Op::IpcOpenEvent { .. } => CallKind::IpcOpenEventHandle,
            Op::SlowFill { stream: None, .. } => CallKind::SlowFill,
            Op::SlowFill {
                stream: Some(_), ..
            } => CallKind::SlowFillOn,
            Op::PoolCreate { .. } => CallKind::PoolCreate,
            Op::PoolDefault { .. } => CallKind::PoolDefault,
            Op::PoolDestroy { .. } => CallKind::PoolDestroy,
            Op::PoolExport { .. } => CallKind::PoolExport,
            Op::PoolImport { .. } => CallKind::PoolImport,
            Op::PoolSetAccess { .. } => CallKind::PoolSetAccess,
            Op::PoolAlloc { .. } => CallKind::PoolAlloc,
            Op::PoolFree { .. } => CallKind::PoolFree,
            Op::PoolExportPtr { .. } => CallKind::PoolExportPtr,
            Op::PoolImportPtr { .. } => CallKind::PoolImportPtr,
            Op::StreamCreate { .. } => CallKind::StreamCreate,
            Op::StreamDestroy { .. } => CallKind::StreamDestroy,
            Op::StreamSync { .. } => CallKind::StreamSynchronize,
            Op::StreamQuery { .. } => CallKind::StreamQuery,
            Op::Copy { .. } => CallKind::CopyDevice,
            Op::CopyPeer { .. } => CallKind::CopyPeer,
            Op::Offset { .. }
            | Op::HandleZero
            | Op::HandleRandom
            | Op::HandleFlip { .. }
            | Op::Send { .. }
            | Op::Exit
            | Op::FdNumber { .. }
            | Op::SendFd { .. }
            | Op::EventHandleZero
            | Op::EventHandleRandom => return None,
        })
    }

    /// The op's keyword as written in files: its call's (the table's),
    /// by allocation kind for `malloc*` and `free*`, or its own.
    pub fn keyword(&self) -> &'static str {
        match self {
            Op::Malloc { kind, .. } => match kind {
                MemKind::Device => CallKind::Alloc.keyword(),
                MemKind::Managed => "malloc_managed",
                MemKind::PinnedHost => "malloc_host",
                MemKind::StreamOrdered => "malloc_async",
            },
            Op::Free { kind, .. } => match kind {
                FreeKind::Device => CallKind::Free.keyword(),
                FreeKind::Host => "free_host",
                FreeKind::StreamOrdered => "free_async",
            },
            Op::Offset { .. } => "offset",
            Op::HandleZero => "handle_zero",
            Op::HandleRandom => "handle_random",
            Op::HandleFlip { .. } => "handle_flip",
            Op::Send { .. } => "send",
            Op::Exit => "exit",
            Op::FdNumber { .. } => "fd_number",
            Op::SendFd { .. } => "send_fd",
            Op::EventHandleZero => "event_handle_zero",
            Op::EventHandleRandom => "event_handle_random",
            _ => self
                .call_kind()
                .expect("every op without its own keyword makes a driver call")
                .keyword(),
        }
    }

    /// The API entry point the op calls in `dialect` (the first, where it
    /// makes several): its call's (the table's), by allocation kind for
    /// `malloc*` and `free*` and by stream for `copy`; `None` for
    /// harness-local ops and `exit`.
    pub fn api(&self, dialect: Dialect) -> Option<&'static str> {
        // (CUDA runtime, CUDA driver, HIP)
        let (runtime, driver, hip) = match self {
            Op::Malloc { kind, .. } => match kind {
                MemKind::Device => return Some(CallKind::Alloc.api(dialect)),
                MemKind::Managed => ("cudaMallocManaged", "cuMemAllocManaged", "hipMallocManaged"),
                MemKind::PinnedHost => ("cudaMallocHost", "cuMemAllocHost", "hipHostMalloc"),
                MemKind::StreamOrdered => ("cudaMallocAsync", "cuMemAllocAsync", "hipMallocAsync"),
            },
            Op::Free { kind, .. } => match kind {
                FreeKind::Device => return Some(CallKind::Free.api(dialect)),
                FreeKind::Host => ("cudaFreeHost", "cuMemFreeHost", "hipHostFree"),
                FreeKind::StreamOrdered => ("cudaFreeAsync", "cuMemFreeAsync", "hipFreeAsync"),
            },
            Op::Copy {
                stream: Some(_), ..
            } => ("cudaMemcpyAsync", "cuMemcpyDtoDAsync", "hipMemcpyDtoDAsync"),
            _ => return self.call_kind().map(|call| call.api(dialect)),
        };
        Some(match dialect {
            Dialect::Runtime => runtime,
            Dialect::Driver => driver,
            Dialect::Hip => hip,
        })
    }

    /// What a successful call produces.
    pub fn result_type(&self) -> ValueType {
        match self {
            Op::DeviceCount | Op::Attr { .. } | Op::CanAccessPeer { .. } => ValueType::Int,
            Op::PrimaryCtx { .. } | Op::CtxCreate { .. } | Op::CtxCurrent => ValueType::Context,
            Op::Malloc { .. } | Op::Offset { .. } | Op::IpcOpen { .. } => ValueType::Ptr,
            Op::Read { .. } | Op::DeviceRead { .. } => ValueType::Bytes,
            Op::AddressRange { .. } => ValueType::Range,
            Op::PointerAttr { .. } => ValueType::PointerInfo,
            Op::PointerAttribute { attr, .. } => match attr.value_kind() {
                PointerAttributeValue::Address => ValueType::Ptr,
                PointerAttributeValue::BufferId => ValueType::BufferId,
                PointerAttributeValue::Number => ValueType::Int,
            },
            Op::ForkChildAlloc { .. } => ValueType::Unit,
            Op::IpcGet { .. } | Op::HandleZero | Op::HandleRandom | Op::HandleFlip { .. } => {
                ValueType::Handle
            }
            Op::VmmGranularity { .. } => ValueType::Int,
            Op::VmmReserve { .. } => ValueType::Ptr,
            Op::VmmCreate { .. } | Op::VmmImport { .. } => ValueType::VmmHandle,
            Op::VmmExport { .. } | Op::FdNullDevice | Op::FdNumber { .. } | Op::SendFd { .. } => {
                ValueType::Fd
            }
            Op::VmmMap { .. }
            | Op::VmmSetAccess { .. }
            | Op::VmmUnmap { .. }
            | Op::VmmAddressFree { .. }
            | Op::VmmRelease { .. }
            | Op::FdClose { .. } => ValueType::Unit,
            Op::EventCreate { .. } | Op::IpcOpenEvent { .. } => ValueType::Event,
            Op::IpcGetEvent { .. } | Op::EventHandleZero | Op::EventHandleRandom => {
                ValueType::EventHandle
            }
            // Elapsed milliseconds differ run to run; traces record only the outcome.
            Op::EventElapsed { .. }
            | Op::EventRecord { .. }
            | Op::EventQuery { .. }
            | Op::EventSync { .. }
            | Op::StreamWait { .. }
            | Op::EventDestroy { .. }
            | Op::SlowFill { .. }
            | Op::StreamDestroy { .. }
            | Op::StreamSync { .. }
            | Op::StreamQuery { .. }
            | Op::Copy { .. }
            | Op::CopyPeer { .. } => ValueType::Unit,
            Op::StreamCreate { .. } => ValueType::Stream,
            Op::SetDevice { .. }
            | Op::EnablePeer { .. }
            | Op::CtxSet { .. }
            | Op::CtxDestroy { .. }
            | Op::Free { .. }
            | Op::Fill { .. }
            | Op::Write { .. }
            | Op::IpcClose { .. }
            | Op::Sync
            | Op::Send { .. }
            | Op::Exit => ValueType::Unit,
            Op::PoolCreate { .. } | Op::PoolDefault { .. } | Op::PoolImport { .. } => {
                ValueType::Pool
            }
            Op::PoolExport { .. } => ValueType::Fd,
            Op::PoolAlloc { .. } | Op::PoolImportPtr { .. } => ValueType::Ptr,
            Op::PoolExportPtr { .. } => ValueType::PoolExport,
            Op::PoolDestroy { .. } | Op::PoolSetAccess { .. } | Op::PoolFree { .. } => {
                ValueType::Unit
            }
        }
    }

    /// Whether the op runs in the harness only (no driver call).
    pub fn is_local(&self) -> bool {
        matches!(
            self,
            Op::Offset { .. }
                | Op::HandleZero
                | Op::HandleRandom
                | Op::HandleFlip { .. }
                | Op::Send { .. }
                | Op::FdNumber { .. }
                | Op::EventHandleZero
                | Op::EventHandleRandom
        )
    }

    /// The bindings the op reads (arguments), in argument order.
    pub fn uses(&self) -> Vec<&str> {
        self.used().into_iter().flatten().collect()
    }

    /// [`Op::uses`] without a `Vec`: the (at most three) names, in order.
    pub fn used(&self) -> [Option<&str>; 3] {
        match self {
            Op::CtxSet { ctx } | Op::CtxDestroy { ctx } => [Some(ctx.as_str()), None, None],
            Op::Free { ptr, .. }
            | Op::Offset { ptr, .. }
            | Op::Fill { ptr, .. }
            | Op::Write { ptr, .. }
            | Op::Read { ptr, .. }
            | Op::DeviceRead { ptr, .. }
            | Op::AddressRange { ptr }
            | Op::PointerAttr { ptr }
            | Op::PointerAttribute { ptr, .. }
            | Op::IpcGet { ptr, .. }
            | Op::IpcClose { ptr } => [ptr.name(), None, None],
            Op::SlowFill { ptr, stream, .. } => [ptr.name(), stream.as_deref(), None],
            Op::EventRecord { event, stream } | Op::StreamWait { event, stream } => {
                [Some(event.as_str()), stream.as_deref(), None]
            }
            Op::StreamDestroy { stream }
            | Op::StreamSync { stream }
            | Op::StreamQuery { stream } => [Some(stream.as_str()), None, None],
            Op::Copy {
                dst, src, stream, ..
            } => [dst.name(), src.name(), stream.as_deref()],
            Op::CopyPeer { dst, src, .. } => [dst.name(), src.name(), None],
            Op::EventQuery { event }
            | Op::EventSync { event }
            | Op::EventDestroy { event }
            | Op::IpcGetEvent { event, .. } => [bound_event(event), None, None],
            Op::EventElapsed { start, end } => [bound_event(start), bound_event(end), None],
            Op::IpcOpenEvent { handle, .. } => [Some(handle.as_str()), None, None],
            Op::IpcOpen { handle, .. }
            | Op::HandleFlip { handle, .. }
            | Op::Send { handle, .. } => [Some(handle.as_str()), None, None],
            Op::DeviceCount
            | Op::Sync
            | Op::Attr { .. }
            | Op::CanAccessPeer { .. }
            | Op::EnablePeer { .. }
            | Op::SetDevice { .. }
            | Op::PrimaryCtx { .. }
            | Op::CtxCreate { .. }
            | Op::CtxCurrent
            | Op::Malloc { .. }
            | Op::ForkChildAlloc { .. }
            | Op::HandleZero
            | Op::HandleRandom
            | Op::EventCreate { .. }
            | Op::StreamCreate { .. }
            | Op::EventHandleZero
            | Op::EventHandleRandom
            | Op::Exit => [None, None, None],
            // A null VA: the handle is the only name.
            Op::VmmMap { va, handle, .. } => match va.name() {
                Some(v) => [Some(v), Some(handle.as_str()), None],
                None => [Some(handle.as_str()), None, None],
            },
            Op::VmmSetAccess { va, .. }
            | Op::VmmUnmap { va, .. }
            | Op::VmmAddressFree { va, .. } => [va.name(), None, None],
            Op::VmmExport { handle, .. } | Op::VmmRelease { handle } => {
                [Some(handle.as_str()), None, None]
            }
            Op::VmmImport { fd } | Op::FdClose { fd } | Op::SendFd { fd, .. } => {
                [Some(fd.as_str()), None, None]
            }
            Op::VmmGranularity { .. }
            | Op::VmmCreate { .. }
            | Op::VmmReserve { .. }
            | Op::FdNullDevice
            | Op::FdNumber { .. } => [None, None, None],
            Op::PoolCreate { .. } | Op::PoolDefault { .. } => [None, None, None],
            Op::PoolDestroy { pool }
            | Op::PoolExport { pool }
            | Op::PoolSetAccess { pool, .. }
            | Op::PoolAlloc { pool, .. } => [Some(pool.as_str()), None, None],
            Op::PoolImport { fd } => [Some(fd.as_str()), None, None],
            Op::PoolFree { ptr } | Op::PoolExportPtr { ptr } => [ptr.name(), None, None],
            Op::PoolImportPtr { pool, data } => [Some(pool.as_str()), Some(data.as_str()), None],
        }
    }
}

/// Integers in canonical text: `2MiB`, `4KiB`, `16`.
pub fn fmt_size(n: u64) -> String {
    Size(n).to_string()
}

/// [`fmt_size`] as a `Display` value: written in place, no `String` made.
#[derive(Debug, Clone, Copy)]
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        let n = self.0;
        for (unit, suffix) in UNITS {
            if n != 0 && n % unit == 0 {
                return write!(f, "{}{suffix}", n / unit);
            }
        }
        write!(f, "{n}")
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kw = self.keyword();
        match self {
            Op::DeviceCount
            | Op::CtxCurrent
            | Op::HandleZero
            | Op::HandleRandom
            | Op::Sync
            | Op::EventHandleZero
            | Op::EventHandleRandom
            | Op::Exit => f.write_str(kw),
            Op::EventCreate { flags } => write!(f, "{kw} flags={}", fmt_event_flags(*flags)),
            Op::EventQuery { event } | Op::EventSync { event } | Op::EventDestroy { event } => {
                write!(f, "{kw} {event}")
            }
            Op::EventRecord { event, stream } | Op::StreamWait { event, stream } => {
                write!(f, "{kw} {event}")?;
                write_stream(f, stream)
            }
            Op::StreamCreate { flags } => write!(f, "{kw} flags={}", fmt_stream_flags(*flags)),
            Op::StreamDestroy { stream }
            | Op::StreamSync { stream }
            | Op::StreamQuery { stream } => write!(f, "{kw} {stream}"),
            Op::Copy {
                dst,
                src,
                len,
                stream,
            } => {
                write!(f, "{kw} {dst} {src} {}", Size(*len))?;
                write_stream(f, stream)
            }
            Op::CopyPeer {
                dst,
                dst_device,
                src,
                src_device,
                len,
            } => write!(
                f,
                "{kw} {dst} {dst_device} {src} {src_device} {}",
                Size(*len)
            ),
            Op::EventElapsed { start, end } => write!(f, "{kw} {start} {end}"),
            Op::IpcGetEvent { event, out } => {
                write!(f, "{kw} {event}")?;
                if *out == OutArg::Null {
                    f.write_str(" out=null")?;
                }
                Ok(())
            }
            Op::IpcOpenEvent { handle, out } => {
                write!(f, "{kw} {handle}")?;
                if *out == OutArg::Null {
                    f.write_str(" out=null")?;
                }
                Ok(())
            }
            Op::SlowFill {
                ptr,
                value,
                micros,
                at,
                len,
                stream,
                ..
            } => {
                write!(f, "{kw} {ptr} {value:#04x} us={micros}")?;
                if let Some(at) = at {
                    write!(f, " at={}", Size(*at))?;
                }
                if let Some(len) = len {
                    write!(f, " len={}", Size(*len))?;
                }
                write_stream(f, stream)
            }
            Op::Attr { device, attr } => write!(f, "{kw} {device} {}", attr.name()),
            Op::CanAccessPeer { device, peer } => write!(f, "{kw} {device} {peer}"),
            Op::EnablePeer { peer } => write!(f, "{kw} {peer}"),
            Op::SetDevice { device } | Op::PrimaryCtx { device } | Op::CtxCreate { device } => {
                write!(f, "{kw} {device}")
            }
            Op::CtxSet { ctx } | Op::CtxDestroy { ctx } => write!(f, "{kw} {ctx}"),
            Op::Malloc { size, .. } => write!(f, "{kw} {}", Size(*size)),
            Op::Free { ptr, .. }
            | Op::AddressRange { ptr }
            | Op::PointerAttr { ptr }
            | Op::IpcClose { ptr } => write!(f, "{kw} {ptr}"),
            Op::PointerAttribute { ptr, attr } => write!(f, "{kw} {ptr} {}", attr.name()),
            Op::ForkChildAlloc { size } => write!(f, "{kw} alloc {}", Size(*size)),
            Op::Offset { ptr, bytes } => write!(f, "{kw} {ptr} {}", Size(*bytes)),
            Op::Fill {
                ptr,
                value,
                at,
                len,
                ..
            } => {
                write!(f, "{kw} {ptr} {value:#04x}")?;
                if let Some(at) = at {
                    write!(f, " at={}", Size(*at))?;
                }
                if let Some(len) = len {
                    write!(f, " len={}", Size(*len))?;
                }
                Ok(())
            }
            Op::Write {
                ptr,
                offset,
                pattern,
            } => write!(f, "{kw} {ptr} {} {pattern}", Size(*offset)),
            Op::Read { ptr, offset, len } | Op::DeviceRead { ptr, offset, len } => {
                write!(f, "{kw} {ptr} {} {}", Size(*offset), Size(*len))
            }
            Op::IpcGet { ptr, out } => {
                write!(f, "{kw} {ptr}")?;
                if *out == OutArg::Null {
                    f.write_str(" out=null")?;
                }
                Ok(())
            }
            Op::IpcOpen { handle, flags, out } => {
                write!(f, "{kw} {handle}")?;
                if *flags == crate::driver::IPC_MEM_LAZY_ENABLE_PEER_ACCESS {
                    f.write_str(" flags=lazy")?;
                } else {
                    write!(f, " flags={flags}")?;
                }
                if *out == OutArg::Null {
                    f.write_str(" out=null")?;
                }
                Ok(())
            }
            Op::HandleFlip { handle, offset } => write!(f, "{kw} {handle} {offset}"),
            Op::Send {
                handle, to_name, ..
            } => write!(f, "{kw} {handle} -> {to_name}"),
            Op::FdNullDevice => f.write_str(kw),
            Op::VmmGranularity {
                device,
                kind,
                types,
            } => write!(f, "{kw} {device} {} types={}", kind.name(), types.name()),
            Op::VmmCreate {
                size,
                types,
                device,
            } => write!(
                f,
                "{kw} {} types={} device={device}",
                Size(*size),
                types.name()
            ),
            Op::VmmExport { handle, ty } => write!(f, "{kw} {handle} {}", ty.name()),
            Op::VmmImport { fd } | Op::FdClose { fd } => write!(f, "{kw} {fd}"),
            Op::VmmReserve { size } => write!(f, "{kw} {}", Size(*size)),
            Op::VmmMap {
                va,
                size,
                handle,
                offset,
            } => write!(
                f,
                "{kw} {va} {} {handle} offset={}",
                Size(*size),
                Size(*offset)
            ),
            Op::VmmSetAccess {
                va,
                size,
                access,
                device,
            } => write!(
                f,
                "{kw} {va} {} {} device={device}",
                Size(*size),
                access.name()
            ),
            Op::VmmUnmap { va, size } | Op::VmmAddressFree { va, size } => {
                write!(f, "{kw} {va} {}", Size(*size))
            }
            Op::VmmRelease { handle } => write!(f, "{kw} {handle}"),
            Op::FdNumber { number } => write!(f, "{kw} {number}"),
            Op::SendFd { fd, to_name, .. } => write!(f, "{kw} {fd} -> {to_name}"),
            Op::PoolCreate { types, device } => {
                write!(f, "{kw} types={} device={device}", types.name())
            }
            Op::PoolDefault { device } => write!(f, "{kw} device={device}"),
            Op::PoolDestroy { pool } | Op::PoolExport { pool } => write!(f, "{kw} {pool}"),
            Op::PoolImport { fd } => write!(f, "{kw} {fd}"),
            Op::PoolSetAccess {
                pool,
                access,
                device,
            } => write!(f, "{kw} {pool} {} device={device}", access.name()),
            Op::PoolAlloc { pool, size } => write!(f, "{kw} {pool} {}", Size(*size)),
            Op::PoolFree { ptr } | Op::PoolExportPtr { ptr } => write!(f, "{kw} {ptr}"),
            Op::PoolImportPtr { pool, data } => write!(f, "{kw} {pool} {data}"),
        }
    }
}

/// An event argument written `null`: the NULL `cudaEvent_t` (no binding can
/// be called `null`).
pub const NULL_EVENT: &str = "null";

/// The binding an event argument names (`None` for [`NULL_EVENT`]).
fn bound_event(event: &str) -> Option<&str> {
    (event != NULL_EVENT).then_some(event)
}

/// ` stream=S` where an op names a stream other than the legacy default.
fn write_stream(f: &mut fmt::Formatter<'_>, stream: &Option<String>) -> fmt::Result {
    match stream {
        Some(s) => write!(f, " stream={s}"),
        None => Ok(()),
    }
}

/// One expectation after `=>`.
#[derive(Debug, Clone, PartialEq)]
pub enum Expectation {
    Ok,
    Any,
    /// `error`: any error.
    AnyError,
    /// The process dies during the call (a measured driver crash).
    Crash,
    /// A named error, compared by kind; `name` is the spelling written.
    Error {
        kind: ErrorKind,
        name: String,
    },
    /// `== X`
    Eq(Ref),
    /// `!= X`
    Ne(Ref),
    Bytes(BytePattern),
    Value(i64),
    Size(u64),
    BaseEq(Ref),
    BaseNe(Ref),
    Type(MemoryType),
    Device(u32),
    /// `A | B | ...`: the step's outcome is one of the alternatives, each
    /// `ok` or a named error (peers' tests accept either of two errors where
    /// drivers differ). The trace records the outcome that came.
    OneOf(Vec<Expectation>),
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expectation::Ok => f.write_str("ok"),
            Expectation::Any => f.write_str("any"),
            Expectation::AnyError => f.write_str("error"),
            Expectation::Crash => f.write_str("crash"),
            Expectation::Error { name, .. } => f.write_str(name),
            Expectation::Eq(r) => write!(f, "== {r}"),
            Expectation::Ne(r) => write!(f, "!= {r}"),
            Expectation::Bytes(p) => write!(f, "bytes {p}"),
            Expectation::Value(v) => write!(f, "value {v}"),
            Expectation::Size(s) => write!(f, "size {}", Size(*s)),
            Expectation::BaseEq(r) => write!(f, "base == {r}"),
            Expectation::BaseNe(r) => write!(f, "base != {r}"),
            Expectation::Type(t) => write!(f, "type {}", t.name()),
            Expectation::Device(d) => write!(f, "device {d}"),
            Expectation::OneOf(alternatives) => {
                for (i, a) in alternatives.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" | ")?;
                    }
                    write!(f, "{a}")?;
                }
                Ok(())
            }
        }
    }
}

/// A comma-separated list of expectations, all of which must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectList {
    pub items: Vec<Expectation>,
    /// The list as written in the file.
    pub text: String,
}

impl ExpectList {
    fn single(e: Expectation) -> ExpectList {
        ExpectList {
            text: e.to_string(),
            items: vec![e],
        }
    }
}

/// Everything after `=>` (or its absence).
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// No `=>`: the step must succeed.
    Default,
    List(ExpectList),
    /// `runtime: ...; driver: ...; hip: ...`; a missing arm means `any`,
    /// except a missing `hip:` arm, which takes the `runtime:` arm (the HIP
    /// runtime API mirrors the CUDA runtime API call for call).
    ByDialect {
        runtime: Option<ExpectList>,
        driver: Option<ExpectList>,
        hip: Option<ExpectList>,
    },
}

impl Expect {
    /// The expectations in force for a run in `dialect`.
    pub fn for_dialect(&self, dialect: Dialect) -> ExpectList {
        self.in_force(dialect).into_owned()
    }

    /// [`Expect::for_dialect`], borrowed where the step spells the list out.
    pub fn in_force(&self, dialect: Dialect) -> Cow<'_, ExpectList> {
        match self {
            Expect::Default => Cow::Owned(ExpectList::single(Expectation::Ok)),
            Expect::List(l) => Cow::Borrowed(l),
            Expect::ByDialect {
                runtime,
                driver,
                hip,
            } => {
                let arm = match dialect {
                    Dialect::Runtime => runtime,
                    Dialect::Driver => driver,
                    Dialect::Hip if hip.is_some() => hip,
                    Dialect::Hip => runtime,
                };
                match arm {
                    Some(l) => Cow::Borrowed(l),
                    None => Cow::Owned(ExpectList::single(Expectation::Any)),
                }
            }
        }
    }

    /// Every list (both arms), for validation.
    pub fn lists(&self) -> Vec<&ExpectList> {
        match self {
            Expect::Default => vec![],
            Expect::List(l) => vec![l],
            Expect::ByDialect {
                runtime,
                driver,
                hip,
            } => runtime
                .iter()
                .chain(driver.iter())
                .chain(hip.iter())
                .collect(),
        }
    }
}

/// `expect hazard KIND` / `expect no-hazards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HazardCheck {
    Hazard(HazardKind),
    NoHazards,
}

impl fmt::Display for HazardCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HazardCheck::Hazard(k) => write!(f, "hazard {}", k.name()),
            HazardCheck::NoHazards => f.write_str("no-hazards"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HazardExpectation {
    /// 1-based line in the file.
    pub line: usize,
    pub check: HazardCheck,
}
