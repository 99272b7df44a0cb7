//! Control plane for the ranks of one host: a Unix-socket rendezvous at rank 0, uid-checked
//! file-descriptor passing, and all-gather collectives that compare each rank's
//! [`CollectiveOp`](symmem::CollectiveOp) and time out naming the ranks that never arrived.
//!
//! Topology: a star around rank 0, and two protocols over it:
//! - the handshake (`rendezvous.rs`): rank 0 binds `<rendezvous>/rank0.sock`, every other rank
//!   connects, both sides check the other's uid (SO_PEERCRED), and rank 0 removes the socket
//!   file once every rank is in, so nothing stays on disk. The rendezvous folder must be
//!   private to the job's user, and is used through its descriptor once checked (`folder.rs`):
//!   another local user can neither steer where rank 0 binds nor make it remove anything;
//! - the collective exchange (`exchange.rs`): for each collective every rank sends its call to
//!   rank 0, which compares them and answers every rank with the gathered payloads or one
//!   failure.
//!
//! [`Bootstrap`] (`bootstrap.rs`) is one rank's end of both; `wire.rs` frames the messages.
//!
//! Across hosts the launcher's PMIx server carries the rendezvous only (`engine.rs`, through
//! the client of `pmix.rs`): one all-gather at start publishes every rank's place and rank 0's
//! TCP address and job secret (and those of the node leaders that lead others). Collectives
//! then run over the same wire protocol: each host's ranks over their own Unix star around the
//! host's lowest rank (its node leader), the leaders in a tree over TCP (`tree.rs`; each at the
//! address `address.rs` chooses), each connection proving it holds the secret and tagging
//! every frame (`tcp.rs`); rank 0, at the root, compares every call (`nodes.rs`).
//! [`Bootstrap::join`] picks the engine ([`symmem::choose_engine`]).
//!
//! A program that already runs an all-gather of its own (symmem's Python package over a
//! `torch.distributed` process group, whatever launcher started the ranks) replaces PMIx's:
//! each rank makes its [`Arrival`], the program gathers every rank's card, and
//! [`Bootstrap::meet`] opens the same links from the [`Meeting`] (the group engine).
//!
//! Either engine gathers, as it opens, which node every rank is on: the job's one
//! [`Topology`](symmem::Topology) ([`Bootstrap::topology`]), the engine's host of each rank with
//! the emulated node it joined with. Providers take "same node" and "one host" from it alone.

mod address;
mod bootstrap;
mod calls;
mod card;
mod engine;
mod error;
mod exchange;
mod folder;
mod identity;
mod launcher_watch;
mod nodes;
mod pmix;
mod rendezvous;
mod star;
mod tcp;
mod tree;
mod wire;

pub use bootstrap::Bootstrap;
pub use card::{Arrival, Meeting};
pub use error::{BootstrapError, CollectiveFailure};
pub use exchange::Gathered;
pub use identity::identify;
pub use rendezvous::default_rendezvous;
pub use tcp::{ControlFrames, control_frames};
