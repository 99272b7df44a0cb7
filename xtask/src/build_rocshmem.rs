//! `cargo xtask build-rocshmem`: [`symmem_build::rocshmem`] for this checkout.

pub use symmem_build::rocshmem::Args;

pub fn run(sh: &xshell::Shell, args: Args) -> anyhow::Result<()> {
    symmem_build::rocshmem::run(sh, &workspace(), args)
}

/// This checkout, for the build library's defaults (pins.toml, the shim's sources, target/).
pub fn workspace() -> symmem_build::Workspace {
    symmem_build::Workspace::checkout(crate::project::project_root(), crate::project::target_dir())
}
