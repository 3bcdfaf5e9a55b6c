//! Memory pools shared between processes, lowered the way the CUDA sample
//! (streamOrderedAllocationIPC) shares them: export the pool, pass its
//! descriptor, import it, grant the importer's device access, export an
//! allocation's pointer, send the export data, import the pointer and
//! read; then the frees in a chosen order. The pool may live on another
//! device than its processes, whose access then depends on the grants
//! (pool.access.*); the importer may free with `cudaFree`
//! (pool.lifetime.importer-frees-with-cudafree) and import twice
//! (pool.import.same-pool-twice, pool.import.same-pointer-twice).

use super::{name, Action, Lowering, PoolFreeOrder};
use ipc_harness::scenario::Op;
use ipc_harness::{FreeKind, HandleTypes, VmmAccess};

impl Lowering {
    /// Lowers an [`Action::PoolShare`]: shares one allocation of a new pool
    /// of one live process with another (`exportable` false: the pool has
    /// no handle types and every sharing step after `pool_export` is
    /// refused or skipped).
    pub(super) fn pool_share(&mut self, action: &Action) {
        let &Action::PoolShare {
            ref pair,
            value,
            order,
            exportable,
            ref device,
            grant,
            cuda_free,
            twice,
        } = action
        else {
            return;
        };
        let live = self.live_procs();
        if live.len() < 2 {
            return;
        }
        let k = pair.index(live.len() * (live.len() - 1));
        let exporter = live[k / (live.len() - 1)];
        let others: Vec<usize> = live.iter().copied().filter(|&p| p != exporter).collect();
        let importer = others[k % (live.len() - 1)];
        let types = if exportable {
            HandleTypes::POSIX_FD
        } else {
            HandleTypes::NONE
        };
        let pool = self.fresh("pl");
        let fd = self.fresh("pf");
        let sent = self.fresh("ppf");
        let imported = self.fresh("ipl");
        let alloc = self.fresh("pa");
        let data = self.fresh("px");
        let ptr = self.fresh("pq");
        let device = device.index(self.devices as usize) as u32;
        self.bind(exporter, &pool, Op::PoolCreate { types, device });
        self.bind(
            exporter,
            &fd,
            Op::PoolExport {
                pool: pool.to_string(),
            },
        );
        self.bind(
            exporter,
            &sent,
            Op::SendFd {
                fd: fd.to_string(),
                to: importer,
                to_name: super::PROC_NAMES[importer].to_string(),
            },
        );
        self.bind(
            importer,
            &imported,
            Op::PoolImport {
                fd: sent.to_string(),
            },
        );
        if twice {
            let again = self.fresh("ipl");
            self.bind(
                importer,
                &again,
                Op::PoolImport {
                    fd: sent.to_string(),
                },
            );
        }
        // Access: each process's own device, granted through its own handle.
        for (proc, handle) in [(exporter, &pool), (importer, &imported)] {
            let here = self.placement[proc];
            if grant && here != device {
                self.emit(
                    proc,
                    Op::PoolSetAccess {
                        pool: handle.to_string(),
                        access: VmmAccess::ReadWrite,
                        device: here,
                    },
                );
            }
        }
        let access = self.fresh("pac");
        let importer_device = self.placement[importer];
        self.bind(
            importer,
            &access,
            Op::PoolGetAccess {
                pool: imported.to_string(),
                device: importer_device,
            },
        );
        self.bind(
            exporter,
            &alloc,
            Op::PoolAlloc {
                pool: pool.to_string(),
                size: 2 << 20,
            },
        );
        self.emit(
            exporter,
            Op::Fill {
                ptr: name(&alloc),
                value,
                at: None,
                len: Some(2 << 20),
                resolved_len: 2 << 20,
            },
        );
        self.emit(exporter, Op::Sync);
        self.bind(exporter, &data, Op::PoolExportPtr { ptr: name(&alloc) });
        self.send(exporter, &data, importer);
        let free_alloc = Op::PoolFree { ptr: name(&alloc) };
        let free_ptr = if cuda_free {
            Op::Free {
                kind: FreeKind::Device,
                ptr: name(&ptr),
            }
        } else {
            Op::PoolFree { ptr: name(&ptr) }
        };
        if order == PoolFreeOrder::ExporterBeforeImport {
            self.emit(exporter, free_alloc.clone());
        }
        self.bind(
            importer,
            &ptr,
            Op::PoolImportPtr {
                pool: imported.to_string(),
                data: data.to_string(),
            },
        );
        self.stats.pool_imports += 1;
        let second = twice.then(|| self.fresh("pq"));
        if let Some(second) = &second {
            self.bind(
                importer,
                second,
                Op::PoolImportPtr {
                    pool: imported.to_string(),
                    data: data.to_string(),
                },
            );
            self.stats.pool_imports += 1;
        }
        self.emit(
            importer,
            Op::Read {
                ptr: name(&ptr),
                offset: 0,
                len: 4,
            },
        );
        // The importer's frees: the pointer, then its second import.
        let importer_frees = |l: &mut Lowering| {
            l.emit(importer, free_ptr.clone());
            if let Some(second) = &second {
                l.emit(importer, Op::PoolFree { ptr: name(second) });
            }
        };
        match order {
            PoolFreeOrder::ImporterFirst => {
                importer_frees(self);
                self.emit(exporter, free_alloc);
            }
            PoolFreeOrder::ExporterFirst => {
                self.emit(exporter, free_alloc);
                importer_frees(self);
            }
            PoolFreeOrder::ExporterBeforeImport => importer_frees(self),
        }
        self.emit(exporter, Op::FdClose { fd: fd.to_string() });
        self.emit(
            importer,
            Op::FdClose {
                fd: sent.to_string(),
            },
        );
        self.emit(
            exporter,
            Op::PoolDestroy {
                pool: pool.to_string(),
            },
        );
    }
}
