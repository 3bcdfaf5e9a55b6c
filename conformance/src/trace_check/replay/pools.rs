//! Memory pools: pools made, exported as descriptors and imported,
//! allocations from them, and pool pointers exported to other processes.
//! The language's `pool_alloc` and `pool_free` run on the default stream
//! and synchronise it, so a replayed pool allocation or free is ordered at
//! least as strongly as the program's.

use super::state::{Lowering, RegionKind};
use crate::trace_check::load::Rec;
use crate::trace_check::sync_rules::Memory;
use ipc_harness::scenario::Op;
use ipc_harness::HandleTypes;

impl Lowering<'_> {
    /// The binding of a recorded pool, or a reason.
    fn pool(&mut self, process: usize, r: &Rec) -> Option<String> {
        let pool = r.args.pool().unwrap_or(0);
        let found = self.procs[process].pools.get(&pool).cloned();
        if found.is_none() && r.result == 0 {
            self.reason(process, r, "uses a memory pool no recorded call made");
        }
        found
    }

    pub(super) fn pool_make(&mut self, process: usize, r: &Rec, name: &str) {
        let ok = r.result == 0;
        let pl = self.procs[process].fresh("pl");
        let device = r.args.device().unwrap_or(0);
        let op = if name == "cuMemPoolCreate" {
            Op::PoolCreate {
                types: HandleTypes(r.args.handle_type().unwrap_or(0) as u32),
                device,
            }
        } else {
            Op::PoolDefault { device }
        };
        self.call_step(process, r, ok.then(|| pl.clone()), op);
        if let (true, Some(v)) = (ok, r.args.pool()) {
            self.procs[process].pools.insert(v, pl);
        }
    }

    pub(super) fn pool_destroy(&mut self, process: usize, r: &Rec) {
        let Some(pl) = self.pool(process, r) else {
            return self.unlowered(process, r, "a pool the trace did not see made");
        };
        self.call_step(process, r, None, Op::PoolDestroy { pool: pl });
        if let (0, Some(v)) = (r.result, r.args.pool()) {
            self.procs[process].pools.remove(&v);
        }
    }

    pub(super) fn pool_set_access(&mut self, process: usize, r: &Rec) {
        let Some(pl) = self.pool(process, r) else {
            return self.unlowered(process, r, "a pool the trace did not see made");
        };
        self.access_steps(process, r, |access, device| Op::PoolSetAccess {
            pool: pl.clone(),
            access,
            device,
        });
    }

    pub(super) fn cu_mem_pool_export(&mut self, process: usize, index: usize, r: &Rec) {
        if r.args.handle_type() != Some(1) {
            if r.result == 0 {
                self.reason(
                    process,
                    r,
                    "exports a pool as a handle other than a POSIX descriptor, which the replay does not carry",
                );
            }
            return self.unlowered(process, r, "a shareable handle the replay does not carry");
        }
        let Some(pl) = self.pool(process, r) else {
            return self.unlowered(process, r, "a pool the trace did not see made");
        };
        let ok = r.result == 0;
        let f = self.procs[process].fresh("f");
        self.call_step(
            process,
            r,
            ok.then(|| f.clone()),
            Op::PoolExport { pool: pl },
        );
        if ok {
            self.exported_fd(process, index, r, &f, None);
        }
    }

    pub(super) fn cu_mem_pool_import(&mut self, process: usize, index: usize, r: &Rec) {
        let Some(fd) = self.imported_descriptor(process, index, r) else {
            return;
        };
        let ok = r.result == 0;
        let pl = self.procs[process].fresh("pl");
        self.call_step(process, r, ok.then(|| pl.clone()), Op::PoolImport { fd });
        if let (true, Some(v)) = (ok, r.args.pool()) {
            self.procs[process].pools.insert(v, pl);
        }
    }

    pub(super) fn pool_alloc(&mut self, process: usize, r: &Rec) {
        let Some(pl) = self.pool(process, r) else {
            return self.unlowered(process, r, "a pool the trace did not see made");
        };
        let size = r.args.size().unwrap_or(0);
        let ok = r.result == 0;
        let a = self.procs[process].fresh("a");
        self.call_step(
            process,
            r,
            ok.then(|| a.clone()),
            Op::PoolAlloc { pool: pl, size },
        );
        if let (true, Some(ptr)) = (ok, r.args.ptr()) {
            let object = self.new_object(&a, size);
            self.add_region(
                process,
                ptr,
                size,
                &a,
                Memory::Device,
                Some(object),
                RegionKind::PoolAlloc,
            );
        }
    }

    pub(super) fn pool_export_pointer(&mut self, process: usize, r: &Rec) {
        let ptr = r.args.ptr().unwrap_or(0);
        let Some((p, _, object, _)) = self.recorded_pointer(process, r, ptr, "exports") else {
            return;
        };
        let ok = r.result == 0;
        let x = self.procs[process].fresh("x");
        self.call_step(
            process,
            r,
            ok.then(|| x.clone()),
            Op::PoolExportPtr { ptr: p },
        );
        if let (true, Some(bytes)) = (ok, r.args.handle()) {
            self.made(true, process, r, bytes, &x, object);
        }
    }

    pub(super) fn pool_import_pointer(&mut self, process: usize, r: &Rec) {
        let made = r
            .args
            .handle()
            .and_then(|b| self.pool_exports.get(b))
            .cloned();
        let (Some(made), Some(data)) = (made, self.held_handle(process, r)) else {
            if r.result == 0 {
                self.reason(
                    process,
                    r,
                    "imports a pool pointer no traced process exported",
                );
            }
            return self.unlowered(process, r, "export data no traced process made");
        };
        let Some(pl) = self.pool(process, r) else {
            return self.unlowered(process, r, "a pool the trace did not see made");
        };
        let ok = r.result == 0;
        let q = self.procs[process].fresh("q");
        self.call_step(
            process,
            r,
            ok.then(|| q.clone()),
            Op::PoolImportPtr { pool: pl, data },
        );
        if let (true, Some(ptr)) = (ok, r.args.ptr()) {
            let size = made.map_or(1, |o| self.objects[o].size.max(1));
            self.add_region(
                process,
                ptr,
                size,
                &q,
                Memory::Device,
                made,
                RegionKind::PoolImport,
            );
        }
    }
}
