//! GPU providers for symmem: NVSHMEM (NVIDIA) and rocSHMEM (AMD) behind the symmem shim.
//!
//! The shim is a shared library built by `cargo xtask build-shim --backend nvshmem|rocshmem`
//! and loaded at run time, so this crate builds and tests anywhere; where the library (or the
//! GPU, or the SHMEM library under it) is missing, [`GpuProvider::new`] returns
//! [`GpuError::Unavailable`] with the reason and the fix.
//!
//! Ranks meet through symmem's own rendezvous (the launcher's `SYMMEM_RENDEZVOUS`): rank 0
//! makes the SHMEM library's unique id and the control plane hands it to every rank, which
//! also compares every collective call across ranks before the library sees it.
//!
//! Layers: the generated bindings (`symmem-shim-sys`), then the `shim` module, which holds all
//! of this crate's FFI and makes every launch safe ([`Gpu`]), then the provider, which has no
//! `unsafe`. A process initialises its SHMEM library once; [`GpuProvider::sibling`] opens
//! further contexts over it (own control plane, tables and emulated nodes).
//!
//! Which provider is a [`symmem::ProviderKind`] (`nvshmem` or `rocshmem`). Settings (declared
//! in [`symmem::settings`], README's table says more): `SYMMEM_SHIM_LIB` (the shim library;
//! default: next to the executable), `SYMMEM_GPU_HEAP_SIZE` (symmetric heap per PE; default:
//! the library's), `SYMMEM_DEVICE` (GPU index; default `LOCAL_RANK % GPUs`), `SYMMEM_NODE_ID`
//! (emulated node; peers on another node are not reachable), `SYMMEM_COLLECTIVE_TIMEOUT`.
//! NVSHMEM's multicast (NVLS) is always disabled.

mod error;
mod lifecycle;
mod peers;
mod provider;
mod shim;

pub use error::GpuError;
pub use lifecycle::LifecycleError;
pub use provider::{GpuConfig, GpuProvider, Siblings, check_nodes};
pub use shim::{EnvironmentAccess, ExportedTable, Gpu, GpuId, ShimError, Status, Team};
