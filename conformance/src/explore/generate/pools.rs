//! Memory pools shared between processes, lowered the way the CUDA sample
//! (streamOrderedAllocationIPC) shares them: export the pool, pass its
//! descriptor, import it, export an allocation's pointer, send the export
//! data, import the pointer and read; then the frees in a chosen order.

use super::{Lowering, PoolFreeOrder};
use ipc_harness::CallKind;
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
        self.emit(
            exporter,
            format_args!(
                "{pool} = {kw} types={types}",
                kw = CallKind::PoolCreate.keyword()
            ),
        );
        self.emit(
            exporter,
            format_args!("{fd} = {kw} {pool}", kw = CallKind::PoolExport.keyword()),
        );
        self.emit(exporter, format_args!("{sent} = send_fd {fd} -> {to}"));
        self.emit(
            importer,
            format_args!(
                "{imported} = {kw} {sent}",
                kw = CallKind::PoolImport.keyword()
            ),
        );
        self.emit(
            exporter,
            format_args!(
                "{alloc} = {kw} {pool} 2MiB",
                kw = CallKind::PoolAlloc.keyword()
            ),
        );
        self.emit(
            exporter,
            format_args!(
                "{kw} {alloc} {value:#04x} len=2MiB",
                kw = CallKind::Memset.keyword()
            ),
        );
        self.emit(
            exporter,
            format_args!("{kw}", kw = CallKind::Synchronize.keyword()),
        );
        self.emit(
            exporter,
            format_args!(
                "{data} = {kw} {alloc}",
                kw = CallKind::PoolExportPtr.keyword()
            ),
        );
        self.emit(exporter, format_args!("send {data} -> {to}"));
        if order == PoolFreeOrder::ExporterBeforeImport {
            self.emit(
                exporter,
                format_args!("{kw} {alloc}", kw = CallKind::PoolFree.keyword()),
            );
        }
        self.emit(
            importer,
            format_args!(
                "{ptr} = {kw} {imported} {data}",
                kw = CallKind::PoolImportPtr.keyword()
            ),
        );
        self.stats.pool_imports += 1;
        self.emit(
            importer,
            format_args!("{kw} {ptr} 0 4", kw = CallKind::Read.keyword()),
        );
        match order {
            PoolFreeOrder::ImporterFirst => {
                self.emit(
                    importer,
                    format_args!("{kw} {ptr}", kw = CallKind::PoolFree.keyword()),
                );
                self.emit(
                    exporter,
                    format_args!("{kw} {alloc}", kw = CallKind::PoolFree.keyword()),
                );
            }
            PoolFreeOrder::ExporterFirst => {
                self.emit(
                    exporter,
                    format_args!("{kw} {alloc}", kw = CallKind::PoolFree.keyword()),
                );
                self.emit(
                    importer,
                    format_args!("{kw} {ptr}", kw = CallKind::PoolFree.keyword()),
                );
            }
            PoolFreeOrder::ExporterBeforeImport => {
                self.emit(
                    importer,
                    format_args!("{kw} {ptr}", kw = CallKind::PoolFree.keyword()),
                );
            }
        }
        self.emit(
            exporter,
            format_args!("{kw} {fd}", kw = CallKind::FdClose.keyword()),
        );
        self.emit(
            importer,
            format_args!("{kw} {sent}", kw = CallKind::FdClose.keyword()),
        );
        self.emit(
            exporter,
            format_args!("{kw} {pool}", kw = CallKind::PoolDestroy.keyword()),
        );
    }
}
