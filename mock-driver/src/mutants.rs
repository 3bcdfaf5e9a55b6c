//! Deliberately wrong simulators ("mutants"), for tests only (feature
//! `mutants`): the catalogue and the exploration properties must reject every
//! one of them (`conformance/tests/mutants.rs` asserts it and prints the kill
//! rate). Each hook is one line at the place it breaks, behind [`World::mutant`].

/// One deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// `ipc_close` does not decrement the open count.
    CloseDoesNotDecrement,
    /// A second context may open handles of an exporter another context holds.
    SecondContextAllowed,
    /// Small allocations get a block each instead of sharing one.
    SubAllocationsNotShared,
    /// The exporter may open its own handle.
    ExporterOpensOwnHandle,
    /// Writes through an IPC mapping do not reach the shared memory.
    ImportWritesPrivate,
    /// A kernel read returns a different byte on every run.
    NondeterministicKernelRead,
    /// `ipc_close` of an unopened pointer returns a code no document lists.
    UndocumentedCloseError,
    /// A handle with a damaged offset byte panics the simulator.
    PanicOnDamagedOffset,
    /// An exit with mappings open is not logged as a leak.
    LeakNotLogged,
    /// `ipc_get_event` accepts an event created without the interprocess flag.
    EventWithoutInterprocessFlag,
    /// `ipc_close` of a pointer this process never opened closes another
    /// process's mapping at that address.
    ForeignCloseClosesOtherMapping,
    /// `free` of an already freed pointer succeeds.
    DoubleFreeSucceeds,
    /// A kernel's writes (`slow_fill`) are not tracked for ordering: a read
    /// that races with one is not logged as `unsynchronized-read`.
    KernelWritesUnordered,
    /// A handle of an event whose exporter crashed is refused as after an
    /// exit (the runtime's teardown is taken to run on a crash too).
    EventRefusedAfterExporterCrash,
    /// An event record captures every write its process issued, whatever
    /// stream the write went to (the record ignores its stream).
    EventRecordIgnoresStream,
    /// `stream_wait` returns success and orders nothing.
    StreamWaitDoesNothing,
    /// An event completes at its record, not when the work it captured is
    /// done: a synchronize on it returns before the bytes land.
    EventCompletesEarly,
    /// A second record of an event adds to what the first captured instead
    /// of replacing it.
    EventRecordAccumulates,
    /// Work on the legacy default stream does not wait for the blocking
    /// streams' work.
    LegacyIgnoresBlockingStreams,
    /// A non-blocking stream synchronizes with the legacy default stream as
    /// a blocking one does.
    NonBlockingOrderedWithLegacy,
    /// A read is never a race with a write its own process made, whatever
    /// streams the two ran on.
    OwnStreamsUnordered,
    /// `vmm_unmap` succeeds and leaves the mapping in place.
    VmmUnmapKeepsMapping,
    /// The per-thread default stream does not synchronize with the legacy
    /// default stream (it is taken for a non-blocking stream).
    PerThreadNonBlocking,
    /// Every allocation answers the same `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
    BufferIdsShared,
}

impl Mutant {
    pub const ALL: [Mutant; 24] = [
        Mutant::CloseDoesNotDecrement,
        Mutant::SecondContextAllowed,
        Mutant::SubAllocationsNotShared,
        Mutant::ExporterOpensOwnHandle,
        Mutant::ImportWritesPrivate,
        Mutant::NondeterministicKernelRead,
        Mutant::UndocumentedCloseError,
        Mutant::PanicOnDamagedOffset,
        Mutant::LeakNotLogged,
        Mutant::EventWithoutInterprocessFlag,
        Mutant::ForeignCloseClosesOtherMapping,
        Mutant::DoubleFreeSucceeds,
        Mutant::KernelWritesUnordered,
        Mutant::EventRefusedAfterExporterCrash,
        Mutant::EventRecordIgnoresStream,
        Mutant::StreamWaitDoesNothing,
        Mutant::EventCompletesEarly,
        Mutant::EventRecordAccumulates,
        Mutant::LegacyIgnoresBlockingStreams,
        Mutant::NonBlockingOrderedWithLegacy,
        Mutant::OwnStreamsUnordered,
        Mutant::VmmUnmapKeepsMapping,
        Mutant::PerThreadNonBlocking,
        Mutant::BufferIdsShared,
    ];
}

/// A counter shared by every run, so two runs of one seed differ.
pub(crate) static RUNS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
