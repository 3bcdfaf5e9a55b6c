//! The simulator's semantic choices: every place where the documentation is
//! silent or ambiguous, or where hardware is known to differ from the text,
//! is a named, switchable choice instead of a hard-coded guess. The
//! conformance runner lists them (`describe`) and lets a user flip them
//! (`set`), so a clause can show which choice real hardware agrees with.

use ipc_harness::ErrorKind;

/// One semantic choice as listed to users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemanticChoice {
    pub name: &'static str,
    /// The value in force, spelled as `set` accepts it.
    pub value: String,
    /// Every value `set` accepts (error kinds by their dialect-neutral name).
    pub options: Vec<String>,
    pub description: &'static str,
}

/// A value of one semantic choice: printable and parseable.
pub trait Choice: Sized {
    fn options() -> Vec<String>;
    fn value(&self) -> String;
    fn parse(s: &str) -> Option<Self>;
}

fn error_kind_names() -> Vec<String> {
    ErrorKind::all().map(|k| format!("{k:?}")).collect()
}

impl Choice for ErrorKind {
    fn options() -> Vec<String> {
        error_kind_names()
    }
    fn value(&self) -> String {
        format!("{self:?}")
    }
    fn parse(s: &str) -> Option<Self> {
        ErrorKind::from_name(s)
    }
}

/// Declares a plain keyword enum and its `Choice` impl.
macro_rules! keyword_choice {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl Choice for $name {
            fn options() -> Vec<String> { vec![$($text.to_string()),+] }
            fn value(&self) -> String {
                match self { $($name::$variant => $text.to_string()),+ }
            }
            fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

keyword_choice!(
    /// A plain on/off switch.
    Switch { On => "on", Off => "off" }
);

keyword_choice!(
    /// What becomes of device work (a fill, a copy, a kernel) still queued
    /// on a VMM mapping when `cuMemUnmap` removes the mapping
    /// (vmm.fault.unmap-with-work-queued).
    UnmapQueuedWork {
        /// The work finishes first: what most runs on the GPU show.
        Completes => "completes",
        /// The work faults on the unmapped range: the context carries
        /// LaunchFailed (719), reported from the next call that waits for
        /// the device or launches work on it, and sticky from then on.
        Faults => "faults",
    }
);

keyword_choice!(
    /// What the importer sees after the exporter freed memory it still maps.
    FreeWhileMapped {
        /// The physical block stays alive with its old contents.
        Retained => "retained",
        /// The freed allocation's bytes read as zero afterwards.
        Zeroed => "zeroed",
    }
);

keyword_choice!(
    /// How far a memcpy/memset may reach from the pointer's allocation.
    MemcpyBounds {
        /// Anywhere inside the mapped block (hazard when past the allocation).
        Block => "block",
        /// Only inside the allocation itself.
        Allocation => "allocation",
    }
);

keyword_choice!(
    /// What `cuMemGetAddressRange` reports for an IPC-opened pointer.
    ImportRange {
        /// The exported allocation, as mapped in the importer.
        Allocation => "allocation",
        /// The whole mapped block.
        Block => "block",
    }
);

keyword_choice!(
    /// Whether repeated `ipc_get` on one pointer yields identical bytes.
    HandleStability {
        SameBytes => "same-bytes",
        /// Each call stamps a fresh serial; all still open the same memory.
        PerCall => "per-call",
    }
);

keyword_choice!(
    /// Which `flags` values `ipc_open` accepts.
    OpenFlags {
        /// Bit 0 (`LAZY_ENABLE_PEER_ACCESS`) must be set; other bits are
        /// ignored. Measured: H100, driver 580.159.04 (1 and 3 accepted; 0, 2
        /// and 0x80000000 refused).
        LazyBit => "lazy-bit",
        /// 0 and `LAZY_ENABLE_PEER_ACCESS` (1).
        LazyOrZero => "lazy-or-zero",
        /// Only `LAZY_ENABLE_PEER_ACCESS`, as the documentation words it
        /// (and as ROCm's hipIpcOpenMemHandle checks it: `flags !=
        /// hipIpcMemLazyEnablePeerAccess` is hipErrorInvalidValue).
        LazyOnly => "lazy-only",
        /// Any value: early HIP (hip_memory.cpp before the flags check)
        /// passed `flags` through without looking at it.
        Ignored => "ignored",
    }
);

keyword_choice!(
    /// Which handle `ipc_get` makes for a pointer inside an allocation.
    InteriorHandle {
        /// The allocation's own handle, byte for byte; opening it returns
        /// the allocation's start. Measured: H100, driver 580.159.04.
        Allocation => "allocation",
        /// The handle carries the pointer's offset in its allocation and
        /// opening it returns the same interior address (ROCm: `poffset` of
        /// `ihipIpcMemHandle_t`, added by IpcAttach).
        PointerOffset => "pointer-offset",
    }
);

keyword_choice!(
    /// What a lazy cross-device `ipc_open` does to the importing context's
    /// peer access.
    LazyPeerAccess {
        /// Only the mapping is made accessible; a later `enable_peer` of the
        /// exporter's device still succeeds. Measured: 2 x H200 (NVLink),
        /// driver 580.159.04, both dialects.
        MappingOnly => "mapping-only",
        /// Peer access to the exporter's device is enabled for the context,
        /// "as if the user called cudaDeviceEnablePeerAccess": a later
        /// `enable_peer` of that device is PeerAccessAlreadyEnabled.
        Enables => "enables",
    }
);

keyword_choice!(
    /// What happens to importers' mappings when the exporter process exits.
    ExporterExit {
        /// The driver keeps the physical memory alive for existing mappings.
        MappingsRetained => "mappings-retained",
        /// Existing mappings stop working (accesses fault) until closed.
        MappingsRevoked => "mappings-revoked",
    }
);

keyword_choice!(
    /// What other processes' mappings of a crashed exporter's memory read
    /// when it held a VMM allocation handle: on the GPU the exported bytes
    /// in some runs and zeros in others
    /// (mem.lifetime.import-after-exporter-crash-with-vmm-varies).
    ExporterCrashMemory {
        /// The exported bytes, as after a crash without a VMM allocation
        /// (mem.lifetime.import-survives-exporter-crash).
        Kept => "kept",
        /// Zeros: the crash's teardown cleared the memory.
        Zeroed => "zeroed",
    }
);

keyword_choice!(
    /// Opening a handle whose block is already mapped in the current context.
    Reopen {
        /// Documented, and measured on H100 / 580.159.04: the reference count
        /// goes up and the same pointer comes back.
        Refcount => "refcount",
        /// Each open makes a new mapping at a new address, closed on its own.
        NewMapping => "new-mapping",
        /// `AlreadyMapped`.
        Error => "error",
    }
);

keyword_choice!(
    /// Opening a handle whose exporter freed the whole block before the open.
    FreedExport {
        /// InvalidValue. Measured: H100, driver 580.159.04, for a 2 MiB
        /// allocation freed before the open (a first probe once saw an open
        /// succeed after more allocation traffic: allocator state matters).
        Refused => "refused",
        /// The block stays openable (with its old bytes) while the exporter lives.
        Opens => "opens-while-exporter-lives",
    }
);

keyword_choice!(
    /// Opening a handle whose block the exporter freed and nobody maps any
    /// more (`reclaimed_export_error` names the refusal).
    StaleHandle {
        /// The handle reaches whatever the exporter has at the freed
        /// allocation's address now: an exported device allocation starting
        /// there is opened (a new mapping of the new memory), free VA is
        /// InvalidValue, anything else (an unexported allocation, pinned host
        /// memory, VA a later `ctx_create` retired) `reclaimed_export_error`.
        /// The exporter's own copy (process field damaged) maps whatever it
        /// holds there, exported or not, or a VMM mapping; a claimed VA is
        /// InvalidValue for it, or new zeroed memory where a created context,
        /// a stream-ordered pool or a VMM allocation claimed it first.
        /// Measured: H100 and H200 / 580.159.04
        /// (mem.lifetime.stale-handle-opens-new-export,
        /// mem.lifetime.exporter-own-copy-reaches-what-is-at-the-address).
        ByAddress => "by-address",
        /// Never opens: InvalidValue where the VA is free, else
        /// `reclaimed_export_error`.
        Refused => "refused",
    }
);

keyword_choice!(
    /// Whether released virtual addresses are handed out again.
    VaReuse {
        /// Released VA goes back to the arena it was reserved in; every
        /// `ctx_create` starts a new arena that all later reservations (in any
        /// context) come from, so VA reserved before it is not handed out
        /// again while it is current (mem.lifetime.va-reuse-after-ctx-create).
        /// A `ctx_destroy` retires the VA the destroyed context released and,
        /// when that context was the newest made, makes the arena before its
        /// creation current again (mem.context.va-after-ctx-destroy,
        /// mem.context.va-after-ctx-destroy-earlier-arena), ending the claim
        /// its creation laid on that arena's free VA
        /// (mem.lifetime.freed-export-va-claim-ends-with-its-context). The lowest
        /// released range of the current arena that fits is used, from its
        /// base (mem.lifetime.va-reuse-released-range-base), but a range
        /// holding the newest fresh reservation from its end
        /// (mem.lifetime.va-reuse-lowest-range). Stream-ordered and managed
        /// memory have pools of their own (mem.kinds.stream-ordered-own-va).
        /// Measured: H100 / 580.159.04 and 2 x H200
        /// (mem.lifetime.va-reuse-top-down).
        TopDown => "top-down",
        /// The lowest released range that fits, per context (the first
        /// model: H100 / 580.159.04 gives a re-opened handle the address
        /// of its closed mapping).
        LowestFit => "lowest-fit",
        /// Never: stale pointers stay stale.
        Never => "never",
    }
);

keyword_choice!(
    /// Whether releasing the newest fresh VA range moves the next fresh
    /// address back to its base (`va_reuse=top-down` only).
    VaRewind {
        /// Device memory, pinned host memory, IPC mappings and VMM
        /// reservations take fresh VA from one heap, upwards. Releasing the
        /// newest fresh range of it, nothing reserved fresh since and not the
        /// first fresh range of its arena, rewinds: the next fresh
        /// reservation, of any size, starts at its base (once: the range below
        /// it does not rewind further). The first fresh range of an arena
        /// stays a released range, carved from its end. Measured: H100 /
        /// 580.159.04 (mem.lifetime.va-rewind-newest-range,
        /// mem.lifetime.va-rewind-larger-block).
        Newest => "newest",
        /// Never: a released range is only reused as released VA (the
        /// first model).
        Never => "never",
    }
);

keyword_choice!(
    /// Whether `device_read` allocates its kernel's output buffer as the
    /// real backend does (a `cuMemAlloc` of the read's length, freed after
    /// the copy back), so that it takes a slot in the packed block.
    DeviceReadBuffer {
        /// The buffer is allocated and freed; its bytes stay behind. Measured:
        /// H100 / 580.159.04 and 2 x H200 (mem.suballoc.device-read-buffer).
        Allocated => "allocated",
        /// No buffer: a kernel reads the memory as it is.
        Off => "off",
    }
);

keyword_choice!(
    /// Which address `ipc_open` returns inside the fresh mapping.
    OpenAddress {
        /// Mapping base + the offset of the exported allocation's base (a
        /// handle of an interior pointer is the allocation's handle, byte for
        /// byte, on H100 / 580.159.04).
        AllocationBase => "allocation-base",
        /// The mapping base (start of the shared block).
        BlockBase => "block-base",
    }
);

keyword_choice!(
    /// `ipc_get` of a valid pointer with a NULL handle out-pointer.
    GetNullOut {
        /// Runtime: the process dies with SIGSEGV; driver: InvalidValue.
        /// Measured: H100, driver 580.159.04, CUDA 13.0.
        CrashInRuntime => "crash-in-runtime",
        /// InvalidValue in both dialects.
        InvalidValue => "invalid-value",
    }
);

keyword_choice!(
    /// `free(NULL)`.
    FreeNull {
        /// Runtime: no-op success ("If devPtr is 0, no operation is performed");
        /// driver: `InvalidValue`.
        ByDialect => "by-dialect",
        /// Success in every dialect: cuMemFree(0) answered success on
        /// 2 x H200, driver 580.159.04 (mem.lifetime.free-null).
        Ok => "ok",
        Error => "error",
    }
);

keyword_choice!(
    /// A kernel reading VA its process released (a freed block, a closed
    /// mapping) that no later allocation or mapping of the process reuses.
    StaleKernelRead {
        /// Zeros only where the reading context has that VA mapped again: in
        /// the context that released it when `device_read`'s own scratch
        /// buffer (a `cuMemAlloc` of the read's length) would land there (no
        /// packing block with room, the lowest released span of its pool), and
        /// in any context created after the release; elsewhere the kernel
        /// faults (IllegalAddress, sticky). Measured: H100, driver 580.159.04
        /// (mem.lifetime.kernel-read-after-free,
        /// mem.close.kernel-read-after-close,
        /// mem.close.kernel-read-after-close-other-context). A freed
        /// allocation: freed while another context than its own was current,
        /// it faults in every context
        /// (mem.lifetime.kernel-read-after-free-other-context-current); else
        /// its own context also reads zeros once a context was created after
        /// the free
        /// (mem.lifetime.kernel-read-after-free-own-context-after-create).
        Remapped => "remapped",
        /// Zeros in any context of the process (the first reading of the
        /// explore trial).
        Zeros => "zeros",
        /// The kernel faults: IllegalAddress (sticky).
        Fault => "fault",
    }
);

keyword_choice!(
    /// A memset (`cuMemsetD8`, `cudaMemset`) of VA its process released (a
    /// freed block, a closed mapping) that no later allocation or mapping
    /// of the process reuses.
    StaleMemset {
        /// Succeeds from the first context made after the release (and only
        /// there), writing bytes that kernels reading the VA see
        /// (`stale_kernel_read`); InvalidValue elsewhere. Copies there are
        /// InvalidValue everywhere. Measured: H100, driver 580.159.04
        /// (mem.close.memset-after-close-new-context).
        FirstNewContext => "first-new-context",
        /// InvalidValue in every context.
        Refused => "refused",
    }
);

keyword_choice!(
    /// `cuCtxSetCurrent` of a context already destroyed.
    SetDestroyedContext {
        /// Accepted (measured: H100, driver 580.159.04); later calls that
        /// need a context say InvalidContext.
        Accepted => "accepted",
        /// InvalidContext.
        Refused => "refused",
    }
);

keyword_choice!(
    /// `cuCtxDestroy` on a primary context.
    DestroyPrimary {
        /// `InvalidContext`; primary contexts are released, not destroyed.
        Error => "error",
        /// Acts like `cuDevicePrimaryCtxReset`: resources freed, a fresh
        /// primary context is created on next use.
        Resets => "resets",
    }
);

keyword_choice!(
    /// A VMM allocation handle used after `cuMemRelease` (it is a pointer
    /// inside the driver, so it dangles).
    StaleVmmHandle {
        /// The process dies with SIGSEGV. Measured for
        /// `cuMemExportToShareableHandle`: H100, driver 580.159.04.
        Crash => "crash",
        /// InvalidValue, as a second `cuMemRelease` answers.
        InvalidValue => "invalid-value",
    }
);

keyword_choice!(
    /// Where `cuMemAddressReserve` (no fixed address, alignment 0) places a
    /// reservation.
    VmmReserveVa {
        /// From the VA device allocations, pinned host memory and IPC mappings
        /// use, by `va_reuse` (the current arena's lowest released span that
        /// fits), but from the span's start. Measured: H100, driver 580.159.04
        /// (vmm.reserve.closed-mapping-va, vmm.reserve.freed-allocation-va,
        /// vmm.reserve.span-start).
        Shared => "shared",
        /// Fresh VA of its own, never a released device or IPC address (the
        /// first model).
        OwnPool => "own-pool",
    }
);

keyword_choice!(
    /// Descriptors the driver opens for itself in a process: they take
    /// numbers, so the descriptors an export or `send_fd` gets later are
    /// numbered around them (POSIX: the lowest free number).
    DriverFds {
        /// Every `cuCtxCreate` opens two the context holds (closed again by
        /// `cuCtxDestroy`: unmeasured). Measured: H100, driver 580.159.04: an
        /// export after a closed export gets another number once a
        /// `ctx_create` came between (vmm.export.descriptor-after-ctx-create);
        /// H200, driver 580.159.04: in generated cases, two numbers freed
        /// before a `ctx_create` were both taken after it
        /// (mem.context.create-takes-two-descriptors).
        Contexts => "contexts",
        /// As `contexts`, and the process's first interprocess event opens one
        /// it keeps: what a fresh process does. Not the default: the recorded
        /// runs reuse workers, where a process that made an interprocess event
        /// before opens nothing for the next.
        ContextsAndIpcEvents => "contexts-and-ipc-events",
        /// None: exports and `send_fd` take the lowest numbers free.
        None => "none",
    }
);

keyword_choice!(
    /// Where an interprocess event without `disable_timing` is refused.
    EventIpcTiming {
        /// `event_create` refuses the flags (InvalidValue). Measured: H100,
        /// driver 580.159.04, both dialects.
        CreateFails => "create-fails",
        /// Creation works; `ipc_get_event` refuses it (InvalidValue), as the
        /// `ipc_get_event` documentation alone would suggest.
        GetFails => "get-fails",
    }
);

keyword_choice!(
    /// `ipc_open_event` of a handle this process already opened.
    EventReopen {
        /// A second, distinct event. Measured: H100, driver 580.159.04.
        NewEvent => "new-event",
        /// The event the first open returned.
        SameEvent => "same-event",
    }
);

keyword_choice!(
    /// What an exported event's handle does once its exporter process exited.
    EventExporterExit {
        /// Runtime: the runtime's teardown at exit releases the event, so a
        /// later open is refused (MapFailed), except where the process already
        /// opened a handle of that exporter and the current context holds
        /// interprocess-event state (it created an interprocess event or
        /// opened an event handle): that open succeeds; driver: the handle
        /// still opens. Measured: H100, driver 580.159.04
        /// (event.lifetime.open-after-exporter-exit,
        /// event.lifetime.reopen-after-exporter-exit,
        /// event.lifetime.reopen-after-exporter-exit-new-context).
        ByDialect => "by-dialect",
        /// The handle still opens (a hazard: the event was destroyed).
        Opens => "opens",
        /// Refused with `event_bad_handle`'s error in both dialects (with
        /// the runtime's exception for a process that opened it before).
        Refused => "refused",
    }
);

keyword_choice!(
    /// `ipc_get_event` and `stream_wait` of an interprocess event while a
    /// context other than the event's is current (`cuStreamWaitEvent`: "may
    /// be from a different context or device than hStream").
    EventOtherContext {
        /// The process dies with SIGSEGV, unless the current context holds
        /// interprocess-event state of its own (it created an interprocess
        /// event or opened an event handle): then `ipc_get_event` returns
        /// other bytes than in the event's context, and `stream_wait` waits.
        /// Measured: H100, driver 580.159.04, both dialects
        /// (event.context.get-from-other-context,
        /// event.context.stream-wait-from-other-context; the exception:
        /// event.context.get-from-context-with-ipc-event, measured once).
        Crash => "crash",
        /// As in the event's own context (the documents' reading).
        Allow => "allow",
    }
);

keyword_choice!(
    /// Whether `cuMemCreate` needs a current context.
    VmmCreateContext {
        /// It does not: it names its device itself. Traced on 2 x H200,
        /// driver 580.159.04 (NVIDIA's memMapIPCDrv sample;
        /// vmm.create.without-current-context).
        Optional => "optional",
        /// With none current it fails as calls without a context do.
        Required => "required",
    }
);

keyword_choice!(
    /// `cudaMemPoolImportPointer` of an allocation its exporter already
    /// freed ("The imported memory must be freed from all importing
    /// processes before being freed in the exporting process": undefined).
    PoolImportFreed {
        /// The import maps the memory the pool kept (an IPC pool does not
        /// give memory back), with the exporter's last bytes. Measured: H100
        /// and 2 x H200, driver 580.159.04, both dialects
        /// (pool.lifetime.import-after-exporter-free).
        Maps => "maps",
        /// Refused: InvalidValue.
        Refused => "refused",
    }
);

keyword_choice!(
    /// `cuMemGetAddressRange` of an address in a VMM mapping no
    /// `cuMemSetAccess` has made accessible yet.
    VmmRangeBeforeAccess {
        /// CUDA_ERROR_NOT_FOUND, as for an address nothing maps. Measured:
        /// 2 x H200, driver 580.159.04, in a generated case
        /// (vmm.map.address-range-before-set-access).
        NotFound => "not-found",
        /// The mapping's range, as once access is set.
        Found => "found",
    }
);

keyword_choice!(
    /// An access, from another device over the peer link, of a pool
    /// pointer imported after its exporter freed the allocation
    /// (`pool_import_freed=maps`; undefined by the documents).
    PoolFreedPeerAccess {
        /// The access faults and the GPU contains it: cudaErrorContained
        /// (226), sticky for the importing process, as the error's
        /// reference text says of "invalid accesses of peer GPU memory over
        /// nvlink". Measured: 2 x H200 joined by NVLink, driver 580.159.04,
        /// both dialects (pool.lifetime.import-after-exporter-free-peer).
        Contained => "contained",
        /// The access reads the memory the pool kept, as on the pool's own
        /// device.
        Maps => "maps",
    }
);

keyword_choice!(
    /// `cudaMemPoolImportFromShareableHandle` of a pool this process already
    /// imported (and did not destroy).
    PoolReimport {
        /// The pool handle of the first import again.
        SamePool => "same-pool",
        /// A new handle of the same pool.
        NewPool => "new-pool",
    }
);

keyword_choice!(
    /// `cudaMemPoolImportPointer` of an allocation this process already
    /// imported (and did not free).
    PoolPtrReimport {
        /// The same pointer, counted once: the first free unmaps it (cuda.core
        /// documents both, and works around them with a cache of imports:
        /// cuda_core/cuda/core/_cpp/resource_handles.cpp, "IPC Pointer Cache").
        SamePointer => "same-pointer",
        /// A second mapping of the allocation at another address.
        NewMapping => "new-mapping",
    }
);

/// An operation refused with an error, or allowed (memory kinds IPC may not
/// export; a second context opening handles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExportRule {
    Refuse(ErrorKind),
    /// Export works like device memory.
    Allow,
}

impl Choice for ExportRule {
    fn options() -> Vec<String> {
        let mut v = vec!["allow".to_string()];
        v.extend(error_kind_names());
        v
    }
    fn value(&self) -> String {
        match self {
            ExportRule::Refuse(k) => format!("{k:?}"),
            ExportRule::Allow => "allow".into(),
        }
    }
    fn parse(s: &str) -> Option<Self> {
        match s {
            "allow" => Some(ExportRule::Allow),
            _ => ErrorKind::from_name(s).map(ExportRule::Refuse),
        }
    }
}

/// `cudaFree` on a pointer returned by `ipc_open`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FreeOfIpcPointer {
    Error(ErrorKind),
    /// Acts like `ipc_close` of that pointer.
    Unmaps,
}

impl Choice for FreeOfIpcPointer {
    fn options() -> Vec<String> {
        let mut v = vec!["unmaps".to_string()];
        v.extend(error_kind_names());
        v
    }
    fn value(&self) -> String {
        match self {
            FreeOfIpcPointer::Error(k) => format!("{k:?}"),
            FreeOfIpcPointer::Unmaps => "unmaps".into(),
        }
    }
    fn parse(s: &str) -> Option<Self> {
        match s {
            "unmaps" => Some(FreeOfIpcPointer::Unmaps),
            _ => ErrorKind::from_name(s).map(FreeOfIpcPointer::Error),
        }
    }
}

/// Declares the `Semantics` struct, its table of names and descriptions, and
/// `describe`/`set` from one list so they cannot drift apart.
macro_rules! semantics {
    ($($field:ident : $ty:ty = $default:expr, $desc:literal;)+) => {
        /// Every semantic choice of the simulator, one field each.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Semantics {
            $(#[doc = $desc] pub $field: $ty,)+
        }

        impl Default for Semantics {
            fn default() -> Self {
                Semantics { $($field: $default,)+ }
            }
        }

        impl Semantics {
            /// Every choice with its current value, allowed values and meaning.
            pub fn describe(&self) -> Vec<SemanticChoice> {
                vec![$(SemanticChoice {
                    name: stringify!($field),
                    value: Choice::value(&self.$field),
                    options: <$ty as Choice>::options(),
                    description: $desc,
                },)+]
            }

            /// The value of one choice by name, spelled as `set` accepts it
            /// (`None` for an unknown name).
            pub fn get(&self, name: &str) -> Option<String> {
                match name {
                    $(stringify!($field) => Some(Choice::value(&self.$field)),)+
                    _ => None,
                }
            }

            /// Set one choice by name. Unknown names or values are refused
            /// with a message listing what is allowed.
            pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
                let value = value.trim();
                match name.trim() {
                    $(stringify!($field) => {
                        match <$ty as Choice>::parse(value) {
                            Some(v) => { self.$field = v; Ok(()) }
                            None => Err(format!(
                                "semantic '{}' has no value '{}' (allowed: {})",
                                stringify!($field), value,
                                <$ty as Choice>::options().join(", "))),
                        }
                    })+
                    other => Err(format!(
                        "unknown semantic '{}' (known: {})",
                        other, [$(stringify!($field)),+].join(", "))),
                }
            }
        }
    };
}

semantics! {
    suballocation: Switch = Switch::On,
        "Device allocations under 2 MiB are packed (512 B aligned) into shared 2 MiB blocks, which IPC then shares whole";
    free_of_ipc_pointer: FreeOfIpcPointer = FreeOfIpcPointer::Error(ErrorKind::InvalidValue),
        "cudaFree on a pointer returned by ipc_open: an error, or acts like ipc_close (a hazard either way)";
    free_while_mapped: FreeWhileMapped = FreeWhileMapped::Retained,
        "What an importer reads after the exporter freed memory it still maps";
    memcpy_bounds: MemcpyBounds = MemcpyBounds::Allocation,
        "How far memcpy/memset may run past the pointer's allocation (block: allowed inside the mapped block, with a hazard)";
    sticky_errors: Switch = Switch::On,
        "An illegal address in a kernel poisons the process: every later call returns IllegalAddress, except cuCtxSetCurrent, cuDevicePrimaryCtxRetain, (driver API) cuPointerGetAttribute, the VMM calls (cuMem*) and creating, exporting and destroying a memory pool";
    import_range: ImportRange = ImportRange::Allocation,
        "cuMemGetAddressRange on an IPC pointer: the exported allocation, or the whole mapped block";
    ipc_managed: ExportRule = ExportRule::Refuse(ErrorKind::InvalidValue),
        "ipc_get on cudaMallocManaged memory";
    ipc_pinned_host: ExportRule = ExportRule::Refuse(ErrorKind::InvalidValue),
        "ipc_get on cudaMallocHost memory";
    ipc_pool: ExportRule = ExportRule::Refuse(ErrorKind::InvalidValue),
        "ipc_get on cudaMallocAsync (default pool) memory";
    handle_stable: HandleStability = HandleStability::SameBytes,
        "Whether repeated ipc_get on one pointer returns identical handle bytes";
    open_flags: OpenFlags = OpenFlags::LazyBit,
        "Flag values ipc_open accepts; others are InvalidValue";
    zero_handle_error: ErrorKind = ErrorKind::InvalidValue,
        "Error for ipc_open of an all-zero handle";
    garbage_handle_error: ErrorKind = ErrorKind::InvalidValue,
        "Error for ipc_open of bytes that do not decode as a handle of this machine";
    open_in_exporter: ErrorKind = ErrorKind::InvalidContext,
        "Error for ipc_open of a handle in the process that exported it";
    dead_handle_error: ErrorKind = ErrorKind::InvalidHandle,
        "Error for ipc_open of a handle whose exporter exited and no mapping holds its memory";
    reclaimed_export_error: ErrorKind = ErrorKind::NotPermitted,
        "Error for ipc_open of a handle whose block the exporter freed and nobody maps, where the exporter has something else at its address (or a ctx_create retired it)";
    stale_handle: StaleHandle = StaleHandle::ByAddress,
        "ipc_open of a handle whose block the exporter freed and nobody maps: resolved by the exporter's address (opens a new exported allocation there)";
    freed_export: FreedExport = FreedExport::Refused,
        "ipc_open of a handle whose block the exporter already freed (refused: InvalidValue)";
    va_reuse: VaReuse = VaReuse::TopDown,
        "Whether and how closed mappings' and freed blocks' addresses are handed out again";
    va_rewind: VaRewind = VaRewind::Newest,
        "Whether releasing the newest fresh VA range moves the next fresh address back to its base";
    device_read_buffer: DeviceReadBuffer = DeviceReadBuffer::Allocated,
        "Whether device_read's kernel writes into a freshly allocated (packed) buffer, as the real backend's does";
    exporter_exit: ExporterExit = ExporterExit::MappingsRetained,
        "What existing importer mappings do when the exporter exits";
    exporter_crash_memory: ExporterCrashMemory = ExporterCrashMemory::Kept,
        "What importers' mappings of a crashed exporter's memory read where it held a VMM allocation handle (the GPU answers both ways)";
    reopen: Reopen = Reopen::Refcount,
        "ipc_open of a handle already open in the current context";
    second_context: ExportRule = ExportRule::Refuse(ErrorKind::InvalidHandle),
        "ipc_open from a second context on a device where another context already holds mappings from the same exporter device";
    open_address: OpenAddress = OpenAddress::AllocationBase,
        "Which address ipc_open returns inside the new mapping";
    close_unopened: ErrorKind = ErrorKind::InvalidValue,
        "Error for ipc_close of a pointer that is not an open IPC pointer (includes a close past the count)";
    get_null_out: GetNullOut = GetNullOut::CrashInRuntime,
        "ipc_get of a valid pointer with a NULL handle out-pointer";
    free_null: FreeNull = FreeNull::Ok,
        "free of the NULL pointer";
    destroy_primary: DestroyPrimary = DestroyPrimary::Error,
        "cuCtxDestroy on a primary context";
    stale_kernel_read: StaleKernelRead = StaleKernelRead::Remapped,
        "A kernel reading released VA (freed block, closed mapping) not reused since: zeros where the reading context maps it again (its own scratch buffer, or a context made after the release), else a fault";
    stale_memset: StaleMemset = StaleMemset::FirstNewContext,
        "A memset of released VA (freed block, closed mapping) not reused since: succeeds from the first context made after the release, and kernels there read its bytes; else InvalidValue";
    set_destroyed_context: SetDestroyedContext = SetDestroyedContext::Accepted,
        "cuCtxSetCurrent of a destroyed context";
    event_unknown_flags: ErrorKind = ErrorKind::InvalidValue,
        "Error for event_create with flag bits other than blocking_sync, disable_timing and interprocess";
    event_ipc_timing: EventIpcTiming = EventIpcTiming::CreateFails,
        "Where an interprocess event without disable_timing is refused";
    event_get_not_interprocess: ErrorKind = ErrorKind::InvalidHandle,
        "Error for ipc_get_event of an event created without the interprocess flag";
    event_get_null_out: GetNullOut = GetNullOut::CrashInRuntime,
        "ipc_get_event of a valid event with a NULL handle out-pointer";
    event_open_in_exporter: ErrorKind = ErrorKind::InvalidContext,
        "Error for ipc_open_event of a handle in the process that exported it";
    event_bad_handle: ErrorKind = ErrorKind::MapFailed,
        "Error for ipc_open_event of zeroed bytes or bytes that name no exported event";
    event_reopen: EventReopen = EventReopen::NewEvent,
        "ipc_open_event of a handle this process already opened";
    event_after_exporter_destroy: ExportRule = ExportRule::Allow,
        "Calls on an imported event after its exporter destroyed it (documented undefined; hazard logged): allow, or an error";
    event_dead_handle: ExportRule = ExportRule::Allow,
        "ipc_open_event of a handle whose exporter destroyed the event or exited (hazard logged): allow, or an error";
    event_exporter_exit: EventExporterExit = EventExporterExit::ByDialect,
        "ipc_open_event of a handle whose exporter process exited";
    event_exporter_crash: EventExporterExit = EventExporterExit::Opens,
        "ipc_open_event of a handle whose exporter process crashed (the runtime's teardown at exit did not run)";
    event_get_imported: ExportRule = ExportRule::Refuse(ErrorKind::InvalidHandle),
        "ipc_get_event of an event opened from a handle: an error, or allow (the handle it was opened from)";
    event_other_context: EventOtherContext = EventOtherContext::Crash,
        "ipc_get_event and stream_wait of an interprocess event from a context other than the event's";
    elapsed_without_timing: ErrorKind = ErrorKind::InvalidHandle,
        "Error for event_elapsed on an event without timing (disable_timing, every imported event) or never recorded";
    // --- VMM ---
    vmm_fabric: ExportRule = ExportRule::Refuse(ErrorKind::NotPermitted),
        "cuMemCreate requesting fabric handles (refused without an IMEX channel even where the attribute says 1)";
    vmm_range_before_access: VmmRangeBeforeAccess = VmmRangeBeforeAccess::NotFound,
        "cuMemGetAddressRange of a VMM mapping before cuMemSetAccess: NotFound, or the mapping's range";
    vmm_access_before_set: ErrorKind = ErrorKind::InvalidValue,
        "memcpy/memset on a VMM mapping before cuMemSetAccess granted access (a kernel faults instead)";
    vmm_stale_handle: StaleVmmHandle = StaleVmmHandle::Crash,
        "Exporting or mapping an allocation handle after its cuMemRelease";
    vmm_reserve_va: VmmReserveVa = VmmReserveVa::Shared,
        "Where cuMemAddressReserve places a reservation: in released device/IPC VA like any allocation (from the start of the span), or in VA of its own";
    driver_fds: DriverFds = DriverFds::ContextsAndIpcEvents,
        "Descriptors the driver opens for itself (each ctx_create; in a fresh process the first interprocess event too), which later exports and send_fd are numbered around";
    vmm_import_bad_fd: ErrorKind = ErrorKind::Unknown,
        "cuMemImportFromShareableHandle of a descriptor that is closed, invalid, or not CUDA's (measured: CUDA_ERROR_UNKNOWN)";
    interior_handle: InteriorHandle = InteriorHandle::Allocation,
        "ipc_get of a pointer inside an allocation: the allocation's handle, or one carrying the pointer's offset";
    lazy_peer_access: LazyPeerAccess = LazyPeerAccess::MappingOnly,
        "Whether a lazy cross-device ipc_open enables peer access for the importing context (enable_peer is then PeerAccessAlreadyEnabled)";
    hidden_exporter_device: ExportRule = ExportRule::Allow,
        "ipc_open of a handle whose memory lives on a device the importer cannot see (CUDA_VISIBLE_DEVICES; measured on 2 x H200: allowed)";
    enable_peer_self: ErrorKind = ErrorKind::PeerAccessUnsupported,
        "Error for enable_peer of the current context's own device (measured on 2 x H200: PeerAccessUnsupported)";
    cross_pidns_ipc: ExportRule = ExportRule::Allow,
        "ipc_open and ipc_open_event of a handle exported by a process in another PID namespace (pidns=new; unmeasured): allow, or an error";
    vmm_create_context: VmmCreateContext = VmmCreateContext::Optional,
        "Whether cuMemCreate needs a current context (NVIDIA's memMapIPCDrv sample destroys its contexts first)";
    unmap_queued_work: UnmapQueuedWork = UnmapQueuedWork::Completes,
        "cuMemUnmap right after a fill, copy or kernel on the range, with no synchronisation between: the work completes first, or faults (LaunchFailed, sticky); a race on the GPU";
    // --- memory pools ---
    pool_import_freed: PoolImportFreed = PoolImportFreed::Maps,
        "pool_import_ptr of an allocation its exporter already freed (documented undefined; hazard logged): maps the memory the pool kept, or refused";
    pool_freed_peer_access: PoolFreedPeerAccess = PoolFreedPeerAccess::Contained,
        "An access from another device of a pool pointer imported after its exporter freed it: faults, contained (cudaErrorContained, sticky), or reads the memory the pool kept";
    pool_reimport: PoolReimport = PoolReimport::SamePool,
        "pool_import of a pool this process already imported: the same pool handle, or a new one";
    pool_ptr_reimport: PoolPtrReimport = PoolPtrReimport::SamePointer,
        "pool_import_ptr of an allocation this process already imported: the same pointer (the first free unmaps it), or a new mapping";
}

impl Semantics {
    /// The choices where HIP's source-level behaviour differs from the
    /// measured CUDA defaults. Each is cited in docs/semantics.md; the
    /// source is ROCm/clr `hipamd/src/hip_memory.cpp` (hipIpcGetMemHandle,
    /// hipIpcOpenMemHandle), commit 004c4f7c, and `hip_event_ipc.cpp`
    /// (hipIpcGetEventHandle), commit 06edbb81.
    pub fn hip_profile() -> Semantics {
        Semantics {
            // `flags != hipIpcMemLazyEnablePeerAccess` -> hipErrorInvalidValue.
            open_flags: OpenFlags::LazyOnly,
            // `handle == nullptr` -> hipErrorInvalidValue, no crash.
            get_null_out: GetNullOut::InvalidValue,
            // IpcAttach failing -> hipErrorInvalidDevicePointer.
            garbage_handle_error: ErrorKind::InvalidDevicePointer,
            dead_handle_error: ErrorKind::InvalidDevicePointer,
            // `poffset` travels in the handle and is added on attach.
            interior_handle: InteriorHandle::PointerOffset,
            // hipIpcGetEventHandle (hip_event_ipc.cpp): `handle == nullptr`
            // -> hipErrorInvalidValue, no crash.
            event_get_null_out: GetNullOut::InvalidValue,
            ..Semantics::default()
        }
    }

    /// `(name, cuda value, hip value)` for every choice the HIP profile changes.
    pub fn hip_differences() -> Vec<(&'static str, String, String)> {
        let cuda = Semantics::default().describe();
        let hip = Semantics::hip_profile().describe();
        cuda.into_iter()
            .zip(hip)
            .filter(|(c, h)| c.value != h.value)
            .map(|(c, h)| (c.name, c.value, h.value))
            .collect()
    }
}

impl Semantics {
    /// Apply a list of `name=value` pieces separated by commas or whitespace
    /// (the command-line form, e.g. `suballocation=off,reopen=error`).
    pub fn apply(&mut self, spec: &str) -> Result<(), String> {
        for piece in spec
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|p| !p.is_empty())
        {
            let (name, value) = piece
                .split_once('=')
                .ok_or_else(|| format!("expected name=value, found '{piece}'"))?;
            self.set(name, value)?;
        }
        Ok(())
    }
}
