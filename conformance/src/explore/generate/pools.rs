//! Memory pools shared between processes, lowered the way the CUDA sample
//! (streamOrderedAllocationIPC) shares them: export the pool, pass its
//! descriptor, import it, export an allocation's pointer, send the export
//! data, import the pointer and read; then the frees in a chosen order.

use super::{Lowering, PoolFreeOrder};
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
        let to = super::PROC_NAMES[importer];
        let types = if exportable { "posix_fd" } else { "none" };
        let pool = self.fresh("pl");
        let fd = self.fresh("pf");
        let sent = self.fresh("ppf");
        let imported = self.fresh("ipl");
        let alloc = self.fresh("pa");
        let data = self.fresh("px");
        let ptr = self.fresh("pq");
        self.emit(exporter, format_args!("{pool} = pool_create types={types}"));
        self.emit(exporter, format_args!("{fd} = pool_export {pool}"));
        self.emit(exporter, format_args!("{sent} = send_fd {fd} -> {to}"));
        self.emit(importer, format_args!("{imported} = pool_import {sent}"));
        self.emit(exporter, format_args!("{alloc} = pool_alloc {pool} 2MiB"));
        self.emit(exporter, format_args!("fill {alloc} {value:#04x} len=2MiB"));
        self.emit(exporter, format_args!("sync"));
        self.emit(exporter, format_args!("{data} = pool_export_ptr {alloc}"));
        self.emit(exporter, format_args!("send {data} -> {to}"));
        if order == PoolFreeOrder::ExporterBeforeImport {
            self.emit(exporter, format_args!("pool_free {alloc}"));
        }
        self.emit(
            importer,
            format_args!("{ptr} = pool_import_ptr {imported} {data}"),
        );
        self.stats.pool_imports += 1;
        self.emit(importer, format_args!("read {ptr} 0 4"));
        match order {
            PoolFreeOrder::ImporterFirst => {
                self.emit(importer, format_args!("pool_free {ptr}"));
                self.emit(exporter, format_args!("pool_free {alloc}"));
            }
            PoolFreeOrder::ExporterFirst => {
                self.emit(exporter, format_args!("pool_free {alloc}"));
                self.emit(importer, format_args!("pool_free {ptr}"));
            }
            PoolFreeOrder::ExporterBeforeImport => {
                self.emit(importer, format_args!("pool_free {ptr}"));
            }
        }
        self.emit(exporter, format_args!("fd_close {fd}"));
        self.emit(importer, format_args!("fd_close {sent}"));
        self.emit(exporter, format_args!("pool_destroy {pool}"));
    }
}
