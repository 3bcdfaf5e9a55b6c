//! Several devices: peer capability, explicit peer access, and the peer
//! connections a cross-device IPC open needs.
//!
//! The topology says which device pairs can peer and how many peer
//! connections one device may hold. A connection joins two physical devices
//! and counts against both devices' budgets, system-wide (the CUDA runtime
//! docs: "Each device can support a system-wide maximum of eight peer
//! connections"); a process holds the connections it made until it exits.

use crate::semantics::{ExportRule, LazyPeerAccess};
use crate::world::{CtxKey, SimResult, World};
use ipc_harness::{ErrorKind, ProcessIndex, IPC_MEM_LAZY_ENABLE_PEER_ACCESS};
use std::collections::BTreeSet;

fn link(a: u32, b: u32) -> (u32, u32) {
    (a.min(b), a.max(b))
}

impl World {
    /// Whether two distinct physical devices can peer at all.
    fn can_peer(&self, a: u32, b: u32) -> bool {
        self.topology.can_peer(a, b)
    }

    /// `cudaDeviceCanAccessPeer`: 1 or 0; a device is not its own peer.
    pub(crate) fn can_access_peer(&self, p: ProcessIndex, d: u32, peer: u32) -> SimResult<i64> {
        let (d, peer) = (self.physical(p, d)?, self.physical(p, peer)?);
        Ok(i64::from(self.can_peer(d, peer)))
    }

    /// Distinct devices `device` is connected to, across live processes.
    fn partners(&self, device: u32) -> BTreeSet<u32> {
        self.procs
            .iter()
            .filter(|proc| !proc.exited)
            .flat_map(|proc| proc.peer_links.keys())
            .filter_map(|&(a, b)| match () {
                _ if a == device => Some(b),
                _ if b == device => Some(a),
                _ => None,
            })
            .collect()
    }

    /// Make sure `p` holds a connection between `a` and `b`: TooManyPeers
    /// when either device's budget is spent on other partners.
    fn connect(&mut self, p: ProcessIndex, a: u32, b: u32) -> SimResult<()> {
        if let Some(budget) = self.topology.peer_budget {
            for (dev, other) in [(a, b), (b, a)] {
                let partners = self.partners(dev);
                if !partners.contains(&other) && partners.len() >= budget as usize {
                    return Err(ErrorKind::TooManyPeers.into());
                }
            }
        }
        self.procs[p].peer_links.insert(link(a, b), ());
        Ok(())
    }

    /// `cudaDeviceEnablePeerAccess(peer, 0)` from the current context.
    pub(crate) fn enable_peer_access(&mut self, p: ProcessIndex, peer: u32) -> SimResult<()> {
        let (ctx, device) = self.current_ctx(p)?;
        // cudaDeviceEnablePeerAccess wants a primary context current: with
        // one made by `cuCtxCreate` it is cudaErrorIncompatibleDriverContext
        // (multidev.peer.enable-from-created-context).
        let primary = self.procs[p].contexts.get(&ctx).is_some_and(|c| c.primary);
        if self.dialect == ipc_harness::Dialect::Runtime && !primary {
            return Err(ErrorKind::IncompatibleDriverContext.into());
        }
        let peer = self.physical(p, peer)?;
        if peer == device {
            return Err(self.sem.enable_peer_self.into());
        }
        if !self.can_peer(device, peer) {
            return Err(ErrorKind::PeerAccessUnsupported.into());
        }
        if self.procs[p].peer_enabled.contains_key(&(ctx, peer)) {
            return Err(ErrorKind::PeerAccessAlreadyEnabled.into());
        }
        self.connect(p, device, peer)?;
        self.procs[p].peer_enabled.insert((ctx, peer), ());
        Ok(())
    }

    /// The checks and the connection an `ipc_open` needs when the importing
    /// context's device is not the exporter's.
    pub(crate) fn cross_device_open(
        &mut self,
        p: ProcessIndex,
        ctx: CtxKey,
        device: u32,
        exporter_device: u32,
        flags: u32,
    ) -> SimResult<()> {
        if self.procs[p].ordinal_of(exporter_device).is_none() {
            if let ExportRule::Refuse(kind) = self.sem.hidden_exporter_device {
                return Err(kind.into());
            }
        }
        if !self.can_peer(device, exporter_device) {
            return Err(ErrorKind::PeerAccessUnsupported.into());
        }
        let enabled = self.procs[p]
            .peer_enabled
            .contains_key(&(ctx, exporter_device));
        if flags & IPC_MEM_LAZY_ENABLE_PEER_ACCESS == 0 {
            // Without the lazy flag nothing enables access for the caller
            // (reachable only when `open_flags` lets flags 0 through).
            return if enabled {
                Ok(())
            } else {
                Err(ErrorKind::PeerAccessNotEnabled.into())
            };
        }
        self.connect(p, device, exporter_device)?;
        if self.sem.lazy_peer_access == LazyPeerAccess::Enables {
            self.procs[p]
                .peer_enabled
                .insert((ctx, exporter_device), ());
        }
        Ok(())
    }
}
