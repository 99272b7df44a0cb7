//! Host shared-memory provider: the embedded default of symmem, runs on any Linux machine.
//!
//! Each rank's symmetric heap is one anonymous memfd (sparse: untouched pages cost nothing).
//! Ranks of one host pass the descriptors to each other over the rendezvous socket
//! (SCM_RIGHTS, uid-checked), and every rank maps every peer heap of its (emulated) node, so
//! `ptr` is the same linear translation that rocSHMEM's IPC mapping gives. Nothing is named in
//! /dev/shm: heaps vanish with the last process that maps them, and no other user can open one.
//!
//! Settings (all optional, declared in [`symmem::settings`], listed in README):
//! `SYMMEM_HOST_HEAP_SIZE`, `SYMMEM_NODE_ID`, `SYMMEM_COLLECTIVE_TIMEOUT`, `SYMMEM_RENDEZVOUS`, `SYMMEM_BOOTSTRAP`,
//! and the launcher's rank variables (torchrun, Open MPI, Slurm, PMI).

mod allocator;
mod config;
mod error;
mod heap;
mod provider;

pub use allocator::{ALIGNMENT, SymmetricAllocator};
pub use config::HostConfig;
pub use error::HostError;
pub use provider::HostProvider;
