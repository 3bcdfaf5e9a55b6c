//! Allocations, frees, host registration, copies, sets and kernels. Each
//! copy, set and kernel is modelled by its row of the synchronisation table
//! (`sync_rules.rs`): a host-to-device copy that returns before its bytes
//! land is a `write` (pending on the device until the writer
//! synchronises), a completed device-to-host copy a `read`, queued work an
//! asynchronous `copy` (or fill) on its stream, and a kernel an
//! asynchronous copy of each buffer it was handed onto itself (it may read
//! and write it).

use super::state::{Lowering, RegionKind, Role, MAX_HOST_SPAN, MAX_MODELLED_SPAN};
use crate::trace_check::load::{Kind, Rec};
use crate::trace_check::sync_rules::{self, Memory, Returns, SyncRule};
use ipc_harness::scenario::{BytePattern, Op, PatternItem, Ref};
use ipc_harness::{FreeKind, MemKind};
use std::collections::HashSet;

/// The memory kind the driver reported for a copy's side, as the table
/// names them.
fn reported(kind: Option<Kind>) -> Option<Memory> {
    Some(match kind? {
        Kind::Device => Memory::Device,
        Kind::Host => Memory::Pinned,
        Kind::Managed => Memory::Managed,
        Kind::Pageable => Memory::Pageable,
        Kind::Array => return None,
    })
}

impl Lowering<'_> {
    pub(super) fn alloc(&mut self, process: usize, r: &Rec, name: &str) {
        let size = r.args.size().unwrap_or(0);
        let (kind, memory) = match name {
            "cuMemAlloc" | "cuMemAllocPitch" => (MemKind::Device, Memory::Device),
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
        if let (true, Some(ptr)) = (ok, r.args.ptr()) {
            let object = self.new_object(&b, size);
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

    pub(super) fn free(&mut self, process: usize, r: &Rec, name: &str) {
        let ptr = r.args.ptr().unwrap_or(0);
        let kind = self.procs[process]
            .memory
            .holding(ptr)
            .and_then(|(b, live)| self.procs[process].memory.get(b, live))
            .map(|g| g.kind);
        let Some((p, _, _, _)) = self.recorded_pointer(process, r, ptr, "frees") else {
            return;
        };
        let op = match (name, kind) {
            ("cuMemFreeAsync", Some(k)) if k.pool_owned() => Op::PoolFree { ptr: p },
            ("cuMemFree", _) => Op::Free {
                kind: FreeKind::Device,
                ptr: p,
            },
            ("cuMemFreeHost", _) => Op::Free {
                kind: FreeKind::Host,
                ptr: p,
            },
            _ => Op::Free {
                kind: FreeKind::StreamOrdered,
                ptr: p,
            },
        };
        self.call_step(process, r, None, op);
        if name == "cuMemFree" && r.result == 0 {
            // cudaFree waits for the device's work.
            self.host_synced(process, r);
        }
        if r.result == 0 && self.procs[process].memory.live.contains_key(&ptr) {
            self.procs[process].memory.kill(ptr);
        }
    }

    /// `cuMemHostRegister`: page-locked host memory, for the copies'
    /// synchronisation; the replay needs no step for it.
    pub(super) fn register(&mut self, process: usize, r: &Rec, name: &str) {
        let ptr = r.args.ptr().unwrap_or(0);
        if r.result == 0 {
            if name == "cuMemHostRegister" {
                let size = r.args.size().unwrap_or(0);
                self.add_region(
                    process,
                    ptr,
                    size,
                    "",
                    Memory::Pinned,
                    None,
                    RegionKind::Registered,
                );
            } else {
                self.procs[process].memory.live.remove(&ptr);
            }
        }
        self.unlowered(
            process,
            r,
            "host memory registration (it decides copies' synchronisation)",
        );
    }

    /// The memory kind of one side of a copy: what the driver reported,
    /// else what the direction the call names and the trace's own regions
    /// say.
    fn side(
        &self,
        process: usize,
        ptr: u64,
        kind: Option<Kind>,
        device_side: Option<bool>,
    ) -> Memory {
        let known = reported(kind).unwrap_or_else(|| self.memory_of(process, ptr));
        // The direction an entry point names decides which side is the
        // device's; the reported kind then tells pinned from pageable
        // host memory, and device from managed memory.
        match device_side {
            Some(true) if matches!(known, Memory::Pageable | Memory::Pinned) => Memory::Device,
            Some(false) if matches!(known, Memory::Device | Memory::Managed) => {
                match self.memory_of(process, ptr) {
                    Memory::Pinned => Memory::Pinned,
                    _ => Memory::Pageable,
                }
            }
            _ => known,
        }
    }

    pub(super) fn copy(&mut self, process: usize, r: &Rec, name: &str) {
        let a = &r.args;
        let (dst, src) = (a.ptr().unwrap_or(0), a.src().unwrap_or(0));
        let size = a.size().unwrap_or(0);
        // The direction a call names holds whatever the trace saw.
        let (src_dev, dst_dev) = if name.contains("HtoD") {
            (Some(false), Some(true))
        } else if name.contains("DtoH") {
            (Some(true), Some(false))
        } else if name.contains("DtoD") || name.contains("Peer") {
            (Some(true), Some(true))
        } else {
            (None, None)
        };
        let src_mem = self.side(process, src, a.src_kind(), src_dev);
        let dst_mem = self.side(process, dst, a.dst_kind(), dst_dev);
        // Peer and 2D/3D copies follow the plain copies' rows.
        let row_name = if name.ends_with("Async") {
            "cuMemcpyAsync"
        } else {
            "cuMemcpy"
        };
        let rule = sync_rules::copy_rule(row_name, src_mem, dst_mem);
        let Some(rule) = rule else {
            return self.unlowered(process, r, "not a copy");
        };
        if r.result != 0 || size == 0 {
            return self.unlowered(process, r, "a failed or empty copy moves nothing");
        }
        if rule.id == sync_rules::HTOH.id {
            return self.unlowered(process, r, "a copy between host memories");
        }
        let host = |m: Memory| matches!(m, Memory::Pageable | Memory::Pinned);
        let device = |m: Memory| matches!(m, Memory::Device | Memory::Managed);
        let src_ref = (!matches!(src_mem, Memory::Pageable))
            .then(|| self.pointer(process, r, src))
            .flatten();
        let dst_ref = (!matches!(dst_mem, Memory::Pageable))
            .then(|| self.pointer(process, r, dst))
            .flatten();
        if (device(src_mem) && src_ref.is_none()) || (device(dst_mem) && dst_ref.is_none()) {
            self.reason(
                process,
                r,
                "copies device memory no recorded call allocated",
            );
            return self.unlowered(process, r, "device memory the trace did not see allocated");
        }
        let stream = self.stream(process, r);
        let span = |remaining: u64| size.min(remaining).min(MAX_HOST_SPAN);
        // Where the device side starts at the end of what the trace saw
        // (a null pointer, an address one past an allocation), nothing of
        // the copy lands in memory the replay holds.
        let device_rem = |x: &Option<(Ref, Memory, Option<usize>, u64)>| x.as_ref().map(|t| t.3);
        if device_rem(&src_ref) == Some(0) || device_rem(&dst_ref) == Some(0) {
            return self.unlowered(process, r, "no byte of it lands in memory the trace saw");
        }
        match (&src_ref, &dst_ref) {
            // To device memory from host memory.
            (_, Some((d, _, object, rem))) if host(src_mem) => {
                let (d, object, len) = (d.clone(), *object, span(*rem));
                if rule.returns == Returns::Queued {
                    // Pinned host memory: the bytes land when the stream
                    // gets there.
                    self.async_write(process, r, d, len, object, rule, stream);
                } else {
                    self.write_model(process, r, d, len, object, rule);
                }
            }
            // From device memory to host memory.
            (Some((s, _, object, rem)), _) if host(dst_mem) => {
                let (s, object, len) = (s.clone(), *object, span(*rem));
                // A copy on a stream runs after the work queued there
                // before it, and the host reads once it is done: the
                // stream's earlier work is ordered before the read.
                if let Some(stream) = stream {
                    self.model_step(
                        process,
                        Some(r),
                        None,
                        Op::StreamSync { stream },
                        Role::Model,
                        Some(rule.id),
                        None,
                    );
                }
                self.read_model(process, r, s, len, object, rule);
            }
            // Between device memories (or with managed memory).
            (Some((s, _, so, srem)), Some((d, _, dobj, drem))) => {
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
                self.completed(process, r, rule);
            }
            _ => self.unlowered(process, r, "a copy the replay cannot model"),
        }
    }

    /// Before a write to `object` that another process wrote last: the
    /// bytes are read first, on the write's stream, so that the simulator
    /// judges the two writes' order as it judges a read's (two writes not
    /// ordered leave either process's bytes).
    #[allow(clippy::too_many_arguments)]
    fn write_after_write(
        &mut self,
        process: usize,
        r: &Rec,
        d: &Ref,
        len: u64,
        object: Option<usize>,
        stream: Option<String>,
        rule: SyncRule,
    ) {
        let Some(o) = object else {
            return;
        };
        if self.objects[o]
            .last_write
            .is_none_or(|w| w.process == process)
        {
            return;
        }
        self.model_step(
            process,
            Some(r),
            None,
            Op::Copy {
                dst: d.clone(),
                src: d.clone(),
                len,
                stream,
            },
            Role::Model,
            Some(rule.id),
            Some((o, false)),
        );
    }

    /// A call the table says returns once its work is done: the
    /// process's work is then complete (a `sync`, the nearest step).
    fn completed(&mut self, process: usize, r: &Rec, rule: SyncRule) {
        if rule.returns != Returns::Completed {
            return;
        }
        self.model_step(
            process,
            Some(r),
            None,
            Op::Sync,
            Role::Model,
            Some(rule.id),
            None,
        );
        self.host_synced(process, r);
    }

    /// A host-to-device copy that returns before (staged) or after
    /// (completed) its bytes land: a `write`, then for a completed one a
    /// `sync` (the simulator has no synchronous write).
    fn write_model(
        &mut self,
        process: usize,
        r: &Rec,
        d: Ref,
        len: u64,
        object: Option<usize>,
        rule: SyncRule,
    ) {
        self.write_after_write(process, r, &d, len, object, None, rule);
        if let Some(o) = object {
            self.accessed(process, r, o, true);
        }
        self.model_step(
            process,
            Some(r),
            None,
            Op::Write {
                ptr: d,
                offset: 0,
                pattern: BytePattern {
                    items: vec![PatternItem::Run(0, len)],
                },
            },
            Role::Model,
            Some(rule.id),
            object.map(|o| (o, true)),
        );
        self.completed(process, r, rule);
    }

    /// A write that lands when its stream gets there: a fill on the stream.
    #[allow(clippy::too_many_arguments)]
    fn async_write(
        &mut self,
        process: usize,
        r: &Rec,
        d: Ref,
        len: u64,
        object: Option<usize>,
        rule: SyncRule,
        stream: Option<String>,
    ) {
        self.write_after_write(process, r, &d, len, object, stream.clone(), rule);
        if let Some(o) = object {
            self.accessed(process, r, o, true);
        }
        self.model_step(
            process,
            Some(r),
            None,
            Op::SlowFill {
                ptr: d,
                value: 0,
                micros: 0,
                at: None,
                len: Some(len),
                resolved_len: len,
                stream,
            },
            Role::Model,
            Some(rule.id),
            object.map(|o| (o, true)),
        );
    }

    /// A device-to-host copy: a `read` (the language's reads are
    /// synchronous; a queued one is read when it is made, which can only
    /// order it earlier than the device would).
    fn read_model(
        &mut self,
        process: usize,
        r: &Rec,
        s: Ref,
        len: u64,
        object: Option<usize>,
        rule: SyncRule,
    ) {
        if let Some(o) = object {
            self.accessed(process, r, o, false);
        }
        self.model_step(
            process,
            Some(r),
            None,
            Op::Read {
                ptr: s,
                offset: 0,
                len,
            },
            Role::Model,
            Some(rule.id),
            object.map(|o| (o, false)),
        );
        self.host_synced(process, r);
    }

    pub(super) fn cu_memset(&mut self, process: usize, r: &Rec, name: &str) {
        let (ptr, size) = (r.args.ptr().unwrap_or(0), r.args.size().unwrap_or(0));
        if r.result != 0 || size == 0 {
            return self.unlowered(process, r, "a failed or empty set changes nothing");
        }
        let Some((p, memory, object, rem)) = self.pointer(process, r, ptr) else {
            self.reason(process, r, "sets memory no recorded call allocated");
            return self.unlowered(process, r, "memory the trace did not see allocated");
        };
        let memory = reported(r.args.dst_kind()).unwrap_or(memory);
        let base = name.replace("D2D", "D");
        let Some(rule) = sync_rules::memset_rule(&base, memory) else {
            return self.unlowered(process, r, "not a set");
        };
        if rem == 0 {
            return self.unlowered(process, r, "no byte of it lands in memory the trace saw");
        }
        let len = size.min(rem).min(MAX_MODELLED_SPAN);
        let value = (r.args.value().unwrap_or(0) & 0xff) as u8;
        let stream = self.stream(process, r);
        self.write_after_write(process, r, &p, len, object, stream.clone(), rule);
        if let Some(o) = object {
            self.accessed(process, r, o, true);
        }
        let op = match stream {
            None => Op::Fill {
                ptr: p,
                value,
                at: None,
                len: Some(len),
                resolved_len: len,
            },
            Some(_) => Op::SlowFill {
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
        self.completed(process, r, rule);
    }

    pub(super) fn kernel(&mut self, process: usize, r: &Rec) {
        let Some(args) = r.args.pointer_args().map(<[u64]>::to_vec) else {
            self.opaque += 1;
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
        let mut seen = HashSet::new();
        for ptr in args {
            let Some((p, memory, object, rem)) = self.pointer(process, r, ptr) else {
                continue;
            };
            if memory == Memory::Pageable
                || p == Ref::Null
                || !seen.insert(object.map_or(ptr, |o| o as u64))
            {
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
}
