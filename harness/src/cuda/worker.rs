//! The worker: one OS process that owns one CUDA "process" of a scenario.
//!
//! [`worker_main`] is the whole program. It takes the socket named by
//! [`WORKER_FD_ENV`], then answers requests one by one on its main thread,
//! each with the API call(s) its [`Request`] names, in the dialect chosen by
//! [`Request::Init`]:
//!
//! | request | runtime dialect | driver dialect |
//! | --- | --- | --- |
//! | `Init` | `cuInit(0)`, `cudaSetDevice` | `cuInit(0)`, `cuDeviceGet`, `cuDevicePrimaryCtxRetain`, `cuCtxSetCurrent` |
//! | `DeviceCount` | `cudaGetDeviceCount` | `cuDeviceGetCount` |
//! | `DeviceAttribute` | `cudaDeviceGetAttribute` (†) | `cuDeviceGet`, `cuDeviceGetAttribute` |
//! | `CanAccessPeer` | `cudaDeviceCanAccessPeer` | `cuDeviceGet`, `cuDeviceCanAccessPeer` |
//! | `EnablePeerAccess` | `cudaDeviceEnablePeerAccess(peer, 0)` | `cuDeviceGet`, `cuDevicePrimaryCtxRetain` (peer), `cuCtxEnablePeerAccess(.., 0)` |
//! | `SetDevice` | `cudaSetDevice` | `cuDeviceGet`, `cuDevicePrimaryCtxRetain`, `cuCtxSetCurrent` |
//! | `PrimaryContext` | `cuDeviceGet`, `cuDevicePrimaryCtxRetain` | same |
//! | `CreateContext` | `cuDeviceGet`, `cuCtxCreate_v4(.., NULL, 0, ..)` | same |
//! | `SetCurrentContext` / `CurrentContext` / `DestroyContext` | `cuCtxSetCurrent` / `cuCtxGetCurrent` / `cuCtxDestroy_v2` | same |
//! | `Alloc` | `cudaMalloc`, `cudaMallocManaged(.., cudaMemAttachGlobal)`, `cudaMallocHost`, `cudaMallocAsync(.., 0)` + `cudaStreamSynchronize(0)` | `cuMemAlloc_v2`, `cuMemAllocManaged(.., CU_MEM_ATTACH_GLOBAL)`, `cuMemAllocHost_v2`, `cuMemAllocAsync(.., 0)` + `cuStreamSynchronize(0)` |
//! | `Free` | `cudaFree`, `cudaFreeHost`, `cudaFreeAsync(.., 0)` + `cudaStreamSynchronize(0)` | `cuMemFree_v2`, `cuMemFreeHost`, `cuMemFreeAsync(.., 0)` + `cuStreamSynchronize(0)` |
//! | `Memset` | `cudaMemset` | `cuMemsetD8_v2` |
//! | `Write` / `Read` | `cudaMemcpy` H2D / D2H | `cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2` |
//! | `DeviceRead` | copy kernel (below) | same |
//! | `AddressRange` | `cuMemGetAddressRange_v2` | same |
//! | `PointerInfo` | `cudaPointerGetAttributes` | `cuPointerGetAttribute` (‡) |
//! | `IpcGetMemHandle` / `IpcOpenMemHandle` / `IpcCloseMemHandle` | `cudaIpc*MemHandle` | `cuIpcGetMemHandle` / `cuIpcOpenMemHandle_v2` / `cuIpcCloseMemHandle` |
//! | `Vmm*` (granularity, create, export, import, reserve, map, set access, unmap, address free, release) | `cuMemGetAllocationGranularity`, `cuMemCreate`, `cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`, `cuMemAddressReserve`, `cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`, `cuMemAddressFree`, `cuMemRelease` | same |
//! | `Pool*` (create, default, destroy, export, import, set and get access, alloc + stream sync, free + stream sync, export pointer, import pointer) | `cudaMemPoolCreate`, `cudaDeviceGetDefaultMemPool`, `cudaMemPoolDestroy`, `cudaMemPoolExportToShareableHandle`, `cudaMemPoolImportFromShareableHandle`, `cudaMemPoolSetAccess`, `cudaMemPoolGetAccess`, `cudaMallocFromPoolAsync`, `cudaFreeAsync`, `cudaMemPoolExportPointer`, `cudaMemPoolImportPointer` | `cuMemPoolCreate`, `cuDeviceGetDefaultMemPool`, `cuMemPoolDestroy`, `cuMemPoolExportToShareableHandle`, `cuMemPoolImportFromShareableHandle`, `cuMemPoolSetAccess`, `cuMemPoolGetAccess`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`, `cuMemPoolExportPointer`, `cuMemPoolImportPointer` |
//! | `FdClose` / `FdOpenNullDevice` | `close` (only descriptors the worker holds) / `open("/dev/null")` | same |
//! | `PidfdGetfd` | `pidfd_open` + `pidfd_getfd` (no CUDA call) | same |
//! | `SendFd` / `ReceiveFd` | no API call: the descriptor rides the answer / the request with `SCM_RIGHTS` | same |
//! | `EventCreate` / `EventRecord` / `EventQuery` / `EventSynchronize` / `EventDestroy` | `cudaEventCreateWithFlags` / `cudaEventRecord(.., 0)` / `cudaEventQuery` / `cudaEventSynchronize` / `cudaEventDestroy` | `cuEventCreate` / `cuEventRecord(.., 0)` / `cuEventQuery` / `cuEventSynchronize` / `cuEventDestroy_v2` |
//! | `StreamWaitEvent` / `EventElapsed` | `cudaStreamWaitEvent(0, .., 0)` / `cudaEventElapsedTime` | `cuStreamWaitEvent(0, .., 0)` / `cuEventElapsedTime_v2` |
//! | `IpcGetEventHandle` / `IpcOpenEventHandle` | `cudaIpc*EventHandle` | `cuIpc*EventHandle` |
//! | `PointerAttribute` | `cuPointerGetAttribute` (one attribute, into a zeroed `u64`) | same |
//! | `ForkChildAlloc` | `fork()`; the child: `cudaMalloc`, its code through a socket, `_exit` | same with `cuMemAlloc_v2` |
//! | `SlowFill` | slow-fill kernel (below) | same |
//! | `StreamCreate` / `StreamDestroy` / `StreamSynchronize` / `StreamQuery` | `cudaStreamCreateWithFlags` / `cudaStreamDestroy` / `cudaStreamSynchronize` / `cudaStreamQuery` | `cuStreamCreate` / `cuStreamDestroy_v2` / `cuStreamSynchronize` / `cuStreamQuery` |
//! | `EventRecordOn` / `StreamWaitEventOn` / `SlowFillOn` | as `EventRecord` / `StreamWaitEvent` / `SlowFill`, on the given stream | same |
//! | `CopyDevice` | `cudaMemcpy(.., cudaMemcpyDeviceToDevice)` on stream 0, else `cudaMemcpyAsync(.., stream)` | `cuMemcpyDtoD_v2`, else `cuMemcpyDtoDAsync_v2` |
//! | `CopyPeer` | `cudaMemcpyPeer` | `cuMemcpyPeer` with both devices' primary contexts (retained) |
//! | `KernelPattern` | pattern kernel (`worker/pattern_kernel.rs`) | same |
//! | `ReleaseImported` / `Reset` | see below | see below |
//!
//! (†) `handle_type_posix_fd_supported` and
//! `virtual_memory_management_supported` have no `cudaDevAttr` enumerator,
//! so a runtime-dialect process asks the driver API for them, as a runtime
//! program would have to.
//!
//! (‡) Driver dialect: `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`, then
//! `CU_POINTER_ATTRIBUTE_IS_MANAGED` (the driver reports managed memory as
//! `CU_MEMORYTYPE_DEVICE`) and, for device or managed memory,
//! `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`. `CUDA_ERROR_INVALID_VALUE` from
//! the memory-type query means "not a pointer the driver knows" and is
//! reported as `MemoryType::Unregistered`, mirroring what
//! `cudaPointerGetAttributes` answers for such a pointer. The device is
//! `None` for host and unregistered memory in both dialects.
//!
//! A stream argument is a stream the worker created, or one of the
//! driver's own handles, passed as it is: `0` (the legacy default stream)
//! and `0x2` (`cudaStreamPerThread` / `CU_STREAM_PER_THREAD`, the
//! per-thread default stream of the one thread that serves requests).
//!
//! Every call uses whatever context is current on the worker's thread; the
//! runtime dialect relies on the `cudaSetDevice` done by `Init`. Error codes
//! are returned raw ([`WireError::Api`]); calls made through the driver API
//! in a runtime-dialect process return `CUresult`s, which share their
//! numbers with `cudaError_t` for every code the suite names.
//!
//! # `device_read`
//!
//! A copy kernel, `copy_bytes(src, dst, n)`, one byte per thread, 256
//! threads a block, bounds-checked against `n`. It is hand-written PTX
//! (`.target sm_52`), JIT-compiled by the driver (`cuModuleLoadData`) the
//! first time a context needs it and cached per `CUcontext`. The worker
//! allocates a scratch buffer (`cuMemAlloc_v2`), launches (`cuLaunchKernel`
//! on the null stream), waits (`cuCtxSynchronize`), copies the scratch back
//! (`cuMemcpyDtoH_v2`) and frees it (`cuMemFree_v2`, whose result is
//! ignored). A kernel fault comes back as the error code of the failing
//! call, typically 700 (illegal address); the context is then unusable, as
//! it would be in any program. A zero-length `device_read` returns no bytes
//! and calls nothing.
//!
//! # `slow_fill` and events
//!
//! The slow-fill kernel (hand-written PTX like the copy kernel, cached per
//! context) runs as one block of 256 threads on the null stream: thread 0
//! spins until `%globaltimer` has advanced by the requested time, then all
//! threads write the byte. The request returns after `cuLaunchKernel`, so the
//! work is still running when the next request arrives: that is what makes
//! an event recorded behind it pending. Event ids are the raw `cudaEvent_t`
//! / `CUevent`; the worker refuses (Harness error) an id it did not return
//! or already destroyed, rather than hand the API a dangling pointer.
//!
//! # `Reset` (worker reuse)
//!
//! The worker records what its requests created and have not released:
//! every allocation (pointer, the free that matches its kind, the context
//! current when it was made), every event created or opened (destroyed
//! first, with its context current), every IPC-opened pointer with the number of
//! opens not yet closed (and its context), every context made by
//! `CreateContext` and not destroyed (destroying one forgets what was
//! made in it). `ReleaseImported`, which the machine sends to all its
//! workers and waits on before any `Reset`, destroys the streams and
//! events, closes the IPC mappings and frees the pointers and pools
//! imported from other processes' pools, so that no worker frees what
//! another still maps or imports (the IPC mappings closed as many times as
//! they were opened: `cudaIpcCloseMemHandle` / `cuIpcCloseMemHandle`).
//! `Reset` does the same if that has not run, then frees each
//! allocation with its matching free, each with its context made current
//! first (`cuCtxSetCurrent`), destroys the created contexts newest first
//! (`cuCtxDestroy_v2`), makes the `Init` device current again
//! (`cudaSetDevice`, or `cuCtxSetCurrent` of the primary context `Init`
//! retained) and synchronizes (`cudaDeviceSynchronize` / `cuCtxSynchronize`).
//! It answers [`Reply::Clean`] only when every one of those calls returned
//! success and nothing is left; otherwise a Harness error listing the
//! failures (the parent then discards the worker). Primary contexts
//! retained by requests, loaded copy-kernel modules, and driver state no
//! call can observe survive a reset (see the [module docs](super)).
//!
//! # Robustness
//!
//! A request the worker cannot decode, a request before `Init`, a transfer
//! above [`MAX_TRANSFER`], a missing library or symbol, and any panic
//! (caught per request) are answered with [`WireError::Harness`]; the
//! worker keeps serving. Only a broken stream ends it.

use super::ffi::{self, attr, CallResult, DevPtr, Handle, Lib, RawIpcHandle, RawPointerAttributes};
use super::protocol::{
    recv_message, send_message, ProbeReport, ProtocolError, Reply, Request, Response, WireError,
    MAX_TRANSFER,
};
use crate::driver::{
    ContextId, DeviceAttribute, DevicePtr, EventId, Fd, FreeKind, GranularityKind, HandleTypes,
    IpcEventHandle, IpcMemHandle, MemKind, MemoryType, OutArg, PointerInfo, ShareableHandleType,
    StreamId, VmmAccess, VmmHandle, IPC_HANDLE_SIZE,
};
use crate::errors::Dialect;
use std::collections::HashMap;
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::fd::IntoRawFd;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;

mod mempools;

/// The environment variable that names the worker's socket descriptor.
pub const WORKER_FD_ENV: &str = "IPC_HARNESS_WORKER_FD";

/// Exit status: the socket named by [`WORKER_FD_ENV`] is missing or invalid.
pub const EXIT_BAD_SETUP: i32 = 2;
/// Exit status: the stream to the parent broke mid-frame or could not be written.
pub const EXIT_PROTOCOL: i32 = 3;

/// The copy kernel used by `device_read`: `dst[i] = src[i]` for `i < n`.
const COPY_BYTES_PTX: &CStr = c"
.version 7.0
.target sm_52
.address_size 64

.visible .entry copy_bytes(
    .param .u64 copy_bytes_param_0,
    .param .u64 copy_bytes_param_1,
    .param .u64 copy_bytes_param_2
)
{
    .reg .pred %p<2>;
    .reg .b16 %rs<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [copy_bytes_param_0];
    ld.param.u64 %rd2, [copy_bytes_param_1];
    ld.param.u64 %rd3, [copy_bytes_param_2];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.s64 %rd6, %rd4, %rd5;
    setp.ge.u64 %p1, %rd6, %rd3;
    @%p1 bra $L__done;
    cvta.to.global.u64 %rd7, %rd1;
    add.s64 %rd8, %rd7, %rd6;
    ld.global.u8 %rs1, [%rd8];
    cvta.to.global.u64 %rd9, %rd2;
    add.s64 %rd10, %rd9, %rd6;
    st.global.u8 [%rd10], %rs1;
$L__done:
    ret;
}
";

const COPY_BYTES_NAME: &CStr = c"copy_bytes";

/// The long-work kernel used by `slow_fill`, launched as one block: thread
/// 0 busy-waits until `%globaltimer` (ns) has advanced by `ns`, then every
/// thread writes `value` to `dst[i]` for its share of `i < n`.
const SLOW_FILL_PTX: &CStr = c"
.version 7.0
.target sm_52
.address_size 64

.visible .entry slow_fill(
    .param .u64 slow_fill_param_0,
    .param .u64 slow_fill_param_1,
    .param .u64 slow_fill_param_2,
    .param .u32 slow_fill_param_3
)
{
    .reg .pred %p<4>;
    .reg .b16 %rs<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [slow_fill_param_0];
    ld.param.u64 %rd2, [slow_fill_param_1];
    ld.param.u64 %rd3, [slow_fill_param_2];
    ld.param.u32 %r1, [slow_fill_param_3];
    cvt.u16.u32 %rs1, %r1;
    mov.u32 %r2, %tid.x;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra $L__waited;
    mov.u64 %rd4, %globaltimer;
$L__spin:
    mov.u64 %rd5, %globaltimer;
    sub.u64 %rd6, %rd5, %rd4;
    setp.lt.u64 %p2, %rd6, %rd3;
    @%p2 bra $L__spin;
$L__waited:
    bar.sync 0;
    cvta.to.global.u64 %rd7, %rd1;
    cvt.u64.u32 %rd8, %r2;
    mov.u32 %r3, %ntid.x;
    cvt.u64.u32 %rd9, %r3;
$L__fill:
    setp.ge.u64 %p3, %rd8, %rd2;
    @%p3 bra $L__done;
    add.s64 %rd10, %rd7, %rd8;
    st.global.u8 [%rd10], %rs1;
    add.s64 %rd8, %rd8, %rd9;
    bra.uni $L__fill;
$L__done:
    ret;
}
";

const SLOW_FILL_NAME: &CStr = c"slow_fill";
const SLOW_FILL_BLOCK: u32 = 256;
const COPY_BLOCK: u64 = 256;

/// The worker program. Call it from a subcommand of the binary named in the
/// [`WorkerCommand`](super::WorkerCommand) (the conformance binary runs it as
/// `ipc-conformance worker`):
///
/// ```ignore
/// std::process::exit(ipc_harness::cuda::worker_main());
/// ```
///
/// After an `Exit` request it answers and exits the process with status 0
/// itself (`std::process::exit`, so `atexit` handlers such as the CUDA
/// runtime's run, as at the end of any program). It returns 0 when the
/// parent closes the socket, [`EXIT_BAD_SETUP`] when the socket is missing,
/// and [`EXIT_PROTOCOL`] when the stream breaks.
pub fn worker_main() -> i32 {
    let fd: RawFd = match std::env::var(WORKER_FD_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
    {
        Some(fd) if fd >= 0 => fd,
        _ => {
            eprintln!(
                "ipc-harness worker: {WORKER_FD_ENV} is not set to a file descriptor; \
                 this command is started by the harness, not by hand"
            );
            return EXIT_BAD_SETUP;
        }
    };
    // SAFETY: F_GETFD only inspects the descriptor table.
    if unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) } < 0 {
        eprintln!("ipc-harness worker: {WORKER_FD_ENV}={fd} is not an open descriptor");
        return EXIT_BAD_SETUP;
    }
    // SAFETY: the parent handed this descriptor to us and nothing else in
    // this process uses it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // Keep it out of anything this process might exec.
    // SAFETY: sets a flag on a descriptor we own.
    unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC) };
    pidfd::allow_any_tracer();
    match serve(sock.as_fd()) {
        ServeEnd::Exit => std::process::exit(0),
        ServeEnd::ParentGone => 0,
        ServeEnd::Broken => EXIT_PROTOCOL,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum ServeEnd {
    /// `Exit` was answered: the process must exit now.
    Exit,
    /// The parent closed the socket.
    ParentGone,
    /// The stream broke.
    Broken,
}

/// Most received descriptors a worker holds at once (a scenario passes a
/// few): more are refused and closed, so the parent's requests, before
/// `Init` or after, cannot exhaust the worker's descriptor table.
const MAX_HELD_FDS: usize = 256;

/// Answers requests until `Exit`, the end of the stream, or a broken stream.
fn serve(sock: BorrowedFd<'_>) -> ServeEnd {
    let mut worker = Worker::default();
    loop {
        let mut attached: Vec<OwnedFd> = Vec::new();
        let request = match recv_message::<Request>(sock) {
            // Descriptors a request does not take are closed on drop.
            Ok((request, fds)) => {
                attached = fds;
                Ok(request)
            }
            Err(ProtocolError::Eof) => return ServeEnd::ParentGone,
            // The frame was consumed whole: answer and keep going.
            Err(ProtocolError::Json(e)) => {
                Err(WireError::Harness(format!("malformed request: {e}")))
            }
            Err(e) => {
                eprintln!("ipc-harness worker: {e}");
                return ServeEnd::Broken;
            }
        };
        let exit = matches!(request, Ok(Request::Exit));
        // Descriptor passing is the socket's business, not the driver's.
        let mut outgoing: Option<RawFd> = None;
        let response: Response = match request {
            Ok(Request::Exit) => Ok(Reply::Unit),
            Ok(Request::SendFd { fd }) => {
                if worker.owned.fds.contains(&fd) {
                    outgoing = Some(fd);
                    Ok(Reply::Unit)
                } else {
                    // EBADF, reported as the simulator does.
                    Err(WireError::Api(1))
                }
            }
            Ok(Request::ReceiveFd) => match attached.pop() {
                Some(_) if worker.owned.fds.len() >= MAX_HELD_FDS => Err(harness(format!(
                    "receive_fd: the worker already holds {MAX_HELD_FDS} descriptors, the limit"
                ))),
                Some(f) => {
                    let n = f.into_raw_fd();
                    worker.owned.fds.insert(n);
                    Ok(Reply::Fd(n))
                }
                None => Err(harness("receive_fd came without a descriptor")),
            },
            Ok(request) => worker.handle_guarded(request),
            Err(e) => Err(e),
        };
        // SAFETY: `fd` is open: the worker tracks it and nothing closed it.
        let out: Vec<BorrowedFd<'_>> = outgoing
            .iter()
            .map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) })
            .collect();
        if let Err(e) = send_message(sock, &response, &out) {
            eprintln!("ipc-harness worker: cannot answer: {e}");
            return ServeEnd::Broken;
        }
        if exit {
            return ServeEnd::Exit;
        }
    }
}

fn harness(msg: impl Into<String>) -> WireError {
    WireError::Harness(msg.into())
}

fn require(lib: Lib) -> Result<(), WireError> {
    if lib.present() {
        Ok(())
    } else {
        Err(harness(match lib {
            Lib::Driver => "libcuda could not be loaded (no NVIDIA driver?)",
            Lib::Runtime => {
                "libcudart could not be loaded (the runtime dialect needs the CUDA runtime \
                 library on the loader path, e.g. LD_LIBRARY_PATH)"
            }
        }))
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// A host buffer of `len` zero bytes, or a Harness error when it is over
/// [`MAX_TRANSFER`] or cannot be allocated.
fn host_buffer(len: u64) -> Result<Vec<u8>, WireError> {
    if len > MAX_TRANSFER {
        return Err(harness(format!(
            "a transfer of {len} bytes exceeds the worker's limit of {MAX_TRANSFER} bytes"
        )));
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(len as usize)
        .map_err(|e| harness(format!("cannot allocate {len} host bytes: {e}")))?;
    buf.resize(len as usize, 0);
    Ok(buf)
}

fn as_ptr(ptr: u64) -> *mut c_void {
    ptr as usize as *mut c_void
}

/// `cuDeviceGet`.
fn cu_device(ordinal: u32) -> Result<c_int, WireError> {
    let mut dev: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { ffi::cuDeviceGet(&mut dev, ordinal as c_int)? };
    Ok(dev)
}

/// Attribute number, and whether the runtime has a `cudaDevAttr` for it.
fn attribute_number(a: DeviceAttribute) -> (c_int, bool) {
    match a {
        DeviceAttribute::UnifiedAddressing => (attr::UNIFIED_ADDRESSING, true),
        DeviceAttribute::IpcEventSupport => (attr::IPC_EVENT_SUPPORTED, true),
        DeviceAttribute::ComputeCapabilityMajor => (attr::COMPUTE_CAPABILITY_MAJOR, true),
        DeviceAttribute::ComputeCapabilityMinor => (attr::COMPUTE_CAPABILITY_MINOR, true),
        DeviceAttribute::MemoryPoolsSupported => (attr::MEMORY_POOLS_SUPPORTED, true),
        DeviceAttribute::HandleTypePosixFdSupported => {
            (attr::HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, false)
        }
        DeviceAttribute::VirtualMemoryManagementSupported => {
            (attr::VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, false)
        }
        DeviceAttribute::HandleTypeFabricSupported => (attr::HANDLE_TYPE_FABRIC_SUPPORTED, false),
    }
}

/// `CUmemAllocationProp` for pinned memory on `device` requesting `types`.
fn alloc_prop(device: u32, types: HandleTypes) -> ffi::MemAllocationProp {
    ffi::MemAllocationProp {
        type_: ffi::vmm::ALLOCATION_TYPE_PINNED,
        requested_handle_types: types.0 as c_int,
        location_type: ffi::vmm::LOCATION_TYPE_DEVICE,
        location_id: device as c_int,
        win32_handle_meta_data: null_mut(),
        alloc_flags: [0; 8],
    }
}

/// What the probe worker reports. Never fails: what it cannot learn stays `None`.
fn probe() -> ProbeReport {
    let mut report = ProbeReport {
        libcuda: Lib::Driver.present(),
        libcudart: Lib::Runtime.present(),
        ..ProbeReport::default()
    };
    if report.libcudart {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer; does not initialise a device.
        if unsafe { ffi::cudaRuntimeGetVersion(&mut v) }.is_ok() {
            report.cuda_runtime_version = Some(v);
        }
    }
    if !report.libcuda {
        return report;
    }
    let mut v: c_int = 0;
    // SAFETY: valid out-pointer; allowed before cuInit.
    if unsafe { ffi::cuDriverGetVersion(&mut v) }.is_ok() {
        report.cuda_driver_version = Some(v);
    }
    // SAFETY: plain call.
    match unsafe { ffi::cuInit(0) } {
        Ok(()) => {}
        Err(WireError::Api(code)) => {
            report.init_error = Some(code);
            return report;
        }
        Err(WireError::Harness(_)) => return report,
    }
    let mut count: c_int = 0;
    // SAFETY: valid out-pointer.
    if unsafe { ffi::cuDeviceGetCount(&mut count) }.is_err() || count <= 0 {
        return report;
    }
    report.device_count = count as u32;
    let Ok(dev) = cu_device(0) else {
        return report;
    };
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds `len` bytes.
    if unsafe { ffi::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev) }.is_ok() {
        name[name.len() - 1] = 0;
        // SAFETY: NUL-terminated just above at the latest.
        let s = unsafe { CStr::from_ptr(name.as_ptr()) };
        report.gpu_name = Some(s.to_string_lossy().trim().to_string());
    }
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers.
    let cc = unsafe {
        ffi::cuDeviceGetAttribute(&mut major, attr::COMPUTE_CAPABILITY_MAJOR, dev).and_then(|()| {
            ffi::cuDeviceGetAttribute(&mut minor, attr::COMPUTE_CAPABILITY_MINOR, dev)
        })
    };
    if cc.is_ok() {
        report.compute_capability = Some((major, minor));
    }
    report
}

/// The CUDA API a worker calls. HIP processes never get this far (the CUDA
/// backend refuses them before spawning a worker; `init` refuses them too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Runtime,
    Driver,
}

#[derive(Default)]
pub(crate) struct Worker {
    /// Set by a successful `Init`.
    dialect: Option<Api>,
    /// The device `Init` made current (what `Reset` makes current again).
    init_device: u32,
    /// Its primary context, current after `Init` (retained by `Init` and
    /// never released, so the handle stays valid).
    init_context: u64,
    /// `CUcontext` -> `CUfunction` of the copy kernel loaded in it.
    kernels: HashMap<usize, usize>,
    /// `CUcontext` -> `CUfunction` of the slow-fill kernel loaded in it.
    slow_kernels: HashMap<usize, usize>,
    /// `CUcontext` -> `CUfunction` of the pattern kernel loaded in it.
    pattern_kernels: HashMap<usize, usize>,
    /// What this worker's requests created and have not released yet.
    owned: Owned,
    /// Device ordinal -> contexts an earlier machine's `CreateContext` made,
    /// emptied and kept by `Reset` for the next `CreateContext` of that
    /// device (see [`Worker::create_context`]).
    spare_contexts: HashMap<u32, Vec<u64>>,
}

/// The most emptied contexts a reused worker keeps per device, unless
/// [`SPARE_CONTEXTS_ENV`] says otherwise.
const MAX_SPARE_CONTEXTS: usize = 2;

/// How many emptied contexts a reused worker keeps per device (default 2;
/// 0: none). Every context on a GPU, idle or not,
/// makes each new one slower, so spares cost the run as well as save it
/// context creations.
pub const SPARE_CONTEXTS_ENV: &str = "IPC_CONFORMANCE_SPARE_CONTEXTS";

/// What [`SPARE_CONTEXTS_ENV`] says in this worker (read once); an unset
/// or unreadable value means the default.
fn max_spare_contexts() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| spare_contexts_from(std::env::var(SPARE_CONTEXTS_ENV).ok().as_deref()))
}

/// [`max_spare_contexts`] from the variable's value.
fn spare_contexts_from(value: Option<&str>) -> usize {
    value
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(MAX_SPARE_CONTEXTS, |n| n.min(8))
}

/// Resources created by requests and not yet released, for `Reset`. Each
/// is recorded with the context that was current when it was created
/// (0 when none could be read), which is made current again to release it.
#[derive(Debug, Default)]
struct Owned {
    /// Allocation pointer -> (context, the free that releases it).
    allocations: HashMap<u64, (u64, FreeKind)>,
    /// IPC-opened pointer -> (context, times opened and not closed).
    ipc_opened: HashMap<u64, (u64, u32)>,
    /// Contexts created by `CreateContext` and not destroyed, oldest first,
    /// with their device ordinal.
    contexts: Vec<(u64, u32)>,
    // --- VMM ---
    /// Allocation handles (created or imported) not released.
    vmm_handles: HashSet<u64>,
    /// Mapped VA -> size.
    vmm_maps: HashMap<u64, u64>,
    /// Reserved VA -> size.
    vmm_reservations: HashMap<u64, u64>,
    /// Descriptors exported, opened or received, not closed.
    fds: HashSet<i32>,
    /// `EnablePeerAccess` was asked for: `Reset` does not undo it, so the
    /// worker is not reused (a later machine would find access enabled).
    peer_access: bool,
    /// An interprocess event was created or an event handle opened (even if
    /// the call failed): the process's first one makes driver state that lives
    /// as long as the process (a descriptor, shared event memory that claims
    /// freed VA: mem.lifetime.freed-export-va-claimed-by-event-handle).
    /// `Reset` cannot undo it, and a later machine would see it (recordings on
    /// reused workers differed from the simulator where fresh workers agreed),
    /// so the worker is not reused.
    interprocess_events: bool,
    /// Events created or opened and not destroyed -> their context.
    events: HashMap<u64, u64>,
    /// A device's default memory pool was asked for: it lives as long as
    /// the process, with whatever access or allocations a scenario gave it,
    /// so the worker is not reused. (Pools a request created or imported
    /// are in `pools`; their allocations and imported pointers in
    /// `allocations`.)
    mempools: bool,
    /// Memory pools created and not destroyed -> their context.
    pools: HashMap<u64, u64>,
    /// What this worker took from other processes' pools and did not
    /// release, -> its context: pointers (`PoolImportPtr`, freed by a
    /// stream-ordered free) and pools (`PoolImport`).
    /// [`Request::ReleaseImported`] releases these before any worker of the
    /// machine frees what it exported.
    imported_ptrs: HashMap<u64, u64>,
    imported_pools: HashMap<u64, u64>,
    /// Streams created and not destroyed -> their context.
    streams: HashMap<u64, u64>,
}

impl Owned {
    fn is_empty(&self) -> bool {
        self.allocations.is_empty()
            && self.ipc_opened.is_empty()
            && self.contexts.is_empty()
            && self.vmm_handles.is_empty()
            && self.vmm_maps.is_empty()
            && self.vmm_reservations.is_empty()
            && self.fds.is_empty()
            && !self.peer_access
            && !self.interprocess_events
            && self.events.is_empty()
            && !self.mempools
            && self.pools.is_empty()
            && self.imported_ptrs.is_empty()
            && self.imported_pools.is_empty()
            && self.streams.is_empty()
    }

    /// The stream `request` names when it is neither one of the driver's
    /// own handles, passed to it as they are (the legacy default stream 0,
    /// the per-thread default stream `0x2`: [`is_driver_stream`]), nor a
    /// stream this worker created and did not destroy: an API call would
    /// take it for a dangling pointer.
    fn unknown_stream(&self, request: &Request) -> Option<u64> {
        match request {
            Request::StreamDestroy { stream }
            | Request::StreamSynchronize { stream }
            | Request::StreamQuery { stream }
            | Request::EventRecordOn { stream, .. }
            | Request::StreamWaitEventOn { stream, .. }
            | Request::SlowFillOn { stream, .. }
            | Request::CopyDevice { stream, .. } => {
                Some(stream.0).filter(|s| !is_driver_stream(*s) && !self.streams.contains_key(s))
            }
            _ => None,
        }
    }

    /// A context was destroyed: so was everything created in it.
    fn forget_context(&mut self, ctx: u64) {
        self.contexts.retain(|&(c, _)| c != ctx);
        self.allocations.retain(|_, (c, _)| *c != ctx);
        self.ipc_opened.retain(|_, (c, _)| *c != ctx);
        self.events.retain(|_, c| *c != ctx);
        self.streams.retain(|_, c| *c != ctx);
        self.pools.retain(|_, c| *c != ctx);
        self.imported_ptrs.retain(|_, c| *c != ctx);
        self.imported_pools.retain(|_, c| *c != ctx);
    }
}

/// Whether `stream` is a handle the driver defines rather than one a
/// stream creation returned: the legacy default stream
/// ([`StreamId::LEGACY_DEFAULT`], `0`) or the calling thread's per-thread
/// default stream ([`StreamId::PER_THREAD`], `cudaStreamPerThread` /
/// `CU_STREAM_PER_THREAD`, `0x2`). Both are valid in every context, so the
/// worker passes them to the driver unchecked (one thread serves every
/// request, so `0x2` is always the same stream of a context).
fn is_driver_stream(stream: u64) -> bool {
    stream == StreamId::LEGACY_DEFAULT.0 || stream == StreamId::PER_THREAD.0
}

/// What a request may change in [`Owned`], noted before it runs.
enum Track {
    Nothing,
    Alloc(FreeKind),
    Free(u64),
    IpcOpen,
    IpcClose(u64),
    CreateContext(u32),
    DestroyContext(u64),
    VmmMap(u64, u64),
    VmmUnmap(u64),
    VmmReserve(u64),
    VmmAddressFree(u64),
    VmmRelease(u64),
    FdClose(i32),
    EventMade,
    StreamMade,
    StreamDestroy(u64),
    EventDestroy(u64),
    PoolMade,
    PoolImported,
    ImportedPtr,
    PoolDestroy(u64),
}

/// The free that releases an allocation of `kind`.
fn free_kind(kind: MemKind) -> FreeKind {
    match kind {
        MemKind::Device | MemKind::Managed => FreeKind::Device,
        MemKind::PinnedHost => FreeKind::Host,
        MemKind::StreamOrdered => FreeKind::StreamOrdered,
    }
}

/// Pops this thread's context stack until it is empty (at most a bound of
/// pops, should a driver answer success forever).
fn pop_every_context() {
    for _ in 0..1024 {
        let mut ctx: Handle = null_mut();
        // SAFETY: valid out-pointer; popping an empty stack is an error.
        if unsafe { ffi::cuCtxPopCurrent_v2(&mut ctx) }.is_err() || ctx.is_null() {
            break;
        }
    }
}

/// The current context as a `u64` (0 when none is current or it cannot be read).
fn current_context() -> u64 {
    let mut ctx: Handle = null_mut();
    // SAFETY: valid out-pointer.
    match unsafe { ffi::cuCtxGetCurrent(&mut ctx) } {
        Ok(()) => ctx as u64,
        Err(_) => 0,
    }
}

impl Worker {
    /// [`Worker::handle`], with panics turned into Harness errors.
    pub(crate) fn handle_guarded(&mut self, request: Request) -> Response {
        let name = request.name();
        match catch_unwind(AssertUnwindSafe(|| self.handle(request))) {
            Ok(response) => response,
            Err(panic) => Err(harness(format!(
                "the worker panicked during {name}: {}",
                panic_message(panic.as_ref())
            ))),
        }
    }

    fn handle(&mut self, request: Request) -> Response {
        match request {
            Request::Probe => Ok(Reply::Probe(probe())),
            Request::Init { dialect, device } => self.init(dialect, device).map(|()| Reply::Unit),
            Request::Exit => Ok(Reply::Unit),
            // No CUDA call: answered with or without a context.
            Request::PidfdGetfd { pid, fd } => self.take_descriptor(pid, fd.0),
            Request::ReleaseImported => match self.dialect {
                Some(dialect) => self.release_imports(dialect).map(|()| Reply::Unit),
                None => Err(harness(
                    "the worker got release_imported before a successful init",
                )),
            },
            Request::Reset => match self.dialect {
                Some(dialect) => self.reset(dialect).map(|()| Reply::Clean {
                    spare_contexts: self.spare_contexts.values().map(Vec::len).sum::<usize>()
                        as u32,
                }),
                None => Err(harness("the worker got reset before a successful init")),
            },
            request => match self.dialect {
                Some(dialect) => self.call_tracked(dialect, request),
                None => Err(harness(format!(
                    "the worker got {} before a successful init",
                    request.name()
                ))),
            },
        }
    }

    fn init(&mut self, dialect: Dialect, device: u32) -> CallResult {
        if self.dialect.is_some() {
            return Err(harness("init sent twice"));
        }
        let dialect = match dialect {
            Dialect::Runtime => Api::Runtime,
            Dialect::Driver => Api::Driver,
            Dialect::Hip => return Err(harness("a CUDA worker cannot speak the HIP dialect")),
        };
        require(Lib::Driver)?;
        if dialect == Api::Runtime {
            require(Lib::Runtime)?;
        }
        // SAFETY: plain call; the driver API is used in both dialects.
        unsafe { ffi::cuInit(0)? };
        match dialect {
            // SAFETY: plain call.
            Api::Runtime => unsafe { ffi::cudaSetDevice(device as c_int)? },
            Api::Driver => driver_set_device(device)?,
        }
        self.dialect = Some(dialect);
        self.init_device = device;
        self.init_context = current_context();
        Ok(())
    }

    /// [`Worker::call`], recording in [`Owned`] what a successful call
    /// created or released.
    fn call_tracked(&mut self, d: Api, request: Request) -> Response {
        if matches!(request, Request::EnablePeerAccess { .. }) {
            self.owned.peer_access = true;
        }
        // Unless `interprocess-events` of ShareAlso is on (the default,
        // confirmed by `run --check-sharing`; IPC_CONFORMANCE_SHARE_ALSO
        // can leave it out): then the reset's destroying the events is
        // enough.
        if (matches!(request, Request::IpcOpenEventHandle { .. })
            || matches!(request, Request::EventCreate { flags } if flags & crate::driver::event_flags::INTERPROCESS != 0))
            && !crate::sharing::ShareAlso::from_env().interprocess_events
        {
            self.owned.interprocess_events = true;
        }
        if matches!(request, Request::PoolDefault { .. }) {
            self.owned.mempools = true;
        }
        let track = match &request {
            Request::Alloc { kind, .. } => Track::Alloc(free_kind(*kind)),
            Request::Free { ptr, .. } => Track::Free(ptr.0),
            Request::IpcOpenMemHandle {
                out: OutArg::Valid, ..
            } => Track::IpcOpen,
            Request::IpcCloseMemHandle { ptr } => Track::IpcClose(ptr.0),
            Request::CreateContext { device } => Track::CreateContext(*device),
            Request::DestroyContext { ctx } => Track::DestroyContext(ctx.0),
            Request::VmmMap { va, size, .. } => Track::VmmMap(va.0, *size),
            Request::VmmUnmap { va, .. } => Track::VmmUnmap(va.0),
            Request::VmmReserve { size } => Track::VmmReserve(*size),
            Request::VmmAddressFree { va, .. } => Track::VmmAddressFree(va.0),
            Request::VmmRelease { handle } => Track::VmmRelease(handle.0),
            Request::FdClose { fd } => Track::FdClose(fd.0),
            Request::EventCreate { .. }
            | Request::IpcOpenEventHandle {
                out: OutArg::Valid, ..
            } => Track::EventMade,
            Request::EventDestroy { event } => Track::EventDestroy(event.0),
            Request::StreamCreate { .. } => Track::StreamMade,
            Request::StreamDestroy { stream } => Track::StreamDestroy(stream.0),
            // Pool allocations and imported pointers are released by a
            // stream-ordered free (cuMemFreeAsync), pools by cuMemPoolDestroy.
            Request::PoolAlloc { .. } => Track::Alloc(FreeKind::StreamOrdered),
            Request::PoolImportPtr { .. } => Track::ImportedPtr,
            Request::PoolFree { ptr } => Track::Free(ptr.0),
            Request::PoolCreate { .. } => Track::PoolMade,
            Request::PoolImport { .. } => Track::PoolImported,
            Request::PoolDestroy { pool } => Track::PoolDestroy(pool.0),
            _ => Track::Nothing,
        };
        // Likewise a stream.
        if let Some(s) = self.owned.unknown_stream(&request) {
            return Err(harness(format!(
                "stream {s:#x} is not a live stream of this worker"
            )));
        }
        // An event id this worker did not hand out (or already destroyed)
        // would be a dangling pointer for the API: refuse it here. The NULL
        // event is passed as the real NULL it is (event.null.*).
        let dangling = |e: &u64| *e != EventId::NULL.0 && !self.owned.events.contains_key(e);
        let unknown = match &request {
            Request::EventRecord { event }
            | Request::EventQuery { event }
            | Request::EventSynchronize { event }
            | Request::StreamWaitEvent { event }
            | Request::EventDestroy { event }
            | Request::EventRecordOn { event, .. }
            | Request::StreamWaitEventOn { event, .. }
            | Request::IpcGetEventHandle { event, .. } => Some(event.0).filter(dangling),
            Request::EventElapsed { start, end } => [start.0, end.0].into_iter().find(dangling),
            _ => None,
        };
        if let Some(e) = unknown {
            return Err(harness(format!(
                "event {e:#x} is not a live event of this worker"
            )));
        }
        let response = self.call(d, request);
        let Ok(reply) = &response else {
            return response;
        };
        let owned = &mut self.owned;
        match (track, reply) {
            (Track::Alloc(kind), Reply::Ptr(p)) if *p != 0 => {
                owned.allocations.insert(*p, (current_context(), kind));
            }
            (Track::Free(ptr), _) => {
                owned.allocations.remove(&ptr);
                owned.imported_ptrs.remove(&ptr);
            }
            (Track::ImportedPtr, Reply::Ptr(p)) if *p != 0 => {
                owned.imported_ptrs.insert(*p, current_context());
            }
            (Track::PoolImported, Reply::Pool(p)) if *p != 0 => {
                owned.imported_pools.insert(*p, current_context());
            }
            (Track::IpcOpen, Reply::Ptr(p)) if *p != 0 => {
                let ctx = current_context();
                let entry = owned.ipc_opened.entry(*p).or_insert((ctx, 0));
                entry.1 += 1;
            }
            (Track::IpcClose(ptr), _) => {
                if let Some(entry) = owned.ipc_opened.get_mut(&ptr) {
                    entry.1 -= 1;
                    if entry.1 == 0 {
                        owned.ipc_opened.remove(&ptr);
                    }
                }
            }
            (Track::CreateContext(device), Reply::Context(c)) if *c != 0 => {
                owned.contexts.push((*c, device))
            }
            (Track::DestroyContext(ctx), _) => owned.forget_context(ctx),
            (_, Reply::VmmHandle(h)) => {
                owned.vmm_handles.insert(*h);
            }
            (_, Reply::Fd(fd)) => {
                owned.fds.insert(*fd);
            }
            (Track::VmmMap(va, size), _) => {
                owned.vmm_maps.insert(va, size);
            }
            (Track::VmmUnmap(va), _) => {
                owned.vmm_maps.remove(&va);
            }
            (Track::VmmReserve(size), Reply::Ptr(va)) => {
                owned.vmm_reservations.insert(*va, size);
            }
            (Track::VmmAddressFree(va), _) => {
                owned.vmm_reservations.remove(&va);
            }
            (Track::VmmRelease(h), _) => {
                owned.vmm_handles.remove(&h);
            }
            (Track::FdClose(fd), _) => {
                owned.fds.remove(&fd);
            }
            (Track::EventMade, Reply::Event(e)) if *e != 0 => {
                owned.events.insert(*e, current_context());
            }
            (Track::EventDestroy(e), _) => {
                owned.events.remove(&e);
            }
            (Track::StreamMade, Reply::Stream(st)) if *st != 0 => {
                owned.streams.insert(*st, current_context());
            }
            (Track::StreamDestroy(st), _) => {
                owned.streams.remove(&st);
            }
            (Track::PoolMade, Reply::Pool(p)) if *p != 0 => {
                owned.pools.insert(*p, current_context());
            }
            (Track::PoolDestroy(p), _) => {
                owned.pools.remove(&p);
                owned.imported_pools.remove(&p);
            }
            _ => {}
        }
        response
    }

    /// `ReleaseImported`, the first step of a reset: destroys the streams
    /// and events, closes every IPC mapping as many times as it was opened,
    /// frees every pointer imported from another process's pool and
    /// destroys the imported pools, each with the context it was made in
    /// current. The machine sends it to every worker and waits for all of
    /// them before any `Reset`, so no process frees memory that another
    /// still maps or imports: the documents make an exporter's early free
    /// undefined (mem.lifetime.free-while-mapped-is-undefined,
    /// pool.lifetime.exporter-frees-first), and a reset must not do what
    /// a clause may not.
    fn release_imports(&mut self, d: Api) -> CallResult {
        let mut failures = Vec::new();
        self.release_imports_noting(d, &mut failures);
        if failures.is_empty() {
            Ok(())
        } else {
            Err(harness(format!(
                "releasing imports failed: {}",
                failures.join("; ")
            )))
        }
    }

    fn release_imports_noting(&mut self, d: Api, failures: &mut Vec<String>) {
        let mut note = |what: String, r: CallResult| note_failure(failures, what, r);

        // Streams first: destroying one with work queued returns at once and
        // the work completes (stream.destroy-with-pending-work-completes).
        // SAFETY (each closure below): an object this worker created (or
        // opened, imported) and did not destroy.
        destroy_each(
            &mut self.owned.streams,
            "stream",
            &mut note,
            &|stream| unsafe {
                match d {
                    Api::Runtime => ffi::cudaStreamDestroy(as_ptr(stream)),
                    Api::Driver => ffi::cuStreamDestroy_v2(as_ptr(stream)),
                }
            },
        );
        destroy_each(
            &mut self.owned.events,
            "event",
            &mut note,
            &|event| unsafe { event_destroy(d, event) },
        );

        let mut opened: Vec<(u64, (u64, u32))> = self.owned.ipc_opened.drain().collect();
        opened.sort_unstable();
        for (ptr, (ctx, count)) in opened {
            if !note(format!("making context {ctx:#x} current"), set_context(ctx)) {
                self.owned.ipc_opened.insert(ptr, (ctx, count));
                continue;
            }
            let mut left = count;
            while left > 0 {
                // SAFETY: a pointer an IPC open returned and not yet closed.
                let r = unsafe {
                    match d {
                        Api::Runtime => ffi::cudaIpcCloseMemHandle(as_ptr(ptr)),
                        Api::Driver => ffi::cuIpcCloseMemHandle(ptr),
                    }
                };
                if !note(format!("closing IPC mapping {ptr:#x}"), r) {
                    break;
                }
                left -= 1;
            }
            if left > 0 {
                self.owned.ipc_opened.insert(ptr, (ctx, left));
            }
        }

        // Imported pool pointers before their imported pools.
        destroy_each(
            &mut self.owned.imported_ptrs,
            "imported pool pointer",
            &mut note,
            &|ptr| free(d, FreeKind::StreamOrdered, ptr),
        );
        destroy_each(
            &mut self.owned.imported_pools,
            "imported memory pool",
            &mut note,
            &|pool| {
                // SAFETY: a pool this worker imported and did not destroy.
                unsafe { destroy_mem_pool(d, pool) }
            },
        );
    }

    /// `Reset`: releases what `ReleaseImported` does (if that has not run
    /// already), then frees every allocation (pool allocations too) with
    /// the matching free (each with the context it was made in current),
    /// destroys the memory pools it created, releases VMM state, destroys
    /// the created contexts (newest first), makes the `Init` device's
    /// primary context current again (`cudaSetDevice`, or
    /// `cuCtxSetCurrent` of the primary context `Init` retained) and
    /// synchronizes. Succeeds only when every one of those calls did and
    /// nothing is left; what was released is forgotten either way.
    fn reset(&mut self, d: Api) -> CallResult {
        let mut failures: Vec<String> = Vec::new();
        self.release_imports_noting(d, &mut failures);
        let mut note = |what: String, r: CallResult| note_failure(&mut failures, what, r);

        let mut allocations: Vec<(u64, (u64, FreeKind))> = self.owned.allocations.drain().collect();
        allocations.sort_unstable_by_key(|&(ptr, _)| ptr);
        for (ptr, (ctx, kind)) in allocations {
            let ok = note(format!("making context {ctx:#x} current"), set_context(ctx))
                && note(format!("freeing {ptr:#x} ({kind:?})"), free(d, kind, ptr));
            if !ok {
                self.owned.allocations.insert(ptr, (ctx, kind));
            }
        }

        // Pools after their allocations (freed above).
        destroy_each(&mut self.owned.pools, "memory pool", &mut note, &|pool| {
            // SAFETY: a pool this worker created and did not destroy.
            unsafe { destroy_mem_pool(d, pool) }
        });

        // VMM: unmap, free the reservations, release the handles, close the
        // descriptors (the order the API requires).
        for (va, size) in std::mem::take(&mut self.owned.vmm_maps) {
            // SAFETY: a range a VmmMap request mapped.
            let r = unsafe { ffi::cuMemUnmap(va, size as usize) };
            note(format!("unmapping {va:#x}"), r);
        }
        for (va, size) in std::mem::take(&mut self.owned.vmm_reservations) {
            // SAFETY: a range a VmmReserve request reserved.
            let r = unsafe { ffi::cuMemAddressFree(va, size as usize) };
            note(format!("freeing reservation {va:#x}"), r);
        }
        for h in std::mem::take(&mut self.owned.vmm_handles) {
            // SAFETY: a handle a request created or imported and nothing released.
            let r = unsafe { ffi::cuMemRelease(h) };
            note(format!("releasing VMM handle {h:#x}"), r);
        }
        for fd in std::mem::take(&mut self.owned.fds) {
            // SAFETY: a descriptor this worker holds.
            let r = unsafe { nix::libc::close(fd) };
            note(
                format!("closing descriptor {fd}"),
                if r == 0 {
                    Ok(())
                } else {
                    Err(harness("close failed"))
                },
            );
        }

        // Created contexts, newest first, each emptied above: a healthy one
        // is kept (up to max_spare_contexts() per device) for the next
        // machine's CreateContext, which costs hundreds of milliseconds on
        // some GPUs; the rest are destroyed.
        let contexts = std::mem::take(&mut self.owned.contexts);
        for (ctx, device) in contexts.into_iter().rev() {
            let spares = self.spare_contexts.entry(device).or_default();
            // SAFETY: a context CreateContext made and nothing destroyed since.
            let healthy = spares.len() < max_spare_contexts()
                && set_context(ctx).is_ok()
                && unsafe { ffi::cuCtxSynchronize() }.is_ok();
            if healthy {
                spares.push(ctx);
                continue;
            }
            // SAFETY: as above.
            let r = unsafe { ffi::cuCtxDestroy_v2(as_ptr(ctx)) };
            if note(format!("destroying context {ctx:#x}"), r) {
                self.kernels.remove(&(ctx as usize));
                self.slow_kernels.remove(&(ctx as usize));
                self.pattern_kernels.remove(&(ctx as usize));
            } else {
                self.owned.contexts.push((ctx, device));
            }
        }

        // CreateContext pushed onto this thread's context stack and
        // SetCurrentContext replaced its top: empty it, so that the Init
        // context below is the only one on it, as in a fresh worker.
        pop_every_context();

        let device = self.init_device;
        let current = match d {
            // SAFETY: plain call.
            Api::Runtime => unsafe { ffi::cudaSetDevice(device as c_int) },
            // The primary context Init retained (retaining it again would
            // grow its count with every reset).
            Api::Driver if self.init_context != 0 => set_context(self.init_context),
            Api::Driver => driver_set_device(device),
        };
        if note(format!("making device {device} current"), current) {
            // SAFETY: plain calls.
            let sync = unsafe {
                match d {
                    Api::Runtime => ffi::cudaDeviceSynchronize(),
                    Api::Driver => ffi::cuCtxSynchronize(),
                }
            };
            note("synchronizing".into(), sync);
        }
        if failures.is_empty() && self.owned.is_empty() {
            Ok(())
        } else {
            if failures.is_empty() {
                failures.push(format!("still held: {:?}", self.owned));
            }
            Err(harness(format!(
                "reset incomplete: {}",
                failures.join("; ")
            )))
        }
    }

    /// `CreateContext`: `cuCtxCreate_v4` of `device`, or, on a reused
    /// worker, a context an earlier machine created on it and `Reset`
    /// emptied, pushed on the thread's context stack as `cuCtxCreate` pushes
    /// a new one. Only a scenario that compares values (a context's handle,
    /// the VA of its allocations) could tell them apart, and such a scenario
    /// gets fresh workers (`scenario::sharing`).
    fn create_context(&mut self, device: u32) -> Response {
        if let Some(ctx) = self.spare_contexts.get_mut(&device).and_then(Vec::pop) {
            // SAFETY: a live context this worker created and no stack holds.
            match unsafe { ffi::cuCtxPushCurrent_v2(as_ptr(ctx)) } {
                Ok(()) => return Ok(Reply::Context(ctx)),
                // SAFETY: as above; it is not used again.
                Err(_) => unsafe {
                    let _ = ffi::cuCtxDestroy_v2(as_ptr(ctx));
                },
            }
        }
        let dev = cu_device(device)?;
        let mut ctx: Handle = null_mut();
        // SAFETY: valid out-pointer; the device was validated by cuDeviceGet.
        unsafe { ffi::cuCtxCreate_v4(&mut ctx, null_mut(), 0, dev)? };
        Ok(Reply::Context(ctx as u64))
    }

    fn call(&mut self, d: Api, request: Request) -> Response {
        use Api::{Driver, Runtime};
        // SAFETY (whole match): every pointer handed to the API is either a
        // valid local out-pointer or buffer of the stated size, NULL where the
        // scenario asks for it (`OutArg::Null`), or a device address the
        // scenario chose, which the API validates (or faults on: that is the
        // behaviour under test, and a crash is reported as such).
        unsafe {
            match request {
                Request::DeviceCount => {
                    let mut n: c_int = 0;
                    match d {
                        Runtime => ffi::cudaGetDeviceCount(&mut n)?,
                        Driver => ffi::cuDeviceGetCount(&mut n)?,
                    }
                    Ok(Reply::Count(n.max(0) as u32))
                }
                Request::DeviceAttribute { device, attr } => {
                    let (number, in_runtime) = attribute_number(attr);
                    let mut v: c_int = 0;
                    if d == Runtime && in_runtime {
                        ffi::cudaDeviceGetAttribute(&mut v, number, device as c_int)?;
                    } else {
                        let dev = cu_device(device)?;
                        ffi::cuDeviceGetAttribute(&mut v, number, dev)?;
                    }
                    Ok(Reply::Int(v as i64))
                }
                Request::CanAccessPeer { device, peer } => {
                    let mut can: c_int = 0;
                    match d {
                        Runtime => {
                            ffi::cudaDeviceCanAccessPeer(&mut can, device as c_int, peer as c_int)?
                        }
                        Driver => {
                            let (dev, peer) = (cu_device(device)?, cu_device(peer)?);
                            ffi::cuDeviceCanAccessPeer(&mut can, dev, peer)?
                        }
                    }
                    Ok(Reply::Int(can as i64))
                }
                Request::EnablePeerAccess { peer } => {
                    match d {
                        Runtime => ffi::cudaDeviceEnablePeerAccess(peer as c_int, 0)?,
                        Driver => {
                            // The peer's primary context, retained and never
                            // released (like the one `Init` makes current).
                            let dev = cu_device(peer)?;
                            let mut ctx: Handle = null_mut();
                            ffi::cuDevicePrimaryCtxRetain(&mut ctx, dev)?;
                            ffi::cuCtxEnablePeerAccess(ctx, 0)?
                        }
                    }
                    Ok(Reply::Unit)
                }
                Request::SetDevice { device } => {
                    match d {
                        Runtime => ffi::cudaSetDevice(device as c_int)?,
                        Driver => driver_set_device(device)?,
                    }
                    Ok(Reply::Unit)
                }
                Request::PrimaryContext { device } => {
                    let dev = cu_device(device)?;
                    let mut ctx: Handle = null_mut();
                    ffi::cuDevicePrimaryCtxRetain(&mut ctx, dev)?;
                    Ok(Reply::Context(ctx as u64))
                }
                Request::CreateContext { device } => self.create_context(device),
                Request::SetCurrentContext {
                    ctx: ContextId(ctx),
                } => {
                    ffi::cuCtxSetCurrent(as_ptr(ctx))?;
                    Ok(Reply::Unit)
                }
                Request::CurrentContext => {
                    let mut ctx: Handle = null_mut();
                    ffi::cuCtxGetCurrent(&mut ctx)?;
                    Ok(Reply::CurrentContext(
                        (!ctx.is_null()).then_some(ctx as u64),
                    ))
                }
                Request::DestroyContext {
                    ctx: ContextId(ctx),
                } => {
                    ffi::cuCtxDestroy_v2(as_ptr(ctx))?;
                    // Its module went with it; a later context may reuse the address.
                    self.kernels.remove(&(ctx as usize));
                    self.slow_kernels.remove(&(ctx as usize));
                    self.pattern_kernels.remove(&(ctx as usize));
                    Ok(Reply::Unit)
                }
                Request::Alloc { kind, size } => alloc(d, kind, size).map(Reply::Ptr),
                Request::Free {
                    kind,
                    ptr: DevicePtr(ptr),
                } => free(d, kind, ptr).map(|()| Reply::Unit),
                Request::Memset {
                    ptr: DevicePtr(ptr),
                    value,
                    len,
                } => {
                    match d {
                        Runtime => ffi::cudaMemset(as_ptr(ptr), value as c_int, len as usize)?,
                        Driver => ffi::cuMemsetD8_v2(ptr, value, len as usize)?,
                    }
                    Ok(Reply::Unit)
                }
                Request::Write {
                    ptr: DevicePtr(ptr),
                    bytes,
                } => {
                    if bytes.len() as u64 > MAX_TRANSFER {
                        return Err(harness(format!(
                            "a write of {} bytes exceeds the worker's limit of {MAX_TRANSFER} bytes",
                            bytes.len()
                        )));
                    }
                    let src = bytes.as_ptr() as *const c_void;
                    match d {
                        Runtime => ffi::cudaMemcpy(
                            as_ptr(ptr),
                            src,
                            bytes.len(),
                            ffi::MEMCPY_HOST_TO_DEVICE,
                        )?,
                        Driver => ffi::cuMemcpyHtoD_v2(ptr, src, bytes.len())?,
                    }
                    Ok(Reply::Unit)
                }
                Request::Read {
                    ptr: DevicePtr(ptr),
                    len,
                } => {
                    let mut buf = host_buffer(len)?;
                    let dst = buf.as_mut_ptr() as *mut c_void;
                    match d {
                        Runtime => ffi::cudaMemcpy(
                            dst,
                            as_ptr(ptr) as *const c_void,
                            buf.len(),
                            ffi::MEMCPY_DEVICE_TO_HOST,
                        )?,
                        Driver => ffi::cuMemcpyDtoH_v2(dst, ptr, buf.len())?,
                    }
                    Ok(Reply::Bytes(buf))
                }
                Request::DeviceRead {
                    ptr: DevicePtr(ptr),
                    len,
                } => self.device_read(ptr, len).map(Reply::Bytes),
                Request::AddressRange {
                    ptr: DevicePtr(ptr),
                } => {
                    let (mut base, mut size): (DevPtr, usize) = (0, 0);
                    ffi::cuMemGetAddressRange_v2(&mut base, &mut size, ptr)?;
                    Ok(Reply::Range {
                        base,
                        size: size as u64,
                    })
                }
                Request::PointerInfo {
                    ptr: DevicePtr(ptr),
                } => match d {
                    Runtime => runtime_pointer_info(ptr),
                    Driver => driver_pointer_info(ptr),
                }
                .map(Reply::PointerInfo),
                Request::IpcGetMemHandle {
                    ptr: DevicePtr(ptr),
                    out,
                } => {
                    let mut h = RawIpcHandle {
                        reserved: [0; IPC_HANDLE_SIZE],
                    };
                    let out_ptr: *mut RawIpcHandle = match out {
                        OutArg::Valid => &mut h,
                        OutArg::Null => null_mut(),
                    };
                    match d {
                        Runtime => ffi::cudaIpcGetMemHandle(out_ptr, as_ptr(ptr))?,
                        Driver => ffi::cuIpcGetMemHandle(out_ptr, ptr)?,
                    }
                    Ok(Reply::Handle(IpcMemHandle(h.reserved.map(|c| c as u8))))
                }
                Request::IpcOpenMemHandle { handle, flags, out } => {
                    let h = RawIpcHandle {
                        reserved: handle.0.map(|b| b as c_char),
                    };
                    match d {
                        Runtime => {
                            let mut p: *mut c_void = null_mut();
                            let out_ptr: *mut *mut c_void = match out {
                                OutArg::Valid => &mut p,
                                OutArg::Null => null_mut(),
                            };
                            ffi::cudaIpcOpenMemHandle(out_ptr, h, flags)?;
                            Ok(Reply::Ptr(p as u64))
                        }
                        Driver => {
                            let mut p: DevPtr = 0;
                            let out_ptr: *mut DevPtr = match out {
                                OutArg::Valid => &mut p,
                                OutArg::Null => null_mut(),
                            };
                            ffi::cuIpcOpenMemHandle_v2(out_ptr, h, flags)?;
                            Ok(Reply::Ptr(p))
                        }
                    }
                }
                Request::IpcCloseMemHandle {
                    ptr: DevicePtr(ptr),
                } => {
                    match d {
                        Runtime => ffi::cudaIpcCloseMemHandle(as_ptr(ptr))?,
                        Driver => ffi::cuIpcCloseMemHandle(ptr)?,
                    }
                    Ok(Reply::Unit)
                }
                Request::Synchronize => {
                    match d {
                        Runtime => ffi::cudaDeviceSynchronize()?,
                        Driver => ffi::cuCtxSynchronize()?,
                    }
                    Ok(Reply::Unit)
                }
                Request::VmmGranularity {
                    device,
                    types,
                    kind,
                } => {
                    let prop = alloc_prop(device, types);
                    let option = match kind {
                        GranularityKind::Minimum => ffi::vmm::GRANULARITY_MINIMUM,
                        GranularityKind::Recommended => ffi::vmm::GRANULARITY_RECOMMENDED,
                    };
                    let mut g: usize = 0;
                    ffi::cuMemGetAllocationGranularity(&mut g, &prop, option)?;
                    Ok(Reply::Int(g as i64))
                }
                Request::VmmCreate {
                    device,
                    size,
                    types,
                } => {
                    let prop = alloc_prop(device, types);
                    let mut h: u64 = 0;
                    ffi::cuMemCreate(&mut h, size as usize, &prop, 0)?;
                    Ok(Reply::VmmHandle(h))
                }
                Request::VmmExport {
                    handle: VmmHandle(handle),
                    ty,
                } => match ty {
                    ShareableHandleType::PosixFd => {
                        let mut fd: c_int = -1;
                        ffi::cuMemExportToShareableHandle(
                            (&mut fd as *mut c_int).cast(),
                            handle,
                            ffi::vmm::HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                            0,
                        )?;
                        Ok(Reply::Fd(fd))
                    }
                    ShareableHandleType::Fabric => {
                        let mut bytes = [0u8; 64];
                        ffi::cuMemExportToShareableHandle(
                            bytes.as_mut_ptr().cast(),
                            handle,
                            ffi::vmm::HANDLE_TYPE_FABRIC,
                            0,
                        )?;
                        Err(harness(
                            "a fabric export succeeded; fabric handles are not carried by the harness",
                        ))
                    }
                },
                Request::VmmImport { fd: Fd(fd) } => {
                    let mut h: u64 = 0;
                    // The descriptor travels in the pointer-sized argument.
                    ffi::cuMemImportFromShareableHandle(
                        &mut h,
                        fd as isize as usize as *mut c_void,
                        ffi::vmm::HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    )?;
                    Ok(Reply::VmmHandle(h))
                }
                Request::VmmReserve { size } => {
                    let mut va: DevPtr = 0;
                    ffi::cuMemAddressReserve(&mut va, size as usize, 0, 0, 0)?;
                    Ok(Reply::Ptr(va))
                }
                Request::VmmMap {
                    va: DevicePtr(va),
                    size,
                    offset,
                    handle: VmmHandle(handle),
                } => {
                    ffi::cuMemMap(va, size as usize, offset as usize, handle, 0)?;
                    Ok(Reply::Unit)
                }
                Request::VmmSetAccess {
                    va: DevicePtr(va),
                    size,
                    device,
                    access,
                } => {
                    let desc = ffi::MemAccessDesc {
                        location_type: ffi::vmm::LOCATION_TYPE_DEVICE,
                        location_id: device as c_int,
                        flags: match access {
                            VmmAccess::None => ffi::vmm::ACCESS_NONE,
                            VmmAccess::Read => ffi::vmm::ACCESS_READ,
                            VmmAccess::ReadWrite => ffi::vmm::ACCESS_READWRITE,
                        },
                    };
                    ffi::cuMemSetAccess(va, size as usize, &desc, 1)?;
                    Ok(Reply::Unit)
                }
                Request::VmmUnmap {
                    va: DevicePtr(va),
                    size,
                } => {
                    ffi::cuMemUnmap(va, size as usize)?;
                    Ok(Reply::Unit)
                }
                Request::VmmAddressFree {
                    va: DevicePtr(va),
                    size,
                } => {
                    ffi::cuMemAddressFree(va, size as usize)?;
                    Ok(Reply::Unit)
                }
                Request::VmmRelease {
                    handle: VmmHandle(handle),
                } => {
                    ffi::cuMemRelease(handle)?;
                    Ok(Reply::Unit)
                }
                Request::FdClose { fd: Fd(fd) } => {
                    // Only descriptors this worker holds: never its socket.
                    if !self.owned.fds.contains(&fd) {
                        return Err(WireError::Api(1));
                    }
                    if nix::libc::close(fd) == 0 {
                        Ok(Reply::Unit)
                    } else {
                        Err(WireError::Api(1))
                    }
                }
                Request::FdOpenNullDevice => {
                    let f = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open("/dev/null")
                        .map_err(|e| harness(format!("cannot open /dev/null: {e}")))?;
                    Ok(Reply::Fd(OwnedFd::from(f).into_raw_fd()))
                }
                Request::SendFd { .. } | Request::ReceiveFd | Request::PidfdGetfd { .. } => {
                    Err(harness("descriptor passing is handled by the serve loop"))
                }
                Request::EventCreate { flags } => {
                    let mut e: Handle = null_mut();
                    match d {
                        Runtime => ffi::cudaEventCreateWithFlags(&mut e, flags)?,
                        Driver => ffi::cuEventCreate(&mut e, flags)?,
                    }
                    Ok(Reply::Event(e as u64))
                }
                Request::EventRecord {
                    event: EventId(event),
                } => {
                    match d {
                        Runtime => ffi::cudaEventRecord(as_ptr(event), null_mut())?,
                        Driver => ffi::cuEventRecord(as_ptr(event), null_mut())?,
                    }
                    Ok(Reply::Unit)
                }
                Request::EventQuery {
                    event: EventId(event),
                } => {
                    match d {
                        Runtime => ffi::cudaEventQuery(as_ptr(event))?,
                        Driver => ffi::cuEventQuery(as_ptr(event))?,
                    }
                    Ok(Reply::Unit)
                }
                Request::EventSynchronize {
                    event: EventId(event),
                } => {
                    match d {
                        Runtime => ffi::cudaEventSynchronize(as_ptr(event))?,
                        Driver => ffi::cuEventSynchronize(as_ptr(event))?,
                    }
                    Ok(Reply::Unit)
                }
                Request::StreamWaitEvent {
                    event: EventId(event),
                } => {
                    match d {
                        Runtime => ffi::cudaStreamWaitEvent(null_mut(), as_ptr(event), 0)?,
                        Driver => ffi::cuStreamWaitEvent(null_mut(), as_ptr(event), 0)?,
                    }
                    Ok(Reply::Unit)
                }
                Request::EventElapsed {
                    start: EventId(start),
                    end: EventId(end),
                } => {
                    let mut ms: f32 = 0.0;
                    match d {
                        Runtime => ffi::cudaEventElapsedTime(&mut ms, as_ptr(start), as_ptr(end))?,
                        Driver => ffi::cuEventElapsedTime_v2(&mut ms, as_ptr(start), as_ptr(end))?,
                    }
                    Ok(Reply::ElapsedMs(ms.to_bits()))
                }
                Request::EventDestroy {
                    event: EventId(event),
                } => {
                    event_destroy(d, event)?;
                    Ok(Reply::Unit)
                }
                Request::IpcGetEventHandle {
                    event: EventId(event),
                    out,
                } => {
                    let mut h = RawIpcHandle {
                        reserved: [0; IPC_HANDLE_SIZE],
                    };
                    let out_ptr: *mut RawIpcHandle = match out {
                        OutArg::Valid => &mut h,
                        OutArg::Null => null_mut(),
                    };
                    match d {
                        Runtime => ffi::cudaIpcGetEventHandle(out_ptr, as_ptr(event))?,
                        Driver => ffi::cuIpcGetEventHandle(out_ptr, as_ptr(event))?,
                    }
                    Ok(Reply::EventHandle(IpcEventHandle(
                        h.reserved.map(|b| b as u8),
                    )))
                }
                Request::IpcOpenEventHandle { handle, out } => {
                    let h = RawIpcHandle {
                        reserved: handle.0.map(|b| b as c_char),
                    };
                    let mut e: Handle = null_mut();
                    // `out=null` passes a real NULL phEvent (event.open.null-out).
                    let out_ptr: *mut Handle = match out {
                        OutArg::Valid => &mut e,
                        OutArg::Null => null_mut(),
                    };
                    match d {
                        Runtime => ffi::cudaIpcOpenEventHandle(out_ptr, h)?,
                        Driver => ffi::cuIpcOpenEventHandle(out_ptr, h)?,
                    }
                    Ok(Reply::Event(e as u64))
                }
                Request::ForkChildAlloc { size } => {
                    fork_child::fork_child_call(|| alloc(d, MemKind::Device, size))
                        .map(|()| Reply::Unit)
                }
                // Both dialects ask the driver API; the answer is widened
                // from its C type into a zeroed u64.
                Request::PointerAttribute {
                    ptr: DevicePtr(ptr),
                    attr,
                } => {
                    cu_pointer_attribute(attr.number() as c_int, ptr).map(|v| Reply::Int(v as i64))
                }
                Request::SlowFill {
                    ptr: DevicePtr(ptr),
                    value,
                    len,
                    micros,
                } => self
                    .slow_fill(ptr, value, len, micros, 0)
                    .map(|()| Reply::Unit),
                Request::KernelPattern {
                    ptr: DevicePtr(ptr),
                    len,
                    pattern,
                    width,
                    step,
                } => load_kernel(
                    &mut self.pattern_kernels,
                    pattern_kernel::PATTERN_FILL_PTX,
                    pattern_kernel::PATTERN_FILL_NAME,
                )
                .and_then(|function| {
                    pattern_kernel::launch(function, ptr, len, pattern, width, step)
                })
                .map(|()| Reply::Unit),
                r @ (Request::PoolCreate { .. }
                | Request::PoolDefault { .. }
                | Request::PoolDestroy { .. }
                | Request::PoolExport { .. }
                | Request::PoolImport { .. }
                | Request::PoolSetAccess { .. }
                | Request::PoolGetAccess { .. }
                | Request::PoolAlloc { .. }
                | Request::PoolFree { .. }
                | Request::PoolExportPtr { .. }
                | Request::PoolImportPtr { .. }) => {
                    let api = match d {
                        Runtime => mempools::PoolApi::Runtime,
                        Driver => mempools::PoolApi::Driver,
                    };
                    mempools::call(api, r)
                }
                // --- streams and copies ---
                Request::StreamCreate { flags } => {
                    let mut st: Handle = null_mut();
                    match d {
                        Runtime => ffi::cudaStreamCreateWithFlags(&mut st, flags)?,
                        Driver => ffi::cuStreamCreate(&mut st, flags)?,
                    }
                    Ok(Reply::Stream(st as u64))
                }
                Request::StreamDestroy {
                    stream: StreamId(st),
                } => {
                    match d {
                        Runtime => ffi::cudaStreamDestroy(as_ptr(st))?,
                        Driver => ffi::cuStreamDestroy_v2(as_ptr(st))?,
                    }
                    Ok(Reply::Unit)
                }
                Request::StreamSynchronize {
                    stream: StreamId(st),
                } => {
                    match d {
                        Runtime => ffi::cudaStreamSynchronize(as_ptr(st))?,
                        Driver => ffi::cuStreamSynchronize(as_ptr(st))?,
                    }
                    Ok(Reply::Unit)
                }
                Request::StreamQuery {
                    stream: StreamId(st),
                } => {
                    match d {
                        Runtime => ffi::cudaStreamQuery(as_ptr(st))?,
                        Driver => ffi::cuStreamQuery(as_ptr(st))?,
                    }
                    Ok(Reply::Unit)
                }
                Request::EventRecordOn {
                    event: EventId(event),
                    stream: StreamId(st),
                } => {
                    match d {
                        Runtime => ffi::cudaEventRecord(as_ptr(event), as_ptr(st))?,
                        Driver => ffi::cuEventRecord(as_ptr(event), as_ptr(st))?,
                    }
                    Ok(Reply::Unit)
                }
                Request::StreamWaitEventOn {
                    stream: StreamId(st),
                    event: EventId(event),
                } => {
                    match d {
                        Runtime => ffi::cudaStreamWaitEvent(as_ptr(st), as_ptr(event), 0)?,
                        Driver => ffi::cuStreamWaitEvent(as_ptr(st), as_ptr(event), 0)?,
                    }
                    Ok(Reply::Unit)
                }
                Request::SlowFillOn {
                    ptr: DevicePtr(ptr),
                    value,
                    len,
                    micros,
                    stream: StreamId(st),
                } => self
                    .slow_fill(ptr, value, len, micros, st)
                    .map(|()| Reply::Unit),
                Request::CopyDevice {
                    dst: DevicePtr(dst),
                    src: DevicePtr(src),
                    len,
                    stream: StreamId(st),
                } => {
                    let n = len as usize;
                    let (dp, sp) = (dst as *mut c_void, src as *const c_void);
                    match (d, st) {
                        (Runtime, 0) => ffi::cudaMemcpy(dp, sp, n, ffi::MEMCPY_DEVICE_TO_DEVICE)?,
                        (Runtime, _) => ffi::cudaMemcpyAsync(
                            dp,
                            sp,
                            n,
                            ffi::MEMCPY_DEVICE_TO_DEVICE,
                            as_ptr(st),
                        )?,
                        (Driver, 0) => ffi::cuMemcpyDtoD_v2(dst, src, n)?,
                        (Driver, _) => ffi::cuMemcpyDtoDAsync_v2(dst, src, n, as_ptr(st))?,
                    }
                    Ok(Reply::Unit)
                }
                Request::CopyPeer {
                    dst: DevicePtr(dst),
                    dst_device,
                    src: DevicePtr(src),
                    src_device,
                    len,
                } => {
                    let n = len as usize;
                    match d {
                        Runtime => ffi::cudaMemcpyPeer(
                            dst as *mut c_void,
                            device_arg(dst_device)?,
                            src as *const c_void,
                            device_arg(src_device)?,
                            n,
                        )?,
                        Driver => {
                            let dst_ctx = retained_primary(dst_device)?;
                            let src_ctx = retained_primary(src_device)?;
                            ffi::cuMemcpyPeer(dst, dst_ctx, src, src_ctx, n)?
                        }
                    }
                    Ok(Reply::Unit)
                }
                Request::Probe
                | Request::Init { .. }
                | Request::ReleaseImported
                | Request::Reset
                | Request::Exit => {
                    unreachable!("handled by Worker::handle")
                }
            }
        }
    }

    /// The copy kernel's `CUfunction` in the current context, loading the
    /// module the first time.
    fn copy_kernel(&mut self) -> Result<Handle, WireError> {
        load_kernel(&mut self.kernels, COPY_BYTES_PTX, COPY_BYTES_NAME)
    }

    /// `slow_fill`: launch the long-work kernel on the null stream and return
    /// without waiting, as any kernel launch does. A zero length still waits.
    fn slow_fill(&mut self, ptr: u64, value: u8, len: u64, micros: u64, stream: u64) -> CallResult {
        let function = load_kernel(&mut self.slow_kernels, SLOW_FILL_PTX, SLOW_FILL_NAME)?;
        let (mut dst, mut n, mut ns, mut v) =
            (ptr, len, micros.saturating_mul(1000), u32::from(value));
        let mut params: [*mut c_void; 4] = [
            &mut dst as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
            &mut ns as *mut u64 as *mut c_void,
            &mut v as *mut u32 as *mut c_void,
        ];
        // SAFETY: `params` points at three u64s and a u32 matching the
        // kernel's parameters, alive across the call.
        unsafe {
            ffi::cuLaunchKernel(
                function,
                1,
                1,
                1,
                SLOW_FILL_BLOCK,
                1,
                1,
                0,
                as_ptr(stream),
                params.as_mut_ptr(),
                null_mut(),
            )
        }
    }

    fn device_read(&mut self, ptr: u64, len: u64) -> Result<Vec<u8>, WireError> {
        let mut out = host_buffer(len)?;
        if len == 0 {
            return Ok(out);
        }
        let function = self.copy_kernel()?;
        let mut scratch: DevPtr = 0;
        // SAFETY: valid out-pointer.
        unsafe { ffi::cuMemAlloc_v2(&mut scratch, len as usize)? };
        let result = (|| {
            let blocks = len.div_ceil(COPY_BLOCK);
            let grid = u32::try_from(blocks).map_err(|_| {
                harness(format!("device_read of {len} bytes needs too many blocks"))
            })?;
            let (mut src, mut dst, mut n) = (ptr, scratch, len);
            let mut params: [*mut c_void; 3] = [
                &mut src as *mut u64 as *mut c_void,
                &mut dst as *mut u64 as *mut c_void,
                &mut n as *mut u64 as *mut c_void,
            ];
            // SAFETY: `params` points at three u64s matching the kernel's
            // three .u64 parameters, alive across the call; `out` holds `len` bytes.
            unsafe {
                ffi::cuLaunchKernel(
                    function,
                    grid,
                    1,
                    1,
                    COPY_BLOCK as u32,
                    1,
                    1,
                    0,
                    null_mut(),
                    params.as_mut_ptr(),
                    null_mut(),
                )?;
                ffi::cuCtxSynchronize()?;
                ffi::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, scratch, len as usize)
            }
        })();
        // After a kernel fault this fails too; the fault is what we report.
        // SAFETY: frees the scratch buffer allocated above.
        let _ = unsafe { ffi::cuMemFree_v2(scratch) };
        result.map(|()| out)
    }
}

/// A kernel's `CUfunction` in the current context, loading its module the
/// first time (cached per context in `cache`).
fn load_kernel(
    cache: &mut HashMap<usize, usize>,
    ptx: &CStr,
    name: &CStr,
) -> Result<Handle, WireError> {
    let mut ctx: Handle = null_mut();
    // SAFETY: valid out-pointer.
    unsafe { ffi::cuCtxGetCurrent(&mut ctx)? };
    if let Some(&f) = cache.get(&(ctx as usize)) {
        return Ok(f as Handle);
    }
    let mut module: Handle = null_mut();
    let mut function: Handle = null_mut();
    // SAFETY: the image is a NUL-terminated PTX string; the name is NUL-terminated.
    unsafe {
        ffi::cuModuleLoadData(&mut module, ptx.as_ptr() as *const c_void)?;
        ffi::cuModuleGetFunction(&mut function, module, name.as_ptr())?;
    }
    if !ctx.is_null() {
        cache.insert(ctx as usize, function as usize);
    }
    Ok(function)
}

/// Records a failed release of a reset (`what` and the error) in
/// `failures`; whether `r` succeeded.
fn note_failure(failures: &mut Vec<String>, what: String, r: CallResult) -> bool {
    match r {
        Ok(()) => true,
        Err(WireError::Api(code)) => {
            failures.push(format!("{what} returned {code}"));
            false
        }
        Err(WireError::Harness(m)) => {
            failures.push(format!("{what}: {m}"));
            false
        }
    }
}

/// Makes `ctx` current for a release of a reset; `0` (no context) does
/// nothing.
fn set_context(ctx: u64) -> CallResult {
    if ctx == 0 {
        return Ok(());
    }
    // SAFETY: a context this worker saw current; a destroyed one is
    // reported by the driver as an error.
    unsafe { ffi::cuCtxSetCurrent(as_ptr(ctx)) }
}

/// Destroys each object of `held` (object -> the context it was made in)
/// with that context current, in address order; keeps the ones whose
/// destruction failed.
fn destroy_each(
    held: &mut HashMap<u64, u64>,
    what: &str,
    note: &mut dyn FnMut(String, CallResult) -> bool,
    destroy: &dyn Fn(u64) -> CallResult,
) {
    let mut objects: Vec<(u64, u64)> = held.drain().collect();
    objects.sort_unstable();
    for (object, ctx) in objects {
        let ok = note(format!("making context {ctx:#x} current"), set_context(ctx))
            && note(format!("destroying {what} {object:#x}"), destroy(object));
        if !ok {
            held.insert(object, ctx);
        }
    }
}

/// `cudaMemPoolDestroy` / `cuMemPoolDestroy`.
///
/// # Safety
/// `pool` is a pool the worker created or imported and did not destroy.
unsafe fn destroy_mem_pool(d: Api, pool: u64) -> CallResult {
    // SAFETY: the caller's contract.
    unsafe {
        match d {
            Api::Runtime => ffi::cudaMemPoolDestroy(as_ptr(pool)),
            Api::Driver => ffi::cuMemPoolDestroy(as_ptr(pool)),
        }
    }
}

/// `cudaEventDestroy` / `cuEventDestroy_v2`.
///
/// # Safety
/// `event` must be a live event of this process.
unsafe fn event_destroy(d: Api, event: u64) -> CallResult {
    // SAFETY: the caller's contract.
    unsafe {
        match d {
            Api::Runtime => ffi::cudaEventDestroy(as_ptr(event)),
            Api::Driver => ffi::cuEventDestroy_v2(as_ptr(event)),
        }
    }
}

/// A device ordinal as the runtime takes it.
fn device_arg(device: u32) -> Result<c_int, WireError> {
    c_int::try_from(device).map_err(|_| harness(format!("device {device} is out of range")))
}

/// `device`'s primary context, retained and never released (like the one
/// `Init` makes current): `cuMemcpyPeer` names contexts, not devices.
fn retained_primary(device: u32) -> Result<Handle, WireError> {
    let dev = cu_device(device)?;
    let mut ctx: Handle = null_mut();
    // SAFETY: valid out-pointer.
    unsafe { ffi::cuDevicePrimaryCtxRetain(&mut ctx, dev)? };
    Ok(ctx)
}

/// Driver dialect `set_device`: retain the primary context and make it current.
fn driver_set_device(device: u32) -> CallResult {
    let dev = cu_device(device)?;
    let mut ctx: Handle = null_mut();
    // SAFETY: valid out-pointer; the context comes from the driver.
    unsafe {
        ffi::cuDevicePrimaryCtxRetain(&mut ctx, dev)?;
        ffi::cuCtxSetCurrent(ctx)
    }
}

fn alloc(d: Api, kind: MemKind, size: u64) -> Result<u64, WireError> {
    let size = size as usize;
    // SAFETY: valid out-pointers; the null stream is the legacy default stream.
    unsafe {
        match d {
            Api::Runtime => {
                let mut p: *mut c_void = null_mut();
                match kind {
                    MemKind::Device => ffi::cudaMalloc(&mut p, size)?,
                    MemKind::Managed => {
                        ffi::cudaMallocManaged(&mut p, size, ffi::MEM_ATTACH_GLOBAL)?
                    }
                    MemKind::PinnedHost => ffi::cudaMallocHost(&mut p, size)?,
                    MemKind::StreamOrdered => {
                        ffi::cudaMallocAsync(&mut p, size, null_mut())?;
                        ffi::cudaStreamSynchronize(null_mut())?;
                    }
                }
                Ok(p as u64)
            }
            Api::Driver => {
                let mut p: DevPtr = 0;
                match kind {
                    MemKind::Device => ffi::cuMemAlloc_v2(&mut p, size)?,
                    MemKind::Managed => {
                        ffi::cuMemAllocManaged(&mut p, size, ffi::MEM_ATTACH_GLOBAL)?
                    }
                    MemKind::PinnedHost => {
                        let mut h: *mut c_void = null_mut();
                        ffi::cuMemAllocHost_v2(&mut h, size)?;
                        p = h as u64;
                    }
                    MemKind::StreamOrdered => {
                        ffi::cuMemAllocAsync(&mut p, size, null_mut())?;
                        ffi::cuStreamSynchronize(null_mut())?;
                    }
                }
                Ok(p)
            }
        }
    }
}

fn free(d: Api, kind: FreeKind, ptr: u64) -> CallResult {
    // SAFETY: the API validates the pointer (or misbehaves, which is what
    // a scenario freeing a bad pointer observes).
    unsafe {
        match (d, kind) {
            (Api::Runtime, FreeKind::Device) => ffi::cudaFree(as_ptr(ptr)),
            (Api::Runtime, FreeKind::Host) => ffi::cudaFreeHost(as_ptr(ptr)),
            (Api::Runtime, FreeKind::StreamOrdered) => {
                ffi::cudaFreeAsync(as_ptr(ptr), null_mut())?;
                ffi::cudaStreamSynchronize(null_mut())
            }
            (Api::Driver, FreeKind::Device) => ffi::cuMemFree_v2(ptr),
            (Api::Driver, FreeKind::Host) => ffi::cuMemFreeHost(as_ptr(ptr)),
            (Api::Driver, FreeKind::StreamOrdered) => {
                ffi::cuMemFreeAsync(ptr, null_mut())?;
                ffi::cuStreamSynchronize(null_mut())
            }
        }
    }
}

fn runtime_pointer_info(ptr: u64) -> Result<PointerInfo, WireError> {
    // SAFETY: an all-zero cudaPointerAttributes is valid (ints and null pointers).
    let mut a: RawPointerAttributes = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer, large enough for CUDA 13's struct.
    unsafe { ffi::cudaPointerGetAttributes(&mut a, as_ptr(ptr) as *const c_void)? };
    let memory_type = match a.type_ {
        ffi::CUDA_MEMORY_TYPE_UNREGISTERED => MemoryType::Unregistered,
        ffi::CUDA_MEMORY_TYPE_HOST => MemoryType::Host,
        ffi::CUDA_MEMORY_TYPE_DEVICE => MemoryType::Device,
        ffi::CUDA_MEMORY_TYPE_MANAGED => MemoryType::Managed,
        other => {
            return Err(harness(format!(
                "cudaPointerGetAttributes returned an unknown cudaMemoryType {other}"
            )))
        }
    };
    let device = match memory_type {
        MemoryType::Device | MemoryType::Managed if a.device >= 0 => Some(a.device as u32),
        _ => None,
    };
    Ok(PointerInfo {
        memory_type,
        device,
    })
}

/// One `cuPointerGetAttribute` query into a zeroed 8-byte buffer (the
/// attributes used here are 4-byte ints/enums or a bool, or 8-byte ids,
/// sizes and addresses).
fn cu_pointer_attribute(attribute: c_int, ptr: u64) -> Result<u64, WireError> {
    let mut v: u64 = 0;
    // SAFETY: 8 writable bytes, more than any attribute queried here needs.
    unsafe { ffi::cuPointerGetAttribute(&mut v as *mut u64 as *mut c_void, attribute, ptr)? };
    Ok(v)
}

fn driver_pointer_info(ptr: u64) -> Result<PointerInfo, WireError> {
    let raw_type = match cu_pointer_attribute(ffi::POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) {
        Ok(v) => v as u32,
        // Not a pointer the driver knows: what the runtime calls Unregistered.
        Err(WireError::Api(ffi::ERROR_INVALID_VALUE)) => {
            return Ok(PointerInfo {
                memory_type: MemoryType::Unregistered,
                device: None,
            })
        }
        Err(e) => return Err(e),
    };
    let managed = cu_pointer_attribute(ffi::POINTER_ATTRIBUTE_IS_MANAGED, ptr)? != 0;
    let memory_type = match raw_type {
        _ if managed => MemoryType::Managed,
        ffi::CU_MEMORYTYPE_UNIFIED => MemoryType::Managed,
        ffi::CU_MEMORYTYPE_DEVICE => MemoryType::Device,
        ffi::CU_MEMORYTYPE_HOST => MemoryType::Host,
        ffi::CU_MEMORYTYPE_ARRAY => return Err(harness("the pointer is a CUDA array")),
        other => {
            return Err(harness(format!(
                "cuPointerGetAttribute returned an unknown CUmemorytype {other}"
            )))
        }
    };
    let device = match memory_type {
        MemoryType::Device | MemoryType::Managed => {
            let ordinal = cu_pointer_attribute(ffi::POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)? as u32;
            (ordinal as i32 >= 0).then_some(ordinal)
        }
        _ => None,
    };
    Ok(PointerInfo {
        memory_type,
        device,
    })
}

impl Worker {
    /// `PidfdGetfd`: the copy becomes a descriptor this worker holds (it
    /// may close, send or import it, and `Reset` forgets it like any other).
    pub(super) fn take_descriptor(&mut self, pid: u32, fd: i32) -> Response {
        if self.owned.fds.len() >= MAX_HELD_FDS {
            return Err(harness(format!(
                "pidfd_getfd: the worker already holds {MAX_HELD_FDS} descriptors, the limit"
            )));
        }
        // Both CUDA dialects give these kinds the same codes; before `Init`
        // the driver's are used.
        let dialect = match self.dialect {
            Some(Api::Runtime) => Dialect::Runtime,
            Some(Api::Driver) | None => Dialect::Driver,
        };
        let copy = pidfd::pidfd_getfd(pid, fd, dialect)?;
        self.owned.fds.insert(copy);
        Ok(Reply::Fd(copy))
    }
}

mod fork_child;
mod pattern_kernel;
mod pidfd;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spare_context_count_comes_from_the_environment_or_the_default() {
        assert_eq!(spare_contexts_from(None), MAX_SPARE_CONTEXTS);
        assert_eq!(spare_contexts_from(Some("0")), 0);
        assert_eq!(spare_contexts_from(Some(" 1 ")), 1);
        assert_eq!(spare_contexts_from(Some("100")), 8);
        assert_eq!(spare_contexts_from(Some("two")), MAX_SPARE_CONTEXTS);
    }

    #[test]
    fn a_worker_takes_a_descriptor_before_init_and_holds_it() {
        let mut worker = Worker::default();
        let file = std::fs::File::open("/dev/null").unwrap();
        match worker.take_descriptor(std::process::id(), std::os::fd::AsRawFd::as_raw_fd(&file)) {
            Ok(Reply::Fd(copy)) => {
                assert!(worker.owned.fds.contains(&copy));
                // SAFETY: the copy is ours.
                unsafe { nix::libc::close(copy) };
            }
            Err(e) => eprintln!("skipped: pidfd_getfd of our own descriptor: {e:?}"),
            Ok(other) => panic!("unexpected answer {other:?}"),
        }
        // A process that does not exist: ESRCH, in the driver's codes.
        assert_eq!(
            worker.take_descriptor(i32::MAX as u32, 0),
            Err(WireError::Api(500))
        );
    }

    use crate::cuda::protocol::{encode_frame, recv_message, send_frame, send_message};
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    /// Runs `serve` on a thread over a socket pair; returns the parent end.
    fn in_process_worker() -> (UnixStream, std::thread::JoinHandle<ServeEnd>) {
        let (parent, child) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || serve(child.as_fd()));
        (parent, t)
    }

    fn ask(sock: &UnixStream, r: &Request) -> Response {
        send_message(sock.as_fd(), r, &[]).unwrap();
        recv_message::<Response>(sock.as_fd()).unwrap().0
    }

    /// A descriptor really travels between two workers through the parent,
    /// as `CudaMachine::transfer_fd` moves it: A -> parent -> B -> back here.
    #[test]
    fn a_descriptor_passes_between_two_workers_with_scm_rights() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("ipc-harness-worker-fd-{}", std::process::id()));
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(b"crossed two workers").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let (a, ta) = in_process_worker();
        let (b, tb) = in_process_worker();

        // Worker A receives the file and names its own number for it.
        send_message(a.as_fd(), &Request::ReceiveFd, &[file.as_fd()]).unwrap();
        let (r, _) = recv_message::<Response>(a.as_fd()).unwrap();
        let Ok(Reply::Fd(fd_a)) = r else {
            panic!("expected a descriptor number, got {r:?}")
        };
        drop(file);
        // A sends it to the parent; the parent passes it on to B.
        send_message(a.as_fd(), &Request::SendFd { fd: fd_a }, &[]).unwrap();
        let (r, mut fds) = recv_message::<Response>(a.as_fd()).unwrap();
        assert_eq!(r, Ok(Reply::Unit));
        let in_parent = fds.pop().expect("the answer carries the descriptor");
        send_message(b.as_fd(), &Request::ReceiveFd, &[in_parent.as_fd()]).unwrap();
        drop(in_parent);
        let (r, _) = recv_message::<Response>(b.as_fd()).unwrap();
        let Ok(Reply::Fd(fd_b)) = r else {
            panic!("expected a descriptor number, got {r:?}")
        };
        // Both workers live in this test process, so B's number is a new one.
        assert_ne!(fd_a, fd_b);
        // B sends it back: reading it shows the same open file.
        send_message(b.as_fd(), &Request::SendFd { fd: fd_b }, &[]).unwrap();
        let (r, mut fds) = recv_message::<Response>(b.as_fd()).unwrap();
        assert_eq!(r, Ok(Reply::Unit));
        let mut back = std::fs::File::from(fds.pop().unwrap());
        let mut text = String::new();
        std::io::Read::read_to_string(&mut back, &mut text).unwrap();
        assert_eq!(text, "crossed two workers");
        // A descriptor the worker does not hold is refused (EBADF) and never sent.
        send_message(b.as_fd(), &Request::SendFd { fd: 999_999 }, &[]).unwrap();
        let (r, fds) = recv_message::<Response>(b.as_fd()).unwrap();
        assert_eq!(r, Err(WireError::Api(1)));
        assert!(fds.is_empty());
        // ReceiveFd without a descriptor is the harness's fault.
        assert!(matches!(
            ask(&b, &Request::ReceiveFd),
            Err(WireError::Harness(_))
        ));
        for (sock, t) in [(a, ta), (b, tb)] {
            assert_eq!(ask(&sock, &Request::Exit), Ok(Reply::Unit));
            assert_eq!(t.join().unwrap(), ServeEnd::Exit);
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_worker_holds_a_bounded_number_of_received_descriptors() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let (sock, t) = in_process_worker();
        for n in 0..256 {
            send_message(sock.as_fd(), &Request::ReceiveFd, &[file.as_fd()]).unwrap();
            let (r, _) = recv_message::<Response>(sock.as_fd()).unwrap();
            assert!(matches!(r, Ok(Reply::Fd(_))), "descriptor {n}: {r:?}");
        }
        send_message(sock.as_fd(), &Request::ReceiveFd, &[file.as_fd()]).unwrap();
        let (r, _) = recv_message::<Response>(sock.as_fd()).unwrap();
        assert!(
            matches!(&r, Err(WireError::Harness(m)) if m.contains("limit")),
            "{r:?}"
        );
        assert_eq!(ask(&sock, &Request::Exit), Ok(Reply::Unit));
        assert_eq!(t.join().unwrap(), ServeEnd::Exit);
    }

    #[test]
    fn the_ptx_is_nul_terminated_and_names_the_entry() {
        let text = COPY_BYTES_PTX.to_str().unwrap();
        assert!(text.contains(".visible .entry copy_bytes("));
        assert!(text.contains(".target sm_52"));
        assert!(text.contains(".address_size 64"));
        assert_eq!(COPY_BYTES_NAME.to_bytes(), b"copy_bytes");
    }

    #[test]
    fn requests_before_init_and_malformed_requests_get_harness_errors() {
        let (sock, t) = in_process_worker();
        let r = ask(&sock, &Request::DeviceCount);
        assert!(
            matches!(&r, Err(WireError::Harness(m)) if m.contains("before a successful init")),
            "{r:?}"
        );
        // A well-framed but meaningless payload: answered, and the worker goes on.
        send_frame(sock.as_fd(), b"{\"NoSuchCall\":{}}", &[]).unwrap();
        let (r, _) = recv_message::<Response>(sock.as_fd()).unwrap();
        assert!(
            matches!(&r, Err(WireError::Harness(m)) if m.contains("malformed request")),
            "{r:?}"
        );
        assert_eq!(ask(&sock, &Request::Exit), Ok(Reply::Unit));
        assert_eq!(t.join().unwrap(), ServeEnd::Exit);
    }

    #[test]
    fn reset_before_init_is_a_harness_error_and_the_worker_goes_on() {
        let (sock, t) = in_process_worker();
        let r = ask(&sock, &Request::Reset);
        assert!(
            matches!(&r, Err(WireError::Harness(m)) if m.contains("reset before a successful init")),
            "{r:?}"
        );
        assert_eq!(ask(&sock, &Request::Exit), Ok(Reply::Unit));
        assert_eq!(t.join().unwrap(), ServeEnd::Exit);
    }

    #[test]
    fn destroying_a_context_forgets_what_was_made_in_it() {
        let mut owned = Owned::default();
        assert!(owned.is_empty());
        owned.contexts.extend([(0x10, 0), (0x20, 0)]);
        owned.allocations.insert(0x1000, (0x10, FreeKind::Device));
        owned.allocations.insert(0x2000, (0x20, FreeKind::Host));
        owned.ipc_opened.insert(0x3000, (0x10, 2));
        owned.forget_context(0x10);
        assert_eq!(owned.contexts, vec![(0x20, 0)]);
        assert_eq!(owned.allocations.len(), 1);
        assert!(owned.ipc_opened.is_empty());
        owned.forget_context(0x20);
        assert!(owned.is_empty());
        assert_eq!(free_kind(MemKind::Managed), FreeKind::Device);
        assert_eq!(free_kind(MemKind::PinnedHost), FreeKind::Host);
        assert_eq!(free_kind(MemKind::StreamOrdered), FreeKind::StreamOrdered);
    }

    #[test]
    fn the_default_streams_pass_and_unknown_streams_are_refused() {
        let mut owned = Owned::default();
        owned.streams.insert(0x5000, 0x10);
        let on = |stream: u64| {
            let stream = StreamId(stream);
            let (ptr, event) = (DevicePtr(0x1000), EventId(0x7));
            [
                Request::StreamSynchronize { stream },
                Request::StreamQuery { stream },
                Request::EventRecordOn { event, stream },
                Request::StreamWaitEventOn { stream, event },
                Request::SlowFillOn {
                    ptr,
                    value: 1,
                    len: 16,
                    micros: 10,
                    stream,
                },
                Request::CopyDevice {
                    dst: ptr,
                    src: ptr,
                    len: 16,
                    stream,
                },
                Request::StreamDestroy { stream },
            ]
        };
        // The legacy and per-thread default streams (event.stream.per-thread-*)
        // and a created stream go to the driver.
        for stream in [StreamId::LEGACY_DEFAULT.0, StreamId::PER_THREAD.0, 0x5000] {
            for request in on(stream) {
                assert_eq!(owned.unknown_stream(&request), None, "{request:?}");
            }
        }
        // Any other handle would be a dangling pointer for the API.
        for stream in [0x1, 0x3, 0x5001] {
            for request in on(stream) {
                assert_eq!(owned.unknown_stream(&request), Some(stream), "{request:?}");
            }
        }
        assert_eq!(owned.unknown_stream(&Request::DeviceCount), None);
        // A destroyed context takes its streams with it.
        owned.forget_context(0x10);
        assert_eq!(
            owned.unknown_stream(&Request::StreamQuery {
                stream: StreamId(0x5000)
            }),
            Some(0x5000)
        );
    }

    #[test]
    fn a_truncated_stream_ends_the_worker_without_a_panic() {
        let (mut sock, t) = in_process_worker();
        let frame = encode_frame(&Request::DeviceCount).unwrap();
        sock.write_all(&frame[..frame.len() - 1]).unwrap();
        drop(sock);
        assert_eq!(t.join().unwrap(), ServeEnd::Broken);
    }

    #[test]
    fn the_worker_stops_quietly_when_the_parent_goes() {
        let (sock, t) = in_process_worker();
        drop(sock);
        assert_eq!(t.join().unwrap(), ServeEnd::ParentGone);
    }

    #[test]
    fn without_libcuda_init_fails_and_probe_says_so() {
        if Lib::Driver.present() {
            eprintln!("libcuda is present here: this test checks the GPU-less path only");
            return;
        }
        let (sock, t) = in_process_worker();
        let r = ask(
            &sock,
            &Request::Init {
                dialect: Dialect::Driver,
                device: 0,
            },
        );
        assert!(
            matches!(&r, Err(WireError::Harness(m)) if m.contains("libcuda")),
            "{r:?}"
        );
        match ask(&sock, &Request::Probe) {
            Ok(Reply::Probe(p)) => {
                assert!(!p.libcuda);
                assert_eq!(p.device_count, 0);
                assert_eq!(p.cuda_driver_version, None);
            }
            other => panic!("{other:?}"),
        }
        drop(sock);
        assert_eq!(t.join().unwrap(), ServeEnd::ParentGone);
    }

    #[test]
    fn oversized_transfers_are_refused_before_allocating() {
        assert!(matches!(
            host_buffer(MAX_TRANSFER + 1),
            Err(WireError::Harness(_))
        ));
        assert!(matches!(host_buffer(u64::MAX), Err(WireError::Harness(_))));
        assert_eq!(host_buffer(3).unwrap(), vec![0, 0, 0]);
    }

    #[test]
    fn every_attribute_has_a_number() {
        for a in DeviceAttribute::ALL {
            let (n, _) = attribute_number(a);
            assert!(n > 0);
        }
    }
}
