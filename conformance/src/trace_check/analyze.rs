//! One pass over the merged history of all processes: it lowers the IPC
//! pattern to a scenario (which the simulator then judges) and applies the
//! rules the simulator cannot see in a scenario: closes of pointers a
//! process does not hold open, kernels and asynchronous work ordered by
//! interprocess events, and errors the program carried on past.

use super::load::{Merged, MergedEntry};
use ipc_harness::trace_record::{base_name, CallRecord};
use ipc_harness::CallKind;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Largest pattern a lowered `write` or `read` carries (the language's limit).
const MAX_LOWERED_BYTES: u64 = 64 << 20;

/// What one finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingClass {
    /// Undefined behaviour or a broken IPC protocol: `check` exits 1.
    Hazard,
    /// A failing IPC call whose result the program went on to use.
    IgnoredError,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    pub class: FindingClass,
    /// `free-while-mapped`, `double-close`, `ignored-error`, ...
    pub kind: String,
    pub pid: u32,
    /// The call's `seq` in its process's file (absent for process exit).
    pub seq: Option<u64>,
    pub call: String,
    pub detail: String,
    /// `trace` (a rule of the checker) or `simulator` (the simulator's
    /// hazard log on the lowered scenario).
    pub found_by: String,
}

/// The lowered scenario and where each step came from.
#[derive(Debug, Default)]
pub struct Lowered {
    pub text: String,
    /// Per scenario step (in order): the process's pid and the call's seq.
    pub step_origin: Vec<(u32, Option<u64>, String)>,
    /// Calls the scenario language has no step for (kernels, failed calls...).
    pub not_lowered: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RegionKind {
    Own,
    Opened,
    Reserved,
    /// A VMM mapping (`cuMemMap`) inside a reservation.
    Mapped,
}

#[derive(Debug, Clone)]
struct Region {
    base: u64,
    size: u64,
    /// The shared object behind it (index into `Analysis::objects`), once known.
    object: Option<usize>,
    binding: String,
    kind: RegionKind,
    live: bool,
    /// Opened regions: how many opens are outstanding.
    opens: u32,
}

/// One piece of device work that touches a shared object.
#[derive(Debug, Clone)]
struct Work {
    pid: u32,
    seq: u64,
    object: usize,
    writes: bool,
    done: bool,
    visible_to: BTreeSet<u32>,
    call: String,
}

#[derive(Debug, Default)]
struct Proc {
    name: String,
    regions: Vec<Region>,
    contexts: BTreeMap<u64, String>,
    events: BTreeMap<u64, (String, Option<String>)>,
    vmm: BTreeMap<u64, (String, Option<usize>)>,
    /// VMM handles this process released (a second release is a hazard).
    released_vmm: BTreeSet<u64>,
    counters: BTreeMap<&'static str, usize>,
    exited: bool,
    /// Failed IPC calls: (output value, seq, call) not yet seen used.
    failed_outputs: Vec<(u64, u64, String)>,
}

impl Proc {
    fn fresh(&mut self, kind: &'static str) -> String {
        let n = self.counters.entry(kind).or_insert(0);
        *n += 1;
        format!("{}_{kind}{n}", self.name)
    }

    /// The region holding `ptr`: live ones first, then the latest dead one.
    fn region_of(&self, ptr: u64) -> Option<&Region> {
        let inside = |r: &&Region| ptr >= r.base && ptr < r.base + r.size.max(1);
        self.regions
            .iter()
            .rev()
            .filter(|r| r.live)
            .find(inside)
            .or_else(|| self.regions.iter().rev().find(inside))
    }
}

pub struct Analysis {
    pub lowered: Lowered,
    pub findings: Vec<Finding>,
    pub devices: u32,
}

struct State<'a> {
    merged: &'a Merged,
    procs: BTreeMap<u32, Proc>,
    /// Shared objects: (owner pid, binding).
    objects: Vec<(u32, String)>,
    /// Memory handle bytes -> (object, getter's binding, getter pid).
    mem_handles: BTreeMap<String, (Option<usize>, String, u32)>,
    /// Event handle bytes -> (getter's binding, getter pid).
    event_handles: BTreeMap<String, (String, u32)>,
    /// Which processes open each memory / event handle (looked ahead).
    mem_openers: BTreeMap<String, BTreeSet<u32>>,
    event_openers: BTreeMap<String, BTreeSet<u32>>,
    sent: BTreeSet<(String, u32)>,
    /// Descriptor import (pid, seq) -> export (pid, seq), and the receiver's binding.
    import_of: BTreeMap<(u32, u64), (u32, u64)>,
    received_fd: BTreeMap<(u32, u64), String>,
    exported_object: BTreeMap<(u32, u64), Option<usize>>,
    /// Event handle bytes -> works captured by the exporter's last record.
    captured: BTreeMap<String, Vec<usize>>,
    /// Handle bytes a failing get left behind: (pid, seq, call).
    failed_handles: BTreeMap<String, (u32, u64, String)>,
    works: Vec<Work>,
    lines: Vec<String>,
    lowered: Lowered,
    findings: Vec<Finding>,
    devices: u32,
}

pub fn analyze(merged: &Merged) -> Analysis {
    let mut st = State {
        merged,
        procs: BTreeMap::new(),
        objects: Vec::new(),
        mem_handles: BTreeMap::new(),
        event_handles: BTreeMap::new(),
        mem_openers: BTreeMap::new(),
        event_openers: BTreeMap::new(),
        sent: BTreeSet::new(),
        import_of: BTreeMap::new(),
        received_fd: BTreeMap::new(),
        exported_object: BTreeMap::new(),
        captured: BTreeMap::new(),
        failed_handles: BTreeMap::new(),
        works: Vec::new(),
        lines: Vec::new(),
        lowered: Lowered::default(),
        findings: Vec::new(),
        devices: 1,
    };
    for (i, p) in merged.processes.iter().enumerate() {
        st.procs.insert(
            p.pid,
            Proc {
                name: format!("p{}", i + 1),
                ..Proc::default()
            },
        );
    }
    st.look_ahead();
    for entry in &merged.entries {
        match *entry {
            MergedEntry::Call { pid, process, call } => st.call(pid, merged.record(process, call)),
            MergedEntry::End { pid } => st.end(pid),
        }
    }
    st.finish()
}

fn hex_ok(r: &CallRecord) -> bool {
    r.result == 0
}

impl State<'_> {
    /// Who opens which handle, and which export each descriptor import
    /// received: sends are written where the handle is made, so that the
    /// maker may exit before the peer opens.
    fn look_ahead(&mut self) {
        let mut exports: Vec<(u32, &CallRecord)> = Vec::new();
        let mut matched: BTreeSet<(u32, u64)> = BTreeSet::new();
        let merged = self.merged;
        for entry in &merged.entries {
            let MergedEntry::Call { pid, process, call } = entry else {
                continue;
            };
            let record = merged.record(*process, *call);
            if !hex_ok(record) {
                continue;
            }
            match base_name(&record.call) {
                "cuIpcOpenMemHandle" => {
                    if let Some(h) = &record.args.handle {
                        self.mem_openers.entry(h.clone()).or_default().insert(*pid);
                    }
                }
                "cuIpcOpenEventHandle" => {
                    if let Some(h) = &record.args.handle {
                        self.event_openers
                            .entry(h.clone())
                            .or_default()
                            .insert(*pid);
                    }
                }
                "cuMemExportToShareableHandle" if record.args.fd.is_some() => {
                    exports.push((*pid, record));
                }
                "cuMemImportFromShareableHandle" if record.args.fd.is_some() => {
                    // The latest export by another process before it, with
                    // the same descriptor identity where both are known,
                    // preferring one no import has matched yet.
                    let fits = |(epid, e): &&(u32, &CallRecord)| {
                        *epid != *pid
                            && e.t_ns <= record.t_ns
                            && match (&e.args.fd_identity, &record.args.fd_identity) {
                                (Some(a), Some(b)) => a == b,
                                _ => true,
                            }
                    };
                    let candidates: Vec<&(u32, &CallRecord)> =
                        exports.iter().filter(fits).collect();
                    let pick = candidates
                        .iter()
                        .rev()
                        .find(|(epid, e)| !matched.contains(&(*epid, e.seq)))
                        .or(candidates.last());
                    if let Some((epid, e)) = pick {
                        matched.insert((*epid, e.seq));
                        self.import_of.insert((*pid, record.seq), (*epid, e.seq));
                    }
                }
                _ => {}
            }
        }
    }

    fn proc(&mut self, pid: u32) -> &mut Proc {
        self.procs.entry(pid).or_default()
    }

    fn comment(&mut self, pid: u32, text: String) {
        let name = self.proc(pid).name.clone();
        self.lines.push(format!("# {name}: {text}"));
    }

    fn step(&mut self, pid: u32, seq: Option<u64>, call: &str, text: String) {
        let name = self.proc(pid).name.clone();
        self.lines.push(format!("{name}: {text}"));
        self.lowered.step_origin.push((pid, seq, call.to_string()));
    }

    fn finding(
        &mut self,
        class: FindingClass,
        kind: &str,
        pid: u32,
        r: &CallRecord,
        detail: String,
    ) {
        self.findings.push(Finding {
            class,
            kind: kind.to_string(),
            pid,
            seq: Some(r.seq),
            call: r.call.clone(),
            detail,
            found_by: "trace".into(),
        });
    }

    /// A pointer as the scenario names it: a binding, or a fresh `offset`
    /// step when it lies inside one.
    fn pointer(&mut self, pid: u32, r: &CallRecord, ptr: u64) -> Option<String> {
        if ptr == 0 {
            return Some("null".into());
        }
        let region = self.proc(pid).region_of(ptr)?.clone();
        if ptr == region.base {
            return Some(region.binding);
        }
        let name = self.proc(pid).fresh("o");
        self.step(
            pid,
            Some(r.seq),
            &r.call,
            format!(
                "{name} = offset {} {} => ok",
                region.binding,
                ptr - region.base
            ),
        );
        Some(name)
    }

    fn new_object(&mut self, pid: u32, binding: &str) -> usize {
        self.objects.push((pid, binding.to_string()));
        self.objects.len() - 1
    }

    fn add_region(
        &mut self,
        pid: u32,
        base: u64,
        size: u64,
        object: Option<usize>,
        binding: &str,
        kind: RegionKind,
    ) {
        self.proc(pid).regions.push(Region {
            base,
            size,
            object,
            binding: binding.to_string(),
            kind,
            live: true,
            opens: 1,
        });
    }

    fn end(&mut self, pid: u32) {
        let p = self.proc(pid);
        if p.exited {
            return;
        }
        p.exited = true;
        self.vmm_leaks(pid);
        self.complete_work(pid);
        self.step(pid, None, "exit", "exit => ok".into());
    }

    /// A second `cuMemUnmap`, `cuMemAddressFree` or `cuMemRelease` of what
    /// this process already released, whatever the driver answered.
    fn vmm_released_twice(&mut self, pid: u32, r: &CallRecord, name: &str) {
        let a = &r.args;
        let ptr = a.ptr.unwrap_or(0);
        let (hazard, detail) = match name {
            "cuMemRelease" => {
                let h = a.vmm.unwrap_or(0);
                let p = self.proc(pid);
                if p.vmm.contains_key(&h) || !p.released_vmm.contains(&h) {
                    return;
                }
                (
                    "double-release",
                    format!("releases VMM handle 0x{h:x} again"),
                )
            }
            _ => {
                let (kind, hazard, what) = if name == "cuMemUnmap" {
                    (RegionKind::Mapped, "double-unmap", "unmaps")
                } else {
                    (
                        RegionKind::Reserved,
                        "double-address-free",
                        "frees the reservation at",
                    )
                };
                let p = self.proc(pid);
                let held = |g: &&Region| g.base == ptr && g.kind == kind;
                if p.regions.iter().filter(held).any(|g| g.live)
                    || !p.regions.iter().any(|g| held(&g))
                {
                    return;
                }
                (hazard, format!("{what} 0x{ptr:x} again"))
            }
        };
        self.finding(
            FindingClass::Hazard,
            hazard,
            pid,
            r,
            format!("{detail}, after this process already released it"),
        );
    }

    /// VMM handles, mappings and reservations a process still holds when it
    /// exits: nothing releases them but the process's teardown (the VMM
    /// counterpart of `mapping-leaked-at-exit`). A process that crashed,
    /// or left by `_exit`, wrote no exit record and is not judged.
    fn vmm_leaks(&mut self, pid: u32) {
        let merged = self.merged;
        let exited_normally = merged
            .processes
            .iter()
            .any(|p| p.pid == pid && p.exit_ns.is_some());
        if !exited_normally {
            return;
        }
        let p = self.proc(pid);
        let mut held: Vec<String> = p
            .vmm
            .values()
            .map(|(m, _)| format!("VMM handle {m}"))
            .collect();
        for g in p.regions.iter().filter(|g| g.live) {
            match g.kind {
                RegionKind::Mapped => held.push(format!("mapping {} (0x{:x})", g.binding, g.base)),
                RegionKind::Reserved => {
                    held.push(format!("reservation {} (0x{:x})", g.binding, g.base))
                }
                _ => {}
            }
        }
        if held.is_empty() {
            return;
        }
        self.findings.push(Finding {
            class: FindingClass::Hazard,
            kind: "vmm-leaked-at-exit".into(),
            pid,
            seq: None,
            call: "exit".into(),
            detail: format!("exits still holding {}", held.join(", ")),
            found_by: "trace".into(),
        });
    }

    fn complete_work(&mut self, pid: u32) {
        for w in self.works.iter_mut().filter(|w| w.pid == pid) {
            w.done = true;
        }
    }

    /// Device work of `pid` touching `object`: judged against every other
    /// process's work on it that is neither finished (the writer
    /// synchronised) nor ordered before this process by an event it waited on.
    fn access(
        &mut self,
        pid: u32,
        r: &CallRecord,
        object: usize,
        writes: bool,
        asynchronous: bool,
    ) {
        let conflicting: Vec<(u32, u64, String)> = self
            .works
            .iter()
            .filter(|w| {
                w.object == object
                    && w.pid != pid
                    && (w.writes || writes)
                    && !w.done
                    && !w.visible_to.contains(&pid)
            })
            .map(|w| (w.pid, w.seq, w.call.clone()))
            .collect();
        for (wpid, wseq, wcall) in conflicting {
            let what = self.objects[object].1.clone();
            let wname = self.proc(wpid).name.clone();
            self.finding(
                FindingClass::Hazard,
                "unsynchronized-read",
                pid,
                r,
                format!(
                    "{} touches {what} while {wname}'s {wcall} (seq {wseq}) on it may still run: \
                     no wait on an event recorded after it, and {wname} did not synchronise since",
                    r.call
                ),
            );
        }
        if asynchronous {
            self.works.push(Work {
                pid,
                seq: r.seq,
                object,
                writes,
                done: false,
                visible_to: BTreeSet::new(),
                call: r.call.clone(),
            });
        }
    }

    /// Device accesses through `ptr`: use after close, and ordering.
    fn touch(&mut self, pid: u32, r: &CallRecord, ptr: u64, writes: bool, asynchronous: bool) {
        let Some(region) = self.proc(pid).region_of(ptr).cloned() else {
            return;
        };
        if !region.live && region.kind == RegionKind::Opened {
            self.finding(
                FindingClass::Hazard,
                "access-after-close",
                pid,
                r,
                format!("{} uses {} after its last close", r.call, region.binding),
            );
        }
        if let Some(object) = region.object {
            self.access(pid, r, object, writes, asynchronous);
        }
    }

    /// A failing IPC call leaves an output the program must not use.
    fn note_failure(&mut self, pid: u32, r: &CallRecord) {
        let name = base_name(&r.call);
        let ipc = name.starts_with("cuIpc")
            || matches!(
                name,
                "cuMemExportToShareableHandle"
                    | "cuMemImportFromShareableHandle"
                    | "cuMemMap"
                    | "cuMemSetAccess"
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
        self.proc(pid)
            .failed_outputs
            .push((output.unwrap_or(0), r.seq, r.call.clone()));
        if let ("cuIpcGetMemHandle" | "cuIpcGetEventHandle", Some(h)) = (name, &r.args.handle) {
            // Bytes a failing get left behind: an open of them elsewhere uses the error.
            self.failed_handles
                .insert(h.clone(), (pid, r.seq, r.call.clone()));
        }
    }
}

impl State<'_> {
    /// Whether this call uses what an earlier failing IPC call left behind.
    fn check_ignored(&mut self, pid: u32, r: &CallRecord) {
        let name = base_name(&r.call);
        if let ("cuIpcOpenMemHandle" | "cuIpcOpenEventHandle", Some(h)) = (name, &r.args.handle) {
            if let Some((gpid, gseq, gcall)) = self.failed_handles.get(h).cloned() {
                let gname = self.proc(gpid).name.clone();
                self.finding(
                    FindingClass::IgnoredError,
                    "ignored-error",
                    pid,
                    r,
                    format!("opens the bytes {gname}'s failing {gcall} (seq {gseq}) left behind"),
                );
            }
        }
        let mut used: Vec<u64> = [r.args.ptr, r.args.src, r.args.event, r.args.vmm]
            .into_iter()
            .flatten()
            .collect();
        used.extend(r.args.pointer_args.iter().flatten());
        let dereferences = matches!(
            name,
            "cuMemcpy"
                | "cuMemcpyHtoD"
                | "cuMemcpyDtoH"
                | "cuMemcpyDtoD"
                | "cuMemcpyAsync"
                | "cuMemcpyHtoDAsync"
                | "cuMemcpyDtoHAsync"
                | "cuMemcpyDtoDAsync"
                | "cuMemsetD8"
                | "cuMemsetD32"
                | "cuMemsetD8Async"
                | "cuMemsetD32Async"
                | "cuIpcCloseMemHandle"
        );
        let failed = std::mem::take(&mut self.proc(pid).failed_outputs);
        let mut kept = Vec::new();
        for (output, seq, call) in failed {
            let hit = if output != 0 {
                used.contains(&output)
            } else {
                dereferences && (r.args.ptr == Some(0) || r.args.src == Some(0))
            };
            if hit {
                self.finding(
                    FindingClass::IgnoredError,
                    "ignored-error",
                    pid,
                    r,
                    format!("uses the output of the failing {call} (seq {seq})"),
                );
            } else {
                kept.push((output, seq, call));
            }
        }
        self.proc(pid).failed_outputs = kept;
    }

    fn call(&mut self, pid: u32, r: &CallRecord) {
        if self.proc(pid).exited {
            // Calls after the exit record (runtime teardown) change nothing shared.
            return;
        }
        self.check_ignored(pid, r);
        self.note_failure(pid, r);
        let name = base_name(&r.call);
        let a = &r.args;
        if r.result != 0 {
            // Rules that hold whatever the driver answered.
            if name == "cuIpcCloseMemHandle" {
                self.close(pid, r, a.ptr.unwrap_or(0));
            }
            if matches!(name, "cuMemUnmap" | "cuMemAddressFree" | "cuMemRelease") {
                self.vmm_released_twice(pid, r, name);
            }
            self.lowered.not_lowered += 1;
            self.comment(
                pid,
                format!("{} failed with {} (seq {})", r.call, r.result, r.seq),
            );
            return;
        }
        if let Some(d) = a.device {
            if d >= 0 && (d as u32) < 64 {
                self.devices = self.devices.max(d as u32 + 1);
            }
        }
        let seq = Some(r.seq);
        match name {
            "cuDevicePrimaryCtxRetain" | "cuCtxCreate" => {
                let c = self.proc(pid).fresh("c");
                let op = if name == "cuCtxCreate" {
                    CallKind::CreateContext.keyword()
                } else {
                    CallKind::PrimaryContext.keyword()
                };
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!("{c} = {op} {} => ok", a.device.unwrap_or(0)),
                );
                if let Some(ctx) = a.ctx {
                    self.proc(pid).contexts.insert(ctx, c);
                }
            }
            "cuCtxSetCurrent" | "cuCtxPushCurrent" | "cuCtxDestroy" => {
                let ctx = a.ctx.unwrap_or(0);
                match self.proc(pid).contexts.get(&ctx).cloned() {
                    Some(c) => {
                        let op = if name == "cuCtxDestroy" {
                            CallKind::DestroyContext.keyword()
                        } else {
                            CallKind::SetCurrentContext.keyword()
                        };
                        self.step(pid, seq, &r.call, format!("{op} {c} => ok"));
                        if name == "cuCtxDestroy" {
                            self.proc(pid).contexts.remove(&ctx);
                        }
                    }
                    None => self.unlowered(pid, r, "a context the trace did not see made"),
                }
            }
            "cuCtxSynchronize" | "cuStreamSynchronize" => {
                self.complete_work(pid);
                self.step(pid, seq, &r.call, "sync => ok".into());
            }
            "cuMemAlloc" | "cuMemAllocManaged" | "cuMemAllocHost" | "cuMemHostAlloc"
            | "cuMemAllocAsync" => {
                let (ptr, size) = (a.ptr.unwrap_or(0), a.size.unwrap_or(0));
                let op = match name {
                    "cuMemAlloc" => CallKind::Alloc.keyword(),
                    "cuMemAllocManaged" => "malloc_managed",
                    "cuMemAllocAsync" => "malloc_async",
                    _ => "malloc_host",
                };
                let b = self.proc(pid).fresh("a");
                self.step(pid, seq, &r.call, format!("{b} = {op} {size} => ok"));
                let object = self.new_object(pid, &b);
                self.add_region(pid, ptr, size, Some(object), &b, RegionKind::Own);
            }
            "cuMemFree" | "cuMemFreeHost" | "cuMemFreeAsync" => {
                let ptr = a.ptr.unwrap_or(0);
                let op = match name {
                    "cuMemFree" => CallKind::Free.keyword(),
                    "cuMemFreeHost" => "free_host",
                    _ => "free_async",
                };
                match self.pointer(pid, r, ptr) {
                    Some(p) => {
                        self.step(pid, seq, &r.call, format!("{op} {p} => ok"));
                        let proc = self.proc(pid);
                        if let Some(reg) = proc
                            .regions
                            .iter_mut()
                            .rev()
                            .find(|g| g.live && g.base == ptr)
                        {
                            reg.live = false;
                        }
                    }
                    None => self.unlowered(pid, r, "a pointer the trace did not see allocated"),
                }
            }
            "cuIpcGetMemHandle" => self.get_mem_handle(pid, r),
            "cuIpcOpenMemHandle" => self.open_mem_handle(pid, r),
            "cuIpcCloseMemHandle" => {
                let ptr = a.ptr.unwrap_or(0);
                if let Some(p) = self.pointer(pid, r, ptr) {
                    self.step(
                        pid,
                        seq,
                        &r.call,
                        format!("{kw} {p} => ok", kw = CallKind::IpcCloseMemHandle.keyword()),
                    );
                }
                self.close(pid, r, ptr);
            }
            "cuEventCreate" => {
                let e = self.proc(pid).fresh("e");
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!(
                        "{e} = {kw} flags={} => ok",
                        a.flags.unwrap_or(0),
                        kw = CallKind::EventCreate.keyword()
                    ),
                );
                if let Some(ev) = a.event {
                    self.proc(pid).events.insert(ev, (e, None));
                }
            }
            "cuEventRecord"
            | "cuEventRecordWithFlags"
            | "cuEventQuery"
            | "cuEventSynchronize"
            | "cuStreamWaitEvent"
            | "cuEventDestroy" => self.event_use(pid, r, name),
            "cuIpcGetEventHandle" => {
                let ev = a.event.unwrap_or(0);
                let Some((e, _)) = self.proc(pid).events.get(&ev).cloned() else {
                    return self.unlowered(pid, r, "an event the trace did not see made");
                };
                let h = self.proc(pid).fresh("eh");
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!(
                        "{h} = {kw} {e} => ok",
                        kw = CallKind::IpcGetEventHandle.keyword()
                    ),
                );
                if let Some(bytes) = a.handle.clone() {
                    self.proc(pid).events.insert(ev, (e, Some(bytes.clone())));
                    self.event_handles
                        .entry(bytes.clone())
                        .or_insert((h.clone(), pid));
                    self.send_to_openers(pid, r, &bytes, &h, true);
                }
            }
            "cuIpcOpenEventHandle" => {
                let bytes = a.handle.clone().unwrap_or_default();
                let Some((h, _)) = self.event_handles.get(&bytes).cloned() else {
                    return self.unlowered(pid, r, "an event handle no traced process made");
                };
                let e = self.proc(pid).fresh("e");
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!(
                        "{e} = {kw} {h} => ok",
                        kw = CallKind::IpcOpenEventHandle.keyword()
                    ),
                );
                if let Some(ev) = a.event {
                    self.proc(pid).events.insert(ev, (e, Some(bytes)));
                }
            }
            "cuMemCreate" => {
                let m = self.proc(pid).fresh("m");
                let types = a.handle_type.unwrap_or(0);
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!(
                        "{m} = {kw} {} types={types} device={} => ok",
                        a.size.unwrap_or(0),
                        a.device.unwrap_or(0),
                        kw = CallKind::VmmCreate.keyword()
                    ),
                );
                let object = self.new_object(pid, &m);
                if let Some(v) = a.vmm {
                    self.proc(pid).vmm.insert(v, (m, Some(object)));
                }
            }
            "cuMemExportToShareableHandle" => self.export(pid, r),
            "cuMemImportFromShareableHandle" => {
                let (Some(export), Some(_)) = (self.import_of.get(&(pid, r.seq)).copied(), a.fd)
                else {
                    return self.unlowered(
                        pid,
                        r,
                        "a shareable handle the trace cannot match to an export",
                    );
                };
                let Some(fd) = self.received_fd.get(&(pid, r.seq)).cloned() else {
                    return self.unlowered(pid, r, "a descriptor whose export was not lowered");
                };
                let m = self.proc(pid).fresh("m");
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!("{m} = {kw} {fd} => ok", kw = CallKind::VmmImport.keyword()),
                );
                let object = self.exported_object.get(&export).copied().flatten();
                if let Some(v) = a.vmm {
                    self.proc(pid).vmm.insert(v, (m, object));
                }
            }
            "cuMemAddressReserve" => {
                let v = self.proc(pid).fresh("v");
                let size = a.size.unwrap_or(0);
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!(
                        "{v} = {kw} {size} => ok",
                        kw = CallKind::VmmReserve.keyword()
                    ),
                );
                self.add_region(
                    pid,
                    a.ptr.unwrap_or(0),
                    size,
                    None,
                    &v,
                    RegionKind::Reserved,
                );
            }
            "cuMemMap" => {
                let (ptr, size) = (a.ptr.unwrap_or(0), a.size.unwrap_or(0));
                let Some((m, object)) = self.proc(pid).vmm.get(&a.vmm.unwrap_or(0)).cloned() else {
                    return self.unlowered(pid, r, "a VMM handle the trace did not see made");
                };
                let Some(p) = self.pointer(pid, r, ptr) else {
                    return self.unlowered(pid, r, "a range the trace did not see reserved");
                };
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!(
                        "{kw} {p} {size} {m} offset={} => ok",
                        a.offset.unwrap_or(0),
                        kw = CallKind::VmmMap.keyword()
                    ),
                );
                let binding = p.clone();
                self.add_region(pid, ptr, size, object, &binding, RegionKind::Mapped);
            }
            "cuMemSetAccess" => {
                let (ptr, size) = (a.ptr.unwrap_or(0), a.size.unwrap_or(0));
                let Some(p) = self.pointer(pid, r, ptr) else {
                    return self.unlowered(pid, r, "a range the trace did not see reserved");
                };
                for (device, flags) in a.access.clone().unwrap_or_default() {
                    let access = match flags {
                        0 => "none",
                        1 => "read",
                        _ => "rw",
                    };
                    self.step(
                        pid,
                        seq,
                        &r.call,
                        format!(
                            "{kw} {p} {size} {access} device={device} => ok",
                            kw = CallKind::VmmSetAccess.keyword()
                        ),
                    );
                }
            }
            "cuMemUnmap" | "cuMemAddressFree" => {
                let (ptr, size) = (a.ptr.unwrap_or(0), a.size.unwrap_or(0));
                let unmap = name == "cuMemUnmap";
                let kind = if unmap {
                    RegionKind::Mapped
                } else {
                    RegionKind::Reserved
                };
                let held = |g: &Region| g.base == ptr && g.kind == kind;
                if !self.proc(pid).regions.iter().any(|g| g.live && held(g)) {
                    self.vmm_released_twice(pid, r, name);
                    return self.unlowered(pid, r, "a range the trace does not see held");
                }
                let Some(p) = self.pointer(pid, r, ptr) else {
                    return self.unlowered(pid, r, "a range the trace did not see reserved");
                };
                let op = if unmap {
                    CallKind::VmmUnmap.keyword()
                } else {
                    CallKind::VmmAddressFree.keyword()
                };
                self.step(pid, seq, &r.call, format!("{op} {p} {size} => ok"));
                if let Some(reg) = self
                    .proc(pid)
                    .regions
                    .iter_mut()
                    .rev()
                    .find(|g| g.live && g.base == ptr && g.kind == kind)
                {
                    reg.live = false;
                }
            }
            "cuMemRelease" => {
                let h = a.vmm.unwrap_or(0);
                let Some((m, _)) = self.proc(pid).vmm.remove(&h) else {
                    self.vmm_released_twice(pid, r, name);
                    return self.unlowered(pid, r, "a VMM handle the trace does not see held");
                };
                self.proc(pid).released_vmm.insert(h);
                self.step(
                    pid,
                    seq,
                    &r.call,
                    format!("{kw} {m} => ok", kw = CallKind::VmmRelease.keyword()),
                );
            }
            "cuMemcpy" | "cuMemcpyHtoD" | "cuMemcpyDtoH" | "cuMemcpyDtoD" | "cuMemcpyAsync"
            | "cuMemcpyHtoDAsync" | "cuMemcpyDtoHAsync" | "cuMemcpyDtoDAsync" => {
                self.copy(pid, r, name)
            }
            "cuMemsetD8" | "cuMemsetD32" | "cuMemsetD8Async" | "cuMemsetD32Async" => {
                let (ptr, size) = (a.ptr.unwrap_or(0), a.size.unwrap_or(0));
                let asynchronous = name.ends_with("Async");
                self.touch(pid, r, ptr, true, asynchronous);
                let byte = a.value.unwrap_or(0) & 0xff;
                match self.proc(pid).region_of(ptr).cloned() {
                    Some(reg) if size > 0 && !asynchronous => self.step(
                        pid,
                        seq,
                        &r.call,
                        format!(
                            "{kw} {} 0x{byte:02x} at={} len={size} => ok",
                            reg.binding,
                            ptr - reg.base,
                            kw = CallKind::Memset.keyword()
                        ),
                    ),
                    _ => self.unlowered(
                        pid,
                        r,
                        "asynchronous or outside what the trace saw allocated",
                    ),
                }
            }
            "cuLaunchKernel" | "cuLaunchKernelEx" => {
                let mut touched = Vec::new();
                for p in a.pointer_args.clone().unwrap_or_default() {
                    if let Some(reg) = self.proc(pid).region_of(p).cloned() {
                        touched.push(reg.binding.clone());
                        // What a kernel does with a pointer is unknown: it may write.
                        self.touch(pid, r, p, true, true);
                    }
                }
                let what = match &a.pointer_args {
                    None => "opaque work (its parameters are unknown)".to_string(),
                    Some(_) if touched.is_empty() => {
                        "no pointer into memory the trace saw".to_string()
                    }
                    Some(_) => format!("may read and write {}", touched.join(", ")),
                };
                self.lowered.not_lowered += 1;
                self.comment(pid, format!("kernel (seq {}): {what}", r.seq));
            }
            _ => self.unlowered(pid, r, "no scenario step for it"),
        }
    }

    fn unlowered(&mut self, pid: u32, r: &CallRecord, why: &str) {
        self.lowered.not_lowered += 1;
        self.comment(
            pid,
            format!("{} (seq {}) not replayed: {why}", r.call, r.seq),
        );
    }

    fn send_to_openers(
        &mut self,
        pid: u32,
        r: &CallRecord,
        bytes: &str,
        binding: &str,
        event: bool,
    ) {
        let openers = if event {
            &self.event_openers
        } else {
            &self.mem_openers
        };
        let peers: Vec<u32> = openers
            .get(bytes)
            .into_iter()
            .flatten()
            .copied()
            .filter(|p| *p != pid)
            .collect();
        for peer in peers {
            if self.sent.insert((binding.to_string(), peer)) {
                let peer_name = self.proc(peer).name.clone();
                self.step(
                    pid,
                    Some(r.seq),
                    &r.call,
                    format!("send {binding} -> {peer_name} => ok"),
                );
            }
        }
    }

    fn get_mem_handle(&mut self, pid: u32, r: &CallRecord) {
        let ptr = r.args.ptr.unwrap_or(0);
        let Some(p) = self.pointer(pid, r, ptr) else {
            return self.unlowered(pid, r, "a pointer the trace did not see allocated");
        };
        let object = self.proc(pid).region_of(ptr).and_then(|g| g.object);
        let h = self.proc(pid).fresh("h");
        self.step(
            pid,
            Some(r.seq),
            &r.call,
            format!(
                "{h} = {kw} {p} => ok",
                kw = CallKind::IpcGetMemHandle.keyword()
            ),
        );
        if let Some(bytes) = r.args.handle.clone() {
            let (_, first, _) = self
                .mem_handles
                .entry(bytes.clone())
                .or_insert((object, h.clone(), pid))
                .clone();
            self.send_to_openers(pid, r, &bytes, &first, false);
        }
    }

    fn open_mem_handle(&mut self, pid: u32, r: &CallRecord) {
        let bytes = r.args.handle.clone().unwrap_or_default();
        let Some((object, h, getter)) = self.mem_handles.get(&bytes).cloned() else {
            return self.unlowered(pid, r, "a handle no traced process made");
        };
        let ptr = r.args.ptr.unwrap_or(0);
        let size = object
            .and_then(|o| {
                let (owner, binding) = self.objects[o].clone();
                self.proc(owner)
                    .regions
                    .iter()
                    .find(|g| g.binding == binding)
                    .map(|g| g.size)
            })
            .unwrap_or(1);
        let flags = r.args.flags.unwrap_or(1);
        // A re-open in the same process returns the same pointer (a reference).
        if let Some(reg) = self
            .proc(pid)
            .regions
            .iter_mut()
            .rev()
            .find(|g| g.live && g.base == ptr && g.kind == RegionKind::Opened)
        {
            reg.opens += 1;
            let q = reg.binding.clone();
            let again = self.proc(pid).fresh("q");
            let _ = getter;
            self.step(
                pid,
                Some(r.seq),
                &r.call,
                format!(
                    "{again} = {kw} {h} flags={flags} => ok, == {q}",
                    kw = CallKind::IpcOpenMemHandle.keyword()
                ),
            );
            return;
        }
        let q = self.proc(pid).fresh("q");
        self.step(
            pid,
            Some(r.seq),
            &r.call,
            format!(
                "{q} = {kw} {h} flags={flags} => ok",
                kw = CallKind::IpcOpenMemHandle.keyword()
            ),
        );
        self.add_region(pid, ptr, size, object, &q, RegionKind::Opened);
    }

    /// `cuIpcCloseMemHandle`: a close must match an open of this process.
    fn close(&mut self, pid: u32, r: &CallRecord, ptr: u64) {
        let proc = self.proc(pid);
        let live = proc
            .regions
            .iter_mut()
            .rev()
            .find(|g| g.live && g.base == ptr && g.kind == RegionKind::Opened);
        if let Some(reg) = live {
            reg.opens -= 1;
            if reg.opens == 0 {
                reg.live = false;
            }
            return;
        }
        let closed_before = proc
            .regions
            .iter()
            .any(|g| g.base == ptr && g.kind == RegionKind::Opened);
        let (kind, detail) = if closed_before {
            (
                "double-close",
                format!(
                    "closes 0x{ptr:x}, which this process already closed as often as it opened it"
                ),
            )
        } else {
            (
                "foreign-close",
                format!("closes 0x{ptr:x}, which this process never opened from a handle"),
            )
        };
        self.finding(FindingClass::Hazard, kind, pid, r, detail);
    }

    fn event_use(&mut self, pid: u32, r: &CallRecord, name: &str) {
        let ev = r.args.event.unwrap_or(0);
        let Some((e, bytes)) = self.proc(pid).events.get(&ev).cloned() else {
            return self.unlowered(pid, r, "an event the trace did not see made");
        };
        let call = match name {
            "cuEventRecord" | "cuEventRecordWithFlags" => CallKind::EventRecord,
            "cuEventQuery" => CallKind::EventQuery,
            "cuEventSynchronize" => CallKind::EventSynchronize,
            "cuStreamWaitEvent" => CallKind::StreamWaitEvent,
            _ => CallKind::EventDestroy,
        };
        self.step(
            pid,
            Some(r.seq),
            &r.call,
            format!("{} {e} => ok", call.keyword()),
        );
        let Some(bytes) = bytes else {
            if call == CallKind::EventSynchronize {
                self.complete_work(pid);
            }
            if call == CallKind::EventDestroy {
                self.proc(pid).events.remove(&ev);
            }
            return;
        };
        let exporter = self.event_handles.get(&bytes).map(|(_, p)| *p);
        match call {
            CallKind::EventRecord if exporter == Some(pid) => {
                // The record captures this process's work launched so far.
                let captured: Vec<usize> = (0..self.works.len())
                    .filter(|&i| self.works[i].pid == pid)
                    .collect();
                self.captured.insert(bytes, captured);
            }
            CallKind::EventRecord => {
                let captured: Vec<usize> = (0..self.works.len())
                    .filter(|&i| self.works[i].pid == pid)
                    .collect();
                self.captured.insert(bytes, captured);
            }
            CallKind::EventSynchronize | CallKind::StreamWaitEvent | CallKind::EventQuery => {
                let own = exporter == Some(pid);
                for i in self.captured.get(&bytes).cloned().unwrap_or_default() {
                    if own && call == CallKind::EventSynchronize {
                        self.works[i].done = true;
                    }
                    self.works[i].visible_to.insert(pid);
                }
                if own && call == CallKind::EventSynchronize {
                    self.complete_work(pid);
                }
            }
            _ => {
                self.proc(pid).events.remove(&ev);
            }
        }
    }

    fn export(&mut self, pid: u32, r: &CallRecord) {
        let a = &r.args;
        let Some((m, object)) = self.proc(pid).vmm.get(&a.vmm.unwrap_or(0)).cloned() else {
            return self.unlowered(pid, r, "a VMM handle the trace did not see made");
        };
        if a.handle_type != Some(1) {
            let f = self.proc(pid).fresh("f");
            self.step(
                pid,
                Some(r.seq),
                &r.call,
                format!(
                    "{f} = {kw} {m} fabric => ok",
                    kw = CallKind::VmmExport.keyword()
                ),
            );
            return;
        }
        let f = self.proc(pid).fresh("f");
        self.step(
            pid,
            Some(r.seq),
            &r.call,
            format!(
                "{f} = {kw} {m} posix_fd => ok",
                kw = CallKind::VmmExport.keyword()
            ),
        );
        self.exported_object.insert((pid, r.seq), object);
        let importers: Vec<(u32, u64)> = self
            .import_of
            .iter()
            .filter(|(_, e)| **e == (pid, r.seq))
            .map(|(i, _)| *i)
            .collect();
        for (ipid, iseq) in importers {
            let received = self.proc(ipid).fresh("f");
            let peer = self.proc(ipid).name.clone();
            self.step(
                pid,
                Some(r.seq),
                &r.call,
                format!("{received} = send_fd {f} -> {peer} => ok"),
            );
            self.received_fd.insert((ipid, iseq), received);
        }
    }

    fn copy(&mut self, pid: u32, r: &CallRecord, name: &str) {
        let a = &r.args;
        let (dst, src, size) = (a.ptr.unwrap_or(0), a.src.unwrap_or(0), a.size.unwrap_or(0));
        let asynchronous = name.ends_with("Async");
        let dst_region = self.proc(pid).region_of(dst).cloned();
        let src_region = self.proc(pid).region_of(src).cloned();
        let device = |g: &Option<Region>| {
            g.as_ref()
                .is_some_and(|g| g.kind != RegionKind::Own || g.object.is_some())
        };
        if device(&src_region) && name != "cuMemcpyHtoD" && name != "cuMemcpyHtoDAsync" {
            self.touch(pid, r, src, false, asynchronous);
        }
        if device(&dst_region) && name != "cuMemcpyDtoH" && name != "cuMemcpyDtoHAsync" {
            self.touch(pid, r, dst, true, asynchronous);
        }
        if !asynchronous {
            // A synchronous copy waits for the process's earlier work.
            self.complete_work(pid);
        }
        let size = size.min(MAX_LOWERED_BYTES);
        match (name, asynchronous, dst_region, src_region) {
            ("cuMemcpyHtoD", false, Some(d), _) if size > 0 => self.step(
                pid,
                Some(r.seq),
                &r.call,
                format!(
                    "{kw} {} {} 00*{size} => ok",
                    d.binding,
                    dst - d.base,
                    kw = CallKind::Write.keyword()
                ),
            ),
            ("cuMemcpyDtoH", false, _, Some(s)) if size > 0 => self.step(
                pid,
                Some(r.seq),
                &r.call,
                format!(
                    "{kw} {} {} {size} => ok",
                    s.binding,
                    src - s.base,
                    kw = CallKind::Read.keyword()
                ),
            ),
            _ => self.unlowered(
                pid,
                r,
                "the language's copies are synchronous host<->device ones",
            ),
        }
    }

    fn finish(mut self) -> Analysis {
        for pid in self.procs.keys().copied().collect::<Vec<_>>() {
            if !self.procs[&pid].exited {
                self.end(pid);
            }
        }
        let mut text = String::new();
        text.push_str(&format!("devices {}\n", self.devices));
        for (i, p) in self.merged.processes.iter().enumerate() {
            let name = &self.procs[&p.pid].name;
            let exe = p.header.as_ref().map(|h| h.exe.as_str()).unwrap_or("?");
            text.push_str(&format!(
                "process {name} device=0   # pid {} {exe}\n",
                p.pid
            ));
            let _ = i;
        }
        text.push('\n');
        for line in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        self.lowered.text = text;
        Analysis {
            lowered: self.lowered,
            findings: self.findings,
            devices: self.devices,
        }
    }
}
