use crate::TranslateError;

/// Identifies one [`Context`](crate::Context) in this process, so tables and buffers cannot
/// cross contexts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContextId(pub u64);

/// Per-rank addresses of one symmetric allocation, as seen from this process.
///
/// `bases()[rank]` is the allocation's own address; `bases()[p]` is where this process reaches
/// peer `p`'s copy, or 0 when `p` is not load/store reachable (`direct(p) == false`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTable {
    pub(crate) context: ContextId,
    pub(crate) rank: usize,
    pub(crate) bases: Vec<u64>,
    pub(crate) direct: Vec<bool>,
}

impl PeerTable {
    /// Builds a table from raw parts (providers and tests); `bases[p] == 0` iff `!direct[p]`.
    pub fn from_parts(context: ContextId, rank: usize, bases: Vec<u64>) -> Self {
        let direct = bases.iter().map(|&b| b != 0).collect();
        Self {
            context,
            rank,
            bases,
            direct,
        }
    }

    pub fn context(&self) -> ContextId {
        self.context
    }
    /// The rank whose process this table belongs to.
    pub fn local_rank(&self) -> usize {
        self.rank
    }
    pub fn world_size(&self) -> usize {
        self.bases.len()
    }
    /// Per-rank bases; 0 for peers that are not load/store reachable.
    pub fn bases(&self) -> &[u64] {
        &self.bases
    }
    /// The table as the int64 array kernels take.
    pub fn to_i64(&self) -> Vec<i64> {
        self.bases.iter().map(|&b| b as i64).collect()
    }
    /// Whether `peer` is load/store reachable from this process.
    pub fn direct(&self, peer: usize) -> bool {
        self.direct.get(peer).copied().unwrap_or(false)
    }
    pub fn direct_mask(&self) -> &[bool] {
        &self.direct
    }

    /// Checks that `peer` exists and is load/store reachable.
    pub fn require_direct(&self, peer: usize) -> Result<(), TranslateError> {
        let world_size = self.world_size();
        if peer >= world_size {
            return Err(TranslateError::RankOutOfRange {
                rank: peer,
                world_size,
            });
        }
        if !self.direct[peer] {
            return Err(TranslateError::PeerNotDirect {
                rank: self.rank,
                peer,
            });
        }
        Ok(())
    }

    /// Kernel-style translation `bases[to] + (ptr - bases[from])`, with no bounds check:
    /// valid for a pointer into ANY symmetric allocation, since heaps map linearly.
    pub fn translate(&self, ptr: u64, from: usize, to: usize) -> Result<u64, TranslateError> {
        self.require_direct(from)?;
        self.require_direct(to)?;
        Ok(self.bases[to].wrapping_add(ptr.wrapping_sub(self.bases[from])))
    }
}

/// Everything a kernel needs about one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressMap {
    pub local_rank: usize,
    /// The allocation's address in this process.
    pub base: u64,
    /// The allocation's size in bytes (the same on every rank).
    pub bytes: u64,
    pub table: PeerTable,
}

impl AddressMap {
    /// Per-peer `direct` mask.
    pub fn direct(&self) -> &[bool] {
        self.table.direct_mask()
    }

    /// Reference translation of `addr` (an address in rank `from`'s copy of THIS allocation,
    /// as seen from this process) to rank `to`'s copy. Refuses addresses outside the
    /// allocation and peers that are not load/store reachable.
    pub fn translate(&self, addr: u64, from: usize, to: usize) -> Result<u64, TranslateError> {
        self.check_range(addr, 1, from)?;
        self.table.translate(addr, from, to)
    }

    /// Checks that `[addr, addr + len)` lies inside rank `rank`'s copy of this allocation.
    pub fn check_range(&self, addr: u64, len: u64, rank: usize) -> Result<(), TranslateError> {
        self.table.require_direct(rank)?;
        let base = self.table.bases[rank];
        let limit = base.saturating_add(self.bytes);
        let inside = addr >= base && addr.checked_add(len).is_some_and(|end| end <= limit);
        if inside {
            Ok(())
        } else {
            Err(TranslateError::OutOfBounds {
                addr,
                len,
                rank,
                base,
                bytes: self.bytes,
            })
        }
    }
}
