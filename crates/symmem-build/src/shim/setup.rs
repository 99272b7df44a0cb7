//! A build's [`Setup`]: its inputs checked and its CMake definitions decided, per backend,
//! before any tool runs.

use super::args::Args;
use super::key::Library;
use super::nvshmem::nvshmem_setup;
use super::rocshmem::rocshmem_setup;
use crate::Workspace;
use crate::cmake;
use anyhow::bail;
use std::path::PathBuf;
use symmem::ProviderKind;
use xshell::Shell;

/// Why `--backend host` is refused.
pub(super) const HOST_HAS_NO_SHIM: &str =
    "the host provider has no shim: build-shim takes a GPU provider";

/// What one shim build needs, decided before CMake runs.
pub(super) struct Setup {
    pub(super) backend: ProviderKind,
    pub(super) source: PathBuf,
    pub(super) out: PathBuf,
    pub(super) defines: Vec<(String, String)>,
    pub(super) library: Library,
    /// `$ROCM_PATH` when it is exported (a likely cause of a failure on Debian).
    pub(super) rocm_path_exported: Option<std::ffi::OsString>,
}

/// Checks the inputs and decides the defines; no tool runs yet.
pub(super) fn setup(
    sh: &Shell,
    ws: &Workspace,
    args: &Args,
    out: PathBuf,
) -> anyhow::Result<Setup> {
    let backend = args.backend;
    let source = ws.shim_source.clone();
    let mut defines: Vec<(String, String)> = vec![
        ("CMAKE_BUILD_TYPE".into(), "Release".into()),
        (cmake::SHIM_BACKEND_DEFINE.into(), backend.name().into()),
    ];
    if let Some(arch) = &args.arch {
        defines.push((cmake::SHIM_ARCHS_DEFINE.into(), arch.cmake_list()));
    }
    let mut rocm_path_exported = None;
    let library = match backend {
        ProviderKind::Host => bail!("{HOST_HAS_NO_SHIM}"),
        ProviderKind::Nvshmem => nvshmem_setup(args, &mut defines)?,
        ProviderKind::Rocshmem => {
            let library = rocshmem_setup(sh, args, &mut defines)?;
            rocm_path_exported = std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty());
            library
        }
    };
    Ok(Setup {
        backend,
        source,
        out,
        defines,
        library,
        rocm_path_exported,
    })
}
