//! One provider's GPU side: its symmetric allocations, device tables and staging, and every
//! launch, validated before the shim sees it.

use super::buffer::TableArena;
use super::{DeviceBuffer, Shim, ShimError};
use std::cell::{Cell, Ref, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::Duration;
use symmem::{ContextId, Error, PeerTable, TranslateError};
use symmem_shim_sys as sys;

/// Where one rank's GPU is: its host (as the job's [`Topology`](symmem::Topology) numbers hosts)
/// and PCI bus id (ordinals differ between processes with different visible-device lists; bus
/// ids do not).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GpuId {
    pub host: u64,
    pub bus_id: String,
}

/// The translation a kernel takes: one allocation's device table, the job's PE count and the
/// PE whose local addresses the kernel is given, or no translation at all.
///
/// Valid by construction: a translated team borrows a live device table of its [`Gpu`].
pub struct Team<'a> {
    raw: sys::symmem_shim_team,
    _table: PhantomData<&'a DeviceBuffer>,
}

impl Team<'_> {
    /// No translation: kernels use their pointers as they are.
    fn untranslated(pe: usize, n_pes: usize) -> Self {
        Self {
            raw: sys::symmem_shim_team {
                table: std::ptr::null(),
                n_pes: super::to_c_int(n_pes),
                pe: super::to_c_int(pe),
            },
            _table: PhantomData,
        }
    }

    pub(super) fn raw(&self) -> sys::symmem_shim_team {
        self.raw
    }
}

/// The device copy of one allocation's table (a slot of the [`TableArena`]), the context that
/// built it, and the bases it holds (launches are validated against these, not against a
/// caller's table).
///
/// The slot is filled by the first launch that uses the table, on the shim's stream ahead of
/// it: an allocation that no launch uses costs the GPU runtime nothing.
struct DeviceTable {
    slot: u64,
    uploaded: Cell<bool>,
    context: ContextId,
    bases: Vec<u64>,
    /// The entries kernels read: `bases` as int64, 0 for a peer kernels cannot reach.
    entries: Vec<i64>,
}

impl DeviceTable {
    /// Whether kernels may reach `peer` through this table.
    fn direct(&self, peer: usize) -> bool {
        self.bases.get(peer).is_some_and(|&b| b != 0)
    }
}

/// One provider's GPU side (see the module docs). The bench reaches it through
/// [`GpuProvider::gpu`](crate::GpuProvider::gpu).
pub struct Gpu {
    shim: Rc<Shim>,
    rank: usize,
    world_size: usize,
    gpus: Rc<[GpuId]>,
    /// Live symmetric allocations: local address -> bytes (the same on every PE).
    allocations: BTreeMap<u64, u64>,
    /// Device copy of each allocation's table, by the allocation's local address.
    tables: HashMap<u64, DeviceTable>,
    /// Where the device copies live.
    arena: TableArena,
    staging: RefCell<Option<DeviceBuffer>>,
}

impl Gpu {
    pub(crate) fn new(shim: Rc<Shim>, rank: usize, world_size: usize, gpus: Rc<[GpuId]>) -> Self {
        Self {
            arena: TableArena::new(&shim, world_size),
            shim,
            rank,
            world_size,
            gpus,
            allocations: BTreeMap::new(),
            tables: HashMap::new(),
            staging: RefCell::new(None),
        }
    }

    pub(crate) fn shim(&self) -> &Rc<Shim> {
        &self.shim
    }

    /// The GPU of every rank, by rank.
    pub fn gpus(&self) -> &[GpuId] {
        &self.gpus
    }

    /// How many distinct GPUs the ranks use.
    pub fn distinct_gpus(&self) -> usize {
        distinct(&self.gpus)
    }

    // ---- symmetric memory ---------------------------------------------------------------

    /// Collective (the library's own, with no order check: the provider checks before):
    /// `bytes` of symmetric memory; its local address.
    pub fn malloc(&mut self, bytes: u64) -> Result<u64, Error> {
        let addr = self.shim.malloc(bytes).map_err(Error::from)?;
        self.allocations.insert(addr, bytes);
        Ok(addr)
    }

    /// Collective: frees the live allocation at `addr` and its device table.
    pub fn free(&mut self, addr: u64) -> Result<(), Error> {
        if self.allocations.remove(&addr).is_none() {
            return Err(Error::from(ShimError::NoAllocation {
                backend: self.shim.backend(),
                addr,
            }));
        }
        // The slot serves the next table: its next upload is queued after every kernel that
        // read this one.
        if let Some(table) = self.tables.remove(&addr) {
            self.arena.give_back(table.slot);
        }
        // SAFETY: `addr` was a live allocation of this library (removed above, so freed once);
        // its table is gone and staging never points into symmetric memory.
        unsafe { self.shim.free(addr) }.map_err(Error::from)
    }

    /// This process's address of `peer`'s copy of `addr`, or `None` when `addr` is not in a
    /// live allocation or the library cannot reach `peer` by load/store.
    pub fn peer_address(&self, addr: u64, peer: usize) -> Option<u64> {
        if peer >= self.world_size || !self.live(addr, 1) {
            return None;
        }
        // SAFETY: `addr` lies inside a live allocation (checked above).
        match unsafe { self.shim.ptr(addr, peer) } {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!("{e}; treating PE {peer} as unreachable");
                None
            }
        }
    }

    /// Collective: the library's barrier (after draining the stream).
    pub fn barrier_all(&self) -> Result<(), Error> {
        self.shim.barrier_all().map_err(Error::from)
    }

    /// Records the device copy of `table` (an allocation of this `Gpu`): a slot of the arena,
    /// filled by the first launch that uses it (no call into the GPU runtime here).
    pub(crate) fn table_ready(&mut self, table: &PeerTable) -> Result<(), Error> {
        let base = table.bases().get(self.rank).copied().unwrap_or(0);
        if !self.allocations.contains_key(&base) {
            return Err(Error::from(ShimError::NoAllocation {
                backend: self.shim.backend(),
                addr: base,
            }));
        }
        let entries = table.to_i64();
        if entries.len() * 8 > self.arena.slot_bytes() {
            return Err(Error::ForeignTable {
                table_rank: table.local_rank(),
                table_world: table.world_size(),
                rank: self.rank,
                world: self.world_size,
            });
        }
        // A table made again for the same allocation keeps its slot; the new upload is queued
        // after every kernel that read the old one.
        let slot = match self.tables.remove(&base) {
            Some(old) => old.slot,
            None => self.arena.take().map_err(Error::from)?,
        };
        self.tables.insert(
            base,
            DeviceTable {
                slot,
                uploaded: Cell::new(false),
                context: table.context(),
                bases: table.bases().to_vec(),
                entries,
            },
        );
        Ok(())
    }

    /// Queues the upload of `device`'s entries into its slot unless done before.
    fn upload(&self, device: &DeviceTable) -> Result<(), Error> {
        if device.uploaded.get() {
            return Ok(());
        }
        let bytes: Vec<u8> = device
            .entries
            .iter()
            .flat_map(|entry| entry.to_ne_bytes())
            .collect();
        // SAFETY: the slot is arena memory of `slot_bytes` >= `bytes.len()` (checked in
        // `table_ready`); kernels that read it are queued on the same stream, after this copy.
        unsafe { self.shim.copy_to_device_async(device.slot, &bytes) }.map_err(Error::from)?;
        device.uploaded.set(true);
        Ok(())
    }

    /// A device copy of `table` (an allocation of this context, not freed) for code outside
    /// symmem, e.g. Python kernels: `n_pes` int64 entries, each peer's base or 0 for a peer
    /// kernels cannot reach. It is a buffer of its own, so whatever that code writes into it
    /// never reaches the tables this provider's launches read. Complete when this returns;
    /// freed when dropped, which must happen before the provider is finalised.
    pub fn export_table(&self, table: &PeerTable) -> Result<ExportedTable, Error> {
        self.device_table(table)?;
        let bytes: Vec<u8> = table
            .to_i64()
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let buffer = DeviceBuffer::with_contents(&self.shim, &bytes).map_err(Error::from)?;
        self.synchronize()?;
        Ok(ExportedTable { buffer })
    }

    /// Drops every device table and the staging buffer, and forgets the allocations (the
    /// provider's finalize: the library's memory goes with the library).
    pub(crate) fn release(&mut self) -> Result<(), Error> {
        let drained = self.synchronize();
        self.tables.clear();
        self.arena.clear();
        self.staging.borrow_mut().take();
        self.allocations.clear();
        drained
    }

    /// Free and total memory of this process's GPU in bytes, as the runtime reports them:
    /// device-wide, so other processes on the same GPU (peers sharing it) count too.
    pub fn device_memory(&self) -> Result<(u64, u64), Error> {
        self.shim.device_memory().map_err(Error::from)
    }

    /// Waits for everything queued on the shim's stream.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.shim.synchronize().map_err(Error::from)
    }

    /// Waits for everything this process queued on its GPU, on any stream of the device's
    /// primary context, which torch, cupy and Triton share: no kernel of theirs still touches
    /// symmetric memory when this returns. A kernel that failed is reported here.
    pub fn device_synchronize(&self) -> Result<(), Error> {
        self.shim.device_synchronize().map_err(Error::from)
    }

    /// GPU time of the work `queue` puts on the shim's stream (events around it).
    pub fn time(&self, queue: impl FnOnce(&Self) -> Result<(), Error>) -> Result<Duration, Error> {
        self.shim.time_start().map_err(Error::from)?;
        queue(self)?;
        self.shim.time_stop().map_err(Error::from)
    }

    // ---- validation ---------------------------------------------------------------------

    /// `[ptr, ptr + len)` lies inside one live allocation.
    fn live(&self, ptr: u64, len: u64) -> bool {
        self.allocations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&base, &bytes)| {
                ptr.checked_add(len)
                    .is_some_and(|end| end <= base.saturating_add(bytes))
            })
    }

    /// `[ptr, ptr + len)` lies inside one live allocation of this rank and is aligned.
    fn check_local(&self, ptr: u64, len: u64, align: u64, what: &'static str) -> Result<(), Error> {
        if !ptr.is_multiple_of(align) {
            return Err(TranslateError::Misaligned {
                addr: ptr,
                align,
                what,
            }
            .into());
        }
        if self.live(ptr, len) {
            Ok(())
        } else {
            Err(TranslateError::OutsideHeap {
                addr: ptr,
                len,
                peer: self.rank,
            }
            .into())
        }
    }

    /// The device table of `table`, which must come from this `Gpu`'s context and be live.
    fn device_table(&self, table: &PeerTable) -> Result<&DeviceTable, Error> {
        let base = table.bases().get(self.rank).copied().unwrap_or(0);
        match self.tables.get(&base) {
            Some(t) if t.context == table.context() => Ok(t),
            Some(t) => Err(Error::ForeignContext {
                what: "peer table",
                expected: t.context.0,
                found: table.context().0,
            }),
            None => Err(Error::from(ShimError::NoDeviceTable {
                backend: self.shim.backend(),
                base,
            })),
        }
    }

    /// Checks an operation before any kernel runs: this rank and every peer load/store
    /// reachable (in `table` and in the device table kernels will read) and
    /// `[ptr, ptr + len)` inside one live allocation, aligned to `align`. Peers' copies sit at
    /// the same offsets, so the translated range is inside the peer's copy too: no wild
    /// pointer reaches a kernel, whoever calls. Returns the team to launch with.
    fn reach(
        &self,
        table: &PeerTable,
        ptr: u64,
        peers: &[usize],
        len: u64,
        align: u64,
        what: &'static str,
    ) -> Result<(&DeviceTable, Team<'_>), Error> {
        table.require_direct(self.rank)?;
        for &peer in peers {
            table.require_direct(peer)?;
        }
        let device = self.device_table(table)?;
        for &peer in peers.iter().chain([&self.rank]) {
            if !device.direct(peer) {
                return Err(TranslateError::PeerNotDirect {
                    rank: self.rank,
                    peer,
                }
                .into());
            }
        }
        self.check_local(ptr, len, align, what)?;
        self.upload(device)?;
        let team = Team {
            raw: sys::symmem_shim_team {
                table: device.slot as *const i64,
                n_pes: super::to_c_int(self.world_size),
                pe: super::to_c_int(self.rank),
            },
            _table: PhantomData,
        };
        Ok((device, team))
    }

    /// A scratch device buffer of at least `bytes`, reused between operations.
    fn staging(&self, bytes: usize) -> Result<Ref<'_, DeviceBuffer>, Error> {
        {
            let mut slot = self.staging.borrow_mut();
            if slot.as_ref().is_none_or(|b| b.bytes() < bytes) {
                // The old buffer goes first (the runtime's free waits for work that uses it).
                slot.take();
                let buf = DeviceBuffer::new(&self.shim, bytes.max(4096).next_power_of_two())
                    .map_err(Error::from)?;
                *slot = Some(buf);
            }
        }
        Ok(Ref::map(self.staging.borrow(), |slot| {
            slot.as_ref().expect("staging was just made")
        }))
    }

    // ---- launches: queued on the shim's stream ------------------------------------------

    /// Queues a store of `values` at `dst` translated to `to`.
    pub fn store_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        values: &[u64],
    ) -> Result<(), Error> {
        let len = std::mem::size_of_val(values);
        let (_, team) = self.reach(table, dst, &[to], len as u64, 8, "u64 store")?;
        let staging = self.staging(len)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        staging.upload(&bytes).map_err(Error::from)?;
        // SAFETY: `reach` checked the team and the range; staging holds `values.len()` u64.
        unsafe {
            self.shim
                .store_u64(&team, to, dst, staging.addr(), values.len())
        }
        .map_err(Error::from)
    }

    /// Loads `out.len()` values from `src` translated to `from` (waits for them).
    pub fn load_u64(
        &self,
        table: &PeerTable,
        src: u64,
        from: usize,
        out: &mut [u64],
    ) -> Result<(), Error> {
        let len = std::mem::size_of_val(out);
        let (_, team) = self.reach(table, src, &[from], len as u64, 8, "u64 load")?;
        let staging = self.staging(len)?;
        // SAFETY: `reach` checked the team and the range; staging holds `out.len()` u64.
        unsafe {
            self.shim
                .load_u64(&team, from, src, staging.addr(), out.len())
        }
        .map_err(Error::from)?;
        let mut bytes = vec![0u8; len];
        staging.download(&mut bytes).map_err(Error::from)?;
        for (value, chunk) in out.iter_mut().zip(bytes.chunks_exact(8)) {
            *value = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
        }
        Ok(())
    }

    /// Queues the translated copy kernel: `bytes` from `src` on `src_pe` to `dst` on `dst_pe`,
    /// both local addresses translated through `table` (as Iris's copy does).
    pub fn copy(
        &self,
        table: &PeerTable,
        src: u64,
        src_pe: usize,
        dst: u64,
        dst_pe: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        self.reach(table, src, &[src_pe], bytes, 1, "copy")?;
        let (_, team) = self.reach(table, dst, &[dst_pe], bytes, 1, "copy")?;
        // SAFETY: `reach` checked both ranges on reachable PEs and the team.
        unsafe { self.shim.copy(&team, src, src_pe, dst, dst_pe, bytes) }.map_err(Error::from)
    }

    /// Queues the same copy kernel with no table: from local `src` to `dst` on `dst_pe`, whose
    /// address is translated here, once, on the host (the translation's own cost is the
    /// difference to [`Gpu::copy`]).
    pub fn copy_untranslated(
        &self,
        table: &PeerTable,
        src: u64,
        dst: u64,
        dst_pe: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        self.check_local(src, bytes, 1, "copy")?;
        let target = self.peer_range(table, dst, dst_pe, bytes)?;
        let team = Team::untranslated(self.rank, self.world_size);
        // SAFETY: `src` lies in a live local allocation; `target` is the peer's mapped copy of
        // a live allocation range (translated with this Gpu's own table).
        unsafe { self.shim.copy(&team, src, self.rank, target, dst_pe, bytes) }.map_err(Error::from)
    }

    /// Queues the runtime's device-to-device copy between two local ranges (the baseline).
    pub fn copy_runtime(&self, src: u64, dst: u64, bytes: u64) -> Result<(), Error> {
        self.check_local(src, bytes, 1, "copy")?;
        self.check_local(dst, bytes, 1, "copy")?;
        // SAFETY: both ranges lie in live allocations of this rank.
        unsafe { self.shim.copy_device_async(dst, src, bytes) }.map_err(Error::from)
    }

    /// Queues the runtime's peer copy from local `src` into `dst` on `dst_pe` (the baseline for
    /// copies into a peer).
    pub fn copy_peer_runtime(
        &self,
        table: &PeerTable,
        src: u64,
        dst: u64,
        dst_pe: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        self.check_local(src, bytes, 1, "copy")?;
        let target = self.peer_range(table, dst, dst_pe, bytes)?;
        let bus_id = &self.gpus[dst_pe].bus_id;
        // SAFETY: `src` lies in a live local allocation; `target` is the peer's mapped copy of a
        // live allocation range, on the GPU `bus_id` names (the peer said so at start).
        unsafe { self.shim.copy_peer_async(target, bus_id, src, bytes) }.map_err(Error::from)
    }

    /// Queues the fill kernel: `count` u64 of `value` at `dst` translated to `to` through
    /// `table`, or plain local stores at `dst` when `table` is `None`.
    pub fn fill_u64(
        &self,
        table: Option<&PeerTable>,
        dst: u64,
        to: usize,
        value: u64,
        count: u64,
    ) -> Result<(), Error> {
        let len = count.saturating_mul(8);
        let team = match table {
            Some(table) => self.reach(table, dst, &[to], len, 8, "fill")?.1,
            None => {
                self.check_local(dst, len, 8, "fill")?;
                Team::untranslated(self.rank, self.world_size)
            }
        };
        let to = if table.is_some() { to } else { self.rank };
        // SAFETY: the range was checked to lie in a live allocation on a reachable PE.
        unsafe { self.shim.fill_u64(&team, to, dst, value, count) }.map_err(Error::from)
    }

    /// Queues one atomic add of `value` to the u64 at `dst` translated to `to`.
    pub fn atomic_add_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        value: u64,
    ) -> Result<(), Error> {
        let (_, team) = self.reach(table, dst, &[to], 8, 8, "u64 atomic add")?;
        // SAFETY: `reach` checked the u64 on a reachable PE and the team.
        unsafe { self.shim.atomic_add_u64(&team, to, dst, value) }.map_err(Error::from)
    }

    /// Copies this rank's symmetric memory at `addr` into `out` (waits for queued work).
    pub fn read_local(&self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        self.check_local(addr, out.len() as u64, 1, "read")?;
        // SAFETY: the range lies in a live allocation of this rank.
        unsafe { self.shim.copy_to_host(out, addr) }.map_err(Error::from)
    }

    /// Queues a copy of `data` into this rank's symmetric memory at `addr`.
    pub fn write_local(&self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.check_local(addr, data.len() as u64, 1, "write")?;
        // SAFETY: the range lies in a live allocation of this rank; kernels that use it are
        // ordered with this copy on the one stream.
        unsafe { self.shim.copy_to_device_async(addr, data) }.map_err(Error::from)
    }

    /// `[dst, dst + len)`, a local range of a live allocation, as this process's address of
    /// `peer`'s copy, translated with this `Gpu`'s own record of `table`.
    fn peer_range(&self, table: &PeerTable, dst: u64, peer: usize, len: u64) -> Result<u64, Error> {
        let (device, _) = self.reach(table, dst, &[peer], len, 1, "copy")?;
        Ok(device.bases[peer].wrapping_add(dst.wrapping_sub(device.bases[self.rank])))
    }
}

/// How many distinct GPUs `gpus` name.
pub(crate) fn distinct(gpus: &[GpuId]) -> usize {
    gpus.iter().collect::<std::collections::HashSet<_>>().len()
}

/// A device copy of one allocation's table handed to code outside symmem
/// ([`Gpu::export_table`]); frees itself when dropped.
pub struct ExportedTable {
    buffer: DeviceBuffer,
}

impl ExportedTable {
    /// Device address of the entries.
    pub fn addr(&self) -> u64 {
        self.buffer.addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(host: u64, bus: &str) -> GpuId {
        GpuId {
            host,
            bus_id: bus.into(),
        }
    }

    #[test]
    fn ranks_on_one_gpu_count_once_and_hosts_keep_equal_bus_ids_apart() {
        let one = [id(0, "0000:3b:00.0"), id(0, "0000:3b:00.0")];
        assert_eq!(distinct(&one), 1);
        let two = [id(0, "0000:3b:00.0"), id(0, "0000:5c:00.0")];
        assert_eq!(distinct(&two), 2);
        let hosts = [id(0, "0000:3b:00.0"), id(1, "0000:3b:00.0")];
        assert_eq!(distinct(&hosts), 2);
    }
}
