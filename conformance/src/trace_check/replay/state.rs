//! What the lowering keeps while it walks the history, and the helpers
//! every area's file uses: emitting steps and comments, naming recorded
//! values (pointers, contexts, streams), and the happens-before the trace's
//! own records give (`accessed`). A leaf below the area files and
//! `mod.rs`.

use crate::trace_check::load::{escaped, EntryId, Folder, HandleBytes, Rec};
use crate::trace_check::model::{Finding, FindingClass, MAX_LISTED};
use crate::trace_check::sync_rules::{Memory, TABLE};
use ipc_harness::scenario::{Expect, ExpectList, Expectation, Op, Ref, Scenario, Step};
use ipc_harness::{ApiError, Dialect, ErrorKind, FreeKind, VmmAccess};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The longest span a modelled device copy, set or kernel covers (the
/// simulator keeps their bytes sparse; it refuses copies over 256 MiB): a
/// race is seen on the span's first bytes.
pub const MAX_MODELLED_SPAN: u64 = 64 << 20;
/// The longest span a modelled host copy (`read`, `write`) covers: the
/// simulator and the language hold those bytes whole, and a check of a
/// program moving 64 MiB buffers would spend its time copying them. A race
/// is seen where this first part of the copy overlaps another process's
/// work.
pub const MAX_HOST_SPAN: u64 = 4 << 20;
/// Most devices a trace may name (an ordinal above is not a device).
pub const MAX_DEVICES: u32 = 64;
/// Lines the replay's text has before its first step: three metadata
/// lines, a blank one, `devices`, (one line per process,) a blank one.
pub const HEADER_LINES: usize = 6;

/// What a step of the replay stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The recorded call itself: its outcome is compared with the driver's.
    Call,
    /// The device work of a recorded call, modelled (`sync_rules.rs`): its
    /// outcome is not the call's answer.
    Model,
    /// Bookkeeping the trace implies (a handle or descriptor passed, a
    /// pointer offset, a stream made at its first use, an exit).
    Harness,
}

/// Where a step of the replay came from (kept small: one per step).
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    /// Index into `Folder::processes`.
    pub process: u32,
    /// The record's `seq` in its process's file; `u64::MAX` for none (an
    /// exit).
    seq: u64,
    /// The entry point; `EntryId::MAX` for none.
    entry: EntryId,
    pub role: Role,
    /// The row of the synchronisation table that modelled it, by index
    /// into `sync_rules::TABLE` (`u8::MAX` for none).
    rule: u8,
    /// Whether `access` names an object.
    has_access: bool,
    /// The shared object it reads or writes, and whether it may write.
    access_object: u32,
    access_writes: bool,
}

impl Origin {
    pub fn new(
        process: usize,
        seq: Option<u64>,
        entry: Option<EntryId>,
        role: Role,
        rule: Option<&'static str>,
        access: Option<(usize, bool)>,
    ) -> Origin {
        let rule = rule
            .and_then(|id| TABLE.iter().position(|r| r.id == id))
            .map_or(u8::MAX, |i| i as u8);
        Origin {
            process: process as u32,
            seq: seq.unwrap_or(u64::MAX),
            entry: entry.unwrap_or(EntryId::MAX),
            role,
            rule,
            has_access: access.is_some(),
            access_object: access.map_or(0, |a| a.0 as u32),
            access_writes: access.is_some_and(|a| a.1),
        }
    }

    pub fn process(&self) -> usize {
        self.process as usize
    }

    pub fn seq(&self) -> Option<u64> {
        (self.seq != u64::MAX).then_some(self.seq)
    }

    pub fn entry(&self) -> Option<EntryId> {
        (self.entry != EntryId::MAX).then_some(self.entry)
    }

    pub fn rule(&self) -> Option<&'static str> {
        TABLE.get(usize::from(self.rule)).map(|r| r.id)
    }

    pub fn access(&self) -> Option<(usize, bool)> {
        self.has_access
            .then_some((self.access_object as usize, self.access_writes))
    }
}

/// One line of the replay's text: a comment, or a step (by index).
#[derive(Debug, Clone)]
pub enum Line {
    Comment(String),
    Step(usize),
}

/// The lowered history.
pub struct Replay {
    pub scenario: Scenario,
    /// Per step.
    pub origin: Vec<Origin>,
    pub lines: Vec<Line>,
    /// Findings of the replay's own rules.
    pub findings: Vec<Finding>,
    /// Why the replay cannot judge the trace whole (each a sentence).
    pub reasons: Vec<String>,
    /// What the reader should know (descriptor pairing by order, ...).
    pub notes: Vec<String>,
    /// Recorded calls the replay carries as comments only.
    pub not_replayed: usize,
    /// Per process: a parent's wait says a signal ended it (what it held
    /// at its end is then not its doing).
    pub killed: Vec<bool>,
    /// Findings beyond [`MAX_LISTED`] of a class, counted only.
    pub findings_left_out: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    /// An allocation, freed by this kind of free.
    Alloc(FreeKind),
    /// `cuMemAllocFromPoolAsync`.
    PoolAlloc,
    /// An IPC mapping of another process's memory (`cuIpcOpenMemHandle`).
    Opened,
    /// `cuMemPoolImportPointer`.
    PoolImport,
    /// A VMM mapping (`cuMemMap`).
    Mapped,
    /// Host memory registered with `cuMemHostRegister` (no replay binding).
    Registered,
}

impl RegionKind {
    /// Freed by `cuMemFreeAsync` through the pool calls (`pool_free`).
    pub fn pool_owned(self) -> bool {
        matches!(self, RegionKind::PoolAlloc | RegionKind::PoolImport)
    }
}

#[derive(Debug, Clone)]
pub struct Region {
    pub base: u64,
    pub size: u64,
    pub binding: String,
    pub memory: Memory,
    pub object: Option<usize>,
    pub kind: RegionKind,
    /// Opened regions: opens outstanding.
    pub opens: u32,
    /// Offsets into it already bound (delta -> binding).
    pub offsets: HashMap<u64, String>,
}

/// The regions of one process, by base address.
#[derive(Debug, Default)]
pub struct Regions {
    pub live: BTreeMap<u64, Region>,
    /// Regions freed, closed or unmapped: the latest at each base.
    pub dead: BTreeMap<u64, Region>,
}

impl Regions {
    fn find(map: &BTreeMap<u64, Region>, ptr: u64) -> Option<u64> {
        let (&base, r) = map.range(..=ptr).next_back()?;
        (ptr < base.saturating_add(r.size.max(1))).then_some(base)
    }

    /// The live region holding `ptr`, else the dead one: (base, live).
    pub fn holding(&self, ptr: u64) -> Option<(u64, bool)> {
        if let Some(b) = Self::find(&self.live, ptr) {
            return Some((b, true));
        }
        Self::find(&self.dead, ptr).map(|b| (b, false))
    }

    pub fn get(&self, base: u64, live: bool) -> Option<&Region> {
        if live {
            self.live.get(&base)
        } else {
            self.dead.get(&base)
        }
    }

    pub fn get_mut(&mut self, base: u64, live: bool) -> Option<&mut Region> {
        if live {
            self.live.get_mut(&base)
        } else {
            self.dead.get_mut(&base)
        }
    }

    pub fn kill(&mut self, base: u64) {
        if let Some(r) = self.live.remove(&base) {
            self.dead.insert(base, r);
        }
    }
}

/// What a descriptor of a process stands for in the replay.
#[derive(Debug, Clone)]
pub struct FdObject {
    /// The process's binding of it.
    pub binding: String,
}

#[derive(Debug, Default)]
pub struct Proc {
    pub name: String,
    serial: u64,
    pub memory: Regions,
    /// Reservations: base -> (size, binding).
    pub reserved: BTreeMap<u64, (u64, String)>,
    pub reserved_dead: BTreeSet<u64>,
    pub contexts: HashMap<u64, String>,
    /// `cuCtxPushCurrent` / `cuCtxPopCurrent`: the contexts current before.
    pub ctx_stack: Vec<Option<u64>>,
    pub current: Option<u64>,
    /// Events: value -> (binding, shared event).
    pub events: HashMap<u64, (String, Option<usize>)>,
    pub streams: HashMap<u64, String>,
    /// Streams capturing into a graph: their work is not run.
    pub capturing: HashSet<u64>,
    /// VMM handles: value -> (binding, object).
    pub vmm: HashMap<u64, (String, Option<usize>)>,
    pub released_vmm: HashSet<u64>,
    /// Memory pools: value -> binding.
    pub pools: HashMap<u64, String>,
    /// Descriptors the replay follows (exports, received, taken), by number.
    pub fds: HashMap<i64, FdObject>,
    pub exited: bool,
    /// Outputs of failed IPC calls: (value, seq, entry).
    pub failed_outputs: Vec<(u64, u64, EntryId)>,
    /// Happens-before from other processes: process -> write epoch seen.
    pub seen: HashMap<usize, u64>,
    /// Device writes made so far.
    pub epoch: u64,
    /// When it last waited for its device work (a host synchronisation).
    pub synced_ns: u64,
}

impl Proc {
    pub fn fresh(&mut self, prefix: &str) -> String {
        self.serial += 1;
        format!("{}_{prefix}{}", self.name, self.serial)
    }

    /// This process's happens-before now: what it has seen, and itself.
    pub fn clock(&self, me: usize) -> HashMap<usize, u64> {
        let mut c = self.seen.clone();
        c.insert(me, self.epoch);
        c
    }

    /// Everything `clock` saw happens before this process's next steps.
    pub fn merge(&mut self, clock: &HashMap<usize, u64>) {
        for (&q, &e) in clock {
            let v = self.seen.entry(q).or_insert(0);
            *v = (*v).max(e);
        }
    }
}

/// A shared object's latest device write.
#[derive(Debug, Clone, Copy)]
pub struct LastWrite {
    pub process: usize,
    pub epoch: u64,
    pub t_ns: u64,
    pub seq: u64,
    pub entry: EntryId,
}

#[derive(Debug, Default)]
pub struct Object {
    pub binding: String,
    pub size: u64,
    pub last_write: Option<LastWrite>,
}

/// A host record by (process, record seq).
pub type Record = (usize, u64);

/// Descriptors one message passed: the receiving record, and each
/// descriptor as (the sender's number, the receiver's number).
pub type FdFlow = (usize, u64, Vec<(i64, i64)>);

pub struct Lowering<'f> {
    pub folder: &'f Folder,
    pub procs: Vec<Proc>,
    pub objects: Vec<Object>,
    /// Memory handle bytes -> the object they stand for (the first
    /// maker's).
    pub mem_handles: HashMap<HandleBytes, Option<usize>>,
    /// Pool pointer export data -> the object it stands for.
    pub pool_exports: HashMap<HandleBytes, Option<usize>>,
    /// Event handle bytes -> (binding, maker, shared event, the event's
    /// binding). The driver gives a destroyed event's slot, and so its
    /// handle bytes, to a later interprocess event: the newest maker wins.
    pub event_handles: HashMap<HandleBytes, (String, usize, usize, String)>,
    /// Shared events: the happens-before a record captured.
    pub shared_events: Vec<HashMap<usize, u64>>,
    /// Look-ahead: which processes open each handle (memory, event, pool
    /// pointer export data).
    pub openers: HashMap<HandleBytes, BTreeSet<usize>>,
    /// Descriptors passed between processes, by (process, record seq) of
    /// the sending host record: (receiver, receiving record seq, (the
    /// sender's number, the receiver's number) of each).
    pub fd_sends: HashMap<Record, Vec<FdFlow>>,
    /// Received descriptors not yet taken in: (process, record seq) ->
    /// bindings by the receiver's numbers.
    pub fd_arrivals: HashMap<(usize, u64), Vec<(i64, String)>>,
    /// Coverage 0: (process, call) of a descriptor import -> its export.
    pub import_of: HashMap<(usize, usize), (usize, usize)>,
    /// Coverage 0: (process, call) of an export -> its importers.
    pub importers: HashMap<(usize, usize), Vec<(usize, usize)>>,
    /// Coverage 0: the importer's binding of a descriptor, by import.
    pub received_fd: HashMap<(usize, usize), String>,
    pub exported_object: HashMap<(usize, usize), Option<usize>>,
    /// Objects behind descriptors, by the binding of the descriptor.
    pub fd_objects: HashMap<String, Option<usize>>,
    /// The binding of handle bytes each process holds: its own (it made
    /// them) or the first one sent to it.
    pub held: HashMap<(usize, HandleBytes), String>,
    /// Look-ahead: (process, context value) -> the device of the primary
    /// context it is.
    pub primary_of: HashMap<(usize, u64), u32>,
    /// Handle bytes a failing get left behind: (process, seq, entry).
    pub failed_handles: HashMap<HandleBytes, (usize, u64, EntryId)>,
    /// Notes already given: (writer, reader, object).
    pub ordered_notes: HashSet<(usize, usize, usize)>,
    /// Host happens-before waiting to be taken in: messages and posts not
    /// yet received, by (process, record seq) of the receiving record.
    pub host_edges: HashMap<(usize, u64), Vec<HashMap<usize, u64>>>,
    /// Host records that pass happens-before on: (process, record seq) of
    /// the sender -> the receiving records.
    pub host_sends: HashMap<(usize, u64), Vec<(usize, u64)>>,
    /// A process's clock when it ended (for a parent's wait).
    pub final_clock: HashMap<usize, HashMap<usize, u64>>,
    /// A process's clock given at its start (by a fork, spawn or exec).
    pub start_clock: HashMap<usize, HashMap<usize, u64>>,
    pub started: Vec<bool>,
    /// Per process: a parent's wait says a signal ended it.
    pub killed: Vec<bool>,
    pub steps: Vec<Step>,
    pub origin: Vec<Origin>,
    pub lines: Vec<Line>,
    pub line: usize,
    pub findings: Vec<Finding>,
    /// Findings of each class so far, and those beyond [`MAX_LISTED`].
    pub finding_counts: HashMap<FindingClass, usize>,
    pub findings_left_out: usize,
    /// Why not judged: what -> (its first occurrence, count).
    pub reasons: BTreeMap<String, (String, usize)>,
    pub notes: Vec<String>,
    /// Opaque device work: calls whose memory the trace does not show.
    pub opaque: usize,
    pub not_replayed: usize,
    pub devices: u32,
}

/// The expectation of a call the driver answered `result`. The list of
/// each error code is made once and shared by every step that expects it
/// (a polling loop records a million `NOT_READY`s).
pub fn expect_result(result: i32) -> Expect {
    use std::sync::{Mutex, OnceLock};
    /// Distinct codes kept; a hostile trace's further codes get lists of
    /// their own.
    const MAX_SHARED: usize = 1024;
    type Shared = (&'static [Expectation], &'static str);
    static LISTS: OnceLock<Mutex<HashMap<i32, Shared>>> = OnceLock::new();
    if result == 0 {
        return Expect::Default;
    }
    let make = || {
        let error = ApiError::from_code(Dialect::Driver, result);
        match error.kind() {
            Some(kind) => Expectation::Error {
                kind,
                name: error.name().into_owned(),
            },
            None => Expectation::AnyError,
        }
    };
    let lists = LISTS.get_or_init(Default::default);
    let mut lists = lists.lock().unwrap_or_else(|e| e.into_inner());
    let len = lists.len();
    let shared = match lists.get(&result) {
        Some(s) => Some(*s),
        None if len < MAX_SHARED => {
            let item = make();
            let text: &'static str = Box::leak(item.to_string().into_boxed_str());
            let items: &'static [Expectation] = Box::leak(vec![item].into_boxed_slice());
            lists.insert(result, (items, text));
            Some((items, text))
        }
        None => None,
    };
    match shared {
        Some((items, text)) => Expect::List(ExpectList {
            items: Cow::Borrowed(items),
            text: Cow::Borrowed(text),
        }),
        None => {
            let item = make();
            Expect::List(ExpectList {
                text: item.to_string().into(),
                items: vec![item].into(),
            })
        }
    }
}

/// A query the driver answered `NOT_READY`: whether the work is done yet is
/// timing, so either answer of the simulator holds (the list is shared by
/// every step of a polling loop).
pub fn expect_not_ready_or_ok() -> Expect {
    use std::sync::OnceLock;
    static LIST: OnceLock<(&'static [Expectation], &'static str)> = OnceLock::new();
    let (items, text) = *LIST.get_or_init(|| {
        let not_ready = ApiError::new(Dialect::Driver, ErrorKind::NotReady);
        let item = Expectation::OneOf(vec![
            Expectation::Error {
                kind: ErrorKind::NotReady,
                name: not_ready.name().into_owned(),
            },
            Expectation::Ok,
        ]);
        let text: &'static str = Box::leak(item.to_string().into_boxed_str());
        (Box::leak(vec![item].into_boxed_slice()), text)
    });
    Expect::List(ExpectList {
        items: Cow::Borrowed(items),
        text: Cow::Borrowed(text),
    })
}

pub fn expect_any() -> Expect {
    Expect::List(ExpectList {
        items: Cow::Borrowed(&[Expectation::Any]),
        text: Cow::Borrowed("any"),
    })
}

pub fn name(n: &str) -> Ref {
    Ref::Name(n.to_string())
}

/// A `CUmemAccess_flags` value as the language's access.
pub fn access(flags: u32) -> VmmAccess {
    match flags {
        0 => VmmAccess::None,
        1 => VmmAccess::Read,
        _ => VmmAccess::ReadWrite,
    }
}

impl<'f> Lowering<'f> {
    pub fn new(folder: &'f Folder) -> Lowering<'f> {
        let n = folder.processes.len();
        Lowering {
            folder,
            procs: (0..n)
                .map(|i| Proc {
                    name: format!("p{}", i + 1),
                    ..Proc::default()
                })
                .collect(),
            objects: Vec::new(),
            mem_handles: HashMap::new(),
            pool_exports: HashMap::new(),
            event_handles: HashMap::new(),
            shared_events: Vec::new(),
            openers: HashMap::new(),
            fd_sends: HashMap::new(),
            fd_arrivals: HashMap::new(),
            import_of: HashMap::new(),
            importers: HashMap::new(),
            received_fd: HashMap::new(),
            exported_object: HashMap::new(),
            fd_objects: HashMap::new(),
            held: HashMap::new(),
            primary_of: HashMap::new(),
            failed_handles: HashMap::new(),
            ordered_notes: HashSet::new(),
            host_edges: HashMap::new(),
            host_sends: HashMap::new(),
            final_clock: HashMap::new(),
            start_clock: HashMap::new(),
            started: vec![false; n],
            killed: vec![false; n],
            // Room for the steps a trace's calls make, so that the vectors
            // are never copied as they grow (a step is a few hundred bytes,
            // and room never written to takes no memory).
            steps: Vec::with_capacity(2 * folder.calls + 2 * n),
            origin: Vec::with_capacity(2 * folder.calls + 2 * n),
            lines: Vec::with_capacity(2 * folder.calls + 2 * n),
            line: HEADER_LINES + n,
            findings: Vec::new(),
            finding_counts: HashMap::new(),
            findings_left_out: 0,
            reasons: BTreeMap::new(),
            notes: Vec::new(),
            opaque: 0,
            not_replayed: 0,
            devices: 1,
        }
    }

    pub fn rec(&self, process: usize, call: usize) -> &'f Rec {
        &self.folder.processes[process].calls[call]
    }

    /// The entry point of `r`, printable on one line.
    pub fn entry(&self, r: &Rec) -> String {
        escaped(self.folder.entry(r))
    }

    /// An interned entry point by id, printable on one line.
    pub fn entry_name(&self, e: EntryId) -> String {
        escaped(self.folder.entries.get(usize::from(e)).map_or("?", |s| s))
    }

    // --- emitting -----------------------------------------------------

    pub fn step(
        &mut self,
        process: usize,
        bind: Option<String>,
        op: Op,
        expect: Expect,
        origin: Origin,
    ) -> usize {
        self.line += 1;
        let index = self.steps.len();
        if index == self.steps.capacity() {
            // Grown by a quarter, not doubled: a step is a few hundred
            // bytes, and a million-call trace has a million of them.
            let more = index / 4 + 1024;
            self.steps.reserve_exact(more);
            self.origin.reserve_exact(more);
        }
        self.steps.push(Step {
            line: self.line,
            process,
            bind,
            op,
            expect,
            repeat: None,
        });
        self.origin.push(origin);
        self.lines.push(Line::Step(index));
        index
    }

    /// The recorded call `r` as a step expecting the driver's answer.
    pub fn call_step(&mut self, process: usize, r: &Rec, bind: Option<String>, op: Op) -> usize {
        let origin = Origin::new(process, Some(r.seq), Some(r.entry), Role::Call, None, None);
        let query = matches!(op, Op::EventQuery { .. } | Op::StreamQuery { .. });
        let not_ready =
            ApiError::from_code(Dialect::Driver, r.result).kind() == Some(ErrorKind::NotReady);
        let expect = if query && not_ready {
            expect_not_ready_or_ok()
        } else {
            expect_result(r.result)
        };
        self.step(process, bind, op, expect, origin)
    }

    /// A step modelling `r`'s device work, or bookkeeping it implies.
    #[allow(clippy::too_many_arguments)]
    pub fn model_step(
        &mut self,
        process: usize,
        r: Option<&Rec>,
        bind: Option<String>,
        op: Op,
        role: Role,
        rule: Option<&'static str>,
        access: Option<(usize, bool)>,
    ) -> usize {
        let origin = Origin::new(
            process,
            r.map(|r| r.seq),
            r.map(|r| r.entry),
            role,
            rule,
            access,
        );
        self.step(process, bind, op, expect_any(), origin)
    }

    /// A bookkeeping step of `process` with no recorded call behind it.
    pub fn harness_step(&mut self, process: usize, seq: Option<u64>, bind: Option<String>, op: Op) {
        let origin = Origin::new(process, seq, None, Role::Harness, None, None);
        self.step(process, bind, op, expect_any(), origin);
    }

    pub fn comment(&mut self, process: usize, text: String) {
        self.line += 1;
        let name = &self.procs[process].name;
        self.lines.push(Line::Comment(format!("# {name}: {text}")));
    }

    pub fn unlowered(&mut self, process: usize, r: &Rec, why: &str) {
        self.not_replayed += 1;
        let entry = self.entry(r);
        self.comment(
            process,
            format!("{entry} (seq {}) not replayed: {why}", r.seq),
        );
    }

    /// A reason the trace cannot be judged whole, counted by what it is.
    pub fn reason(&mut self, process: usize, r: &Rec, what: &str) {
        let entry = self.entry(r);
        let p = &self.folder.processes[process];
        let mut first = format!(
            "{} (pid {}) {entry} seq {}: {what}",
            self.procs[process].name, p.pid, r.seq
        );
        if p.coverage() == 0 && what.contains("no recorded call") {
            first.push_str(
                " (this trace was written by tracer 0.1.0, which did not record memory pools, \
                 stream creation or most other calls beyond legacy IPC, events and VMM)",
            );
        }
        self.reasons.entry(what.to_string()).or_insert((first, 0)).1 += 1;
    }

    pub fn finding(
        &mut self,
        class: FindingClass,
        kind: &str,
        process: usize,
        r: Option<&Rec>,
        detail: String,
    ) {
        let n = self.finding_counts.entry(class).or_insert(0);
        *n += 1;
        if *n > MAX_LISTED {
            self.findings_left_out += 1;
            return;
        }
        let call = r.map_or_else(|| "exit".to_string(), |r| self.entry(r));
        self.findings.push(Finding {
            class,
            kind: kind.to_string(),
            process: self.procs[process].name.clone(),
            pid: self.folder.processes[process].pid,
            seq: r.map(|r| r.seq),
            call,
            detail,
            rules: Vec::new(),
            found_by: "replay".into(),
            after_divergence: false,
        });
    }

    // --- names for values ------------------------------------------------

    /// The binding that names `ptr` in `process` (its region's, or a fresh
    /// `offset` into it) with the region's memory, object and the bytes
    /// from `ptr` to its end. Registered host memory has no binding.
    /// A set-access call (`cuMemSetAccess`, `cuMemPoolSetAccess`): one step
    /// per access descriptor it recorded, made by `op` from the access and
    /// the device; the call as a comment where none was recorded.
    pub fn access_steps(&mut self, process: usize, r: &Rec, op: impl Fn(VmmAccess, u32) -> Op) {
        let descriptors = r.args.access().map(<[_]>::to_vec).unwrap_or_default();
        if descriptors.is_empty() {
            return self.unlowered(process, r, "no access descriptor recorded");
        }
        for (device, flags) in descriptors {
            let device = u32::try_from(device).unwrap_or(0);
            self.call_step(process, r, None, op(access(flags), device));
        }
    }

    /// [`Self::pointer`], or where the trace did not see the memory
    /// allocated, the call as a comment; a call that succeeded on it
    /// (`doing` it: "frees", "exports") keeps the trace from being judged.
    pub fn recorded_pointer(
        &mut self,
        process: usize,
        r: &Rec,
        ptr: u64,
        doing: &str,
    ) -> Option<(Ref, Memory, Option<usize>, u64)> {
        let found = self.pointer(process, r, ptr);
        if found.is_none() {
            if r.result == 0 {
                self.reason(
                    process,
                    r,
                    &format!("{doing} memory no recorded call allocated"),
                );
            }
            self.unlowered(process, r, "a pointer the trace did not see allocated");
        }
        found
    }

    pub fn pointer(
        &mut self,
        process: usize,
        r: &Rec,
        ptr: u64,
    ) -> Option<(Ref, Memory, Option<usize>, u64)> {
        if ptr == 0 {
            return Some((Ref::Null, Memory::Pageable, None, 0));
        }
        let (base, live) = self.procs[process].memory.holding(ptr)?;
        let delta = ptr - base;
        let region = self.procs[process].memory.get_mut(base, live)?;
        if region.kind == RegionKind::Registered {
            return None;
        }
        let (memory, object, remaining) = (region.memory, region.object, region.size - delta);
        if delta == 0 {
            return Some((name(&region.binding), memory, object, remaining));
        }
        if let Some(b) = region.offsets.get(&delta) {
            return Some((name(b), memory, object, remaining));
        }
        let parent = region.binding.clone();
        let o = self.procs[process].fresh("o");
        if let Some(region) = self.procs[process].memory.get_mut(base, live) {
            region.offsets.insert(delta, o.clone());
        }
        self.model_step(
            process,
            Some(r),
            Some(o.clone()),
            Op::Offset {
                ptr: name(&parent),
                bytes: delta,
            },
            Role::Harness,
            None,
            None,
        );
        Some((name(&o), memory, object, remaining))
    }

    /// A reservation's binding for `va` (an `offset` into it when inside).
    pub fn reserved_pointer(&mut self, process: usize, r: &Rec, va: u64) -> Option<Ref> {
        let p = &self.procs[process];
        let (&base, (size, binding)) = p.reserved.range(..=va).next_back()?;
        if va >= base.saturating_add((*size).max(1)) {
            return None;
        }
        if va == base {
            return Some(name(binding));
        }
        let parent = binding.clone();
        let o = self.procs[process].fresh("o");
        self.model_step(
            process,
            Some(r),
            Some(o.clone()),
            Op::Offset {
                ptr: name(&parent),
                bytes: va - base,
            },
            Role::Harness,
            None,
            None,
        );
        Some(name(&o))
    }

    /// The memory behind `ptr`: known regions by their kind, anything else
    /// host memory the trace did not see allocated (pageable).
    pub fn memory_of(&self, process: usize, ptr: u64) -> Memory {
        let regions = &self.procs[process].memory;
        regions
            .holding(ptr)
            .and_then(|(base, live)| regions.get(base, live))
            .map_or(Memory::Pageable, |g| g.memory)
    }

    pub fn new_object(&mut self, binding: &str, size: u64) -> usize {
        self.objects.push(Object {
            binding: binding.to_string(),
            size,
            last_write: None,
        });
        self.objects.len() - 1
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add_region(
        &mut self,
        process: usize,
        base: u64,
        size: u64,
        binding: &str,
        memory: Memory,
        object: Option<usize>,
        kind: RegionKind,
    ) {
        let regions = &mut self.procs[process].memory;
        regions.dead.remove(&base);
        regions.live.insert(
            base,
            Region {
                base,
                size,
                binding: binding.to_string(),
                memory,
                object,
                kind,
                opens: 1,
                offsets: HashMap::new(),
            },
        );
    }

    /// The stream binding for a recorded stream value: `None` for the
    /// legacy (or per-thread) default stream; a stream made at its first use
    /// when the trace did not see it made (tracer 0.1.0 did not record
    /// stream creation).
    pub fn stream(&mut self, process: usize, r: &Rec) -> Option<String> {
        let s = r.args.stream().unwrap_or(0);
        // CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are handles of
        // default streams, not streams of the program's.
        if s <= 2 {
            return None;
        }
        if let Some(b) = self.procs[process].streams.get(&s) {
            return Some(b.clone());
        }
        let b = self.procs[process].fresh("s");
        self.model_step(
            process,
            Some(r),
            Some(b.clone()),
            Op::StreamCreate { flags: 0 },
            Role::Harness,
            None,
            None,
        );
        self.procs[process].streams.insert(s, b.clone());
        Some(b)
    }

    /// Whether `r` runs on a stream capturing into a graph (not run now).
    pub fn captured(&self, process: usize, r: &Rec) -> bool {
        r.args
            .stream()
            .is_some_and(|s| self.procs[process].capturing.contains(&s))
    }

    // --- ordering ----------------------------------------------------------

    /// Process `process` waited for its device work when `r` returned.
    pub fn host_synced(&mut self, process: usize, r: &Rec) {
        let p = &mut self.procs[process];
        p.synced_ns = p.synced_ns.max(r.t_ns.saturating_add(r.dur_ns));
    }

    /// Device work of `process` reaches `object` (it may write it): an
    /// access ordered after another process's write only by the clock is
    /// a note (the order came from host synchronization the tracer cannot
    /// see); one not ordered at all is the simulator's to flag.
    pub fn accessed(&mut self, process: usize, r: &Rec, object: usize, writes: bool) {
        if let Some(w) = self.objects[object].last_write {
            let ordered = self.procs[process]
                .seen
                .get(&w.process)
                .is_some_and(|&e| e >= w.epoch);
            let writer = &self.procs[w.process];
            let synced_since = writer.synced_ns > w.t_ns || writer.exited;
            if w.process != process
                && !ordered
                && synced_since
                && self.ordered_notes.insert((w.process, process, object))
            {
                let detail = format!(
                    "{} reaches {} after {}'s {} (seq {}) wrote it; only the clock orders them: \
                     {} waited for its device work before, but no recorded synchronization \
                     tells {} (ordered by host synchronization the tracer cannot see)",
                    self.entry(r),
                    self.objects[object].binding,
                    writer.name,
                    self.entry_name(w.entry),
                    w.seq,
                    writer.name,
                    self.procs[process].name,
                );
                self.finding(FindingClass::Note, "host-ordered", process, Some(r), detail);
            }
        }
        if writes {
            let p = &mut self.procs[process];
            p.epoch += 1;
            let epoch = p.epoch;
            self.objects[object].last_write = Some(LastWrite {
                process,
                epoch,
                t_ns: r.t_ns,
                seq: r.seq,
                entry: r.entry,
            });
        }
    }
}
