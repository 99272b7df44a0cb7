//! Builds symmem's native parts with the project's pins: rocSHMEM from its pinned commit (a
//! printable plan, ROCm discovery, one CMake driver, install, verification and a stamp, under
//! a content-addressed prefix) and the GPU shim against it or NVSHMEM. `cargo xtask
//! build-rocshmem` and `cargo xtask build-shim` are these commands.
//!
//! Floors, from the ground: [`runner`] (the one place that runs programs through
//! `std::process`), [`tools`] (finding git, CMake, Ninja, nvcc), [`targets`] (GPU targets),
//! [`lock`] (one run at a time in an out folder); [`rocm`] (finding ROCm), [`pins`], [`cmake`]
//! (the CMake driver); then the commands [`rocshmem`] and [`shim`].

pub mod cmake;
pub mod lock;
pub mod pins;
pub mod rocm;
pub mod rocshmem;
pub mod runner;
pub mod shim;
pub mod targets;
pub mod tools;

use std::path::PathBuf;

/// Where the project is: the defaults for pins.toml, the shim's sources and the out folders.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// The repository's root (pins.toml).
    pub root: PathBuf,
    /// Cargo's target folder (target/rocshmem, target/shim/<backend>).
    pub target: PathBuf,
    /// The shim's CMake project (symmem-shim-sys's shim/ folder).
    pub shim_source: PathBuf,
}

impl Workspace {
    /// The checkout at `root`, with Cargo's target folder `target`.
    pub fn checkout(root: PathBuf, target: PathBuf) -> Self {
        let shim_source = root.join("crates/symmem-shim-sys/shim");
        Self {
            root,
            target,
            shim_source,
        }
    }
}
