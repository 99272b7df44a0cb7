use symmem::settings::HOST_HEAP_SIZE;
use symmem::{Blame, InvalidSetting, ProviderError, ProviderKind, describe_ranks};
use symmem_bootstrap::BootstrapError;

/// Errors of the host provider. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Every rank learnt it and undid its part: the context stays usable.
    #[error(
        "symmetric heap exhausted on {}: {requested} B requested, largest free block \
         {largest_free} B of a {heap_bytes} B heap; nothing was allocated on any rank and the \
         context stays usable: free buffers first, or raise {} (e.g. {}=4G)",
        describe_ranks(.ranks),
        HOST_HEAP_SIZE.name,
        HOST_HEAP_SIZE.name
    )]
    HeapExhausted {
        ranks: Vec<usize>,
        requested: u64,
        largest_free: u64,
        heap_bytes: u64,
    },
    #[error(
        "the ranks' heaps diverged: the same allocation landed at offsets {offsets:?} (by \
         rank), so tables would point at the wrong memory; every rank must issue the same \
         allocations and frees in the same order: check for a rank that freed or allocated \
         on its own, then restart the job"
    )]
    HeapsDiverged { offsets: Vec<String> },
    #[error(
        "rank {rank} has a {bytes} B heap but rank {reference} has {expected} B; give every \
         rank the same {}",
        HOST_HEAP_SIZE.name
    )]
    HeapMismatch {
        rank: usize,
        bytes: u64,
        reference: usize,
        expected: u64,
    },
    #[error(
        "heap size {bytes} B is too small: use at least {min} B ({})",
        HOST_HEAP_SIZE.name
    )]
    HeapTooSmall { bytes: u64, min: u64 },
    #[error(transparent)]
    InvalidSetting(#[from] InvalidSetting),
    #[error(
        "{addr:#x} is not the start of a live symmetric allocation on rank {rank}; free only \
         buffers returned by allocate"
    )]
    NotAnAllocation { addr: u64, rank: usize },
    #[error("{what}: {cause}; check `ulimit -v` and free memory")]
    Os {
        what: &'static str,
        cause: nix::Error,
    },
    #[error(
        "rank {rank} sent a heap of {size} B (or one that can shrink) where {expected} B sealed \
         were announced; are all ranks the same symmem build?"
    )]
    BadPeerHeap {
        rank: usize,
        size: u64,
        expected: u64,
    },
    #[error("rank {rank} sent an unreadable heap description; are all ranks the same build?")]
    BadPeerInfo { rank: usize },
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    RankEnv(#[from] symmem::RankEnvError),
}

impl ProviderError for HostError {
    fn blame(&self) -> Blame {
        match self {
            Self::Bootstrap(b) => b.blame(),
            // Every rank learnt it and undid its part.
            Self::HeapExhausted { .. } => Blame::EveryRank,
            _ => Blame::ThisRank,
        }
    }

    fn into_mismatch(self) -> Result<symmem::CollectiveMismatch, Self> {
        match self {
            Self::Bootstrap(b) => b.into_mismatch().map_err(Self::Bootstrap),
            other => Err(other),
        }
    }
}

impl From<HostError> for symmem::Error {
    fn from(e: HostError) -> Self {
        symmem::Error::from_provider(ProviderKind::Host, e)
    }
}
