//! The driver entry points the tracer records: one wrapper per exported
//! symbol (every versioned and per-thread variant is its own symbol),
//! which calls the real function first, then records the call with its
//! arguments as the call left them. `tracer/symbols/not-traced.txt` lists
//! every other symbol of the measured driver with the reason it does not
//! matter to IPC; `tests/coverage.rs` holds the two lists against the
//! driver's symbol list.

use crate::args::Args;
use crate::resolve::Slot;
use crate::{sys, writer};
use std::ffi::{c_int, c_uint, c_void};

pub type CUresult = c_int;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_TYPE_POSIX_FD: u32 = 1;
/// `CU_MEM_HANDLE_TYPE_FABRIC`: 64 bytes behind a pointer.
const HANDLE_TYPE_FABRIC: u32 = 8;

/// `CUipcMemHandle` and `CUipcEventHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle {
    pub reserved: [u8; 64],
}

/// `CUmemAccessDesc`: a location (type, id) and the access flags.
#[repr(C)]
pub struct AccessDesc {
    pub location_type: c_int,
    pub location_id: c_int,
    pub flags: c_int,
}

type ParamInfoFn = unsafe extern "C" fn(usize, usize, *mut usize, *mut usize) -> CUresult;

/// The 8-byte kernel parameters (candidate pointers), when the driver can
/// say where the parameters lie; `None` when it cannot (opaque work).
/// Called only after a launch the driver accepted (it read `params`).
unsafe fn kernel_pointer_args(func: usize, params: *mut *mut c_void) -> Option<Vec<u64>> {
    static FUNC_INFO: Slot = Slot::new(c"cuFuncGetParamInfo");
    static KERNEL_INFO: Slot = Slot::new(c"cuKernelGetParamInfo");
    if params.is_null() {
        return None;
    }
    for slot in [&FUNC_INFO, &KERNEL_INFO] {
        let Some(info) = slot.get() else { continue };
        let info: ParamInfoFn = std::mem::transmute(info);
        let (mut offset, mut size) = (0usize, 0usize);
        if info(func, 0, &mut offset, &mut size) != 0 {
            continue;
        }
        let mut pointers = Vec::new();
        let mut index = 0;
        while index < 1024 && info(func, index, &mut offset, &mut size) == 0 {
            let value = *params.add(index);
            if size == 8 && !value.is_null() {
                pointers.push(std::ptr::read_unaligned(value as *const u64));
            }
            index += 1;
        }
        return Some(pointers);
    }
    None
}

unsafe fn launch(a: &mut Args, func: usize, stream: usize, params: *mut *mut c_void) {
    a.n("stream", stream as u64);
    if a.ok {
        if let Some(pointers) = kernel_pointer_args(func, params) {
            a.list("pointer_args", pointers);
        }
    }
}

/// The kind of memory at `ptr` as the driver sees it: `device`, `host`
/// (page-locked), `managed`, `pageable` (unknown to the driver).
unsafe fn memory_kind(ptr: u64) -> Option<&'static str> {
    static ATTRIBUTES: Slot = Slot::new(c"cuPointerGetAttributes");
    type Fn = unsafe extern "C" fn(c_uint, *const c_uint, *mut *mut c_void, u64) -> CUresult;
    let real: Fn = std::mem::transmute(ATTRIBUTES.get()?);
    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED.
    let which: [c_uint; 2] = [2, 8];
    let mut memory_type: c_uint = 0;
    let mut managed: c_uint = 0;
    let mut data: [*mut c_void; 2] = [
        (&mut memory_type as *mut c_uint).cast(),
        (&mut managed as *mut c_uint).cast(),
    ];
    if real(2, which.as_ptr(), data.as_mut_ptr(), ptr) != 0 {
        return None;
    }
    Some(match (memory_type, managed & 0xff != 0) {
        (_, true) => "managed",
        (1, _) => "host",
        (2, _) => "device",
        (3, _) => "array",
        (4, _) => "managed",
        _ => "pageable",
    })
}

/// Record the memory kind of `ptr` under `key`, after a successful call.
unsafe fn kind(a: &mut Args, key: &str, ptr: u64) {
    if a.ok {
        if let Some(kind) = memory_kind(ptr) {
            a.text(key, kind);
        }
    }
}

/// The UUID of device ordinal `dev`, after a context was made on it.
unsafe fn device_uuid(a: &mut Args, dev: c_int) {
    static UUID_V2: Slot = Slot::new(c"cuDeviceGetUuid_v2");
    static UUID: Slot = Slot::new(c"cuDeviceGetUuid");
    if !a.ok {
        return;
    }
    type Fn = unsafe extern "C" fn(*mut [u8; 16], c_int) -> CUresult;
    for slot in [&UUID_V2, &UUID] {
        if let Some(real) = slot.get() {
            let real: Fn = std::mem::transmute(real);
            let mut uuid = [0u8; 16];
            if real(&mut uuid, dev) == 0 {
                a.hex("device_uuid", &uuid);
            }
            return;
        }
    }
}

/// `CUmemAccessDesc` lists, after success.
unsafe fn access(a: &mut Args, desc: *const AccessDesc, count: usize) {
    if a.ok && !desc.is_null() && count < 4096 {
        a.pairs(
            "access",
            (0..count).map(|i| {
                let d = std::ptr::read_unaligned(desc.add(i));
                (d.location_id.into(), d.flags as u32 as u64)
            }),
        );
    }
}

/// A `CUmemLocation` (type, id) at `offset` in a structure, after success.
/// How a structure the driver was given is read: an output only after
/// success ([`Args::field`]), an input as the driver read it
/// ([`Args::input_field`]).
#[derive(Clone, Copy)]
enum Read {
    Output,
    Input,
}

unsafe fn location(a: &mut Args, base: *const u8, offset: usize, read: Read) {
    let field = |off| match read {
        Read::Output => a.field::<c_int>(base, off),
        Read::Input => a.input_field::<c_int>(base, off),
    };
    if let (Some(kind), Some(id)) = (field(offset), field(offset + 4)) {
        let kind = kind as u32;
        a.n("location_type", kind);
        a.i("device", id);
    }
}

/// The size in bytes of a pointer attribute's value that is a number, or
/// `None` for a structure (`CU_POINTER_ATTRIBUTE_P2P_TOKENS`) or an
/// attribute this tracer does not know. Booleans are read as one byte.
fn pointer_attribute_size(attribute: u32) -> Option<usize> {
    match attribute {
        1 | 3 | 4 | 7 | 11 | 12 | 14 | 17 | 18 | 19 | 20 => Some(8),
        2 | 9 | 16 => Some(4),
        6 | 8 | 10 | 13 | 15 | 21 => Some(1),
        _ => None,
    }
}

/// The size of a memory pool attribute's value (`CUmemPool_attribute`).
fn pool_attribute_size(attribute: u32) -> Option<usize> {
    match attribute {
        1..=3 => Some(4),
        4..=8 => Some(8),
        _ => None,
    }
}

unsafe fn read_value(p: *const c_void, size: usize) -> u64 {
    match size {
        1 => std::ptr::read_unaligned(p as *const u8).into(),
        4 => std::ptr::read_unaligned(p as *const u32).into(),
        _ => std::ptr::read_unaligned(p as *const u64),
    }
}

/// One attribute and its value, after success.
unsafe fn attribute(a: &mut Args, attr: u32, value: *const c_void, size: Option<usize>) {
    if let Some(size) = size.filter(|_| a.ok && !value.is_null()) {
        a.pairs("attrs", [(attr.into(), read_value(value, size))]);
    }
}

/// `CUmemorytype` of a 2D/3D copy's side, as a record's memory kind.
unsafe fn side_kind(memory_type: u32, pointer: u64) -> Option<&'static str> {
    match memory_type {
        1 => memory_kind(pointer).map(|k| if k == "host" { k } else { "pageable" }),
        2 => Some("device"),
        3 => Some("array"),
        4 => memory_kind(pointer),
        _ => None,
    }
}

/// A 2D (`CUDA_MEMCPY2D`) or 3D (`CUDA_MEMCPY3D`, `CUDA_MEMCPY3D_PEER`)
/// copy's two sides: the first byte and the span of bytes each touches,
/// with the memory kind, pitches and extent.
unsafe fn copy_nd(a: &mut Args, p: *const u8, three_d: bool) {
    // Field offsets: (x, y, z, memoryType, host, device, pitch, height)
    // per side, then width, height, depth.
    let (src, dst, extent) = if three_d {
        (
            [0, 8, 16, 32, 40, 48, 72, 80],
            [88, 96, 104, 120, 128, 136, 160, 168],
            176,
        )
    } else {
        (
            [0, 8, usize::MAX, 16, 24, 32, 48, usize::MAX],
            [56, 64, usize::MAX, 72, 80, 88, 104, usize::MAX],
            112,
        )
    };
    let Some(width) = a.field::<u64>(p, extent) else {
        return;
    };
    let height = a.field::<u64>(p, extent + 8).unwrap_or(1);
    let depth = if three_d {
        a.field::<u64>(p, extent + 16).unwrap_or(1)
    } else {
        1
    };
    a.n("width", width);
    a.n("height", height);
    if three_d {
        a.n("depth", depth);
    }
    for (side, keys) in [
        (dst, ["ptr", "size", "pitch", "dst_kind"]),
        (src, ["src", "src_size", "src_pitch", "src_kind"]),
    ] {
        let get = |offset: usize| {
            if offset == usize::MAX {
                0
            } else {
                a.field::<u64>(p, offset).unwrap_or(0)
            }
        };
        let memory_type = a.field::<u32>(p, side[3]).unwrap_or(0);
        let base = if memory_type == 1 {
            get(side[4])
        } else {
            get(side[5])
        };
        let (x, y, z, pitch) = (get(side[0]), get(side[1]), get(side[2]), get(side[6]));
        let rows = if three_d { get(side[7]).max(1) } else { 1 };
        if memory_type != 3 {
            let first = base
                .wrapping_add(z.wrapping_mul(pitch).wrapping_mul(rows))
                .wrapping_add(y.wrapping_mul(pitch))
                .wrapping_add(x);
            let span = (depth.saturating_sub(1))
                .saturating_mul(pitch.saturating_mul(rows))
                .saturating_add(height.saturating_sub(1).saturating_mul(pitch))
                .saturating_add(width);
            a.n(keys[0], first);
            a.n(keys[1], span);
            a.n(keys[2], pitch);
        }
        if let Some(kind) = side_kind(memory_type, base) {
            a.text(keys[3], kind);
        }
    }
}

/// A 2D set: `width` elements of `element` bytes on `height` rows.
unsafe fn set_2d(
    a: &mut Args,
    dst: u64,
    pitch: usize,
    value: u64,
    width: usize,
    height: usize,
    element: u64,
) {
    let row = width as u64 * element;
    a.n("ptr", dst);
    a.n("value", value);
    a.n("pitch", pitch as u64);
    a.n("width", row);
    a.n("height", height as u64);
    a.n(
        "size",
        (height as u64)
            .saturating_sub(1)
            .saturating_mul(pitch as u64)
            .saturating_add(row),
    );
    kind(a, "dst_kind", dst);
}

/// One traced entry point per name: the real function is called first,
/// then the call is recorded. `errno` is kept as the call left it, and a
/// panic while recording is caught: the program only ever sees the real
/// result.
macro_rules! traced_one {
    ($name:ident ( $($arg:ident : $ty:ty),* ) |$a:ident| $body:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            let Some(real) = slots::$name.get() else {
                return CUDA_ERROR_NOT_INITIALIZED;
            };
            let real: unsafe extern "C" fn($($ty),*) -> CUresult = std::mem::transmute(real);
            if !writer::active() {
                return real($($arg),*);
            }
            let start = sys::now_ns();
            let result = real($($arg),*);
            let dur = sys::now_ns().saturating_sub(start);
            let errno = sys::errno();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut $a = Args::blank();
                $a.begin(stringify!($name), result, start, dur);
                $body
                $a.end();
            }));
            sys::set_errno(errno);
            result
        }
    };
}

macro_rules! traced {
    ($( [$($name:ident),+] $args:tt |$a:ident| $body:block )*) => {
        #[allow(non_upper_case_globals)]
        mod slots {
            use super::Slot;
            $($( pub static $name: Slot = Slot::new(
                match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("symbol names have no NUL"),
                });
            )+)*
        }
        $($( traced_one!{ $name $args |$a| $body } )+)*

        /// Every traced symbol, in the order of the table.
        pub const TRACED: &[&str] = &[$($( stringify!($name), )+)*];

        /// Every traced symbol with its C argument types, for the tests
        /// that call each one.
        pub const SIGNATURES: &[(&str, &str)] = &[$($( (stringify!($name), stringify!($args)), )+)*];

        /// The wrapper and slot of a traced symbol.
        pub fn traced_symbol(name: &[u8]) -> Option<(&'static Slot, usize)> {
            $($( if name == stringify!($name).as_bytes() {
                return Some((&slots::$name, $name as *const () as usize));
            } )+)*
            None
        }
    };
}

traced! {
    // Initialisation and the driver's version.
    [cuInit] (flags: c_uint) |a| { a.n("flags", flags); }
    [cuDriverGetVersion] (version: *mut c_int) |a| {
        if a.ok && !version.is_null() { a.i("value", *version); }
    }

    // Contexts.
    [cuCtxCreate, cuCtxCreate_v2] (pctx: *mut usize, flags: c_uint, dev: c_int) |a| {
        a.out_handle("ctx", pctx); a.n("flags", flags); a.i("device", dev); device_uuid(&mut a, dev);
    }
    [cuCtxCreate_v3] (pctx: *mut usize, params: *mut c_void, n: c_int, flags: c_uint, dev: c_int) |a| {
        let _ = (params, n);
        a.out_handle("ctx", pctx); a.n("flags", flags); a.i("device", dev); device_uuid(&mut a, dev);
    }
    [cuCtxCreate_v4] (pctx: *mut usize, params: *mut c_void, flags: c_uint, dev: c_int) |a| {
        let _ = params;
        a.out_handle("ctx", pctx); a.n("flags", flags); a.i("device", dev); device_uuid(&mut a, dev);
    }
    [cuCtxDestroy, cuCtxDestroy_v2, cuCtxDetach] (ctx: usize) |a| { a.n("ctx", ctx as u64); }
    [cuCtxAttach] (pctx: *mut usize, flags: c_uint) |a| { a.out_handle("ctx", pctx); a.n("flags", flags); }
    [cuCtxSetCurrent, cuCtxPushCurrent, cuCtxPushCurrent_v2, cuCtxDisablePeerAccess] (ctx: usize) |a| {
        a.n("ctx", ctx as u64);
    }
    [cuCtxEnablePeerAccess] (ctx: usize, flags: c_uint) |a| { a.n("ctx", ctx as u64); a.n("flags", flags); }
    [cuCtxPopCurrent, cuCtxPopCurrent_v2] (pctx: *mut usize) |a| { a.out_handle("ctx", pctx); }
    [cuDevicePrimaryCtxRetain] (pctx: *mut usize, dev: c_int) |a| {
        a.out_handle("ctx", pctx); a.i("device", dev); device_uuid(&mut a, dev);
    }
    [cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxReset,
     cuDevicePrimaryCtxReset_v2] (dev: c_int) |a| { a.i("device", dev); }
    [cuCtxSynchronize] () |_a| {}
    [cuCtxSynchronize_v2] (ctx: usize) |a| { a.n("ctx", ctx as u64); }
    [cuCtxRecordEvent, cuCtxWaitEvent, cuGreenCtxRecordEvent, cuGreenCtxWaitEvent] (ctx: usize, event: usize) |a| {
        a.n("ctx", ctx as u64); a.n("event", event as u64);
    }
    [cuGreenCtxCreate] (pctx: *mut usize, desc: usize, dev: c_int, flags: c_uint) |a| {
        let _ = desc;
        a.out_handle("ctx", pctx); a.i("device", dev); a.n("flags", flags); device_uuid(&mut a, dev);
    }
    [cuGreenCtxDestroy] (ctx: usize) |a| { a.n("ctx", ctx as u64); }
    [cuCtxFromGreenCtx] (pctx: *mut usize, green: usize) |a| {
        a.out_handle("ctx", pctx); a.n("src_ctx", green as u64);
    }

    // Streams.
    [cuStreamCreate] (pstream: *mut usize, flags: c_uint) |a| {
        a.out_handle("stream", pstream); a.n("flags", flags);
    }
    [cuStreamCreateWithPriority] (pstream: *mut usize, flags: c_uint, priority: c_int) |a| {
        a.out_handle("stream", pstream); a.n("flags", flags); a.i("priority", priority);
    }
    [cuGreenCtxStreamCreate] (pstream: *mut usize, green: usize, flags: c_uint, priority: c_int) |a| {
        a.out_handle("stream", pstream); a.n("ctx", green as u64); a.n("flags", flags); a.i("priority", priority);
    }
    [cuStreamDestroy, cuStreamDestroy_v2, cuStreamSynchronize, cuStreamSynchronize_ptsz, cuStreamQuery,
     cuStreamQuery_ptsz] (stream: usize) |a| { a.n("stream", stream as u64); }
    [cuStreamWaitEvent, cuStreamWaitEvent_ptsz] (stream: usize, event: usize, flags: c_uint) |a| {
        a.n("stream", stream as u64); a.n("event", event as u64); a.n("flags", flags);
    }
    [cuStreamAddCallback, cuStreamAddCallback_ptsz] (stream: usize, callback: usize, data: usize, flags: c_uint) |a| {
        let _ = (callback, data);
        a.n("stream", stream as u64); a.n("flags", flags);
    }
    [cuLaunchHostFunc, cuLaunchHostFunc_ptsz] (stream: usize, callback: usize, data: usize) |a| {
        let _ = (callback, data);
        a.n("stream", stream as u64);
    }
    [cuStreamWaitValue32, cuStreamWaitValue32_ptsz, cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz,
     cuStreamWriteValue32, cuStreamWriteValue32_ptsz, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz]
        (stream: usize, addr: u64, value: u32, flags: c_uint) |a| {
        a.n("stream", stream as u64); a.n("ptr", addr); a.n("size", 4u64); a.n("value", value); a.n("flags", flags);
    }
    [cuStreamWaitValue64, cuStreamWaitValue64_ptsz, cuStreamWaitValue64_v2, cuStreamWaitValue64_v2_ptsz,
     cuStreamWriteValue64, cuStreamWriteValue64_ptsz, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz]
        (stream: usize, addr: u64, value: u64, flags: c_uint) |a| {
        a.n("stream", stream as u64); a.n("ptr", addr); a.n("size", 8u64); a.n("value", value); a.n("flags", flags);
    }
    [cuStreamBatchMemOp, cuStreamBatchMemOp_ptsz, cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2_ptsz]
        (stream: usize, count: c_uint, params: *mut c_void, flags: c_uint) |a| {
        let _ = params;
        a.n("stream", stream as u64); a.n("count", count); a.n("flags", flags);
    }
    // Capture: calls on a capturing stream are recorded into a graph, not run.
    [cuStreamBeginCapture, cuStreamBeginCapture_ptsz, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz]
        (stream: usize, mode: c_uint) |a| { a.n("stream", stream as u64); a.n("flags", mode); }
    [cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz]
        (stream: usize, graph: usize, deps: usize, edges: usize, count: usize, mode: c_uint) |a| {
        let _ = (graph, deps, edges, count);
        a.n("stream", stream as u64); a.n("flags", mode);
    }
    [cuStreamEndCapture, cuStreamEndCapture_ptsz] (stream: usize, graph: *mut usize) |a| {
        let _ = graph;
        a.n("stream", stream as u64);
    }
    // A graph's launch runs work this tracer does not see inside: opaque.
    [cuGraphLaunch, cuGraphLaunch_ptsz] (exec: usize, stream: usize) |a| {
        let _ = exec;
        a.n("stream", stream as u64);
    }

    // Allocations.
    [cuMemAlloc_v2] (dptr: *mut u64, size: usize) |a| { a.out("ptr", dptr); a.n("size", size as u64); }
    [cuMemAllocPitch_v2] (dptr: *mut u64, pitch: *mut usize, width: usize, height: usize, element: c_uint) |a| {
        let _ = element;
        a.out("ptr", dptr); a.out("pitch", pitch as *const u64); a.n("width", width as u64); a.n("height", height as u64);
        if a.ok && !pitch.is_null() { a.n("size", (*pitch as u64).saturating_mul(height as u64)); }
    }
    [cuMemAllocManaged] (dptr: *mut u64, size: usize, flags: c_uint) |a| {
        a.out("ptr", dptr); a.n("size", size as u64); a.n("flags", flags);
    }
    [cuMemAllocHost_v2] (pp: *mut usize, size: usize) |a| { a.out_handle("ptr", pp); a.n("size", size as u64); }
    [cuMemAllocHost] (pp: *mut usize, size: c_uint) |a| { a.out_handle("ptr", pp); a.n("size", size); }
    [cuMemHostAlloc] (pp: *mut usize, size: usize, flags: c_uint) |a| {
        a.out_handle("ptr", pp); a.n("size", size as u64); a.n("flags", flags);
    }
    [cuMemHostRegister, cuMemHostRegister_v2] (p: usize, size: usize, flags: c_uint) |a| {
        a.n("ptr", p as u64); a.n("size", size as u64); a.n("flags", flags);
    }
    [cuMemHostUnregister, cuMemFreeHost] (p: usize) |a| { a.n("ptr", p as u64); }
    [cuMemHostGetDevicePointer_v2] (dptr: *mut u64, p: usize, flags: c_uint) |a| {
        a.out("ptr", dptr); a.n("src", p as u64); a.n("flags", flags);
    }
    [cuMemFree_v2] (dptr: u64) |a| { a.n("ptr", dptr); }
    [cuMemAllocAsync, cuMemAllocAsync_ptsz] (dptr: *mut u64, size: usize, stream: usize) |a| {
        a.out("ptr", dptr); a.n("size", size as u64); a.n("stream", stream as u64);
    }
    [cuMemFreeAsync, cuMemFreeAsync_ptsz] (dptr: u64, stream: usize) |a| {
        a.n("ptr", dptr); a.n("stream", stream as u64);
    }
    [cuMemGetAddressRange_v2] (base: *mut u64, size: *mut usize, dptr: u64) |a| {
        a.n("ptr", dptr); a.out("base", base); a.out("size", size as *const u64);
    }

    // Pointer attributes (how programs ask whether memory is device,
    // managed, IPC-capable, which pool it came from).
    [cuPointerGetAttribute] (data: *mut c_void, attr: c_uint, ptr: u64) |a| {
        a.n("ptr", ptr); attribute(&mut a, attr, data, pointer_attribute_size(attr));
    }
    [cuPointerSetAttribute] (value: *const c_void, attr: c_uint, ptr: u64) |a| {
        a.n("ptr", ptr); attribute(&mut a, attr, value, pointer_attribute_size(attr));
    }
    [cuPointerGetAttributes] (count: c_uint, attrs: *const c_uint, data: *mut *mut c_void, ptr: u64) |a| {
        a.n("ptr", ptr);
        if a.ok && !attrs.is_null() && !data.is_null() && count < 256 {
            let values: Vec<(i64, u64)> = (0..count as usize).filter_map(|i| {
                let attr = *attrs.add(i);
                let p = *data.add(i);
                let size = pointer_attribute_size(attr)?;
                (!p.is_null()).then(|| (attr.into(), read_value(p, size)))
            }).collect();
            a.pairs("attrs", values);
        }
    }

    // Legacy IPC: memory.
    [cuIpcGetMemHandle] (handle: *mut IpcHandle, dptr: u64) |a| {
        a.n("ptr", dptr); a.handle64("handle", handle as *const u8);
    }
    [cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle] (pdptr: *mut u64, handle: IpcHandle, flags: c_uint) |a| {
        a.out("ptr", pdptr); a.hex("handle", &handle.reserved); a.n("flags", flags);
    }
    [cuIpcCloseMemHandle] (dptr: u64) |a| { a.n("ptr", dptr); }

    // Events and their IPC handles.
    [cuEventCreate] (pevent: *mut usize, flags: c_uint) |a| { a.out_handle("event", pevent); a.n("flags", flags); }
    [cuEventRecord, cuEventRecord_ptsz] (event: usize, stream: usize) |a| {
        a.n("event", event as u64); a.n("stream", stream as u64);
    }
    [cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz] (event: usize, stream: usize, flags: c_uint) |a| {
        a.n("event", event as u64); a.n("stream", stream as u64); a.n("flags", flags);
    }
    [cuEventQuery, cuEventSynchronize, cuEventDestroy, cuEventDestroy_v2] (event: usize) |a| {
        a.n("event", event as u64);
    }
    // A successful elapsed time says both events completed.
    [cuEventElapsedTime, cuEventElapsedTime_v2] (ms: *mut f32, start: usize, end: usize) |a| {
        let _ = ms;
        a.list("objects", [start as u64, end as u64]);
    }
    [cuIpcGetEventHandle] (handle: *mut IpcHandle, event: usize) |a| {
        a.n("event", event as u64); a.handle64("handle", handle as *const u8);
    }
    [cuIpcOpenEventHandle] (pevent: *mut usize, handle: IpcHandle) |a| {
        a.out_handle("event", pevent); a.hex("handle", &handle.reserved);
    }

    // Virtual memory management.
    [cuMemCreate] (phandle: *mut u64, size: usize, prop: *const u8, flags: u64) |a| {
        a.out("vmm", phandle); a.n("size", size as u64); a.n("flags", flags);
        // CUmemAllocationProp (an input: recorded when the call failed too,
        // e.g. fabric handles refused): type, requestedHandleTypes,
        // location { type, id }.
        if let Some(types) = a.input_field::<u32>(prop, 4) { a.n("handle_type", types); }
        location(&mut a, prop, 8, Read::Input);
    }
    [cuMemExportToShareableHandle] (shareable: *mut c_void, handle: u64, kind: u32, flags: u64) |a| {
        a.n("vmm", handle); a.n("handle_type", kind); a.n("flags", flags);
        export_handle(&mut a, shareable, kind);
    }
    [cuMemImportFromShareableHandle] (phandle: *mut u64, os_handle: *mut c_void, kind: u32) |a| {
        a.out("vmm", phandle); a.n("handle_type", kind);
        import_handle(&mut a, os_handle, kind);
    }
    [cuMemRetainAllocationHandle] (phandle: *mut u64, addr: usize) |a| { a.out("vmm", phandle); a.n("ptr", addr as u64); }
    [cuMemGetAllocationPropertiesFromHandle] (prop: *mut u8, handle: u64) |a| {
        a.n("vmm", handle);
        if let Some(types) = a.field::<u32>(prop, 4) { a.n("handle_type", types); }
        location(&mut a, prop, 8, Read::Output);
    }
    [cuMemAddressReserve] (pptr: *mut u64, size: usize, align: usize, addr: u64, flags: u64) |a| {
        a.out("ptr", pptr); a.n("size", size as u64); a.n("offset", align as u64);
        a.n("value", addr); a.n("flags", flags);
    }
    [cuMemMap] (ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) |a| {
        a.n("ptr", ptr); a.n("size", size as u64); a.n("offset", offset as u64);
        a.n("vmm", handle); a.n("flags", flags);
    }
    [cuMemSetAccess] (ptr: u64, size: usize, desc: *const AccessDesc, count: usize) |a| {
        a.n("ptr", ptr); a.n("size", size as u64); access(&mut a, desc, count);
    }
    [cuMemGetAccess] (flags: *mut u64, loc: *const u8, ptr: u64) |a| {
        a.n("ptr", ptr); a.out("flags", flags); location(&mut a, loc, 0, Read::Output);
    }
    [cuMemUnmap, cuMemAddressFree] (ptr: u64, size: usize) |a| { a.n("ptr", ptr); a.n("size", size as u64); }
    [cuMemRelease] (handle: u64) |a| { a.n("vmm", handle); }
    [cuMemGetHandleForAddressRange] (handle: *mut c_void, dptr: u64, size: usize, kind: u32, flags: u64) |a| {
        a.n("ptr", dptr); a.n("size", size as u64); a.n("handle_type", kind); a.n("flags", flags);
        // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: a descriptor.
        if kind == 1 && a.ok && !handle.is_null() {
            let fd = *(handle as *const c_int);
            a.i("fd", fd); crate::fds::follow(fd);
        }
    }

    // Multicast objects (shared between processes like VMM allocations).
    [cuMulticastCreate] (phandle: *mut u64, prop: *const u8) |a| {
        a.out("vmm", phandle);
        if let Some(devices) = a.field::<u32>(prop, 0) { a.n("count", devices); }
        if let Some(size) = a.field::<u64>(prop, 8) { a.n("size", size); }
        if let Some(types) = a.field::<u64>(prop, 16) { a.n("handle_type", types as u32); }
    }
    [cuMulticastAddDevice] (handle: u64, dev: c_int) |a| { a.n("vmm", handle); a.i("device", dev); }
    [cuMulticastBindMem] (handle: u64, offset: usize, mem: u64, mem_offset: usize, size: usize, flags: u64) |a| {
        a.n("vmm", handle); a.n("offset", offset as u64); a.n("bound_vmm", mem);
        a.n("src_offset", mem_offset as u64); a.n("size", size as u64); a.n("flags", flags);
    }
    [cuMulticastBindAddr] (handle: u64, offset: usize, ptr: u64, size: usize, flags: u64) |a| {
        a.n("vmm", handle); a.n("offset", offset as u64); a.n("ptr", ptr); a.n("size", size as u64); a.n("flags", flags);
    }
    [cuMulticastUnbind] (handle: u64, dev: c_int, offset: usize, size: usize) |a| {
        a.n("vmm", handle); a.i("device", dev); a.n("offset", offset as u64); a.n("size", size as u64);
    }

    // Memory pools.
    [cuMemPoolCreate] (ppool: *mut usize, props: *const u8) |a| {
        a.out_handle("pool", ppool);
        // CUmemPoolProps: allocType, handleTypes, location { type, id },
        // win32SecurityAttributes, maxSize.
        if let Some(types) = a.field::<u32>(props, 4) { a.n("handle_type", types); }
        location(&mut a, props, 8, Read::Output);
        if let Some(max) = a.field::<u64>(props, 24) { a.n("size", max); }
    }
    [cuMemPoolDestroy] (pool: usize) |a| { a.n("pool", pool as u64); }
    [cuMemPoolTrimTo] (pool: usize, keep: usize) |a| { a.n("pool", pool as u64); a.n("size", keep as u64); }
    [cuMemPoolSetAccess] (pool: usize, desc: *const AccessDesc, count: usize) |a| {
        a.n("pool", pool as u64); access(&mut a, desc, count);
    }
    [cuMemPoolGetAccess] (flags: *mut c_uint, pool: usize, loc: *const u8) |a| {
        a.n("pool", pool as u64); a.out("flags", flags); location(&mut a, loc, 0, Read::Output);
    }
    [cuMemPoolSetAttribute, cuMemPoolGetAttribute] (pool: usize, attr: c_uint, value: *mut c_void) |a| {
        a.n("pool", pool as u64); attribute(&mut a, attr, value, pool_attribute_size(attr));
    }
    [cuMemPoolExportToShareableHandle] (shareable: *mut c_void, pool: usize, kind: u32, flags: u64) |a| {
        a.n("pool", pool as u64); a.n("handle_type", kind); a.n("flags", flags);
        export_handle(&mut a, shareable, kind);
    }
    [cuMemPoolImportFromShareableHandle] (ppool: *mut usize, os_handle: *mut c_void, kind: u32, flags: u64) |a| {
        a.out_handle("pool", ppool); a.n("handle_type", kind); a.n("flags", flags);
        import_handle(&mut a, os_handle, kind);
    }
    [cuMemPoolExportPointer] (data: *mut u8, ptr: u64) |a| { a.n("ptr", ptr); a.handle64("handle", data); }
    [cuMemPoolImportPointer] (pptr: *mut u64, pool: usize, data: *const u8) |a| {
        a.out("ptr", pptr); a.n("pool", pool as u64); a.handle64("handle", data);
    }
    [cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz] (dptr: *mut u64, size: usize, pool: usize, stream: usize) |a| {
        a.out("ptr", dptr); a.n("size", size as u64); a.n("pool", pool as u64); a.n("stream", stream as u64);
    }
    [cuDeviceGetDefaultMemPool, cuDeviceGetMemPool] (ppool: *mut usize, dev: c_int) |a| {
        a.out_handle("pool", ppool); a.i("device", dev);
    }
    [cuDeviceSetMemPool] (dev: c_int, pool: usize) |a| { a.i("device", dev); a.n("pool", pool as u64); }
    [cuMemGetDefaultMemPool, cuMemGetMemPool] (ppool: *mut usize, loc: *const u8, kind: c_uint) |a| {
        a.out_handle("pool", ppool); location(&mut a, loc, 0, Read::Output); a.n("flags", kind);
    }
    [cuMemSetMemPool] (loc: *const u8, kind: c_uint, pool: usize) |a| {
        location(&mut a, loc, 0, Read::Output); a.n("flags", kind); a.n("pool", pool as u64);
    }

    // External memory and semaphores (descriptors shared with other APIs
    // and processes).
    [cuImportExternalMemory] (pext: *mut usize, desc: *const u8) |a| {
        a.out_handle("external", pext);
        if let Some(kind) = a.field::<u32>(desc, 0) {
            a.n("handle_type", kind);
            if kind == 1 { if let Some(fd) = a.field::<c_int>(desc, 8) { a.i("fd", fd); } }
        }
        if let Some(size) = a.field::<u64>(desc, 24) { a.n("size", size); }
    }
    [cuExternalMemoryGetMappedBuffer] (dptr: *mut u64, ext: usize, desc: *const u8) |a| {
        a.out("ptr", dptr); a.n("external", ext as u64);
        if let Some(offset) = a.field::<u64>(desc, 0) { a.n("offset", offset); }
        if let Some(size) = a.field::<u64>(desc, 8) { a.n("size", size); }
    }
    [cuDestroyExternalMemory, cuDestroyExternalSemaphore] (ext: usize) |a| { a.n("external", ext as u64); }
    [cuImportExternalSemaphore] (psem: *mut usize, desc: *const u8) |a| {
        a.out_handle("external", psem);
        if let Some(kind) = a.field::<u32>(desc, 0) {
            a.n("handle_type", kind);
            if kind == 1 || kind == 9 { if let Some(fd) = a.field::<c_int>(desc, 8) { a.i("fd", fd); } }
        }
    }
    [cuSignalExternalSemaphoresAsync, cuSignalExternalSemaphoresAsync_ptsz, cuWaitExternalSemaphoresAsync,
     cuWaitExternalSemaphoresAsync_ptsz] (sems: *const usize, params: *const c_void, count: c_uint, stream: usize) |a| {
        let _ = params;
        a.n("stream", stream as u64); a.n("count", count);
        if a.ok && !sems.is_null() && count < 256 {
            a.list("objects", (0..count as usize).map(|i| *sems.add(i) as u64));
        }
    }

    // Copies and sets (ptr = destination, src = source).
    [cuMemcpy, cuMemcpy_ptds] (dst: u64, src: u64, n: usize) |a| {
        a.n("ptr", dst); a.n("src", src); a.n("size", n as u64);
        kind(&mut a, "dst_kind", dst); kind(&mut a, "src_kind", src);
    }
    [cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds] (dst: u64, src: u64, n: usize) |a| {
        a.n("ptr", dst); a.n("src", src); a.n("size", n as u64);
    }
    [cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds] (dst: u64, src: usize, n: usize) |a| {
        a.n("ptr", dst); a.n("src", src as u64); a.n("size", n as u64); kind(&mut a, "src_kind", src as u64);
    }
    [cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds] (dst: usize, src: u64, n: usize) |a| {
        a.n("ptr", dst as u64); a.n("src", src); a.n("size", n as u64); kind(&mut a, "dst_kind", dst as u64);
    }
    [cuMemcpyAsync, cuMemcpyAsync_ptsz] (dst: u64, src: u64, n: usize, stream: usize) |a| {
        a.n("ptr", dst); a.n("src", src); a.n("size", n as u64); a.n("stream", stream as u64);
        kind(&mut a, "dst_kind", dst); kind(&mut a, "src_kind", src);
    }
    [cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz] (dst: u64, src: u64, n: usize, stream: usize) |a| {
        a.n("ptr", dst); a.n("src", src); a.n("size", n as u64); a.n("stream", stream as u64);
    }
    [cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz] (dst: u64, src: usize, n: usize, stream: usize) |a| {
        a.n("ptr", dst); a.n("src", src as u64); a.n("size", n as u64); a.n("stream", stream as u64);
        kind(&mut a, "src_kind", src as u64);
    }
    [cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz] (dst: usize, src: u64, n: usize, stream: usize) |a| {
        a.n("ptr", dst as u64); a.n("src", src); a.n("size", n as u64); a.n("stream", stream as u64);
        kind(&mut a, "dst_kind", dst as u64);
    }
    [cuMemcpyPeer, cuMemcpyPeer_ptds] (dst: u64, dst_ctx: usize, src: u64, src_ctx: usize, n: usize) |a| {
        a.n("ptr", dst); a.n("ctx", dst_ctx as u64); a.n("src", src); a.n("src_ctx", src_ctx as u64); a.n("size", n as u64);
    }
    [cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz] (dst: u64, dst_ctx: usize, src: u64, src_ctx: usize, n: usize, stream: usize) |a| {
        a.n("ptr", dst); a.n("ctx", dst_ctx as u64); a.n("src", src); a.n("src_ctx", src_ctx as u64);
        a.n("size", n as u64); a.n("stream", stream as u64);
    }
    [cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds] (array: usize, offset: usize, src: u64, n: usize) |a| {
        let _ = (array, offset);
        a.n("src", src); a.n("size", n as u64); a.text("dst_kind", "array");
    }
    [cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds] (dst: u64, array: usize, offset: usize, n: usize) |a| {
        let _ = (array, offset);
        a.n("ptr", dst); a.n("size", n as u64); a.text("src_kind", "array");
    }
    [cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds] (p: *const u8) |a| {
        copy_nd(&mut a, p, false);
    }
    [cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz] (p: *const u8, stream: usize) |a| {
        a.n("stream", stream as u64); copy_nd(&mut a, p, false);
    }
    [cuMemcpy3D_v2, cuMemcpy3D_v2_ptds] (p: *const u8) |a| { copy_nd(&mut a, p, true); }
    [cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz] (p: *const u8, stream: usize) |a| {
        a.n("stream", stream as u64); copy_nd(&mut a, p, true);
    }
    [cuMemcpy3DPeer, cuMemcpy3DPeer_ptds] (p: *const u8) |a| {
        copy_nd(&mut a, p, true);
        if let Some(ctx) = a.field::<u64>(p, 152) { a.n("ctx", ctx); }
        if let Some(ctx) = a.field::<u64>(p, 64) { a.n("src_ctx", ctx); }
    }
    [cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz] (p: *const u8, stream: usize) |a| {
        a.n("stream", stream as u64); copy_nd(&mut a, p, true);
        if let Some(ctx) = a.field::<u64>(p, 152) { a.n("ctx", ctx); }
        if let Some(ctx) = a.field::<u64>(p, 64) { a.n("src_ctx", ctx); }
    }
    // Batches: device work on a stream over memory the record does not list.
    [cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz] (dsts: *const u64, srcs: *const u64, sizes: *const usize,
        count: usize, attrs: usize, attr_idxs: usize, num_attrs: usize, fail: *mut usize, stream: usize) |a| {
        let _ = (dsts, srcs, sizes, attrs, attr_idxs, num_attrs, fail);
        a.n("stream", stream as u64); a.n("count", count as u64);
    }
    [cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2_ptsz] (dsts: *const u64, srcs: *const u64, sizes: *const usize,
        count: usize, attrs: usize, attr_idxs: usize, num_attrs: usize, stream: usize) |a| {
        let _ = (dsts, srcs, sizes, attrs, attr_idxs, num_attrs);
        a.n("stream", stream as u64); a.n("count", count as u64);
    }
    [cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz] (count: usize, ops: usize, fail: *mut usize, flags: u64, stream: usize) |a| {
        let _ = (ops, fail);
        a.n("stream", stream as u64); a.n("count", count as u64); a.n("flags", flags);
    }
    [cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2_ptsz] (count: usize, ops: usize, flags: u64, stream: usize) |a| {
        let _ = ops;
        a.n("stream", stream as u64); a.n("count", count as u64); a.n("flags", flags);
    }
    [cuMemBatchDecompressAsync, cuMemBatchDecompressAsync_ptsz] (params: usize, count: usize, flags: c_uint,
        error_index: *mut usize, stream: usize) |a| {
        let _ = (params, error_index);
        a.n("stream", stream as u64); a.n("count", count as u64); a.n("flags", flags);
    }
    [cuMemMapArrayAsync, cuMemMapArrayAsync_ptsz] (list: usize, count: c_uint, stream: usize) |a| {
        let _ = list;
        a.n("stream", stream as u64); a.n("count", count);
    }
    [cuMemsetD8_v2, cuMemsetD8_v2_ptds] (dst: u64, value: u8, n: usize) |a| {
        a.n("ptr", dst); a.n("value", value); a.n("size", n as u64); kind(&mut a, "dst_kind", dst);
    }
    [cuMemsetD16_v2, cuMemsetD16_v2_ptds] (dst: u64, value: u16, n: usize) |a| {
        a.n("ptr", dst); a.n("value", value); a.n("size", n as u64 * 2); kind(&mut a, "dst_kind", dst);
    }
    [cuMemsetD32_v2, cuMemsetD32_v2_ptds] (dst: u64, value: u32, n: usize) |a| {
        a.n("ptr", dst); a.n("value", value); a.n("size", n as u64 * 4); kind(&mut a, "dst_kind", dst);
    }
    [cuMemsetD8Async, cuMemsetD8Async_ptsz] (dst: u64, value: u8, n: usize, stream: usize) |a| {
        a.n("ptr", dst); a.n("value", value); a.n("size", n as u64); a.n("stream", stream as u64);
        kind(&mut a, "dst_kind", dst);
    }
    [cuMemsetD16Async, cuMemsetD16Async_ptsz] (dst: u64, value: u16, n: usize, stream: usize) |a| {
        a.n("ptr", dst); a.n("value", value); a.n("size", n as u64 * 2); a.n("stream", stream as u64);
        kind(&mut a, "dst_kind", dst);
    }
    [cuMemsetD32Async, cuMemsetD32Async_ptsz] (dst: u64, value: u32, n: usize, stream: usize) |a| {
        a.n("ptr", dst); a.n("value", value); a.n("size", n as u64 * 4); a.n("stream", stream as u64);
        kind(&mut a, "dst_kind", dst);
    }
    [cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds] (dst: u64, pitch: usize, value: u8, w: usize, h: usize) |a| {
        set_2d(&mut a, dst, pitch, value.into(), w, h, 1);
    }
    [cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds] (dst: u64, pitch: usize, value: u16, w: usize, h: usize) |a| {
        set_2d(&mut a, dst, pitch, value.into(), w, h, 2);
    }
    [cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds] (dst: u64, pitch: usize, value: u32, w: usize, h: usize) |a| {
        set_2d(&mut a, dst, pitch, value.into(), w, h, 4);
    }
    [cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz] (dst: u64, pitch: usize, value: u8, w: usize, h: usize, stream: usize) |a| {
        a.n("stream", stream as u64); set_2d(&mut a, dst, pitch, value.into(), w, h, 1);
    }
    [cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz] (dst: u64, pitch: usize, value: u16, w: usize, h: usize, stream: usize) |a| {
        a.n("stream", stream as u64); set_2d(&mut a, dst, pitch, value.into(), w, h, 2);
    }
    [cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz] (dst: u64, pitch: usize, value: u32, w: usize, h: usize, stream: usize) |a| {
        a.n("stream", stream as u64); set_2d(&mut a, dst, pitch, value.into(), w, h, 4);
    }

    // Kernels: the 8-byte parameters are the pointers they may touch.
    [cuLaunchKernel, cuLaunchKernel_ptsz] (func: usize, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
        bz: c_uint, shared: c_uint, stream: usize, params: *mut *mut c_void, extra: *mut *mut c_void) |a| {
        let _ = (gx, gy, gz, bx, by, bz, shared, extra);
        launch(&mut a, func, stream, params);
    }
    [cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz] (func: usize, gx: c_uint, gy: c_uint, gz: c_uint,
        bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: usize, params: *mut *mut c_void) |a| {
        let _ = (gx, gy, gz, bx, by, bz, shared);
        launch(&mut a, func, stream, params);
    }
    [cuLaunchKernelEx, cuLaunchKernelEx_ptsz] (config: *const u8, func: usize, params: *mut *mut c_void,
        extra: *mut *mut c_void) |a| {
        let _ = extra;
        // CUlaunchConfig: seven unsigned ints, then the stream at offset 32.
        let stream = a.field::<u64>(config, 32).unwrap_or(0);
        launch(&mut a, func, stream as usize, params);
    }
    // Launches whose parameters the record cannot list: opaque work.
    [cuLaunchCooperativeKernelMultiDevice] (list: usize, devices: c_uint, flags: c_uint) |a| {
        let _ = list;
        a.n("count", devices); a.n("flags", flags);
    }
    [cuLaunch] (func: usize) |a| { let _ = func; a.n("stream", 0u64); }
    [cuLaunchGrid] (func: usize, w: c_int, h: c_int) |a| { let _ = (func, w, h); a.n("stream", 0u64); }
    [cuLaunchGridAsync] (func: usize, w: c_int, h: c_int, stream: usize) |a| {
        let _ = (func, w, h);
        a.n("stream", stream as u64);
    }
}

/// A shareable handle an export wrote: a POSIX descriptor (followed from
/// here on), or 64 bytes of a fabric handle; nothing after a failure.
unsafe fn export_handle(a: &mut Args, shareable: *mut c_void, kind: u32) {
    if !a.ok || shareable.is_null() {
        return;
    }
    if kind == HANDLE_TYPE_POSIX_FD {
        let fd = *(shareable as *const c_int);
        a.i("fd", fd);
        crate::fds::follow(fd);
    } else if kind == HANDLE_TYPE_FABRIC {
        a.handle64("handle", shareable as *const u8);
    }
}

/// The shareable handle an import took: a descriptor is the argument's
/// value; fabric handles are 64 bytes behind it (read after success, as
/// the driver read them). Other types name no memory the tracer reads.
unsafe fn import_handle(a: &mut Args, os_handle: *mut c_void, kind: u32) {
    if kind == HANDLE_TYPE_POSIX_FD {
        a.i("fd", os_handle as usize as c_int);
    } else if kind == HANDLE_TYPE_FABRIC {
        a.handle64("handle", os_handle as *const u8);
    }
}
