//! `ipc-tracer`: a library that `ipc-conformance trace -- CMD` preloads
//! (`LD_PRELOAD`) into CMD and every process it starts. It records each
//! driver call that matters to IPC, and the host operations that pass
//! descriptors and order processes, as JSON lines in
//! `$IPC_TRACE_DIR/trace-<pid>.jsonl` (format: `ipc_harness::trace_record`)
//! and passes every call and result through unchanged.
//!
//! Three ways reach the driver wrappers (`calls`): a program linked against
//! libcuda calls the exported symbols (the preload comes first); a program
//! that opens libcuda itself gets them from the exported `dlsym`; and the
//! CUDA runtime, which asks the driver for its entry points, gets them from
//! the wrapped `cuGetProcAddress`, which hands out a wrapper only when the
//! real pointer is exactly a traced symbol (by `dladdr`), so no call is
//! ever sent to a wrapper of another signature. An entry point the tracer
//! does not know at all (a newer driver's) is recorded as a `lookup` line
//! when the program asks for it. The host wrappers (`host`) record pipes,
//! sockets, semaphores and process operations.

// Every wrapper is an `unsafe extern "C"` function whose whole body works on
// the raw pointers the driver API passes: the unsafe contract is the
// driver's own, stated once here rather than in a block per line.
#![allow(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

mod args;
pub mod calls;
pub mod fds;
pub mod host;
pub mod json;
mod resolve;
pub mod sys;
pub mod writer;

use resolve::Slot;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

pub use calls::{SIGNATURES, TRACED};

/// The symbols of the measured driver that the tracer leaves alone, with
/// the reason each is irrelevant to IPC (`# reason` lines, then names).
pub const NOT_TRACED: &str = include_str!("../symbols/not-traced.txt");

/// The names `NOT_TRACED` lists, sorted.
pub fn not_traced() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<&str> = NOT_TRACED
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        names.sort_unstable();
        names
    })
}

/// Whether the tracer knows `name`: it wraps it or lists it as irrelevant.
pub fn known(name: &[u8]) -> bool {
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    TRACED.contains(&name)
        || not_traced().binary_search(&name).is_ok()
        || matches!(name, "cuGetProcAddress" | "cuGetProcAddress_v2")
}

const CUDA_ERROR_NOT_INITIALIZED: c_int = 3;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

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
        "cuMemAllocPitch",
        "cuMemGetAddressRange",
        "cuMemHostGetDevicePointer",
        "cuMemHostRegister",
        "cuIpcOpenMemHandle",
        "cuEventDestroy",
        "cuStreamDestroy",
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
        "cuMemcpyDtoA",
        "cuMemcpyAtoD",
        "cuMemcpy2D",
        "cuMemcpy2DUnaligned",
        "cuMemcpy3D",
        "cuMemsetD8",
        "cuMemsetD16",
        "cuMemsetD32",
        "cuMemsetD2D8",
        "cuMemsetD2D16",
        "cuMemsetD2D32",
    ];
    let async_v2 = [
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemcpyDtoDAsync",
        "cuMemcpy2DAsync",
        "cuMemcpy3DAsync",
    ];
    let per_stream = [
        "cuEventRecord",
        "cuEventRecordWithFlags",
        "cuStreamWaitEvent",
        "cuStreamSynchronize",
        "cuStreamQuery",
        "cuStreamAddCallback",
        "cuLaunchHostFunc",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuGraphLaunch",
        "cuMemAllocAsync",
        "cuMemAllocFromPoolAsync",
        "cuMemFreeAsync",
        "cuMemcpyAsync",
        "cuMemcpyPeerAsync",
        "cuMemcpy3DPeerAsync",
        "cuMemsetD8Async",
        "cuMemsetD16Async",
        "cuMemsetD32Async",
        "cuMemsetD2D8Async",
        "cuMemsetD2D16Async",
        "cuMemsetD2D32Async",
        "cuSignalExternalSemaphoresAsync",
        "cuWaitExternalSemaphoresAsync",
    ];
    let per_thread_sync = ["cuMemcpy", "cuMemcpyPeer", "cuMemcpy3DPeer"];
    let name = if v2.contains(&base) {
        format!("{base}_v2")
    } else if copies_v2.contains(&base) {
        format!("{base}_v2{}", if per_thread { "_ptds" } else { "" })
    } else if async_v2.contains(&base) {
        format!("{base}_v2{}", if per_thread { "_ptsz" } else { "" })
    } else if per_stream.contains(&base) {
        format!("{base}{}", if per_thread { "_ptsz" } else { "" })
    } else if per_thread_sync.contains(&base) {
        format!("{base}{}", if per_thread { "_ptds" } else { "" })
    } else if TRACED.iter().any(|t| {
        t.strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('_'))
    }) {
        // Variants with other signatures (`cuCtxSynchronize` and
        // `cuCtxSynchronize_v2`): which one the driver gave cannot be told.
        return None;
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
        other => calls::traced_symbol(other),
    }
}

/// Record a lookup of an entry point the tracer does not know.
fn record_lookup(via: &str, symbol: &[u8], resolved: Option<&[u8]>, version: Option<(c_int, u64)>) {
    if !writer::active() {
        return;
    }
    let mut line = json::Line::new("lookup");
    writer::add_seq(&mut line);
    line.str("via", via);
    line.bytes_str("symbol", symbol, 256);
    if let Some(resolved) = resolved {
        line.bytes_str("resolved", resolved, 256);
    }
    if let Some((version, flags)) = version {
        line.i64("version", version.into());
        line.u64("flags", flags);
    }
    line.u64("t_ns", sys::now_ns());
    writer::add_tid(&mut line);
    writer::emit(&mut line);
}

/// Swap the real function `*pfn` for its wrapper when it is a traced
/// symbol; record the lookup when the tracer does not know it.
unsafe fn substitute(
    via: &str,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) {
    if pfn.is_null() || (*pfn).is_null() || symbol.is_null() {
        return;
    }
    let real = *pfn as usize;
    let asked = CStr::from_ptr(symbol).to_bytes();
    let exact = resolve::exact_symbol_name(real).map(CStr::to_bytes);
    let name = match exact {
        Some(exact) => exact.to_vec(),
        None if version >= 12000 => {
            match fallback_name(asked, flags & PER_THREAD_DEFAULT_STREAM != 0) {
                Some(name) => name.into_bytes(),
                None => {
                    // A traced entry point whose variant cannot be told:
                    // its calls go unrecorded, and the lookup says so.
                    let _ = std::panic::catch_unwind(|| {
                        record_lookup(via, asked, None, Some((version, flags)))
                    });
                    return;
                }
            }
        }
        None => asked.to_vec(),
    };
    match wrapper_for(&name) {
        Some((slot, wrapper)) if (exact.is_some() || version >= 12000) && wrapper != real => {
            slot.set(real);
            *pfn = wrapper as *mut c_void;
        }
        Some(_) => {}
        None if !known(&name) => {
            let _ = std::panic::catch_unwind(|| {
                record_lookup(via, asked, exact, Some((version, flags)))
            });
        }
        None => {}
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    let Some(real) = GET_PROC_ADDRESS.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let real: unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int =
        std::mem::transmute(real);
    let result = real(symbol, pfn, version, flags);
    if result == 0 {
        let errno = sys::errno();
        substitute("cuGetProcAddress", symbol, pfn, version, flags);
        sys::set_errno(errno);
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
) -> c_int {
    let Some(real) = GET_PROC_ADDRESS_V2.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let real: unsafe extern "C" fn(
        *const c_char,
        *mut *mut c_void,
        c_int,
        u64,
        *mut c_int,
    ) -> c_int = std::mem::transmute(real);
    let result = real(symbol, pfn, version, flags, status);
    if result == 0 {
        let errno = sys::errno();
        substitute("cuGetProcAddress_v2", symbol, pfn, version, flags);
        sys::set_errno(errno);
    }
    result
}

/// Whether `addr` lies in a library whose file name starts `libcuda.so`.
unsafe fn in_libcuda(addr: *mut c_void) -> bool {
    let mut info: libc::Dl_info = std::mem::zeroed();
    if libc::dladdr(addr, &mut info) == 0 || info.dli_fname.is_null() {
        return false;
    }
    let file = CStr::from_ptr(info.dli_fname).to_bytes();
    let base = file.rsplit(|&b| b == b'/').next().unwrap_or(file);
    base.starts_with(b"libcuda.so")
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
    if !name.starts_with(b"cu") || name.starts_with(b"cuda") {
        return found;
    }
    match wrapper_for(name) {
        Some((slot, wrapper)) => {
            if found as usize != wrapper {
                slot.set(found as usize);
            }
            wrapper as *mut c_void
        }
        None => {
            if writer::active() && !known(name) && in_libcuda(found) {
                let errno = sys::errno();
                let _ = std::panic::catch_unwind(|| record_lookup("dlsym", name, None, None));
                sys::set_errno(errno);
            }
            found
        }
    }
}

/// The library constructor: the header goes out before the program runs.
extern "C" fn at_load() {
    let _ = std::panic::catch_unwind(|| {
        writer::at_load();
        host::at_load();
    });
}

/// Writes the exit record when the process exits normally.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(writer::record_exit);
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
