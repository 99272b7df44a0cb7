//! Core of symmem: symmetric allocations and the peer-bases tables that let one kernel
//! address every peer's copy of an allocation.
//!
//! A peer-bases table holds, per rank `p`, this process's address of rank `p`'s copy of one
//! symmetric allocation (`table[rank]` is the allocation's own address). Any pointer into any
//! symmetric allocation then translates with `table[to] + (ptr - table[from])`, because SHMEM
//! libraries map each peer's whole heap linearly.
//!
//! This crate holds no FFI and no vendor code: providers (host shared memory, NVSHMEM,
//! rocSHMEM, named by [`ProviderKind`]) implement [`SymmetricProvider`] and the [`Context`]
//! builds everything else. Their errors become [`Error`] through [`Error::from_provider`].
//! Every `SYMMEM_*` environment variable is declared in [`settings`]. What happens when a rank
//! fails is the failure policy in the repository's ARCHITECTURE.md.

mod bootstrap_choice;
mod collective;
mod context;
mod engine;
mod error;
pub mod exit_codes;
mod interfaces;
mod launcher;
mod provider;
mod provider_kind;
mod rank_env;
mod ranks;
pub mod settings;
mod table;
mod topology;
mod units;
mod witness;

pub use collective::{CollectiveKind, CollectiveMismatch, CollectiveOp};
pub use context::{AllocationRecord, Context, FinalizeReport, Plain, SymmetricBuffer};
pub use engine::{BootstrapChoice, Engine, EngineError, choose_engine, spans_nodes};
pub use error::{Blame, Error, ProviderError, TranslateError};
pub use interfaces::InterfaceFilter;
pub use launcher::{Launcher, in_apptainer, pmix_present};
pub use provider::{SymmetricProvider, TranslatedOps};
pub use provider_kind::{ProviderKind, UnknownProvider};
pub use rank_env::{
    Found, NodeCount, RankEnvError, RankIdentity, job_evidence, rank_starter_ancestor,
};
pub use ranks::{count_ranks, describe_ranks, rank_list};
pub use settings::InvalidSetting;
pub use table::{AddressMap, ContextId, PeerTable};
pub use topology::Topology;
pub use units::{
    MAX_DURATION, format_bytes, format_duration, format_elapsed, parse_bytes, parse_duration,
    parse_timeout,
};
pub use witness::{WITNESS_PREFIX, Witness};

/// File name of the socket rank 0 binds in the rendezvous folder
/// ([`settings::RENDEZVOUS`]); the other ranks connect to it, and launchers check that its
/// path fits in a Unix socket address.
pub const RENDEZVOUS_SOCKET: &str = "rank0.sock";

/// Exit status of a rank program that stops because ANOTHER rank failed (it disconnected, never
/// arrived at a collective, or stopped answering). Launchers use it to tell witnesses from the
/// culprit.
pub const EXIT_PEER_FAILED: i32 = 75;
