//! The documented synchronisation behaviour of the recorded calls, in one
//! table: for each entry point (and, for copies and sets, each kind of
//! memory it touches) whether the call returns before its device work is
//! done. The replay models each recorded call by its row (`replay.rs`), and
//! every race finding names the rows of both calls it rests on.
//!
//! The source is the driver API's "API synchronization behavior" page
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html>)
//! for copies and sets, and the programming guide's "Asynchronous
//! Concurrent Execution" for kernel launches.

use serde::Serialize;

/// The page the copy and set rows cite.
pub const SYNC_PAGE: &str = "https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html";
/// The page the kernel row cites.
pub const KERNEL_PAGE: &str =
    "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#asynchronous-concurrent-execution";

/// What the kind of memory behind a pointer is, as the trace shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    /// Device memory: `cuMemAlloc`, an IPC mapping, a VMM mapping, a pool
    /// allocation.
    Device,
    /// Page-locked host memory: `cuMemAllocHost`, `cuMemHostAlloc`.
    Pinned,
    /// `cuMemAllocManaged`.
    Managed,
    /// Host memory the trace did not see allocated (`malloc`, the stack).
    Pageable,
}

/// When a call returns, relative to its device work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Returns {
    /// Once the work is done: what it wrote is in place, what it read was
    /// read.
    Completed,
    /// After waiting for the stream's earlier work, but before its own
    /// bytes reach the device (a pageable host-to-device copy).
    Staged,
    /// At once: the work runs later, in stream order.
    Queued,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SyncRule {
    /// The row's name, as findings cite it (`htod-pageable`).
    pub id: &'static str,
    /// When the call returns.
    pub returns: Returns,
    /// What the documentation says, in short.
    pub says: &'static str,
    /// Where it says so.
    pub page: &'static str,
}

const fn rule(id: &'static str, returns: Returns, says: &'static str) -> SyncRule {
    SyncRule {
        id,
        returns,
        says,
        page: SYNC_PAGE,
    }
}

/// Every row, for the documentation and tests.
pub const TABLE: &[SyncRule] = &[
    HTOD_PAGEABLE,
    HTOD_PINNED,
    DTOH,
    DTOD,
    HTOH,
    MANAGED_COPY,
    ASYNC_HTOD_PAGEABLE,
    ASYNC_DTOH_PAGEABLE,
    ASYNC_COPY,
    MEMSET_DEVICE,
    MEMSET_HOST,
    MEMSET_ASYNC,
    KERNEL,
];

pub const HTOD_PAGEABLE: SyncRule = rule(
    "htod-pageable",
    Returns::Staged,
    "a copy from pageable host memory to device memory returns once the buffer is staged \
     for DMA; the DMA to its final destination may not have completed",
);
pub const HTOD_PINNED: SyncRule = rule(
    "htod-pinned",
    Returns::Completed,
    "a copy from pinned host memory to device memory is synchronous with respect to the host",
);
pub const DTOH: SyncRule = rule(
    "dtoh",
    Returns::Completed,
    "a copy from device memory to pageable or pinned host memory returns only once the copy \
     has completed",
);
pub const DTOD: SyncRule = rule(
    "dtod",
    Returns::Queued,
    "a copy from device memory to device memory performs no host-side synchronization",
);
pub const HTOH: SyncRule = rule(
    "htoh",
    Returns::Completed,
    "a copy between host memories is fully synchronous with respect to the host",
);
pub const MANAGED_COPY: SyncRule = rule(
    "managed-copy",
    Returns::Completed,
    "copies involving Unified Memory are fully synchronous with respect to the host",
);
pub const ASYNC_HTOD_PAGEABLE: SyncRule = rule(
    "async-htod-pageable",
    Returns::Staged,
    "an asynchronous copy between device memory and pageable host memory may first be staged \
     to pinned memory after a stream synchronization; the DMA may not have completed",
);
pub const ASYNC_DTOH_PAGEABLE: SyncRule = rule(
    "async-dtoh-pageable",
    Returns::Completed,
    "an asynchronous copy from device memory to pageable host memory returns only once the \
     copy has completed",
);
pub const ASYNC_COPY: SyncRule = rule(
    "async-copy",
    Returns::Queued,
    "an asynchronous copy with pinned host memory or between device memories is fully \
     asynchronous",
);
pub const MEMSET_DEVICE: SyncRule = rule(
    "memset-device",
    Returns::Queued,
    "a synchronous memset of device memory is asynchronous with respect to the host",
);
pub const MEMSET_HOST: SyncRule = rule(
    "memset-host",
    Returns::Completed,
    "a synchronous memset of pinned host memory or of a Unified Memory region is fully \
     synchronous",
);
pub const MEMSET_ASYNC: SyncRule = rule(
    "memset-async",
    Returns::Queued,
    "the Async memsets are always asynchronous with respect to the host",
);
pub const KERNEL: SyncRule = SyncRule {
    id: "kernel",
    returns: Returns::Queued,
    says: "a kernel launch is asynchronous: control returns to the host before the kernel \
           completes",
    page: KERNEL_PAGE,
};

/// The row of a copy (`base` is the entry point without its ABI suffixes)
/// from `src` to `dst` memory; `None` for a call that is not a copy.
pub fn copy_rule(base: &str, src: Memory, dst: Memory) -> Option<SyncRule> {
    use Memory::*;
    let asynchronous = base.ends_with("Async");
    let host = |m: Memory| matches!(m, Pinned | Pageable);
    let row = if src == Managed || dst == Managed {
        MANAGED_COPY
    } else if host(src) && host(dst) {
        HTOH
    } else if !asynchronous {
        match (src, dst) {
            (Pageable, _) => HTOD_PAGEABLE,
            (Pinned, _) => HTOD_PINNED,
            (_, Pageable | Pinned) => DTOH,
            _ => DTOD,
        }
    } else {
        match (src, dst) {
            (Pageable, _) => ASYNC_HTOD_PAGEABLE,
            (_, Pageable) => ASYNC_DTOH_PAGEABLE,
            _ => ASYNC_COPY,
        }
    };
    matches!(
        base,
        "cuMemcpy"
            | "cuMemcpyHtoD"
            | "cuMemcpyDtoH"
            | "cuMemcpyDtoD"
            | "cuMemcpyAsync"
            | "cuMemcpyHtoDAsync"
            | "cuMemcpyDtoHAsync"
            | "cuMemcpyDtoDAsync"
    )
    .then_some(row)
}

/// The row of a memset of `dst` memory; `None` for a call that is not one.
pub fn memset_rule(base: &str, dst: Memory) -> Option<SyncRule> {
    if !base.starts_with("cuMemsetD") {
        return None;
    }
    Some(if base.ends_with("Async") {
        MEMSET_ASYNC
    } else if matches!(dst, Memory::Pinned | Memory::Managed) {
        MEMSET_HOST
    } else {
        MEMSET_DEVICE
    })
}

/// The row of a kernel launch.
pub fn kernel_rule(base: &str) -> Option<SyncRule> {
    matches!(base, "cuLaunchKernel" | "cuLaunchKernelEx").then_some(KERNEL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Memory::*;

    #[test]
    fn each_copy_direction_and_memory_kind_has_its_row() {
        let row = |b, s, d| copy_rule(b, s, d).unwrap().id;
        assert_eq!(row("cuMemcpyHtoD", Pageable, Device), "htod-pageable");
        assert_eq!(row("cuMemcpyHtoD", Pinned, Device), "htod-pinned");
        assert_eq!(row("cuMemcpyDtoH", Device, Pageable), "dtoh");
        assert_eq!(row("cuMemcpyDtoH", Device, Pinned), "dtoh");
        assert_eq!(row("cuMemcpyDtoD", Device, Device), "dtod");
        assert_eq!(row("cuMemcpy", Pageable, Pageable), "htoh");
        assert_eq!(row("cuMemcpy", Managed, Device), "managed-copy");
        assert_eq!(
            row("cuMemcpyHtoDAsync", Pageable, Device),
            "async-htod-pageable"
        );
        assert_eq!(
            row("cuMemcpyDtoHAsync", Device, Pageable),
            "async-dtoh-pageable"
        );
        assert_eq!(row("cuMemcpyDtoHAsync", Device, Pinned), "async-copy");
        assert_eq!(row("cuMemcpyAsync", Device, Device), "async-copy");
        assert!(copy_rule("cuMemAlloc", Device, Device).is_none());
    }

    #[test]
    fn memsets_are_asynchronous_for_device_memory_only() {
        assert_eq!(
            memset_rule("cuMemsetD8", Device).unwrap().returns,
            Returns::Queued
        );
        assert_eq!(
            memset_rule("cuMemsetD32", Pinned).unwrap().returns,
            Returns::Completed
        );
        assert_eq!(
            memset_rule("cuMemsetD32", Managed).unwrap().id,
            "memset-host"
        );
        assert_eq!(
            memset_rule("cuMemsetD8Async", Pinned).unwrap().id,
            "memset-async"
        );
        assert!(memset_rule("cuMemcpy", Device).is_none());
    }

    #[test]
    fn row_names_are_unique() {
        let mut ids: Vec<&str> = TABLE.iter().map(|r| r.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), TABLE.len());
    }
}
