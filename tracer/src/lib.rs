//! `ipc-tracer`: a library that `ipc-conformance trace -- CMD` preloads
//! (`LD_PRELOAD`) into CMD and every process it starts. It records each
//! driver call that matters to IPC as one JSON line in
//! `$IPC_TRACE_DIR/trace-<pid>.jsonl` (format: `ipc_harness::trace_record`)
//! and passes every call and result through unchanged.
//!
//! Three ways reach the wrappers: a program linked against libcuda calls
//! the exported symbols (the preload comes first); a program that opens
//! libcuda itself gets them from the exported `dlsym`; and the CUDA runtime,
//! which asks the driver for its entry points, gets them from the wrapped
//! `cuGetProcAddress`, which hands out a wrapper only when the real pointer
//! is exactly a traced symbol (by `dladdr`), so no call is ever sent to a
//! wrapper of another signature.

// Every wrapper is an `unsafe extern "C"` function whose whole body works on
// the raw pointers the driver API passes: the unsafe contract is the
// driver's own, stated once here rather than in a block per line.
#![allow(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

mod resolve;
pub mod writer;

use ipc_harness::trace_record::{handle_hex, CallArgs};
use resolve::Slot;
use std::ffi::{c_char, c_int, c_void, CStr};

pub type CUresult = c_int;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_TYPE_POSIX_FD: u32 = 1;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

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

unsafe fn out<T: Copy + Into<u64>>(p: *const T) -> Option<u64> {
    (!p.is_null()).then(|| (*p).into())
}

unsafe fn out_ptr(p: *const usize) -> Option<u64> {
    (!p.is_null()).then(|| *p as u64)
}

/// `st_dev:st_ino` of a descriptor, to match an import with its export.
fn fd_identity(fd: c_int) -> Option<String> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only fills the buffer.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then(|| format!("{}:{}", st.st_dev, st.st_ino))
}

type ParamInfoFn = unsafe extern "C" fn(usize, usize, *mut usize, *mut usize) -> CUresult;

/// The 8-byte kernel parameters (candidate pointers), when the driver can
/// say where the parameters lie; `None` when it cannot (opaque work).
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

/// One traced entry point per name: the real function is called first, then
/// the call is recorded (arguments as the call left them). A panic while
/// recording is caught: the program only ever sees the real result.
macro_rules! traced_one {
    ($name:ident ( $($arg:ident : $ty:ty),* ) |$a:ident, $r:ident| $body:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            let Some(real) = slots::$name.get() else {
                return CUDA_ERROR_NOT_INITIALIZED;
            };
            let real: unsafe extern "C" fn($($ty),*) -> CUresult = std::mem::transmute(real);
            if !writer::active() {
                return real($($arg),*);
            }
            let start = writer::now_ns();
            let $r = real($($arg),*);
            let dur = writer::now_ns().saturating_sub(start);
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut $a = CallArgs::default();
                $body
                writer::record(stringify!($name), $r, start, dur, $a);
            }));
            $r
        }
    };
}

macro_rules! traced {
    ($( [$($name:ident),+] $args:tt |$a:ident, $r:ident| $body:block )*) => {
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
        $($( traced_one!{ $name $args |$a, $r| $body } )+)*

        /// The wrapper and slot of a traced symbol.
        fn traced_symbol(name: &[u8]) -> Option<(&'static Slot, usize)> {
            $($( if name == stringify!($name).as_bytes() {
                return Some((&slots::$name, $name as *const () as usize));
            } )+)*
            None
        }
    };
}

traced! {
    // Contexts.
    [cuCtxCreate_v2] (pctx: *mut usize, flags: u32, dev: c_int) |a, _r| {
        a.ctx = out_ptr(pctx); a.flags = Some(flags.into()); a.device = Some(dev);
    }
    [cuCtxCreate_v3] (pctx: *mut usize, params: *mut c_void, n: c_int, flags: u32, dev: c_int) |a, _r| {
        let _ = (params, n);
        a.ctx = out_ptr(pctx); a.flags = Some(flags.into()); a.device = Some(dev);
    }
    [cuCtxCreate_v4] (pctx: *mut usize, params: *mut c_void, flags: u32, dev: c_int) |a, _r| {
        let _ = params;
        a.ctx = out_ptr(pctx); a.flags = Some(flags.into()); a.device = Some(dev);
    }
    [cuCtxDestroy_v2] (ctx: usize) |a, _r| { a.ctx = Some(ctx as u64); }
    [cuCtxSetCurrent, cuCtxPushCurrent_v2] (ctx: usize) |a, _r| { a.ctx = Some(ctx as u64); }
    [cuCtxPopCurrent_v2] (pctx: *mut usize) |a, _r| { a.ctx = out_ptr(pctx); }
    [cuDevicePrimaryCtxRetain] (pctx: *mut usize, dev: c_int) |a, _r| {
        a.ctx = out_ptr(pctx); a.device = Some(dev);
    }
    [cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxReset_v2] (dev: c_int) |a, _r| { a.device = Some(dev); }
    [cuCtxSynchronize] () |_a, _r| {}
    [cuStreamSynchronize, cuStreamSynchronize_ptsz] (stream: usize) |a, _r| { a.stream = Some(stream as u64); }

    // Allocations.
    [cuMemAlloc_v2] (dptr: *mut u64, size: usize) |a, _r| {
        a.ptr = out(dptr); a.size = Some(size as u64);
    }
    [cuMemAllocManaged] (dptr: *mut u64, size: usize, flags: u32) |a, _r| {
        a.ptr = out(dptr); a.size = Some(size as u64); a.flags = Some(flags.into());
    }
    [cuMemAllocHost_v2] (pp: *mut usize, size: usize) |a, _r| {
        a.ptr = out_ptr(pp); a.size = Some(size as u64);
    }
    [cuMemHostAlloc] (pp: *mut usize, size: usize, flags: u32) |a, _r| {
        a.ptr = out_ptr(pp); a.size = Some(size as u64); a.flags = Some(flags.into());
    }
    [cuMemFreeHost] (p: usize) |a, _r| { a.ptr = Some(p as u64); }
    [cuMemFree_v2] (dptr: u64) |a, _r| { a.ptr = Some(dptr); }
    [cuMemAllocAsync, cuMemAllocAsync_ptsz] (dptr: *mut u64, size: usize, stream: usize) |a, _r| {
        a.ptr = out(dptr); a.size = Some(size as u64); a.stream = Some(stream as u64);
    }
    [cuMemFreeAsync, cuMemFreeAsync_ptsz] (dptr: u64, stream: usize) |a, _r| {
        a.ptr = Some(dptr); a.stream = Some(stream as u64);
    }

    // Legacy IPC: memory.
    [cuIpcGetMemHandle] (handle: *mut IpcHandle, dptr: u64) |a, _r| {
        a.ptr = Some(dptr);
        if !handle.is_null() { a.handle = Some(handle_hex(&(*handle).reserved)); }
    }
    [cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle] (pdptr: *mut u64, handle: IpcHandle, flags: u32) |a, _r| {
        a.ptr = out(pdptr); a.handle = Some(handle_hex(&handle.reserved)); a.flags = Some(flags.into());
    }
    [cuIpcCloseMemHandle] (dptr: u64) |a, _r| { a.ptr = Some(dptr); }

    // Events and their IPC handles.
    [cuEventCreate] (pevent: *mut usize, flags: u32) |a, _r| {
        a.event = out_ptr(pevent); a.flags = Some(flags.into());
    }
    [cuEventRecord, cuEventRecord_ptsz] (event: usize, stream: usize) |a, _r| {
        a.event = Some(event as u64); a.stream = Some(stream as u64);
    }
    [cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz] (event: usize, stream: usize, flags: u32) |a, _r| {
        a.event = Some(event as u64); a.stream = Some(stream as u64); a.flags = Some(flags.into());
    }
    [cuEventQuery, cuEventSynchronize, cuEventDestroy_v2] (event: usize) |a, _r| { a.event = Some(event as u64); }
    [cuStreamWaitEvent, cuStreamWaitEvent_ptsz] (stream: usize, event: usize, flags: u32) |a, _r| {
        a.stream = Some(stream as u64); a.event = Some(event as u64); a.flags = Some(flags.into());
    }
    [cuIpcGetEventHandle] (handle: *mut IpcHandle, event: usize) |a, _r| {
        a.event = Some(event as u64);
        if !handle.is_null() { a.handle = Some(handle_hex(&(*handle).reserved)); }
    }
    [cuIpcOpenEventHandle] (pevent: *mut usize, handle: IpcHandle) |a, _r| {
        a.event = out_ptr(pevent); a.handle = Some(handle_hex(&handle.reserved));
    }

    // Virtual memory management.
    [cuMemCreate] (phandle: *mut u64, size: usize, prop: *const c_void, flags: u64) |a, _r| {
        a.vmm = out(phandle); a.size = Some(size as u64); a.flags = Some(flags);
        // CUmemAllocationProp: type, requestedHandleTypes, location { type, id }.
        if !prop.is_null() {
            let fields = prop as *const u32;
            a.handle_type = Some(std::ptr::read_unaligned(fields.add(1)));
            a.device = Some(std::ptr::read_unaligned(fields.add(3)) as c_int);
        }
    }
    [cuMemExportToShareableHandle] (shareable: *mut c_void, handle: u64, kind: u32, flags: u64) |a, r| {
        a.vmm = Some(handle); a.handle_type = Some(kind); a.flags = Some(flags);
        if kind == HANDLE_TYPE_POSIX_FD && !shareable.is_null() {
            let fd = *(shareable as *const c_int);
            a.fd = Some(fd.into());
            if r == 0 { a.fd_identity = fd_identity(fd); }
        } else if !shareable.is_null() && r == 0 {
            a.handle = Some(handle_hex(&(*(shareable as *const IpcHandle)).reserved));
        }
    }
    [cuMemImportFromShareableHandle] (phandle: *mut u64, os_handle: *mut c_void, kind: u32) |a, _r| {
        a.vmm = out(phandle); a.handle_type = Some(kind);
        if kind == HANDLE_TYPE_POSIX_FD {
            let fd = os_handle as usize as c_int;
            a.fd = Some(fd.into());
            a.fd_identity = fd_identity(fd);
        } else if !os_handle.is_null() {
            a.handle = Some(handle_hex(&(*(os_handle as *const IpcHandle)).reserved));
        }
    }
    [cuMemAddressReserve] (pptr: *mut u64, size: usize, align: usize, addr: u64, flags: u64) |a, _r| {
        a.ptr = out(pptr); a.size = Some(size as u64); a.offset = Some(align as u64);
        a.value = Some(addr); a.flags = Some(flags);
    }
    [cuMemMap] (ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) |a, _r| {
        a.ptr = Some(ptr); a.size = Some(size as u64); a.offset = Some(offset as u64);
        a.vmm = Some(handle); a.flags = Some(flags);
    }
    [cuMemSetAccess] (ptr: u64, size: usize, desc: *const AccessDesc, count: usize) |a, _r| {
        a.ptr = Some(ptr); a.size = Some(size as u64);
        if !desc.is_null() && count < 4096 {
            a.access = Some((0..count).map(|i| {
                let d = &*desc.add(i);
                (d.location_id, d.flags as u32)
            }).collect());
        }
    }
    [cuMemUnmap, cuMemAddressFree] (ptr: u64, size: usize) |a, _r| {
        a.ptr = Some(ptr); a.size = Some(size as u64);
    }
    [cuMemRelease] (handle: u64) |a, _r| { a.vmm = Some(handle); }

    // Copies and memsets (ptr = destination, src = source).
    [cuMemcpy, cuMemcpy_ptds, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds] (dst: u64, src: u64, n: usize) |a, _r| {
        a.ptr = Some(dst); a.src = Some(src); a.size = Some(n as u64);
    }
    [cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds] (dst: u64, src: usize, n: usize) |a, _r| {
        a.ptr = Some(dst); a.src = Some(src as u64); a.size = Some(n as u64);
    }
    [cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds] (dst: usize, src: u64, n: usize) |a, _r| {
        a.ptr = Some(dst as u64); a.src = Some(src); a.size = Some(n as u64);
    }
    [cuMemcpyAsync, cuMemcpyAsync_ptsz, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz,
     cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz]
        (dst: u64, src: u64, n: usize, stream: usize) |a, _r| {
        a.ptr = Some(dst); a.src = Some(src); a.size = Some(n as u64); a.stream = Some(stream as u64);
    }
    [cuMemsetD8_v2, cuMemsetD8_v2_ptds] (dst: u64, value: u8, n: usize) |a, _r| {
        a.ptr = Some(dst); a.value = Some(value.into()); a.size = Some(n as u64);
    }
    [cuMemsetD32_v2, cuMemsetD32_v2_ptds] (dst: u64, value: u32, n: usize) |a, _r| {
        a.ptr = Some(dst); a.value = Some(value.into()); a.size = Some(n as u64 * 4);
    }
    [cuMemsetD8Async, cuMemsetD8Async_ptsz] (dst: u64, value: u8, n: usize, stream: usize) |a, _r| {
        a.ptr = Some(dst); a.value = Some(value.into()); a.size = Some(n as u64); a.stream = Some(stream as u64);
    }
    [cuMemsetD32Async, cuMemsetD32Async_ptsz] (dst: u64, value: u32, n: usize, stream: usize) |a, _r| {
        a.ptr = Some(dst); a.value = Some(value.into()); a.size = Some(n as u64 * 4); a.stream = Some(stream as u64);
    }

    // Kernels: the 8-byte parameters are the pointers they may touch.
    [cuLaunchKernel, cuLaunchKernel_ptsz] (func: usize, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32,
        shared: u32, stream: usize, params: *mut *mut c_void, extra: *mut *mut c_void) |a, _r| {
        let _ = (gx, gy, gz, bx, by, bz, shared, extra);
        a.stream = Some(stream as u64); a.pointer_args = kernel_pointer_args(func, params);
    }
    [cuLaunchKernelEx, cuLaunchKernelEx_ptsz] (config: *const u8, func: usize, params: *mut *mut c_void,
        extra: *mut *mut c_void) |a, _r| {
        let _ = extra;
        // CUlaunchConfig: seven unsigned ints, then the stream at offset 32.
        if !config.is_null() { a.stream = Some(std::ptr::read_unaligned(config.add(32) as *const u64)); }
        a.pointer_args = kernel_pointer_args(func, params);
    }
}

static GET_PROC_ADDRESS: Slot = Slot::new(c"cuGetProcAddress");
static GET_PROC_ADDRESS_V2: Slot = Slot::new(c"cuGetProcAddress_v2");

/// The symbol `cuGetProcAddress` would hand out for `base` in CUDA 12 and
/// later, for drivers whose entry points `dladdr` cannot name. Only
/// unambiguous names are listed: anything else is passed through untraced.
fn fallback_name(base: &[u8], per_thread: bool) -> Option<String> {
    let base = std::str::from_utf8(base).ok()?;
    let v2 = [
        "cuMemAlloc",
        "cuMemFree",
        "cuMemAllocHost",
        "cuIpcOpenMemHandle",
        "cuEventDestroy",
        "cuCtxDestroy",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuDevicePrimaryCtxRelease",
        "cuDevicePrimaryCtxReset",
    ];
    let copies_v2 = [
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyDtoD",
        "cuMemsetD8",
        "cuMemsetD32",
    ];
    let async_v2 = [
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemcpyDtoDAsync",
    ];
    let per_stream = [
        "cuEventRecord",
        "cuEventRecordWithFlags",
        "cuStreamWaitEvent",
        "cuStreamSynchronize",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuMemAllocAsync",
        "cuMemFreeAsync",
        "cuMemcpyAsync",
        "cuMemsetD8Async",
        "cuMemsetD32Async",
    ];
    let name = if v2.contains(&base) {
        format!("{base}_v2")
    } else if copies_v2.contains(&base) {
        format!("{base}_v2{}", if per_thread { "_ptds" } else { "" })
    } else if async_v2.contains(&base) {
        format!("{base}_v2{}", if per_thread { "_ptsz" } else { "" })
    } else if per_stream.contains(&base) {
        format!("{base}{}", if per_thread { "_ptsz" } else { "" })
    } else if base == "cuMemcpy" {
        format!("cuMemcpy{}", if per_thread { "_ptds" } else { "" })
    } else {
        base.to_string()
    };
    Some(name)
}

/// The slot and wrapper of a symbol the tracer replaces.
fn wrapper_for(name: &[u8]) -> Option<(&'static Slot, usize)> {
    match name {
        b"cuGetProcAddress" => Some((&GET_PROC_ADDRESS, cuGetProcAddress as *const () as usize)),
        b"cuGetProcAddress_v2" => Some((
            &GET_PROC_ADDRESS_V2,
            cuGetProcAddress_v2 as *const () as usize,
        )),
        other => traced_symbol(other),
    }
}

/// Swap the real function `*pfn` for its wrapper when it is a traced symbol.
unsafe fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    if pfn.is_null() || (*pfn).is_null() || symbol.is_null() {
        return;
    }
    let real = *pfn as usize;
    let name = match resolve::exact_symbol_name(real) {
        Some(exact) => exact.to_bytes().to_vec(),
        None if version >= 12000 => {
            let base = CStr::from_ptr(symbol).to_bytes();
            match fallback_name(base, flags & PER_THREAD_DEFAULT_STREAM != 0) {
                Some(name) => name.into_bytes(),
                None => return,
            }
        }
        None => return,
    };
    if let Some((slot, wrapper)) = wrapper_for(&name) {
        if wrapper != real {
            slot.set(real);
            *pfn = wrapper as *mut c_void;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    let Some(real) = GET_PROC_ADDRESS.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let real: unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult =
        std::mem::transmute(real);
    let result = real(symbol, pfn, version, flags);
    if result == 0 {
        substitute(symbol, pfn, version, flags);
    }
    result
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    let Some(real) = GET_PROC_ADDRESS_V2.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let real: unsafe extern "C" fn(
        *const c_char,
        *mut *mut c_void,
        c_int,
        u64,
        *mut c_int,
    ) -> CUresult = std::mem::transmute(real);
    let result = real(symbol, pfn, version, flags, status);
    if result == 0 {
        substitute(symbol, pfn, version, flags);
    }
    result
}

/// `dlsym` for programs that open libcuda themselves: a traced symbol found
/// in a library comes back as its wrapper (the real one is kept for it).
/// `RTLD_NEXT` lookups are answered relative to the tracer, the object just
/// after the program in the search order.
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real_dlsym) = resolve::real_dlsym() else {
        return std::ptr::null_mut();
    };
    let found = real_dlsym(handle, symbol);
    if found.is_null() || symbol.is_null() || handle == libc::RTLD_NEXT {
        return found;
    }
    let name = CStr::from_ptr(symbol).to_bytes();
    if !name.starts_with(b"cu") {
        return found;
    }
    match wrapper_for(name) {
        Some((slot, wrapper)) => {
            if found as usize != wrapper {
                slot.set(found as usize);
            }
            wrapper as *mut c_void
        }
        None => found,
    }
}

/// Writes the exit record when the process exits normally.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(writer::record_exit);
}

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
