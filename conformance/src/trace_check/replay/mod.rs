//! The replay: the merged history of every process lowered to a scenario
//! (docs/scenario-language.md) whose steps are the recorded calls, each
//! expecting the answer the driver gave. The simulator runs it
//! (`judge.rs`); its hazard log and its answers decide the findings.
//!
//! What a scenario cannot say is modelled, from the synchronisation table
//! (`sync_rules.rs`): a kernel becomes an asynchronous copy of each buffer
//! it was handed onto itself (it may read and write it), an asynchronous
//! memset a fill on its stream, a stream the trace did not see made a
//! stream made at its first use. Handles travel with `send` from the
//! process that made them to each process that opened them; descriptors
//! travel with `send_fd` (and `pidfd_getfd`) as the trace's host records
//! show them passed (`host.rs`), or, in traces without host records, in the
//! order they were exported.
//!
//! The replay also keeps the few rules that need the trace's own facts:
//! releases made twice and VMM resources held at a normal exit (judged by
//! the driver's answers), errors carried on past, calls it cannot model,
//! and what orders two processes' accesses to shared memory: an
//! interprocess event or a recorded host synchronisation, or only the clock
//! (a note: ordered by host synchronization the tracer cannot see).
//!
//! One file per area: `ipc.rs` (contexts, events, legacy IPC), `memory.rs`
//! (allocations, copies, sets, kernels), `vmm.rs`, `pools.rs`, `host.rs`
//! (host records); `state.rs` holds what they share.

mod host;
mod ipc;
mod memory;
mod pools;
mod state;
mod vmm;

pub use state::{Line, Origin, Replay, Role};

use super::load::{escaped, Folder, MergedEntry, Rec};
use ipc_harness::scenario::{Expect, Metadata, Op, Scenario};
use ipc_harness::trace_record::base_name;
use ipc_harness::ProcessSpec;
use state::{Lowering, MAX_DEVICES};

/// Most steps a replay holds: twice the calls `check` reads at most (a
/// kernel over several buffers makes a step for each).
pub const MAX_STEPS: usize = 2 * crate::limits::MAX_TRACE_CALLS;
use std::collections::HashMap;
use std::path::PathBuf;

/// Lower the folder's merged history; `title_dir` names the folder in
/// the replay's title.
pub fn lower(folder: &Folder, merged: &[MergedEntry], title_dir: &str) -> Replay {
    let mut st = Lowering::new(folder);
    let start_devices = st.look_ahead(merged);
    let records = folder.processes.iter().any(|p| !p.host.is_empty());
    if records {
        st.look_ahead_host(merged);
    } else {
        st.pair_by_order(merged);
    }
    for entry in merged {
        match *entry {
            MergedEntry::Call { process, call } => {
                st.begin(process);
                st.call(process, call, &folder.processes[process].calls[call])
            }
            MergedEntry::Host { process, index } => {
                st.begin(process);
                st.host(process, &folder.processes[process].host[index])
            }
            MergedEntry::End { process } => st.end(process),
        }
    }
    st.finish(start_devices, title_dir)
}

impl<'f> Lowering<'f> {
    /// Which process opens which handle, which context is which device's
    /// primary one, and which device each process starts on.
    fn look_ahead(&mut self, merged: &[MergedEntry]) -> Vec<u32> {
        let folder = self.folder;
        let mut start: Vec<Option<u32>> = vec![None; folder.processes.len()];
        for entry in merged {
            let MergedEntry::Call { process, call } = *entry else {
                continue;
            };
            let r = self.rec(process, call);
            let a = &r.args;
            match base_name(folder.entry(r)) {
                name @ ("cuCtxCreate" | "cuDevicePrimaryCtxRetain") if r.result == 0 => {
                    let device = a.device().filter(|&d| d < MAX_DEVICES);
                    if start[process].is_none() {
                        start[process] = device;
                    }
                    if let (true, Some(ctx), Some(d)) =
                        (name == "cuDevicePrimaryCtxRetain", a.ctx(), device)
                    {
                        self.primary_of.entry((process, ctx)).or_insert(d);
                    }
                }
                // A failed open is replayed too, with the bytes it was given.
                "cuIpcOpenMemHandle" | "cuIpcOpenEventHandle" | "cuMemPoolImportPointer" => {
                    if let Some(h) = a.handle() {
                        self.openers.entry(*h).or_default().insert(process);
                    }
                }
                _ => {}
            }
        }
        // A parent's wait whose status says a signal ended the child.
        for p in &folder.processes {
            for h in p.host.iter().filter(|h| h.op == "wait") {
                let signalled = h
                    .args
                    .status
                    .is_some_and(|s| s & 0x7f != 0 && s & 0x7f != 0x7f);
                if let (true, Some(pid)) = (signalled, h.args.pid) {
                    for (i, q) in folder.processes.iter().enumerate() {
                        if q.pid == pid && q.exit_ns.is_none() {
                            self.killed[i] = true;
                        }
                    }
                }
            }
        }
        start.into_iter().map(|d| d.unwrap_or(0)).collect()
    }

    /// Tracer 0.1.0 wrote no host records: each process's descriptor
    /// imports are paired with exports by other processes made before them,
    /// in the order they were made (a socket delivers descriptors in the
    /// order they were sent).
    fn pair_by_order(&mut self, merged: &[MergedEntry]) {
        let folder = self.folder;
        let mut exports: Vec<(usize, usize)> = Vec::new();
        let mut cursor: HashMap<usize, usize> = HashMap::new();
        let mut paired = false;
        for entry in merged {
            let MergedEntry::Call { process, call } = *entry else {
                continue;
            };
            let r = self.rec(process, call);
            if r.result != 0 || r.args.handle_type() != Some(1) {
                continue;
            }
            match base_name(folder.entry(r)) {
                "cuMemExportToShareableHandle" | "cuMemPoolExportToShareableHandle" => {
                    exports.push((process, call));
                }
                "cuMemImportFromShareableHandle" | "cuMemPoolImportFromShareableHandle" => {
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
                        paired = true;
                    }
                }
                _ => {}
            }
        }
        if paired {
            self.notes.push(
                "descriptor imports are paired with exports in the order they were made: this \
                 trace holds no records of descriptors passed between processes"
                    .to_string(),
            );
        }
    }

    /// A process's first record: what started it happens before it.
    fn begin(&mut self, process: usize) {
        if std::mem::replace(&mut self.started[process], true) {
            return;
        }
        if let Some(clock) = self.start_clock.remove(&process) {
            self.procs[process].merge(&clock);
        }
    }

    fn call(&mut self, process: usize, index: usize, r: &Rec) {
        if self.steps.len() >= MAX_STEPS {
            if !self.reasons.contains_key("too long") {
                self.reasons.insert(
                    "too long".into(),
                    (
                        format!(
                            "the replay reached {MAX_STEPS} steps (kernels over many buffers \
                             make several each), the most `check` runs; the calls after are not judged"
                        ),
                        1,
                    ),
                );
            }
            return;
        }
        if self.procs[process].exited {
            // Calls after the exit record (runtime teardown) change nothing shared.
            return;
        }
        self.check_ignored(process, r);
        self.note_failure(process, r);
        if let Some(d) = r.args.device() {
            if d < MAX_DEVICES {
                self.devices = self.devices.max(d + 1);
            } else if r.result == 0 {
                self.reason(process, r, "names a device ordinal out of range");
            }
        }
        if self.captured(process, r) {
            return self.unlowered(process, r, "captured into a graph, not run now");
        }
        let name = base_name(self.folder.entry(r));
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
            "cuStreamCreate" | "cuStreamCreateWithPriority" => self.stream_create(process, r),
            "cuStreamDestroy" | "cuStreamSynchronize" | "cuStreamQuery" => {
                self.stream_use(process, r, name)
            }
            "cuStreamBeginCapture" | "cuStreamBeginCaptureToGraph" | "cuStreamEndCapture" => {
                self.capture(process, r, name)
            }
            "cuMemAlloc" | "cuMemAllocManaged" | "cuMemAllocHost" | "cuMemHostAlloc"
            | "cuMemAllocAsync" | "cuMemAllocPitch" => self.alloc(process, r, name),
            "cuMemFree" | "cuMemFreeHost" | "cuMemFreeAsync" => self.free(process, r, name),
            "cuMemHostRegister" | "cuMemHostUnregister" => self.register(process, r, name),
            "cuIpcGetMemHandle" => self.get_mem_handle(process, r),
            "cuIpcOpenMemHandle" => self.open_mem_handle(process, r),
            "cuIpcCloseMemHandle" => self.close_mem_handle(process, r),
            "cuEventCreate" => self.cu_event_create(process, r),
            "cuEventRecord"
            | "cuEventRecordWithFlags"
            | "cuEventQuery"
            | "cuEventSynchronize"
            | "cuStreamWaitEvent"
            | "cuEventDestroy" => self.event_use(process, r, name),
            "cuEventElapsedTime" => self.cu_event_elapsed_time(process, r),
            "cuIpcGetEventHandle" => self.get_event_handle(process, r),
            "cuIpcOpenEventHandle" => self.open_event_handle(process, r),
            "cuMemCreate" => self.cu_mem_create(process, r),
            "cuMemExportToShareableHandle" => self.cu_mem_export(process, index, r),
            "cuMemImportFromShareableHandle" => self.vmm_import(process, index, r),
            "cuMemAddressReserve" => self.vmm_reserve(process, r),
            "cuMemMap" => self.vmm_map(process, r),
            "cuMemSetAccess" => self.vmm_set_access(process, r),
            "cuMemUnmap" => self.cu_mem_unmap(process, r),
            "cuMemAddressFree" => self.vmm_address_free(process, r),
            "cuMemRelease" => self.vmm_release(process, r),
            "cuMemPoolCreate" | "cuDeviceGetDefaultMemPool" | "cuDeviceGetMemPool" => {
                self.pool_make(process, r, name)
            }
            "cuMemPoolDestroy" => self.pool_destroy(process, r),
            "cuMemPoolSetAccess" => self.pool_set_access(process, r),
            "cuMemPoolExportToShareableHandle" => self.cu_mem_pool_export(process, index, r),
            "cuMemPoolImportFromShareableHandle" => self.cu_mem_pool_import(process, index, r),
            "cuMemAllocFromPoolAsync" => self.pool_alloc(process, r),
            "cuMemPoolExportPointer" => self.pool_export_pointer(process, r),
            "cuMemPoolImportPointer" => self.pool_import_pointer(process, r),
            "cuMemcpy"
            | "cuMemcpyHtoD"
            | "cuMemcpyDtoH"
            | "cuMemcpyDtoD"
            | "cuMemcpyAsync"
            | "cuMemcpyHtoDAsync"
            | "cuMemcpyDtoHAsync"
            | "cuMemcpyDtoDAsync"
            | "cuMemcpyPeer"
            | "cuMemcpyPeerAsync"
            | "cuMemcpy2D"
            | "cuMemcpy2DAsync"
            | "cuMemcpy2DUnaligned"
            | "cuMemcpy3D"
            | "cuMemcpy3DAsync"
            | "cuMemcpy3DPeer"
            | "cuMemcpy3DPeerAsync" => self.copy(process, r, name),
            "cuMemsetD8" | "cuMemsetD16" | "cuMemsetD32" | "cuMemsetD8Async"
            | "cuMemsetD16Async" | "cuMemsetD32Async" | "cuMemsetD2D8" | "cuMemsetD2D16"
            | "cuMemsetD2D32" | "cuMemsetD2D8Async" | "cuMemsetD2D16Async"
            | "cuMemsetD2D32Async" => self.cu_memset(process, r, name),
            "cuLaunchKernel" | "cuLaunchKernelEx" | "cuLaunchCooperativeKernel" => {
                self.kernel(process, r)
            }
            _ => self.other(process, r, name),
        }
    }

    /// Calls the replay has no step for: harmless ones are comments;
    /// device work it cannot see into is counted; calls that share or
    /// order memory in ways the simulator cannot follow keep the trace from
    /// being judged whole.
    fn other(&mut self, process: usize, r: &Rec, name: &str) {
        let unmodelled = match name {
            "cuMemRetainAllocationHandle" | "cuMemGetHandleForAddressRange" => {
                Some("shares memory in a way the simulator has no step for")
            }
            "cuImportExternalMemory"
            | "cuExternalMemoryGetMappedBuffer"
            | "cuImportExternalSemaphore"
            | "cuSignalExternalSemaphoresAsync"
            | "cuWaitExternalSemaphoresAsync" => {
                Some("uses external memory or semaphores, which the simulator does not model")
            }
            "cuMulticastCreate"
            | "cuMulticastAddDevice"
            | "cuMulticastBindMem"
            | "cuMulticastBindAddr"
            | "cuMulticastUnbind" => {
                Some("uses multicast objects, which the simulator does not model")
            }
            "cuStreamWaitValue32"
            | "cuStreamWaitValue64"
            | "cuStreamWriteValue32"
            | "cuStreamWriteValue64"
            | "cuStreamBatchMemOp" => {
                Some("orders device work through memory values, which the simulator cannot follow")
            }
            "cuDevicePrimaryCtxReset" => {
                Some("resets a primary context, which the replay has no step for")
            }
            _ => None,
        };
        let opaque = matches!(
            name,
            "cuGraphLaunch"
                | "cuLaunchCooperativeKernelMultiDevice"
                | "cuLaunch"
                | "cuLaunchGrid"
                | "cuLaunchGridAsync"
                | "cuMemcpyBatchAsync"
                | "cuMemcpy3DBatchAsync"
                | "cuMemBatchDecompressAsync"
                | "cuMemMapArrayAsync"
                | "cuMemcpyDtoA"
                | "cuMemcpyAtoD"
        );
        match (unmodelled, r.result) {
            (Some(what), 0) => {
                self.reason(process, r, what);
                self.unlowered(process, r, what);
            }
            _ if opaque && r.result == 0 => {
                self.opaque += 1;
                self.unlowered(
                    process,
                    r,
                    "device work over memory the trace does not show",
                );
            }
            _ => self.unlowered(
                process,
                r,
                "no step for it (it changes nothing the replay judges)",
            ),
        }
    }

    fn end(&mut self, process: usize) {
        if self.procs[process].exited {
            return;
        }
        self.procs[process].exited = true;
        let clock = self.procs[process].clock(process);
        self.final_clock.insert(process, clock);
        if self.folder.processes[process].exit_ns.is_none() {
            // `_exit`, an `exec`, a crash or a signal: the process ends all
            // the same, and the teardown releases what it held.
            let how = if self.killed[process] {
                "a signal ended it (its parent's wait says so)"
            } else {
                "_exit, exec, a crash or a signal"
            };
            self.comment(process, format!("ends without an exit record: {how}"));
        }
        if !self.killed[process] {
            self.vmm_leaks(process);
        }
        let origin = Origin::new(process, None, None, Role::Harness, None, None);
        self.step(process, None, Op::Exit, Expect::Default, origin);
    }

    fn finish(mut self, start_devices: Vec<u32>, title_dir: &str) -> Replay {
        for p in 0..self.procs.len() {
            self.end(p);
        }
        let looked_up: Vec<(usize, &String)> = self
            .folder
            .processes
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.lookups.iter().map(move |l| (i, l)))
            .collect();
        if let Some((i, first)) = looked_up.first() {
            let p = &self.folder.processes[*i];
            self.reasons.insert(
                "lookup".into(),
                (
                    format!(
                        "p{} (pid {}) looked up {} (and {} more), driver entry points this \
                         tracer does not record: calls through them are not in the trace",
                        i + 1,
                        p.pid,
                        escaped(first),
                        looked_up.len() - 1
                    ),
                    1,
                ),
            );
        }
        if self.procs.len() > ipc_harness::scenario::limits::MAX_PROCESSES {
            self.notes.push(format!(
                "replay.ipc declares {} processes, more than the {} a scenario file may: \
                 `check` runs it, `ipc-conformance scenario` does not",
                self.procs.len(),
                ipc_harness::scenario::limits::MAX_PROCESSES
            ));
        }
        if self.opaque > 0 {
            self.notes.push(format!(
                "{} call(s) did device work over memory the trace does not show (graphs, \
                 batches, kernels without parameter information): not judged for races",
                self.opaque
            ));
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
                        format!(
                            "the IPC pattern of the program traced in {}",
                            escaped(title_dir)
                        ),
                    ),
                    ("kind".into(), "measured".into()),
                    (
                        "source".into(),
                        "ipc-conformance check (each step is a recorded call, expecting the \
                         driver's answer)"
                            .into(),
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
            killed: self.killed,
            findings_left_out: self.findings_left_out,
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
