//! A cross-process GPU buffer pool, the kind frameworks build to share
//! tensors or KV-cache blocks between processes, written against the
//! harness's [`Driver`] trait so it runs on the simulator and on a GPU.
//!
//! - The **owner** allocates buffers, fills them, exports each with
//!   `cudaIpcGetMemHandle` and offers it to consumers; it frees a buffer
//!   only after every consumer it was offered to has released it.
//! - A **consumer** opens a handle the first time it is asked for it and
//!   caches the mapping per handle, so a second request does not re-open;
//!   a [`Lease`] releases on drop, and [`ConsumerPool::reclaim`] closes
//!   mappings no lease uses any more and tells the owner.
//!
//! [`Variant`] selects the correct pool or one of four classic mistakes;
//! `tests/` shows the harness catching each mistake and passing the correct
//! pool. [`pool_roles`] is the whole protocol as a [`RoleSet`].

use ipc_harness::roles::{fail, RoleCtx, RoleError, RoleSet};
use ipc_harness::{
    DevicePtr, Driver, DriverError, FreeKind, IpcMemHandle, MemKind, OutArg,
    IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// One buffer: a whole allocation granule, so no other allocation shares
/// the memory a mapping of it reaches (small `cudaMalloc`s may be packed
/// into one block, and opening any of them maps the block).
pub const BUFFER_SIZE: u64 = 2 << 20;

/// The correct pool, or one deliberate mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variant {
    Correct,
    /// The consumer opens the handle on every request instead of caching
    /// the mapping, and its bookkeeping (by pointer) closes it once.
    NoCache,
    /// The consumer hands its mapped pointer back and the owner closes it:
    /// `cudaIpcCloseMemHandle` from the wrong process.
    CloseFromOwner,
    /// The owner frees a buffer on the first release, not the last.
    FreeOnFirstRelease,
    /// The owner carves buffers out of one slab and shares the slab's
    /// handle with an offset: every consumer can reach every buffer.
    SubAllocated,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Correct,
        Variant::NoCache,
        Variant::CloseFromOwner,
        Variant::FreeOnFirstRelease,
        Variant::SubAllocated,
    ];
}

/// What the owner offers: the handle of the allocation and where the
/// buffer lies in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub id: u32,
    pub handle: Vec<u8>,
    pub offset: u64,
    pub len: u64,
}

/// Owner to consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToConsumer {
    Offer(Offer),
    /// No more offers.
    Done,
}

/// Consumer to owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToOwner {
    /// The consumer no longer uses buffer `id`. `mapped` is set only by the
    /// [`Variant::CloseFromOwner`] consumer, which leaves the close to the owner.
    Released { id: u32, mapped: Option<u64> },
}

/// The byte buffer `id` is filled with.
pub fn pattern(id: u32) -> u8 {
    0xa0u8.wrapping_add(id as u8)
}

struct OwnedBuffer {
    /// The pointer to free (the slab's, for a sub-allocated buffer).
    alloc: DevicePtr,
    handle: IpcMemHandle,
    offset: u64,
    /// Consumers it was offered to and that have not released it.
    holders: BTreeSet<String>,
    freed: bool,
}

/// The exporting side.
pub struct OwnerPool {
    variant: Variant,
    buffers: BTreeMap<u32, OwnedBuffer>,
}

impl OwnerPool {
    /// Allocates `count` buffers, fills buffer `id` with [`pattern`]`(id)`
    /// and exports each.
    pub fn create(d: &mut dyn Driver, variant: Variant, count: u32) -> Result<Self, DriverError> {
        let mut buffers = BTreeMap::new();
        if variant == Variant::SubAllocated {
            let slab = d.alloc(MemKind::Device, BUFFER_SIZE * u64::from(count))?;
            let handle = d.ipc_get_mem_handle(slab, OutArg::Valid)?;
            for id in 0..count {
                let offset = BUFFER_SIZE * u64::from(id);
                d.memset(slab.offset(offset), pattern(id), BUFFER_SIZE)?;
                buffers.insert(
                    id,
                    OwnedBuffer {
                        alloc: slab,
                        handle,
                        offset,
                        holders: BTreeSet::new(),
                        freed: false,
                    },
                );
            }
        } else {
            for id in 0..count {
                let ptr = d.alloc(MemKind::Device, BUFFER_SIZE)?;
                d.memset(ptr, pattern(id), BUFFER_SIZE)?;
                let handle = d.ipc_get_mem_handle(ptr, OutArg::Valid)?;
                buffers.insert(
                    id,
                    OwnedBuffer {
                        alloc: ptr,
                        handle,
                        offset: 0,
                        holders: BTreeSet::new(),
                        freed: false,
                    },
                );
            }
        }
        // The copies must land before another process reads the buffers.
        d.synchronize()?;
        Ok(OwnerPool { variant, buffers })
    }

    pub fn ids(&self) -> Vec<u32> {
        self.buffers.keys().copied().collect()
    }

    /// The offer of buffer `id` to `consumer`, who now holds it.
    pub fn offer(&mut self, id: u32, consumer: &str) -> Option<Offer> {
        let b = self.buffers.get_mut(&id)?;
        b.holders.insert(consumer.to_string());
        Some(Offer {
            id,
            handle: b.handle.0.to_vec(),
            offset: b.offset,
            len: BUFFER_SIZE,
        })
    }

    /// `consumer` released buffer `id`: free what nobody holds any more.
    pub fn release(
        &mut self,
        d: &mut dyn Driver,
        id: u32,
        consumer: &str,
        mapped: Option<u64>,
    ) -> Result<(), DriverError> {
        if let (Variant::CloseFromOwner, Some(ptr)) = (self.variant, mapped) {
            // The mistake: this pointer is the consumer's mapping, which
            // means nothing in this process. The error is ignored, as
            // sloppy cleanup code does.
            let _ = d.ipc_close_mem_handle(DevicePtr(ptr));
        }
        let first_release_frees = self.variant == Variant::FreeOnFirstRelease;
        let Some(b) = self.buffers.get_mut(&id) else {
            return Ok(());
        };
        b.holders.remove(consumer);
        if !b.freed && (b.holders.is_empty() || first_release_frees) {
            if self.variant == Variant::SubAllocated {
                // One slab: it can go only when no buffer in it is held.
                b.freed = true;
                let slab = b.alloc;
                if self.buffers.values().all(|b| b.freed) {
                    d.free(FreeKind::Device, slab)?;
                }
            } else {
                d.free(FreeKind::Device, b.alloc)?;
                b.freed = true;
            }
        }
        Ok(())
    }

    pub fn all_freed(&self) -> bool {
        self.buffers.values().all(|b| b.freed)
    }

    pub fn freed_count(&self) -> usize {
        self.buffers.values().filter(|b| b.freed).count()
    }
}

/// Leases dropped and not yet reclaimed: (handle bytes, buffer id).
type Returned = Rc<RefCell<Vec<([u8; 64], u32)>>>;

struct Cached {
    base: DevicePtr,
    /// Leases per buffer id (several buffers share a mapping when they
    /// share an allocation).
    leases: BTreeMap<u32, u32>,
}

/// The importing side: one mapping per handle, shared by every lease of it.
pub struct ConsumerPool {
    variant: Variant,
    cache: BTreeMap<[u8; 64], Cached>,
    /// Leases dropped since the last [`ConsumerPool::reclaim`]: (handle, id).
    returned: Returned,
}

/// A buffer in use; dropping it gives it back to the pool.
pub struct Lease {
    pub id: u32,
    /// The buffer's first byte in this process.
    pub ptr: DevicePtr,
    pub len: u64,
    handle: [u8; 64],
    returned: Returned,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.returned.borrow_mut().push((self.handle, self.id));
    }
}

impl ConsumerPool {
    pub fn new(variant: Variant) -> ConsumerPool {
        ConsumerPool {
            variant,
            cache: BTreeMap::new(),
            returned: Rc::default(),
        }
    }

    /// The buffer of `offer`, opening its handle only if no lease holds it.
    pub fn acquire(&mut self, d: &mut dyn Driver, offer: &Offer) -> Result<Lease, RoleError> {
        let handle = IpcMemHandle::from_slice(&offer.handle).ok_or_else(|| {
            fail(format!(
                "offer {} carries {} handle bytes, not 64",
                offer.id,
                offer.handle.len()
            ))
        })?;
        let key = handle.0;
        let cached = self.variant != Variant::NoCache && self.cache.contains_key(&key);
        if !cached {
            let base =
                d.ipc_open_mem_handle(handle, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)?;
            // NoCache overwrites the entry: the earlier open is forgotten.
            self.cache.insert(
                key,
                Cached {
                    base,
                    leases: BTreeMap::new(),
                },
            );
        }
        let entry = self
            .cache
            .get_mut(&key)
            .ok_or_else(|| fail("the cache lost an entry it just made"))?;
        *entry.leases.entry(offer.id).or_insert(0) += 1;
        Ok(Lease {
            id: offer.id,
            ptr: entry.base.offset(offer.offset),
            len: offer.len,
            handle: key,
            returned: Rc::clone(&self.returned),
        })
    }

    /// Closes the mappings no lease uses any more; returns what to tell the
    /// owner, one message per buffer no longer in use here.
    pub fn reclaim(&mut self, d: &mut dyn Driver) -> Result<Vec<ToOwner>, DriverError> {
        let returned: Vec<([u8; 64], u32)> = self.returned.borrow_mut().drain(..).collect();
        let mut released = Vec::new();
        for (key, id) in returned {
            let Some(entry) = self.cache.get_mut(&key) else {
                continue;
            };
            let Some(count) = entry.leases.get_mut(&id) else {
                continue;
            };
            *count -= 1;
            if *count > 0 {
                continue;
            }
            entry.leases.remove(&id);
            let mut mapped = None;
            if entry.leases.is_empty() {
                let base = entry.base;
                self.cache.remove(&key);
                if self.variant == Variant::CloseFromOwner {
                    mapped = Some(base.0);
                } else {
                    d.ipc_close_mem_handle(base)?;
                }
            }
            released.push(ToOwner::Released { id, mapped });
        }
        Ok(released)
    }

    /// Mappings currently cached.
    pub fn mapped(&self) -> usize {
        self.cache.len()
    }
}

/// The owner's role: create, offer every buffer to every consumer, then
/// free each buffer as its holders release it.
pub fn owner_role(
    ctx: &mut RoleCtx,
    variant: Variant,
    consumers: &[String],
    buffers: u32,
) -> Result<serde_json::Value, RoleError> {
    let mut pool = OwnerPool::create(ctx.driver(), variant, buffers)?;
    for c in consumers {
        for id in pool.ids() {
            let offer = pool
                .offer(id, c)
                .ok_or_else(|| fail("offer of a buffer the pool lacks"))?;
            ctx.send_json(c, &ToConsumer::Offer(offer))?;
        }
        ctx.send_json(c, &ToConsumer::Done)?;
    }
    let mut releases = 0usize;
    while releases < consumers.len() * buffers as usize {
        let (from, ToOwner::Released { id, mapped }) = ctx.recv_json()?;
        pool.release(ctx.driver(), id, &from, mapped)?;
        releases += 1;
    }
    Ok(serde_json::json!({ "freed": pool.freed_count() }))
}

/// A consumer's role: take every offer, ask for each buffer twice (two
/// users of one buffer), check its contents, release everything. A buffer
/// it cannot open is reported as refused and released at once.
pub fn consumer_role(ctx: &mut RoleCtx, variant: Variant) -> Result<serde_json::Value, RoleError> {
    let mut offers = Vec::new();
    while let ToConsumer::Offer(o) = ctx.recv_json_from("owner")? {
        offers.push(o);
    }
    let mut pool = ConsumerPool::new(variant);
    let mut leases = Vec::new();
    let mut refused = Vec::new();
    for o in &offers {
        match pool
            .acquire(ctx.driver(), o)
            .and_then(|a| Ok((a, pool.acquire(ctx.driver(), o)?)))
        {
            Ok((a, b)) => leases.extend([a, b]),
            Err(e) => refused.push((o.id, e.message)),
        }
    }
    let mut wrong = Vec::new();
    for lease in &leases {
        let bytes = ctx.driver().read(lease.ptr, 16);
        if bytes.as_deref() != Ok(&[pattern(lease.id); 16][..]) {
            wrong.push(lease.id);
        }
    }
    drop(leases);
    let mut messages = pool.reclaim(ctx.driver())?;
    messages.extend(
        refused
            .iter()
            .map(|&(id, _)| ToOwner::Released { id, mapped: None }),
    );
    for m in &messages {
        ctx.send_json("owner", m)?;
    }
    if !wrong.is_empty() {
        return Err(fail(format!(
            "buffers {wrong:?} did not hold their pattern"
        )));
    }
    Ok(
        serde_json::json!({ "buffers": offers.len(), "refused": refused.len(), "still_mapped": pool.mapped() }),
    )
}

/// The protocol as roles: `owner` and `consumer-0` .. `consumer-{n-1}`.
pub fn pool_roles(variant: Variant, consumers: usize, buffers: u32) -> RoleSet {
    let names: Vec<String> = (0..consumers).map(|i| format!("consumer-{i}")).collect();
    let owner_peers = names.clone();
    let mut set = RoleSet::new().role("owner", 0, move |ctx| {
        owner_role(ctx, variant, &owner_peers, buffers)
    });
    for name in names {
        set = set.role(&name, 0, move |ctx| consumer_role(ctx, variant));
    }
    set
}
