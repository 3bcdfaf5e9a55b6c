//! Every driver call, defined once.
//!
//! [`for_each_driver_call!`](crate::for_each_driver_call) holds the table:
//! one row per API call, with its
//! `Driver` method name, its wire name (the worker protocol's `Request`
//! variant, also the [`CallKind`]), its arguments and its return type. Each
//! consumer passes the name of its own generator macro and gets the rows:
//!
//! - here: the [`Driver`] trait (every method required),
//!   [`CallKind`] and [`Call`] (one call with its owned arguments, made on
//!   any `Driver` by [`Call::call_on`], which gives a [`Returned`]);
//! - `cuda/protocol.rs`: the worker protocol's `Request` and its dispatch
//!   onto any `Driver`; `cuda/process.rs`: the proxy `Driver` that sends a
//!   `Request` and decodes the `Reply`;
//! - `roles/driver.rs`: `RoleDriver`, whose every call passes through one hook.
//!
//! Row syntax: `doc comments, method WireName(args) -> Return
//! => keyword("runtime API", "driver API", "HIP API");`. After `=>`: the
//! scenario keyword of the op that makes the call ([`CallKind::keyword`];
//! several rows may share one, the parser then picks the row by the op's
//! arguments, and [`CallKind::from_keyword`] answers the first row), and
//! the API entry point the call makes in each dialect ([`CallKind::api`];
//! the first, where it makes several). Generators that need neither match
//! them as `=> $keyword:ident $api:tt`. A call
//! without arguments has no parentheses (its request is a unit variant on
//! the wire). An argument's type is one identifier (a `Copy` type), or a
//! borrowed slice with the owned type it travels as
//! (`bytes: &[u8] as Vec<u8>`): the trait's argument types reach mockall
//! as plain tokens that way. Attributes on an argument apply to its field
//! in the wire request only.
//!
//! The order of the rows is the order of [`CallKind`] (it sorts call counts).

/// Calls `$generator!` with the table of driver calls (see the module docs
/// of `ipc_harness::calls`).
#[macro_export]
macro_rules! for_each_driver_call {
    ($generator:ident) => {
        $generator! {
            // --- devices -------------------------------------------------
            /// `cudaGetDeviceCount` / `cuDeviceGetCount`.
            device_count DeviceCount -> u32
                => device_count("cudaGetDeviceCount", "cuDeviceGetCount", "hipGetDeviceCount");
            /// `cudaDeviceGetAttribute` / `cuDeviceGetAttribute`.
            device_attribute DeviceAttribute(device: DeviceOrdinal, attr: DeviceAttribute) -> i64
                => attr("cudaDeviceGetAttribute", "cuDeviceGetAttribute", "hipDeviceGetAttribute");
            // --- contexts ------------------------------------------------
            /// `cudaSetDevice` (runtime) / retain primary context + `cuCtxSetCurrent` (driver).
            set_device SetDevice(device: DeviceOrdinal) -> ()
                => set_device("cudaSetDevice", "cuCtxSetCurrent", "hipSetDevice");
            /// `cuDevicePrimaryCtxRetain` (both dialects: the runtime has no equivalent).
            primary_context PrimaryContext(device: DeviceOrdinal) -> ContextId
                => primary_ctx("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", "hipDevicePrimaryCtxRetain");
            /// `cuCtxCreate`: a second, non-primary context on `device`; it becomes current.
            create_context CreateContext(device: DeviceOrdinal) -> ContextId
                => ctx_create("cuCtxCreate", "cuCtxCreate", "hipCtxCreate");
            /// `cuCtxSetCurrent`.
            set_current_context SetCurrentContext(ctx: ContextId) -> ()
                => ctx_set("cuCtxSetCurrent", "cuCtxSetCurrent", "hipCtxSetCurrent");
            /// `cuCtxGetCurrent`; `None` when no context is current.
            current_context CurrentContext -> Option<ContextId>
                => ctx_current("cuCtxGetCurrent", "cuCtxGetCurrent", "hipCtxGetCurrent");
            /// `cuCtxDestroy`.
            destroy_context DestroyContext(ctx: ContextId) -> ()
                => ctx_destroy("cuCtxDestroy", "cuCtxDestroy", "hipCtxDestroy");
            // --- allocations ---------------------------------------------
            /// `cudaMalloc*` / `cuMemAlloc*` of `kind` (see [`MemKind`]).
            alloc Alloc(kind: MemKind, size: u64) -> DevicePtr
                => malloc("cudaMalloc", "cuMemAlloc", "hipMalloc");
            /// `cudaFree*` / `cuMemFree*` of `kind` (see [`FreeKind`]).
            free Free(kind: FreeKind, ptr: DevicePtr) -> ()
                => free("cudaFree", "cuMemFree", "hipFree");
            /// `cudaDeviceSynchronize` / `cuCtxSynchronize`: wait for this process's
            /// work. A copy from pageable host memory may return before the bytes
            /// reach the device, so another process can read stale data without it.
            synchronize Synchronize -> ()
                => sync("cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize");
            // --- data ----------------------------------------------------
            /// `cudaMemset` / `cuMemsetD8`.
            memset Memset(ptr: DevicePtr, value: u8, len: u64) -> ()
                => fill("cudaMemset", "cuMemsetD8", "hipMemset");
            /// Host-to-device `cudaMemcpy` / `cuMemcpyHtoD`.
            write Write(ptr: DevicePtr, #[serde(with = "hex_bytes")] bytes: &[u8] as Vec<u8>) -> ()
                => write("cudaMemcpy", "cuMemcpyHtoD", "hipMemcpy");
            /// Device-to-host `cudaMemcpy` / `cuMemcpyDtoH`.
            read Read(ptr: DevicePtr, len: u64) -> Vec<u8>
                => read("cudaMemcpy", "cuMemcpyDtoH", "hipMemcpy");
            /// What a kernel reading `[ptr, ptr+len)` sees: a copy kernel into a
            /// scratch buffer, then copied back. Can differ from what memcpy allows.
            device_read DeviceRead(ptr: DevicePtr, len: u64) -> Vec<u8>
                => device_read("cuLaunchKernel", "cuLaunchKernel", "hipModuleLaunchKernel");
            // --- queries -------------------------------------------------
            /// `cuMemGetAddressRange`: base and size of the allocation containing `ptr`.
            address_range AddressRange(ptr: DevicePtr) -> (DevicePtr, u64)
                => address_range("cuMemGetAddressRange", "cuMemGetAddressRange", "hipMemGetAddressRange");
            /// `cudaPointerGetAttributes` / `cuPointerGetAttribute`.
            pointer_info PointerInfo(ptr: DevicePtr) -> PointerInfo
                => pointer_attr("cudaPointerGetAttributes", "cuPointerGetAttribute", "hipPointerGetAttributes");
            // --- legacy IPC ----------------------------------------------
            /// `cudaIpcGetMemHandle` / `cuIpcGetMemHandle`.
            ipc_get_mem_handle IpcGetMemHandle(ptr: DevicePtr, out: OutArg) -> IpcMemHandle
                => ipc_get("cudaIpcGetMemHandle", "cuIpcGetMemHandle", "hipIpcGetMemHandle");
            /// `cudaIpcOpenMemHandle` / `cuIpcOpenMemHandle`.
            ipc_open_mem_handle IpcOpenMemHandle(handle: IpcMemHandle, flags: u32, out: OutArg) -> DevicePtr
                => ipc_open("cudaIpcOpenMemHandle", "cuIpcOpenMemHandle", "hipIpcOpenMemHandle");
            /// `cudaIpcCloseMemHandle` / `cuIpcCloseMemHandle`.
            ipc_close_mem_handle IpcCloseMemHandle(ptr: DevicePtr) -> ()
                => ipc_close("cudaIpcCloseMemHandle", "cuIpcCloseMemHandle", "hipIpcCloseMemHandle");
            // --- peers (several devices) ---------------------------------
            /// `cudaDeviceCanAccessPeer` / `cuDeviceCanAccessPeer`: 1 when `device`
            /// can access memory on `peer`, else 0.
            can_access_peer CanAccessPeer(device: DeviceOrdinal, peer: DeviceOrdinal) -> i64
                => can_access_peer("cudaDeviceCanAccessPeer", "cuDeviceCanAccessPeer", "hipDeviceCanAccessPeer");
            /// `cudaDeviceEnablePeerAccess(peer, 0)` / `cuCtxEnablePeerAccess` with
            /// `peer`'s primary context: the current context may access `peer`'s memory.
            enable_peer_access EnablePeerAccess(peer: DeviceOrdinal) -> ()
                => enable_peer("cudaDeviceEnablePeerAccess", "cuCtxEnablePeerAccess", "hipDeviceEnablePeerAccess");
            // --- VMM -----------------------------------------------------
            // The virtual memory management calls exist only in the driver API;
            // a runtime-dialect program calls the same `cu*` functions, so both
            // dialects make the same calls (errors are still named per dialect).
            /// `cuMemGetAllocationGranularity` for a pinned device allocation on
            /// `device` requesting `types`.
            vmm_granularity VmmGranularity(device: DeviceOrdinal, types: HandleTypes, kind: GranularityKind) -> u64
                => vmm_granularity("cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity", "hipMemGetAllocationGranularity");
            /// `cuMemCreate` (pinned, on `device`, `requestedHandleTypes = types`).
            vmm_create VmmCreate(device: DeviceOrdinal, size: u64, types: HandleTypes) -> VmmHandle
                => vmm_create("cuMemCreate", "cuMemCreate", "hipMemCreate");
            /// `cuMemExportToShareableHandle(.., flags = 0)`. Only POSIX fds are
            /// carried; a fabric export that succeeds is a harness error.
            vmm_export VmmExport(handle: VmmHandle, ty: ShareableHandleType) -> Fd
                => vmm_export("cuMemExportToShareableHandle", "cuMemExportToShareableHandle", "hipMemExportToShareableHandle");
            /// `cuMemImportFromShareableHandle(.., CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)`.
            vmm_import VmmImport(fd: Fd) -> VmmHandle
                => vmm_import("cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle", "hipMemImportFromShareableHandle");
            /// `cuMemAddressReserve(.., size, alignment 0, addr 0, flags 0)`.
            vmm_reserve VmmReserve(size: u64) -> DevicePtr
                => vmm_reserve("cuMemAddressReserve", "cuMemAddressReserve", "hipMemAddressReserve");
            /// `cuMemMap(va, size, offset, handle, 0)`.
            vmm_map VmmMap(va: DevicePtr, size: u64, offset: u64, handle: VmmHandle) -> ()
                => vmm_map("cuMemMap", "cuMemMap", "hipMemMap");
            /// `cuMemSetAccess` with one descriptor for `device`.
            vmm_set_access VmmSetAccess(va: DevicePtr, size: u64, device: DeviceOrdinal, access: VmmAccess) -> ()
                => vmm_set_access("cuMemSetAccess", "cuMemSetAccess", "hipMemSetAccess");
            /// `cuMemUnmap`.
            vmm_unmap VmmUnmap(va: DevicePtr, size: u64) -> ()
                => vmm_unmap("cuMemUnmap", "cuMemUnmap", "hipMemUnmap");
            /// `cuMemAddressFree`.
            vmm_address_free VmmAddressFree(va: DevicePtr, size: u64) -> ()
                => vmm_address_free("cuMemAddressFree", "cuMemAddressFree", "hipMemAddressFree");
            /// `cuMemRelease`.
            vmm_release VmmRelease(handle: VmmHandle) -> ()
                => vmm_release("cuMemRelease", "cuMemRelease", "hipMemRelease");
            /// `close(2)` of a descriptor in this process (an `EBADF` is `InvalidValue`).
            fd_close FdClose(fd: Fd) -> ()
                => fd_close("close", "close", "close");
            /// `open("/dev/null", O_RDWR)`: a descriptor that is not CUDA's.
            fd_open_null_device FdOpenNullDevice -> Fd
                => fd_null_device("open", "open", "open");
            /// `pidfd_open(pid, 0)` then `pidfd_getfd(pidfd, fd, 0)`: a copy of
            /// descriptor `fd` of process `pid` (as this process's PID namespace
            /// names it), as UCX takes a VMM export. The `errno` reads as a kind:
            /// `ESRCH` NotFound, `EPERM` NotPermitted, `EBADF` InvalidValue,
            /// `ENOSYS` NotSupported.
            pidfd_getfd PidfdGetfd(pid: u32, fd: Fd) -> Fd
                => pidfd_getfd("pidfd_open + pidfd_getfd", "pidfd_open + pidfd_getfd", "pidfd_open + pidfd_getfd");
            // --- memory pools --------------------------------------------
            // Stream-ordered pools shared between processes. Allocation and
            // free run on the default stream, followed by a stream synchronize.
            /// `cudaMemPoolCreate` / `cuMemPoolCreate` / `hipMemPoolCreate`: pinned
            /// device memory on `device`, `handleTypes = types`.
            pool_create PoolCreate(device: DeviceOrdinal, types: HandleTypes) -> PoolId
                => pool_create("cudaMemPoolCreate", "cuMemPoolCreate", "hipMemPoolCreate");
            /// `cudaDeviceGetDefaultMemPool` / `cuDeviceGetDefaultMemPool` /
            /// `hipDeviceGetDefaultMemPool`.
            pool_default PoolDefault(device: DeviceOrdinal) -> PoolId
                => pool_default("cudaDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", "hipDeviceGetDefaultMemPool");
            /// `cudaMemPoolDestroy` / `cuMemPoolDestroy` / `hipMemPoolDestroy`.
            pool_destroy PoolDestroy(pool: PoolId) -> ()
                => pool_destroy("cudaMemPoolDestroy", "cuMemPoolDestroy", "hipMemPoolDestroy");
            /// `cudaMemPoolExportToShareableHandle` / `cuMemPoolExportToShareableHandle` /
            /// `hipMemPoolExportToShareableHandle` as a POSIX fd (flags 0).
            pool_export PoolExport(pool: PoolId) -> Fd
                => pool_export("cudaMemPoolExportToShareableHandle", "cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle");
            /// `cudaMemPoolImportFromShareableHandle` / `cuMemPoolImportFromShareableHandle` /
            /// `hipMemPoolImportFromShareableHandle` of a POSIX fd (flags 0).
            pool_import PoolImport(fd: Fd) -> PoolId
                => pool_import("cudaMemPoolImportFromShareableHandle", "cuMemPoolImportFromShareableHandle", "hipMemPoolImportFromShareableHandle");
            /// `cudaMemPoolSetAccess` / `cuMemPoolSetAccess` / `hipMemPoolSetAccess`
            /// with one descriptor for `device`.
            pool_set_access PoolSetAccess(pool: PoolId, device: DeviceOrdinal, access: VmmAccess) -> ()
                => pool_set_access("cudaMemPoolSetAccess", "cuMemPoolSetAccess", "hipMemPoolSetAccess");
            /// `cudaMemPoolGetAccess` / `cuMemPoolGetAccess` / `hipMemPoolGetAccess`
            /// for `device`: its `cudaMemAccessFlags` (0 none, 1 read, 3 read-write).
            pool_get_access PoolGetAccess(pool: PoolId, device: DeviceOrdinal) -> u64
                => pool_get_access("cudaMemPoolGetAccess", "cuMemPoolGetAccess", "hipMemPoolGetAccess");
            /// `cudaMallocFromPoolAsync` / `cuMemAllocFromPoolAsync` /
            /// `hipMallocFromPoolAsync` on the default stream, then stream synchronize.
            pool_alloc PoolAlloc(pool: PoolId, size: u64) -> DevicePtr
                => pool_alloc("cudaMallocFromPoolAsync", "cuMemAllocFromPoolAsync", "hipMallocFromPoolAsync");
            /// `cudaFreeAsync` / `cuMemFreeAsync` / `hipFreeAsync` on the default
            /// stream, then stream synchronize (of a pool allocation or an imported pointer).
            pool_free PoolFree(ptr: DevicePtr) -> ()
                => pool_free("cudaFreeAsync", "cuMemFreeAsync", "hipFreeAsync");
            /// `cudaMemPoolExportPointer` / `cuMemPoolExportPointer` / `hipMemPoolExportPointer`.
            pool_export_ptr PoolExportPtr(ptr: DevicePtr) -> PoolPtrExport
                => pool_export_ptr("cudaMemPoolExportPointer", "cuMemPoolExportPointer", "hipMemPoolExportPointer");
            /// `cudaMemPoolImportPointer` / `cuMemPoolImportPointer` / `hipMemPoolImportPointer`.
            pool_import_ptr PoolImportPtr(pool: PoolId, data: PoolPtrExport) -> DevicePtr
                => pool_import_ptr("cudaMemPoolImportPointer", "cuMemPoolImportPointer", "hipMemPoolImportPointer");
            // --- events --------------------------------------------------
            /// `cudaEventCreateWithFlags` / `cuEventCreate` (flags: [`event_flags`](crate::driver::event_flags)).
            event_create EventCreate(flags: u32) -> EventId
                => event_create("cudaEventCreateWithFlags", "cuEventCreate", "hipEventCreateWithFlags");
            /// `cudaEventRecord` / `cuEventRecord` on the default stream.
            event_record EventRecord(event: EventId) -> ()
                => event_record("cudaEventRecord", "cuEventRecord", "hipEventRecord");
            /// `cudaEventQuery` / `cuEventQuery`: `Ok` when complete, `NotReady` otherwise.
            event_query EventQuery(event: EventId) -> ()
                => event_query("cudaEventQuery", "cuEventQuery", "hipEventQuery");
            /// `cudaEventSynchronize` / `cuEventSynchronize`.
            event_synchronize EventSynchronize(event: EventId) -> ()
                => event_sync("cudaEventSynchronize", "cuEventSynchronize", "hipEventSynchronize");
            /// `cudaStreamWaitEvent` / `cuStreamWaitEvent` on the default stream.
            stream_wait_event StreamWaitEvent(event: EventId) -> ()
                => stream_wait("cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent");
            /// `cudaEventElapsedTime` / `cuEventElapsedTime`, in milliseconds.
            event_elapsed EventElapsed(start: EventId, end: EventId) -> f32
                => event_elapsed("cudaEventElapsedTime", "cuEventElapsedTime_v2", "hipEventElapsedTime");
            /// `cudaEventDestroy` / `cuEventDestroy`.
            event_destroy EventDestroy(event: EventId) -> ()
                => event_destroy("cudaEventDestroy", "cuEventDestroy", "hipEventDestroy");
            /// `cudaIpcGetEventHandle` / `cuIpcGetEventHandle`.
            ipc_get_event_handle IpcGetEventHandle(event: EventId, out: OutArg) -> IpcEventHandle
                => ipc_get_event("cudaIpcGetEventHandle", "cuIpcGetEventHandle", "hipIpcGetEventHandle");
            /// `cudaIpcOpenEventHandle` / `cuIpcOpenEventHandle`.
            ipc_open_event_handle IpcOpenEventHandle(handle: IpcEventHandle, out: OutArg) -> EventId
                => ipc_open_event("cudaIpcOpenEventHandle", "cuIpcOpenEventHandle", "hipIpcOpenEventHandle");
            // --- pointer attributes ------------------------------------
            /// `cuPointerGetAttribute(&value, attr, ptr)` (both dialects: UCX and
            /// the runtime's users call the driver function), the answer widened
            /// to `u64`; `hipPointerGetAttribute` on ROCm.
            pointer_attribute PointerAttribute(ptr: DevicePtr, attr: PointerAttribute) -> u64
                => pointer_attr("cuPointerGetAttribute", "cuPointerGetAttribute", "hipPointerGetAttribute");
            // --- processes -----------------------------------------------
            /// `fork()` after CUDA is initialised: the child makes `cudaMalloc` /
            /// `cuMemAlloc(size)`, reports its result code and `_exit`s; the call
            /// answers the child's result, and the calling process goes on.
            fork_child_alloc ForkChildAlloc(size: u64) -> ()
                => fork_child_call("fork + cudaMalloc", "fork + cuMemAlloc", "fork + hipMalloc");
            /// Long work on the default stream: a kernel that busy-waits `micros`
            /// microseconds (on the GPU's global timer), then writes `value` to
            /// `[ptr, ptr + len)`. Returns once launched, like any kernel launch.
            slow_fill SlowFill(ptr: DevicePtr, value: u8, len: u64, micros: u64) -> ()
                => slow_fill("cuLaunchKernel", "cuLaunchKernel", "hipModuleLaunchKernel");
            // --- streams and copies ----------------------------------------
            // A `stream` argument of 0 is the legacy default stream.
            /// `cudaStreamCreateWithFlags` / `cuStreamCreate` / `hipStreamCreateWithFlags`
            /// (flags: [`stream_flags`](crate::driver::stream_flags)).
            stream_create StreamCreate(flags: u32) -> StreamId
                => stream_create("cudaStreamCreateWithFlags", "cuStreamCreate", "hipStreamCreateWithFlags");
            /// `cudaStreamDestroy` / `cuStreamDestroy_v2` / `hipStreamDestroy`.
            stream_destroy StreamDestroy(stream: StreamId) -> ()
                => stream_destroy("cudaStreamDestroy", "cuStreamDestroy", "hipStreamDestroy");
            /// `cudaStreamSynchronize` / `cuStreamSynchronize` / `hipStreamSynchronize`.
            stream_synchronize StreamSynchronize(stream: StreamId) -> ()
                => stream_sync("cudaStreamSynchronize", "cuStreamSynchronize", "hipStreamSynchronize");
            /// `cudaStreamQuery` / `cuStreamQuery` / `hipStreamQuery`: `Ok` when
            /// all its work is complete, `NotReady` otherwise.
            stream_query StreamQuery(stream: StreamId) -> ()
                => stream_query("cudaStreamQuery", "cuStreamQuery", "hipStreamQuery");
            /// `cudaEventRecord` / `cuEventRecord` / `hipEventRecord` on `stream`.
            event_record_on EventRecordOn(event: EventId, stream: StreamId) -> ()
                => event_record("cudaEventRecord", "cuEventRecord", "hipEventRecord");
            /// `cudaStreamWaitEvent` / `cuStreamWaitEvent` / `hipStreamWaitEvent` of `stream`.
            stream_wait_event_on StreamWaitEventOn(stream: StreamId, event: EventId) -> ()
                => stream_wait("cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent");
            /// [`slow_fill`](Driver::slow_fill) launched on `stream`.
            slow_fill_on SlowFillOn(ptr: DevicePtr, value: u8, len: u64, micros: u64, stream: StreamId) -> ()
                => slow_fill("cuLaunchKernel", "cuLaunchKernel", "hipModuleLaunchKernel");
            /// Device-to-device copy: on the legacy default stream `cudaMemcpy`
            /// (`cudaMemcpyDeviceToDevice`) / `cuMemcpyDtoD_v2` / `hipMemcpyDtoD`,
            /// else `cudaMemcpyAsync` / `cuMemcpyDtoDAsync_v2` / `hipMemcpyDtoDAsync`.
            copy_device CopyDevice(dst: DevicePtr, src: DevicePtr, len: u64, stream: StreamId) -> ()
                => copy("cudaMemcpy", "cuMemcpyDtoD", "hipMemcpyDtoD");
            /// `cudaMemcpyPeer` / `cuMemcpyPeer` (primary contexts) / `hipMemcpyPeer`:
            /// `len` bytes from `src` on `src_device` to `dst` on `dst_device`.
            copy_peer CopyPeer(dst: DevicePtr, dst_device: DeviceOrdinal, src: DevicePtr, src_device: DeviceOrdinal, len: u64) -> ()
                => copy_peer("cudaMemcpyPeer", "cuMemcpyPeer", "hipMemcpyPeer");
            /// A kernel on the default stream writing a computed pattern to
            /// `[ptr, ptr + len)`: byte `i` is byte `i % width` of `pattern`
            /// (little-endian, `width` 1 to 8) plus `step * (i / width)`,
            /// modulo 256. Returns once launched, like any kernel launch.
            /// `cuLaunchKernel` in both dialects; `hipModuleLaunchKernel`.
            kernel_pattern KernelPattern(ptr: DevicePtr, len: u64, pattern: u64, width: u8, step: u8) -> ()
                => kernel_fill("cuLaunchKernel", "cuLaunchKernel", "hipModuleLaunchKernel");
        }
    };
}

/// An argument made owned: itself, or (passed by reference) the owned
/// type the table names after `as`.
#[doc(hidden)]
#[macro_export]
macro_rules! driver_call_to_owned {
    ($arg:expr) => {
        $arg
    };
    ($arg:expr, $owned:ty) => {
        <$owned>::from($arg)
    };
}

/// An owned argument passed to a `Driver` method (by reference where the
/// method borrows it).
#[doc(hidden)]
#[macro_export]
macro_rules! driver_call_pass {
    ($arg:expr) => {
        $arg
    };
    ($arg:expr, $owned:ty) => {
        &$arg
    };
}

/// A second copy of an owned argument (a clone where the table names an
/// owned type, since only by-reference arguments are not `Copy`).
#[doc(hidden)]
#[macro_export]
macro_rules! driver_call_duplicate {
    ($arg:expr) => {
        $arg
    };
    ($arg:expr, $owned:ty) => {
        $arg.clone()
    };
}

macro_rules! define_driver_trait_and_kinds {
    ($(
        $(#[$doc:meta])*
        $method:ident $Variant:ident $(( $( $(#[$attr:meta])* $arg:ident : $($ty:ident)? $(&[$elem:ident] as $owned:ty)? ),* ))? -> $ret:ty
            => $keyword:ident ($runtime:literal, $driver:literal, $hip:literal);
    )*) => {
        /// One OS process's view of the driver. Each method is one API call in
        /// the process's dialect; see the scenario language docs for the
        /// mapping. The methods come from the table in `calls.rs`; every one
        /// is required.
        #[cfg_attr(any(test, feature = "mock"), mockall::automock)]
        pub trait Driver {
            /// The dialect this process speaks; fixed for its lifetime.
            fn dialect(&self) -> Dialect;
            $(
                $(#[$doc])*
                fn $method(&mut self $($(, $arg: $($ty)? $(&[$elem])?)*)?) -> DriverResult<$ret>;
            )*
        }

        /// One kind of driver call (a [`Driver`] method), for fault points and
        /// call counts.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum CallKind {
            $( $(#[$doc])* $Variant, )*
        }

        impl CallKind {
            /// Every call, in table order.
            pub const ALL: &'static [CallKind] = &[$( CallKind::$Variant, )*];

            /// The `Driver` method's name (`ipc_open_mem_handle`).
            pub fn name(self) -> &'static str {
                match self {
                    $( CallKind::$Variant => stringify!($method), )*
                }
            }

            /// The call of that method name.
            pub fn from_name(name: &str) -> Option<CallKind> {
                CallKind::ALL.iter().copied().find(|k| k.name() == name)
            }

            /// The keyword of the scenario op that makes this call
            /// (`ipc_open`); rows that differ only by an option share one.
            pub fn keyword(self) -> &'static str {
                match self {
                    $( CallKind::$Variant => stringify!($keyword), )*
                }
            }

            /// The first call (in table order) whose op has that keyword.
            pub fn from_keyword(keyword: &str) -> Option<CallKind> {
                CallKind::ALL.iter().copied().find(|k| k.keyword() == keyword)
            }

            /// The API entry point this call makes in `dialect` (the first,
            /// where it makes several).
            pub fn api(self, dialect: Dialect) -> &'static str {
                let (runtime, driver, hip) = match self {
                    $( CallKind::$Variant => ($runtime, $driver, $hip), )*
                };
                match dialect {
                    Dialect::Runtime => runtime,
                    Dialect::Driver => driver,
                    Dialect::Hip => hip,
                }
            }
        }

        /// One driver call with its arguments (owned).
        #[derive(Debug, Clone, PartialEq)]
        pub enum Call {
            $(
                $(#[$doc])*
                $Variant $({ $(
                    #[doc = concat!("The `", stringify!($arg), "` argument.")]
                    $arg: $($ty)? $($owned)?
                ),* })?,
            )*
        }

        impl Call {
            /// The kind of this call (its [`Driver`] method).
            pub fn kind(&self) -> CallKind {
                match self {
                    $( Call::$Variant { .. } => CallKind::$Variant, )*
                }
            }

            /// Makes this call on `driver`: the one place that turns a call
            /// as data into the `Driver` method of its row.
            #[inline(always)]
            pub fn call_on<D: Driver + ?Sized>(self, driver: &mut D) -> DriverResult<Returned> {
                match self {
                    $(
                        Call::$Variant $({ $($arg),* })? => driver
                            .$method($($( driver_call_pass!($arg $(, $owned)?) ),*)?)
                            .map(IntoReturned::into_returned),
                    )*
                }
            }
        }
    };
}

/// What a successful [`Call`] returned: one variant per return type of the
/// table (a new return type needs a variant and an [`IntoReturned`] line).
#[derive(Debug, Clone, PartialEq)]
pub enum Returned {
    /// Nothing (`()`).
    Unit,
    /// A count (`device_count`).
    Count(u32),
    /// A signed integer (`device_attribute`, `can_access_peer`).
    Int(i64),
    /// A size in bytes (`vmm_granularity`).
    Size(u64),
    /// A context.
    Context(ContextId),
    /// The current context, if any.
    CurrentContext(Option<ContextId>),
    /// A device pointer.
    Ptr(DevicePtr),
    /// Bytes read.
    Bytes(Vec<u8>),
    /// An address range: base and size.
    Range(DevicePtr, u64),
    /// A pointer's attributes.
    PointerInfo(PointerInfo),
    /// A memory handle.
    IpcMemHandle(IpcMemHandle),
    /// A VMM allocation handle.
    VmmHandle(VmmHandle),
    /// A file descriptor.
    Fd(Fd),
    /// An event.
    Event(EventId),
    /// Milliseconds between two events.
    ElapsedMs(f32),
    /// An event handle.
    IpcEventHandle(IpcEventHandle),
    /// A memory pool.
    Pool(PoolId),
    /// A pool allocation's export data.
    PoolPtrExport(PoolPtrExport),
    /// A stream.
    Stream(StreamId),
}

/// A return type of the table as a [`Returned`].
pub trait IntoReturned {
    /// This value as a [`Returned`].
    fn into_returned(self) -> Returned;
}

macro_rules! into_returned {
    ($( $ty:ty: |$v:ident| $into:expr; )*) => {$(
        impl IntoReturned for $ty {
            fn into_returned(self) -> Returned {
                let $v = self;
                $into
            }
        }
    )*};
}

into_returned! {
    (): |_unit| Returned::Unit;
    u32: |n| Returned::Count(n);
    i64: |n| Returned::Int(n);
    u64: |n| Returned::Size(n);
    ContextId: |c| Returned::Context(c);
    Option<ContextId>: |c| Returned::CurrentContext(c);
    DevicePtr: |p| Returned::Ptr(p);
    Vec<u8>: |b| Returned::Bytes(b);
    (DevicePtr, u64): |r| Returned::Range(r.0, r.1);
    PointerInfo: |i| Returned::PointerInfo(i);
    IpcMemHandle: |h| Returned::IpcMemHandle(h);
    VmmHandle: |h| Returned::VmmHandle(h);
    Fd: |f| Returned::Fd(f);
    EventId: |e| Returned::Event(e);
    f32: |ms| Returned::ElapsedMs(ms);
    IpcEventHandle: |h| Returned::IpcEventHandle(h);
    PoolId: |p| Returned::Pool(p);
    PoolPtrExport: |x| Returned::PoolPtrExport(x);
    StreamId: |s| Returned::Stream(s);
}

use crate::driver::{
    ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, DriverResult, EventId, Fd, FreeKind,
    GranularityKind, HandleTypes, IpcEventHandle, IpcMemHandle, MemKind, OutArg, PointerAttribute,
    PointerInfo, PoolId, PoolPtrExport, ShareableHandleType, StreamId, VmmAccess, VmmHandle,
};
use crate::errors::Dialect;
use serde::{Deserialize, Serialize};

for_each_driver_call!(define_driver_trait_and_kinds);
