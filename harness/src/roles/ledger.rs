//! The roles bookkeeping behind a clean report: who made each driver call
//! (the role or the harness) and what it returned, the driver errors that
//! reached the role's code and whether the role declared them expected, the
//! resources the role still holds at its end, and a role failure's call and
//! dialect-neutral [`ErrorKind`].
//!
//! `RoleDriver` calls in here from a few marked places (`ledger:`); every
//! rule lives here.

use crate::calls::CallKind;
use crate::driver::{DriverError, DriverResult};
use crate::errors::ErrorKind;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Who made a driver call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallBy {
    /// The role's own code, through `ctx.driver()`.
    Role,
    /// The harness, for its own bookkeeping (the range of a new mapping).
    Harness,
}

/// A driver call's answer with the line that describes it in the run's
/// event list (`RoleDriver::forward` wraps every call's answer in one).
pub(crate) struct Answered {
    pub line: String,
    pub value: Box<dyn Any + Send>,
}

/// The event-list text of one call: who made it and what it returned.
pub(crate) fn describe<T>(by: CallBy, kind: CallKind, result: &DriverResult<T>) -> String {
    let who = match by {
        CallBy::Role => "",
        CallBy::Harness => " (harness)",
    };
    match result {
        Ok(_) => format!("{kind:?}{who} -> ok"),
        Err(e) => format!("{kind:?}{who} -> {e}"),
    }
}

/// The line an answer carries, for the scheduler's event list.
pub(crate) fn line_of(answer: &(dyn Any + Send)) -> Option<&str> {
    answer.downcast_ref::<Answered>().map(|a| a.line.as_str())
}

/// `NotReady` is a status, not an error ("this result is not actually an
/// error", cudaEventQuery): polling code sees it by design.
fn is_status(kind: ErrorKind) -> bool {
    kind == ErrorKind::NotReady
}

/// A driver error that reached the role's code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReachedError {
    /// The call that returned it.
    pub call: CallKind,
    /// `None` for a code the error table does not know.
    pub kind: Option<ErrorKind>,
    /// The dialect's own words (`cudaErrorInvalidValue (1)`).
    pub message: String,
    /// The role declared it with `RoleCtx::expect_error` first.
    pub expected: bool,
}

impl fmt::Display for ReachedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self
            .kind
            .map_or_else(|| "an unknown error".to_string(), |k| format!("{k:?}"));
        write!(f, "{:?} returned {kind} ({})", self.call, self.message)
    }
}

/// Resources a process holds beyond allocations and memory mappings
/// (those are in `ProcessState::allocations` and `mappings`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Events the role created and did not destroy.
    pub events: BTreeSet<u64>,
    /// Events opened from an IPC event handle and not destroyed.
    pub imported_events: BTreeSet<u64>,
    /// VMM allocation handles (`cuMemCreate`, `cuMemImportFromShareableHandle`) not released.
    pub vmm_handles: BTreeSet<u64>,
    /// VMM mappings (`cuMemMap`) not unmapped: address -> size.
    pub vmm_mappings: BTreeMap<u64, u64>,
    /// VA reservations (`cuMemAddressReserve`) not freed: address -> size.
    pub reservations: BTreeMap<u64, u64>,
    /// Descriptors the role's driver calls gave it and it did not close.
    pub fds: BTreeSet<i32>,
    /// Streams (`cudaStreamCreate`) not destroyed.
    #[serde(default)]
    pub streams: BTreeSet<u64>,
    /// Memory pools the role created (`cudaMemPoolCreate`) and did not
    /// destroy (a device's default pool is not the role's).
    #[serde(default)]
    pub pools: BTreeSet<u64>,
    /// Pools imported from a descriptor (`cudaMemPoolImportFromShareableHandle`)
    /// and not destroyed.
    #[serde(default)]
    pub imported_pools: BTreeSet<u64>,
    /// Allocations from a pool (`cudaMallocFromPoolAsync`) not freed
    /// (`cudaFreeAsync` or `cudaFree`): pointer -> size.
    #[serde(default)]
    pub pool_allocations: BTreeMap<u64, u64>,
    /// Pointers imported from a pool (`cudaMemPoolImportPointer`) not freed
    /// (`cudaFreeAsync` or `cudaFree`).
    #[serde(default)]
    pub imported_pool_pointers: BTreeSet<u64>,
}

/// What a role declares it keeps on purpose at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kept {
    /// An allocation, by its pointer.
    Allocation(u64),
    /// An IPC mapping, by its pointer.
    Mapping(u64),
    /// An event the role created, by its id.
    Event(u64),
    /// An event the role opened from an IPC handle, by its id.
    ImportedEvent(u64),
    /// A VMM allocation handle.
    VmmHandle(u64),
    /// A VMM mapping, by its address.
    VmmMapping(u64),
    /// A VA reservation, by its address.
    Reservation(u64),
    /// A file descriptor.
    Fd(i32),
    /// A stream, by its id.
    Stream(u64),
    /// A memory pool the role created, by its id.
    Pool(u64),
    /// A memory pool the role imported, by its id.
    ImportedPool(u64),
    /// An allocation from a pool, by its pointer.
    PoolAllocation(u64),
    /// A pointer imported from a pool.
    ImportedPoolPointer(u64),
    /// Everything the role holds (a long-lived service).
    Everything,
}

/// What the role's bookkeeping adds to its `ProcessState`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Every call, in order: who made it, and the event-list text.
    pub calls: Vec<(CallBy, String)>,
    /// Driver errors that reached the role's code (injected faults and
    /// `NotReady` statuses are not among them).
    pub errors: Vec<ReachedError>,
    /// Error kinds the role declared expected and no error consumed yet.
    pub expecting: Vec<ErrorKind>,
    /// What the role's process holds now.
    pub held: Held,
    /// What the role declared it keeps (`RoleCtx::keep`).
    pub kept: Vec<Kept>,
    /// The last error a role's call got, for a failure's `call` and `kind`.
    pub last_error: Option<(CallKind, Option<ErrorKind>)>,
}

impl Ledger {
    /// `ledger:` a role's call returned `result` (not an injected fault).
    pub(crate) fn answered<T>(&mut self, kind: CallKind, result: &DriverResult<T>) {
        self.calls
            .push((CallBy::Role, describe(CallBy::Role, kind, result)));
        let Err(e) = result else {
            return;
        };
        let error_kind = match e {
            DriverError::Api(api) => api.kind(),
            _ => None,
        };
        self.last_error = Some((kind, error_kind));
        let DriverError::Api(_) = e else {
            return;
        };
        if error_kind.is_some_and(is_status) {
            return;
        }
        let expected = match self.expecting.iter().position(|k| Some(*k) == error_kind) {
            Some(i) => {
                self.expecting.remove(i);
                true
            }
            None => false,
        };
        self.errors.push(ReachedError {
            call: kind,
            kind: error_kind,
            message: e.to_string(),
            expected,
        });
    }

    /// `ledger:` an injected fault answered a role's call.
    pub(crate) fn faulted(&mut self, kind: CallKind, error: ErrorKind) {
        self.calls.push((
            CallBy::Role,
            format!("{kind:?} -> {error:?} (injected fault)"),
        ));
        self.last_error = Some((kind, Some(error)));
    }

    /// `ledger:` the harness made a call of its own.
    pub(crate) fn harness_call<T>(&mut self, kind: CallKind, result: &DriverResult<T>) {
        self.calls
            .push((CallBy::Harness, describe(CallBy::Harness, kind, result)));
    }

    pub(super) fn keeps(&self, what: Kept) -> bool {
        self.kept.contains(&Kept::Everything) || self.kept.contains(&what)
    }
}

/// One thing a role left behind that it did not declare kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leak {
    /// What was left.
    pub what: Kept,
    /// Bytes (allocations, mappings, reservations), where known.
    pub size: Option<u64>,
}

impl fmt::Display for Leak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = self
            .size
            .map(|s| format!(" ({s} bytes)"))
            .unwrap_or_default();
        match self.what {
            Kept::Allocation(p) => write!(f, "allocation {p:#x}{size} never freed"),
            Kept::Mapping(p) => write!(f, "IPC mapping {p:#x}{size} never closed"),
            Kept::Event(e) => write!(f, "event {e:#x} never destroyed"),
            Kept::ImportedEvent(e) => {
                write!(f, "event {e:#x} opened from an IPC handle never destroyed")
            }
            Kept::VmmHandle(h) => write!(f, "VMM handle {h:#x} never released"),
            Kept::VmmMapping(p) => write!(f, "VMM mapping {p:#x}{size} never unmapped"),
            Kept::Reservation(p) => write!(f, "VA reservation {p:#x}{size} never freed"),
            Kept::Fd(d) => write!(f, "descriptor {d} never closed"),
            Kept::Stream(st) => write!(f, "stream {st:#x} never destroyed"),
            Kept::Pool(p) => write!(f, "memory pool {p:#x} never destroyed"),
            Kept::ImportedPool(p) => {
                write!(
                    f,
                    "memory pool {p:#x} imported from a descriptor never destroyed"
                )
            }
            Kept::PoolAllocation(p) => write!(f, "pool allocation {p:#x}{size} never freed"),
            Kept::ImportedPoolPointer(p) => {
                write!(f, "pointer {p:#x} imported from a pool never freed")
            }
            Kept::Everything => f.write_str("everything"),
        }
    }
}
