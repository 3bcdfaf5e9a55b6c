//! The driver a role sees: every call is counted, checked against the run's
//! fault plan, passed through a gate (the scheduler on the simulator, the
//! in-process driver on the real backend), and its effect on allocations and
//! mappings recorded for the final state.

use super::ledger::{self, Answered, CallBy};
use super::model::{Crash, Fault, Mapping, ProcessState};
use crate::calls::Call;
use crate::calls::Driver;
use crate::driver::PointerAttribute;
use crate::driver::{
    ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, DriverError, DriverResult, EventId, Fd,
    FreeKind, GranularityKind, HandleTypes, IpcEventHandle, IpcMemHandle, MemKind, OutArg,
    PointerInfo, PoolId, PoolPtrExport, ShareableHandleType, StreamId, VmmAccess, VmmHandle,
};
use crate::errors::{ApiError, Dialect};
use std::any::Any;

pub use crate::calls::CallKind;

/// A driver call packaged to run wherever the role's driver lives.
pub(crate) type DriverCall = Box<dyn FnOnce(&mut dyn Driver) -> Box<dyn Any + Send> + Send>;

/// Where a role's calls go.
pub(crate) trait CallGate: Send {
    /// Runs `call`; `None` when the run was stopped and the call never ran.
    fn call(&mut self, kind: CallKind, call: DriverCall) -> Option<Box<dyn Any + Send>>;
    /// The role's process dies now (a planned [`Crash`]), leaving `state`.
    /// Where the process really dies this does not return; where roles are
    /// threads it returns once the run has recorded the death, and the
    /// role's code is then unwound.
    fn crash(&mut self, crash: &Crash, state: ProcessState);
}

/// The payload a crashed role's thread unwinds with (not a panic of the
/// role's code).
pub(crate) struct Crashed;

/// A gate straight to a driver this role owns (real backend, in its own process).
#[cfg(feature = "cuda")]
pub(crate) struct DirectGate<D: Driver + Send>(pub(crate) D);

#[cfg(feature = "cuda")]
impl<D: Driver + Send> CallGate for DirectGate<D> {
    fn call(&mut self, _kind: CallKind, call: DriverCall) -> Option<Box<dyn Any + Send>> {
        Some(call(&mut self.0))
    }

    /// The role's own process: killed by `SIGKILL`, as a crash would end
    /// it (no exit handlers, no report to the parent).
    fn crash(&mut self, crash: &Crash, _state: ProcessState) {
        eprintln!(
            "ipc-harness role process: {}: raising SIGKILL",
            crash.outcome_text()
        );
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        std::process::abort();
    }
}

/// The [`Driver`] handed to a role (through [`super::RoleCtx::driver`]).
pub struct RoleDriver {
    dialect: Dialect,
    gate: Box<dyn CallGate>,
    /// This role's faults only.
    faults: Vec<Fault>,
    /// This role's planned crash.
    crash: Option<Crash>,
    pub(crate) state: ProcessState,
}

impl RoleDriver {
    pub(crate) fn new(
        dialect: Dialect,
        gate: Box<dyn CallGate>,
        faults: Vec<Fault>,
        crash: Option<Crash>,
    ) -> RoleDriver {
        RoleDriver {
            dialect,
            gate,
            faults,
            crash,
            state: ProcessState::default(),
        }
    }

    /// The one path of every call a role makes: counted, failed with the
    /// fault planned for this call if any, otherwise run through the gate.
    fn intercept<T, F>(&mut self, kind: CallKind, f: F) -> DriverResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Driver) -> DriverResult<T> + Send + 'static,
    {
        let n = self.state.calls.entry(kind).or_insert(0);
        *n += 1;
        let n = *n;
        if let Some(crash) = self.crash.take_if(|c| c.call == kind && c.nth == n) {
            // The call never runs: the process dies on its way to it.
            self.state.calls.entry(kind).and_modify(|c| *c -= 1);
            let state = std::mem::take(&mut self.state);
            self.gate.crash(&crash, state);
            std::panic::resume_unwind(Box::new(Crashed));
        }
        if let Some(fault) = self.faults.iter().find(|f| f.call == kind && f.nth == n) {
            self.state.ledger.faulted(kind, fault.error); // ledger: injected fault
            return Err(ApiError::new(self.dialect, fault.error).into());
        }
        let result = self.forward(kind, CallBy::Role, f);
        self.state.ledger.answered(kind, &result); // ledger: what reached the role
        result
    }

    /// What a call changed in this process's state: allocations made and
    /// freed, IPC mappings opened and closed (with the range each reaches),
    /// and what the ledger's leak check counts as held at the end (events,
    /// imported events, VMM handles, reservations and mappings, descriptors,
    /// streams, pools made or imported, pool allocations, imported pool
    /// pointers).
    fn record_effect<T: Any>(&mut self, call: &Call, result: DriverResult<T>) -> DriverResult<T> {
        let Ok(value) = &result else {
            return result;
        };
        let value = value as &dyn Any;
        let returned_ptr = value.downcast_ref::<DevicePtr>().copied();
        let held = &mut self.state.ledger.held;
        match call {
            Call::VmmCreate { .. } | Call::VmmImport { .. } => {
                if let Some(h) = value.downcast_ref::<VmmHandle>() {
                    held.vmm_handles.insert(h.0);
                }
            }
            Call::VmmRelease { handle } => {
                held.vmm_handles.remove(&handle.0);
            }
            Call::VmmExport { .. }
            | Call::PoolExport { .. }
            | Call::PidfdGetfd { .. }
            | Call::FdOpenNullDevice => {
                if let Some(fd) = value.downcast_ref::<Fd>() {
                    held.fds.insert(fd.0);
                }
            }
            Call::FdClose { fd } => {
                held.fds.remove(&fd.0);
            }
            Call::VmmReserve { size } => {
                if let Some(va) = returned_ptr {
                    held.reservations.insert(va.0, *size);
                }
            }
            Call::VmmAddressFree { va, .. } => {
                held.reservations.remove(&va.0);
            }
            Call::VmmMap { va, size, .. } => {
                held.vmm_mappings.insert(va.0, *size);
            }
            Call::VmmUnmap { va, .. } => {
                held.vmm_mappings.remove(&va.0);
            }
            Call::EventCreate { .. } => {
                if let Some(e) = value.downcast_ref::<EventId>() {
                    held.events.insert(e.0);
                }
            }
            Call::IpcOpenEventHandle { .. } => {
                if let Some(e) = value.downcast_ref::<EventId>() {
                    held.imported_events.insert(e.0);
                }
            }
            Call::EventDestroy { event } => {
                held.events.remove(&event.0);
                held.imported_events.remove(&event.0);
            }
            Call::StreamCreate { .. } => {
                if let Some(st) = value.downcast_ref::<StreamId>() {
                    held.streams.insert(st.0);
                }
            }
            Call::StreamDestroy { stream } => {
                held.streams.remove(&stream.0);
            }
            Call::PoolCreate { .. } => {
                if let Some(p) = value.downcast_ref::<PoolId>() {
                    held.pools.insert(p.0);
                }
            }
            Call::PoolImport { .. } => {
                if let Some(p) = value.downcast_ref::<PoolId>() {
                    held.imported_pools.insert(p.0);
                }
            }
            Call::PoolDestroy { pool } => {
                held.pools.remove(&pool.0);
                held.imported_pools.remove(&pool.0);
            }
            Call::PoolAlloc { size, .. } => {
                if let Some(ptr) = returned_ptr {
                    held.pool_allocations.insert(ptr.0, *size);
                }
            }
            Call::PoolImportPtr { .. } => {
                if let Some(ptr) = returned_ptr {
                    held.imported_pool_pointers.insert(ptr.0);
                }
            }
            // Either free releases a pool allocation or an imported pool
            // pointer ("The pointer may be freed with cudaFree or
            // cudaFreeAsync", cudaMemPoolImportPointer; clause
            // pool.lifetime.importer-frees-with-cudafree).
            Call::PoolFree { ptr } | Call::Free { ptr, .. } => {
                held.pool_allocations.remove(&ptr.0);
                held.imported_pool_pointers.remove(&ptr.0);
            }
            _ => {}
        }
        match (call, returned_ptr) {
            (Call::Alloc { size, .. }, Some(ptr)) => {
                self.state.allocations.insert(ptr.0, *size);
            }
            (Call::Free { ptr, .. }, _) => {
                self.state.allocations.remove(&ptr.0);
            }
            (Call::IpcOpenMemHandle { .. }, Some(ptr)) => self.record_mapping_opened(ptr),
            (Call::IpcCloseMemHandle { ptr }, _) => {
                if let Some(m) = self.state.mappings.get_mut(&ptr.0) {
                    m.open_count -= 1;
                    if m.open_count == 0 {
                        self.state.mappings.remove(&ptr.0);
                    }
                }
            }
            _ => {}
        }
        result
    }

    fn record_mapping_opened(&mut self, ptr: DevicePtr) {
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
        let m = self.state.mappings.entry(ptr.0).or_insert(Mapping {
            open_count: 0,
            mapped_len,
        });
        m.open_count += 1;
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

macro_rules! define_role_driver {
    ($(
        $(#[$doc:meta])*
        $method:ident $Variant:ident $(( $( $(#[$attr:meta])* $arg:ident : $($ty:ident)? $(&[$elem:ident] as $owned:ty)? ),* ))? -> $ret:ty => $keyword:ident $api:tt;
    )*) => {
        /// Every call goes through `RoleDriver::intercept` (count, fault,
        /// gate), then `RoleDriver::record_effect`.
        impl Driver for RoleDriver {
            fn dialect(&self) -> Dialect {
                self.dialect
            }
            $(
                fn $method(&mut self $($(, $arg: $($ty)? $(&[$elem])?)*)?) -> DriverResult<$ret> {
                    $($( $( let $arg = <$owned>::from($arg); )? )*)?
                    let call = Call::$Variant $({
                        $( $arg: $crate::driver_call_duplicate!($arg $(, $owned)?) ),*
                    })?;
                    let result = self.intercept(CallKind::$Variant, move |d| {
                        d.$method($($( $crate::driver_call_pass!($arg $(, $owned)?) ),*)?)
                    });
                    self.record_effect(&call, result)
                }
            )*
        }
    };
}

crate::for_each_driver_call!(define_role_driver);
