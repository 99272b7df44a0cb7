//! Host shared-memory provider: the embedded default of symmem, runs on any Linux machine.
//!
//! Each rank's symmetric heap is one anonymous memfd (sparse: untouched pages cost nothing).
//! Ranks of one host pass the descriptors to each other over the rendezvous socket
//! (SCM_RIGHTS, uid-checked), and every rank maps every peer heap of its (emulated) node, so
//! `ptr` is the same linear translation that rocSHMEM's IPC mapping gives. Nothing is named in
//! /dev/shm: heaps vanish with the last process that maps them, and no other user can open one.
//!
//! Environment (all optional): `SYMMEM_HOST_HEAP_SIZE` (default 1G), `SYMMEM_NODE_ID`
//! (emulated node of this rank, default 0), `SYMMEM_COLLECTIVE_TIMEOUT` (default 60s),
//! `SYMMEM_RENDEZVOUS`, and the launcher's rank variables (torchrun, Open MPI, Slurm, PMI).

mod allocator;
mod config;
mod error;
mod heap;
mod provider;

pub use allocator::{ALIGNMENT, SymmetricAllocator};
pub use config::{
    COLLECTIVE_TIMEOUT_ENV, DEFAULT_HEAP_BYTES, DEFAULT_TIMEOUT, HEAP_SIZE_ENV, HostConfig,
    NODE_ID_ENV,
};
pub use error::HostError;
pub use provider::HostProvider;
