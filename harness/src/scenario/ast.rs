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

/// Writes each [`Piece`] in turn into a `fmt::Write`.
macro_rules! put {
    ($out:expr, $($piece:expr),+ $(,)?) => {{
        $(Piece::put(&$piece, $out)?;)+
        fmt::Result::Ok(())
    }};
}

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
    /// What the step does.
    pub op: Op,
    /// What its outcome must be.
    pub expect: Expect,
    /// `repeat N`: the step runs `N` times; a list name (`e[]`) names the
    /// current iteration's element (docs/scenario-language.md).
    pub repeat: Option<u32>,
}

impl Step {
    /// Canonical text of the step without process and expectations:
    /// `p = ipc_open h flags=lazy`.
    pub fn text(&self) -> String {
        // Room for most steps, so the text is written without regrowing.
        let mut s = String::with_capacity(48);
        if let Some(n) = self.repeat {
            s.push_str("repeat ");
            crate::trace::push_decimal(&mut s, n.into());
            s.push(' ');
        }
        if let Some(b) = &self.bind {
            s.push_str(b);
            s.push_str(" = ");
        }
        let _ = self.op.write_text(&mut s);
        s
    }
}

/// A pointer argument: a binding or the NULL device pointer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ref {
    /// `null`: the NULL device pointer.
    Null,
    /// A binding's name.
    Name(String),
}

impl Ref {
    /// The binding's name; `None` for `null`.
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

/// A byte pattern as written: items in order, `ab*16 00*48`,
/// `(01 02 03 04)*16`, `iota(10)*64`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BytePattern {
    /// The pattern's items, in order.
    pub items: Vec<PatternItem>,
}

/// One item of a [`BytePattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternItem {
    /// `ab*16` (`ab`: a count of 1): one byte, repeated.
    Run(u8, u64),
    /// `(01 02 03 04)*16`: a group of bytes, repeated (count: groups).
    Group(Vec<u8>, u64),
    /// `iota(10)*64`: a counting sequence, byte `i` is `BASE + i` modulo
    /// 256 (count: bytes).
    Iota(u8, u64),
}

impl PatternItem {
    /// Number of bytes.
    pub fn len(&self) -> u64 {
        match self {
            PatternItem::Run(_, n) | PatternItem::Iota(_, n) => *n,
            PatternItem::Group(g, n) => (g.len() as u64).saturating_mul(*n),
        }
    }

    /// Whether the item has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Byte `i` of the item (`i < len()`).
    fn byte(&self, i: u64) -> u8 {
        match self {
            PatternItem::Run(b, _) => *b,
            PatternItem::Group(g, _) => g[(i % g.len() as u64) as usize],
            PatternItem::Iota(base, _) => base.wrapping_add(i as u8),
        }
    }
}

impl BytePattern {
    /// Total number of bytes.
    pub fn len(&self) -> u64 {
        self.items
            .iter()
            .fold(0u64, |a, r| a.saturating_add(r.len()))
    }

    /// Whether the pattern has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes themselves.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Room for the whole pattern up front, so it is not regrown; a
        // pattern over `MAX_ROOM` grows as it is written.
        const MAX_ROOM: u64 = 1 << 20;
        let room = self.len().min(MAX_ROOM);
        let mut out = Vec::with_capacity(usize::try_from(room).unwrap_or(0));
        for item in &self.items {
            match item {
                PatternItem::Run(b, n) => out.extend(std::iter::repeat_n(*b, *n as usize)),
                _ => out.extend((0..item.len()).map(|i| item.byte(i))),
            }
        }
        out
    }

    /// Whether `bytes` are exactly the pattern (without expanding it).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        let mut i = 0usize;
        for item in &self.items {
            let n = item.len();
            if ((bytes.len() - i) as u64) < n {
                return false;
            }
            let n = n as usize;
            let here = &bytes[i..i + n];
            let same = match item {
                PatternItem::Run(b, _) => crate::trace::run_end(here, 0, *b) == n,
                _ => here
                    .iter()
                    .enumerate()
                    .all(|(k, &x)| x == item.byte(k as u64)),
            };
            if !same {
                return false;
            }
            i += n;
        }
        i == bytes.len()
    }
}

impl fmt::Display for PatternItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = match self {
            PatternItem::Run(b, n) => {
                f.write_str(hex_byte(*b))?;
                *n
            }
            PatternItem::Group(g, n) => {
                f.write_str("(")?;
                for (i, b) in g.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    f.write_str(hex_byte(*b))?;
                }
                f.write_str(")")?;
                *n
            }
            // The count is the length, always written.
            PatternItem::Iota(base, n) => return write!(f, "iota({base:02x})*{n}"),
        };
        if n != 1 {
            put!(f, "*", Dec(n))?;
        }
        Ok(())
    }
}

impl fmt::Display for BytePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

/// What a `kernel_fill` / `kernel_iota` kernel writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelContent {
    /// `kernel_fill`: these 1 to 8 bytes, in memory order, repeated.
    Word(Vec<u8>),
    /// `kernel_iota`: byte `i` is `BASE + i` modulo 256.
    Iota(u8),
}

/// Most bytes in a `kernel_fill` word (the kernel takes one 64-bit word).
pub const MAX_KERNEL_WORD: usize = 8;

impl KernelContent {
    fn keyword(&self) -> &'static str {
        match self {
            KernelContent::Word(_) => "kernel_fill",
            KernelContent::Iota(_) => "kernel_iota",
        }
    }

    /// The `kernel_pattern` call's `(pattern, width, step)`: the word
    /// packed little-endian, so that byte `k` of memory is byte `k` of it.
    pub fn call_args(&self) -> (u64, u8, u8) {
        match self {
            KernelContent::Word(bytes) => {
                let pattern = bytes
                    .iter()
                    .rev()
                    .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
                (pattern, bytes.len() as u8, 0)
            }
            KernelContent::Iota(base) => (u64::from(*base), 1, 1),
        }
    }

    /// The first `len` bytes the kernel writes.
    pub fn bytes(&self, len: u64) -> Vec<u8> {
        match self {
            KernelContent::Word(word) if !word.is_empty() => {
                // The word, then the bytes so far copied after themselves
                // (a whole number of words each time) until `len`.
                let len = len as usize;
                let mut out = Vec::with_capacity(len.max(word.len()));
                out.extend_from_slice(word);
                while out.len() < len {
                    out.extend_from_within(..out.len().min(len - out.len()));
                }
                out.truncate(len);
                out
            }
            KernelContent::Word(_) => Vec::new(),
            KernelContent::Iota(base) => (0..len).map(|i| base.wrapping_add(i as u8)).collect(),
        }
    }
}

impl fmt::Display for KernelContent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelContent::Word(bytes) => {
                f.write_str("(")?;
                for (i, b) in bytes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{b:02x}")?;
                }
                f.write_str(")")
            }
            KernelContent::Iota(base) => write!(f, "{base:#04x}"),
        }
    }
}

/// An operation and its arguments (see the op table in the language docs).
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `device_count`: cudaGetDeviceCount / cuDeviceGetCount.
    DeviceCount,
    /// `attr D NAME`: cudaDeviceGetAttribute / cuDeviceGetAttribute.
    Attr {
        /// The device ordinal.
        device: u32,
        /// The attribute.
        attr: DeviceAttribute,
    },
    /// `can_access_peer D P`: cudaDeviceCanAccessPeer / cuDeviceCanAccessPeer.
    CanAccessPeer {
        /// The device ordinal.
        device: u32,
        /// The peer device.
        peer: u32,
    },
    /// `enable_peer P`: cudaDeviceEnablePeerAccess / cuCtxEnablePeerAccess.
    EnablePeer {
        /// The peer device whose memory becomes accessible.
        peer: u32,
    },
    /// `set_device D`: cudaSetDevice / primary context + cuCtxSetCurrent.
    SetDevice {
        /// The device ordinal.
        device: u32,
    },
    /// `primary_ctx D`: cuDevicePrimaryCtxRetain.
    PrimaryCtx {
        /// The device ordinal.
        device: u32,
    },
    /// `ctx_create D`: cuCtxCreate (the new context becomes current).
    CtxCreate {
        /// The device ordinal.
        device: u32,
    },
    /// `ctx_set C`: cuCtxSetCurrent; `ctx_set null` ([`NULL_CONTEXT`]) is
    /// cuCtxSetCurrent(NULL), which pops the thread's current context.
    CtxSet {
        /// The binding of the context, or [`NULL_CONTEXT`].
        ctx: String,
    },
    /// `ctx_current`: cuCtxGetCurrent.
    CtxCurrent,
    /// `ctx_destroy C`: cuCtxDestroy.
    CtxDestroy {
        /// The binding of the context.
        ctx: String,
    },
    /// `malloc`, `malloc_managed`, `malloc_host`, `malloc_async SIZE`: the
    /// allocation call of `kind`.
    Malloc {
        /// Which allocation call.
        kind: MemKind,
        /// The size in bytes.
        size: u64,
    },
    /// `free`, `free_host`, `free_async P`: the free call of `kind`.
    Free {
        /// Which free call.
        kind: FreeKind,
        /// The pointer.
        ptr: Ref,
    },
    /// `offset P N`: pointer arithmetic, no call.
    Offset {
        /// The pointer.
        ptr: Ref,
        /// How many bytes past `ptr`.
        bytes: u64,
    },
    /// `fill P BYTE [at=OFF] [len=N]`: cudaMemset / cuMemsetD8.
    Fill {
        /// The pointer.
        ptr: Ref,
        /// The byte written.
        value: u8,
        /// `at=` as written.
        at: Option<u64>,
        /// `len=` as written.
        len: Option<u64>,
        /// The length actually filled: `len=`, or the `malloc*` size minus `at`.
        resolved_len: u64,
    },
    /// `write P OFF PATTERN`: a host-to-device copy.
    Write {
        /// The pointer.
        ptr: Ref,
        /// The offset in bytes from `ptr`.
        offset: u64,
        /// The bytes to write.
        pattern: BytePattern,
    },
    /// `read P OFF LEN`: a device-to-host copy.
    Read {
        /// The pointer.
        ptr: Ref,
        /// The offset in bytes from `ptr`.
        offset: u64,
        /// The length in bytes.
        len: u64,
    },
    /// `device_read P OFF LEN`: a copy kernel, then a device-to-host copy.
    DeviceRead {
        /// The pointer.
        ptr: Ref,
        /// The offset in bytes from `ptr`.
        offset: u64,
        /// The length in bytes.
        len: u64,
    },
    /// `address_range P`: cuMemGetAddressRange.
    AddressRange {
        /// The pointer.
        ptr: Ref,
    },
    /// `pointer_attr P`: cudaPointerGetAttributes / cuPointerGetAttribute.
    PointerAttr {
        /// The pointer.
        ptr: Ref,
    },
    /// `pointer_attr P ATTR`: one `cuPointerGetAttribute` query.
    PointerAttribute {
        /// The pointer.
        ptr: Ref,
        /// The attribute queried.
        attr: PointerAttribute,
    },
    /// `fork_child_call alloc N`: fork; the child allocates `size` bytes.
    ForkChildAlloc {
        /// The size in bytes.
        size: u64,
    },
    /// `ipc_get P [out=null]`: cudaIpcGetMemHandle / cuIpcGetMemHandle.
    IpcGet {
        /// The pointer.
        ptr: Ref,
        /// Whether the out-parameter is valid or NULL (`out=null`).
        out: OutArg,
    },
    /// `ipc_open H [flags=F] [out=null]`: cudaIpcOpenMemHandle /
    /// cuIpcOpenMemHandle.
    IpcOpen {
        /// The binding of the handle.
        handle: String,
        /// The flags (`lazy` = 1, the default).
        flags: u32,
        /// Whether the out-parameter is valid or NULL (`out=null`).
        out: OutArg,
    },
    /// `sync`: cudaDeviceSynchronize / cuCtxSynchronize.
    Sync,
    /// `ipc_close P`: cudaIpcCloseMemHandle / cuIpcCloseMemHandle.
    IpcClose {
        /// The pointer.
        ptr: Ref,
    },
    /// `handle_zero`: 64 zero bytes, no call.
    HandleZero,
    /// `handle_random`: 64 bytes derived from the run's seed and the step's
    /// index, no call.
    HandleRandom,
    /// `handle_flip H OFF`: a copy of the handle with one byte xor 0xff.
    HandleFlip {
        /// The binding of the handle.
        handle: String,
        /// The byte flipped (0..63).
        offset: u8,
    },
    /// `send H -> PROC`: passes the handle's 64 bytes to another process.
    Send {
        /// The binding of the handle.
        handle: String,
        /// The receiving process.
        to: ProcIndex,
        /// The receiving process's name (for the canonical text).
        to_name: String,
    },
    /// `exit`: the process exits normally.
    Exit,
    // --- VMM ---
    /// `vmm_granularity D minimum|recommended [types=T]`.
    VmmGranularity {
        /// The device ordinal.
        device: u32,
        /// Minimum or recommended.
        kind: GranularityKind,
        /// The requested shareable handle types (`types=`).
        types: HandleTypes,
    },
    /// `vmm_create SIZE [types=T] [device=D]`.
    VmmCreate {
        /// The size in bytes.
        size: u64,
        /// The requested shareable handle types (`types=`).
        types: HandleTypes,
        /// The device the memory lies on (`device=`).
        device: u32,
    },
    /// `vmm_export M posix_fd|fabric`.
    VmmExport {
        /// The binding of the handle.
        handle: String,
        /// The shareable handle type to export.
        ty: ShareableHandleType,
    },
    /// `vmm_import FD`.
    VmmImport {
        /// The binding of the descriptor.
        fd: String,
    },
    /// `vmm_reserve SIZE`.
    VmmReserve {
        /// The size in bytes.
        size: u64,
    },
    /// `vmm_map VA SIZE M [offset=N]`.
    VmmMap {
        /// The reserved address.
        va: Ref,
        /// The size in bytes.
        size: u64,
        /// The binding of the handle.
        handle: String,
        /// The offset in the allocation (`offset=`).
        offset: u64,
    },
    /// `vmm_set_access VA SIZE none|read|rw [device=D]`.
    VmmSetAccess {
        /// The reserved address.
        va: Ref,
        /// The size in bytes.
        size: u64,
        /// The access granted to `device`.
        access: VmmAccess,
        /// The device ordinal.
        device: u32,
    },
    /// `vmm_unmap VA SIZE`.
    VmmUnmap {
        /// The reserved address.
        va: Ref,
        /// The size in bytes.
        size: u64,
    },
    /// `vmm_address_free VA SIZE`.
    VmmAddressFree {
        /// The reserved address.
        va: Ref,
        /// The size in bytes.
        size: u64,
    },
    /// `vmm_release M`.
    VmmRelease {
        /// The binding of the handle.
        handle: String,
    },
    /// `fd_close FD`.
    FdClose {
        /// The binding of the descriptor.
        fd: String,
    },
    /// `fd_null_device`: open `/dev/null`.
    FdNullDevice,
    /// `fd_number N`: a descriptor number taken as is (no call).
    FdNumber {
        /// The descriptor number (may be negative).
        number: i32,
    },
    /// `send_fd FD -> PROC`: the result is `PROC`'s descriptor.
    SendFd {
        /// The binding of the descriptor.
        fd: String,
        /// The receiving process.
        to: ProcIndex,
        /// The receiving process's name (for the canonical text).
        to_name: String,
    },
    /// `pidfd_getfd OWNER FD`: the step's process takes a copy of `OWNER`'s
    /// descriptor `FD` with `pidfd_open` + `pidfd_getfd`.
    PidfdGetfd {
        /// The process whose descriptor is taken.
        owner: ProcIndex,
        /// That process's name, as written.
        owner_name: String,
        /// The owner's binding of the descriptor.
        fd: String,
    },
    // --- events ---
    /// `event_create [flags=...]`.
    EventCreate {
        /// The flags, as `driver::event_flags` bits.
        flags: u32,
    },
    /// `event_record E [stream=S]`: on `S`, else the legacy default stream.
    EventRecord {
        /// The binding of the event, or `null` (the NULL event).
        event: String,
        /// The stream (`stream=S`); `None`: the legacy default stream.
        stream: Option<String>,
    },
    /// `event_query E`: cudaEventQuery / cuEventQuery.
    EventQuery {
        /// The binding of the event, or `null` (the NULL event).
        event: String,
    },
    /// `event_sync E`: cudaEventSynchronize / cuEventSynchronize.
    EventSync {
        /// The binding of the event, or `null` (the NULL event).
        event: String,
    },
    /// `stream_wait E [stream=S]`: `S` (else the legacy default stream) waits.
    StreamWait {
        /// The binding of the event, or `null` (the NULL event).
        event: String,
        /// The stream (`stream=S`); `None`: the legacy default stream.
        stream: Option<String>,
    },
    /// `event_elapsed E1 E2`: cudaEventElapsedTime / cuEventElapsedTime.
    EventElapsed {
        /// The binding of the start event.
        start: String,
        /// The binding of the end event.
        end: String,
    },
    /// `event_destroy E`: cudaEventDestroy / cuEventDestroy.
    EventDestroy {
        /// The binding of the event, or `null` (the NULL event).
        event: String,
    },
    /// `ipc_get_event E [out=null]`: cudaIpcGetEventHandle / cuIpcGetEventHandle.
    IpcGetEvent {
        /// The binding of the event, or `null` (the NULL event).
        event: String,
        /// Whether the out-parameter is valid or NULL (`out=null`).
        out: OutArg,
    },
    /// `ipc_open_event EH [out=null]`: cudaIpcOpenEventHandle /
    /// cuIpcOpenEventHandle.
    IpcOpenEvent {
        /// The binding of the event handle.
        handle: String,
        /// Whether the out-parameter is valid or NULL (`out=null`).
        out: OutArg,
    },
    /// `event_handle_zero`: 64 zero bytes, no call.
    EventHandleZero,
    /// `event_handle_random`: 64 bytes as for `handle_random`, no call.
    EventHandleRandom,
    /// `slow_fill P BYTE us=N [at=OFF] [len=N]`: long work, then a fill.
    SlowFill {
        /// The pointer.
        ptr: Ref,
        /// The byte written.
        value: u8,
        /// How long the work runs, in microseconds (`us=`).
        micros: u64,
        /// `at=` as written.
        at: Option<u64>,
        /// `len=` as written.
        len: Option<u64>,
        /// As for `fill`: `len=`, or the `malloc*` size minus `at`.
        resolved_len: u64,
        /// `stream=`: launched on that stream, else on the legacy default stream.
        stream: Option<String>,
    },
    /// `kernel_fill P (BYTES) [at=OFF] [len=N]` / `kernel_iota P BASE
    /// [at=OFF] [len=N]`: a kernel writes a repeated word / a counting
    /// sequence, on the default stream like `slow_fill` (no long work).
    KernelPattern {
        /// The pointer written through.
        ptr: Ref,
        /// The word or count the kernel writes.
        content: KernelContent,
        /// `at=`: the offset from `ptr`.
        at: Option<u64>,
        /// `len=`, as written.
        len: Option<u64>,
        /// As for `fill`: `len=`, or the `malloc*` size minus `at`.
        resolved_len: u64,
    },
    // --- memory pools ---
    /// `pool_create [types=T] [device=D]`.
    PoolCreate {
        /// The requested shareable handle types (`types=`).
        types: HandleTypes,
        /// The device ordinal.
        device: u32,
    },
    /// `pool_default [device=D]`: the device's default pool.
    PoolDefault {
        /// The device ordinal.
        device: u32,
    },
    /// `pool_destroy PL`.
    PoolDestroy {
        /// The binding of the pool.
        pool: String,
    },
    /// `pool_export PL`: a POSIX descriptor.
    PoolExport {
        /// The binding of the pool.
        pool: String,
    },
    /// `pool_import FD`.
    PoolImport {
        /// The binding of the descriptor.
        fd: String,
    },
    /// `pool_set_access PL none|read|rw [device=D]`.
    PoolSetAccess {
        /// The binding of the pool.
        pool: String,
        /// The access granted to `device`.
        access: VmmAccess,
        /// The device ordinal.
        device: u32,
    },
    /// `pool_get_access PL [device=D]`: the access flags the pool gives
    /// device `D` (0 none, 1 read, 3 read-write).
    PoolGetAccess {
        /// The binding of the pool.
        pool: String,
        /// The device ordinal.
        device: u32,
    },
    /// `pool_alloc PL SIZE`.
    PoolAlloc {
        /// The binding of the pool.
        pool: String,
        /// The size in bytes.
        size: u64,
    },
    /// `pool_free P`.
    PoolFree {
        /// The pointer.
        ptr: Ref,
    },
    /// `pool_export_ptr P`: the allocation's 64-byte export data.
    PoolExportPtr {
        /// The pointer.
        ptr: Ref,
    },
    /// `pool_import_ptr PL X`.
    PoolImportPtr {
        /// The binding of the pool.
        pool: String,
        /// The binding of the pool pointer's export data.
        data: String,
    },
    // --- streams and copies ---
    /// `stream_create [flags=default|nonblocking]`.
    StreamCreate {
        /// The flags, as `driver::stream_flags` bits.
        flags: u32,
    },
    /// `stream_destroy S`.
    StreamDestroy {
        /// The binding of the stream.
        stream: String,
    },
    /// `stream_sync S`.
    StreamSync {
        /// The binding of the stream.
        stream: String,
    },
    /// `stream_query S`.
    StreamQuery {
        /// The binding of the stream.
        stream: String,
    },
    /// `copy DST SRC LEN [stream=S]`: device to device.
    Copy {
        /// The destination pointer.
        dst: Ref,
        /// The source pointer.
        src: Ref,
        /// Bytes to copy.
        len: u64,
        /// The stream (`stream=S`); `None`: a synchronous copy on the legacy default stream.
        stream: Option<String>,
    },
    /// `copy_peer DST DST_DEVICE SRC SRC_DEVICE LEN`.
    CopyPeer {
        /// The destination pointer.
        dst: Ref,
        /// The device the destination lives on.
        dst_device: u32,
        /// The source pointer.
        src: Ref,
        /// The device the source lives on.
        src_device: u32,
        /// Bytes to copy.
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
    /// Nothing (a free, close, set or wait).
    Unit,
    /// A device or host pointer.
    Ptr,
    /// A context.
    Context,
    /// An IPC memory handle.
    Handle,
    /// A number.
    Int,
    /// Bytes read back.
    Bytes,
    /// A base address and size (`address_range`).
    Range,
    /// A pointer's memory type and device (`pointer_info`).
    PointerInfo,
    // --- VMM ---
    /// A VMM allocation handle.
    VmmHandle,
    /// A file descriptor.
    Fd,
    /// An event.
    Event,
    /// An IPC event handle.
    EventHandle,
    // --- memory pools ---
    /// A memory pool.
    Pool,
    /// A pool pointer's 64-byte export data.
    PoolExport,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`: an opaque id, labelled like handles.
    BufferId,
    /// A stream.
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
            Op::PoolGetAccess { .. } => CallKind::PoolGetAccess,
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
            Op::PidfdGetfd { .. } => CallKind::PidfdGetfd,
            Op::KernelPattern { .. } => CallKind::KernelPattern,
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
            Op::KernelPattern { content, .. } => content.keyword(),
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
            Op::PidfdGetfd { .. } => ValueType::Fd,
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
            | Op::KernelPattern { .. }
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
            Op::PoolGetAccess { .. } => ValueType::Int,
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
            Op::CtxSet { ctx } => [bound_context(ctx), None, None],
            Op::CtxDestroy { ctx } => [Some(ctx.as_str()), None, None],
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
            | Op::IpcClose { ptr }
            | Op::KernelPattern { ptr, .. } => [ptr.name(), None, None],
            Op::SlowFill { ptr, stream, .. } => {
                [ptr.name(), stream.as_deref().and_then(bound_stream), None]
            }
            Op::EventRecord { event, stream } | Op::StreamWait { event, stream } => [
                bound_event(event),
                stream.as_deref().and_then(bound_stream),
                None,
            ],
            Op::StreamDestroy { stream }
            | Op::StreamSync { stream }
            | Op::StreamQuery { stream } => [bound_stream(stream), None, None],
            Op::Copy {
                dst, src, stream, ..
            } => [
                dst.name(),
                src.name(),
                stream.as_deref().and_then(bound_stream),
            ],
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
            Op::PidfdGetfd { fd, .. } => [Some(fd.as_str()), None, None],
            Op::VmmGranularity { .. }
            | Op::VmmCreate { .. }
            | Op::VmmReserve { .. }
            | Op::FdNullDevice
            | Op::FdNumber { .. } => [None, None, None],
            Op::PoolCreate { .. } | Op::PoolDefault { .. } => [None, None, None],
            Op::PoolDestroy { pool }
            | Op::PoolExport { pool }
            | Op::PoolSetAccess { pool, .. }
            | Op::PoolGetAccess { pool, .. }
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

/// A piece of canonical text (a step's, an op's), written straight into
/// any `fmt::Write` with `write_str`: into a `String` without the
/// format-string machinery and padding checks of `write!`, which were most
/// of the cost of a step's text (written for every step of a kept trace).
trait Piece {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result;
}

impl<T: Piece + ?Sized> Piece for &T {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        (**self).put(out)
    }
}

impl Piece for str {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        out.write_str(self)
    }
}

impl Piece for String {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        out.write_str(self)
    }
}

impl Piece for Ref {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        match self {
            Ref::Null => out.write_str("null"),
            Ref::Name(n) => out.write_str(n),
        }
    }
}

/// Written as `Display` writes them (rare in steps).
impl Piece for BytePattern {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        write!(out, "{self}")
    }
}

impl Piece for KernelContent {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        write!(out, "{self}")
    }
}

/// [`fmt_size`] as a `Display` value: written in place, no `String` made.
#[derive(Debug, Clone, Copy)]
struct Size(u64);

impl Piece for Size {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        let n = self.0;
        for (unit, suffix) in UNITS {
            if n != 0 && n % unit == 0 {
                return put!(out, Dec(n / unit), suffix);
            }
        }
        put!(out, Dec(n))
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.put(f)
    }
}

/// A number in decimal (as `{n}` writes it).
#[derive(Debug, Clone, Copy)]
struct Dec(u64);

impl Piece for Dec {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        let mut buf = [0u8; 20];
        let digits = crate::trace::decimal_digits(self.0, &mut buf);
        out.write_str(std::str::from_utf8(digits).map_err(|_| fmt::Error)?)
    }
}

/// A byte as `{:#04x}` writes it (`0x0a`).
#[derive(Debug, Clone, Copy)]
struct ByteHex(u8);

impl Piece for ByteHex {
    fn put<W: fmt::Write>(&self, out: &mut W) -> fmt::Result {
        out.write_str("0x")?;
        out.write_str(hex_byte(self.0))
    }
}

/// A byte as `{:02x}` writes it.
fn hex_byte(b: u8) -> &'static str {
    const DIGITS: &str = "000102030405060708090a0b0c0d0e0f\
        101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f\
        303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f\
        505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f\
        707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f\
        909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeaf\
        b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecf\
        d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef\
        f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
    let at = usize::from(b) * 2;
    &DIGITS[at..at + 2]
}

impl Op {
    /// The op's canonical text (what `Display` writes), into `w`.
    fn write_text<W: fmt::Write>(&self, w: &mut W) -> fmt::Result {
        let kw = self.keyword();
        match self {
            Op::DeviceCount
            | Op::CtxCurrent
            | Op::HandleZero
            | Op::HandleRandom
            | Op::Sync
            | Op::EventHandleZero
            | Op::EventHandleRandom
            | Op::Exit => w.write_str(kw),
            Op::EventCreate { flags } => put!(w, kw, " flags=", fmt_event_flags(*flags)),
            Op::EventQuery { event } | Op::EventSync { event } | Op::EventDestroy { event } => {
                put!(w, kw, " ", event)
            }
            Op::EventRecord { event, stream } | Op::StreamWait { event, stream } => {
                put!(w, kw, " ", event)?;
                write_stream(w, stream)
            }
            Op::StreamCreate { flags } => put!(w, kw, " flags=", fmt_stream_flags(*flags)),
            Op::StreamDestroy { stream }
            | Op::StreamSync { stream }
            | Op::StreamQuery { stream } => put!(w, kw, " ", stream),
            Op::Copy {
                dst,
                src,
                len,
                stream,
            } => {
                put!(w, kw, " ", dst, " ", src, " ", Size(*len))?;
                write_stream(w, stream)
            }
            Op::CopyPeer {
                dst,
                dst_device,
                src,
                src_device,
                len,
            } => put!(
                w,
                kw,
                " ",
                dst,
                " ",
                Dec((*dst_device).into()),
                " ",
                src,
                " ",
                Dec((*src_device).into()),
                " ",
                Size(*len)
            ),
            Op::EventElapsed { start, end } => put!(w, kw, " ", start, " ", end),
            Op::IpcGetEvent { event, out } => {
                put!(w, kw, " ", event)?;
                if *out == OutArg::Null {
                    w.write_str(" out=null")?;
                }
                Ok(())
            }
            Op::IpcOpenEvent { handle, out } => {
                put!(w, kw, " ", handle)?;
                if *out == OutArg::Null {
                    w.write_str(" out=null")?;
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
                put!(w, kw, " ", ptr, " ", ByteHex(*value), " us=", Dec(*micros))?;
                if let Some(at) = at {
                    put!(w, " at=", Size(*at))?;
                }
                if let Some(len) = len {
                    put!(w, " len=", Size(*len))?;
                }
                write_stream(w, stream)
            }
            Op::KernelPattern {
                ptr,
                content,
                at,
                len,
                ..
            } => {
                put!(w, kw, " ", ptr, " ", content)?;
                if let Some(at) = at {
                    put!(w, " at=", Size(*at))?;
                }
                if let Some(len) = len {
                    put!(w, " len=", Size(*len))?;
                }
                Ok(())
            }
            Op::Attr { device, attr } => put!(w, kw, " ", Dec((*device).into()), " ", attr.name()),
            Op::CanAccessPeer { device, peer } => {
                put!(w, kw, " ", Dec((*device).into()), " ", Dec((*peer).into()))
            }
            Op::EnablePeer { peer } => put!(w, kw, " ", Dec((*peer).into())),
            Op::SetDevice { device } | Op::PrimaryCtx { device } | Op::CtxCreate { device } => {
                put!(w, kw, " ", Dec((*device).into()))
            }
            Op::CtxSet { ctx } | Op::CtxDestroy { ctx } => put!(w, kw, " ", ctx),
            Op::Malloc { size, .. } => put!(w, kw, " ", Size(*size)),
            Op::Free { ptr, .. }
            | Op::AddressRange { ptr }
            | Op::PointerAttr { ptr }
            | Op::IpcClose { ptr } => put!(w, kw, " ", ptr),
            Op::PointerAttribute { ptr, attr } => put!(w, kw, " ", ptr, " ", attr.name()),
            Op::ForkChildAlloc { size } => put!(w, kw, " alloc ", Size(*size)),
            Op::Offset { ptr, bytes } => put!(w, kw, " ", ptr, " ", Size(*bytes)),
            Op::Fill {
                ptr,
                value,
                at,
                len,
                ..
            } => {
                put!(w, kw, " ", ptr, " ", ByteHex(*value))?;
                if let Some(at) = at {
                    put!(w, " at=", Size(*at))?;
                }
                if let Some(len) = len {
                    put!(w, " len=", Size(*len))?;
                }
                Ok(())
            }
            Op::Write {
                ptr,
                offset,
                pattern,
            } => put!(w, kw, " ", ptr, " ", Size(*offset), " ", pattern),
            Op::Read { ptr, offset, len } | Op::DeviceRead { ptr, offset, len } => {
                put!(w, kw, " ", ptr, " ", Size(*offset), " ", Size(*len))
            }
            Op::IpcGet { ptr, out } => {
                put!(w, kw, " ", ptr)?;
                if *out == OutArg::Null {
                    w.write_str(" out=null")?;
                }
                Ok(())
            }
            Op::IpcOpen { handle, flags, out } => {
                put!(w, kw, " ", handle)?;
                if *flags == crate::driver::IPC_MEM_LAZY_ENABLE_PEER_ACCESS {
                    w.write_str(" flags=lazy")?;
                } else {
                    put!(w, " flags=", Dec((*flags).into()))?;
                }
                if *out == OutArg::Null {
                    w.write_str(" out=null")?;
                }
                Ok(())
            }
            Op::HandleFlip { handle, offset } => {
                put!(w, kw, " ", handle, " ", Dec((*offset).into()))
            }
            Op::Send {
                handle, to_name, ..
            } => put!(w, kw, " ", handle, " -> ", to_name),
            Op::FdNullDevice => w.write_str(kw),
            Op::VmmGranularity {
                device,
                kind,
                types,
            } => put!(
                w,
                kw,
                " ",
                Dec((*device).into()),
                " ",
                kind.name(),
                " types=",
                types.name()
            ),
            Op::VmmCreate {
                size,
                types,
                device,
            } => put!(
                w,
                kw,
                " ",
                Size(*size),
                " types=",
                types.name(),
                " device=",
                Dec((*device).into())
            ),
            Op::VmmExport { handle, ty } => put!(w, kw, " ", handle, " ", ty.name()),
            Op::VmmImport { fd } | Op::FdClose { fd } => put!(w, kw, " ", fd),
            Op::VmmReserve { size } => put!(w, kw, " ", Size(*size)),
            Op::VmmMap {
                va,
                size,
                handle,
                offset,
            } => put!(
                w,
                kw,
                " ",
                va,
                " ",
                Size(*size),
                " ",
                handle,
                " offset=",
                Size(*offset)
            ),
            Op::VmmSetAccess {
                va,
                size,
                access,
                device,
            } => put!(
                w,
                kw,
                " ",
                va,
                " ",
                Size(*size),
                " ",
                access.name(),
                " device=",
                Dec((*device).into())
            ),
            Op::VmmUnmap { va, size } | Op::VmmAddressFree { va, size } => {
                put!(w, kw, " ", va, " ", Size(*size))
            }
            Op::VmmRelease { handle } => put!(w, kw, " ", handle),
            // A descriptor number may be negative.
            Op::FdNumber { number } => write!(w, "{kw} {number}"),
            Op::SendFd { fd, to_name, .. } => put!(w, kw, " ", fd, " -> ", to_name),
            Op::PidfdGetfd { owner_name, fd, .. } => put!(w, kw, " ", owner_name, " ", fd),
            Op::PoolCreate { types, device } => put!(
                w,
                kw,
                " types=",
                types.name(),
                " device=",
                Dec((*device).into())
            ),
            Op::PoolDefault { device } => put!(w, kw, " device=", Dec((*device).into())),
            Op::PoolDestroy { pool } | Op::PoolExport { pool } => put!(w, kw, " ", pool),
            Op::PoolImport { fd } => put!(w, kw, " ", fd),
            Op::PoolSetAccess {
                pool,
                access,
                device,
            } => put!(
                w,
                kw,
                " ",
                pool,
                " ",
                access.name(),
                " device=",
                Dec((*device).into())
            ),
            Op::PoolGetAccess { pool, device } => {
                put!(w, kw, " ", pool, " device=", Dec((*device).into()))
            }
            Op::PoolAlloc { pool, size } => put!(w, kw, " ", pool, " ", Size(*size)),
            Op::PoolFree { ptr } | Op::PoolExportPtr { ptr } => put!(w, kw, " ", ptr),
            Op::PoolImportPtr { pool, data } => put!(w, kw, " ", pool, " ", data),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_text(f)
    }
}

/// An event argument written `null`: the NULL `cudaEvent_t` (no binding can
/// be called `null`).
pub const NULL_EVENT: &str = "null";

/// The binding an event argument names (`None` for [`NULL_EVENT`]).
fn bound_event(event: &str) -> Option<&str> {
    (event != NULL_EVENT).then_some(event)
}

/// `ctx_set`'s argument written `null`: cuCtxSetCurrent(NULL), which pops
/// the calling thread's current context (no binding can be called `null`).
pub const NULL_CONTEXT: &str = "null";

/// The binding a context argument names (`None` for [`NULL_CONTEXT`]).
fn bound_context(ctx: &str) -> Option<&str> {
    (ctx != NULL_CONTEXT).then_some(ctx)
}

/// A stream argument written `per_thread`: the per-thread default stream
/// (`cudaStreamPerThread`, [`crate::StreamId::PER_THREAD`]; no binding can
/// be called so).
pub const PER_THREAD_STREAM: &str = "per_thread";

/// The binding a stream argument names (`None` for [`PER_THREAD_STREAM`]).
fn bound_stream(stream: &str) -> Option<&str> {
    (stream != PER_THREAD_STREAM).then_some(stream)
}

/// ` stream=S` where an op names a stream other than the legacy default.
fn write_stream<W: fmt::Write>(w: &mut W, stream: &Option<String>) -> fmt::Result {
    match stream {
        Some(s) => put!(w, " stream=", s),
        None => Ok(()),
    }
}

/// One expectation after `=>`.
#[derive(Debug, Clone, PartialEq)]
pub enum Expectation {
    /// `ok`: the call succeeded.
    Ok,
    /// `any`: always holds; the outcome is recorded, not judged.
    Any,
    /// `error`: any error.
    AnyError,
    /// The process dies during the call (a measured driver crash).
    Crash,
    /// A named error, compared by kind; `name` is the spelling written.
    Error {
        /// The error's meaning.
        kind: ErrorKind,
        /// The name as written (a kind or a dialect's own name).
        name: String,
    },
    /// `== X`
    Eq(Ref),
    /// `!= X`
    Ne(Ref),
    /// `bytes PATTERN`: the bytes read match.
    Bytes(BytePattern),
    /// `value N`: an int result equals `N`.
    Value(i64),
    /// `size N`: a range's size equals `N`.
    Size(u64),
    /// `base == X`: a range's base equals `X`.
    BaseEq(Ref),
    /// `base != X`: a range's base differs from `X`.
    BaseNe(Ref),
    /// `type T`: the pointer info's memory type.
    Type(MemoryType),
    /// `device D`: the pointer info's device.
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
    /// The expectations, in the order written (borrowed where a generator
    /// writes a fixed list, as `text` is).
    pub items: Cow<'static, [Expectation]>,
    /// The list as written in the file (borrowed where a generator writes
    /// a fixed list: a string for each of its steps was work to no end).
    pub text: Cow<'static, str>,
}

impl ExpectList {
    fn single(e: Expectation) -> ExpectList {
        ExpectList {
            text: e.to_string().into(),
            items: vec![e].into(),
        }
    }
}

/// Everything after `=>` (or its absence).
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// No `=>`: the step must succeed.
    Default,
    /// One list for every dialect.
    List(ExpectList),
    /// `runtime: ...; driver: ...; hip: ...`; a missing arm means `any`,
    /// except a missing `hip:` arm, which takes the `runtime:` arm (the HIP
    /// runtime API mirrors the CUDA runtime API call for call).
    ByDialect {
        /// The `runtime:` arm.
        runtime: Option<ExpectList>,
        /// The `driver:` arm.
        driver: Option<ExpectList>,
        /// The `hip:` arm.
        hip: Option<ExpectList>,
    },
}

impl Expect {
    /// The expectations in force for a run in `dialect`.
    pub fn for_dialect(&self, dialect: Dialect) -> ExpectList {
        self.in_force(dialect).clone()
    }

    /// [`Expect::for_dialect`], borrowed: the step's own list, or one
    /// built once for all steps.
    pub fn in_force(&self, dialect: Dialect) -> &ExpectList {
        match self {
            // Most steps: one list for all, built once.
            Expect::Default => {
                static OK: std::sync::LazyLock<ExpectList> =
                    std::sync::LazyLock::new(|| ExpectList::single(Expectation::Ok));
                &OK
            }
            Expect::List(l) => l,
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
                    Some(l) => l,
                    None => {
                        static ANY: std::sync::LazyLock<ExpectList> =
                            std::sync::LazyLock::new(|| ExpectList::single(Expectation::Any));
                        &ANY
                    }
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
    /// `expect hazard KIND`: the simulator logged a hazard of this kind.
    Hazard(HazardKind),
    /// `expect no-hazards`: the simulator logged none.
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

/// One `expect hazard` / `expect no-hazards` line, checked at the end of a
/// run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HazardExpectation {
    /// 1-based line in the file.
    pub line: usize,
    /// What the line checks.
    pub check: HazardCheck,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece_text(piece: &impl Piece) -> String {
        let mut s = String::new();
        piece.put(&mut s).expect("a String takes any text");
        s
    }

    /// The pieces write what the format strings they replace wrote.
    #[test]
    fn pieces_write_what_format_strings_write() {
        for b in 0..=255u8 {
            assert_eq!(hex_byte(b), format!("{b:02x}"));
            assert_eq!(piece_text(&ByteHex(b)), format!("{b:#04x}"));
        }
        for n in [
            0,
            1,
            9,
            10,
            99,
            1000,
            1 << 20,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            assert_eq!(piece_text(&Dec(n)), format!("{n}"));
        }
        let sizes = [(0, "0"), (1000, "1000"), (1024, "1KiB"), (1536, "1536")];
        let units = [
            (2 << 20, "2MiB"),
            (3 << 30, "3GiB"),
            (u64::MAX, "18446744073709551615"),
        ];
        for (n, text) in sizes.into_iter().chain(units) {
            assert_eq!(piece_text(&Size(n)), text);
            assert_eq!(fmt_size(n), text);
        }
        assert_eq!(piece_text(&Ref::Null), "null");
        assert_eq!(piece_text(&"a b"), "a b");
    }

    /// `Step::text` writes the op as its `Display` does, after the repeat
    /// count and the bound name.
    #[test]
    fn step_text_is_the_ops_display() {
        let op = Op::Read {
            ptr: Ref::Name("p".into()),
            offset: 4096,
            len: 8,
        };
        let step = Step {
            line: 1,
            process: 0,
            bind: Some("b".into()),
            op: op.clone(),
            expect: Expect::Default,
            repeat: Some(1000),
        };
        assert_eq!(op.to_string(), "read p 4KiB 8");
        assert_eq!(step.text(), "repeat 1000 b = read p 4KiB 8");
    }
}
