//! The virtual memory management calls: allocations and their shareable
//! descriptors, reservations, mappings and access; and the replay's VMM
//! rules (a second release of what a process released, resources held at
//! a normal exit).

use super::state::{name, Lowering, RegionKind};
use crate::trace_check::load::Rec;
use crate::trace_check::model::FindingClass;
use crate::trace_check::sync_rules::Memory;
use ipc_harness::scenario::{Op, Ref};
use ipc_harness::{HandleTypes, ShareableHandleType};

impl Lowering<'_> {
    pub(super) fn cu_mem_create(&mut self, process: usize, r: &Rec) {
        let ok = r.result == 0;
        // A failure whose properties the trace lacks (tracers before 0.1.1
        // read them only after success) changed nothing: no step to guess.
        if !ok && r.args.handle_type().is_none() {
            return self.unlowered(
                process,
                r,
                "a failed call whose properties were not recorded",
            );
        }
        let m = self.procs[process].fresh("m");
        let size = r.args.size().unwrap_or(0);
        let op = Op::VmmCreate {
            size,
            types: HandleTypes(r.args.handle_type().unwrap_or(0) as u32),
            device: r.args.device().unwrap_or(0),
        };
        self.call_step(process, r, ok.then(|| m.clone()), op);
        if let (true, Some(v)) = (ok, r.args.vmm()) {
            let object = self.new_object(&m, size);
            let p = &mut self.procs[process];
            p.released_vmm.remove(&v);
            p.vmm.insert(v, (m, Some(object)));
        }
    }

    /// A descriptor exported as `f` in `process`: followed from here on,
    /// passed to importers found by order when the trace has no host
    /// records.
    pub(super) fn exported_fd(
        &mut self,
        process: usize,
        index: usize,
        r: &Rec,
        f: &str,
        object: Option<usize>,
    ) {
        self.fd_objects.insert(f.to_string(), object);
        if let Some(fd) = r.args.fd() {
            self.procs[process].fds.insert(
                fd,
                super::state::FdObject {
                    binding: f.to_string(),
                },
            );
        }
        self.exported_object.insert((process, index), object);
        for (q, qcall) in self
            .importers
            .get(&(process, index))
            .cloned()
            .unwrap_or_default()
        {
            let received = self.send_descriptor(process, q, f, Some(r), None);
            self.received_fd.insert((q, qcall), received);
        }
    }

    /// The binding an import's descriptor has in `process`: followed
    /// through host records, or paired by order.
    pub(super) fn imported_fd(&mut self, process: usize, index: usize, r: &Rec) -> Option<String> {
        if let Some(b) = self.received_fd.get(&(process, index)) {
            return Some(b.clone());
        }
        let fd = r.args.fd()?;
        self.procs[process].fds.get(&fd).map(|f| f.binding.clone())
    }

    pub(super) fn cu_mem_export(&mut self, process: usize, index: usize, r: &Rec) {
        let Some((m, object)) = self.procs[process]
            .vmm
            .get(&r.args.vmm().unwrap_or(0))
            .cloned()
        else {
            if r.result == 0 {
                self.reason(process, r, "exports a VMM handle no recorded call made");
            }
            return self.unlowered(process, r, "a VMM handle the trace did not see made");
        };
        let ty = if r.args.handle_type() == Some(1) {
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
        if ok && ty == ShareableHandleType::PosixFd {
            self.exported_fd(process, index, r, &f, object);
        }
    }

    /// The binding of the descriptor an import (VMM or pool) takes, or
    /// why the replay cannot carry it (the call is then not replayed).
    pub(super) fn imported_descriptor(
        &mut self,
        process: usize,
        index: usize,
        r: &Rec,
    ) -> Option<String> {
        if r.args.handle_type() != Some(1) {
            if r.result == 0 {
                self.reason(
                    process,
                    r,
                    "imports a shareable handle other than a POSIX descriptor, which the replay does not carry",
                );
            }
            self.unlowered(process, r, "a shareable handle the replay does not carry");
            return None;
        }
        let fd = self.imported_fd(process, index, r);
        if fd.is_none() {
            if r.result == 0 {
                self.reason(
                    process,
                    r,
                    "imports a descriptor whose way from an export the trace does not show",
                );
            }
            self.unlowered(process, r, "a descriptor no recorded export gave");
        }
        fd
    }

    pub(super) fn vmm_import(&mut self, process: usize, index: usize, r: &Rec) {
        let Some(fd) = self.imported_descriptor(process, index, r) else {
            return;
        };
        let object = self.fd_objects.get(&fd).copied().flatten();
        let ok = r.result == 0;
        let m = self.procs[process].fresh("m");
        self.call_step(process, r, ok.then(|| m.clone()), Op::VmmImport { fd });
        if let (true, Some(v)) = (ok, r.args.vmm()) {
            let p = &mut self.procs[process];
            p.released_vmm.remove(&v);
            p.vmm.insert(v, (m, object));
        }
    }

    pub(super) fn vmm_reserve(&mut self, process: usize, r: &Rec) {
        let ok = r.result == 0;
        let v = self.procs[process].fresh("v");
        let size = r.args.size().unwrap_or(0);
        self.call_step(process, r, ok.then(|| v.clone()), Op::VmmReserve { size });
        if let (true, Some(va)) = (ok, r.args.ptr()) {
            let p = &mut self.procs[process];
            p.reserved_dead.remove(&va);
            p.reserved.insert(va, (size, v));
        }
    }

    pub(super) fn vmm_map(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr().unwrap_or(0), r.args.size().unwrap_or(0));
        let Some((m, object)) = self.procs[process]
            .vmm
            .get(&r.args.vmm().unwrap_or(0))
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
                offset: r.args.offset().unwrap_or(0),
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

    pub(super) fn vmm_set_access(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr().unwrap_or(0), r.args.size().unwrap_or(0));
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
        self.access_steps(process, r, |access, device| Op::VmmSetAccess {
            va: va.clone(),
            size,
            access,
            device,
        });
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

    pub(super) fn cu_mem_unmap(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr().unwrap_or(0), r.args.size().unwrap_or(0));
        let end = ptr.saturating_add(size.max(1));
        // One unmap covers every mapping inside its range (the range must
        // cover whole mappings: cuMemUnmap).
        let covered: Vec<u64> = self.procs[process]
            .memory
            .live
            .range(ptr..end)
            .filter(|(_, g)| g.kind == RegionKind::Mapped)
            .map(|(b, _)| *b)
            .collect();
        if covered.is_empty()
            && self.procs[process]
                .memory
                .dead
                .get(&ptr)
                .is_some_and(|g| g.kind == RegionKind::Mapped)
        {
            self.released_twice(process, r, "double-unmap", format!("unmaps {ptr:#x}"));
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

    pub(super) fn vmm_address_free(&mut self, process: usize, r: &Rec) {
        let (ptr, size) = (r.args.ptr().unwrap_or(0), r.args.size().unwrap_or(0));
        let held = self.procs[process].reserved.contains_key(&ptr);
        if !held && self.procs[process].reserved_dead.contains(&ptr) {
            self.released_twice(
                process,
                r,
                "double-address-free",
                format!("frees the reservation at {ptr:#x}"),
            );
        }
        let va: Ref = match self.procs[process].reserved.get(&ptr) {
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

    pub(super) fn vmm_release(&mut self, process: usize, r: &Rec) {
        let h = r.args.vmm().unwrap_or(0);
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

    /// VMM handles, mappings and reservations a process still holds at a
    /// normal exit: nothing releases them but the process's teardown (the
    /// VMM counterpart of `mapping-leaked-at-exit`).
    pub(super) fn vmm_leaks(&mut self, process: usize) {
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
}
