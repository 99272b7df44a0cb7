//! Core of symmem: symmetric allocations and the peer-bases tables that let one kernel
//! address every peer's copy of an allocation.
//!
//! A peer-bases table holds, per rank `p`, this process's address of rank `p`'s copy of one
//! symmetric allocation (`table[rank]` is the allocation's own address). Any pointer into any
//! symmetric allocation then translates with `table[to] + (ptr - table[from])`, because SHMEM
//! libraries map each peer's whole heap linearly.
//!
//! This crate holds no FFI and no vendor code: providers (host shared memory, NVSHMEM,
//! rocSHMEM) implement [`SymmetricProvider`] and the [`Context`] builds everything else.

mod collective;
mod context;
mod error;
mod provider;
mod rank_env;
mod ranks;
mod table;
mod units;

pub use collective::{CollectiveKind, CollectiveMismatch, CollectiveOp};
pub use context::{AllocationRecord, Context, ContextId, FinalizeReport, Plain, SymmetricBuffer};
pub use error::{Error, TranslateError};
pub use provider::{SymmetricProvider, TranslatedOps};
pub use rank_env::{Found, Launcher, RANK_FROM_ENV, RankEnvError, RankIdentity};
pub use ranks::{count_ranks, describe_ranks, rank_list};
pub use table::{AddressMap, PeerTable};
pub use units::{MAX_DURATION, parse_bytes, parse_duration, parse_timeout};

/// Environment variable naming the folder where the ranks of one job meet (set by launchers,
/// read by providers).
pub const RENDEZVOUS_ENV: &str = "SYMMEM_RENDEZVOUS";

/// Exit status of a rank program that stops because ANOTHER rank failed (it disconnected, never
/// arrived at a collective, or stopped answering). Launchers use it to tell witnesses from the
/// culprit.
pub const EXIT_PEER_FAILED: i32 = 75;
