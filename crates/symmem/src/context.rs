use crate::{
    AddressMap, CollectiveKind, CollectiveOp, ContextId, Error, PeerTable, SymmetricProvider,
    TranslateError, TranslatedOps,
};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Element types whose bytes can be moved in and out of symmetric memory as they are.
///
/// # Safety
/// Implementors must have no padding and be valid for every bit pattern (plain integers and
/// floats, and arrays of them): symmetric memory holds whatever peers wrote.
pub unsafe trait Plain: Copy + 'static {}

macro_rules! plain {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive number type: no padding, every bit pattern valid.
        unsafe impl Plain for $t {}
    )* };
}
plain!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64
);
// SAFETY: arrays of `Plain` have no padding between elements and inherit validity.
unsafe impl<T: Plain, const N: usize> Plain for [T; N] {}

static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(1);

/// A live allocation as the context tracks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocationRecord {
    /// Sequence number of the collective that made it (the same on every rank).
    pub id: u64,
    pub addr: u64,
    pub bytes: u64,
    pub type_name: &'static str,
    /// True when its buffer was dropped without `free`: it stays allocated.
    pub dropped: bool,
}

#[derive(Default)]
struct Registry {
    live: BTreeMap<u64, AllocationRecord>,
}

fn lock(registry: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    // A panic while holding this lock leaves only bookkeeping behind; keep going.
    registry.lock().unwrap_or_else(|e| e.into_inner())
}

/// A symmetric allocation of `len` elements of `T` in this rank's heap.
///
/// Free it with [`Context::free`] on every rank in the same order. Dropping it does NOT free
/// it (a free is collective and ranks drop at different times): the allocation stays, a
/// warning is logged and [`Context::finalize`] reports it.
#[must_use = "a symmetric buffer must be freed with Context::free on every rank"]
pub struct SymmetricBuffer<T> {
    addr: u64,
    len: usize,
    id: u64,
    context: ContextId,
    registry: Arc<Mutex<Registry>>,
    released: bool,
    _element: PhantomData<*mut T>,
}

impl<T> SymmetricBuffer<T> {
    /// Local address of the first element.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Local address of element `index` (no bounds check: may be one past the end).
    pub fn addr_of(&self, index: usize) -> u64 {
        self.addr + (index * size_of::<T>()) as u64
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn bytes(&self) -> u64 {
        (self.len * size_of::<T>()) as u64
    }
    /// The allocation's sequence number (the same on every rank).
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn context(&self) -> ContextId {
        self.context
    }
}

impl<T> std::fmt::Debug for SymmetricBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymmetricBuffer")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("id", &self.id)
            .finish()
    }
}

impl<T> Drop for SymmetricBuffer<T> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(record) = lock(&self.registry).live.get_mut(&self.id) {
            record.dropped = true;
        }
        tracing::warn!(
            allocation = self.id,
            addr = format_args!("{:#x}", self.addr),
            bytes = self.bytes(),
            "symmetric buffer dropped without Context::free: it stays allocated (free is \
             collective; call ctx.free(buffer) on every rank in the same order)"
        );
    }
}

/// What [`Context::finalize`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalizeReport {
    /// Allocations never freed (including those whose buffer was dropped).
    pub outstanding: Vec<AllocationRecord>,
}

/// Symmetric allocations and their peer-bases tables over one provider.
pub struct Context<P: SymmetricProvider> {
    provider: P,
    id: ContextId,
    next_seq: u64,
    /// Per-peer `peer address - local address`, from one `ptr` sweep at the first allocation.
    offsets: Option<Vec<Option<i64>>>,
    ptr_sweeps: u32,
    registry: Arc<Mutex<Registry>>,
    /// The first collective failure that may have left ranks out of step; every later
    /// collective is refused after it.
    poisoned: Option<String>,
    finalized: bool,
}

impl<P: SymmetricProvider> Context<P> {
    pub fn new(provider: P) -> Self {
        Self {
            provider,
            id: ContextId(NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed)),
            next_seq: 0,
            offsets: None,
            ptr_sweeps: 0,
            registry: Arc::default(),
            poisoned: None,
            finalized: false,
        }
    }

    pub fn id(&self) -> ContextId {
        self.id
    }
    pub fn provider(&self) -> &P {
        &self.provider
    }
    pub fn rank(&self) -> usize {
        self.provider.rank()
    }
    pub fn world_size(&self) -> usize {
        self.provider.world_size()
    }
    /// How many times peers were swept with `ptr` (1 after the first allocation, then stays).
    pub fn ptr_sweeps(&self) -> u32 {
        self.ptr_sweeps
    }
    /// Allocations not yet freed, including dropped ones.
    pub fn outstanding(&self) -> Vec<AllocationRecord> {
        lock(&self.registry).live.values().cloned().collect()
    }

    /// Collective: allocates `len` elements of `T` and returns the buffer with its table.
    pub fn allocate_symmetric<T>(
        &mut self,
        len: usize,
    ) -> Result<(SymmetricBuffer<T>, PeerTable), Error> {
        let (buffer, map) = self.allocate_symmetric_map(len)?;
        Ok((buffer, map.table))
    }

    /// Collective: allocates `len` elements of `T` and returns the buffer with its address map.
    pub fn allocate_symmetric_map<T>(
        &mut self,
        len: usize,
    ) -> Result<(SymmetricBuffer<T>, AddressMap), Error> {
        let type_name = std::any::type_name::<T>();
        if len == 0 || size_of::<T>() == 0 {
            return Err(Error::ZeroLength { type_name });
        }
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(Error::SizeOverflow {
                len,
                elem_size: size_of::<T>(),
            })? as u64;
        let op = self.begin(CollectiveKind::Malloc { bytes })?;
        let addr = self
            .provider
            .malloc(bytes, &op)
            .map_err(|e| self.poison(e))?;
        let record = AllocationRecord {
            id: op.seq,
            addr,
            bytes,
            type_name,
            dropped: false,
        };
        lock(&self.registry).live.insert(op.seq, record);
        let buffer = SymmetricBuffer {
            addr,
            len,
            id: op.seq,
            context: self.id,
            registry: Arc::clone(&self.registry),
            released: false,
            _element: PhantomData,
        };
        if self.offsets.is_none() {
            let swept = self.sweep_peers(addr);
            if let Err(e) = swept {
                // Keep the allocation tracked (it is live on every rank) but stop here.
                return Err(self.poison(e));
            }
        }
        let map = self.map_of(addr, bytes);
        self.provider
            .table_ready(&map.table)
            .map_err(|e| self.poison(e))?;
        Ok((buffer, map))
    }

    /// The address map of an existing buffer (equal to what `allocate_symmetric_map` gave).
    pub fn symmetric_address_map<T>(
        &self,
        buffer: &SymmetricBuffer<T>,
    ) -> Result<AddressMap, Error> {
        self.own(buffer.context, "buffer")?;
        Ok(self.map_of(buffer.addr, buffer.bytes()))
    }

    /// Collective: frees `buffer`. Every rank must free the same allocations in the same order.
    pub fn free<T>(&mut self, mut buffer: SymmetricBuffer<T>) -> Result<(), Error> {
        self.own(buffer.context, "buffer")?;
        // From here on the buffer is handed over: never warn about it as dropped.
        buffer.released = true;
        let op = self.begin(CollectiveKind::Free {
            allocation: buffer.id,
            bytes: buffer.bytes(),
        })?;
        self.provider
            .free(buffer.addr, &op)
            .map_err(|e| self.poison(e))?;
        lock(&self.registry).live.remove(&buffer.id);
        Ok(())
    }

    /// Collective: waits for every rank.
    pub fn barrier(&mut self) -> Result<(), Error> {
        let op = self.begin(CollectiveKind::Barrier)?;
        self.provider.barrier(&op).map_err(|e| self.poison(e))
    }

    /// Collective: ends the context and reports allocations that were never freed (they are
    /// logged as warnings too). Every later collective returns [`Error::Finalized`].
    pub fn finalize(&mut self) -> Result<FinalizeReport, Error> {
        let op = self.begin(CollectiveKind::Finalize)?;
        self.provider.finalize(&op).map_err(|e| self.poison(e))?;
        self.finalized = true;
        Ok(FinalizeReport {
            outstanding: self.report_outstanding(),
        })
    }

    /// Validates a table against this context and the peer it targets.
    fn check_table(&self, table: &PeerTable, peers: &[usize]) -> Result<(), Error> {
        self.own(table.context, "peer table")?;
        if table.world_size() != self.world_size() || table.local_rank() != self.rank() {
            return Err(Error::ForeignTable {
                table_rank: table.local_rank(),
                table_world: table.world_size(),
                rank: self.rank(),
                world: self.world_size(),
            });
        }
        for &peer in peers {
            table.require_direct(peer)?;
        }
        Ok(())
    }

    fn own(&self, found: ContextId, what: &'static str) -> Result<(), Error> {
        if found == self.id {
            Ok(())
        } else {
            Err(Error::ForeignContext {
                what,
                expected: self.id.0,
                found: found.0,
            })
        }
    }

    fn begin(&mut self, kind: CollectiveKind) -> Result<CollectiveOp, Error> {
        if self.finalized {
            return Err(Error::Finalized);
        }
        if let Some(first) = &self.poisoned {
            return Err(Error::Poisoned {
                first: first.clone(),
            });
        }
        let op = CollectiveOp {
            seq: self.next_seq,
            kind,
        };
        self.next_seq += 1;
        Ok(op)
    }

    /// Refuses every later collective after `error`, unless every rank saw the collective
    /// fail alike ([`Error::leaves_ranks_in_step`]): then they are still in step (each rank
    /// issued it, so sequence numbers still agree) and may go on.
    fn poison(&mut self, error: Error) -> Error {
        if self.poisoned.is_none() && !error.leaves_ranks_in_step() {
            self.poisoned = Some(error.to_string());
        }
        error
    }

    fn sweep_peers(&mut self, addr: u64) -> Result<(), Error> {
        let rank = self.rank();
        let world_size = self.world_size();
        self.ptr_sweeps += 1;
        let offsets: Vec<Option<i64>> = (0..world_size)
            .map(|peer| {
                if peer == rank {
                    Some(0)
                } else {
                    self.provider
                        .ptr(addr, peer)
                        .map(|p| p.wrapping_sub(addr) as i64)
                }
            })
            .collect();
        let reachable_peers = offsets.iter().filter(|o| o.is_some()).count() - 1;
        self.offsets = Some(offsets);
        if world_size > 1 && reachable_peers == 0 && self.provider.topology().single_node() {
            return Err(Error::NoPeerReachable {
                provider: self.provider.kind(),
                world_size,
            });
        }
        Ok(())
    }

    fn map_of(&self, base: u64, bytes: u64) -> AddressMap {
        let offsets = self
            .offsets
            .as_ref()
            .expect("offsets are swept at the first allocation");
        let bases = offsets
            .iter()
            .map(|o| o.map_or(0, |off| base.wrapping_add(off as u64)))
            .collect();
        AddressMap {
            local_rank: self.rank(),
            base,
            bytes,
            table: PeerTable::from_parts(self.id, self.rank(), bases),
        }
    }

    fn report_outstanding(&self) -> Vec<AllocationRecord> {
        let outstanding = self.outstanding();
        for record in &outstanding {
            tracing::warn!(
                allocation = record.id,
                addr = format_args!("{:#x}", record.addr),
                bytes = record.bytes,
                r#type = record.type_name,
                dropped = record.dropped,
                "symmetric allocation never freed"
            );
        }
        outstanding
    }
}

impl<P: TranslatedOps> Context<P> {
    /// Stores `values` at `dst` (a local address) translated to peer `to` through `table`.
    pub fn store_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        values: &[u64],
    ) -> Result<(), Error> {
        self.check_table(table, &[self.rank(), to])?;
        self.provider.store_u64(table, dst, to, values)
    }

    /// Loads from `src` (a local address) translated to peer `from` through `table`.
    pub fn load_u64(
        &self,
        table: &PeerTable,
        src: u64,
        from: usize,
        out: &mut [u64],
    ) -> Result<(), Error> {
        self.check_table(table, &[self.rank(), from])?;
        self.provider.load_u64(table, src, from, out)
    }

    /// Copies `bytes` from `src` on `src_rank` to `dst` on `dst_rank`; both pointers are local
    /// addresses translated through the one `table`. Overlapping ranges (same rank) are refused
    /// with [`TranslateError::OverlappingCopy`] on every provider: the host could `memmove`,
    /// but a GPU copy kernel's threads run in no order, so the result would differ by provider.
    pub fn copy_bytes(
        &self,
        table: &PeerTable,
        src: u64,
        src_rank: usize,
        dst: u64,
        dst_rank: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        self.check_table(table, &[self.rank(), src_rank, dst_rank])?;
        // Distinct ranks are distinct heaps; within one, [src, src+bytes) ∩ [dst, dst+bytes).
        if src_rank == dst_rank
            && bytes > 0
            && src < dst.saturating_add(bytes)
            && dst < src.saturating_add(bytes)
        {
            return Err(Error::Translate(TranslateError::OverlappingCopy {
                src,
                dst,
                rank: src_rank,
                bytes,
            }));
        }
        self.provider
            .copy_bytes(table, src, src_rank, dst, dst_rank, bytes)
    }

    /// Atomically adds `value` at `dst` (a local address) translated to peer `to`.
    pub fn atomic_add_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        value: u64,
    ) -> Result<(), Error> {
        self.check_table(table, &[self.rank(), to])?;
        self.provider.atomic_add_u64(table, dst, to, value)
    }

    /// Reads this rank's own copy of `buffer`.
    pub fn read<T: Plain>(&self, buffer: &SymmetricBuffer<T>) -> Result<Vec<T>, Error> {
        self.own(buffer.context, "buffer")?;
        // SAFETY: `Plain` types are valid for every bit pattern, zeros included.
        let mut out = vec![unsafe { std::mem::zeroed::<T>() }; buffer.len];
        // SAFETY: `out` holds `buffer.len` initialised `T`s without padding (`Plain`); any bytes
        // written into them form valid `T`s.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), buffer.bytes() as usize)
        };
        self.provider.read_local(buffer.addr, bytes)?;
        Ok(out)
    }

    /// Writes this rank's own copy of `buffer`.
    pub fn write<T: Plain>(&self, buffer: &SymmetricBuffer<T>, data: &[T]) -> Result<(), Error> {
        self.own(buffer.context, "buffer")?;
        if data.len() > buffer.len {
            return Err(TranslateError::OutOfBounds {
                addr: buffer.addr,
                len: std::mem::size_of_val(data) as u64,
                rank: self.rank(),
                base: buffer.addr,
                bytes: buffer.bytes(),
            }
            .into());
        }
        // SAFETY: `Plain` types have no padding, so every byte of `data` is initialised.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        self.provider.write_local(buffer.addr, bytes)
    }
}

impl<P: SymmetricProvider> Drop for Context<P> {
    fn drop(&mut self) {
        if !self.finalized {
            let outstanding = self.report_outstanding();
            if !outstanding.is_empty() {
                tracing::warn!(
                    count = outstanding.len(),
                    "context dropped without finalize with allocations outstanding"
                );
            }
        }
    }
}
