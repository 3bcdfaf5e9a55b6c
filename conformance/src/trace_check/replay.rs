//! The replay: the merged history of every process lowered to a scenario
//! (docs/scenario-language.md) whose steps are the recorded calls, each
//! expecting the answer the driver gave. The simulator runs it
//! (`judge.rs`); its hazard log and its answers decide the findings.
//!
//! What a scenario cannot say is modelled here, from the synchronisation
//! table (`sync_rules.rs`): a kernel becomes an asynchronous copy of each
//! buffer it was handed onto itself (it may read and write it), an
//! asynchronous memset a fill on its stream, a stream the trace did not see
//! made a stream made at its first use. Handles travel with `send` and
//! descriptors with `send_fd` from the process that made them to each
//! process that opened them.
//!
//! The replay also keeps the few rules that need the trace's own facts:
//! releases made twice and VMM resources held at a normal exit (judged by
//! the driver's answers), errors carried on past, and what orders two
//! processes' accesses to shared memory: an interprocess event (the
//! simulator's happens-before sees it), or only the clock (a note: the
//! order came from host synchronization the tracer cannot see).

use super::load::{escaped, EntryId, Folder, MergedEntry, Rec};
use super::model::{Finding, FindingClass};
use super::sync_rules::{self, Memory, Returns, SyncRule};
use ipc_harness::scenario::{
    BytePattern, Expect, ExpectList, Expectation, Metadata, Op, PatternItem, Ref, Scenario, Step,
};
use ipc_harness::trace_record::base_name;
use ipc_harness::{
    ApiError, Dialect, FreeKind, HandleTypes, MemKind, OutArg, ProcessSpec, ShareableHandleType,
    VmmAccess,
};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

/// The longest span a modelled copy, read or write covers: the simulator
/// materialises reads (at most 256 MiB) and the language's writes are at
/// most 64 MiB; a race is seen on the span's first bytes.
const MAX_MODELLED_SPAN: u64 = 64 << 20;
/// Most devices a trace may name (an ordinal above is not a device).
const MAX_DEVICES: u32 = 64;
/// Lines the text of the replay starts with before its first step: three
/// metadata lines, a blank one, `devices`, then (one line per process and)
/// a blank one.
const HEADER_LINES: usize = 6;

/// What a step of the replay stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The recorded call itself: its outcome is compared with the driver's.
    Call,
    /// The device work of a recorded call, modelled (`sync_rules.rs`): its
    /// outcome is not the call's answer.
    Model,
    /// Bookkeeping the trace implies (a handle passed, a pointer offset, a
    /// stream made at its first use, an exit).
    Harness,
}

/// Where a step of the replay came from.
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    /// Index into `Folder::processes`.
    pub process: usize,
    /// The call's `seq` in its process's file; `None` for an exit.
    pub seq: Option<u64>,
    pub entry: Option<EntryId>,
    pub role: Role,
    /// The row of the synchronisation table that modelled it.
    pub rule: Option<&'static str>,
    /// The shared object it reads or writes, and whether it may write.
    pub access: Option<(usize, bool)>,
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
    /// The shared objects, by index: who made each and its binding.
    pub objects: Vec<(usize, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RegionKind {
    Alloc(FreeKind),
    Opened,
    Mapped,
}

#[derive(Debug, Clone)]
struct Region {
    base: u64,
    size: u64,
    binding: String,
    memory: Memory,
    object: Option<usize>,
    kind: RegionKind,
    /// Opened regions: opens outstanding.
    opens: u32,
    /// Offsets into it already bound (delta -> binding).
    offsets: HashMap<u64, String>,
}

/// The regions of one process, by base address.
#[derive(Debug, Default)]
struct Regions {
    live: BTreeMap<u64, Region>,
    /// Regions freed, closed or unmapped: the latest at each base.
    dead: BTreeMap<u64, Region>,
}

impl Regions {
    fn find(map: &BTreeMap<u64, Region>, ptr: u64) -> Option<u64> {
        let (&base, r) = map.range(..=ptr).next_back()?;
        (ptr < base.saturating_add(r.size.max(1))).then_some(base)
    }

    /// The live region holding `ptr`, else the dead one: (base, live).
    fn holding(&self, ptr: u64) -> Option<(u64, bool)> {
        if let Some(b) = Self::find(&self.live, ptr) {
            return Some((b, true));
        }
        Self::find(&self.dead, ptr).map(|b| (b, false))
    }

    fn get_mut(&mut self, base: u64, live: bool) -> Option<&mut Region> {
        if live {
            self.live.get_mut(&base)
        } else {
            self.dead.get_mut(&base)
        }
    }

    fn kill(&mut self, base: u64) {
        if let Some(r) = self.live.remove(&base) {
            self.dead.insert(base, r);
        }
    }
}

#[derive(Debug, Default)]
struct Proc {
    name: String,
    serial: u64,
    memory: Regions,
    /// Reservations: base -> (size, binding).
    reserved: BTreeMap<u64, (u64, String)>,
    reserved_dead: BTreeSet<u64>,
    contexts: HashMap<u64, String>,
    /// `cuCtxPushCurrent` / `cuCtxPopCurrent`: the contexts current before.
    ctx_stack: Vec<Option<u64>>,
    current: Option<u64>,
    /// Events: value -> (binding, shared event).
    events: HashMap<u64, (String, Option<usize>)>,
    streams: HashMap<u64, String>,
    /// VMM handles: value -> (binding, object).
    vmm: HashMap<u64, (String, Option<usize>)>,
    released_vmm: HashSet<u64>,
    exited: bool,
    /// Outputs of failed IPC calls: (value, seq, entry).
    failed_outputs: Vec<(u64, u64, EntryId)>,
    /// Happens-before seen from other processes: process -> write epoch.
    seen: HashMap<usize, u64>,
    /// Device writes made so far.
    epoch: u64,
    /// When it last waited for its device work (a host synchronisation).
    synced_ns: u64,
}

impl Proc {
    fn fresh(&mut self, prefix: &str) -> String {
        self.serial += 1;
        format!("{}_{prefix}{}", self.name, self.serial)
    }
}

/// A shared object's latest device write.
#[derive(Debug, Clone, Copy)]
struct LastWrite {
    process: usize,
    epoch: u64,
    t_ns: u64,
    seq: u64,
    entry: EntryId,
}

#[derive(Debug, Default)]
struct Object {
    owner: usize,
    binding: String,
    size: u64,
    last_write: Option<LastWrite>,
}

struct Lowering<'f> {
    folder: &'f Folder,
    procs: Vec<Proc>,
    objects: Vec<Object>,
    /// Memory handle bytes -> (binding, getter, object).
    mem_handles: HashMap<String, (String, usize, Option<usize>)>,
    /// Event handle bytes -> (binding, getter, shared event).
    event_handles: HashMap<String, (String, usize, usize)>,
    /// Shared events: the happens-before a record captured.
    shared_events: Vec<HashMap<usize, u64>>,
    /// Look-ahead: which processes open each handle.
    mem_openers: HashMap<String, BTreeSet<usize>>,
    event_openers: HashMap<String, BTreeSet<usize>>,
    /// Look-ahead: (process, call) of a descriptor import -> its export.
    import_of: HashMap<(usize, usize), (usize, usize)>,
    /// (process, call) of an export -> its importers.
    importers: HashMap<(usize, usize), Vec<(usize, usize)>>,
    /// The importer's binding of a descriptor sent to it, by import.
    received_fd: HashMap<(usize, usize), String>,
    exported_object: HashMap<(usize, usize), Option<usize>>,
    sent: HashSet<(String, usize)>,
    /// Look-ahead: (process, context value) -> the device of the primary
    /// context it is.
    primary_of: HashMap<(usize, u64), u32>,
    /// Handle bytes a failing get left behind: (process, seq, entry).
    failed_handles: HashMap<String, (usize, u64, EntryId)>,
    /// Notes already given: (writer, reader, object).
    ordered_notes: HashSet<(usize, usize, usize)>,
    steps: Vec<Step>,
    origin: Vec<Origin>,
    lines: Vec<Line>,
    line: usize,
    findings: Vec<Finding>,
    /// Why not judged: what -> (its first occurrence, count).
    reasons: BTreeMap<&'static str, (String, usize)>,
    notes: Vec<String>,
    not_replayed: usize,
    devices: u32,
}

/// Lower the folder's merged history.
pub fn lower(folder: &Folder, merged: &[MergedEntry], title_dir: &str) -> Replay {
    let n = folder.processes.len();
    let mut st = Lowering {
        folder,
        procs: (0..n)
            .map(|i| Proc {
                name: format!("p{}", i + 1),
                ..Proc::default()
            })
            .collect(),
        objects: Vec::new(),
        mem_handles: HashMap::new(),
        event_handles: HashMap::new(),
        shared_events: Vec::new(),
        mem_openers: HashMap::new(),
        event_openers: HashMap::new(),
        import_of: HashMap::new(),
        importers: HashMap::new(),
        received_fd: HashMap::new(),
        exported_object: HashMap::new(),
        sent: HashSet::new(),
        primary_of: HashMap::new(),
        failed_handles: HashMap::new(),
        ordered_notes: HashSet::new(),
        steps: Vec::with_capacity(folder.calls + n),
        origin: Vec::with_capacity(folder.calls + n),
        lines: Vec::with_capacity(folder.calls + n),
        line: HEADER_LINES + n,
        findings: Vec::new(),
        reasons: BTreeMap::new(),
        notes: Vec::new(),
        not_replayed: 0,
        devices: 1,
    };
    let start_devices = st.look_ahead(merged);
    for entry in merged {
        match *entry {
            MergedEntry::Call { process, call } => {
                st.call(process, call, &folder.processes[process].calls[call])
            }
            MergedEntry::End { process } => st.end(process),
        }
    }
    st.finish(start_devices, title_dir)
}

/// The expectation of a call the driver answered `result`.
fn expect_result(result: i32) -> Expect {
    if result == 0 {
        return Expect::Default;
    }
    let error = ApiError::from_code(Dialect::Driver, result);
    let item = match error.kind() {
        Some(kind) => Expectation::Error {
            kind,
            name: error.name().into_owned(),
        },
        None => Expectation::AnyError,
    };
    Expect::List(ExpectList {
        text: item.to_string().into(),
        items: vec![item].into(),
    })
}

fn expect_any() -> Expect {
    Expect::List(ExpectList {
        items: Cow::Borrowed(&[Expectation::Any]),
        text: Cow::Borrowed("any"),
    })
}

fn name(n: &str) -> Ref {
    Ref::Name(n.to_string())
}

impl<'f> Lowering<'f> {
    fn rec(&self, process: usize, call: usize) -> &'f Rec {
        &self.folder.processes[process].calls[call]
    }

    fn entry(&self, r: &Rec) -> String {
        escaped(self.folder.entry(r))
    }

    /// Who opens which handle, which export each descriptor import
    /// received, and which device each process starts on.
    fn look_ahead(&mut self, merged: &[MergedEntry]) -> Vec<u32> {
        let folder = self.folder;
        let mut start: Vec<Option<u32>> = vec![None; folder.processes.len()];
        // Exports of POSIX descriptors, in time order: (process, call).
        let mut exports: Vec<(usize, usize)> = Vec::new();
        // Per importer: how many of `exports` it has passed.
        let mut cursor: HashMap<usize, usize> = HashMap::new();
        let mut paired_by_order = false;
        for entry in merged {
            let MergedEntry::Call { process, call } = *entry else {
                continue;
            };
            let r = self.rec(process, call);
            if r.result != 0 {
                continue;
            }
            let a = &r.args;
            match base_name(folder.entry(r)) {
                "cuCtxCreate" | "cuDevicePrimaryCtxRetain" => {
                    if let (Some(d), None) = (a.device, start[process]) {
                        start[process] = u32::try_from(d).ok().filter(|&d| d < MAX_DEVICES);
                    }
                    if base_name(folder.entry(r)) == "cuDevicePrimaryCtxRetain" {
                        if let (Some(ctx), Some(d)) = (a.ctx, a.device) {
                            if let Ok(d) = u32::try_from(d) {
                                self.primary_of.entry((process, ctx)).or_insert(d);
                            }
                        }
                    }
                }
                "cuIpcOpenMemHandle" => {
                    if let Some(h) = &a.handle {
                        self.mem_openers
                            .entry(h.clone())
                            .or_default()
                            .insert(process);
                    }
                }
                "cuIpcOpenEventHandle" => {
                    if let Some(h) = &a.handle {
                        self.event_openers
                            .entry(h.clone())
                            .or_default()
                            .insert(process);
                    }
                }
                "cuMemExportToShareableHandle" if a.handle_type == Some(1) => {
                    exports.push((process, call));
                }
                "cuMemImportFromShareableHandle" if a.handle_type == Some(1) => {
                    // Without records of the descriptor's passage: the
                    // importer's next export by another process made before
                    // it, in the order they were made (a socket delivers
                    // descriptors in the order they were sent).
                    let from = cursor.entry(process).or_insert(0);
                    let pick = (*from..exports.len()).find(|&i| {
                        let (ep, ec) = exports[i];
                        ep != process && self.rec(ep, ec).t_ns <= r.t_ns
                    });
                    if let Some(i) = pick {
                        *from = i + 1;
                        self.import_of.insert((process, call), exports[i]);
                        self.importers
                            .entry(exports[i])
                            .or_default()
                            .push((process, call));
                        paired_by_order = true;
                    }
                }
                _ => {}
            }
        }
        if paired_by_order {
            self.notes.push(
                "descriptor imports are paired with exports in the order they were made: this \
                 trace holds no records of descriptors passed between processes"
                    .to_string(),
            );
        }
        start.into_iter().map(|d| d.unwrap_or(0)).collect()
    }

    // --- emitting -----------------------------------------------------

    fn step(
        &mut self,
        process: usize,
        bind: Option<String>,
        op: Op,
        expect: Expect,
        origin: Origin,
    ) -> usize {
        self.line += 1;
        let index = self.steps.len();
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
    fn call_step(&mut self, process: usize, r: &Rec, bind: Option<String>, op: Op) -> usize {
        let origin = Origin {
            process,
            seq: Some(r.seq),
            entry: Some(r.entry),
            role: Role::Call,
            rule: None,
            access: None,
        };
        self.step(process, bind, op, expect_result(r.result), origin)
    }

    /// A step modelling `r`'s device work (or bookkeeping it implies).
    fn model_step(
        &mut self,
        process: usize,
        r: Option<&Rec>,
        bind: Option<String>,
        op: Op,
        role: Role,
        rule: Option<&'static str>,
        access: Option<(usize, bool)>,
    ) -> usize {
        let origin = Origin {
            process,
            seq: r.map(|r| r.seq),
            entry: r.map(|r| r.entry),
            role,
            rule,
            access,
        };
        self.step(process, bind, op, expect_any(), origin)
    }

    fn comment(&mut self, process: usize, text: String) {
        self.line += 1;
        let name = &self.procs[process].name;
        self.lines.push(Line::Comment(format!("# {name}: {text}")));
    }

    fn unlowered(&mut self, process: usize, r: &Rec, why: &str) {
        self.not_replayed += 1;
        let entry = self.entry(r);
        self.comment(
            process,
            format!("{entry} (seq {}) not replayed: {why}", r.seq),
        );
    }

    /// A reason the trace cannot be judged whole, counted by what it is.
    fn reason(&mut self, process: usize, r: &Rec, what: &'static str) {
        let entry = self.entry(r);
        let p = &self.folder.processes[process];
        let first = format!(
            "{} (pid {}) {entry} seq {}: {what}",
            self.procs[process].name, p.pid, r.seq
        );
        self.reasons.entry(what).or_insert((first, 0)).1 += 1;
    }

    fn finding(
        &mut self,
        class: FindingClass,
        kind: &str,
        process: usize,
        r: Option<&Rec>,
        detail: String,
    ) {
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

    /// The binding that names `ptr` in `process`: its region's, or a fresh
    /// `offset` into it; with the region's memory and object.
    fn pointer(
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
    fn reserved_pointer(&mut self, process: usize, r: &Rec, va: u64) -> Option<Ref> {
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

    fn new_object(&mut self, owner: usize, binding: &str, size: u64) -> usize {
        self.objects.push(Object {
            owner,
            binding: binding.to_string(),
            size,
            last_write: None,
        });
        self.objects.len() - 1
    }

    #[allow(clippy::too_many_arguments)]
    fn add_region(
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
    /// otherwise.
    fn stream(&mut self, process: usize, r: &Rec) -> Option<String> {
        let s = r.args.stream.unwrap_or(0);
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

    // --- ordering ----------------------------------------------------------

    /// Process `process` waited for its device work at `t_ns`.
    fn host_synced(&mut self, process: usize, r: &Rec) {
        let p = &mut self.procs[process];
        p.synced_ns = p.synced_ns.max(r.t_ns.saturating_add(r.dur_ns));
    }

    /// Device work of `process` reaches `object` (it may write it): an
    /// access ordered after another process's write only by the clock is
    /// a note (the order came from host synchronization the tracer cannot
    /// see); one not ordered at all is the simulator's to flag.
    fn accessed(&mut self, process: usize, r: &Rec, object: usize, writes: bool) {
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
                let detail =
                    format!(
                    "{} reaches {} after {}'s {} (seq {}) wrote it; only the clock orders them: \
                     {} waited for its device work before, but no recorded synchronization \
                     tells {} (ordered by host synchronization the tracer cannot see)",
                    self.entry(r),
                    self.objects[object].binding,
                    writer.name,
                    escaped(self.folder.entries.get(usize::from(w.entry)).map_or("?", |s| s)),
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

    // --- the calls -----------------------------------------------------------

    fn call(&mut self, process: usize, index: usize, r: &Rec) {
        if self.procs[process].exited {
            // Calls after the exit record (runtime teardown) change nothing shared.
            return;
        }
        self.check_ignored(process, r);
        self.note_failure(process, r);
        let entry = self.folder.entry(r);
        let name = base_name(entry);
        if let Some(d) = r.args.device {
            match u32::try_from(d) {
                Ok(d) if d < MAX_DEVICES => self.devices = self.devices.max(d + 1),
                _ if r.result == 0 => {
                    self.reason(process, r, "names a device ordinal out of range")
                }
                _ => {}
            }
        }
        match name {
            "cuCtxCreate" | "cuDevicePrimaryCtxRetain" => self.make_context(process, r, name),
            "cuCtxSetCurrent" | "cuCtxPushCurrent" => self.set_context(process, r, name),
            "cuCtxPopCurrent" => self.pop_context(process, r),
            "cuCtxDestroy" => self.destroy_context(process, r),
            "cuCtxSynchronize" => {
                self.call_step(process, r, None, Op::Sync);
                if r.result == 0 {
                    self.host_synced(process, r);
                }
            }
            "cuStreamSynchronize" => {
                let op = match self.stream(process, r) {
                    Some(s) => Op::StreamSync { stream: s },
                    None => Op::Sync,
                };
                self.call_step(process, r, None, op);
                if r.result == 0 {
                    self.host_synced(process, r);
                }
            }
            "cuMemAlloc" | "cuMemAllocManaged" | "cuMemAllocHost" | "cuMemHostAlloc"
            | "cuMemAllocAsync" => self.alloc(process, r, name),
            "cuMemFree" | "cuMemFreeHost" | "cuMemFreeAsync" => self.free(process, r, name),
            "cuIpcGetMemHandle" => self.get_mem_handle(process, r),
            "cuIpcOpenMemHandle" => self.open_mem_handle(process, r),
            "cuIpcCloseMemHandle" => self.close_mem_handle(process, r),
            "cuEventCreate" => self.event_create(process, r),
            "cuEventRecord"
            | "cuEventRecordWithFlags"
            | "cuEventQuery"
            | "cuEventSynchronize"
            | "cuStreamWaitEvent"
            | "cuEventDestroy" => self.event_use(process, r, name),
            "cuIpcGetEventHandle" => self.get_event_handle(process, r),
            "cuIpcOpenEventHandle" => self.open_event_handle(process, r),
            "cuMemCreate" => self.vmm_create(process, r),
            "cuMemExportToShareableHandle" => self.vmm_export(process, index, r),
            "cuMemImportFromShareableHandle" => self.vmm_import(process, index, r),
            "cuMemAddressReserve" => self.vmm_reserve(process, r),
            "cuMemMap" => self.vmm_map(process, r),
            "cuMemSetAccess" => self.vmm_set_access(process, r),
            "cuMemUnmap" => self.vmm_unmap(process, r),
            "cuMemAddressFree" => self.vmm_address_free(process, r),
            "cuMemRelease" => self.vmm_release(process, r),
            "cuMemcpy" | "cuMemcpyHtoD" | "cuMemcpyDtoH" | "cuMemcpyDtoD" | "cuMemcpyAsync"
            | "cuMemcpyHtoDAsync" | "cuMemcpyDtoHAsync" | "cuMemcpyDtoDAsync" => {
                self.copy(process, r, name)
            }
            "cuMemsetD8" | "cuMemsetD16" | "cuMemsetD32" | "cuMemsetD8Async"
            | "cuMemsetD16Async" | "cuMemsetD32Async" => self.memset(process, r, name),
            "cuLaunchKernel" | "cuLaunchKernelEx" => self.kernel(process, r),
            _ => self.unlowered(process, r, "the replay has no step for it"),
        }
    }

    fn make_context(&mut self, process: usize, r: &Rec, name: &str) {
        let device = r
            .args
            .device
            .and_then(|d| u32::try_from(d).ok())
            .unwrap_or(0);
        let c = self.procs[process].fresh("c");
        let op = if name == "cuCtxCreate" {
            Op::CtxCreate { device }
        } else {
            Op::PrimaryCtx { device }
        };
        let ok = r.result == 0;
        self.call_step(process, r, ok.then(|| c.clone()), op);
        if let (true, Some(ctx)) = (ok, r.args.ctx) {
            let p = &mut self.procs[process];
            p.contexts.insert(ctx, c);
            if name == "cuCtxCreate" {
                p.current = Some(ctx);
            }
        }
    }

    /// The binding of a context value; a primary context the process has
    /// not retained yet (the runtime sets it current before a retain the
    /// trace sees) is retained first.
    fn context(&mut self, process: usize, r: &Rec, ctx: u64) -> Option<String> {
        if let Some(c) = self.procs[process].contexts.get(&ctx) {
            return Some(c.clone());
        }
        let device = *self.primary_of.get(&(process, ctx))?;
        let c = self.procs[process].fresh("c");
        self.model_step(
            process,
            Some(r),
            Some(c.clone()),
            Op::PrimaryCtx { device },
            Role::Harness,
            None,
            None,
        );
        self.procs[process].contexts.insert(ctx, c.clone());
        Some(c)
    }

    fn set_context(&mut self, process: usize, r: &Rec, name: &str) {
        let ctx = r.args.ctx.unwrap_or(0);
        if ctx == 0 {
            return self.unlowered(
                process,
                r,
                "no context made current (the language has no step for it)",
            );
        }
        let Some(c) = self.context(process, r, ctx) else {
            self.reason(process, r, "a context no recorded call made");
            return self.unlowered(process, r, "a context the trace did not see made");
        };
        self.call_step(process, r, None, Op::CtxSet { ctx: c });
        if r.result == 0 {
            let p = &mut self.procs[process];
            if name == "cuCtxPushCurrent" {
                let before = p.current;
                p.ctx_stack.push(before);
            }
            p.current = Some(ctx);
        }
    }

    fn pop_context(&mut self, process: usize, r: &Rec) {
        if r.result != 0 {
            return self.unlowered(process, r, "a failed pop changes nothing");
        }
        let before = self.procs[process].ctx_stack.pop().flatten();
        self.procs[process].current = before;
        match before.and_then(|c| self.procs[process].contexts.get(&c).cloned()) {
            Some(c) => {
                self.call_step(process, r, None, Op::CtxSet { ctx: c });
            }
            None => self.unlowered(process, r, "no context is current after it"),
        }
    }

    fn destroy_context(&mut self, process: usize, r: &Rec) {
        let ctx = r.args.ctx.unwrap_or(0);
        let Some(c) = self.procs[process].contexts.get(&ctx).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "a context no recorded call made");
            }
            return self.unlowered(process, r, "a context the trace did not see made");
        };
        self.call_step(process, r, None, Op::CtxDestroy { ctx: c });
        if r.result == 0 {
            let p = &mut self.procs[process];
            p.contexts.remove(&ctx);
            if p.current == Some(ctx) {
                p.current = None;
            }
        }
    }

    fn alloc(&mut self, process: usize, r: &Rec, name: &str) {
        let size = r.args.size.unwrap_or(0);
        let (kind, memory) = match name {
            "cuMemAlloc" => (MemKind::Device, Memory::Device),
            "cuMemAllocManaged" => (MemKind::Managed, Memory::Managed),
            "cuMemAllocAsync" => (MemKind::StreamOrdered, Memory::Device),
            _ => (MemKind::PinnedHost, Memory::Pinned),
        };
        let free = match kind {
            MemKind::PinnedHost => FreeKind::Host,
            MemKind::StreamOrdered => FreeKind::StreamOrdered,
            _ => FreeKind::Device,
        };
        let ok = r.result == 0;
        let b = self.procs[process].fresh("a");
        self.call_step(process, r, ok.then(|| b.clone()), Op::Malloc { kind, size });
        if let (true, Some(ptr)) = (ok, r.args.ptr) {
            let object = self.new_object(process, &b, size);
            self.add_region(
                process,
                ptr,
                size,
                &b,
                memory,
                Some(object),
                RegionKind::Alloc(free),
            );
        }
    }

    fn free(&mut self, process: usize, r: &Rec, name: &str) {
        let ptr = r.args.ptr.unwrap_or(0);
        let Some((p, _, _, _)) = self.pointer(process, r, ptr) else {
            self.reason(process,
                r,
                "frees memory no recorded call allocated (it came from a call this trace does not hold)",
            );
            return self.unlowered(process, r, "a pointer the trace did not see allocated");
        };
        let kind = match name {
            "cuMemFree" => FreeKind::Device,
            "cuMemFreeHost" => FreeKind::Host,
            _ => FreeKind::StreamOrdered,
        };
        self.call_step(process, r, None, Op::Free { kind, ptr: p });
        if name == "cuMemFree" && r.result == 0 {
            // cudaFree waits for the device's work.
            self.host_synced(process, r);
        }
        if r.result == 0 {
            let regions = &mut self.procs[process].memory;
            if regions.live.contains_key(&ptr) {
                regions.kill(ptr);
            }
        }
    }

    fn send_to_openers(
        &mut self,
        process: usize,
        r: &Rec,
        bytes: &str,
        binding: &str,
        event: bool,
    ) {
        let openers = if event {
            &self.event_openers
        } else {
            &self.mem_openers
        };
        let peers: Vec<usize> = openers
            .get(bytes)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&q| q != process)
            .collect();
        for peer in peers {
            if self.sent.insert((binding.to_string(), peer)) {
                let to_name = self.procs[peer].name.clone();
                self.model_step(
                    process,
                    Some(r),
                    None,
                    Op::Send {
                        handle: binding.to_string(),
                        to: peer,
                        to_name,
                    },
                    Role::Harness,
                    None,
                    None,
                );
            }
        }
    }

    fn get_mem_handle(&mut self, process: usize, r: &Rec) {
        let ptr = r.args.ptr.unwrap_or(0);
        let Some((p, _, object, _)) = self.pointer(process, r, ptr) else {
            if r.result == 0 {
                self.reason(process, r, "exports memory no recorded call allocated");
            }
            return self.unlowered(process, r, "a pointer the trace did not see allocated");
        };
        let ok = r.result == 0;
        let h = self.procs[process].fresh("h");
        self.call_step(
            process,
            r,
            ok.then(|| h.clone()),
            Op::IpcGet {
                ptr: p,
                out: OutArg::Valid,
            },
        );
        if let (true, Some(bytes)) = (ok, r.args.handle.clone()) {
            let first = self
                .mem_handles
                .entry(bytes.clone())
                .or_insert((h, process, object))
                .0
                .clone();
            self.send_to_openers(process, r, &bytes, &first, false);
        }
    }

    fn open_mem_handle(&mut self, process: usize, r: &Rec) {
        let bytes = r.args.handle.clone().unwrap_or_default();
        let Some((h, _, object)) = self.mem_handles.get(&bytes).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "opens a memory handle no traced process made");
            }
            return self.unlowered(process, r, "a handle no traced process made");
        };
        let flags = r.args.flags.unwrap_or(1) as u32;
        let ok = r.result == 0;
        let ptr = r.args.ptr.unwrap_or(0);
        let q = self.procs[process].fresh("q");
        let op = Op::IpcOpen {
            handle: h,
            flags,
            out: OutArg::Valid,
        };
        // A second open in one process returns the same pointer (a reference).
        let again = self.procs[process]
            .memory
            .live
            .get(&ptr)
            .filter(|g| ok && g.kind == RegionKind::Opened)
            .map(|g| g.binding.clone());
        if let Some(first) = again {
            let mut expect = expect_result(r.result);
            if let Expect::Default = expect {
                let items = vec![Expectation::Ok, Expectation::Eq(name(&first))];
                expect = Expect::List(ExpectList {
                    text: format!("ok, == {first}").into(),
                    items: items.into(),
                });
            }
            let origin = Origin {
                process,
                seq: Some(r.seq),
                entry: Some(r.entry),
                role: Role::Call,
                rule: None,
                access: None,
            };
            self.step(process, Some(q), op, expect, origin);
            if let Some(g) = self.procs[process].memory.live.get_mut(&ptr) {
                g.opens += 1;
            }
            return;
        }
        self.call_step(process, r, ok.then(|| q.clone()), op);
        if ok {
            let size = object.map_or(1, |o| self.objects[o].size.max(1));
            self.add_region(
                process,
                ptr,
                size,
                &q,
                Memory::Device,
                object,
                RegionKind::Opened,
            );
        }
    }

    fn close_mem_handle(&mut self, process: usize, r: &Rec) {
        let ptr = r.args.ptr.unwrap_or(0);
        let p = match self.pointer(process, r, ptr) {
            Some((p, ..)) => p,
            // Closing what the process never held: the simulator judges it
            // (a foreign close) through a pointer that names nothing.
            None if r.result != 0 => Ref::Null,
            None => {
                self.reason(process, r, "closes a mapping no recorded call opened");
                return self.unlowered(process, r, "a pointer the trace did not see opened");
            }
        };
        self.call_step(process, r, None, Op::IpcClose { ptr: p });
        if r.result == 0 {
            let regions = &mut self.procs[process].memory;
            if let Some(g) = regions.live.get_mut(&ptr) {
                if g.kind == RegionKind::Opened {
                    g.opens = g.opens.saturating_sub(1);
                    if g.opens == 0 {
                        regions.kill(ptr);
                    }
                }
            }
        }
    }

    fn event_create(&mut self, process: usize, r: &Rec) {
        let ok = r.result == 0;
        let e = self.procs[process].fresh("e");
        let flags = r.args.flags.unwrap_or(0) as u32;
        self.call_step(process, r, ok.then(|| e.clone()), Op::EventCreate { flags });
        if let (true, Some(ev)) = (ok, r.args.event) {
            self.procs[process].events.insert(ev, (e, None));
        }
    }

    fn event_use(&mut self, process: usize, r: &Rec, name: &str) {
        let ev = r.args.event.unwrap_or(0);
        let Some((e, shared)) = self.procs[process].events.get(&ev).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "an event no recorded call made");
            }
            return self.unlowered(process, r, "an event the trace did not see made");
        };
        let stream = match name {
            "cuEventRecord" | "cuEventRecordWithFlags" | "cuStreamWaitEvent" => {
                self.stream(process, r)
            }
            _ => None,
        };
        let op = match name {
            "cuEventRecord" | "cuEventRecordWithFlags" => Op::EventRecord { event: e, stream },
            "cuEventQuery" => Op::EventQuery { event: e },
            "cuEventSynchronize" => Op::EventSync { event: e },
            "cuStreamWaitEvent" => Op::StreamWait { event: e, stream },
            _ => Op::EventDestroy { event: e },
        };
        self.call_step(process, r, None, op);
        if r.result != 0 {
            return;
        }
        match name {
            "cuEventRecord" | "cuEventRecordWithFlags" => {
                if let Some(s) = shared {
                    let p = &self.procs[process];
                    let mut clock = p.seen.clone();
                    clock.insert(process, p.epoch);
                    self.shared_events[s] = clock;
                }
            }
            "cuEventQuery" | "cuEventSynchronize" | "cuStreamWaitEvent" => {
                if let Some(s) = shared {
                    let clock = self.shared_events[s].clone();
                    let seen = &mut self.procs[process].seen;
                    for (q, e) in clock {
                        let v = seen.entry(q).or_insert(0);
                        *v = (*v).max(e);
                    }
                }
                if name == "cuEventSynchronize" {
                    self.host_synced(process, r);
                }
            }
            _ => {
                self.procs[process].events.remove(&ev);
            }
        }
    }

    fn get_event_handle(&mut self, process: usize, r: &Rec) {
        let ev = r.args.event.unwrap_or(0);
        let Some((e, _)) = self.procs[process].events.get(&ev).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "an event no recorded call made");
            }
            return self.unlowered(process, r, "an event the trace did not see made");
        };
        let ok = r.result == 0;
        let h = self.procs[process].fresh("eh");
        self.call_step(
            process,
            r,
            ok.then(|| h.clone()),
            Op::IpcGetEvent {
                event: e.clone(),
                out: OutArg::Valid,
            },
        );
        if let (true, Some(bytes)) = (ok, r.args.handle.clone()) {
            let shared = match self.event_handles.get(&bytes) {
                Some((_, _, s)) => *s,
                None => {
                    self.shared_events.push(HashMap::new());
                    let s = self.shared_events.len() - 1;
                    self.event_handles
                        .insert(bytes.clone(), (h.clone(), process, s));
                    s
                }
            };
            self.procs[process].events.insert(ev, (e, Some(shared)));
            let first = self.event_handles[&bytes].0.clone();
            self.send_to_openers(process, r, &bytes, &first, true);
        }
    }

    fn open_event_handle(&mut self, process: usize, r: &Rec) {
        let bytes = r.args.handle.clone().unwrap_or_default();
        let Some((h, _, shared)) = self.event_handles.get(&bytes).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "opens an event handle no traced process made");
            }
            return self.unlowered(process, r, "an event handle no traced process made");
        };
        let ok = r.result == 0;
        let e = self.procs[process].fresh("e");
        self.call_step(
            process,
            r,
            ok.then(|| e.clone()),
            Op::IpcOpenEvent {
                handle: h,
                out: OutArg::Valid,
            },
        );
        if let (true, Some(ev)) = (ok, r.args.event) {
            self.procs[process].events.insert(ev, (e, Some(shared)));
        }
    }

    // --- VMM ---------------------------------------------------------------

    fn vmm_create(&mut self, process: usize, r: &Rec) {
        let ok = r.result == 0;
        let m = self.procs[process].fresh("m");
        let size = r.args.size.unwrap_or(0);
        let op = Op::VmmCreate {
            size,
            types: HandleTypes(r.args.handle_type.unwrap_or(0)),
            device: r
                .args
                .device
                .and_then(|d| u32::try_from(d).ok())
                .unwrap_or(0),
        };
        self.call_step(process, r, ok.then(|| m.clone()), op);
        if let (true, Some(v)) = (ok, r.args.vmm) {
            let object = self.new_object(process, &m, size);
            let p = &mut self.procs[process];
            p.released_vmm.remove(&v);
            p.vmm.insert(v, (m, Some(object)));
        }
    }

    fn vmm_export(&mut self, process: usize, index: usize, r: &Rec) {
        let a = &r.args;
        let Some((m, object)) = self.procs[process].vmm.get(&a.vmm.unwrap_or(0)).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "exports a VMM handle no recorded call made");
            }
            return self.unlowered(process, r, "a VMM handle the trace did not see made");
        };
        let ty = if a.handle_type == Some(1) {
            ShareableHandleType::PosixFd
        } else {
            ShareableHandleType::Fabric
        };
        let ok = r.result == 0;
        let f = self.procs[process].fresh("f");
        self.call_step(
            process,
            r,
            ok.then(|| f.clone()),
            Op::VmmExport { handle: m, ty },
        );
        if !ok || ty != ShareableHandleType::PosixFd {
            return;
        }
        self.exported_object.insert((process, index), object);
        for (q, qcall) in self
            .importers
            .get(&(process, index))
            .cloned()
            .unwrap_or_default()
        {
            let received = self.procs[q].fresh("f");
            let to_name = self.procs[q].name.clone();
            self.model_step(
                process,
                Some(r),
                Some(received.clone()),
                Op::SendFd {
                    fd: f.clone(),
                    to: q,
                    to_name,
                },
                Role::Harness,
                None,
                None,
            );
            self.received_fd.insert((q, qcall), received);
        }
    }

    fn vmm_import(&mut self, process: usize, index: usize, r: &Rec) {
        if r.args.handle_type != Some(1) {
            if r.result == 0 {
                self.reason(
                    process,
                    r,
                    "imports a shareable handle other than a POSIX descriptor",
                );
            }
            return self.unlowered(process, r, "a shareable handle the replay does not carry");
        }
        let export = self.import_of.get(&(process, index)).copied();
        let Some(fd) = self.received_fd.get(&(process, index)).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "imports a descriptor no recorded export gave");
            }
            return self.unlowered(process, r, "a descriptor no recorded export gave");
        };
        let ok = r.result == 0;
        let m = self.procs[process].fresh("m");
        self.call_step(process, r, ok.then(|| m.clone()), Op::VmmImport { fd });
        if let (true, Some(v)) = (ok, r.args.vmm) {
            let object = export.and_then(|e| self.exported_object.get(&e).copied().flatten());
            let p = &mut self.procs[process];
            p.released_vmm.remove(&v);
            p.vmm.insert(v, (m, object));
        }
    }

    fn vmm_reserve(&mut self, process: usize, r: &Rec) {
        let ok = r.result == 0;
        let v = self.procs[process].fresh("v");
        let size = r.args.size.unwrap_or(0);
        self.call_step(process, r, ok.then(|| v.clone()), Op::VmmReserve { size });
        if let (true, Some(va)) = (ok, r.args.ptr) {
            let p = &mut self.procs[process];
            p.reserved_dead.remove(&va);
            p.reserved.insert(va, (size, v));
        }
    }

    fn vmm_map(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr.unwrap_or(0), r.args.size.unwrap_or(0));
        let Some((m, object)) = self.procs[process]
            .vmm
            .get(&r.args.vmm.unwrap_or(0))
            .cloned()
        else {
            if r.result == 0 {
                self.reason(process, r, "maps a VMM handle no recorded call made");
            }
            return self.unlowered(process, r, "a VMM handle the trace did not see made");
        };
        let Some(va) = self.reserved_pointer(process, r, ptr) else {
            if r.result == 0 {
                self.reason(process, r, "maps into a range no recorded call reserved");
            }
            return self.unlowered(process, r, "a range the trace did not see reserved");
        };
        let binding = va.name().unwrap_or("null").to_string();
        self.call_step(
            process,
            r,
            None,
            Op::VmmMap {
                va,
                size,
                handle: m,
                offset: r.args.offset.unwrap_or(0),
            },
        );
        if r.result == 0 {
            self.add_region(
                process,
                ptr,
                size,
                &binding,
                Memory::Device,
                object,
                RegionKind::Mapped,
            );
        }
    }

    fn vmm_set_access(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr.unwrap_or(0), r.args.size.unwrap_or(0));
        let Some(va) = self.reserved_pointer(process, r, ptr) else {
            if r.result == 0 {
                self.reason(
                    process,
                    r,
                    "sets access to a range no recorded call reserved",
                );
            }
            return self.unlowered(process, r, "a range the trace did not see reserved");
        };
        let descriptors = r.args.access.clone().unwrap_or_default();
        if descriptors.is_empty() {
            return self.unlowered(process, r, "no access descriptor recorded");
        }
        for (device, flags) in descriptors {
            let access = match flags {
                0 => VmmAccess::None,
                1 => VmmAccess::Read,
                _ => VmmAccess::ReadWrite,
            };
            self.call_step(
                process,
                r,
                None,
                Op::VmmSetAccess {
                    va: va.clone(),
                    size,
                    access,
                    device: u32::try_from(device).unwrap_or(0),
                },
            );
        }
    }

    /// A second unmap, address free or release of what this process already
    /// released, whatever the driver answered.
    fn released_twice(&mut self, process: usize, r: &Rec, kind: &str, what: String) {
        self.finding(
            FindingClass::Hazard,
            kind,
            process,
            Some(r),
            format!("{what} again, after this process already released it"),
        );
    }

    fn vmm_unmap(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr.unwrap_or(0), r.args.size.unwrap_or(0));
        let end = ptr.saturating_add(size.max(1));
        // One unmap covers every mapping inside its range.
        let covered: Vec<u64> = self.procs[process]
            .memory
            .live
            .range(ptr..end)
            .filter(|(_, g)| g.kind == RegionKind::Mapped)
            .map(|(b, _)| *b)
            .collect();
        if covered.is_empty() {
            let unmapped_before = self.procs[process]
                .memory
                .dead
                .get(&ptr)
                .is_some_and(|g| g.kind == RegionKind::Mapped);
            if unmapped_before {
                self.released_twice(process, r, "double-unmap", format!("unmaps {ptr:#x}"));
            }
        }
        let Some(va) = self.reserved_pointer(process, r, ptr) else {
            if r.result == 0 {
                self.reason(process, r, "unmaps a range no recorded call reserved");
            }
            return self.unlowered(process, r, "a range the trace did not see reserved");
        };
        self.call_step(process, r, None, Op::VmmUnmap { va, size });
        if r.result == 0 {
            for b in covered {
                self.procs[process].memory.kill(b);
            }
        }
    }

    fn vmm_address_free(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr.unwrap_or(0), r.args.size.unwrap_or(0));
        let held = self.procs[process].reserved.contains_key(&ptr);
        if !held && self.procs[process].reserved_dead.contains(&ptr) {
            self.released_twice(
                process,
                r,
                "double-address-free",
                format!("frees the reservation at {ptr:#x}"),
            );
        }
        let va = match self.procs[process].reserved.get(&ptr) {
            Some((_, b)) => name(b),
            None => {
                if r.result == 0 {
                    self.reason(process, r, "frees a range no recorded call reserved");
                }
                return self.unlowered(process, r, "a range the trace does not see held");
            }
        };
        self.call_step(process, r, None, Op::VmmAddressFree { va, size });
        if r.result == 0 {
            let p = &mut self.procs[process];
            p.reserved.remove(&ptr);
            p.reserved_dead.insert(ptr);
        }
    }

    fn vmm_release(&mut self, process: usize, r: &Rec) {
        let h = r.args.vmm.unwrap_or(0);
        let Some((m, _)) = self.procs[process].vmm.get(&h).cloned() else {
            if self.procs[process].released_vmm.contains(&h) {
                self.released_twice(
                    process,
                    r,
                    "double-release",
                    format!("releases VMM handle {h:#x}"),
                );
            } else if r.result == 0 {
                self.reason(process, r, "releases a VMM handle no recorded call made");
            }
            return self.unlowered(process, r, "a VMM handle the trace does not see held");
        };
        self.call_step(process, r, None, Op::VmmRelease { handle: m });
        if r.result == 0 {
            let p = &mut self.procs[process];
            p.vmm.remove(&h);
            p.released_vmm.insert(h);
        }
    }

    // --- copies, sets and kernels -----------------------------------------

    /// The memory behind `ptr`: known regions by their kind, anything else
    /// host memory the trace did not see allocated (pageable).
    fn memory_of(&self, process: usize, ptr: u64) -> Memory {
        match self.procs[process].memory.holding(ptr) {
            Some((base, live)) => {
                let map = if live {
                    &self.procs[process].memory.live
                } else {
                    &self.procs[process].memory.dead
                };
                map.get(&base).map_or(Memory::Pageable, |g| g.memory)
            }
            None => Memory::Pageable,
        }
    }

    fn copy(&mut self, process: usize, r: &Rec, name: &str) {
        let a = &r.args;
        let (dst, src, size) = (a.ptr.unwrap_or(0), a.src.unwrap_or(0), a.size.unwrap_or(0));
        // The direction a call names holds whatever the trace saw: a
        // `DtoH` source is device memory, known or not.
        let (mut src_mem, mut dst_mem) =
            (self.memory_of(process, src), self.memory_of(process, dst));
        let host = |m: Memory| matches!(m, Memory::Pageable | Memory::Pinned);
        if name.contains("HtoD") {
            dst_mem = if host(dst_mem) {
                Memory::Device
            } else {
                dst_mem
            };
        }
        if name.contains("DtoH") {
            src_mem = if host(src_mem) {
                Memory::Device
            } else {
                src_mem
            };
        }
        if name.contains("DtoD") {
            src_mem = Memory::Device;
            dst_mem = Memory::Device;
        }
        let Some(rule) = sync_rules::copy_rule(name, src_mem, dst_mem) else {
            return self.unlowered(process, r, "not a copy");
        };
        if r.result != 0 || size == 0 {
            return self.unlowered(process, r, "a failed or empty copy moves nothing");
        }
        let device = |m: Memory| m == Memory::Device || m == Memory::Managed;
        let src_ref = if device(src_mem) || src_mem == Memory::Pinned {
            self.pointer(process, r, src)
        } else {
            None
        };
        let dst_ref = if device(dst_mem) || dst_mem == Memory::Pinned {
            self.pointer(process, r, dst)
        } else {
            None
        };
        if (device(src_mem) && src_ref.is_none()) || (device(dst_mem) && dst_ref.is_none()) {
            self.reason(
                process,
                r,
                "copies device memory no recorded call allocated",
            );
            return self.unlowered(process, r, "device memory the trace did not see allocated");
        }
        let stream = self.stream(process, r);
        let span = |remaining: u64| size.min(remaining).min(MAX_MODELLED_SPAN);
        match (rule.returns, &src_ref, &dst_ref) {
            _ if rule.id == "htoh" => self.unlowered(process, r, "a copy between host memories"),
            // Host to device, staged or synchronous: a write of the device
            // bytes (pending on the device until the writer synchronises).
            (Returns::Staged | Returns::Completed, _, Some((d, _, object, rem)))
                if !host(dst_mem) && (host(src_mem) || src_mem == Memory::Managed) =>
            {
                let len = span(*rem);
                let (d, object) = (d.clone(), *object);
                self.write_model(process, r, d, len, object, rule);
                if rule.returns == Returns::Completed {
                    self.completed(process, r);
                }
            }
            // Device to host, completed: a read.
            (Returns::Completed, Some((s, _, object, rem)), _) if host(dst_mem) => {
                let len = span(*rem);
                let (s, object) = (s.clone(), *object);
                if let Some(o) = object {
                    self.accessed(process, r, o, false);
                }
                let origin = Origin {
                    process,
                    seq: Some(r.seq),
                    entry: Some(r.entry),
                    role: Role::Model,
                    rule: Some(rule.id),
                    access: object.map(|o| (o, false)),
                };
                self.step(
                    process,
                    None,
                    Op::Read {
                        ptr: s,
                        offset: 0,
                        len,
                    },
                    expect_any(),
                    origin,
                );
                self.completed(process, r);
            }
            // Anything queued, or the rest: a device copy on the stream.
            (_, Some((s, _, so, srem)), Some((d, _, dobj, drem))) => {
                let len = size.min(*srem).min(*drem).min(MAX_MODELLED_SPAN);
                let (s, d, so, dobj) = (s.clone(), d.clone(), *so, *dobj);
                if let Some(o) = so {
                    self.accessed(process, r, o, false);
                }
                if let Some(o) = dobj {
                    self.accessed(process, r, o, true);
                }
                self.model_step(
                    process,
                    Some(r),
                    None,
                    Op::Copy {
                        dst: d,
                        src: s,
                        len,
                        stream,
                    },
                    Role::Model,
                    Some(rule.id),
                    dobj.or(so).map(|o| (o, dobj.is_some())),
                );
                if rule.returns == Returns::Completed {
                    self.completed(process, r);
                }
            }
            _ => self.unlowered(process, r, "a copy the replay cannot model"),
        }
    }

    /// A completed call: the process's earlier work on the stream is done.
    fn completed(&mut self, process: usize, r: &Rec) {
        self.host_synced(process, r);
    }

    /// A write of `len` bytes at `d` (a host-to-device copy).
    fn write_model(
        &mut self,
        process: usize,
        r: &Rec,
        d: Ref,
        len: u64,
        object: Option<usize>,
        rule: SyncRule,
    ) {
        if let Some(o) = object {
            self.accessed(process, r, o, true);
        }
        let origin = Origin {
            process,
            seq: Some(r.seq),
            entry: Some(r.entry),
            role: Role::Model,
            rule: Some(rule.id),
            access: object.map(|o| (o, true)),
        };
        self.step(
            process,
            None,
            Op::Write {
                ptr: d,
                offset: 0,
                pattern: BytePattern {
                    items: vec![PatternItem::Run(0, len)],
                },
            },
            expect_any(),
            origin,
        );
        if rule.returns == Returns::Completed {
            self.model_step(
                process,
                Some(r),
                None,
                Op::Sync,
                Role::Model,
                Some(rule.id),
                None,
            );
        }
    }

    fn memset(&mut self, process: usize, r: &Rec, name: &str) {
        let (ptr, size) = (r.args.ptr.unwrap_or(0), r.args.size.unwrap_or(0));
        if r.result != 0 || size == 0 {
            return self.unlowered(process, r, "a failed or empty set changes nothing");
        }
        let Some((p, memory, object, rem)) = self.pointer(process, r, ptr) else {
            self.reason(process, r, "sets memory no recorded call allocated");
            return self.unlowered(process, r, "memory the trace did not see allocated");
        };
        let Some(rule) = sync_rules::memset_rule(name, memory) else {
            return self.unlowered(process, r, "not a set");
        };
        if let Some(o) = object {
            self.accessed(process, r, o, true);
        }
        let len = size.min(rem).min(MAX_MODELLED_SPAN);
        let value = (r.args.value.unwrap_or(0) & 0xff) as u8;
        let stream = self.stream(process, r);
        let op = match (&stream, rule.returns) {
            (None, _) => Op::Fill {
                ptr: p,
                value,
                at: None,
                len: Some(len),
                resolved_len: len,
            },
            (Some(_), _) => Op::SlowFill {
                ptr: p,
                value,
                micros: 0,
                at: None,
                len: Some(len),
                resolved_len: len,
                stream,
            },
        };
        self.model_step(
            process,
            Some(r),
            None,
            op,
            Role::Model,
            Some(rule.id),
            object.map(|o| (o, true)),
        );
        if rule.returns == Returns::Completed {
            self.model_step(
                process,
                Some(r),
                None,
                Op::Sync,
                Role::Model,
                Some(rule.id),
                None,
            );
            self.completed(process, r);
        }
    }

    fn kernel(&mut self, process: usize, r: &Rec) {
        let Some(args) = r.args.pointer_args.clone() else {
            self.not_replayed += 1;
            return self.comment(
                process,
                format!(
                    "kernel (seq {}): opaque work (its parameters are unknown)",
                    r.seq
                ),
            );
        };
        if r.result != 0 {
            return self.unlowered(process, r, "a failed launch runs nothing");
        }
        let stream = self.stream(process, r);
        let mut touched = 0;
        let mut seen_objects = HashSet::new();
        for ptr in args {
            let Some((p, memory, object, rem)) = self.pointer(process, r, ptr) else {
                continue;
            };
            if memory == Memory::Pageable || !seen_objects.insert((object, ptr)) {
                continue;
            }
            touched += 1;
            if let Some(o) = object {
                self.accessed(process, r, o, true);
            }
            // What a kernel does with a pointer is unknown: it may read and
            // write, as a copy of the buffer onto itself does.
            let len = rem.clamp(1, MAX_MODELLED_SPAN);
            self.model_step(
                process,
                Some(r),
                None,
                Op::Copy {
                    dst: p.clone(),
                    src: p,
                    len,
                    stream: stream.clone(),
                },
                Role::Model,
                Some(sync_rules::KERNEL.id),
                object.map(|o| (o, true)),
            );
        }
        if touched == 0 {
            self.not_replayed += 1;
            self.comment(
                process,
                format!(
                    "kernel (seq {}): no pointer into memory the trace saw",
                    r.seq
                ),
            );
        }
    }

    // --- errors carried on past ----------------------------------------------

    fn note_failure(&mut self, process: usize, r: &Rec) {
        let name = base_name(self.folder.entry(r));
        let ipc = name.starts_with("cuIpc")
            || matches!(
                name,
                "cuMemExportToShareableHandle" | "cuMemImportFromShareableHandle"
            );
        if !ipc || r.result == 0 {
            return;
        }
        let output = match name {
            "cuIpcOpenMemHandle" => r.args.ptr,
            "cuMemImportFromShareableHandle" => r.args.vmm,
            "cuIpcOpenEventHandle" => r.args.event,
            _ => None,
        };
        if let Some(out) = output.filter(|&v| v != 0) {
            self.procs[process]
                .failed_outputs
                .push((out, r.seq, r.entry));
        }
        if let ("cuIpcGetMemHandle" | "cuIpcGetEventHandle", Some(h)) = (name, &r.args.handle) {
            self.failed_handles
                .insert(h.clone(), (process, r.seq, r.entry));
        }
    }

    fn check_ignored(&mut self, process: usize, r: &Rec) {
        let name = base_name(self.folder.entry(r));
        if let ("cuIpcOpenMemHandle" | "cuIpcOpenEventHandle", Some(h)) = (name, &r.args.handle) {
            if let Some((gp, gseq, gentry)) = self.failed_handles.get(h).copied() {
                let gname = self.procs[gp].name.clone();
                let gcall = escaped(
                    self.folder
                        .entries
                        .get(usize::from(gentry))
                        .map_or("?", |s| s),
                );
                self.finding(
                    FindingClass::IgnoredError,
                    "ignored-error",
                    process,
                    Some(r),
                    format!("opens the bytes {gname}'s failing {gcall} (seq {gseq}) left behind"),
                );
            }
        }
        if self.procs[process].failed_outputs.is_empty() {
            return;
        }
        let mut used: Vec<u64> = [r.args.ptr, r.args.src, r.args.event, r.args.vmm]
            .into_iter()
            .flatten()
            .collect();
        used.extend(r.args.pointer_args.iter().flatten());
        let failed = std::mem::take(&mut self.procs[process].failed_outputs);
        let mut kept = Vec::new();
        for (output, seq, entry) in failed {
            if used.contains(&output) {
                let call = escaped(
                    self.folder
                        .entries
                        .get(usize::from(entry))
                        .map_or("?", |s| s),
                );
                self.finding(
                    FindingClass::IgnoredError,
                    "ignored-error",
                    process,
                    Some(r),
                    format!("uses the output of the failing {call} (seq {seq})"),
                );
            } else {
                kept.push((output, seq, entry));
            }
        }
        self.procs[process].failed_outputs = kept;
    }

    // --- ends ------------------------------------------------------------------

    fn end(&mut self, process: usize) {
        if self.procs[process].exited {
            return;
        }
        self.procs[process].exited = true;
        if self.folder.processes[process].exit_ns.is_none() {
            // A crash, a signal or `_exit`: the teardown is the kernel's, and
            // what the process held is not judged.
            let pname = self.procs[process].name.clone();
            self.lines.push(Line::Comment(format!(
                "# {pname}: ends without an exit record (a crash, a signal or _exit)"
            )));
            self.line += 1;
            return;
        }
        self.vmm_leaks(process);
        let origin = Origin {
            process,
            seq: None,
            entry: None,
            role: Role::Harness,
            rule: None,
            access: None,
        };
        self.step(process, None, Op::Exit, Expect::Default, origin);
    }

    /// VMM handles, mappings and reservations a process still holds at a
    /// normal exit: nothing releases them but the process's teardown (the
    /// VMM counterpart of `mapping-leaked-at-exit`).
    fn vmm_leaks(&mut self, process: usize) {
        let p = &self.procs[process];
        let mut held: Vec<String> = p
            .vmm
            .values()
            .map(|(m, _)| format!("VMM handle {m}"))
            .collect();
        held.sort();
        for g in p
            .memory
            .live
            .values()
            .filter(|g| g.kind == RegionKind::Mapped)
        {
            held.push(format!("mapping {} ({:#x})", g.binding, g.base));
        }
        for (base, (_, b)) in &p.reserved {
            held.push(format!("reservation {b} ({base:#x})"));
        }
        if held.is_empty() {
            return;
        }
        self.finding(
            FindingClass::Hazard,
            "vmm-leaked-at-exit",
            process,
            None,
            format!("exits still holding {}", held.join(", ")),
        );
    }

    fn finish(mut self, start_devices: Vec<u32>, title_dir: &str) -> Replay {
        for p in 0..self.procs.len() {
            self.end(p);
        }
        let devices = self
            .devices
            .max(start_devices.iter().map(|d| d + 1).max().unwrap_or(1));
        let processes = self
            .procs
            .iter()
            .zip(&start_devices)
            .map(|(p, &device)| ProcessSpec {
                name: p.name.clone(),
                device,
                visible_devices: None,
                pid_namespace: Default::default(),
            })
            .collect();
        let scenario = Scenario {
            path: PathBuf::from("replay.ipc"),
            meta: Metadata {
                entries: vec![
                    (
                        "title".into(),
                        format!("the IPC pattern of the program traced in {}", escaped(title_dir)),
                    ),
                    ("kind".into(), "measured".into()),
                    (
                        "source".into(),
                        "ipc-conformance check (each step is a recorded call, expecting the driver's answer)".into(),
                    ),
                ],
            },
            devices,
            topology: None,
            semantics: Vec::new(),
            processes,
            steps: self.steps,
            hazard_expectations: Vec::new(),
        };
        let reasons = self
            .reasons
            .into_values()
            .map(|(first, n)| {
                if n > 1 {
                    format!("{first} (and {} more like it)", n - 1)
                } else {
                    first
                }
            })
            .collect();
        Replay {
            scenario,
            origin: self.origin,
            lines: self.lines,
            findings: self.findings,
            reasons,
            notes: self.notes,
            not_replayed: self.not_replayed,
            objects: self
                .objects
                .into_iter()
                .map(|o| (o.owner, o.binding))
                .collect(),
        }
    }
}

impl Replay {
    /// The scenario file: its header, the declarations (each process with
    /// its pid and executable as a comment), then the steps and comments.
    pub fn text(&self, folder: &Folder) -> String {
        use std::fmt::Write;
        let s = &self.scenario;
        let mut t = String::with_capacity(64 + 48 * s.steps.len());
        for (k, v) in &s.meta.entries {
            let _ = writeln!(t, "# {k}: {v}");
        }
        let _ = writeln!(t, "\ndevices {}", s.devices);
        for (spec, p) in s.processes.iter().zip(&folder.processes) {
            let exe = p.header.as_ref().map_or("?", |h| h.exe.as_str());
            let _ = writeln!(
                t,
                "process {} device={}   # pid {} {}",
                spec.name,
                spec.device,
                p.pid,
                escaped(exe)
            );
        }
        t.push('\n');
        for line in &self.lines {
            match line {
                Line::Comment(c) => {
                    t.push_str(c);
                    t.push('\n');
                }
                Line::Step(i) => {
                    let step = &s.steps[*i];
                    let _ = write!(t, "{}: {}", s.processes[step.process].name, step.text());
                    if let Expect::List(list) = &step.expect {
                        let _ = write!(t, " => {}", list.text);
                    }
                    t.push('\n');
                }
            }
        }
        t
    }
}
