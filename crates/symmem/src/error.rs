use crate::collective::CollectiveMismatch;
use crate::provider_kind::ProviderKind;
use crate::ranks::count_ranks;

/// Why a pointer or an operation could not be translated to a peer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    #[error(
        "rank {rank} is out of range for a world of {}",
        count_ranks(*.world_size)
    )]
    RankOutOfRange { rank: usize, world_size: usize },
    #[error(
        "address {addr:#x} (+{len} B) is outside rank {rank}'s copy of the allocation \
         [{base:#x}, {base:#x} + {bytes} B); translate only pointers into this allocation, \
         or use the table of the allocation the pointer belongs to"
    )]
    OutOfBounds {
        addr: u64,
        len: u64,
        rank: usize,
        base: u64,
        bytes: u64,
    },
    #[error(
        "peer {peer} is not load/store reachable from rank {rank} (another node, or no IPC \
         mapping): its table entry is 0 and direct = false; use the provider's put/get \
         instead of a direct store or load"
    )]
    PeerNotDirect { rank: usize, peer: usize },
    #[error(
        "address {addr:#x} is not aligned to {align} bytes, which a {what} needs; use an \
         element offset that is a multiple of the element size"
    )]
    Misaligned {
        addr: u64,
        align: u64,
        what: &'static str,
    },
    #[error(
        "the translated range {addr:#x} (+{len} B) on peer {peer} is outside that peer's \
         symmetric heap; the pointer does not belong to a symmetric allocation"
    )]
    OutsideHeap { addr: u64, len: u64, peer: usize },
    #[error(
        "a copy of {bytes} B from {src:#x} to {dst:#x} on rank {rank} overlaps itself: copies \
         between overlapping ranges are refused on every provider (a GPU copy kernel has no \
         memmove order); copy through a second buffer, or in pieces that do not overlap"
    )]
    OverlappingCopy {
        src: u64,
        dst: u64,
        rank: usize,
        bytes: u64,
    },
}

/// Errors of the core crate and of the providers behind it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot allocate zero elements of {type_name}: ask for at least one element \
         (symmetric allocations must have the same non-zero size on every rank)"
    )]
    ZeroLength { type_name: &'static str },
    #[error("{len} elements of {elem_size} B overflow the address space; allocate fewer elements")]
    SizeOverflow { len: usize, elem_size: usize },
    #[error(transparent)]
    CollectiveMismatch(#[from] CollectiveMismatch),
    #[error(
        "this context is unusable after an earlier collective failed ({first}); ranks may be \
         out of step, so no further collective is attempted: finish every rank and restart"
    )]
    Poisoned { first: String },
    /// A collective that every rank reached and that failed on every rank alike, each rank
    /// knowing that all of them failed (e.g. out of heap on any rank: every rank undid its
    /// part). The ranks are still in step, so the context stays usable.
    #[error("{provider}: {cause}")]
    RefusedByAll {
        provider: ProviderKind,
        /// The provider's error. Part of this error's text, so not its `source()`: a printer
        /// of error chains (anyhow's `{:#}`) would show it twice.
        cause: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    #[error(
        "provider {provider} says all {world_size} ranks share one node, yet no peer is \
         load/store reachable: the provider was likely built without IPC (rocSHMEM: rebuild \
         with -DUSE_IPC=ON, e.g. `cargo xtask build-rocshmem`; NVSHMEM: check peer access \
         between the GPUs)"
    )]
    NoPeerReachable {
        provider: ProviderKind,
        world_size: usize,
    },
    #[error(
        "{what} belongs to context {found} but was used with context {expected}; use the \
         context that allocated it"
    )]
    ForeignContext {
        what: &'static str,
        expected: u64,
        found: u64,
    },
    #[error(
        "peer table of rank {table_rank} in a world of {table_world} was used by rank {rank} of \
         {world}; a table belongs to the rank (and context) that built it"
    )]
    ForeignTable {
        table_rank: usize,
        table_world: usize,
        rank: usize,
        world: usize,
    },
    #[error("context is finalized; create a new one to allocate again")]
    Finalized,
    #[error(transparent)]
    Translate(#[from] TranslateError),
    #[error("{provider}: {cause}")]
    PeerFailed {
        provider: ProviderKind,
        /// The provider's error. Part of this error's text, so not its `source()`: a printer
        /// of error chains (anyhow's `{:#}`) would show it twice.
        cause: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    #[error("{provider}: {cause}")]
    Provider {
        provider: ProviderKind,
        /// The provider's error. Part of this error's text, so not its `source()`: a printer
        /// of error chains (anyhow's `{:#}`) would show it twice.
        cause: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// What a provider's failure says about the job: the one thing [`Error::from_provider`] needs
/// to know to turn any provider's error into an [`Error`]. The policy behind each answer is
/// ARCHITECTURE.md's "Failure policy".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// This rank failed (or the failure is not known to be anyone else's):
    /// [`Error::Provider`].
    ThisRank,
    /// Another rank failed: it disconnected, never arrived at a collective, or stopped
    /// answering; this rank only witnessed it: [`Error::PeerFailed`].
    AnotherRank,
    /// A collective that failed on every rank alike, every rank knowing it; the ranks are
    /// still in step: [`Error::RefusedByAll`].
    EveryRank,
}

/// A provider's own error type, as the core sees it. Every provider converts its errors with
/// [`Error::from_provider`], so the same failure reads the same on every provider.
pub trait ProviderError: std::error::Error + Send + Sync + Sized + 'static {
    /// Whose failure this is (see [`Blame`]).
    fn blame(&self) -> Blame;
    /// The collective mismatch this error reports, taken out so that it stays typed as
    /// [`Error::CollectiveMismatch`]; `Err(self)` when it is something else.
    fn into_mismatch(self) -> Result<CollectiveMismatch, Self> {
        Err(self)
    }
}

impl Error {
    /// The one way from a provider's error to the core error: a collective mismatch stays
    /// typed, and the rest is wrapped according to its [`Blame`].
    pub fn from_provider(provider: ProviderKind, error: impl ProviderError) -> Self {
        let error = match error.into_mismatch() {
            Ok(mismatch) => return Self::CollectiveMismatch(mismatch),
            Err(error) => error,
        };
        match error.blame() {
            Blame::ThisRank => Self::provider(provider, error),
            Blame::AnotherRank => Self::peer_failed(provider, error),
            Blame::EveryRank => Self::refused_by_all(provider, error),
        }
    }

    /// Wraps a provider's own error.
    fn provider(
        provider: ProviderKind,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Provider {
            provider,
            cause: Box::new(source),
        }
    }

    /// Wraps a provider's error that means another rank failed (it disconnected, never
    /// arrived, or stopped answering): this rank is a witness, not the culprit.
    fn peer_failed(
        provider: ProviderKind,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::PeerFailed {
            provider,
            cause: Box::new(source),
        }
    }

    /// Wraps a provider's error for a collective that failed on every rank alike, every rank
    /// knowing it (see [`Error::RefusedByAll`]): the context stays usable after it.
    fn refused_by_all(
        provider: ProviderKind,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::RefusedByAll {
            provider,
            cause: Box::new(source),
        }
    }

    /// True when every rank saw this collective fail alike, so the ranks are still in step and
    /// later collectives may go ahead. Anything else a collective returns may leave ranks in
    /// disagreement (a peer lost, a mismatch, a timeout, a failure on one rank only), and the
    /// context refuses further collectives after it.
    pub fn leaves_ranks_in_step(&self) -> bool {
        matches!(self, Self::RefusedByAll { .. })
    }

    /// True when this rank stopped because another rank failed.
    pub fn is_peer_failure(&self) -> bool {
        matches!(self, Self::PeerFailed { .. })
    }

    /// The collective mismatch behind this error, if it is one.
    pub fn as_collective_mismatch(&self) -> Option<&CollectiveMismatch> {
        match self {
            Self::CollectiveMismatch(m) => Some(m),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// M11: a provider's error is printed once, also by a printer of error chains (each
    /// `source()` after the error's own text, as anyhow's `{:#}` does).
    #[test]
    fn a_provider_error_is_printed_once_in_its_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("not every rank reached collective #3 barrier")]
        struct Late;
        impl ProviderError for Late {
            fn blame(&self) -> Blame {
                Blame::AnotherRank
            }
        }
        let err = Error::from_provider(ProviderKind::Host, Late);
        let mut chain = err.to_string();
        let mut next = std::error::Error::source(&err);
        while let Some(cause) = next {
            chain.push_str(&format!(": {cause}"));
            next = cause.source();
        }
        assert_eq!(
            chain.matches("not every rank reached").count(),
            1,
            "{chain}"
        );
    }

    #[test]
    fn a_world_of_one_rank_is_singular() {
        let e = TranslateError::RankOutOfRange {
            rank: 1,
            world_size: 1,
        };
        assert_eq!(
            e.to_string(),
            "rank 1 is out of range for a world of 1 rank"
        );
        let e = TranslateError::RankOutOfRange {
            rank: 4,
            world_size: 4,
        };
        assert_eq!(
            e.to_string(),
            "rank 4 is out of range for a world of 4 ranks"
        );
    }
}
