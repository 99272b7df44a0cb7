use crate::{CollectiveOp, Error, PeerTable, ProviderKind, Topology};

/// A SHMEM-like library that hands out symmetric memory.
///
/// Collective calls (`malloc`, `free`, `barrier`, `finalize`) receive the [`CollectiveOp`] the
/// context is issuing; providers that can compare it across ranks
/// ([`checks_collective_order`](Self::checks_collective_order)) return
/// [`Error::CollectiveMismatch`] on disagreement instead of hanging.
pub trait SymmetricProvider {
    /// Which provider this is; messages print its name (`host`, `nvshmem`, `rocshmem`).
    fn kind(&self) -> ProviderKind;
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Which node every rank is on, as the control plane found at the start (the only
    /// source of "same node" and "one host"). When every rank is on one node, every peer
    /// should be load/store reachable: that catches a library built without IPC.
    fn topology(&self) -> &Topology;
    /// True when collectives carry their [`CollectiveOp`] to the other ranks and compare it.
    fn checks_collective_order(&self) -> bool;
    /// Collective: allocates `bytes` of symmetric memory, returns its local address.
    fn malloc(&mut self, bytes: u64, op: &CollectiveOp) -> Result<u64, Error>;
    /// Collective: frees the allocation at `addr`.
    fn free(&mut self, addr: u64, op: &CollectiveOp) -> Result<(), Error>;
    /// Collective: waits for every rank.
    fn barrier(&mut self, op: &CollectiveOp) -> Result<(), Error>;
    /// Collective: the last call on this provider.
    fn finalize(&mut self, op: &CollectiveOp) -> Result<(), Error> {
        self.barrier(op)
    }
    /// Called once per allocation with its table before the table is handed out. Providers
    /// that keep a device copy of each table (for kernels) upload it here; `free` of the
    /// allocation at `table.bases()[rank]` releases it.
    fn table_ready(&mut self, table: &PeerTable) -> Result<(), Error> {
        let _ = table;
        Ok(())
    }
    /// This process's address of `peer`'s copy of the symmetric address `addr`, or `None`
    /// when `peer` is not load/store reachable. `ptr(addr, rank()) == Some(addr)`.
    fn ptr(&self, addr: u64, peer: usize) -> Option<u64>;
}

/// Data movement through a peer-bases table, as a kernel does it: every pointer is a local
/// address that is translated with `table[to] + (ptr - table[rank])`.
///
/// The [`Context`](crate::Context) validates the table (its context, ranks, `direct`) before
/// calling these; implementations must still refuse a translated range that leaves the
/// peer's heap.
pub trait TranslatedOps: SymmetricProvider {
    /// Stores `values` at `dst` translated to peer `to`.
    fn store_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        values: &[u64],
    ) -> Result<(), Error>;
    /// Loads `out.len()` values from `src` translated to peer `from`.
    fn load_u64(
        &self,
        table: &PeerTable,
        src: u64,
        from: usize,
        out: &mut [u64],
    ) -> Result<(), Error>;
    /// Copies `bytes` from `src` on `src_rank` to `dst` on `dst_rank` (two pointers, one table,
    /// as Iris's copy does).
    fn copy_bytes(
        &self,
        table: &PeerTable,
        src: u64,
        src_rank: usize,
        dst: u64,
        dst_rank: usize,
        bytes: u64,
    ) -> Result<(), Error>;
    /// Atomically adds `value` to the u64 at `dst` translated to peer `to`.
    fn atomic_add_u64(
        &self,
        table: &PeerTable,
        dst: u64,
        to: usize,
        value: u64,
    ) -> Result<(), Error>;
    /// Reads this rank's own symmetric memory.
    fn read_local(&self, addr: u64, out: &mut [u8]) -> Result<(), Error>;
    /// Writes this rank's own symmetric memory.
    fn write_local(&self, addr: u64, data: &[u8]) -> Result<(), Error>;
}
