//! The driver a role sees: every call is counted, checked against the run's
//! fault plan, passed through a gate (the scheduler on the simulator, the
//! in-process driver on the real backend), and its effect on allocations and
//! mappings recorded for the final state.

use super::ledger::{self, Answered, CallBy};
use super::{Fault, ProcessState};
use crate::driver::{
    ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, Driver, DriverError, DriverResult,
    EventId, Fd, FreeKind, GranularityKind, HandleTypes, IpcEventHandle, IpcMemHandle, MemKind,
    OutArg, PointerInfo, ShareableHandleType, VmmAccess, VmmHandle,
};
use crate::errors::{ApiError, Dialect};
use serde::{Deserialize, Serialize};
use std::any::Any;

/// One kind of driver call (a [`Driver`] method), for fault points and call counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    DeviceCount,
    DeviceAttribute,
    SetDevice,
    PrimaryContext,
    CreateContext,
    SetCurrentContext,
    CurrentContext,
    DestroyContext,
    Alloc,
    Free,
    Synchronize,
    Memset,
    Write,
    Read,
    DeviceRead,
    AddressRange,
    PointerInfo,
    IpcGetMemHandle,
    IpcOpenMemHandle,
    IpcCloseMemHandle,
    CanAccessPeer,
    EnablePeerAccess,
    VmmGranularity,
    VmmCreate,
    VmmExport,
    VmmImport,
    VmmReserve,
    VmmMap,
    VmmSetAccess,
    VmmUnmap,
    VmmAddressFree,
    VmmRelease,
    FdClose,
    FdOpenNullDevice,
    EventCreate,
    EventRecord,
    EventQuery,
    EventSynchronize,
    StreamWaitEvent,
    EventElapsed,
    EventDestroy,
    IpcGetEventHandle,
    IpcOpenEventHandle,
    SlowFill,
}

impl CallKind {
    pub const ALL: [CallKind; 44] = [
        CallKind::DeviceCount,
        CallKind::DeviceAttribute,
        CallKind::SetDevice,
        CallKind::PrimaryContext,
        CallKind::CreateContext,
        CallKind::SetCurrentContext,
        CallKind::CurrentContext,
        CallKind::DestroyContext,
        CallKind::Alloc,
        CallKind::Free,
        CallKind::Synchronize,
        CallKind::Memset,
        CallKind::Write,
        CallKind::Read,
        CallKind::DeviceRead,
        CallKind::AddressRange,
        CallKind::PointerInfo,
        CallKind::IpcGetMemHandle,
        CallKind::IpcOpenMemHandle,
        CallKind::IpcCloseMemHandle,
        CallKind::CanAccessPeer,
        CallKind::EnablePeerAccess,
        CallKind::VmmGranularity,
        CallKind::VmmCreate,
        CallKind::VmmExport,
        CallKind::VmmImport,
        CallKind::VmmReserve,
        CallKind::VmmMap,
        CallKind::VmmSetAccess,
        CallKind::VmmUnmap,
        CallKind::VmmAddressFree,
        CallKind::VmmRelease,
        CallKind::FdClose,
        CallKind::FdOpenNullDevice,
        CallKind::EventCreate,
        CallKind::EventRecord,
        CallKind::EventQuery,
        CallKind::EventSynchronize,
        CallKind::StreamWaitEvent,
        CallKind::EventElapsed,
        CallKind::EventDestroy,
        CallKind::IpcGetEventHandle,
        CallKind::IpcOpenEventHandle,
        CallKind::SlowFill,
    ];
}

/// A driver call packaged to run wherever the role's driver lives.
pub(crate) type DriverCall = Box<dyn FnOnce(&mut dyn Driver) -> Box<dyn Any + Send> + Send>;

/// Where a role's calls go.
pub(crate) trait CallGate: Send {
    /// Runs `call`; `None` when the run was stopped and the call never ran.
    fn call(&mut self, kind: CallKind, call: DriverCall) -> Option<Box<dyn Any + Send>>;
}

/// A gate straight to a driver this role owns (real backend, in its own process).
#[cfg(feature = "cuda")]
pub(crate) struct DirectGate<D: Driver + Send>(pub(crate) D);

#[cfg(feature = "cuda")]
impl<D: Driver + Send> CallGate for DirectGate<D> {
    fn call(&mut self, _kind: CallKind, call: DriverCall) -> Option<Box<dyn Any + Send>> {
        Some(call(&mut self.0))
    }
}

/// The [`Driver`] handed to a role (through [`super::RoleCtx::driver`]).
pub struct RoleDriver {
    dialect: Dialect,
    gate: Box<dyn CallGate>,
    /// This role's faults only.
    faults: Vec<Fault>,
    pub(crate) state: ProcessState,
}

impl RoleDriver {
    pub(crate) fn new(dialect: Dialect, gate: Box<dyn CallGate>, faults: Vec<Fault>) -> RoleDriver {
        RoleDriver {
            dialect,
            gate,
            faults,
            state: ProcessState::default(),
        }
    }

    fn call<T, F>(&mut self, kind: CallKind, f: F) -> DriverResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Driver) -> DriverResult<T> + Send + 'static,
    {
        let n = self.state.calls.entry(kind).or_insert(0);
        *n += 1;
        let n = *n;
        if let Some(fault) = self.faults.iter().find(|f| f.call == kind && f.nth == n) {
            self.state.ledger.faulted(kind, fault.error); // ledger: injected fault
            return Err(ApiError::new(self.dialect, fault.error).into());
        }
        let result = self.forward(kind, CallBy::Role, f);
        self.state.ledger.answered(kind, &result); // ledger: what reached the role
        result
    }

    /// Runs a call through the gate; a harness query (`CallBy::Harness`) is
    /// neither counted nor subject to faults.
    fn forward<T, F>(&mut self, kind: CallKind, by: CallBy, f: F) -> DriverResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Driver) -> DriverResult<T> + Send + 'static,
    {
        // ledger: every answer carries its event-list line.
        let answer = self.gate.call(
            kind,
            Box::new(move |d| {
                let result = f(d);
                Box::new(Answered {
                    line: ledger::describe(by, kind, &result),
                    value: Box::new(result),
                }) as Box<dyn Any + Send>
            }),
        );
        let answer = answer.map(|a| match a.downcast::<Answered>() {
            Ok(answered) => answered.value,
            Err(other) => other,
        });
        match answer.map(|a| a.downcast::<DriverResult<T>>()) {
            Some(Ok(result)) => *result,
            Some(Err(_)) => Err(DriverError::Harness(format!(
                "{kind:?}: the gate answered with the wrong type"
            ))),
            None => Err(DriverError::Harness(format!(
                "{kind:?}: the run was stopped before this call ran"
            ))),
        }
    }
}

impl Driver for RoleDriver {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn device_count(&mut self) -> DriverResult<u32> {
        self.call(CallKind::DeviceCount, |d| d.device_count())
    }

    fn device_attribute(
        &mut self,
        device: DeviceOrdinal,
        attr: DeviceAttribute,
    ) -> DriverResult<i64> {
        self.call(CallKind::DeviceAttribute, move |d| {
            d.device_attribute(device, attr)
        })
    }

    fn set_device(&mut self, device: DeviceOrdinal) -> DriverResult<()> {
        self.call(CallKind::SetDevice, move |d| d.set_device(device))
    }

    fn primary_context(&mut self, device: DeviceOrdinal) -> DriverResult<ContextId> {
        self.call(CallKind::PrimaryContext, move |d| d.primary_context(device))
    }

    fn create_context(&mut self, device: DeviceOrdinal) -> DriverResult<ContextId> {
        self.call(CallKind::CreateContext, move |d| d.create_context(device))
    }

    fn set_current_context(&mut self, ctx: ContextId) -> DriverResult<()> {
        self.call(CallKind::SetCurrentContext, move |d| {
            d.set_current_context(ctx)
        })
    }

    fn current_context(&mut self) -> DriverResult<Option<ContextId>> {
        self.call(CallKind::CurrentContext, |d| d.current_context())
    }

    fn destroy_context(&mut self, ctx: ContextId) -> DriverResult<()> {
        self.call(CallKind::DestroyContext, move |d| d.destroy_context(ctx))
    }

    fn alloc(&mut self, kind: MemKind, size: u64) -> DriverResult<DevicePtr> {
        let ptr = self.call(CallKind::Alloc, move |d| d.alloc(kind, size))?;
        self.state.allocations.insert(ptr.0, size);
        Ok(ptr)
    }

    fn free(&mut self, kind: FreeKind, ptr: DevicePtr) -> DriverResult<()> {
        self.call(CallKind::Free, move |d| d.free(kind, ptr))?;
        self.state.allocations.remove(&ptr.0);
        Ok(())
    }

    fn synchronize(&mut self) -> DriverResult<()> {
        self.call(CallKind::Synchronize, |d| d.synchronize())
    }

    fn memset(&mut self, ptr: DevicePtr, value: u8, len: u64) -> DriverResult<()> {
        self.call(CallKind::Memset, move |d| d.memset(ptr, value, len))
    }

    fn write(&mut self, ptr: DevicePtr, bytes: &[u8]) -> DriverResult<()> {
        let bytes = bytes.to_vec();
        self.call(CallKind::Write, move |d| d.write(ptr, &bytes))
    }

    fn read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        self.call(CallKind::Read, move |d| d.read(ptr, len))
    }

    fn device_read(&mut self, ptr: DevicePtr, len: u64) -> DriverResult<Vec<u8>> {
        self.call(CallKind::DeviceRead, move |d| d.device_read(ptr, len))
    }

    fn address_range(&mut self, ptr: DevicePtr) -> DriverResult<(DevicePtr, u64)> {
        self.call(CallKind::AddressRange, move |d| d.address_range(ptr))
    }

    fn pointer_info(&mut self, ptr: DevicePtr) -> DriverResult<PointerInfo> {
        self.call(CallKind::PointerInfo, move |d| d.pointer_info(ptr))
    }

    fn ipc_get_mem_handle(&mut self, ptr: DevicePtr, out: OutArg) -> DriverResult<IpcMemHandle> {
        self.call(CallKind::IpcGetMemHandle, move |d| {
            d.ipc_get_mem_handle(ptr, out)
        })
    }

    fn ipc_open_mem_handle(
        &mut self,
        handle: IpcMemHandle,
        flags: u32,
        out: OutArg,
    ) -> DriverResult<DevicePtr> {
        let ptr = self.call(CallKind::IpcOpenMemHandle, move |d| {
            d.ipc_open_mem_handle(handle, flags, out)
        })?;
        // The range the mapping reaches, asked once per mapping; a harness
        // query, so it is neither counted nor faulted.
        let known = self.state.mappings.contains_key(&ptr.0);
        let mapped_len = if known {
            None
        } else {
            let range = self.forward(CallKind::AddressRange, CallBy::Harness, move |d| {
                d.address_range(ptr)
            });
            self.state
                .ledger
                .harness_call(CallKind::AddressRange, &range); // ledger
            range
                .ok()
                .map(|(base, size)| size.saturating_sub(ptr.0.saturating_sub(base.0)))
        };
        if !known {
            self.state.opened.push((ptr.0, mapped_len));
        }
        let m = self.state.mappings.entry(ptr.0).or_insert(super::Mapping {
            open_count: 0,
            mapped_len,
        });
        m.open_count += 1;
        Ok(ptr)
    }

    fn ipc_close_mem_handle(&mut self, ptr: DevicePtr) -> DriverResult<()> {
        self.call(CallKind::IpcCloseMemHandle, move |d| {
            d.ipc_close_mem_handle(ptr)
        })?;
        if let Some(m) = self.state.mappings.get_mut(&ptr.0) {
            m.open_count -= 1;
            if m.open_count == 0 {
                self.state.mappings.remove(&ptr.0);
            }
        }
        Ok(())
    }

    fn can_access_peer(&mut self, device: DeviceOrdinal, peer: DeviceOrdinal) -> DriverResult<i64> {
        self.call(CallKind::CanAccessPeer, move |d| {
            d.can_access_peer(device, peer)
        })
    }

    fn enable_peer_access(&mut self, peer: DeviceOrdinal) -> DriverResult<()> {
        self.call(CallKind::EnablePeerAccess, move |d| {
            d.enable_peer_access(peer)
        })
    }

    // --- VMM ---
    fn vmm_granularity(
        &mut self,
        device: DeviceOrdinal,
        types: HandleTypes,
        kind: GranularityKind,
    ) -> DriverResult<u64> {
        self.call(CallKind::VmmGranularity, move |d| {
            d.vmm_granularity(device, types, kind)
        })
    }

    fn vmm_create(
        &mut self,
        device: DeviceOrdinal,
        size: u64,
        types: HandleTypes,
    ) -> DriverResult<VmmHandle> {
        let h = self.call(CallKind::VmmCreate, move |d| {
            d.vmm_create(device, size, types)
        })?;
        self.state.ledger.held.vmm_handles.insert(h.0); // ledger
        Ok(h)
    }

    fn vmm_export(&mut self, handle: VmmHandle, ty: ShareableHandleType) -> DriverResult<Fd> {
        let fd = self.call(CallKind::VmmExport, move |d| d.vmm_export(handle, ty))?;
        self.state.ledger.held.fds.insert(fd.0); // ledger
        Ok(fd)
    }

    fn vmm_import(&mut self, fd: Fd) -> DriverResult<VmmHandle> {
        let h = self.call(CallKind::VmmImport, move |d| d.vmm_import(fd))?;
        self.state.ledger.held.vmm_handles.insert(h.0); // ledger
        Ok(h)
    }

    fn vmm_reserve(&mut self, size: u64) -> DriverResult<DevicePtr> {
        let va = self.call(CallKind::VmmReserve, move |d| d.vmm_reserve(size))?;
        self.state.ledger.held.reservations.insert(va.0, size); // ledger
        Ok(va)
    }

    fn vmm_map(
        &mut self,
        va: DevicePtr,
        size: u64,
        offset: u64,
        handle: VmmHandle,
    ) -> DriverResult<()> {
        self.call(CallKind::VmmMap, move |d| {
            d.vmm_map(va, size, offset, handle)
        })?;
        self.state.ledger.held.vmm_mappings.insert(va.0, size); // ledger
        Ok(())
    }

    fn vmm_set_access(
        &mut self,
        va: DevicePtr,
        size: u64,
        device: DeviceOrdinal,
        access: VmmAccess,
    ) -> DriverResult<()> {
        self.call(CallKind::VmmSetAccess, move |d| {
            d.vmm_set_access(va, size, device, access)
        })
    }

    fn vmm_unmap(&mut self, va: DevicePtr, size: u64) -> DriverResult<()> {
        self.call(CallKind::VmmUnmap, move |d| d.vmm_unmap(va, size))?;
        self.state.ledger.held.vmm_mappings.remove(&va.0); // ledger
        Ok(())
    }

    fn vmm_address_free(&mut self, va: DevicePtr, size: u64) -> DriverResult<()> {
        self.call(CallKind::VmmAddressFree, move |d| {
            d.vmm_address_free(va, size)
        })?;
        self.state.ledger.held.reservations.remove(&va.0); // ledger
        Ok(())
    }

    fn vmm_release(&mut self, handle: VmmHandle) -> DriverResult<()> {
        self.call(CallKind::VmmRelease, move |d| d.vmm_release(handle))?;
        self.state.ledger.held.vmm_handles.remove(&handle.0); // ledger
        Ok(())
    }

    fn fd_close(&mut self, fd: Fd) -> DriverResult<()> {
        self.call(CallKind::FdClose, move |d| d.fd_close(fd))?;
        self.state.ledger.held.fds.remove(&fd.0); // ledger
        Ok(())
    }

    fn fd_open_null_device(&mut self) -> DriverResult<Fd> {
        let fd = self.call(CallKind::FdOpenNullDevice, move |d| d.fd_open_null_device())?;
        self.state.ledger.held.fds.insert(fd.0); // ledger
        Ok(fd)
    }

    // --- events ---
    fn event_create(&mut self, flags: u32) -> DriverResult<EventId> {
        let e = self.call(CallKind::EventCreate, move |d| d.event_create(flags))?;
        self.state.ledger.held.events.insert(e.0); // ledger
        Ok(e)
    }

    fn event_record(&mut self, event: EventId) -> DriverResult<()> {
        self.call(CallKind::EventRecord, move |d| d.event_record(event))
    }

    fn event_query(&mut self, event: EventId) -> DriverResult<()> {
        self.call(CallKind::EventQuery, move |d| d.event_query(event))
    }

    fn event_synchronize(&mut self, event: EventId) -> DriverResult<()> {
        self.call(CallKind::EventSynchronize, move |d| {
            d.event_synchronize(event)
        })
    }

    fn stream_wait_event(&mut self, event: EventId) -> DriverResult<()> {
        self.call(CallKind::StreamWaitEvent, move |d| {
            d.stream_wait_event(event)
        })
    }

    fn event_elapsed(&mut self, start: EventId, end: EventId) -> DriverResult<f32> {
        self.call(CallKind::EventElapsed, move |d| d.event_elapsed(start, end))
    }

    fn event_destroy(&mut self, event: EventId) -> DriverResult<()> {
        self.call(CallKind::EventDestroy, move |d| d.event_destroy(event))?;
        let held = &mut self.state.ledger.held; // ledger
        held.events.remove(&event.0);
        held.imported_events.remove(&event.0);
        Ok(())
    }

    fn ipc_get_event_handle(
        &mut self,
        event: EventId,
        out: OutArg,
    ) -> DriverResult<IpcEventHandle> {
        self.call(CallKind::IpcGetEventHandle, move |d| {
            d.ipc_get_event_handle(event, out)
        })
    }

    fn ipc_open_event_handle(&mut self, handle: IpcEventHandle) -> DriverResult<EventId> {
        let e = self.call(CallKind::IpcOpenEventHandle, move |d| {
            d.ipc_open_event_handle(handle)
        })?;
        self.state.ledger.held.imported_events.insert(e.0); // ledger
        Ok(e)
    }

    fn slow_fill(&mut self, ptr: DevicePtr, value: u8, len: u64, micros: u64) -> DriverResult<()> {
        self.call(CallKind::SlowFill, move |d| {
            d.slow_fill(ptr, value, len, micros)
        })
    }
}
