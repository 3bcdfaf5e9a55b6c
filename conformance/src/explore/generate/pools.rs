//! Memory pools shared between processes, lowered the way the CUDA sample
//! (streamOrderedAllocationIPC) shares them: export the pool, pass its
//! descriptor, import it, export an allocation's pointer, send the export
//! data, import the pointer and read; then the frees in a chosen order.

use super::{name, Lowering, PoolFreeOrder};
use ipc_harness::scenario::Op;
use ipc_harness::HandleTypes;
use proptest::sample::Index;

impl Lowering {
    /// Shares one allocation of a new pool of one live process with another
    /// (`exportable` false: the pool has no handle types and every sharing
    /// step after `pool_export` is refused or skipped).
    pub(super) fn pool_share(
        &mut self,
        pair: &Index,
        value: u8,
        order: PoolFreeOrder,
        exportable: bool,
    ) {
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
        self.bind(exporter, &pool, Op::PoolCreate { types, device: 0 });
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
        let free_ptr = Op::PoolFree { ptr: name(&ptr) };
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
        self.emit(
            importer,
            Op::Read {
                ptr: name(&ptr),
                offset: 0,
                len: 4,
            },
        );
        match order {
            PoolFreeOrder::ImporterFirst => {
                self.emit(importer, free_ptr);
                self.emit(exporter, free_alloc);
            }
            PoolFreeOrder::ExporterFirst => {
                self.emit(exporter, free_alloc);
                self.emit(importer, free_ptr);
            }
            PoolFreeOrder::ExporterBeforeImport => {
                self.emit(importer, free_ptr);
            }
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
