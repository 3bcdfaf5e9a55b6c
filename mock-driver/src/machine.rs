//! The `Machine` and per-process `Driver` views over one shared `World`.
//!
//! All processes of a machine live in one host process, so each view holds
//! an `Rc<RefCell<World>>`: calls never nest, so the borrow never conflicts.

use crate::semantics::{Switch, UnmapQueuedWork};
use crate::world::{Access, Fail, SimResult, World};
use ipc_harness::{
    ApiError, ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, Dialect, Driver, DriverError,
    DriverResult, ErrorKind, EventId, Fd, FreeKind, GranularityKind, HandleTypes, Hazard,
    HazardKind, IpcEventHandle, IpcMemHandle, Machine, MemKind, OutArg, PointerInfo, PoolId,
    PoolPtrExport, ProcessIndex, ProcessLoss, ShareableHandleType, StreamId, VmmAccess, VmmHandle,
};
use std::cell::RefCell;
use std::rc::Rc;

/// One simulated process's driver.
pub struct SimProcess {
    world: Rc<RefCell<World>>,
    /// `None` for the stand-in returned for a process index that does not exist.
    index: Option<ProcessIndex>,
    dialect: Dialect,
}

impl SimProcess {
    /// Run one API call: refuse on an exited process, honour a sticky error,
    /// and turn the simulator's error kinds into this dialect's codes.
    fn call<T>(&self, f: impl FnOnce(&mut World, ProcessIndex) -> SimResult<T>) -> DriverResult<T> {
        self.call_with(Sticky::Reports, f)
    }

    /// `call` for an API call that a sticky error does not stop: it answers as
    /// if the process had not faulted (mem.context.sticky-error-spared-calls):
    /// `cuCtxSetCurrent` (also onto the very context that faulted),
    /// `cuDevicePrimaryCtxRetain` (while `cuCtxCreate` says 700),
    /// `cuPointerGetAttribute` (a closed IPC pointer reads as unregistered).
    fn call_spared<T>(
        &self,
        f: impl FnOnce(&mut World, ProcessIndex) -> SimResult<T>,
    ) -> DriverResult<T> {
        self.call_with(Sticky::Spared, f)
    }

    /// `call` for an API call that neither waits for the device nor
    /// launches work on it: it reports a sticky error, but a fault the
    /// process has not been told of yet does not stop it
    /// (vmm.fault.unmap-with-work-queued: `cuIpcOpenMemHandle`,
    /// `cuMemGetAddressRange`, `cuEventCreate`, `cuIpcGetEventHandle` and
    /// `cudaMallocManaged` answered as usual between such a fault and its
    /// report).
    fn call_host<T>(
        &self,
        f: impl FnOnce(&mut World, ProcessIndex) -> SimResult<T>,
    ) -> DriverResult<T> {
        self.call_with(Sticky::HostOnly, f)
    }

    fn call_with<T>(
        &self,
        mode: Sticky,
        f: impl FnOnce(&mut World, ProcessIndex) -> SimResult<T>,
    ) -> DriverResult<T> {
        let Some(p) = self.index else {
            return Err(DriverError::Harness("no such process".into()));
        };
        let mut w = self.world.borrow_mut();
        if w.procs[p].exited {
            return Err(DriverError::Harness("process exited".into()));
        }
        if let (Some(kind), Sticky::Reports | Sticky::HostOnly) = (w.procs[p].sticky, mode) {
            return Err(ApiError::new(self.dialect, kind).into());
        }
        w.procs[p].calls += 1;
        w.tick();
        w.host_order(p);
        let unseen = w.procs[p].unseen_fault.filter(|_| mode == Sticky::Reports);
        match f(&mut w, p) {
            // A call's own argument errors come before a fault it has not
            // been told of (a read of the unmapped range is InvalidValue:
            // vmm.fault.unmap-with-work-queued); otherwise it reports it.
            Err(Fail::Api(kind)) if unseen.is_none() || kind == ErrorKind::InvalidValue => {
                // A contained fault is sticky by its definition
                // (pool.lifetime.import-after-exporter-free-peer).
                if (kind == ErrorKind::IllegalAddress && w.sem.sticky_errors == Switch::On)
                    || kind == ErrorKind::Contained
                {
                    w.procs[p].sticky = Some(kind);
                }
                Err(ApiError::new(self.dialect, kind).into())
            }
            Ok(_) | Err(Fail::Api(_)) if unseen.is_some() => {
                let kind = unseen.unwrap_or(ErrorKind::LaunchFailed);
                w.procs[p].unseen_fault = None;
                w.procs[p].sticky = Some(kind);
                Err(ApiError::new(self.dialect, kind).into())
            }
            Ok(v) => Ok(v),
            Err(Fail::Api(kind)) => Err(ApiError::new(self.dialect, kind).into()),
            Err(Fail::Harness(m)) => Err(DriverError::Harness(m)),
            Err(Fail::Crash { signal, detail }) => {
                w.crash_process(p);
                Err(DriverError::Lost(ProcessLoss::Crashed {
                    signal: Some(signal),
                    exit_code: None,
                    detail,
                }))
            }
        }
    }

    /// Note device work the call just queued on `[ptr, ptr + len)`, for a
    /// `cuMemUnmap` of the range right after it
    /// (vmm.fault.unmap-with-work-queued).
    fn queued_work(&self, ptr: u64, len: u64) {
        if let Some(p) = self.index {
            let mut w = self.world.borrow_mut();
            let proc = &mut w.procs[p];
            proc.queued_work = Some((proc.calls, ptr, ptr.saturating_add(len)));
        }
    }
}

/// How one call meets a sticky error (`SimProcess::call_with`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sticky {
    /// Reports it, and reports a fault the process has not been told of.
    Reports,
    /// Answers as if the process had not faulted.
    Spared,
    /// Reports it, but answers as usual before a fault is reported.
    HostOnly,
}

impl Driver for SimProcess {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn device_count(&mut self) -> DriverResult<u32> {
        self.call(|w, p| Ok(w.device_count(p)))
    }

    fn device_attribute(
        &mut self,
        device: DeviceOrdinal,
        attr: DeviceAttribute,
    ) -> DriverResult<i64> {
        self.call(|w, p| w.device_attribute(p, device, attr))
    }

    fn set_device(&mut self, device: DeviceOrdinal) -> DriverResult<()> {
        self.call(|w, p| w.set_device(p, device))
    }

    fn primary_context(&mut self, device: DeviceOrdinal) -> DriverResult<ContextId> {
        self.call_spared(|w, p| w.primary_context(p, device).map(ContextId))
    }

    fn create_context(&mut self, device: DeviceOrdinal) -> DriverResult<ContextId> {
        self.call(|w, p| w.create_context(p, device).map(ContextId))
    }

    fn set_current_context(&mut self, ctx: ContextId) -> DriverResult<()> {
        self.call_spared(|w, p| w.set_current_context(p, ctx.0))
    }

    fn current_context(&mut self) -> DriverResult<Option<ContextId>> {
        self.call(|w, p| Ok(w.current_context(p).map(ContextId)))
    }

    fn destroy_context(&mut self, ctx: ContextId) -> DriverResult<()> {
        // Checks its argument before the sticky error (`destroy_context`).
        self.call_spared(|w, p| w.destroy_context(p, ctx.0))
    }

    fn alloc(&mut self, kind: MemKind, size: u64) -> DriverResult<DevicePtr> {
        self.call_host(|w, p| w.alloc(p, kind, size).map(DevicePtr))
    }

    fn free(&mut self, kind: FreeKind, ptr: DevicePtr) -> DriverResult<()> {
        self.call(|w, p| {
            // A free the driver refuses returns at once; one it accepts
            // waits for the process's work first
            // (mem.lifetime.refused-free-does-not-wait).
            let action = w.free_action(p, kind, ptr.0);
            if action.waits() {
                w.drain_all(p);
            }
            w.free_as(p, kind, ptr.0, action)
        })
    }

    fn memset(&mut self, ptr: DevicePtr, value: u8, len: u64) -> DriverResult<()> {
        // Asynchronous with the host: no drain; its bytes land when the
        // legacy stream reaches it (`World::memset`).
        self.call(|w, p| w.memset(p, ptr.0, value, len))?;
        self.queued_work(ptr.0, len);
        Ok(())
    }

    fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> DriverResult<()> {
        self.call(|w, p| {
            w.drain(p);
            w.write(p, ptr.0, bytes)
        })
    }

    fn read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        // The copy waits for the legacy stream once its pointer passed the
        // checks (`World::read`): one refused there returns at once.
        self.call(|w, p| w.read(p, ptr.0, len, Access::Copy))
    }

    fn device_read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        self.call(|w, p| {
            w.drain(p);
            w.kernel_read(p, ptr.0, len)
        })
    }

    fn address_range(&mut self, ptr: DevicePtr) -> DriverResult<(DevicePtr, u64)> {
        self.call_host(|w, p| w.address_range(p, ptr.0).map(|(b, s)| (DevicePtr(b), s)))
    }

    fn pointer_info(&mut self, ptr: DevicePtr) -> DriverResult<PointerInfo> {
        // Both APIs answer after a sticky error
        // (mem.context.sticky-error-spared-calls).
        self.call_spared(|w, p| Ok(w.pointer_info(p, ptr.0)))
    }

    fn synchronize(&mut self) -> DriverResult<()> {
        // Waits for this process's stream; the call still checks the process.
        self.call(|w, p| {
            w.current_ctx(p)?;
            w.drain_all(p);
            Ok(())
        })
    }

    fn ipc_get_mem_handle(&mut self, ptr: DevicePtr, out: OutArg) -> DriverResult<IpcMemHandle> {
        self.call(|w, p| w.ipc_get(p, ptr.0, out))
    }

    fn ipc_open_mem_handle(
        &mut self,
        handle: IpcMemHandle,
        flags: u32,
        out: OutArg,
    ) -> DriverResult<DevicePtr> {
        // Flags it refuses are InvalidValue before a sticky error is reported
        // (mem.flags.refused-before-sticky-error).
        let sticky = self.index.is_some_and(|p| {
            self.world
                .borrow()
                .procs
                .get(p)
                .is_some_and(|x| x.sticky.is_some())
        });
        if sticky && !self.world.borrow().open_flags_ok(flags) {
            return self.call_spared(|_, _| Err(ErrorKind::InvalidValue.into()));
        }
        self.call_host(|w, p| w.ipc_open(p, &handle, flags, out).map(DevicePtr))
    }

    fn ipc_close_mem_handle(&mut self, ptr: DevicePtr) -> DriverResult<()> {
        self.call(|w, p| w.close(p, ptr.0))
    }

    // --- VMM ---
    // A sticky error spares every VMM call
    // (vmm.fault.calls-after-kernel-fault): cuMemCreate,
    // cuMemExportToShareableHandle, cuMemImportFromShareableHandle,
    // cuMemAddressReserve, cuMemMap, cuMemSetAccess and cuMemUnmap answer
    // after a kernel fault; cuMemRelease, cuMemAddressFree and the granularity
    // query are unmeasured and taken to be alike. The harness's own descriptor
    // calls are no driver calls at all.
    fn vmm_granularity(
        &mut self,
        device: DeviceOrdinal,
        types: HandleTypes,
        kind: GranularityKind,
    ) -> DriverResult<u64> {
        self.call_spared(|w, p| w.vmm_granularity(p, device, types, kind))
    }

    fn vmm_create(
        &mut self,
        device: DeviceOrdinal,
        size: u64,
        types: HandleTypes,
    ) -> DriverResult<VmmHandle> {
        self.call_spared(|w, p| w.vmm_create(p, device, size, types).map(VmmHandle))
    }

    fn vmm_export(&mut self, handle: VmmHandle, ty: ShareableHandleType) -> DriverResult<Fd> {
        self.call_spared(|w, p| w.vmm_export(p, handle.0, ty).map(Fd))
    }

    fn vmm_import(&mut self, fd: Fd) -> DriverResult<VmmHandle> {
        self.call_spared(|w, p| w.vmm_import(p, fd).map(VmmHandle))
    }

    fn vmm_reserve(&mut self, size: u64) -> DriverResult<DevicePtr> {
        self.call_spared(|w, p| w.vmm_reserve(p, size).map(DevicePtr))
    }

    fn vmm_map(
        &mut self,
        va: DevicePtr,
        size: u64,
        offset: u64,
        handle: VmmHandle,
    ) -> DriverResult<()> {
        self.call_spared(|w, p| w.vmm_map(p, va.0, size, offset, handle.0))
    }

    fn vmm_set_access(
        &mut self,
        va: DevicePtr,
        size: u64,
        device: DeviceOrdinal,
        access: VmmAccess,
    ) -> DriverResult<()> {
        self.call_spared(|w, p| w.vmm_set_access(p, va.0, size, device, access))
    }

    fn vmm_unmap(&mut self, va: DevicePtr, size: u64) -> DriverResult<()> {
        self.call_spared(|w, p| {
            // Work the previous call queued on the range is still running
            // (vmm.fault.unmap-with-work-queued).
            let proc = &w.procs[p];
            let queued = proc.queued_work.is_some_and(|(call, start, end)| {
                call + 1 == proc.calls && start < va.0.saturating_add(size) && va.0 < end
            });
            w.vmm_unmap(p, va.0, size)?;
            if queued {
                // Nothing waited for the work: a race on the GPU, whichever
                // outcome the semantics pick (vmm.fault.unmap-with-work-queued).
                w.hazard(
                    HazardKind::UnmapWithWorkQueued,
                    p,
                    format!(
                        "cuMemUnmap of {:#x} (+{size}) right after work was queued on the range, with nothing waiting for it",
                        va.0
                    ),
                );
                if w.sem.unmap_queued_work == UnmapQueuedWork::Faults {
                    w.procs[p].unseen_fault = Some(ErrorKind::LaunchFailed);
                }
            }
            Ok(())
        })
    }

    fn vmm_address_free(&mut self, va: DevicePtr, size: u64) -> DriverResult<()> {
        self.call_spared(|w, p| w.vmm_address_free(p, va.0, size))
    }

    fn vmm_release(&mut self, handle: VmmHandle) -> DriverResult<()> {
        self.call_spared(|w, p| w.vmm_release(p, handle.0))
    }

    fn fd_close(&mut self, fd: Fd) -> DriverResult<()> {
        self.call_spared(|w, p| w.fd_close(p, fd))
    }

    fn fd_open_null_device(&mut self) -> DriverResult<Fd> {
        self.call_spared(|w, p| w.fd_open_null_device(p).map(Fd))
    }

    fn can_access_peer(&mut self, device: DeviceOrdinal, peer: DeviceOrdinal) -> DriverResult<i64> {
        self.call(|w, p| w.can_access_peer(p, device, peer))
    }

    fn enable_peer_access(&mut self, peer: DeviceOrdinal) -> DriverResult<()> {
        self.call(|w, p| w.enable_peer_access(p, peer))
    }

    fn event_create(&mut self, flags: u32) -> DriverResult<EventId> {
        self.call_host(|w, p| w.event_create(p, flags))
    }

    fn event_record(&mut self, event: EventId) -> DriverResult<()> {
        self.call(|w, p| w.event_record(p, event))
    }

    fn event_query(&mut self, event: EventId) -> DriverResult<()> {
        self.call(|w, p| w.event_query(p, event))
    }

    fn event_synchronize(&mut self, event: EventId) -> DriverResult<()> {
        // The NULL event is refused before a sticky error is reported
        // (event.null.synchronize-after-fault).
        if event == EventId::NULL {
            return self.call_spared(|w, p| w.event_synchronize(p, event));
        }
        self.call(|w, p| w.event_synchronize(p, event))
    }

    fn stream_wait_event(&mut self, event: EventId) -> DriverResult<()> {
        self.call(|w, p| w.stream_wait_event(p, event))
    }

    fn event_elapsed(&mut self, start: EventId, end: EventId) -> DriverResult<f32> {
        self.call(|w, p| w.event_elapsed(p, start, end))
    }

    fn event_destroy(&mut self, event: EventId) -> DriverResult<()> {
        self.call(|w, p| w.event_destroy(p, event))
    }

    fn ipc_get_event_handle(
        &mut self,
        event: EventId,
        out: OutArg,
    ) -> DriverResult<IpcEventHandle> {
        self.call_host(|w, p| w.ipc_get_event_handle(p, event, out))
    }

    fn ipc_open_event_handle(
        &mut self,
        handle: IpcEventHandle,
        out: OutArg,
    ) -> DriverResult<EventId> {
        self.call(|w, p| w.ipc_open_event_handle(p, &handle, out))
    }

    fn pointer_attribute(
        &mut self,
        ptr: DevicePtr,
        attr: ipc_harness::PointerAttribute,
    ) -> DriverResult<u64> {
        // Answers after a sticky error, like `pointer_info`
        // (mem.context.sticky-error-spared-calls).
        self.call_spared(|w, p| w.pointer_attribute(p, ptr.0, attr))
    }

    fn fork_child_alloc(&mut self, size: u64) -> DriverResult<()> {
        // The child of a fork is a process of its own: its parent's sticky
        // error is not its (vmm.fault.unmap-with-work-queued: a forked
        // child's call answered its own error after the parent's 719).
        self.call_spared(|w, p| w.fork_child_alloc(p, size))
    }

    fn pidfd_getfd(&mut self, pid: u32, fd: Fd) -> DriverResult<Fd> {
        // A system call, not a driver call: a sticky error does not stop it.
        self.call_spared(|w, p| w.pidfd_getfd(p, pid, fd).map(Fd))
    }

    fn slow_fill(&mut self, ptr: DevicePtr, value: u8, len: u64, micros: u64) -> DriverResult<()> {
        self.call(|w, p| w.slow_fill(p, ptr.0, value, len, micros))
    }

    fn kernel_pattern(
        &mut self,
        ptr: DevicePtr,
        len: u64,
        pattern: u64,
        width: u8,
        step: u8,
    ) -> DriverResult<()> {
        let content = crate::event_state::KernelBytes::new(pattern, width, step);
        self.call(|w, p| w.kernel_pattern(p, ptr.0, len, content))?;
        self.queued_work(ptr.0, len);
        Ok(())
    }

    // --- memory pools (`pools.rs`) ---
    fn pool_create(&mut self, device: DeviceOrdinal, types: HandleTypes) -> DriverResult<PoolId> {
        // Creating, exporting and destroying a pool answer after a sticky
        // error, as the VMM calls do (vmm.fault.unmap-with-work-queued: all
        // three answered after a 719).
        self.call_spared(|w, p| w.pool_create(p, device, types).map(PoolId))
    }

    fn pool_default(&mut self, device: DeviceOrdinal) -> DriverResult<PoolId> {
        self.call(|w, p| w.pool_default(p, device).map(PoolId))
    }

    fn pool_destroy(&mut self, pool: PoolId) -> DriverResult<()> {
        self.call_spared(|w, p| w.pool_destroy(p, pool.0))
    }

    fn pool_export(&mut self, pool: PoolId) -> DriverResult<Fd> {
        self.call_spared(|w, p| w.pool_export(p, pool.0).map(Fd))
    }

    fn pool_import(&mut self, fd: Fd) -> DriverResult<PoolId> {
        // Answers after a sticky error, as creating and exporting one do
        // (pool.import.after-sticky-error).
        self.call_spared(|w, p| w.pool_import(p, fd).map(PoolId))
    }

    fn pool_set_access(
        &mut self,
        pool: PoolId,
        device: DeviceOrdinal,
        access: VmmAccess,
    ) -> DriverResult<()> {
        self.call(|w, p| w.pool_set_access(p, pool.0, device, access))
    }

    fn pool_get_access(&mut self, pool: PoolId, device: DeviceOrdinal) -> DriverResult<u64> {
        // Answers after a sticky error (pool.import.after-sticky-error).
        self.call_spared(|w, p| w.pool_get_access(p, pool.0, device))
    }

    fn pool_alloc(&mut self, pool: PoolId, size: u64) -> DriverResult<DevicePtr> {
        self.call(|w, p| w.pool_alloc(p, pool.0, size).map(DevicePtr))
    }

    fn pool_free(&mut self, ptr: DevicePtr) -> DriverResult<()> {
        self.call(|w, p| w.pool_free(p, ptr.0))
    }

    fn pool_export_ptr(&mut self, ptr: DevicePtr) -> DriverResult<PoolPtrExport> {
        self.call(|w, p| w.pool_export_ptr(p, ptr.0))
    }

    fn pool_import_ptr(&mut self, pool: PoolId, data: PoolPtrExport) -> DriverResult<DevicePtr> {
        // Answers after a sticky error; the memory it maps then faults like
        // any other (pool.import.after-sticky-error).
        self.call_spared(|w, p| w.pool_import_ptr(p, pool.0, &data).map(DevicePtr))
    }

    // --- streams and copies (streams.rs) ---
    fn stream_create(&mut self, flags: u32) -> DriverResult<StreamId> {
        self.call(|w, p| w.stream_create(p, flags))
    }

    fn stream_destroy(&mut self, stream: StreamId) -> DriverResult<()> {
        self.call(|w, p| w.stream_destroy(p, stream))
    }

    fn stream_synchronize(&mut self, stream: StreamId) -> DriverResult<()> {
        self.call(|w, p| w.stream_synchronize(p, stream))
    }

    fn stream_query(&mut self, stream: StreamId) -> DriverResult<()> {
        self.call(|w, p| w.stream_query(p, stream))
    }

    fn event_record_on(&mut self, event: EventId, stream: StreamId) -> DriverResult<()> {
        self.call(|w, p| w.event_record_on(p, event, stream))
    }

    fn stream_wait_event_on(&mut self, stream: StreamId, event: EventId) -> DriverResult<()> {
        self.call(|w, p| w.stream_wait_event_on(p, stream, event))
    }

    fn slow_fill_on(
        &mut self,
        ptr: DevicePtr,
        value: u8,
        len: u64,
        micros: u64,
        stream: StreamId,
    ) -> DriverResult<()> {
        self.call(|w, p| w.slow_fill_on(p, ptr.0, value, len, micros, stream))
    }

    fn copy_device(
        &mut self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamId,
    ) -> DriverResult<()> {
        self.call(|w, p| w.copy_device(p, dst.0, src.0, len, stream))?;
        self.queued_work(dst.0, len);
        Ok(())
    }

    fn copy_peer(
        &mut self,
        dst: DevicePtr,
        dst_device: DeviceOrdinal,
        src: DevicePtr,
        src_device: DeviceOrdinal,
        len: u64,
    ) -> DriverResult<()> {
        self.call(|w, p| w.copy_peer(p, dst.0, dst_device, src.0, src_device, len))
    }
}

/// A running simulated machine.
pub struct SimMachine {
    world: Rc<RefCell<World>>,
    procs: Vec<SimProcess>,
    /// Answers for out-of-range process indexes instead of panicking.
    nobody: SimProcess,
}

impl SimMachine {
    pub(crate) fn new(world: World) -> SimMachine {
        let dialect = world.dialect;
        let n = world.procs.len();
        let world = Rc::new(RefCell::new(world));
        let procs = (0..n)
            .map(|i| SimProcess {
                world: Rc::clone(&world),
                index: Some(i),
                dialect,
            })
            .collect();
        let nobody = SimProcess {
            world: Rc::clone(&world),
            index: None,
            dialect,
        };
        SimMachine {
            world,
            procs,
            nobody,
        }
    }

    /// Every process still running exits as at the end of a scenario (no
    /// leaks logged), releasing all it holds.
    pub(crate) fn tear_down(&self) {
        let mut w = self.world.borrow_mut();
        for p in 0..w.procs.len() {
            if !w.procs[p].exited {
                w.host_sees_ended_work(p);
            }
            w.exit_process(p, false);
        }
    }

    #[cfg(test)]
    pub(crate) fn world(&self) -> std::cell::Ref<'_, World> {
        self.world.borrow()
    }

    /// How the hosts of the processes are ordered with one another
    /// (`HostOrder::Sequential` unless set): a judge of a real program's
    /// trace sets `HostOrder::Explicit` before the first call and adds an
    /// edge ([`SimMachine::host_edge`]) wherever its processes talk.
    pub fn set_host_order(&self, hosts: crate::order::HostOrder) {
        self.world.borrow_mut().order.hosts = hosts;
    }

    /// `to`'s later calls are ordered after everything `from`'s host saw
    /// complete (a message from `from` that `to` received).
    pub fn host_edge(&self, from: ProcessIndex, to: ProcessIndex) {
        let mut w = self.world.borrow_mut();
        if from < w.procs.len() && to < w.procs.len() {
            w.host_edge(from, to);
        }
    }

    /// The process's name as declared in the machine spec.
    pub fn process_name(&self, process: ProcessIndex) -> Option<String> {
        self.world
            .borrow()
            .procs
            .get(process)
            .map(|p| p.name.clone())
    }
}

impl Machine for SimMachine {
    fn process_count(&self) -> usize {
        self.procs.len()
    }

    fn driver(&mut self, process: ProcessIndex) -> &mut dyn Driver {
        match self.procs.get_mut(process) {
            Some(p) => p,
            None => &mut self.nobody,
        }
    }

    fn exit(&mut self, process: ProcessIndex) -> DriverResult<()> {
        let mut w = self.world.borrow_mut();
        match w.procs.get(process) {
            None => Err(DriverError::Harness("no such process".into())),
            Some(p) if p.exited => Err(DriverError::Harness("process exited".into())),
            Some(_) => {
                // An exit's teardown waits for the device work the process
                // queued: a kernel still running lands its bytes
                // (mem.lifetime.exit-completes-kernel-writes). The exit
                // itself returns without waiting, so that work is ordered
                // before no other process's later step
                // (mem.lifetime.exit-does-not-order-running-work): what
                // `exit_process` tells the hosts is decided first.
                w.host_order(process);
                w.abandoned_records(process);
                w.host_sees_ended_work(process);
                w.finish_all_work(process);
                w.exit_process(process, true);
                Ok(())
            }
        }
    }

    /// As when a call crashes the process: the exit's teardown does not
    /// run (`event_exporter_crash`), no leaks are logged.
    fn crash(&mut self, process: ProcessIndex) -> DriverResult<()> {
        let mut w = self.world.borrow_mut();
        match w.procs.get(process) {
            None => Err(DriverError::Harness("no such process".into())),
            Some(p) if p.exited => Err(DriverError::Harness("process exited".into())),
            Some(_) => {
                // Ordered like a call of the process: the calls after it
                // are ordered after its work that has ended.
                w.host_order(process);
                w.crash_process(process);
                Ok(())
            }
        }
    }

    fn begin_step(&mut self, step: usize) {
        self.world.borrow_mut().hazards.set_step(step);
    }

    fn hazards(&self) -> Option<Vec<Hazard>> {
        Some(self.world.borrow().hazards.entries().to_vec())
    }

    fn transfer_fd(&mut self, from: ProcessIndex, fd: Fd, to: ProcessIndex) -> DriverResult<Fd> {
        match self.procs.get(from) {
            // sendmsg: not a driver call, a sticky error does not stop it.
            Some(sender) => sender.call_spared(|w, p| w.transfer_fd(p, fd, to).map(Fd)),
            None => Err(DriverError::Harness("no such process".into())),
        }
    }

    fn process_pid(&self, process: ProcessIndex) -> DriverResult<u32> {
        if process < self.procs.len() {
            Ok(crate::namespaces::harness_pid(process))
        } else {
            Err(DriverError::Harness("no such process".into()))
        }
    }

    /// End of scenario: processes still running are torn down without
    /// recording leaks (the scenario did not ask them to exit).
    ///
    /// A teardown without leak logging records no hazard, and every call on
    /// an exited process is refused, so all anyone can see of it is that the
    /// processes exited: that is all a release build does, and the machine
    /// is dropped whole. Debug builds run the whole teardown and check that
    /// it recorded nothing.
    fn shutdown(&mut self) {
        if cfg!(debug_assertions) {
            let before = self.world.borrow().hazards.entries().len();
            self.tear_down();
            debug_assert_eq!(
                self.world.borrow().hazards.entries().len(),
                before,
                "the teardown at shutdown recorded a hazard"
            );
        } else {
            for proc in &mut self.world.borrow_mut().procs {
                proc.exited = true;
            }
        }
    }
}
