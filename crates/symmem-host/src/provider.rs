use crate::heap::{Mapping, check_peer_heap, create_heap};
use crate::{HostConfig, HostError, SymmetricAllocator};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use symmem::{
    CollectiveKind, CollectiveOp, Error, PeerTable, ProviderKind, SymmetricProvider, Topology,
    TranslateError, TranslatedOps,
};
use symmem_bootstrap::Bootstrap;

/// The host shared-memory provider. See the crate docs.
pub struct HostProvider {
    rank: usize,
    world_size: usize,
    bootstrap: Bootstrap,
    allocator: SymmetricAllocator,
    /// Mapping of every rank's heap reachable from here (own one included), by rank.
    heaps: Vec<Option<Mapping>>,
}

/// A heap below the allocator's alignment holds nothing: refused before anyone meets.
fn check_heap(heap_bytes: u64) -> Result<(), HostError> {
    if heap_bytes < crate::ALIGNMENT {
        return Err(HostError::HeapTooSmall {
            bytes: heap_bytes,
            min: crate::ALIGNMENT,
        });
    }
    Ok(())
}

impl HostProvider {
    /// Builds a provider from the environment (see the crate docs). Collective.
    pub fn from_env() -> Result<Self, HostError> {
        Self::new(HostConfig::from_env()?)
    }

    /// Joins the rendezvous, creates this rank's heap and maps every peer heap of the same
    /// node. Collective.
    pub fn new(config: HostConfig) -> Result<Self, HostError> {
        check_heap(config.heap_bytes)?;
        // The engine refuses a job that spans nodes without one (never a rendezvous timeout);
        // heaps are shared only among the ranks of one node, over its Unix star.
        let bootstrap = Bootstrap::join(
            &config.identity,
            config.node_id,
            &config.rendezvous,
            config.timeout,
        )?;
        Self::over(bootstrap, config.heap_bytes)
    }

    /// As [`new`](Self::new), over a control plane the caller opened (e.g. from a
    /// [`Meeting`](symmem_bootstrap::Meeting)): creates this rank's heap of `heap_bytes` and
    /// maps every peer heap of the same node. Collective.
    pub fn over(mut bootstrap: Bootstrap, heap_bytes: u64) -> Result<Self, HostError> {
        check_heap(heap_bytes)?;
        let (rank, world_size) = (bootstrap.rank(), bootstrap.world_size());
        let heap_fd = create_heap(rank, heap_bytes)?;
        let own = Mapping::new(&heap_fd, heap_bytes)?;
        let op = CollectiveOp {
            seq: 0,
            kind: CollectiveKind::Provider {
                what: "host heap exchange".into(),
            },
        };
        // Heaps travel among the ranks of one node (the topology's), the only ones that map
        // each other's.
        let topology = bootstrap.topology().clone();
        let info = heap_bytes.to_string();
        let gathered = bootstrap.exchange(
            &op,
            info.as_bytes(),
            Some(heap_fd.as_fd()),
            topology.node(rank),
        )?;
        for (peer, payload) in gathered.payloads.iter().enumerate() {
            let bytes = std::str::from_utf8(payload)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or(HostError::BadPeerInfo { rank: peer })?;
            if bytes != heap_bytes {
                return Err(HostError::HeapMismatch {
                    rank: peer,
                    bytes,
                    reference: rank,
                    expected: heap_bytes,
                });
            }
        }
        let mut heaps = Vec::with_capacity(world_size);
        let mut own = Some(own);
        for (peer, fd) in gathered.fds.into_iter().enumerate() {
            heaps.push(match (peer == rank, fd) {
                (true, _) => own.take(),
                (false, Some(fd)) if topology.same_node(peer, rank) => {
                    check_peer_heap(&fd, heap_bytes, peer)?;
                    Some(Mapping::new(&fd, heap_bytes)?)
                }
                // Another node: not load/store reachable, never mapped.
                _ => None,
            });
        }
        // The descriptors are closed now: each heap lives as long as some rank maps it.
        Ok(Self {
            rank,
            world_size,
            bootstrap,
            allocator: SymmetricAllocator::new(heap_bytes),
            heaps,
        })
    }

    /// Address of this rank's own heap.
    pub fn heap_base(&self) -> u64 {
        self.local().base()
    }

    pub fn heap_bytes(&self) -> u64 {
        self.allocator.size()
    }

    fn local(&self) -> &Mapping {
        self.heaps[self.rank].as_ref().expect("own heap is mapped")
    }

    fn sync(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.bootstrap
            .barrier(op)
            .map_err(|e| symmem::Error::from(HostError::from(e)))?;
        // Stores before the barrier on any rank are visible after it on every rank.
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Translates `[ptr, ptr + len)` to `peer` through `table` and checks that it stays inside
    /// that peer's heap, so a bad pointer is an error, never a wild access.
    fn reach(
        &self,
        table: &PeerTable,
        ptr: u64,
        peer: usize,
        len: u64,
        align: u64,
        what: &'static str,
    ) -> Result<*mut u8, Error> {
        let addr = table.translate(ptr, self.rank, peer)?;
        if addr % align != 0 {
            return Err(TranslateError::Misaligned { addr, align, what }.into());
        }
        match self.heaps.get(peer).and_then(Option::as_ref) {
            Some(heap) if heap.contains(addr, len) => Ok(addr as *mut u8),
            Some(_) => Err(TranslateError::OutsideHeap { addr, len, peer }.into()),
            None => Err(TranslateError::PeerNotDirect {
                rank: self.rank,
                peer,
            }
            .into()),
        }
    }

    fn local_range(&self, addr: u64, len: u64) -> Result<*mut u8, Error> {
        if self.local().contains(addr, len) {
            Ok(addr as *mut u8)
        } else {
            Err(TranslateError::OutsideHeap {
                addr,
                len,
                peer: self.rank,
            }
            .into())
        }
    }
}

impl SymmetricProvider for HostProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Host
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn topology(&self) -> &Topology {
        self.bootstrap.topology()
    }
    fn checks_collective_order(&self) -> bool {
        true
    }

    fn malloc(&mut self, bytes: u64, op: &CollectiveOp) -> Result<u64, Error> {
        // Every rank allocates, then all compare outcomes in the order-checked exchange. Out of
        // heap on any rank is then known to every rank, which all undo their part: a failure
        // they agree on, after which the context stays usable. (The allocator is
        // deterministic, so ranks normally reach the same offset or the same exhaustion; the
        // comparison makes that a checked fact rather than an assumption.)
        let local = self.allocator.alloc(bytes);
        let outcome = local.map_or_else(|| "full".to_string(), |offset| offset.to_string());
        let exchanged = self
            .bootstrap
            .exchange(op, outcome.as_bytes(), None, 0)
            .map_err(|e| symmem::Error::from(HostError::from(e)));
        let gathered = match exchanged {
            Ok(gathered) => gathered,
            Err(e) => {
                // The collective did not happen: nothing stays allocated.
                if let Some(offset) = local {
                    self.allocator.free(offset);
                }
                return Err(e);
            }
        };
        fence(Ordering::SeqCst);
        let outcomes: Vec<&[u8]> = gathered.payloads.iter().map(Vec::as_slice).collect();
        let full: Vec<usize> = (0..self.world_size)
            .filter(|&r| outcomes[r] == b"full")
            .collect();
        if let Some(offset) = local
            && (!full.is_empty() || outcomes.iter().any(|o| *o != outcome.as_bytes()))
        {
            self.allocator.free(offset);
        }
        if !full.is_empty() {
            return Err(HostError::HeapExhausted {
                ranks: full,
                requested: bytes,
                largest_free: self.allocator.largest_free(),
                heap_bytes: self.allocator.size(),
            }
            .into());
        }
        match local {
            Some(offset) if outcomes.iter().all(|o| *o == outcome.as_bytes()) => {
                Ok(self.local().base() + offset)
            }
            _ => Err(HostError::HeapsDiverged {
                offsets: outcomes
                    .iter()
                    .map(|o| String::from_utf8_lossy(o).into_owned())
                    .collect(),
            }
            .into()),
        }
    }

    fn free(&mut self, addr: u64, op: &CollectiveOp) -> Result<(), Error> {
        let offset = addr.wrapping_sub(self.local().base());
        if self.allocator.live_len(offset).is_none() {
            return Err(HostError::NotAnAllocation {
                addr,
                rank: self.rank,
            }
            .into());
        }
        self.sync(op)?;
        self.allocator.free(offset);
        Ok(())
    }

    fn barrier(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.sync(op)
    }

    fn ptr(&self, addr: u64, peer: usize) -> Option<u64> {
        let local = self.local();
        if !local.contains(addr, 1) {
            return None;
        }
        let peer_heap = self.heaps.get(peer)?.as_ref()?;
        Some(peer_heap.base() + (addr - local.base()))
    }
}

impl TranslatedOps for HostProvider {
    fn store_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        values: &[u64],
    ) -> Result<(), Error> {
        let len = std::mem::size_of_val(values) as u64;
        let target = self.reach(table, dst, to, len, 8, "u64 store")?;
        for (i, &value) in values.iter().enumerate() {
            // SAFETY: `reach` checked that the range lies in a live shared mapping and is
            // 8-byte aligned. Other processes may touch the same words, so every access is
            // atomic (relaxed: barriers order them, as a kernel's stores are ordered).
            unsafe { AtomicU64::from_ptr(target.cast::<u64>().add(i)) }
                .store(value, Ordering::Relaxed);
        }
        Ok(())
    }

    fn load_u64(
        &self,
        table: &PeerTable,
        src: u64,
        from: usize,
        out: &mut [u64],
    ) -> Result<(), Error> {
        let len = std::mem::size_of_val(out) as u64;
        let source = self.reach(table, src, from, len, 8, "u64 load")?;
        for (i, slot) in out.iter_mut().enumerate() {
            // SAFETY: as in `store_u64`.
            *slot =
                unsafe { AtomicU64::from_ptr(source.cast::<u64>().add(i)) }.load(Ordering::Relaxed);
        }
        Ok(())
    }

    fn copy_bytes(
        &self,
        table: &PeerTable,
        src: u64,
        src_rank: usize,
        dst: u64,
        dst_rank: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        let from = self.reach(table, src, src_rank, bytes, 1, "copy")?;
        let to = self.reach(table, dst, dst_rank, bytes, 1, "copy")?;
        // SAFETY: both ranges were checked to lie in live shared mappings; `copy` allows overlap.
        // Bulk copies are plain memory traffic, as a GPU copy kernel's are: other processes
        // must not touch the range meanwhile (the collective protocol orders that), which is
        // outside what Rust's memory model can express for memory shared across processes.
        unsafe { std::ptr::copy(from, to, bytes as usize) };
        Ok(())
    }

    fn atomic_add_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        value: u64,
    ) -> Result<(), Error> {
        let target = self.reach(table, dst, to, 8, 8, "u64 atomic add")?;
        // SAFETY: aligned, inside a live shared mapping; every process touches this word only
        // through atomics during the operation.
        let word = unsafe { AtomicU64::from_ptr(target.cast()) };
        word.fetch_add(value, Ordering::SeqCst);
        Ok(())
    }

    fn read_local(&self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        let source = self.local_range(addr, out.len() as u64)?;
        // SAFETY: inside this rank's own live mapping.
        unsafe { std::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn write_local(&self, addr: u64, data: &[u8]) -> Result<(), Error> {
        let target = self.local_range(addr, data.len() as u64)?;
        // SAFETY: inside this rank's own live mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), target, data.len()) };
        Ok(())
    }
}
