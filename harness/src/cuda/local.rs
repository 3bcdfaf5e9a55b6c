//! The real driver in this very process: the worker's request handler
//! called directly instead of over a socket. For code that must run in its
//! own OS process with CUDA loaded (a role of a [`crate::roles::RoleSet`]
//! on the real backend), where a worker per call would be a second process.
//!
//! Every call runs on the calling thread and uses its current context, as
//! in the worker; use one `LocalCudaDriver` from one thread.

use super::protocol::{Reply, Request, WireError};
use super::worker::Worker;
use crate::driver::{
    ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, Driver, DriverError, DriverResult,
    FreeKind, IpcMemHandle, MemKind, OutArg, PointerInfo,
};
use crate::errors::{ApiError, Dialect};

/// The CUDA driver, in-process, in one dialect (see [`super::worker`] for
/// the API calls behind each method).
pub struct LocalCudaDriver {
    dialect: Dialect,
    worker: Worker,
}

impl LocalCudaDriver {
    /// Loads CUDA, initialises it and makes `device` current (`Init`).
    pub fn new(dialect: Dialect, device: DeviceOrdinal) -> DriverResult<LocalCudaDriver> {
        let mut driver = LocalCudaDriver {
            dialect,
            worker: Worker::default(),
        };
        match driver.call(Request::Init { dialect, device })? {
            Reply::Unit => Ok(driver),
            r => Err(unexpected("init", r)),
        }
    }

    fn call(&mut self, request: Request) -> DriverResult<Reply> {
        let name = request.name();
        match self.worker.handle_guarded(request) {
            Ok(reply) => Ok(reply),
            Err(WireError::Api(code)) => {
                Err(DriverError::Api(ApiError::from_code(self.dialect, code)))
            }
            Err(WireError::Harness(m)) => Err(DriverError::Harness(format!("{name}: {m}"))),
        }
    }
}

fn unexpected(what: &str, reply: Reply) -> DriverError {
    DriverError::Harness(format!("unexpected answer to {what}: {reply:?}"))
}

impl Driver for LocalCudaDriver {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn device_count(&mut self) -> DriverResult<u32> {
        match self.call(Request::DeviceCount)? {
            Reply::Count(n) => Ok(n),
            r => Err(unexpected("device_count", r)),
        }
    }

    fn device_attribute(
        &mut self,
        device: DeviceOrdinal,
        attr: DeviceAttribute,
    ) -> DriverResult<i64> {
        match self.call(Request::DeviceAttribute { device, attr })? {
            Reply::Int(v) => Ok(v),
            r => Err(unexpected("device_attribute", r)),
        }
    }

    fn set_device(&mut self, device: DeviceOrdinal) -> DriverResult<()> {
        match self.call(Request::SetDevice { device })? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("set_device", r)),
        }
    }

    fn primary_context(&mut self, device: DeviceOrdinal) -> DriverResult<ContextId> {
        match self.call(Request::PrimaryContext { device })? {
            Reply::Context(c) => Ok(ContextId(c)),
            r => Err(unexpected("primary_context", r)),
        }
    }

    fn create_context(&mut self, device: DeviceOrdinal) -> DriverResult<ContextId> {
        match self.call(Request::CreateContext { device })? {
            Reply::Context(c) => Ok(ContextId(c)),
            r => Err(unexpected("create_context", r)),
        }
    }

    fn set_current_context(&mut self, ctx: ContextId) -> DriverResult<()> {
        match self.call(Request::SetCurrentContext { ctx: ctx.0 })? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("set_current_context", r)),
        }
    }

    fn current_context(&mut self) -> DriverResult<Option<ContextId>> {
        match self.call(Request::CurrentContext)? {
            Reply::CurrentContext(c) => Ok(c.map(ContextId)),
            r => Err(unexpected("current_context", r)),
        }
    }

    fn destroy_context(&mut self, ctx: ContextId) -> DriverResult<()> {
        match self.call(Request::DestroyContext { ctx: ctx.0 })? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("destroy_context", r)),
        }
    }

    fn alloc(&mut self, kind: MemKind, size: u64) -> DriverResult<DevicePtr> {
        match self.call(Request::Alloc { kind, size })? {
            Reply::Ptr(p) => Ok(DevicePtr(p)),
            r => Err(unexpected("alloc", r)),
        }
    }

    fn free(&mut self, kind: FreeKind, ptr: DevicePtr) -> DriverResult<()> {
        match self.call(Request::Free { kind, ptr: ptr.0 })? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("free", r)),
        }
    }

    fn memset(&mut self, ptr: DevicePtr, value: u8, len: u64) -> DriverResult<()> {
        match self.call(Request::Memset {
            ptr: ptr.0,
            value,
            len,
        })? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("memset", r)),
        }
    }

    fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> DriverResult<()> {
        match self.call(Request::Write {
            ptr: ptr.0,
            bytes: bytes.to_vec(),
        })? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("write", r)),
        }
    }

    fn read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        match self.call(Request::Read { ptr: ptr.0, len })? {
            Reply::Bytes(b) => Ok(b),
            r => Err(unexpected("read", r)),
        }
    }

    fn device_read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        match self.call(Request::DeviceRead { ptr: ptr.0, len })? {
            Reply::Bytes(b) => Ok(b),
            r => Err(unexpected("device_read", r)),
        }
    }

    fn address_range(&mut self, ptr: DevicePtr) -> DriverResult<(DevicePtr, u64)> {
        match self.call(Request::AddressRange { ptr: ptr.0 })? {
            Reply::Range { base, size } => Ok((DevicePtr(base), size)),
            r => Err(unexpected("address_range", r)),
        }
    }

    fn pointer_info(&mut self, ptr: DevicePtr) -> DriverResult<PointerInfo> {
        match self.call(Request::PointerInfo { ptr: ptr.0 })? {
            Reply::PointerInfo(p) => Ok(p),
            r => Err(unexpected("pointer_info", r)),
        }
    }

    fn ipc_get_mem_handle(&mut self, ptr: DevicePtr, out: OutArg) -> DriverResult<IpcMemHandle> {
        match self.call(Request::IpcGetMemHandle { ptr: ptr.0, out })? {
            Reply::Handle(h) => Ok(h),
            r => Err(unexpected("ipc_get_mem_handle", r)),
        }
    }

    fn ipc_open_mem_handle(
        &mut self,
        handle: IpcMemHandle,
        flags: u32,
        out: OutArg,
    ) -> DriverResult<DevicePtr> {
        match self.call(Request::IpcOpenMemHandle { handle, flags, out })? {
            Reply::Ptr(p) => Ok(DevicePtr(p)),
            r => Err(unexpected("ipc_open_mem_handle", r)),
        }
    }

    fn ipc_close_mem_handle(&mut self, ptr: DevicePtr) -> DriverResult<()> {
        match self.call(Request::IpcCloseMemHandle { ptr: ptr.0 })? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("ipc_close_mem_handle", r)),
        }
    }

    fn synchronize(&mut self) -> DriverResult<()> {
        match self.call(Request::Synchronize)? {
            Reply::Unit => Ok(()),
            r => Err(unexpected("synchronize", r)),
        }
    }
}
