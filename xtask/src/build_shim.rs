//! `cargo xtask build-shim`: [`symmem_build::shim`] for this checkout.

pub use symmem_build::shim::Args;

pub fn run(sh: &xshell::Shell, args: Args) -> anyhow::Result<()> {
    symmem_build::shim::run(sh, &crate::build_rocshmem::workspace(), args)
}
