//! Contexts, streams, events and the legacy IPC calls (memory and event
//! handles), and the errors a program carried on past.

use super::state::{name, Lowering, Origin, RegionKind, Role};
use crate::trace_check::load::{HandleBytes, Rec};
use crate::trace_check::model::FindingClass;
use crate::trace_check::sync_rules::Memory;
use ipc_harness::scenario::{Expect, ExpectList, Expectation, Op, Ref};
use ipc_harness::trace_record::base_name;
use ipc_harness::OutArg;
use std::collections::HashMap;

impl Lowering<'_> {
    // --- contexts ------------------------------------------------------------

    pub(super) fn make_context(&mut self, process: usize, r: &Rec, name: &str) {
        let device = r.args.device().unwrap_or(0);
        let c = self.procs[process].fresh("c");
        let op = if name == "cuCtxCreate" {
            Op::CtxCreate { device }
        } else {
            Op::PrimaryCtx { device }
        };
        let ok = r.result == 0;
        self.call_step(process, r, ok.then(|| c.clone()), op);
        if let (true, Some(ctx)) = (ok, r.args.ctx()) {
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

    pub(super) fn set_context(&mut self, process: usize, r: &Rec, name: &str) {
        let ctx = r.args.ctx().unwrap_or(0);
        if ctx == 0 {
            return self.unlowered(process, r, "no context made current (no step for it)");
        }
        let Some(c) = self.context(process, r, ctx) else {
            if r.result == 0 {
                self.reason(process, r, "uses a context no recorded call made");
            }
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

    pub(super) fn pop_context(&mut self, process: usize, r: &Rec) {
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

    pub(super) fn destroy_context(&mut self, process: usize, r: &Rec) {
        let ctx = r.args.ctx().unwrap_or(0);
        let Some(c) = self.procs[process].contexts.get(&ctx).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "destroys a context no recorded call made");
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

    // --- streams -------------------------------------------------------------

    pub(super) fn stream_create(&mut self, process: usize, r: &Rec) {
        let ok = r.result == 0;
        let s = self.procs[process].fresh("s");
        // CU_STREAM_NON_BLOCKING is bit 0, as the language's `nonblocking`.
        let flags = (r.args.flags().unwrap_or(0) & 1) as u32;
        self.call_step(
            process,
            r,
            ok.then(|| s.clone()),
            Op::StreamCreate { flags },
        );
        if let (true, Some(v)) = (ok, r.args.stream()) {
            self.procs[process].streams.insert(v, s);
        }
    }

    pub(super) fn stream_use(&mut self, process: usize, r: &Rec, name: &str) {
        if name == "cuStreamDestroy" && r.result != 0 {
            // As for events: the language ends the name at its destroy.
            return self.unlowered(process, r, "a failed destroy changes nothing");
        }
        let stream = self.stream(process, r);
        let op = match (name, stream) {
            ("cuStreamSynchronize", Some(s)) => Op::StreamSync { stream: s },
            ("cuStreamSynchronize", None) => Op::Sync,
            ("cuStreamQuery", Some(s)) => Op::StreamQuery { stream: s },
            ("cuStreamDestroy", Some(s)) => Op::StreamDestroy { stream: s },
            _ => return self.unlowered(process, r, "a default stream"),
        };
        let destroys = matches!(op, Op::StreamDestroy { .. });
        let syncs = matches!(op, Op::StreamSync { .. } | Op::Sync);
        self.call_step(process, r, None, op);
        if r.result == 0 {
            if syncs {
                self.host_synced(process, r);
            }
            if destroys {
                if let Some(v) = r.args.stream() {
                    self.procs[process].streams.remove(&v);
                }
            }
        }
    }

    pub(super) fn capture(&mut self, process: usize, r: &Rec, name: &str) {
        if let (0, Some(s)) = (r.result, r.args.stream()) {
            let capturing = &mut self.procs[process].capturing;
            if name == "cuStreamEndCapture" {
                capturing.remove(&s);
            } else {
                capturing.insert(s);
            }
        }
        self.unlowered(
            process,
            r,
            "stream capture: the calls between begin and end are recorded into a graph, not run",
        );
    }

    // --- events --------------------------------------------------------------

    pub(super) fn cu_event_create(&mut self, process: usize, r: &Rec) {
        let ok = r.result == 0;
        let flags = r.args.flags().unwrap_or(0);
        // CU_EVENT_BLOCKING_SYNC, _DISABLE_TIMING, _INTERPROCESS.
        if flags & !0x7 != 0 {
            if ok {
                self.reason(
                    process,
                    r,
                    "creates an event with flags the replay does not know",
                );
            }
            return self.unlowered(process, r, "event flags the language has no name for");
        }
        let flags = flags as u32;
        let e = self.procs[process].fresh("e");
        self.call_step(process, r, ok.then(|| e.clone()), Op::EventCreate { flags });
        if let (true, Some(ev)) = (ok, r.args.event()) {
            self.procs[process].events.insert(ev, (e, None));
        }
    }

    /// A completed event: what its record captured happens before this
    /// process's next steps.
    fn waited(&mut self, process: usize, shared: Option<usize>) {
        if let Some(s) = shared {
            let clock = self.shared_events[s].clone();
            self.procs[process].merge(&clock);
        }
    }

    pub(super) fn event_use(&mut self, process: usize, r: &Rec, name: &str) {
        let ev = r.args.event().unwrap_or(0);
        let Some((e, shared)) = self.procs[process].events.get(&ev).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "uses an event no recorded call made");
            }
            return self.unlowered(process, r, "an event the trace did not see made");
        };
        if name == "cuEventDestroy" && r.result != 0 {
            // The language ends an event's name at its destroy, whatever
            // the answer; a failed one changes nothing.
            return self.unlowered(process, r, "a failed destroy changes nothing");
        }
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
                    self.shared_events[s] = self.procs[process].clock(process);
                }
            }
            "cuEventQuery" | "cuEventSynchronize" | "cuStreamWaitEvent" => {
                self.waited(process, shared);
                if name == "cuEventSynchronize" {
                    self.host_synced(process, r);
                }
            }
            _ => {
                self.procs[process].events.remove(&ev);
            }
        }
    }

    /// `cuEventElapsedTime` succeeds only when both events completed.
    pub(super) fn cu_event_elapsed_time(&mut self, process: usize, r: &Rec) {
        let events: Vec<u64> = r.args.objects().map(<[u64]>::to_vec).unwrap_or_default();
        let known: Vec<(String, Option<usize>)> = events
            .iter()
            .filter_map(|e| self.procs[process].events.get(e).cloned())
            .collect();
        if let [(start, s1), (end, s2)] = known.as_slice() {
            let (s1, s2) = (*s1, *s2);
            self.call_step(
                process,
                r,
                None,
                Op::EventElapsed {
                    start: start.clone(),
                    end: end.clone(),
                },
            );
            if r.result == 0 {
                self.waited(process, s1);
                self.waited(process, s2);
            }
        } else {
            self.unlowered(process, r, "events the trace did not see made");
        }
    }

    pub(super) fn get_event_handle(&mut self, process: usize, r: &Rec) {
        let ev = r.args.event().unwrap_or(0);
        let Some((e, _)) = self.procs[process].events.get(&ev).cloned() else {
            if r.result == 0 {
                self.reason(process, r, "exports an event no recorded call made");
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
        if let (true, Some(bytes)) = (ok, r.args.handle()) {
            let shared = match self.event_handles.get(bytes) {
                Some((_, q, s, made_from)) if *q == process && *made_from == e => *s,
                earlier => {
                    // New bytes, or the bytes of an event since destroyed
                    // given to this one: they stand for this event from
                    // here on, and go out again to the processes that open
                    // them.
                    if earlier.is_some() {
                        for q in 0..self.procs.len() {
                            self.held.remove(&(q, *bytes));
                        }
                    }
                    self.shared_events.push(HashMap::new());
                    let s = self.shared_events.len() - 1;
                    self.event_handles
                        .insert(*bytes, (h.clone(), process, s, e.clone()));
                    s
                }
            };
            self.procs[process].events.insert(ev, (e, Some(shared)));
            self.send_to_openers(process, r, bytes, &h);
        }
    }

    pub(super) fn open_event_handle(&mut self, process: usize, r: &Rec) {
        let shared = r
            .args
            .handle()
            .and_then(|b| self.event_handles.get(b))
            .map(|(_, _, s, _)| *s);
        let (Some(shared), Some(h)) = (shared, self.held_handle(process, r)) else {
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
        if let (true, Some(ev)) = (ok, r.args.event()) {
            self.procs[process].events.insert(ev, (e, Some(shared)));
        }
    }

    // --- memory handles --------------------------------------------------------

    /// Handle bytes `process` made (as `binding`) go to every process that
    /// opens them and holds none of those bytes yet.
    pub(super) fn send_to_openers(
        &mut self,
        process: usize,
        r: &Rec,
        bytes: &HandleBytes,
        binding: &str,
    ) {
        self.held
            .entry((process, *bytes))
            .or_insert_with(|| binding.to_string());
        let peers: Vec<usize> = self
            .openers
            .get(bytes)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&q| q != process && !self.held.contains_key(&(q, *bytes)))
            .collect();
        for peer in peers {
            self.held.insert((peer, *bytes), binding.to_string());
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

    /// The binding `process` holds for the handle bytes `r` opens: sent to
    /// it, or its own.
    pub(super) fn held_handle(&self, process: usize, r: &Rec) -> Option<String> {
        r.args
            .handle()
            .and_then(|b| self.held.get(&(process, *b)))
            .cloned()
    }

    pub(super) fn get_mem_handle(&mut self, process: usize, r: &Rec) {
        let ptr = r.args.ptr().unwrap_or(0);
        let Some((p, _, object, _)) = self.recorded_pointer(process, r, ptr, "exports") else {
            return;
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
        if let (true, Some(bytes)) = (ok, r.args.handle()) {
            self.made(false, process, r, bytes, &h, object);
        }
    }

    /// Handle bytes (a memory handle, or with `pool` a pool pointer's export
    /// data) `process` made as `binding`: the first maker's object is what
    /// they stand for, and each opener that holds none of them is sent
    /// this process's.
    pub(super) fn made(
        &mut self,
        pool: bool,
        process: usize,
        r: &Rec,
        bytes: &HandleBytes,
        binding: &str,
        object: Option<usize>,
    ) {
        let map = if pool {
            &mut self.pool_exports
        } else {
            &mut self.mem_handles
        };
        map.entry(*bytes).or_insert(object);
        self.send_to_openers(process, r, bytes, binding);
    }

    pub(super) fn open_mem_handle(&mut self, process: usize, r: &Rec) {
        let made = r
            .args
            .handle()
            .and_then(|b| self.mem_handles.get(b))
            .cloned();
        let (Some(made), Some(handle)) = (made, self.held_handle(process, r)) else {
            if r.result == 0 {
                self.reason(process, r, "opens a memory handle no traced process made");
            }
            return self.unlowered(process, r, "a handle no traced process made");
        };
        let flags = r.args.flags().unwrap_or(1) as u32;
        let ok = r.result == 0;
        let ptr = r.args.ptr().unwrap_or(0);
        let q = self.procs[process].fresh("q");
        let op = Op::IpcOpen {
            handle,
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
            let items = vec![Expectation::Ok, Expectation::Eq(name(&first))];
            let expect = Expect::List(ExpectList {
                text: format!("ok, == {first}").into(),
                items: items.into(),
            });
            let origin = Origin::new(process, Some(r.seq), Some(r.entry), Role::Call, None, None);
            self.step(process, Some(q), op, expect, origin);
            if let Some(g) = self.procs[process].memory.live.get_mut(&ptr) {
                g.opens += 1;
            }
            return;
        }
        self.call_step(process, r, ok.then(|| q.clone()), op);
        if ok {
            let size = made.map_or(1, |o| self.objects[o].size.max(1));
            self.add_region(
                process,
                ptr,
                size,
                &q,
                Memory::Device,
                made,
                RegionKind::Opened,
            );
        }
    }

    pub(super) fn close_mem_handle(&mut self, process: usize, r: &Rec) {
        let ptr = r.args.ptr().unwrap_or(0);
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

    // --- errors carried on past ----------------------------------------------

    /// A failing IPC call leaves an output the program must not use.
    pub(super) fn note_failure(&mut self, process: usize, r: &Rec) {
        let name = base_name(self.folder.entry(r));
        let ipc = name.starts_with("cuIpc")
            || matches!(
                name,
                "cuMemExportToShareableHandle"
                    | "cuMemImportFromShareableHandle"
                    | "cuMemPoolImportPointer"
                    | "cuMemPoolImportFromShareableHandle"
            );
        if !ipc || r.result == 0 {
            return;
        }
        let output = match name {
            "cuIpcOpenMemHandle" | "cuMemPoolImportPointer" => r.args.ptr(),
            "cuMemImportFromShareableHandle" => r.args.vmm(),
            "cuMemPoolImportFromShareableHandle" => r.args.pool(),
            "cuIpcOpenEventHandle" => r.args.event(),
            _ => None,
        };
        // Whatever it left (nothing is recorded after a failure: the tracer
        // reads no output then), the program must not use it; 0 stands for
        // a NULL or unwritten output.
        self.procs[process]
            .failed_outputs
            .push((output.unwrap_or(0), r.seq, r.entry));
        if let ("cuIpcGetMemHandle" | "cuIpcGetEventHandle", Some(h)) = (name, r.args.handle()) {
            self.failed_handles.insert(*h, (process, r.seq, r.entry));
        }
    }

    /// Whether `r` uses what an earlier failing IPC call left behind.
    pub(super) fn check_ignored(&mut self, process: usize, r: &Rec) {
        let name = base_name(self.folder.entry(r));
        if let ("cuIpcOpenMemHandle" | "cuIpcOpenEventHandle", Some(h)) = (name, r.args.handle()) {
            if let Some((gp, gseq, gentry)) = self.failed_handles.get(h).copied() {
                let gname = self.procs[gp].name.clone();
                let gcall = self.entry_name(gentry);
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
        let a = &r.args;
        let mut used: Vec<u64> = [a.ptr(), a.src(), a.event(), a.vmm(), a.pool()]
            .into_iter()
            .flatten()
            .collect();
        used.extend(a.pointer_args().into_iter().flatten());
        let failed = std::mem::take(&mut self.procs[process].failed_outputs);
        let mut kept = Vec::new();
        // A NULL pointer used by a call that reaches memory through it.
        let dereferences = name.starts_with("cuMemcpy")
            || name.starts_with("cuMemset")
            || name.starts_with("cuLaunch")
            || name == "cuIpcCloseMemHandle";
        let null_used = dereferences
            && (a.ptr() == Some(0)
                || a.src() == Some(0)
                || a.pointer_args().is_some_and(|p| p.contains(&0)));
        for (output, seq, entry) in failed {
            let hit = if output == 0 {
                null_used
            } else {
                used.contains(&output)
            };
            if hit {
                let call = self.entry_name(entry);
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
}
