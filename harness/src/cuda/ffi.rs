//! The CUDA entry points the worker calls, resolved at run time.
//!
//! The libraries are the ones cudarc finds (`cudarc::driver::sys::culib()`
//! for `libcuda`, `cudarc::runtime::sys::culib()` for `libcudart`, with
//! cudarc's list of candidate names). The entry points are declared here
//! rather than taken from cudarc's generated wrappers for two reasons:
//!
//! - cudarc declares the return types as Rust enums (`CUresult`,
//!   `cudaError_t`). A code the bindings do not list would be an invalid
//!   enum value, i.e. undefined behaviour, and this harness exists to report
//!   whatever code the driver returns. Here every function returns `c_int`.
//! - cudarc panics on a missing symbol; here it is an error reply
//!   ([`WireError::Harness`]), so an older driver lacking, say,
//!   `cuCtxCreate_v4` fails one call instead of the worker.
//!
//! The signatures are cudarc's (CUDA 13.0 headers) with enum arguments passed
//! as `c_int` (the C ABI of an enum on x86-64 Linux) and opaque handles as
//! `*mut c_void`.

#![allow(non_snake_case)]

use super::protocol::WireError;
use std::ffi::{c_char, c_int, c_long, c_uchar, c_uint, c_void};
use std::sync::OnceLock;

/// Result of one API call: `Ok` for code 0, the code otherwise.
pub(crate) type CallResult = Result<(), WireError>;

/// `CUcontext`, `CUmodule`, `CUfunction`, `CUstream`, ...
pub(crate) type Handle = *mut c_void;
/// `CUdeviceptr`.
pub(crate) type DevPtr = u64;

/// `cudaIpcMemHandle_t` / `CUipcMemHandle` (and the event handles
/// `cudaIpcEventHandle_t` / `CUipcEventHandle`, same layout): `struct { char reserved[64]; }`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawIpcHandle {
    pub reserved: [c_char; 64],
}

/// `struct cudaPointerAttributes` as of CUDA 13.0 (`type`, `device`,
/// `devicePointer`, `hostPointer`, `long reserved[8]`), with `type` as a
/// plain int and extra trailing room in case a runtime writes more.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawPointerAttributes {
    pub type_: c_int,
    pub device: c_int,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
    pub reserved: [c_long; 16],
}

#[derive(Clone, Copy)]
pub(crate) enum Lib {
    Driver,
    Runtime,
}

impl Lib {
    fn name(self) -> &'static str {
        match self {
            Lib::Driver => "libcuda",
            Lib::Runtime => "libcudart",
        }
    }

    /// Whether the library can be loaded at all (checked once; loading a
    /// missing library through cudarc would panic).
    pub(crate) fn present(self) -> bool {
        static DRIVER: OnceLock<bool> = OnceLock::new();
        static RUNTIME: OnceLock<bool> = OnceLock::new();
        match self {
            // SAFETY: only tries to dlopen the candidate names.
            Lib::Driver => {
                *DRIVER.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
            }
            Lib::Runtime => {
                *RUNTIME.get_or_init(|| unsafe { cudarc::runtime::sys::is_culib_present() })
            }
        }
    }
}

fn resolve<F: Copy>(lib: Lib, name: &str) -> Result<F, String> {
    if !lib.present() {
        return Err(format!("{} could not be loaded", lib.name()));
    }
    // SAFETY: the library is present (so culib() does not panic); `F` is the
    // C signature of `name` as declared in the CUDA 13.0 headers.
    unsafe {
        let symbol = match lib {
            Lib::Driver => cudarc::driver::sys::culib().get::<F>(name.as_bytes()),
            Lib::Runtime => cudarc::runtime::sys::culib().get::<F>(name.as_bytes()),
        };
        symbol
            .map(|s| *s)
            .map_err(|e| format!("{} has no symbol {name}: {e}", lib.name()))
    }
}

/// `Ok` for 0 (`CUDA_SUCCESS` / `cudaSuccess`), the code otherwise.
pub(crate) fn check(code: c_int) -> CallResult {
    if code == 0 {
        Ok(())
    } else {
        Err(WireError::Api(code))
    }
}

macro_rules! entry_points {
    ($lib:expr; $( fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ); )*) => {
        $(
            /// Calls the entry point of the same name; see the module docs.
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn $name( $( $arg : $ty ),* ) -> CallResult {
                type F = unsafe extern "C" fn( $( $ty ),* ) -> c_int;
                static SYMBOL: OnceLock<Result<F, String>> = OnceLock::new();
                match SYMBOL.get_or_init(|| resolve::<F>($lib, stringify!($name))) {
                    // SAFETY: the caller upholds the C function's contract.
                    Ok(f) => check(unsafe { f( $( $arg ),* ) }),
                    Err(e) => Err(WireError::Harness(e.clone())),
                }
            }
        )*
    };
}

// Driver API (libcuda).
entry_points! { Lib::Driver;
    fn cuInit(flags: c_uint);
    fn cuDriverGetVersion(version: *mut c_int);
    fn cuDeviceGet(device: *mut c_int, ordinal: c_int);
    fn cuDeviceGetCount(count: *mut c_int);
    fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int);
    fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, device: c_int);
    fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, device: c_int);
    fn cuDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int);
    fn cuCtxEnablePeerAccess(peer_ctx: Handle, flags: c_uint);
    fn cuCtxCreate_v4(pctx: *mut Handle, params: *mut c_void, flags: c_uint, device: c_int);
    fn cuCtxDestroy_v2(ctx: Handle);
    fn cuCtxSetCurrent(ctx: Handle);
    fn cuCtxPopCurrent_v2(ctx: *mut Handle);
    fn cuCtxPushCurrent_v2(ctx: Handle);
    fn cuCtxGetCurrent(pctx: *mut Handle);
    fn cuCtxSynchronize();
    fn cuMemAlloc_v2(dptr: *mut DevPtr, size: usize);
    fn cuMemAllocManaged(dptr: *mut DevPtr, size: usize, flags: c_uint);
    fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize);
    fn cuMemAllocAsync(dptr: *mut DevPtr, size: usize, stream: Handle);
    fn cuStreamSynchronize(stream: Handle);
    fn cuMemFree_v2(dptr: DevPtr);
    fn cuMemFreeHost(p: *mut c_void);
    fn cuMemFreeAsync(dptr: DevPtr, stream: Handle);
    fn cuMemsetD8_v2(dst: DevPtr, value: c_uchar, n: usize);
    fn cuMemcpyHtoD_v2(dst: DevPtr, src: *const c_void, n: usize);
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: DevPtr, n: usize);
    fn cuMemGetAddressRange_v2(base: *mut DevPtr, size: *mut usize, dptr: DevPtr);
    fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, ptr: DevPtr);
    fn cuIpcGetMemHandle(handle: *mut RawIpcHandle, dptr: DevPtr);
    fn cuIpcOpenMemHandle_v2(pdptr: *mut DevPtr, handle: RawIpcHandle, flags: c_uint);
    fn cuIpcCloseMemHandle(dptr: DevPtr);
    fn cuEventCreate(event: *mut Handle, flags: c_uint);
    fn cuEventRecord(event: Handle, stream: Handle);
    fn cuEventQuery(event: Handle);
    fn cuEventSynchronize(event: Handle);
    fn cuStreamWaitEvent(stream: Handle, event: Handle, flags: c_uint);
    fn cuEventElapsedTime_v2(ms: *mut f32, start: Handle, end: Handle);
    fn cuEventDestroy_v2(event: Handle);
    fn cuIpcGetEventHandle(handle: *mut RawIpcHandle, event: Handle);
    fn cuIpcOpenEventHandle(event: *mut Handle, handle: RawIpcHandle);
    fn cuModuleLoadData(module: *mut Handle, image: *const c_void);
    // --- streams and copies ---
    fn cuStreamCreate(stream: *mut Handle, flags: c_uint);
    fn cuStreamDestroy_v2(stream: Handle);
    fn cuStreamQuery(stream: Handle);
    fn cuMemcpyDtoD_v2(dst: DevPtr, src: DevPtr, n: usize);
    fn cuMemcpyDtoDAsync_v2(dst: DevPtr, src: DevPtr, n: usize, stream: Handle);
    fn cuMemcpyPeer(dst: DevPtr, dst_ctx: Handle, src: DevPtr, src_ctx: Handle, n: usize);
    // --- VMM ---
    fn cuMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const MemAllocationProp,
        option: c_int,
    );
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const MemAllocationProp, flags: u64);
    fn cuMemExportToShareableHandle(shareable: *mut c_void, handle: u64, ty: c_int, flags: u64);
    fn cuMemImportFromShareableHandle(handle: *mut u64, os_handle: *mut c_void, ty: c_int);
    fn cuMemAddressReserve(ptr: *mut DevPtr, size: usize, alignment: usize, addr: DevPtr, flags: u64);
    fn cuMemAddressFree(ptr: DevPtr, size: usize);
    fn cuMemMap(ptr: DevPtr, size: usize, offset: usize, handle: u64, flags: u64);
    fn cuMemUnmap(ptr: DevPtr, size: usize);
    fn cuMemSetAccess(ptr: DevPtr, size: usize, desc: *const MemAccessDesc, count: usize);
    fn cuMemRelease(handle: u64);
    fn cuModuleGetFunction(function: *mut Handle, module: Handle, name: *const c_char);
    fn cuLaunchKernel(
        f: Handle,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: Handle,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
}

/// `CUmemAllocationProp` (cuda.h 13.0), checked against cudarc's binding below.
#[repr(C)]
pub(crate) struct MemAllocationProp {
    pub type_: c_int,
    pub requested_handle_types: c_int,
    pub location_type: c_int,
    pub location_id: c_int,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
pub(crate) struct MemAccessDesc {
    pub location_type: c_int,
    pub location_id: c_int,
    pub flags: c_int,
}

/// `CUmemLocation` / `cudaMemLocation`.
#[repr(C)]
pub(crate) struct MemLocation {
    pub location_type: c_int,
    pub location_id: c_int,
}

const _: () = assert!(
    std::mem::size_of::<MemLocation>() == std::mem::size_of::<cudarc::driver::sys::CUmemLocation>()
);
const _: () = assert!(
    std::mem::size_of::<MemAllocationProp>()
        == std::mem::size_of::<cudarc::driver::sys::CUmemAllocationProp>()
);
const _: () = assert!(
    std::mem::size_of::<MemAccessDesc>()
        == std::mem::size_of::<cudarc::driver::sys::CUmemAccessDesc>()
);

/// VMM enumerators (cuda.h 13.0).
pub(crate) mod vmm {
    use std::ffi::c_int;
    pub(crate) const ALLOCATION_TYPE_PINNED: c_int = 1;
    pub(crate) const LOCATION_TYPE_DEVICE: c_int = 1;
    pub(crate) const HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: c_int = 1;
    pub(crate) const HANDLE_TYPE_FABRIC: c_int = 8;
    pub(crate) const GRANULARITY_MINIMUM: c_int = 0;
    pub(crate) const GRANULARITY_RECOMMENDED: c_int = 1;
    pub(crate) const ACCESS_NONE: c_int = 0;
    pub(crate) const ACCESS_READ: c_int = 1;
    pub(crate) const ACCESS_READWRITE: c_int = 3;
}

/// `CUmemPoolProps` / `cudaMemPoolProps` (cuda.h 13.0), checked against cudarc's binding below.
#[repr(C)]
pub(crate) struct MemPoolProps {
    pub alloc_type: c_int,
    pub handle_types: c_int,
    pub location_type: c_int,
    pub location_id: c_int,
    pub win32_security_attributes: *mut c_void,
    pub max_size: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

const _: () = assert!(
    std::mem::size_of::<MemPoolProps>()
        == std::mem::size_of::<cudarc::driver::sys::CUmemPoolProps>()
);

/// `CUmemPoolPtrExportData` / `cudaMemPoolPtrExportData`: 64 opaque bytes.
pub(crate) type RawPoolPtrExport = [u8; 64];

// Memory pools (stream-ordered allocator), driver API.
entry_points! { Lib::Driver;
    fn cuMemPoolCreate(pool: *mut Handle, props: *const MemPoolProps);
    fn cuDeviceGetDefaultMemPool(pool: *mut Handle, device: c_int);
    fn cuMemPoolDestroy(pool: Handle);
    fn cuMemPoolExportToShareableHandle(handle_out: *mut c_void, pool: Handle, ty: c_int, flags: u64);
    fn cuMemPoolImportFromShareableHandle(pool_out: *mut Handle, handle: *mut c_void, ty: c_int, flags: u64);
    fn cuMemPoolSetAccess(pool: Handle, map: *const MemAccessDesc, count: usize);
    fn cuMemPoolGetAccess(flags: *mut c_int, pool: Handle, location: *mut MemLocation);
    fn cuMemAllocFromPoolAsync(dptr: *mut DevPtr, size: usize, pool: Handle, stream: Handle);
    fn cuMemPoolExportPointer(data: *mut RawPoolPtrExport, ptr: DevPtr);
    fn cuMemPoolImportPointer(ptr_out: *mut DevPtr, pool: Handle, data: *mut RawPoolPtrExport);
}

// Memory pools, runtime API.
entry_points! { Lib::Runtime;
    fn cudaMemPoolCreate(pool: *mut Handle, props: *const MemPoolProps);
    fn cudaDeviceGetDefaultMemPool(pool: *mut Handle, device: c_int);
    fn cudaMemPoolDestroy(pool: Handle);
    fn cudaMemPoolExportToShareableHandle(handle_out: *mut c_void, pool: Handle, ty: c_int, flags: c_uint);
    fn cudaMemPoolImportFromShareableHandle(pool_out: *mut Handle, handle: *mut c_void, ty: c_int, flags: c_uint);
    fn cudaMemPoolSetAccess(pool: Handle, map: *const MemAccessDesc, count: usize);
    fn cudaMemPoolGetAccess(flags: *mut c_int, pool: Handle, location: *mut MemLocation);
    fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: Handle, stream: Handle);
    fn cudaMemPoolExportPointer(data: *mut RawPoolPtrExport, ptr: *mut c_void);
    fn cudaMemPoolImportPointer(ptr_out: *mut *mut c_void, pool: Handle, data: *mut RawPoolPtrExport);
}

// Runtime API (libcudart).
entry_points! { Lib::Runtime;
    fn cudaRuntimeGetVersion(version: *mut c_int);
    fn cudaGetDeviceCount(count: *mut c_int);
    fn cudaDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int);
    fn cudaSetDevice(device: c_int);
    fn cudaDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int);
    fn cudaDeviceEnablePeerAccess(peer: c_int, flags: c_uint);
    fn cudaMalloc(ptr: *mut *mut c_void, size: usize);
    fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint);
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize);
    fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: Handle);
    fn cudaStreamSynchronize(stream: Handle);
    fn cudaFree(ptr: *mut c_void);
    fn cudaFreeHost(ptr: *mut c_void);
    fn cudaFreeAsync(ptr: *mut c_void, stream: Handle);
    fn cudaMemset(ptr: *mut c_void, value: c_int, count: usize);
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int);
    fn cudaPointerGetAttributes(attributes: *mut RawPointerAttributes, ptr: *const c_void);
    fn cudaIpcGetMemHandle(handle: *mut RawIpcHandle, ptr: *mut c_void);
    fn cudaIpcOpenMemHandle(ptr: *mut *mut c_void, handle: RawIpcHandle, flags: c_uint);
    fn cudaIpcCloseMemHandle(ptr: *mut c_void);
    fn cudaDeviceSynchronize();
    fn cudaEventCreateWithFlags(event: *mut Handle, flags: c_uint);
    fn cudaEventRecord(event: Handle, stream: Handle);
    fn cudaEventQuery(event: Handle);
    fn cudaEventSynchronize(event: Handle);
    fn cudaStreamWaitEvent(stream: Handle, event: Handle, flags: c_uint);
    fn cudaEventElapsedTime(ms: *mut f32, start: Handle, end: Handle);
    fn cudaEventDestroy(event: Handle);
    fn cudaIpcGetEventHandle(handle: *mut RawIpcHandle, event: Handle);
    fn cudaIpcOpenEventHandle(event: *mut Handle, handle: RawIpcHandle);
    // --- streams and copies ---
    fn cudaStreamCreateWithFlags(stream: *mut Handle, flags: c_uint);
    fn cudaStreamDestroy(stream: Handle);
    fn cudaStreamQuery(stream: Handle);
    fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int, stream: Handle);
    fn cudaMemcpyPeer(dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, count: usize);
}

// Enumerators used by the worker (identical numbers in cuda.h / driver_types.h 13.0).

/// `CU_MEM_ATTACH_GLOBAL` / `cudaMemAttachGlobal`.
pub(crate) const MEM_ATTACH_GLOBAL: c_uint = 1;
/// `cudaMemcpyHostToDevice`.
pub(crate) const MEMCPY_HOST_TO_DEVICE: c_int = 1;
/// `cudaMemcpyDeviceToHost`.
pub(crate) const MEMCPY_DEVICE_TO_HOST: c_int = 2;
/// `cudaMemcpyDeviceToDevice`.
pub(crate) const MEMCPY_DEVICE_TO_DEVICE: c_int = 3;

/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
pub(crate) const POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
pub(crate) const POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
pub(crate) const POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;

/// `CUmemorytype` values.
pub(crate) const CU_MEMORYTYPE_HOST: u32 = 1;
pub(crate) const CU_MEMORYTYPE_DEVICE: u32 = 2;
pub(crate) const CU_MEMORYTYPE_ARRAY: u32 = 3;
pub(crate) const CU_MEMORYTYPE_UNIFIED: u32 = 4;

/// `cudaMemoryType` values.
pub(crate) const CUDA_MEMORY_TYPE_UNREGISTERED: c_int = 0;
pub(crate) const CUDA_MEMORY_TYPE_HOST: c_int = 1;
pub(crate) const CUDA_MEMORY_TYPE_DEVICE: c_int = 2;
pub(crate) const CUDA_MEMORY_TYPE_MANAGED: c_int = 3;

/// `CUDA_ERROR_INVALID_VALUE` / `cudaErrorInvalidValue`.
pub(crate) const ERROR_INVALID_VALUE: c_int = 1;

/// `CUdevice_attribute` / `cudaDeviceAttr` numbers (CUDA 13.0).
pub(crate) mod attr {
    use std::ffi::c_int;
    pub(crate) const UNIFIED_ADDRESSING: c_int = 41;
    pub(crate) const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
    pub(crate) const COMPUTE_CAPABILITY_MINOR: c_int = 76;
    /// Driver API only: the runtime enum has no `cudaDevAttr` for it.
    pub(crate) const VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: c_int = 102;
    /// Driver API only: the runtime enum has no `cudaDevAttr` for it.
    pub(crate) const HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: c_int = 103;
    pub(crate) const MEMORY_POOLS_SUPPORTED: c_int = 115;
    pub(crate) const IPC_EVENT_SUPPORTED: c_int = 125;
    /// Driver API only.
    pub(crate) const HANDLE_TYPE_FABRIC_SUPPORTED: c_int = 128;
}
