//! What other threads read of the live allocations without a round trip to the session
//! thread: the process-wide index of live allocations ([`INDEX`]), from which the Python thread
//! answers `find`, address maps and whether an export is still live, and each allocation's
//! [`Tracker`] (who holds it, whether it was freed).
//!
//! Who touches what: only the session thread writes the index ([`insert`] on allocate,
//! [`remove`] on free, [`clear`] on finalize); the Python thread reads it ([`find`],
//! [`address_map`], [`is_live`]) after the checks every call makes. Both hold its lock for a
//! map operation only. An [`Entry`] is made once and never changed. A tracker is touched from
//! any thread, with or without the GIL (a tensor's last holder may go on any thread): only its
//! atomics, no lock and no call into the session; the session thread alone marks it freed or
//! reported.

use super::AllocOut;
use crate::dlpack::{Keep, TensorSpec};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Liveness of one allocation as Python sees it: how many Python objects and DLPack exports
/// view it, and whether it was freed. When the last one goes while the allocation is still
/// live, the allocation is reported as dropped (never freed: a free is collective).
pub struct Tracker {
    id: u64,
    rank: usize,
    addr: u64,
    bytes: u64,
    holders: AtomicUsize,
    freed: AtomicBool,
    dropped: AtomicBool,
    /// `finalize` reported it already: stay quiet when its tensors go afterwards.
    reported: AtomicBool,
}

/// One holder of an allocation (a Python object or a DLPack export). Dropped from any thread,
/// with or without the GIL: it only touches atomics and logs.
pub struct DataRef(Arc<Tracker>);

impl DataRef {
    pub(super) fn new(tracker: &Arc<Tracker>) -> Self {
        tracker.holders.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(tracker))
    }

    /// Whether the allocation was freed, or reported by `finalize`: its memory may belong to
    /// another allocation now, so nothing may export it any more.
    pub fn released(&self) -> bool {
        self.0.released()
    }
}

impl Tracker {
    /// The tracker of a fresh allocation of `bytes` at `addr` (the tensor's bytes), held by
    /// no one yet.
    pub(super) fn new(id: u64, rank: usize, addr: u64, bytes: u64) -> Arc<Self> {
        Arc::new(Self {
            id,
            rank,
            addr,
            bytes,
            holders: AtomicUsize::new(0),
            freed: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        })
    }

    /// The tensor's bytes.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether the last holder went while the allocation was live.
    pub(super) fn dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// The session thread freed the allocation.
    pub(super) fn mark_freed(&self) {
        self.freed.store(true, Ordering::Release);
    }

    /// `finalize` reported the allocation.
    pub(super) fn mark_reported(&self) {
        self.reported.store(true, Ordering::Release);
    }

    fn released(&self) -> bool {
        self.freed.load(Ordering::Acquire) || self.reported.load(Ordering::Acquire)
    }
}

/// Watches an allocation without holding it (the export of its peer-bases table, which lives
/// inside it): answers whether it was released, with no call into the session.
pub struct Watch(Arc<Tracker>);

impl Watch {
    pub(super) fn new(tracker: &Arc<Tracker>) -> Self {
        Self(Arc::clone(tracker))
    }

    /// As [`DataRef::released`].
    pub fn released(&self) -> bool {
        self.0.released()
    }
}

impl Clone for DataRef {
    fn clone(&self) -> Self {
        Self::new(&self.0)
    }
}

impl Drop for DataRef {
    fn drop(&mut self) {
        let t = &self.0;
        if t.holders.fetch_sub(1, Ordering::AcqRel) != 1 || t.freed.load(Ordering::Acquire) {
            return;
        }
        t.dropped.store(true, Ordering::Release);
        if !t.reported.load(Ordering::Acquire) {
            tracing::warn!(
                allocation = t.id,
                rank = t.rank,
                addr = format_args!("{:#x}", t.addr),
                bytes = t.bytes,
                "symmetric tensor garbage-collected without symmem.free(): the allocation stays \
                 (free is collective: call symmem.free(tensor) on every rank in the same order); \
                 symmem.finalize() reports it"
            );
        }
    }
}

/// A live allocation as the Python thread reads it (through [`INDEX`]): everything an
/// allocation's or address map's answer holds, made once.
pub struct Entry {
    pub(super) id: u64,
    pub(super) rank: usize,
    pub(super) base: u64,
    pub(super) bytes: u64,
    pub(super) bases: Vec<u64>,
    pub(super) direct: Vec<bool>,
    pub(super) spec: TensorSpec,
    pub(super) table: (TensorSpec, Keep),
}

impl Entry {
    /// The answer for this allocation, with the tensor when `data` holds it.
    pub(super) fn describe(&self, data: Option<DataRef>) -> AllocOut {
        AllocOut {
            id: self.id,
            rank: self.rank,
            world_size: self.bases.len(),
            base: self.base,
            bytes: self.bytes,
            bases: self.bases.clone(),
            direct: self.direct.clone(),
            data: data.map(|d| (self.spec.clone(), Keep::Data(Arc::new(d)))),
            table: self.table.clone(),
        }
    }
}

/// The live allocations with a tensor, by id and by address. The session thread writes it (on
/// allocate, free and finalize); the Python thread reads it without a round trip.
struct Index {
    entries: BTreeMap<u64, Arc<Entry>>,
    /// Allocation id by address.
    by_addr: BTreeMap<u64, u64>,
}

static INDEX: Mutex<Index> = Mutex::new(Index {
    entries: BTreeMap::new(),
    by_addr: BTreeMap::new(),
});

fn index() -> std::sync::MutexGuard<'static, Index> {
    INDEX.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds a fresh allocation (the session thread, on allocate).
pub(super) fn insert(entry: Entry) {
    let mut index = index();
    index.by_addr.insert(entry.base, entry.id);
    index.entries.insert(entry.id, Arc::new(entry));
}

/// Removes allocation `id`, whose tensor starts at `base` (the session thread, on free).
pub(super) fn remove(id: u64, base: u64) {
    let mut index = index();
    index.by_addr.remove(&base);
    index.entries.remove(&id);
}

/// Removes every allocation (the session thread, on finalize).
pub(super) fn clear() {
    let mut index = index();
    index.entries.clear();
    index.by_addr.clear();
}

/// `(id, base, bytes)` of the live allocation whose tensor holds `addr`.
pub(super) fn find(addr: u64) -> Option<(u64, u64, u64)> {
    let index = index();
    let (_, &id) = index.by_addr.range(..=addr).next_back()?;
    let entry = &index.entries[&id];
    (addr < entry.base + entry.bytes).then_some((id, entry.base, entry.bytes))
}

/// The address map of live allocation `id` (no tensor).
pub(super) fn address_map(id: u64) -> Option<AllocOut> {
    index().entries.get(&id).map(|entry| entry.describe(None))
}

/// Whether allocation `id` is live.
pub(super) fn is_live(id: u64) -> bool {
    index().entries.contains_key(&id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_holder_reports_a_dropped_allocation_unless_freed() {
        let tracker = Arc::new(Tracker {
            id: 7,
            rank: 0,
            addr: 0x1000,
            bytes: 64,
            holders: AtomicUsize::new(0),
            freed: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        });
        let first = DataRef::new(&tracker);
        let second = first.clone();
        drop(first);
        assert!(!tracker.dropped.load(Ordering::Acquire));
        drop(second);
        assert!(tracker.dropped.load(Ordering::Acquire));

        let freed = Arc::new(Tracker {
            id: 8,
            rank: 0,
            addr: 0x2000,
            bytes: 64,
            holders: AtomicUsize::new(0),
            freed: AtomicBool::new(true),
            dropped: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        });
        drop(DataRef::new(&freed));
        assert!(!freed.dropped.load(Ordering::Acquire));
    }
}
