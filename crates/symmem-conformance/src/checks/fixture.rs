//! What several checks share: two allocations and their tables ([`Fixture`]), and the data
//! pattern the checks write.

use symmem::{Context, Error, PeerTable, SymmetricBuffer, TranslatedOps};

/// The word the checks write at index `i` of rank `rank`'s buffers.
pub(super) fn pattern(rank: usize, i: usize) -> u64 {
    ((rank as u64 + 1) << 32) | i as u64
}

pub(super) const B_LEN: usize = 128;
pub(super) const CHUNK: usize = 8;

/// What the checks share: allocations A (a slot per rank, at least 64 words) and B (`B_LEN`
/// words), made by every rank in that order, with their peer-bases tables.
#[derive(Debug)]
pub(super) struct Fixture {
    pub(super) a: SymmetricBuffer<u64>,
    pub(super) ta: PeerTable,
    pub(super) b: SymmetricBuffer<u64>,
    pub(super) tb: PeerTable,
}

impl Fixture {
    /// Collective: allocates A, then B.
    pub(super) fn allocate<P: TranslatedOps>(ctx: &mut Context<P>) -> Result<Self, Error> {
        let (a, ta) = ctx.allocate_symmetric::<u64>(ctx.world_size().max(64))?;
        let (b, tb) = ctx.allocate_symmetric::<u64>(B_LEN)?;
        Ok(Self { a, ta, b, tb })
    }

    /// Collective: frees B, then A.
    pub(super) fn free<P: TranslatedOps>(self, ctx: &mut Context<P>) -> Result<(), Error> {
        ctx.free(self.b)?;
        ctx.free(self.a)
    }

    /// The ranks this rank reaches by load/store (itself included), as A's table says.
    pub(super) fn reachable(&self) -> Vec<usize> {
        (0..self.ta.bases().len())
            .filter(|&p| self.ta.direct(p))
            .collect()
    }
}
