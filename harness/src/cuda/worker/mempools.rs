//! The worker's memory-pool requests (`pool_*` rows of the call table):
//! `cudaMemPool*` / `cuMemPool*` (`cudaMemPoolGetAccess` among them), `cudaMallocFromPoolAsync` /
//! `cuMemAllocFromPoolAsync` and `cudaFreeAsync` / `cuMemFreeAsync` on the
//! default stream, each followed by a stream synchronize so that the pointer
//! is usable (or gone) when the request returns.

use crate::cuda::ffi::{self, DevPtr, Handle, RawPoolPtrExport};
use crate::cuda::protocol::{Reply, Request, Response, WireError};
use crate::driver::{DevicePtr, Fd, HandleTypes, PoolId, PoolPtrExport, VmmAccess};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

/// `cudaMemAllocationTypePinned` / `CU_MEM_ALLOCATION_TYPE_PINNED`.
const ALLOCATION_TYPE_PINNED: c_int = 1;
/// `cudaMemLocationTypeDevice` / `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_TYPE_DEVICE: c_int = 1;
/// `cudaMemHandleTypePosixFileDescriptor` / `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_TYPE_POSIX_FD: c_int = 1;

fn pool_props(device: u32, types: HandleTypes) -> ffi::MemPoolProps {
    ffi::MemPoolProps {
        alloc_type: ALLOCATION_TYPE_PINNED,
        handle_types: types.0 as c_int,
        location_type: LOCATION_TYPE_DEVICE,
        location_id: device as c_int,
        win32_security_attributes: null_mut(),
        max_size: 0,
        usage: 0,
        reserved: [0; 54],
    }
}

fn as_ptr(ptr: u64) -> *mut c_void {
    ptr as usize as *mut c_void
}

fn cu_device(ordinal: u32) -> Result<c_int, WireError> {
    let mut dev: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { ffi::cuDeviceGet(&mut dev, ordinal as c_int)? };
    Ok(dev)
}

/// Which API a worker process speaks (its dialect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolApi {
    Runtime,
    Driver,
}

fn pool(p: PoolId) -> Handle {
    p.0 as usize as Handle
}

/// Runs one memory-pool request in dialect `d`.
///
/// # Safety
/// As `Worker::call`: pointers are local out-pointers, or handles and
/// device addresses the scenario chose, which the API validates.
pub(crate) unsafe fn call(d: PoolApi, request: Request) -> Response {
    use PoolApi::{Driver, Runtime};
    // SAFETY (whole body): see the function's contract.
    unsafe {
        match request {
            Request::PoolCreate { device, types } => {
                let props = pool_props(device, types);
                let mut p: Handle = null_mut();
                match d {
                    Runtime => ffi::cudaMemPoolCreate(&mut p, &props)?,
                    Driver => ffi::cuMemPoolCreate(&mut p, &props)?,
                }
                Ok(Reply::Pool(p as usize as u64))
            }
            Request::PoolDefault { device } => {
                let mut p: Handle = null_mut();
                match d {
                    Runtime => ffi::cudaDeviceGetDefaultMemPool(&mut p, device as c_int)?,
                    Driver => {
                        let dev = cu_device(device)?;
                        ffi::cuDeviceGetDefaultMemPool(&mut p, dev)?
                    }
                }
                Ok(Reply::Pool(p as usize as u64))
            }
            Request::PoolDestroy { pool: p } => {
                match d {
                    Runtime => ffi::cudaMemPoolDestroy(pool(p))?,
                    Driver => ffi::cuMemPoolDestroy(pool(p))?,
                }
                Ok(Reply::Unit)
            }
            Request::PoolExport { pool: p } => {
                let mut fd: c_int = -1;
                let out: *mut c_void = (&mut fd as *mut c_int).cast();
                match d {
                    Runtime => ffi::cudaMemPoolExportToShareableHandle(
                        out,
                        pool(p),
                        HANDLE_TYPE_POSIX_FD,
                        0,
                    )?,
                    Driver => ffi::cuMemPoolExportToShareableHandle(
                        out,
                        pool(p),
                        HANDLE_TYPE_POSIX_FD,
                        0,
                    )?,
                }
                Ok(Reply::Fd(fd))
            }
            Request::PoolImport { fd: Fd(fd) } => {
                let mut p: Handle = null_mut();
                // The descriptor travels in the pointer-sized argument.
                let os_handle = fd as isize as usize as *mut c_void;
                match d {
                    Runtime => ffi::cudaMemPoolImportFromShareableHandle(
                        &mut p,
                        os_handle,
                        HANDLE_TYPE_POSIX_FD,
                        0,
                    )?,
                    Driver => ffi::cuMemPoolImportFromShareableHandle(
                        &mut p,
                        os_handle,
                        HANDLE_TYPE_POSIX_FD,
                        0,
                    )?,
                }
                Ok(Reply::Pool(p as usize as u64))
            }
            Request::PoolSetAccess {
                pool: p,
                device,
                access,
            } => {
                let desc = ffi::MemAccessDesc {
                    location_type: LOCATION_TYPE_DEVICE,
                    location_id: device as c_int,
                    flags: match access {
                        VmmAccess::None => ffi::vmm::ACCESS_NONE,
                        VmmAccess::Read => ffi::vmm::ACCESS_READ,
                        VmmAccess::ReadWrite => ffi::vmm::ACCESS_READWRITE,
                    },
                };
                match d {
                    Runtime => ffi::cudaMemPoolSetAccess(pool(p), &desc, 1)?,
                    Driver => ffi::cuMemPoolSetAccess(pool(p), &desc, 1)?,
                }
                Ok(Reply::Unit)
            }
            Request::PoolGetAccess { pool: p, device } => {
                let mut flags: c_int = 0;
                let mut location = ffi::MemLocation {
                    location_type: LOCATION_TYPE_DEVICE,
                    location_id: device as c_int,
                };
                match d {
                    Runtime => ffi::cudaMemPoolGetAccess(&mut flags, pool(p), &mut location)?,
                    Driver => ffi::cuMemPoolGetAccess(&mut flags, pool(p), &mut location)?,
                }
                // cudaMemAccessFlags: 0 none, 1 read, 3 read-write.
                Ok(Reply::Int(i64::from(flags)))
            }
            Request::PoolAlloc { pool: p, size } => {
                let ptr = match d {
                    Runtime => {
                        let mut ptr: *mut c_void = null_mut();
                        ffi::cudaMallocFromPoolAsync(&mut ptr, size as usize, pool(p), null_mut())?;
                        ffi::cudaStreamSynchronize(null_mut())?;
                        ptr as usize as u64
                    }
                    Driver => {
                        let mut ptr: DevPtr = 0;
                        ffi::cuMemAllocFromPoolAsync(&mut ptr, size as usize, pool(p), null_mut())?;
                        ffi::cuStreamSynchronize(null_mut())?;
                        ptr
                    }
                };
                Ok(Reply::Ptr(ptr))
            }
            Request::PoolFree {
                ptr: DevicePtr(ptr),
            } => {
                match d {
                    Runtime => {
                        ffi::cudaFreeAsync(as_ptr(ptr), null_mut())?;
                        ffi::cudaStreamSynchronize(null_mut())?
                    }
                    Driver => {
                        ffi::cuMemFreeAsync(ptr, null_mut())?;
                        ffi::cuStreamSynchronize(null_mut())?
                    }
                }
                Ok(Reply::Unit)
            }
            Request::PoolExportPtr {
                ptr: DevicePtr(ptr),
            } => {
                let mut data: RawPoolPtrExport = [0; 64];
                match d {
                    Runtime => ffi::cudaMemPoolExportPointer(&mut data, as_ptr(ptr))?,
                    Driver => ffi::cuMemPoolExportPointer(&mut data, ptr)?,
                }
                Ok(Reply::PoolPtrExport(PoolPtrExport(data)))
            }
            Request::PoolImportPtr { pool: p, data } => {
                let mut raw: RawPoolPtrExport = data.0;
                let ptr = match d {
                    Runtime => {
                        let mut ptr: *mut c_void = null_mut();
                        ffi::cudaMemPoolImportPointer(&mut ptr, pool(p), &mut raw)?;
                        ptr as usize as u64
                    }
                    Driver => {
                        let mut ptr: DevPtr = 0;
                        ffi::cuMemPoolImportPointer(&mut ptr, pool(p), &mut raw)?;
                        ptr
                    }
                };
                Ok(Reply::Ptr(ptr))
            }
            other => Err(WireError::Harness(format!(
                "{} is not a memory-pool request",
                other.name()
            ))),
        }
    }
}
